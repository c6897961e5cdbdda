/* remesh.c: redistribution of the vortons onto a regular lattice (vortex particle methods'
 * remeshing, Koumoutsakos 1997; Cottet and Koumoutsakos 2000, ch. 7), not in the seeds.
 *
 * Vortons move with the flow and drift apart or bunch up; stretching then grows the strength
 * of isolated vortons whose neighbours no longer overlap them, and the particle noise feeds
 * on itself until the step blows up (the seeds halved the stretching rate to delay it).
 * Every remesh_interval frames the vortons' strengths a = w V, density mass rho' V and age
 * are spread with the M4' kernel (Monaghan 1985) onto a lattice of spacing h = (mean V)^(1/3)
 * and the vortons are replaced by one per lattice node that carries a strength or a density
 * above remesh_threshold times the largest.  M4' reproduces polynomials up to degree 2, so
 * total strength (circulation), linear impulse 1/2 sum x x a and angular impulse
 * 1/3 sum x x (x x a) are unchanged up to the dropped nodes (exactly when nothing is
 * dropped), as is the total density mass.  Vortons beyond the robust domain limits
 * (escapees) and those whose kernel support reaches into a body are left as they are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include "internal.h"
#include "kernel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* M4' interpolation kernel, support |x| < 2 (Monaghan 1985). */
static inline double m4p(double x)
{
    x = fabs(x);
    if (x < 1.0) return 1.0 - 2.5 * x * x + 1.5 * x * x * x;
    if (x < 2.0) return 0.5 * (2.0 - x) * (2.0 - x) * (1.0 - x);
    return 0.0;
}

/* The M4' scatter of remeshing: each inside vorton's 9 carried quantities (strength, density
 * mass, age, weight, velocity) onto its 4^3 nodes of the row-stored lattice (base: its first
 * node per axis, relative to the lattice origin o; roff, rx0: where each row's nodes start and
 * its first x node), the part that falls in lattice planes z0 <= z < z1.  In vorton order, so
 * every node's sums are taken in the same order whichever caller owns its plane: the threads
 * of vp_sim_remesh each scatter into the planes they own, and the result is the serial one, for
 * any thread count.  (Cloned for AVX2/AVX-512 it was 1.15x faster, a few microseconds a frame,
 * but contracted the sums into FMAs: other bits than the baseline.) */
static void remesh_scatter(size_t n, const unsigned char *inside, const long *base, const double *x, const double *w,
                           const double *r, const double *d, const double *age, const double *vel, double h,
                           const long o[3], const long m[3], const size_t *roff, const long *rx0, long z0, long z1,
                           double *acc)
{
    for (size_t i = 0, t = 0; i < n; i++) {
        if (!inside[i]) continue;
        const long *b = base + 3 * t++;
        if (b[2] + 3 < z0 || b[2] >= z1) continue;
        const int kz0 = b[2] < z0 ? (int)(z0 - b[2]) : 0, kz1 = b[2] + 4 > z1 ? (int)(z1 - b[2]) : 4;
        double V = vp_volume(r[i]), q[4] = {w[3 * i] * V, w[3 * i + 1] * V, w[3 * i + 2] * V, d[i] * V};
        double wt[3][4];
        for (int a = 0; a < 3; a++) {
            const double u = x[3 * i + a] / h;
            for (int k = 0; k < 4; k++) wt[a][k] = m4p(u - (double)(b[a] + o[a] + k));
        }
        for (int kz = kz0; kz < kz1; kz++)
            for (int ky = 0; ky < 4; ky++) {
                const size_t row = (size_t)(b[1] + ky) + (size_t)m[1] * (size_t)(b[2] + kz);
                double *Arow = acc + 9 * (roff[row] + (size_t)(b[0] - rx0[row]));
                for (int kx = 0; kx < 4; kx++) {
                    double W = wt[0][kx] * wt[1][ky] * wt[2][kz];
                    double *A = Arow + 9 * kx;
                    A[0] += W * q[0]; A[1] += W * q[1]; A[2] += W * q[2]; A[3] += W * q[3];
                    A[4] += W * age[i]; A[5] += W;
                    A[6] += W * vel[3 * i]; A[7] += W * vel[3 * i + 1]; A[8] += W * vel[3 * i + 2];
                }
            }
    }
}

/* remesh_scatter's planes are shared by the threads from this many inside vortons */
#define REMESH_PARALLEL_MIN 256

int vp_sim_remesh(vp_sim *s)
{
    vp_vortons *v = &s->vortons;
    size_t n = v->n;
    if (n < 2) return VP_OK;
    const double *x = v->position->data, *w = v->vorticity->data, *r = v->radius->data;
    const double *d = v->density->data, *age = v->age->data, *vel = v->velocity->data;
    double lim_lo[3], lim_hi[3], lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    vp_robust_limits(s, 0, lim_lo, lim_hi);
    size_t nin = 0;
    unsigned char *inside = malloc(n);
    if (!inside) return VP_ERR_NOMEM;
    /* lattice spacing from the vortons' mean volume (all of them: the robust set is not known yet) */
    double vall = 0;
    for (size_t i = 0; i < n; i++) vall += vp_volume(r[i]);
    double hb = cbrt(vall / (double)n), reach = 2.0 * sqrt(3.0) * hb;
    for (size_t i = 0; i < n; i++) {
        int in = 1;
        for (int a = 0; a < 3; a++) in &= x[3 * i + a] >= lim_lo[a] && x[3 * i + a] <= lim_hi[a];
        /* vortons whose kernel support reaches into a body keep their place: a lattice node
         * inside a body would be ejected with fresh boundary vorticity next step */
        for (size_t b = 0; b < s->n_bodies && in; b++) {
            const vp_body *B = &s->bodies[b];
            double dx = x[3 * i] - B->position[0], dy = x[3 * i + 1] - B->position[1], dz = x[3 * i + 2] - B->position[2];
            double lim = B->radius + reach;
            in = dx * dx + dy * dy + dz * dz >= lim * lim;
        }
        inside[i] = (unsigned char)in;
        if (!in) continue;
        nin++;
        for (int a = 0; a < 3; a++) {
            if (x[3 * i + a] < lo[a]) lo[a] = x[3 * i + a];
            if (x[3 * i + a] > hi[a]) hi[a] = x[3 * i + a];
        }
    }
    int st = VP_OK;
    double *acc = NULL, *np_ = NULL, *amag = NULL, *dev = NULL;
    long *rx0 = NULL, *rx1 = NULL; /* per lattice row (y, z): the first and last x node reached */
    size_t *roff = NULL;           /* per row: where its nodes start in acc */
    if (nin < 2) goto done;
    if (s->params.stratification.n) {
        /* With a stratification (physics.md 2.4) the deviation from the ambient at each
         * vorton's height is remeshed, and each node gets the ambient of its own height back:
         * a node of ambient fluid carries nothing and is not kept. */
        dev = malloc(n * sizeof(double));
        if (!dev) { st = VP_ERR_NOMEM; goto done; }
        vp_ambient_deviation(&s->params, n, x, dev);
        for (size_t i = 0; i < n; i++) dev[i] = d[i] - dev[i];
    }
    double h = hb;
    long o[3], m[3];
    double cells = 1;
    for (int a = 0; a < 3; a++) {
        o[a] = (long)floor(lo[a] / h) - 2;
        m[a] = (long)floor(hi[a] / h) + 3 - o[a] + 1;
        cells *= (double)m[a];
    }
    if (cells > (double)s->params.grid_max_points * 4.0) goto done; /* far too spread out: skip */
    /* The lattice is stored by rows (fixed y, z), each only over the x nodes that some kernel
     * reaches: a rising plume or two drops far apart fill a small part of their bounding box,
     * which a dense lattice (9 doubles a node, zeroed and scanned three times) made a 10 ms
     * stall every remesh in hot_ball.  The nodes are visited in the dense order (x fastest),
     * and the untouched ones carry nothing and are never kept, so the new vortons are the
     * same, in the same order, as from the dense lattice. */
    const size_t nrow = (size_t)m[1] * (size_t)m[2];
    long *base = malloc(3 * nin * sizeof(long));
    rx0 = malloc(nrow * sizeof(long));
    rx1 = malloc(nrow * sizeof(long));
    roff = malloc((nrow + 1) * sizeof(size_t));
    if (!base || !rx0 || !rx1 || !roff) { free(base); st = VP_ERR_NOMEM; goto done; }
    for (size_t r0 = 0; r0 < nrow; r0++) { rx0[r0] = LONG_MAX; rx1[r0] = -1; }
    for (size_t i = 0, t = 0; i < n; i++) {
        if (!inside[i]) continue;
        long *b = base + 3 * t++;
        for (int a = 0; a < 3; a++) b[a] = (long)floor(x[3 * i + a] / h) - 1 - o[a]; /* first of 4 nodes */
        for (int kz = 0; kz < 4; kz++)
            for (int ky = 0; ky < 4; ky++) {
                const size_t row = (size_t)(b[1] + ky) + (size_t)m[1] * (size_t)(b[2] + kz);
                if (b[0] < rx0[row]) rx0[row] = b[0];
                if (b[0] + 3 > rx1[row]) rx1[row] = b[0] + 3;
            }
    }
    roff[0] = 0;
    for (size_t r0 = 0; r0 < nrow; r0++) roff[r0 + 1] = roff[r0] + (rx1[r0] >= rx0[r0] ? (size_t)(rx1[r0] - rx0[r0] + 1) : 0);
    const size_t nn = roff[nrow];
    /* per node: strength (3), density mass (1), age mass and weight (2), velocity mass (3) */
    acc = calloc(9 * (nn ? nn : 1), sizeof(double));
    if (!acc) { free(base); st = VP_ERR_NOMEM; goto done; }
    /* per node its strength's magnitude, computed once (three passes took its square root
     * each: a third of the serial remainder) */
    amag = malloc((nn ? nn : 1) * sizeof(double));
    if (!amag) { free(base); st = VP_ERR_NOMEM; goto done; }
    /* The scatter, each thread into a share of the lattice's z planes: deterministic,
     * race-free, and the same bits as one thread (hot_ball remeshes ~1e3 vortons every 10
     * frames; serial, it was a stall of the second thread).  The shares hold about equal
     * numbers of the vortons' kernel planes (a plume fills its box unevenly: even shares of
     * the planes left one thread with most of the work).  Then the magnitudes and their
     * largest value (max is exact: any order gives the same). */
    double amax = 0, dmax = 0;
    {
        const int threads = vp_threads(s);
        (void)threads;
        long zs[9] = {0}; /* the threads' first planes (up to 8 threads share; more take even shares) */
        const int team = threads < 8 ? threads : 8;
        long *zc = team > 1 && nin >= REMESH_PARALLEL_MIN ? calloc((size_t)m[2] + 1, sizeof(long)) : NULL;
        if (zc) { /* the kernel planes per lattice plane, and the split at equal cumulative counts */
            for (size_t t = 0; t < nin; t++) for (int kz = 0; kz < 4; kz++) zc[base[3 * t + 2] + kz]++;
            long tot = 4 * (long)nin, cum = 0;
            int t = 1;
            for (long z = 0; z < m[2] && t < team; z++) {
                cum += zc[z];
                while (t < team && cum * team >= tot * t) zs[t++] = z + 1;
            }
            for (; t <= team; t++) zs[t] = m[2];
            free(zc);
        }
#pragma omp parallel num_threads(threads) if (nin >= REMESH_PARALLEL_MIN)
        {
            int me = 0, nth = 1;
#ifdef _OPENMP
            me = omp_get_thread_num(); nth = omp_get_num_threads();
#endif
            long z0 = m[2] * me / nth, z1 = m[2] * (me + 1) / nth;
            if (nth == team && zs[team] == m[2]) { z0 = zs[me]; z1 = zs[me + 1]; }
            remesh_scatter(n, inside, base, x, w, r, dev ? dev : d, age, vel, h, o, m, roff, rx0, z0, z1, acc);
#pragma omp barrier
#pragma omp for schedule(static) reduction(max : amax, dmax)
            for (long id = 0; id < (long)nn; id++) {
                const double *A = acc + 9 * id;
                const double am = sqrt(A[0] * A[0] + A[1] * A[1] + A[2] * A[2]), ad = fabs(A[3]);
                amag[id] = am;
                amax = am > amax ? am : amax;
                dmax = ad > dmax ? ad : dmax;
            }
        }
    }
    free(base);
    double thr = s->params.remesh_threshold, ta = thr * amax, td = thr * dmax;
    size_t nkeep = 0;
    for (size_t id = 0; id < nn; id++) {
        const double *A = acc + 9 * id;
        const double am = amag[id];
        nkeep += (am > ta && am > 0) || (fabs(A[3]) > td && A[3] != 0);
    }
    size_t nout = n - nin, total = nkeep + nout;
    /* new arrays: position 3, vorticity 3, radius, density, age, velocity 3 -> 12 per vorton */
    np_ = malloc(12 * (total ? total : 1) * sizeof(double));
    if (!np_) { st = VP_ERR_NOMEM; goto done; }
    double *P = np_, *Wn = np_ + 3 * total, *R = np_ + 6 * total, *D = np_ + 7 * total, *G = np_ + 8 * total,
           *U = np_ + 9 * total;
    double V = h * h * h, rad = h * cbrt(3.0 / (4.0 * VP_PI)), rho0 = s->params.ambient_density;
    size_t k = 0;
    for (size_t row = 0; row < nrow; row++) {
        const size_t iy = row % (size_t)m[1], iz = row / (size_t)m[1];
        for (size_t id = roff[row]; id < roff[row + 1]; id++) {
            const double *A = acc + 9 * id;
            const double am = amag[id];
            if (!((am > ta && am > 0) || (fabs(A[3]) > td && A[3] != 0))) continue;
            const long ix = rx0[row] + (long)(id - roff[row]);
            P[3 * k] = (double)(o[0] + ix) * h;
            P[3 * k + 1] = (double)(o[1] + (long)iy) * h;
            P[3 * k + 2] = (double)(o[2] + (long)iz) * h;
            for (int a = 0; a < 3; a++) Wn[3 * k + a] = A[a] / V;
            R[k] = rad;
            double dd = A[3] / V, floor_d = -0.95 * rho0; /* M4' undershoots at sharp fronts */
            if (dev) dd += vp_ambient_density(&s->params, P + 3 * k) - rho0; /* the node's own ambient */
            D[k] = dd > floor_d ? dd : floor_d;
            G[k] = A[5] > 0 ? A[4] / A[5] : 0.0;
            for (int a = 0; a < 3; a++) U[3 * k + a] = A[5] > 0 ? A[6 + a] / A[5] : 0.0; /* advection velocity */
            k++;
        }
    }
    for (size_t i = 0; i < n; i++) { /* escapees unchanged, after the lattice */
        if (inside[i]) continue;
        for (int a = 0; a < 3; a++) { P[3 * k + a] = x[3 * i + a]; Wn[3 * k + a] = w[3 * i + a]; }
        R[k] = r[i]; D[k] = d[i]; G[k] = age[i];
        for (int a = 0; a < 3; a++) U[3 * k + a] = vel[3 * i + a];
        k++;
    }
    /* replace: reserve first (so failure loses nothing), then drop the old rows and fill */
    if ((st = vp_sim_reserve_vortons(s, total))) goto done;
    {
        unsigned char *none = calloc(n, 1);
        if (!none) { st = VP_ERR_NOMEM; goto done; }
        st = vp_sim_compact_vortons(s, none); /* fresh blocks where views hold the old ones */
        free(none);
        if (st) goto done;
    }
    st = vp_sim_add_vortons(s, total, P, Wn, R, D);
    if (!st) {
        memcpy(v->age->data, G, total * sizeof(double));
        memcpy(v->velocity->data, U, 3 * total * sizeof(double));
    }
done:
    free(inside); free(acc); free(np_); free(amag); free(rx0); free(rx1); free(roff); free(dev);
    return st;
}
