/* fft_lines_impl.hpp: the body of fft_lines.cpp and fft_lines_avx2.cpp, which include it once
 * each with VP_FFT_FN naming their functions (the second with VP_FFT_AVX2 defined, for the AVX2
 * + FMA target).
 *
 * pocketfft's header is included inside an anonymous namespace, so each file gets its own
 * copy of every transform (internal linkage): the linker cannot merge the AVX2 copy into the
 * baseline one.  The standard headers it uses are included first, outside the namespace and
 * before any target pragma, so they stay shared and baseline. */
#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <vector>

#include "fft_lines.h"

#ifdef VP_FFT_AVX2
#pragma GCC target("avx2,fma")
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi" /* 32-byte vectors in the baseline file: internal only */
#endif

#define POCKETFFT_NO_MULTITHREADING
#define POCKETFFT_CACHE_SIZE 0
namespace {
#include "pocketfft/pocketfft_hdronly.h"

typedef float v8f __attribute__((vector_size(32)));
static_assert(VP_FFT_LANES == 8, "eight lanes of an 8-float vector");

/* The transforms run on the CPU's own vector width VL (pocketfft's VLEN: 8 floats with AVX,
 * 4 with SSE2 or NEON, 1 without vectors).  At VL = 8 a buffer is used as it is; narrower,
 * its eight lanes go through in VL-lane slices copied to a scratch line, since wider vectors
 * than the hardware's are lowered to slow code. */
#ifdef VP_FFT_AVX2
constexpr size_t VL = 8; /* (the target pragma does not reach pocketfft's VLEN, set from __AVX__) */
#else
constexpr size_t VL = pocketfft::detail::VLEN<float>::val;
#endif
template <size_t W> struct lane { typedef float type __attribute__((vector_size(W * sizeof(float)))); };
template <> struct lane<1> { typedef float type; };
typedef lane<VL < 8 ? VL : 8>::type vl_t;
static_assert(VL >= 8 || 8 % VL == 0, "lane slices");

/* One transform of lines packed as T (real: n values; complex: n (re, im) pairs). */
template <class T> void run(const pocketfft::detail::pocketfft_r<float> *plan, T *d, bool fwd) { plan->exec(d, 1.0f, fwd); }
template <class T> void run(const pocketfft::detail::pocketfft_c<float> *plan, T *d, bool fwd)
{
    plan->exec(reinterpret_cast<pocketfft::detail::cmplx<T> *>(d), 1.0f, fwd);
}

template <class Plan> void exec_sliced(const Plan *plan, bool real, float *buf, bool forward)
{
    const size_t n = plan->length(), W = sizeof(vl_t) / sizeof(float);
    if (W == 8) { run(plan, reinterpret_cast<v8f *>(buf), forward); return; }
    const size_t rec = real ? 8 : 16, parts = real ? 1 : 2; /* floats per record; re (and im) */
    std::vector<vl_t> tmp(parts * n);
    for (size_t s0 = 0; s0 < 8; s0 += W) {
        for (size_t t = 0; t < n; t++)
            for (size_t q = 0; q < parts; q++) std::memcpy(&tmp[parts * t + q], buf + rec * t + 8 * q + s0, sizeof(vl_t));
        run(plan, tmp.data(), forward);
        for (size_t t = 0; t < n; t++)
            for (size_t q = 0; q < parts; q++) std::memcpy(buf + rec * t + 8 * q + s0, &tmp[parts * t + q], sizeof(vl_t));
    }
}
}

extern "C" void *VP_FFT_FN(new)(size_t n, int real)
{
    try {
        if (real) return new pocketfft::detail::pocketfft_r<float>(n);
        return new pocketfft::detail::pocketfft_c<float>(n);
    } catch (...) {
        return nullptr;
    }
}

extern "C" void VP_FFT_FN(free)(void *plan, int real)
{
    if (real) delete static_cast<pocketfft::detail::pocketfft_r<float> *>(plan);
    else delete static_cast<pocketfft::detail::pocketfft_c<float> *>(plan);
}

extern "C" int VP_FFT_FN(exec)(const void *plan, int real, float *buf, int forward)
{
    try {
        if (real) exec_sliced(static_cast<const pocketfft::detail::pocketfft_r<float> *>(plan), true, buf, forward != 0);
        else exec_sliced(static_cast<const pocketfft::detail::pocketfft_c<float> *>(plan), false, buf, forward != 0);
        return 0;
    } catch (...) {
        return 1;
    }
}
