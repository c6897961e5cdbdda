/* grid.c: the uniform grid laid over the domain (physics.md 2.1): trilinear interpolation,
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

void vp_grid_splat(const vp_grid *g, double *field, int dim, const double x[3], const double *value)
{
    double u[3]; int i0[3]; double f[3];
    for (int a = 0; a < 3; a++) {
        u[a] = (x[a] - g->origin[a]) / g->h;
        if (!(u[a] >= 0.0) || u[a] > g->n[a] - 1) return; /* outside (or NaN): no mass lands */
        if (g->n[a] < 2) { i0[a] = 0; f[a] = 0.0; continue; }
        int i = (int)u[a]; if (i > g->n[a] - 2) i = g->n[a] - 2;
        i0[a] = i; f[a] = u[a] - i;
    }
    for (int q = 0; q < 8; q++) {
        int a = q & 1, b = (q >> 1) & 1, c = (q >> 2) & 1;
        if ((a && g->n[0] < 2) || (b && g->n[1] < 2) || (c && g->n[2] < 2)) continue;
        double w = (a ? f[0] : 1 - f[0]) * (b ? f[1] : 1 - f[1]) * (c ? f[2] : 1 - f[2]);
        size_t id = IDX(g, i0[0] + a, i0[1] + b, i0[2] + c);
        for (int d = 0; d < dim; d++) field[id * dim + d] += w * value[d];
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
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long k = 0; k < nk; k++)
        for (int j = 0; j < g->n[1]; j++)
            for (int i = 0; i < g->n[0]; i++) {
                size_t id = IDX(g, i, j, k);
                for (int a = 0; a < 3; a++) out[id * 3 + a] = diff(g, scalar, 1, 0, a, i, j, (int)k);
            }
}

void vp_grid_jacobian(const vp_grid *g, const double *vec, double *out, int threads)
{
    (void)threads;
    long nk = g->n[2];
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long k = 0; k < nk; k++)
        for (int j = 0; j < g->n[1]; j++)
            for (int i = 0; i < g->n[0]; i++) {
                size_t id = IDX(g, i, j, k);
                for (int a = 0; a < 3; a++)
                    for (int b = 0; b < 3; b++) out[id * 9 + a * 3 + b] = diff(g, vec, 3, a, b, i, j, (int)k);
            }
}

/* A cell list (physics.md 2.5's neighbour search; the tree's query grouping): n points binned
 * into boxes of side `cell` from lo, the side grown by 1.26x until there are at most
 * max_cells boxes; points beyond [lo, hi] (outliers) go to the edge boxes.  start[c] ..
 * start[c+1] index into order, the points of box c (x fastest) in index order: a counting
 * sort, O(n + cells), deterministic. */
int vp_bins_build(vp_bins *b, size_t n, const double *x, const double lo[3], const double hi[3], double cell,
                  double max_cells)
{
    b->start = NULL; b->order = NULL;
    for (;;) {
        double tot = 1;
        for (int a = 0; a < 3; a++) { b->nc[a] = (int)((hi[a] - lo[a]) / cell) + 1; tot *= b->nc[a]; }
        if (tot <= max_cells) break;
        cell *= 1.26;
    }
    for (int a = 0; a < 3; a++) b->lo[a] = lo[a];
    b->cell = cell;
    const size_t ncell = (size_t)b->nc[0] * b->nc[1] * b->nc[2];
    size_t *start = calloc(ncell + 1, sizeof(size_t)), *order = malloc((n + 1) * sizeof(size_t)),
           *cid = malloc((n + 1) * sizeof(size_t)), *fill = malloc((ncell + 1) * sizeof(size_t));
    if (!start || !order || !cid || !fill) { free(start); free(order); free(cid); free(fill); return VP_ERR_NOMEM; }
    for (size_t i = 0; i < n; i++) {
        size_t c = 0, stride = 1;
        for (int a = 0; a < 3; a++) {
            double u = (x[3 * i + a] - lo[a]) / cell; /* clamp before the cast: outliers, NaN -> 0 */
            int k = u > 0 ? (u < b->nc[a] - 1 ? (int)u : b->nc[a] - 1) : 0;
            c += (size_t)k * stride;
            stride *= (size_t)b->nc[a];
        }
        cid[i] = c;
        start[c + 1]++;
    }
    for (size_t c = 0; c < ncell; c++) start[c + 1] += start[c];
    memcpy(fill, start, ncell * sizeof(size_t));
    for (size_t i = 0; i < n; i++) order[fill[cid[i]]++] = i;
    free(fill); free(cid);
    b->start = start; b->order = order;
    return VP_OK;
}

void vp_bins_free(vp_bins *b)
{
    free(b->start); free(b->order);
    b->start = NULL; b->order = NULL;
}
