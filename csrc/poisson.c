/* poisson.c: the `poisson` velocity solver, vortex-in-cell with free-space boundaries
 * (method step 2, part 6).
 *
 * The grid velocity is the regularised Biot-Savart integral of the grid vorticity,
 *
 *   u(x_n) = sum_m  Omega_m x G(x_n - x_m),     G(r) = r g(|r|^2, sigma^2) / (4 pi),
 *
 * with Omega_m = sum_i a_i W(x_i - x_m) the vortons' strengths a_i = w_i V_i splatted onto the
 * nodes by cloud-in-cell (W: the trilinear tent; Omega_m / h^3 is the grid vorticity) and g the
 * algebraic core of kernel.h.  That is u = curl A with lap A = -w, A = w * 1/(4 pi |r|) solved
 * in free space (unbounded, no walls), evaluated exactly as a discrete convolution: the grid is
 * zero-padded to N >= 2n nodes per axis (Hockney and Eastwood), so the circular convolution of
 * the FFTs never wraps a source onto a target (no aliasing) and the result is the free-space
 * sum.  The kernel is odd, so its transform is purely imaginary and the cross product with the
 * three transformed strength components is done pointwise: 3 forward and 3 inverse 3D FFTs per
 * solve (pocketfft, 1D transforms along each axis, parallel over lines, pruned where the
 * padded half is known to be zero or is not needed).
 *
 * Precision.  The transforms, the work arrays and the kernel transform are float32 (the
 * kernel transform is computed in double on an octant, build_kernel, and stored in float), eight
 * lines per AVX2 vector (fft_lines.h): the strengths are splatted in double and rounded once
 * into the transform as grid vorticity (strength / h^3: values of the flow's own magnitude,
 * whatever the length unit), and the velocity comes back into the double grid.  Rounding through the
 * six 3D transforms is a few 1e-7 of the field's largest value, far below the method's own
 * error (the CIC splat and the kernel's core: 1e-2 to 1e-1 against the direct sum); poisson's
 * error against the direct sum is the double transforms' to six digits.
 *
 * Smoothing.  CIC spreads each vorton with per-axis variance h^2/6; the kernel core adds
 * sigma^2/2 (kernel.h).  A vorton of radius s carried by the direct solver has variance s^2/2,
 * so sigma^2 = s^2 - h^2/3 would match it, but the lattice sum of the kernel is only accurate
 * for sigma >~ h (its aliasing error falls like exp(-2 pi sigma / h)), so
 *   sigma = h * max(SIGMA_MIN_CELLS, sqrt(<s^2>/h^2 - 1/3)),
 * with <s^2> the |a|-weighted mean square vorton radius.  The ratio sigma/h is rounded to
 * 1/16 octave so that the kernel transform, which for fixed sigma/h depends on h only as a
 * factor h^-2, is cached between steps keyed by the padded shape and that ratio.
 *
 * Memory (kept between steps): three complex work arrays holding the grid's n2 planes of the
 * x-y transform (M0 N1 N2/2 values each, M0 = N0/2 + 1) and a quarter of each kernel transform;
 * about 32 MB for a 76^3 grid (N = 160), plus while a kernel is built up to four octants of
 * doubles (each (N/2 + 1)^3: 4.2 MB at N = 160).
 *
 * Vortons outside the grid (beyond the robust limits of method step 1) cannot be splatted;
 * their velocity at every node is added by the direct sum with their own radii. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernel.h"
#include "fft_lines.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* Smallest kernel core in grid cells.  0.8 h: the discrete lattice sum of the kernel differs
 * from the continuous integral by about exp(-2 pi 0.8) = 0.7% at the grid scale only. */
#define SIGMA_MIN_CELLS 0.8
#define RATIO_STEPS_PER_OCTAVE 16.0
/* The transforms run in parallel above this many complex values per component (M0 N1 N2):
 * from a few hundred vortons a second thread pays. */
#define POISSON_PARALLEL_MIN 2000
#define POISSON_MAX_OUT_SCALE 1e30 /* (vp_poisson_velocity_grid: beyond it, in float32 with the kernel, inf) */

struct vp_poisson {
    int N[3];            /* padded FFT lengths (even, >= 2 n) */
    int M0;              /* N[0] / 2 + 1 complex values along x after the real transform */
    double ratio;        /* sigma / h of the cached kernel */
    vp_fft *px;          /* length N[0] real */
    vp_fft *py, *pz;     /* lengths N[1], N[2] complex */
    float *kernel[3];    /* Im FFT(G_c) for h = 1 (the transform is imaginary), the quarter
                            ky <= N1/2, kz <= N2/2: M0*(N1/2+1)*(N2/2+1) each; the rest
                            follows from the parity of G_c in y and z */
    float *work[3];      /* complex work arrays, M0*N1 per plane for the N2/2 planes a grid
                            can fill (z is transformed row by row in a line buffer) */
    size_t len;          /* M0*N1*N2: the lattice's transform size */
    size_t work_len;     /* M0*N1*(N2/2) complex values per work array */
    size_t kernel_len;   /* M0*(N1/2+1)*(N2/2+1) */
    int valid;           /* 1 once the kernel transform is computed */
    double in_scale;     /* the forward pass's factor on the splatted strengths: 1 / h^3, so that
                            float32 holds the grid vorticity (of the flow's own magnitude) rather
                            than strengths w V, which underflow at small length scales (on
                            enormous grids 1 / (h^2 Ntot): vp_poisson_velocity_grid) */
};

void vp_poisson_free(struct vp_poisson *p)
{
    if (!p) return;
    vp_fft_free(p->px);
    vp_fft_free(p->py);
    vp_fft_free(p->pz);
    for (int c = 0; c < 3; c++) { free(p->kernel[c]); free(p->work[c]); }
    free(p);
}

static struct vp_poisson *poisson_create(const int N[3])
{
    struct vp_poisson *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    for (int a = 0; a < 3; a++) p->N[a] = N[a];
    p->M0 = N[0] / 2 + 1;
    p->len = (size_t)p->M0 * (size_t)N[1] * (size_t)N[2];
    p->work_len = (size_t)p->M0 * (size_t)N[1] * (size_t)(N[2] / 2);
    p->kernel_len = (size_t)p->M0 * (size_t)(N[1] / 2 + 1) * (size_t)(N[2] / 2 + 1);
    p->px = vp_fft_new((size_t)N[0], 1);
    p->py = vp_fft_new((size_t)N[1], 0);
    p->pz = vp_fft_new((size_t)N[2], 0);
    int ok = p->px && p->py && p->pz;
    for (int c = 0; c < 3 && ok; c++) {
        p->kernel[c] = malloc(p->kernel_len * sizeof(float));
        p->work[c] = malloc(2 * p->work_len * sizeof(float));
        ok = p->kernel[c] && p->work[c];
    }
    if (!ok) { vp_poisson_free(p); return NULL; }
    return p;
}


/* Eight neighbouring complex values (re0 im0 re1 im1 ... re7 im7) to a lane record
 * (re0 .. re7 im0 .. im7), and back: two 8-float shuffles each way.  REC floats a record. */
#define W8 VP_FFT_LANES
#define REC (2 * VP_FFT_LANES)
typedef float vp_v8f __attribute__((vector_size(32)));
typedef int vp_v8i __attribute__((vector_size(32)));
#if defined(__clang__)
#define VP_SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define VP_SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, (vp_v8i){__VA_ARGS__})
#endif
static inline void to_lanes(const float *src, float *rec)
{
    vp_v8f a, b;
    memcpy(&a, src, sizeof a); memcpy(&b, src + 8, sizeof b);
    vp_v8f re = VP_SHUFFLE8(a, b, 0, 2, 4, 6, 8, 10, 12, 14), im = VP_SHUFFLE8(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
    memcpy(rec, &re, sizeof re); memcpy(rec + 8, &im, sizeof im);
}
static inline void from_lanes(const float *rec, float *dst)
{
    vp_v8f re, im;
    memcpy(&re, rec, sizeof re); memcpy(&im, rec + 8, sizeof im);
    vp_v8f a = VP_SHUFFLE8(re, im, 0, 8, 1, 9, 2, 10, 3, 11), b = VP_SHUFFLE8(re, im, 4, 12, 5, 13, 6, 14, 7, 15);
    memcpy(dst, &a, sizeof a); memcpy(dst + 8, &b, sizeof b);
}

/* Lines i0 .. i0+B-1 of record t (complex, stride 2 between lines at src) into the lane
 * records of `groups` groups (group g at lanes + REC g N, record t at + REC t), zeros in the
 * lanes past B; and back, for the B lines only. */
static inline void gather_lanes(const float *src, int B, int groups, float *lanes, size_t N, int t)
{
    int b = 0;
    for (; b + W8 <= B; b += W8)
        to_lanes(src + 2 * b, lanes + REC * ((size_t)(b / W8) * N + (size_t)t));
    if (b < W8 * groups) { /* the last, partial group */
        float tmp[REC] = {0};
        for (int q = 0; q < B - b; q++) { tmp[2 * q] = src[2 * (b + q)]; tmp[2 * q + 1] = src[2 * (b + q) + 1]; }
        to_lanes(tmp, lanes + REC * ((size_t)(b / W8) * N + (size_t)t));
    }
}
static inline void scatter_lanes(const float *lanes, size_t N, int t, int B, float *dst)
{
    int b = 0;
    for (; b + W8 <= B; b += W8)
        from_lanes(lanes + REC * ((size_t)(b / W8) * N + (size_t)t), dst + 2 * b);
    if (b < B) {
        float tmp[REC];
        from_lanes(lanes + REC * ((size_t)(b / W8) * N + (size_t)t), tmp);
        for (int q = 0; q < B - b; q++) { dst[2 * (b + q)] = tmp[2 * q]; dst[2 * (b + q) + 1] = tmp[2 * q + 1]; }
    }
}

/* Complex transforms of the M0 lines base[i + t stride], t = 0..N-1, i = 0..M0-1 (complex
 * indices), in blocks of LINE_BLOCK neighbouring lines, so that every gathered cache line is
 * used whole, each block as groups of VP_FFT_LANES lines transformed together (fft_lines.h;
 * lanes past the last line carry zeros).  Input beyond t >= n_in is taken as zero; only
 * t < n_keep is written back.  buf: line_buffer_floats.  Nonzero when out of memory. */
#define LINE_BLOCK 16 /* (8 to 32 about the same) */
#define ROW_BLOCK 32  /* lines per z-convolution block (convolve_row) */
#define GROUPS (LINE_BLOCK / VP_FFT_LANES)
#define ROW_GROUPS (ROW_BLOCK / VP_FFT_LANES)
VP_CLONES
static int strided_lines(const vp_fft *plan, int forward, float *base, size_t stride, int M0, int N,
                         int n_in, int n_keep, float *buf)
{
    for (int i0 = 0; i0 < M0; i0 += LINE_BLOCK) {
        const int B = M0 - i0 < LINE_BLOCK ? M0 - i0 : LINE_BLOCK, groups = (B + VP_FFT_LANES - 1) / VP_FFT_LANES;
        for (int t = 0; t < n_in; t++) gather_lanes(base + 2 * ((size_t)i0 + (size_t)t * stride), B, groups, buf, (size_t)N, t);
        for (int g = 0; g < groups; g++) {
            float *lines = buf + REC * (size_t)g * N;
            memset(lines + REC * (size_t)n_in, 0, REC * (size_t)(N - n_in) * sizeof(float));
            if (vp_fft_exec(plan, lines, forward)) return 1;
        }
        for (int t = 0; t < n_keep; t++) scatter_lanes(buf, (size_t)N, t, B, base + 2 * ((size_t)i0 + (size_t)t * stride));
    }
    return 0;
}

/* Per-thread line buffer for the stages below (floats), and its allocation (aligned for the
 * vector transforms; free() releases it). */
static size_t line_buffer_floats(const struct vp_poisson *p)
{
    size_t a = W8 * (size_t)p->N[0], b = GROUPS * REC * (size_t)p->N[1], c = 3 * ROW_GROUPS * REC * (size_t)p->N[2];
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

static float *line_buffer(size_t floats)
{
    return aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
}

/* Stage A, one z-plane k of component c: real transforms along x of the rows j < n1 that hold
 * data (VP_FFT_LANES rows at a time), then complex transforms along y (rows j >= n1 are
 * zero).  Source: `src` holds n0*n1*n2 nodes with 3 interleaved components (field c at
 * src[3 node + c]). */
static int plane_forward(struct vp_poisson *p, const double *src, const int n[3], int c, int k,
                         float *work, float *buf)
{
    const int N0 = p->N[0], N1 = p->N[1], M0 = p->M0, W = VP_FFT_LANES;
    const size_t sy = (size_t)M0, sz = (size_t)M0 * (size_t)N1;
    float *plane = work + 2 * (size_t)k * sz;
    for (int j0 = 0; j0 < n[1]; j0 += W) {
        const int rows = n[1] - j0 < W ? n[1] - j0 : W;
        for (int l = 0; l < W; l++) {
            const int j = j0 + l;
            if (l >= rows) {
                for (int i = 0; i < N0; i++) buf[W * i + l] = 0.0f;
            } else {
                const double *row = src + 3 * ((size_t)n[0] * ((size_t)j + (size_t)n[1] * (size_t)k)) + c;
                for (int i = 0; i < n[0]; i++) buf[W * i + l] = (float)(row[3 * (size_t)i] * p->in_scale);
                for (int i = n[0]; i < N0; i++) buf[W * i + l] = 0.0f;
            }
        }
        if (vp_fft_exec(p->px, buf, 1)) return 1;
        for (int l = 0; l < rows; l++) { /* half-complex to complex, row j0 + l */
            float *out = plane + 2 * (size_t)(j0 + l) * sy;
            out[0] = buf[l]; out[1] = 0.0f;
            for (int m = 1; m < N0 / 2; m++) { out[2 * m] = buf[W * (2 * m - 1) + l]; out[2 * m + 1] = buf[W * 2 * m + l]; }
            out[2 * (N0 / 2)] = buf[W * (N0 - 1) + l]; out[2 * (N0 / 2) + 1] = 0.0f;
        }
    }
    return strided_lines(p->py, 1, plane, sy, M0, N1, n[1], N1, buf);
}

/* Stage C, one z-plane k < n2 of component c: inverse transforms along y (only j < n1 kept),
 * then real inverse transforms along x of those rows (VP_FFT_LANES at a time), i < n0
 * written to dst[3 node + c]. */
static int plane_inverse(struct vp_poisson *p, double *dst, const int n[3], int c, int k, float *buf)
{
    const int N0 = p->N[0], N1 = p->N[1], M0 = p->M0, W = VP_FFT_LANES;
    const size_t sy = (size_t)M0, sz = (size_t)M0 * (size_t)N1;
    float *plane = p->work[c] + 2 * (size_t)k * sz;
    if (strided_lines(p->py, 0, plane, sy, M0, N1, N1, n[1], buf)) return 1;
    for (int j0 = 0; j0 < n[1]; j0 += W) {
        const int rows = n[1] - j0 < W ? n[1] - j0 : W;
        for (int l = 0; l < W; l++) { /* complex to half-complex; lanes past the last row zero */
            if (l >= rows) {
                for (int i = 0; i < N0; i++) buf[W * i + l] = 0.0f;
                continue;
            }
            const float *in = plane + 2 * (size_t)(j0 + l) * sy;
            buf[l] = in[0];
            for (int m = 1; m < N0 / 2; m++) { buf[W * (2 * m - 1) + l] = in[2 * m]; buf[W * 2 * m + l] = in[2 * m + 1]; }
            buf[W * (N0 - 1) + l] = in[2 * (N0 / 2)];
        }
        if (vp_fft_exec(p->px, buf, 0)) return 1;
        for (int l = 0; l < rows; l++) {
            double *row = dst + 3 * ((size_t)n[0] * ((size_t)(j0 + l) + (size_t)n[1] * (size_t)k)) + c;
            for (int i = 0; i < n[0]; i++) row[3 * (size_t)i] = (double)buf[W * i + l];
        }
    }
    return 0;
}

/* Stage A: a parallel loop over the 3 n2 (component, plane) pairs, by component and then
 * plane, so that tasks that run together work on neighbouring planes of one component (after
 * the serial splat; the parallel one takes this stage itself, splat_forward). */
static int forward_pass(struct vp_poisson *p, const double *field, const int n[3], int threads)
{
    int fail = 0;
    const long tasks = 3L * n[2];
    const size_t nb = line_buffer_floats(p);
    (void)threads;
#pragma omp parallel num_threads(threads) reduction(| : fail) if (p->len > POISSON_PARALLEL_MIN)
    {
        float *buf = line_buffer(nb);
        if (!buf) fail = 1;
#pragma omp for schedule(dynamic)
        for (long t = 0; t < tasks; t++) {
            if (!buf) continue;
            int c = (int)(t / n[2]), k = (int)(t % n[2]);
            fail |= plane_forward(p, field, n, c, k, p->work[c], buf);
        }
        free(buf);
    }
    return fail ? VP_ERR_NOMEM : VP_OK;
}

/* The transform of the kernel G for h = 1 and the cached core ratio on the quarter ky <= N1/2,
 * kz <= N2/2 (and kx <= N0/2, the real transform's half).  G_c(d) = d_c g(|d|) / 4 pi is odd
 * in d_c and even in the other two offsets, and its Nyquist offsets (-N/2, never a
 * source-target distance since N >= 2n, without a partner) are dropped, so
 * its DFT is -i times the DST-I along c and the DCT-I along the others of its values on the
 * octant of offsets 0 .. N/2 (vp_fft_kernel_octant), in double: an eighth of the lattice.
 * It is rebuilt whenever the padded lattice changes (a growing plume changes it every few
 * dozen frames), at about a third of the cost of the three components' full transforms. */
static int build_kernel(struct vp_poisson *p, int threads)
{
    const int N0 = p->N[0], N1 = p->N[1], N2 = p->N[2], M0 = p->M0, H1 = N1 / 2 + 1, H2 = N2 / 2 + 1;
    const size_t dims[3] = {(size_t)M0, (size_t)H1, (size_t)H2}, len = p->kernel_len;
    const double s2 = p->ratio * p->ratio;
    double *g = malloc(len * sizeof(double)); /* g(|d|) on the octant, shared by the components */
    if (!g) return VP_ERR_NOMEM;
    int fail = 0;
    (void)threads;
#pragma omp parallel num_threads(threads) reduction(| : fail) if (p->len > POISSON_PARALLEL_MIN)
    {
#pragma omp for schedule(guided)
        for (long k = 0; k < H2; k++)
            for (int j = 0; j < H1; j++)
                for (int i = 0; i < M0; i++) {
                    const size_t q = (size_t)i + (size_t)M0 * ((size_t)j + (size_t)H1 * (size_t)k);
                    const int skip = 2 * i == N0 || 2 * j == N1 || 2 * k == N2; /* the dropped Nyquist offsets */
                    g[q] = skip ? 0.0 : vp_kernel_g((double)i * i + (double)j * j + (double)k * k, s2);
                }
#pragma omp for schedule(dynamic, 1)
        for (int c = 0; c < 3; c++) {
            double *o = malloc(len * sizeof(double));
            if (!o) { fail = 1; continue; }
            for (long k = 0; k < H2; k++)
                for (int j = 0; j < H1; j++)
                    for (int i = 0; i < M0; i++) {
                        const size_t q = (size_t)i + (size_t)M0 * ((size_t)j + (size_t)H1 * (size_t)k);
                        const double d = c == 0 ? i : (c == 1 ? j : (double)k);
                        o[q] = d * VP_INV4PI * g[q];
                    }
            if (vp_fft_kernel_octant(o, dims, c)) fail = 1;
            else
                for (size_t q = 0; q < len; q++) p->kernel[c][q] = (float)-o[q];
            free(o);
        }
    }
    free(g);
    if (fail) return VP_ERR_NOMEM;
    p->valid = 1;
    return VP_OK;
}

/* Stage B for y-row j: for each block of ROW_BLOCK x-frequencies, transform the three
 * components along z (planes k >= n2 are zero), take u^ = Omega^ x i K f (K: imaginary part
 * of the kernel transform; K_x is even in ky and kz, K_y odd in ky, K_z odd in kz), and
 * transform back keeping k < n2.  Lines go VP_FFT_LANES at a time (as in strided_lines) and
 * the cross product works on the same four-lane records.  Nonzero when out of memory. */
VP_CLONES
static int convolve_row(struct vp_poisson *p, const int n[3], float f, int j, float *buf)
{
    const int N1 = p->N[1], N2 = p->N[2], M0 = p->M0, H1 = N1 / 2 + 1, W = VP_FFT_LANES;
    const size_t sy = (size_t)M0, sz = (size_t)M0 * (size_t)N1;
    const int jq = j <= N1 / 2 ? j : N1 - j;
    const float ysign = j <= N1 / 2 ? 1.0f : -1.0f;
    for (int i0 = 0; i0 < M0; i0 += ROW_BLOCK) {
        const int B = M0 - i0 < ROW_BLOCK ? M0 - i0 : ROW_BLOCK, groups = (B + W - 1) / W;
        float *lines[3] = {buf, buf + REC * (size_t)N2 * ROW_GROUPS, buf + 2 * REC * (size_t)N2 * ROW_GROUPS};
        for (int c = 0; c < 3; c++) {
            const float *base = p->work[c] + 2 * ((size_t)i0 + (size_t)j * sy);
            for (int k = 0; k < n[2]; k++) gather_lanes(base + 2 * (size_t)k * sz, B, groups, lines[c], (size_t)N2, k);
            for (int g = 0; g < groups; g++) {
                float *L = lines[c] + REC * (size_t)g * N2;
                memset(L + REC * (size_t)n[2], 0, REC * (size_t)(N2 - n[2]) * sizeof(float));
                if (vp_fft_exec(p->pz, L, 1)) return 1;
            }
        }
        for (int g = 0; g < groups; g++) {
            const int lanes = B - W * g < W ? B - W * g : W;
            for (int k = 0; k < N2; k++) {
                const int kq = k <= N2 / 2 ? k : N2 - k;
                const float zsign = k <= N2 / 2 ? 1.0f : -1.0f;
                const size_t q0 = (size_t)(i0 + W * g) + (size_t)M0 * ((size_t)jq + (size_t)H1 * (size_t)kq);
                vp_v8f gx = {0}, gy = gx, gz = gx;
                if (lanes == W) {
                    memcpy(&gx, p->kernel[0] + q0, sizeof gx); memcpy(&gy, p->kernel[1] + q0, sizeof gy);
                    memcpy(&gz, p->kernel[2] + q0, sizeof gz);
                } else {
                    for (int l = 0; l < lanes; l++) { gx[l] = p->kernel[0][q0 + l]; gy[l] = p->kernel[1][q0 + l]; gz[l] = p->kernel[2][q0 + l]; }
                }
                gx *= f; gy *= ysign * f; gz *= zsign * f;
                float *A = lines[0] + REC * ((size_t)g * N2 + (size_t)k), *Bv = lines[1] + REC * ((size_t)g * N2 + (size_t)k);
                float *C = lines[2] + REC * ((size_t)g * N2 + (size_t)k);
                vp_v8f ar, ai, br, bi, cr, ci;
                memcpy(&ar, A, 32); memcpy(&ai, A + 8, 32); memcpy(&br, Bv, 32); memcpy(&bi, Bv + 8, 32);
                memcpy(&cr, C, 32); memcpy(&ci, C + 8, 32);
                /* (Omega x g) times i: (re, im) -> (-im, re) */
                vp_v8f ur = br * gz - cr * gy, ui = bi * gz - ci * gy;
                vp_v8f vr = cr * gx - ar * gz, vi = ci * gx - ai * gz;
                vp_v8f zr = ar * gy - br * gx, zi = ai * gy - bi * gx;
                ui = -ui; vi = -vi; zi = -zi;
                memcpy(A, &ui, 32); memcpy(A + 8, &ur, 32); memcpy(Bv, &vi, 32); memcpy(Bv + 8, &vr, 32);
                memcpy(C, &zi, 32); memcpy(C + 8, &zr, 32);
            }
        }
        for (int c = 0; c < 3; c++) {
            for (int g = 0; g < groups; g++)
                if (vp_fft_exec(p->pz, lines[c] + REC * (size_t)g * N2, 0)) return 1;
            float *base = p->work[c] + 2 * ((size_t)i0 + (size_t)j * sy);
            for (int k = 0; k < n[2]; k++) scatter_lanes(lines[c], (size_t)N2, k, B, base + 2 * (size_t)k * sz);
        }
    }
    return 0;
}

/* Stages B and C in one parallel region: stage B over every y-row of the lattice, then
 * stage C a task a z-plane with its three components, so that each cache line of the
 * interleaved field is written by one thread.  Guided schedules: long runs of neighbouring
 * rows first (a row's M0 complex values are not a whole number of cache lines, so rows
 * taken by two threads at once share one), shorter ones at the end so that a thread slowed
 * by other work on its core does not hold up the rest. */
static int convolve_inverse(struct vp_poisson *p, double *field, const int n[3], float f, int threads)
{
    const size_t nb = line_buffer_floats(p);
    const long N1 = p->N[1];
    int fail = 0;
    (void)threads;
#pragma omp parallel num_threads(threads) reduction(| : fail) if (p->len > POISSON_PARALLEL_MIN)
    {
        float *buf = line_buffer(nb);
        if (!buf) fail = 1;
#pragma omp for schedule(guided, 2)
        for (long j = 0; j < N1; j++)
            if (buf) fail |= convolve_row(p, n, f, (int)j, buf);
#pragma omp for schedule(guided)
        for (long k = 0; k < (long)n[2]; k++)
            for (int c = 0; c < 3 && buf; c++) fail |= plane_inverse(p, field, n, c, (int)k, buf);
        free(buf);
    }
    return fail ? VP_ERR_NOMEM : VP_OK;
}

/* Smallest 2^a 3^b 5^c >= n: pocketfft's fastest lengths (its radix-7 and -11 passes and
 * Bluestein are slower per point than the few percent of padding they save). */
static int smooth_size(int n)
{
    int best = 2 * n + 2;
    for (long f2 = 1; f2 < best; f2 *= 2)
        for (long f3 = f2; f3 < best; f3 *= 3)
            for (long f5 = f3; f5 < best; f5 *= 5)
                if (f5 >= n && f5 < best) best = (int)f5;
    return best;
}

/* Cloud-in-cell splat of a strength a (3 components) at x: grid.c's splat_one arithmetic,
 * the same weights in the same order, so the same bits, but with the 8 corners unrolled (two
 * runs of 6 contiguous doubles per (y, z) pair of corners) instead of a call per vorton with
 * runtime loops.  In two parts: the cell, and the splat of its z planes c0 .. c1 (0: the
 * cell's lower plane, 1: its upper one), so that the parallel splat can write one plane at a
 * time.
 *
 * The cell of x: 1 if x is off the grid (NaN included), else 0 with its first node in *base,
 * its z index in *k0 and the in-cell fractions in f (the domain gives every axis at least 2
 * nodes). */
static inline int strength_cell(const vp_grid *g, const double x[3], double f[3], size_t *base, int *k0)
{
    int i0[3];
    for (int ax = 0; ax < 3; ax++) {
        const double u = (x[ax] - g->origin[ax]) / g->h;
        if (!(u >= 0.0) || u > g->n[ax] - 1) return 1;
        int i = (int)u;
        if (i > g->n[ax] - 2) i = g->n[ax] - 2;
        i0[ax] = i; f[ax] = u - i;
    }
    *k0 = i0[2];
    const size_t sy = (size_t)g->n[0], sz = sy * (size_t)g->n[1];
    *base = (size_t)i0[0] + sy * (size_t)i0[1] + sz * (size_t)i0[2];
    return 0;
}

static inline void splat_planes(const vp_grid *g, double *restrict field, size_t base, const double f[3],
                                const double a[3], int c0, int c1)
{
    const size_t sy = (size_t)g->n[0], sz = sy * (size_t)g->n[1];
    double *p = field + 3 * base;
    const double gx0 = 1 - f[0], gx1 = f[0], gy[2] = {1 - f[1], f[1]}, gz[2] = {1 - f[2], f[2]};
    for (int c = c0; c <= c1; c++)
        for (int b = 0; b < 2; b++) {
            double *r = p + 3 * ((size_t)b * sy + (size_t)c * sz);
            const double w0 = gx0 * gy[b] * gz[c], w1 = gx1 * gy[b] * gz[c];
            r[0] += w0 * a[0]; r[1] += w0 * a[1]; r[2] += w0 * a[2];
            r[3] += w1 * a[0]; r[4] += w1 * a[1]; r[5] += w1 * a[2];
        }
}

/* The strength a_i = w_i V_i of vorton i. */
static inline void strength_of(const double *w, const double *rad, size_t i, double a[3])
{
    double V = vp_volume(rad[i]);
    a[0] = w[3 * i] * V; a[1] = w[3 * i + 1] * V; a[2] = w[3 * i + 2] * V;
}

/* The splat in parallel from this many vortons (fewer: the serial loop below, which takes
 * fewer passes over memory and no waits between them). */
#define POISSON_SPLAT_PARALLEL_MIN 8192
#define POISSON_SUM_BLOCK 4096

/* The strengths of the n vortons splatted into field, then the forward pass's first stage
 * (plane_forward) on every plane, in parallel and bitwise the same as the serial splat and
 * forward_pass.  Three loops over fixed blocks and planes, so any thread may take any part:
 *  - per block of POISSON_SUM_BLOCK vortons, each vorton's cell, fractions and strength, the
 *    block's count of vortons per lower z plane k0, and the block's sums of |a| and |a| s^2
 *    (in index order, as the serial loop sums them) and of vortons off the grid (k0 = -1);
 *  - the vortons sorted by k0, stably (a counting sort by blocks), so that each plane's list
 *    is in index order;
 *  - per z plane, the parts of the vortons with k0 = z (their lower plane) and k0 = z - 1
 *    (their upper one), merged in index order, so that each node sums its parts in the serial
 *    loop's order; then the plane's transforms while it is in cache.
 * ws: 9n + 1 doubles of the sim's scratch, kept between steps (a fresh block each step costs
 * its page faults); sums: per block |a|, |a| s^2 and the count off the grid.  Nonzero when out
 * of memory. */
static int splat_forward(struct vp_poisson *p, const vp_grid *g, double *field, size_t n, const double *x,
                         const double *w, const double *rad, double *ws, double *sums, int threads)
{
    double *fa = ws;                         /* f (3) and a (3) per vorton */
    size_t *base = (size_t *)(ws + 6 * n);   /* its first node */
    size_t *order = (size_t *)(ws + 7 * n);  /* the vortons by plane */
    int *k0 = (int *)(ws + 8 * n);           /* its lower plane, -1 off the grid (4 bytes each) */
    const int nz = g->n[2];
    const long nb = (long)((n + POISSON_SUM_BLOCK - 1) / POISSON_SUM_BLOCK);
    const size_t plane = 3 * (size_t)g->n[0] * (size_t)g->n[1]; /* doubles per z plane */
    const size_t nbuf = line_buffer_floats(p);
    /* per block its count per plane, then its next slot per plane; start: each plane's first */
    size_t *cnt = malloc(((size_t)nb * (size_t)nz + (size_t)nz + 1) * sizeof(size_t));
    if (!cnt) return VP_ERR_NOMEM;
    size_t *start = cnt + (size_t)nb * (size_t)nz;
    int fail = 0;
#pragma omp parallel num_threads(threads) reduction(| : fail)
    {
        float *buf = line_buffer(nbuf);
        if (!buf) fail = 1;
#pragma omp for schedule(dynamic, 1)
        for (long b = 0; b < nb; b++) {
            size_t *c = cnt + (size_t)b * (size_t)nz, no = 0;
            memset(c, 0, (size_t)nz * sizeof(size_t));
            const size_t i0 = (size_t)b * POISSON_SUM_BLOCK, i1 = (size_t)vp_block_end(b, POISSON_SUM_BLOCK, (long)n);
            double sa = 0.0, ss = 0.0;
            for (size_t i = i0; i < i1; i++) {
                double *fi = fa + 6 * i;
                strength_of(w, rad, i, fi + 3);
                if (strength_cell(g, x + 3 * i, fi, &base[i], &k0[i])) { k0[i] = -1; no++; continue; }
                c[k0[i]]++;
                const double m = sqrt(vp_dot3(fi + 3, fi + 3));
                sa += m; ss += m * rad[i] * rad[i];
            }
            sums[3 * b] = sa; sums[3 * b + 1] = ss; sums[3 * b + 2] = (double)no;
        }
#pragma omp single
        {
            size_t run = 0;
            for (int z = 0; z < nz; z++) {
                start[z] = run;
                for (long b = 0; b < nb; b++) {
                    const size_t k = cnt[(size_t)b * (size_t)nz + (size_t)z];
                    cnt[(size_t)b * (size_t)nz + (size_t)z] = run;
                    run += k;
                }
            }
            start[nz] = run;
        }
#pragma omp for schedule(dynamic, 1)
        for (long b = 0; b < nb; b++) {
            size_t *next = cnt + (size_t)b * (size_t)nz;
            const size_t i0 = (size_t)b * POISSON_SUM_BLOCK, i1 = (size_t)vp_block_end(b, POISSON_SUM_BLOCK, (long)n);
            for (size_t i = i0; i < i1; i++)
                if (k0[i] >= 0) order[next[k0[i]]++] = i;
        }
#pragma omp for schedule(dynamic, 1)
        for (int z = 0; z < nz; z++) {
            memset(field + plane * (size_t)z, 0, plane * sizeof(double));
            /* lower parts: k0 = z (none on the last plane); upper parts: k0 = z - 1 */
            size_t lq = start[z], le = start[z + 1];
            size_t uq = z > 0 ? start[z - 1] : 0, ue = z > 0 ? start[z] : 0;
            while (lq < le || uq < ue) {
                const int upper = lq == le || (uq < ue && order[uq] < order[lq]);
                const size_t i = upper ? order[uq++] : order[lq++];
                splat_planes(g, field, base[i], fa + 6 * i, fa + 6 * i + 3, upper, upper);
            }
            for (int c = 0; c < 3 && buf; c++) fail |= plane_forward(p, field, g->n, c, z, p->work[c], buf);
        }
        free(buf);
    }
    free(cnt);
    return fail ? VP_ERR_NOMEM : VP_OK;
}

/* Physics.md 2.2, `poisson`: grid velocity u = curl A, lap A = -w with free-space boundary
 * values, as the zero-padded FFT convolution of the CIC-splatted strengths with the
 * regularised Biot-Savart kernel (see the top of this file).  s->interactions: the size of
 * the padded FFT lattice, plus (off-grid vortons) x (nodes) direct pairs. */
int vp_poisson_velocity_grid(vp_sim *s)
{
    const vp_grid *g = &s->grid;
    const size_t nn = vp_grid_count(g), n = s->vortons.n;
    double *vel = s->grid_velocity;
    const int team = vp_threads(s), threads = team > 0 ? team : 1;
    s->interactions = 0;
    if (n == 0) { memset(vel, 0, 3 * nn * sizeof(double)); return VP_OK; }

    const double *x = s->vortons.position->data, *w = s->vortons.vorticity->data, *rad = s->vortons.radius->data;
    const double h = g->h;
    /* the padded lattice, from the grid alone: the cached one serves any grid it pads to at
     * least 2n per axis (the sum stays exact), unless it is much larger than needed:
     * hysteresis against rebuilding the kernel transform every time the domain grows or
     * shrinks by a node */
    int N[3];
    for (int a = 0; a < 3; a++) N[a] = 2 * smooth_size(g->n[a]);
    struct vp_poisson *p = s->poisson;
    int reuse = p != NULL;
    for (int a = 0; a < 3 && reuse; a++)
        reuse = p->N[a] >= 2 * g->n[a] && p->N[a] <= N[a] + N[a] / 4;
    if (reuse) {
        for (int a = 0; a < 3; a++) N[a] = p->N[a];
    } else {
        vp_poisson_free(p);
        s->poisson = p = poisson_create(N);
        if (!p) return VP_ERR_NOMEM;
    }
    /* The transforms run in float32 on Omega / h^3 (in_scale) and the inverse multiplies the
     * kernel by h / Ntot (out_scale, below): on a grid of spacing beyond ~1e45 (a domain
     * stretched by far-off outliers) h / Ntot overflowed the float kernel, and 0 x inf made
     * every node NaN.  There both factors go to the forward pass, 1 / (h^2 Ntot), whose
     * product is the same and which underflows to 0 instead (the velocity of the vortons on
     * such a grid is below float range anyway). */
    const double ntot = (double)N[0] * (double)N[1] * (double)N[2];
    double out_scale = h / ntot;
    p->in_scale = 1.0 / (h * h * h);
    if (!(out_scale <= POISSON_MAX_OUT_SCALE)) { p->in_scale = 1.0 / (h * h * ntot); out_scale = 1.0; }
    /* splat strengths (into the velocity array, which the solve then overwrites); list the
     * vortons the grid does not hold; the |a|-weighted mean square radius */
    size_t n_out = 0;
    size_t *out_idx = NULL, out_cap = 0;
    double wsum = 0.0, s2sum = 0.0;
    const int par = threads > 1 && n >= POISSON_SPLAT_PARALLEL_MIN;
    int st = VP_OK;
    /* the sums in blocks of POISSON_SUM_BLOCK vortons, added in block order: the same
     * rounding on both paths */
    const size_t nb = (n + POISSON_SUM_BLOCK - 1) / POISSON_SUM_BLOCK;
    if (par) { /* (the parallel splat also takes the forward pass's first stage) */
        double *wk = vp_sim_scratch(s, 9 * n + 1), *sums = malloc(3 * nb * sizeof(double));
        st = wk && sums ? splat_forward(p, g, vel, n, x, w, rad, wk, sums, threads) : VP_ERR_NOMEM;
        for (size_t b = 0; b < nb && !st; b++) {
            wsum += sums[3 * b]; s2sum += sums[3 * b + 1]; n_out += (size_t)sums[3 * b + 2];
        }
        free(sums);
        if (!st && n_out) { /* the vortons off the grid, whose lower plane is -1 */
            const int *k0 = (const int *)(wk + 8 * n);
            out_idx = malloc(n_out * sizeof *out_idx);
            if (!out_idx) st = VP_ERR_NOMEM;
            for (size_t i = 0, k = 0; i < n && out_idx; i++) if (k0[i] < 0) out_idx[k++] = i;
        }
        if (st) return st;
    } else {
        memset(vel, 0, 3 * nn * sizeof(double));
        for (size_t b = 0; b < nb; b++) {
            const size_t i0 = b * POISSON_SUM_BLOCK, i1 = i0 + POISSON_SUM_BLOCK < n ? i0 + POISSON_SUM_BLOCK : n;
            double ws = 0.0, ss = 0.0;
            for (size_t i = i0; i < i1; i++) {
                double a[3], f[3];
                size_t base;
                int k0;
                strength_of(w, rad, i, a);
                if (strength_cell(g, x + 3 * i, f, &base, &k0)) {
                    if (n_out == out_cap) {
                        size_t cap = out_cap ? 2 * out_cap : 64;
                        size_t *q = realloc(out_idx, cap * sizeof *q);
                        if (!q) { free(out_idx); return VP_ERR_NOMEM; }
                        out_idx = q; out_cap = cap;
                    }
                    out_idx[n_out++] = i;
                    continue;
                }
                splat_planes(g, vel, base, f, a, 0, 1);
                const double m = sqrt(vp_dot3(a, a));
                ws += m; ss += m * rad[i] * rad[i];
            }
            wsum += ws; s2sum += ss;
        }
    }

    if (n_out < n) {
        /* kernel core in cells, rounded to 1/16 octave for the cache */
        double s2 = wsum > 0 ? s2sum / wsum : 0.0;
        double r = s2 / (h * h) - 1.0 / 3.0;
        r = r > 0 ? sqrt(r) : 0.0;
        if (r < SIGMA_MIN_CELLS) r = SIGMA_MIN_CELLS;
        r = exp2(round(log2(r) * RATIO_STEPS_PER_OCTAVE) / RATIO_STEPS_PER_OCTAVE);

        if (!p->valid || p->ratio != r) {
            p->valid = 0;
            p->ratio = r;
            if ((st = build_kernel(p, threads))) { free(out_idx); return st; }
        }
        /* u^ = Omega^ x i K / (h^2 Ntot): the kernel transform for spacing h is h^-2 times
         * the h = 1 one; 1/Ntot normalises the inverse transform.  The forward pass carries
         * Omega / h^3 (in_scale), so the factor here is h^3 times that: h / Ntot (out_scale). */
        const double f = out_scale;
        if ((!par && (st = forward_pass(p, vel, g->n, threads))) || (st = convolve_inverse(p, vel, g->n, f, threads))) {
            free(out_idx);
            return st;
        }
        s->interactions = (uint64_t)N[0] * (uint64_t)N[1] * (uint64_t)N[2];
    } else {
        memset(vel, 0, 3 * nn * sizeof(double));
    }

    /* vortons off the grid: direct sum at every node */
    if (n_out) {
        const long nodes = (long)nn;
        const int n0 = g->n[0], n1 = g->n[1];
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64) if (nodes * (long)n_out > 100000)
        for (long id = 0; id < nodes; id++) {
            int i = (int)(id % n0), j = (int)((id / n0) % n1), k = (int)(id / n0 / n1);
            double pt[3] = {g->origin[0] + h * i, g->origin[1] + h * j, g->origin[2] + h * k}, u[3] = {0, 0, 0};
            for (size_t q = 0; q < n_out; q++) {
                size_t v = out_idx[q];
                double V = vp_volume(rad[v]);
                double a[3] = {w[3 * v] * V, w[3 * v + 1] * V, w[3 * v + 2] * V};
                vp_kernel_add(pt, x + 3 * v, a, rad[v] * rad[v], u);
            }
            vel[3 * id] += u[0]; vel[3 * id + 1] += u[1]; vel[3 * id + 2] += u[2];
        }
        s->interactions += (uint64_t)n_out * (uint64_t)nn;
    }
    free(out_idx);
    return VP_OK;
}
