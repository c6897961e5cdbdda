/* fft_lines.cpp: plans and dispatch for fft_lines.h.  This file holds the baseline copy of the
 * transforms; fft_lines_avx2.cpp the AVX2 + FMA copy, used when the CPU has both. */
#define VP_FFT_FN(name) vp_fft_base_##name
#include "fft_lines_impl.hpp"
extern "C" {
#include "cpu.h"
}

#if VP_FFT_HAVE_AVX2
extern "C" void *vp_fft_avx2_new(size_t n, int real);
extern "C" void vp_fft_avx2_free(void *plan, int real);
extern "C" int vp_fft_avx2_exec(const void *plan, int real, float *buf, int forward);
#endif

struct vp_fft {
    int avx2, real;
    void *plan;
};

/* The AVX2 copy where the CPU has AVX2 and FMA (x86-64-v3 or better, cpu.h), unless
 * VORTONPY_PORTABLE=1 forces the baseline copy. */
static int cpu_has_avx2(void)
{
#if VP_FFT_HAVE_AVX2
    return vp_cpu_level() >= VP_CPU_AVX2;
#else
    return 0;
#endif
}

extern "C" vp_fft *vp_fft_new(size_t n, int real)
{
    vp_fft *p = static_cast<vp_fft *>(std::malloc(sizeof(vp_fft)));
    if (!p) return nullptr;
    p->avx2 = cpu_has_avx2();
    p->real = real != 0;
#if VP_FFT_HAVE_AVX2
    p->plan = p->avx2 ? vp_fft_avx2_new(n, p->real) : vp_fft_base_new(n, p->real);
#else
    p->plan = vp_fft_base_new(n, p->real);
#endif
    if (!p->plan) { std::free(p); return nullptr; }
    return p;
}

extern "C" void vp_fft_free(vp_fft *p)
{
    if (!p) return;
#if VP_FFT_HAVE_AVX2
    if (p->avx2) vp_fft_avx2_free(p->plan, p->real);
    else
#endif
        vp_fft_base_free(p->plan, p->real);
    std::free(p);
}

extern "C" int vp_fft_exec(const vp_fft *p, float *buf, int forward)
{
#if VP_FFT_HAVE_AVX2
    if (p->avx2) return vp_fft_avx2_exec(p->plan, p->real, buf, forward);
#endif
    return vp_fft_base_exec(p->plan, p->real, buf, forward);
}

extern "C" const char *vp_fft_isa(void) { return cpu_has_avx2() ? "avx2" : "baseline"; }

/* The poisson kernel's transform on one octant (fft_lines.h): DCT-I along the two axes in
 * which the data are even, DST-I along the odd one over its interior points (pocketfft's
 * unnormalised transforms, in double), in place.  Nonzero when out of memory. */
extern "C" int vp_fft_kernel_octant(double *data, const size_t dims[3], int odd_axis)
{
    try {
        /* C order: z slowest, x fastest */
        pocketfft::shape_t shape{dims[2], dims[1], dims[0]};
        const ptrdiff_t sd = static_cast<ptrdiff_t>(sizeof(double));
        pocketfft::stride_t st{static_cast<ptrdiff_t>(dims[1] * dims[0]) * sd, static_cast<ptrdiff_t>(dims[0]) * sd, sd};
        const size_t odd = static_cast<size_t>(2 - odd_axis);
        pocketfft::shape_t even;
        for (size_t a = 0; a < 3; a++)
            if (a != odd && shape[a] > 1) even.push_back(a);
        if (!even.empty()) pocketfft::dct<double>(shape, st, st, even, 1, data, data, 1.0, false, 1);
        if (shape[odd] > 2) {
            pocketfft::shape_t inner = shape;
            inner[odd] = shape[odd] - 2;
            double *d1 = data + st[odd] / sd; /* the interior starts one point in */
            pocketfft::dst<double>(inner, st, st, pocketfft::shape_t{odd}, 1, d1, d1, 1.0, false, 1);
        }
        return 0;
    } catch (...) {
        return 1;
    }
}
