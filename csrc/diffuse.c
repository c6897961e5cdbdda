/* diffuse.c: viscous and thermal diffusion by particle strength exchange (physics.md 2.5,
 * Degond and Mas-Gallic 1989), both in one neighbour traversal:
 *   dq_i/dt = k sum_j (q_j - q_i) eta_e(x_i - x_j) V_j / e^2,
 *   eta_e(x) = 4 / (pi^1.5 e^3) exp(-|x|^2 / e^2)   (second moments 2: a Laplacian),
 * with q = vorticity (k = nu) and q = temperature (k = kappa; density follows from it).
 * e_ij is pse_width times the mean particle spacing V^(1/3) of the pair, so the kernel is
 * symmetric and every pair exchange is equal and opposite: sum a_i and sum C_i T_i are
 * conserved to rounding.  Pairs beyond pse_cutoff * e are skipped.  The scheme needs the
 * particles to overlap: spacing at most about e (pse_width >= 1 on a lattice of spacing
 * V^(1/3)); a sparser set under-resolves the Laplacian and diffuses too slowly.
 * Race-free and deterministic: each particle gathers from its neighbours (no scatter),
 * visiting them in a fixed cell order. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"

int vp_diffuse(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    size_t n = v->n;
    double nu = s->params.viscosity, kappa = s->params.thermal_diffusivity;
    if (n < 2 || (nu <= 0 && kappa <= 0)) return VP_OK;
    if (nu <= 0) { /* heat alone: nothing to do while the fluid is uniform */
        int uniform = 1;
        for (size_t i = 1; i < n && uniform; i++) uniform = v->density->data[i] == v->density->data[0];
        if (uniform) return VP_OK;
    }
    const double *x = v->position->data, *r = v->radius->data;
    double *w = v->vorticity->data, *d = v->density->data;
    double rho0 = s->params.ambient_density, dt = s->params.dt;
    double width = s->params.pse_width, cut = s->params.pse_cutoff;
    /* scratch: spacing e_i (1), volume (1), temperature (1), dw (3), dT (1) */
    double *sc = vp_sim_scratch(s, 7 * n);
    if (!sc) return VP_ERR_NOMEM;
    double *e = sc, *V = sc + n, *T = sc + 2 * n, *dw = sc + 3 * n, *dT = sc + 6 * n;
    double emax = 0, lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    int any_heat = 0;
    for (size_t i = 0; i < n; i++) {
        V[i] = vp_volume(r[i]);
        e[i] = width * cbrt(V[i]);
        if (e[i] > emax) emax = e[i];
        T[i] = vp_temperature_from_density(rho0, d[i]);
        if (d[i] != 0.0) any_heat = 1;
        for (int a = 0; a < 3; a++) {
            if (x[3 * i + a] < lo[a]) lo[a] = x[3 * i + a];
            if (x[3 * i + a] > hi[a]) hi[a] = x[3 * i + a];
        }
    }
    if (kappa <= 0) any_heat = 0;
    /* cell list with cells of the cutoff distance; bounded cell count */
    double cell = cut * emax;
    int nc[3];
    for (;;) {
        double tot = 1;
        for (int a = 0; a < 3; a++) { nc[a] = (int)((hi[a] - lo[a]) / cell) + 1; tot *= nc[a]; }
        if (tot <= 4.0 * n + 64) break;
        cell *= 1.26;
    }
    size_t ncell = (size_t)nc[0] * nc[1] * nc[2];
    size_t *start = calloc(ncell + 1, sizeof(size_t));
    size_t *order = malloc(n * sizeof(size_t));
    size_t *cid = malloc(n * sizeof(size_t));
    if (!start || !order || !cid) { free(start); free(order); free(cid); return VP_ERR_NOMEM; }
    for (size_t i = 0; i < n; i++) {
        int c[3];
        for (int a = 0; a < 3; a++) {
            c[a] = (int)((x[3 * i + a] - lo[a]) / cell);
            if (c[a] >= nc[a]) c[a] = nc[a] - 1;
            if (c[a] < 0) c[a] = 0;
        }
        cid[i] = (size_t)c[0] + (size_t)nc[0] * ((size_t)c[1] + (size_t)nc[1] * c[2]);
        start[cid[i] + 1]++;
    }
    for (size_t c = 0; c < ncell; c++) start[c + 1] += start[c];
    {
        size_t *fill = malloc(ncell * sizeof(size_t));
        if (!fill) { free(start); free(order); free(cid); return VP_ERR_NOMEM; }
        memcpy(fill, start, ncell * sizeof(size_t));
        for (size_t i = 0; i < n; i++) order[fill[cid[i]]++] = i;
        free(fill);
    }
    const double norm = 4.0 / (VP_PI * sqrt(VP_PI));
    int threads = s->params.threads;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64)
    for (long ii = 0; ii < (long)n; ii++) {
        size_t i = (size_t)ii;
        size_t c = cid[i];
        int cx = (int)(c % nc[0]), cy = (int)((c / nc[0]) % nc[1]), cz = (int)(c / ((size_t)nc[0] * nc[1]));
        double aw[3] = {0, 0, 0}, aT = 0;
        for (int kz = cz - 1; kz <= cz + 1; kz++) {
            if (kz < 0 || kz >= nc[2]) continue;
            for (int ky = cy - 1; ky <= cy + 1; ky++) {
                if (ky < 0 || ky >= nc[1]) continue;
                for (int kx = cx - 1; kx <= cx + 1; kx++) {
                    if (kx < 0 || kx >= nc[0]) continue;
                    size_t cc = (size_t)kx + (size_t)nc[0] * ((size_t)ky + (size_t)nc[1] * kz);
                    for (size_t q = start[cc]; q < start[cc + 1]; q++) {
                        size_t j = order[q];
                        if (j == i) continue;
                        double dx = x[3 * j] - x[3 * i], dy = x[3 * j + 1] - x[3 * i + 1],
                               dz = x[3 * j + 2] - x[3 * i + 2];
                        double r2 = dx * dx + dy * dy + dz * dz;
                        double eij = 0.5 * (e[i] + e[j]), e2 = eij * eij;
                        if (r2 > cut * cut * e2) continue;
                        /* eta_e V_j / e^2 */
                        double f = norm / (e2 * eij) * exp(-r2 / e2) * V[j] / e2;
                        aw[0] += f * (w[3 * j] - w[3 * i]);
                        aw[1] += f * (w[3 * j + 1] - w[3 * i + 1]);
                        aw[2] += f * (w[3 * j + 2] - w[3 * i + 2]);
                        aT += f * (T[j] - T[i]);
                    }
                }
            }
        }
        dw[3 * i] = nu * dt * aw[0]; dw[3 * i + 1] = nu * dt * aw[1]; dw[3 * i + 2] = nu * dt * aw[2];
        dT[i] = kappa * dt * aT;
    }
    free(start); free(order); free(cid);
    for (size_t i = 0; i < n; i++) {
        if (nu > 0) { w[3 * i] += dw[3 * i]; w[3 * i + 1] += dw[3 * i + 1]; w[3 * i + 2] += dw[3 * i + 2]; }
        if (any_heat) d[i] = vp_density_from_temperature(rho0, T[i] + dT[i]);
    }
    return VP_OK;
}
