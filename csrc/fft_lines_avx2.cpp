/* fft_lines_avx2.cpp: the four-line transforms compiled for AVX2 + FMA (x86-64 with GCC;
 * elsewhere this file is empty and fft_lines.cpp uses its baseline copy). */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__)) && !defined(VP_NO_CLONES)
#define VP_FFT_AVX2 1
#define VP_FFT_FN(name) vp_fft_avx2_##name
#include "fft_lines_impl.hpp"
#endif
