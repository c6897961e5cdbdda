/* tracer_contact.h: tracers that enter a rigid body are projected to its surface and take
 * the surface's velocity (inelastic; method step 7).  Inline, so that it is compiled into
 * each clone of its callers: contact.c's pass over all tracers and the tracer advection,
 * which projects each block while it is still in cache (advect.c). */
#ifndef VP_TRACER_CONTACT_H
#define VP_TRACER_CONTACT_H
#include <math.h>
#include "vortonpy.h"

/* Tracers [b0, b0 + m) (m <= 64) inside body B are projected to its surface and take the
 * surface's velocity; returns whether any was.  Almost no tracer is inside in most scenes,
 * so the block is first tested in one vectorised pass (the inside test alone, branch-free),
 * unless `prefilter` is 0: callers pass 0 after a block that had tracers inside, as the
 * next one likely has too (skipping the test changes nothing else).  A block with a tracer
 * inside gets every tracer's offset from the centre and squared distance in a second
 * vectorised pass; then the indices of the tracers inside are packed (one store per
 * tracer), and a branch-free loop over the packed ones gathers their offsets and projects
 * them (the square root and the divisions on whole vectors); then they are written back.
 * Many can be inside: tracers gather on a hot or moving ball and are pushed back onto its
 * surface every step, and a scalar loop over them would branch unpredictably. */
static inline __attribute__((always_inline)) int vp_project_tracers_block(const vp_body *B, long b0, int m,
                                                                          double *restrict tx, double *restrict tv,
                                                                          int prefilter)
{
    const double c0 = B->position[0], c1 = B->position[1], c2 = B->position[2], R = B->radius, R2 = R * R;
    const double R2pre = R2 * (1.0 + 1e-12); /* the prefilter errs on the inside (rounding) */
    if (prefilter) {
        int any = 0;
        for (int j = 0; j < m; j++) {
            const double *x = tx + 3 * (b0 + j);
            const double r0 = x[0] - c0, r1 = x[1] - c1, r2 = x[2] - c2;
            any |= !(r0 * r0 + r1 * r1 + r2 * r2 >= R2pre); /* NaN counts as inside, as in the exact test */
        }
        if (!any) return 0;
    }
    const double w0 = B->angular_velocity[0], w1 = B->angular_velocity[1], w2 = B->angular_velocity[2];
    const double v0 = B->velocity[0], v1 = B->velocity[1], v2 = B->velocity[2];
    double r0[64], r1[64], r2[64], rr[64];
    for (int j = 0; j < m; j++) {
        const double *x = tx + 3 * (b0 + j);
        r0[j] = x[0] - c0; r1[j] = x[1] - c1; r2[j] = x[2] - c2;
        rr[j] = r0[j] * r0[j] + r1[j] * r1[j] + r2[j] * r2[j];
    }
    double q[6][64];
    int idx[64], np = 0;
    for (int j = 0; j < m; j++) { /* branch-free: the slot always written, the count advanced for those inside */
        idx[np] = j;
        np += !(rr[j] >= R2);
    }
    for (int t = 0; t < np; t++) {
        /* the outward normal (x for a tracer at the centre), the arm R n to the surface and
         * the surface velocity there, v + Omega x arm */
        const int j = idx[t];
        const double dist = sqrt(rr[j]), f = R / dist; /* one division, not three */
        const int pos = dist > 0;
        const double a0 = pos ? f * r0[j] : R, a1 = pos ? f * r1[j] : 0.0, a2 = pos ? f * r2[j] : 0.0;
        q[0][t] = c0 + a0; q[1][t] = c1 + a1; q[2][t] = c2 + a2;
        q[3][t] = v0 + (w1 * a2 - w2 * a1); q[4][t] = v1 + (w2 * a0 - w0 * a2); q[5][t] = v2 + (w0 * a1 - w1 * a0);
    }
    for (int t = 0; t < np; t++) {
        double *x = tx + 3 * (b0 + idx[t]), *v = tv + 3 * (b0 + idx[t]);
        x[0] = q[0][t]; x[1] = q[1][t]; x[2] = q[2][t];
        v[0] = q[3][t]; v[1] = q[4][t]; v[2] = q[5][t];
    }
    return np > 0;
}
#endif
