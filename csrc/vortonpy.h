/* vortonpy.h: the public C API of the vorton fluid core.
 *
 * The core is plain C99 (+ optional OpenMP) and knows nothing of Python; only the binding
 * (module.c, bind_*.c through bind.h) includes Python.h.  Every function returns 0 (VP_OK)
 * on success or a negative vp_status; none prints or exits.  Physics references
 * ("method step 5") point at the steps of docs/method.md, and "part N" at the articles
 * the model follows. */
#ifndef VORTONPY_H
#define VORTONPY_H

#include <stddef.h>
#include <stdint.h>
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status codes */
typedef enum {
    VP_OK = 0,
    VP_ERR_NOMEM = -1,      /* an allocation failed (maps to MemoryError) */
    VP_ERR_VALUE = -2,      /* an argument is out of range (ValueError) */
    VP_ERR_NONFINITE = -3,  /* a step produced NaN/inf (FloatingPointError) */
    VP_ERR_STATE = -4       /* the object is in a state that forbids the call */
} vp_status;

/* AUTO: poisson from VP_AUTO_POISSON_MIN vortons up, the tree below.  Both solvers evaluate the
 * velocity at every node, but the tree's cost per node grows with log n while poisson's (FFTs
 * of the padded grid) does not depend on n; the grid follows the vortons alone, so its nodes
 * lie among them, where the tree's are dearest, at any grid_cells_per_vorton.  Below
 * VP_AUTO_POISSON_MIN the tree is kept for accuracy: with one cell per vorton over a
 * non-uniform set the grid is coarser than the dense part's spacing, and poisson's smoothing
 * (sigma >= 0.8 h) changes the flow. */
typedef enum { VP_SOLVER_DIRECT = 0, VP_SOLVER_TREE = 1, VP_SOLVER_POISSON = 2, VP_SOLVER_AUTO = 3 } vp_solver;
/* Time stepping (params.integrator, sim.c): FROZEN moves and stretches the vortons through the
 * velocity field of the step's start (first order in time for the coupled flow: the field moves
 * during the step); RK2 also solves the field at the predicted end state and uses the average
 * of the two, the field at the step's midpoint to second order. */
typedef enum { VP_INTEGRATOR_FROZEN = 0, VP_INTEGRATOR_RK2 = 1 } vp_integrator;
/* Stretching's form (params.stretch_form, stretch.c): J w or J^T w, J_ab = du_a/dx_b; the same
 * for a divergence-free vorticity field, not for the vortons' (which is not exactly so). */
typedef enum { VP_STRETCH_CLASSICAL = 0, VP_STRETCH_TRANSPOSE = 1 } vp_stretch_form;
#define VP_AUTO_POISSON_MIN 1000

/* Fluid-body coupling (method step 7): PHYSICAL, no-slip and no-through on the whole surface by
 * penalization (penalize.c); ARTICLES, the seed articles' contact rule (contact.c). */
typedef enum { VP_COUPLING_PHYSICAL = 0, VP_COUPLING_ARTICLES = 1 } vp_coupling;

/* Step phases, for timings and error reports.  Order = docs/method.md's order of steps. */
enum {
    VP_PHASE_DOMAIN, VP_PHASE_VELOCITY, VP_PHASE_STRETCH, VP_PHASE_BAROCLINIC,
    VP_PHASE_DIFFUSE, VP_PHASE_ADVECT_VORTONS, VP_PHASE_ADVECT_TRACERS, VP_PHASE_CONTACT,
    VP_PHASE_BUOYANCY, VP_PHASE_BODIES, VP_PHASE_EMIT, VP_PHASE_REMESH, VP_PHASE_COUNT
};
extern const char *const vp_phase_names[VP_PHASE_COUNT];

/* ---------------------------------------------------------------- shared buffers
 * Every particle array lives in a reference-counted block so that a NumPy view can keep
 * it alive after the simulation has moved on (grown, compacted, or been freed).  The
 * simulation never writes a block it does not own alone except in place (same length
 * or longer): a shrinking compaction copies into a fresh block when another owner exists. */
typedef struct vp_buffer {
    int refcount;       /* owners: the simulation and every view (atomic updates) */
    size_t n_allocated; /* capacity in doubles */
    double data[];      /* the payload */
} vp_buffer;

vp_buffer *vp_buffer_create(size_t n_allocated);
void vp_buffer_retain(vp_buffer *b);
void vp_buffer_release(vp_buffer *b);

/* ---------------------------------------------------------------- particles */
/* Vortons: the only carriers of fluid state (docs/method.md, the state).  Struct of arrays. */
typedef struct {
    size_t n;             /* number of live vortons */
    size_t n_allocated;   /* capacity (rows) of every array below */
    vp_buffer *position;  /* (n,3) centre x_i [length] */
    vp_buffer *vorticity; /* (n,3) vorticity w_i [1/time]; strength a_i = w_i V_i */
    vp_buffer *radius;    /* (n,)  core radius s_i [length]; V_i = 4/3 pi s_i^3 */
    vp_buffer *density;   /* (n,)  density deviation d_i from ambient [mass/length^3] */
    vp_buffer *age;       /* (n,)  time since creation [time] */
    vp_buffer *velocity;  /* (n,3) velocity used by the last advection [length/time] */
} vp_vortons;

/* Tracers: passive markers for smoke and dye (docs/method.md, the state). */
typedef struct {
    size_t n, n_allocated;
    vp_buffer *position;  /* (n,3) [length] */
    vp_buffer *velocity;  /* (n,3) velocity of the last advection, or body surface [length/time] */
    vp_buffer *density;   /* (n,)  density deviation sampled from the fluid grid */
    vp_buffer *age;       /* (n,)  time since creation [time] */
} vp_tracers;

/* ---------------------------------------------------------------- rigid bodies */
typedef struct {
    double position[3];         /* centre c [length] */
    double momentum[3];         /* linear momentum P = M v [mass length/time] */
    double angular_momentum[3]; /* L = I W about the centre */
    double velocity[3];         /* v; for fixed (kinematic) bodies the prescribed velocity */
    double angular_velocity[3]; /* W [rad/time]; prescribed for fixed bodies */
    double orientation[4];      /* unit quaternion (w, x, y, z) */
    double radius;              /* sphere radius R [length] */
    double mass;                /* M [mass]; ignored by fixed bodies */
    double temperature;         /* Tb [ambient = 1] */
    double thermal_conductivity;/* kb: heat per time per unit temperature difference per contact */
    double heat_capacity;       /* Cb: heat per unit temperature */
    int fixed;                  /* 1: kinematic, moves with its prescribed v and W, never pushed */
    int gravity;                /* 1: gravity and buoyancy act on it (finite-mass bodies only) */
    /* accumulators, cleared after each integration */
    double force[3], torque[3], impulse[3], angular_impulse[3];
    /* running totals of what the fluid handed over (diagnostics, never cleared) */
    double fluid_impulse[3], fluid_angular_impulse[3], heat_received;
    /* the rigid motion the physical coupling last gave the fluid inside the body (penalize.c);
     * zero for a new body: nothing inside moves with it yet */
    double interior_velocity[3], interior_angular_velocity[3];
} vp_body;

void vp_body_init(vp_body *b);          /* defaults: unit sphere of mass 1 at rest */
void vp_body_sync(vp_body *b);          /* recompute v, W from P, L (or P, L from v, W if fixed) */
double vp_body_inertia(const vp_body *b);
void vp_body_apply_impulse(vp_body *b, const double j[3]);
void vp_body_apply_impulsive_torque(vp_body *b, const double t[3]);
void vp_body_integrate(vp_body *b, double dt);

/* ---------------------------------------------------------------- emitters (method step 10) */
typedef struct {
    double center[3];       /* box centre [length] */
    double half_size[3];    /* box half widths [length] */
    double velocity[3];     /* velocity given to new tracers (cache only) */
    double vorton_rate;     /* vortons per unit time */
    double tracer_rate;     /* tracers per unit time */
    double vorton_radius;   /* s of new vortons */
    double vorticity;       /* magnitude of random-direction vorticity of new vortons */
    double density;         /* density deviation of new particles */
    double vorton_debt, tracer_debt; /* fractional particles owed (state, saved) */
} vp_emitter;

/* ---------------------------------------------------------------- grid (method step 1) */
typedef struct {
    double origin[3]; /* position of node (0,0,0) */
    double h;         /* cell width (cubic cells) */
    int n[3];         /* nodes per axis; node (i,j,k) at origin + h (i,j,k); index i + n0 (j + n1 k) */
} vp_grid;

size_t vp_grid_count(const vp_grid *g);
/* Trilinear interpolation of a field with `dim` components per node at point x (clamped). */
void vp_grid_interpolate(const vp_grid *g, const double *field, int dim, const double x[3], double *out);
/* Cloud-in-cell splat of n points (values: n rows of dim) into field (adds; points outside
 * are ignored), in parallel, the sums in a fixed order
 * independent of the thread count; work: vp_grid_splat_work(g, n) size_t's of scratch. */
size_t vp_grid_splat_work(const vp_grid *g, size_t n);
void vp_grid_splat_many(const vp_grid *g, double *field, int dim, size_t n, const double *x, const double *val,
                        size_t *work, int threads);
/* Central-difference gradient of a scalar field; one-sided at the edges. out: 3 per node. */
void vp_grid_gradient(const vp_grid *g, const double *scalar, double *out, int threads);
/* Jacobian J[a][b] = d u_a / d x_b of a vector field (9 per node, row-major; the field with
 * VP_GRID_PAD doubles past its last node); returns the largest sum_ab J_ab^2 over the nodes. */
double vp_grid_jacobian(const vp_grid *g, const double *vec, double *out, int threads);

/* ---------------------------------------------------------------- tree (method step 2, part 3) */
typedef struct vp_tree vp_tree;
vp_tree *vp_tree_create(void);
void vp_tree_free(vp_tree *t);
/* Build the supervorton hierarchy over n vortons (positions, strengths a_i, radii). */
int vp_tree_build(vp_tree *t, size_t n, const double *pos, const double *strength,
                  const double *radius, int leaf_size);
/* Velocity at m points; theta is the opening angle (accuracy knob, smaller = exact). */
int vp_tree_velocity(const vp_tree *t, double theta, size_t m, const double *points,
                     double *vel, int threads);
/* Velocity at every node of a grid (blocks of nodes share interaction lists). */
int vp_tree_velocity_grid(const vp_tree *t, double theta, const vp_grid *g, double *vel, int threads);
size_t vp_tree_node_count(const vp_tree *t);
uint64_t vp_tree_last_interactions(const vp_tree *t); /* pair + node interactions of last call */

/* Direct O(N M) Biot-Savart sum (the reference solver); VP_ERR_NOMEM if out of memory. */
int vp_direct_velocity(size_t n, const double *pos, const double *strength, const double *radius,
                        size_t m, const double *points, double *vel, int threads);

/* ---------------------------------------------------------------- simulation */
/* The parameters: one field per row of VP_PARAM_TABLE (params.h), which gives each one's
 * type, default, valid range, unit and meaning. */
typedef struct {
#define VP_PARAM_X(name, type, ...) VP_PARAM_FIELD_##type(name)
    VP_PARAM_TABLE(VP_PARAM_X)
#undef VP_PARAM_X
} vp_params;

typedef enum {
    VP_PARAM_DOUBLE, VP_PARAM_INT, VP_PARAM_BOOL, VP_PARAM_ENUM, VP_PARAM_SIZE, VP_PARAM_VEC3, VP_PARAM_PROFILE
} vp_param_type;

/* One row of the table, for code that walks the parameters (the Python binding, the docs). */
typedef struct {
    const char *name;
    vp_param_type type;
    size_t offset;      /* of the field in vp_params */
    double min, max;    /* valid range (min excluded with VP_PARAM_MIN_OPEN in flags) */
    int flags;
    const char *unit;   /* simulation units, "" for a pure number */
    const char *choices;/* ENUM: names of the values 0, 1, ... separated by spaces */
    const char *doc;    /* one line */
} vp_param_info;

enum {
#define VP_PARAM_X(name, ...) VP_PARAM_INDEX_##name,
    VP_PARAM_TABLE(VP_PARAM_X)
#undef VP_PARAM_X
    VP_PARAM_COUNT
};
extern const vp_param_info vp_param_table[VP_PARAM_COUNT];

/* Fill p with the defaults. */
void vp_params_init(vp_params *p);
/* VP_OK if every parameter of p is in its range, else VP_ERR_VALUE with a message naming the
 * first one that is not and its range in why (why_size bytes; why may be NULL). */
int vp_params_check(const vp_params *p, char *why, size_t why_size);
/* The same check for one value v of parameter `info` (a VEC3's component): range, finite,
 * whole for the integer kinds. */
int vp_param_check_value(const vp_param_info *info, double v, char *why, size_t why_size);
/* The check of a PROFILE parameter `info`: at most info->max points, finite heights strictly
 * increasing, finite values > 0. */
int vp_profile_check(const vp_param_info *info, const vp_profile *profile, char *why, size_t why_size);

typedef struct {
    vp_params params;
    double time;               /* simulated time */
    int64_t frame;             /* steps taken */
    vp_vortons vortons;
    vp_tracers tracers;
    vp_body *bodies; size_t n_bodies, n_bodies_allocated;
    vp_emitter *emitters; size_t n_emitters, n_emitters_allocated;
    uint64_t rng[4];           /* xoshiro256** state for emitters */
    /* derived, rebuilt each step */
    vp_grid grid;
    double *grid_velocity;     /* (nodes,3) */
    double *grid_jacobian;     /* (nodes,9) */
    double *grid_density;      /* (nodes,)  density deviation */
    double *grid_density_gradient; /* (nodes,3); not computed while density_flat */
    int density_flat;          /* every vorton at the ambient density this step: the density
                                  grid is zero, its gradient too (left uncomputed) */
    size_t grid_allocated;     /* nodes the grid arrays can hold */
    float *cell_velocity;      /* (cells,8,4) float32: per cell the 8 coefficients of the trilinear
                                  polynomial of [u v w density], for the tracers (advect.c) */
    size_t cell_allocated;     /* cells cell_velocity can hold */
    double *midpoint_work;     /* rk2: the start state's vortons (x, w) and grid fields (velocity, Jacobian) */
    size_t midpoint_allocated; /* doubles */
    double *scratch;           /* a phase's scratch (workspace.c; diffusion: 17 doubles a vorton), kept between steps */
    size_t scratch_allocated;
    vp_tree *tree;
    struct vp_poisson *poisson; /* poisson solver cache (poisson.c): FFT plans, work arrays and the
                                   kernel transform, kept while the padded grid shape and core ratio hold */
    struct vp_lattice **lattices; /* per body: the physical coupling's lattice (penalize.c), or NULL */
    size_t n_lattices_allocated;
    double timings[VP_PHASE_COUNT]; /* ms per phase of the last step */
    double max_rate;           /* largest |grad u| (Frobenius, 1/time) at the last solve (rk2: the larger of its two) */
    int substeps;              /* substeps the last step took (sim.c: stability guard) */
    int pse_substeps;          /* PSE exchanges of the last diffusion phase (diffuse.c) */
    int in_substep;            /* internal: 1 while a step runs as substeps but the last */
    uint64_t interactions;     /* velocity-solver interactions of the last step */
    int failed_phase;          /* phase where the last step failed (a non-finite value appeared), or -1 */
    double *backup;            /* rollback copy of the particle arrays (params.rollback) */
    size_t backup_allocated;   /* doubles */
    vp_body *backup_bodies; size_t backup_bodies_allocated;
    vp_emitter *backup_emitters; size_t backup_emitters_allocated;
} vp_sim;

/* The threads a phase's parallel regions use: params.threads (1 when built without OpenMP:
 * every phase then runs on the calling thread, and code that splits work by this count must
 * not expect a team). */
static inline int vp_threads(const vp_sim *s)
{
#ifdef _OPENMP
    return s->params.threads;
#else
    (void)s;
    return 1;
#endif
}

/* A new simulation with parameters p; NULL if out of memory or p fails vp_params_check. */
vp_sim *vp_sim_create(const vp_params *p);
/* Replace the parameters (VP_ERR_VALUE, and nothing changed, if p fails vp_params_check). */
int vp_sim_set_params(vp_sim *s, const vp_params *p);
void vp_sim_free(vp_sim *s);
int vp_sim_step(vp_sim *s);
int vp_sim_add_vortons(vp_sim *s, size_t n, const double *pos, const double *vort,
                       const double *radius, const double *density);
int vp_sim_add_tracers(vp_sim *s, size_t n, const double *pos, const double *density);
int vp_sim_add_body(vp_sim *s, const vp_body *b);
int vp_sim_add_emitter(vp_sim *s, const vp_emitter *e);
int vp_sim_reserve_vortons(vp_sim *s, size_t n);
int vp_sim_reserve_tracers(vp_sim *s, size_t n);
/* Remove particles whose keep[i] == 0 (stable order). */
int vp_sim_compact_vortons(vp_sim *s, const unsigned char *keep);
/* Redistribute the vortons onto a regular lattice with the M4' kernel (remesh.c). */
int vp_sim_remesh(vp_sim *s);
int vp_sim_compact_tracers(vp_sim *s, const unsigned char *keep);
/* Remove the first k particles (kind 0: vortons, 1: tracers), as a compaction would. */
int vp_sim_drop_front(vp_sim *s, int kind, size_t k);
/* Build the domain grid and velocity field from the current vortons (phases 1-2). */
int vp_sim_update_velocity_grid(vp_sim *s);
/* Velocity at arbitrary points, by the sim's solver evaluated directly (not the grid). */
int vp_sim_velocity_at(vp_sim *s, size_t m, const double *points, double *vel);
/* Fluid-body boundary conditions, momentum exchange and conduction (method step 7). */
int vp_sim_collide(vp_sim *s);

/* Diagnostics (docs/validation.md): sums over vortons, about the given origin. */
typedef struct {
    double circulation[3];     /* sum a_i */
    double linear_impulse[3];  /* 1/2 sum x_i x a_i   (fluid momentum / rho0) */
    double angular_impulse[3]; /* 1/3 sum x_i x (x_i x a_i) */
    double enstrophy;          /* sum |w_i|^2 V_i */
    double heat;               /* heat above the ambient's: sum C_i (T_i - 1) over vortons + sum Cb (Tb - 1)
                                  over bodies (the conserved total: ambient fluid, vorton or not, adds 0) */
    double fluid_heat;         /* vortons only */
    double mass_deviation;     /* sum d_i V_i */
    double kinetic_energy;     /* 1/2 rho0 sum |u_i|^2 V_i with u from the last advection */
    double interior_momentum[3], interior_angular_momentum[3]; /* the bodies' insides, moving with
                                  them under the physical coupling: rho0 V U, rho0 V (c x U + 2/5 R^2 W) */
} vp_diagnostics;
void vp_sim_diagnostics(const vp_sim *s, const double origin[3], vp_diagnostics *d);

/* Temperature from density deviation: ideal gas at constant pressure (docs/method.md, the state). */
static inline double vp_temperature_from_density(double rho0, double d) { return rho0 / (rho0 + d); }
static inline double vp_density_from_temperature(double rho0, double T) { return rho0 / T - rho0; }
/* T - 1, the temperature above the ambient's, at density deviation d (exact for small d, where
 * T - 1 would cancel): a vorton's heat above the ambient's is C V (T - 1). */
static inline double vp_excess_temperature(double rho0, double d) { return -d / (rho0 + d); }

/* The ambient fluid (method step 4, background stratification; ambient.c).  Its density at x:
 * params.stratification at the height along -gravity (along z without gravity), or
 * ambient_density without a stratification. */
double vp_ambient_density(const vp_params *p, const double x[3]);
/* The ambient's density less ambient_density at n points x (n,3): the density deviation that a
 * particle of ambient fluid there stores (0 without a stratification). */
void vp_ambient_deviation(const vp_params *p, size_t n, const double *x, double *out);
/* The mean ambient density over the ball of centre c and radius R, exact (the profile is
 * linear between its points): a body's displaced ambient fluid. */
double vp_ambient_ball_mean(const vp_params *p, const double c[3], double R);

/* Random numbers (xoshiro256**), deterministic and saved with the state. */
void vp_rng_seed(uint64_t st[4], uint64_t seed);
double vp_rng_uniform(uint64_t st[4]); /* [0,1) */

double vp_now_ms(void);

#ifdef __cplusplus
}
#endif
#endif
