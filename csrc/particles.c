/* particles.c: struct-of-arrays storage for vortons and tracers (docs/method.md, the state): reference-
 * counted blocks, growth by doubling, stable removal, and the xoshiro random numbers that
 * emitters draw from.  All allocation of particle memory happens here. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

vp_buffer *vp_buffer_create(size_t n_allocated)
{
    if (n_allocated > (SIZE_MAX - sizeof(vp_buffer)) / sizeof(double)) return NULL;
    vp_buffer *b = malloc(sizeof(vp_buffer) + (n_allocated ? n_allocated : 1) * sizeof(double));
    if (!b) return NULL;
    b->refcount = 1;
    b->n_allocated = n_allocated;
    return b;
}

void vp_buffer_retain(vp_buffer *b) { if (b) __atomic_add_fetch(&b->refcount, 1, __ATOMIC_RELAXED); }

void vp_buffer_release(vp_buffer *b)
{
    if (b && __atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) == 0) free(b);
}

#define VORTON_FIELDS(X) X(position, 3) X(vorticity, 3) X(radius, 1) X(density, 1) X(age, 1) X(velocity, 3)
#define TRACER_FIELDS(X) X(position, 3) X(velocity, 3) X(density, 1) X(age, 1)

static size_t grown(size_t have, size_t need)
{
    size_t cap = have ? have : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return need;
        cap *= 2;
    }
    return cap;
}

/* Growth allocates all new blocks before releasing any old one, so failure loses nothing. */
int vp_sim_reserve_vortons(vp_sim *s, size_t need)
{
    vp_vortons *v = &s->vortons;
    if (need <= v->n_allocated && v->position) return VP_OK;
    size_t cap = grown(v->n_allocated, need);
    vp_buffer *nb[6] = {0};
    int k = 0;
#define NEW(f, w) if (!(nb[k++] = vp_buffer_create(cap * (w)))) goto fail;
    VORTON_FIELDS(NEW)
#undef NEW
    k = 0;
#define SWAP(f, w) if (v->f && v->n) memcpy(nb[k]->data, v->f->data, v->n * (w) * sizeof(double)); \
    vp_buffer_release(v->f); v->f = nb[k++];
    VORTON_FIELDS(SWAP)
#undef SWAP
    v->n_allocated = cap;
    return VP_OK;
fail:
    for (int i = 0; i < 6; i++) vp_buffer_release(nb[i]);
    return VP_ERR_NOMEM;
}

int vp_sim_reserve_tracers(vp_sim *s, size_t need)
{
    vp_tracers *t = &s->tracers;
    if (need <= t->n_allocated && t->position) return VP_OK;
    size_t cap = grown(t->n_allocated, need);
    vp_buffer *nb[4] = {0};
    int k = 0;
#define NEW(f, w) if (!(nb[k++] = vp_buffer_create(cap * (w)))) goto fail;
    TRACER_FIELDS(NEW)
#undef NEW
    k = 0;
#define SWAP(f, w) if (t->f && t->n) memcpy(nb[k]->data, t->f->data, t->n * (w) * sizeof(double)); \
    vp_buffer_release(t->f); t->f = nb[k++];
    TRACER_FIELDS(SWAP)
#undef SWAP
    t->n_allocated = cap;
    return VP_OK;
fail:
    for (int i = 0; i < 4; i++) vp_buffer_release(nb[i]);
    return VP_ERR_NOMEM;
}

int vp_sim_add_vortons(vp_sim *s, size_t n, const double *pos, const double *vort,
                       const double *radius, const double *density)
{
    if (n == 0) return VP_OK;
    if (n > SIZE_MAX / 64 || s->vortons.n > SIZE_MAX / 64 - n) return VP_ERR_NOMEM; /* no wrap-around */
    int st = vp_sim_reserve_vortons(s, s->vortons.n + n);
    if (st) return st;
    vp_vortons *v = &s->vortons;
    size_t o = v->n;
    memcpy(v->position->data + 3 * o, pos, 3 * n * sizeof(double));
    memcpy(v->vorticity->data + 3 * o, vort, 3 * n * sizeof(double));
    memcpy(v->radius->data + o, radius, n * sizeof(double));
    memcpy(v->density->data + o, density, n * sizeof(double));
    memset(v->age->data + o, 0, n * sizeof(double));
    memset(v->velocity->data + 3 * o, 0, 3 * n * sizeof(double));
    v->n += n;
    return VP_OK;
}

int vp_sim_add_tracers(vp_sim *s, size_t n, const double *pos, const double *density)
{
    if (n == 0) return VP_OK;
    if (n > SIZE_MAX / 64 || s->tracers.n > SIZE_MAX / 64 - n) return VP_ERR_NOMEM; /* no wrap-around */
    int st = vp_sim_reserve_tracers(s, s->tracers.n + n);
    if (st) return st;
    vp_tracers *t = &s->tracers;
    size_t o = t->n;
    memcpy(t->position->data + 3 * o, pos, 3 * n * sizeof(double));
    memset(t->velocity->data + 3 * o, 0, 3 * n * sizeof(double));
    memcpy(t->density->data + o, density, n * sizeof(double));
    memset(t->age->data + o, 0, n * sizeof(double));
    t->n += n;
    return VP_OK;
}

/* Stable compaction of one field; copies into a fresh block when a view shares the old one,
 * so a view never sees its rows shuffled under it. */
static int compact_field(vp_buffer **slot, size_t n, size_t cap, int w, const unsigned char *keep)
{
    vp_buffer *dst = *slot;
    if (__atomic_load_n(&(*slot)->refcount, __ATOMIC_ACQUIRE) > 1) {
        dst = vp_buffer_create(cap * (size_t)w);
        if (!dst) return VP_ERR_NOMEM;
    }
    size_t o = 0, i = 0;
    while (i < n) { /* move whole runs of kept rows (particles expire in runs: oldest first) */
        while (i < n && !keep[i]) i++;
        size_t j = i;
        while (j < n && keep[j]) j++;
        if (j > i && (dst != *slot || o != i))
            memmove(dst->data + o * w, (*slot)->data + i * w, (j - i) * (size_t)w * sizeof(double));
        o += j - i;
        i = j;
    }
    if (dst != *slot) { vp_buffer_release(*slot); *slot = dst; }
    return VP_OK;
}

int vp_sim_compact_vortons(vp_sim *s, const unsigned char *keep)
{
    vp_vortons *v = &s->vortons;
    size_t m = 0;
    for (size_t i = 0; i < v->n; i++) m += keep[i] != 0;
    if (m == v->n) return VP_OK;
    int st;
#define C(f, w) if ((st = compact_field(&v->f, v->n, v->n_allocated, w, keep))) return st;
    VORTON_FIELDS(C)
#undef C
    v->n = m;
    return VP_OK;
}

int vp_sim_compact_tracers(vp_sim *s, const unsigned char *keep)
{
    vp_tracers *t = &s->tracers;
    size_t m = 0;
    for (size_t i = 0; i < t->n; i++) m += keep[i] != 0;
    if (m == t->n) return VP_OK;
    int st;
#define C(f, w) if ((st = compact_field(&t->f, t->n, t->n_allocated, w, keep))) return st;
    TRACER_FIELDS(C)
#undef C
    t->n = m;
    return VP_OK;
}

/* Rows [k, n) of nf fields (f[j]: w[j] doubles a row) moved down to [0, n - k), in order, in
 * blocks of the destination rows that any thread may take.  A block's source reaches up to k
 * rows into the next blocks' destinations, so every block first copies those rows of its
 * source aside (at most min(k, its size) rows), and after a barrier moves the rest and then
 * the copy.  The result is memmove's, for any thread count; without the memory for the copies
 * one thread moves it all. */
#define VP_SHIFT_PARALLEL_MIN ((size_t)1 << 16) /* doubles moved, below which one thread moves them */
typedef struct {
    double *const *f; const int *w; int nf; /* the fields */
    size_t m, k, ws;                        /* rows moved, the shift, doubles a row (all fields) */
    long bs;                                /* rows a block */
    double *aside;                          /* a block's copy at aside + u min(bs, k) ws */
} shift_plan;

/* Block u of a shift (phase 0: its copy aside; 1: its move). */
static void shift_block(const shift_plan *P, long u, int phase)
{
    const size_t k = P->k, a = (size_t)u * (size_t)P->bs, e = (size_t)vp_block_end(u, P->bs, (long)P->m);
    const size_t s0 = e > a + k ? e : a + k, len = e + k - s0; /* aside: source rows [s0, e + k) */
    double *mine = P->aside + (size_t)u * ((size_t)P->bs < k ? (size_t)P->bs : k) * P->ws;
    for (int j = 0; j < P->nf; mine += (size_t)P->w[j++] * len) {
        double *fj = P->f[j];
        const size_t wj = (size_t)P->w[j];
        if (phase == 0) {
            memcpy(mine, fj + s0 * wj, len * wj * sizeof(double));
        } else {
            memmove(fj + a * wj, fj + (a + k) * wj, (s0 - k - a) * wj * sizeof(double));
            memcpy(fj + (s0 - k) * wj, mine, len * wj * sizeof(double));
        }
    }
}

static void shift_rows(double *const *f, const int *w, int nf, size_t n, size_t k, int threads)
{
    shift_plan P = {f, w, nf, n - k, k, 0, 0, NULL};
    for (int j = 0; j < nf; j++) P.ws += (size_t)w[j];
    P.bs = vp_block_size((long)P.m, threads, 1024);
    const long nb = ((long)P.m + P.bs - 1) / P.bs;
    if (threads > 1 && nb > 1 && P.m * P.ws >= VP_SHIFT_PARALLEL_MIN)
        P.aside = malloc((size_t)nb * ((size_t)P.bs < k ? (size_t)P.bs : k) * P.ws * sizeof(double));
    if (!P.aside) {
        for (int j = 0; j < nf; j++) memmove(f[j], f[j] + k * (size_t)w[j], P.m * (size_t)w[j] * sizeof(double));
        return;
    }
#pragma omp parallel num_threads(threads)
    for (int phase = 0; phase < 2; phase++) {
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < nb; u++) shift_block(&P, u, phase);
    }
    free(P.aside);
}

/* Particles expire oldest first, and the oldest come first (emitters append), so the usual
 * removal is a prefix: the rows left are moved down on the threads, with none of the
 * compaction's serial scans of a keep mask.  A block a view shares goes through the
 * compaction, which copies it. */
int vp_sim_drop_front(vp_sim *s, int kind, size_t k)
{
    size_t n = kind ? s->tracers.n : s->vortons.n;
    if (k == 0) return VP_OK;
    if (k > n) return VP_ERR_VALUE;
    vp_buffer *b[6];
    int w[6], nf = 0, shared = 0;
    if (kind) {
#define B(fl, wd) b[nf] = s->tracers.fl; w[nf++] = wd;
        TRACER_FIELDS(B)
#undef B
    } else {
#define B(fl, wd) b[nf] = s->vortons.fl; w[nf++] = wd;
        VORTON_FIELDS(B)
#undef B
    }
    for (int j = 0; j < nf; j++) shared |= __atomic_load_n(&b[j]->refcount, __ATOMIC_ACQUIRE) > 1;
    if (shared) {
        unsigned char *keep = malloc(n);
        if (!keep) return VP_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) keep[i] = i >= k;
        int st = kind ? vp_sim_compact_tracers(s, keep) : vp_sim_compact_vortons(s, keep);
        free(keep);
        return st;
    }
    double *f[6];
    for (int j = 0; j < nf; j++) f[j] = b[j]->data;
    shift_rows(f, w, nf, n, k, vp_threads(s));
    if (kind) s->tracers.n = n - k; else s->vortons.n = n - k;
    return VP_OK;
}

/* xoshiro256** (Blackman and Vigna, public domain algorithm), seeded by splitmix64. */
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void vp_rng_seed(uint64_t st[4], uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        st[i] = z ^ (z >> 31);
    }
}

double vp_rng_uniform(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return (double)(r >> 11) * 0x1.0p-53;
}

double vp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
