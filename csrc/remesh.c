/* remesh.c: redistribution of the vortons onto a regular lattice (vortex particle methods'
 * remeshing, Koumoutsakos 1997; Cottet and Koumoutsakos 2000, ch. 7), not in the seeds.
 *
 * Vortons move with the flow and drift apart or bunch up; stretching then grows the strength
 * of isolated vortons whose neighbours no longer overlap them, and the particle noise feeds
 * on itself until the step blows up (the seeds halved the stretching rate to delay it).
 * Every remesh_interval frames the vortons' strengths a = w V, density mass d V, heat V (T - 1),
 * age and velocity are spread with the M4' kernel (Monaghan 1985) onto a lattice of spacing
 * h = (mean V)^(1/3), one new vorton per lattice node.  M4' reproduces polynomials up to
 * degree 2, so total strength (circulation), linear impulse 1/2 sum x x a and angular impulse
 * 1/3 sum x x (x x a) are unchanged, and so are the lattice's total mass and heat.
 * Population control: nodes weaker in strength, mass and heat than remesh_threshold times the
 * strongest are merged into the others, which take on their moments (restore_moments) and
 * their mass and heat (lattice_densities, which also gives each node one density that keeps
 * both totals: temperature is not linear in density).  The moments are made up within blocks
 * of 8^3 nodes, next to where they were merged (lattice_blocks), and over the whole part only
 * what a block cannot take.  Everything is conserved to rounding;
 * nothing is dropped.  Vortons beyond the robust domain limits (escapees) and those whose
 * kernel support reaches into a body are left as they are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdint.h>
#include "internal.h"
#include "kernel.h"

/* Doubles per lattice node: strength (3), density mass, age mass, weight, velocity mass (3), heat,
 * and the least and largest T - 1 of the vortons that reach it (0 for none: the ambient's). */
#define NQ 12
/* Population control merges the weak nodes only if the kept ones change by at most this
 * fraction of their total strength; else it merges fewer (halving the threshold). */
#define REMESH_MAX_CHANGE 0.25

/* M4' interpolation kernel, support |x| < 2 (Monaghan 1985). */
static inline double m4p(double x)
{
    x = fabs(x);
    if (x < 1.0) return 1.0 - 2.5 * x * x + 1.5 * x * x * x;
    if (x < 2.0) return 0.5 * (2.0 - x) * (2.0 - x) * (1.0 - x);
    return 0.0;
}

/* The M4' scatter of remeshing: each inside vorton's carried quantities (strength, density
 * mass, heat; age, weight and velocity for their |W|-weighted means) onto its 4^3 nodes of the
 * row-stored lattice (base: its first node per axis, relative to the lattice origin o; roff,
 * rx0: where each row's nodes start and its first x node), the part that falls in lattice
 * planes z0 <= z < z1.  In vorton order, so every node's sums are taken in the same order
 * whichever slab owns its plane: the result is the serial one, for any thread count.  (Not
 * cloned for AVX2/AVX-512: the clones contract the sums into FMAs, other bits than serial.) */
static void remesh_scatter(size_t n, const unsigned char *inside, const long *base, const double *x, const double *w,
                           const double *r, const double *d, const double *age, const double *vel, double h,
                           double rho0, const long o[3], const long m[3], const size_t *roff, const long *rx0, long z0,
                           long z1, double *acc)
{
    for (size_t i = 0, t = 0; i < n; i++) {
        if (!inside[i]) continue;
        const long *b = base + 3 * t++;
        if (b[2] + 3 < z0 || b[2] >= z1) continue;
        const int kz0 = b[2] < z0 ? (int)(z0 - b[2]) : 0, kz1 = b[2] + 4 > z1 ? (int)(z1 - b[2]) : 4;
        const double V = vp_volume(r[i]);
        const double te = vp_excess_temperature(rho0, d[i]);
        const double q[5] = {w[3 * i] * V, w[3 * i + 1] * V, w[3 * i + 2] * V, d[i] * V, V * te};
        double wt[3][4];
        for (int a = 0; a < 3; a++) {
            const double u = x[3 * i + a] / h;
            for (int k = 0; k < 4; k++) wt[a][k] = m4p(u - (double)(b[a] + o[a] + k));
        }
        for (int kz = kz0; kz < kz1; kz++)
            for (int ky = 0; ky < 4; ky++) {
                const size_t row = (size_t)(b[1] + ky) + (size_t)m[1] * (size_t)(b[2] + kz);
                double *Arow = acc + NQ * (roff[row] + (size_t)(b[0] - rx0[row]));
                for (int kx = 0; kx < 4; kx++) {
                    double W = wt[0][kx] * wt[1][ky] * wt[2][kz];
                    double *A = Arow + NQ * kx;
                    A[0] += W * q[0]; A[1] += W * q[1]; A[2] += W * q[2]; A[3] += W * q[3];
                    const double Wa = fabs(W); /* averages: never beyond the vortons' values */
                    A[4] += Wa * age[i]; A[5] += Wa;
                    A[6] += Wa * vel[3 * i]; A[7] += Wa * vel[3 * i + 1]; A[8] += Wa * vel[3 * i + 2];
                    A[9] += W * q[4];
                    A[10] = te < A[10] ? te : A[10];
                    A[11] = te > A[11] ? te : A[11];
                }
            }
    }
}

/* The moments that strength a at y (a position relative to its part's centre, in units of its
 * half-size) adds to mom: sum a, sum y_i a_j and sum y x (y x a).  With them the circulation,
 * the linear impulse (the antisymmetric part of sum y_i a_j) and the angular impulse are the
 * same about every origin (about another, the angular impulse also takes the symmetric part). */
#define NMOM 15
static inline void add_moments(const double y[3], const double a[3], double mom[NMOM])
{
    double ya[3], yya[3];
    vp_cross3(y, a, ya);
    vp_cross3(y, ya, yya);
    for (int k = 0; k < 3; k++) {
        mom[k] += a[k];
        for (int j = 0; j < 3; j++) mom[3 + 3 * k + j] += y[k] * a[j];
        mom[12 + k] += yya[k];
    }
}

/* add_moments of the unit strengths along x, y, z at y: the columns of the map a -> moments. */
static inline void moment_columns(const double y[3], double col[3][NMOM])
{
    for (int j = 0; j < 3; j++) {
        const double e[3] = {j == 0, j == 1, j == 2};
        for (int p = 0; p < NMOM; p++) col[j][p] = 0;
        add_moments(y, e, col[j]);
    }
}

/* Population control, the vectors: kept nodes idx[0..nk) (their strengths a, at pos) take on the
 * moments `lost` of the merged ones by the least change sum |da_k|^2 / |a_k| (the weak nodes
 * change least) that meets the NMOM linear constraints: da_k = |a_k| C_k^T mu, C_k the columns
 * of add_moments at the node and mu from the normal equations, solved twice (the second takes
 * up the first's rounding).  Returns 1, changing nothing, if the equations are singular (too few
 * kept nodes, or on a line or plane) or the change would be large (beyond REMESH_MAX_CHANGE of
 * the kept strength). */
static int restore_moments(size_t nk, const size_t *idx, const double *pos, double *a, const double c[3], double L,
                           const double lost[NMOM])
{
    enum { M = NMOM };
    double G[M * M] = {0}, Lc[M * M], r[M], mu[M], sa = 0, sd = 0, col[3][M];
    for (size_t q = 0; q < nk; q++) {
        const size_t k = idx[q];
        const double *ak = a + 3 * k, wk = sqrt(ak[0] * ak[0] + ak[1] * ak[1] + ak[2] * ak[2]);
        if (wk == 0) continue;
        sa += wk;
        const double y[3] = {(pos[3 * k] - c[0]) / L, (pos[3 * k + 1] - c[1]) / L, (pos[3 * k + 2] - c[2]) / L};
        moment_columns(y, col);
        for (int p = 0; p < M; p++)
            for (int t = 0; t <= p; t++) G[M * p + t] += wk * (col[0][p] * col[0][t] + col[1][p] * col[1][t] + col[2][p] * col[2][t]);
    }
    /* Cholesky factor Lc Lc^T = G (lower triangles) */
    double gmax = 0;
    for (int p = 0; p < M; p++) gmax = G[(M + 1) * p] > gmax ? G[(M + 1) * p] : gmax;
    for (int p = 0; p < M; p++)
        for (int t = 0; t <= p; t++) {
            double v = G[M * p + t];
            for (int j = 0; j < t; j++) v -= Lc[M * p + j] * Lc[M * t + j];
            if (p == t) {
                if (!(v > 1e-12 * gmax)) return 1;
                Lc[M * p + p] = sqrt(v);
            } else {
                Lc[M * p + t] = v / Lc[M * t + t];
            }
        }
    memcpy(r, lost, sizeof r);
    double *a0 = malloc(3 * (nk ? nk : 1) * sizeof(double)); /* the strengths before */
    if (!a0) return 1;
    for (size_t q = 0; q < nk; q++) memcpy(a0 + 3 * q, a + 3 * idx[q], 3 * sizeof(double));
    for (int pass = 0; pass < 2; pass++) {
        for (int p = 0; p < M; p++) { /* forward, then back substitution */
            double v = r[p];
            for (int j = 0; j < p; j++) v -= Lc[M * p + j] * mu[j];
            mu[p] = v / Lc[M * p + p];
        }
        for (int p = M - 1; p >= 0; p--) {
            double v = mu[p];
            for (int j = p + 1; j < M; j++) v -= Lc[M * j + p] * mu[j];
            mu[p] = v / Lc[M * p + p];
        }
        double got[M] = {0};
        for (size_t q = 0; q < nk; q++) {
            const size_t k = idx[q];
            double *ak = a + 3 * k;
            const double *b = a0 + 3 * q, wk = sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2]);
            if (wk == 0) continue;
            const double y[3] = {(pos[3 * k] - c[0]) / L, (pos[3 * k + 1] - c[1]) / L, (pos[3 * k + 2] - c[2]) / L};
            moment_columns(y, col);
            double da[3];
            for (int j = 0; j < 3; j++) {
                double v = 0;
                for (int p = 0; p < M; p++) v += col[j][p] * mu[p];
                const double before = ak[j];
                ak[j] += wk * v;
                da[j] = ak[j] - before; /* the change as stored */
            }
            add_moments(y, da, got);
        }
        for (int p = 0; p < M; p++) r[p] -= got[p];
    }
    for (size_t q = 0; q < nk; q++)
        for (int j = 0; j < 3; j++) sd += fabs(a[3 * idx[q] + j] - a0[3 * q + j]);
    if (sd > REMESH_MAX_CHANGE * sa) {
        for (size_t q = 0; q < nk; q++) memcpy(a + 3 * idx[q], a0 + 3 * q, 3 * sizeof(double));
        free(a0);
        return 1;
    }
    free(a0);
    return 0;
}

/* The density range [lo, hi] a lattice_densities family keeps to, its nodes' c_k (NAN for the
 * ambient nodes, which stay so) and the nodes' volume. */
typedef struct {
    size_t nk;
    const size_t *idx; /* the nodes: c[idx[0..nk)] */
    const double *c;
    double V, rho0, lo, hi;
} dens_family;

static inline double clamp(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* The family's mass V sum d_k less M at d_k = clamp(mu + lam c_k), with the number of nodes
 * inside the range (*nfree) and the scale of the sum's rounding (*scale). */
static double mass_at(const dens_family *f, double mu, double lam, double M, size_t *nfree, double *scale)
{
    double m = -M, sc = fabs(M);
    size_t nf = 0;
    for (size_t q = 0; q < f->nk; q++) {
        const size_t k = f->idx[q];
        if (isnan(f->c[k])) continue;
        double v = mu + lam * f->c[k];
        if (v <= f->lo) v = f->lo;
        else if (v >= f->hi) v = f->hi;
        else nf++;
        m += f->V * v;
        sc += f->V * fabs(v);
    }
    *nfree = nf;
    *scale = sc;
    return m;
}

/* The mu that gives the family the mass M at lam: the mass grows with mu, piecewise linearly,
 * from all nodes at lo to all at hi (Newton kept in that bracket, starting from mu). */
static double solve_mu(const dens_family *f, double lam, double M, double mu, double cmin, double cmax)
{
    double a = f->lo - lam * cmax, b = f->hi - lam * cmin;
    if (!(mu > a && mu < b)) mu = 0.5 * (a + b);
    for (int it = 0; it < 200; it++) {
        size_t nf;
        double sc, g = mass_at(f, mu, lam, M, &nf, &sc);
        if (fabs(g) <= 1e-15 * sc) break;
        if (g > 0) b = mu;
        else a = mu;
        double next = nf ? mu - g / (f->V * (double)nf) : 0.5 * (a + b);
        if (!(next > a && next < b)) next = 0.5 * (a + b);
        if (next == mu) break;
        mu = next;
    }
    return mu;
}

/* The family's heat sum V (T_k - 1) less E at lam (mu solved for the mass M, in and out), its
 * derivative along lam (*dh) and the scale of its rounding (*scale). */
static double heat_at(const dens_family *f, double lam, double M, double E, double *mu, double cmin, double cmax,
                      double *dh, double *scale)
{
    *mu = solve_mu(f, lam, M, *mu, cmin, cmax);
    double h = -E, sc = fabs(E), cf = 0, w = 0, wc = 0;
    size_t nf = 0;
    for (size_t q = 0; q < f->nk; q++) {
        const size_t k = f->idx[q];
        if (isnan(f->c[k])) continue;
        const double raw = *mu + lam * f->c[k], d = clamp(raw, f->lo, f->hi), e = f->V * vp_excess_temperature(f->rho0, d);
        h += e;
        sc += fabs(e);
        if (raw > f->lo && raw < f->hi) { /* d(T - 1)/dd = -rho0 / (rho0 + d)^2 */
            const double r = f->rho0 + d, t = -f->V * f->rho0 / (r * r);
            nf++; cf += f->c[k]; w += t; wc += t * f->c[k];
        }
    }
    /* along lam the free nodes move by c_k + mu', mu' = -mean of their c_k (the mass held) */
    *dh = nf ? wc - w * cf / (double)nf : 0.0;
    *scale = sc;
    return h;
}

/* The lattice's densities from kept nodes idx[0..nk)'s density mass (dens, in: m_k; out: the density
 * deviation d_k) and heat (heat: e_k, per unit heat capacity; clobbered), each node of volume
 * V, such that the totals are the vortons' mass sum d V = M and heat sum V (T - 1) = E exactly,
 * and every density within the vortons' range (their temperatures' [Tlo, Thi]: no new extremes).
 * One density a node cannot carry both its mass and its heat (T = rho0 / (rho0 + d) is convex:
 * spreading mass evenly loses heat), so: each node holding either is given the density of its
 * heat, t_k, and then d_k = clamp(mu + lam (t_k - mean t)) with mu giving the mass M at every
 * lam; the heat grows with lam from its least (the even density, lam = 0) towards the most
 * the nodes can hold within the range (nodes at its ends), and lam (Newton in a bracket) makes
 * it E.  lam is near 1 where the heat's densities already hold the mass; a smeared front
 * (M4' spreads a parcel over its neighbours' nodes) takes lam > 1, which sharpens it back.
 * Returns 1 (the arrays then hold neither) if the nodes cannot hold M and E within the range
 * (too few of them: their volume less than the vortons'). */
int vp_lattice_densities(size_t nk, const size_t *idx, double *dens, double *heat, double V, double rho0, double M,
                         double E, double Tlo, double Thi)
{
    size_t nq = 0;
    double tsum = 0;
    const double lo = vp_density_from_temperature(rho0, Thi), hi = vp_density_from_temperature(rho0, Tlo);
    for (size_t q = 0; q < nk; q++) {
        const size_t k = idx[q];
        if (dens[k] == 0 && heat[k] == 0) { heat[k] = NAN; continue; } /* ambient: stays so */
        heat[k] = vp_density_from_temperature(rho0, clamp(1 + heat[k] / V, Tlo, Thi));
        tsum += heat[k];
        nq++;
    }
    if (!nq) return !(M == 0 && E == 0);
    const double mu0 = M / ((double)nq * V), tbar = tsum / (double)nq;
    if (!(mu0 >= lo && mu0 <= hi)) return 1; /* the mass does not fit the range */
    double cmin = INFINITY, cmax = -INFINITY;
    for (size_t q = 0; q < nk; q++) {
        const size_t k = idx[q];
        if (isnan(heat[k])) continue;
        heat[k] -= tbar; /* c_k */
        cmin = heat[k] < cmin ? heat[k] : cmin;
        cmax = heat[k] > cmax ? heat[k] : cmax;
    }
    const dens_family f = {nk, idx, heat, V, rho0, lo, hi};
    double mu = mu0, lam = 0, dh, sc;
    double h = heat_at(&f, 0.0, M, E, &mu, cmin, cmax, &dh, &sc);
    if (h > 1e-12 * sc) return 1; /* E below the least heat the nodes hold */
    if (h < -1e-13 * sc) {
        double a = 0, b = INFINITY;
        lam = 1;
        for (int it = 0; it < 200; it++) {
            h = heat_at(&f, lam, M, E, &mu, cmin, cmax, &dh, &sc);
            if (fabs(h) <= 1e-13 * sc) break;
            if (h > 0) b = lam;
            else a = lam;
            double next = dh > 0 ? lam - h / dh : (isfinite(b) ? 0.5 * (a + b) : 2 * lam);
            if (!(next > a && next < b)) next = isfinite(b) ? 0.5 * (a + b) : 2 * lam;
            if (next == lam || lam > 1e15) break;
            lam = next;
        }
        if (!(fabs(h) <= 1e-10 * sc)) return 1; /* E above the most the nodes hold */
    }
    /* the densities, and the mass's rounding taken up by the nodes inside the range */
    double Mk = 0;
    size_t nf = 0;
    for (size_t q = 0; q < nk; q++) {
        const size_t k = idx[q];
        if (isnan(heat[k])) { dens[k] = 0.0; continue; }
        const double raw = mu + lam * heat[k];
        dens[k] = clamp(raw, lo, hi);
        nf += raw > lo && raw < hi;
        Mk += dens[k] * V;
    }
    if (nf) {
        const double shift = (M - Mk) / ((double)nf * V);
        for (size_t q = 0; q < nk; q++) {
            const size_t k = idx[q];
            if (isnan(heat[k])) continue;
            const double raw = mu + lam * heat[k];
            if (raw > lo && raw < hi) dens[k] += shift;
        }
    }
    return 0;
}

/* The root of node i in the union-find forest p (path halving). */
static size_t uf_root(size_t *p, size_t i)
{
    while (p[i] != i) { p[i] = p[p[i]]; i = p[i]; }
    return i;
}

static void uf_unite(size_t *p, size_t a, size_t b)
{
    a = uf_root(p, a);
    b = uf_root(p, b);
    if (a < b) p[b] = a;
    else if (b < a) p[a] = b;
}

/* The lattice's connected parts (nodes reached by overlapping kernels, joined through their
 * faces): comp[id] gets its part's number, 0, 1, ... in lattice order; returns their count.
 * Population control and the densities conserve within each part, so clusters far apart are
 * remeshed as if each were alone. */
static size_t lattice_components(size_t nn, size_t nrow, const long m[3], const size_t *roff, const long *rx0,
                                 const long *rx1, size_t *comp)
{
    for (size_t id = 0; id < nn; id++) comp[id] = id;
    for (size_t row = 0; row < nrow; row++) {
        const size_t iy = row % (size_t)m[1], iz = row / (size_t)m[1];
        for (size_t id = roff[row]; id < roff[row + 1]; id++) {
            const long ix = rx0[row] + (long)(id - roff[row]);
            if (id + 1 < roff[row + 1]) uf_unite(comp, id, id + 1);
            const size_t up[2] = {iy + 1 < (size_t)m[1] ? row + 1 : SIZE_MAX,
                                  iz + 1 < (size_t)m[2] ? row + (size_t)m[1] : SIZE_MAX};
            for (int u = 0; u < 2; u++)
                if (up[u] != SIZE_MAX && ix >= rx0[up[u]] && ix <= rx1[up[u]])
                    uf_unite(comp, id, roff[up[u]] + (size_t)(ix - rx0[up[u]]));
        }
    }
    for (size_t id = 0; id < nn; id++) comp[id] = uf_root(comp, id); /* a part's root: its first node */
    size_t nc = 0;
    for (size_t id = 0; id < nn; id++) comp[id] = comp[id] == id ? nc++ : comp[comp[id]]; /* (the root's number) */
    return nc;
}

/* The parts cut into blocks of REMESH_BLOCK^3 nodes, for population control to restore the
 * merged nodes' moments next to them (vp_sim_remesh).  blk[id], its part's number on entry,
 * becomes the number of its (part, block), in lattice order (the order of first appearance,
 * whatever the hash); returns their count, or nc, unchanged, if out of memory.  The pairs
 * are looked up in an open-addressing table of twice the nodes: a dense (part x block) table
 * grows with the product, and many isolated vortons make many parts. */
#define REMESH_BLOCK 8
static size_t lattice_blocks(size_t nn, size_t nrow, const long m[3], const size_t *roff, const long *rx0,
                             size_t *blk, size_t nc)
{
    const uint64_t mb[3] = {(uint64_t)(m[0] + REMESH_BLOCK - 1) / REMESH_BLOCK,
                            (uint64_t)(m[1] + REMESH_BLOCK - 1) / REMESH_BLOCK,
                            (uint64_t)(m[2] + REMESH_BLOCK - 1) / REMESH_BLOCK};
    const uint64_t nb = mb[0] * mb[1] * mb[2];
    size_t cap = 16;
    while (cap < 2 * nn) cap *= 2;
    uint64_t *key = malloc(cap * sizeof(uint64_t));
    size_t *val = malloc(cap * sizeof(size_t));
    if (!key || !val) { free(key); free(val); return nc; }
    for (size_t k = 0; k < cap; k++) key[k] = UINT64_MAX;
    size_t count = 0;
    for (size_t row = 0; row < nrow; row++) {
        const uint64_t by = row % (size_t)m[1] / REMESH_BLOCK, bz = row / (size_t)m[1] / REMESH_BLOCK;
        for (size_t id = roff[row]; id < roff[row + 1]; id++) {
            const uint64_t bx = (uint64_t)(rx0[row] + (long)(id - roff[row])) / REMESH_BLOCK;
            const uint64_t k = (uint64_t)blk[id] * nb + bx + mb[0] * (by + mb[1] * bz);
            size_t h = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
            while (key[h] != UINT64_MAX && key[h] != k) h = (h + 1) & (cap - 1);
            if (key[h] == UINT64_MAX) { key[h] = k; val[h] = count++; }
            blk[id] = val[h];
        }
    }
    free(key); free(val);
    return count;
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
    const double rho0 = s->params.ambient_density;
    double lim_lo[3], lim_hi[3], lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    vp_robust_limits(s, lim_lo, lim_hi);
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
    size_t *comp = NULL, *cstart = NULL; /* per node its part's number; the parts' starts in the kept order */
    double *cdat = NULL;           /* per part: lattice_components' totals, box, and merged moments */
    size_t *blk = NULL, *bstart = NULL; /* per node its block's number (lattice_blocks); the blocks' starts */
    double *bdat = NULL;           /* per block: its box and merged moments */
    if (nin < 2) goto done;
    if (s->params.stratification.n) {
        /* With a stratification (method step 4) the deviation from the ambient at each
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
     * which a dense lattice (9 doubles a node, zeroed and scanned three times) made a long
     * stall every remesh.  The nodes are visited in the dense order (x fastest),
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
    acc = calloc(NQ * (nn ? nn : 1), sizeof(double));
    if (!acc) { free(base); st = VP_ERR_NOMEM; goto done; }
    /* per node its strength's magnitude, computed once (three passes took its square root
     * each: a third of the serial remainder) */
    amag = malloc((nn ? nn : 1) * sizeof(double));
    if (!amag) { free(base); st = VP_ERR_NOMEM; goto done; }
    /* The scatter by slabs of the lattice's z planes, each slab a task: deterministic,
     * race-free, and the same bits as one thread.  The slabs hold about equal numbers of the
     * vortons' kernel planes (a plume fills its box unevenly).  Then the magnitudes and their
     * largest value (max is exact: any order gives the same). */
    double amax = 0, dmax = 0, emax = 0;
    {
        const int threads = vp_threads(s), par = threads > 1 && nin >= REMESH_PARALLEL_MIN;
        const long nslab = par ? (m[2] < 4L * threads ? m[2] : 4L * threads) : 1;
        long *zs = malloc(((size_t)nslab + 1) * sizeof(long)); /* slab t: planes zs[t] .. zs[t + 1] - 1 */
        long *zc = par ? calloc((size_t)m[2] + 1, sizeof(long)) : NULL;
        if (!zs || (par && !zc)) { free(zs); free(zc); free(base); st = VP_ERR_NOMEM; goto done; }
        zs[0] = 0;
        zs[nslab] = m[2];
        if (par) { /* the kernel planes per lattice plane, and the split at equal cumulative counts */
            for (size_t t = 0; t < nin; t++) for (int kz = 0; kz < 4; kz++) zc[base[3 * t + 2] + kz]++;
            long tot = 4 * (long)nin, cum = 0, t = 1;
            for (long z = 0; z < m[2] && t < nslab; z++) {
                cum += zc[z];
                while (t < nslab && cum * nslab >= tot * t) zs[t++] = z + 1;
            }
            for (; t < nslab; t++) zs[t] = m[2];
            free(zc);
        }
#pragma omp parallel num_threads(threads) if (par)
        {
#pragma omp for schedule(dynamic, 1)
            for (long t = 0; t < nslab; t++)
                remesh_scatter(n, inside, base, x, w, r, dev ? dev : d, age, vel, h, rho0, o, m, roff, rx0, zs[t], zs[t + 1], acc);
#pragma omp for schedule(dynamic, 256) reduction(max : amax, dmax, emax)
            for (long id = 0; id < (long)nn; id++) {
                const double *A = acc + NQ * id;
                const double am = sqrt(A[0] * A[0] + A[1] * A[1] + A[2] * A[2]), ad = fabs(A[3]), ae = fabs(A[9]);
                amag[id] = am;
                amax = am > amax ? am : amax;
                dmax = ad > dmax ? ad : dmax;
                emax = ae > emax ? ae : emax;
            }
        }
        free(zs);
    }
    free(base);
    const double V = h * h * h, rad = h * cbrt(3.0 / (4.0 * VP_PI));
    /* the lattice's parts, and per part: its mass and heat (the vortons' that reach it: M4' is a
     * partition of unity), its range of T - 1, and its box (the centre and half-size that the
     * moments are taken about, for their conditioning) */
    comp = malloc((nn ? nn : 1) * sizeof(size_t));
    if (!comp) { st = VP_ERR_NOMEM; goto done; }
    const size_t nc = lattice_components(nn, nrow, m, roff, rx0, rx1, comp);
    enum { CM, CE, CTLO, CTHI, CLO, CHI = CLO + 3, CN = CHI + 3 }; /* per part: mass, heat, T - 1 range, box */
    cdat = malloc((nc ? nc : 1) * (CN + NMOM) * sizeof(double));
    cstart = malloc((nc + 2) * sizeof(size_t));
    if (!cdat || !cstart) { st = VP_ERR_NOMEM; goto done; }
    double *lost = cdat + nc * CN; /* per part: the merged nodes' moments (add_moments) */
    for (size_t q = 0; q < nc; q++) {
        double *C = cdat + CN * q;
        C[CM] = C[CE] = C[CTLO] = C[CTHI] = 0;
        for (int a = 0; a < 3; a++) { C[CLO + a] = INFINITY; C[CHI + a] = -INFINITY; }
    }
    for (size_t row = 0; row < nrow; row++) {
        const double yz[2] = {(double)(o[1] + (long)(row % (size_t)m[1])), (double)(o[2] + (long)(row / (size_t)m[1]))};
        for (size_t id = roff[row]; id < roff[row + 1]; id++) {
            const double *A = acc + NQ * id, p[3] = {(double)(o[0] + rx0[row] + (long)(id - roff[row])), yz[0], yz[1]};
            double *C = cdat + CN * comp[id];
            C[CM] += A[3];
            C[CE] += A[9];
            C[CTLO] = A[10] < C[CTLO] ? A[10] : C[CTLO];
            C[CTHI] = A[11] > C[CTHI] ? A[11] : C[CTHI];
            for (int a = 0; a < 3; a++) {
                C[CLO + a] = p[a] < C[CLO + a] ? p[a] : C[CLO + a];
                C[CHI + a] = p[a] > C[CHI + a] ? p[a] : C[CHI + a];
            }
        }
    }
    /* The parts' blocks (lattice_blocks), per block its part and box.  Population control
     * restores a block's merged moments in the block, and only what a block cannot take (too
     * few kept nodes, or too large a change) over its whole part.  Restored over a whole part,
     * the least change is a smooth polynomial in position times |a|, largest at the part's far
     * ends: once PSE's drift moved the set's edge off the lattice between remeshes, a strong
     * cluster there took up to a tenth more strength at every remesh.  Without the drift (a
     * stratified ambient, or no viscosity) each part is one block, as it was validated. */
    blk = malloc((nn ? nn : 1) * sizeof(size_t));
    if (!blk) { st = VP_ERR_NOMEM; goto done; }
    memcpy(blk, comp, nn * sizeof(size_t));
    const size_t nbk = vp_pse_drifts(s) ? lattice_blocks(nn, nrow, m, roff, rx0, blk, nc) : nc;
    enum { BPAR, BLO, BHI = BLO + 3, BN = BHI + 3 }; /* per block: its part, box; then 2 NMOM moments */
    bdat = malloc((nbk ? nbk : 1) * (BN + 2 * NMOM) * sizeof(double));
    bstart = malloc((nbk + 2) * sizeof(size_t));
    if (!bdat || !bstart) { st = VP_ERR_NOMEM; goto done; }
    double *blost = bdat + nbk * BN; /* per block: the merged moments about its box, then about its part's */
    for (size_t b = 0; b < nbk; b++)
        for (int a = 0; a < 3; a++) { bdat[BN * b + BLO + a] = INFINITY; bdat[BN * b + BHI + a] = -INFINITY; }
    for (size_t row = 0; row < nrow; row++) {
        const double yz[2] = {(double)(o[1] + (long)(row % (size_t)m[1])), (double)(o[2] + (long)(row / (size_t)m[1]))};
        for (size_t id = roff[row]; id < roff[row + 1]; id++) {
            const double p[3] = {(double)(o[0] + rx0[row] + (long)(id - roff[row])), yz[0], yz[1]};
            double *B = bdat + BN * blk[id];
            B[BPAR] = (double)comp[id];
            for (int a = 0; a < 3; a++) {
                B[BLO + a] = p[a] < B[BLO + a] ? p[a] : B[BLO + a];
                B[BHI + a] = p[a] > B[BHI + a] ? p[a] : B[BHI + a];
            }
        }
    }
    /* the boxes in lattice units -> their centres (CLO, BLO) and half-sizes (CHI, BHI) */
    for (size_t q = 0; q < nc + nbk; q++) {
        double *lo = q < nc ? cdat + CN * q + CLO : bdat + BN * (q - nc) + BLO, *hi = lo + 3, half = 1;
        for (int a = 0; a < 3; a++) {
            half = 0.5 * (hi[a] - lo[a]) > half ? 0.5 * (hi[a] - lo[a]) : half;
            lo[a] = 0.5 * (hi[a] + lo[a]) * h;
        }
        hi[0] = half * h;
    }
    size_t total = 0;
    int placed = 0;
    /* Population control, then the lattice's densities, part by part; if either cannot conserve
     * with the weak nodes merged, again with less merged, at last with every node kept; if not
     * even then, the vortons stay as they are. */
    static const double thr_scale[] = {1.0, 0.5, 0.25, 0.1, 0.0};
    for (int attempt = 0; attempt < 5 && !placed; attempt++) {
        const double thr = s->params.remesh_threshold * thr_scale[attempt];
        const double ta = thr * amax, tm = thr * dmax, te = thr * emax;
#define KEEP(A, am) (((am) > ta && (am) > 0) || (fabs((A)[3]) > tm && (A)[3] != 0) || (fabs((A)[9]) > te && (A)[9] != 0))
        size_t nkeep = 0;
        memset(cstart, 0, (nc + 2) * sizeof(size_t));
        memset(lost, 0, NMOM * nc * sizeof(double));
        memset(bstart, 0, (nbk + 2) * sizeof(size_t));
        memset(blost, 0, 2 * NMOM * nbk * sizeof(double));
        for (size_t id = 0; id < nn; id++)
            if (KEEP(acc + NQ * id, amag[id])) { nkeep++; cstart[comp[id] + 2]++; bstart[blk[id] + 2]++; }
        const size_t nout = n - nin;
        total = nkeep + nout;
        /* new arrays: position 3, vorticity 3, radius, density, age, velocity 3 -> 12 per vorton;
         * the kept nodes' heats, and their numbers grouped by part */
        free(np_);
        np_ = malloc((12 * (total ? total : 1) + 3 * nkeep) * sizeof(double));
        if (!np_) { st = VP_ERR_NOMEM; goto done; }
        double *P = np_, *Wn = np_ + 3 * total, *R = np_ + 6 * total, *D = np_ + 7 * total, *G = np_ + 8 * total,
               *U = np_ + 9 * total, *Hk = np_ + 12 * total;
        size_t *order = (size_t *)(Hk + nkeep), *border = order + nkeep; /* (a size_t fits a double's room) */
        for (size_t q = 0; q < nc; q++) cstart[q + 2] += cstart[q + 1]; /* part q's first: cstart[q + 1] */
        for (size_t b = 0; b < nbk; b++) bstart[b + 2] += bstart[b + 1];
        size_t k = 0;
        for (size_t row = 0; row < nrow; row++) {
            const size_t iy = row % (size_t)m[1], iz = row / (size_t)m[1];
            for (size_t id = roff[row]; id < roff[row + 1]; id++) {
                const double *A = acc + NQ * id;
                const long ix = rx0[row] + (long)(id - roff[row]);
                const double p[3] = {(double)(o[0] + ix) * h, (double)(o[1] + (long)iy) * h,
                                     (double)(o[2] + (long)iz) * h};
                const double *C = cdat + CN * comp[id], *B = bdat + BN * blk[id];
                if (!KEEP(A, amag[id])) {
                    const double y[3] = {(p[0] - C[CLO]) / C[CHI], (p[1] - C[CLO + 1]) / C[CHI],
                                         (p[2] - C[CLO + 2]) / C[CHI]};
                    const double yb[3] = {(p[0] - B[BLO]) / B[BHI], (p[1] - B[BLO + 1]) / B[BHI],
                                          (p[2] - B[BLO + 2]) / B[BHI]};
                    add_moments(yb, A, blost + 2 * NMOM * blk[id]);
                    add_moments(y, A, blost + 2 * NMOM * blk[id] + NMOM);
                    continue;
                }
                order[cstart[comp[id] + 1]++] = k;
                border[bstart[blk[id] + 1]++] = k;
                for (int a = 0; a < 3; a++) { P[3 * k + a] = p[a]; Wn[3 * k + a] = A[a]; } /* strengths, for now */
                R[k] = rad;
                D[k] = A[3]; /* the node's mass and heat, for now */
                Hk[k] = A[9];
                G[k] = A[5] > 0 ? A[4] / A[5] : 0.0;
                for (int a = 0; a < 3; a++) U[3 * k + a] = A[5] > 0 ? A[6 + a] / A[5] : 0.0; /* advection velocity */
                k++;
            }
        }
#undef KEEP
        for (size_t b = 0; b < nbk; b++) { /* in the blocks; what a block cannot take, over its part */
            const double *B = bdat + BN * b, *lb = blost + 2 * NMOM * b;
            int any = 0;
            for (int j = 0; j < NMOM; j++) any |= lb[j] != 0;
            if (any && restore_moments(bstart[b + 1] - bstart[b], border + bstart[b], P, Wn, B + BLO, B[BHI], lb))
                for (int j = 0; j < NMOM; j++) lost[NMOM * (size_t)B[BPAR] + j] += lb[NMOM + j];
        }
        int ok = 1; /* part q's kept nodes: order[cstart[q] .. cstart[q + 1]) */
        for (size_t q = 0; q < nc && ok; q++) {
            const double *C = cdat + CN * q, *lq = lost + NMOM * q;
            const size_t *idx = order + cstart[q], nq = cstart[q + 1] - cstart[q];
            int any = 0;
            for (int j = 0; j < NMOM; j++) any |= lq[j] != 0;
            if (any && restore_moments(nq, idx, P, Wn, C + CLO, C[CHI], lq)) ok = 0;
            else if (vp_lattice_densities(nq, idx, D, Hk, V, rho0, C[CM], C[CE], 1 + C[CTLO], 1 + C[CTHI])) ok = 0;
        }
        if (!ok) continue;
        if (dev) /* each node gets the ambient of its own height back */
            for (size_t q = 0; q < nkeep; q++) D[q] += vp_ambient_density(&s->params, P + 3 * q) - rho0;
        for (size_t q = 0; q < 3 * nkeep; q++) Wn[q] /= V;
        for (size_t i = 0; i < n; i++) { /* escapees unchanged, after the lattice */
            if (inside[i]) continue;
            for (int a = 0; a < 3; a++) { P[3 * k + a] = x[3 * i + a]; Wn[3 * k + a] = w[3 * i + a]; }
            R[k] = r[i]; D[k] = d[i]; G[k] = age[i];
            for (int a = 0; a < 3; a++) U[3 * k + a] = vel[3 * i + a];
            k++;
        }
        placed = 1;
    }
    if (!placed) goto done;
    double *P = np_, *Wn = np_ + 3 * total, *R = np_ + 6 * total, *D = np_ + 7 * total, *G = np_ + 8 * total,
           *U = np_ + 9 * total;
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
    free(inside); free(acc); free(np_); free(amag); free(rx0); free(rx1); free(roff);
    free(comp); free(cstart); free(cdat); free(dev); free(blk); free(bstart); free(bdat);
    return st;
}
