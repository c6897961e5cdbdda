/* internal.h: the step's phase functions, shared between the core's files (not public). */
#ifndef VP_INTERNAL_H
#define VP_INTERNAL_H
#include <stdlib.h>
#include "vortonpy.h"
#include "cpu.h"

/* Four doubles in one AVX register (GCC/clang vector extension; lowered to SSE pairs in the
 * baseline clones): PSE's pair records, the FFT lines' lane records. */
typedef double vp_v4d __attribute__((vector_size(32)));

/* Hot kernels are compiled three times, for AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3) and
 * the baseline, and the loader picks the best the CPU has (GCC function multiversioning), so
 * a portable build still uses the wide units.  VP_NO_CLONES turns it off.  GCC 12 or later:
 * the x86-64-vN levels in target_clones and __builtin_cpu_supports came with GCC 12 (an
 * older GCC builds the portable code). */
#if defined(__GNUC__) && __GNUC__ >= 12 && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__) && \
    !defined(VP_NO_CLONES)
#define VP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VP_CLONES
#endif

/* GCC on x86-64 with the clones: the kernels that choose their code at run time by the CPU's
 * level (cpu.h: PSE's packing) are compiled; elsewhere only their portable paths. */
#if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && !defined(VP_NO_CLONES)
#define VP_X86_DISPATCH 1
#endif

/* The end of block b of `block` items out of n: the parallel loops hand cloned range
 * functions [b * block, vp_block_end(b, block, n)). */
static inline long vp_block_end(long b, long block, long n) { return (b + 1) * block < n ? (b + 1) * block : n; }

/* The block size of a parallel loop over n items handed out by schedule(dynamic, 1): about
 * VP_BLOCKS_PER_THREAD blocks a thread, so that a thread slowed by other work on its core
 * leaves its blocks to the others, and a multiple of `least`: a kernel's own block, and at
 * least ~50 us of work (waking a sleeping thread costs tens of microseconds, and every region
 * is a point where a thread the system has set aside holds up the others), so that a loop of
 * one block runs without a region. */
#define VP_BLOCKS_PER_THREAD 8
static inline long vp_block_size(long n, int threads, long least)
{
    const long b = n / (VP_BLOCKS_PER_THREAD * (threads > 1 ? threads : 1));
    return b > least ? (b + least - 1) / least * least : least;
}

/* The step's phases, in docs/method.md's order (each returns a vp_status). */
int vp_domain_update(vp_sim *s);                 /* 2.1 domain.c */
int vp_velocity_grid(vp_sim *s);                 /* 2.2 velocity.c */
int vp_stretch(vp_sim *s);                       /* 2.3 stretch.c */
int vp_density_grid(vp_sim *s);                  /* 2.4 buoyancy.c: the density grid and its gradient */
int vp_baroclinic(vp_sim *s);                    /* 2.4 buoyancy.c */
int vp_diffuse(vp_sim *s);                       /* 2.5 diffuse.c */
int vp_pse_drifts(const vp_sim *s);              /* whether vp_diffuse moves vortons (its drift) */
int vp_diffuse_stratified(vp_sim *s);            /* 2.5 ambient.c: with a stratification, over the ambient's profile */
int vp_advect_vortons(vp_sim *s);                /* 2.6 advect.c */
int vp_advect_tracers(vp_sim *s, int *projected); /* 2.6 advect.c (and 2.7's tracer contact) */
int vp_collide(vp_sim *s, int tracers);          /* 2.7 contact.c, the articles' rule; tracers: also project the tracers */
int vp_bodies_penalize(vp_sim *s, int tracers);
/* remesh.c: densities for lattice nodes idx[0..nk) of volume V from their splatted density
 * mass (dens, in; the density deviation, out) and heat sum V (T - 1) (heat, clobbered), keeping
 * the totals M and E exactly and every temperature within [Tlo, Thi]; 1 if they cannot. */
int vp_lattice_densities(size_t nk, const size_t *idx, double *dens, double *heat, double V, double rho0, double M,
                         double E, double Tlo, double Thi);  /* 2.7 penalize.c, the physical rule; tracers: also project them */
void vp_bodies_project_tracers(vp_sim *s);       /* 2.7 contact.c: tracers inside a body to its surface */
void vp_sim_lattices_free(vp_sim *s);            /* penalize.c: the physical rule's per-body lattices */
int vp_bodies_buoyancy(vp_sim *s);               /* 2.8 buoyancy.c */
int vp_bodies_integrate(vp_sim *s);              /* 2.9 body.c */
int vp_expire(vp_sim *s);                        /* 2.10 emit.c: lifetimes */
int vp_emit(vp_sim *s);                          /* 2.10 emit.c */

/* The solvers behind the velocity phase (velocity.c dispatches). */
int vp_velocity_solve(vp_sim *s, size_t m, const double *pts, double *vel, int solver); /* direct or tree at points */
int vp_auto_solver(size_t n, size_t nodes);      /* the solver 'auto' picks */
int vp_poisson_velocity_grid(vp_sim *s);         /* poisson.c (vortex-in-cell) */
void vp_poisson_free(struct vp_poisson *p);      /* the solver's cache (NULL: no-op) */

/* The robust limits of the vortons' positions (and with_tracers the tracers'): beyond them a
 * particle is an outlier (domain.c, method step 1); on the sim's threads, or (_serial) on
 * the calling thread alone, inside a parallel region beside other work. */
void vp_robust_limits(const vp_sim *s, double lim_lo[3], double lim_hi[3]);
/* At least `doubles` doubles of the sim's scratch memory (workspace.c); NULL when out of memory. */
double *vp_sim_scratch(vp_sim *s, size_t doubles);
/* Room for item n of `size` bytes in *array (workspace.c); *n_allocated grows by doubling. */
int vp_array_grow(void **array, size_t n, size_t *n_allocated, size_t size);
/* Points binned into a box of cells by a counting sort (grid.c): box c = i + nc0 (j + nc1 k)
 * holds points order[start[c]] .. order[start[c+1] - 1]. */
typedef struct { int nc[3]; double lo[3], cell, inv; size_t *start, *order; } vp_bins;
/* The cell along axis a of a point at offset d = x[a] - lo[a] from the box's corner, clamped
 * to the box (outliers go to the edge cells; NaN to cell 0): the binning of vp_bins_build, for
 * callers that must find a point's cell again.  d times 1 / cell (inv), not d / cell: three
 * divisions a point were most of the binning's time (the cells are the same for every
 * caller, which is all a cell list needs). */
static inline int vp_bins_cell(const vp_bins *b, int a, double d)
{
    double u = d * b->inv;
    return u > 0 ? (u < b->nc[a] - 1 ? (int)u : b->nc[a] - 1) : 0;
}
/* Cells of side `cell` over a span: span / cell + 1, clamped before the int cast (a far outlier
 * over a small cell overflowed it) to 1 .. 1e9; NaN (0 / 0) gives 1. */
static inline int vp_cell_count(double span, double cell)
{
    const double q = span / cell;
    return q >= 0 && q < 1e9 ? (int)q + 1 : (q >= 1e9 ? 1000000000 : 1);
}
#define VP_BINS_PARALLEL_MIN 16384 /* points, below which vp_bins_build sorts on one thread */
int vp_bins_build(vp_bins *b, size_t n, const double *x, const double lo[3], const double hi[3], double cell,
                  double max_cells, int threads);
void vp_bins_free(vp_bins *b);
#endif
