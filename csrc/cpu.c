/* cpu.c: the run-time choice of SIMD path (cpu.h). */
#include <stdlib.h>
#include "cpu.h"

#if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && !defined(VP_NO_CLONES)
#define VP_CPU_X86 1
#endif

static int detect(void)
{
    const char *v = getenv("VORTONPY_PORTABLE");
    if (v && *v && *v != '0') return VP_CPU_PORTABLE;
#ifdef VP_CPU_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return VP_CPU_AVX512;
    if (__builtin_cpu_supports("x86-64-v3")) return VP_CPU_AVX2;
#endif
    return VP_CPU_PORTABLE;
}

int vp_cpu_level(void)
{
    /* threads racing to fill the cache store the same value */
    static int level = -1;
    int c = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (c < 0) {
        c = detect();
        __atomic_store_n(&level, c, __ATOMIC_RELAXED);
    }
    return c;
}
