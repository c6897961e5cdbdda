/* sim.c: create/free and the step pipeline; vp_sim_step reads like physics.md section 2. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "grid_inline.h"
#include "kernel.h"

const char *const vp_phase_names[VP_PHASE_COUNT] = {
    "domain", "velocity", "stretch", "baroclinic", "diffuse", "advect_vortons",
    "advect_tracers", "contact", "buoyancy", "bodies", "emit"};

void vp_params_init(vp_params *p)
{
    memset(p, 0, sizeof *p);
    p->dt = 1.0 / 30.0;
    p->viscosity = 0.01;
    p->thermal_diffusivity = 1e-4;
    p->ambient_density = 1.0;
    p->gravity[2] = -10.0;
    p->fluid_heat_capacity = 1.0;
    p->solver = VP_SOLVER_TREE;
    p->threads = 1;
    p->tree_theta = 0.4;
    p->tree_leaf_size = 16;
    p->grid_cells_per_vorton = 4.0;
    p->grid_max_points = (size_t)1 << 22;
    p->pse_width = 1.0;
    p->pse_cutoff = 3.5;
    p->contact_blend = 0.2; /* relax toward the boundary vorticity over ~5 steps (seeds: 0.1) */
    p->advect_order = 2;
    p->stretch = 1;
    p->baroclinic = 1;
}

vp_sim *vp_sim_create(const vp_params *p)
{
    vp_sim *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *p;
    s->tree = vp_tree_create();
    if (!s->tree) { free(s); return NULL; }
    vp_rng_seed(s->rng, 12345);
    s->failed_phase = -1;
    s->grid.n[0] = s->grid.n[1] = s->grid.n[2] = 1;
    s->grid.h = 1.0;
    return s;
}

void vp_sim_free(vp_sim *s)
{
    if (!s) return;
    vp_buffer *bufs[] = {s->vortons.position, s->vortons.vorticity, s->vortons.radius, s->vortons.density,
                         s->vortons.age, s->vortons.velocity, s->tracers.position, s->tracers.velocity,
                         s->tracers.density, s->tracers.age};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) vp_buffer_release(bufs[i]);
    free(s->bodies); free(s->emitters);
    free(s->grid_velocity); free(s->grid_jacobian); free(s->grid_density); free(s->grid_density_gradient);
    free(s->scratch);
    vp_tree_free(s->tree);
    free(s);
}

double *vp_sim_scratch(vp_sim *s, size_t doubles)
{
    if (doubles > s->scratch_allocated) {
        double *p = realloc(s->scratch, doubles * sizeof(double));
        if (!p) return NULL;
        s->scratch = p; s->scratch_allocated = doubles;
    }
    return s->scratch;
}

int vp_sim_add_body(vp_sim *s, const vp_body *b)
{
    if (s->n_bodies == s->n_bodies_allocated) {
        size_t na = s->n_bodies_allocated ? 2 * s->n_bodies_allocated : 4;
        vp_body *nb = realloc(s->bodies, na * sizeof(vp_body));
        if (!nb) return VP_ERR_NOMEM;
        s->bodies = nb; s->n_bodies_allocated = na;
    }
    s->bodies[s->n_bodies] = *b;
    vp_body_sync(&s->bodies[s->n_bodies]);
    s->n_bodies++;
    return VP_OK;
}

int vp_sim_add_emitter(vp_sim *s, const vp_emitter *e)
{
    if (s->n_emitters == s->n_emitters_allocated) {
        size_t na = s->n_emitters_allocated ? 2 * s->n_emitters_allocated : 4;
        vp_emitter *ne = realloc(s->emitters, na * sizeof(vp_emitter));
        if (!ne) return VP_ERR_NOMEM;
        s->emitters = ne; s->n_emitters_allocated = na;
    }
    s->emitters[s->n_emitters++] = *e;
    return VP_OK;
}

/* Phase 1 (physics.md 2.1): the grid follows the particles (open boundaries).  It covers
 * every vorton and tracer, padded by three core radii and a cell, with cubic cells sized
 * for grid_cells_per_vorton cells per vorton, never more than grid_max_points nodes. */
int vp_domain_update(vp_sim *s)
{
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY}, smax = 0;
    const double *x = s->vortons.n ? s->vortons.position->data : NULL;
    for (size_t i = 0; i < s->vortons.n; i++) {
        for (int a = 0; a < 3; a++) {
            if (x[3 * i + a] < lo[a]) lo[a] = x[3 * i + a];
            if (x[3 * i + a] > hi[a]) hi[a] = x[3 * i + a];
        }
        if (s->vortons.radius->data[i] > smax) smax = s->vortons.radius->data[i];
    }
    const double *t = s->tracers.n ? s->tracers.position->data : NULL;
    for (size_t i = 0; i < s->tracers.n; i++)
        for (int a = 0; a < 3; a++) {
            if (t[3 * i + a] < lo[a]) lo[a] = t[3 * i + a];
            if (t[3 * i + a] > hi[a]) hi[a] = t[3 * i + a];
        }
    if (!(lo[0] <= hi[0])) { lo[0] = lo[1] = lo[2] = -1; hi[0] = hi[1] = hi[2] = 1; smax = 0.1; }
    for (int a = 0; a < 3; a++)
        if (!isfinite(lo[a]) || !isfinite(hi[a])) return VP_ERR_NONFINITE;
    double pad = 3.0 * smax, vol = 1.0, ext[3];
    for (int a = 0; a < 3; a++) { lo[a] -= pad; hi[a] += pad; ext[a] = hi[a] - lo[a]; if (ext[a] <= 0) ext[a] = 1e-9; vol *= ext[a]; }
    double target = s->params.grid_cells_per_vorton * (double)(s->vortons.n > 8 ? s->vortons.n : 8);
    double h = cbrt(vol / target);
    for (int a = 0; a < 3; a++) if (h < ext[a] * 1e-4) h = ext[a] * 1e-4; /* bound aspect ratio */
    int n[3];
    for (;;) {
        double tot = 1;
        for (int a = 0; a < 3; a++) { n[a] = (int)ceil(ext[a] / h) + 2; tot *= n[a]; }
        if (tot <= (double)s->params.grid_max_points || tot <= 27) break;
        h *= 1.05;
    }
    vp_grid *g = &s->grid;
    g->h = h;
    for (int a = 0; a < 3; a++) {
        g->n[a] = n[a];
        g->origin[a] = 0.5 * (lo[a] + hi[a]) - 0.5 * (n[a] - 1) * h;
    }
    size_t nn = vp_grid_count(g);
    if (nn > s->grid_allocated) {
        double *a = realloc(s->grid_velocity, 3 * nn * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_velocity = a;
        a = realloc(s->grid_jacobian, 9 * nn * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_jacobian = a;
        a = realloc(s->grid_density, nn * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_density = a;
        a = realloc(s->grid_density_gradient, 3 * nn * sizeof(double)); if (!a) return VP_ERR_NOMEM; s->grid_density_gradient = a;
        s->grid_allocated = nn;
    }
    return VP_OK;
}

/* Strengths a_i = w_i V_i into scratch (3n). */
static double *strengths(vp_sim *s, double *dst)
{
    const double *w = s->vortons.vorticity->data, *r = s->vortons.radius->data;
    for (size_t i = 0; i < s->vortons.n; i++) {
        double V = vp_volume(r[i]);
        dst[3 * i] = w[3 * i] * V; dst[3 * i + 1] = w[3 * i + 1] * V; dst[3 * i + 2] = w[3 * i + 2] * V;
    }
    return dst;
}

/* Velocity at m points from the vortons by the direct sum or the tree (physics.md 2.2). */
int vp_velocity_solve(vp_sim *s, size_t m, const double *pts, double *vel, int solver)
{
    size_t n = s->vortons.n;
    if (n == 0) { memset(vel, 0, 3 * m * sizeof(double)); s->interactions = 0; return VP_OK; }
    double *a = malloc(3 * n * sizeof(double));
    if (!a) return VP_ERR_NOMEM;
    strengths(s, a);
    int st = VP_OK;
    if (solver == VP_SOLVER_DIRECT) {
        vp_direct_velocity(n, s->vortons.position->data, a, s->vortons.radius->data, m, pts, vel, s->params.threads);
        s->interactions = (uint64_t)n * m;
    } else {
        st = vp_tree_build(s->tree, n, s->vortons.position->data, a, s->vortons.radius->data, s->params.tree_leaf_size);
        if (!st) {
            vp_tree_velocity(s->tree, s->params.tree_theta, m, pts, vel, s->params.threads);
            s->interactions = vp_tree_last_interactions(s->tree);
        }
    }
    free(a);
    return st;
}

/* Phases 1-2: domain, then the velocity and its Jacobian at every grid node. */
int vp_sim_update_velocity_grid(vp_sim *s)
{
    double t0 = vp_now_ms();
    int st = vp_domain_update(s);
    if (st) return st;
    double t1 = vp_now_ms();
    s->timings[VP_PHASE_DOMAIN] = t1 - t0;
    size_t nn = vp_grid_count(&s->grid);
    if (s->params.solver == VP_SOLVER_POISSON) {
        st = vp_poisson_velocity_grid(s);
    } else if (s->params.solver == VP_SOLVER_TREE && s->vortons.n) {
        double *a = malloc(3 * s->vortons.n * sizeof(double));
        if (!a) return VP_ERR_NOMEM;
        strengths(s, a);
        st = vp_tree_build(s->tree, s->vortons.n, s->vortons.position->data, a, s->vortons.radius->data,
                           s->params.tree_leaf_size);
        free(a);
        if (!st) st = vp_tree_velocity_grid(s->tree, s->params.tree_theta, &s->grid, s->grid_velocity, s->params.threads);
        s->interactions = vp_tree_last_interactions(s->tree);
    } else {
        double *pts = malloc(3 * nn * sizeof(double));
        if (!pts) return VP_ERR_NOMEM;
        const vp_grid *g = &s->grid;
        for (int k = 0; k < g->n[2]; k++)
            for (int j = 0; j < g->n[1]; j++)
                for (int i = 0; i < g->n[0]; i++) {
                    size_t id = (size_t)i + (size_t)g->n[0] * ((size_t)j + (size_t)g->n[1] * k);
                    pts[3 * id] = g->origin[0] + g->h * i;
                    pts[3 * id + 1] = g->origin[1] + g->h * j;
                    pts[3 * id + 2] = g->origin[2] + g->h * k;
                }
        st = vp_velocity_solve(s, nn, pts, s->grid_velocity, s->params.solver);
        free(pts);
    }
    if (st) return st;
    vp_grid_jacobian(&s->grid, s->grid_velocity, s->grid_jacobian, s->params.threads);
    s->timings[VP_PHASE_VELOCITY] = vp_now_ms() - t1;
    return VP_OK;
}

int vp_sim_velocity_at(vp_sim *s, size_t m, const double *points, double *vel)
{
    int solver = s->params.solver == VP_SOLVER_DIRECT ? VP_SOLVER_DIRECT : VP_SOLVER_TREE;
    return vp_velocity_solve(s, m, points, vel, solver);
}

/* Phase 6 (physics.md 2.6): advection through the grid velocity.  Order 2 is Heun's
 * method in the frozen field of this step (u at x and at the Euler predictor, averaged);
 * order 1 is the seeds' explicit Euler.  The velocity used is cached on the particle. */
static void advect(const vp_sim *s, size_t n, double *x, double *vel)
{
    double dt = s->params.dt;
    int order = s->params.advect_order, threads = s->params.threads;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < (long)n; i++) {
        double u0[3], u[3];
        vp_grid_interp(&s->grid, s->grid_velocity, 3, x + 3 * i, u0);
        if (order >= 2) {
            double xp[3] = {x[3 * i] + dt * u0[0], x[3 * i + 1] + dt * u0[1], x[3 * i + 2] + dt * u0[2]}, u1[3];
            vp_grid_interp(&s->grid, s->grid_velocity, 3, xp, u1);
            for (int a = 0; a < 3; a++) u[a] = 0.5 * (u0[a] + u1[a]);
        } else {
            for (int a = 0; a < 3; a++) u[a] = u0[a];
        }
        for (int a = 0; a < 3; a++) { x[3 * i + a] += dt * u[a]; vel[3 * i + a] = u[a]; }
    }
}

void vp_advect_vortons(vp_sim *s)
{
    if (s->vortons.n) advect(s, s->vortons.n, s->vortons.position->data, s->vortons.velocity->data);
}

/* Tracers also sample the density grid, so dye can be coloured by density or temperature. */
void vp_advect_tracers(vp_sim *s)
{
    vp_tracers *t = &s->tracers;
    if (!t->n) return;
    advect(s, t->n, t->position->data, t->velocity->data);
    double *x = t->position->data, *d = t->density->data;
    int threads = s->params.threads, any = 0;
    (void)threads;
    size_t nn = vp_grid_count(&s->grid);
    for (size_t k = 0; k < nn && !any; k++) any = s->grid_density[k] != 0.0;
    if (!any) { /* uniform ambient fluid: nothing to sample */
        memset(d, 0, t->n * sizeof(double));
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < (long)t->n; i++) vp_grid_interp(&s->grid, s->grid_density, 1, x + 3 * i, d + i);
}

/* Phase 10 (physics.md 2.10): emitters add particles at their rates, uniformly in their
 * boxes; vortons get vorticity of the emitter's magnitude in a random direction. */
int vp_emit(vp_sim *s)
{
    double dt = s->params.dt;
    for (size_t e = 0; e < s->n_emitters; e++) {
        vp_emitter *E = &s->emitters[e];
        E->vorton_debt += E->vorton_rate * dt;
        E->tracer_debt += E->tracer_rate * dt;
        size_t nv = E->vorton_debt > 0 ? (size_t)E->vorton_debt : 0;
        size_t nt = E->tracer_debt > 0 ? (size_t)E->tracer_debt : 0;
        E->vorton_debt -= (double)nv; E->tracer_debt -= (double)nt;
        if (nv) {
            double *buf = malloc(nv * 8 * sizeof(double));
            if (!buf) return VP_ERR_NOMEM;
            double *p = buf, *w = buf + 3 * nv, *r = buf + 6 * nv, *d = buf + 7 * nv;
            for (size_t i = 0; i < nv; i++) {
                for (int a = 0; a < 3; a++) p[3 * i + a] = E->center[a] + E->half_size[a] * (2 * vp_rng_uniform(s->rng) - 1);
                double z = 2 * vp_rng_uniform(s->rng) - 1, phi = 2 * VP_PI * vp_rng_uniform(s->rng), q = sqrt(1 - z * z);
                w[3 * i] = E->vorticity * q * cos(phi); w[3 * i + 1] = E->vorticity * q * sin(phi); w[3 * i + 2] = E->vorticity * z;
                r[i] = E->vorton_radius; d[i] = E->density;
            }
            int st = vp_sim_add_vortons(s, nv, p, w, r, d);
            free(buf);
            if (st) return st;
        }
        if (nt) {
            double *buf = malloc(nt * 4 * sizeof(double));
            if (!buf) return VP_ERR_NOMEM;
            for (size_t i = 0; i < nt; i++) {
                for (int a = 0; a < 3; a++) buf[3 * i + a] = E->center[a] + E->half_size[a] * (2 * vp_rng_uniform(s->rng) - 1);
                buf[3 * nt + i] = E->density;
            }
            int st = vp_sim_add_tracers(s, nt, buf, buf + 3 * nt);
            free(buf);
            if (st) return st;
        }
    }
    return VP_OK;
}

/* Ages advance by dt; particles past their lifetime are removed. */
int vp_expire(vp_sim *s)
{
    double dt = s->params.dt;
    int st = VP_OK;
    for (int kind = 0; kind < 2 && !st; kind++) {
        size_t n = kind ? s->tracers.n : s->vortons.n;
        if (!n) continue;
        double *age = kind ? s->tracers.age->data : s->vortons.age->data;
        double life = kind ? s->params.tracer_lifetime : s->params.vorton_lifetime;
        int any = 0;
        for (size_t i = 0; i < n; i++) { age[i] += dt; if (life > 0 && age[i] > life) any = 1; }
        if (!any) continue;
        unsigned char *keep = malloc(n);
        if (!keep) return VP_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) keep[i] = !(age[i] > life);
        st = kind ? vp_sim_compact_tracers(s, keep) : vp_sim_compact_vortons(s, keep);
        free(keep);
    }
    return st;
}

static int finite_array(const double *a, size_t n)
{
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += a[i] * 0.0;
    return acc == 0.0;
}

static int check_finite(vp_sim *s, int phase)
{
    if (s->vortons.n && (!finite_array(s->vortons.position->data, 3 * s->vortons.n) ||
                         !finite_array(s->vortons.vorticity->data, 3 * s->vortons.n) ||
                         !finite_array(s->vortons.density->data, s->vortons.n))) {
        s->failed_phase = phase;
        return VP_ERR_NONFINITE;
    }
    return VP_OK;
}

/* One step of dt: physics.md section 2, items 1-10, in order. */
int vp_sim_step(vp_sim *s)
{
    int st;
    double t;
    s->failed_phase = -1;
    for (int p = 0; p < VP_PHASE_COUNT; p++) s->timings[p] = 0;
    if ((st = vp_sim_update_velocity_grid(s))) { s->failed_phase = VP_PHASE_VELOCITY; return st; } /* 1, 2 */
    if ((st = check_finite(s, VP_PHASE_VELOCITY))) return st;
    t = vp_now_ms();
    vp_splat_density(s);                                                  /* density grid */
    if (s->params.stretch && s->vortons.n) vp_stretch(s);                 /* 3 */
    double t2 = vp_now_ms(); s->timings[VP_PHASE_STRETCH] = t2 - t; t = t2;
    if (s->vortons.n && s->params.baroclinic) vp_baroclinic(s);                                   /* 4 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_BAROCLINIC] = t2 - t; t = t2;
    if ((st = check_finite(s, VP_PHASE_STRETCH))) return st;
    if ((st = vp_diffuse(s))) return st;                                  /* 5 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_DIFFUSE] = t2 - t; t = t2;
    vp_advect_vortons(s);                                                 /* 6 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_ADVECT_VORTONS] = t2 - t; t = t2;
    vp_advect_tracers(s);
    t2 = vp_now_ms(); s->timings[VP_PHASE_ADVECT_TRACERS] = t2 - t; t = t2;
    if ((st = check_finite(s, VP_PHASE_ADVECT_VORTONS))) return st;
    if ((st = vp_sim_collide(s))) return st;                             /* 7 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_CONTACT] = t2 - t; t = t2;
    vp_bodies_buoyancy(s);                                                /* 8 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_BUOYANCY] = t2 - t; t = t2;
    for (size_t b = 0; b < s->n_bodies; b++) vp_body_integrate(&s->bodies[b], s->params.dt); /* 9 */
    t2 = vp_now_ms(); s->timings[VP_PHASE_BODIES] = t2 - t; t = t2;
    if ((st = vp_expire(s))) return st;                                   /* 10 */
    if ((st = vp_emit(s))) return st;
    s->timings[VP_PHASE_EMIT] = vp_now_ms() - t;
    if ((st = check_finite(s, VP_PHASE_CONTACT))) return st;
    for (size_t b = 0; b < s->n_bodies; b++) {
        vp_body *B = &s->bodies[b];
        double acc = 0;
        for (int a = 0; a < 3; a++) acc += (B->position[a] + B->momentum[a] + B->angular_momentum[a]) * 0.0;
        if (acc != 0.0 || !isfinite(B->temperature)) { s->failed_phase = VP_PHASE_BODIES; return VP_ERR_NONFINITE; }
    }
    s->time += s->params.dt;
    s->frame += 1;
    return VP_OK;
}

void vp_sim_diagnostics(const vp_sim *s, const double origin[3], vp_diagnostics *d)
{
    memset(d, 0, sizeof *d);
    const vp_vortons *v = &s->vortons;
    double rho0 = s->params.ambient_density;
    for (size_t i = 0; i < v->n; i++) {
        const double *x = v->position->data + 3 * i, *w = v->vorticity->data + 3 * i, *u = v->velocity->data + 3 * i;
        double V = vp_volume(v->radius->data[i]);
        double a[3] = {w[0] * V, w[1] * V, w[2] * V}, r[3] = {x[0] - origin[0], x[1] - origin[1], x[2] - origin[2]};
        double rxa[3], rrxa[3];
        vp_cross3(r, a, rxa); vp_cross3(r, rxa, rrxa);
        for (int k = 0; k < 3; k++) {
            d->circulation[k] += a[k];
            d->linear_impulse[k] += 0.5 * rxa[k];
            d->angular_impulse[k] += rrxa[k] / 3.0;
        }
        d->enstrophy += vp_dot3(w, w) * V;
        double T = vp_temperature_from_density(rho0, v->density->data[i]);
        d->fluid_heat += s->params.fluid_heat_capacity * V * T;
        d->mass_deviation += v->density->data[i] * V;
        d->kinetic_energy += 0.5 * rho0 * vp_dot3(u, u) * V;
    }
    d->heat = d->fluid_heat;
    for (size_t b = 0; b < s->n_bodies; b++)
        if (s->bodies[b].heat_capacity > 0 && isfinite(s->bodies[b].heat_capacity))
            d->heat += s->bodies[b].heat_capacity * s->bodies[b].temperature;
}
