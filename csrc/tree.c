/* tree.c: velocity from vorticity by the supervorton hierarchy (method step 2, part 3).
 *
 * The hierarchy is an octree over the vortons.  Each node carries a "supervorton": the
 * summed strength A = sum a_j at the |a|-weighted centroid c, plus the first moment
 * D_ab = sum a_j,a d_j,b (d_j = x_j - c), which is what makes the summary accurate for
 * closed vortex structures, whose summed strength is nearly zero.  The far-field velocity
 * of a node at r = x - c (Taylor expansion of the singular kernel K(r) = r/|r|^3):
 *   4 pi u = A x r / r^3 - C / r^3 + 3 (D r) x r / r^5,   C_a = eps_abc D_bc.
 * A node is summarised when its bounding radius is below theta times the distance and the
 * target is more than 4 core radii away (where the regularised and singular kernels agree
 * to 0.6%); otherwise it is opened, and a leaf's own vortons are summed exactly with the
 * regularised kernel (not merged: part 12). */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"

#define VP_TREE_FAR 1e4 /* (far_velocity) */

typedef struct {
    double c[3];      /* expansion centre */
    double A[3];      /* summed strength */
    double D[9];      /* first moment, row-major */
    double r2max;     /* squared bounding radius about c */
    double s2max;     /* largest core radius^2 in the node */
    int start, count; /* range in the permuted arrays */
    int child[8];     /* -1: none */
    int leaf;
} tnode;

struct vp_tree {
    tnode *nodes; size_t n_nodes, n_alloc;
    size_t n, n_cap;
    int *perm;          /* permuted index -> original */
    int *tmp, *tmp2;    /* the build's octant of each vorton, and its sorted range */
    double *mag;        /* |a| per vorton (original order), for the centroids */
    double *x, *a, *s2; /* permuted copies, 3,3,1 per vorton */
    float *f;           /* permuted float32 SoA for the near field: 7 arrays of n_cap, */
                        /* x y z relative to o, then a_x a_y a_z, then s^2 */
    double o[3];        /* origin of the float coordinates (root box centre) */
    double far;         /* targets farther than this from o along an axis: the root's expansion (far_velocity) */
    uint64_t interactions;
};

vp_tree *vp_tree_create(void) { return calloc(1, sizeof(vp_tree)); }

void vp_tree_free(vp_tree *t)
{
    if (!t) return;
    free(t->nodes); free(t->perm); free(t->tmp); free(t->tmp2); free(t->mag); free(t->x); free(t->a); free(t->s2);
    free(t->f);
    free(t);
}

size_t vp_tree_node_count(const vp_tree *t) { return t->n_nodes; }
uint64_t vp_tree_last_interactions(const vp_tree *t) { return t->interactions; }

static int new_node(vp_tree *t)
{
    if (t->n_nodes == t->n_alloc) {
        size_t na = t->n_alloc ? 2 * t->n_alloc : 256;
        tnode *nn = realloc(t->nodes, na * sizeof(tnode));
        if (!nn) return -1;
        t->nodes = nn; t->n_alloc = na;
    }
    memset(&t->nodes[t->n_nodes], 0, sizeof(tnode));
    return (int)t->n_nodes++;
}

/* Supervorton summary of the vortons perm[start..start+count). */
static void summarise(vp_tree *t, tnode *nd, const double *pos, const double *str, const double *rad)
{
    double wsum = 0, c[3] = {0, 0, 0}, g[3] = {0, 0, 0};
    for (int q = nd->start; q < nd->start + nd->count; q++) {
        int i = t->perm[q];
        const double *x = pos + 3 * i, m = t->mag[i]; /* sqrt(a . a), once per build */
        wsum += m;
        for (int k = 0; k < 3; k++) { c[k] += m * x[k]; g[k] += x[k]; }
    }
    for (int k = 0; k < 3; k++) nd->c[k] = wsum > 0 ? c[k] / wsum : g[k] / nd->count;
    memset(nd->A, 0, sizeof nd->A); memset(nd->D, 0, sizeof nd->D);
    nd->r2max = 0; nd->s2max = 0;
    for (int q = nd->start; q < nd->start + nd->count; q++) {
        int i = t->perm[q];
        const double *a = str + 3 * i, *x = pos + 3 * i;
        double d[3] = {x[0] - nd->c[0], x[1] - nd->c[1], x[2] - nd->c[2]};
        for (int k = 0; k < 3; k++) {
            nd->A[k] += a[k];
            for (int l = 0; l < 3; l++) nd->D[3 * k + l] += a[k] * d[l];
        }
        double r2 = vp_dot3(d, d), s2 = rad[i] * rad[i];
        if (r2 > nd->r2max) nd->r2max = r2;
        if (s2 > nd->s2max) nd->s2max = s2;
    }
}

static int build(vp_tree *t, int id, double bc[3], double half, int depth, int leaf_size,
                 const double *pos, const double *str, const double *rad)
{
    tnode *nd = &t->nodes[id];
    summarise(t, nd, pos, str, rad);
    for (int k = 0; k < 8; k++) nd->child[k] = -1;
    if (nd->count <= leaf_size || depth >= 40) { nd->leaf = 1; return 0; }
    int start = nd->start, count = nd->count;
    /* counting sort of the range into octants (stable: deterministic) */
    int cnt[8] = {0}, off[8];
    for (int q = start; q < start + count; q++) {
        const double *x = pos + 3 * t->perm[q];
        int o = (x[0] >= bc[0]) | ((x[1] >= bc[1]) << 1) | ((x[2] >= bc[2]) << 2);
        t->tmp[q] = o; cnt[o]++;
    }
    off[0] = start;
    for (int o = 1; o < 8; o++) off[o] = off[o - 1] + cnt[o - 1];
    int *sorted = t->tmp2 + start; /* (a malloc per node was a tenth of the build) */
    int pos_o[8]; memcpy(pos_o, off, sizeof off);
    for (int q = start; q < start + count; q++) sorted[pos_o[t->tmp[q]]++ - start] = t->perm[q];
    memcpy(t->perm + start, sorted, (size_t)count * sizeof(int));
    for (int o = 0; o < 8; o++) {
        if (!cnt[o]) continue;
        int cid = new_node(t);
        if (cid < 0) return -1;
        t->nodes[id].child[o] = cid; /* re-fetch: new_node may move the array */
        t->nodes[cid].start = off[o]; t->nodes[cid].count = cnt[o];
        double h2 = half * 0.5, cc[3] = {bc[0] + ((o & 1) ? h2 : -h2), bc[1] + ((o & 2) ? h2 : -h2),
                                         bc[2] + ((o & 4) ? h2 : -h2)};
        if (build(t, cid, cc, h2, depth + 1, leaf_size, pos, str, rad)) return -1;
    }
    return 0;
}

int vp_tree_build(vp_tree *t, size_t n, const double *pos, const double *strength,
                  const double *radius, int leaf_size)
{
    if (leaf_size < 1) leaf_size = 1;
    if (n > t->n_cap) {
        int *p = realloc(t->perm, n * sizeof(int)); if (!p) return VP_ERR_NOMEM; t->perm = p;
        p = realloc(t->tmp, n * sizeof(int)); if (!p) return VP_ERR_NOMEM; t->tmp = p;
        p = realloc(t->tmp2, n * sizeof(int)); if (!p) return VP_ERR_NOMEM; t->tmp2 = p;
        double *mg = realloc(t->mag, n * sizeof(double)); if (!mg) return VP_ERR_NOMEM; t->mag = mg;
        double *d = realloc(t->x, 3 * n * sizeof(double)); if (!d) return VP_ERR_NOMEM; t->x = d;
        d = realloc(t->a, 3 * n * sizeof(double)); if (!d) return VP_ERR_NOMEM; t->a = d;
        d = realloc(t->s2, n * sizeof(double)); if (!d) return VP_ERR_NOMEM; t->s2 = d;
        float *fl = realloc(t->f, 7 * n * sizeof(float)); if (!fl) return VP_ERR_NOMEM; t->f = fl;
        t->n_cap = n;
    }
    t->n = n; t->n_nodes = 0;
    if (n == 0) return VP_OK;
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (size_t i = 0; i < n; i++) t->mag[i] = sqrt(vp_dot3(strength + 3 * i, strength + 3 * i));
    for (size_t i = 0; i < n; i++) {
        t->perm[i] = (int)i;
        for (int k = 0; k < 3; k++) {
            if (pos[3 * i + k] < lo[k]) lo[k] = pos[3 * i + k];
            if (pos[3 * i + k] > hi[k]) hi[k] = pos[3 * i + k];
        }
    }
    double bc[3], half = 0;
    for (int k = 0; k < 3; k++) {
        bc[k] = 0.5 * (lo[k] + hi[k]);
        if (0.5 * (hi[k] - lo[k]) > half) half = 0.5 * (hi[k] - lo[k]);
    }
    half = half * 1.0001 + 1e-12;
    int root = new_node(t);
    if (root < 0) return VP_ERR_NOMEM;
    t->nodes[root].start = 0; t->nodes[root].count = (int)n;
    /* a position that is not finite (the domain phase, which may build this tree before its
     * own check, then fails the step) would put every vorton in one octant for 40 levels:
     * one leaf instead */
    const int finite = isfinite(bc[0]) && isfinite(bc[1]) && isfinite(bc[2]) && isfinite(half);
    if (build(t, root, bc, half, 0, finite ? leaf_size : (int)n, pos, strength, radius)) return VP_ERR_NOMEM;
    memcpy(t->o, bc, sizeof bc);
    t->far = VP_TREE_FAR * (half + sqrt(t->nodes[root].s2max));
    size_t cap = t->n_cap;
    for (size_t q = 0; q < n; q++) {
        int i = t->perm[q];
        memcpy(t->x + 3 * q, pos + 3 * i, 3 * sizeof(double));
        memcpy(t->a + 3 * q, strength + 3 * i, 3 * sizeof(double));
        t->s2[q] = radius[i] * radius[i];
        for (int k = 0; k < 3; k++) {
            t->f[k * cap + q] = (float)(pos[3 * i + k] - bc[k]);
            t->f[(3 + k) * cap + q] = (float)strength[3 * i + k];
        }
        t->f[6 * cap + q] = (float)t->s2[q];
    }
    return VP_OK;
}

/* Per-thread interaction lists of one target group. */
typedef struct {
    float *far; size_t n_far, cap_far;    /* 15 SoA arrays of cap_far: centre (relative to the tree origin), A, D row-major */
    float *near; size_t n_near, cap_near; /* 7 SoA arrays of cap_near: x y z (relative), a, s^2 */
} ilist;

static int ilist_far(ilist *L, const vp_tree *t, int id)
{
    if (L->n_far == L->cap_far) {
        size_t c = L->cap_far ? 2 * L->cap_far : 256;
        float *p = malloc(15 * c * sizeof(float));
        if (!p) return -1;
        if (L->n_far) /* L->far is NULL before the first growth */
            for (int k = 0; k < 15; k++) memcpy(p + k * c, L->far + k * L->cap_far, L->n_far * sizeof(float));
        free(L->far);
        L->far = p; L->cap_far = c;
    }
    const tnode *nd = &t->nodes[id];
    size_t c = L->cap_far, q = L->n_far++;
    for (int k = 0; k < 3; k++) {
        L->far[k * c + q] = (float)(nd->c[k] - t->o[k]);
        L->far[(3 + k) * c + q] = (float)nd->A[k];
    }
    for (int k = 0; k < 9; k++) L->far[(6 + k) * c + q] = (float)nd->D[k];
    return 0;
}

static int ilist_near(ilist *L, const vp_tree *t, int start, int count)
{
    if (L->n_near + (size_t)count > L->cap_near) {
        size_t c = L->cap_near ? L->cap_near : 1024;
        while (c < L->n_near + (size_t)count) c *= 2;
        float *p = malloc(7 * c * sizeof(float));
        if (!p) return -1;
        if (L->n_near) /* L->near is NULL before the first growth */
            for (int k = 0; k < 7; k++) memcpy(p + k * c, L->near + k * L->cap_near, L->n_near * sizeof(float));
        free(L->near);
        L->near = p; L->cap_near = c;
    }
    for (int k = 0; k < 7; k++)
        memcpy(L->near + k * L->cap_near + L->n_near, t->f + k * t->n_cap + start, (size_t)count * sizeof(float));
    L->n_near += (size_t)count;
    return 0;
}

/* Build the lists for a group of targets inside the sphere (gc, gr): a node is summarised
 * when it is well separated from the whole group (bounding radius < theta (d - gr), and
 * d - gr beyond 4 core radii); leaves that are not go to the near list. */
static int build_lists(const vp_tree *t, double theta, const double gc[3], double gr, ilist *L)
{
    int stack[512], sp = 0;
    L->n_far = 0; L->n_near = 0;
    stack[sp++] = 0;
    while (sp) {
        int id = stack[--sp];
        const tnode *nd = &t->nodes[id];
        double dx = gc[0] - nd->c[0], dy = gc[1] - nd->c[1], dz = gc[2] - nd->c[2];
        double d = sqrt(dx * dx + dy * dy + dz * dz) - gr;
        if (d > 0 && nd->r2max < theta * theta * d * d && d * d > 16.0 * nd->s2max) {
            if (ilist_far(L, t, id)) return -1;
        } else if (nd->leaf || sp >= 504) {
            if (ilist_near(L, t, nd->start, nd->count)) return -1;
        } else {
            for (int o = 7; o >= 0; o--)
                if (nd->child[o] >= 0) stack[sp++] = nd->child[o];
        }
    }
    return 0;
}

/* The near and far fields of one interaction list at nt targets at once (float32 SoA
 * relative to the tree origin, nt a multiple of VP_TV), vectorised across the targets: each
 * list entry is loaded once and broadcast against VP_TV targets.  Near: the regularised kernel
 * (kernel.h) over the leaves' vortons; far: the supervorton expansions (the top of this file).
 * (Vectorised along the list for one target at a time, the short lists of a small grid
 * spend their time on horizontal sums and remainders.)  Each target's sums run along the
 * list in order, in float32 (7 digits: far below the expansion's error at theta = 0.4).
 * out: 6 nt floats, 4 pi u near (x y z), then far (x y z).  Eight floats a vector (one AVX2
 * register; wider generic vectors make GCC split operations and build broadcasts through
 * the stack on AVX2). */
#define VP_TV 8 /* targets are evaluated in groups padded to a multiple of this */
typedef float vp_tv __attribute__((vector_size(4 * VP_TV)));
/* lane-wise square root (GCC vectorises the loop to one instruction) */
#define TV_SQRT(dst, a) for (int l_ = 0; l_ < VP_TV; l_++) (dst)[l_] = sqrtf((a)[l_])

VP_CLONES
static void eval_targets(const ilist *L, int nt, const float *restrict TX, const float *restrict TY,
                         const float *restrict TZ, float *restrict out)
{
    const size_t cn = L->cap_near, cf = L->cap_far, nn = L->n_near, nf = L->n_far;
    const float *N = L->near, *F = L->far;
    for (int t0 = 0; t0 < nt; t0 += VP_TV) {
        vp_tv x, y, z;
        memcpy(&x, TX + t0, sizeof x); memcpy(&y, TY + t0, sizeof y); memcpy(&z, TZ + t0, sizeof z);
        vp_tv ux = {0}, uy = {0}, uz = {0};
        for (size_t j = 0; j < nn; j++) {
            const float X = N[j], Y = N[cn + j], Z = N[2 * cn + j], AX = N[3 * cn + j], AY = N[4 * cn + j],
                        AZ = N[5 * cn + j], S2 = N[6 * cn + j];
            const vp_tv rx = x - X, ry = y - Y, rz = z - Z;
            const vp_tv r2 = rx * rx + ry * ry + rz * rz;
            const vp_tv iq = 1.0f / (r2 + S2);
            vp_tv sq;
            TV_SQRT(sq, iq);
            const vp_tv g = (r2 + 2.5f * S2) * iq * iq * sq; /* kernel.h's g in float */
            ux += g * (AY * rz - AZ * ry);
            uy += g * (AZ * rx - AX * rz);
            uz += g * (AX * ry - AY * rx);
        }
        memcpy(out + t0, &ux, sizeof ux); memcpy(out + nt + t0, &uy, sizeof uy); memcpy(out + 2 * nt + t0, &uz, sizeof uz);
        ux = uy = uz = (vp_tv){0};
        for (size_t j = 0; j < nf; j++) {
            const float CX = F[j], CY = F[cf + j], CZ = F[2 * cf + j], A0 = F[3 * cf + j], A1 = F[4 * cf + j],
                        A2 = F[5 * cf + j], D0 = F[6 * cf + j], D1 = F[7 * cf + j], D2 = F[8 * cf + j],
                        D3 = F[9 * cf + j], D4 = F[10 * cf + j], D5 = F[11 * cf + j], D6 = F[12 * cf + j],
                        D7 = F[13 * cf + j], D8 = F[14 * cf + j];
            const float cx = D5 - D7, cy = D6 - D2, cz = D1 - D3;
            const vp_tv rx = x - CX, ry = y - CY, rz = z - CZ;
            const vp_tv r2 = rx * rx + ry * ry + rz * rz;
            vp_tv r1;
            TV_SQRT(r1, r2);
            const vp_tv ir = 1.0f / r1, ir3 = ir * ir * ir, ir5 = 3.0f * ir3 / r2;
            const vp_tv dx = D0 * rx + D1 * ry + D2 * rz;
            const vp_tv dy = D3 * rx + D4 * ry + D5 * rz;
            const vp_tv dz = D6 * rx + D7 * ry + D8 * rz;
            ux += (A1 * rz - A2 * ry - cx) * ir3 + (dy * rz - dz * ry) * ir5;
            uy += (A2 * rx - A0 * rz - cy) * ir3 + (dz * rx - dx * rz) * ir5;
            uz += (A0 * ry - A1 * rx - cz) * ir3 + (dx * ry - dy * rx) * ir5;
        }
        memcpy(out + 3 * nt + t0, &ux, sizeof ux); memcpy(out + 4 * nt + t0, &uy, sizeof uy);
        memcpy(out + 5 * nt + t0, &uz, sizeof uz);
    }
}
#undef TV_SQRT

/* Targets farther than VP_TREE_FAR root sizes from the tree (along an axis from its box
 * centre, the size being the box's half-width plus the largest core radius) take the root's
 * supervorton expansion (the top of this file) in float64, in a scaled form that cannot
 * overflow: with r = x - c = s n (s = max |r_a|, so |n| <= sqrt 3) and rhat = n / |n|,
 *   4 pi u = (A x rhat) / r^2 - C / r^3 + 3 (D rhat) x rhat / r^3,
 * and 1/r, which underflows to 0 rather than overflowing, once per target.  The float32 list
 * evaluation squares coordinates relative to the tree, which overflowed past ~1e19 (|r|^2 >
 * FLT_MAX: inf, then 0 x inf = NaN in the dipole term), so that a tracer or grid node a long
 * way off got a NaN velocity and the step failed; and at 1e4 sizes its float differences
 * have lost the dipole's cancellation (the relative error of the expansion there is ~1e-4,
 * of a velocity 1e-12 of the near field's). */
static int is_far(const vp_tree *t, const double x[3])
{
    return !(fabs(x[0] - t->o[0]) <= t->far && fabs(x[1] - t->o[1]) <= t->far && fabs(x[2] - t->o[2]) <= t->far);
}

static void far_velocity(const vp_tree *t, const double x[3], double u[3])
{
    const tnode *nd = &t->nodes[0];
    const double r[3] = {x[0] - nd->c[0], x[1] - nd->c[1], x[2] - nd->c[2]};
    if (!(isfinite(r[0]) && isfinite(r[1]) && isfinite(r[2]))) { /* (the caller's check fails the step) */
        u[0] = u[1] = u[2] = NAN;
        return;
    }
    double s = 0; /* > 0: x lies beyond `far` of o, c within the root's box */
    for (int a = 0; a < 3; a++) s = fabs(r[a]) > s ? fabs(r[a]) : s;
    double n[3] = {r[0] / s, r[1] / s, r[2] / s};
    const double nn = sqrt(vp_dot3(n, n)), ir = 1.0 / (s * nn), ir2 = ir * ir, ir3 = ir2 * ir;
    for (int a = 0; a < 3; a++) n[a] /= nn;
    const double *A = nd->A, *D = nd->D;
    const double C[3] = {D[5] - D[7], D[6] - D[2], D[1] - D[3]};
    const double d[3] = {D[0] * n[0] + D[1] * n[1] + D[2] * n[2], D[3] * n[0] + D[4] * n[1] + D[5] * n[2],
                         D[6] * n[0] + D[7] * n[1] + D[8] * n[2]};
    u[0] = VP_INV4PI * ((A[1] * n[2] - A[2] * n[1]) * ir2 + (3.0 * (d[1] * n[2] - d[2] * n[1]) - C[0]) * ir3);
    u[1] = VP_INV4PI * ((A[2] * n[0] - A[0] * n[2]) * ir2 + (3.0 * (d[2] * n[0] - d[0] * n[2]) - C[1]) * ir3);
    u[2] = VP_INV4PI * ((A[0] * n[1] - A[1] * n[0]) * ir2 + (3.0 * (d[0] * n[1] - d[1] * n[0]) - C[2]) * ir3);
}

/* Velocity at arbitrary points.  Points are binned into cells of about 16 points over their
 * bounding box; each cell's points share one interaction list, built for the sphere around
 * their own bounding box (so a list is valid for every point of its group, as in the grid
 * path).  That amortises the traversal over the group, whose points are then evaluated
 * together (eval_targets, padded to a multiple of VP_TV with the group's first point).
 * Deterministic: a point's group does not depend on the threads. */
int vp_tree_velocity(const vp_tree *t, double theta, size_t m, const double *points, double *vel, int threads)
{
    (void)threads;
    uint64_t total = 0;
    int fail = 0;
    if (t->n == 0) { memset(vel, 0, 3 * m * sizeof(double)); return VP_OK; }
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (size_t p = 0; p < m; p++)
        for (int a = 0; a < 3; a++) {
            double c = points[3 * p + a];
            if (c < lo[a]) lo[a] = c;
            if (c > hi[a]) hi[a] = c;
        }
    double cell = 1.0;
    if (m >= 32 && lo[0] <= hi[0] && lo[1] <= hi[1] && lo[2] <= hi[2] &&
        isfinite(hi[0] - lo[0]) && isfinite(hi[1] - lo[1]) && isfinite(hi[2] - lo[2])) {
        double vol = 1.0, ext[3];
        for (int a = 0; a < 3; a++) { ext[a] = hi[a] - lo[a]; vol *= ext[a] > 0 ? ext[a] : 1e-300; }
        cell = cbrt(vol / ((double)m / 16.0));
        for (int a = 0; a < 3; a++) if (!(cell >= ext[a] * 1e-3)) cell = ext[a] * 1e-3;
        if (!(cell > 0)) cell = 1.0;
    } else { /* few or non-finite points: one box */
        for (int a = 0; a < 3; a++) lo[a] = hi[a] = 0;
    }
    vp_bins bins;
    if (vp_bins_build(&bins, m, points, lo, hi, cell, 4.0 * (double)m / 16.0 + 8, threads)) {
        ((vp_tree *)t)->interactions = 0;
        return VP_ERR_NOMEM;
    }
    const size_t ncell = (size_t)bins.nc[0] * bins.nc[1] * bins.nc[2], *start = bins.start, *order = bins.order;
#pragma omp parallel num_threads(threads) reduction(+ : total, fail)
    {
        ilist L = {0};
        size_t cap = 0;
        float *tb = NULL; /* the group's targets (3 cap) and results (6 cap) */
#pragma omp for schedule(dynamic, 4)
        for (long cc = 0; cc < (long)ncell; cc++) {
            size_t q0 = start[cc], q1 = start[cc + 1];
            if (q0 == q1) continue;
            double blo[3] = {INFINITY, INFINITY, INFINITY}, bhi[3] = {-INFINITY, -INFINITY, -INFINITY}, gc[3], gr2 = 0;
            for (size_t q = q0; q < q1; q++)
                for (int a = 0; a < 3; a++) {
                    double c = points[3 * order[q] + a];
                    if (c < blo[a]) blo[a] = c;
                    if (c > bhi[a]) bhi[a] = c;
                }
            for (int a = 0; a < 3; a++) { gc[a] = 0.5 * (blo[a] + bhi[a]); double hw = 0.5 * (bhi[a] - blo[a]); gr2 += hw * hw; }
            const int near_box = !is_far(t, blo) && !is_far(t, bhi); /* every point of the group near */
            if (!(gr2 >= 0) || !isfinite(gr2)) { gr2 = 0; gc[0] = gc[1] = gc[2] = NAN; }
            if (build_lists(t, theta, gc, sqrt(gr2), &L)) { fail++; continue; }
            const size_t m = q1 - q0, mt = (m + VP_TV - 1) / VP_TV * VP_TV;
            if (mt > cap) {
                free(tb);
                tb = malloc(9 * mt * sizeof(float));
                cap = tb ? mt : 0;
                if (!tb) { fail++; continue; }
            }
            float *tx = tb, *ty = tb + mt, *tz = tb + 2 * mt, *out = tb + 3 * mt;
            for (size_t q = 0; q < mt; q++) { /* padded with the group's first point */
                const double *x = points + 3 * order[q0 + (q < m ? q : 0)];
                tx[q] = (float)(x[0] - t->o[0]); ty[q] = (float)(x[1] - t->o[1]); tz[q] = (float)(x[2] - t->o[2]);
            }
            eval_targets(&L, (int)mt, tx, ty, tz, out);
            for (size_t q = 0; q < m; q++) {
                const size_t i = order[q0 + q];
                if (!near_box && is_far(t, points + 3 * i)) { far_velocity(t, points + 3 * i, vel + 3 * i); continue; }
                for (int k = 0; k < 3; k++)
                    vel[3 * i + k] = VP_INV4PI * ((double)out[k * mt + q] + (double)out[(3 + k) * mt + q]);
            }
            total += (uint64_t)m * (L.n_far + L.n_near);
        }
        free(L.far); free(L.near); free(tb);
    }
    vp_bins_free(&bins);
    ((vp_tree *)t)->interactions = fail ? 0 : total;
    return fail ? VP_ERR_NOMEM : VP_OK;
}

/* Velocity at every node of a grid: nodes are taken in blocks of 4x4x4 that share one
 * interaction list, which amortises the traversal; the block's nodes are evaluated together
 * (eval_targets). */
int vp_tree_velocity_grid(const vp_tree *t, double theta, const vp_grid *g, double *vel, int threads)
{
    (void)threads;
    enum { B = 4, NT = B * B * B }; /* NT: a multiple of VP_TV */
    int nb[3] = {(g->n[0] + B - 1) / B, (g->n[1] + B - 1) / B, (g->n[2] + B - 1) / B};
    long nblocks = (long)nb[0] * nb[1] * nb[2];
    uint64_t total = 0;
    int fail = 0;
    if (t->n == 0) { memset(vel, 0, 3 * vp_grid_count(g) * sizeof(double)); return VP_OK; }
#pragma omp parallel num_threads(threads) reduction(+ : total, fail)
    {
        ilist L = {0};
        float tx[NT], ty[NT], tz[NT], out[6 * NT];
        size_t id[NT];
        double gx[NT][3]; /* the nodes' positions */
#pragma omp for schedule(dynamic, 1)
        for (long b = 0; b < nblocks; b++) {
            int bi = (int)(b % nb[0]), bj = (int)((b / nb[0]) % nb[1]), bk = (int)(b / ((long)nb[0] * nb[1]));
            int lo[3] = {bi * B, bj * B, bk * B}, hi[3];
            double gc[3], gr2 = 0;
            for (int a = 0; a < 3; a++) {
                hi[a] = lo[a] + B < g->n[a] ? lo[a] + B : g->n[a];
                gc[a] = g->origin[a] + g->h * 0.5 * (lo[a] + hi[a] - 1);
                double half = 0.5 * g->h * (hi[a] - 1 - lo[a]);
                gr2 += half * half;
            }
            if (build_lists(t, theta, gc, sqrt(gr2), &L)) { fail++; continue; }
            const double c0[3] = {g->origin[0] + g->h * lo[0], g->origin[1] + g->h * lo[1], g->origin[2] + g->h * lo[2]};
            const double c1[3] = {g->origin[0] + g->h * (hi[0] - 1), g->origin[1] + g->h * (hi[1] - 1),
                                  g->origin[2] + g->h * (hi[2] - 1)};
            const int near_box = !is_far(t, c0) && !is_far(t, c1); /* every node of the block near */
            int m = 0;
            for (int k = lo[2]; k < hi[2]; k++)
                for (int j = lo[1]; j < hi[1]; j++)
                    for (int i = lo[0]; i < hi[0]; i++, m++) {
                        id[m] = (size_t)i + (size_t)g->n[0] * ((size_t)j + (size_t)g->n[1] * k);
                        gx[m][0] = g->origin[0] + g->h * i; gx[m][1] = g->origin[1] + g->h * j; gx[m][2] = g->origin[2] + g->h * k;
                        tx[m] = (float)(gx[m][0] - t->o[0]);
                        ty[m] = (float)(gx[m][1] - t->o[1]);
                        tz[m] = (float)(gx[m][2] - t->o[2]);
                    }
            const int mt = (m + VP_TV - 1) / VP_TV * VP_TV;
            for (int q = m; q < mt; q++) { tx[q] = tx[0]; ty[q] = ty[0]; tz[q] = tz[0]; } /* finite padding */
            eval_targets(&L, mt, tx, ty, tz, out);
            for (int q = 0; q < m; q++) {
                if (!near_box && is_far(t, gx[q])) { far_velocity(t, gx[q], vel + 3 * id[q]); continue; }
                for (int k = 0; k < 3; k++)
                    vel[3 * id[q] + k] = VP_INV4PI * ((double)out[k * mt + q] + (double)out[(3 + k) * mt + q]);
            }
            total += (uint64_t)m * (L.n_far + L.n_near);
        }
        free(L.far); free(L.near);
    }
    ((vp_tree *)t)->interactions = total;
    return fail ? VP_ERR_NOMEM : VP_OK;
}
