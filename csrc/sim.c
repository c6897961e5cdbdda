/* sim.c: create/free and the step pipeline; vp_sim_step reads like physics.md section 2. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "tracer_contact.h"
#include "grid_inline.h"
#include "kernel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

const char *const vp_phase_names[VP_PHASE_COUNT] = {
    "domain", "velocity", "stretch", "baroclinic", "diffuse", "advect_vortons",
    "advect_tracers", "contact", "buoyancy", "bodies", "emit", "remesh"};

void vp_params_init(vp_params *p)
{
    memset(p, 0, sizeof *p);
    p->dt = 1.0 / 30.0;
    p->viscosity = 0.01;
    p->thermal_diffusivity = 1e-4;
    p->ambient_density = 1.0;
    p->gravity[2] = -10.0;
    p->fluid_heat_capacity = 1.0;
    p->solver = VP_SOLVER_AUTO;
    p->threads = 1;
    p->tree_theta = 0.4;
    p->tree_leaf_size = 16;
    p->grid_cells_per_vorton = 1.0;
    p->grid_max_points = (size_t)1 << 22;
    p->pse_width = 1.0;
    p->pse_cutoff = 3.0; /* with the kernel renormalised for the cut (diffuse.c) */
    p->smagorinsky = 0.0;
    p->remesh_interval = 0;
    p->remesh_threshold = 0.05;
    p->max_rate_dt = 1.0;
    p->max_substeps = 8;
    p->contact_blend = 0.2; /* relax toward the boundary vorticity over ~5 steps (seeds: 0.1) */
    p->advect_order = 2;
    p->stretch = 1;
    p->baroclinic = 1;
    p->rollback = 0;
    p->overlap = 1;
}

vp_sim *vp_sim_create(const vp_params *p)
{
    vp_sim *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *p;
    s->tree = vp_tree_create();
    if (!s->tree) { free(s); return NULL; }
    vp_rng_seed(s->rng, 12345);
    s->failed_phase = -1;
    s->grid.n[0] = s->grid.n[1] = s->grid.n[2] = 1;
    s->grid.h = 1.0;
    return s;
}

void vp_sim_free(vp_sim *s)
{
    if (!s) return;
    vp_buffer *bufs[] = {s->vortons.position, s->vortons.vorticity, s->vortons.radius, s->vortons.density,
                         s->vortons.age, s->vortons.velocity, s->tracers.position, s->tracers.velocity,
                         s->tracers.density, s->tracers.age};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) vp_buffer_release(bufs[i]);
    free(s->bodies); free(s->emitters);
    free(s->cell_velocity);
    free(s->grid_velocity); free(s->grid_jacobian); free(s->grid_density); free(s->grid_density_gradient);
    free(s->scratch); free(s->tracer_scratch);
    free(s->backup); free(s->backup_bodies); free(s->backup_emitters);
    vp_tree_free(s->tree);
    vp_poisson_free(s->poisson);
    free(s);
}

double *vp_sim_scratch(vp_sim *s, size_t doubles)
{
    if (doubles > s->scratch_allocated) {
        double *p = realloc(s->scratch, doubles * sizeof(double));
        if (!p) return NULL;
        s->scratch = p; s->scratch_allocated = doubles;
    }
    return s->scratch;
}

int vp_sim_add_body(vp_sim *s, const vp_body *b)
{
    if (s->n_bodies == s->n_bodies_allocated) {
        size_t na = s->n_bodies_allocated ? 2 * s->n_bodies_allocated : 4;
        vp_body *nb = realloc(s->bodies, na * sizeof(vp_body));
        if (!nb) return VP_ERR_NOMEM;
        s->bodies = nb; s->n_bodies_allocated = na;
    }
    s->bodies[s->n_bodies] = *b;
    vp_body_sync(&s->bodies[s->n_bodies]);
    s->n_bodies++;
    return VP_OK;
}

int vp_sim_add_emitter(vp_sim *s, const vp_emitter *e)
{
    if (s->n_emitters == s->n_emitters_allocated) {
        size_t na = s->n_emitters_allocated ? 2 * s->n_emitters_allocated : 4;
        vp_emitter *ne = realloc(s->emitters, na * sizeof(vp_emitter));
        if (!ne) return VP_ERR_NOMEM;
        s->emitters = ne; s->n_emitters_allocated = na;
    }
    s->emitters[s->n_emitters++] = *e;
    return VP_OK;
}

static size_t vp_gcd(size_t a, size_t b)
{
    while (b) { size_t t = a % b; a = b; b = t; }
    return a;
}

/* The k-th smallest (high = 0) or the k-th largest (high = 1) of buf[0..m) (0-based; k < 64)
 * in one pass, kept in a small sorted array: the robust limits need the 0.5% and 99.5%
 * quantiles of a 4096-point sample, i.e. k ~ 20, where this costs a few microseconds and a
 * quickselect (two partial sorts) cost thirty.  NaNs are never taken. */
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
 * them alone.  In the step, the six selections over a 4096-point sample were ~2% of a
 * hot_ball step at 1 thread; the streaming scan inserted ~140 values per selection. */
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

/* Inside a parallel region, called by every thread of the team: this thread's share of the
 * sample (limits_sample), a barrier, then the six tail selections shared by the threads
 * (3 axes, low and high) into q. */
static void limits_sample_select(const vp_sim *s, size_t nv, size_t n, size_t m, size_t step, size_t klo, size_t khi,
                                 double *buf, double q[6])
{
    long k0, k1;
    vp_thread_share((long)m, &k0, &k1);
    limits_sample(s, nv, n, m, step, k0, k1, buf);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int t = 0; t < 6; t++) q[t] = select_tail(buf + (t / 2) * m, m, t % 2 ? khi : klo, t % 2);
}

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
     * coprime to m near m / golden ratio: the particles come in emission order, so a plume's heights
     * rose along the plain order and many samples were new maxima that select_tail had to
     * insert; scrambled, new extremes are rare (0.83x of its time in hot_ball, the domain
     * phase 1.06-1.08x).  The quantiles do not depend on the order.  The sample and the six
     * selections (3 axes, low and high) are shared by the threads: in hot_ball they were a
     * serial 0.05 ms a step. */
    double q[6];
    if (m >= 1024 && threads > 1) {
#pragma omp parallel num_threads(threads)
        limits_sample_select(s, nv, n, m, step, klo, khi, buf, q);
    } else { /* here, not in a region of one thread (see finite_array) */
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

/* The same on the calling thread alone (inside a parallel region, beside other work). */
void vp_robust_limits_serial(const vp_sim *s, int with_tracers, double lim_lo[3], double lim_hi[3])
{
    robust_limits(s, with_tracers, lim_lo, lim_hi, 1);
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

#ifdef VP_X86_DISPATCH
#include <immintrin.h>
/* bounds_runs without limits (L = -inf, H = +inf: domain_bounds' first pass) with AVX2:
 * MINPD and MAXPD are C's v < m ? v : m and v > m ? v : m, and skip a NaN coordinate as the
 * limits' test does; the same min and max.  GCC's code for bounds_runs took ~60
 * instructions a run of 12 (callgrind, hot_ball), this ~15. */
__attribute__((target("avx2"))) static void bounds_runs_free_avx2(const double *restrict t, long r0, long r1,
                                                                 double *restrict m1, double *restrict m2,
                                                                 double *restrict b1)
{
    __m256d n0 = _mm256_loadu_pd(m1), n1 = _mm256_loadu_pd(m1 + 4), n2 = _mm256_loadu_pd(m1 + 8);
    __m256d x0 = _mm256_loadu_pd(m2), x1 = _mm256_loadu_pd(m2 + 4), x2 = _mm256_loadu_pd(m2 + 8);
    __m256d d0 = _mm256_loadu_pd(b1), d1 = _mm256_loadu_pd(b1 + 4), d2 = _mm256_loadu_pd(b1 + 8);
    const __m256d z = _mm256_setzero_pd();
    for (long r = r0; r < r1; r++) {
        const double *c = t + 12 * r;
        const __m256d v0 = _mm256_loadu_pd(c), v1 = _mm256_loadu_pd(c + 4), v2 = _mm256_loadu_pd(c + 8);
        d0 = _mm256_add_pd(d0, _mm256_mul_pd(v0, z)); /* NaN once any coordinate is NaN or infinite */
        d1 = _mm256_add_pd(d1, _mm256_mul_pd(v1, z));
        d2 = _mm256_add_pd(d2, _mm256_mul_pd(v2, z));
        n0 = _mm256_min_pd(v0, n0); n1 = _mm256_min_pd(v1, n1); n2 = _mm256_min_pd(v2, n2);
        x0 = _mm256_max_pd(v0, x0); x1 = _mm256_max_pd(v1, x1); x2 = _mm256_max_pd(v2, x2);
    }
    _mm256_storeu_pd(m1, n0); _mm256_storeu_pd(m1 + 4, n1); _mm256_storeu_pd(m1 + 8, n2);
    _mm256_storeu_pd(m2, x0); _mm256_storeu_pd(m2 + 4, x1); _mm256_storeu_pd(m2 + 8, x2);
    _mm256_storeu_pd(b1, d0); _mm256_storeu_pd(b1 + 4, d1); _mm256_storeu_pd(b1 + 8, d2);
}
#endif

/* Per-lane min, max and non-finite detector of coordinates read in runs of 12 doubles (4
 * points: every lane sees one axis), for point_bounds and domain_bounds.  Min and max are
 * exact, so the order in which shares are merged does not matter. */
typedef struct { double mn[12], mx[12], bad[12]; } box12;

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

/* Inside a parallel region (or alone): this thread's share of t's runs, merged into b. */
static void box12_share(box12 *b, const double *t, size_t n, const double L[12], const double H[12])
{
    long r0, r1;
    vp_thread_share(3 * (long)n / 12, &r0, &r1);
    box12 own;
    box12_init(&own);
    if (r1 > r0) bounds_runs(t, r0, r1, L, H, own.mn, own.mx, own.bad);
    box12_merge(b, &own);
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
    (void)threads;
#pragma omp parallel num_threads(threads) if (3 * (long)n / 12 > 8192)
    box12_share(&b, t, n, L, H);
    return box12_result(&b, lo, hi);
}

static double *strengths(vp_sim *s, double *dst);

/* Whether this step's velocity phase will use the tree: params.solver, or under auto the
 * choice vp_auto_solver makes with the last step's grid (the domain phase is about to
 * resize it, so this is a guess, right in nearly every step: when wrong, the tree is built
 * in vain, or in the velocity phase).  Before the first grid, only below the smallest count
 * that auto would give to poisson. */
static int tree_expected(const vp_sim *s)
{
    const size_t n = s->vortons.n, nn = vp_grid_count(&s->grid);
    if (!n) return 0;
    if (s->params.solver == VP_SOLVER_TREE) return 1;
    if (s->params.solver != VP_SOLVER_AUTO) return 0;
    if (nn == 0) return n < VP_AUTO_POISSON_MIN;
    return vp_auto_solver(n, nn) == VP_SOLVER_TREE;
}

/* The velocity phase's tree over the vortons (physics.md 2.2), built now. */
static int tree_build_now(vp_sim *s)
{
    double *a = malloc(3 * s->vortons.n * sizeof(double));
    if (!a) return VP_ERR_NOMEM;
    strengths(s, a);
    int st = vp_tree_build(s->tree, s->vortons.n, s->vortons.position->data, a, s->vortons.radius->data,
                           s->params.tree_leaf_size);
    free(a);
    return st;
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
 * (slots of its own; the points come from anywhere, mostly still in cache from the first
 * pass), then the selections.  When a set's unconstrained box lies
 * inside the limits (no outliers: the usual case) it is the constrained box; otherwise that
 * set is scanned again with the limits.  The same boxes, bit for bit (min and max are exact);
 * the sample's separate pass over scattered points was a third of hot_ball's domain phase.
 * When the velocity phase will use the tree (tree_expected), thread 0 builds it first (the
 * positions and strengths do not change in between): the build is serial, ~30 us for
 * ball_through_smoke's 512 vortons, a sixth of its velocity phase, and here the other
 * threads scan the boxes meanwhile.  The scan is therefore taken in chunks claimed as the
 * threads come (min and max are exact: the same boxes in any order).  Nonzero if any
 * coordinate is not finite. */
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
    const int pre = tree_expected(s);
    int tree_st = VP_OK;
    enum { CHUNK = 1024 }; /* runs of 12 doubles a chunk */
    const int simd = vp_avx2_ok(); /* (L and H are infinite here: bounds_runs_free_avx2) */
    (void)simd;
    const long runs[2] = {3 * (long)nv / 12, 3 * (long)nt / 12}, nch0 = (runs[0] + CHUNK - 1) / CHUNK,
               nch = nch0 + (runs[1] + CHUNK - 1) / CHUNK;
    long next = 0;
    const size_t inv = buf ? inverse_mod(step, m) : 0, g_base[2] = {0, nv};
    if (buf) /* the sample's points past the sets' whole runs (the chunks take the rest) */
        for (int c = 0; c < 2; c++) sample_points(s, nv, n, m, inv, g_base[c] + 4 * (size_t)runs[c], g_base[c] + ns[c], buf);
    (void)threads;
#pragma omp parallel num_threads(threads) if (3 * (long)n / 12 > 8192 || m >= 1024 || (pre && threads > 1))
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        if (pre && me == 0) tree_st = tree_build_now(s);
        box12 own[2];
        box12_init(&own[0]); box12_init(&own[1]);
        for (long c; (c = vp_claim(&next)) < nch;) {
            const int set = c >= nch0;
            const long r0 = (set ? c - nch0 : c) * CHUNK, r1 = r0 + CHUNK < runs[set] ? r0 + CHUNK : runs[set];
#ifdef VP_X86_DISPATCH
            if (simd)
                bounds_runs_free_avx2(xs[set], r0, r1, own[set].mn, own[set].mx, own[set].bad);
            else
#endif
                bounds_runs(xs[set], r0, r1, L, H, own[set].mn, own[set].mx, own[set].bad);
            if (buf) sample_points(s, nv, n, m, inv, g_base[set] + 4 * (size_t)r0, g_base[set] + 4 * (size_t)r1, buf);
        }
        for (int c = 0; c < 2; c++) box12_merge(&b[c], &own[c]);
        /* the largest radius (the grid's padding), exact: serial, it was ~4% of the domain
         * phase at 1e5 vortons */
#pragma omp for schedule(static) reduction(max : smax) nowait
        for (long i = 0; i < (long)nv; i++) smax = r[i] > smax ? r[i] : smax;
        if (buf) { /* the sample is complete: the six selections, shared */
#pragma omp barrier
#pragma omp for schedule(static)
            for (int t = 0; t < 6; t++) q[t] = select_tail(buf + (t / 2) * m, m, t % 2 ? khi : klo, t % 2);
        }
    }
    *rmax = smax;
    s->tree_ready = pre && tree_st == VP_OK; /* if not, the velocity phase builds it (and reports) */
    if (buf) limits_from(q, lim_lo, lim_hi);
    free(buf);
    double *lo[2] = {vlo, tlo}, *hi[2] = {vhi, thi};
    for (int c = 0; c < 2; c++) {
        if (box12_result(&b[c], lo[c], hi[c])) return 1;
        int inside = 1;
        for (int a = 0; a < 3; a++) inside &= !(lo[c][a] <= hi[c][a]) || (lo[c][a] >= lim_lo[a] && hi[c][a] <= lim_hi[a]);
        if (c == 1) { /* every tracer's box, for the overlap's no-outlier test (overlap_wanted) */
            s->tracer_box_valid = inside && nt > 0;
            for (int a = 0; a < 3; a++) { s->tracer_box[a] = tlo[a]; s->tracer_box[3 + a] = thi[a]; }
        }
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

/* Strengths a_i = w_i V_i into scratch (3n). */
static double *strengths(vp_sim *s, double *dst)
{
    const double *w = s->vortons.vorticity->data, *r = s->vortons.radius->data;
    for (size_t i = 0; i < s->vortons.n; i++) {
        double V = vp_volume(r[i]);
        dst[3 * i] = w[3 * i] * V; dst[3 * i + 1] = w[3 * i + 1] * V; dst[3 * i + 2] = w[3 * i + 2] * V;
    }
    return dst;
}

/* Velocity at m points from the vortons by the direct sum or the tree (physics.md 2.2). */
int vp_velocity_solve(vp_sim *s, size_t m, const double *pts, double *vel, int solver)
{
    size_t n = s->vortons.n;
    if (n == 0) { memset(vel, 0, 3 * m * sizeof(double)); s->interactions = 0; return VP_OK; }
    int st;
    if (solver == VP_SOLVER_DIRECT) {
        double *a = malloc(3 * n * sizeof(double));
        if (!a) return VP_ERR_NOMEM;
        st = vp_direct_velocity(n, s->vortons.position->data, strengths(s, a), s->vortons.radius->data, m, pts, vel,
                                vp_threads(s));
        s->interactions = (uint64_t)n * m;
        free(a);
    } else {
        st = tree_build_now(s);
        if (!st) {
            st = vp_tree_velocity(s->tree, s->params.tree_theta, m, pts, vel, vp_threads(s));
            s->interactions = vp_tree_last_interactions(s->tree);
        }
    }
    return st;
}

/* The solver 'auto' picks for n vortons on a grid of nn nodes (see VP_AUTO_POISSON_MIN). */
int vp_auto_solver(size_t n, size_t nn)
{
    if (n < VP_AUTO_POISSON_MIN || nn == 0) return VP_SOLVER_TREE;
    double r = VP_AUTO_POISSON_RATIO * (n > 1000 ? pow(1000.0 / (double)n, 0.35) : 1.0);
    return (double)n >= r * (double)nn ? VP_SOLVER_POISSON : VP_SOLVER_TREE;
}

/* Phases 1-2: domain, then the velocity and its Jacobian at every grid node. */
int vp_sim_update_velocity_grid(vp_sim *s)
{
    double t0 = vp_now_ms();
    int st = vp_domain_update(s);
    if (st) return st;
    double t1 = vp_now_ms();
    s->timings[VP_PHASE_DOMAIN] = t1 - t0;
    size_t nn = vp_grid_count(&s->grid);
    int solver = s->params.solver;
    if (solver == VP_SOLVER_AUTO) solver = vp_auto_solver(s->vortons.n, nn);
    const int tree_ready = s->tree_ready;
    s->tree_ready = 0; /* this step's only: whatever the solver */
    if (solver == VP_SOLVER_POISSON) {
        st = vp_poisson_velocity_grid(s);
    } else if (solver == VP_SOLVER_TREE && s->vortons.n) {
        if (!tree_ready) st = tree_build_now(s); /* (usually built in the domain phase: domain_bounds) */
        if (!st) st = vp_tree_velocity_grid(s->tree, s->params.tree_theta, &s->grid, s->grid_velocity, vp_threads(s));
        s->interactions = vp_tree_last_interactions(s->tree);
    } else {
        double *pts = malloc(3 * nn * sizeof(double));
        if (!pts) return VP_ERR_NOMEM;
        const vp_grid *g = &s->grid;
        for (int k = 0; k < g->n[2]; k++)
            for (int j = 0; j < g->n[1]; j++)
                for (int i = 0; i < g->n[0]; i++) {
                    size_t id = (size_t)i + (size_t)g->n[0] * ((size_t)j + (size_t)g->n[1] * k);
                    pts[3 * id] = g->origin[0] + g->h * i;
                    pts[3 * id + 1] = g->origin[1] + g->h * j;
                    pts[3 * id + 2] = g->origin[2] + g->h * k;
                }
        st = vp_velocity_solve(s, nn, pts, s->grid_velocity, s->params.solver);
        free(pts);
    }
    if (st) return st;
    s->max_rate = sqrt(vp_grid_jacobian(&s->grid, s->grid_velocity, s->grid_jacobian, vp_threads(s)));
    s->timings[VP_PHASE_VELOCITY] = vp_now_ms() - t1;
    return VP_OK;
}

int vp_sim_velocity_at(vp_sim *s, size_t m, const double *points, double *vel)
{
    int solver = s->params.solver == VP_SOLVER_DIRECT ? VP_SOLVER_DIRECT : VP_SOLVER_TREE;
    return vp_velocity_solve(s, m, points, vel, solver);
}

/* The grid velocity regathered per cell as the coefficients of its trilinear polynomial,
 *   q(x, y, z) = a + b x + c y + d z + e x y + f x z + g y z + h x y z   (x, y, z in [0, 1]),
 * for q = [u, v, w, density deviation], in float32 and in the order a b d f c e g h (4 floats
 * each, 128 bytes a cell): a lookup is one contiguous read and four multiply-adds (cell_lerp).
 * The coefficients are differences of the corner values taken in double, so the polynomial
 * equals the corners to float rounding.  Tracers are passive, so float32 (7 digits) costs them
 * nothing visible; vortons keep the double grid.  A row of cells along x at a time: each
 * corner is [u v w rho] on one 4-double vector (the velocity's 4-lane load reads one double
 * past the node, VP_GRID_PAD, and its last lane takes the density), so a coefficient is a
 * few vector subtractions and one 16-byte store (component by component, with 32 scalar
 * loads a cell, it was 0.9 ms of the 1e5-vorton step's 49^3 grid on two threads). */
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
    const float *cells;
    int prefetch;                 /* the cells exceed the L2 cache: prefetch a block's cells */
    int simd;                     /* locate with AVX2 (locate_block) */
    int block_simd;               /* whole blocks with AVX2 and FMA (advect_block_avx2) */
} cell_geom;

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

#ifdef VP_X86_DISPATCH
/* cell_locate on four points at a time with AVX2, for finite positions (the domain phase
 * rejects others; a Heun predictor is NaN only where the grid velocity is, and then the
 * step fails in either path; a NaN would clamp to the top here and to 0 there, so only the
 * density sampled at such a predictor could differ): the same clamps as
 * min then max (MINPD and MAXPD are C's u < t ? u : t and u > 0 ? u : 0), the same
 * truncation, fraction and index, so the same bits.  GCC 12 vectorised cell_locate's
 * nested selects into compares, blends and mask narrowings from 64- to 32-bit lanes for the
 * integer conversion that it sank into them: ~20 instructions a point (callgrind, hot_ball),
 * here ~9. */
__attribute__((target("avx2"), noinline)) static void cell_locate_avx2(
    const cell_geom *G, int m, const double *restrict px, const double *restrict py, const double *restrict pz,
    int *restrict ci, float *restrict fx, float *restrict fy, float *restrict fz)
{
    const __m256d ih = _mm256_set1_pd(G->inv_h), zero = _mm256_setzero_pd();
    const __m256d o0 = _mm256_set1_pd(G->o[0]), o1 = _mm256_set1_pd(G->o[1]), o2 = _mm256_set1_pd(G->o[2]);
    const __m256d t0 = _mm256_set1_pd(G->top[0]), t1 = _mm256_set1_pd(G->top[1]), t2 = _mm256_set1_pd(G->top[2]);
    const __m128i l0 = _mm_set1_epi32(G->last[0]), l1 = _mm_set1_epi32(G->last[1]), l2 = _mm_set1_epi32(G->last[2]);
    const __m128i sy = _mm_set1_epi32((int)G->sy), sz = _mm_set1_epi32((int)G->sz);
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        __m256d u = _mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(px + j), o0), ih);
        __m256d v = _mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(py + j), o1), ih);
        __m256d w = _mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(pz + j), o2), ih);
        u = _mm256_max_pd(_mm256_min_pd(u, t0), zero);
        v = _mm256_max_pd(_mm256_min_pd(v, t1), zero);
        w = _mm256_max_pd(_mm256_min_pd(w, t2), zero);
        const __m128i i = _mm_min_epi32(_mm256_cvttpd_epi32(u), l0), k = _mm_min_epi32(_mm256_cvttpd_epi32(v), l1),
                      l = _mm_min_epi32(_mm256_cvttpd_epi32(w), l2);
        _mm_storeu_ps(fx + j, _mm256_cvtpd_ps(_mm256_sub_pd(u, _mm256_cvtepi32_pd(i))));
        _mm_storeu_ps(fy + j, _mm256_cvtpd_ps(_mm256_sub_pd(v, _mm256_cvtepi32_pd(k))));
        _mm_storeu_ps(fz + j, _mm256_cvtpd_ps(_mm256_sub_pd(w, _mm256_cvtepi32_pd(l))));
        _mm_storeu_si128((__m128i *)(ci + j),
                         _mm_add_epi32(i, _mm_add_epi32(_mm_mullo_epi32(sy, k), _mm_mullo_epi32(sz, l))));
    }
    if (j < m) cell_locate(G, m - j, px + j, py + j, pz + j, ci + j, fx + j, fy + j, fz + j);
}
#endif

/* A block's cell_locate: with AVX2 where the CPU has it (G->simd), else the portable loop. */
static inline void locate_block(const cell_geom *G, int m, const double *restrict px, const double *restrict py,
                                const double *restrict pz, int *restrict ci, float *restrict fx, float *restrict fy,
                                float *restrict fz)
{
#ifdef VP_X86_DISPATCH
    if (G->simd) {
        cell_locate_avx2(G, m, px, py, pz, ci, fx, fy, fz);
        return;
    }
#endif
    cell_locate(G, m, px, py, pz, ci, fx, fy, fz);
}

/* Both cache lines of the m cells ci, requested before any is read: with the cells far past
 * the L2 cache and tracers in random order, every lookup misses, and issuing the block's 64
 * misses at once overlaps them (1e6 random tracers on a 49^3 grid: 1.23-1.29x, up to 1.7x
 * at 2 threads).  Cells that fit the cache gain nothing and pay the extra loop (0.93x), so the caller
 * asks only above VP_PREFETCH_CELLS_BYTES. */
#define VP_PREFETCH_CELLS_BYTES ((size_t)1 << 20)
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
 * brackets side by side in one 8-float register: three multiply-adds on 8 lanes and one on 4
 * (the corner-value form took four subtractions more and a longer dependency chain).
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

#ifdef VP_X86_DISPATCH
/* Four lookups u4[j .. j+3] ([u v w rho] each) as the vectors of their u, v, w and rho. */
__attribute__((target("avx2"), always_inline)) static inline void lookups4(const vp_v4f *u4, __m256d *u, __m256d *v,
                                                                         __m256d *w, __m256d *rho)
{
    __m128 a = _mm_load_ps((const float *)&u4[0]), b = _mm_load_ps((const float *)&u4[1]);
    __m128 c = _mm_load_ps((const float *)&u4[2]), d = _mm_load_ps((const float *)&u4[3]);
    _MM_TRANSPOSE4_PS(a, b, c, d);
    *u = _mm256_cvtps_pd(a); *v = _mm256_cvtps_pd(b); *w = _mm256_cvtps_pd(c);
    if (rho) *rho = _mm256_cvtps_pd(d);
}

/* One block of advect_cells_range (m tracers from b0, m a multiple of 4, at most VP_TB)
 * with AVX2 intrinsics, four tracers a vector, stage by stage as there and with the same
 * operations: the positions from their records, the in-grid test, the lookups
 * (cell_locate_avx2, cell_lerp), the predictor and the update (x + dt u, x + dj u: written
 * with C's operators, so that GCC fuses them into multiply-adds where it fuses the
 * x86-64-v3 and v4 clones' own, and only there), the Heun mean, the density under its
 * mask, the records written back; so the same bits as those clones (G->block_simd is set
 * only where they run; a test compares both paths, in the -O3 build and the -O1 sanitizer
 * build, where an FMA intrinsic here differed).  GCC's code
 * for these stages moved each block between records and lanes one scalar at a time or
 * through long shuffle chains: ~45 instructions a tracer (callgrind, hot_ball), here ~20.
 * The outliers' indices are appended to outliers; returns their number. */
/* (GCC 12 takes the arrays handed to cell_locate_avx2 as maybe uninitialised: it does not
 * see that the loops above fill [0, m) through the intrinsics' stores) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx2,fma"))) static int advect_block_avx2(const cell_geom *G, const double glo[3],
                                                                 const double ghi[3], double dt, int order, long b0,
                                                                 int m, double *restrict x, double *restrict vel,
                                                                 double *restrict dens, size_t *restrict outliers)
{
    double px[VP_TB], py[VP_TB], pz[VP_TB], ux[VP_TB], uy[VP_TB], uz[VP_TB];
    float fx[VP_TB], fy[VP_TB], fz[VP_TB];
    vp_v4f u4[VP_TB];
    int ci[VP_TB];
    __m256d inm[VP_TB / 4]; /* the in-grid masks */
    const __m256d lo0 = _mm256_set1_pd(glo[0]), lo1 = _mm256_set1_pd(glo[1]), lo2 = _mm256_set1_pd(glo[2]);
    const __m256d hi0 = _mm256_set1_pd(ghi[0]), hi1 = _mm256_set1_pd(ghi[1]), hi2 = _mm256_set1_pd(ghi[2]);
    const __m256d dtv = _mm256_set1_pd(dt), half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0);
    double *xb = x + 3 * b0, *vb = vel + 3 * b0;
    int n_out = 0;
    for (int j = 0; j < 3 * m; j += 8) __builtin_prefetch(vb + j, 1); /* (as advect_cells_range) */
    if (dens)
        for (int j = 0; j < m; j += 8) __builtin_prefetch(dens + b0 + j, 1);
    for (int j = 0; j < m; j += 4) {
        __m256d X, Y, Z;
        vp_records_to_lanes(xb + 3 * j, &X, &Y, &Z);
        _mm256_storeu_pd(px + j, X); _mm256_storeu_pd(py + j, Y); _mm256_storeu_pd(pz + j, Z);
        const __m256d in = _mm256_and_pd(
            _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(X, lo0, _CMP_GE_OQ), _mm256_cmp_pd(X, hi0, _CMP_LE_OQ)),
                          _mm256_and_pd(_mm256_cmp_pd(Y, lo1, _CMP_GE_OQ), _mm256_cmp_pd(Y, hi1, _CMP_LE_OQ))),
            _mm256_and_pd(_mm256_cmp_pd(Z, lo2, _CMP_GE_OQ), _mm256_cmp_pd(Z, hi2, _CMP_LE_OQ)));
        inm[j / 4] = in;
        const int bits = _mm256_movemask_pd(in);
        if (bits != 0xF)
            for (int l = 0; l < 4; l++)
                if (!(bits >> l & 1)) outliers[n_out++] = (size_t)(b0 + j + l);
    }
    cell_locate_avx2(G, m, px, py, pz, ci, fx, fy, fz);
    if (G->prefetch) prefetch_cells(G->cells, ci, m);
    for (int j = 0; j < m; j++) u4[j] = cell_lerp(G->cells, ci[j], fx[j], fy[j], fz[j]);
    for (int j = 0; j < m; j += 4) {
        __m256d U, V, W;
        lookups4(u4 + j, &U, &V, &W, NULL);
        _mm256_storeu_pd(ux + j, U); _mm256_storeu_pd(uy + j, V); _mm256_storeu_pd(uz + j, W);
    }
    if (order >= 2 || dens) {
        double qx[VP_TB], qy[VP_TB], qz[VP_TB];
        for (int j = 0; j < m; j += 4) {
            /* x + dt u as C's operators on the vector type, not an FMA intrinsic: GCC then
             * contracts it exactly where it contracts advect_cells_range's own (at -O2 and
             * up with FMA; not at -O1, the sanitizer build's) */
            _mm256_storeu_pd(qx + j, _mm256_loadu_pd(px + j) + dtv * _mm256_loadu_pd(ux + j));
            _mm256_storeu_pd(qy + j, _mm256_loadu_pd(py + j) + dtv * _mm256_loadu_pd(uy + j));
            _mm256_storeu_pd(qz + j, _mm256_loadu_pd(pz + j) + dtv * _mm256_loadu_pd(uz + j));
        }
        cell_locate_avx2(G, m, qx, qy, qz, ci, fx, fy, fz);
        if (G->prefetch) prefetch_cells(G->cells, ci, m);
        for (int j = 0; j < m; j++) u4[j] = cell_lerp(G->cells, ci[j], fx[j], fy[j], fz[j]);
        for (int j = 0; j < m; j += 4) {
            __m256d U, V, W, R;
            lookups4(u4 + j, &U, &V, &W, &R);
            if (order >= 2) {
                _mm256_storeu_pd(ux + j, _mm256_mul_pd(half, _mm256_add_pd(_mm256_loadu_pd(ux + j), U)));
                _mm256_storeu_pd(uy + j, _mm256_mul_pd(half, _mm256_add_pd(_mm256_loadu_pd(uy + j), V)));
                _mm256_storeu_pd(uz + j, _mm256_mul_pd(half, _mm256_add_pd(_mm256_loadu_pd(uz + j), W)));
            }
            if (dens) _mm256_storeu_pd(dens + b0 + j, _mm256_and_pd(inm[j / 4], R));
        }
    }
    for (int j = 0; j < m; j += 4) {
        const __m256d dj = _mm256_mul_pd(dtv, _mm256_and_pd(inm[j / 4], one)); /* dt or 0 */
        const __m256d U = _mm256_loadu_pd(ux + j), V = _mm256_loadu_pd(uy + j), W = _mm256_loadu_pd(uz + j);
        const __m256d X = _mm256_loadu_pd(px + j) + dj * U, Y = _mm256_loadu_pd(py + j) + dj * V,
                      Z = _mm256_loadu_pd(pz + j) + dj * W; /* (operators: as the predictor) */
        vp_lanes_to_records(xb + 3 * j, X, Y, Z); /* positions, then velocities */
        vp_lanes_to_records(vb + 3 * j, U, V, W);
    }
    return n_out;
}
#pragma GCC diagnostic pop
#endif

/* Tracers [b0, b0 + m) (m <= 64) inside body B to its surface (tracer_contact.h): a
 * function of its own, not inlined into the advection (whose code then ran 0.96x on 1e6
 * tracers without bodies). */
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
 * grid where they are), which the compiler vectorises across tracers.  Compiled for
 * AVX2+FMA and for the baseline, picked at load time. */
VP_CLONES
static size_t advect_cells_range(const cell_geom *G, const double glo[3], const double ghi[3], double dt, int order,
                                 long i0, long i1, double *restrict x, double *restrict vel, double *restrict dens,
                                 size_t *restrict outliers, const vp_body *bodies, int nbod)
{
    size_t n_out = 0;
    unsigned hits = 0; /* bit k: the last block projected had tracers inside body k (project_block) */
    double px[VP_TB], py[VP_TB], pz[VP_TB], ux[VP_TB], uy[VP_TB], uz[VP_TB];
    float fx[VP_TB], fy[VP_TB], fz[VP_TB];
    vp_v4f u4[VP_TB]; /* a lookup's [u v w density] as one 16-byte store (three or four scalar extracts were) */
    int ci[VP_TB], in[VP_TB];
    const double lo0 = glo[0], lo1 = glo[1], lo2 = glo[2], hi0 = ghi[0], hi1 = ghi[1], hi2 = ghi[2];
    for (long b0 = i0; b0 < i1; b0 += VP_TB) {
        const int m = (int)(i1 - b0 < VP_TB ? i1 - b0 : VP_TB);
        int out = 0;
#ifdef VP_X86_DISPATCH
        if (G->block_simd && !(m & 3)) {
            out = advect_block_avx2(G, glo, ghi, dt, order, b0, m, x, vel, dens, outliers + n_out);
            n_out += (size_t)out;
            goto project;
        }
#endif
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
        locate_block(G, m, px, py, pz, ci, fx, fy, fz);
        if (G->prefetch) prefetch_cells(G->cells, ci, m);
        for (int j = 0; j < m; j++) u4[j] = cell_lerp(G->cells, ci[j], fx[j], fy[j], fz[j]);
        for (int j = 0; j < m; j++) { ux[j] = u4[j][0]; uy[j] = u4[j][1]; uz[j] = u4[j][2]; }
        if (order >= 2 || dens) {
            /* the predictor (Heun), or the new position (Euler, for the density only) */
            double qx[VP_TB], qy[VP_TB], qz[VP_TB];
            for (int j = 0; j < m; j++) { qx[j] = px[j] + dt * ux[j]; qy[j] = py[j] + dt * uy[j]; qz[j] = pz[j] + dt * uz[j]; }
            locate_block(G, m, qx, qy, qz, ci, fx, fy, fz);
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
                 * all-ones or all-zero mask: the same as the select in[j] ? rho : 0.0, which
                 * GCC left scalar, ~11 instructions a tracer) */
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
         * (one pass over the tracers instead of two: ball_through_smoke's contact phase,
         * mostly that second pass, fell from 0.12 to 0.04 ms; in hot_ball, where a sixth of
         * the tracers sit on the ball, the projection itself dominates and the move is
         * neutral).  A block with outliers waits for them to be moved (advect). */
#ifdef VP_X86_DISPATCH
    project:
#endif
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
 * core; with the two lookups and the update of a particle in one iteration, its long
 * dependency chain left the core waiting (1e5 vortons and hot_ball: 1.26-1.30x).  The same arithmetic
 * per particle, so the same bits. */
#define NODES_TB 32
VP_CLONES
static size_t advect_nodes_range(const vp_grid *g, const double *restrict gv, const double glo[3], const double ghi[3],
                                 double dt, int order, long i0, long i1, double *restrict x, double *restrict vel,
                                 size_t *restrict outliers, int simd)
{
    size_t c = 0;
    double u0[NODES_TB][3], u[NODES_TB][3], xp[NODES_TB][3], f[NODES_TB][3];
    size_t base[NODES_TB];
    int in[NODES_TB];
    for (long b0 = i0; b0 < i1; b0 += NODES_TB) {
        const int m = i1 - b0 < NODES_TB ? (int)(i1 - b0) : NODES_TB;
        double *xb = x + 3 * b0;
        /* the cells of the block (vp_grid_cells: with AVX2, four at a time), then the lookups */
        vp_grid_cells(g, m, xb, base, f, simd);
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
            vp_grid_cells(g, m, &xp[0][0], base, f, simd);
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

/* The cell path's pass over the tracers (advect_cells_range), in blocks: block b covers
 * tracers [b block, (b + 1) block), its outliers' indices go to oidx[b block ...] and their
 * count to ocnt[b].  Blocks are independent, so they may run on any thread in any order. */
typedef struct {
    cell_geom G;
    double glo[3], ghi[3], dt;
    int order, nbod;
    long n, block, nb;
    double *x, *vel, *dens;
    double *zero; /* in uniform fluid, the tracers' density, zeroed block by block (or NULL) */
    size_t *oidx, *ocnt;
    const vp_body *bodies;
} cells_pass;

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

static void cells_pass_block(const cells_pass *P, long b)
{
    const long i1 = vp_block_end(b, P->block, P->n);
    P->ocnt[b] = advect_cells_range(&P->G, P->glo, P->ghi, P->dt, P->order, b * P->block, i1, P->x, P->vel, P->dens,
                                    P->oidx + b * P->block, P->bodies, P->nbod);
    if (P->zero) zero_doubles(P->zero, b * P->block, i1);
}

static void grid_box(const vp_grid *g, double glo[3], double ghi[3])
{
    for (int a = 0; a < 3; a++) { glo[a] = g->origin[a]; ghi[a] = g->origin[a] + g->h * (g->n[a] - 1); }
}

/* The outlier lists of nb blocks of `block` particles, in the tracers' own scratch (kind 1:
 * the overlapped phases use the sim's scratch for the vortons at the same time) or the
 * sim's (vortons). */
static size_t *outlier_lists(vp_sim *s, int tracers, size_t n, long nb)
{
    size_t need = n + (size_t)nb;
    if (!tracers) return (size_t *)vp_sim_scratch(s, need);
    if (need > s->tracer_scratch_allocated) {
        size_t *p = realloc(s->tracer_scratch, need * sizeof(size_t));
        if (!p) return NULL;
        s->tracer_scratch = p; s->tracer_scratch_allocated = need;
    }
    return s->tracer_scratch;
}

/* The cell pass over n tracers, set up (the cells gathered already): blocks of 2048
 * tracers, or 512 below 2^18: hot_ball's 5e4 then make 98, shared evenly by two threads (in
 * blocks of 2048, 13 and 12); 1e6 ran 0.95x in blocks of 512. */
static int cells_pass_init(vp_sim *s, size_t n, double *x, double *vel, double *dens, int project, cells_pass *P)
{
    const vp_grid *g = &s->grid;
    P->dt = s->params.dt; P->order = s->params.advect_order;
    grid_box(g, P->glo, P->ghi);
    P->n = (long)n;
    P->block = n < ((size_t)1 << 18) ? 512 : 2048;
    P->nb = (P->n + P->block - 1) / P->block;
    P->oidx = outlier_lists(s, 1, n, P->nb);
    if (!P->oidx) return VP_ERR_NOMEM;
    P->ocnt = P->oidx + n;
    P->x = x; P->vel = vel; P->dens = dens; P->zero = NULL;
    P->bodies = s->bodies; P->nbod = project ? (int)s->n_bodies : 0;
    cell_geom *G = &P->G;
    for (int a = 0; a < 3; a++) { G->o[a] = g->origin[a]; G->top[a] = (double)(g->n[a] - 1); G->last[a] = g->n[a] - 2; }
    G->inv_h = 1.0 / g->h;
    G->sy = (size_t)(g->n[0] - 1); G->sz = G->sy * (size_t)(g->n[1] - 1);
    G->cells = s->cell_velocity;
    G->prefetch = 32 * sizeof(float) * G->sz * (size_t)(g->n[2] - 1) > VP_PREFETCH_CELLS_BYTES;
#ifdef VP_X86_DISPATCH
    /* The AVX2 lookups and blocks only where the clones of advect_cells_range are not the
     * AVX-512 ones: GCC's x86-64-v4 clone handles the lookup's clamps with mask registers and
     * runs 8 lanes, and on an AVX-512 Xeon the intrinsics took the tracers 1.19x (hot_ball)
     * and 1.33x (ball_through_smoke) longer than it (benchmarks/bench_simd_paths.py, stop
     * 37); on AVX2 CPUs they are 1.44-1.49x faster than the v3 clone.  The same bits either
     * way (the blocks' contractions are the v3 and v4 clones'); VORTONPY_AVX2_TRACERS=1
     * takes the intrinsics there too (the tests compare the paths on such CPUs). */
    G->simd = vp_avx2_ok() && (!__builtin_cpu_supports("x86-64-v4") || vp_env_off("VORTONPY_AVX2_TRACERS"));
    /* where the x86-64-v3 clone of advect_cells_range runs (its contractions) */
    G->block_simd = G->simd && __builtin_cpu_supports("x86-64-v3");
#else
    G->simd = vp_avx2_ok();
    G->block_simd = 0;
#endif
    return VP_OK;
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

/* Phase 6 (physics.md 2.6): advection through the grid velocity.  Order 2 is Heun's
 * method in the frozen field of this step (u at x and at the Euler predictor, averaged);
 * order 1 is the seeds' explicit Euler.  The velocity used is cached on the particle.
 * This is the double grid's path (vortons, and tracers fewer than the nodes); tracers
 * with many per node take the gathered float32 cells (tracer_cells_begin / _end). */
static int advect_nodes(vp_sim *s, int tracers, size_t n, double *x, double *vel)
{
    const int threads = vp_threads(s);
    (void)threads;
    const vp_grid *g = &s->grid;
    const double dt = s->params.dt;
    const int order = s->params.advect_order;
    double glo[3], ghi[3];
    grid_box(g, glo, ghi);
    const long block = 64, nb = ((long)n + block - 1) / block;
    size_t *oidx = outlier_lists(s, tracers, n, nb), *ocnt = oidx ? oidx + n : NULL;
    if (!oidx) return VP_ERR_NOMEM;
    const int simd = vp_avx2_ok();
    const long chunk = vp_block_size(nb, threads, 16); /* (16 blocks: ~50 us) */
    (void)chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, chunk) if (nb >= 2 * chunk)
    for (long b = 0; b < nb; b++) {
        const long i1 = vp_block_end(b, block, (long)n);
        ocnt[b] = advect_nodes_range(g, s->grid_velocity, glo, ghi, dt, order, b * block, i1, x, vel, oidx + b * block,
                                     simd);
    }
    return finish_outliers(s, n, x, vel, oidx, ocnt, nb, block, NULL, 0);
}

int vp_advect_vortons(vp_sim *s)
{
    if (!s->vortons.n) return VP_OK;
    return advect_nodes(s, 0, s->vortons.n, s->vortons.position->data, s->vortons.velocity->data);
}

/* Whether the tracers take the cell path (many tracers per node: the cells are gathered
 * once, then a lookup is one read), and whether the density grid is anything but uniform. */
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

/* The tracers' cell path, either side of its blocks (cells_pass_block): the cells gathered
 * on `threads` threads and the pass set up, the tracers projected out of the bodies (whose
 * `any`: the density grid is not uniform, so the tracers sample it; otherwise the blocks zero
 * their density, cells_pass_block); then the outliers moved (finish_outliers, from the bodies
 * the blocks saw).  (The density was zeroed after the blocks by one thread, a serial 8 MB a
 * step with 1e6 tracers.) */
static int tracer_cells_begin(vp_sim *s, int threads, cells_pass *P, int *any)
{
    vp_tracers *t = &s->tracers;
    *any = density_nonuniform(s);
    int st = gather_cell_velocity(s, threads);
    if (!st) st = cells_pass_init(s, t->n, t->position->data, t->velocity->data, *any ? t->density->data : NULL, 1, P);
    if (!st && !*any) P->zero = t->density->data; /* uniform ambient fluid: nothing to sample */
    return st;
}

static int tracer_cells_end(vp_sim *s, const cells_pass *P)
{
    vp_tracers *t = &s->tracers;
    return finish_outliers(s, t->n, t->position->data, t->velocity->data, P->oidx, P->ocnt, P->nb, P->block,
                           P->bodies, (size_t)P->nbod);
}

/* Tracers also sample the density grid, so dye can be coloured by density or temperature.
 * The cell path also projects the tracers that entered a body to its surface (vp_collide's
 * tracer pass then has nothing to do: *projected = 1); the node path does not (0). */
int vp_advect_tracers(vp_sim *s, int *projected)
{
    vp_tracers *t = &s->tracers;
    *projected = 0;
    if (!t->n) return VP_OK;
    int st, any;
    const int threads = vp_threads(s);
    (void)threads;
    if (tracers_use_cells(s)) {
        cells_pass P;
        if ((st = tracer_cells_begin(s, threads, &P, &any))) return st;
        const long chunk = vp_block_size(P.nb, threads, 1);
        (void)chunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, chunk) if (t->n > 4096)
        for (long b = 0; b < P.nb; b++) cells_pass_block(&P, b);
        *projected = 1;
        return tracer_cells_end(s, &P);
    }
    double *x = t->position->data, *d = t->density->data;
    if ((st = advect_nodes(s, 1, t->n, x, t->velocity->data))) return st;
    if (density_nonuniform(s)) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4096)
        for (long i = 0; i < (long)t->n; i++) vp_grid_interp(&s->grid, s->grid_density, 1, x + 3 * i, d + i);
    } else {
        memset(d, 0, t->n * sizeof(double)); /* uniform ambient fluid: nothing to sample */
    }
    return VP_OK;
}

enum { CHECK_X = 1, CHECK_W = 2, CHECK_D = 4, CHECK_ALL = 7 }; /* check_finite's fields */
static int check_finite(vp_sim *s, int phase, int what);

/* Work estimates for overlap_wanted, in units of one tracer's cell-path step (~10 ns on
 * this machine at one thread): a vorton's diffusion (PSE with ~100 neighbours; per
 * exchange) and its advection.  Measured at one thread: diffusion plus advection take
 * 270-340 ns a vorton on noise lattices of 1e3-3e3 vortons and on hot_ball's states, ~470
 * on spinning_ball's (bunched at the ball: more neighbours, more guard pairs). */
#define OVERLAP_VORTON_PSE 32.0
#define OVERLAP_VORTON_ADVECT 3.0
#define OVERLAP_VORTON_CONTACT 8.0 /* per body: hot_ball's contact phase, ~80 ns a vorton */
/* How much longer than the other threads' tracer work the one thread's vorton chain may
 * be.  With V the chain's time on one thread, W the tracers', and s_v, s_t the phases'
 * speed-ups on two threads, the phases in turn take V / s_v + W / s_t and overlapped
 * V + (W - V) / s_t (while V <= W): the overlap saves V (1 / s_v + 1 / s_t - 1), about
 * 0.2 V here (diffusion below ~5e3 vortons runs only ~1.5x faster on two threads: its
 * setup, cell list and guard are short serial stretches between barriers).  Past V = W the
 * tracers' thread waits, and the saving shrinks to zero near V ~ 1.6 W.  Measured (noise
 * lattices, 2 threads): 1e3 vortons and 5e4 tracers 1.22x the frame, 2e3 and 3e4 1.06x,
 * 5e3 and 5e4 0.98x.  Since the tracers' AVX2 path (advect_block_avx2) a tracer step costs
 * ~0.75 of the unit above and the gain is smaller: 1e3 and 5e4 1.04x, hot_ball's frames
 * 1.04x; the rule, left as it was, still takes both and declines 2e3-5e3 vortons with
 * 3e4-5e4 tracers (0.99-1.01x either way). */
#define OVERLAP_SLACK 1.25

/* Whether phases 5-6 (diffusion, vorton advection) should run on one thread while the
 * others advect the tracers (diffuse_advect_overlapped): with T threads, when the vortons'
 * serial work W_v and the tracers' W_t satisfy (T - 1) W_v <= OVERLAP_SLACK W_t.  The
 * tracers must take the cell path.  Returns 0 (no), 1 (phases 5-6) or 2 (phases 5-7: the
 * contact too, when there are bodies and every tracer lies inside the grid, so that no
 * tracer is moved by the solver after the vortons, which must see them as phase 6 left
 * them).  Either way the results are bitwise the same. */
static int overlap_wanted(const vp_sim *s)
{
    const int threads = s->params.threads;
    if (!s->params.overlap || s->serial || threads < 2 || !s->tracers.n || !tracers_use_cells(s)) return 0;
    const int diffusing = s->vortons.n > 1 &&
        (s->params.viscosity > 0 || s->params.smagorinsky > 0 || s->params.thermal_diffusivity > 0);
    const int k = s->pse_substeps > 1 ? s->pse_substeps : 1; /* the last step's exchanges */
    int contact = s->n_bodies > 0 && s->vortons.n > 0 && s->tracer_box_valid;
    if (contact) {
        double glo[3], ghi[3];
        grid_box(&s->grid, glo, ghi);
        contact = in_box(s->tracer_box, glo, ghi) && in_box(s->tracer_box + 3, glo, ghi);
    }
    const double wv = (double)s->vortons.n * ((diffusing ? OVERLAP_VORTON_PSE * k : 0.0) + OVERLAP_VORTON_ADVECT +
                                              (contact ? OVERLAP_VORTON_CONTACT * (double)s->n_bodies : 0.0));
    if ((double)(threads - 1) * wv > OVERLAP_SLACK * (double)s->tracers.n) return 0;
    return contact ? 2 : 1;
}

/* Phases 5 and 6 (and 7) with the tracers' advection beside them.  The tracers read only
 * the grid velocity and density (built before diffusion, unchanged by phases 5-7) and the
 * bodies, and write only themselves, so they need not wait.  The cells are gathered first
 * on all threads (one thread's gather of a wide grid, such as dye_drop's, took as long as
 * the tracers it then advected); then thread 0 runs diffusion and the vortons' advection
 * alone (s->serial meanwhile: every parallel region in them runs on one thread, vp_threads,
 * and their results do not depend on the thread count), while the other threads take
 * tracer blocks, and thread 0 joins them when done.  The tracers beyond the grid move
 * afterwards, by the vortons as they are after phase 6, as in the serial order.  With
 * with_contact (no tracer beyond the grid: overlap_wanted), thread 0 also runs the finite
 * check and the contact (phase 7, vortons and bodies), and the tracers are projected out of
 * a copy of the bodies as they were before it, as in the serial order.  Bitwise the same
 * as the phases in turn.  tm: ms of diffusion, vorton advection and contact (thread 0's).
 * *started = 0 when the set-up failed (out of memory) before any phase ran: the caller then
 * runs the phases in turn.  If a vorton phase fails, the tracers have been advected already
 * (the serial order would not have moved them; without rollback, a failed step's state is
 * partial either way), and those beyond the grid are left where they were. */
static int diffuse_advect_overlapped(vp_sim *s, int with_contact, double tm[3], int *started)
{
    const int threads = s->params.threads; /* the team: the user's count */
    cells_pass P;
    int st_v = VP_OK, st_t, any;
    *started = 0;
    /* with the contact, thread 0 changes the bodies: the tracers see a copy */
    vp_body *bcopy = with_contact ? malloc(s->n_bodies * sizeof(vp_body)) : NULL;
    if (with_contact && !bcopy) return VP_ERR_NOMEM;
    if ((st_t = tracer_cells_begin(s, threads, &P, &any))) {
        free(bcopy);
        return st_t;
    }
    if (bcopy) {
        memcpy(bcopy, s->bodies, s->n_bodies * sizeof(vp_body));
        P.bodies = bcopy;
    }
    *started = 1;
    long next = 0;
    tm[0] = tm[1] = tm[2] = 0;
#pragma omp parallel num_threads(threads)
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        if (me == 0) {
            const double a = vp_now_ms();
            s->serial = 1;
            st_v = vp_diffuse(s);
            const double b = vp_now_ms();
            if (!st_v) st_v = vp_advect_vortons(s);
            const double c = vp_now_ms();
            if (!st_v && with_contact && !(st_v = check_finite(s, VP_PHASE_ADVECT_VORTONS, CHECK_ALL))) {
                st_v = vp_collide(s, 0); /* the vortons and bodies only: the tracers are projected here */
            }
            s->serial = 0;
            tm[0] = b - a; tm[1] = c - b; tm[2] = vp_now_ms() - c;
        }
        for (long b; (b = vp_claim(&next)) < P.nb;) {
            cells_pass_block(&P, b);
        }
    }
    /* (with the contact there are no outliers: overlap_wanted) */
    if (!st_v) st_t = tracer_cells_end(s, &P);
    free(bcopy);
    return st_v ? st_v : st_t;
}

/* Phase 10 (physics.md 2.10): emitters add particles at their rates, uniformly in their
 * boxes; vortons get vorticity of the emitter's magnitude in a random direction. */
int vp_emit(vp_sim *s)
{
    double dt = s->params.dt;
    for (size_t e = 0; e < s->n_emitters; e++) {
        vp_emitter *E = &s->emitters[e];
        E->vorton_debt += E->vorton_rate * dt;
        E->tracer_debt += E->tracer_rate * dt;
        size_t nv = E->vorton_debt > 0 ? (size_t)E->vorton_debt : 0;
        size_t nt = E->tracer_debt > 0 ? (size_t)E->tracer_debt : 0;
        E->vorton_debt -= (double)nv; E->tracer_debt -= (double)nt;
        if (nv) {
            double *buf = malloc(nv * 8 * sizeof(double));
            if (!buf) return VP_ERR_NOMEM;
            double *p = buf, *w = buf + 3 * nv, *r = buf + 6 * nv, *d = buf + 7 * nv;
            for (size_t i = 0; i < nv; i++) {
                for (int a = 0; a < 3; a++) p[3 * i + a] = E->center[a] + E->half_size[a] * (2 * vp_rng_uniform(s->rng) - 1);
                double z = 2 * vp_rng_uniform(s->rng) - 1, phi = 2 * VP_PI * vp_rng_uniform(s->rng), q = sqrt(1 - z * z);
                w[3 * i] = E->vorticity * q * cos(phi); w[3 * i + 1] = E->vorticity * q * sin(phi); w[3 * i + 2] = E->vorticity * z;
                r[i] = E->vorton_radius; d[i] = E->density;
            }
            int st = vp_sim_add_vortons(s, nv, p, w, r, d);
            free(buf);
            if (st) return st;
        }
        if (nt) {
            double *buf = malloc(nt * 4 * sizeof(double));
            if (!buf) return VP_ERR_NOMEM;
            for (size_t i = 0; i < nt; i++) {
                for (int a = 0; a < 3; a++) buf[3 * i + a] = E->center[a] + E->half_size[a] * (2 * vp_rng_uniform(s->rng) - 1);
                buf[3 * nt + i] = E->density;
            }
            int st = vp_sim_add_tracers(s, nt, buf, buf + 3 * nt);
            free(buf);
            if (st) return st;
        }
    }
    return VP_OK;
}

/* Ages [0, n) advance by dt; returns how many are past life, and in *late how many are past
 * late (branch-free, so it vectorises: the scalar loop with its short-circuit tests was ~2%
 * of ball_through_smoke's step at one thread, for its 1e5 tracers).  The caller removes the
 * particles past their lifetime. */
VP_CLONES
static size_t age_range(double *restrict age, size_t n, double dt, double life, double late, size_t *late_count)
{
    size_t expired = 0, overdue = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = age[i] + dt;
        age[i] = a;
        expired += a > life;
        overdue += a > late;
    }
    *late_count = overdue;
    return expired;
}

int vp_expire(vp_sim *s)
{
    double dt = s->params.dt;
    int st = VP_OK;
    for (int kind = 0; kind < 2 && !st; kind++) {
        size_t n = kind ? s->tracers.n : s->vortons.n;
        if (!n) continue;
        double *age = kind ? s->tracers.age->data : s->vortons.age->data;
        double life = kind ? s->params.tracer_lifetime : s->params.vorton_lifetime;
        /* an even share of the ages a thread, in whole cache lines (1e6 tracers' ages are 16 MB
         * of traffic a step; hot_ball's 5e4 took 10 us on one thread while the other waited;
         * in blocks of 8192, ball_through_smoke's 1e5 split 7:6 between two threads and its
         * emit phase gained 1.25-1.35x from the second); the counts are integers, so the same
         * for any thread count */
        const long lines = ((long)n + 7) / 8;
        size_t overdue = 0, expired = 0;
        const double late = life * (1.0 + 1.0 / 32);
        const int threads = vp_threads(s);
        if (n > (1 << 16) && threads > 1) {
#pragma omp parallel num_threads(threads) reduction(+ : expired, overdue)
            {
                long l0, l1;
                vp_thread_share(lines, &l0, &l1);
                const long i0 = 8 * l0, i1 = 8 * l1 < (long)n ? 8 * l1 : (long)n;
                size_t o = 0;
                if (i1 > i0) expired += age_range(age + i0, (size_t)(i1 - i0), dt, life, late, &o);
                overdue += o;
            }
        } else { /* here, not in a region of one thread (see finite_array) */
            expired = age_range(age, n, dt, life, late, &overdue);
        }
        if (!(life > 0)) continue; /* immortal */
        /* Removal shifts the arrays (stable order), so it is batched: it runs once 1/32 of the
         * particles have expired or one is 1/32 of a lifetime overdue, whichever is first;
         * with steady emitters a particle outlives its lifetime by at most ~3%. */
        if (!expired || (!overdue && expired * 32 < n)) continue;
        /* the expired are usually the first ones (the oldest, emitted first): then they are
         * dropped from the front, the rest moved down on the threads (vp_sim_drop_front) */
        size_t pre = 0;
        while (pre < expired && age[pre] > life) pre++;
        if (pre == expired) { st = vp_sim_drop_front(s, kind, expired); continue; }
        unsigned char *keep = malloc(n);
        if (!keep) return VP_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) keep[i] = !(age[i] > life);
        st = kind ? vp_sim_compact_tracers(s, keep) : vp_sim_compact_vortons(s, keep);
        free(keep);
    }
    return st;
}

/* Whether every a[i] of [i0, i1) is finite: x * 0 is 0 for finite x and NaN otherwise, so a
 * sum of them is 0 exactly when all are finite, in any order of summation.  32 partial sums
 * (four 8-lane chains with AVX-512), so that the loop runs at load speed instead of one
 * vector per add latency; cloned for AVX-512 and AVX2 (the baseline SSE2 loop with one
 * 2-lane chain took 1.4 ms of a 1e5-vorton step, the check running three times a step). */
VP_CLONES
static int finite_range(const double *restrict a, size_t i0, size_t i1)
{
    double acc[32] = {0};
    size_t i = i0;
    for (; i + 32 <= i1; i += 32)
        for (int j = 0; j < 32; j++) acc[j] += a[i + j] * 0.0;
    for (; i < i1; i++) acc[0] += a[i] * 0.0;
    double t = 0;
    for (int j = 0; j < 32; j++) t += acc[j];
    return t == 0.0;
}

/* Whether every a[i] is finite, in parallel for large arrays: one block per thread (fixed
 * blocks of 2^16 left one thread with three of 1e5 vortons' five).  Small arrays are checked
 * here, outside any parallel region: libgomp's region of one thread still costs 0.3-0.6 us
 * and a futex call, and a step makes a dozen of these checks. */
static int finite_array(const double *a, size_t n, int threads)
{
    const long nb = n > (1 << 16) && threads > 1 ? threads : 1, block = ((long)n + nb - 1) / nb;
    if (nb == 1) return finite_range(a, 0, n);
    int ok = 1;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(& : ok) if (nb > 1)
    for (long b = 0; b < nb; b++)
        ok &= finite_range(a, (size_t)(b * block), (size_t)vp_block_end(b, block, (long)n));
    return ok;
}

/* Whether the vortons' fields in `what` (CHECK_X, CHECK_W, CHECK_D: positions, vorticity,
 * density) are all finite; if not, the step fails in `phase`.  Each call checks only what
 * the phases since the last check can have changed: a check reads the arrays whole (seven
 * doubles a vorton for all three), and four of them took 0.6 ms of CPU a step at 1e5
 * vortons. */
static int check_finite(vp_sim *s, int phase, int what)
{
    const int th = vp_threads(s);
    if (s->vortons.n && (((what & CHECK_X) && !finite_array(s->vortons.position->data, 3 * s->vortons.n, th)) ||
                         ((what & CHECK_W) && !finite_array(s->vortons.vorticity->data, 3 * s->vortons.n, th)) ||
                         ((what & CHECK_D) && !finite_array(s->vortons.density->data, s->vortons.n, th)))) {
        s->failed_phase = phase;
        return VP_ERR_NONFINITE;
    }
    return VP_OK;
}

/* The state a rollback restores: particle arrays (vortons: 12 doubles, tracers: 8 doubles
 * per particle), bodies, emitters, RNG, time and frame. */
typedef struct { size_t nv, nt, nb, ne; uint64_t rng[4]; double time; int64_t frame; } snapshot_hdr;
static snapshot_hdr g_unused_hdr; /* (silences unused warnings on some compilers) */

static int take_snapshot(vp_sim *s, snapshot_hdr *h)
{
    size_t nv = s->vortons.n, nt = s->tracers.n, need = 12 * nv + 8 * nt;
    if (need > s->backup_allocated) {
        double *p = realloc(s->backup, need * sizeof(double));
        if (!p) return VP_ERR_NOMEM;
        s->backup = p; s->backup_allocated = need;
    }
    if (s->n_bodies > s->backup_bodies_allocated) {
        vp_body *b = realloc(s->backup_bodies, s->n_bodies * sizeof(vp_body));
        if (!b) return VP_ERR_NOMEM;
        s->backup_bodies = b; s->backup_bodies_allocated = s->n_bodies;
    }
    if (s->n_emitters > s->backup_emitters_allocated) {
        vp_emitter *e = realloc(s->backup_emitters, s->n_emitters * sizeof(vp_emitter));
        if (!e) return VP_ERR_NOMEM;
        s->backup_emitters = e; s->backup_emitters_allocated = s->n_emitters;
    }
    double *p = s->backup;
#define SAVE(buf, w, n) if (n) { memcpy(p, (buf)->data, (n) * (w) * sizeof(double)); } p += (n) * (w);
    SAVE(s->vortons.position, 3, nv) SAVE(s->vortons.vorticity, 3, nv) SAVE(s->vortons.radius, 1, nv)
    SAVE(s->vortons.density, 1, nv) SAVE(s->vortons.age, 1, nv) SAVE(s->vortons.velocity, 3, nv)
    SAVE(s->tracers.position, 3, nt) SAVE(s->tracers.velocity, 3, nt) SAVE(s->tracers.density, 1, nt)
    SAVE(s->tracers.age, 1, nt)
#undef SAVE
    if (s->n_bodies) memcpy(s->backup_bodies, s->bodies, s->n_bodies * sizeof(vp_body));
    if (s->n_emitters) memcpy(s->backup_emitters, s->emitters, s->n_emitters * sizeof(vp_emitter));
    h->nv = nv; h->nt = nt; h->nb = s->n_bodies; h->ne = s->n_emitters;
    memcpy(h->rng, s->rng, sizeof h->rng);
    h->time = s->time; h->frame = s->frame;
    return VP_OK;
}

/* Restore the snapshot.  The arrays still hold at least as many rows as then (a step only
 * adds particles after removing expired ones, and the copy goes into whatever blocks the
 * sim owns now). */
static int restore_snapshot(vp_sim *s, const snapshot_hdr *h)
{
    int st;
    if ((st = vp_sim_reserve_vortons(s, h->nv)) || (st = vp_sim_reserve_tracers(s, h->nt))) return st;
    const double *p = s->backup;
    size_t nv = h->nv, nt = h->nt;
#define LOAD(buf, w, n) if (n) { memcpy((buf)->data, p, (n) * (w) * sizeof(double)); } p += (n) * (w);
    LOAD(s->vortons.position, 3, nv) LOAD(s->vortons.vorticity, 3, nv) LOAD(s->vortons.radius, 1, nv)
    LOAD(s->vortons.density, 1, nv) LOAD(s->vortons.age, 1, nv) LOAD(s->vortons.velocity, 3, nv)
    LOAD(s->tracers.position, 3, nt) LOAD(s->tracers.velocity, 3, nt) LOAD(s->tracers.density, 1, nt)
    LOAD(s->tracers.age, 1, nt)
#undef LOAD
    s->vortons.n = nv; s->tracers.n = nt;
    if (h->nb) memcpy(s->bodies, s->backup_bodies, h->nb * sizeof(vp_body));
    if (h->ne) memcpy(s->emitters, s->backup_emitters, h->ne * sizeof(vp_emitter));
    memcpy(s->rng, h->rng, sizeof h->rng);
    s->time = h->time; s->frame = h->frame;
    return VP_OK;
}

static int step_once(vp_sim *s);

/* Stability guard: explicit advection (Heun) and the stretching exponential lose accuracy,
 * then stability, once a vorton's local rotation and strain rate |grad u| times dt exceeds
 * about 1 (Heun amplifies a rotation by theta per step for theta > 2).  A step whose last
 * measured max |grad u| dt exceeds max_rate_dt is therefore taken as k <= max_substeps
 * substeps of dt / k (same time and frame count afterwards; emitters, lifetimes and
 * diffusion see the shorter dt; remeshing runs once, after the last substep). */
static int step_guarded(vp_sim *s)
{
    double dt = s->params.dt, lim = s->params.max_rate_dt;
    int k = 1;
    if (lim > 0 && s->max_rate * dt > lim) {
        double want = ceil(s->max_rate * dt / lim);
        k = want < (double)s->params.max_substeps ? (int)want : s->params.max_substeps;
        if (k < 1) k = 1;
    }
    s->substeps = k;
    if (k == 1) return step_once(s);
    double t0 = s->time, tl[VP_PHASE_COUNT] = {0};
    int st = VP_OK;
    s->params.dt = dt / k;
    for (int i = 0; i < k && !st; i++) {
        s->in_substep = i < k - 1;
        st = step_once(s);
        for (int p = 0; p < VP_PHASE_COUNT; p++) tl[p] += s->timings[p];
    }
    s->in_substep = 0;
    s->params.dt = dt;
    if (!st) s->time = t0 + dt; /* exactly one dt on, whatever the rounding of k additions */
    for (int p = 0; p < VP_PHASE_COUNT; p++) s->timings[p] = tl[p];
    return st;
}

/* One step; with params.rollback, a failed step leaves the state as it was before it. */
int vp_sim_step(vp_sim *s)
{
    (void)g_unused_hdr;
    if (!s->params.rollback) return step_guarded(s);
    snapshot_hdr h;
    int st = take_snapshot(s, &h);
    if (st) return st;
    st = step_guarded(s);
    if (st) {
        int failed = s->failed_phase;
        restore_snapshot(s, &h);
        s->failed_phase = failed;
    }
    return st;
}

/* One step of dt: physics.md section 2, items 1-10, in order. */
static int step_once(vp_sim *s)
{
    int st;
    double t;
    s->failed_phase = -1;
    s->overlapped = 0;
    for (int p = 0; p < VP_PHASE_COUNT; p++) s->timings[p] = 0;
    if ((st = vp_sim_update_velocity_grid(s))) { s->failed_phase = VP_PHASE_DOMAIN; return st; } /* 1, 2 */
    /* the vorticity and density as given (the domain phase has checked the positions) */
    if ((st = check_finite(s, VP_PHASE_VELOCITY, CHECK_W | CHECK_D))) return st;
    t = vp_now_ms();
    if ((st = vp_splat_density_stretch(s, s->params.stretch))) return st; /* density grid, 3 */
    double t2 = vp_now_ms(); s->timings[VP_PHASE_STRETCH] = t2 - t; t = t2;
    if (s->vortons.n && s->params.baroclinic) vp_baroclinic(s);                                   /* 4 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_BAROCLINIC] = t2 - t; t = t2;
    if ((st = check_finite(s, VP_PHASE_STRETCH, CHECK_W))) return st; /* (3 and 4 change only w) */
    int projected = 1, started = 0;
    if ((s->overlapped = overlap_wanted(s))) {                           /* 5, 6 (and 7), beside the tracers */
        double tm[3];
        st = diffuse_advect_overlapped(s, s->overlapped == 2, tm, &started);
        if (started && st) return st;
        if (started) {
            s->timings[VP_PHASE_DIFFUSE] = tm[0]; s->timings[VP_PHASE_ADVECT_VORTONS] = tm[1];
            s->timings[VP_PHASE_CONTACT] = tm[2];
            t2 = vp_now_ms(); s->timings[VP_PHASE_ADVECT_TRACERS] = t2 - t - tm[0] - tm[1] - tm[2]; t = t2;
        } else {
            s->overlapped = 0; /* its set-up ran out of memory: the phases in turn */
        }
    }
    if (!s->overlapped) {
        if ((st = vp_diffuse(s))) return st;                              /* 5 */
        t2 = vp_now_ms(); s->timings[VP_PHASE_DIFFUSE] = t2 - t; t = t2;
        if ((st = vp_advect_vortons(s))) return st;                       /* 6 */
        t2 = vp_now_ms(); s->timings[VP_PHASE_ADVECT_VORTONS] = t2 - t; t = t2;
        if ((st = vp_advect_tracers(s, &projected))) return st;
        t2 = vp_now_ms(); s->timings[VP_PHASE_ADVECT_TRACERS] = t2 - t; t = t2;
    }
    if (s->overlapped != 2) {
        if ((st = check_finite(s, VP_PHASE_ADVECT_VORTONS, CHECK_ALL))) return st;
        if ((st = vp_collide(s, !projected))) return st;                 /* 7 */
        t2 = vp_now_ms(); s->timings[VP_PHASE_CONTACT] = t2 - t; t = t2;
    }
    vp_bodies_buoyancy(s);                                                /* 8 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_BUOYANCY] = t2 - t; t = t2;
    for (size_t b = 0; b < s->n_bodies; b++) vp_body_integrate(&s->bodies[b], s->params.dt); /* 9 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_BODIES] = t2 - t; t = t2;
    if ((st = vp_expire(s))) return st;                                   /* 10 */
    if ((st = vp_emit(s))) return st;
    t2 = vp_now_ms(); s->timings[VP_PHASE_EMIT] = t2 - t; t = t2;
    int remeshed = 0;
    if (!s->in_substep && s->params.remesh_interval > 0 && (s->frame + 1) % s->params.remesh_interval == 0) {
        if ((st = vp_sim_remesh(s))) { s->failed_phase = VP_PHASE_REMESH; return st; }
        s->timings[VP_PHASE_REMESH] = vp_now_ms() - t;
        remeshed = 1;
    }
    /* Phases 7-10 change the vortons only through bodies, emitters or remeshing (expiry
     * drops whole vortons); without them, they are as the last check saw them. */
    if ((s->n_bodies || s->n_emitters || remeshed) && (st = check_finite(s, VP_PHASE_CONTACT, CHECK_ALL))) return st;
    for (size_t b = 0; b < s->n_bodies; b++) {
        vp_body *B = &s->bodies[b];
        double acc = 0;
        for (int a = 0; a < 3; a++) acc += (B->position[a] + B->momentum[a] + B->angular_momentum[a]) * 0.0;
        if (acc != 0.0 || !isfinite(B->temperature)) { s->failed_phase = VP_PHASE_BODIES; return VP_ERR_NONFINITE; }
    }
    s->time += s->params.dt;
    if (!s->in_substep) s->frame += 1;
    return VP_OK;
}

void vp_sim_diagnostics(const vp_sim *s, const double origin[3], vp_diagnostics *d)
{
    memset(d, 0, sizeof *d);
    const vp_vortons *v = &s->vortons;
    double rho0 = s->params.ambient_density;
    for (size_t i = 0; i < v->n; i++) {
        const double *x = v->position->data + 3 * i, *w = v->vorticity->data + 3 * i, *u = v->velocity->data + 3 * i;
        double V = vp_volume(v->radius->data[i]);
        double a[3] = {w[0] * V, w[1] * V, w[2] * V}, r[3] = {x[0] - origin[0], x[1] - origin[1], x[2] - origin[2]};
        double rxa[3], rrxa[3];
        vp_cross3(r, a, rxa); vp_cross3(r, rxa, rrxa);
        for (int k = 0; k < 3; k++) {
            d->circulation[k] += a[k];
            d->linear_impulse[k] += 0.5 * rxa[k];
            d->angular_impulse[k] += rrxa[k] / 3.0;
        }
        d->enstrophy += vp_dot3(w, w) * V;
        double T = vp_temperature_from_density(rho0, v->density->data[i]);
        d->fluid_heat += s->params.fluid_heat_capacity * V * T;
        d->mass_deviation += v->density->data[i] * V;
        d->kinetic_energy += 0.5 * rho0 * vp_dot3(u, u) * V;
    }
    d->heat = d->fluid_heat;
    for (size_t b = 0; b < s->n_bodies; b++)
        if (s->bodies[b].heat_capacity > 0 && isfinite(s->bodies[b].heat_capacity))
            d->heat += s->bodies[b].heat_capacity * s->bodies[b].temperature;
}
