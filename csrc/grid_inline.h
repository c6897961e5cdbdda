/* grid_inline.h: the trilinear interpolation of grid.c as an inline function for hot loops
 * (advection, stretching): no branches per corner, the dimension a compile-time constant
 * after inlining.  Requires at least 2 nodes per axis, which vp_domain_update guarantees. */
#ifndef VP_GRID_INLINE_H
#define VP_GRID_INLINE_H
#include "vortonpy.h"

/* The cell of x (clamped to the grid; NaN -> 0) as its first node's index, and the in-cell
 * fractions f. */
static inline size_t vp_grid_cell(const vp_grid *g, const double x[3], double f[3])
{
    size_t base = 0, stride[3] = {1, (size_t)g->n[0], (size_t)g->n[0] * (size_t)g->n[1]};
    double inv_h = 1.0 / g->h;
    for (int a = 0; a < 3; a++) {
        double u = (x[a] - g->origin[a]) * inv_h;
        double hi = (double)(g->n[a] - 1);
        u = u > 0.0 ? (u < hi ? u : hi) : 0.0; /* clamp; NaN -> 0 */
        int i = (int)u;
        if (i > g->n[a] - 2) i = g->n[a] - 2;
        f[a] = u - i;
        base += (size_t)i * stride[a];
    }
    return base;
}

static inline void vp_grid_interp(const vp_grid *g, const double *restrict field, int dim, const double x[3],
                                  double *restrict out)
{
    double f[3];
    const size_t base = vp_grid_cell(g, x, f), sy = (size_t)g->n[0], sz = sy * (size_t)g->n[1];
    double w00 = (1 - f[1]) * (1 - f[2]), w10 = f[1] * (1 - f[2]), w01 = (1 - f[1]) * f[2], w11 = f[1] * f[2];
    const double *p00 = field + base * dim, *p10 = p00 + sy * dim, *p01 = p00 + sz * dim,
                 *p11 = p10 + sz * dim;
    for (int c = 0; c < dim; c++) {
        double a00 = p00[c] + f[0] * (p00[dim + c] - p00[c]);
        double a10 = p10[c] + f[0] * (p10[dim + c] - p10[c]);
        double a01 = p01[c] + f[0] * (p01[dim + c] - p01[c]);
        double a11 = p11[c] + f[0] * (p11[dim + c] - p11[c]);
        out[c] = w00 * a00 + w10 * a10 + w01 * a01 + w11 * a11;
    }
}

/* vp_grid_interp for the two widths of the hot loops, on whole vectors: the 3-component
 * fields (velocity, density gradient) as 4 lanes, the Jacobian's 9 as 8 lanes and one.  The
 * same arithmetic per component as vp_grid_interp.  The 4-lane loads of a 3-component field
 * read one double past a node's; the field must have VP_GRID_PAD doubles after its last node
 * (sim.c allocates them), and the extra lane is discarded. */
#define VP_GRID_PAD 4
typedef double vp_g4d __attribute__((vector_size(32)));
typedef double vp_g8d __attribute__((vector_size(64)));

static inline void vp_grid_interp3(const vp_grid *g, const double *restrict field, const double x[3],
                                   double *restrict out)
{
    double f[3];
    const size_t base = vp_grid_cell(g, x, f), sy = (size_t)g->n[0], sz = sy * (size_t)g->n[1];
    const double w00 = (1 - f[1]) * (1 - f[2]), w10 = f[1] * (1 - f[2]), w01 = (1 - f[1]) * f[2], w11 = f[1] * f[2];
    const double *p[4] = {field + 3 * base, field + 3 * (base + sy), field + 3 * (base + sz), field + 3 * (base + sy + sz)};
    vp_g4d a[4];
    for (int q = 0; q < 4; q++) {
        vp_g4d lo, hi;
        __builtin_memcpy(&lo, p[q], sizeof lo);
        __builtin_memcpy(&hi, p[q] + 3, sizeof hi);
        a[q] = lo + f[0] * (hi - lo);
    }
    const vp_g4d r = w00 * a[0] + w10 * a[1] + w01 * a[2] + w11 * a[3];
    out[0] = r[0]; out[1] = r[1]; out[2] = r[2];
}

static inline void vp_grid_interp9(const vp_grid *g, const double *restrict field, const double x[3],
                                   double *restrict out)
{
    double f[3];
    const size_t base = vp_grid_cell(g, x, f), sy = (size_t)g->n[0], sz = sy * (size_t)g->n[1];
    const double w00 = (1 - f[1]) * (1 - f[2]), w10 = f[1] * (1 - f[2]), w01 = (1 - f[1]) * f[2], w11 = f[1] * f[2];
    const double *p[4] = {field + 9 * base, field + 9 * (base + sy), field + 9 * (base + sz), field + 9 * (base + sy + sz)};
    vp_g8d a[4];
    double a8[4];
    for (int q = 0; q < 4; q++) {
        vp_g8d lo, hi;
        __builtin_memcpy(&lo, p[q], sizeof lo);
        __builtin_memcpy(&hi, p[q] + 9, sizeof hi);
        a[q] = lo + f[0] * (hi - lo);
        a8[q] = p[q][8] + f[0] * (p[q][17] - p[q][8]);
    }
    const vp_g8d r = w00 * a[0] + w10 * a[1] + w01 * a[2] + w11 * a[3];
    __builtin_memcpy(out, &r, sizeof r);
    out[8] = w00 * a8[0] + w10 * a8[1] + w01 * a8[2] + w11 * a8[3];
}
#endif
