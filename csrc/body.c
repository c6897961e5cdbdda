/* body.c: rigid spheres (docs/method.md, the state and step 9, part 4's stand-in for a physics engine):
 * state, impulses from the fluid, and integration with a unit quaternion. */
#include <math.h>
#include <string.h>
#include "internal.h"
#include "kernel.h"

void vp_body_init(vp_body *b)
{
    memset(b, 0, sizeof *b);
    b->orientation[0] = 1.0;
    b->radius = 1.0;
    b->mass = 1.0;
    b->temperature = 1.0;
    b->thermal_conductivity = 0.0;
    b->heat_capacity = 1e5;
    b->gravity = 1;
}

/* Moment of inertia of a uniform solid sphere, I = 2/5 M R^2. */
double vp_body_inertia(const vp_body *b) { return 0.4 * b->mass * b->radius * b->radius; }

void vp_body_sync(vp_body *b)
{
    double I = vp_body_inertia(b);
    for (int a = 0; a < 3; a++) {
        if (b->fixed) {
            b->momentum[a] = b->mass * b->velocity[a];
            b->angular_momentum[a] = I * b->angular_velocity[a];
        } else {
            b->velocity[a] = b->momentum[a] / b->mass;
            b->angular_velocity[a] = b->angular_momentum[a] / I;
        }
    }
}

void vp_body_apply_impulse(vp_body *b, const double j[3])
{
    for (int a = 0; a < 3; a++) b->impulse[a] += j[a];
}

void vp_body_apply_impulsive_torque(vp_body *b, const double t[3])
{
    for (int a = 0; a < 3; a++) b->angular_impulse[a] += t[a];
}

/* Symplectic Euler: P += F dt + J; c += v dt; L += tau dt + K; q += 1/2 (0, W) q dt, renormalised.
 * Fixed (kinematic) bodies move with their prescribed velocities and ignore every push. */
void vp_body_integrate(vp_body *b, double dt)
{
    if (!b->fixed) {
        for (int a = 0; a < 3; a++) {
            b->momentum[a] += b->force[a] * dt + b->impulse[a];
            b->angular_momentum[a] += b->torque[a] * dt + b->angular_impulse[a];
        }
    }
    vp_body_sync(b);
    for (int a = 0; a < 3; a++) b->position[a] += b->velocity[a] * dt;
    double *q = b->orientation, *W = b->angular_velocity;
    double dq[4] = {-(W[0] * q[1] + W[1] * q[2] + W[2] * q[3]), W[0] * q[0] + W[1] * q[3] - W[2] * q[2],
                    W[1] * q[0] + W[2] * q[1] - W[0] * q[3], W[2] * q[0] + W[0] * q[2] - W[1] * q[1]};
    double nrm = 0;
    for (int k = 0; k < 4; k++) { q[k] += 0.5 * dt * dq[k]; nrm += q[k] * q[k]; }
    nrm = sqrt(nrm);
    for (int k = 0; k < 4; k++) q[k] /= nrm;
    memset(b->force, 0, sizeof b->force); memset(b->torque, 0, sizeof b->torque);
    memset(b->impulse, 0, sizeof b->impulse); memset(b->angular_impulse, 0, sizeof b->angular_impulse);
}

/* Phase 9 (method step 9): every body integrated over the step's dt. */
int vp_bodies_integrate(vp_sim *s)
{
    for (size_t b = 0; b < s->n_bodies; b++) vp_body_integrate(&s->bodies[b], s->params.dt);
    return VP_OK;
}
