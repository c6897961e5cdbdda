/* diffuse.c: viscous and thermal diffusion by particle strength exchange (physics.md 2.5,
 * Degond and Mas-Gallic 1989), both in one neighbour traversal:
 *   dq_i/dt = k sum_j (q_j - q_i) eta_e(x_i - x_j) V_j / e^2,
 *   eta_e(x) = 4 / (pi^1.5 e^3) exp(-|x|^2 / e^2)   (second moments 2: a Laplacian),
 * with q = vorticity (k = nu) and q = temperature (k = kappa; density follows from it).
 * Vorticity diffuses with nu_ij = (nu_i + nu_j) / 2, nu_i = nu + (C_s D_i)^2 |S_i|: the
 * molecular viscosity plus Smagorinsky's subgrid eddy viscosity (Smagorinsky 1963; for vortex
 * particles, Cottet 1996 and Winckelmans 2004), D_i the vorton spacing V^(1/3), |S| =
 * sqrt(2 S:S) the strain rate from the grid Jacobian.  Without it the energy that cascades
 * below the vorton spacing has nowhere to go: classical stretching then amplifies particle-
 * scale noise until it blows up (the seeds halved the stretching rate instead).  nu_i is
 * capped at 0.1 D_i^2 / dt, inside the explicit scheme's stability limit (4 nu dt / e^2 < 1).
 * e_ij is pse_width times the mean particle spacing V^(1/3) of the pair, so the kernel is
 * symmetric and every pair exchange is equal and opposite: sum a_i and sum C_i T_i are
 * conserved to rounding.  Pairs beyond pse_cutoff * e (default 3) are skipped, and the
 * kernel is renormalised for the cut so its second moment stays exactly 2.  The scheme needs the
 * particles to overlap: spacing at most about e (pse_width >= 1 on a lattice of spacing
 * V^(1/3)); a sparser set under-resolves the Laplacian and diffuses too slowly.
 * Race-free and deterministic: each particle gathers from its neighbours (no scatter),
 * visiting them in a fixed cell order. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"
#include "grid_inline.h"

/* exp(-t) for 0 <= t <= 16, vectorisable (pure arithmetic): (exp(-t/16))^16 with a
 * degree-12 Taylor polynomial on [0, 1]; relative error below 1e-8 there.  The PSE cutoff
 * keeps t <= pse_cutoff^2 (<= 16 is enforced by the caller's clamp). */
static inline double vp_exp_neg(double t)
{
    double f = t * 0.0625, p = 1.0 / 479001600.0;
    static const double c[12] = {-1.0 / 39916800.0, 1.0 / 3628800.0, -1.0 / 362880.0, 1.0 / 40320.0,
                                 -1.0 / 5040.0,     1.0 / 720.0,     -1.0 / 120.0,    1.0 / 24.0,
                                 -1.0 / 6.0,        0.5,             -1.0,            1.0};
    for (int i = 0; i < 12; i++) p = p * f + c[i];
    p = p * p; p = p * p; p = p * p; p = p * p;
    return p;
}

/* exp(-t) in float32 for 0 <= t <= 16: (exp(-t/16))^16 with a degree-8 Taylor polynomial;
 * relative error about 2e-6 for t <= 9 (float rounding amplified 16x by the squarings), far
 * below the PSE quadrature error, with twice the lanes of the double version.  Used for the
 * pair weight only: a function of the pair's symmetric r^2/e^2, so the weight stays bitwise
 * symmetric. */
static inline float vp_exp_negf(float t)
{
    static const float c[7] = {-1.0f / 5040.0f, 1.0f / 720.0f, -1.0f / 120.0f, 1.0f / 24.0f,
                               -1.0f / 6.0f,    0.5f,          -1.0f}; /* (-1)^k / k!, k = 7..1 */
    float f = t * 0.0625f, p = 1.0f / 40320.0f;
    for (int i = 0; i < 7; i++) p = p * f + c[i];
    p = p * f + 1.0f;
    p = p * p; p = p * p; p = p * p; p = p * p;
    return p;
}

/* Sums over m candidate neighbours j (a contiguous SoA batch) of one vorton q:
 * sum_j eta'(x_q - x_j) V_j / e^2 (w_j - w_q) and the same for T, with eta' =
 * exp(-r^2/e^2)/e^3 (the caller multiplies by the normalisation).  The pair weight is
 * computed from symmetric quantities, so it is bitwise the same for (q, j) and (j, q): the
 * exchange is antisymmetric to rounding.  j == q contributes zero; pairs beyond the cutoff
 * are masked (the whole batch is computed, vectorised). */
VP_CLONES
static void vp_pse_sum(size_t m, const double *restrict X, const double *restrict Y, const double *restrict Z,
                       const double *restrict E, const double *restrict V, const double *restrict WX,
                       const double *restrict WY, const double *restrict WZ, const double *restrict T,
                       const double *restrict NU, const double q[9], double cut2, double acc[4])
{
    double xq = q[0], yq = q[1], zq = q[2], eq = q[3], wx = q[4], wy = q[5], wz = q[6], tq = q[7], nq = q[8];
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (size_t j = 0; j < m; j++) {
        double dx = X[j] - xq, dy = Y[j] - yq, dz = Z[j] - zq;
        double r2 = dx * dx + dy * dy + dz * dz;
        double inv = 1.0 / (0.5 * (eq + E[j])), inv2 = inv * inv, u = r2 * inv2;
        double inside = u <= cut2, uc = u < cut2 ? u : cut2;
        double f = inside * (double)vp_exp_negf((float)uc) * (inv2 * inv2 * inv) * V[j], fw = f * (0.5 * (nq + NU[j]));
        s0 += fw * (WX[j] - wx); s1 += fw * (WY[j] - wy); s2 += fw * (WZ[j] - wz); s3 += f * (T[j] - tq);
    }
    acc[0] += s0; acc[1] += s1; acc[2] += s2; acc[3] += s3;
}

int vp_diffuse(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    size_t n = v->n;
    double nu = s->params.viscosity, kappa = s->params.thermal_diffusivity, cs = s->params.smagorinsky;
    int viscous = nu > 0 || cs > 0;
    if (n < 2 || (!viscous && kappa <= 0)) return VP_OK;
    if (!viscous) { /* heat alone: nothing to do while the fluid is uniform */
        int uniform = 1;
        for (size_t i = 1; i < n && uniform; i++) uniform = v->density->data[i] == v->density->data[0];
        if (uniform) return VP_OK;
    }
    const double *x = v->position->data, *r = v->radius->data;
    double *w = v->vorticity->data, *d = v->density->data;
    double rho0 = s->params.ambient_density, dt = s->params.dt;
    double width = s->params.pse_width, cut = s->params.pse_cutoff;
    /* scratch: spacing e_i (1), volume (1), temperature (1), dw (3), dT (1), nu_i (1) */
    double *sc = vp_sim_scratch(s, 8 * n);
    if (!sc) return VP_ERR_NOMEM;
    double *e = sc, *V = sc + n, *T = sc + 2 * n, *dw = sc + 3 * n, *dT = sc + 6 * n, *nui = sc + 7 * n;
    double emax = 0, lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    double lim_lo[3], lim_hi[3]; /* outliers go to the edge cells: they sit far from all */
    vp_robust_limits(s, 0, lim_lo, lim_hi);
    int any_heat = 0;
    for (size_t i = 0; i < n; i++) {
        V[i] = vp_volume(r[i]);
        e[i] = width * cbrt(V[i]);
        if (e[i] > emax) emax = e[i];
        T[i] = vp_temperature_from_density(rho0, d[i]);
        if (d[i] != 0.0) any_heat = 1;
        for (int a = 0; a < 3; a++) {
            double c = x[3 * i + a];
            if (c < lim_lo[a] || c > lim_hi[a]) continue;
            if (c < lo[a]) lo[a] = c;
            if (c > hi[a]) hi[a] = c;
        }
    }
    for (int a = 0; a < 3; a++) if (!(lo[a] <= hi[a])) { lo[a] = 0; hi[a] = 0; }
    if (kappa <= 0) any_heat = 0;
    int threads = s->params.threads;
    (void)threads;
    /* per-vorton viscosity: molecular plus Smagorinsky's eddy viscosity */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < (long)n; i++) {
        double D = e[i] / width, nv = nu > 0 ? nu : 0.0;
        if (cs > 0) {
            double J[9];
            vp_grid_interp(&s->grid, s->grid_jacobian, 9, x + 3 * i, J);
            double ss = 0;
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) { double S = 0.5 * (J[3 * a + b] + J[3 * b + a]); ss += S * S; }
            nv += cs * cs * D * D * sqrt(2.0 * ss);
        }
        double cap = 0.1 * e[i] * e[i] / dt;
        nui[i] = nv < cap ? nv : (nu > cap ? nu : cap); /* never below the molecular value */
    }
    /* cell list with cells of half the cutoff distance, scanned +-2 cells: 5^3 half-size cells
     * hold 42% fewer candidate pairs than 3^3 full-size ones; bounded cell count */
    double cell = 0.5 * cut * emax;
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
            double u = (x[3 * i + a] - lo[a]) / cell; /* clamp before the cast: outliers */
            u = u > 0 ? (u < nc[a] - 1 ? u : nc[a] - 1) : 0;
            c[a] = (int)u;
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
    /* The Gaussian's second moment cut at r = cut e keeps the fraction
     *   m(c) = [ (3 sqrt(pi)/8) erf(c) - exp(-c^2) (c^3/2 + 3c/4) ] / (3 sqrt(pi)/8)
     * of the full one (int_0^c r^4 exp(-r^2) dr); dividing by it restores the exact Laplacian
     * normalisation, so the cutoff trades only quadrature, not viscosity (3 e: 0.2% would be
     * missing). */
    const double m4 = 3.0 * sqrt(VP_PI) / 8.0;
    const double kept = (m4 * erf(cut) - exp(-cut * cut) * (0.5 * cut * cut * cut + 0.75 * cut)) / m4;
    const double norm = 4.0 / (VP_PI * sqrt(VP_PI)) / kept;
    /* sorted double SoA copies: x y z e V wx wy wz T, and outputs dw (3) dT in sorted order */
    double *so = malloc(14 * n * sizeof(double));
    if (!so) { free(start); free(order); free(cid); return VP_ERR_NOMEM; }
    double *X = so, *Y = so + n, *Z = so + 2 * n, *E = so + 3 * n, *VV = so + 4 * n, *WX = so + 5 * n,
           *WY = so + 6 * n, *WZ = so + 7 * n, *TT = so + 8 * n, *OW = so + 9 * n, *OT = so + 12 * n,
           *NU = so + 13 * n;
    for (size_t q = 0; q < n; q++) {
        size_t i = order[q];
        X[q] = x[3 * i]; Y[q] = x[3 * i + 1]; Z[q] = x[3 * i + 2]; E[q] = e[i]; VV[q] = V[i];
        WX[q] = w[3 * i]; WY[q] = w[3 * i + 1]; WZ[q] = w[3 * i + 2]; TT[q] = T[i]; NU[q] = nui[i];
    }
    /* Per row of cells (fixed cy, cz): the 5 x 5 neighbour rows (+-2 in y and z) are copied
     * into one batch ordered by x cell, so the candidates of any vorton of the row, the cells
     * cx-2..cx+2 of those rows, are one contiguous range of it; each vorton then sums over its
     * range in one long vectorised loop.  (Per-row calls were ~10 long; a batch per cell
     * copied 25 rows for every ~3 vortons.) */
    const long nrow = (long)nc[1] * nc[2];
    size_t maxc = 0;
    for (long rr = 0; rr < nrow; rr++) {
        int cy = (int)(rr % nc[1]), cz = (int)(rr / nc[1]);
        size_t r0 = (size_t)nc[0] * (size_t)rr;
        if (start[r0 + nc[0]] == start[r0]) continue;
        size_t m = 0;
        for (int kz = cz - 2; kz <= cz + 2; kz++)
            for (int ky = cy - 2; ky <= cy + 2; ky++) {
                if (kz < 0 || kz >= nc[2] || ky < 0 || ky >= nc[1]) continue;
                size_t row = (size_t)nc[0] * ((size_t)ky + (size_t)nc[1] * kz);
                m += start[row + nc[0]] - start[row];
            }
        if (m > maxc) maxc = m;
    }
    int nomem = 0;
#pragma omp parallel num_threads(threads) reduction(| : nomem)
    {
        double *bb = malloc(10 * (maxc + 1) * sizeof(double));
        size_t *xoff = malloc((nc[0] + 1) * sizeof(size_t));
        if (!bb || !xoff) nomem = 1;
        double *const src[10] = {X, Y, Z, E, VV, WX, WY, WZ, TT, NU};
#pragma omp for schedule(dynamic, 1)
        for (long rr = 0; rr < nrow; rr++) {
            int cy = (int)(rr % nc[1]), cz = (int)(rr / nc[1]);
            size_t r0 = (size_t)nc[0] * (size_t)rr;
            if (!bb || !xoff || start[r0 + nc[0]] == start[r0]) continue;
            size_t rows[25];
            int nr = 0;
            for (int kz = cz - 2; kz <= cz + 2; kz++)
                for (int ky = cy - 2; ky <= cy + 2; ky++)
                    if (kz >= 0 && kz < nc[2] && ky >= 0 && ky < nc[1])
                        rows[nr++] = (size_t)nc[0] * ((size_t)ky + (size_t)nc[1] * kz);
            size_t m = 0;
            for (int cx = 0; cx < nc[0]; cx++) {
                xoff[cx] = m;
                for (int k = 0; k < nr; k++) {
                    size_t j0 = start[rows[k] + cx], j1 = start[rows[k] + cx + 1];
                    for (int f = 0; f < 10; f++) {
                        const double *sf = src[f] + j0;
                        double *df = bb + f * maxc + m;
                        for (size_t j = 0; j < j1 - j0; j++) df[j] = sf[j];
                    }
                    m += j1 - j0;
                }
            }
            xoff[nc[0]] = m;
            for (int cx = 0; cx < nc[0]; cx++) {
                size_t b0 = xoff[cx > 1 ? cx - 2 : 0], b1 = xoff[cx + 3 < nc[0] ? cx + 3 : nc[0]];
                for (size_t q = start[r0 + cx]; q < start[r0 + cx + 1]; q++) {
                    const double qd[9] = {X[q], Y[q], Z[q], E[q], WX[q], WY[q], WZ[q], TT[q], NU[q]};
                    double acc[4] = {0, 0, 0, 0};
                    vp_pse_sum(b1 - b0, bb + b0, bb + maxc + b0, bb + 2 * maxc + b0, bb + 3 * maxc + b0,
                               bb + 4 * maxc + b0, bb + 5 * maxc + b0, bb + 6 * maxc + b0, bb + 7 * maxc + b0,
                               bb + 8 * maxc + b0, bb + 9 * maxc + b0, qd, cut * cut, acc);
                    OW[3 * q] = dt * norm * acc[0]; OW[3 * q + 1] = dt * norm * acc[1];
                    OW[3 * q + 2] = dt * norm * acc[2]; OT[q] = kappa * dt * norm * acc[3];
                }
            }
        }
        free(bb); free(xoff);
    }
    if (nomem) { free(so); free(start); free(order); free(cid); return VP_ERR_NOMEM; }
    for (size_t q = 0; q < n; q++) {
        size_t i = order[q];
        dw[3 * i] = OW[3 * q]; dw[3 * i + 1] = OW[3 * q + 1]; dw[3 * i + 2] = OW[3 * q + 2]; dT[i] = OT[q];
    }
    free(so);
    free(start); free(order); free(cid);
    for (size_t i = 0; i < n; i++) {
        if (viscous) { w[3 * i] += dw[3 * i]; w[3 * i + 1] += dw[3 * i + 1]; w[3 * i + 2] += dw[3 * i + 2]; }
        if (any_heat) d[i] = vp_density_from_temperature(rho0, T[i] + dT[i]);
    }
    return VP_OK;
}
