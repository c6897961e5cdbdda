/* cpu.h: which hand-written SIMD path this CPU runs, decided once per process.
 *
 * The physics files call plain functions; where a kernel has an AVX2 or AVX-512 version,
 * it asks vp_cpu_level() which one to take.  VORTONPY_PORTABLE=1 in the environment forces
 * the portable C path everywhere: the tests compare the paths that way, in child processes.
 * (GCC's target_clones pick their own clone at load time and are not affected.) */
#ifndef VP_CPU_H
#define VP_CPU_H

enum { VP_CPU_PORTABLE = 0, VP_CPU_AVX2 = 1, VP_CPU_AVX512 = 2 };

/* VP_CPU_AVX512 on x86-64-v4 CPUs, VP_CPU_AVX2 on x86-64-v3 ones (AVX2 and FMA),
 * VP_CPU_PORTABLE elsewhere, on builds without the x86 dispatch, or with VORTONPY_PORTABLE set. */
int vp_cpu_level(void);

#endif
