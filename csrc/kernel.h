/* kernel.h: the regularised Biot-Savart kernel and its exact inverse (method step 2, 2.7).
 *
 * Core: the high-order algebraic core of Winckelmans and Leonard (1993),
 *   u(x) = 1/(4 pi) a x r g(|r|, s),   g(r, s) = (r^2 + 5/2 s^2) / (r^2 + s^2)^(5/2),
 * with r = x - x_j.  It is smooth and bounded, tends to the singular kernel r^-3 far away,
 * and is second-order accurate: its smoothing function has per-axis variance s^2/2, the
 * same as a Gaussian core w ~ exp(-r^2/s^2), so a Gaussian vorticity profile of radius sg
 * carried by these vortons behaves like one of radius sqrt(sg^2 + s^2). */
#ifndef VP_KERNEL_H
#define VP_KERNEL_H

#include <math.h>

#define VP_PI 3.14159265358979323846
#define VP_INV4PI (0.25 / VP_PI)

static inline double vp_kernel_g(double r2, double s2)
{
    double q = r2 + s2;
    return (r2 + 2.5 * s2) / (q * q * sqrt(q));
}

/* Velocity at x induced by a vorton of strength a at xj with core radius^2 s2 (adds to u). */
static inline void vp_kernel_add(const double x[3], const double xj[3], const double a[3],
                                 double s2, double u[3])
{
    double r0 = x[0] - xj[0], r1 = x[1] - xj[1], r2 = x[2] - xj[2];
    double g = VP_INV4PI * vp_kernel_g(r0 * r0 + r1 * r1 + r2 * r2, s2);
    u[0] += g * (a[1] * r2 - a[2] * r1);
    u[1] += g * (a[2] * r0 - a[0] * r2);
    u[2] += g * (a[0] * r1 - a[1] * r0);
}

/* "Assign by velocity" (part 4): the strength a, perpendicular to r, whose induced velocity
 * at a point displaced r from the vorton is exactly v (v must be perpendicular to r):
 *   a = 4 pi (r x v) / (|r|^2 g(|r|, s)).  Exact inverse of vp_kernel_add. */
static inline void vp_kernel_assign_by_velocity(const double r[3], const double v[3], double s2,
                                                double a[3])
{
    double rr = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    double k = 4.0 * VP_PI / (rr * vp_kernel_g(rr, s2));
    a[0] = k * (r[1] * v[2] - r[2] * v[1]);
    a[1] = k * (r[2] * v[0] - r[0] * v[2]);
    a[2] = k * (r[0] * v[1] - r[1] * v[0]);
}

static inline double vp_dot3(const double a[3], const double b[3])
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}
static inline void vp_cross3(const double a[3], const double b[3], double c[3])
{
    double c0 = a[1] * b[2] - a[2] * b[1], c1 = a[2] * b[0] - a[0] * b[2],
           c2 = a[0] * b[1] - a[1] * b[0];
    c[0] = c0; c[1] = c1; c[2] = c2;
}
static inline double vp_volume(double s) { return 4.0 / 3.0 * VP_PI * s * s * s; }

#endif
