/* grid_inline.h: the trilinear interpolation of grid.c as an inline function for hot loops
 * (advection, stretching): no branches per corner, the dimension a compile-time constant
 * after inlining.  Requires at least 2 nodes per axis, which vp_domain_update guarantees. */
#ifndef VP_GRID_INLINE_H
#define VP_GRID_INLINE_H
#include "vortonpy.h"

/* Always inlined: an out-of-line copy is compiled for the baseline ISA, and a cloned AVX2 /
 * AVX-512 caller that calls it loses the vector lookups (GCC does not always inline these
 * into the clones on its own). */
#if defined(__GNUC__)
#define VP_GRID_INLINE static inline __attribute__((always_inline))
#else
#define VP_GRID_INLINE static inline
#endif

/* The cell of x (clamped to the grid; NaN -> 0) as its first node's index, and the in-cell
 * fractions f. */
VP_GRID_INLINE size_t vp_grid_cell(const vp_grid *g, const double x[3], double f[3])
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

/* The cell of x for a field of dim doubles a node: the first node of each of its four (y, z)
 * corner rows (c00, c10, c01, c11: +y, +z), the x fraction, and the rows' trilinear weights. */
typedef struct { const double *p[4]; double fx, w[4]; } vp_grid_corners;

/* The same from the cell (vp_grid_cell's base and fractions f). */
VP_GRID_INLINE vp_grid_corners vp_grid_corners_at(const vp_grid *g, const double *field, int dim, size_t base,
                                                  const double f[3])
{
    const size_t sy = (size_t)g->n[0], sz = sy * (size_t)g->n[1];
    vp_grid_corners c = {{field + dim * base, field + dim * (base + sy), field + dim * (base + sz),
                          field + dim * (base + sy + sz)},
                         f[0],
                         {(1 - f[1]) * (1 - f[2]), f[1] * (1 - f[2]), (1 - f[1]) * f[2], f[1] * f[2]}};
    return c;
}

VP_GRID_INLINE vp_grid_corners vp_grid_corners_of(const vp_grid *g, const double *field, int dim, const double x[3])
{
    double f[3];
    const size_t base = vp_grid_cell(g, x, f);
    return vp_grid_corners_at(g, field, dim, base, f);
}

/* vp_grid_cell of m points (records of 3 doubles at x) into base[j] and f[j][0..2]: the
 * cells of a block first, so that its lookups are independent of each other. */
VP_GRID_INLINE void vp_grid_cells(const vp_grid *g, int m, const double *x, size_t *restrict base,
                                  double (*restrict f)[3])
{
    for (int j = 0; j < m; j++) base[j] = vp_grid_cell(g, x + 3 * j, f[j]);
}

VP_GRID_INLINE void vp_grid_interp(const vp_grid *g, const double *restrict field, int dim, const double x[3],
                                  double *restrict out)
{
    const vp_grid_corners c = vp_grid_corners_of(g, field, dim, x);
    for (int k = 0; k < dim; k++) {
        double a[4];
        for (int q = 0; q < 4; q++) a[q] = c.p[q][k] + c.fx * (c.p[q][dim + k] - c.p[q][k]);
        out[k] = c.w[0] * a[0] + c.w[1] * a[1] + c.w[2] * a[2] + c.w[3] * a[3];
    }
}

/* vp_grid_interp for the two widths of the hot loops, on whole vectors: the 3-component
 * fields (velocity, density gradient) as 4 lanes, the Jacobian's 9 as two 4-lane halves and one.  The
 * same arithmetic per component as vp_grid_interp.  The 4-lane loads of a 3-component field
 * read one double past a node's; the field must have VP_GRID_PAD doubles after its last node
 * (domain.c allocates them), and the extra lane is discarded. */
#define VP_GRID_PAD 4
typedef double vp_g4d __attribute__((vector_size(32)));
/* (no 8-double type: vectors wider than AVX2's 32 bytes went through the stack there, see
 * vp_grid_interp9) */
/* lo + fx (hi - lo) on vectors of type T loaded (unaligned) from lo_p and hi_p */
#define VP_LERP_ROW(T, lo_p, hi_p, fx) \
    __extension__({ T lo_, hi_; __builtin_memcpy(&lo_, lo_p, sizeof lo_); __builtin_memcpy(&hi_, hi_p, sizeof hi_); \
                    lo_ + (fx) * (hi_ - lo_); })

/* vp_grid_interp3 from the cell (vp_grid_cells) */
VP_GRID_INLINE void vp_grid_interp3_at(const vp_grid *g, const double *restrict field, size_t base, const double f[3],
                                      double *restrict out)
{
    const vp_grid_corners c = vp_grid_corners_at(g, field, 3, base, f);
    vp_g4d a[4];
    for (int q = 0; q < 4; q++) a[q] = VP_LERP_ROW(vp_g4d, c.p[q], c.p[q] + 3, c.fx);
    const vp_g4d r = c.w[0] * a[0] + c.w[1] * a[1] + c.w[2] * a[2] + c.w[3] * a[3];
    out[0] = r[0]; out[1] = r[1]; out[2] = r[2];
}

VP_GRID_INLINE void vp_grid_interp3(const vp_grid *g, const double *restrict field, const double x[3],
                                   double *restrict out)
{
    double f[3];
    const size_t base = vp_grid_cell(g, x, f);
    vp_grid_interp3_at(g, field, base, f, out);
}

/* vp_grid_interp9 from the cell (vp_grid_cells) */
VP_GRID_INLINE void vp_grid_interp9_at(const vp_grid *g, const double *restrict field, size_t base, const double f[3],
                                      double *restrict out)
{
    /* Two 4-lane halves, not one 8-lane vector: on AVX2 GCC splits the 8-lane operations and
     * builds each scalar weight's broadcast through the stack (stores read back by a wider
     * load, which cannot be forwarded).  The same arithmetic per component. */
    const vp_grid_corners c = vp_grid_corners_at(g, field, 9, base, f);
    vp_g4d a[4], b[4];
    double a8[4];
    for (int q = 0; q < 4; q++) {
        a[q] = VP_LERP_ROW(vp_g4d, c.p[q], c.p[q] + 9, c.fx);
        b[q] = VP_LERP_ROW(vp_g4d, c.p[q] + 4, c.p[q] + 13, c.fx);
        a8[q] = c.p[q][8] + c.fx * (c.p[q][17] - c.p[q][8]);
    }
    const vp_g4d r = c.w[0] * a[0] + c.w[1] * a[1] + c.w[2] * a[2] + c.w[3] * a[3];
    const vp_g4d r2 = c.w[0] * b[0] + c.w[1] * b[1] + c.w[2] * b[2] + c.w[3] * b[3];
    __builtin_memcpy(out, &r, sizeof r);
    __builtin_memcpy(out + 4, &r2, sizeof r2);
    out[8] = c.w[0] * a8[0] + c.w[1] * a8[1] + c.w[2] * a8[2] + c.w[3] * a8[3];
}

VP_GRID_INLINE void vp_grid_interp9(const vp_grid *g, const double *restrict field, const double x[3],
                                   double *restrict out)
{
    double f[3];
    const size_t base = vp_grid_cell(g, x, f);
    vp_grid_interp9_at(g, field, base, f, out);
}
#endif
