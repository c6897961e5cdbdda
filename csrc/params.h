/* params.h: the simulation parameters, each written once.
 *
 * VP_PARAM_TABLE lists every parameter of vp_params as
 *     X(name, type, default, min, max, flags, unit, choices, doc)
 * and is expanded for the struct's fields (vortonpy.h), the defaults (vp_params_init), the
 * range check (vp_params_check), the metadata table (vp_param_table: module.c's generic
 * getters and setters and vortonpy._core.PARAMETERS, from which the Python signature, the
 * stubs and the docs are generated).
 *   type     DOUBLE (double), INT (int), BOOL (int 0/1), ENUM (int 0..n-1 naming `choices`),
 *            SIZE (size_t), VEC3 (double[3]; default written (x, y, z)), PROFILE (vp_profile:
 *            (height, value) points; default written as its number of points, 0)
 *   min, max the valid range, inclusive unless flags has VP_PARAM_MIN_OPEN (min excluded);
 *            every double must also be finite (VEC3: each component, min/max unused; PROFILE:
 *            min, max bound the number of points, vp_profile_check the points)
 *   unit     in simulation units ("" for a pure number); temperature is relative (ambient 1)
 *   choices  ENUM: the names of values 0, 1, ... separated by spaces; "" otherwise
 *   doc      one line for the docstring, the stubs and the docs
 * Order: the parameters of the documented ten-line API first, then the advanced ones. */
#ifndef VP_PARAMS_H
#define VP_PARAMS_H

#define VP_PARAM_MIN_OPEN 1

/* A function of height given by points, linear between them and constant beyond the ends
 * (the stratification: ambient density against height along -gravity, method step 4). */
#define VP_PROFILE_MAX 16
typedef struct {
    int n;                          /* points in use (0: none) */
    double height[VP_PROFILE_MAX];  /* strictly increasing [length] */
    double value[VP_PROFILE_MAX];   /* the function's value at each height */
} vp_profile;

#define VP_PARAM_TABLE(X)                                                                                     \
    X(dt, DOUBLE, 1.0 / 30.0, 0, INFINITY, VP_PARAM_MIN_OPEN, "time", "",                                    \
      "time step")                                                                                           \
    X(viscosity, DOUBLE, 0.01, 0, INFINITY, 0, "length^2/time", "",                                          \
      "kinematic viscosity nu")                                                                              \
    X(thermal_diffusivity, DOUBLE, 1e-4, 0, INFINITY, 0, "length^2/time", "",                                \
      "thermal diffusivity kappa")                                                                           \
    X(ambient_density, DOUBLE, 1.0, 0, INFINITY, VP_PARAM_MIN_OPEN, "mass/length^3", "",                     \
      "density rho0 of the ambient fluid (particle densities are deviations from it)")                      \
    X(gravity, VEC3, (0.0, 0.0, -10.0), 0, 0, 0, "length/time^2", "",                                        \
      "gravitational acceleration g (on by default: heavy fluid and bodies fall)")                          \
    X(stratification, PROFILE, 0, 0, VP_PROFILE_MAX, 0, "length, mass/length^3", "",                        \
      "ambient density against height along -gravity: (height, density) points, linear between, "          \
      "constant beyond the ends (None: ambient_density everywhere)")                                       \
    X(solver, ENUM, VP_SOLVER_AUTO, 0, VP_SOLVER_AUTO, 0, "", "direct tree poisson auto",                    \
      "velocity solver: direct (O(N^2) reference), tree (supervortons), poisson (vortex-in-cell), "         \
      "auto (poisson from 1000 vortons up, else the tree)")                                                \
    X(threads, INT, 1, 1, 1024, 0, "", "",                                                                   \
      "OpenMP threads (None: every core)")                                                                   \
    X(fluid_heat_capacity, DOUBLE, 1.0, 0, INFINITY, VP_PARAM_MIN_OPEN, "heat/length^3", "",                 \
      "heat capacity per unit volume of fluid (a vorton holds this times its volume)")                      \
    X(tree_theta, DOUBLE, 0.4, 0, 2.0, 0, "", "",                                                            \
      "tree opening angle: smaller is more exact (0: the direct sum; 0.4: about 1e-3 relative error)")      \
    X(tree_leaf_size, INT, 16, 1, 4096, 0, "", "",                                                           \
      "vortons per tree leaf")                                                                               \
    X(grid_cells_per_vorton, DOUBLE, 1.0, 0, 1e4, VP_PARAM_MIN_OPEN, "", "",                                 \
      "grid cells per vorton (1: stable long runs; 4 is more accurate short-term, but noisy flows blow up)") \
    X(grid_max_points, SIZE, 4194304, 27, 1e10, 0, "", "",                                                   \
      "upper bound on grid nodes (open-boundary safety)")                                                    \
    X(pse_width, DOUBLE, 1.0, 0, 100, VP_PARAM_MIN_OPEN, "", "",                                             \
      "PSE kernel width as a multiple of the particle spacing")                                              \
    X(pse_cutoff, DOUBLE, 3.0, 1, 4, 0, "", "",                                                              \
      "PSE pairs farther apart than this many kernel widths are ignored")                                   \
    X(smagorinsky, DOUBLE, 0.0, 0, 1.0, 0, "", "",                                                           \
      "Smagorinsky coefficient C_s: eddy viscosity nu + (C_s spacing)^2 |strain| (0: off)")                 \
    X(body_coupling, ENUM, VP_COUPLING_PHYSICAL, 0, VP_COUPLING_ARTICLES, 0, "", "physical articles",        \
      "how bodies and fluid interact: physical (no-slip on the whole surface, forces from the momentum "   \
      "the fluid gains) or articles (the seed articles' contact rule)")                                     \
    X(body_resolution, DOUBLE, 4.0, 1.5, 64, 0, "", "",                                                      \
      "physical coupling: lattice cells per body radius (accuracy against cost)")                           \
    X(contact_blend, DOUBLE, 0.2, 0, 1.0, VP_PARAM_MIN_OPEN, "", "",                                         \
      "articles' rule: fraction of the way to a body's boundary vorticity taken per step (1: at once)")     \
    X(vorton_lifetime, DOUBLE, 0.0, 0, INFINITY, 0, "time", "",                                              \
      "vortons older than this are removed, in batches at most ~3% late (0: never)")                        \
    X(tracer_lifetime, DOUBLE, 0.0, 0, INFINITY, 0, "time", "",                                              \
      "tracers older than this are removed, in batches at most ~3% late (0: never)")                        \
    X(advect_order, INT, 2, 1, 2, 0, "", "",                                                                 \
      "1: explicit Euler (as the seeds); 2: Heun in the frozen grid velocity")                               \
    X(integrator, ENUM, VP_INTEGRATOR_FROZEN, 0, VP_INTEGRATOR_RK2, 0, "", "frozen rk2",                       \
      "time stepping: frozen (the step's start velocity field, one solve) or rk2 (a second solve at "      \
      "the predicted end, the two fields averaged: second order in time, ~2x the velocity phase)")          \
    X(stretch, BOOL, 1, 0, 1, 0, "", "",                                                                     \
      "vortex stretching and tilting (off: for tests)")                                                      \
    X(stretch_form, ENUM, VP_STRETCH_CLASSICAL, 0, VP_STRETCH_TRANSPOSE, 0, "", "classical transpose",        \
      "stretching as (w . grad) u = J w (classical) or J^T w (transpose: keeps a ring's impulse, with rk2)")  \
    X(baroclinic, BOOL, 1, 0, 1, 0, "", "",                                                                  \
      "baroclinic vorticity generation (off: density is a passive dye)")                                     \
    X(rollback, BOOL, 0, 0, 1, 0, "", "",                                                                    \
      "copy the state before each step: a step that fails leaves the state as it was")                      \
    X(remesh_interval, INT, 0, 0, 1e9, 0, "frames", "",                                                      \
      "frames between remeshings of the vortons onto a lattice (0: never)")                                  \
    X(remesh_threshold, DOUBLE, 0.05, 0, 1.0, 0, "", "",                                                     \
      "remeshing merges lattice nodes weaker than this fraction of the strongest into the others")         \
    X(max_rate_dt, DOUBLE, 1.0, 0, INFINITY, 0, "", "",                                                      \
      "a step whose largest |grad u| dt exceeds this runs as substeps (0: never)")                           \
    X(max_substeps, INT, 8, 1, 1024, 0, "", "",                                                              \
      "most substeps per step")

/* the C type of each kind of parameter */
#define VP_PARAM_FIELD_DOUBLE(name) double name;
#define VP_PARAM_FIELD_INT(name) int name;
#define VP_PARAM_FIELD_BOOL(name) int name;
#define VP_PARAM_FIELD_ENUM(name) int name;
#define VP_PARAM_FIELD_SIZE(name) size_t name;
#define VP_PARAM_FIELD_VEC3(name) double name[3];
#define VP_PARAM_FIELD_PROFILE(name) vp_profile name;

#endif
