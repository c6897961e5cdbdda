/* buoyancy.c: the density grid, baroclinic vorticity (method step 4, part 8) and body
 * buoyancy (method step 8, part 9). */
#include <string.h>
#include "internal.h"
#include "grid_inline.h"
#include "kernel.h"

/* Whether x lies inside one of the bodies. */
static int inside_a_body(const vp_sim *s, const double x[3])
{
    for (size_t b = 0; b < s->n_bodies; b++) {
        const vp_body *B = &s->bodies[b];
        const double r[3] = {x[0] - B->position[0], x[1] - B->position[1], x[2] - B->position[2]};
        if (vp_dot3(r, r) < B->radius * B->radius) return 1;
    }
    return 0;
}

/* The density grid (method step 4, part 8): each vorton's mass deviation d_i V_i,
 * cloud-in-cell splatted and divided by the cell volume, so the grid holds exactly the
 * particles' total mass; then its central-difference gradient.  With a stratification the
 * deviation is taken from the ambient at the vorton's height, d_i - (rho_bar(z_i) - rho0):
 * the layers themselves make no gradient (grad rho_bar x g = 0), a parcel out of its layer
 * does.  A fluid at the ambient density everywhere has a zero grid: its gradient is zero and
 * makes no baroclinic vorticity, so neither the splat nor the gradient is computed
 * (density_flat). */
int vp_density_grid(vp_sim *s)
{
    size_t nn = vp_grid_count(&s->grid);
    memset(s->grid_density, 0, nn * sizeof(double));
    vp_vortons *v = &s->vortons;
    double inv_cell = 1.0 / (s->grid.h * s->grid.h * s->grid.h);
    const double *x = v->position->data, *d = v->density->data, *r = v->radius->data;
    const int stratified = s->params.stratification.n > 0;
    /* scratch: the masses (n), then the splat's work space (size_t, 8 bytes like a double) */
    const size_t work = vp_grid_splat_work(&s->grid, v->n);
    double *m = NULL;
    if (stratified) { /* the deviations from the ambient, in m */
        m = vp_sim_scratch(s, v->n + work + 3 * v->n);
        if (!m) return VP_ERR_NOMEM;
        /* ... at the height each vorton reaches this step, x + dt u (u: this step's grid
         * velocity): an internal wave is an oscillator (its vorticity grows from the
         * deviation, its height from the vorticity), and taking the deviation where the
         * advection will leave the vortons steps it as symplectic Euler, which keeps its
         * energy, instead of forward Euler, which gains 1 + (N dt)^2 a step (a thin interface
         * of +-0.6 has N dt ~ 0.4 at dt = 1/30: a ball resting at it was shaken ever harder). */
        double *xp = m + v->n + work;
        const double dt = s->params.dt;
        const vp_grid *g = &s->grid;
        const double *gv = s->grid_velocity;
        const int threads = vp_threads(s);
        (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (v->n > 4096)
        for (long i = 0; i < (long)v->n; i++) {
            double u[3];
            vp_grid_interp3(g, gv, x + 3 * i, u);
            for (int a = 0; a < 3; a++) xp[3 * i + a] = x[3 * i + a] + dt * u[a];
        }
        vp_ambient_deviation(&s->params, v->n, xp, m);
        for (size_t i = 0; i < v->n; i++) m[i] = d[i] - m[i];
        d = m;
    }
    /* The fluid inside a body is the body's: the vortons there (the physical coupling keeps
     * its lattice's inside the body) carry no deviation of their own, or the body would be
     * buoyed twice, by vp_bodies_buoyancy and by the baroclinic flow of its own contents (a
     * neutral ball in a linear profile rested 0.07 above its level, carrying the fluid of the
     * height it was released at). */
    for (size_t i = 0; i < v->n && s->n_bodies; i++) {
        if (d[i] == 0.0 || !inside_a_body(s, x + 3 * i)) continue;
        if (!m) {
            m = vp_sim_scratch(s, v->n + work);
            if (!m) return VP_ERR_NOMEM;
            memcpy(m, d, v->n * sizeof(double));
            d = m;
        }
        m[i] = 0.0;
    }
    int any = 0;
    for (size_t i = 0; i < v->n && !any; i++) any = d[i] != 0.0;
    s->density_flat = !any;
    if (!any) return VP_OK;
    if (!m) m = vp_sim_scratch(s, v->n + work);
    if (!m) return VP_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) m[i] = d[i] == 0.0 ? 0.0 : d[i] * vp_volume(r[i]) * inv_cell;
    vp_grid_splat_many(&s->grid, s->grid_density, 1, v->n, x, m, (size_t *)(m + v->n), vp_threads(s));
    vp_grid_gradient(&s->grid, s->grid_density, s->grid_density_gradient, vp_threads(s));
    return VP_OK;
}

/* w += k (grad rho) x g for vortons [i0, i1), grad rho interpolated at each; compiled for
 * AVX-512, AVX2 + FMA and the baseline (VP_CLONES) for vp_grid_interp3's vectors. */
VP_CLONES
static void baroclinic_range(const vp_grid *grid, const double *restrict grad_rho, const double g[3], double k, long i0,
                             long i1, const double *restrict x, double *restrict w)
{
    double f[64][3];
    size_t base[64];
    for (long b0 = i0; b0 < i1; b0 += 64) { /* the block's cells first */
        const int m = (int)(i1 - b0 < 64 ? i1 - b0 : 64);
        vp_grid_cells(grid, m, x + 3 * b0, base, f);
        for (int j = 0; j < m; j++) {
            const long i = b0 + j;
            double grad[3], c[3];
            vp_grid_interp3_at(grid, grad_rho, base[j], f[j], grad);
            vp_cross3(grad, g, c);
            w[3 * i] += k * c[0]; w[3 * i + 1] += k * c[1]; w[3 * i + 2] += k * c[2];
        }
    }
}

/* Phase 4 (method step 4, part 8): baroclinic generation dw/dt = (grad rho) x g / rho0
 * (Boussinesq): heavy fluid sinks, light rises.  Skipped when params.baroclinic is 0,
 * gravity is zero, the domain is flat along it or the density is uniform (density_flat,
 * with finite factors: the term is exactly zero; skipping it differs from adding it only in
 * the sign of a vorticity component that is -0.0). */
int vp_baroclinic(vp_sim *s)
{
    const double *g = s->params.gravity;
    double gg = vp_dot3(g, g);
    if (!s->vortons.n || !s->params.baroclinic || gg == 0.0) return VP_OK;
    double ext[3] = {(s->grid.n[0] - 1) * s->grid.h, (s->grid.n[1] - 1) * s->grid.h,
                     (s->grid.n[2] - 1) * s->grid.h};
    if (fabs(ext[0] * g[0]) + fabs(ext[1] * g[1]) + fabs(ext[2] * g[2]) == 0.0) return VP_OK;
    vp_vortons *v = &s->vortons;
    double k = s->params.dt / s->params.ambient_density;
    /* (an infinite k or g times the zero gradient is NaN: then the term runs, and the step
     * fails in the phase it always did) */
    if (s->density_flat && isfinite(k) && isfinite(gg)) return VP_OK;
    double *x = v->position->data, *w = v->vorticity->data;
    const int threads = vp_threads(s);
    const long n = (long)v->n, bs = vp_block_size(n, threads, 4096), nb = (n + bs - 1) / bs; /* ~10 ns a vorton */
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (nb > 1)
    for (long b = 0; b < nb; b++)
        baroclinic_range(&s->grid, s->grid_density_gradient, g, k, b * bs, vp_block_end(b, bs, n), x, w);
    return VP_OK;
}

/* Density deviation at a point (from the ambient there): the grid's value inside it, ambient
 * (0) outside. */
static double sample_density(const vp_sim *s, const double x[3])
{
    for (int a = 0; a < 3; a++) {
        double u = (x[a] - s->grid.origin[a]) / s->grid.h;
        if (!(u >= 0.0) || u > s->grid.n[a] - 1) return 0.0;
    }
    double d;
    vp_grid_interpolate(&s->grid, s->grid_density, 1, x, &d);
    return d;
}

/* Gravity plus Archimedes on every free body with gravity on (method step 8, part 9):
 * F = g (M - rho_avg Vb), rho_avg = the ambient's mean over the ball (rho0, or the
 * stratification's profile integrated exactly over the ball's slabs) + the mean density
 * deviation of the fluid the body displaces.  Sampling at the centre and c +- R/2 g_hat,
 * c +- R g_hat fails: a body pushes the fluid's vortons out of itself
 * (contact.c), so the density grid inside it reads a hole of ambient fluid and a neutral ball
 * would float anywhere.  We sample the displaced fluid just outside instead, one grid cell
 * beyond the surface: above and below along g (their mean is the density at the centre's
 * height for a linear profile, and straddles an interface) and four points around the
 * equator, the two groups weighted equally. */
int vp_bodies_buoyancy(vp_sim *s)
{
    const double *g = s->params.gravity;
    double gn = sqrt(vp_dot3(g, g));
    if (gn == 0.0) return VP_OK;
    double gh[3] = {g[0] / gn, g[1] / gn, g[2] / gn};
    /* two unit vectors perpendicular to g */
    double t1[3] = {0, 0, 0}, t2[3];
    t1[fabs(gh[0]) < 0.9 ? 0 : 1] = 1.0;
    double d0 = vp_dot3(t1, gh);
    for (int a = 0; a < 3; a++) t1[a] -= d0 * gh[a];
    double l1 = sqrt(vp_dot3(t1, t1));
    for (int a = 0; a < 3; a++) t1[a] /= l1;
    vp_cross3(gh, t1, t2);
    for (size_t b = 0; b < s->n_bodies; b++) {
        vp_body *B = &s->bodies[b];
        if (B->fixed || !B->gravity) continue;
        double rr = B->radius + s->grid.h, axial = 0, side = 0;
        const double *dirs[6] = {gh, gh, t1, t1, t2, t2};
        for (int q = 0; q < 6; q++) {
            double sg = (q & 1) ? -1.0 : 1.0, p[3];
            for (int a = 0; a < 3; a++) p[a] = B->position[a] + sg * rr * dirs[q][a];
            double d = sample_density(s, p);
            if (q < 2) axial += 0.5 * d; else side += 0.25 * d;
        }
        const double ambient = s->params.stratification.n ? vp_ambient_ball_mean(&s->params, B->position, B->radius)
                                                          : s->params.ambient_density;
        double rho = ambient + 0.5 * (axial + side);
        double net = B->mass - rho * vp_volume(B->radius);
        for (int a = 0; a < 3; a++) B->force[a] += g[a] * net;
    }
    return VP_OK;
}
