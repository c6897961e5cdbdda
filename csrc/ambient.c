/* ambient.c: the ambient fluid's density (method step 4, background stratification).
 *
 * Without a stratification the ambient fluid has the density rho0 = ambient_density
 * everywhere.  With one, its density is the profile rho_bar(h) of params.stratification at
 * the height h along -gravity (along z where gravity is zero): linear between the profile's
 * points, constant beyond the ends.  A particle's stored density stays its parcel's density
 * minus rho0; the part of it that is not ambient, d - (rho_bar - rho0), is what the
 * baroclinic term, the bodies' buoyancy and the remeshing see, so a layered fluid at rest
 * stays at rest.  Every evaluation of rho_bar goes through profile_at. */
#include <math.h>
#include "internal.h"
#include "kernel.h"

/* The unit vector along -gravity (z where gravity is zero). */
static void up_vector(const vp_params *p, double up[3])
{
    const double *g = p->gravity;
    const double gn = sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]);
    if (gn > 0 && isfinite(gn)) {
        for (int a = 0; a < 3; a++) up[a] = -g[a] / gn;
    } else {
        up[0] = 0; up[1] = 0; up[2] = 1;
    }
}

/* The profile at height h (pr->n >= 1): linear between points, constant beyond the ends. */
static inline double profile_at(const vp_profile *pr, double h)
{
    const int n = pr->n;
    if (!(h > pr->height[0])) return pr->value[0];
    if (h >= pr->height[n - 1]) return pr->value[n - 1];
    int k = 1;
    while (h > pr->height[k]) k++; /* height[k - 1] < h <= height[k] */
    const double t = (h - pr->height[k - 1]) / (pr->height[k] - pr->height[k - 1]);
    return pr->value[k - 1] + t * (pr->value[k] - pr->value[k - 1]);
}

double vp_ambient_density(const vp_params *p, const double x[3])
{
    if (!p->stratification.n) return p->ambient_density;
    double up[3];
    up_vector(p, up);
    return profile_at(&p->stratification, up[0] * x[0] + up[1] * x[1] + up[2] * x[2]);
}

void vp_ambient_deviation(const vp_params *p, size_t n, const double *x, double *out)
{
    const vp_profile *pr = &p->stratification;
    if (!pr->n) {
        for (size_t i = 0; i < n; i++) out[i] = 0.0;
        return;
    }
    double up[3];
    up_vector(p, up);
    const double rho0 = p->ambient_density;
    for (size_t i = 0; i < n; i++) {
        const double *xi = x + 3 * i;
        out[i] = profile_at(pr, up[0] * xi[0] + up[1] * xi[1] + up[2] * xi[2]) - rho0;
    }
}

/* int_a^b rho_bar(hc + s) pi (R^2 - s^2) ds on a piece [a, b] where rho_bar is linear:
 * Simpson's rule, exact for the cubic integrand. */
static double slab_mass(const vp_profile *pr, double hc, double R, double a, double b)
{
    const double m = 0.5 * (a + b);
    const double fa = profile_at(pr, hc + a) * (R * R - a * a), fm = profile_at(pr, hc + m) * (R * R - m * m),
                 fb = profile_at(pr, hc + b) * (R * R - b * b);
    return VP_PI * (b - a) / 6.0 * (fa + 4.0 * fm + fb);
}

double vp_ambient_ball_mean(const vp_params *p, const double c[3], double R)
{
    const vp_profile *pr = &p->stratification;
    if (!pr->n) return p->ambient_density;
    if (!(R > 0)) return vp_ambient_density(p, c);
    double up[3];
    up_vector(p, up);
    const double hc = up[0] * c[0] + up[1] * c[1] + up[2] * c[2];
    /* the ball's slabs between the profile's points that cut it */
    double mass = 0, a = -R;
    for (int k = 0; k < pr->n; k++) {
        const double s = pr->height[k] - hc;
        if (s <= a) continue;
        if (s >= R) break;
        mass += slab_mass(pr, hc, R, a, s);
        a = s;
    }
    mass += slab_mass(pr, hc, R, a, R);
    return mass / vp_volume(R);
}

/* Phase 5 with a stratification (method steps 4 and 5): PSE exchanges each vorton's
 * temperature excess over the ambient's at its height, T - T_bar + 1, instead of T itself, so
 * the layers keep their profile as the ambient at rest must; a parcel out of its layer still
 * diffuses into its surroundings.  (Exchanging the parcels' own temperatures conducted heat
 * across the interface, and temperature is not linear in density: the mixed fluid came out
 * lighter than the layers' mean, and a two-layer fluid at rest rose by 0.05 in 10 s.)  The
 * diffusion runs on those excesses written as densities, then each vorton whose excess did
 * not change gets its own density back bit for bit, the others their new excess over T_bar. */
int vp_diffuse_stratified(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    const size_t n = v->n;
    if (!n || !s->params.stratification.n) return vp_diffuse(s);
    double *keep = malloc(3 * n * sizeof(double));
    if (!keep) return VP_ERR_NOMEM;
    double *own = keep, *offset = keep + n, *excess = keep + 2 * n; /* d, T_bar - 1, the excess as density */
    double *d = v->density->data;
    const double rho0 = s->params.ambient_density;
    vp_ambient_deviation(&s->params, n, v->position->data, offset);
    for (size_t i = 0; i < n; i++) {
        const double e = offset[i];
        own[i] = d[i];
        offset[i] = vp_temperature_from_density(rho0, e) - 1.0;
        excess[i] = d[i] == e ? 0.0 : vp_density_from_temperature(rho0, vp_temperature_from_density(rho0, d[i]) - offset[i]);
        d[i] = excess[i];
    }
    const int st = vp_diffuse(s);
    for (size_t i = 0; i < n; i++)
        d[i] = d[i] == excess[i] ? own[i] : vp_density_from_temperature(rho0, vp_temperature_from_density(rho0, d[i]) + offset[i]);
    free(keep);
    return st;
}
