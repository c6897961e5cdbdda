/* contact.c: fluid-body interaction (physics.md 2.7, part 4): no-slip and no-through boundary
 * conditions by assigning vorticity, exact momentum hand-over to the body, tracer collisions,
 * and heat conduction between bodies and the fluid that touches them (part 10). */
#include <math.h>
#include <string.h>
#include "internal.h"
#include "kernel.h"

/* One vorton in contact with a body: eject it and assign it the vorticity that cancels the
 * slip at the contact point P = c + R n.  u_rel = (grid velocity at P - the vorton's own
 * contribution) - body surface velocity.  The vorton sits one core radius from P along
 * -b, b = normalize((n x u_rel) x u_rel) (perpendicular to u_rel, outside the body), and
 * gets the strength whose induced velocity at P is exactly -u_rel (kernel.h's inverse). */
static void assign_contact(const vp_sim *s, const vp_body *B, double x[3], double w[3], double sr, double blend)
{
    double r[3] = {x[0] - B->position[0], x[1] - B->position[1], x[2] - B->position[2]};
    double dist = sqrt(vp_dot3(r, r)), n[3];
    if (dist > 0) { n[0] = r[0] / dist; n[1] = r[1] / dist; n[2] = r[2] / dist; }
    else { n[0] = 1; n[1] = 0; n[2] = 0; }
    double P[3], arm[3], vb[3];
    for (int a = 0; a < 3; a++) { arm[a] = B->radius * n[a]; P[a] = B->position[a] + arm[a]; }
    vp_cross3(B->angular_velocity, arm, vb);
    for (int a = 0; a < 3; a++) vb[a] += B->velocity[a];
    double V = vp_volume(sr), s2 = sr * sr, ug[3], self[3] = {0, 0, 0};
    double a_old[3] = {w[0] * V, w[1] * V, w[2] * V};
    vp_grid_interpolate(&s->grid, s->grid_velocity, 3, P, ug);
    vp_kernel_add(P, x, a_old, s2, self);
    double u[3] = {ug[0] - self[0] - vb[0], ug[1] - self[1] - vb[1], ug[2] - self[2] - vb[2]};
    double uu = vp_dot3(u, u), nxu[3], b[3];
    vp_cross3(n, u, nxu);
    vp_cross3(nxu, u, b);
    double bb = sqrt(vp_dot3(b, b));
    if (bb <= 1e-12 * uu || uu == 0.0) {
        /* flow along the normal (or none): any tangent direction is perpendicular to u */
        double t[3] = {0, 0, 0};
        t[fabs(n[0]) < 0.9 ? 0 : 1] = 1.0;
        double tn = vp_dot3(t, n);
        for (int a = 0; a < 3; a++) t[a] -= tn * n[a];
        double tl = sqrt(vp_dot3(t, t));
        for (int a = 0; a < 3; a++) b[a] = t[a] / tl;
    } else {
        for (int a = 0; a < 3; a++) b[a] /= bb;
        if (vp_dot3(b, n) > 0) for (int a = 0; a < 3; a++) b[a] = -b[a];
    }
    /* new position x = P - sr b, so r = P - x = sr b, perpendicular to u */
    double rv[3] = {sr * b[0], sr * b[1], sr * b[2]}, target[3] = {-u[0], -u[1], -u[2]}, anew[3];
    for (int a = 0; a < 3; a++) x[a] = P[a] - rv[a];
    if (uu == 0.0) { anew[0] = anew[1] = anew[2] = 0.0; }
    else vp_kernel_assign_by_velocity(rv, target, s2, anew);
    for (int a = 0; a < 3; a++) w[a] += blend * (anew[a] / V - w[a]);
}

/* Heat exchanged in one step between a body and a vorton in contact (part 10, conduction
 * Q = kb (Tb - Ti) dt): integrated exactly over the step for the pair, so it never
 * overshoots however large kb dt / C is; the vorton gains Q and the body loses it. */
static double conduct(double kb, double dt, double Tb, double Ti, double Ci, double Cb)
{
    double inv = 1.0 / Ci + (Cb > 0 && isfinite(Cb) ? 1.0 / Cb : 0.0);
    return (Tb - Ti) * (-expm1(-kb * dt * inv)) / inv;
}

int vp_sim_collide(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    vp_tracers *tr = &s->tracers;
    double rho0 = s->params.ambient_density, dt = s->params.dt, blend = s->params.contact_blend;
    int threads = s->params.threads;
    (void)threads;
    if (s->n_bodies == 0) return VP_OK;
    if (!s->grid_velocity) { int st = vp_sim_update_velocity_grid(s); if (st) return st; }
    /* per vorton: old position (3), old vorticity (3), contact flag (1), heat (1) */
    double *sc = vp_sim_scratch(s, 8 * v->n + 1);
    if (!sc) return VP_ERR_NOMEM;
    double *x = v->position->data, *w = v->vorticity->data, *rad = v->radius->data, *den = v->density->data;
    for (size_t b = 0; b < s->n_bodies; b++) {
        vp_body *B = &s->bodies[b];
        double *xo = sc, *wo = sc + 3 * v->n, *hit = sc + 6 * v->n, *Q = sc + 7 * v->n;
        const vp_body Bc = *B;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long i = 0; i < (long)v->n; i++) {
            double r[3] = {x[3 * i] - Bc.position[0], x[3 * i + 1] - Bc.position[1], x[3 * i + 2] - Bc.position[2]};
            double reach = Bc.radius + rad[i];
            hit[i] = 0; Q[i] = 0;
            if (vp_dot3(r, r) >= reach * reach) continue;
            hit[i] = 1;
            memcpy(xo + 3 * i, x + 3 * i, 3 * sizeof(double));
            memcpy(wo + 3 * i, w + 3 * i, 3 * sizeof(double));
            assign_contact(s, &Bc, x + 3 * i, w + 3 * i, rad[i], blend);
            if (Bc.thermal_conductivity > 0) {
                double V = vp_volume(rad[i]), Ci = s->params.fluid_heat_capacity * V;
                double Ti = vp_temperature_from_density(rho0, den[i]);
                Q[i] = conduct(Bc.thermal_conductivity, dt, Bc.temperature, Ti, Ci, Bc.heat_capacity);
                den[i] = vp_density_from_temperature(rho0, Ti + Q[i] / Ci);
            }
        }
        /* Momentum hand-over, about the body centre c: the fluid's linear impulse
         * 1/2 sum (x-c) x a and angular impulse 1/3 sum (x-c) x ((x-c) x a) change only through
         * the vortons just reassigned; the body receives minus rho0 times each change.
         * Serial, in index order: deterministic. */
        double dI[3] = {0, 0, 0}, dA[3] = {0, 0, 0}, heat = 0;
        for (size_t i = 0; i < v->n; i++) {
            if (hit[i] == 0) continue;
            double V = vp_volume(rad[i]);
            for (int pass = 0; pass < 2; pass++) {
                const double *xp = pass ? x + 3 * i : xo + 3 * i, *wp = pass ? w + 3 * i : wo + 3 * i;
                double sg = pass ? 1.0 : -1.0;
                double d[3] = {xp[0] - Bc.position[0], xp[1] - Bc.position[1], xp[2] - Bc.position[2]};
                double a[3] = {wp[0] * V, wp[1] * V, wp[2] * V}, dxa[3], dxdxa[3];
                vp_cross3(d, a, dxa);
                vp_cross3(d, dxa, dxdxa);
                for (int k = 0; k < 3; k++) { dI[k] += sg * 0.5 * dxa[k]; dA[k] += sg * dxdxa[k] / 3.0; }
            }
            heat += Q[i];
        }
        double J[3] = {-rho0 * dI[0], -rho0 * dI[1], -rho0 * dI[2]};
        double K[3] = {-rho0 * dA[0], -rho0 * dA[1], -rho0 * dA[2]};
        if (!B->fixed) { vp_body_apply_impulse(B, J); vp_body_apply_impulsive_torque(B, K); }
        for (int k = 0; k < 3; k++) { B->fluid_impulse[k] += J[k]; B->fluid_angular_impulse[k] += K[k]; }
        if (B->heat_capacity > 0 && isfinite(B->heat_capacity)) B->temperature -= heat / B->heat_capacity;
        B->heat_received -= heat;
        /* tracers inside are projected to the surface and take its velocity (inelastic) */
        double *tx = tr->position ? tr->position->data : NULL, *tv = tr->position ? tr->velocity->data : NULL;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long k = 0; k < (long)tr->n; k++) {
            double r[3] = {tx[3 * k] - Bc.position[0], tx[3 * k + 1] - Bc.position[1], tx[3 * k + 2] - Bc.position[2]};
            double r2 = vp_dot3(r, r);
            if (r2 >= Bc.radius * Bc.radius) continue;
            double dist = sqrt(r2), n[3] = {1, 0, 0};
            if (dist > 0) { n[0] = r[0] / dist; n[1] = r[1] / dist; n[2] = r[2] / dist; }
            double arm[3] = {Bc.radius * n[0], Bc.radius * n[1], Bc.radius * n[2]}, vs[3];
            vp_cross3(Bc.angular_velocity, arm, vs);
            for (int a = 0; a < 3; a++) {
                tx[3 * k + a] = Bc.position[a] + arm[a];
                tv[3 * k + a] = Bc.velocity[a] + vs[a];
            }
        }
    }
    return VP_OK;
}
