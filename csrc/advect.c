/* advect.c: vortons and tracers moved by the grid velocity (method step 6).  Vortons, and
 * tracers fewer than the grid's nodes, interpolate the double grid; many tracers read the
 * grid regathered per cell in float32 (one contiguous read a lookup: tracers are passive,
 * so float32 costs them nothing visible).  Particles beyond the grid (outliers past the
 * robust limits, domain.c) take the solver's velocity at their position. */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "internal.h"
#include "tracer_contact.h"
#include "grid_inline.h"

/* The grid velocity regathered per cell as the coefficients of its trilinear polynomial,
 *   q(x, y, z) = a + b x + c y + d z + e x y + f x z + g y z + h x y z   (x, y, z in [0, 1]),
 * for q = [u, v, w, density deviation], in float32 and in the order a b d f c e g h (4 floats
 * each, 128 bytes a cell): a lookup is one contiguous read and four multiply-adds (cell_lerp).
 * The coefficients are differences of the corner values taken in double, so the polynomial
 * equals the corners to float rounding.  Tracers are passive, so float32 (7 digits) costs them
 * nothing visible; vortons keep the double grid.  A row of cells along x at a time: each
 * corner is [u v w rho] on one 4-double vector (the velocity's 4-lane load reads one double
 * past the node, VP_GRID_PAD, and its last lane takes the density), so a coefficient is a
 * few vector subtractions and one 16-byte store. */
typedef double vp_c4d __attribute__((vector_size(32)));
typedef float vp_c4f __attribute__((vector_size(16)));
#define CORNER4(q, node) \
    do { __builtin_memcpy(&(q), v + 3 * (node), sizeof(q)); (q)[3] = rho[node]; } while (0)
VP_CLONES
static void gather_cell_row(const double *restrict v, const double *restrict rho, size_t base, size_t sy, size_t sz,
                            long c0, float *restrict out)
{
    vp_c4d q0, q2, q4, q6; /* corner dx + 2 dy + 4 dz of the cell at i */
    CORNER4(q0, base); CORNER4(q2, base + sy); CORNER4(q4, base + sz); CORNER4(q6, base + sy + sz);
    for (long i = 0; i < c0; i++) {
        const size_t b1 = base + (size_t)i + 1;
        vp_c4d q1, q3, q5, q7;
        CORNER4(q1, b1); CORNER4(q3, b1 + sy); CORNER4(q5, b1 + sz); CORNER4(q7, b1 + sy + sz);
        const vp_c4d coef[8] = {q0, q1 - q0, q4 - q0, q5 - q4 - q1 + q0,
                                q2 - q0, q3 - q2 - q1 + q0, q6 - q4 - q2 + q0, q7 - q6 - q5 - q3 + q4 + q2 + q1 - q0};
        float *cell = out + 32 * (size_t)i;
        for (int t = 0; t < 8; t++) {
            const vp_c4f f = __builtin_convertvector(coef[t], vp_c4f);
            __builtin_memcpy(cell + 4 * t, &f, sizeof f);
        }
        q0 = q1; q2 = q3; q4 = q5; q6 = q7; /* the next cell's low corners */
    }
}
#undef CORNER4

static int gather_cell_velocity(vp_sim *s, int threads)
{
    const vp_grid *g = &s->grid;
    const long c0 = g->n[0] - 1, c1 = g->n[1] - 1, c2 = g->n[2] - 1;
    const size_t nc = (size_t)c0 * (size_t)c1 * (size_t)c2;
    if (nc > s->cell_allocated) {
        free(s->cell_velocity);
        s->cell_velocity = aligned_alloc(64, 32 * nc * sizeof(float));
        s->cell_allocated = s->cell_velocity ? nc : 0;
        if (!s->cell_velocity) return VP_ERR_NOMEM;
    }
    const size_t sy = (size_t)g->n[0], sz = (size_t)g->n[0] * (size_t)g->n[1];
    const double *v = s->grid_velocity, *rho = s->grid_density;
    float *out = s->cell_velocity;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (nc > 4096)
    for (long k = 0; k < c2; k++)
        for (long j = 0; j < c1; j++)
            gather_cell_row(v, rho, sy * (size_t)j + sz * (size_t)k, sy, sz, c0,
                            out + 32 * (size_t)c0 * ((size_t)j + (size_t)c1 * (size_t)k));
    return VP_OK;
}

/* Grid geometry for the cell lookups, hoisted out of the per-particle loop. */
typedef struct {
    double o[3], inv_h, top[3];   /* origin, 1/h, n - 1 (the last node, in cells) */
    int last[3];                  /* n - 2: the last cell */
    size_t sy, sz;                /* cell strides */
    const float *cells;           /* the gathered cells (gather_cell_velocity) */
    int prefetch;                 /* the cells exceed the L2 cache: prefetch a block's cells */
} cell_geom;

/* Cells larger than this (bytes) are prefetched a block at a time (prefetch_cells). */
#define VP_PREFETCH_CELLS_BYTES ((size_t)1 << 20)

static void cell_geom_init(cell_geom *G, const vp_grid *g, const float *cells)
{
    for (int a = 0; a < 3; a++) { G->o[a] = g->origin[a]; G->top[a] = (double)(g->n[a] - 1); G->last[a] = g->n[a] - 2; }
    G->inv_h = 1.0 / g->h;
    G->sy = (size_t)(g->n[0] - 1); G->sz = G->sy * (size_t)(g->n[1] - 1);
    G->cells = cells;
    G->prefetch = 32 * sizeof(float) * G->sz * (size_t)(g->n[2] - 1) > VP_PREFETCH_CELLS_BYTES;
}

typedef float vp_v8f __attribute__((vector_size(32)));
typedef float vp_v4f __attribute__((vector_size(16)));

/* Cell index and in-cell fractions of up to VP_TB points (SoA), clamped as vp_grid_interp clamps them.
 * A plain loop over independent points, so the compiler vectorises it across points. */
#define VP_TB 64
static inline void cell_locate(const cell_geom *G, int m, const double *restrict px, const double *restrict py,
                               const double *restrict pz, int *restrict ci, float *restrict fx, float *restrict fy,
                               float *restrict fz)
{
    const double o0 = G->o[0], o1 = G->o[1], o2 = G->o[2], ih = G->inv_h;
    const double t0 = G->top[0], t1 = G->top[1], t2 = G->top[2];
    const int l0 = G->last[0], l1 = G->last[1], l2 = G->last[2], sy = (int)G->sy, sz = (int)G->sz;
    for (int j = 0; j < m; j++) {
        double u = (px[j] - o0) * ih, v = (py[j] - o1) * ih, w = (pz[j] - o2) * ih;
        u = u > 0.0 ? (u < t0 ? u : t0) : 0.0;
        v = v > 0.0 ? (v < t1 ? v : t1) : 0.0;
        w = w > 0.0 ? (w < t2 ? w : t2) : 0.0;
        int i = (int)u, k = (int)v, l = (int)w;
        i = i < l0 ? i : l0; k = k < l1 ? k : l1; l = l < l2 ? l : l2;
        fx[j] = (float)(u - i); fy[j] = (float)(v - k); fz[j] = (float)(w - l);
        ci[j] = i + sy * k + sz * l;
    }
}

/* Both cache lines of the m cells ci, requested before any is read: with the cells far past
 * the L2 cache and tracers in random order, every lookup misses, and issuing the block's
 * misses at once overlaps them.  Cells that fit the cache gain nothing and pay the extra
 * loop, so the caller asks only above VP_PREFETCH_CELLS_BYTES. */
static inline void prefetch_cells(const float *cells, const int *ci, int m)
{
    for (int j = 0; j < m; j++) {
        const float *c = cells + 32 * (size_t)ci[j];
        __builtin_prefetch(c);
        __builtin_prefetch(c + 16);
    }
}

/* Trilinear lookup in a gathered cell at in-cell fractions f: its polynomial (see
 * gather_cell_velocity) as [a + d z + y (c + g z)] + x [b + f z + y (e + h z)], the two
 * brackets side by side in one 8-float register: three multiply-adds on 8 lanes and one on 4.
 * Returns [u, v, w, density deviation]. */
static inline vp_v4f cell_lerp(const float *cells, int ci, float f0, float f1, float f2)
{
    const vp_v8f *c = (const vp_v8f *)(cells + 32 * (size_t)ci);
    vp_v8f p = c[0] + f2 * c[1]; /* [a + d z | b + f z] */
    vp_v8f q = c[2] + f2 * c[3]; /* [c + g z | e + h z] */
    vp_v8f r = p + f1 * q;
    vp_v4f lo = {r[0], r[1], r[2], r[3]}, hi = {r[4], r[5], r[6], r[7]};
    return lo + f0 * hi;
}

/* Tracers [b0, b0 + m) (m <= 64) inside body B to its surface (tracer_contact.h): a
 * function of its own, so that the advection's loops stay small where there are no bodies. */
VP_CLONES
static int project_block(const vp_body *B, long b0, int m, double *restrict tx, double *restrict tv, int prefilter)
{
    return vp_project_tracers_block(B, b0, m, tx, tv, prefilter);
}

/* Heun (or Euler) steps of tracers [i0, i1) through the gathered cells; tracers beyond the
 * grid are left for the caller, their indices written to outliers[] and counted.  Blocks of
 * VP_TB tracers go stage by stage (locate, look up, predict, locate, look up, update), so
 * the long per-tracer dependency chain of a Heun step overlaps across the block.  Only the
 * lookups are per tracer; every other stage is a branch-free loop over the block (the
 * in-grid test, the float-to-double conversions, the update that leaves tracers beyond the
 * grid where they are), which the compiler vectorises across tracers (VP_CLONES). */
VP_CLONES
static size_t advect_cells_range(const cell_geom *G, const double glo[3], const double ghi[3], double dt, int order,
                                 long i0, long i1, double *restrict x, double *restrict vel, double *restrict dens,
                                 size_t *restrict outliers, const vp_body *bodies, int nbod)
{
    size_t n_out = 0;
    unsigned hits = 0; /* bit k: the last block projected had tracers inside body k (project_block) */
    double px[VP_TB], py[VP_TB], pz[VP_TB], ux[VP_TB], uy[VP_TB], uz[VP_TB];
    float fx[VP_TB], fy[VP_TB], fz[VP_TB];
    vp_v4f u4[VP_TB]; /* a lookup's [u v w density], one 16-byte store */
    int ci[VP_TB], in[VP_TB];
    const double lo0 = glo[0], lo1 = glo[1], lo2 = glo[2], hi0 = ghi[0], hi1 = ghi[1], hi2 = ghi[2];
    for (long b0 = i0; b0 < i1; b0 += VP_TB) {
        const int m = (int)(i1 - b0 < VP_TB ? i1 - b0 : VP_TB);
        int out = 0;
        const double *xb = x + 3 * b0;
        /* the block's velocity (and density) lines are only written: asked for now, their
         * read-for-ownership misses overlap the lookups instead of stalling the stores */
        for (int j = 0; j < 3 * m; j += 8) __builtin_prefetch(vel + 3 * b0 + j, 1);
        if (dens)
            for (int j = 0; j < m; j += 8) __builtin_prefetch(dens + b0 + j, 1);
        for (int j = 0; j < m; j++) { px[j] = xb[3 * j]; py[j] = xb[3 * j + 1]; pz[j] = xb[3 * j + 2]; }
        for (int j = 0; j < m; j++) {
            in[j] = (px[j] >= lo0) & (px[j] <= hi0) & (py[j] >= lo1) & (py[j] <= hi1) & (pz[j] >= lo2) & (pz[j] <= hi2);
            out += !in[j];
        }
        if (out)
            for (int j = 0; j < m; j++)
                if (!in[j]) outliers[n_out++] = (size_t)(b0 + j);
        cell_locate(G, m, px, py, pz, ci, fx, fy, fz);
        if (G->prefetch) prefetch_cells(G->cells, ci, m);
        for (int j = 0; j < m; j++) u4[j] = cell_lerp(G->cells, ci[j], fx[j], fy[j], fz[j]);
        for (int j = 0; j < m; j++) { ux[j] = u4[j][0]; uy[j] = u4[j][1]; uz[j] = u4[j][2]; }
        if (order >= 2 || dens) {
            /* the predictor (Heun), or the new position (Euler, for the density only) */
            double qx[VP_TB], qy[VP_TB], qz[VP_TB];
            for (int j = 0; j < m; j++) { qx[j] = px[j] + dt * ux[j]; qy[j] = py[j] + dt * uy[j]; qz[j] = pz[j] + dt * uz[j]; }
            cell_locate(G, m, qx, qy, qz, ci, fx, fy, fz);
            if (G->prefetch) prefetch_cells(G->cells, ci, m);
            /* u4[j][3]: the density at the predictor, within dt^2 |du| of the new position */
            for (int j = 0; j < m; j++) u4[j] = cell_lerp(G->cells, ci[j], fx[j], fy[j], fz[j]);
            if (order >= 2)
                for (int j = 0; j < m; j++) {
                    ux[j] = 0.5 * (ux[j] + (double)u4[j][0]); uy[j] = 0.5 * (uy[j] + (double)u4[j][1]);
                    uz[j] = 0.5 * (uz[j] + (double)u4[j][2]);
                }
            if (dens) {
                /* beyond the grid: ambient fluid, +0.0 (the density's bits ANDed with an
                 * all-ones or all-zero mask: the select in[j] ? rho : 0.0, branch-free) */
                float rf[VP_TB];
                for (int j = 0; j < m; j++) rf[j] = u4[j][3];
                for (int j = 0; j < m; j++) {
                    const double r = (double)rf[j];
                    uint64_t bits;
                    memcpy(&bits, &r, sizeof bits);
                    bits &= (uint64_t)0 - (uint64_t)in[j];
                    memcpy(dens + b0 + j, &bits, sizeof bits);
                }
            }
        }
        /* tracers beyond the grid stay where they are (the caller moves them); their velocity
         * is overwritten there too */
        double *xw = x + 3 * b0, *vw = vel + 3 * b0;
        for (int j = 0; j < m; j++) {
            /* dt or 0 (beyond the grid): arithmetic, not a select, so that the loop and its
             * interleaved stores vectorise (the velocity is finite, so 0 u adds nothing) */
            const double dj = dt * (double)in[j];
            xw[3 * j] = px[j] + dj * ux[j]; xw[3 * j + 1] = py[j] + dj * uy[j]; xw[3 * j + 2] = pz[j] + dj * uz[j];
            vw[3 * j] = ux[j]; vw[3 * j + 1] = uy[j]; vw[3 * j + 2] = uz[j];
        }
        /* the tracers that entered a body go to its surface now, while the block is in cache
         * (method step 7; one pass over the tracers instead of a second in the contact
         * phase).  A block with outliers waits for them to be moved (finish_outliers). */
        if (!out)
            for (int k = 0; k < nbod; k++) {
                const unsigned bit = k < 32 ? 1u << k : 0u; /* (bodies past 32: always prefiltered) */
                if (project_block(&bodies[k], b0, m, x, vel, !(hits & bit))) hits |= bit;
                else hits &= ~bit;
            }
    }
    return n_out;
}

/* Whether x lies in the box [lo, hi] (the grid's extent; positions are finite here: the
 * domain phase rejects anything else). */
static inline int in_box(const double x[3], const double lo[3], const double hi[3])
{
    return x[0] >= lo[0] && x[0] <= hi[0] && x[1] >= lo[1] && x[1] <= hi[1] && x[2] >= lo[2] && x[2] <= hi[2];
}

/* Particles outside the grid (outliers beyond the robust domain) take their velocity from
 * the solver evaluated directly at their position, and an Euler step.  idx: the k particles
 * that were outside before the step moved anyone (a rescan afterwards would also take the
 * particles that the grid velocity has just carried out of the grid, and move them twice). */
static int advect_outliers(vp_sim *s, double *x, double *vel, const size_t *outliers, size_t k)
{
    if (!k) return VP_OK;
    double dt = s->params.dt;
    double *p = malloc(6 * k * sizeof(double));
    size_t *idx = malloc(k * sizeof(size_t)); /* a copy: the list may live in the sim's scratch */
    if (!p || !idx) { free(p); free(idx); return VP_ERR_NOMEM; }
    memcpy(idx, outliers, k * sizeof(size_t));
    for (size_t q = 0; q < k; q++) memcpy(p + 3 * q, x + 3 * idx[q], 3 * sizeof(double));
    int st = vp_sim_velocity_at(s, k, p, p + 3 * k);
    if (!st)
        for (size_t q = 0; q < k; q++)
            for (int a = 0; a < 3; a++) {
                vel[3 * idx[q] + a] = p[3 * k + 3 * q + a];
                x[3 * idx[q] + a] += dt * vel[3 * idx[q] + a];
            }
    free(p); free(idx);
    return st;
}

/* Heun (or Euler) steps of particles [i0, i1) through the double grid velocity (vortons);
 * particles beyond the grid are left for the caller, their indices written to outliers[] and
 * counted.  Compiled for AVX-512, AVX2 + FMA and the baseline (VP_CLONES), so that each
 * lookup's three components run on one vector (vp_grid_interp3).  In blocks of NODES_TB
 * particles, stage by stage (the lookups at the positions, then at the predictors, then the
 * update), so that the lookups of a block are independent of each other and overlap in the
 * core instead of one particle's long dependency chain at a time. */
#define NODES_TB 32
VP_CLONES
static size_t advect_nodes_range(const vp_grid *g, const double *restrict gv, const double glo[3], const double ghi[3],
                                 double dt, int order, long i0, long i1, double *restrict x, double *restrict vel,
                                 size_t *restrict outliers)
{
    size_t c = 0;
    double u0[NODES_TB][3], u[NODES_TB][3], xp[NODES_TB][3], f[NODES_TB][3];
    size_t base[NODES_TB];
    int in[NODES_TB];
    for (long b0 = i0; b0 < i1; b0 += NODES_TB) {
        const int m = i1 - b0 < NODES_TB ? (int)(i1 - b0) : NODES_TB;
        double *xb = x + 3 * b0;
        /* the cells of the block, then the lookups */
        vp_grid_cells(g, m, xb, base, f);
        for (int j = 0; j < m; j++) {
            in[j] = in_box(xb + 3 * j, glo, ghi);
            if (!in[j]) outliers[c++] = (size_t)(b0 + j);
            else vp_grid_interp3_at(g, gv, base[j], f[j], u0[j]);
        }
        if (order >= 2) {
            for (int j = 0; j < m; j++) {
                const double *xi = xb + 3 * j;
                if (!in[j]) { xp[j][0] = xi[0]; xp[j][1] = xi[1]; xp[j][2] = xi[2]; continue; } /* (unused, finite) */
                xp[j][0] = xi[0] + dt * u0[j][0]; xp[j][1] = xi[1] + dt * u0[j][1]; xp[j][2] = xi[2] + dt * u0[j][2];
            }
            vp_grid_cells(g, m, &xp[0][0], base, f);
            for (int j = 0; j < m; j++) {
                if (!in[j]) continue;
                double u1[3];
                vp_grid_interp3_at(g, gv, base[j], f[j], u1);
                for (int a = 0; a < 3; a++) u[j][a] = 0.5 * (u0[j][a] + u1[a]);
            }
        } else {
            for (int j = 0; j < m; j++)
                if (in[j])
                    for (int a = 0; a < 3; a++) u[j][a] = u0[j][a];
        }
        for (int j = 0; j < m; j++) {
            if (!in[j]) continue;
            double *xi = xb + 3 * j, *vi = vel + 3 * (b0 + j);
            for (int a = 0; a < 3; a++) { xi[a] += dt * u[j][a]; vi[a] = u[j][a]; }
        }
    }
    return c;
}

/* d[i0..i1) set to +0.0, written only where some entry is not (all bits zero) already: in
 * uniform fluid a step finds the tracers' density zeroed by the last one, and reading it
 * moves half the bytes writing it does. */
static void zero_doubles(double *d, long i0, long i1)
{
    uint64_t any = 0;
    for (long i = i0; i < i1; i++) { /* the bits of each double: -0.0 and NaN count */
        uint64_t u;
        memcpy(&u, d + i, sizeof u);
        any |= u;
    }
    if (any) memset(d + i0, 0, (size_t)(i1 - i0) * sizeof(double));
}

static void grid_box(const vp_grid *g, double glo[3], double ghi[3])
{
    for (int a = 0; a < 3; a++) { glo[a] = g->origin[a]; ghi[a] = g->origin[a] + g->h * (g->n[a] - 1); }
}

/* The outlier lists of nb blocks of `block` particles (n indices, then nb counts), in the
 * sim's scratch. */
static size_t *outlier_lists(vp_sim *s, size_t n, long nb)
{
    return (size_t *)vp_sim_scratch(s, n + (size_t)nb);
}

/* After the blocks: the outliers (packed in order, n_out <= b * block: nothing is
 * overwritten early) move by the solver's velocity at their position, and the blocks of 64
 * (advect_cells_range's) that held outliers are projected out of the nbod bodies (those the
 * blocks saw), now that they have moved: each tracer once per body, bodies in order, as in
 * vp_sim_collide. */
static int finish_outliers(vp_sim *s, size_t n, double *x, double *vel, size_t *oidx, const size_t *ocnt, long nb,
                           long block, const vp_body *bodies, size_t nbod)
{
    size_t n_out = 0;
    for (long b = 0; b < nb; b++)
        for (size_t q = 0; q < ocnt[b]; q++) oidx[n_out++] = oidx[b * block + (long)q];
    if (!n_out) return VP_OK;
    int st = advect_outliers(s, x, vel, oidx, n_out);
    if (st || !nbod) return st;
    for (size_t q = 0, last = SIZE_MAX; q < n_out; q++) {
        const size_t b0 = oidx[q] / 64 * 64;
        if (b0 == last) continue;
        last = b0;
        const int m = (int)(n - b0 < 64 ? n - b0 : 64);
        for (size_t k = 0; k < nbod; k++) project_block(&bodies[k], (long)b0, m, x, vel, 1);
    }
    return VP_OK;
}

/* Advection through the double grid velocity (vortons, and tracers fewer than the nodes);
 * tracers with many per node take the gathered float32 cells (advect_tracer_cells). */
static int advect_nodes(vp_sim *s, size_t n, double *x, double *vel)
{
    const int threads = vp_threads(s);
    (void)threads;
    const vp_grid *g = &s->grid;
    const double dt = s->params.dt;
    const int order = s->params.advect_order;
    double glo[3], ghi[3];
    grid_box(g, glo, ghi);
    const long block = 64, nb = ((long)n + block - 1) / block;
    size_t *oidx = outlier_lists(s, n, nb), *ocnt = oidx ? oidx + n : NULL;
    if (!oidx) return VP_ERR_NOMEM;
    const long chunk = vp_block_size(nb, threads, 16); /* (16 blocks: ~50 us) */
    (void)chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, chunk) if (nb >= 2 * chunk)
    for (long b = 0; b < nb; b++) {
        const long i1 = vp_block_end(b, block, (long)n);
        ocnt[b] = advect_nodes_range(g, s->grid_velocity, glo, ghi, dt, order, b * block, i1, x, vel, oidx + b * block);
    }
    return finish_outliers(s, n, x, vel, oidx, ocnt, nb, block, NULL, 0);
}

/* Phase 6 (method step 6): the vortons move with the grid velocity.  Order 2 is Heun's
 * method in the frozen field of this step (u at x and at the Euler predictor, averaged);
 * order 1 is the seeds' explicit Euler.  The velocity used is cached on the particle. */
int vp_advect_vortons(vp_sim *s)
{
    if (!s->vortons.n) return VP_OK;
    return advect_nodes(s, s->vortons.n, s->vortons.position->data, s->vortons.velocity->data);
}

/* Whether the tracers take the cell path (many tracers per node: the cells are gathered
 * once, then a lookup is one read). */
static int tracers_use_cells(const vp_sim *s)
{
    const size_t nn = vp_grid_count(&s->grid);
    return s->tracers.n >= nn && nn < (size_t)1 << 30;
}

/* Whether the density grid holds any nonzero value.  Called after this step's splat, which
 * sets density_flat when every vorton is at the ambient density: the grid is then all zero,
 * and its scan (a whole pass over the grid in uniform fluid) is not needed. */
static int density_nonuniform(const vp_sim *s)
{
    if (s->density_flat) return 0;
    const size_t nn = vp_grid_count(&s->grid);
    int any = 0;
    for (size_t k = 0; k < nn && !any; k++) any = s->grid_density[k] != 0.0;
    return any;
}

/* The tracers' cell path: the cells gathered, the tracers moved in blocks (and projected out
 * of the bodies, advect_cells_range), then the outliers moved by the solver (finish_outliers).
 * Blocks of 2048 tracers, or 512 below 2^18 tracers, so that a few ten thousand still
 * split evenly between threads.  Each block's outliers go to oidx[i0 ...], their count to
 * ocnt[b]. */
static int advect_tracer_cells(vp_sim *s)
{
    vp_tracers *t = &s->tracers;
    const int threads = vp_threads(s);
    int st = gather_cell_velocity(s, threads);
    if (st) return st;
    const long n = (long)t->n, block = n < (1L << 18) ? 512 : 2048, nb = (n + block - 1) / block;
    size_t *oidx = outlier_lists(s, t->n, nb), *ocnt = oidx ? oidx + t->n : NULL;
    if (!oidx) return VP_ERR_NOMEM;
    const int any = density_nonuniform(s); /* else uniform ambient fluid: nothing to sample */
    double *x = t->position->data, *vel = t->velocity->data, *dens = t->density->data;
    const double dt = s->params.dt;
    const int order = s->params.advect_order, nbod = (int)s->n_bodies;
    double glo[3], ghi[3];
    grid_box(&s->grid, glo, ghi);
    cell_geom G;
    cell_geom_init(&G, &s->grid, s->cell_velocity);
    const long chunk = vp_block_size(nb, threads, 1);
    (void)chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, chunk) if (n > 4096)
    for (long b = 0; b < nb; b++) {
        const long i0 = b * block, i1 = vp_block_end(b, block, n);
        ocnt[b] = advect_cells_range(&G, glo, ghi, dt, order, i0, i1, x, vel, any ? dens : NULL, oidx + i0, s->bodies,
                                     nbod);
        if (!any) zero_doubles(dens, i0, i1);
    }
    return finish_outliers(s, t->n, x, vel, oidx, ocnt, nb, block, s->bodies, (size_t)nbod);
}

/* With a stratification (method step 4) the grid holds the deviation from the ambient: the
 * tracers' density is the ambient's at their place plus it, relative to rho0 like the
 * vortons' densities, so that dye shows the layers. */
static void tracers_add_ambient(vp_sim *s)
{
    vp_tracers *t = &s->tracers;
    const int threads = vp_threads(s);
    (void)threads;
    const long n = (long)t->n, block = 256, nb = (n + block - 1) / block;
    const double *x = t->position->data;
    double *d = t->density->data;
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 4096)
    for (long b = 0; b < nb; b++) {
        double e[256];
        const long i0 = b * block, i1 = vp_block_end(b, block, n);
        vp_ambient_deviation(&s->params, (size_t)(i1 - i0), x + 3 * i0, e);
        for (long i = i0; i < i1; i++) d[i] += e[i - i0];
    }
}

/* Phase 6 (method step 6) for the tracers, as for the vortons; they also sample the density
 * grid, so dye can be coloured by density or temperature.  The cell path also projects the
 * tracers that entered a body to its surface (vp_collide's tracer pass then has nothing to
 * do: *projected = 1); the node path does not (0). */
int vp_advect_tracers(vp_sim *s, int *projected)
{
    vp_tracers *t = &s->tracers;
    *projected = 0;
    if (!t->n) return VP_OK;
    int st;
    if (tracers_use_cells(s)) {
        *projected = 1;
        st = advect_tracer_cells(s);
    } else {
        const int threads = vp_threads(s);
        (void)threads;
        double *x = t->position->data, *d = t->density->data;
        st = advect_nodes(s, t->n, x, t->velocity->data);
        if (st) return st;
        if (density_nonuniform(s)) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4096)
            for (long i = 0; i < (long)t->n; i++) vp_grid_interp(&s->grid, s->grid_density, 1, x + 3 * i, d + i);
        } else {
            memset(d, 0, t->n * sizeof(double)); /* uniform ambient fluid: nothing to sample */
        }
    }
    if (!st && s->params.stratification.n) tracers_add_ambient(s);
    return st;
}
