/* diffuse.c: viscous and thermal diffusion by particle strength exchange (method step 5,
 * Degond and Mas-Gallic 1989), both in one neighbour traversal:
 *   dq_i/dt = k sum_j (q_j - q_i) eta_e(x_i - x_j) V_j / e^2,
 *   eta_e(x) = 4 / (pi^1.5 e^3) exp(-|x|^2 / e^2)   (second moments 2: a Laplacian),
 * with q = vorticity (k = nu) and q = temperature (k = kappa; density follows from it).
 *
 * Vorticity diffuses with nu_ij = (nu_i + nu_j) / 2, nu_i = nu + (C_s D_i)^2 |S_i|: the
 * molecular viscosity plus Smagorinsky's subgrid eddy viscosity (Smagorinsky 1963; for vortex
 * particles, Cottet 1996 and Winckelmans 2004), D_i the vorton spacing V^(1/3), |S| =
 * sqrt(2 S:S) the strain rate from the grid Jacobian.  Without it the energy that cascades
 * below the vorton spacing has nowhere to go, and stretching amplifies particle-scale noise
 * until it blows up.  nu_i is capped at 0.1 D_i^2 / dt, inside the explicit scheme's
 * stability limit (4 nu dt / e^2 < 1).
 *
 * e_ij is pse_width times the mean spacing V^(1/3) of the pair, so the pair weight is
 * symmetric.  Pairs beyond pse_cutoff * e (default 3) are skipped, and the kernel is
 * renormalised for the cut so that its second moment stays exactly 2.  The scheme needs the
 * particles to overlap: spacing at most about e (pse_width >= 1 on a lattice of spacing
 * V^(1/3)); a sparser set under-resolves the Laplacian and diffuses too slowly.
 *
 * Gather form: every vorton sums its exchange over its own neighbours and writes only its
 * own result, so the loop over the cell list is plainly parallel and each sum is taken in
 * one fixed order: the result does not depend on the thread count.  A pair's weight is
 * computed from symmetric quantities by the same operations from either side, so it is the
 * same float both times, and the two exchanges are equal and opposite: total strength
 * sum w_i V_i and heat sum T_i V_i are conserved to rounding.
 *
 * The drift.  A vorton whose neighbours lie on one side (the edge of the set that remeshing's
 * threshold leaves) cannot pass vorticity outward, so the exchange alone acts as a wall that
 * vorticity piles up against, and it changes the linear impulse 1/2 sum x x w V.  Each
 * vorton is therefore also moved by
 *   d_i = -dt sum_j nu_ij eta_ij V_j (x_j - x_i) / e_ij^2,
 * the vorticity's diffusion velocity where its neighbours are missing (zero inside a uniform
 * lattice): pairwise, sum_i (x_i x dw_i + d_i x w_i) V_i = 0, so the impulse is kept to first
 * order in the step.  Only d_i's part across w_i is applied (along it a vortex line does not
 * move), and only to vortons that carry no density excess: a parcel's heat and mass go where
 * the flow and heat conduction take them.  With a stratified ambient there is no drift. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>
#include "internal.h"
#include "kernel.h"
#include "grid_inline.h"

/* The pair loops run to a multiple of this many lanes (the widest vector, in floats), over
 * finite padding past the batch: no pair falls to a scalar remainder loop, whose arithmetic
 * could differ in the last bit from the vector lanes' (and break the weight's symmetry). */
enum { PSE_PAD = 16 };
/* Cells along a row per task where a set has too few rows of cells to share among the
 * threads (pse_task). */
enum { PSE_SEG = 8 };
/* Vortons a chunk of the per-vorton loops (dynamic chunks: a thread slowed by a busy core
 * holds up the others by one chunk at most). */
enum { PSE_CHUNK = 2048 };
/* The stability guard's bound on a vorton's rate sum (pse_guard). */
#define PSE_MAX_RATE 1.0
/* At most this many exchanges per step (vp_diffuse). */
#define PSE_MAX_SUBSTEPS 16

/* 2^x in float32 for -24 <= x <= 0: the pair weight exp(-r^2/e^2) = 2^(-log2(e) r^2/e^2).
 * Cody and Waite's split x = k + f (k the nearest integer, found by adding 1.5 2^23), 2^f by
 * a degree-5 polynomial (relative error 7.5e-8) and k added to the exponent field: a few
 * operations that vectorise, where libm's expf would not. */
static inline float pse_exp2f(float x)
{
    const float magic = 12582912.0f; /* 1.5 2^23 */
    const float t = x + magic, k = t - magic, f = x - k;
    float p = 1.327647129073739e-3f;
    p = p * f + 9.675540961325169e-3f;
    p = p * f + 5.550713092088699e-2f;
    p = p * f + 2.4022120237350464e-1f;
    p = p * f + 6.931469440460205e-1f;
    p = p * f + 1.0000001192092896f;
    uint32_t tb, pb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&pb, &p, sizeof pb);
    pb += (tb - 0x4B400000u) << 23; /* + k in the exponent: t's bits are magic's plus k */
    memcpy(&p, &pb, sizeof p);
    return p;
}
#define PSE_LOG2E_F 1.44269504f

/* Per-vorton fields, in the cell list's order (the sorted arrays) or for a batch of
 * candidates (the vortons of a task's neighbouring cells, copied together), each a run of
 * `stride` values in one of two blocks:
 *   float  PSE_X PSE_Y PSE_Z: position relative to the cell list's corner;
 *          PSE_E: PSE spacing e_i = pse_width V_i^(1/3);
 *          (lengths in units of the largest spacing)
 *          PSE_NU: half the viscosity, nu_i / 2 (so nu_ij = nu_i / 2 + nu_j / 2);
 *   double PSE_W0..2: vorticity; PSE_V: volume; PSE_T: temperature (with heat);
 *          PSE_S: the rate sum c_i / f, then the stability guard's scale (pse_guard).
 * A batch copies only the fields its sums read (pse_task). */
enum { PSE_X, PSE_Y, PSE_Z, PSE_E, PSE_NU, PSE_NF };
enum { PSE_W0, PSE_W1, PSE_W2, PSE_V, PSE_T, PSE_S, PSE_ND };
typedef struct {
    float *f;
    double *d;
    size_t stride;
} pse_fields;
#define PSE_F(F, k) ((F)->f + (size_t)(k) * (F)->stride)
#define PSE_D(F, k) ((F)->d + (size_t)(k) * (F)->stride)

/* One pass over the pairs: the inputs, and where the results go. */
typedef struct {
    const vp_bins *bins;
    pse_fields S;            /* the sorted arrays (stride n) */
    double *w, *d;           /* the vortons' vorticity and density, written in the vortons' order */
    double *drift;           /* the vortons' drifts (pse_drift), written in the vortons' order; NULL: none */
    double f, kdt, rho0;     /* f = dt norm, kdt = kappa f: the exchanges' factors */
    double len;              /* the largest spacing: the sorted positions' unit */
    float cut2;              /* (pse_cutoff)^2 */
    double kappa;            /* (for the rate sums) */
    int viscous, heat;
    int uniform;             /* every vorton of one spacing e and one viscosity (as floats) */
    int seg;                 /* x cells per task */
    const unsigned char *marks; /* (the guarded pass) the cells whose vortons are summed again */
} pse_pass;

/* A batch of candidates (pse_gather; room for `cap` of them, 4 more in idx and PSE_PAD of
 * padding), one query's pair weights g and viscosities nu_ij, and the x cells' offsets in
 * the batch; one per thread, grown as needed. */
typedef struct {
    pse_fields F;
    float *g, *nuij;
    uint32_t *idx;
    size_t *xoff;
    size_t cap;
    int ncap;
    void *mem;
} pse_batch;

static int pse_batch_reserve(pse_batch *B, size_t m, int ncells)
{
    if (m <= B->cap && ncells <= B->ncap && B->mem) return 0;
    size_t cap = B->cap ? B->cap : 256;
    while (cap < m) cap *= 2;
    const int ncap = ncells > B->ncap ? ncells : B->ncap;
    const size_t k = cap + 4 + PSE_PAD; /* (even) */
    void *mem = realloc(B->mem, k * (PSE_ND * sizeof(double) + (PSE_NF + 3) * sizeof(float)) +
                                    ((size_t)ncap + 2) * sizeof(size_t));
    if (!mem) return 1;
    B->F.d = mem;
    B->F.f = (float *)(B->F.d + PSE_ND * k);
    B->F.stride = k;
    B->g = B->F.f + PSE_NF * k;
    B->nuij = B->g + k;
    B->idx = (uint32_t *)(B->nuij + k);
    B->xoff = (size_t *)(B->idx + k);
    B->cap = cap; B->ncap = ncap;
    B->mem = mem;
    return 0;
}

/* Eight doubles: the exchange's sums are taken in these lanes, the same on every CPU (GCC's
 * vector extension: one AVX-512 register, or two AVX2 or four SSE2 ones). */
typedef double pse_v8d __attribute__((vector_size(64)));
typedef float pse_v8f __attribute__((vector_size(32)));
#define PSE_LOAD8(p) (__extension__({ pse_v8d v_; memcpy(&v_, (p), sizeof v_); v_; }))
#define PSE_LOAD8F(p) (__extension__({ pse_v8f f_; memcpy(&f_, (p), sizeof f_); __builtin_convertvector(f_, pse_v8d); }))
/* Lanes 0..7 summed pairwise: a fixed order. */
static inline __attribute__((always_inline)) double pse_hsum(const pse_v8d *v)
{
    return (((*v)[0] + (*v)[4]) + ((*v)[2] + (*v)[6])) + (((*v)[1] + (*v)[5]) + ((*v)[3] + (*v)[7]));
}

/* The exchange sums of one query vorton over candidates [0, m) of a batch, the query itself
 * the one at `self` (method step 5, without the factor f = dt norm):
 *   out[0..2] = sum_j g_ij nu_ij V_j (w_j - w_q),  out[3] = sum_j g_ij V_j (T_j - T_q),
 *   out[4] = c_q = sum_j g_ij (nu_ij + kappa) V_j   (the rate sum: pse_guard),
 *   out[5..7] = sum_j g_ij nu_ij V_j (x_j - x_q)   (the drift: pse_drift),
 * g_ij = exp(-r^2 / e_ij^2) / e_ij^5 inside the cutoff, else 0.  The weights are float32:
 * positions relative to the cell list's corner keep differences to ~1e-6 e, far below the
 * quadrature's error.  A weight's bits are ANDed with all ones or all zeros (not multiplied
 * by 0 or 1: the weights of lanes past the cutoff may be garbage).  `uniform` (one
 * spacing and one viscosity): e_ij and nu_ij are the query's own, so they leave the loops.
 * `guarded`: each pair scaled by s_ij (pse_guard).  Inlined for each combination. */
static inline __attribute__((always_inline)) void pse_sum(const pse_fields *B, size_t b0, float *restrict G,
                                                          float *restrict NUij, int32_t m, int32_t self,
                                                          const float qf[PSE_NF], const double qd[PSE_ND], float cut2,
                                                          double kappa, double out[8], const int heat,
                                                          const int uniform, const int guarded)
{
    const float *restrict X = PSE_F(B, PSE_X) + b0, *restrict Y = PSE_F(B, PSE_Y) + b0,
                *restrict Z = PSE_F(B, PSE_Z) + b0, *restrict E = PSE_F(B, PSE_E) + b0,
                *restrict NU = PSE_F(B, PSE_NU) + b0;
    const double *restrict V = PSE_D(B, PSE_V) + b0, *restrict W0 = PSE_D(B, PSE_W0) + b0,
                 *restrict W1 = PSE_D(B, PSE_W1) + b0, *restrict W2 = PSE_D(B, PSE_W2) + b0,
                 *restrict T = PSE_D(B, PSE_T) + b0, *restrict SC = PSE_D(B, PSE_S) + b0;
    const float xq = qf[PSE_X], yq = qf[PSE_Y], zq = qf[PSE_Z], eq = qf[PSE_E], nq = qf[PSE_NU];
    const int32_t mv = (m + PSE_PAD - 1) & ~(int32_t)(PSE_PAD - 1);
    /* exponent x = -log2(e) r^2 / e_ij^2; the cutoff r^2 <= cut^2 e_ij^2 is x >= xcut (the
     * exponential of lanes past it may be garbage: their bits are cleared) */
    const float invq = 1.0f / (0.5f * (eq + eq)), invq2 = invq * invq, invq5 = invq2 * invq2 * invq;
    const float sq = invq2 * -PSE_LOG2E_F, xcut = cut2 * -PSE_LOG2E_F;
#pragma omp simd
    for (int32_t j = 0; j < mv; j++) {
        const float dx = X[j] - xq, dy = Y[j] - yq, dz = Z[j] - zq;
        const float r2 = dx * dx + dy * dy + dz * dz;
        const float inv = uniform ? invq : 1.0f / (0.5f * (eq + E[j])), inv2 = inv * inv;
        const float x = r2 * (uniform ? sq : inv2 * -PSE_LOG2E_F);
        const float ex = pse_exp2f(x) * (uniform ? invq5 : inv2 * inv2 * inv);
        uint32_t gb;
        memcpy(&gb, &ex, sizeof gb);
        gb &= 0u - (uint32_t)(x >= xcut);
        memcpy(&G[j], &gb, sizeof gb);
        if (!uniform) NUij[j] = nq + NU[j];
    }
    G[self] = 0.0f; /* not the query itself, nor the lanes past the candidates (G has room) */
    memset(G + m, 0, PSE_PAD * sizeof(float));
    const double w0 = qd[PSE_W0], w1 = qd[PSE_W1], w2 = qd[PSE_W2], tq = qd[PSE_T], sgq = qd[PSE_S], kd = kappa;
    pse_v8d s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, sc = {0}, m0 = {0}, m1 = {0}, m2 = {0};
    for (int32_t j = 0; j < mv; j += 8) {
        pse_v8d g = PSE_LOAD8F(G + j) * PSE_LOAD8(V + j);
        if (guarded) { /* s_ij = min(s_q, s_j) */
            double sm[8];
            for (int l = 0; l < 8; l++) sm[l] = sgq < SC[j + l] ? sgq : SC[j + l];
            g *= PSE_LOAD8(sm);
        }
        const pse_v8d gw = uniform ? g : g * PSE_LOAD8F(NUij + j);
        s0 += gw * (PSE_LOAD8(W0 + j) - w0);
        s1 += gw * (PSE_LOAD8(W1 + j) - w1);
        s2 += gw * (PSE_LOAD8(W2 + j) - w2);
        if (heat) s3 += g * (PSE_LOAD8(T + j) - tq);
        sc += uniform ? g : (heat ? gw + kd * g : gw);
        m0 += gw * (PSE_LOAD8F(X + j) - (double)xq);
        m1 += gw * (PSE_LOAD8F(Y + j) - (double)yq);
        m2 += gw * (PSE_LOAD8F(Z + j) - (double)zq);
    }
    const double nu = uniform ? (double)(nq + nq) : 1.0;
    out[0] = nu * pse_hsum(&s0); out[1] = nu * pse_hsum(&s1); out[2] = nu * pse_hsum(&s2); out[3] = pse_hsum(&s3);
    out[4] = uniform ? (heat ? nu + kd : nu) * pse_hsum(&sc) : pse_hsum(&sc);
    out[5] = nu * pse_hsum(&m0); out[6] = nu * pse_hsum(&m1); out[7] = nu * pse_hsum(&m2);
}

/* The batch of candidates: sorted vortons of x cells [bx0, bx1) of rows[0, nr), ordered by
 * cell, then row, the first nf float and nd double fields; the cells' offsets in xoff.
 * First their places in the sorted arrays (idx: each (cell, row) a run, written 4 at once
 * whatever its length; a cell holds at most 4 nearly always, and idx has room), then each
 * field by them: one short loop a field, where copying every field run by run had the
 * compiler juggle twice as many pointers as there are registers. */
static inline __attribute__((always_inline)) size_t pse_gather(const pse_fields *S, pse_batch *B,
                                                               const size_t *start, const size_t *rows, int nr,
                                                               int bx0, int bx1, const int nf, const int nd)
{
    uint32_t *restrict idx = B->idx;
    size_t *restrict xoff = B->xoff;
    size_t k = 0, rcur[25];
    for (int r = 0; r < nr; r++) rcur[r] = start[rows[r] + bx0];
    for (int cx = bx0; cx < bx1; cx++) {
        xoff[cx - bx0] = k;
        for (int r = 0; r < nr; r++) {
            const size_t j = rcur[r], cnt = start[rows[r] + cx + 1] - j;
            rcur[r] = j + cnt;
            for (size_t t = 0; t < 4; t++) idx[k + t] = (uint32_t)(j + t); /* (n < 2^31) */
            for (size_t t = 4; t < cnt; t++) idx[k + t] = (uint32_t)(j + t);
            k += cnt;
        }
    }
    xoff[bx1 - bx0] = k;
    const size_t ss = S->stride, bs = B->F.stride;
    for (int a = 0; a < nf; a++) {
        const float *restrict sf = S->f + a * ss;
        float *restrict bf = B->F.f + a * bs;
#pragma omp simd
        for (size_t t = 0; t < k; t++) bf[t] = sf[idx[t]];
        for (size_t t = k; t < k + PSE_PAD; t++) bf[t] = a == PSE_E ? 1.0f : 0.0f; /* finite padding */
    }
    for (int a = 0; a < nd; a++) {
        const double *restrict sd = S->d + a * ss;
        double *restrict bd = B->F.d + a * bs;
#pragma omp simd
        for (size_t t = 0; t < k; t++) bd[t] = sd[idx[t]];
        for (size_t t = k; t < k + PSE_PAD; t++) bd[t] = 0.0;
    }
    return k;
}

/* Vorton q's drift (the file's comment; o[5..7] its pair sums of the kernel's first moment,
 * times `scale`), less its part along the vorton's own vorticity. */
static inline void pse_drift(const double qd[PSE_ND], const double o[8], double scale, double *out)
{
    const double w0 = qd[PSE_W0], w1 = qd[PSE_W1], w2 = qd[PSE_W2], ww = w0 * w0 + w1 * w1 + w2 * w2;
    const double d0 = scale * o[5], d1 = scale * o[6], d2 = scale * o[7];
    if (!(ww > 0)) { out[0] = out[1] = out[2] = 0.0; return; }
    const double a = (d0 * w0 + d1 * w1 + d2 * w2) / ww;
    out[0] = d0 - a * w0; out[1] = d1 - a * w1; out[2] = d2 - a * w2;
}

/* Task `task` of a pass: the vortons of one row of cells (fixed cy, cz) in x cells
 * [seg s, seg (s + 1)).  Their candidates, the vortons of the 5 x 5 rows around it (cells
 * are half the cutoff distance at the largest spacing, so every pair inside the cutoff is
 * within 2 cells on each axis), are copied into the batch ordered by x cell, then row: a
 * query's candidates, in cells cx-2 .. cx+2, are then one contiguous range, the same
 * sequence whatever the task's extent.  Each query's new vorticity and density are written
 * to the vortons' arrays and (unless guarded) its rate sum c_q / f to the sorted array;
 * guarded, only the queries in marked cells are summed.  Returns the number of queries with
 * c_q > PSE_MAX_RATE, or -1 when out of memory.  Compiled for AVX-512, AVX2 and the
 * baseline (VP_CLONES), so the pair loops take the widest vectors the CPU has. */
VP_CLONES
static long pse_task(const pse_pass *P, long task, pse_batch *B, int guarded, int uniform)
{
    const vp_bins *bins = P->bins;
    const int *nc = bins->nc, seg = P->seg;
    const size_t *start = bins->start;
    const int nseg = (nc[0] + seg - 1) / seg;
    const int sg = (int)(task % nseg), cy = (int)(task / nseg % nc[1]), cz = (int)(task / nseg / nc[1]);
    const size_t r0 = (size_t)nc[0] * ((size_t)cy + (size_t)nc[1] * (size_t)cz);
    /* own cells: the occupied ones (a sparse set's rows), or guarded the marked ones */
    const unsigned char *mk = guarded ? P->marks + r0 : NULL;
    int qx0 = seg * sg, qx1 = qx0 + seg < nc[0] ? qx0 + seg : nc[0];
    while (qx0 < qx1 && (start[r0 + qx0 + 1] == start[r0 + qx0] || (mk && !mk[qx0]))) qx0++;
    while (qx1 > qx0 && (start[r0 + qx1 - 1] == start[r0 + qx1] || (mk && !mk[qx1 - 1]))) qx1--;
    if (qx0 >= qx1) return 0;
    const int bx0 = qx0 > 2 ? qx0 - 2 : 0, bx1 = qx1 + 2 < nc[0] ? qx1 + 2 : nc[0]; /* candidate cells */
    size_t rows[25], m = 0;
    int nr = 0, own = 0;
    for (int kz = cz - 2; kz <= cz + 2; kz++)
        for (int ky = cy - 2; ky <= cy + 2; ky++) {
            if (kz < 0 || kz >= nc[2] || ky < 0 || ky >= nc[1]) continue;
            const size_t row = (size_t)nc[0] * ((size_t)ky + (size_t)nc[1] * (size_t)kz);
            if (row == r0) own = nr;
            if (start[row + bx1] > start[row + bx0]) { rows[nr++] = row; m += start[row + bx1] - start[row + bx0]; }
        }
    if (pse_batch_reserve(B, m, bx1 - bx0)) return -1;
    const int heat = P->heat;
    const pse_fields *S = &P->S;
    /* the fields the sums read: positions (unless uniform, spacings and viscosities);
     * vorticity and volumes (with heat, temperatures; guarded, the guard's scales) */
    const int nd = guarded ? PSE_ND : heat ? PSE_T + 1 : PSE_V + 1;
    if (uniform) pse_gather(S, B, start, rows, nr, bx0, bx1, PSE_Z + 1, nd);
    else pse_gather(S, B, start, rows, nr, bx0, bx1, PSE_NF, nd);
    const size_t *order = bins->order;
    long bunched = 0;
    for (int cx = qx0; cx < qx1; cx++) {
        const size_t q0 = start[r0 + cx], q1 = start[r0 + cx + 1];
        if (q0 == q1 || (mk && !mk[cx])) continue;
        const size_t b0 = B->xoff[(cx - 2 > bx0 ? cx - 2 : bx0) - bx0], b1 = B->xoff[(cx + 3 < bx1 ? cx + 3 : bx1) - bx0];
        size_t self = B->xoff[cx - bx0] - b0; /* the first query's place among the candidates */
        for (int r = 0; r < own; r++) self += start[rows[r] + cx + 1] - start[rows[r] + cx];
        const int32_t mc = (int32_t)(b1 - b0);
        for (size_t q = q0; q < q1; q++, self++) {
            float qf[PSE_NF];
            double qd[PSE_ND];
            for (int a = 0; a < PSE_NF; a++) qf[a] = PSE_F(S, a)[q];
            for (int a = 0; a < PSE_ND; a++) qd[a] = PSE_D(S, a)[q];
            double o[8];
#define PSE_SUM(H, U, G) pse_sum(&B->F, b0, B->g, B->nuij, mc, (int32_t)self, qf, qd, P->cut2, P->kappa, o, H, U, G)
            switch (4 * guarded + 2 * heat + uniform) {
            case 0: PSE_SUM(0, 0, 0); break;
            case 1: PSE_SUM(0, 1, 0); break;
            case 2: PSE_SUM(1, 0, 0); break;
            case 3: PSE_SUM(1, 1, 0); break;
            case 4: PSE_SUM(0, 0, 1); break;
            case 5: PSE_SUM(0, 1, 1); break;
            case 6: PSE_SUM(1, 0, 1); break;
            default: PSE_SUM(1, 1, 1); break;
            }
#undef PSE_SUM
            const size_t i = order[q];
            if (P->viscous) {
                P->w[3 * i] = qd[PSE_W0] + P->f * o[0];
                P->w[3 * i + 1] = qd[PSE_W1] + P->f * o[1];
                P->w[3 * i + 2] = qd[PSE_W2] + P->f * o[2];
                if (P->drift) pse_drift(qd, o, -P->f * P->len, P->drift + 3 * i);
            }
            if (heat) P->d[i] = vp_density_from_temperature(P->rho0, qd[PSE_T] + P->kdt * o[3]);
            if (!guarded) {
                PSE_D(S, PSE_S)[q] = o[4];
                bunched += P->f * o[4] > PSE_MAX_RATE;
            }
        }
    }
    return bunched;
}

/* Vorton i's viscosity nu_i (x_i its position, e_i its PSE spacing): molecular plus
 * Smagorinsky's eddy viscosity (C_s D_i)^2 sqrt(2 S:S), S the symmetric part of the grid
 * Jacobian at the vorton, capped at 0.1 e_i^2 / dt but never below the molecular value. */
static inline double pse_viscosity(const vp_grid *g, const double *jac, const double *xi, double ei, double nu,
                                   double cs, double width, double dt_step)
{
    double D = ei / width, nv = nu > 0 ? nu : 0.0;
    if (cs > 0) {
        double J[9];
        vp_grid_interp9(g, jac, xi, J);
        double ss = 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) { double S = 0.5 * (J[3 * a + b] + J[3 * b + a]); ss += S * S; }
        nv += cs * cs * D * D * sqrt(2.0 * ss);
    }
    double cap = 0.1 * ei * ei / dt_step;
    return nv < cap ? nv : (nu > cap ? nu : cap); /* never below the molecular value */
}

/* What the sorted arrays are filled from (pse_fill). */
typedef struct {
    const size_t *order;                /* the cell list's order */
    const double *x, *r, *w, *d;        /* the vortons' positions, radii, vorticity, density */
    const double *jac;                  /* the grid's velocity Jacobian (the eddy viscosity) */
    const vp_grid *grid;
    double lo[3], unit;                 /* the cell list's corner; 1 / the largest spacing */
    double width, nu, cs, dt_step, rho0;
    int heat;
} pse_input;

/* Sorted vorton q's fields (method step 5): position, spacing e = width V^(1/3), the
 * viscosity nu_i, volume, vorticity and temperature.  *rl, *vl, *el: the last radius, its
 * volume and spacing (the cube root once per run of equal radii). */
static inline void pse_fill(const pse_input *in, const pse_fields *S, size_t q, double *rl, double *vl, double *el)
{
    const size_t i = in->order[q];
    const double *xi = in->x + 3 * i, *wi = in->w + 3 * i;
    if (!(in->r[i] == *rl)) { *rl = in->r[i]; *vl = vp_volume(*rl); *el = in->width * cbrt(*vl); }
    PSE_F(S, PSE_X)[q] = (float)((xi[0] - in->lo[0]) * in->unit);
    PSE_F(S, PSE_Y)[q] = (float)((xi[1] - in->lo[1]) * in->unit);
    PSE_F(S, PSE_Z)[q] = (float)((xi[2] - in->lo[2]) * in->unit);
    PSE_F(S, PSE_E)[q] = (float)(*el * in->unit);
    PSE_F(S, PSE_NU)[q] = 0.5f * (float)pse_viscosity(in->grid, in->jac, xi, *el, in->nu, in->cs, in->width, in->dt_step);
    PSE_D(S, PSE_V)[q] = *vl;
    PSE_D(S, PSE_W0)[q] = wi[0]; PSE_D(S, PSE_W1)[q] = wi[1]; PSE_D(S, PSE_W2)[q] = wi[2];
    PSE_D(S, PSE_T)[q] = in->heat ? vp_temperature_from_density(in->rho0, in->d[i]) : 0.0;
}

/* The tasks (pse_task) with vortons of their own (and, with marks, in a marked cell) into
 * list; their number. */
static long pse_task_list(const vp_bins *bins, int seg, const unsigned char *marks, long *list)
{
    const int *nc = bins->nc;
    const int nseg = (nc[0] + seg - 1) / seg;
    long nt = 0;
    for (long row = 0; row < (long)nc[1] * nc[2]; row++) {
        const size_t *st = bins->start + (size_t)row * (size_t)nc[0];
        const unsigned char *mk = marks ? marks + (size_t)row * (size_t)nc[0] : NULL;
        for (int s = 0; s < nseg; s++) {
            const int x0 = seg * s, x1 = x0 + seg < nc[0] ? x0 + seg : nc[0];
            int any = 0;
            for (int c = x0; c < x1 && !any; c++) any = st[c + 1] > st[c] && (!mk || mk[c]);
            if (any) list[nt++] = row * nseg + s;
        }
    }
    return nt;
}

/* The pass's tasks list[0, nt) on the team, in one parallel region with (in: the first
 * pass) the sorted arrays' fill before them and the check whether every spacing and
 * viscosity is the same (then P->uniform); the bunched vortons' count (-1: out of memory). */
static long pse_run(pse_pass *P, const pse_input *in, size_t n, const long *list, long nt, int guarded, int threads)
{
    long bunched = 0;
    int nomem = 0;
    float emin = INFINITY, emax = -INFINITY, numin = INFINITY, numax = -INFINITY;
    const float *E = PSE_F(&P->S, PSE_E), *NU = PSE_F(&P->S, PSE_NU);
#pragma omp parallel num_threads(threads) if (threads > 1 && (nt > 1 || n > 4096)) reduction(+ : bunched) \
    reduction(| : nomem)
    {
        if (in) {
            double rl = NAN, vl = 0, el = 0;
            /* (dynamic chunks here and below: a thread slowed by a busy core holds up the
             * others by one chunk or task at most) */
#pragma omp for schedule(dynamic, PSE_CHUNK) reduction(min : emin, numin) reduction(max : emax, numax)
            for (long q = 0; q < (long)n; q++) {
                pse_fill(in, &P->S, (size_t)q, &rl, &vl, &el);
                emin = E[q] < emin ? E[q] : emin; emax = E[q] > emax ? E[q] : emax;
                numin = NU[q] < numin ? NU[q] : numin; numax = NU[q] > numax ? NU[q] : numax;
            }
        }
        const int uniform = in ? emin == emax && numin == numax : P->uniform;
        pse_batch B = {0};
#pragma omp for schedule(dynamic, 1) nowait
        for (long t = 0; t < nt; t++) {
            if (nomem) continue;
            const long b = pse_task(P, list[t], &B, guarded, uniform);
            if (b < 0) nomem = 1;
            else bunched += b;
        }
        free(B.mem);
    }
    if (in) P->uniform = emin == emax && numin == numax;
    return nomem ? -1 : bunched;
}

/* Stability guard for the explicit exchange.  The step changes q_i by
 *   dq_i = sum_j c_ij (q_j - q_i),   c_ij = dt norm (nu_ij, kappa) eta_ij V_j / e_ij^2,
 * a convex combination of the old values (a discrete maximum principle) as long as
 * c_i = sum_j c_ij <= 1 for every i.  On a lattice c_i is far below that, but where vortons
 * bunch up (at a body's stagnation points) c_i grows with the number of close neighbours,
 * and a bunch's alternating mode grows once c_i exceeds ~2.  Every pair that touches a
 * vorton with c_i > PSE_MAX_RATE has its exchange scaled by
 *   s_ij = min(s_i, s_j),   s_i = min(1, PSE_MAX_RATE / c_i):
 * symmetric, so strength and heat stay conserved, and afterwards every c_i <= PSE_MAX_RATE
 * (diffusion across a distance far below the core size is that fast anyway: the bunch
 * relaxes toward its mean within the step instead of overshooting).  The vortons in the
 * cells within 2 of a bunched vorton's (every vorton that pairs with one) are summed again
 * with the scales (list: room for every task), overwriting the first pass's results. */
static int pse_guard(pse_pass *P, long *list, int threads)
{
    const vp_bins *bins = P->bins;
    const int *nc = bins->nc;
    const size_t ncell = (size_t)nc[0] * (size_t)nc[1] * (size_t)nc[2], n = bins->start[ncell];
    unsigned char *marks = calloc(ncell, 1);
    if (!marks) return VP_ERR_NOMEM;
    double *sc = PSE_D(&P->S, PSE_S);
    for (size_t q = 0; q < n; q++) { /* the rate sums with the factor f, and the scales */
        const double c = P->f * sc[q];
        sc[q] = c > PSE_MAX_RATE ? PSE_MAX_RATE / c : 1.0;
    }
    for (size_t cell = 0; cell < ncell; cell++) { /* the cells within 2 of a bunched vorton's */
        int hot = 0;
        for (size_t q = bins->start[cell]; q < bins->start[cell + 1] && !hot; q++) hot = sc[q] < 1.0;
        if (!hot) continue;
        const int cx = (int)(cell % (size_t)nc[0]), cy = (int)(cell / (size_t)nc[0] % (size_t)nc[1]),
                  cz = (int)(cell / ((size_t)nc[0] * (size_t)nc[1]));
        for (int kz = cz - 2; kz <= cz + 2; kz++)
            for (int ky = cy - 2; ky <= cy + 2; ky++)
                for (int kx = cx - 2; kx <= cx + 2; kx++)
                    if (kz >= 0 && kz < nc[2] && ky >= 0 && ky < nc[1] && kx >= 0 && kx < nc[0])
                        marks[(size_t)kx + (size_t)nc[0] * ((size_t)ky + (size_t)nc[1] * (size_t)kz)] = 1;
    }
    P->marks = marks;
    const long st = pse_run(P, NULL, n, list, pse_task_list(bins, P->seg, marks, list), 1, threads);
    P->marks = NULL;
    free(marks);
    return st < 0 ? VP_ERR_NOMEM : VP_OK;
}

int vp_pse_drifts(const vp_sim *s)
{
    return (s->params.viscosity > 0 || s->params.smagorinsky > 0) && !s->params.stratification.n;
}

/* One explicit PSE exchange of length dt (the eddy viscosity's cap uses the step's dt). */
static int diffuse_pass(vp_sim *s, double dt)
{
    vp_vortons *v = &s->vortons;
    const size_t n = v->n;
    const double nu = s->params.viscosity, kappa = s->params.thermal_diffusivity, cs = s->params.smagorinsky;
    const int viscous = nu > 0 || cs > 0;
    if (n < 2 || (!viscous && kappa <= 0)) return VP_OK;
    const double *x = v->position->data, *r = v->radius->data;
    double *w = v->vorticity->data, *d = v->density->data;
    const double rho0 = s->params.ambient_density, dt_step = s->params.dt;
    const double width = s->params.pse_width, cut = s->params.pse_cutoff;
    const int threads = vp_threads(s);
    vp_bins bins = {0};
    long *list = NULL;
    int st = VP_ERR_NOMEM;

    /* The box of the positions inside the robust limits (outliers go to the cell list's edge
     * cells: they sit far from all), the largest radius and whether any density differs from
     * the ambient.  min and max are exact, so none depends on the thread count. */
    double lim_lo[3], lim_hi[3];
    vp_robust_limits(s, lim_lo, lim_hi);
    double lo0 = INFINITY, lo1 = INFINITY, lo2 = INFINITY, hi0 = -INFINITY, hi1 = -INFINITY, hi2 = -INFINITY;
    double rmax = 0;
    int any_heat = 0;
#pragma omp parallel for num_threads(threads) if (threads > 1 && n > 4096) schedule(dynamic, PSE_CHUNK) \
    reduction(min : lo0, lo1, lo2) reduction(max : hi0, hi1, hi2, rmax) reduction(| : any_heat)
    for (long i = 0; i < (long)n; i++) {
        const double cx = x[3 * i], cy = x[3 * i + 1], cz = x[3 * i + 2];
        if (cx >= lim_lo[0] && cx <= lim_hi[0]) { lo0 = cx < lo0 ? cx : lo0; hi0 = cx > hi0 ? cx : hi0; }
        if (cy >= lim_lo[1] && cy <= lim_hi[1]) { lo1 = cy < lo1 ? cy : lo1; hi1 = cy > hi1 ? cy : hi1; }
        if (cz >= lim_lo[2] && cz <= lim_hi[2]) { lo2 = cz < lo2 ? cz : lo2; hi2 = cz > hi2 ? cz : hi2; }
        rmax = r[i] > rmax ? r[i] : rmax;
        any_heat |= d[i] != 0.0;
    }
    const int heat = kappa > 0 && any_heat;
    if (!viscous && !heat) return VP_OK; /* heat alone, and the fluid is uniform */
    double lo[3] = {lo0, lo1, lo2}, hi[3] = {hi0, hi1, hi2};
    for (int a = 0; a < 3; a++)
        if (!(lo[a] <= hi[a])) lo[a] = hi[a] = 0; /* no vorton inside the limits on this axis */
    /* cells of half the cutoff distance at the largest spacing (a hair more: cbrt is not
     * guaranteed monotonic), scanned +-2 cells: 5^3 half-size cells hold 42% fewer
     * candidates than 3^3 full-size ones */
    const double emax = width * cbrt(vp_volume(rmax)) * (1.0 + 1e-12);
    if (vp_bins_build(&bins, n, x, lo, hi, 0.5 * cut * emax, 4.0 * (double)n + 64, threads)) goto fail;
    const int *nc = bins.nc;
    const size_t *order = bins.order;
    /* Tasks of whole rows, or with few rows for the team, of PSE_SEG cells (the sums are the
     * same either way: a query's candidates are the same sequence). */
    const int seg = (long)nc[1] * nc[2] >= 16L * threads ? nc[0] : PSE_SEG;
    const long ntask = (long)nc[1] * nc[2] * ((nc[0] + seg - 1) / seg);
    list = malloc(((size_t)ntask + 1) * sizeof(long));
    /* the sorted arrays: PSE_ND double fields and PSE_NF float ones; then the drifts */
    const int drifts = vp_pse_drifts(s);
    double *sc = vp_sim_scratch(s, PSE_ND * n + (PSE_NF * n + 1) / 2 + (drifts ? 3 * n : 0));
    if (!list || !sc) goto fail;
    double *drift = drifts ? sc + PSE_ND * n + (PSE_NF * n + 1) / 2 : NULL;
    pse_pass P = {.bins = &bins, .S = {.f = (float *)(sc + PSE_ND * n), .d = sc, .stride = n}, .w = w, .d = d,
                  .drift = drift,
                  .rho0 = rho0, .cut2 = (float)(cut * cut), .kappa = kappa, .viscous = viscous, .heat = heat,
                  .seg = seg};
    /* The Gaussian's second moment cut at r = cut e keeps the fraction
     *   m(c) = [ (3 sqrt(pi)/8) erf(c) - exp(-c^2) (c^3/2 + 3c/4) ] / (3 sqrt(pi)/8)
     * of the full one; dividing by it restores the exact Laplacian normalisation, so the
     * cutoff trades only quadrature, not viscosity. */
    const double m4 = 3.0 * sqrt(VP_PI) / 8.0;
    const double kept = (m4 * erf(cut) - exp(-cut * cut) * (0.5 * cut * cut * cut + 0.75 * cut)) / m4;
    const double norm = 4.0 / (VP_PI * sqrt(VP_PI)) / kept;
    /* positions and spacings in units of the largest spacing, so that the float weights
     * neither overflow nor underflow at any scale; 1 / emax^5 goes into the factors */
    const double unit = emax > 0 && isfinite(1.0 / emax) ? 1.0 / emax : 1.0, unit2 = unit * unit;
    P.f = dt * norm * (unit2 * unit2 * unit);
    P.len = 1.0 / unit;
    P.kdt = kappa * P.f;
    /* the sorted arrays filled, then the pairs summed, in one parallel region (pse_run) */
    const pse_input in = {.order = order, .x = x, .r = r, .w = w, .d = d, .jac = s->grid_jacobian, .grid = &s->grid,
                          .lo = {lo[0], lo[1], lo[2]}, .unit = unit, .width = width, .nu = nu, .cs = cs,
                          .dt_step = dt_step, .rho0 = rho0, .heat = heat};
    const long bunched = pse_run(&P, &in, n, list, pse_task_list(&bins, seg, NULL, list), 0, threads);
    if (bunched < 0) goto fail;
    if (bunched > 0 && pse_guard(&P, list, threads)) goto fail;
    if (drift) { /* the drift (pse_drift) */
        double *xw = v->position->data;
#pragma omp parallel for num_threads(threads) if (threads > 1 && n > 4096) schedule(static)
        for (long i = 0; i < (long)n; i++)
            if (d[i] == 0.0)
                for (int a = 0; a < 3; a++) xw[3 * i + a] += drift[3 * i + a];
    }
    st = VP_OK;
fail:
    free(list);
    vp_bins_free(&bins);
    return st;
}

/* Physics.md 2.5.  The explicit exchange is stable while every vorton's rate sum c_i <= 1
 * (pse_guard); on a lattice of spacing e, c = 4 nu dt / e^2 (the continuum sum).  The eddy
 * viscosity is capped inside that, but a molecular viscosity is not.  Rather than diffuse
 * less than asked (the guard alone would cap c_i at 1), the exchange then runs as
 * k = ceil(4 nu dt / e_min^2) substeps of dt / k (at most PSE_MAX_SUBSTEPS; beyond that the
 * guard keeps it stable), so the viscosity is the one asked for at k times the cost. */
int vp_diffuse(vp_sim *s)
{
    const vp_vortons *v = &s->vortons;
    const double dt = s->params.dt, width = s->params.pse_width;
    const double nu = s->params.viscosity > s->params.thermal_diffusivity ? s->params.viscosity
                                                                          : s->params.thermal_diffusivity;
    const double *rad = v->radius->data;
    double rmin = INFINITY;
#pragma omp simd reduction(min : rmin)
    for (size_t i = 0; i < v->n; i++) rmin = rad[i] < rmin ? rad[i] : rmin;
    int k = 1;
    if (v->n > 1 && nu > 0 && rmin > 0) {
        const double e = width * cbrt(vp_volume(rmin)), c = 4.0 * nu * dt / (e * e);
        if (c > 1.0) k = c < PSE_MAX_SUBSTEPS ? (int)ceil(c) : PSE_MAX_SUBSTEPS;
    }
    s->pse_substeps = k;
    for (int i = 0; i < k; i++) {
        const int st = diffuse_pass(s, dt / k);
        if (st) return st;
    }
    return VP_OK;
}
