/* tree_eval.h: the body of tree.c's eval_targets at one vector width, included by tree.c
 * once per width with VP_EVAL_NAME (the function), VP_EVAL_W (floats a vector), VP_EVAL_VT
 * (the vector type of VP_EVAL_W floats) and VP_EVAL_ATTR (its target attributes) defined.
 * What it computes is described at eval_targets in tree.c. */
/* lane-wise square root (GCC vectorises the loop to one instruction) */
#define VP_EVAL_SQRT(dst, a) for (int l_ = 0; l_ < VP_EVAL_W; l_++) (dst)[l_] = sqrtf((a)[l_])

VP_EVAL_ATTR
static void VP_EVAL_NAME(const ilist *L, int nt, const float *restrict TX, const float *restrict TY,
                         const float *restrict TZ, float *restrict out)
{
    const size_t cn = L->cap_near, cf = L->cap_far, nn = L->n_near, nf = L->n_far;
    const float *N = L->near, *F = L->far;
    for (int t0 = 0; t0 < nt; t0 += VP_EVAL_W) {
        VP_EVAL_VT x, y, z;
        memcpy(&x, TX + t0, sizeof x); memcpy(&y, TY + t0, sizeof y); memcpy(&z, TZ + t0, sizeof z);
        VP_EVAL_VT ux = {0}, uy = {0}, uz = {0};
        for (size_t j = 0; j < nn; j++) {
            const float X = N[j], Y = N[cn + j], Z = N[2 * cn + j], AX = N[3 * cn + j], AY = N[4 * cn + j],
                        AZ = N[5 * cn + j], S2 = N[6 * cn + j];
            const VP_EVAL_VT rx = x - X, ry = y - Y, rz = z - Z;
            const VP_EVAL_VT r2 = rx * rx + ry * ry + rz * rz;
            const VP_EVAL_VT iq = 1.0f / (r2 + S2);
            VP_EVAL_VT sq;
            VP_EVAL_SQRT(sq, iq);
            const VP_EVAL_VT g = (r2 + 2.5f * S2) * iq * iq * sq; /* kernel.h's g in float */
            ux += g * (AY * rz - AZ * ry);
            uy += g * (AZ * rx - AX * rz);
            uz += g * (AX * ry - AY * rx);
        }
        memcpy(out + t0, &ux, sizeof ux); memcpy(out + nt + t0, &uy, sizeof uy); memcpy(out + 2 * nt + t0, &uz, sizeof uz);
        ux = uy = uz = (VP_EVAL_VT){0};
        for (size_t j = 0; j < nf; j++) {
            const float CX = F[j], CY = F[cf + j], CZ = F[2 * cf + j], A0 = F[3 * cf + j], A1 = F[4 * cf + j],
                        A2 = F[5 * cf + j], D0 = F[6 * cf + j], D1 = F[7 * cf + j], D2 = F[8 * cf + j],
                        D3 = F[9 * cf + j], D4 = F[10 * cf + j], D5 = F[11 * cf + j], D6 = F[12 * cf + j],
                        D7 = F[13 * cf + j], D8 = F[14 * cf + j];
            const float cx = D5 - D7, cy = D6 - D2, cz = D1 - D3;
            const VP_EVAL_VT rx = x - CX, ry = y - CY, rz = z - CZ;
            const VP_EVAL_VT r2 = rx * rx + ry * ry + rz * rz;
            VP_EVAL_VT r1;
            VP_EVAL_SQRT(r1, r2);
            const VP_EVAL_VT ir = 1.0f / r1, ir3 = ir * ir * ir, ir5 = 3.0f * ir3 / r2;
            const VP_EVAL_VT dx = D0 * rx + D1 * ry + D2 * rz;
            const VP_EVAL_VT dy = D3 * rx + D4 * ry + D5 * rz;
            const VP_EVAL_VT dz = D6 * rx + D7 * ry + D8 * rz;
            ux += (A1 * rz - A2 * ry - cx) * ir3 + (dy * rz - dz * ry) * ir5;
            uy += (A2 * rx - A0 * rz - cy) * ir3 + (dz * rx - dx * rz) * ir5;
            uz += (A0 * ry - A1 * rx - cz) * ir3 + (dx * ry - dy * rx) * ir5;
        }
        memcpy(out + 3 * nt + t0, &ux, sizeof ux); memcpy(out + 4 * nt + t0, &uy, sizeof uy);
        memcpy(out + 5 * nt + t0, &uz, sizeof uz);
    }
}

#undef VP_EVAL_SQRT
#undef VP_EVAL_NAME
#undef VP_EVAL_W
#undef VP_EVAL_VT
#undef VP_EVAL_ATTR
