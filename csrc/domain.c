/* domain.c: the grid's extent from the vortons (method step 1, open boundaries).  The grid
 * covers every vorton inside robust limits (quantiles of a sample widened by their spread), so
 * that a few far outliers cannot stretch it; outliers, and tracers beyond the grid, move by the
 * solver instead (advect.c).  Diffusion and remeshing share the limits. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "grid_inline.h"

static size_t vp_gcd(size_t a, size_t b)
{
    while (b) { size_t t = a % b; a = b; b = t; }
    return a;
}

/* The k-th smallest (high = 0) or the k-th largest (high = 1) of buf[0..m) (0-based; k < 64)
 * in one pass, kept in a small sorted array: the robust limits need the 0.5% and 99.5%
 * quantiles of a 4096-point sample, i.e. k ~ 20, where this is much cheaper than a
 * quickselect.  NaNs are never taken. */
static double select_tail_scan(const double *buf, size_t m, size_t k, double sg)
{
    double t[64];
    for (size_t i = 0; i <= k; i++) t[i] = INFINITY;
    for (size_t i = 0; i < m; i++) {
        double v = sg * buf[i];
        if (v < t[k]) { size_t j = k; while (j > 0 && t[j - 1] > v) { t[j] = t[j - 1]; j--; } t[j] = v; }
    }
    return t[k];
}

/* The same value in two cheaper passes.  The minima of blocks of SELECT_BLOCK values are
 * taken (vectorised), and T, the k-th smallest of them, is a bound: the k + 1 smallest block
 * minima are k + 1 distinct values <= T, so the k-th smallest value is <= T too.  The values
 * <= T (a few dozen for these quantiles) are then collected and the scan above runs over
 * them alone. */
#define SELECT_BLOCK 64
#define SELECT_MAX_BLOCKS 1024
#define SELECT_MAX_CANDIDATES 512
VP_CLONES
static double select_tail(const double *buf, size_t m, size_t k, int high)
{
    const double sg = high ? -1.0 : 1.0; /* the largest of buf are the smallest of -buf */
    const size_t nb = m / SELECT_BLOCK;
    if (nb < k + 1 || nb > SELECT_MAX_BLOCKS) return sg * select_tail_scan(buf, m, k, sg);
    double bmin[SELECT_MAX_BLOCKS], c[SELECT_MAX_CANDIDATES];
    for (size_t b = 0; b < nb; b++) { /* (the last m mod SELECT_BLOCK values join no block) */
        const double *p = buf + b * SELECT_BLOCK;
        double mn = INFINITY;
#pragma omp simd reduction(min : mn)
        for (int u = 0; u < SELECT_BLOCK; u++) { const double v = sg * p[u]; mn = v < mn ? v : mn; }
        bmin[b] = mn;
    }
    const double T = select_tail_scan(bmin, nb, k, 1.0);
    size_t nc = 0;
    for (size_t i = 0; i < m; i += 16) {
        const size_t e = i + 16 < m ? i + 16 : m;
        int any = 0;
#pragma omp simd reduction(| : any)
        for (size_t u = i; u < e; u++) any |= sg * buf[u] <= T;
        if (!any) continue;
        for (size_t u = i; u < e; u++) {
            const double v = sg * buf[u];
            if (!(v <= T)) continue;
            if (nc == SELECT_MAX_CANDIDATES) return sg * select_tail_scan(buf, m, k, sg); /* many ties */
            c[nc++] = v;
        }
    }
    return sg * select_tail_scan(c, nc, k, 1.0);
}

/* The sample's size m and scrambling step (see robust limits below), and the ranks of its low
 * and high quantiles. */
static void limits_plan(size_t n, size_t *m, size_t *step, size_t *klo, size_t *khi)
{
    *m = n < 4096 ? n : 4096;
    *step = (size_t)(0.6180339887 * (double)*m) | 1;
    while (vp_gcd(*step, *m) != 1) *step += 2;
    *klo = (size_t)(0.005 * (*m - 1)); *khi = *m - 1 - (size_t)(0.995 * (*m - 1));
}

/* The robust limits (method step 1) of the vortons' positions: per axis, the 0.5% and 99.5%
 * quantiles of a sample of up to 4096 of them, widened by their distance on both sides;
 * infinite below 200 vortons.  The sample is taken in a scrambled order (sample j at slot
 * (j step) mod m, step coprime to m near m / golden ratio): particles come in emission order,
 * so a plume's heights rise along the plain order and many samples would be new maxima that
 * select_tail has to insert.  The quantiles do not depend on the order. */
void vp_robust_limits(const vp_sim *s, double lim_lo[3], double lim_hi[3])
{
    const size_t n = s->vortons.n;
    for (int a = 0; a < 3; a++) { lim_lo[a] = -INFINITY; lim_hi[a] = INFINITY; }
    if (n < 200) return;
    size_t m, step, klo, khi;
    limits_plan(n, &m, &step, &klo, &khi);
    double *buf = malloc(3 * m * sizeof(double));
    if (!buf) return; /* no limits: the plain bounding box */
    const double *x = s->vortons.position->data;
    for (size_t k = 0, j = 0; k < m; k++) {
        const double *p = x + 3 * (size_t)(((double)j + 0.5) * (double)n / (double)m);
        buf[k] = p[0]; buf[m + k] = p[1]; buf[2 * m + k] = p[2];
        j += step; /* (k + 1) step mod m: step < m */
        if (j >= m) j -= m;
    }
    for (int a = 0; a < 3; a++) {
        const double lo = select_tail(buf + a * m, m, klo, 0), hi = select_tail(buf + a * m, m, khi, 1), w = hi - lo;
        if (w > 0) { lim_lo[a] = lo - w; lim_hi[a] = hi + w; }
    }
    free(buf);
}

/* The vectorised body of point_bounds over runs [r0, r1) of 12 doubles. */
VP_CLONES
static void bounds_runs(const double *restrict t, long r0, long r1, const double *restrict L, const double *restrict H,
                        double *restrict m1, double *restrict m2, double *restrict b1)
{
    for (long r = r0; r < r1; r++) {
        const double *c = t + 12 * r;
        for (int j = 0; j < 12; j++) {
            double v = c[j];
            b1[j] += v * 0.0; /* NaN once any coordinate is NaN or infinite */
            double a = (v >= L[j] && v <= H[j]) ? v : INFINITY, b = (v >= L[j] && v <= H[j]) ? v : -INFINITY;
            m1[j] = a < m1[j] ? a : m1[j];
            m2[j] = b > m2[j] ? b : m2[j];
        }
    }
}

/* Per-lane min, max and non-finite detector of coordinates read in runs of 12 doubles (4
 * points: every lane sees one axis), for point_bounds.  Min and max are
 * exact, so the order in which shares are merged does not matter. */
typedef struct { double mn[12], mx[12], bad[12]; } box12;
#define BOUNDS_CHUNK 1024 /* runs of 12 doubles a chunk of the parallel passes */

static void box12_init(box12 *b)
{
    for (int j = 0; j < 12; j++) { b->mn[j] = INFINITY; b->mx[j] = -INFINITY; b->bad[j] = 0; }
}

/* The coordinates of t (n points) past its last whole run. */
static void box12_tail(box12 *b, const double *t, size_t n, const double L[12], const double H[12])
{
    for (long k = 12 * (3 * (long)n / 12); k < 3 * (long)n; k++) {
        double c = t[k]; int j = (int)(k % 3);
        b->bad[j] += c * 0.0;
        if (c >= L[j] && c <= H[j]) { b->mn[j] = c < b->mn[j] ? c : b->mn[j]; b->mx[j] = c > b->mx[j] ? c : b->mx[j]; }
    }
}

/* A thread's own box merged into the shared b (min and max are exact: any order of merges
 * gives the same b). */
static void box12_merge(box12 *b, const box12 *own)
{
#pragma omp critical(vp_box12)
    for (int j = 0; j < 12; j++) {
        b->mn[j] = own->mn[j] < b->mn[j] ? own->mn[j] : b->mn[j]; b->mx[j] = own->mx[j] > b->mx[j] ? own->mx[j] : b->mx[j];
        b->bad[j] += own->bad[j];
    }
}

/* The box per axis (lo > hi when empty); nonzero if any coordinate was not finite. */
static int box12_result(const box12 *b, double lo[3], double hi[3])
{
    int nonfinite = 0;
    for (int a = 0; a < 3; a++) { lo[a] = INFINITY; hi[a] = -INFINITY; }
    for (int j = 0; j < 12; j++) {
        nonfinite |= b->bad[j] != 0.0;
        lo[j % 3] = b->mn[j] < lo[j % 3] ? b->mn[j] : lo[j % 3];
        hi[j % 3] = b->mx[j] > hi[j % 3] ? b->mx[j] : hi[j % 3];
    }
    return nonfinite;
}

/* Min and max per axis of n points' coordinates t (vortons' or tracers') inside the robust
 * limits (coordinates outside count as absent); nonzero if any coordinate is not finite.
 * The positions are read as one flat array in runs of 12 doubles (box12), so the loop
 * vectorises; the result does not depend on the thread count. */
static int point_bounds(const double *t, size_t n, int threads, const double lim_lo[3], const double lim_hi[3],
                        double lo[3], double hi[3])
{
    double L[12], H[12];
    for (int j = 0; j < 12; j++) { L[j] = lim_lo[j % 3]; H[j] = lim_hi[j % 3]; }
    box12 b;
    box12_init(&b);
    box12_tail(&b, t, n, L, H);
    const long runs = 3 * (long)n / 12, nch = (runs + BOUNDS_CHUNK - 1) / BOUNDS_CHUNK;
    (void)threads;
#pragma omp parallel num_threads(threads) if (runs > 8192)
    {
        box12 own;
        box12_init(&own);
#pragma omp for schedule(dynamic, 1) nowait
        for (long c = 0; c < nch; c++)
            bounds_runs(t, c * BOUNDS_CHUNK, vp_block_end(c, BOUNDS_CHUNK, runs), L, H, own.mn, own.mx, own.bad);
        box12_merge(&b, &own);
    }
    return box12_result(&b, lo, hi);
}

/* Phase 1 (method step 1): the grid follows the vortons (open boundaries).  It covers every
 * vorton inside the robust limits, padded by three core radii and a cell, with cubic cells
 * sized for grid_cells_per_vorton cells per vorton, never more than grid_max_points nodes.
 * Tracers do not shape it: they are passive, so the vortons move the same with or without
 * them; those beyond it move by the solver (advect.c).  Also checks that every position is
 * finite. */
int vp_domain_update(vp_sim *s)
{
    const int threads = vp_threads(s);
    const size_t nv = s->vortons.n, nt = s->tracers.n;
    double lo[3], hi[3], lim_lo[3], lim_hi[3], smax = 0;
    const double all_lo[3] = {-INFINITY, -INFINITY, -INFINITY}, all_hi[3] = {INFINITY, INFINITY, INFINITY};
    vp_robust_limits(s, lim_lo, lim_hi);
    if (point_bounds(nv ? s->vortons.position->data : NULL, nv, threads, lim_lo, lim_hi, lo, hi)) return VP_ERR_NONFINITE;
    if (nt) {
        double tlo[3], thi[3];
        if (point_bounds(s->tracers.position->data, nt, threads, all_lo, all_hi, tlo, thi)) return VP_ERR_NONFINITE;
    }
    const double *r = nv ? s->vortons.radius->data : NULL;
    for (size_t i = 0; i < nv; i++) smax = r[i] > smax ? r[i] : smax;
    if (!(lo[0] <= hi[0]) || !(lo[1] <= hi[1]) || !(lo[2] <= hi[2])) {
        lo[0] = lo[1] = lo[2] = -1; hi[0] = hi[1] = hi[2] = 1;
        if (smax == 0) smax = 0.1;
    }
    double pad = 3.0 * smax, vol = 1.0, ext[3];
    for (int a = 0; a < 3; a++) { lo[a] -= pad; hi[a] += pad; ext[a] = hi[a] - lo[a]; if (ext[a] <= 0) ext[a] = 1e-9; vol *= ext[a]; }
    double target = s->params.grid_cells_per_vorton * (double)(s->vortons.n > 8 ? s->vortons.n : 8);
    double h = cbrt(vol / target);
    for (int a = 0; a < 3; a++) if (h < ext[a] * 1e-4) h = ext[a] * 1e-4; /* bound aspect ratio */
    int n[3];
    for (;;) {
        double tot = 1;
        for (int a = 0; a < 3; a++) { n[a] = (int)ceil(ext[a] / h) + 2; tot *= n[a]; }
        if (tot <= (double)s->params.grid_max_points || tot <= 27) break;
        h *= 1.05;
    }
    vp_grid *g = &s->grid;
    g->h = h;
    for (int a = 0; a < 3; a++) {
        g->n[a] = n[a];
        g->origin[a] = 0.5 * (lo[a] + hi[a]) - 0.5 * (n[a] - 1) * h;
    }
    size_t nn = vp_grid_count(g);
    if (nn > s->grid_allocated) {
        /* the 3-component fields end in VP_GRID_PAD zeros, read by vp_grid_interp3's last lane */
        double *a = realloc(s->grid_velocity, (3 * nn + VP_GRID_PAD) * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_velocity = a;
        memset(a + 3 * nn, 0, VP_GRID_PAD * sizeof(double));
        a = realloc(s->grid_jacobian, 9 * nn * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_jacobian = a;
        a = realloc(s->grid_density, nn * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_density = a;
        a = realloc(s->grid_density_gradient, (3 * nn + VP_GRID_PAD) * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_density_gradient = a;
        memset(a + 3 * nn, 0, VP_GRID_PAD * sizeof(double));
        s->grid_allocated = nn;
    }
    return VP_OK;
}

