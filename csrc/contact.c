/* contact.c: fluid-body interaction (method step 7, part 4): no-slip and no-through boundary
 * conditions by assigning vorticity, exact momentum hand-over to the body, tracer collisions,
 * and heat conduction between bodies and the fluid that touches them (part 10). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kernel.h"
#include "tracer_contact.h"

/* Contact geometry of one vorton (part 4, method step 7): contact point P = c + R n, body
 * surface velocity there, and the placement one core radius from P along -b,
 * b = normalize((n x u_rel) x u_rel) (perpendicular to u_rel, outside the body), where
 * u_rel = ambient velocity at P (grid velocity minus the contacting vortons' own
 * contributions) - body surface velocity. */
typedef struct {
    size_t i;        /* vorton index */
    double P[3];     /* contact point */
    double target[3];/* velocity the contact vortons must induce at P: -u_rel */
    double xnew[3];  /* new vorton position */
    double s2;       /* core radius^2 */
} contact;

static void place_contact(const vp_body *B, const double x[3], double sr, const double ug[3], contact *c)
{
    double r[3] = {x[0] - B->position[0], x[1] - B->position[1], x[2] - B->position[2]};
    double dist = sqrt(vp_dot3(r, r)), n[3];
    if (dist > 0) { n[0] = r[0] / dist; n[1] = r[1] / dist; n[2] = r[2] / dist; }
    else { n[0] = 1; n[1] = 0; n[2] = 0; }
    double arm[3], vb[3];
    for (int a = 0; a < 3; a++) { arm[a] = B->radius * n[a]; c->P[a] = B->position[a] + arm[a]; }
    vp_cross3(B->angular_velocity, arm, vb);
    for (int a = 0; a < 3; a++) vb[a] += B->velocity[a];
    double u[3] = {ug[0] - vb[0], ug[1] - vb[1], ug[2] - vb[2]};
    double uu = vp_dot3(u, u), nxu[3], b[3];
    vp_cross3(n, u, nxu);
    vp_cross3(nxu, u, b);
    double bb = sqrt(vp_dot3(b, b));
    if (uu == 0.0 || bb <= 1e-12 * uu) {
        /* flow along the normal (or none): any tangent is perpendicular to u */
        double t[3] = {0, 0, 0};
        t[fabs(n[0]) < 0.9 ? 0 : 1] = 1.0;
        double tn = vp_dot3(t, n);
        for (int a = 0; a < 3; a++) t[a] -= tn * n[a];
        double tl = sqrt(vp_dot3(t, t));
        for (int a = 0; a < 3; a++) b[a] = t[a] / tl;
    } else {
        for (int a = 0; a < 3; a++) b[a] /= bb;
        if (vp_dot3(b, n) > 0) for (int a = 0; a < 3; a++) b[a] = -b[a];
    }
    for (int a = 0; a < 3; a++) { c->xnew[a] = c->P[a] - sr * b[a]; c->target[a] = -u[a]; }
    c->s2 = sr * sr;
}

/* Column panel p..p+3 of the Gram matrix A = G^T G, from the columns g_q = G + q ld of the
 * contact solve (ld: a multiple of 4, padded with zeros): out[4 (q - p) + c] = g_q . g_{p+c}
 * for every row q >= p (the panel's own 4 x 4 block included, its entries above the diagonal
 * written and never read), each row's four contiguous, so that the factor reads the panel
 * as one stream.  Three rows q at a time against the panel's four columns in 4-double
 * vectors: twelve independent sums, each column load shared by three rows and each row load
 * by four columns (one row at a time, each sum was a chain of dependent multiply-adds).
 * Every entry is one four-lane sum in the order of the rows of G, whichever loop or thread
 * computes it.  p + 4 <= nc. */
typedef double vp_gram_v4d __attribute__((vector_size(32)));
#define VP_GRAM_HSUM(v) (((v)[0] + (v)[2]) + ((v)[1] + (v)[3]))
VP_CLONES
static void gram_panel4(size_t p, size_t ld, const double *restrict G, double *restrict out, size_t nc)
{
    const vp_gram_v4d *r0 = (const vp_gram_v4d *)(G + p * ld), *r1 = (const vp_gram_v4d *)(G + (p + 1) * ld),
                      *r2 = (const vp_gram_v4d *)(G + (p + 2) * ld), *r3 = (const vp_gram_v4d *)(G + (p + 3) * ld);
    const size_t nv = ld / 4;
    size_t q = p;
    for (; q + 3 <= nc; q += 3) {
        const vp_gram_v4d *g0 = (const vp_gram_v4d *)(G + q * ld), *g1 = (const vp_gram_v4d *)(G + (q + 1) * ld),
                          *g2 = (const vp_gram_v4d *)(G + (q + 2) * ld);
        vp_gram_v4d a0 = {0}, a1 = {0}, a2 = {0}, b0 = {0}, b1 = {0}, b2 = {0};
        vp_gram_v4d c0 = {0}, c1 = {0}, c2 = {0}, d0 = {0}, d1 = {0}, d2 = {0};
        for (size_t i = 0; i < nv; i++) {
            const vp_gram_v4d x0 = g0[i], x1 = g1[i], x2 = g2[i], y0 = r0[i], y1 = r1[i], y2 = r2[i], y3 = r3[i];
            a0 += y0 * x0; a1 += y0 * x1; a2 += y0 * x2;
            b0 += y1 * x0; b1 += y1 * x1; b2 += y1 * x2;
            c0 += y2 * x0; c1 += y2 * x1; c2 += y2 * x2;
            d0 += y3 * x0; d1 += y3 * x1; d2 += y3 * x2;
        }
        double *Q0 = out + 4 * (q - p), *Q1 = Q0 + 4, *Q2 = Q1 + 4;
        Q0[0] = VP_GRAM_HSUM(a0); Q1[0] = VP_GRAM_HSUM(a1); Q2[0] = VP_GRAM_HSUM(a2);
        Q0[1] = VP_GRAM_HSUM(b0); Q1[1] = VP_GRAM_HSUM(b1); Q2[1] = VP_GRAM_HSUM(b2);
        Q0[2] = VP_GRAM_HSUM(c0); Q1[2] = VP_GRAM_HSUM(c1); Q2[2] = VP_GRAM_HSUM(c2);
        Q0[3] = VP_GRAM_HSUM(d0); Q1[3] = VP_GRAM_HSUM(d1); Q2[3] = VP_GRAM_HSUM(d2);
    }
    for (; q < nc; q++) {
        const vp_gram_v4d *gq = (const vp_gram_v4d *)(G + q * ld);
        vp_gram_v4d a = {0}, b = {0}, c = {0}, d = {0};
        for (size_t i = 0; i < nv; i++) { a += r0[i] * gq[i]; b += r1[i] * gq[i]; c += r2[i] * gq[i]; d += r3[i] * gq[i]; }
        double *Q = out + 4 * (q - p);
        Q[0] = VP_GRAM_HSUM(a); Q[1] = VP_GRAM_HSUM(b); Q[2] = VP_GRAM_HSUM(c); Q[3] = VP_GRAM_HSUM(d);
    }
}

/* The last, partial column panel p..nc-1 (fewer than four columns), lower entries only, laid
 * out as gram_panel4's. */
VP_CLONES
static void gram_panel_tail(size_t p, size_t ld, const double *restrict G, double *restrict out, size_t nc)
{
    const size_t nv = ld / 4;
    for (size_t c = p; c < nc; c++) {
        const vp_gram_v4d *r = (const vp_gram_v4d *)(G + c * ld);
        for (size_t q = c; q < nc; q++) {
            const vp_gram_v4d *gq = (const vp_gram_v4d *)(G + q * ld);
            vp_gram_v4d a = {0};
            for (size_t i = 0; i < nv; i++) a += r[i] * gq[i];
            out[4 * (q - p) + (c - p)] = VP_GRAM_HSUM(a);
        }
    }
}

/* The velocity at a contact point p (relative to the body's centre) induced by m vortons in
 * float32 SoA (x y z relative to the centre, a, s^2): kernel.h's regularised kernel, summed in
 * float32 on 16 lanes and added to u (double): the sqrt and division dominate, and float32
 * doubles the lanes.  Coordinates relative to the body keep the differences to ~1e-7 of the body's size; each
 * lane's partial sum carries ~1e-6 relative error, far below the kernel's own smoothing and
 * the ridge of the shares' solve (1e-3 of the trace). */
VP_CLONES
static void ambient_sum(size_t m, const float *restrict F, float px, float py, float pz, double u[3])
{
    const float *X = F, *Y = F + m, *Z = F + 2 * m, *AX = F + 3 * m, *AY = F + 4 * m, *AZ = F + 5 * m, *S2 = F + 6 * m;
    float u0 = 0, u1 = 0, u2 = 0;
#pragma omp simd reduction(+ : u0, u1, u2)
    for (size_t j = 0; j < m; j++) {
        const float r0 = px - X[j], r1 = py - Y[j], r2 = pz - Z[j];
        const float rr = r0 * r0 + r1 * r1 + r2 * r2, q = rr + S2[j];
        const float g = (rr + 2.5f * S2[j]) / (q * q * sqrtf(q));
        u0 += g * (AY[j] * r2 - AZ[j] * r1);
        u1 += g * (AZ[j] * r0 - AX[j] * r2);
        u2 += g * (AX[j] * r1 - AY[j] * r0);
    }
    u[0] += VP_INV4PI * (double)u0; u[1] += VP_INV4PI * (double)u1; u[2] += VP_INV4PI * (double)u2;
}

/* Column j of the contact solve's matrix: the velocity g_i at each contact point P_i (SoA
 * PX PY PZ, stride m) induced by strength a at xj with core radius^2 s2 (kernel.h's
 * vp_kernel_add), written as g[3 i .. 3 i + 2].  A loop over the points that the compiler
 * vectorises (AVX-512, AVX2 or the baseline: VP_CLONES); one point at a time, its square root
 * and division were most of building the matrix. */
VP_CLONES
static void contact_column(size_t m, const double *restrict PS, const double xj[3], const double a[3], double s2,
                           double *restrict g)
{
    const double *PX = PS, *PY = PS + m, *PZ = PS + 2 * m;
    const double x0 = xj[0], x1 = xj[1], x2 = xj[2], a0 = a[0], a1 = a[1], a2 = a[2];
    for (size_t i = 0; i < m; i++) {
        const double r0 = PX[i] - x0, r1 = PY[i] - x1, r2 = PZ[i] - x2;
        const double f = VP_INV4PI * vp_kernel_g(r0 * r0 + r1 * r1 + r2 * r2, s2);
        g[3 * i] = f * (a1 * r2 - a2 * r1);
        g[3 * i + 1] = f * (a2 * r0 - a0 * r2);
        g[3 * i + 2] = f * (a0 * r1 - a1 * r0);
    }
}

/* "Assign by velocity" for all vortons in contact at once.  Alone, vorton i would get the
 * strength a_i* whose induced velocity at its contact point P_i is exactly -u_rel_i (the exact
 * inverse of the kernel, kernel.h).  But each vorton's field also reaches its neighbours'
 * contact points, so assigning every one alone cancels the slip many times over: the fluid
 * impulse (hence the drag) would grow with the number of vortons touching the body.  So each
 * keeps its exact direction and takes a share k_i in [0, 1] of it, the shares chosen so that
 * the summed velocity sum_j k_j u_j(P_i) matches -u_rel_i at every contact point in the least
 * squares sense (normal equations with a light ridge, Cholesky), in chunks of at most
 * VP_CONTACT_CHUNK contacts.  With one contact, k = 1: the single-vorton inverse exactly. */
#define VP_CONTACT_CHUNK 512
#define VP_CONTACT_BLOCK 256 /* vortons per block of vp_collide's contact scans */

/* Work space of solve_contacts for chunks of up to n contacts, one allocation, each array
 * 32-byte aligned for the vectors: G (its columns have a stride of 3 nc rounded up to 4, and so
 * has T, the targets of every contact point in a row, padded with zeros); Gp, the Gram matrix's
 * column panels, each one's rows of four contiguous (gram_panel4); A, the Cholesky factor;
 * dg, the Gram matrix's diagonal; PT, cholesky_panel's work space. */
typedef struct { double *G, *Gp, *A, *k, *astar, *PS, *T, *dg, *PT; } contact_ws;
static double *contact_ws_alloc(size_t n, contact_ws *ws)
{
    const size_t len[9] = {n * (3 * n + 4), n * (n + 4), n * n, 3 * n + 4, n, 4 * n, 3 * n, 3 * n, n};
    size_t off[9], total = 0;
    for (int a = 0; a < 9; a++) { off[a] = total; total += (len[a] + 3) & ~(size_t)3; }
    double *m = aligned_alloc(32, total * sizeof(double));
    if (m) {
        ws->G = m + off[0]; ws->Gp = m + off[1]; ws->A = m + off[2]; ws->T = m + off[3]; ws->k = m + off[4];
        ws->PT = m + off[5]; ws->astar = m + off[6]; ws->PS = m + off[7]; ws->dg = m + off[8];
    }
    return m;
}

/* Where column panel p (columns 4p .. 4p + 3) of an nc x nc Gram matrix starts in Gp: the
 * panels before it hold 4 (nc - 4p') doubles each. */
static inline size_t gram_panel_offset(size_t nc, size_t p) { return 4 * p * (nc - 2 * p + 2); }

/* Two dot products of a column g of ld doubles (ld a multiple of 4, 32-byte aligned): *gt = g . t
 * and *gg = g . g, in four lanes summed as gram_panel4 sums (so *gg is the Gram matrix's
 * diagonal entry bit for bit); one pass, two independent chains. */
VP_CLONES
static void column_dots(size_t ld, const double *restrict g, const double *restrict t, double *gt, double *gg)
{
    const vp_gram_v4d *x = (const vp_gram_v4d *)g, *y = (const vp_gram_v4d *)t;
    vp_gram_v4d a = {0}, b = {0};
    for (size_t i = 0; i < ld / 4; i++) { a += x[i] * y[i]; b += x[i] * x[i]; }
    *gt = VP_GRAM_HSUM(a); *gg = VP_GRAM_HSUM(b);
}

/* A row's four entries in a Cholesky panel (cholesky_panel), after the earlier panels'
 * updates: each column updated by the panel's earlier ones (the rows L1..L3 of the diagonal
 * block) and scaled by its inverse pivot, in column order; written to out[0..3]. */
static inline __attribute__((always_inline)) void panel_row_solve(const vp_gram_v4d *acc, const double inv[4], const double *L1,
                                                                  const double *L2, const double *L3, double *out)
{
    double a0 = (*acc)[0], a1 = (*acc)[1], a2 = (*acc)[2], a3 = (*acc)[3];
    a0 *= inv[0];
    a1 -= a0 * L1[0];
    a1 *= inv[1];
    a2 -= a0 * L2[0];
    a2 -= a1 * L2[1];
    a2 *= inv[2];
    a3 -= a0 * L3[0];
    a3 -= a1 * L3[1];
    a3 -= a2 * L3[2];
    a3 *= inv[3];
    out[0] = a0; out[1] = a1; out[2] = a2; out[3] = a3;
}

/* The earlier panels' updates of one row's four entries in columns j0..j0+3 (cholesky_panel):
 * acc -= sum_c L[i][k0 + c] P_c for k0 = 0, 4, ..., j0 - 4 in that order, P: the transposed
 * 4 x 4 blocks.  Two rows at a time share the loads of P and run two independent chains. */
static inline __attribute__((always_inline)) void panel_update2(const double *Ai, const double *Bi, size_t j0,
                                                                const vp_gram_v4d *P, vp_gram_v4d *acc, vp_gram_v4d *bcc)
{
    for (size_t k0 = 0; k0 < j0; k0 += 4) {
        const double l0 = Ai[k0], l1 = Ai[k0 + 1], l2 = Ai[k0 + 2], l3 = Ai[k0 + 3];
        const double m0 = Bi[k0], m1 = Bi[k0 + 1], m2 = Bi[k0 + 2], m3 = Bi[k0 + 3];
        const vp_gram_v4d p0 = P[k0], p1 = P[k0 + 1], p2 = P[k0 + 2], p3 = P[k0 + 3];
        *acc -= l0 * p0 + l1 * p1 + l2 * p2 + l3 * p3;
        *bcc -= m0 * p0 + m1 * p1 + m2 * p2 + m3 * p3;
    }
}
static inline __attribute__((always_inline)) void panel_update1(const double *Ai, size_t j0, const vp_gram_v4d *P,
                                                                vp_gram_v4d *acc)
{
    for (size_t k0 = 0; k0 < j0; k0 += 4) {
        const double l0 = Ai[k0], l1 = Ai[k0 + 1], l2 = Ai[k0 + 2], l3 = Ai[k0 + 3];
        *acc -= l0 * P[k0] + l1 * P[k0 + 1] + l2 * P[k0 + 2] + l3 * P[k0 + 3];
    }
}

/* One panel of the left-looking Cholesky factor of the row-major nc x nc matrix A (lower
 * triangle, L overwriting it): columns j0..je-1 of L (je = min(j0 + 4, nc)), rows >= j0.  The
 * Gram matrix's column panel has its diagonal ridged by lambda, then takes the earlier panels'
 * rank-4 updates A[i][q] -= sum_c L[i][k0 + c] L[q][k0 + c] for k0 = 0, 4, ..., j0 - 4 in that
 * order (q in the panel, up to i), and is factored column by column, each column updated by
 * the panel's earlier ones and scaled by its pivot, pivots floored at lambda.  It reads only
 * the earlier panels of L and this panel of the Gram matrix.  A full panel's rows take
 * their updates four columns at a time, from the 4 x 4 blocks L[j0..j0+3][k0..k0+3] transposed
 * into PT (4 j0 doubles, 32-byte aligned); in its own four rows that updates the entries above
 * the diagonal too, which are never read.  The rows below then take the panel's columns in one
 * pass each (the same operations on each entry as a column-by-column sweep, which crossed
 * every row four times). */
VP_CLONES
static void cholesky_panel(size_t nc, double *restrict A, const double *restrict Gp, size_t j0, double lambda,
                           double *restrict PT)
{
    const size_t jb = nc - j0 < 4 ? nc - j0 : 4, je = j0 + jb;
    const vp_gram_v4d *P = (const vp_gram_v4d *)PT;
    if (jb < 4) { /* the partial last panel, entry by entry */
        for (size_t i = j0; i < je; i++) {
            double *restrict Ai = A + i * nc;
            for (size_t q = j0; q <= i; q++) {
                const double *restrict Aq = A + q * nc;
                Ai[q] = Gp[4 * (i - j0) + (q - j0)];
                if (q == i) Ai[q] += lambda;
                for (size_t k0 = 0; k0 < j0; k0 += 4)
                    Ai[q] -= Ai[k0] * Aq[k0] + Ai[k0 + 1] * Aq[k0 + 1] + Ai[k0 + 2] * Aq[k0 + 2] + Ai[k0 + 3] * Aq[k0 + 3];
            }
        }
    } else {
        for (size_t k0 = 0; k0 < j0; k0 += 4)
            for (size_t c = 0; c < 4; c++)
                for (size_t q = 0; q < 4; q++) PT[4 * k0 + 4 * c + q] = A[(j0 + q) * nc + k0 + c];
        for (size_t i = j0; i < je; i += 2) {
            double *restrict Ai = A + i * nc, *restrict Bi = Ai + nc;
            vp_gram_v4d acc, bcc;
            memcpy(&acc, Gp + 4 * (i - j0), sizeof acc);
            memcpy(&bcc, Gp + 4 * (i + 1 - j0), sizeof bcc);
            acc[i - j0] += lambda; /* the ridge on the diagonal, before the updates */
            bcc[i + 1 - j0] += lambda;
            panel_update2(Ai, Bi, j0, P, &acc, &bcc);
            memcpy(Ai + j0, &acc, sizeof acc);
            memcpy(Bi + j0, &bcc, sizeof bcc);
        }
    }
    /* the diagonal block factored */
    double inv[4];
    for (size_t j = j0; j < je; j++) {
        for (size_t i = j; i < je; i++) {
            double *Ai = A + i * nc;
            for (size_t c = j0; c < j; c++) Ai[j] -= Ai[c] * A[j * nc + c];
        }
        double d = A[j * nc + j];
        d = sqrt(d > lambda ? d : lambda);
        A[j * nc + j] = d;
        inv[j - j0] = 1.0 / d;
        for (size_t i = j + 1; i < je; i++) A[i * nc + j] *= inv[j - j0];
    }
    if (je == nc) return;
    /* the rows below (a full panel), one pass each */
    const double *L1 = A + (j0 + 1) * nc + j0, *L2 = A + (j0 + 2) * nc + j0, *L3 = A + (j0 + 3) * nc + j0;
    size_t i = je;
    for (; i + 2 <= nc; i += 2) {
        double *restrict Ai = A + i * nc, *restrict Bi = Ai + nc;
        vp_gram_v4d acc, bcc;
        memcpy(&acc, Gp + 4 * (i - j0), sizeof acc);
        memcpy(&bcc, Gp + 4 * (i + 1 - j0), sizeof bcc);
        panel_update2(Ai, Bi, j0, P, &acc, &bcc);
        panel_row_solve(&acc, inv, L1, L2, L3, Ai + j0);
        panel_row_solve(&bcc, inv, L1, L2, L3, Bi + j0);
    }
    if (i < nc) {
        double *restrict Ai = A + i * nc;
        vp_gram_v4d acc;
        memcpy(&acc, Gp + 4 * (i - j0), sizeof acc);
        panel_update1(Ai, j0, P, &acc);
        panel_row_solve(&acc, inv, L1, L2, L3, Ai + j0);
    }
}

/* Gram panel t of a chunk of nc contacts (columns 4t .. 4t + 3) into its place in Gp. */
static void gram_panel_build(long t, size_t ld, const double *G, double *Gp, size_t nc)
{
    const size_t p = 4 * (size_t)t;
    if (p + 4 <= nc) gram_panel4(p, ld, G, Gp + gram_panel_offset(nc, (size_t)t), nc);
    else gram_panel_tail(p, ld, G, Gp + gram_panel_offset(nc, (size_t)t), nc);
}

/* Contact j of a chunk of nc (solve_contacts): its exact single-vorton strength a_j*, and its
 * contact point and target in the arrays PS (SoA, so that a column of G[j][i], the velocity at
 * P_i from a_j*, contiguous over i, is one vectorised loop) and T; j = 0 also pads T. */
static void contact_prep(const contact *cj, size_t j, size_t nc, const contact_ws *ws)
{
    const size_t ld = (3 * nc + 3) & ~(size_t)3;
    double r[3] = {cj->P[0] - cj->xnew[0], cj->P[1] - cj->xnew[1], cj->P[2] - cj->xnew[2]};
    vp_kernel_assign_by_velocity(r, cj->target, cj->s2, ws->astar + 3 * j);
    ws->PS[j] = cj->P[0]; ws->PS[nc + j] = cj->P[1]; ws->PS[2 * nc + j] = cj->P[2];
    for (int a = 0; a < 3; a++) ws->T[3 * j + a] = cj->target[a];
    if (j == 0)
        for (size_t i = 3 * nc; i < ld; i++) ws->T[i] = 0.0;
}

/* The Cholesky factor of the ridged Gram matrix, L y = rhs and L^T k = y, then the shares
 * clamped to [0, 1]: a_out[3 j ..] = k_j a_j*.  One thread (the factor is a chain of panels). */
static void factor_and_solve(size_t nc, double *a_out, const contact_ws *ws)
{
    double *Gp = ws->Gp, *A = ws->A, *k = ws->k;
    double trace = 0;
    for (size_t p = 0; p < nc; p++) trace += ws->dg[p];
    const double lambda = 1e-3 * trace / (double)nc + 1e-300;
    for (size_t j0 = 0; j0 < nc; j0 += 4) {
        cholesky_panel(nc, A, Gp + gram_panel_offset(nc, j0 / 4), j0, lambda, ws->PT);
        const size_t ie = j0 + 4 < nc ? j0 + 4 : nc;
        for (size_t i = j0; i < ie; i++) { /* L y = rhs: the panel's rows */
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (size_t q = 0; q < i; q++) sum += A[i * nc + q] * k[q];
            k[i] = (k[i] - sum) / A[i * nc + i];
        }
    }
    for (size_t i = nc; i-- > 0;) { /* L^T k = y, by columns of L^T (rows of L) */
        k[i] /= A[i * nc + i];
        const double ki = k[i], *restrict Ai = A + i * nc;
#pragma omp simd
        for (size_t q = 0; q < i; q++) k[q] -= Ai[q] * ki;
    }
    for (size_t j = 0; j < nc; j++) {
        double kj = k[j] < 0 ? 0 : (k[j] > 1 ? 1 : k[j]);
        for (int a = 0; a < 3; a++) a_out[3 * j + a] = kj * ws->astar[3 * j + a];
    }
}

/* Column j of the chunk's G, with the right-hand side k_j = g_j . T and the Gram matrix's
 * diagonal g_j . g_j while the column is in cache. */
static void column_build(const contact *c, size_t j, size_t nc, const contact_ws *ws)
{
    const size_t ld = (3 * nc + 3) & ~(size_t)3; /* G's column stride */
    double *g = ws->G + j * ld;
    contact_column(nc, ws->PS, c[j].xnew, ws->astar + 3 * j, c[j].s2, g);
    for (size_t i = 3 * nc; i < ld; i++) g[i] = 0.0;
    column_dots(ld, g, ws->T, &ws->k[j], &ws->dg[j]);
}

/* The shares for contacts c[0..nc) (nc <= VP_CONTACT_CHUNK), a_out[3 j ..] = k_j a_j*: the
 * columns, the normal equations A = G^T G by column panels of four (Gp), then their factor.
 * Called by every thread of the enclosing team (its loops are the team's worksharing loops),
 * or outside any parallel region alone; below VP_CONTACT_PARALLEL_MIN contacts one thread
 * does it all (three waits of the team cost more than the split saves).  Each entry of the
 * Gram matrix and of L is computed by one fixed sequence of operations, whichever thread runs
 * it: the same bits at any thread count. */
#define VP_CONTACT_PARALLEL_MIN 96
static void solve_contacts(const contact *c, size_t nc, double *a_out, const contact_ws *ws)
{
    const size_t ld = (3 * nc + 3) & ~(size_t)3;
    const long np = (long)(nc + 3) / 4; /* column panels of four */
    if (nc < VP_CONTACT_PARALLEL_MIN) {
#pragma omp single
        {
            for (size_t j = 0; j < nc; j++) contact_prep(&c[j], j, nc, ws);
            for (size_t j = 0; j < nc; j++) column_build(c, j, nc, ws);
            for (long t = 0; t < np; t++) gram_panel_build(t, ld, ws->G, ws->Gp, nc);
            factor_and_solve(nc, a_out, ws);
        }
        return;
    }
#pragma omp for schedule(dynamic, 16)
    for (long j = 0; j < (long)nc; j++) contact_prep(&c[j], (size_t)j, nc, ws);
#pragma omp for schedule(dynamic, 4)
    for (long j = 0; j < (long)nc; j++) column_build(c, (size_t)j, nc, ws);
#pragma omp for schedule(dynamic, 1)
    for (long t = 0; t < np; t++) gram_panel_build(t, ld, ws->G, ws->Gp, nc);
#pragma omp single
    factor_and_solve(nc, a_out, ws);
}

/* Heat exchanged in one step between a body and a vorton in contact (part 10, conduction
 * Q = kb (Tb - Ti) dt): integrated exactly over the step for the pair, so it never
 * overshoots however large kb dt / C is; the vorton gains Q and the body loses it. */
static double conduct(double kb, double dt, double Tb, double Ti, double Ci, double Cb)
{
    double inv = 1.0 / Ci + (Cb > 0 && isfinite(Cb) ? 1.0 / Cb : 0.0);
    return (Tb - Ti) * (-expm1(-kb * dt * inv)) / inv;
}

/* Tracers [k0, k1) inside body B are projected to its surface (tracer_contact.h), in blocks
 * of 64. */
VP_CLONES
static void collide_tracers_range(const vp_body *B, long k0, long k1, double *restrict tx, double *restrict tv)
{
    for (long b0 = k0, hit = 0; b0 < k1; b0 += 64)
        hit = vp_project_tracers_block(B, b0, (int)(b0 + 64 < k1 ? 64 : k1 - b0), tx, tv, !hit);
}

/* Contact vorton i reassigned (part 4, method step 7): moved to its placement and its
 * vorticity blended by bl towards the share a_new / V, with heat conducted from the body
 * (conduct; kb > 0).  The terms of the fluid's impulse about the body's centre c it carried
 * before and carries after go to h[0..12): (x-c) x a and (x-c) x ((x-c) x a) before, the same
 * after, then the heat Q; vp_collide sums them over the contacts in order (deterministic),
 * while the contacts themselves are reassigned by the team. */
static void reassign_contact(const vp_body *Bc, const contact *cq, const double anew[3], double bl, double rho0,
                             double dt, double heat_capacity, double *x, double *w, double *den, const double *rad,
                             double h[13])
{
    const size_t i = cq->i;
    const double V = vp_volume(rad[i]);
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            for (int a = 0; a < 3; a++) {
                x[3 * i + a] = cq->xnew[a];
                w[3 * i + a] += bl * (anew[a] / V - w[3 * i + a]);
            }
        double d[3] = {x[3 * i] - Bc->position[0], x[3 * i + 1] - Bc->position[1], x[3 * i + 2] - Bc->position[2]};
        double av[3] = {w[3 * i] * V, w[3 * i + 1] * V, w[3 * i + 2] * V};
        vp_cross3(d, av, h + 6 * pass);
        vp_cross3(d, h + 6 * pass, h + 6 * pass + 3);
    }
    h[12] = 0;
    if (Bc->thermal_conductivity > 0) {
        double Ci = heat_capacity * V;
        double Ti = vp_temperature_from_density(rho0, den[i]);
        double Q = conduct(Bc->thermal_conductivity, dt, Bc->temperature, Ti, Ci, Bc->heat_capacity);
        den[i] = vp_density_from_temperature(rho0, Ti + Q / Ci);
        h[12] = Q;
    }
}

int vp_sim_collide(vp_sim *s) { return vp_collide(s, 1); }

/* Tracers inside a body are projected to its surface and take its velocity (inelastic). */
void vp_bodies_project_tracers(vp_sim *s)
{
    vp_tracers *tr = &s->tracers;
    const int threads = vp_threads(s);
    const long nt = (long)tr->n, tblock = 4096, ntb = (nt + tblock - 1) / tblock;
    if (!nt) return;
    double *tx = tr->position->data, *tv = tr->velocity->data;
    for (size_t b = 0; b < s->n_bodies; b++) {
        const vp_body Bc = s->bodies[b];
#pragma omp parallel for num_threads(threads) schedule(dynamic) if (nt > 8192 && threads > 1)
        for (long tb = 0; tb < ntb; tb++) collide_tracers_range(&Bc, tb * tblock, vp_block_end(tb, tblock, nt), tx, tv);
    }
}

/* Phase 7 (method step 7) for every body in order: the vortons that touch it are reassigned
 * (no-slip, no-through), the momentum they carried is handed to the body, heat is conducted,
 * and, with `tracers`, the tracers inside are projected to its surface (a step does that in
 * the tracer advection instead, vp_advect_tracers). */
int vp_collide(vp_sim *s, int tracers)
{
    vp_vortons *v = &s->vortons;
    vp_tracers *tr = &s->tracers;
    double rho0 = s->params.ambient_density, dt = s->params.dt, blend = s->params.contact_blend;
    int threads = vp_threads(s);
    if (s->n_bodies == 0) return VP_OK;
    if (!s->grid_velocity) { int st = vp_sim_update_velocity_grid(s); if (st) return st; }
    /* per vorton: the contact flag */
    double *hit = vp_sim_scratch(s, v->n + 1);
    if (!hit) return VP_ERR_NOMEM;
    double *x = v->position->data, *w = v->vorticity->data, *rad = v->radius->data, *den = v->density->data;
    for (size_t b = 0; b < s->n_bodies; b++) {
        vp_body *B = &s->bodies[b];
        const vp_body Bc = *B;
        /* One parallel region for the contact scan, the contacts' lists, their ambient
         * velocities and the shares (a region each cost more than a small scan).  The scans go
         * in blocks of VP_CONTACT_BLOCK vortons, bh[b] counting block b's contacts, then the
         * index of its first one; the lists are in index order, as a serial scan writes them. */
        const long nv = (long)v->n, nvb = (nv + VP_CONTACT_BLOCK - 1) / VP_CONTACT_BLOCK;
        size_t *bh = malloc(((size_t)nvb + 1) * sizeof(size_t)), nc = 0;
        contact *cs = malloc((v->n + 1) * sizeof(contact));
        float *F = malloc((7 * v->n + 1) * sizeof(float));
        if (!bh || !cs || !F) { free(bh); free(cs); free(F); return VP_ERR_NOMEM; }
        size_t nf = 0;
        contact_ws ws = {0};
        double *wsm = NULL, *anew = NULL, *hand = NULL;
        /* Added-mass guard: the boundary vorticity a step assigns moves fluid of a mass
         * several times rho0 Vb with the body's slip, and the body takes the opposite impulse;
         * for a light body (M ~ rho0 Vb) that explicit exchange overshoots, the slip changes
         * sign every step and grows (a neutral ball in stratified fluid was thrown out at 200
         * units/s).  The blend per step is scaled by M / (4 rho0 Vb) when that is below 1, so a
         * ball of 4x the fluid's density or heavier (and fixed bodies) is unaffected. */
        double bl = blend;
        if (!Bc.fixed) {
            double ratio = Bc.mass / (4.0 * rho0 * vp_volume(Bc.radius));
            if (ratio < 1.0) bl = blend * ratio;
        }
#pragma omp parallel num_threads(threads) if (nv >= 1024)
        {
#pragma omp for schedule(dynamic, 1)
            for (long vb = 0; vb < nvb; vb++) {
                size_t h = 0;
                for (long ii = vb * VP_CONTACT_BLOCK; ii < vp_block_end(vb, VP_CONTACT_BLOCK, nv); ii++) {
                    const size_t i = (size_t)ii;
                    double r[3] = {x[3 * i] - Bc.position[0], x[3 * i + 1] - Bc.position[1], x[3 * i + 2] - Bc.position[2]};
                    double reach = Bc.radius + rad[i];
                    hit[i] = 0;
                    if (vp_dot3(r, r) < reach * reach) { hit[i] = 1; h++; }
                }
                bh[vb] = h;
            }
#pragma omp single
            {
                for (long vb = 0; vb < nvb; vb++) { size_t h = bh[vb]; bh[vb] = nc; nc += h; }
                nf = v->n - nc;
                if (nc) {
                    wsm = contact_ws_alloc(nc < VP_CONTACT_CHUNK ? nc : VP_CONTACT_CHUNK, &ws);
                    anew = malloc(3 * nc * sizeof(double));
                    hand = malloc(13 * nc * sizeof(double));
                }
            }
            /* the contacts' indices, and the vortons not in contact as float32 SoA (x, y, z
             * relative to the body's centre, a, s^2) for a vectorised sum (ambient_sum) */
            if (nc) {
#pragma omp for schedule(dynamic, 1)
                for (long vb = 0; vb < nvb; vb++) {
                    size_t k = bh[vb], m = (size_t)(vb * VP_CONTACT_BLOCK) - k;
                    for (long ii = vb * VP_CONTACT_BLOCK; ii < vp_block_end(vb, VP_CONTACT_BLOCK, nv); ii++) {
                        const size_t i = (size_t)ii;
                        if (hit[i]) { cs[k++].i = i; continue; }
                        double V = vp_volume(rad[i]);
                        const double d0 = x[3 * i] - Bc.position[0], d1 = x[3 * i + 1] - Bc.position[1],
                                     d2 = x[3 * i + 2] - Bc.position[2];
                        /* a vorton beyond 1e15 body-relative units adds nothing here: in float32
                         * its q^2.5 would overflow (inf / inf: NaN), so it goes in as a zero
                         * strength at the centre, which adds exactly 0 */
                        const int far = !(d0 * d0 + d1 * d1 + d2 * d2 < 1e30);
                        F[m] = far ? 0.0f : (float)d0; F[nf + m] = far ? 0.0f : (float)d1; F[2 * nf + m] = far ? 0.0f : (float)d2;
                        F[3 * nf + m] = far ? 0.0f : (float)(w[3 * i] * V); F[4 * nf + m] = far ? 0.0f : (float)(w[3 * i + 1] * V);
                        F[5 * nf + m] = far ? 0.0f : (float)(w[3 * i + 2] * V);
                        F[6 * nf + m] = far ? 1.0f : (float)(rad[i] * rad[i]);
                        m++;
                    }
                }
                /* ambient velocity at each contact point: the kernel summed over every vorton
                 * not in contact (the same kernel the assignment inverts, so the two agree;
                 * the grid's interpolated velocity smooths the near field and made
                 * re-assignment overshoot from step to step), in float32 (ambient_sum) */
#pragma omp for schedule(dynamic, 1)
                for (long q = 0; q < (long)nc; q++) {
                    size_t i = cs[q].i;
                    double xi[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]}, rr[3], P[3], ug[3] = {0, 0, 0};
                    for (int a = 0; a < 3; a++) rr[a] = xi[a] - Bc.position[a];
                    double dist = sqrt(vp_dot3(rr, rr));
                    for (int a = 0; a < 3; a++) P[a] = Bc.position[a] + (dist > 0 ? Bc.radius * rr[a] / dist : (a == 0 ? Bc.radius : 0));
                    ambient_sum(nf, F, (float)(P[0] - Bc.position[0]), (float)(P[1] - Bc.position[1]),
                                (float)(P[2] - Bc.position[2]), ug);
                    place_contact(&Bc, xi, rad[i], ug, &cs[q]);
                }
                /* the shares, by the same team (solve_contacts) */
                if (wsm && anew && hand) {
                    for (size_t c0 = 0; c0 < nc; c0 += VP_CONTACT_CHUNK)
                        solve_contacts(cs + c0, nc - c0 < VP_CONTACT_CHUNK ? nc - c0 : VP_CONTACT_CHUNK, anew + 3 * c0, &ws);
                    /* every contact vorton reassigned (each contact is a different vorton; the
                     * region's end is the barrier) */
#pragma omp for schedule(dynamic, 8) nowait
                    for (long q = 0; q < (long)nc; q++)
                        reassign_contact(&Bc, &cs[q], anew + 3 * q, bl, rho0, dt, s->params.fluid_heat_capacity, x, w,
                                         den, rad, hand + 13 * q);
                }
            }
        }
        free(F); free(bh); free(wsm);
        double dI[3] = {0, 0, 0}, dA[3] = {0, 0, 0}, heat = 0;
        if (nc) {
            /* (a failed work space left every vorton as it was: nothing to undo) */
            if (!anew || !wsm || !hand) { free(cs); free(anew); free(hand); return VP_ERR_NOMEM; }
            /* The momentum hand-over (method step 7): the fluid's impulse about the body's
             * centre c changes by each contact's new terms minus its old (linear
             * 1/2 (x-c) x a, angular 1/3 (x-c) x ((x-c) x a)); the body receives minus rho0
             * times the sums.  Summed here in contact order: deterministic. */
            for (size_t q = 0; q < nc; q++) {
                for (int pass = 0; pass < 2; pass++) {
                    const double sg = pass ? 1.0 : -1.0, *hq = hand + 13 * q + 6 * pass;
                    for (int k = 0; k < 3; k++) { dI[k] += sg * 0.5 * hq[k]; dA[k] += sg * hq[3 + k] / 3.0; }
                }
                if (Bc.thermal_conductivity > 0) heat += hand[13 * q + 12];
            }
            free(anew); free(hand);
        }
        free(cs);
        double J[3] = {-rho0 * dI[0], -rho0 * dI[1], -rho0 * dI[2]};
        double K[3] = {-rho0 * dA[0], -rho0 * dA[1], -rho0 * dA[2]};
        if (!B->fixed) { vp_body_apply_impulse(B, J); vp_body_apply_impulsive_torque(B, K); }
        for (int k = 0; k < 3; k++) { B->fluid_impulse[k] += J[k]; B->fluid_angular_impulse[k] += K[k]; }
        if (B->heat_capacity > 0 && isfinite(B->heat_capacity)) B->temperature -= heat / B->heat_capacity;
        B->heat_received -= heat;
        /* tracers inside are projected to the surface and take its velocity (inelastic) */
        double *tx = tr->position ? tr->position->data : NULL, *tv = tr->position ? tr->velocity->data : NULL;
        const long nt = tracers ? (long)tr->n : 0, tblock = 4096, ntb = (nt + tblock - 1) / tblock;
        if (nt > 8192 && threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
            for (long tb = 0; tb < ntb; tb++)
                collide_tracers_range(&Bc, tb * tblock, vp_block_end(tb, tblock, nt), tx, tv);
        } else if (nt) { /* (few tracers: not worth waking the team) */
            collide_tracers_range(&Bc, 0, nt, tx, tv);
        }
    }
    return VP_OK;
}
