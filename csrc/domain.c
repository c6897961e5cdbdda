/* domain.c: the grid's extent from the particles (physics.md 2.1, open boundaries).  The grid
 * covers every vorton and tracer inside robust limits (quantiles of a sample widened by their
 * spread), so that a few far outliers cannot stretch it; outliers move by the solver instead
 * (advect.c).  Diffusion and remeshing share the limits. */
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

/* The robust limits' sample of m of the n = nv + nt points (vortons, then tracers): at
 * slot k, for k in [k0, k1), point i = (j + 1/2) n / m with j = (k * step) mod m.  The
 * reads are scrambled and the writes are not: a thread's slots are its own cache lines
 * (scrambled writes from two threads shared every line of the buffer, and the sample took
 * as long on two threads as on one). */
static void limits_sample(const vp_sim *s, size_t nv, size_t n, size_t m, size_t step, long k0, long k1, double *buf)
{
    size_t j = (size_t)k0 * step % m;
    for (long kk = k0; kk < k1; kk++) {
        const size_t k = (size_t)kk, i = (size_t)(((double)j + 0.5) * (double)n / (double)m);
        const double *p = i < nv ? s->vortons.position->data + 3 * i : s->tracers.position->data + 3 * (i - nv);
        buf[k] = p[0]; buf[m + k] = p[1]; buf[2 * m + k] = p[2];
        j += step; /* (k + 1) step mod m: step < m */
        if (j >= m) j -= m;
    }
}

/* The sample's size m and scrambling step (see vp_robust_limits), and the ranks of its low
 * and high quantiles. */
static void limits_plan(size_t n, size_t *m, size_t *step, size_t *klo, size_t *khi)
{
    *m = n < 4096 ? n : 4096;
    *step = (size_t)(0.6180339887 * (double)*m) | 1;
    while (vp_gcd(*step, *m) != 1) *step += 2;
    *klo = (size_t)(0.005 * (*m - 1)); *khi = *m - 1 - (size_t)(0.995 * (*m - 1));
}

/* The sample's slots are taken in blocks of LIMITS_BLOCK (whole cache lines of every axis). */
#define LIMITS_BLOCK 512

/* The limits from the six quantiles q (low and high per axis). */
static void limits_from(const double q[6], double lim_lo[3], double lim_hi[3])
{
    for (int a = 0; a < 3; a++) {
        lim_lo[a] = -INFINITY; lim_hi[a] = INFINITY;
        double lo = q[2 * a], hi = q[2 * a + 1], w = hi - lo;
        if (w <= 0) continue;
        lim_lo[a] = lo - w;
        lim_hi[a] = hi + w;
    }
}

/* The robust limits (physics.md 2.1) of the vortons' positions (and with_tracers the
 * tracers'), on `threads` threads: per axis, the 0.5% and 99.5% quantiles of a sample widened
 * by their distance on both sides (limits_from); infinite below 200 points. */
static void robust_limits(const vp_sim *s, int with_tracers, double lim_lo[3], double lim_hi[3], int threads)
{
    size_t nv = s->vortons.n, nt = with_tracers ? s->tracers.n : 0, n = nv + nt;
    for (int a = 0; a < 3; a++) { lim_lo[a] = -INFINITY; lim_hi[a] = INFINITY; }
    if (n < 200) return;
    size_t m, step, klo, khi;
    limits_plan(n, &m, &step, &klo, &khi);
    double *buf = malloc(3 * m * sizeof(double));
    if (!buf) return; /* no limits: the plain bounding box */
    /* the sample, all three coordinates of a point at once: one cache miss per point (a pass
     * per axis tripled them, and with the tracers out of cache that was most of the phase).
     * It is taken in a scrambled order, sample j = (k * step) mod m at slot k, with step
     * coprime to m near m / golden ratio: the particles come in emission order, so a plume's
     * heights rise along the plain order and many samples would be new maxima that
     * select_tail has to insert; scrambled, new extremes are rare.  The quantiles do not
     * depend on the order.  The sample and the six selections (3 axes, low and high) are
     * shared by the threads. */
    double q[6];
    if (m >= 1024 && threads > 1) {
        const long nb = ((long)m + LIMITS_BLOCK - 1) / LIMITS_BLOCK;
#pragma omp parallel num_threads(threads)
        {
#pragma omp for schedule(dynamic, 1)
            for (long b = 0; b < nb; b++)
                limits_sample(s, nv, n, m, step, b * LIMITS_BLOCK, vp_block_end(b, LIMITS_BLOCK, (long)m), buf);
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < 6; t++) q[t] = select_tail(buf + (t / 2) * m, m, t % 2 ? khi : klo, t % 2);
        }
    } else { /* (a parallel region of one thread costs more than a small sample takes) */
        limits_sample(s, nv, n, m, step, 0, (long)m, buf);
        for (int t = 0; t < 6; t++) q[t] = select_tail(buf + (t / 2) * m, m, t % 2 ? khi : klo, t % 2);
    }
    limits_from(q, lim_lo, lim_hi);
    free(buf);
}

void vp_robust_limits(const vp_sim *s, int with_tracers, double lim_lo[3], double lim_hi[3])
{
    robust_limits(s, with_tracers, lim_lo, lim_hi, vp_threads(s));
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

/* bounds_runs without limits (domain_bounds' pass over all points): the same min and max
 * (a NaN coordinate is skipped by both), on 4-double vectors (GCC's generic vectors: the
 * clones' MINPD and MAXPD, or compare-and-blend) where GCC keeps 12 scalar lanes otherwise. */
typedef long long vp_v4l __attribute__((vector_size(32)));
VP_CLONES
static void bounds_runs_free(const double *restrict t, long r0, long r1, double *restrict m1, double *restrict m2,
                             double *restrict b1)
{
    vp_v4d mn[3], mx[3], bad[3];
    memcpy(mn, m1, sizeof mn); memcpy(mx, m2, sizeof mx); memcpy(bad, b1, sizeof bad);
    for (long r = r0; r < r1; r++)
        for (int k = 0; k < 3; k++) {
            vp_v4d v;
            memcpy(&v, t + 12 * r + 4 * k, sizeof v);
            bad[k] += v * 0.0; /* NaN once any coordinate is NaN or infinite */
            const vp_v4l lt = v < mn[k], gt = v > mx[k];
            mn[k] = (vp_v4d)(((vp_v4l)v & lt) | ((vp_v4l)mn[k] & ~lt));
            mx[k] = (vp_v4d)(((vp_v4l)v & gt) | ((vp_v4l)mx[k] & ~gt));
        }
    memcpy(m1, mn, sizeof mn); memcpy(m2, mx, sizeof mx); memcpy(b1, bad, sizeof bad);
}

/* Per-lane min, max and non-finite detector of coordinates read in runs of 12 doubles (4
 * points: every lane sees one axis), for point_bounds and domain_bounds.  Min and max are
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

/* The inverse of a modulo m (a and m coprime), by Euclid's extended algorithm. */
static size_t inverse_mod(size_t a, size_t m)
{
    long t = 0, t1 = 1, r = (long)m, r1 = (long)(a % m);
    while (r1) {
        const long qt = r / r1, tt = t - qt * t1, rr = r - qt * r1;
        t = t1; t1 = tt; r = r1; r1 = rr;
    }
    return (size_t)(t < 0 ? t + (long)m : t);
}

/* The robust limits' sample slots (limits_sample's) that hold points [g0, g1) (global
 * indices: vortons, then tracers), filled from those points: sample j is point
 * i = (j + 1/2) n / m, by limits_sample's expression, and goes to slot k = j inv mod m
 * (inv: step's inverse), so that slot k holds sample (k step) mod m as there.  The same
 * sample, taken where a sequential pass reads the points (domain_bounds). */
static void sample_points(const vp_sim *s, size_t nv, size_t n, size_t m, size_t inv, size_t g0, size_t g1,
                          double *buf)
{
    if (g1 <= g0) return;
    size_t j = (size_t)((double)g0 * (double)m / (double)n);
    j = j > 1 ? j - 2 : 0; /* (every earlier sample lies before g0) */
    for (; j < m; j++) {
        const size_t i = (size_t)(((double)j + 0.5) * (double)n / (double)m);
        if (i < g0) continue;
        if (i >= g1) break;
        const double *p = i < nv ? s->vortons.position->data + 3 * i : s->tracers.position->data + 3 * (i - nv);
        const size_t k = j * inv % m;
        buf[k] = p[0]; buf[m + k] = p[1]; buf[2 * m + k] = p[2];
    }
}

/* The boxes of phase 1: the vortons' (vlo, vhi) and the tracers' (tlo, thi) coordinates
 * inside the robust limits (vp_robust_limits over both sets; coordinates outside count as
 * absent), as vp_robust_limits and point_bounds give them, in one parallel region and,
 * usually, one pass over the positions: each thread takes the unconstrained min and max of
 * its share of both sets (and the finiteness check), then its share of the limits' sample
 * (the points mostly still in cache), then the selections.  When a set's unconstrained box
 * lies inside the limits (no outliers: the usual case) it is the constrained box; otherwise
 * that set is scanned again with the limits.  Min and max are exact, so the boxes do not
 * depend on the thread count.  Nonzero if any coordinate is not finite. */
static int domain_bounds(vp_sim *s, double vlo[3], double vhi[3], double tlo[3], double thi[3], double *rmax)
{
    const size_t nv = s->vortons.n, nt = s->tracers.n, n = nv + nt;
    const double *xv = nv ? s->vortons.position->data : NULL, *xt = nt ? s->tracers.position->data : NULL;
    const int threads = vp_threads(s);
    double lim_lo[3] = {-INFINITY, -INFINITY, -INFINITY}, lim_hi[3] = {INFINITY, INFINITY, INFINITY};
    size_t m = 0, step = 1, klo = 0, khi = 0;
    double *buf = NULL;
    if (n >= 200) {
        limits_plan(n, &m, &step, &klo, &khi);
        buf = malloc(3 * m * sizeof(double)); /* none: no limits, the plain boxes */
    }
    const double *xs[2] = {xv, xt};
    const size_t ns[2] = {nv, nt};
    double L[12], H[12], q[6];
    for (int j = 0; j < 12; j++) { L[j] = -INFINITY; H[j] = INFINITY; }
    box12 b[2];
    for (int c = 0; c < 2; c++) { box12_init(&b[c]); box12_tail(&b[c], xs[c], ns[c], L, H); }
    const double *r = nv ? s->vortons.radius->data : NULL;
    double smax = 0;
    const long runs[2] = {3 * (long)nv / 12, 3 * (long)nt / 12}, nch0 = (runs[0] + BOUNDS_CHUNK - 1) / BOUNDS_CHUNK,
               nch = nch0 + (runs[1] + BOUNDS_CHUNK - 1) / BOUNDS_CHUNK;
    const size_t inv = buf ? inverse_mod(step, m) : 0, g_base[2] = {0, nv};
    if (buf) /* the sample's points past the sets' whole runs (the chunks take the rest) */
        for (int c = 0; c < 2; c++) sample_points(s, nv, n, m, inv, g_base[c] + 4 * (size_t)runs[c], g_base[c] + ns[c], buf);
    (void)threads;
#pragma omp parallel num_threads(threads) if (3 * (long)n / 12 > 8192 || m >= 1024)
    {
        box12 own[2];
        box12_init(&own[0]); box12_init(&own[1]);
#pragma omp for schedule(dynamic, 1) nowait
        for (long c = 0; c < nch; c++) {
            const int set = c >= nch0;
            const long c0 = set ? c - nch0 : c, r0 = c0 * BOUNDS_CHUNK, r1 = vp_block_end(c0, BOUNDS_CHUNK, runs[set]);
            bounds_runs_free(xs[set], r0, r1, own[set].mn, own[set].mx, own[set].bad);
            if (buf) sample_points(s, nv, n, m, inv, g_base[set] + 4 * (size_t)r0, g_base[set] + 4 * (size_t)r1, buf);
        }
        for (int c = 0; c < 2; c++) box12_merge(&b[c], &own[c]);
        /* the largest radius (the grid's padding), exact */
#pragma omp for schedule(static) reduction(max : smax) nowait
        for (long i = 0; i < (long)nv; i++) smax = r[i] > smax ? r[i] : smax;
        if (buf) { /* the sample is complete: the six selections, shared */
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < 6; t++) q[t] = select_tail(buf + (t / 2) * m, m, t % 2 ? khi : klo, t % 2);
        }
    }
    *rmax = smax;
    if (buf) limits_from(q, lim_lo, lim_hi);
    free(buf);
    double *lo[2] = {vlo, tlo}, *hi[2] = {vhi, thi};
    for (int c = 0; c < 2; c++) {
        if (box12_result(&b[c], lo[c], hi[c])) return 1;
        int inside = 1;
        for (int a = 0; a < 3; a++) inside &= !(lo[c][a] <= hi[c][a]) || (lo[c][a] >= lim_lo[a] && hi[c][a] <= lim_hi[a]);
        if (!inside && point_bounds(xs[c], ns[c], threads, lim_lo, lim_hi, lo[c], hi[c])) return 1;
    }
    return 0;
}

/* Phase 1 (physics.md 2.1): the grid follows the particles (open boundaries).  It covers
 * every vorton and tracer inside the robust limits above, padded by three core radii and a
 * cell, with cubic cells sized for grid_cells_per_vorton cells per vorton, never more than
 * grid_max_points nodes. */
int vp_domain_update(vp_sim *s)
{
    double lo[3], hi[3], tlo[3], thi[3], smax = 0;
    /* min and max are exact: the bounds do not depend on the thread count */
    if (domain_bounds(s, lo, hi, tlo, thi, &smax)) return VP_ERR_NONFINITE;
    /* The cell size comes from the vortons alone (cells per vorton over their box): tracers
     * that spread wide enlarge the grid but never coarsen it, so they cannot change how the
     * vortons move (up to grid_max_points, which then wins). */
    double vol_v = 1.0;
    {
        double pad_v = 3.0 * smax;
        for (int a = 0; a < 3; a++) {
            double e = (lo[a] <= hi[a]) ? hi[a] - lo[a] + 2 * pad_v : 0.0;
            vol_v *= e > 1e-9 ? e : 1e-9;
        }
    }
    for (int a = 0; a < 3; a++) { lo[a] = tlo[a] < lo[a] ? tlo[a] : lo[a]; hi[a] = thi[a] > hi[a] ? thi[a] : hi[a]; }
    if (!(lo[0] <= hi[0]) || !(lo[1] <= hi[1]) || !(lo[2] <= hi[2])) {
        lo[0] = lo[1] = lo[2] = -1; hi[0] = hi[1] = hi[2] = 1;
        if (smax == 0) smax = 0.1;
    }
    double pad = 3.0 * smax, vol = 1.0, ext[3];
    for (int a = 0; a < 3; a++) { lo[a] -= pad; hi[a] += pad; ext[a] = hi[a] - lo[a]; if (ext[a] <= 0) ext[a] = 1e-9; vol *= ext[a]; }
    double target = s->params.grid_cells_per_vorton * (double)(s->vortons.n > 8 ? s->vortons.n : 8);
    double h = cbrt((s->vortons.n ? vol_v : vol) / target);
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

