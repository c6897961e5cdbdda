/* velocity.c: velocity from vorticity (method step 2) behind one interface: the solver
 * dispatch ('auto' included), the velocity and its Jacobian at every grid node, and the
 * velocity at arbitrary points.  The solvers themselves: direct.c, tree.c, poisson.c. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"

/* Strengths a_i = w_i V_i of the vortons into dst (3n). */
static double *strengths(const vp_sim *s, double *dst)
{
    const double *w = s->vortons.vorticity->data, *r = s->vortons.radius->data;
    for (size_t i = 0; i < s->vortons.n; i++) {
        double V = vp_volume(r[i]);
        dst[3 * i] = w[3 * i] * V; dst[3 * i + 1] = w[3 * i + 1] * V; dst[3 * i + 2] = w[3 * i + 2] * V;
    }
    return dst;
}

/* The supervorton tree over the vortons as they are now (part 3). */
static int tree_build(vp_sim *s)
{
    double *a = malloc(3 * s->vortons.n * sizeof(double));
    if (!a) return VP_ERR_NOMEM;
    strengths(s, a);
    int st = vp_tree_build(s->tree, s->vortons.n, s->vortons.position->data, a, s->vortons.radius->data,
                           s->params.tree_leaf_size);
    free(a);
    return st;
}

/* Velocity at m points from the vortons by the direct sum or the tree (method step 2). */
int vp_velocity_solve(vp_sim *s, size_t m, const double *pts, double *vel, int solver)
{
    size_t n = s->vortons.n;
    if (n == 0) { memset(vel, 0, 3 * m * sizeof(double)); s->interactions = 0; return VP_OK; }
    int st;
    if (solver == VP_SOLVER_DIRECT) {
        double *a = malloc(3 * n * sizeof(double));
        if (!a) return VP_ERR_NOMEM;
        st = vp_direct_velocity(n, s->vortons.position->data, strengths(s, a), s->vortons.radius->data, m, pts, vel,
                                vp_threads(s));
        s->interactions = (uint64_t)n * m;
        free(a);
    } else {
        st = tree_build(s);
        if (!st) {
            st = vp_tree_velocity(s->tree, s->params.tree_theta, m, pts, vel, vp_threads(s));
            s->interactions = vp_tree_last_interactions(s->tree);
        }
    }
    return st;
}

/* The solver 'auto' picks for n vortons on a grid of nn nodes (vortonpy.h: VP_AUTO_POISSON_MIN). */
int vp_auto_solver(size_t n, size_t nn)
{
    return n < VP_AUTO_POISSON_MIN || nn == 0 ? VP_SOLVER_TREE : VP_SOLVER_POISSON;
}

/* The direct sum at every node of the grid. */
static int direct_velocity_grid(vp_sim *s)
{
    const vp_grid *g = &s->grid;
    const size_t nn = vp_grid_count(g);
    double *pts = malloc(3 * nn * sizeof(double));
    if (!pts) return VP_ERR_NOMEM;
    for (int k = 0; k < g->n[2]; k++)
        for (int j = 0; j < g->n[1]; j++)
            for (int i = 0; i < g->n[0]; i++) {
                size_t id = (size_t)i + (size_t)g->n[0] * ((size_t)j + (size_t)g->n[1] * k);
                pts[3 * id] = g->origin[0] + g->h * i;
                pts[3 * id + 1] = g->origin[1] + g->h * j;
                pts[3 * id + 2] = g->origin[2] + g->h * k;
            }
    int st = vp_velocity_solve(s, nn, pts, s->grid_velocity, VP_SOLVER_DIRECT);
    free(pts);
    return st;
}

/* Phase 2 (method step 2): the velocity at every node of this step's grid by the chosen
 * solver, then its Jacobian (central differences) for stretching and the substep guard. */
int vp_velocity_grid(vp_sim *s)
{
    int solver = s->params.solver, st;
    if (solver == VP_SOLVER_AUTO) solver = vp_auto_solver(s->vortons.n, vp_grid_count(&s->grid));
    if (solver == VP_SOLVER_POISSON) {
        st = vp_poisson_velocity_grid(s);
    } else if (solver == VP_SOLVER_TREE && s->vortons.n) {
        st = tree_build(s);
        if (!st) st = vp_tree_velocity_grid(s->tree, s->params.tree_theta, &s->grid, s->grid_velocity, vp_threads(s));
        s->interactions = vp_tree_last_interactions(s->tree);
    } else {
        st = direct_velocity_grid(s);
    }
    if (st) return st;
    s->max_rate = sqrt(vp_grid_jacobian(&s->grid, s->grid_velocity, s->grid_jacobian, vp_threads(s)));
    return VP_OK;
}

/* Phases 1-2: the domain, then the velocity and its Jacobian at every grid node. */
int vp_sim_update_velocity_grid(vp_sim *s)
{
    int st = vp_domain_update(s);
    return st ? st : vp_velocity_grid(s);
}

int vp_sim_velocity_at(vp_sim *s, size_t m, const double *points, double *vel)
{
    int solver = s->params.solver == VP_SOLVER_DIRECT ? VP_SOLVER_DIRECT : VP_SOLVER_TREE;
    return vp_velocity_solve(s, m, points, vel, solver);
}
