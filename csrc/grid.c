/* grid.c: the uniform grid laid over the domain (method step 1): trilinear interpolation,
 * cloud-in-cell splatting, central-difference gradient and Jacobian.  Stateless kernels over
 * plain arrays (Stam's style); the sim owns the memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define IDX(g, i, j, k) ((size_t)(i) + (size_t)(g)->n[0] * ((size_t)(j) + (size_t)(g)->n[1] * (size_t)(k)))

size_t vp_grid_count(const vp_grid *g) { return (size_t)g->n[0] * g->n[1] * g->n[2]; }

/* Cell index and fraction along one axis, clamped to the grid. */
static inline void locate(const vp_grid *g, int axis, double x, int *i0, double *f)
{
    double u = (x - g->origin[axis]) / g->h;
    int n = g->n[axis];
    if (n < 2) { *i0 = 0; *f = 0.0; return; }
    if (!(u > 0.0)) { *i0 = 0; *f = 0.0; return; } /* also catches NaN */
    if (u >= n - 1) { *i0 = n - 2; *f = 1.0; return; }
    int i = (int)u;
    *i0 = i; *f = u - i;
}

void vp_grid_interpolate(const vp_grid *g, const double *field, int dim, const double x[3], double *out)
{
    int i, j, k; double fx, fy, fz;
    locate(g, 0, x[0], &i, &fx); locate(g, 1, x[1], &j, &fy); locate(g, 2, x[2], &k, &fz);
    int di = g->n[0] > 1, dj = g->n[1] > 1, dk = g->n[2] > 1;
    double w[8] = {(1 - fx) * (1 - fy) * (1 - fz), fx * (1 - fy) * (1 - fz), (1 - fx) * fy * (1 - fz),
                   fx * fy * (1 - fz), (1 - fx) * (1 - fy) * fz, fx * (1 - fy) * fz,
                   (1 - fx) * fy * fz, fx * fy * fz};
    size_t id[8] = {IDX(g, i, j, k), IDX(g, i + di, j, k), IDX(g, i, j + dj, k), IDX(g, i + di, j + dj, k),
                    IDX(g, i, j, k + dk), IDX(g, i + di, j, k + dk), IDX(g, i, j + dj, k + dk),
                    IDX(g, i + di, j + dj, k + dk)};
    for (int c = 0; c < dim; c++) {
        double acc = 0.0;
        for (int q = 0; q < 8; q++) acc += w[q] * field[id[q] * dim + c];
        out[c] = acc;
    }
}

/* One cloud-in-cell splat (dim a compile-time constant after inlining); nothing lands for an x
 * outside the grid or NaN. */
static inline void splat_one(const vp_grid *g, double *restrict field, int dim, const double x[3],
                             const double *restrict value)
{
    double f[3];
    int i0[3];
    for (int a = 0; a < 3; a++) {
        double u = (x[a] - g->origin[a]) / g->h;
        if (!(u >= 0.0) || u > g->n[a] - 1) return;
        if (g->n[a] < 2) { i0[a] = 0; f[a] = 0.0; continue; }
        int i = (int)u; if (i > g->n[a] - 2) i = g->n[a] - 2;
        i0[a] = i; f[a] = u - i;
    }
    const int e0 = g->n[0] > 1, e1 = g->n[1] > 1, e2 = g->n[2] > 1;
    for (int q = 0; q < 8; q++) {
        int a = q & 1, b = (q >> 1) & 1, c = (q >> 2) & 1;
        if ((a && !e0) || (b && !e1) || (c && !e2)) continue;
        double w = (a ? f[0] : 1 - f[0]) * (b ? f[1] : 1 - f[1]) * (c ? f[2] : 1 - f[2]);
        size_t id = IDX(g, i0[0] + a, i0[1] + b, i0[2] + c);
        for (int d = 0; d < dim; d++) field[id * dim + d] += w * value[d];
    }
}

/* Point i of vp_grid_splat_many: skipped if its values are all zero (adding them changes nothing). */
static inline void splat_row(const vp_grid *g, double *field, int dim, const double *x, const double *val, size_t i)
{
    const double *v = val + (size_t)dim * i;
    int nz = 0;
    for (int d = 0; d < dim; d++) nz |= v[d] != 0.0;
    if (!nz) return;
    if (dim == 1) splat_one(g, field, 1, x + 3 * i, v); /* the density grid's case, unrolled */
    else splat_one(g, field, dim, x + 3 * i, v);
}

/* Cloud-in-cell splat of n values (dim per point, rows of val) at points x, in parallel and
 * deterministic: a point with base node k0 along an axis writes planes k0 and k0 + 1, so the
 * points are bucketed by k0 (a stable counting sort); slab m, the points with k0 = 2m or
 * 2m + 1, writes planes 2m .. 2m + 2, so the slabs of one parity never write the same plane
 * and run at once.  Every node's sum is then taken in a fixed order (even slabs, odd slabs;
 * within a slab by k0, then by index), the same for any thread count.  Up to
 * VP_SPLAT_PARALLEL_MIN points it is one serial pass in index order.  Points outside the grid,
 * and rows of val that are all zero, add nothing.  work: vp_grid_splat_work(g, n) size_t's of the caller's (no allocation
 * per call: a fresh multi-megabyte block each step costs its page faults). */
size_t vp_grid_splat_work(const vp_grid *g, size_t n)
{
    int m = g->n[0] > g->n[1] ? g->n[0] : g->n[1];
    return 2 * n + 2 * (size_t)(m > g->n[2] ? m : g->n[2]) + 4;
}

#define VP_SPLAT_PARALLEL_MIN 20000 /* fewer points: not worth a parallel region */
_Static_assert(sizeof(size_t) == sizeof(double), "callers carve the splat's work space out of double scratch");

void vp_grid_splat_many(const vp_grid *g, double *field, int dim, size_t n, const double *x, const double *val,
                        size_t *work, int threads)
{
    (void)threads;
    if (n <= VP_SPLAT_PARALLEL_MIN) { /* serial: index order, no buckets needed */
        for (size_t i = 0; i < n; i++) splat_row(g, field, dim, x, val, i);
        return;
    }
    /* slab axis: the one along which the points' memory order moves least (a remeshed set is in
     * lattice order, z slowest; a user's lattice may have z fastest), so that the bucketed order
     * stays close to memory order and the reads of x and val stream */
    int ax = 2;
    {
        double mv[3] = {0, 0, 0};
        size_t stride = n / 4096 + 1;
        for (size_t i = stride; i < n; i += stride)
            for (int a = 0; a < 3; a++) mv[a] += fabs(x[3 * i + a] - x[3 * (i - 1) + a]);
        for (int a = 0; a < 3; a++)
            if (g->n[a] < 3) mv[a] = INFINITY; /* a flat axis gives one slab: no parallelism */
        for (int a = 0; a < 2; a++)
            if (mv[a] < mv[ax]) ax = a;
    }
    const int nz = g->n[ax];
    const int nk = nz > 1 ? nz - 1 : 1; /* possible k0 values */
    size_t *order = work, *kb = work + n, *start = work + 2 * n, *fill = start + nk + 1;
    memset(start, 0, ((size_t)nk + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        double u = (x[3 * i + ax] - g->origin[ax]) / g->h;
        int k = u > 0 ? (u < nk - 1 ? (int)u : nk - 1) : 0; /* a bucket only: splat_one does the bounds */
        kb[i] = (size_t)k;
        start[k + 1]++;
    }
    for (int k = 0; k < nk; k++) start[k + 1] += start[k];
    memcpy(fill, start, (size_t)nk * sizeof(size_t));
    for (size_t i = 0; i < n; i++) order[fill[kb[i]]++] = i;
    const long nslab = (nk + 1) / 2;
    for (int par = 0; par < 2; par++) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (long sl = par; sl < nslab; sl += 2) {
            int k1 = 2 * (int)sl + 2 < nk ? 2 * (int)sl + 2 : nk;
            for (size_t q = start[2 * sl]; q < start[k1]; q++) splat_row(g, field, dim, x, val, order[q]);
        }
    }
}

/* d field[comp] / d x_axis at node (i,j,k): central inside, one-sided at the edges. */
static inline double diff(const vp_grid *g, const double *f, int dim, int comp, int axis, int i, int j, int k)
{
    int n = g->n[axis];
    if (n < 2) return 0.0;
    int p[3] = {i, j, k}, lo[3] = {i, j, k}, hi[3] = {i, j, k};
    double span = 2.0;
    if (p[axis] == 0) { hi[axis] = 1; span = 1.0; }
    else if (p[axis] == n - 1) { lo[axis] = n - 2; span = 1.0; }
    else { lo[axis] = p[axis] - 1; hi[axis] = p[axis] + 1; }
    return (f[IDX(g, hi[0], hi[1], hi[2]) * dim + comp] - f[IDX(g, lo[0], lo[1], lo[2]) * dim + comp]) /
           (span * g->h);
}

void vp_grid_gradient(const vp_grid *g, const double *scalar, double *out, int threads)
{
    (void)threads;
    long nk = g->n[2];
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (vp_grid_count(g) >= 32768) /* ~2 ns a node */
    for (long k = 0; k < nk; k++)
        for (int j = 0; j < g->n[1]; j++)
            for (int i = 0; i < g->n[0]; i++) {
                size_t id = IDX(g, i, j, k);
                for (int a = 0; a < 3; a++) out[id * 3 + a] = diff(g, scalar, 1, 0, a, i, j, (int)k);
            }
}

/* x, opaque to the compiler: a square passed through it is never fused with the sum it
 * goes into (q += x * x into a multiply-add, as -march=native or an FMA clone would), so
 * that the norms, and sim.max_rate, are the same bits in every build. */
static inline double no_contract(double x)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(x));
#elif defined(__GNUC__)
    __asm__("" : "+m"(x));
#endif
    return x;
}

/* One row of nodes (j, k) of vp_grid_jacobian (an axis of one node gives zero differences): the
 * three components of an axis' difference on one 4-lane vector (the field's padded
 * 4-lane read, VP_GRID_PAD: the last lane is discarded), divided as diff() divides them;
 * returns the row's largest squared norm, its squares summed in row-major order and never
 * fused into multiply-adds (no_contract), so the same bits in every clone. */
VP_CLONES
static double jacobian_row(const double *restrict vec, double *restrict out, size_t id0, int n0, size_t ylo,
                           size_t yhi, double dy, size_t zlo, size_t zhi, double dz, double den1, double den2)
{
    typedef double v4d __attribute__((vector_size(32)));
    double m2 = 0.0;
    for (int i = 0; i < n0; i++) {
        const size_t id = id0 + (size_t)i;
        const size_t xlo = i == 0 ? id : id - 1, xhi = i == n0 - 1 ? id : id + 1;
        const double dx = i == 0 || i == n0 - 1 ? den1 : den2;
        v4d a, b, d[3];
        __builtin_memcpy(&a, vec + 3 * xhi, sizeof a); __builtin_memcpy(&b, vec + 3 * xlo, sizeof b);
        d[0] = (a - b) / dx;
        __builtin_memcpy(&a, vec + 3 * (id + yhi), sizeof a); __builtin_memcpy(&b, vec + 3 * (id - ylo), sizeof b);
        d[1] = (a - b) / dy;
        __builtin_memcpy(&a, vec + 3 * (id + zhi), sizeof a); __builtin_memcpy(&b, vec + 3 * (id - zlo), sizeof b);
        d[2] = (a - b) / dz;
        double *o = out + 9 * id, q = 0;
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 3; c++) o[3 * r + c] = d[c][r];
        for (int c = 0; c < 9; c++) q += no_contract(o[c] * o[c]); /* row-major, unfused */
        m2 = q > m2 ? q : m2;
    }
    return m2;
}

/* The Jacobian J_ab = du_a/dx_b of a 3-vector field at every node, by diff()'s differences
 * (central inside, one-sided at the edges: the same expressions, so the same bits), with the
 * three components of one axis' difference taken together; returns the largest squared
 * Frobenius norm sum_ab J_ab^2 over the nodes (exact: a max, so the same for any thread count).
 * The field needs VP_GRID_PAD doubles past its last node (jacobian_row's 4-lane reads). */
double vp_grid_jacobian(const vp_grid *g, const double *vec, double *out, int threads)
{
    (void)threads;
    const int nn[3] = {g->n[0], g->n[1], g->n[2]};
    const size_t sy = (size_t)nn[0], sz = (size_t)nn[0] * (size_t)nn[1];
    const double den2 = 2.0 * g->h, den1 = 1.0 * g->h;
    double m2 = 0.0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(max : m2) \
    if (vp_grid_count(g) >= 8192) /* ~6 ns a node */
    for (long k = 0; k < nn[2]; k++)
        for (int j = 0; j < nn[1]; j++) {
            /* the offsets down (lo) and up (hi) along y and z, and their spans: one-sided at
             * an edge, none along an axis of one node (a zero difference, J's column 0) */
            const size_t ylo = j == 0 ? 0 : sy, yhi = j == nn[1] - 1 ? 0 : sy;
            const size_t zlo = k == 0 ? 0 : sz, zhi = k == nn[2] - 1 ? 0 : sz;
            const double dy = j == 0 || j == nn[1] - 1 ? den1 : den2, dz = k == 0 || k == nn[2] - 1 ? den1 : den2;
            const size_t id0 = IDX(g, 0, j, k);
            const double q = jacobian_row(vec, out, id0, nn[0], ylo, yhi, dy, zlo, zhi, dz, den1, den2);
            m2 = q > m2 ? q : m2;
        }
    return m2;
}

/* The box of each of points [i0, i1): vp_bins_cell's along each axis, written out with the
 * clamps in double so that the loop vectorises (vp_bins_cell's int clamps, or the counting
 * in the same loop, keep it scalar).  Compiled for AVX-512, AVX2 and the baseline
 * (VP_CLONES). */
VP_CLONES
static void bins_cells(const vp_bins *b, const double *restrict x, size_t i0, size_t i1, size_t *restrict cid)
{
    const double lo0 = b->lo[0], lo1 = b->lo[1], lo2 = b->lo[2], inv = b->inv;
    const double top0 = b->nc[0] - 1, top1 = b->nc[1] - 1, top2 = b->nc[2] - 1;
    const size_t s1 = (size_t)b->nc[0], s2 = (size_t)b->nc[0] * (size_t)b->nc[1];
    for (size_t i = i0; i < i1; i++) {
        double u0 = (x[3 * i] - lo0) * inv, u1 = (x[3 * i + 1] - lo1) * inv, u2 = (x[3 * i + 2] - lo2) * inv;
        u0 = u0 > 0 ? (u0 < top0 ? u0 : top0) : 0; /* as vp_bins_cell: NaN to 0 */
        u1 = u1 > 0 ? (u1 < top1 ? u1 : top1) : 0;
        u2 = u2 > 0 ? (u2 < top2 ? u2 : top2) : 0;
        cid[i] = (size_t)(int)u0 + s1 * (size_t)(int)u1 + s2 * (size_t)(int)u2;
    }
}

/* A cell list (method step 5's neighbour search; the tree's query grouping): n points binned
 * into boxes of side `cell` from lo, the side grown by 1.26x until there are at most
 * max_cells boxes; points beyond [lo, hi] (outliers) go to the edge boxes.  start[c] ..
 * start[c+1] index into order, the points of box c (x fastest) in index order: a counting
 * sort, O(n + cells), deterministic, in parallel from VP_BINS_PARALLEL_MIN points. */
int vp_bins_build(vp_bins *b, size_t n, const double *x, const double lo[3], const double hi[3], double cell,
                  double max_cells, int threads)
{
    b->start = NULL; b->order = NULL;
    if (!(cell > 0) || !isfinite(cell)) { /* degenerate (zero radii): one cell over the box */
        cell = 0;
        for (int a = 0; a < 3; a++) cell = hi[a] - lo[a] > cell ? hi[a] - lo[a] : cell;
        if (!(cell > 0) || !isfinite(cell)) cell = 1.0;
    }
    for (;;) {
        double tot = 1;
        for (int a = 0; a < 3; a++) { b->nc[a] = vp_cell_count(hi[a] - lo[a], cell); tot *= b->nc[a]; }
        if (tot <= max_cells) break;
        cell *= 1.26;
    }
    for (int a = 0; a < 3; a++) b->lo[a] = lo[a];
    b->cell = cell;
    b->inv = 1.0 / cell;
    const size_t ncell = (size_t)b->nc[0] * b->nc[1] * b->nc[2];
    /* A stable counting sort.  In parallel, in three loops over fixed blocks of the points and
     * runs of the boxes, so that any thread may take any part: each block of points counts
     * its points per box (a row of fill per block); each run of boxes turns the counts into
     * offsets (box c's points are the blocks' in block order), after one serial pass over the
     * runs' totals; each block places its points.  The order within a box is the points' own,
     * so the result is the same at any thread count and any split. */
    const int par = threads > 1 && n >= VP_BINS_PARALLEL_MIN;
    long nblk = 1, nrun = 1;
    if (par) { /* a few blocks a thread, fewer where the rows of counts would outweigh the points */
        const long most = VP_BLOCKS_PER_THREAD * (long)threads, rows = (long)(4 * n / (ncell + 1));
        nblk = rows < threads ? threads : (rows > most ? most : rows);
        nrun = most;
    }
    const long bsz = (long)(n + (size_t)nblk - 1) / nblk, csz = (long)(ncell + (size_t)nrun - 1) / nrun;
    size_t *start = malloc((ncell + 1) * sizeof(size_t)), *order = malloc((n + 1) * sizeof(size_t)),
           *cid = malloc((n + 1) * sizeof(size_t)), *fill = malloc(((size_t)nblk * ncell + 1) * sizeof(size_t)),
           *part = malloc(((size_t)nrun + 1) * sizeof(size_t));
    if (!start || !order || !cid || !fill || !part) {
        free(start); free(order); free(cid); free(fill); free(part); return VP_ERR_NOMEM;
    }
#pragma omp parallel num_threads(threads) if (par)
    {
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < nblk; u++) {
            const size_t i0 = (size_t)(u * bsz), i1 = (size_t)vp_block_end(u, bsz, (long)n);
            size_t *cnt = fill + (size_t)u * ncell;
            memset(cnt, 0, ncell * sizeof(size_t));
            if (i0 < i1) bins_cells(b, x, i0, i1, cid);
            for (size_t i = i0; i < i1; i++) cnt[cid[i]]++;
        }
#pragma omp for schedule(dynamic, 1)
        for (long r = 0; r < nrun; r++) { /* the run's total */
            size_t tot = 0;
            for (size_t c = (size_t)(r * csz); c < (size_t)vp_block_end(r, csz, (long)ncell); c++)
                for (long u = 0; u < nblk; u++) tot += fill[(size_t)u * ncell + c];
            part[r + 1] = tot;
        }
#pragma omp single
        {
            part[0] = 0;
            for (long r = 0; r < nrun; r++) part[r + 1] += part[r];
            start[ncell] = part[nrun];
        }
#pragma omp for schedule(dynamic, 1)
        for (long r = 0; r < nrun; r++) { /* the offsets of the run's boxes, per block */
            size_t run = part[r];
            for (size_t c = (size_t)(r * csz); c < (size_t)vp_block_end(r, csz, (long)ncell); c++) {
                start[c] = run;
                for (long u = 0; u < nblk; u++) {
                    const size_t k = fill[(size_t)u * ncell + c];
                    fill[(size_t)u * ncell + c] = run;
                    run += k;
                }
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < nblk; u++) {
            size_t *next = fill + (size_t)u * ncell;
            for (size_t i = (size_t)(u * bsz); i < (size_t)vp_block_end(u, bsz, (long)n); i++) order[next[cid[i]]++] = i;
        }
    }
    free(part);
    free(fill); free(cid);
    b->start = start; b->order = order;
    return VP_OK;
}

void vp_bins_free(vp_bins *b)
{
    free(b->start); free(b->order);
    b->start = NULL; b->order = NULL;
}
