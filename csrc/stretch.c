/* stretch.c: vortex stretching and tilting, dw/dt = (w . grad) u (physics.md 2.3), in the
 * classical form J w with J_ab = du_a/dx_b (not the transpose form J^T w).
 *
 * The seeds ran this at half rate "for stability".  We keep the true rate and integrate it
 * with the exponential of the frozen Jacobian, w(t+dt) = exp(J dt) w(t), by its 4th-order
 * Taylor series: exact for a frozen linear field to O(dt^5), and stable where explicit Euler
 * amplifies rotation (tilting) at every step. */
#include "internal.h"
#include "grid_inline.h"

void vp_stretch(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    double dt = s->params.dt;
    int threads = s->params.threads;
    (void)threads;
    double *x = v->position->data, *w = v->vorticity->data;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < (long)v->n; i++) {
        double J[9];
        vp_grid_interp(&s->grid, s->grid_jacobian, 9, x + 3 * i, J);
        double t[3] = {w[3 * i], w[3 * i + 1], w[3 * i + 2]}, acc[3] = {t[0], t[1], t[2]};
        for (int k = 1; k <= 4; k++) {
            double f = dt / k;
            double n0 = f * (J[0] * t[0] + J[1] * t[1] + J[2] * t[2]);
            double n1 = f * (J[3] * t[0] + J[4] * t[1] + J[5] * t[2]);
            double n2 = f * (J[6] * t[0] + J[7] * t[1] + J[8] * t[2]);
            t[0] = n0; t[1] = n1; t[2] = n2;
            acc[0] += n0; acc[1] += n1; acc[2] += n2;
        }
        w[3 * i] = acc[0]; w[3 * i + 1] = acc[1]; w[3 * i + 2] = acc[2];
    }
}
