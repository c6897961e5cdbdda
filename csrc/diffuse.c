/* diffuse.c: viscous and thermal diffusion by particle strength exchange (physics.md 2.5,
 * Degond and Mas-Gallic 1989), both in one neighbour traversal:
 *   dq_i/dt = k sum_j (q_j - q_i) eta_e(x_i - x_j) V_j / e^2,
 *   eta_e(x) = 4 / (pi^1.5 e^3) exp(-|x|^2 / e^2)   (second moments 2: a Laplacian),
 * with q = vorticity (k = nu) and q = temperature (k = kappa; density follows from it).
 * Vorticity diffuses with nu_ij = (nu_i + nu_j) / 2, nu_i = nu + (C_s D_i)^2 |S_i|: the
 * molecular viscosity plus Smagorinsky's subgrid eddy viscosity (Smagorinsky 1963; for vortex
 * particles, Cottet 1996 and Winckelmans 2004), D_i the vorton spacing V^(1/3), |S| =
 * sqrt(2 S:S) the strain rate from the grid Jacobian.  Without it the energy that cascades
 * below the vorton spacing has nowhere to go: classical stretching then amplifies particle-
 * scale noise until it blows up (the seeds halved the stretching rate instead).  nu_i is
 * capped at 0.1 D_i^2 / dt, inside the explicit scheme's stability limit (4 nu dt / e^2 < 1).
 * e_ij is pse_width times the mean particle spacing V^(1/3) of the pair, so the kernel is
 * symmetric and every pair exchange is equal and opposite: sum a_i and sum C_i T_i are
 * conserved to rounding.  Pairs beyond pse_cutoff * e (default 3) are skipped, and the
 * kernel is renormalised for the cut so its second moment stays exactly 2.  The scheme needs the
 * particles to overlap: spacing at most about e (pse_width >= 1 on a lattice of spacing
 * V^(1/3)); a sparser set under-resolves the Laplacian and diffuses too slowly.
 * Each pair is evaluated once and its exchange added to both particles; the work is split
 * into planes of cells coloured so that no two planes running together write to the same
 * particle, so it is race-free and every sum is taken in a fixed order: the result is
 * bitwise the same for any thread count. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include "internal.h"
#include "kernel.h"
#include "grid_inline.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* 2^x in float32 for -24 <= x <= 0, the PSE pair weight exp(-r^2/e^2) = 2^(-log2(e) r^2/e^2)
 * (cutoffs up to 4 e: x >= -23.1).  Cody and Waite's split: x = k + f with k the nearest
 * integer (adding 1.5 2^23 rounds x to an integer in the low mantissa bits, so k's bits come
 * from that sum), 2^f for |f| <= 1/2 by a degree-5 polynomial fitted to the relative error
 * (7.5e-8), and 2^k added to the exponent field.  Relative error of exp(-u) 6.4e-7 for
 * u <= 9 (mostly the rounding of x = -u log2(e)), far below the PSE quadrature error.  Ten
 * operations, all of which vectorise (the bit moves are plain integer lanes); the former
 * (exp(-u/16))^16 took fifteen, a chain four squarings longer, with 2e-6 error.  Used for the
 * pair weight only, a function of the pair's symmetric r^2 and e, so it is bitwise the same
 * from either side. */
static inline float vp_exp2_negf(float x)
{
    const float magic = 12582912.0f; /* 1.5 2^23 */
    const float t = x + magic, k = t - magic, f = x - k;
    float p = 1.327647129073739e-3f;
    p = p * f + 9.675540961325169e-3f;
    p = p * f + 5.550713092088699e-2f;
    p = p * f + 2.4022120237350464e-1f;
    p = p * f + 6.931469440460205e-1f;
    p = p * f + 1.0000001192092896f;
    uint32_t tb, pb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&pb, &p, sizeof pb);
    pb += (tb - 0x4B400000u) << 23; /* + k in the exponent: t's bits are magic's plus k */
    memcpy(&p, &pb, sizeof p);
    return p;
}
#define VP_LOG2E_F 1.44269504f

/* One vorton q against m candidate neighbours j (a contiguous batch), each pair once: with
 * the symmetric pair weight g = exp(-r^2/e_qj^2) / e_qj^3 (e_qj the pair's mean spacing; the
 * caller multiplies by the normalisation), q gains g V_j (a_j - a_q) and j gains
 * g V_q (a_q - a_j) for a = nu_qj w and for T: equal and opposite strength (w V) and heat
 * (T V) exchanges, so both are conserved to rounding.  The weight is computed in float32
 * (8 lanes; positions relative to the cell list's corner, so the differences keep ~1e-6 e)
 * from symmetric quantities only, so it is bitwise the same from either side.  Candidates
 * with K[j] <= kq (the query's own row at or before it: those pairs are taken from the other
 * side) and pairs beyond the cutoff get weight 0.  Only about a quarter of the candidates
 * are inside the cutoff, so the double-precision exchange runs over those alone: their
 * indices are packed into P, and each pair's exchange of (w_x, w_y, w_z, T) is one 4-double
 * vector (W4, O4: records of 4 per vorton), so it needs no gather across fields.  The batch
 * holds the float fields only: the double ones (V, W4, O4) are read and added to in the
 * cell list's sorted order, candidate j being sorted vorton GI[j] (copying them into the
 * batch and its sums back afterwards cost more than this indirection: diffusion 1.045x
 * faster over the scenes' states at 1 thread without the copies). */
enum { PSE_PAD = 16 };            /* the candidate loop's widest vector, in floats (a power of 2) */
/* diffuse_pass's exchange after the guard's corrections runs in parallel above this many
 * vortons (below, a parallel region of its own costs more than it saves) */
#define PSE_PARALLEL_MIN 512
/* vp_pse_pairs' two-pass form from this many candidates (AVX2) */
#define PSE_TWO_PASS_MIN 128
enum { PSE_NS = 13 }; /* diffuse_pass's sorted arrays (pse_sorted): doubles per vorton */

/* The packing of the nonzero weights' indices (vp_pse_pairs) by AVX-512's compress: 16
 * candidates a compare, a compress and a store, where the portable table lookup below takes
 * some forty operations.  Same indices, same order, so the same bits.  (The compress goes to
 * a register and then to memory: AMD's Zen 4 runs a compress straight to memory microcoded,
 * far slower.)  Used when the CPU has AVX-512F, unless VORTONPY_NO_AVX512 is set. */
#ifdef VP_X86_DISPATCH
#include <immintrin.h>
__attribute__((target("avx512f"))) static size_t pse_pack_avx512(const float *G, size_t mv, int32_t *P)
{
    size_t np = 0;
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    const __m512 zero = _mm512_setzero_ps();
    for (size_t j = 0; j < mv; j += 16) { /* mv: a multiple of PSE_PAD = 16; P has room for np + 16 */
        const __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(G + j), zero, _CMP_NEQ_UQ); /* as C's != */
        _mm512_storeu_si512((void *)(P + np), _mm512_maskz_compress_epi32(k, idx));
        np += (size_t)__builtin_popcount((unsigned)k);
        idx = _mm512_add_epi32(idx, step);
    }
    return np;
}
/* The same packing with AVX2, 8 candidates a step: a compare, a movemask, the mask's row of
 * set-bit positions (pse_pack_lut, 8 bytes) widened to 8 indices and stored, advanced by
 * the mask's population count.  The portable loop below took ~40 scalar operations per 8
 * candidates: a fifth of vp_pse_pairs' time on an AVX2 machine (1e5 lattice).  Same indices,
 * same order, so the same bits. */
static uint8_t pse_pack_lut[256][8];
__attribute__((constructor)) static void pse_pack_lut_init(void)
{
    for (int m = 0; m < 256; m++) {
        int k = 0;
        for (int b = 0; b < 8; b++)
            if (m >> b & 1) pse_pack_lut[m][k++] = (uint8_t)b;
        while (k < 8) pse_pack_lut[m][k++] = 0;
    }
}
__attribute__((target("avx2"))) static size_t pse_pack_avx2(const float *G, size_t mv, int32_t *P)
{
    size_t np = 0;
    const __m256 zero = _mm256_setzero_ps();
    for (size_t j = 0; j < mv; j += 8) { /* P has room for np + 16 */
        const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(G + j), zero, _CMP_NEQ_UQ)); /* as C's != */
        const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)pse_pack_lut[k]));
        _mm256_storeu_si256((__m256i *)(P + np), _mm256_add_epi32(idx, _mm256_set1_epi32((int)j)));
        np += (size_t)__builtin_popcount((unsigned)k);
    }
    return np;
}
/* The first pass of PSE's two-pass form (vp_pse_cell2; AVX2, without heat), for Q <= 4
 * queries of one cell at once (their candidates are the same, so each candidate vector is
 * loaded once for all): per 8 candidates and query the exponent argument
 * x = -log2(e) r^2 / e_qj^2 of each weight and whether the pair counts, as pse_weights
 * computes them, then, packed by the mask's row of pse_pack_lut as pse_pack_avx2 packs, the
 * indices of the query's pairs into P[g] and their x, halved viscosities and (unless
 * uniform) spacings into XP[g], NP[g], EP[g]; their numbers into npo[g].  The lanes past them
 * in the outputs are undefined (vp_pse_cell2 pads them).  The arithmetic is pse_weights' own
 * expressions on GCC's generic vectors, not intrinsics, so that the compiler treats both
 * alike: whether and how it contracts r^2 = dx^2 + dy^2 + dz^2 into multiply-adds depends on
 * the optimisation level (none at -O1, the sanitizer build's; two at -O2 and -O3), and
 * written with FMA intrinsics the x of an -O1 build differed from pse_weights' in the last
 * bit.  Four queries at once: diffusion 1.06-1.09x over one at a time (lattices). */
typedef float pse_v8f __attribute__((vector_size(32)));
static inline __attribute__((always_inline, target("avx2,fma"))) void pse_inside_multi_avx2_t(
    const float *X, const float *Y, const float *Z, const float *E, const int32_t *K, const float *NU, size_t mv,
    int32_t mi, const float (*qf)[4], const int32_t *kq, float cut2, int32_t *const *P, float *const *XP,
    float *const *NP, float *const *EP, size_t *npo, const int Q, const int uniform)
{
    float xq[4], yq[4], zq[4], eq[4], sq[4];
    __m256i kqv[4];
    /* the outputs' pointers in locals: through P, XP.. themselves (memory any store may
     * alias) the compiler would reload them after every store */
    int32_t *Pl[4];
    float *XPl[4], *NPl[4], *EPl[4];
    for (int g = 0; g < Q; g++) {
        Pl[g] = P[g]; XPl[g] = XP[g]; NPl[g] = NP[g]; EPl[g] = EP[g];
        xq[g] = qf[g][0]; yq[g] = qf[g][1]; zq[g] = qf[g][2]; eq[g] = qf[g][3];
        const float invq = 1.0f / (0.5f * (eq[g] + eq[g])), invq2 = invq * invq;
        sq[g] = invq2 * -VP_LOG2E_F;
        kqv[g] = _mm256_set1_epi32(kq[g]);
    }
    const __m256 xcut = _mm256_set1_ps(cut2 * -VP_LOG2E_F);
    const __m256i miv = _mm256_set1_epi32(mi), eight = _mm256_set1_epi32(8);
    __m256i jv = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    size_t np[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < mv; j += 8) {
        pse_v8f X8, Y8, Z8, E8;
        memcpy(&X8, X + j, sizeof X8); memcpy(&Y8, Y + j, sizeof Y8); memcpy(&Z8, Z + j, sizeof Z8);
        if (!uniform) memcpy(&E8, E + j, sizeof E8);
        const __m256i K8 = _mm256_loadu_si256((const __m256i *)(K + j)), jin = _mm256_cmpgt_epi32(miv, jv);
        const __m256 NU8 = _mm256_loadu_ps(NU + j);
        const __m256i jbase = _mm256_set1_epi32((int)j);
        for (int g = 0; g < Q; g++) {
            const pse_v8f dx = X8 - xq[g], dy = Y8 - yq[g], dz = Z8 - zq[g];
            const pse_v8f r2 = dx * dx + dy * dy + dz * dz;
            pse_v8f xv;
            if (uniform) {
                xv = r2 * sq[g];
            } else {
                const pse_v8f inv = 1.0f / (0.5f * (eq[g] + E8)), inv2 = inv * inv;
                xv = r2 * (inv2 * -VP_LOG2E_F);
            }
            const __m256 x = (__m256)xv;
            const __m256i kin = _mm256_and_si256(_mm256_cmpgt_epi32(K8, kqv[g]), jin);
            const int k = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(x, xcut, _CMP_GE_OQ), _mm256_castsi256_ps(kin)));
            const __m256i perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)pse_pack_lut[k]));
            _mm256_storeu_si256((__m256i *)(Pl[g] + np[g]), _mm256_add_epi32(perm, jbase));
            _mm256_storeu_ps(XPl[g] + np[g], _mm256_permutevar8x32_ps(x, perm));
            _mm256_storeu_ps(NPl[g] + np[g], _mm256_permutevar8x32_ps(NU8, perm));
            if (!uniform) _mm256_storeu_ps(EPl[g] + np[g], _mm256_permutevar8x32_ps((__m256)E8, perm));
            np[g] += (size_t)__builtin_popcount((unsigned)k);
        }
        jv = _mm256_add_epi32(jv, eight);
    }
    for (int g = 0; g < Q; g++) npo[g] = np[g];
}
__attribute__((target("avx2,fma"))) static void pse_inside_multi_avx2(const float *X, const float *Y, const float *Z,
    const float *E, const int32_t *K, const float *NU, size_t mv, int32_t mi, const float (*qf)[4], const int32_t *kq,
    float cut2, int32_t *const *P, float *const *XP, float *const *NP, float *const *EP, size_t *npo, int Q, int uniform)
{
#define PSE_MULTI(QQ, U) pse_inside_multi_avx2_t(X, Y, Z, E, K, NU, mv, mi, qf, kq, cut2, P, XP, NP, EP, npo, QQ, U)
    switch (Q * 2 + (uniform != 0)) { /* Q is 1 .. 4 (vp_pse_cell2's callers) */
    case 2: PSE_MULTI(1, 0); break;
    case 3: PSE_MULTI(1, 1); break;
    case 4: PSE_MULTI(2, 0); break;
    case 5: PSE_MULTI(2, 1); break;
    case 6: PSE_MULTI(3, 0); break;
    case 7: PSE_MULTI(3, 1); break;
    case 8: PSE_MULTI(4, 0); break;
    default: PSE_MULTI(4, 1); break;
    }
#undef PSE_MULTI
}
/* The packing vp_pse_pairs uses: 2 AVX-512's compress, 1 AVX2's table, 0 the portable loop
 * (vp_cpu_level: VORTONPY_PORTABLE=1 forces the last). */
static int pse_pack_mode(void)
{
    const int level = vp_cpu_level();
    return level == VP_CPU_AVX512 ? 2 : level == VP_CPU_AVX2 ? 1 : 0;
}
/* Whether vp_pse_cell2 may run: the AVX2 packing (pack 1), and the CPU has all of
 * x86-64-v3, so that the clones running beside it are v3 or v4 ones, which contract like
 * pse_inside_multi_avx2 (built for avx2 and fma): an AVX2 CPU missing one of v3's other
 * features runs the default clones, without FMA (other bits; and without FMA itself, no
 * pse_inside_multi_avx2 at all). */
static int pse_two_pass_ok(int pack)
{
    return pack == 1 && __builtin_cpu_supports("x86-64-v3");
}
#else /* no SIMD packing: pse_pack_mode says so, and the packings are never called */
static size_t pse_pack_avx512(const float *G, size_t mv, int32_t *P) { (void)G; (void)mv; (void)P; return 0; }
static size_t pse_pack_avx2(const float *G, size_t mv, int32_t *P) { (void)G; (void)mv; (void)P; return 0; }
static int pse_pack_mode(void) { return 0; }
static int pse_two_pass_ok(int pack) { (void)pack; return 0; }
static void pse_inside_multi_avx2(const float *X, const float *Y, const float *Z, const float *E, const int32_t *K,
                                  const float *NU, size_t mv, int32_t mi, const float (*qf)[4], const int32_t *kq,
                                  float cut2, int32_t *const *P, float *const *XP, float *const *NP, float *const *EP,
                                  size_t *npo, int Q, int uniform)
{
    (void)X; (void)Y; (void)Z; (void)E; (void)K; (void)NU; (void)mv; (void)mi; (void)qf; (void)kq; (void)cut2;
    (void)P; (void)XP; (void)NP; (void)EP; (void)Q; (void)uniform;
    for (int g = 0; g < 4; g++) npo[g] = 0;
}
#endif

/* The pair weight 2^x' inv5 (x' = max(x, xcut): finite for every lane; inv5 = 1 / e_qj^5)
 * with its bits ANDed with all ones (keep) or all zeros: exactly the select keep ? w : +0,
 * for every w (inf and NaN too).  The single pass (pse_weights) and the two-pass form
 * (pse_weights_packed) both take it from here, so a pair's weight is the same float in both.
 * Why a bit mask and not a select or a product: see pse_weights. */
static inline __attribute__((always_inline)) float pse_weight(float x, float xcut, float inv5, int keep)
{
    const float xc = x > xcut ? x : xcut;
    const float ex = vp_exp2_negf(xc) * inv5;
    uint32_t gb;
    memcpy(&gb, &ex, sizeof gb);
    gb &= 0u - (uint32_t)keep;
    float gf;
    memcpy(&gf, &gb, sizeof gf);
    return gf;
}

/* The candidates' weights (the first loop of vp_pse_pairs).  With `uniform` (every spacing
 * of the batch equal, as in every lattice and scene that does not mix radii) the pair's
 * 1 / e_qj is the query's own, computed once, and the loop has no division (a vector division
 * is the slowest operation in it); the value is the same float, so both paths give the same
 * bits.  With `heat`, the loop also sums pse_guard's rates c = (nu_qj + kappa) g V on both
 * sides (float, into sc and OC); without, the exchange's fourth lane sums them (see
 * vp_pse_pairs) and this loop only writes the weights.  Inlined four times, once for each
 * combination of the constants. */
static inline __attribute__((always_inline)) float pse_weights(int32_t mv, int32_t mi, const float *restrict X,
    const float *restrict Y, const float *restrict Z, const float *restrict E, const float *restrict NU,
    const int32_t *restrict K, const float *restrict VF, float *restrict OC, float *restrict G, float *restrict GW,
    float xq, float yq, float zq, float eq, float nq, float vqf, int32_t kq, float cut2, float kappa, const int uniform,
    const int heat)
{
    float sc = 0.0f;
    /* the exponent's factor -log2(e) / e_qj^2 is folded into the squared distance (x = r^2
     * times it; from either side the same float), and the cutoff u <= cut^2 is x >= xcut;
     * nq and NU come halved (nu_qj = nq + NU[j]) */
    const float invq = 1.0f / (0.5f * (eq + eq)), invq2 = invq * invq, invq3 = invq2 * invq2 * invq;
    const float sq = invq2 * -VP_LOG2E_F, xcut = cut2 * -VP_LOG2E_F;
#pragma omp simd reduction(+ : sc)
    for (int32_t j = 0; j < mv; j++) {
        float dx = X[j] - xq, dy = Y[j] - yq, dz = Z[j] - zq;
        float r2 = dx * dx + dy * dy + dz * dz;
        float inv = uniform ? invq : 1.0f / (0.5f * (eq + E[j])), inv2 = inv * inv;
        float x = r2 * (uniform ? sq : inv2 * -VP_LOG2E_F);
        const int inside = (x >= xcut) & (K[j] > kq) & (j < mi);
        /* The weight for every lane, then its bits ANDed with all ones or all zeros: exactly
         * the select inside ? ex : +0, for every ex (inf and NaN too: a multiplication by
         * (float) inside gave NaN for an infinite ex, the 1 / e^5 of vortons under ~1e-8 in
         * radius, and the packing then took padding lanes past the batch).  Written as the
         * select, GCC 12 sank the exponential into the select's arm and, under its default
         * -ftrapping-math, would not if-convert that arm's float operations without
         * AVX-512's masks: the x86-64-v3 (AVX2) and baseline clones of this loop ran scalar
         * ("control flow in loop"), 1 candidate at a time instead of 8. */
        const float gf = pse_weight(x, xcut, uniform ? invq3 : inv2 * inv2 * inv, inside);
        float gw = gf * (nq + NU[j]);
        G[j] = gf; GW[j] = gw;
        if (heat) { /* pse_guard's rate gc (without heat, the exchange sums it) */
            float gc = gw + kappa * gf;
            sc += gc * VF[j]; OC[j] += gc * vqf;
        }
    }
    return sc;
}

/* The second pass of the two-pass form: the weights of the np packed pairs (npv: np rounded
 * up to 8, the lanes past np holding finite padding), g into G and g_w = g nu_qj into GW,
 * indexed by the pair's place in P, by pse_weights' operations on the same x, e_qj and nu
 * (pse_weight: the same floats; the lanes past np are 0 by its bit mask).  Returns whether a
 * pair's weight is 0 (underflow: spacings of ~4e7 and more): the single pass packs only
 * nonzero weights, so such pairs must go (vp_pse_cell2), or the exchange's two chains of
 * sums would take the later pairs in other chains.  Inlined twice. */
static inline __attribute__((always_inline)) int pse_weights_packed(int32_t npv, int32_t np, const float *restrict XP,
    const float *restrict NP, const float *restrict EP, float *restrict G, float *restrict GW, float eq, float nq,
    float xcut, const int uniform)
{
    const float invq = 1.0f / (0.5f * (eq + eq)), invq2 = invq * invq, invq3 = invq2 * invq2 * invq;
    int zero = 0;
#pragma omp simd reduction(| : zero)
    for (int32_t t = 0; t < npv; t++) {
        const float inv = uniform ? invq : 1.0f / (0.5f * (eq + EP[t])), inv2 = inv * inv;
        const float gf = pse_weight(XP[t], xcut, uniform ? invq3 : inv2 * inv2 * inv, t < np);
        G[t] = gf; GW[t] = gf * (nq + NP[t]);
        zero |= (gf == 0.0f) & (t < np);
    }
    return zero;
}

/* The exchange of vp_pse_pairs and vp_pse_cell2 over the np packed pairs P: two chains of
 * sums, so the add latency overlaps; the pair's weights G, GW at index IJ (the candidate j, or
 * the pair's place t in P); with heat the fourth lane's weight is g, without it g_w: then the
 * pair's weight is one broadcast. */
#define PSE_EXCHANGE(C3J, C3K, IJ, IK)                                                          \
    do {                                                                                        \
        size_t t = 0;                                                                           \
        for (; t + 1 < np; t += 2) {                                                            \
            const size_t j = (size_t)P[t], k = (size_t)P[t + 1], gj = GI[j], gk = GI[k];        \
            const double gwj = GW[IJ], gwk = GW[IK];                                            \
            const vp_v4d cj = {gwj, gwj, gwj, C3J}, ck = {gwk, gwk, gwk, C3K};                  \
            const vp_v4d dj = W4[gj] - wq, dk = W4[gk] - wq;                                    \
            s0 += (cj * V[gj]) * dj; s1 += (ck * V[gk]) * dk;                                   \
            O4[gj] -= (cj * vq) * dj; O4[gk] -= (ck * vq) * dk;                                 \
        }                                                                                       \
        if (t < np) {                                                                           \
            const size_t j = (size_t)P[t], gj = GI[j];                                          \
            const double gwj = GW[IJ];                                                          \
            const vp_v4d cj = {gwj, gwj, gwj, C3J}, dj = W4[gj] - wq;                           \
            s0 += (cj * V[gj]) * dj;                                                            \
            O4[gj] -= (cj * vq) * dj;                                                           \
        }                                                                                       \
    } while (0)

/* heat: the records' fourth component is the temperature, exchanged with weight g, and the
 * rates come from pse_weights.  Without heat (no temperature differences: the exchange of T
 * would add zeros) the fourth component is 1 in every candidate record and 0 in the query's
 * wq4, and its weight is g_w: that lane then sums the query's rate c_q = sum g_w V_j (into
 * acc[4]) and each candidate's, negated (O4[GI[j]][3] -= g_w V_q; see pse_rate), in
 * double, with the exchange's own operations; acc[3] stays 0. */
VP_CLONES
static void vp_pse_pairs(size_t m, const float *restrict X, const float *restrict Y, const float *restrict Z,
                         const float *restrict E, const float *restrict NU, const int32_t *restrict K,
                         const size_t *restrict GI, const double *restrict V, const vp_v4d *restrict W4,
                         vp_v4d *restrict O4,
                         const float *restrict VF, float *restrict OC, float *restrict G, float *restrict GW,
                         uint8_t *restrict IN, int32_t *restrict P, const float qf[5], int32_t kq, double vq, const double wq4[4],
                         float cut2, float kappa, int uniform, int heat, int pack, double acc[5])
{
    vp_v4d wq;
    memcpy(&wq, wq4, sizeof wq);
    float xq = qf[0], yq = qf[1], zq = qf[2], eq = qf[3], nq = qf[4], vqf = (float)vq, sc = 0.0f;
    /* the loop runs to a multiple of 16 lanes, so no candidate falls to a scalar remainder
     * loop (with 16 lanes it took as long as the vector loop itself); lanes past m read the
     * batch's next candidates or its finite padding (PSE_PAD) and get weight 0 */
    const size_t mv = (m + PSE_PAD - 1) & ~(size_t)(PSE_PAD - 1);
    const int32_t mi = (int32_t)m, mvi = (int32_t)mv;
    if (uniform && heat)
        sc = pse_weights(mvi, mi, X, Y, Z, E, NU, K, VF, OC, G, GW, xq, yq, zq, eq, nq, vqf, kq, cut2, kappa, 1, 1);
    else if (uniform)
        sc = pse_weights(mvi, mi, X, Y, Z, E, NU, K, VF, OC, G, GW, xq, yq, zq, eq, nq, vqf, kq, cut2, kappa, 1, 0);
    else if (heat)
        sc = pse_weights(mvi, mi, X, Y, Z, E, NU, K, VF, OC, G, GW, xq, yq, zq, eq, nq, vqf, kq, cut2, kappa, 0, 1);
    else
        sc = pse_weights(mvi, mi, X, Y, Z, E, NU, K, VF, OC, G, GW, xq, yq, zq, eq, nq, vqf, kq, cut2, kappa, 0, 0);
    /* pack the indices of the nonzero weights: with AVX-512 by compress (pse_pack_avx512),
     * with AVX2 by a table of masks (pse_pack_avx2); otherwise 8 candidates at a time (mv is
     * a multiple of 16): the 8 flag bytes become an 8-bit mask by one multiplication, and the
     * positions of each nibble's set bits come from a table.  All give the same indices in
     * the same order (pack: pse_pack_mode). */
    size_t np = 0;
    if (pack == 2) {
        np = pse_pack_avx512(G, mv, P);
    } else if (pack == 1) {
        np = pse_pack_avx2(G, mv, P);
    } else {
        static const uint8_t pos4[16][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
                                            {2, 0, 0, 0}, {0, 2, 0, 0}, {1, 2, 0, 0}, {0, 1, 2, 0},
                                            {3, 0, 0, 0}, {0, 3, 0, 0}, {1, 3, 0, 0}, {0, 1, 3, 0},
                                            {2, 3, 0, 0}, {0, 2, 3, 0}, {1, 2, 3, 0}, {0, 1, 2, 3}};
        static const uint8_t cnt4[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
        for (size_t j = 0; j < mv; j++) IN[j] = G[j] != 0.0f;
        for (size_t j = 0; j < mv; j += 8) {
            uint64_t flags;
            memcpy(&flags, IN + j, 8);
            const unsigned bits = (unsigned)((flags * 0x0102040810204080ULL) >> 56), lo = bits & 15, hi = bits >> 4;
            for (int b = 0; b < 4; b++) P[np + b] = (int32_t)j + pos4[lo][b];
            np += cnt4[lo];
            for (int b = 0; b < 4; b++) P[np + b] = (int32_t)j + 4 + pos4[hi][b];
            np += cnt4[hi];
        }
    }
    vp_v4d s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
    /* (the exchange: PSE_EXCHANGE) */
    if (heat)
        PSE_EXCHANGE((double)G[j], (double)G[k], j, k);
    else
        PSE_EXCHANGE(gwj, gwk, j, k);
    s0 += s1;
    for (int f = 0; f < 3; f++) acc[f] += s0[f];
    if (heat) { acc[3] += s0[3]; acc[4] += sc; }
    else acc[4] += s0[3];
}


/* vp_pse_pairs in two passes (AVX2, without heat, from PSE_TWO_PASS_MIN candidates), for
 * Qn <= 4 consecutive queries q0 .. of one cell (the same candidates): the distances of all
 * candidates and the packing of those inside the cutoff in one pass for all of them
 * (pse_inside_multi_avx2: flags and arguments stay in registers, a candidate vector is
 * loaded once), then, query after query, the weights of its pairs alone, about a quarter
 * (pse_weights_packed), indexed by the pair's place in P, the same exchange, and the query's
 * sums (O4[q], OC[q] as diffuse_pass adds them).  The first pass reads only the batch, which
 * no exchange changes: the same pairs, weights and order as vp_pse_pairs query by query, so
 * the same bits.  Diffusion 1.17-1.20x faster than the single pass on 1e4 and 1e5 lattices
 * (~227 candidates a query), 1.07x on spinning_ball; below PSE_TWO_PASS_MIN candidates, or
 * written into vp_pse_pairs itself, the two-pass form cost more than it saved
 * (ball_through_smoke and hot_ball 0.94-0.96x).  RF: the sorted float records (of n),
 * own0 the own row's first sorted vorton; P4, XN4: 4 and 12 packed fields of stride xs. */
VP_CLONES
static void vp_pse_cell2(size_t m, const float *restrict X, const float *restrict Y, const float *restrict Z,
                         const float *restrict E, const float *restrict NU, const int32_t *restrict K,
                         const size_t *restrict GI, const double *restrict V, const vp_v4d *restrict W4,
                         vp_v4d *restrict O4, double *restrict OC, float *restrict G, float *restrict GW,
                         int32_t *restrict P4, float *restrict XN4, size_t xs, const float *restrict RF, size_t n,
                         size_t q0, int Qn, size_t own0, float cut2, int uniform)
{
    float qf[4][4] = {{0}};
    int32_t kq[4] = {0};
    int32_t *Pg[4];
    float *XPg[4], *NPg[4], *EPg[4];
    size_t npg[4];
    for (int g = 0; g < 4; g++) {
        Pg[g] = P4 + (size_t)g * xs; XPg[g] = XN4 + (size_t)g * xs;
        NPg[g] = XN4 + (size_t)(4 + g) * xs; EPg[g] = XN4 + (size_t)(8 + g) * xs;
    }
    for (int g = 0; g < Qn; g++) {
        const size_t q = q0 + (size_t)g;
        qf[g][0] = RF[q]; qf[g][1] = RF[n + q]; qf[g][2] = RF[2 * n + q]; qf[g][3] = RF[3 * n + q];
        kq[g] = (int32_t)(q - own0);
    }
    const size_t mv = (m + PSE_PAD - 1) & ~(size_t)(PSE_PAD - 1); /* as vp_pse_pairs */
    pse_inside_multi_avx2(X, Y, Z, E, K, NU, mv, (int32_t)m, (const float(*)[4])qf, kq, cut2, Pg, XPg, NPg, EPg, npg, Qn,
                          uniform);
    const float xcut = cut2 * -VP_LOG2E_F;
    for (int g = 0; g < Qn; g++) {
        const size_t q = q0 + (size_t)g;
        const float eq = qf[g][3], nq = RF[4 * n + q];
        int32_t *P = Pg[g];
        float *XP = XPg[g], *NPk = NPg[g], *EP = EPg[g];
        size_t np = npg[g];
        const size_t npv = (np + 7) & ~(size_t)7;
        for (int l = 0; l < 8; l++) { XP[np + l] = xcut; NPk[np + l] = 0.0f; EP[np + l] = eq; } /* finite padding */
        const int zero = uniform ? pse_weights_packed((int32_t)npv, (int32_t)np, XP, NPk, EP, G, GW, eq, nq, xcut, 1)
                                 : pse_weights_packed((int32_t)npv, (int32_t)np, XP, NPk, EP, G, GW, eq, nq, xcut, 0);
        if (zero) { /* drop the zero weights, in order (as the single pass's packing does) */
            size_t k = 0;
            for (size_t t = 0; t < np; t++)
                if (G[t] != 0.0f) { P[k] = P[t]; G[k] = G[t]; GW[k] = GW[t]; k++; }
            np = k;
        }
        const vp_v4d w4q = W4[q];
        const vp_v4d wq = {w4q[0], w4q[1], w4q[2], 0.0}; /* (no heat: as diffuse_pass's wq4) */
        const double vq = V[q];
        vp_v4d s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
        PSE_EXCHANGE(gwj, gwk, t, t + 1);
        s0 += s1;
        double acc[5] = {0, 0, 0, 0, 0};
        for (int f = 0; f < 3; f++) acc[f] += s0[f];
        acc[4] += s0[3];
        const vp_v4d a4 = {acc[0], acc[1], acc[2], acc[3]};
        O4[q] += a4;
        OC[q] += acc[4];
    }
}
#undef PSE_EXCHANGE

/* Stability guard for the explicit exchange.  The step changes q_i by
 *   dq_i = sum_j c_ij (q_j - q_i),   c_ij = dt norm (nu_ij, kappa) eta_ij V_j / e_ij^2,
 * a convex combination of the old values (no |w| or T can grow past its neighbours': a
 * discrete maximum principle) as long as c_i = sum_j c_ij <= 1 for every i.  On a lattice of
 * spacing e, c_i = 4 nu dt / e^2 <= 0.4 under the eddy viscosity's cap; but where vortons
 * bunch up (contact places them on a sphere just outside a body, and they pile up at its
 * stagnation points, where remeshing leaves them alone) c_i grows with the number of close
 * neighbours, and a bunch's alternating mode grows once c_i exceeds ~2 (a hot ball's bunch
 * of 26 vortons within half a spacing grew x1.6 a frame until the step failed).  Every pair
 * that touches a vorton with c_i > PSE_MAX_RATE has its exchange scaled by
 * s_ij = min(1, PSE_MAX_RATE / c_i, PSE_MAX_RATE / c_j): symmetric, so the exchanges stay
 * equal and opposite (strength and heat are still conserved to rounding), and afterwards
 * every c_i <= PSE_MAX_RATE.  Physically, diffusion across a distance far below the core
 * size is that fast anyway: the bunch relaxes toward its mean within the step instead of
 * overshooting.  PSE_MAX_RATE = 1, the convexity bound itself, so that only vortons that
 * could overshoot are touched (none in a lattice or an evenly spread cloud).  The
 * corrections are added in sorted order: the result stays independent of the thread
 * count.  The sums and records come in sorted order (pse_sorted); the sums are without the
 * factor f = dt norm. */
#define PSE_MAX_RATE 1.0

/* diffuse_pass's per-vorton arrays in the cell list's sorted order: the float records RF
 * the batches copy (x-lo y-lo z-lo e nu/2 V, each a field of n), and in double the volume V,
 * the records W4 (wx wy wz, and T with heat or 1 without: the rate lane of vp_pse_pairs),
 * the sums O4 (dwx dwy dwz, and dT with heat or minus the rate sums from the candidates' side
 * without) and the rate sums OC (the queries' side, and with heat the candidates' too).  xs,
 * order and lo place a vorton in the cell list again (pse_guard). */
typedef struct {
    size_t n;
    int heat;
    const double *xs, *lo;
    const size_t *order;
    float *RF;
    double *V, *OC;
    vp_v4d *W4, *O4;
} pse_sorted;

/* The rate sum c_q (without the factor f) of sorted vorton q. */
static inline double pse_rate(const pse_sorted *S, size_t q)
{
    return S->heat ? S->OC[q] : S->OC[q] - S->O4[q][3];
}
typedef struct { size_t j; double mgw, mg; } guard_pair; /* a corrected pair: partner, (s - 1) g w, (s - 1) g */

/* The corrected pairs of bunched vortons hq[k0 .. k1) (each pair once: see pse_guard), appended
 * to *buf (growing it), their count per vorton in cnt[k]; nonzero if out of memory. */
#define GUARD_CHUNK 64
static int guard_pairs(const vp_bins *bins, const pse_sorted *S, const double *c, const size_t *hq, size_t k0,
                       size_t k1, float cut2, guard_pair **buf, size_t *len, size_t *cap, size_t *cnt)
{
    const size_t n = S->n;
    const float *FX = S->RF, *FY = FX + n, *FZ = FX + 2 * n, *FE = FX + 3 * n, *FN = FX + 4 * n;
    const int *nc = bins->nc;
    const size_t *start = bins->start;
    for (size_t k = k0; k < k1; k++) {
        const size_t q = hq[k], len0 = *len, i = S->order[q];
        int kk[3];
        for (int a = 0; a < 3; a++) kk[a] = vp_bins_cell(bins, a, S->xs[3 * i + a] - S->lo[a]); /* as binned */
        const float xq = FX[q], yq = FY[q], zq = FZ[q], eq = FE[q], nq = FN[q]; /* nu halved */
        const float xcut = cut2 * -VP_LOG2E_F;
        for (int cz = kk[2] - 2; cz <= kk[2] + 2; cz++) {
            if (cz < 0 || cz >= nc[2]) continue;
            for (int cy = kk[1] - 2; cy <= kk[1] + 2; cy++) {
                if (cy < 0 || cy >= nc[1]) continue;
                const size_t row = (size_t)nc[0] * ((size_t)cy + (size_t)nc[1] * cz);
                const int x0 = kk[0] > 2 ? kk[0] - 2 : 0, x1 = kk[0] + 2 < nc[0] - 1 ? kk[0] + 2 : nc[0] - 1;
                for (size_t j0 = start[row + x0], je = start[row + x1 + 1]; j0 < je; j0 += GUARD_CHUNK) {
                    const int mc = (int)(je - j0 < GUARD_CHUNK ? je - j0 : GUARD_CHUNK);
                    /* the chunk's pair weights as vp_pse_pairs computes them, in one loop over
                     * the candidates that vectorises (one candidate at a time, with its
                     * division and exponential, this search was most of the guard's time);
                     * then the few that pass, in order */
                    float gf[GUARD_CHUNK], hw[GUARD_CHUNK];
                    int ok[GUARD_CHUNK];
                    const float *fx = FX + j0, *fy = FY + j0, *fz = FZ + j0, *fe = FE + j0, *fn = FN + j0;
                    for (int t = 0; t < mc; t++) {
                        float dx = fx[t] - xq, dy = fy[t] - yq, dz = fz[t] - zq;
                        float inv = 1.0f / (0.5f * (eq + fe[t])), inv2 = inv * inv;
                        float xe = (dx * dx + dy * dy + dz * dz) * (inv2 * -VP_LOG2E_F);
                        ok[t] = xe >= xcut;
                        float xc = xe > xcut ? xe : xcut;
                        gf[t] = vp_exp2_negf(xc) * (inv2 * inv2 * inv);
                        hw[t] = nq + fn[t]; /* (nu_q + nu_j) / 2: the fields are halved */
                    }
                    for (int t = 0; t < mc; t++) {
                        const size_t j = j0 + (size_t)t;
                        if (!ok[t] || j == q || (c[j] > PSE_MAX_RATE && j < q)) continue; /* each pair once */
                        double sc = PSE_MAX_RATE / (c[q] > c[j] ? c[q] : c[j]);
                        if (sc >= 1.0) continue;
                        double g = gf[t], gw = g * hw[t];
                        if (*len == *cap) {
                            size_t nc2 = *cap ? 2 * *cap : 256;
                            guard_pair *nb = realloc(*buf, nc2 * sizeof(guard_pair));
                            if (!nb) return 1;
                            *buf = nb; *cap = nc2;
                        }
                        const double m = sc - 1.0;
                        (*buf)[(*len)++] = (guard_pair){j, m * gw, m * g};
                    }
                }
            }
        }
        cnt[k] = *len - len0;
    }
    return 0;
}

/* The guard's corrections (above), given nh, the count of bunched vortons (c_i > PSE_MAX_RATE:
 * diffuse_pass counts them in its pair loop's region). */
static int pse_guard(const vp_bins *bins, const pse_sorted *S, double f, float cut2, int threads, size_t nh)
{
    const size_t n = S->n;
    if (nh == 0) return VP_OK;
    /* the rate sums before any correction (every scale uses the uncorrected c), the bunched
     * vortons in sorted order, and their corrected pairs' count each */
    double *c = malloc(n * sizeof(double));
    size_t *hq = malloc(2 * nh * sizeof(size_t)), *cnt = hq ? hq + nh : NULL;
    if (!c || !hq) { free(c); free(hq); return VP_ERR_NOMEM; }
    for (size_t q = 0, k = 0; q < n; q++) {
        c[q] = f * pse_rate(S, q);
        if (c[q] > PSE_MAX_RATE) hq[k++] = q;
    }
    /* The pairs depend only on the uncorrected c and the records, so they are found in
     * parallel (each thread a contiguous share of the bunched vortons, into its own list);
     * the corrections are then added serially in sorted order, the order of a single thread:
     * the result does not depend on the thread count.  (Found serially, they were most of
     * hot_ball's diffusion time on one thread while the other waited.) */
    enum { GUARD_MAX_THREADS = 64 };
    int nt = threads < 1 ? 1 : (threads > GUARD_MAX_THREADS ? GUARD_MAX_THREADS : threads);
    if (nh < 16) nt = 1;
    (void)nt; /* (only the pragma reads it: unused in a build without OpenMP) */
    guard_pair *bufs[GUARD_MAX_THREADS] = {0};
    size_t shares[GUARD_MAX_THREADS + 1];
    int fail = 0, used = 1;
#pragma omp parallel num_threads(nt) reduction(| : fail) if (nt > 1)
    {
        int me = 0, nth = 1;
#ifdef _OPENMP
        me = omp_get_thread_num(); nth = omp_get_num_threads();
#endif
#pragma omp single
        {
            used = nth;
            for (int t = 0; t <= nth; t++) shares[t] = nh * (size_t)t / (size_t)nth;
        }
        size_t len = 0, cap = 0;
        fail |= guard_pairs(bins, S, c, hq, shares[me], shares[me + 1], cut2, &bufs[me], &len, &cap, cnt);
    }
    if (!fail)
        for (int t = 0; t < used; t++) {
            const guard_pair *p = bufs[t];
            for (size_t k = shares[t]; k < shares[t + 1]; k++) {
                /* q's sums in registers through its pairs (j != q: the same additions in the
                 * same order; through memory, each waited for the last one's store, and the
                 * loop was ~14 cycles a pair) */
                const size_t q = hq[k];
                const double vq = S->V[q];
                const vp_v4d wq = S->W4[q];
                double o0 = S->O4[q][0], o1 = S->O4[q][1], o2 = S->O4[q][2], o3 = S->O4[q][3];
                for (size_t e = 0; e < cnt[k]; e++, p++) {
                    const size_t j = p->j;
                    const double vj = S->V[j];
                    const vp_v4d d = S->W4[j] - wq;
                    o0 += p->mgw * vj * d[0]; o1 += p->mgw * vj * d[1]; o2 += p->mgw * vj * d[2];
                    for (int a = 0; a < 3; a++) S->O4[j][a] -= p->mgw * vq * d[a];
                    if (S->heat) { o3 += p->mg * vj * d[3]; S->O4[j][3] -= p->mg * vq * d[3]; }
                }
                S->O4[q][0] = o0; S->O4[q][1] = o1; S->O4[q][2] = o2; S->O4[q][3] = o3;
            }
        }
    for (int t = 0; t < GUARD_MAX_THREADS; t++) free(bufs[t]);
    free(c); free(hq);
    return fail ? VP_ERR_NOMEM : VP_OK;
}

/* A batch's float fields from the sorted float records RF (x-lo y-lo z-lo e nu/2 V, each a
 * field of n) of its candidates idx[0..m): x y z e nu/2 and V, and the own-row key (the
 * position in the row own0..own1, or INT32_MAX).  The double fields (V, the records W4 and
 * their sums O4) are not copied: the exchange reads and adds to them in sorted order through
 * idx (see vp_pse_pairs).  Compiled for AVX-512, AVX2 and the baseline (VP_CLONES): in
 * diffuse_pass's parallel region the loop was baseline SSE2. */
VP_CLONES
static void pse_batch_fill(size_t m, const size_t *restrict idx, const float *restrict RF, size_t n, size_t own0,
                           size_t own1, float *const fb[5], int32_t *restrict kb, float *restrict vf)
{
    float *restrict f0 = fb[0], *restrict f1 = fb[1], *restrict f2 = fb[2], *restrict f3 = fb[3], *restrict f4 = fb[4];
    for (size_t k = 0; k < m; k++) {
        const size_t i = idx[k];
        f0[k] = RF[i]; f1[k] = RF[n + i]; f2[k] = RF[2 * n + i];
        f3[k] = RF[3 * n + i]; f4[k] = RF[4 * n + i]; vf[k] = RF[5 * n + i];
        kb[k] = i >= own0 && i < own1 ? (int32_t)(i - own0) : INT32_MAX; /* n < 2^31 */
    }
}

/* Vorton i's viscosity nu_i (x_i its position, e_i its PSE spacing): molecular plus
 * Smagorinsky's eddy viscosity (C_s D_i)^2 sqrt(2 S:S), S the symmetric part of the grid
 * Jacobian at the vorton, capped at 0.1 e_i^2 / dt but never below the molecular value. */
static inline __attribute__((always_inline)) double pse_viscosity(const vp_grid *g, const double *restrict jac,
                                                                  const double *restrict xi, double ei, double nu,
                                                                  double cs, double width, double dt_step)
{
    double D = ei / width, nv = nu > 0 ? nu : 0.0;
    if (cs > 0) {
        double J[9];
        vp_grid_interp9(g, jac, xi, J);
        double ss = 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) { double S = 0.5 * (J[3 * a + b] + J[3 * b + a]); ss += S * S; }
        nv += cs * cs * D * D * sqrt(2.0 * ss);
    }
    double cap = 0.1 * ei * ei / dt_step;
    return nv < cap ? nv : (nu > cap ? nu : cap); /* never below the molecular value */
}

/* A task of diffuse_pass's pair loop (a block of rows) and its cost estimate; ordered longest
 * first, then by index. */
typedef struct { long task; double cost; } pse_task;
static int pse_task_cmp(const void *a, const void *b)
{
    const pse_task *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return (x->task > y->task) - (x->task < y->task);
}

/* The pair loop's forward rows (dy, dz) of a row of cells (diffuse_pass) and its tasks' blocks
 * of PSE_YB rows. */
enum { PSE_YB = 4 };
static const int pse_fwd[13][2] = {{0, 0}, {1, 0}, {2, 0}, {-2, 1}, {-1, 1}, {0, 1}, {1, 1}, {2, 1},
                                   {-2, 2}, {-1, 2}, {0, 2}, {1, 2}, {2, 2}};

/* The rows' vorton counts into rc: row (cy, cz) at rc[cz W + cy + 2], W = nc[1] + 4 (returned),
 * zero around them (2 rows each side in y, 2 planes past the last), (nc[2] + 2) W of them, so
 * that a row's batch is 13 counts summed without a bounds check (pse_batch; with the checks,
 * ball_through_smoke's 91 rows took 2.2 us, on the critical path of its slabs). */
static size_t pse_row_counts(const int nc[3], const size_t *start, size_t *rc)
{
    const size_t W = (size_t)nc[1] + 4;
    memset(rc, 0, ((size_t)nc[2] + 2) * W * sizeof(size_t));
    for (size_t cz = 0; cz < (size_t)nc[2]; cz++)
        for (size_t cy = 0; cy < (size_t)nc[1]; cy++) {
            const size_t r0 = (size_t)nc[0] * (cy + (size_t)nc[1] * cz);
            rc[cz * W + cy + 2] = start[r0 + nc[0]] - start[r0];
        }
    return W;
}

/* The vortons in the 13 forward rows (pse_fwd) of the row whose count is at b in
 * pse_row_counts' table of width W: its batch (diffuse_pass). */
static inline size_t pse_batch(const size_t *b, size_t W)
{
    return b[0] + b[1] + b[2] + b[W - 2] + b[W - 1] + b[W] + b[W + 1] + b[W + 2] + b[2 * W - 2] + b[2 * W - 1] +
           b[2 * W] + b[2 * W + 1] + b[2 * W + 2];
}

/* The blocks of rows (a task's unit: PSE_YB rows of a plane) taken in plane order, block
 * key = plane nyb + block, split into nth slabs [bounds[t], bounds[t + 1]) of about equal
 * work (diffuse_pass's slabs) by an estimate per block into pc (nc[2] nyb of them): a block
 * goes to the slab where more than half of its work falls.  A row of cells with q vortons
 * and a batch of m (pse_batch) is estimated at q m + 97 q + 7 m + 320 candidate-pair
 * units: a least-squares fit to 8454 blocks' times in ball_through_smoke's pair loop on one
 * thread (frames 120-320, AVX2 EPYC; rms residual 0.88 us of blocks up to 20 us).  With q m
 * alone, its small rows were undercounted and its two slabs took 65 and 43 us; so, 56 and 55.
 * The constants are fixed, not measured at run time, so that the slabs, and so the bits, do
 * not depend on the machine or its load.  *maxc: the largest batch; rc: pse_row_counts'
 * table. */
static void pse_block_split(const int nc[3], const size_t *start, int nyb, int nth, double *pc, long *bounds,
                            size_t *maxc, size_t *rc)
{
    const long nk = (long)nc[2] * nyb;
    double tot = 0;
    size_t mb = 0;
    const size_t W = pse_row_counts(nc, start, rc);
    for (long k = 0; k < nk; k++) {
        const int cz = (int)(k / nyb), y0 = PSE_YB * (int)(k % nyb);
        double c = 0;
        for (int cy = y0; cy < y0 + PSE_YB && cy < nc[1]; cy++) {
            const size_t *b = rc + (size_t)cz * W + (size_t)cy + 2, own = b[0];
            if (own) {
                const size_t m = pse_batch(b, W);
                c += (double)own * (double)m + 320.0 + 97.0 * (double)own + 7.0 * (double)m;
                mb = m > mb ? m : mb;
            }
        }
        pc[k] = c;
        tot += c;
    }
    double acc = 0;
    long k = 0;
    bounds[0] = 0;
    for (int t = 1; t < nth; t++) {
        for (; k < nk && acc + 0.5 * pc[k] < tot * t / nth; k++) acc += pc[k];
        bounds[t] = k;
    }
    bounds[nth] = nk;
    if (maxc) *maxc = mb;
}

/* The first sorted vorton of block key k (pse_block_split); n for k = nc[2] nyb. */
static inline size_t pse_block_start(const int nc[3], const size_t *start, int nyb, long k)
{
    const size_t cz = (size_t)(k / nyb), cy = (size_t)PSE_YB * (size_t)(k % nyb);
    return start[(size_t)nc[0] * (cy + (size_t)nc[1] * cz)];
}

/* Task g of the pair loop's sequence (all colours' tasks in order, diffuse_pass): its colour
 * and its place in the colour's list. */
static inline const pse_task *pse_task_at(long g, const long tcount[6], const pse_task *tasks, long ntask_max, int *col)
{
    int c = 0;
    while (g >= tcount[c]) g -= tcount[c++];
    *col = c;
    return tasks + (size_t)c * (size_t)ntask_max + g;
}

/* The block key of task tk of colour col: plane nyb + block (pse_block_split; also the
 * index of its flag in diffuse_pass's done). */
static inline long pse_task_key(const pse_task *tk, int col, int nyb)
{
    const long ny = (nyb - col / 3 + 1) / 2;
    return (long)(col % 3 + 3 * (tk->task / ny)) * nyb + col / 3 + 2 * (tk->task % ny);
}

/* The pair loop's tasks in critical-path order (diffuse_pass, a team past PSE_SLAB_MAX vortons): each
 * task's bottom level, its estimated cost plus the largest bottom level of the later-colour
 * tasks that wait for it (those whose blocks share rows with its block: planes within 2,
 * blocks within 1), computed latest colour first into P (level and place, at the place in
 * the sequence, pse_task_at), and the places sorted by it, largest first, into L.  kmap (nc[2] nyb) maps a
 * block key to its task's place, -1 for none.  A task's bottom level exceeds its successors'
 * (every cost is positive), so the order is one the waits allow.  Taken in colour order, the
 * tasks of a sparse cloud left a thread waiting for a chain of dependent tasks while the
 * tasks off that chain ran first; a schedule of ball_through_smoke's measured task times
 * (frames 100-290) puts colour order at 1.70-1.83x from a second thread, the longest chain
 * first at 1.75-1.90x (frame 100's chain is 57% of its work: 1.75x is its bound). */
typedef struct { double bl; long g; } pse_prio;
static int pse_prio_cmp(const void *a, const void *b)
{
    const pse_prio *x = a, *y = b;
    if (x->bl != y->bl) return x->bl > y->bl ? -1 : 1;
    return (x->g > y->g) - (x->g < y->g);
}
static void pse_prio_list(const int nc[3], int nyb, const long tcount[6], const pse_task *tasks, long ntask_max,
                          long total, long *kmap, pse_prio *P, long *L)
{
    const long nk = (long)nc[2] * nyb;
    for (long k = 0; k < nk; k++) kmap[k] = -1;
    for (long g = 0; g < total; g++) {
        int col = 0;
        const pse_task *tk = pse_task_at(g, tcount, tasks, ntask_max, &col); /* (sets col: a statement of its own) */
        kmap[pse_task_key(tk, col, nyb)] = g;
    }
    for (long g = total - 1; g >= 0; g--) {
        int col = 0;
        const pse_task *tk = pse_task_at(g, tcount, tasks, ntask_max, &col);
        const long key = pse_task_key(tk, col, nyb);
        const int cz = (int)(key / nyb), yb = (int)(key % nyb);
        double m = 0;
        for (int z = cz - 2; z <= cz + 2; z++)
            for (int y = yb - 1; y <= yb + 1; y++) {
                if (z < 0 || z >= nc[2] || y < 0 || y >= nyb || (z % 3) + 3 * (y % 2) <= col) continue;
                const long h = kmap[(long)z * nyb + y];
                if (h >= 0 && P[h].bl > m) m = P[h].bl;
            }
        P[g] = (pse_prio){tk->cost + m, g};
    }
    /* sorted by bottom level, largest first, ties in sequence order (an insertion sort on
     * thread 0 before the barrier was quadratic in the worst case, at up to PSE_PRIO_MAX
     * tasks) */
    qsort(P, (size_t)total, sizeof *P, pse_prio_cmp);
    for (long g = 0; g < total; g++) L[g] = P[g].g;
}

/* The pair loop's tasks (diffuse_pass): for each of the 6 colours, the blocks of rows that
 * hold vortons, tl = tasks + colour * ntask_max, tcount[colour] of them, longest first by the
 * estimate sum over their rows of (own vortons) x (batch size); *maxc: the largest batch; rc:
 * pse_row_counts' table. */
static void pse_tasks_list(const int nc[3], const size_t *start, int nyb, long ntask_max, pse_task *tasks,
                           long tcount[6], size_t *maxc_out, size_t *rc)
{
    size_t maxc = 0;
    const size_t W = pse_row_counts(nc, start, rc);
    for (int cz = 0; cz < nc[2]; cz++)
        for (int cy = 0; cy < nc[1]; cy++) {
            size_t r0 = (size_t)nc[0] * ((size_t)cy + (size_t)nc[1] * cz);
            if (start[r0 + nc[0]] == start[r0]) continue;
            const size_t m = pse_batch(rc + (size_t)cz * W + (size_t)cy + 2, W);
            if (m > maxc) maxc = m;
            /* this row's block: colour (cz mod 3, block mod 2), task (cz / 3, block / 2) */
            const int yb = cy / PSE_YB, col = (cz % 3) + 3 * (yb % 2);
            const long ny = (nyb - yb % 2 + 1) / 2, task = (long)(cz / 3) * ny + yb / 2;
            pse_task *tl = tasks + (size_t)col * (size_t)ntask_max;
            if (tcount[col] == 0 || tl[tcount[col] - 1].task != task) tl[tcount[col]++] = (pse_task){task, 0};
            tl[tcount[col] - 1].cost += (double)(start[r0 + nc[0]] - start[r0]) * (double)m;
        }
    for (int col = 0; col < 6; col++)
        qsort(tasks + (size_t)col * (size_t)ntask_max, (size_t)tcount[col], sizeof(pse_task), pse_task_cmp);
    *maxc_out = maxc;
}

/* Vortons [i0, i1): the box of their positions into b0, b1 (widened), their largest PSE
 * spacing e = width V^(1/3) into *emax (the cell list's cell is half the cutoff at it) and
 * whether any density differs from the ambient into *any_heat.  The largest spacing is taken
 * over the vortons' own spacings, as pse_fill computes them (the cube root once per run of
 * equal radii), not from the largest radius: radii a unit in the last place apart (hot_ball's
 * 3 distinct radii of 1083 vortons at frame 70) gave spacings in the other order. */
static void pse_scan(long i0, long i1, const double *restrict x, const double *restrict r, const double *restrict d,
                     double width, double b0[3], double b1[3], double *emax, int *any_heat)
{
    double l0 = b0[0], l1 = b0[1], l2 = b0[2], h0 = b1[0], h1 = b1[1], h2 = b1[2], em = *emax, rl = NAN;
    int ah = *any_heat;
    for (long i = i0; i < i1; i++) {
        const double cx = x[3 * i], cy = x[3 * i + 1], cz = x[3 * i + 2];
        l0 = cx < l0 ? cx : l0; h0 = cx > h0 ? cx : h0;
        l1 = cy < l1 ? cy : l1; h1 = cy > h1 ? cy : h1;
        l2 = cz < l2 ? cz : l2; h2 = cz > h2 ? cz : h2;
        if (!(r[i] == rl)) {
            rl = r[i];
            const double el = width * cbrt(vp_volume(rl));
            em = el > em ? el : em;
        }
        ah |= d[i] != 0.0;
    }
    b0[0] = l0; b0[1] = l1; b0[2] = l2; b1[0] = h0; b1[1] = h1; b1[2] = h2;
    *emax = em; *any_heat = ah;
}

/* The box of the vortons' positions inside the robust limits (diffuse_pass's loop body). */
#define PSE_BOX(i)                                                                                        \
    do {                                                                                                  \
        const double cx = x[3 * (i)], cy = x[3 * (i) + 1], cz = x[3 * (i) + 2];                          \
        if (cx >= lim_lo[0] && cx <= lim_hi[0]) { lo0 = cx < lo0 ? cx : lo0; hi0 = cx > hi0 ? cx : hi0; } \
        if (cy >= lim_lo[1] && cy <= lim_hi[1]) { lo1 = cy < lo1 ? cy : lo1; hi1 = cy > hi1 ? cy : hi1; } \
        if (cz >= lim_lo[2] && cz <= lim_hi[2]) { lo2 = cz < lo2 ? cz : lo2; hi2 = cz > hi2 ? cz : hi2; } \
    } while (0)

/* diffuse_pass's per-vorton inputs, in the vortons' order (pse_fill). */
typedef struct {
    const double *x, *r, *d, *w, *jac;
    const vp_grid *g;
    double rho0, width, nu, cs, dt_step;
} pse_input;

/* The sorted arrays (pse_sorted) of sorted vortons [q0, q1), and their sums zeroed.  Per
 * vorton it computes here what the exchange needs (physics.md 2.5): the volume V, the PSE
 * spacing e = width V^(1/3), the viscosity nu_i (pse_viscosity) and, with heat, the
 * temperature T; each by the sorted vorton's thread, which reads them next in the pair loop
 * (computed in the vortons' order beforehand, by whichever thread, at two threads the fill
 * took twice as long a vorton, its inputs last written by the other core).  The cube root is
 * taken once per run of equal radii (most sets have a single radius). */
VP_CLONES
static void pse_fill(const pse_sorted *S, long q0, long q1, const pse_input *in)
{
    const size_t n = S->n;
    const size_t *order = S->order;
    const double *xs = S->xs, *lo = S->lo, *x = in->x, *r = in->r, *d = in->d, *w = in->w;
    float *restrict RF = S->RF;
    double *restrict Vs = S->V, *restrict OC = S->OC;
    vp_v4d *restrict W4 = S->W4, *restrict O4 = S->O4;
    double rl = NAN, Vl = 0, el = 0;
    for (long qq = q0; qq < q1; qq++) {
        const size_t q = (size_t)qq, i = order[q];
        if (!(r[i] == rl)) { rl = r[i]; Vl = vp_volume(rl); el = in->width * cbrt(Vl); }
        const double nui = pse_viscosity(in->g, in->jac, x + 3 * i, el, in->nu, in->cs, in->width, in->dt_step);
        RF[q] = (float)(xs[3 * i] - lo[0]); RF[n + q] = (float)(xs[3 * i + 1] - lo[1]);
        RF[2 * n + q] = (float)(xs[3 * i + 2] - lo[2]); RF[3 * n + q] = (float)el;
        RF[4 * n + q] = 0.5f * (float)nui; RF[5 * n + q] = (float)Vl;
        Vs[q] = Vl; OC[q] = 0;
        const vp_v4d w4 = {w[3 * i], w[3 * i + 1], w[3 * i + 2],
                           S->heat ? vp_temperature_from_density(in->rho0, d[i]) : 1.0}, z = {0, 0, 0, 0};
        W4[q] = w4; O4[q] = z;
    }
}

/* The exchange of sorted vorton q, back in the vortons' order (each vorton once: no two
 * threads share one): vorticity += f O4 (viscous), temperature += kdt O4's fourth lane
 * (with heat, as density). */
static inline void pse_exchange(const pse_sorted *S, long qq, double *restrict w, double *restrict d, double f,
                                double kdt, double rho0, int viscous, int any_heat)
{
    const size_t q = (size_t)qq, i = S->order[q];
    const vp_v4d o = S->O4[q];
    if (viscous) { w[3 * i] += f * o[0]; w[3 * i + 1] += f * o[1]; w[3 * i + 2] += f * o[2]; }
    if (any_heat) d[i] = vp_density_from_temperature(rho0, S->W4[q][3] + kdt * o[3]); /* T_i + kdt dT_i */
}

/* The diffusion's cell list of the n positions x over the box lo..hi (turned in place to the
 * list's axes), with cells of `cell` (half the cutoff distance), scanned +-2 cells: 5^3
 * half-size cells hold 42% fewer candidate pairs than 3^3 full-size ones; bounded cell count.
 * Its axes are the coordinate axes ordered by their number of cells (ties in x, y, z order):
 * the pair loop's rows run along the axis with the fewest cells and the planes, which set the
 * number of parallel tasks, across the one with the most.  (ball_through_smoke's vortons span
 * about 20 x 4 x 4 cells: rows along x gave 4 tasks in 3 colours, rows along y give about 20;
 * its diffusion phase is 1.09-1.10x faster at 2 threads.)  The order of the axes changes only
 * the rounding of the float32 squared distances (the pair weights stay symmetric, so the
 * exchanges are still conserved); sets whose cell counts tie, such as cubic lattices, keep
 * x, y, z.  *xperm: the positions along the list's axes when they are not x's (else NULL;
 * the caller frees it).  Nonzero when out of memory (nothing left allocated). */
static int pse_cell_list(size_t n, const double *x, double lo[3], double hi[3], double cell, int threads,
                         double **xperm, vp_bins *bins)
{
    int perm[3] = {0, 1, 2};
    {
        int m[3];
        for (int a = 0; a < 3; a++) m[a] = vp_cell_count(hi[a] - lo[a], cell); /* as vp_bins_build counts */
        for (int a = 1; a < 3; a++) /* insertion sort by cell count, stable */
            for (int b = a; b > 0 && m[perm[b]] < m[perm[b - 1]]; b--) { int t = perm[b]; perm[b] = perm[b - 1]; perm[b - 1] = t; }
    }
    const int permuted = perm[0] != 0 || perm[1] != 1;
    *xperm = permuted ? malloc(3 * n * sizeof(double)) : NULL;
    if (permuted && !*xperm) return VP_ERR_NOMEM;
    if (permuted)
        for (size_t i = 0; i < n; i++)
            for (int a = 0; a < 3; a++) (*xperm)[3 * i + a] = x[3 * i + perm[a]];
    {
        double t0[3] = {lo[perm[0]], lo[perm[1]], lo[perm[2]]}, t1[3] = {hi[perm[0]], hi[perm[1]], hi[perm[2]]};
        for (int a = 0; a < 3; a++) { lo[a] = t0[a]; hi[a] = t1[a]; }
    }
    if (vp_bins_build(bins, n, permuted ? *xperm : x, lo, hi, cell, 4.0 * n + 64, threads)) {
        free(*xperm); *xperm = NULL;
        return VP_ERR_NOMEM;
    }
    return VP_OK;
}

/* Whether block key kk's task, of colour col, may run: the tasks of earlier colours that
 * share its rows (planes within 2, blocks within 1) are done (diffuse_pass). */
static inline int pse_ready(const long *done, const int nc[3], int nyb, long kk, int col)
{
    const int cz = (int)(kk / nyb), yb = (int)(kk % nyb);
    for (int z = cz - 2; z <= cz + 2; z++)
        for (int y = yb - 1; y <= yb + 1; y++)
            if (z >= 0 && z < nc[2] && y >= 0 && y < nyb && (z % 3) + 3 * (y % 2) < col &&
                !__atomic_load_n(&done[(size_t)z * (size_t)nyb + (size_t)y], __ATOMIC_ACQUIRE))
                return 0;
    return 1;
}

/* The first task of list L[0, len) (places in the sequence, pse_task_at) from *pos on, among
 * up to window untaken ones, that is ready (pse_ready) and claimed by this thread (taken[key]
 * exchanged from 0 to 1); -1 if none.  *pos moves past the taken tasks at the front of what
 * is left.  (The pair loop's claims in critical-path order.) */
static inline long pse_claim_ready(const long *L, long len, long *pos, long window, const long tcount[6],
                                   const pse_task *tasks, long ntask_max, int nyb, const int nc[3], const long *done,
                                   long *taken)
{
    for (long k = *pos, seen = 0; k < len && seen < window; k++) {
        int cc = 0;
        const long gg = L[k];
        const pse_task *tt = pse_task_at(gg, tcount, tasks, ntask_max, &cc); /* (sets cc first) */
        const long kk = pse_task_key(tt, cc, nyb);
        if (__atomic_load_n(&taken[kk], __ATOMIC_RELAXED)) {
            if (k == *pos) (*pos)++;
            continue;
        }
        seen++;
        if (pse_ready(done, nc, nyb, kk, cc) && !__atomic_exchange_n(&taken[kk], 1, __ATOMIC_ACQ_REL)) return gg;
    }
    return -1;
}

/* Sets of up to this many vortons build their cell list beside the robust limits (diffuse_pass);
 * larger ones take the limits first and the list with the team (vp_bins_build's parallel sort),
 * since there the limits' sample is a small part of the set-up. */
#define PSE_SPECULATE_MAX 4096
/* Sets of up to PSE_SLAB_MAX vortons run the pair loop in slabs (diffuse_pass): 2 up to
 * PSE_SLAB_MAX / 4 vortons, else PSE_SLABS_MAX.  The count depends on the set alone, never on
 * the threads, so the bits do not either.  (Four slabs cost 2-3% at 2 threads against two on
 * lattices of 2744 and 4096 vortons, but keep four threads busy on larger machines; past
 * 4096, slabs were slower than the coloured tasks: a 1e4 lattice 0.97x at 2 threads.) */
#define PSE_SLAB_MAX 4096
#define PSE_SLABS_MAX 4
static inline int pse_slab_count(size_t n) { return n <= PSE_SLAB_MAX / 4 ? 2 : PSE_SLABS_MAX; }
/* A larger team takes the tasks in critical-path order (pse_prio_list) up to this
 * many tasks, looking up to PSE_PRIO_WINDOW untaken ones ahead for a ready one; above it, in
 * colour order, longest first, claimed in turn (thousands of tasks balance either way). */
#define PSE_PRIO_MAX 1024
#define PSE_PRIO_WINDOW 16

/* One explicit PSE exchange of length dt (the eddy viscosity's cap uses the step's dt). */
static int diffuse_pass(vp_sim *s, double dt)
{
    vp_vortons *v = &s->vortons;
    size_t n = v->n;
    double nu = s->params.viscosity, kappa = s->params.thermal_diffusivity, cs = s->params.smagorinsky;
    int viscous = nu > 0 || cs > 0;
    if (n < 2 || (!viscous && kappa <= 0)) return VP_OK;
    if (!viscous) { /* heat alone: nothing to do while the fluid is uniform */
        int uniform = 1;
        for (size_t i = 1; i < n && uniform; i++) uniform = v->density->data[i] == v->density->data[0];
        if (uniform) return VP_OK;
    }
    const double *x = v->position->data, *r = v->radius->data;
    double *w = v->vorticity->data, *d = v->density->data;
    double rho0 = s->params.ambient_density, dt_step = s->params.dt;
    double width = s->params.pse_width, cut = s->params.pse_cutoff;
    /* scratch: the sorted arrays (pse_sorted: 6 float fields, V, OC, W4 and O4: PSE_NS doubles
     * a vorton, below, and 4 to align W4 to 32 bytes).  Kept by the sim between steps: a
     * fresh 120 MB block for 1e6 vortons came from mmap every step, and faulting its pages in
     * took ~10% of the step and did not scale with threads. */
    /* the double arrays' length: n, and with slabs their halos' sums (up to one n each) */
    const size_t nn = n <= PSE_SLAB_MAX ? (size_t)pse_slab_count(n) * n : n;
    double *sc = vp_sim_scratch(s, 3 * n + (PSE_NS - 3) * nn + 4);
    if (!sc) return VP_ERR_NOMEM;
    double emax = 0, b0[3] = {INFINITY, INFINITY, INFINITY}, b1[3] = {-INFINITY, -INFINITY, -INFINITY};
    double lim_lo[3], lim_hi[3]; /* outliers go to the edge cells: they sit far from all */
    int any_heat = 0, threads = vp_threads(s);
    /* The set-up: the robust limits of the positions; the box of the positions, their largest
     * PSE spacing (the cell size is half the cutoff at it) and whether any
     * density differs from the ambient (pse_scan); then the cell list over the box
     * (pse_cell_list).  The box of all the positions is the box inside the limits exactly when
     * it lies inside them, as it does in nearly every step (in 600 steps of each scene, all
     * but one); otherwise the positions are scanned again with the limits (PSE_BOX).  min and
     * max are exact, so the box does not depend on the thread count.  With a team, thread 0
     * takes the limits' sample and selections while the others scan; up to
     * PSE_SPECULATE_MAX vortons the last thread scans them all and builds the list meanwhile,
     * which is then dropped in the rare step whose box was not inside the limits.  (At
     * ball_through_smoke's 512 vortons the limits take 3.3 us and the scan and the list 4 us;
     * built after the limits, on one thread, the list had the phase at 2 threads take 55.8 us,
     * 53.5 so; above 4096 vortons, where the team's sort counts, hot_ball's largest sets
     * were 1-4% slower so.) */
    const long sch = (long)n / (16 * threads) > 256 ? (long)n / (16 * threads) : 256, nsc = ((long)n + sch - 1) / sch;
    double *xperm = NULL; /* the positions along the cell list's axes, unless x's own */
    vp_bins bins;
    int have_list = 0, spec_st = VP_OK;
    double lo[3], hi[3];
    if (threads > 1 && nsc > 1 && n <= PSE_SPECULATE_MAX) {
#pragma omp parallel num_threads(threads)
        {
            int me = 0, nth = 1;
#ifdef _OPENMP
            me = omp_get_thread_num(); nth = omp_get_num_threads();
#endif
            if (me == 0) vp_robust_limits_serial(s, 0, lim_lo, lim_hi);
            if (me == nth - 1) {
                pse_scan(0, (long)n, x, r, d, width, b0, b1, &emax, &any_heat);
                for (int a = 0; a < 3; a++) { lo[a] = b0[a] <= b1[a] ? b0[a] : 0; hi[a] = b0[a] <= b1[a] ? b1[a] : 0; }
                spec_st = pse_cell_list(n, x, lo, hi, 0.5 * cut * emax, 1, &xperm, &bins);
            }
        }
        if (spec_st) return spec_st;
        have_list = 1;
    } else if (threads > 1 && nsc > 1) {
        double *cm = malloc(8 * (size_t)nsc * sizeof(double)); /* per chunk: largest spacing, any heat, box */
        if (!cm) return VP_ERR_NOMEM;
        long next = 0;
#pragma omp parallel num_threads(threads)
        {
#ifdef _OPENMP
            if (omp_get_thread_num() == 0)
#endif
                vp_robust_limits_serial(s, 0, lim_lo, lim_hi);
            for (long c; (c = vp_claim(&next)) < nsc;) {
                double *q = cm + 8 * c;
                int ah = 0;
                q[0] = 0;
                for (int a = 0; a < 3; a++) { q[2 + a] = INFINITY; q[5 + a] = -INFINITY; }
                pse_scan(c * sch, vp_block_end(c, sch, (long)n), x, r, d, width, q + 2, q + 5, &q[0], &ah);
                q[1] = ah;
            }
        }
        for (long c = 0; c < nsc; c++) {
            const double *q = cm + 8 * c;
            emax = q[0] > emax ? q[0] : emax; any_heat |= q[1] != 0;
            for (int a = 0; a < 3; a++) { b0[a] = q[2 + a] < b0[a] ? q[2 + a] : b0[a]; b1[a] = q[5 + a] > b1[a] ? q[5 + a] : b1[a]; }
        }
        free(cm);
    } else {
        vp_robust_limits(s, 0, lim_lo, lim_hi);
        pse_scan(0, (long)n, x, r, d, width, b0, b1, &emax, &any_heat);
    }
    int inside = 1;
    for (int a = 0; a < 3; a++) inside &= !(b0[a] <= b1[a]) || (b0[a] >= lim_lo[a] && b1[a] <= lim_hi[a]);
    if (!inside) { /* an outlier: the box inside the limits */
        if (have_list) { free(xperm); xperm = NULL; vp_bins_free(&bins); have_list = 0; }
        double lo0 = INFINITY, lo1 = INFINITY, lo2 = INFINITY, hi0 = -INFINITY, hi1 = -INFINITY, hi2 = -INFINITY;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(min : lo0, lo1, lo2) reduction(max : hi0, hi1, hi2) \
    if (threads > 1 && n > PSE_SPECULATE_MAX)
        for (long i = 0; i < (long)n; i++) PSE_BOX(i);
        b0[0] = lo0; b0[1] = lo1; b0[2] = lo2; b1[0] = hi0; b1[1] = hi1; b1[2] = hi2;
    }
    if (kappa <= 0) any_heat = 0;
    if (!have_list) {
        for (int a = 0; a < 3; a++) { lo[a] = b0[a] <= b1[a] ? b0[a] : 0; hi[a] = b0[a] <= b1[a] ? b1[a] : 0; }
        if (pse_cell_list(n, x, lo, hi, 0.5 * cut * emax, threads, &xperm, &bins)) return VP_ERR_NOMEM;
    }
    const double *xs = xperm ? xperm : x; /* the positions along the cell list's axes */
    const int *nc = bins.nc;
    const size_t *start = bins.start, *order = bins.order;
    /* The Gaussian's second moment cut at r = cut e keeps the fraction
     *   m(c) = [ (3 sqrt(pi)/8) erf(c) - exp(-c^2) (c^3/2 + 3c/4) ] / (3 sqrt(pi)/8)
     * of the full one (int_0^c r^4 exp(-r^2) dr); dividing by it restores the exact Laplacian
     * normalisation, so the cutoff trades only quadrature, not viscosity (3 e: 0.2% would be
     * missing). */
    const double m4 = 3.0 * sqrt(VP_PI) / 8.0;
    const double kept = (m4 * erf(cut) - exp(-cut * cut) * (0.5 * cut * cut * cut + 0.75 * cut)) / m4;
    const double norm = 4.0 / (VP_PI * sqrt(VP_PI)) / kept;
    /* the sorted arrays (pse_sorted) and their zeroed sums */
    pse_sorted S;
    {
        double *b = sc;
        S.n = n; S.heat = any_heat; S.xs = xs; S.lo = lo; S.order = order;
        S.RF = (float *)b; /* 6 n floats */
        S.V = b + 3 * n; S.OC = b + 3 * n + nn;
        uintptr_t a = (uintptr_t)(b + 3 * n + 2 * nn);
        a = (a + 31) & ~(uintptr_t)31;
        S.W4 = (vp_v4d *)a; S.O4 = S.W4 + nn;
    }
    const pse_input in = {x, r, d, w, s->grid_jacobian, &s->grid, rho0, width, nu, cs, dt_step};
    /* Each pair once.  A row of cells (fixed cy, cz) takes its pairs with itself and with its
     * 12 "forward" rows (dz = 0 and dy = 1..2, or dz = 1..2 and dy = -2..2): every pair of
     * rows within +-2 cells is then handled exactly once.  The 13 rows are copied into one
     * batch ordered by x cell, so the candidates of any vorton of the row (cells cx-2..cx+2 of
     * those rows) are one contiguous range of it; in the own row, only vortons after the query
     * in sorted order count (the key mask), the others met it from their side.  Both sides'
     * sums go straight to the sorted sums (pse_sorted).  A task is a block of
     * PSE_YB = 4 consecutive rows of a plane, taken in cy order so that consecutive batches share
     * 12 of their 13 rows in cache; it writes to rows cy-2 .. cy+PSE_YB+1 of its plane and of the
     * next two, so the blocks are coloured by (cz mod 3, block mod 2) and a block runs only
     * after the blocks of earlier colours whose rows it shares (below): every output is
     * accumulated in colour order, and neither it nor the blocks depend on the thread count,
     * so neither does the result. */
    const int nyb = (nc[1] + PSE_YB - 1) / PSE_YB;
    /* The largest batch, and the tasks of each colour that have work, longest first by the
     * estimate sum over their rows of (own vortons) x (batch size): a plume fills a few of a
     * colour's blocks, and taken in index order one long task often came last, leaving the
     * other threads at the colour's barrier.  A colour's tasks write to disjoint outputs, so
     * their order does not change the result. */
    size_t maxc = 0;
    const long ntask_max = ((long)nc[2] + 2) / 3 * ((long)nyb + 1) / 2 + 1;
    const int slabbed = n <= PSE_SLAB_MAX, ns = slabbed ? pse_slab_count(n) : 0; /* (below) */
    pse_task *tasks = slabbed ? NULL : malloc(6 * (size_t)ntask_max * sizeof(pse_task));
    long tcount[6] = {0, 0, 0, 0, 0, 0};
    if (!slabbed && !tasks) { free(xperm); vp_bins_free(&bins); return VP_ERR_NOMEM; }
    /* One region: the sorted arrays filled by the team in chunks while thread 0 lists the
     * tasks (serial: 1.7 us of ball_through_smoke's 512 vortons, whose fill took 3.4 us on one
     * thread alone and 6.9 on one of two, its arrays last written by both), then the pairs.
     * The tasks run in colour order without a barrier between colours: each thread takes the
     * next task in that order and waits only for the tasks of earlier colours it conflicts
     * with (writes to the same rows: planes within 2 and blocks within 1), by their flags in
     * done (one a block of a plane; 1 for blocks without work).  Every output still takes its
     * contributions in colour order, so the bits are the barriers' (at ball_through_smoke's
     * ~7 tasks a colour, two threads waited at each barrier for a task-time and a half).
     * A team past PSE_SLAB_MAX vortons and with up to PSE_PRIO_MAX tasks takes them instead in
     * critical-path order (pse_prio_list: thread 0 builds it beside the fill), each thread
     * the first untaken task in that order whose waits are met; one thread takes them in
     * colour order (no waits to meet, and a claim stays one fetch-and-add). */
    const long fchunk = n / (8 * (size_t)threads) > 128 ? (long)(n / (8 * (size_t)threads)) : 128;
    const long nfc = ((long)n + fchunk - 1) / fchunk;
    int nomem = 0;
    const int pack = pse_pack_mode(), two_pass = pse_two_pass_ok(pack);
    long total = 0, next = 0, fnext = 0, nh = 0;
    const double f = dt * norm;
    /* per block: its task done; its task taken by a thread (prio) */
    long *done = slabbed ? NULL : malloc((2 * (size_t)nc[2] * (size_t)nyb + 1) * sizeof(long));
    long *taken = done ? done + (size_t)nc[2] * (size_t)nyb : NULL;
    if (!slabbed && !done) { free(tasks); free(xperm); vp_bins_free(&bins); return VP_ERR_NOMEM; }
    /* Up to PSE_SLAB_MAX vortons the pair loop runs in ns slabs (pse_slab_count: 2 or 4,
     * by the vorton count alone), runs of blocks of about equal work (pse_block_split), each
     * taken by one thread in block order, with no waits: slab t's writes to the vortons of
     * later slabs (its halo: the planes within 2 of its last) go to halo sums of their own
     * (records V and W4 copied, sums zeroed: places hoff[t] .. of the double arrays, past n),
     * added to those vortons' own sums after the pair loop, halo after halo in slab order.
     * Every output then takes its contributions in one order, whatever thread ran which slab:
     * the bits do not depend on the thread count.  A thread runs the slabs t with
     * me ns / nth <= t < (me + 1) ns / nth, fills their sorted arrays and runs their
     * exchange, so their data stays in its core's cache from the fill to the exchange; with
     * more threads than slabs the others have no pair work.  (At ball_through_smoke's 512
     * vortons the colours and their waits held two threads to 1.62-1.68x of one: each
     * waited ~6 us for the other's earlier colours and the task list's 4.7 us read the other
     * core's cell list; in two slabs the halo's copies and sums cost ~1 us and the phase is
     * 1.04-1.06x faster at 2 threads, 1.70-1.74x of one.) */
    const size_t nk = (size_t)nc[2] * (size_t)nyb;
    /* (slabbed) per block its work; the slabs' first blocks; per slab but the last, its halo
     * hq[t] .. hend[t] (sorted vortons) and where its sums go (hoff[t]) */
    double *pcost = slabbed ? malloc(nk * sizeof(double) + (PSE_SLABS_MAX + 1) * sizeof(long)) : NULL;
    long *bounds = pcost ? (long *)(pcost + nk) : NULL;
    size_t *rcount = malloc(((size_t)nc[2] + 2) * ((size_t)nc[1] + 4) * sizeof(size_t)); /* (pse_row_counts) */
    size_t hq[PSE_SLABS_MAX] = {0}, hend[PSE_SLABS_MAX] = {0}, hoff[PSE_SLABS_MAX] = {0};
    long split = 0; /* (slabbed) the slabs are made */
    if ((slabbed && !pcost) || !rcount) {
        free(tasks); free(done); free(pcost); free(rcount); free(xperm); vp_bins_free(&bins);
        return VP_ERR_NOMEM;
    }
    /* (a team past PSE_SLAB_MAX) the critical-path order: per block its task's place, the
     * order, per task its bottom level and place (pse_prio_list); whether it is used (thread 0
     * decides, by the number of tasks) */
    long *kmap = threads > 1 && !slabbed ? malloc(nk * sizeof(long) + 6 * (size_t)ntask_max * (sizeof(long) + sizeof(pse_prio))) : NULL;
    long *plist = kmap ? kmap + nk : NULL;
    pse_prio *pscratch = plist ? (pse_prio *)(plist + 6 * ntask_max) : NULL;
    int prio = 0;
#pragma omp parallel num_threads(threads)
    {
        int me = 0, nth = 1;
#ifdef _OPENMP
        me = omp_get_thread_num(); nth = omp_get_num_threads();
#endif
        /* this thread's block keys [k0, k1) and sorted vortons [q0, q1) (slabbed) */
        long k0 = 0, k1 = (long)nk;
        /* the last thread makes the slabs and their halos (it built the cell list, where a
         * team built it beside the robust limits: up to PSE_SPECULATE_MAX vortons) */
        if (slabbed && me == nth - 1) {
            pse_block_split(nc, start, nyb, ns, pcost, bounds, &maxc, rcount);
            size_t off = n;
            for (int t = 0; t + 1 < ns; t++) { /* from slab t + 1's first vorton to the end of the
                                                * planes within 2 of slab t's last block */
                const long kl = bounds[t + 1];
                long kr = kl > 0 ? ((kl - 1) / nyb + 3) * nyb : kl;
                if (kr > (long)nk) kr = (long)nk;
                hq[t] = pse_block_start(nc, start, nyb, kl);
                hend[t] = pse_block_start(nc, start, nyb, kr);
                hoff[t] = off;
                off += hend[t] - hq[t]; /* at most (ns - 1) n in all: the scratch's nn */
            }
            __atomic_store_n(&split, 1, __ATOMIC_RELEASE);
        }
        if (me == 0 && !slabbed)
        {
            pse_tasks_list(nc, start, nyb, ntask_max, tasks, tcount, &maxc, rcount);
            for (size_t b = 0; b < (size_t)nc[2] * (size_t)nyb; b++) { done[b] = 1; taken[b] = 0; }
            for (int col = 0; col < 6; col++) { /* (a block's flag is at its key) */
                for (long t = 0; t < tcount[col]; t++) done[pse_task_key(tasks + (size_t)col * (size_t)ntask_max + t, col, nyb)] = 0;
                total += tcount[col];
            }
            if (kmap && total <= PSE_PRIO_MAX) {
                pse_prio_list(nc, nyb, tcount, tasks, ntask_max, total, kmap, pscratch, plist);
                prio = 1;
            }
        }
        int sl0 = 0, sl1 = 0; /* (slabbed) this thread's slabs */
        if (slabbed) {
            vp_wait_flag(&split);
            sl0 = me * ns / nth; sl1 = (me + 1) * ns / nth;
            k0 = bounds[sl0]; k1 = bounds[sl1];
        }
        const size_t q0 = pse_block_start(nc, start, nyb, k0), q1 = pse_block_start(nc, start, nyb, k1);
        if (slabbed) {
            pse_fill(&S, (long)q0, (long)q1, &in);
            /* the halos' records of the vortons it filled, while they are in its cache (the
             * halo's writer copying them after the barrier took 1.5 us of ball_through_smoke's
             * ~100, a miss a line), and its own slabs' halo sums zeroed */
            for (int t = 0; t + 1 < ns; t++) {
                const size_t a = hq[t] > q0 ? hq[t] : q0, b = hend[t] < q1 ? hend[t] : q1;
                for (size_t j = a; j < b; j++) { S.V[hoff[t] + j - hq[t]] = S.V[j]; S.W4[hoff[t] + j - hq[t]] = S.W4[j]; }
            }
            for (int t = sl0; t < sl1 && t + 1 < ns; t++)
                for (size_t h = hoff[t]; h < hoff[t] + (hend[t] - hq[t]); h++) { S.O4[h] = (vp_v4d){0, 0, 0, 0}; S.OC[h] = 0; }
        } else {
            for (long c; (c = vp_claim(&fnext)) < nfc;) {
                pse_fill(&S, c * fchunk, vp_block_end(c, fchunk, (long)n), &in);
            }
        }
#pragma omp barrier
        long ppos = 0; /* (prio) where plist's untaken tasks start */
        const size_t fs = maxc + PSE_PAD; /* a float field's stride: the batch and its padding */
        float *bf = malloc(10 * fs * sizeof(float)); /* 5 fields, the key, 2 weights, V, c */
        size_t *xoff = malloc((nc[0] + 1) * sizeof(size_t)), *idx = malloc((maxc + 4) * sizeof(size_t));
        int32_t *pk = malloc((maxc + 2 * PSE_PAD) * sizeof(int32_t));
        size_t *gix = slabbed ? malloc((maxc + 4) * sizeof(size_t)) : NULL; /* idx with a halo moved */
        uint8_t *flag = malloc(maxc + 2 * PSE_PAD);
        /* vp_pse_cell2's packed fields (12 of stride xns) and pair lists (4), where it is used
         * (AVX2 without AVX-512, no heat) */
        const size_t xns = maxc + 2 * PSE_PAD;
        float *xn = two_pass && !any_heat ? malloc(16 * xns * sizeof(float)) : NULL;
        int32_t *pk4 = xn ? (int32_t *)(xn + 12 * xns) : NULL;
        if (!bf || !xoff || !idx || !pk || !flag || (two_pass && !any_heat && !xn) || (slabbed && !gix)) {
#pragma omp atomic write
            nomem = 1;
        }
        long sk = k0; /* (slabbed) the next block key, and its slab */
        int sl = sl0;
        for (;;) {
            long g = -1, key = 0;
            int col = 0;
            if (slabbed) {
                if (sk >= k1) break;
                key = sk++;
                while (key >= bounds[sl + 1]) sl++;
            } else if (prio) { /* the first ready task of the critical-path order */
                for (int spins = 0;;) {
                    g = pse_claim_ready(plist, total, &ppos, PSE_PRIO_WINDOW, tcount, tasks, ntask_max, nyb, nc, done, taken);
                    if (g >= 0 || ppos >= total) break;
                    if (spins < VP_SPIN_PAUSES) { vp_spin_pause(); spins++; } /* (as vp_wait_count) */
                    else sched_yield();
                }
                if (g < 0) break;
            } else if ((g = vp_claim(&next)) >= total) {
                break;
            }
            if (!slabbed) {
                const pse_task *tk = pse_task_at(g, tcount, tasks, ntask_max, &col); /* (sets col first) */
                key = pse_task_key(tk, col, nyb);
            }
            const int cz = (int)(key / nyb), yb = (int)(key % nyb);
            if (!slabbed)
                for (int z = cz - 2; z <= cz + 2; z++) /* the conflicting tasks of earlier colours */
                    for (int y = yb - 1; y <= yb + 1; y++)
                        if (z >= 0 && z < nc[2] && y >= 0 && y < nyb && (z % 3) + 3 * (y % 2) < col)
                            vp_wait_flag(&done[(size_t)z * (size_t)nyb + (size_t)y]);
            /* (slabbed) a slab but the last writes its halo's sums apart: j >= hq to hoff + (j - hq) */
            const size_t hlim = slabbed && sl + 1 < ns ? hq[sl] : SIZE_MAX, hmov = hlim != SIZE_MAX ? hoff[sl] - hq[sl] : 0;
            for (int cy = PSE_YB * yb; cy < PSE_YB * (yb + 1) && cy < nc[1]; cy++) {
                size_t r0 = (size_t)nc[0] * ((size_t)cy + (size_t)nc[1] * cz);
                if (!bf || !xoff || !idx || !pk || !flag || (two_pass && !any_heat && !xn) || (slabbed && !gix) ||
                    start[r0 + nc[0]] == start[r0])
                    continue;
                /* the forward rows that hold vortons, and the x cells the batch needs: those
                 * within 2 of the own row's first and last occupied ones (in a sparse set, such
                 * as a plume, most rows and cells are empty; the batch is the same) */
                size_t rows[13];
                int nr = 0;
                for (int f = 0; f < 13; f++) {
                    int ky = cy + pse_fwd[f][0], kz = cz + pse_fwd[f][1];
                    if (kz < nc[2] && ky >= 0 && ky < nc[1]) {
                        const size_t row = (size_t)nc[0] * ((size_t)ky + (size_t)nc[1] * kz);
                        if (start[row + nc[0]] > start[row]) rows[nr++] = row;
                    }
                }
                int qx0 = 0, qx1 = nc[0] - 1;
                while (start[r0 + qx0 + 1] == start[r0]) qx0++;
                while (start[r0 + qx1] == start[r0 + nc[0]]) qx1--;
                const int bx0 = qx0 > 2 ? qx0 - 2 : 0, bx1 = qx1 + 2 < nc[0] - 1 ? qx1 + 2 : nc[0] - 1;
                /* batch fields: float x y z e nu key V, sum c */
                float *fb[5];
                int32_t *kb = (int32_t *)(bf + 5 * fs); /* own-row key */
                for (int f = 0; f < 5; f++) fb[f] = bf + f * fs;
                float *vf = bf + 8 * fs, *ocf = bf + 9 * fs;
                /* the batch's sorted indices, by x cell then row: each row's cells are
                 * consecutive in the sorted order, so a row's next cell starts where its last
                 * ended (rcur: one load a cell, not two); a cell of at most four vortons (nearly
                 * all, in a plume or a lattice) is written without a branch on its count, four
                 * slots whatever it holds (idx has room for maxc + 4).  (In hot_ball this loop was a
                 * fifth of diffusion: two loads and an unpredictable loop exit a cell.) */
                size_t m = 0, rcur[13];
                for (int k = 0; k < nr; k++) rcur[k] = start[rows[k] + bx0];
                for (int cx = bx0; cx <= bx1; cx++) {
                    xoff[cx] = m;
                    for (int k = 0; k < nr; k++) {
                        const size_t j0 = rcur[k], j1 = start[rows[k] + cx + 1];
                        rcur[k] = j1;
                        for (size_t t = 0; t < 4; t++) idx[m + t] = j0 + t; /* (one vector store) */
                        if (j1 - j0 > 4)
                            for (size_t j = j0 + 4; j < j1; j++) idx[m + (j - j0)] = j;
                        m += j1 - j0;
                    }
                }
                xoff[bx1 + 1] = m; /* xoff is read at bx0 .. bx1 + 1 only */
                const size_t *gi = idx; /* the candidates' places in the double arrays */
                if (hlim != SIZE_MAX && start[rows[nr - 1] + nc[0]] > hlim) {
                    for (size_t k = 0; k < m; k++) gix[k] = idx[k] >= hlim ? idx[k] + hmov : idx[k];
                    gi = gix;
                }
                const size_t own0 = start[r0], own1 = start[r0 + nc[0]];
                pse_batch_fill(m, idx, S.RF, n, own0, own1, fb, kb, vf);
                for (size_t k = m; k < m + PSE_PAD; k++) { /* finite padding for the last lanes */
                    fb[0][k] = fb[1][k] = fb[2][k] = fb[4][k] = 0.0f; fb[3][k] = 1.0f;
                    kb[k] = INT32_MIN; vf[k] = 0.0f;
                }
                int uniform = 1; /* every spacing of the batch the same float */
                for (size_t k = 1; k < m; k++) uniform &= fb[3][k] == fb[3][0];
                if (any_heat) memset(ocf, 0, (m + PSE_PAD) * sizeof(float));
                for (int cx = qx0; cx <= qx1; cx++) {
                    size_t b0 = xoff[cx - 2 > bx0 ? cx - 2 : bx0], b1 = xoff[cx + 3 < bx1 + 1 ? cx + 3 : bx1 + 1];
                    if (xn && b1 - b0 >= PSE_TWO_PASS_MIN) { /* (xn: AVX2, no heat) */ /* the cell's queries 4 at a time */
                        for (size_t q = start[r0 + cx], qe = start[r0 + cx + 1]; q < qe; q += 4)
                            vp_pse_cell2(b1 - b0, fb[0] + b0, fb[1] + b0, fb[2] + b0, fb[3] + b0, fb[4] + b0, kb + b0,
                                         gi + b0, S.V, S.W4, S.O4, S.OC, bf + 6 * fs, bf + 7 * fs, pk4, xn, xns,
                                         S.RF, n, q, qe - q < 4 ? (int)(qe - q) : 4, own0, (float)(cut * cut), uniform);
                        continue;
                    }
                    for (size_t q = start[r0 + cx]; q < start[r0 + cx + 1]; q++) {
                        const float *RF = S.RF;
                        const float qf[5] = {RF[q], RF[n + q], RF[2 * n + q], RF[3 * n + q], RF[4 * n + q]};
                        double acc[5] = {0, 0, 0, 0, 0};
                        const vp_v4d wq = S.W4[q];
                        const double wq4[4] = {wq[0], wq[1], wq[2], any_heat ? wq[3] : 0.0};
                        vp_pse_pairs(b1 - b0, fb[0] + b0, fb[1] + b0, fb[2] + b0, fb[3] + b0, fb[4] + b0,
                                     kb + b0, gi + b0, S.V, S.W4, S.O4, vf + b0, ocf + b0, bf + 6 * fs,
                                     bf + 7 * fs, flag, pk, qf, (int32_t)(q - own0), S.V[q], wq4, (float)(cut * cut),
                                     (float)kappa, uniform, any_heat, pack, acc);
                        const vp_v4d a4 = {acc[0], acc[1], acc[2], acc[3]};
                        S.O4[q] += a4;
                        S.OC[q] += acc[4];
                    }
                }
                /* with heat, the candidates' rate sums (float, in the batch) back to their rows */
                if (any_heat)
                    for (size_t k = 0; k < m; k++) S.OC[gi[k]] += ocf[k];
            } /* cy */
            if (!slabbed) __atomic_store_n(&done[key], 1, __ATOMIC_RELEASE);
        }
        free(bf); free(xoff); free(idx); free(pk); free(flag); free(xn); free(gix);
        /* The stability guard's count of bunched vortons (pse_guard) and, with none (nearly
         * always), the exchange, in the same region (a region each, or serial below 4096
         * and 512 vortons, they were 3 us of ball_through_smoke's 61 on two threads) */
#pragma omp barrier
        int failed;
#pragma omp atomic read
        failed = nomem;
        if (!failed && slabbed) {
            /* the halo sums added to their vortons' own, halo after halo, each vorton by its
             * slab's thread (the same order at any thread count); then each thread counts its
             * own bunched vortons */
            for (int t = 0; t + 1 < ns; t++) {
                const size_t a = hq[t] > q0 ? hq[t] : q0, b = hend[t] < q1 ? hend[t] : q1;
                for (size_t j = a; j < b; j++) {
                    S.O4[j] += S.O4[hoff[t] + j - hq[t]];
                    S.OC[j] += S.OC[hoff[t] + j - hq[t]];
                }
            }
            long c = 0;
            for (size_t q = q0; q < q1; q++) c += f * pse_rate(&S, q) > PSE_MAX_RATE;
#pragma omp atomic
            nh += c;
#pragma omp barrier
        } else if (!failed) {
#pragma omp for schedule(static) reduction(+ : nh)
            for (long q = 0; q < (long)n; q++) nh += f * pse_rate(&S, (size_t)q) > PSE_MAX_RATE;
        }
        if (!failed) {
            if (nh == 0 && slabbed) {
                for (long q = (long)q0; q < (long)q1; q++) pse_exchange(&S, q, w, d, f, kappa * dt * norm, rho0, viscous, any_heat);
            } else if (nh == 0) {
#pragma omp for schedule(static) nowait
                for (long q = 0; q < (long)n; q++) pse_exchange(&S, q, w, d, f, kappa * dt * norm, rho0, viscous, any_heat);
            }
        }
    }
    free(tasks); free(done); free(pcost); free(kmap); free(rcount);
    if (nomem || (nh > 0 && pse_guard(&bins, &S, f, (float)(cut * cut), threads, (size_t)nh))) {
        free(xperm); vp_bins_free(&bins); return VP_ERR_NOMEM;
    }
    free(xperm);
    if (nh > 0) { /* the exchange after the guard's corrections */
#pragma omp parallel for num_threads(threads) schedule(static) if (n > PSE_PARALLEL_MIN)
        for (long q = 0; q < (long)n; q++) pse_exchange(&S, q, w, d, f, kappa * dt * norm, rho0, viscous, any_heat);
    }
    vp_bins_free(&bins);
    return VP_OK;
}

/* Physics.md 2.5.  The explicit exchange is stable while every vorton's rate sum c_i <= 1
 * (pse_guard); on a lattice of spacing e, c = 4 nu dt / e^2 (the continuum sum; the lattice
 * sum is ~0.83 of it).  The eddy viscosity is capped inside that, but a molecular viscosity
 * is not: nu = 0.01 on a lattice of 1e5 vortons in a unit cube (e = 0.022) gives c = 2.8,
 * whose checkerboard mode grew 20x a step until the run failed in 10 steps.  Rather than
 * diffuse less than asked (the guard alone would cap c_i at 1), the exchange then runs as
 * k = ceil(4 nu dt / e_min^2) substeps of dt / k (at most PSE_MAX_SUBSTEPS; beyond that the
 * guard keeps it stable), so the viscosity is the one asked for at k times the cost. */
#define PSE_MAX_SUBSTEPS 16
int vp_diffuse(vp_sim *s)
{
    const vp_vortons *v = &s->vortons;
    const double dt = s->params.dt, width = s->params.pse_width;
    double nu = s->params.viscosity > s->params.thermal_diffusivity ? s->params.viscosity : s->params.thermal_diffusivity;
    double rmin = INFINITY;
    const double *rad = v->radius->data;
    const int threads = vp_threads(s);
    if (v->n > 4096 && threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(min : rmin)
        for (long i = 0; i < (long)v->n; i++) rmin = rad[i] < rmin ? rad[i] : rmin; /* exact: any thread count */
    } else { /* here, not in a region of one thread (libgomp's costs 0.3-0.6 us and a futex call) */
        for (size_t i = 0; i < v->n; i++) rmin = rad[i] < rmin ? rad[i] : rmin;
    }
    int k = 1;
    if (v->n > 1 && nu > 0 && rmin > 0) {
        double e = width * cbrt(vp_volume(rmin)), c = 4.0 * nu * dt / (e * e);
        if (c > 1.0) k = c < PSE_MAX_SUBSTEPS ? (int)ceil(c) : PSE_MAX_SUBSTEPS;
    }
    s->pse_substeps = k;
    for (int i = 0; i < k; i++) {
        int st = diffuse_pass(s, dt / k);
        if (st) return st;
    }
    return VP_OK;
}
