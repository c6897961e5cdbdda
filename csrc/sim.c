/* sim.c: create/free, bodies, and the step: vp_sim_step reads like docs/method.md's order of steps, one
 * call a phase (each in the file of its name), with the checks that keep a step safe:
 * finiteness, substeps where the flow turns fast, and rollback. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"

const char *const vp_phase_names[VP_PHASE_COUNT] = {
    "domain", "velocity", "stretch", "baroclinic", "diffuse", "advect_vortons",
    "advect_tracers", "contact", "buoyancy", "bodies", "emit", "remesh"};

vp_sim *vp_sim_create(const vp_params *p)
{
    if (vp_params_check(p, NULL, 0)) return NULL;
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
    free(s->cell_velocity);
    free(s->grid_velocity); free(s->grid_jacobian); free(s->grid_density); free(s->grid_density_gradient);
    free(s->scratch);
    free(s->midpoint_work);
    free(s->backup); free(s->backup_bodies); free(s->backup_emitters);
    vp_tree_free(s->tree);
    vp_poisson_free(s->poisson);
    vp_sim_lattices_free(s);
    free(s);
}

int vp_sim_add_body(vp_sim *s, const vp_body *b)
{
    void *a = s->bodies;
    int st = vp_array_grow(&a, s->n_bodies, &s->n_bodies_allocated, sizeof(vp_body));
    s->bodies = a;
    if (st) return st;
    s->bodies[s->n_bodies] = *b;
    vp_body_sync(&s->bodies[s->n_bodies]);
    s->n_bodies++;
    return VP_OK;
}

/* Whether every a[i] of [i0, i1) is finite: x * 0 is 0 for finite x and NaN otherwise, so a
 * sum of them is 0 exactly when all are finite, in any order of summation.  32 partial sums
 * (four 8-lane chains with AVX-512), so that the loop runs at load speed instead of one
 * vector per add latency. */
VP_CLONES
static int finite_range(const double *restrict a, size_t i0, size_t i1)
{
    double acc[32] = {0};
    size_t i = i0;
    for (; i + 32 <= i1; i += 32)
        for (int j = 0; j < 32; j++) acc[j] += a[i + j] * 0.0;
    for (; i < i1; i++) acc[0] += a[i] * 0.0;
    double t = 0;
    for (int j = 0; j < 32; j++) t += acc[j];
    return t == 0.0;
}

/* Whether every a[i] is finite, in parallel for large arrays: blocks of at least 2^16 values
 * handed out to the threads.  Small arrays are checked outside any parallel region (a region
 * of one thread still costs more than they take). */
static int finite_array(const double *a, size_t n, int threads)
{
    const long block = vp_block_size((long)n, threads, 1 << 16), nb = ((long)n + block - 1) / block;
    if (nb == 1 || threads < 2) return finite_range(a, 0, n);
    int ok = 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(& : ok)
    for (long b = 0; b < nb; b++)
        ok &= finite_range(a, (size_t)(b * block), (size_t)vp_block_end(b, block, (long)n));
    return ok;
}

/* Whether the vortons' fields in `what` (CHECK_X, CHECK_W, CHECK_D: positions, vorticity,
 * density) are all finite; VP_ERR_NONFINITE if not.  Each call checks only what the phases
 * since the last check can have changed (a check reads whole arrays). */
enum { CHECK_X = 1, CHECK_W = 2, CHECK_D = 4, CHECK_ALL = 7 };
static int check_finite(vp_sim *s, int what)
{
    const int th = vp_threads(s);
    if (s->vortons.n && (((what & CHECK_X) && !finite_array(s->vortons.position->data, 3 * s->vortons.n, th)) ||
                         ((what & CHECK_W) && !finite_array(s->vortons.vorticity->data, 3 * s->vortons.n, th)) ||
                         ((what & CHECK_D) && !finite_array(s->vortons.density->data, s->vortons.n, th)))) {
        return VP_ERR_NONFINITE;
    }
    return VP_OK;
}

/* Bodies' state finite after the step; VP_ERR_NONFINITE if not. */
static int check_bodies(const vp_sim *s)
{
    for (size_t b = 0; b < s->n_bodies; b++) {
        const vp_body *B = &s->bodies[b];
        double acc = 0;
        for (int a = 0; a < 3; a++) acc += (B->position[a] + B->momentum[a] + B->angular_momentum[a]) * 0.0;
        if (acc != 0.0 || !isfinite(B->temperature)) return VP_ERR_NONFINITE;
    }
    return VP_OK;
}

/* Whether this step ends with a remeshing (every remesh_interval frames, after the last substep). */
static int remesh_due(const vp_sim *s)
{
    return !s->in_substep && s->params.remesh_interval > 0 && (s->frame + 1) % s->params.remesh_interval == 0;
}

/* One phase of the step: its time is added to s->timings[phase]; if it fails, the step stops
 * there and reports that phase. */
#define PHASE(phase, call)                                                                    \
    do {                                                                                      \
        const double t0_ = vp_now_ms();                                                       \
        const int st_ = (call);                                                               \
        s->timings[phase] += vp_now_ms() - t0_;                                               \
        if (st_) {                                                                            \
            s->failed_phase = (phase);                                                        \
            return st_;                                                                       \
        }                                                                                     \
    } while (0)

/* params.integrator rk2: the grid's velocity and Jacobian become the average of this step's
 * (at the start state) and those of the predicted end state (the vortons stretched and moved
 * through the start field, then put back), which is the field at the step's midpoint to
 * second order.  Frozen, the field of the step's start moves the vortons for the whole step: a
 * ring's vortons then lag its motion by half a step, and its radius grows by O(dt) a unit time
 * (two leapfrogging rings gained 22% impulse in 10 s at dt = 1/30). */
static int midpoint_field(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    const size_t n = v->n, nn = vp_grid_count(&s->grid), need = 6 * n + 12 * nn;
    if (!n) return VP_OK;
    if (need > s->midpoint_allocated) {
        double *p = realloc(s->midpoint_work, need * sizeof(double));
        if (!p) return VP_ERR_NOMEM;
        s->midpoint_work = p;
        s->midpoint_allocated = need;
    }
    double *x0 = s->midpoint_work, *w0 = x0 + 3 * n, *g0 = w0 + 3 * n, *j0 = g0 + 3 * nn;
    memcpy(x0, v->position->data, 3 * n * sizeof(double));
    memcpy(w0, v->vorticity->data, 3 * n * sizeof(double));
    memcpy(g0, s->grid_velocity, 3 * nn * sizeof(double));
    memcpy(j0, s->grid_jacobian, 9 * nn * sizeof(double));
    const double rate0 = s->max_rate;
    int st = vp_stretch(s);
    if (!st) st = vp_advect_vortons(s);
    if (!st) st = vp_velocity_grid(s);
    memcpy(v->position->data, x0, 3 * n * sizeof(double));
    memcpy(v->vorticity->data, w0, 3 * n * sizeof(double));
    if (st) return st;
    double *g = s->grid_velocity, *J = s->grid_jacobian;
    for (size_t i = 0; i < 3 * nn; i++) g[i] = 0.5 * (g0[i] + g[i]);
    for (size_t i = 0; i < 9 * nn; i++) J[i] = 0.5 * (j0[i] + J[i]);
    s->max_rate = s->max_rate > rate0 ? s->max_rate : rate0;
    return VP_OK;
}

/* One step of dt: docs/method.md's order of steps, items 1-10, in order.  The finiteness checks are
 * reported in the phase whose output they check. */
static int step_once(vp_sim *s)
{
    int projected = 0;
    s->failed_phase = -1;
    for (int p = 0; p < VP_PHASE_COUNT; p++) s->timings[p] = 0;
    PHASE(VP_PHASE_DOMAIN, vp_domain_update(s));                      /* 1 (and the positions finite) */
    PHASE(VP_PHASE_VELOCITY, vp_velocity_grid(s));                    /* 2 */
    PHASE(VP_PHASE_VELOCITY, check_finite(s, CHECK_W | CHECK_D));     /* (the vorticity and density as given) */
    if (s->params.integrator == VP_INTEGRATOR_RK2) PHASE(VP_PHASE_VELOCITY, midpoint_field(s));
    PHASE(VP_PHASE_STRETCH, vp_stretch(s));                           /* 3 */
    PHASE(VP_PHASE_BAROCLINIC, vp_density_grid(s));                   /* 4: the density grid, */
    PHASE(VP_PHASE_BAROCLINIC, vp_baroclinic(s));                     /*    then its term */
    PHASE(VP_PHASE_STRETCH, check_finite(s, CHECK_W));                /* (3 and 4 change only w) */
    PHASE(VP_PHASE_DIFFUSE, s->params.stratification.n ? vp_diffuse_stratified(s) : vp_diffuse(s)); /* 5 */
    PHASE(VP_PHASE_ADVECT_VORTONS, vp_advect_vortons(s));             /* 6 */
    PHASE(VP_PHASE_ADVECT_TRACERS, vp_advect_tracers(s, &projected));
    PHASE(VP_PHASE_ADVECT_VORTONS, check_finite(s, CHECK_ALL));
    PHASE(VP_PHASE_BUOYANCY, vp_bodies_buoyancy(s));                  /* 8 (7 uses every force) */
    PHASE(VP_PHASE_CONTACT, s->params.body_coupling == VP_COUPLING_ARTICLES
                                ? vp_collide(s, !projected)           /* 7 */
                                : vp_bodies_penalize(s, !projected));
    PHASE(VP_PHASE_BODIES, vp_bodies_integrate(s));                   /* 9 */
    PHASE(VP_PHASE_EMIT, vp_expire(s));                               /* 10 */
    PHASE(VP_PHASE_EMIT, vp_emit(s));
    const int remeshed = remesh_due(s);
    if (remeshed) PHASE(VP_PHASE_REMESH, vp_sim_remesh(s));
    /* Phases 7-10 change the vortons only through bodies, emitters or remeshing (expiry
     * drops whole vortons); without them, they are as the last check saw them. */
    if (s->n_bodies || s->n_emitters || remeshed) PHASE(VP_PHASE_CONTACT, check_finite(s, CHECK_ALL));
    PHASE(VP_PHASE_BODIES, check_bodies(s));
    s->time += s->params.dt;
    if (!s->in_substep) s->frame += 1;
    return VP_OK;
}
#undef PHASE

/* Stability guard: explicit advection (Heun) and the stretching exponential lose accuracy,
 * then stability, once a vorton's local rotation and strain rate |grad u| times dt exceeds
 * about 1 (Heun amplifies a rotation by theta per step for theta > 2).  A step whose last
 * measured max |grad u| dt exceeds max_rate_dt is therefore taken as k <= max_substeps
 * substeps of dt / k (same time and frame count afterwards; emitters, lifetimes and
 * diffusion see the shorter dt; remeshing runs once, after the last substep). */
static int step_guarded(vp_sim *s)
{
    double dt = s->params.dt, lim = s->params.max_rate_dt;
    int k = 1;
    if (lim > 0 && s->max_rate * dt > lim) {
        double want = ceil(s->max_rate * dt / lim);
        k = want < (double)s->params.max_substeps ? (int)want : s->params.max_substeps;
        if (k < 1) k = 1;
    }
    s->substeps = k;
    if (k == 1) return step_once(s);
    double t0 = s->time, tl[VP_PHASE_COUNT] = {0};
    int st = VP_OK;
    s->params.dt = dt / k;
    for (int i = 0; i < k && !st; i++) {
        s->in_substep = i < k - 1;
        st = step_once(s);
        for (int p = 0; p < VP_PHASE_COUNT; p++) tl[p] += s->timings[p];
    }
    s->in_substep = 0;
    s->params.dt = dt;
    if (!st) s->time = t0 + dt; /* exactly one dt on, whatever the rounding of k additions */
    for (int p = 0; p < VP_PHASE_COUNT; p++) s->timings[p] = tl[p];
    return st;
}

/* The state a rollback restores: particle arrays (vortons: 12 doubles, tracers: 8 doubles
 * per particle), bodies, emitters, RNG, time and frame. */
typedef struct { size_t nv, nt, nb, ne; uint64_t rng[4]; double time; int64_t frame; } snapshot_hdr;

static int take_snapshot(vp_sim *s, snapshot_hdr *h)
{
    size_t nv = s->vortons.n, nt = s->tracers.n, need = 12 * nv + 8 * nt;
    if (need > s->backup_allocated) {
        double *p = realloc(s->backup, need * sizeof(double));
        if (!p) return VP_ERR_NOMEM;
        s->backup = p; s->backup_allocated = need;
    }
    if (s->n_bodies > s->backup_bodies_allocated) {
        vp_body *b = realloc(s->backup_bodies, s->n_bodies * sizeof(vp_body));
        if (!b) return VP_ERR_NOMEM;
        s->backup_bodies = b; s->backup_bodies_allocated = s->n_bodies;
    }
    if (s->n_emitters > s->backup_emitters_allocated) {
        vp_emitter *e = realloc(s->backup_emitters, s->n_emitters * sizeof(vp_emitter));
        if (!e) return VP_ERR_NOMEM;
        s->backup_emitters = e; s->backup_emitters_allocated = s->n_emitters;
    }
    double *p = s->backup;
#define SAVE(buf, w, n) if (n) { memcpy(p, (buf)->data, (n) * (w) * sizeof(double)); } p += (n) * (w);
    SAVE(s->vortons.position, 3, nv) SAVE(s->vortons.vorticity, 3, nv) SAVE(s->vortons.radius, 1, nv)
    SAVE(s->vortons.density, 1, nv) SAVE(s->vortons.age, 1, nv) SAVE(s->vortons.velocity, 3, nv)
    SAVE(s->tracers.position, 3, nt) SAVE(s->tracers.velocity, 3, nt) SAVE(s->tracers.density, 1, nt)
    SAVE(s->tracers.age, 1, nt)
#undef SAVE
    if (s->n_bodies) memcpy(s->backup_bodies, s->bodies, s->n_bodies * sizeof(vp_body));
    if (s->n_emitters) memcpy(s->backup_emitters, s->emitters, s->n_emitters * sizeof(vp_emitter));
    h->nv = nv; h->nt = nt; h->nb = s->n_bodies; h->ne = s->n_emitters;
    memcpy(h->rng, s->rng, sizeof h->rng);
    h->time = s->time; h->frame = s->frame;
    return VP_OK;
}

/* Restore the snapshot.  The arrays still hold at least as many rows as then (a step only
 * adds particles after removing expired ones, and the copy goes into whatever blocks the
 * sim owns now). */
static int restore_snapshot(vp_sim *s, const snapshot_hdr *h)
{
    int st;
    if ((st = vp_sim_reserve_vortons(s, h->nv)) || (st = vp_sim_reserve_tracers(s, h->nt))) return st;
    const double *p = s->backup;
    size_t nv = h->nv, nt = h->nt;
#define LOAD(buf, w, n) if (n) { memcpy((buf)->data, p, (n) * (w) * sizeof(double)); } p += (n) * (w);
    LOAD(s->vortons.position, 3, nv) LOAD(s->vortons.vorticity, 3, nv) LOAD(s->vortons.radius, 1, nv)
    LOAD(s->vortons.density, 1, nv) LOAD(s->vortons.age, 1, nv) LOAD(s->vortons.velocity, 3, nv)
    LOAD(s->tracers.position, 3, nt) LOAD(s->tracers.velocity, 3, nt) LOAD(s->tracers.density, 1, nt)
    LOAD(s->tracers.age, 1, nt)
#undef LOAD
    s->vortons.n = nv; s->tracers.n = nt;
    if (h->nb) memcpy(s->bodies, s->backup_bodies, h->nb * sizeof(vp_body));
    if (h->ne) memcpy(s->emitters, s->backup_emitters, h->ne * sizeof(vp_emitter));
    memcpy(s->rng, h->rng, sizeof h->rng);
    s->time = h->time; s->frame = h->frame;
    return VP_OK;
}

/* One step; with params.rollback, a failed step leaves the state as it was before it. */
int vp_sim_step(vp_sim *s)
{
    if (!s->params.rollback) return step_guarded(s);
    snapshot_hdr h;
    int st = take_snapshot(s, &h);
    if (st) return st;
    st = step_guarded(s);
    if (st) {
        int failed = s->failed_phase;
        restore_snapshot(s, &h);
        s->failed_phase = failed;
    }
    return st;
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
        d->fluid_heat += s->params.fluid_heat_capacity * V * vp_excess_temperature(rho0, v->density->data[i]);
        d->mass_deviation += v->density->data[i] * V;
        d->kinetic_energy += 0.5 * rho0 * vp_dot3(u, u) * V;
    }
    d->heat = d->fluid_heat;
    for (size_t b = 0; b < s->n_bodies; b++)
        if (s->bodies[b].heat_capacity > 0 && isfinite(s->bodies[b].heat_capacity))
            d->heat += s->bodies[b].heat_capacity * (s->bodies[b].temperature - 1.0);
    for (size_t b = 0; b < s->n_bodies && s->params.body_coupling == VP_COUPLING_PHYSICAL; b++) {
        const vp_body *B = &s->bodies[b];
        const double m = rho0 * vp_volume(B->radius), J = 0.4 * B->radius * B->radius;
        const double c[3] = {B->position[0] - origin[0], B->position[1] - origin[1], B->position[2] - origin[2]};
        double cxu[3];
        vp_cross3(c, B->interior_velocity, cxu);
        for (int k = 0; k < 3; k++) {
            d->interior_momentum[k] += m * B->interior_velocity[k];
            d->interior_angular_momentum[k] += m * (cxu[k] + J * B->interior_angular_velocity[k]);
        }
    }
}
