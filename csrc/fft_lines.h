/* fft_lines.h: 1D FFTs of eight lines at once, one line in each lane of an 8-float vector
 * (pocketfft's C++ transforms on vector data: every butterfly works on eight lines).  float32:
 * twice the lines per AVX2 instruction of four-double lanes; the poisson solver's rounding
 * (~1e-6 of the field) stays far below its discretisation error (poisson.c).
 *
 * A buffer for a length-n transform holds n positions t, each a record of the eight lines:
 *   complex: [re0 .. re7 im0 .. im7] (16 floats per t),
 *   real:    [x0 .. x7] (8 floats per t),
 * 32-byte aligned.  Transforms are in place and unnormalised (a forward then a backward
 * transform multiplies by n).  Real forward transforms write FFTPACK's half-complex order,
 * r0, r1, i1, r2, i2, ..., (r_{n/2} for even n), per lane; the backward transform reads it.
 *
 * The transforms are compiled twice, for AVX2 + FMA and for the baseline; a plan uses the
 * best the CPU has (cpu.h).  Plain C interface; the implementation is C++ (fft_lines*.cpp). */
#ifndef VP_FFT_LINES_H
#define VP_FFT_LINES_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

#define VP_FFT_LANES 8

/* Whether fft_lines_avx2.cpp compiles its copy (GCC on x86; the condition of VP_CLONES). */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__)) && !defined(VP_NO_CLONES)
#define VP_FFT_HAVE_AVX2 1
#else
#define VP_FFT_HAVE_AVX2 0
#endif

typedef struct vp_fft vp_fft;

/* A plan for length n (real: 1 for real transforms, 0 for complex); NULL when out of memory. */
vp_fft *vp_fft_new(size_t n, int real);
void vp_fft_free(vp_fft *p);
/* Transform the eight lines of buf (layout above); nonzero when out of memory. */
int vp_fft_exec(const vp_fft *p, float *buf, int forward);
/* "avx2" or "baseline": the code the plans run (benchmarks and diagnostics). */
const char *vp_fft_isa(void);

/* In place on dims[0] x dims[1] x dims[2] doubles (x fastest): DCT-I along the axes other
 * than odd_axis (0, 1, 2: x, y, z), DST-I along odd_axis over its points 1 .. dims - 2
 * (pocketfft's unnormalised r2r transforms: with n = N/2 + 1 points of a function on a
 * periodic lattice of N that is even (odd) about 0 and N/2, they give its DFT, times -i for
 * the odd axis).  The poisson kernel's transform (poisson.c).  Nonzero when out of memory. */
int vp_fft_kernel_octant(double *data, const size_t dims[3], int odd_axis);

#ifdef __cplusplus
}
#endif
#endif
