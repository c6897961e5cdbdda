/* direct.c: the direct O(N M) Biot-Savart sum (method step 2), the reference solver that
 * the tests compare the tree and poisson with: every point summed over every vorton with
 * the regularised kernel (kernel.h), in float64. */
#include <stdlib.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"

/* Velocity at P induced by m vortons in double SoA F = [x | y | z | ax | ay | az | s^2]
 * (arrays of m), the kernel of vp_kernel_add summed in one vectorised loop; adds to u. */
VP_CLONES
static void kernel_sum_soa(size_t m, const double *restrict F, const double P[3], double u[3])
{
    const double *X = F, *Y = F + m, *Z = F + 2 * m, *AX = F + 3 * m, *AY = F + 4 * m, *AZ = F + 5 * m, *S2 = F + 6 * m;
    double px = P[0], py = P[1], pz = P[2], u0 = 0, u1 = 0, u2 = 0;
#pragma omp simd reduction(+ : u0, u1, u2)
    for (size_t j = 0; j < m; j++) {
        double r0 = px - X[j], r1 = py - Y[j], r2 = pz - Z[j];
        double g = vp_kernel_g(r0 * r0 + r1 * r1 + r2 * r2, S2[j]);
        u0 += g * (AY[j] * r2 - AZ[j] * r1);
        u1 += g * (AZ[j] * r0 - AX[j] * r2);
        u2 += g * (AX[j] * r1 - AY[j] * r0);
    }
    u[0] += VP_INV4PI * u0; u[1] += VP_INV4PI * u1; u[2] += VP_INV4PI * u2;
}

/* The regularised kernel sum (kernel.h) at a point whose squared distances could overflow:
 * each pair's r = P - x_j = s n (s = max |r_a|) and sigma = s_j / s, so that
 *   g(r) r = n (|n|^2 + 2.5 sigma^2) / (|n|^2 + sigma^2)^(5/2) / s^2
 * exactly, and 1/s^2 underflows to 0 instead of r^2 overflowing.  Used by the direct sum
 * from VP_DIRECT_SAFE on: vp_kernel_g's q^(5/2) overflows past q ~ 1e123 (distances beyond
 * ~4e61 gave exactly 0, and past 1e154 inf / inf = NaN).  A pair that is not finite gives
 * NaN, as the plain sum does. */
#define VP_DIRECT_SAFE 1e60
static void kernel_sum_scaled(size_t m, const double *F, const double P[3], double u[3])
{
    const double *X = F, *Y = F + m, *Z = F + 2 * m, *AX = F + 3 * m, *AY = F + 4 * m, *AZ = F + 5 * m, *S2 = F + 6 * m;
    double u0 = 0, u1 = 0, u2 = 0;
    for (size_t j = 0; j < m; j++) {
        const double r[3] = {P[0] - X[j], P[1] - Y[j], P[2] - Z[j]};
        const double z = 0.0 * r[0] + 0.0 * r[1] + 0.0 * r[2] + 0.0 * AX[j] + 0.0 * AY[j] + 0.0 * AZ[j] + 0.0 * S2[j];
        if (z != 0.0) { u0 = u1 = u2 = NAN; continue; } /* (x * 0 is NaN exactly for x not finite) */
        double s = fabs(r[0]) > fabs(r[1]) ? fabs(r[0]) : fabs(r[1]);
        s = fabs(r[2]) > s ? fabs(r[2]) : s;
        if (s == 0) continue; /* at the source: the kernel is 0 there */
        if (s > 1e160) continue; /* 1/s^2 < 1e-320: below double's normal range (and slow, denormal) */
        const double n0 = r[0] / s, n1 = r[1] / s, n2 = r[2] / s, sg = sqrt(S2[j]) / s;
        const double n2s = n0 * n0 + n1 * n1 + n2 * n2, q = n2s + sg * sg, is = 1.0 / s;
        const double g = (n2s + 2.5 * sg * sg) / (q * q * sqrt(q)) * is * is;
        u0 += g * (AY[j] * n2 - AZ[j] * n1);
        u1 += g * (AZ[j] * n0 - AX[j] * n2);
        u2 += g * (AX[j] * n1 - AY[j] * n0);
    }
    u[0] += VP_INV4PI * u0; u[1] += VP_INV4PI * u1; u[2] += VP_INV4PI * u2;
}

/* The direct sum (method step 2, the reference solver): float64 throughout, sources as one
 * SoA copy and every point summed over all of them by the vectorised kernel_sum_soa.
 * Returns VP_ERR_NOMEM if the copy cannot be made. */
int vp_direct_velocity(size_t n, const double *pos, const double *strength, const double *radius,
                       size_t m, const double *points, double *vel, int threads)
{
    (void)threads;
    double *F = malloc((7 * n + 1) * sizeof(double));
    if (!F) return VP_ERR_NOMEM;
    for (size_t j = 0; j < n; j++) {
        for (int a = 0; a < 3; a++) { F[a * n + j] = pos[3 * j + a]; F[(3 + a) * n + j] = strength[3 * j + a]; }
        F[6 * n + j] = radius[j] * radius[j];
    }
    double reach = 0, s2max = 0; /* the sources' largest coordinate plus their largest core radius */
    for (size_t j = 0; j < 3 * n; j++) reach = fabs(F[j]) > reach ? fabs(F[j]) : reach;
    for (size_t j = 0; j < n; j++) s2max = F[6 * n + j] > s2max ? F[6 * n + j] : s2max;
    reach += sqrt(s2max);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long p = 0; p < (long)m; p++) {
        double u[3] = {0, 0, 0};
        const double *P = points + 3 * p;
        if (fabs(P[0]) + reach < VP_DIRECT_SAFE && fabs(P[1]) + reach < VP_DIRECT_SAFE && fabs(P[2]) + reach < VP_DIRECT_SAFE)
            kernel_sum_soa(n, F, P, u);
        else
            kernel_sum_scaled(n, F, P, u);
        vel[3 * p] = u[0]; vel[3 * p + 1] = u[1]; vel[3 * p + 2] = u[2];
    }
    free(F);
    return VP_OK;
}
