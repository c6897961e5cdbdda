/* stretch.c: vortex stretching and tilting, dw/dt = (w . grad) u (method step 3), in the
 * classical form J w with J_ab = du_a/dx_b, or (params.stretch_form) the transpose form J^T w.
 * The two agree for a divergence-free vorticity field; the vortons' is not exactly so, and
 * with the classical form a vortex ring's particle noise grows and its impulse falls (0.3% a
 * unit time at dt = 1/30 with the rk2 integrator), with the transpose form it holds (0.02%).
 *
 * The seeds ran this at half rate "for stability".  We keep the true rate and integrate it
 * with the exponential of the frozen Jacobian, w(t+dt) = exp(J dt) w(t), by its 4th-order
 * Taylor series: exact for a frozen linear field to O(dt^5), and stable where explicit Euler
 * amplifies rotation (tilting) at every step.  With the rk2 integrator J is the step's
 * midpoint field taken at the midpoint of the vorton's path, x + dt/2 u (at the start x, the
 * Jacobian a vorton circling a ring's core sees lags its motion: first order in dt). */
#include "internal.h"
#include "grid_inline.h"

/* exp(J dt) w for vortons [i0, i1), J (or J^T) interpolated at each one's position (with vel,
 * at x + dt/2 vel(x)).  In blocks of 64:
 * the interpolations (their nine components on whole vectors), then the series for the
 * block as a loop over vortons that the compiler vectorises across them (VP_CLONES). */
VP_CLONES
static void stretch_range(const vp_grid *g, const double *restrict jac, const double *restrict vel, int transpose,
                          double dt, long i0, long i1, const double *restrict x, double *restrict w)
{
    double J[9][64], Jv[9], f[64][3], xm[64][3];
    size_t base[64];
    for (long b0 = i0; b0 < i1; b0 += 64) {
        const int m = (int)(i1 - b0 < 64 ? i1 - b0 : 64);
        vp_grid_cells(g, m, x + 3 * b0, base, f);
        if (vel) { /* the step's midpoint on the vorton's path, x + dt/2 u(x) */
            for (int j = 0; j < m; j++) {
                double u[3];
                vp_grid_interp3_at(g, vel, base[j], f[j], u);
                for (int a = 0; a < 3; a++) xm[j][a] = x[3 * (b0 + j) + a] + 0.5 * dt * u[a];
            }
            vp_grid_cells(g, m, &xm[0][0], base, f);
        }
        for (int j = 0; j < m; j++) {
            vp_grid_interp9_at(g, jac, base[j], f[j], Jv);
            for (int c = 0; c < 9; c++) J[c][j] = Jv[transpose ? 3 * (c % 3) + c / 3 : c];
        }
        double *wb = w + 3 * b0;
        for (int j = 0; j < m; j++) {
            double t0 = wb[3 * j], t1 = wb[3 * j + 1], t2 = wb[3 * j + 2], s0 = t0, s1 = t1, s2 = t2;
            for (int k = 1; k <= 4; k++) {
                const double f = dt / k;
                const double n0 = f * (J[0][j] * t0 + J[1][j] * t1 + J[2][j] * t2);
                const double n1 = f * (J[3][j] * t0 + J[4][j] * t1 + J[5][j] * t2);
                const double n2 = f * (J[6][j] * t0 + J[7][j] * t1 + J[8][j] * t2);
                t0 = n0; t1 = n1; t2 = n2;
                s0 += n0; s1 += n1; s2 += n2;
            }
            wb[3 * j] = s0; wb[3 * j + 1] = s1; wb[3 * j + 2] = s2;
        }
    }
}

/* Phase 3 (method step 3): every vorton's w <- exp(J dt) w (unless params.stretch is 0). */
int vp_stretch(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    const long n = (long)v->n;
    if (!n || !s->params.stretch) return VP_OK;
    const int threads = vp_threads(s);
    const long bs = vp_block_size(n, threads, 512), nb = (n + bs - 1) / bs; /* ~50 ns a vorton */
    (void)threads;
    const int midpoint = s->params.integrator == VP_INTEGRATOR_RK2,
              transpose = s->params.stretch_form == VP_STRETCH_TRANSPOSE;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (nb > 1)
    for (long b = 0; b < nb; b++)
        stretch_range(&s->grid, s->grid_jacobian, midpoint ? s->grid_velocity : NULL, transpose, s->params.dt, b * bs,
                      vp_block_end(b, bs, n), v->position->data, v->vorticity->data);
    return VP_OK;
}
