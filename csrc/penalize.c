/* penalize.c: the physical fluid-body coupling (method step 7, the default rule).
 *
 * No-slip and no-through hold on the whole surface of every sphere at every step, whether or
 * not vortons are there, by Brinkman penalization (Coquerelle and Cottet, J. Comput. Phys.
 * 227, 2008) on a lattice attached to the body: the fluid inside the body is made to move
 * with it, u -> u_s = U + W x r, and the vorticity of that correction, curl(chi (u_s - u)),
 * becomes vortons on the lattice.  The body is a region of the one flow: its momentum
 * changes by minus the momentum the fluid gains, so fluid and bodies balance to rounding,
 * and the potential-flow added mass is taken implicitly (stable for any density ratio).
 *
 * Per body and step:
 *  1. the vortons near the body are remeshed onto its lattice (spacing h = R / resolution,
 *     the M4' kernel: strength, density mass, excess heat and age are conserved);
 *  2. the velocity at the forcing nodes (chi > 0) is evaluated from all vortons;
 *  3. with the body held at its velocity, the correction is applied in a few passes, each
 *     adding curl(chi (u_s - u)) h^3 to the lattice's strengths and updating u at the forcing
 *     nodes by the induced velocity of what it added: the fluid gains impulse dI, the body
 *     feels F dt = -rho0 dI;
 *  4. the body's velocity changes by Newton's law with the added mass implicit:
 *     (M + rho0 (k - V)) dU = F dt + external impulses, where k dU is the impulse of the flow
 *     that a velocity change dU sets up around the sphere (k ~ 3/2 V: the interior and the
 *     potential dipole; measured on the lattice once), and likewise for the rotation; that
 *     change is then added to the fluid, so the total momentum M U + rho0 (I - V U) is kept.
 *
 * The forcing weight chi is a ramp of width h/2 whose place is calibrated per lattice so that
 * the flow set up by a moving sphere carries the potential-flow impulse 3/2 rho0 V U: the
 * curl's central differences put the induced sheet about half a cell outside the last forced
 * nodes, so the ramp sits 0.5-0.65 h inside R.  A viscous flow sticks to the forced nodes
 * themselves, though, so where the wall layer is resolved the forced nodes near the surface
 * are driven not to the rigid motion but to the outer flow's profile continued linearly into
 * the body (a second-order immersed-boundary target: the tangential slip one cell outside R,
 * as a translation and a rotation of the surface fitted to it, scaled by the depth), which
 * puts the no-slip at R as well.  Where the layer is thinner than a cell (cell Reynolds
 * number of that slip above ~2) the sheet at R stands for it and the target falls back to the
 * rigid motion; with a stratified ambient it is not used.  In an inviscid fluid
 * (viscosity and Smagorinsky coefficient 0) the rotational part of the no-slip condition is
 * not imposed: pressure acts through a sphere's centre, so only viscosity can spin it or the
 * fluid. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kernel.h"

/* passes of the correction per step (each leaves ~30-60% of the interior's mismatch; what is
 * left of its rigid motion is then removed exactly with the unit patterns) */
#define PEN_PASSES 3
/* passes for the unit patterns, made once per lattice */
#define PEN_PATTERN_PASSES 16
/* lattice nodes beyond the radius, per side: the ramp, the curl's stencil, and room for the
 * vortons near the body to be remeshed with the full M4' stencil */
#define PEN_MARGIN 3
/* the wall's target (file comment): the image points' distance outside R, the depth to which
 * the outer profile is continued into the body and the width over which it then tapers back
 * to the rigid motion (in lattice cells), and the cell Reynolds number |slip| h / nu at which
 * it is half applied (weight 1 / (1 + (Re_h / PEN_WALL_RE)^2)) */
#define PEN_WALL_IMAGE 1.0
#define PEN_WALL_DEPTH 1.25
#define PEN_WALL_TAPER 0.5
#define PEN_WALL_RE 2.0

/* A body's lattice, made when the body's radius or the resolution changes. */
typedef struct vp_lattice {
    double R, h, s2;   /* radius it was made for, spacing, core radius^2 of its vortons */
    double res;        /* resolution it was made for (cells per radius) */
    int nh, n;         /* half width in nodes, nodes per axis (2 nh + 1) */
    size_t ni, nb;     /* forcing nodes (chi > 0), band nodes (where the curl of a forcing field lives) */
    int *inode, *bnode;/* their node ids */
    int *bindex;       /* (n^3) node id -> band index, or -1 */
    double *chi;       /* (ni) forcing weight */
    double *ri, *rb;   /* (ni,3), (nb,3) offsets from the centre */
    double *pat;       /* (6, nb, 3) band strengths set up by unit dU (x, y, z) and unit dW (x, y, z) */
    double kU[9];      /* impulse of the dU patterns: I_a = kU[3 a + b] dU_b (per unit density) */
    double kW[9];      /* angular impulse about the centre of the dW patterns */
    double shift;      /* the forcing ramp's place (forcing_chi): set so that kU = 3/2 V */
    size_t nw;         /* wall nodes: forcing nodes near enough to R to take the wall's target */
    int *wnode;        /* (nw) their forcing-node index */
    double *wk;        /* (nw) the target's slope factor: depth / image distance, tapered */
    double *wn;        /* (nw,3) their outward unit normals */
    double wA[9];      /* sum over the wall nodes of (I - n n): the slip fit's matrix */
    double cV, cW;     /* impulse along e of the wall target for a unit translation slip e, and
                        * angular impulse about e for a unit rotation slip e x n (per unit density) */
} vp_lattice;

static inline size_t node_id(const vp_lattice *L, int i, int j, int k)
{
    return (size_t)i + (size_t)L->n * ((size_t)j + (size_t)L->n * (size_t)k);
}

void vp_lattice_free(vp_lattice *L)
{
    if (!L) return;
    free(L->inode); free(L->bnode); free(L->bindex); free(L->chi); free(L->ri); free(L->rb); free(L->pat);
    free(L->wnode); free(L->wk); free(L->wn);
    free(L);
}

/* Forcing weight at distance r from the centre: a ramp of width h/2 centred on R - shift h (a
 * sharper ramp puts the no-slip wall closer to where the flow sees the body). */
static double forcing_chi(double r, double R, double h, double shift)
{
    double c = (R - shift * h - r) / (0.5 * h) + 0.5;
    return c >= 1.0 ? 1.0 : (c <= 0.0 ? 0.0 : c);
}

/* curl(f) h^3 at the band nodes, for f given at the forcing nodes (zero elsewhere), by central
 * differences: forcing node q enters (df/dx_a) at its neighbour q + sg e_a with the weight
 * -sg / 2h.  out: (nb,3), overwritten. */
static void band_curl(const vp_lattice *L, const double *f, double *out)
{
    const double k = 0.5 * L->h * L->h; /* (1 / 2h) h^3 */
    const int n = L->n;
    memset(out, 0, 3 * L->nb * sizeof(double));
    for (size_t q = 0; q < L->ni; q++) {
        const int id = L->inode[q], i = id % n, j = (id / n) % n, kk = id / (n * n);
        const double *fq = f + 3 * q;
        for (int a = 0; a < 3; a++)
            for (int sg = -1; sg <= 1; sg += 2) {
                const int b = L->bindex[node_id(L, i + (a == 0) * sg, j + (a == 1) * sg, kk + (a == 2) * sg)];
                const double d = -sg * k;
                double *o = out + 3 * b;
                /* curl = (dfz/dy - dfy/dz, dfx/dz - dfz/dx, dfy/dx - dfx/dy) */
                if (a == 0) { o[1] -= d * fq[2]; o[2] += d * fq[1]; }
                else if (a == 1) { o[0] += d * fq[2]; o[2] -= d * fq[0]; }
                else { o[0] -= d * fq[1]; o[1] += d * fq[0]; }
            }
    }
}

/* u[q] += velocity at forcing node q induced by band strengths da (nb,3), the lattice vortons'
 * kernel (kernel.h). */
static void band_induce(const vp_lattice *L, const double *da, double *u, int threads)
{
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (L->ni * L->nb > 100000)
    for (long q = 0; q < (long)L->ni; q++) {
        double acc[3] = {0, 0, 0};
        for (size_t b = 0; b < L->nb; b++) {
            const double *a = da + 3 * b;
            if (a[0] == 0.0 && a[1] == 0.0 && a[2] == 0.0) continue;
            vp_kernel_add(L->ri + 3 * q, L->rb + 3 * b, a, L->s2, acc);
        }
        for (int c = 0; c < 3; c++) u[3 * q + c] += acc[c];
    }
}

/* Impulse 1/2 sum r x a and angular impulse 1/3 sum r x (r x a) about the centre of band
 * strengths a. */
static void band_moments(const vp_lattice *L, const double *a, double I[3], double A[3])
{
    memset(I, 0, 3 * sizeof(double)); memset(A, 0, 3 * sizeof(double));
    for (size_t b = 0; b < L->nb; b++) {
        double rxa[3], rrxa[3];
        vp_cross3(L->rb + 3 * b, a + 3 * b, rxa);
        vp_cross3(L->rb + 3 * b, rxa, rrxa);
        for (int c = 0; c < 3; c++) { I[c] += 0.5 * rxa[c]; A[c] += rrxa[c] / 3.0; }
    }
}

/* The rigid motion of the fluid deep inside the body, velocity u (ni,3) at the forcing nodes:
 * mode[0..3) the mean velocity, mode[3..6) the rotation J^-1 sum r x u with
 * J = sum (r.r - r r^T), isotropic on the symmetric lattice: 2/3 sum r.r.  Over the nodes with
 * chi = 1 (the cores of the vortons smooth the velocity in the ramp), or with weights chi where
 * a coarse lattice has fewer than 7 of those. */
static void rigid_modes(const vp_lattice *L, const double *u, double mode[6])
{
    size_t deep = 0;
    for (size_t q = 0; q < L->ni; q++) deep += L->chi[q] >= 1.0;
    double cw = 0, j = 0;
    memset(mode, 0, 6 * sizeof(double));
    for (size_t q = 0; q < L->ni; q++) {
        const double w = deep >= 7 ? (L->chi[q] >= 1.0) : L->chi[q];
        if (w == 0.0) continue;
        double rxu[3];
        vp_cross3(L->ri + 3 * q, u + 3 * q, rxu);
        for (int c = 0; c < 3; c++) { mode[c] += w * u[3 * q + c]; mode[3 + c] += w * rxu[c]; }
        cw += w;
        j += w * vp_dot3(L->ri + 3 * q, L->ri + 3 * q);
    }
    j *= 2.0 / 3.0;
    for (int c = 0; c < 3; c++) { mode[c] = cw > 0 ? mode[c] / cw : 0.0; mode[3 + c] = j > 0 ? mode[3 + c] / j : 0.0; }
}

/* The correction passes (step 3): the fluid at the forcing nodes, velocity u (ni,3, updated),
 * driven towards U + W x r (plus off (ni,3) where not NULL); the band strengths added go to da
 * (accumulated).  With rotation = 0 the rigid-rotation part of each pass's correction is left
 * out (inviscid). */
static int penalize_passes(const vp_lattice *L, double *u, const double U[3], const double W[3], const double *off,
                           int rotation, int passes, double *da, int threads)
{
    double *f = malloc(3 * L->ni * sizeof(double)), *inc = malloc(3 * L->nb * sizeof(double));
    if (!f || !inc) { free(f); free(inc); return VP_ERR_NOMEM; }
    double cw = 0;
    for (size_t q = 0; q < L->ni; q++) cw += L->chi[q];
    for (int pass = 0; pass < passes; pass++) {
        double mean[3] = {0, 0, 0};
        for (size_t q = 0; q < L->ni; q++) {
            double us[3];
            vp_cross3(W, L->ri + 3 * q, us);
            for (int c = 0; c < 3; c++) {
                f[3 * q + c] = L->chi[q] * (U[c] + us[c] + (off ? off[3 * q + c] : 0.0) - u[3 * q + c]);
                mean[c] += f[3 * q + c];
            }
        }
        /* the uniform part is only ~2/3 realised by its curl (a uniform field masked by a sphere
         * is not solenoidal); half again of it makes the passes converge faster */
        for (int c = 0; c < 3; c++) mean[c] /= cw;
        for (size_t q = 0; q < L->ni; q++)
            for (int c = 0; c < 3; c++) f[3 * q + c] += 0.5 * L->chi[q] * mean[c];
        if (!rotation) {
            /* remove chi-weighted rigid rotation: Omega = J^-1 sum chi r x f, J = sum chi (r.r - r r^T);
             * the lattice is symmetric, so J is isotropic: J = 2/3 sum chi r.r */
            double Lm[3] = {0, 0, 0}, j = 0;
            for (size_t q = 0; q < L->ni; q++) {
                double rxf[3];
                vp_cross3(L->ri + 3 * q, f + 3 * q, rxf);
                for (int c = 0; c < 3; c++) Lm[c] += rxf[c];
                j += L->chi[q] * vp_dot3(L->ri + 3 * q, L->ri + 3 * q);
            }
            j *= 2.0 / 3.0;
            if (j > 0) {
                double Om[3] = {Lm[0] / j, Lm[1] / j, Lm[2] / j};
                for (size_t q = 0; q < L->ni; q++) {
                    double w[3];
                    vp_cross3(Om, L->ri + 3 * q, w);
                    for (int c = 0; c < 3; c++) f[3 * q + c] -= L->chi[q] * w[c];
                }
            }
        }
        band_curl(L, f, inc);
        for (size_t b = 0; b < 3 * L->nb; b++) da[b] += inc[b];
        band_induce(L, inc, u, threads);
    }
    free(f); free(inc);
    return VP_OK;
}

static int lattice_build(vp_lattice *L, double R, double res, double shift, int patterns, int threads)
{
    const double h = R / res;
    L->R = R; L->res = res; L->h = h;
    L->s2 = pow(3.0 / (4.0 * VP_PI), 2.0 / 3.0) * h * h; /* a vorton of volume h^3 */
    L->nh = (int)ceil(res) + PEN_MARGIN;
    L->n = 2 * L->nh + 1;
    const int n = L->n, nh = L->nh;
    const size_t nn = (size_t)n * n * n;
    L->bindex = malloc(nn * sizeof(int));
    L->inode = malloc(nn * sizeof(int));
    L->bnode = malloc(nn * sizeof(int));
    L->chi = malloc(nn * sizeof(double));
    L->ri = malloc(3 * nn * sizeof(double));
    L->rb = malloc(3 * nn * sizeof(double));
    if (!L->bindex || !L->inode || !L->bnode || !L->chi || !L->ri || !L->rb) return VP_ERR_NOMEM;
    unsigned char *forced = calloc(nn, 1);
    if (!forced) return VP_ERR_NOMEM;
    L->ni = 0;
    for (int k = 0; k < n; k++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++) {
                double r[3] = {h * (i - nh), h * (j - nh), h * (k - nh)};
                double c = forcing_chi(sqrt(vp_dot3(r, r)), R, h, shift);
                if (c <= 0) continue;
                size_t q = L->ni++;
                L->inode[q] = (int)node_id(L, i, j, k);
                L->chi[q] = c;
                memcpy(L->ri + 3 * q, r, sizeof r);
                forced[node_id(L, i, j, k)] = 1;
            }
    /* wall nodes: the forcing nodes within PEN_WALL_DEPTH + PEN_WALL_TAPER cells of R */
    L->wnode = malloc((L->ni + 1) * sizeof(int));
    L->wk = malloc((L->ni + 1) * sizeof(double));
    L->wn = malloc(3 * (L->ni + 1) * sizeof(double));
    if (!L->wnode || !L->wk || !L->wn) { free(forced); return VP_ERR_NOMEM; }
    L->nw = 0;
    memset(L->wA, 0, sizeof L->wA);
    for (size_t q = 0; q < L->ni; q++) {
        const double r = sqrt(vp_dot3(L->ri + 3 * q, L->ri + 3 * q)), d = (R - r) / h;
        if (!(r > 0) || d >= PEN_WALL_DEPTH + PEN_WALL_TAPER) continue;
        const double taper = d <= PEN_WALL_DEPTH ? 1.0 : 1.0 - (d - PEN_WALL_DEPTH) / PEN_WALL_TAPER;
        double *n = L->wn + 3 * L->nw;
        for (int a = 0; a < 3; a++) n[a] = L->ri[3 * q + a] / r;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) L->wA[3 * a + b] += (a == b) - n[a] * n[b];
        L->wnode[L->nw] = (int)q;
        L->wk[L->nw++] = taper * (d > 0 ? d : 0.0) / PEN_WALL_IMAGE;
    }
    /* band: nodes with a forcing node among their six neighbours (within the lattice: the
     * forcing region ends PEN_MARGIN nodes inside its edge) */
    L->nb = 0;
    for (int k = 1; k < n - 1; k++)
        for (int j = 1; j < n - 1; j++)
            for (int i = 1; i < n - 1; i++) {
                size_t id = node_id(L, i, j, k);
                L->bindex[id] = -1;
                int near = forced[node_id(L, i - 1, j, k)] || forced[node_id(L, i + 1, j, k)] ||
                           forced[node_id(L, i, j - 1, k)] || forced[node_id(L, i, j + 1, k)] ||
                           forced[node_id(L, i, j, k - 1)] || forced[node_id(L, i, j, k + 1)];
                if (!near) continue;
                size_t b = L->nb++;
                L->bindex[id] = (int)b;
                L->bnode[b] = (int)id;
                L->rb[3 * b] = h * (i - nh); L->rb[3 * b + 1] = h * (j - nh); L->rb[3 * b + 2] = h * (k - nh);
            }
    /* (edge nodes are never in the band) */
    for (int k = 0; k < n; k++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++)
                if (i == 0 || j == 0 || k == 0 || i == n - 1 || j == n - 1 || k == n - 1) L->bindex[node_id(L, i, j, k)] = -1;
    free(forced);
    /* the unit patterns: the correction passes for a unit velocity change on a still fluid, each
     * scaled so that the fluid at the forcing nodes takes exactly the unit rigid motion (the
     * chi-weighted mean translation, or rotation; the lattice's symmetry keeps the other modes
     * and components at rounding) */
    L->pat = calloc(6 * 3 * L->nb, sizeof(double));
    double *u = malloc(3 * L->ni * sizeof(double));
    if (!L->pat || !u) { free(u); return VP_ERR_NOMEM; }
    L->shift = shift;
    for (int m = 0; m < patterns; m++) {
        double U[3] = {0, 0, 0}, W[3] = {0, 0, 0};
        if (m < 3) U[m] = 1.0; else W[m - 3] = 1.0;
        memset(u, 0, 3 * L->ni * sizeof(double));
        double *pm = L->pat + 3 * L->nb * m;
        int st = penalize_passes(L, u, U, W, NULL, 1, PEN_PATTERN_PASSES, pm, threads);
        if (st) { free(u); return st; }
        double mode[6];
        rigid_modes(L, u, mode);
        const double got = mode[m];
        if (!(got > 0.05)) { free(u); return VP_ERR_VALUE; } /* no interior to move: a lattice too coarse */
        for (size_t b = 0; b < 3 * L->nb; b++) pm[b] /= got;
        double I[3], A[3];
        band_moments(L, pm, I, A);
        for (int c = 0; c < 3; c++) {
            if (m < 3) L->kU[3 * c + m] = I[c]; else L->kW[3 * c + (m - 3)] = A[c];
        }
    }
    /* the wall target's own impulse, for a unit slip of each kind along z (the lattice's
     * symmetry makes it isotropic) */
    if (patterns > 1 && L->nw) {
        double *off = calloc(3 * L->ni, sizeof(double)), *pm = calloc(3 * L->nb, sizeof(double));
        if (!off || !pm) { free(off); free(pm); free(u); return VP_ERR_NOMEM; }
        for (int kind = 0; kind < 2; kind++) {
            const double zero[3] = {0, 0, 0}, ez[3] = {0, 0, 1};
            memset(off, 0, 3 * L->ni * sizeof(double)); memset(pm, 0, 3 * L->nb * sizeof(double));
            memset(u, 0, 3 * L->ni * sizeof(double));
            for (size_t k = 0; k < L->nw; k++) {
                const double *n = L->wn + 3 * k;
                double e[3];
                if (kind == 0) { for (int a = 0; a < 3; a++) e[a] = ez[a] - n[2] * n[a]; }
                else vp_cross3(ez, n, e);
                for (int a = 0; a < 3; a++) off[3 * L->wnode[k] + a] = -L->wk[k] * e[a];
            }
            int st = penalize_passes(L, u, zero, zero, off, 1, PEN_PATTERN_PASSES, pm, threads);
            if (st) { free(off); free(pm); free(u); return st; }
            double I[3], A[3];
            band_moments(L, pm, I, A);
            if (kind == 0) L->cV = -I[2]; else L->cW = -A[2];
        }
        free(off); free(pm);
    }
    free(u);
    return VP_OK;
}

/* The body's lattice for its radius and the sim's resolution, made anew when either changed. */
static int lattice_for(vp_sim *s, size_t b, vp_lattice **out, int threads)
{
    if (s->n_lattices_allocated < s->n_bodies) {
        vp_lattice **p = realloc(s->lattices, s->n_bodies * sizeof *p);
        if (!p) return VP_ERR_NOMEM;
        for (size_t k = s->n_lattices_allocated; k < s->n_bodies; k++) p[k] = NULL;
        s->lattices = p; s->n_lattices_allocated = s->n_bodies;
    }
    vp_lattice *L = s->lattices[b];
    const double R = s->bodies[b].radius, res = s->params.body_resolution;
    if (L && L->R == R && L->res == res) { *out = L; return VP_OK; }
    vp_lattice_free(L);
    s->lattices[b] = NULL;
    /* The forcing ramp's place, by the secant method on the impulse of the unit translation:
     * the flow a velocity change sets up carries the potential-flow impulse 3/2 V (the
     * interior and the dipole of a sphere of radius R), so the added mass is a sphere's.  The
     * vortons' cores put the induced sheet about half a lattice cell outside the ramp. */
    const double want = 1.5 * vp_volume(R);
    double x0 = 0.5, x1 = 0.8, f0 = 0, f1 = 0;
    for (int it = 0; it < 8; it++) {
        double x = it == 0 ? x0 : (it == 1 ? x1 : x1 - f1 * (x1 - x0) / (f1 - f0));
        x = x < -0.5 ? -0.5 : (x > 1.5 ? 1.5 : x); /* a ramp beyond the lattice's margin would leave its band */
        L = calloc(1, sizeof *L);
        if (!L) return VP_ERR_NOMEM;
        int st = lattice_build(L, R, res, x, 1, threads);
        const double f = st ? NAN : L->kU[0] / want - 1.0;
        vp_lattice_free(L);
        if (st == VP_ERR_NOMEM) return st;
        if (!isfinite(f)) { x1 = NAN; break; }
        if (it == 0) { f0 = f; continue; }
        if (it == 1) { f1 = f; continue; }
        x0 = x1; f0 = f1; x1 = x; f1 = f;
        if (fabs(f) < 1e-3 || f1 == f0) break;
    }
    if (!(x1 > -0.5 && x1 < 1.5)) x1 = 0.5; /* (a lattice too coarse to calibrate: the ramp's usual place) */
    L = calloc(1, sizeof *L);
    if (!L) return VP_ERR_NOMEM;
    int st = lattice_build(L, R, res, x1, 6, threads);
    if (st) { vp_lattice_free(L); return st; }
    s->lattices[b] = L;
    *out = L;
    return VP_OK;
}

void vp_sim_lattices_free(vp_sim *s)
{
    for (size_t b = 0; b < s->n_lattices_allocated; b++) vp_lattice_free(s->lattices[b]);
    free(s->lattices);
    s->lattices = NULL; s->n_lattices_allocated = 0;
}

/* M4' interpolation kernel (Monaghan 1985), support |x| < 2. */
static inline double m4p(double x)
{
    x = fabs(x);
    if (x < 1.0) return 1.0 - 2.5 * x * x + 1.5 * x * x * x;
    if (x < 2.0) return 0.5 * (2.0 - x) * (2.0 - x) * (1.0 - x);
    return 0.0;
}

/* x = A^-1 b for a 3x3 A (row-major) by Cramer's rule: A is a mass matrix, well conditioned. */
static void solve3(const double A[9], const double b[3], double x[3])
{
    const double c0[3] = {A[0], A[3], A[6]}, c1[3] = {A[1], A[4], A[7]}, c2[3] = {A[2], A[5], A[8]};
    double t[3];
    vp_cross3(c1, c2, t);
    const double det = vp_dot3(c0, t);
    x[0] = vp_dot3(b, t) / det;
    vp_cross3(b, c2, t); x[1] = vp_dot3(c0, t) / det;
    vp_cross3(c1, b, t); x[2] = vp_dot3(c0, t) / det;
}

/* One body (steps 1-4 of the file comment).  Vortons are removed and appended: indices change. */
static int penalize_body(vp_sim *s, size_t bi)
{
    vp_body *B = &s->bodies[bi];
    const int threads = vp_threads(s);
    vp_lattice *L;
    int st = lattice_for(s, bi, &L, threads);
    if (st) return st;
    vp_vortons *v = &s->vortons;
    const double h = L->h, h3 = h * h * h, rho0 = s->params.ambient_density, dt = s->params.dt;
    const int n = L->n, nh = L->nh;
    const size_t nn = (size_t)n * n * n;
    const double *c = B->position;
    double o[3];
    for (int a = 0; a < 3; a++) o[a] = c[a] - nh * h;
    /* 1. remesh every vorton inside the lattice's cube onto it: strength with M4' (moments 0-2
     * exact: circulation, linear and angular impulse), near the cube's faces with the quadratic
     * on the three nearest nodes inside (the same moments), so that nothing lands outside the
     * cube and no node is left half-remeshed (each step would otherwise add a layer of vortons
     * there); density mass, heat and age with the linear kernel, and the nodes' densities then
     * made to hold the mass and the heat exactly within the vortons' temperature range
     * (vp_lattice_densities, as remeshing does); with a stratification, the deviation from the
     * ambient at each vorton's height, each node getting its own height's ambient back */
    double *acc = calloc(7 * nn, sizeof(double)); /* a (3), density mass, excess heat, age*vol, vol */
    unsigned char *keep = malloc(v->n + 1);
    if (!acc || !keep) { free(acc); free(keep); return VP_ERR_NOMEM; }
    const double *x = v->position->data, *w = v->vorticity->data, *rad = v->radius->data,
                 *den = v->density->data, *age = v->age->data;
    size_t removed = 0;
    const int strat = s->params.stratification.n > 0;
    double Mtot = 0, Etot = 0, Tlo = 1, Thi = 1;
    for (size_t i = 0; i < v->n; i++) {
        const double *xi = x + 3 * i;
        double q[3];
        int inside = 1;
        for (int a = 0; a < 3; a++) { q[a] = (xi[a] - o[a]) / h; inside &= q[a] >= 0.0 && q[a] <= n - 1; }
        keep[i] = !inside;
        if (!inside) continue;
        removed++;
        const double V = vp_volume(rad[i]);
        const double av[3] = {w[3 * i] * V, w[3 * i + 1] * V, w[3 * i + 2] * V};
        double di = den[i];
        if (strat) { double amb; vp_ambient_deviation(&s->params, 1, xi, &amb); di -= amb; }
        const double ex = vp_excess_temperature(rho0, di);
        const double sc[4] = {di * V, ex * V, age[i] * V, V};
        Mtot += sc[0]; Etot += sc[1];
        Tlo = 1 + ex < Tlo ? 1 + ex : Tlo; Thi = 1 + ex > Thi ? 1 + ex : Thi;
        int base[3], lb[3];
        double wt[3][4], lw[3][2];
        for (int a = 0; a < 3; a++) {
            const int f = (int)floor(q[a]);
            if (f - 1 >= 0 && f + 2 <= n - 1) {
                base[a] = f - 1;
                for (int k = 0; k < 4; k++) wt[a][k] = m4p(q[a] - (base[a] + k));
            } else { /* the quadratic through the three nearest nodes inside the cube */
                base[a] = f - 1 < 0 ? 0 : n - 3;
                const double t = q[a] - base[a];
                wt[a][0] = 0.5 * (t - 1.0) * (t - 2.0); wt[a][1] = -t * (t - 2.0); wt[a][2] = 0.5 * t * (t - 1.0);
                wt[a][3] = 0.0;
            }
            lb[a] = f < n - 1 ? f : n - 2;
            lw[a][1] = q[a] - lb[a]; lw[a][0] = 1.0 - lw[a][1];
        }
        for (int kz = 0; kz < 4; kz++)
            for (int ky = 0; ky < 4; ky++)
                for (int kx = 0; kx < 4; kx++) {
                    const double W = wt[0][kx] * wt[1][ky] * wt[2][kz];
                    if (W == 0.0) continue;
                    double *A = acc + 7 * node_id(L, base[0] + kx, base[1] + ky, base[2] + kz);
                    for (int m = 0; m < 3; m++) A[m] += W * av[m];
                }
        for (int kz = 0; kz < 2; kz++)
            for (int ky = 0; ky < 2; ky++)
                for (int kx = 0; kx < 2; kx++) {
                    const double W = lw[0][kx] * lw[1][ky] * lw[2][kz];
                    double *A = acc + 7 * node_id(L, lb[0] + kx, lb[1] + ky, lb[2] + kz);
                    for (int m = 0; m < 4; m++) A[3 + m] += W * sc[m];
                }
    }
    /* the lattice's vortons: every node that received anything, and every band node */
    size_t *slot = malloc(nn * sizeof(size_t)), nnew = 0;
    if (!slot) { free(acc); free(keep); return VP_ERR_NOMEM; }
    for (size_t id = 0; id < nn; id++) {
        const double *A = acc + 7 * id;
        int any = A[0] != 0 || A[1] != 0 || A[2] != 0 || A[3] != 0 || A[4] != 0 || L->bindex[id] >= 0;
        slot[id] = any ? nnew++ : (size_t)-1;
    }
    double *np = malloc((3 * 3 + 4) * (nnew + 1) * sizeof(double) + (nnew + 1) * sizeof(size_t));
    if (!np) { free(acc); free(keep); free(slot); return VP_ERR_NOMEM; }
    double *nx = np, *nw = np + 3 * nnew, *nd = np + 6 * nnew, *nr = np + 7 * nnew, *nage = np + 8 * nnew,
           *nheat = np + 9 * nnew, *nmass = np + 10 * nnew;
    size_t *nidx = (size_t *)(np + 11 * nnew + 1);
    for (int k = 0; k < n; k++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++) {
                size_t id = node_id(L, i, j, k), m = slot[id];
                if (m == (size_t)-1) continue;
                const double *A = acc + 7 * id;
                nx[3 * m] = o[0] + h * i; nx[3 * m + 1] = o[1] + h * j; nx[3 * m + 2] = o[2] + h * k;
                for (int a = 0; a < 3; a++) nw[3 * m + a] = A[a] / h3;
                nd[m] = A[3];   /* the node's mass and heat, for now */
                nheat[m] = A[4];
                nmass[m] = A[3];
                nidx[m] = m;
                nr[m] = cbrt(3.0 / (4.0 * VP_PI)) * h;
                nage[m] = A[6] > 0 ? A[5] / A[6] : 0.0;
            }
    free(acc);
    if (vp_lattice_densities(nnew, nidx, nd, nheat, h3, rho0, Mtot, Etot, Tlo, Thi))
        for (size_t m = 0; m < nnew; m++) nd[m] = nmass[m] / h3; /* the mass kept, not the heat */
    if (strat)
        for (size_t m = 0; m < nnew; m++) nd[m] += vp_ambient_density(&s->params, nx + 3 * m) - rho0;
    if (removed) { st = vp_sim_compact_vortons(s, keep); if (st) { free(keep); free(slot); free(np); return st; } }
    free(keep);
    const size_t first = v->n;
    st = vp_sim_add_vortons(s, nnew, nx, nw, nr, nd);
    if (st) { free(slot); free(np); return st; }
    for (size_t m = 0; m < nnew; m++) v->age->data[first + m] = nage[m];
    free(np);
    /* 2. velocity at the forcing nodes, from every vorton,
     * and, in a viscous fluid, at the wall nodes' image points */
    const int rotation = s->params.viscosity > 0 || s->params.smagorinsky > 0;
    const double nu = s->params.viscosity;
    /* (not with a stratified ambient: there a neutral ball resting at an interface went
     * unstable with it) */
    const size_t nwall = nu > 0 && s->params.stratification.n == 0 ? L->nw : 0, np2 = L->ni + nwall;
    double *pts = malloc(3 * np2 * sizeof(double)), *u = malloc(3 * np2 * sizeof(double)),
           *da = calloc(3 * L->nb, sizeof(double)), *off = nwall ? calloc(3 * L->ni, sizeof(double)) : NULL;
    if (!pts || !u || !da || (nwall && !off)) { free(pts); free(u); free(da); free(off); free(slot); return VP_ERR_NOMEM; }
    for (size_t q = 0; q < L->ni; q++)
        for (int a = 0; a < 3; a++) pts[3 * q + a] = c[a] + L->ri[3 * q + a];
    const double rimg = L->R + PEN_WALL_IMAGE * h;
    for (size_t k = 0; k < nwall; k++)
        for (int a = 0; a < 3; a++) pts[3 * (L->ni + k) + a] = c[a] + L->wn[3 * k + a] * rimg;
    st = vp_sim_velocity_at(s, np2, pts, u);
    free(pts);
    if (st) { free(u); free(da); free(off); free(slot); return st; }
    /* the wall's target: the tangential slip at the image points, fitted by its first
     * moments, a translation and a rotation of the surface (s = (I - n n) Vs + Ws x n, least
     * squares: they alone set a sphere's drag and torque in slow flow, and the fit leaves the
     * noise of single nodes out), continued linearly to zero at R and beyond into the body,
     * weighted down where the cell Reynolds number says the layer is not resolved */
    if (nwall) {
        double bV[3] = {0, 0, 0}, bW[3] = {0, 0, 0}, Vs[3], Ws[3];
        for (size_t k = 0; k < nwall; k++) {
            const double *n = L->wn + 3 * k;
            double x[3], wx[3], sl[3], nxs[3];
            for (int a = 0; a < 3; a++) x[a] = n[a] * rimg;
            vp_cross3(B->angular_velocity, x, wx);
            for (int a = 0; a < 3; a++) sl[a] = u[3 * (L->ni + k) + a] - B->velocity[a] - wx[a];
            const double sn = vp_dot3(sl, n);
            for (int a = 0; a < 3; a++) sl[a] -= sn * n[a];
            vp_cross3(n, sl, nxs);
            for (int a = 0; a < 3; a++) { bV[a] += sl[a]; bW[a] += nxs[a]; }
        }
        /* (the lattice's symmetry leaves the two fits uncoupled: sum (I - n n) for both) */
        solve3(L->wA, bV, Vs);
        solve3(L->wA, bW, Ws);
        /* a free body answers the target's push within the step: the slip it leaves is the
         * fit less what the body's change of velocity takes off it, solved for (the push is
         * rho0 cV Vs and rho0 cW Ws, against the body's inertia with its added mass), so that
         * a light body does not overshoot from step to step */
        if (!B->fixed) {
            const double Vb = vp_volume(B->radius), Jb = 0.4 * Vb * B->radius * B->radius;
            const double Me = B->mass + rho0 * (L->kU[0] - Vb), Ie = vp_body_inertia(B) + rho0 * (L->kW[0] - Jb);
            const double gu = Me / (Me + rho0 * L->cV), gw = Ie / (Ie + rho0 * L->cW * rimg);
            for (int a = 0; a < 3; a++) { Vs[a] *= gu > 0 ? gu : 0.0; Ws[a] *= gw > 0 ? gw : 0.0; }
        }
        for (size_t k = 0; k < nwall; k++) {
            const size_t q = (size_t)L->wnode[k];
            const double *n = L->wn + 3 * k;
            double sl[3];
            vp_cross3(Ws, n, sl);
            const double vn = vp_dot3(Vs, n);
            for (int a = 0; a < 3; a++) sl[a] += Vs[a] - vn * n[a];
            const double re = sqrt(vp_dot3(sl, sl)) * h / (nu * PEN_WALL_RE), g = L->wk[k] / (1.0 + re * re);
            for (int a = 0; a < 3; a++) off[3 * q + a] = -g * sl[a];
        }
    }
    /* 3. the correction with the body held at its velocity */
    st = penalize_passes(L, u, B->velocity, B->angular_velocity, off, rotation, PEN_PASSES, da, threads);
    if (st) { free(u); free(da); free(off); free(slot); return st; }
    {
        /* what the passes left of the rigid motion's mismatch (less the wall's target),
         * removed with the unit patterns */
        double mode[6];
        if (off)
            for (size_t q = 0; q < 3 * L->ni; q++) u[q] -= off[q];
        rigid_modes(L, u, mode);
        for (int m = 0; m < 6; m++) {
            const double e = m < 3 ? B->velocity[m] - mode[m] : (rotation ? B->angular_velocity[m - 3] - mode[m] : 0.0);
            const double *pm = L->pat + 3 * L->nb * m;
            for (size_t b = 0; b < 3 * L->nb; b++) da[b] += e * pm[b];
        }
    }
    free(u); free(off);
    double dI[3], dA[3];
    band_moments(L, da, dI, dA);
    /* 4. the body: Newton's law with the added mass implicit */
    const double V = vp_volume(B->radius), J = 0.4 * V * B->radius * B->radius;
    double F[3], T[3], dU[3] = {0, 0, 0}, dW[3] = {0, 0, 0};
    /* the fluid's push over the step, the body held; the inside's catching up with a velocity
     * set from outside (a launch, a new body) is the body's own, not the fluid's push */
    for (int a = 0; a < 3; a++) {
        F[a] = -rho0 * (dI[a] - V * (B->velocity[a] - B->interior_velocity[a]));
        T[a] = -rho0 * (dA[a] - (rotation ? J * (B->angular_velocity[a] - B->interior_angular_velocity[a]) : 0.0));
    }
    if (!B->fixed) {
        const double M = B->mass, I = vp_body_inertia(B);
        double AU[9], AW[9], bU[3], bW[3];
        for (int r = 0; r < 3; r++) {
            for (int q = 0; q < 3; q++) {
                AU[3 * r + q] = rho0 * L->kU[3 * r + q];
                AW[3 * r + q] = rotation ? rho0 * L->kW[3 * r + q] : 0.0;
            }
            AU[4 * r] += M - rho0 * V;
            AW[4 * r] += I - (rotation ? rho0 * J : 0.0);
            bU[r] = F[r] + B->force[r] * dt + B->impulse[r];
            bW[r] = T[r] + B->torque[r] * dt + B->angular_impulse[r];
        }
        solve3(AU, bU, dU);
        solve3(AW, bW, dW);
    }
    /* the velocity change, added to the fluid (the unit patterns) */
    for (size_t b = 0; b < L->nb; b++)
        for (int a = 0; a < 3; a++) {
            double add = 0;
            for (int m = 0; m < 3; m++) add += dU[m] * L->pat[3 * L->nb * m + 3 * b + a];
            if (rotation)
                for (int m = 0; m < 3; m++) add += dW[m] * L->pat[3 * L->nb * (3 + m) + 3 * b + a];
            da[3 * b + a] += add;
        }
    /* the band's strengths into its vortons (each band node has one: slot) */
    double *vw = v->vorticity->data;
    for (size_t b = 0; b < L->nb; b++) {
        const size_t m = first + slot[L->bnode[b]];
        const double Vm = vp_volume(v->radius->data[m]);
        for (int a = 0; a < 3; a++) vw[3 * m + a] += da[3 * b + a] / Vm;
    }
    free(slot); free(da);
    /* the hand-over, and the body's new velocity */
    double J3[3], K3[3];
    for (int a = 0; a < 3; a++) {
        /* what the fluid handed the body: its momentum change less the external pushes */
        if (B->fixed) { J3[a] = F[a]; K3[a] = T[a]; }
        else {
            J3[a] = B->mass * dU[a] - B->force[a] * dt - B->impulse[a];
            K3[a] = vp_body_inertia(B) * dW[a] - B->torque[a] * dt - B->angular_impulse[a];
        }
        B->fluid_impulse[a] += J3[a];
        B->fluid_angular_impulse[a] += K3[a];
    }
    for (int a = 0; a < 3; a++) {
        B->interior_velocity[a] = B->velocity[a] + dU[a];
        B->interior_angular_velocity[a] = rotation ? B->angular_velocity[a] + dW[a] : 0.0;
    }
    if (!B->fixed) {
        const double I = vp_body_inertia(B);
        for (int a = 0; a < 3; a++) {
            B->momentum[a] = B->mass * (B->velocity[a] + dU[a]);
            B->angular_momentum[a] = I * (B->angular_velocity[a] + dW[a]);
        }
    }
    memset(B->force, 0, sizeof B->force); memset(B->torque, 0, sizeof B->torque);
    memset(B->impulse, 0, sizeof B->impulse); memset(B->angular_impulse, 0, sizeof B->angular_impulse);
    return VP_OK;
}

/* Heat conducted between a body and the fluid at its surface (part 10: Q = kb (Tb - T) dt), with
 * kb the body's whole conductance: each vorton whose core straddles the surface takes a share
 * of it by its cross-section, so the heat flow does not depend on the lattice's resolution.
 * Each exchange is integrated exactly over the step (it never overshoots). */
static void conduct_body(vp_sim *s, vp_body *B)
{
    if (!(B->thermal_conductivity > 0)) return;
    vp_vortons *v = &s->vortons;
    const double rho0 = s->params.ambient_density, dt = s->params.dt;
    double area = 0, heat = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < v->n; i++) {
            const double *x = v->position->data + 3 * i, sr = v->radius->data[i];
            const double r[3] = {x[0] - B->position[0], x[1] - B->position[1], x[2] - B->position[2]};
            const double d = sqrt(vp_dot3(r, r));
            if (d <= B->radius - sr || d >= B->radius + sr) continue;
            if (pass == 0) { area += sr * sr; continue; }
            const double kb = B->thermal_conductivity * sr * sr / area;
            const double Ci = s->params.fluid_heat_capacity * vp_volume(sr);
            const double Ti = vp_temperature_from_density(rho0, v->density->data[i]);
            const double inv = 1.0 / Ci + (B->heat_capacity > 0 && isfinite(B->heat_capacity) ? 1.0 / B->heat_capacity : 0.0);
            const double Q = (B->temperature - Ti) * (-expm1(-kb * dt * inv)) / inv;
            v->density->data[i] = vp_density_from_temperature(rho0, Ti + Q / Ci);
            heat += Q;
        }
        if (area == 0) return;
    }
    if (B->heat_capacity > 0 && isfinite(B->heat_capacity)) B->temperature -= heat / B->heat_capacity;
    B->heat_received -= heat;
}

/* Phase 7, the physical rule, for every body in order; the bodies' velocities change here
 * (forces and impulses applied before it, gravity and buoyancy included). */
int vp_bodies_penalize(vp_sim *s, int tracers)
{
    for (size_t b = 0; b < s->n_bodies; b++) {
        int st = penalize_body(s, b);
        if (st) return st;
        conduct_body(s, &s->bodies[b]);
    }
    if (tracers) vp_bodies_project_tracers(s);
    return VP_OK;
}
