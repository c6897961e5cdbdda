/* tree.c: velocity from vorticity by the supervorton hierarchy (physics.md 2.2, part 3),
 * and the direct O(N M) Biot-Savart sum that tests compare it with.
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
#include "vortonpy.h"
#include "kernel.h"

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
    int *tmp;
    double *x, *a, *s2; /* permuted copies, 3,3,1 per vorton */
    uint64_t interactions;
};

vp_tree *vp_tree_create(void) { return calloc(1, sizeof(vp_tree)); }

void vp_tree_free(vp_tree *t)
{
    if (!t) return;
    free(t->nodes); free(t->perm); free(t->tmp); free(t->x); free(t->a); free(t->s2);
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
        const double *a = str + 3 * i, *x = pos + 3 * i;
        double m = sqrt(vp_dot3(a, a));
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
    int *sorted = malloc((size_t)count * sizeof(int));
    if (!sorted) return -1;
    int pos_o[8]; memcpy(pos_o, off, sizeof off);
    for (int q = start; q < start + count; q++) sorted[pos_o[t->tmp[q]]++ - start] = t->perm[q];
    memcpy(t->perm + start, sorted, (size_t)count * sizeof(int));
    free(sorted);
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
        double *d = realloc(t->x, 3 * n * sizeof(double)); if (!d) return VP_ERR_NOMEM; t->x = d;
        d = realloc(t->a, 3 * n * sizeof(double)); if (!d) return VP_ERR_NOMEM; t->a = d;
        d = realloc(t->s2, n * sizeof(double)); if (!d) return VP_ERR_NOMEM; t->s2 = d;
        t->n_cap = n;
    }
    t->n = n; t->n_nodes = 0;
    if (n == 0) return VP_OK;
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
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
    if (build(t, root, bc, half, 0, leaf_size, pos, strength, radius)) return VP_ERR_NOMEM;
    for (size_t q = 0; q < n; q++) {
        int i = t->perm[q];
        memcpy(t->x + 3 * q, pos + 3 * i, 3 * sizeof(double));
        memcpy(t->a + 3 * q, strength + 3 * i, 3 * sizeof(double));
        t->s2[q] = radius[i] * radius[i];
    }
    return VP_OK;
}

/* Far-field velocity of a supervorton (monopole + first moment), times 4 pi. */
static inline void far_field(const tnode *nd, const double x[3], double u[3])
{
    double r[3] = {x[0] - nd->c[0], x[1] - nd->c[1], x[2] - nd->c[2]};
    double r2 = vp_dot3(r, r), ir3 = 1.0 / (r2 * sqrt(r2)), ir5 = ir3 / r2;
    const double *D = nd->D;
    double C[3] = {D[5] - D[7], D[6] - D[2], D[1] - D[3]};
    double Dr[3] = {D[0] * r[0] + D[1] * r[1] + D[2] * r[2], D[3] * r[0] + D[4] * r[1] + D[5] * r[2],
                    D[6] * r[0] + D[7] * r[1] + D[8] * r[2]};
    double Axr[3], Drxr[3];
    vp_cross3(nd->A, r, Axr); vp_cross3(Dr, r, Drxr);
    for (int k = 0; k < 3; k++) u[k] += Axr[k] * ir3 - C[k] * ir3 + 3.0 * Drxr[k] * ir5;
}

void vp_tree_velocity(const vp_tree *t, double theta, size_t m, const double *points,
                      double *vel, int threads)
{
    (void)threads;
    double th2 = theta * theta;
    uint64_t total = 0;
    if (t->n == 0) { memset(vel, 0, 3 * m * sizeof(double)); return; }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64) reduction(+ : total)
    for (long p = 0; p < (long)m; p++) {
        const double *x = points + 3 * p;
        double ufar[3] = {0, 0, 0}, unear[3] = {0, 0, 0};
        int stack[512]; int sp = 0;
        stack[sp++] = 0;
        uint64_t cnt = 0;
        while (sp) {
            const tnode *nd = &t->nodes[stack[--sp]];
            double dx = x[0] - nd->c[0], dy = x[1] - nd->c[1], dz = x[2] - nd->c[2];
            double d2 = dx * dx + dy * dy + dz * dz;
            if (nd->r2max < th2 * d2 && d2 > 16.0 * nd->s2max) {
                far_field(nd, x, ufar); cnt++;
            } else if (nd->leaf) {
                for (int q = nd->start; q < nd->start + nd->count; q++)
                    vp_kernel_add(x, t->x + 3 * q, t->a + 3 * q, t->s2[q], unear);
                cnt += (uint64_t)nd->count;
            } else {
                for (int o = 7; o >= 0; o--)
                    if (nd->child[o] >= 0 && sp < 512) stack[sp++] = nd->child[o];
            }
        }
        for (int k = 0; k < 3; k++) vel[3 * p + k] = unear[k] + VP_INV4PI * ufar[k];
        total += cnt;
    }
    ((vp_tree *)t)->interactions = total;
}

void vp_direct_velocity(size_t n, const double *pos, const double *strength, const double *radius,
                        size_t m, const double *points, double *vel, int threads)
{
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long p = 0; p < (long)m; p++) {
        double u[3] = {0, 0, 0};
        for (size_t j = 0; j < n; j++)
            vp_kernel_add(points + 3 * p, pos + 3 * j, strength + 3 * j, radius[j] * radius[j], u);
        vel[3 * p] = u[0]; vel[3 * p + 1] = u[1]; vel[3 * p + 2] = u[2];
    }
}
