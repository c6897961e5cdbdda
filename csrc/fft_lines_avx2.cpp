/* fft_lines_avx2.cpp: the eight-line transforms compiled for AVX2 + FMA (x86-64 with GCC;
 * elsewhere this file is empty and fft_lines.cpp uses its baseline copy). */
#include "fft_lines.h"
#if VP_FFT_HAVE_AVX2
#define VP_FFT_AVX2 1
#define VP_FFT_FN(name) vp_fft_avx2_##name
#include "fft_lines_impl.hpp"
#endif
