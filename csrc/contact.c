/* contact.c: fluid-body interaction (physics.md 2.7, part 4): no-slip and no-through boundary
 * conditions by assigning vorticity, exact momentum hand-over to the body, tracer collisions,
 * and heat conduction between bodies and the fluid that touches them (part 10). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kernel.h"
#include "tracer_contact.h"

/* Contact geometry of one vorton (part 4, physics.md 2.7): contact point P = c + R n, body
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

/* The Gram matrix A = G^T G (lower triangle and a few entries past it, never read), from the
 * columns g_q = G + q ld of the contact solve (ld: a multiple of 4, padded with zeros).  Four
 * rows p..p+3 at a time against three columns, in 4-double vectors: twelve independent sums,
 * each column load shared by four rows and each row load by three columns.  One row against
 * four columns (its four sums a chain of dependent multiply-adds each, five loads per four)
 * ran at ~11 GFMA/s; this at ~25 (54 contacts: 21.5 -> 10.6 us, 145: 402 -> 177). */
typedef double vp_gram_v4d __attribute__((vector_size(32)));
#define VP_GRAM_HSUM(v) (((v)[0] + (v)[2]) + ((v)[1] + (v)[3]))
VP_CLONES
static void gram_rows4(size_t p, size_t ld, const double *restrict G, double *restrict A, size_t nc)
{
    const vp_gram_v4d *r0 = (const vp_gram_v4d *)(G + p * ld), *r1 = (const vp_gram_v4d *)(G + (p + 1) * ld),
                      *r2 = (const vp_gram_v4d *)(G + (p + 2) * ld), *r3 = (const vp_gram_v4d *)(G + (p + 3) * ld);
    const size_t nv = ld / 4;
    double *A0 = A + p * nc, *A1 = A0 + nc, *A2 = A1 + nc, *A3 = A2 + nc;
    size_t q = 0;
    for (; q + 3 <= p + 4; q += 3) {
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
        A0[q] = VP_GRAM_HSUM(a0); A0[q + 1] = VP_GRAM_HSUM(a1); A0[q + 2] = VP_GRAM_HSUM(a2);
        A1[q] = VP_GRAM_HSUM(b0); A1[q + 1] = VP_GRAM_HSUM(b1); A1[q + 2] = VP_GRAM_HSUM(b2);
        A2[q] = VP_GRAM_HSUM(c0); A2[q + 1] = VP_GRAM_HSUM(c1); A2[q + 2] = VP_GRAM_HSUM(c2);
        A3[q] = VP_GRAM_HSUM(d0); A3[q + 1] = VP_GRAM_HSUM(d1); A3[q + 2] = VP_GRAM_HSUM(d2);
    }
    for (; q <= p + 3; q++) {
        const vp_gram_v4d *gq = (const vp_gram_v4d *)(G + q * ld);
        vp_gram_v4d a = {0}, b = {0}, c = {0}, d = {0};
        for (size_t i = 0; i < nv; i++) { a += r0[i] * gq[i]; b += r1[i] * gq[i]; c += r2[i] * gq[i]; d += r3[i] * gq[i]; }
        A0[q] = VP_GRAM_HSUM(a); A1[q] = VP_GRAM_HSUM(b); A2[q] = VP_GRAM_HSUM(c); A3[q] = VP_GRAM_HSUM(d);
    }
}

/* One row p of the Gram matrix (the rows past the last multiple of four), q <= p. */
VP_CLONES
static void gram_row1(size_t p, size_t ld, const double *restrict G, double *restrict A, size_t nc)
{
    const vp_gram_v4d *r = (const vp_gram_v4d *)(G + p * ld);
    const size_t nv = ld / 4;
    for (size_t q = 0; q <= p; q++) {
        const vp_gram_v4d *gq = (const vp_gram_v4d *)(G + q * ld);
        vp_gram_v4d a = {0};
        for (size_t i = 0; i < nv; i++) a += r[i] * gq[i];
        A[p * nc + q] = VP_GRAM_HSUM(a);
    }
}

/* The velocity at a contact point p (relative to the body's centre) induced by m vortons in
 * float32 SoA (x y z relative to the centre, a, s^2): kernel.h's regularised kernel, summed in
 * float32 on 16 lanes and added to u (double).  The double sum's sqrt and division on 8 lanes
 * were most of the contact phase in hot_ball (~58 contacts against ~1e3 vortons a step).
 * Coordinates relative to the body keep the differences to ~1e-7 of the body's size; each
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

/* Work space of solve_contacts for chunks of up to n contacts, one allocation, 32-byte
 * aligned for gram_rows4's vectors (G's columns have a stride of 3 nc rounded up to 4, and so
 * has T, the targets of every contact point in a row, padded with zeros). */
typedef struct { double *G, *A, *k, *astar, *PS, *T; } contact_ws;
static double *contact_ws_alloc(size_t n, contact_ws *ws)
{
    const size_t doubles = n * (3 * n + 4) + n * n + n + 3 * n + 3 * n + (3 * n + 4) + 8;
    double *m = aligned_alloc(32, (doubles * sizeof(double) + 31) / 32 * 32);
    if (m) {
        ws->G = m; ws->A = ws->G + n * (3 * n + 4); ws->T = ws->A + n * n; ws->k = ws->T + (3 * n + 4);
        ws->astar = ws->k + n; ws->PS = ws->astar + 3 * n;
    }
    return m;
}

/* The dot product of two columns of ld doubles (ld a multiple of 4, 32-byte aligned), in
 * four lanes summed as gram_rows4 sums. */
VP_CLONES
static double column_dot(size_t ld, const double *restrict a, const double *restrict b)
{
    const vp_gram_v4d *x = (const vp_gram_v4d *)a, *y = (const vp_gram_v4d *)b;
    vp_gram_v4d acc = {0};
    for (size_t i = 0; i < ld / 4; i++) acc += x[i] * y[i];
    return VP_GRAM_HSUM(acc);
}

/* Cholesky factor in place of the lower triangle of the row-major nc x nc matrix A (its
 * diagonal already ridged by lambda), pivots floored at lambda; P: 4 nc doubles of work space.
 * Right-looking in panels of four columns: a panel is factored (each column updated by the
 * panel's earlier ones, then scaled by its pivot), copied out contiguous, and every later row i
 * takes the panel's rank-4 update A[i][q] -= sum_c L[i][c] L[q][c] (q in the trailing part, up
 * to i) as one vectorised pass.  The dot-product form paid a horizontal sum per entry, most of
 * its time at ~50 contacts. */
VP_CLONES
static void cholesky_lower(size_t nc, double *restrict A, double lambda, double *restrict P)
{
    for (size_t j0 = 0; j0 < nc; j0 += 4) {
        const size_t jb = nc - j0 < 4 ? nc - j0 : 4, je = j0 + jb;
        for (size_t j = j0; j < je; j++) {
            for (size_t i = j; i < nc; i++) {
                double *Ai = A + i * nc;
                for (size_t c = j0; c < j; c++) Ai[j] -= Ai[c] * A[j * nc + c];
            }
            double d = A[j * nc + j];
            d = sqrt(d > lambda ? d : lambda);
            A[j * nc + j] = d;
            const double inv = 1.0 / d;
            for (size_t i = j + 1; i < nc; i++) A[i * nc + j] *= inv;
        }
        if (je == nc) break;
        double *restrict P0 = P, *restrict P1 = P + nc, *restrict P2 = P + 2 * nc, *restrict P3 = P + 3 * nc;
        for (size_t i = je; i < nc; i++) {
            const double *Ai = A + i * nc + j0;
            P0[i] = Ai[0]; P1[i] = jb > 1 ? Ai[1] : 0; P2[i] = jb > 2 ? Ai[2] : 0; P3[i] = jb > 3 ? Ai[3] : 0;
        }
        for (size_t i = je; i < nc; i++) {
            double *restrict Ai = A + i * nc;
            const double l0 = P0[i], l1 = P1[i], l2 = P2[i], l3 = P3[i];
#pragma omp simd
            for (size_t q = je; q <= i; q++) Ai[q] -= l0 * P0[q] + l1 * P1[q] + l2 * P2[q] + l3 * P3[q];
        }
    }
}

/* The shares for contacts c[0..nc) (nc <= VP_CONTACT_CHUNK), a_out[3 j ..] = k_j a_j*.  Called
 * by every thread of the enclosing team (its loops are the team's worksharing loops; the
 * factorisation is one thread's: 6 us at ~50 contacts, ~70 at ~150, where two barriers per
 * panel cost more than sharing the updates saved), or outside any parallel region alone. */
static void solve_contacts(const contact *c, size_t nc, double *a_out, const contact_ws *ws)
{
    double *G = ws->G, *A = ws->A, *k = ws->k, *astar = ws->astar, *PS = ws->PS, *T = ws->T;
    const size_t ld = (3 * nc + 3) & ~(size_t)3; /* G's column stride */
    /* the exact single-vorton strengths, and the contact points as SoA so that a column of
     * G[j][i] (velocity at P_i from a_j*, contiguous over i) is one vectorised loop */
#pragma omp for schedule(static)
    for (long jj = 0; jj < (long)nc; jj++) {
        size_t j = (size_t)jj;
        double r[3] = {c[j].P[0] - c[j].xnew[0], c[j].P[1] - c[j].xnew[1], c[j].P[2] - c[j].xnew[2]};
        vp_kernel_assign_by_velocity(r, c[j].target, c[j].s2, astar + 3 * j);
        PS[j] = c[j].P[0]; PS[nc + j] = c[j].P[1]; PS[2 * nc + j] = c[j].P[2];
        for (int a = 0; a < 3; a++) T[3 * j + a] = c[j].target[a];
        if (j == 0)
            for (size_t i = 3 * nc; i < ld; i++) T[i] = 0.0;
    }
    /* the columns, and the right-hand side k_j = g_j . T while column j is in cache */
#pragma omp for schedule(static)
    for (long jj = 0; jj < (long)nc; jj++) {
        size_t j = (size_t)jj;
        contact_column(nc, PS, c[j].xnew, astar + 3 * j, c[j].s2, G + j * ld);
        for (size_t i = 3 * nc; i < ld; i++) G[j * ld + i] = 0.0;
        k[j] = column_dot(ld, G + j * ld, T);
    }
    /* normal equations A = G^T G (lower triangle); blocks of four rows (the
     * nc mod 4 last rows alone), the longest first: balanced ends */
    const long nb4 = (long)(nc / 4);
#pragma omp for schedule(dynamic, 1)
    for (long bb = 0; bb < nb4 + (long)(nc % 4); bb++) {
        if (bb < (long)(nc % 4)) {
            gram_row1(nc - 1 - (size_t)bb, ld, G, A, nc);
        } else {
            const size_t p = 4 * (size_t)(nb4 - 1 - (bb - (long)(nc % 4)));
            gram_rows4(p, ld, G, A, nc);
        }
    }
#pragma omp single
    {
        double trace = 0;
        for (size_t p = 0; p < nc; p++) trace += A[p * nc + p];
        double lambda = 1e-3 * trace / (double)nc + 1e-300;
        for (size_t p = 0; p < nc; p++) A[p * nc + p] += lambda;
        cholesky_lower(nc, A, lambda, G); /* G is free again: the Gram matrix is built */
        for (size_t i = 0; i < nc; i++) { /* L y = rhs */
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (size_t q = 0; q < i; q++) sum += A[i * nc + q] * k[q];
            k[i] = (k[i] - sum) / A[i * nc + i];
        }
        for (size_t i = nc; i-- > 0;) { /* L^T k = y, by columns of L^T (rows of L) */
            k[i] /= A[i * nc + i];
            const double ki = k[i], *restrict Ai = A + i * nc;
#pragma omp simd
            for (size_t q = 0; q < i; q++) k[q] -= Ai[q] * ki;
        }
        for (size_t j = 0; j < nc; j++) {
            double kj = k[j] < 0 ? 0 : (k[j] > 1 ? 1 : k[j]);
            for (int a = 0; a < 3; a++) a_out[3 * j + a] = kj * astar[3 * j + a];
        }
    }
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
    for (long b0 = k0; b0 < k1; b0 += 64)
        vp_project_tracers_block(B, b0, (int)(b0 + 64 < k1 ? 64 : k1 - b0), tx, tv);
}

int vp_sim_collide(vp_sim *s) { return vp_collide(s, 1); }

/* Phase 7 (physics.md 2.7) for every body in order: the vortons that touch it are reassigned
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
        /* One parallel region for the contact scan, the contacts' lists and their ambient
         * velocities (in hot_ball, with ~1e3 vortons, the scans were most of the phase's serial
         * time, and a region each cost more than they saved).  The scans go in blocks of
         * VP_CONTACT_BLOCK vortons, bh[b] counting block b's contacts, then the index of its
         * first one; the lists are in index order, as a serial scan writes them. */
        const long nv = (long)v->n, nvb = (nv + VP_CONTACT_BLOCK - 1) / VP_CONTACT_BLOCK;
        size_t *bh = malloc(((size_t)nvb + 1) * sizeof(size_t)), nc = 0;
        contact *cs = malloc((v->n + 1) * sizeof(contact));
        float *F = malloc((7 * v->n + 1) * sizeof(float));
        if (!bh || !cs || !F) { free(bh); free(cs); free(F); return VP_ERR_NOMEM; }
        size_t nf = 0;
        contact_ws ws = {0};
        double *wsm = NULL, *anew = NULL;
#pragma omp parallel num_threads(threads) if (nv >= 64)
        {
#pragma omp for schedule(static)
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
                }
            }
            /* the contacts' indices, and the vortons not in contact as float32 SoA (x, y, z
             * relative to the body's centre, a, s^2) for a vectorised sum (ambient_sum) */
            if (nc) {
#pragma omp for schedule(static)
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
#pragma omp for schedule(static)
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
                if (wsm && anew)
                    for (size_t c0 = 0; c0 < nc; c0 += VP_CONTACT_CHUNK)
                        solve_contacts(cs + c0, nc - c0 < VP_CONTACT_CHUNK ? nc - c0 : VP_CONTACT_CHUNK, anew + 3 * c0, &ws);
            }
        }
        free(F); free(bh); free(wsm);
        double dI[3] = {0, 0, 0}, dA[3] = {0, 0, 0}, heat = 0;
        if (nc) {
            if (!anew) { free(cs); return VP_ERR_NOMEM; }
            /* (the work space failed before any vorton changed: nothing to undo) */
            if (!wsm) { free(cs); free(anew); return VP_ERR_NOMEM; }
            /* Added-mass guard: the boundary vorticity a step assigns moves fluid of a mass
             * several times rho0 Vb with the body's slip, and the body takes the opposite
             * impulse; for a light body (M ~ rho0 Vb) that explicit exchange overshoots, the
             * slip changes sign every step and grows (a neutral ball in stratified fluid was
             * thrown out at 200 units/s).  The blend per step is scaled by M / (4 rho0 Vb)
             * when that is below 1, so a ball of 4x the fluid's density or heavier (and fixed
             * bodies) is unaffected. */
            double bl = blend;
            if (!Bc.fixed) {
                double ratio = Bc.mass / (4.0 * rho0 * vp_volume(Bc.radius));
                if (ratio < 1.0) bl = blend * ratio;
            }
            /* Each contact vorton is reassigned, and the fluid's impulse about the body centre
             * c changes by its new terms minus its old (linear 1/2 (x-c) x a, angular
             * 1/3 (x-c) x ((x-c) x a): momentum hand-over, physics.md 2.7); the body receives
             * minus rho0 times the sums.  Serial, in index order: deterministic. */
            for (size_t q = 0; q < nc; q++) {
                size_t i = cs[q].i;
                double V = vp_volume(rad[i]);
                for (int pass = 0; pass < 2; pass++) {
                    if (pass)
                        for (int a = 0; a < 3; a++) {
                            x[3 * i + a] = cs[q].xnew[a];
                            w[3 * i + a] += bl * (anew[3 * q + a] / V - w[3 * i + a]);
                        }
                    double sg = pass ? 1.0 : -1.0;
                    double d[3] = {x[3 * i] - Bc.position[0], x[3 * i + 1] - Bc.position[1], x[3 * i + 2] - Bc.position[2]};
                    double av[3] = {w[3 * i] * V, w[3 * i + 1] * V, w[3 * i + 2] * V}, dxa[3], dxdxa[3];
                    vp_cross3(d, av, dxa);
                    vp_cross3(d, dxa, dxdxa);
                    for (int k = 0; k < 3; k++) { dI[k] += sg * 0.5 * dxa[k]; dA[k] += sg * dxdxa[k] / 3.0; }
                }
                if (Bc.thermal_conductivity > 0) {
                    double Ci = s->params.fluid_heat_capacity * V;
                    double Ti = vp_temperature_from_density(rho0, den[i]);
                    double Q = conduct(Bc.thermal_conductivity, dt, Bc.temperature, Ti, Ci, Bc.heat_capacity);
                    den[i] = vp_density_from_temperature(rho0, Ti + Q / Ci);
                    heat += Q;
                }
            }
            free(anew);
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
#pragma omp parallel for num_threads(threads) schedule(static)
            for (long tb = 0; tb < ntb; tb++)
                collide_tracers_range(&Bc, tb * tblock, vp_block_end(tb, tblock, nt), tx, tv);
        } else if (nt) { /* here, not in a region of one thread (libgomp's costs 0.3-0.6 us and a futex call) */
            collide_tracers_range(&Bc, 0, nt, tx, tv);
        }
    }
    return VP_OK;
}
