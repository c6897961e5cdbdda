/* grid_inline.h: the trilinear interpolation of grid.c as an inline function for hot loops
 * (advection, stretching): no branches per corner, the dimension a compile-time constant
 * after inlining.  Requires at least 2 nodes per axis, which vp_domain_update guarantees. */
#ifndef VP_GRID_INLINE_H
#define VP_GRID_INLINE_H
#include "vortonpy.h"

static inline void vp_grid_interp(const vp_grid *g, const double *restrict field, int dim, const double x[3],
                                  double *restrict out)
{
    double f[3];
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
    double w00 = (1 - f[1]) * (1 - f[2]), w10 = f[1] * (1 - f[2]), w01 = (1 - f[1]) * f[2], w11 = f[1] * f[2];
    const double *p00 = field + base * dim, *p10 = p00 + stride[1] * dim, *p01 = p00 + stride[2] * dim,
                 *p11 = p10 + stride[2] * dim;
    for (int c = 0; c < dim; c++) {
        double a00 = p00[c] + f[0] * (p00[dim + c] - p00[c]);
        double a10 = p10[c] + f[0] * (p10[dim + c] - p10[c]);
        double a01 = p01[c] + f[0] * (p01[dim + c] - p01[c]);
        double a11 = p11[c] + f[0] * (p11[dim + c] - p11[c]);
        out[c] = w00 * a00 + w10 * a10 + w01 * a01 + w11 * a11;
    }
}
#endif
