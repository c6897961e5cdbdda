/* emit.c: emitters and lifetimes (method step 10, the scenes of parts 7 and 10): sources
 * that add vortons and tracers at a rate in a box, and the removal of particles past their
 * maximum age. */
#include <stdlib.h>
#include <math.h>
#include "internal.h"
#include "kernel.h"

int vp_sim_add_emitter(vp_sim *s, const vp_emitter *e)
{
    void *a = s->emitters;
    int st = vp_array_grow(&a, s->n_emitters, &s->n_emitters_allocated, sizeof(vp_emitter));
    s->emitters = a;
    if (st) return st;
    s->emitters[s->n_emitters++] = *e;
    return VP_OK;
}

/* Phase 10 (method step 10): emitters add particles at their rates, uniformly in their
 * boxes; vortons get vorticity of the emitter's magnitude in a random direction.  An
 * emitter's density is a deviation from the ambient where each particle appears (with a
 * stratification, method step 4: 0 emits ambient fluid of that height). */
int vp_emit(vp_sim *s)
{
    double dt = s->params.dt;
    for (size_t e = 0; e < s->n_emitters; e++) {
        vp_emitter *E = &s->emitters[e];
        E->vorton_debt += E->vorton_rate * dt;
        E->tracer_debt += E->tracer_rate * dt;
        size_t nv = E->vorton_debt > 0 ? (size_t)E->vorton_debt : 0;
        size_t nt = E->tracer_debt > 0 ? (size_t)E->tracer_debt : 0;
        E->vorton_debt -= (double)nv; E->tracer_debt -= (double)nt;
        if (nv) {
            double *buf = malloc(nv * 8 * sizeof(double));
            if (!buf) return VP_ERR_NOMEM;
            double *p = buf, *w = buf + 3 * nv, *r = buf + 6 * nv, *d = buf + 7 * nv;
            for (size_t i = 0; i < nv; i++) {
                for (int a = 0; a < 3; a++) p[3 * i + a] = E->center[a] + E->half_size[a] * (2 * vp_rng_uniform(s->rng) - 1);
                double z = 2 * vp_rng_uniform(s->rng) - 1, phi = 2 * VP_PI * vp_rng_uniform(s->rng), q = sqrt(1 - z * z);
                w[3 * i] = E->vorticity * q * cos(phi); w[3 * i + 1] = E->vorticity * q * sin(phi); w[3 * i + 2] = E->vorticity * z;
                r[i] = E->vorton_radius; d[i] = E->density;
            }
            if (s->params.stratification.n) {
                vp_ambient_deviation(&s->params, nv, p, d);
                for (size_t i = 0; i < nv; i++) d[i] += E->density;
            }
            int st = vp_sim_add_vortons(s, nv, p, w, r, d);
            free(buf);
            if (st) return st;
        }
        if (nt) {
            double *buf = malloc(nt * 4 * sizeof(double));
            if (!buf) return VP_ERR_NOMEM;
            for (size_t i = 0; i < nt; i++) {
                for (int a = 0; a < 3; a++) buf[3 * i + a] = E->center[a] + E->half_size[a] * (2 * vp_rng_uniform(s->rng) - 1);
                buf[3 * nt + i] = E->density;
            }
            if (s->params.stratification.n) {
                vp_ambient_deviation(&s->params, nt, buf, buf + 3 * nt);
                for (size_t i = 0; i < nt; i++) buf[3 * nt + i] += E->density;
            }
            int st = vp_sim_add_tracers(s, nt, buf, buf + 3 * nt);
            free(buf);
            if (st) return st;
        }
    }
    return VP_OK;
}

/* Ages [0, n) advance by dt; returns how many are past life, and in *late how many are past
 * late (branch-free, so it vectorises).  The caller removes the particles past their
 * lifetime. */
VP_CLONES
static size_t age_range(double *restrict age, size_t n, double dt, double life, double late, size_t *late_count)
{
    size_t expired = 0, overdue = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = age[i] + dt;
        age[i] = a;
        expired += a > life;
        overdue += a > late;
    }
    *late_count = overdue;
    return expired;
}

/* Lifetimes (method step 10): every particle ages by dt, and those past their kind's
 * lifetime are removed. */
int vp_expire(vp_sim *s)
{
    double dt = s->params.dt;
    int st = VP_OK;
    for (int kind = 0; kind < 2 && !st; kind++) {
        size_t n = kind ? s->tracers.n : s->vortons.n;
        if (!n) continue;
        double *age = kind ? s->tracers.age->data : s->vortons.age->data;
        double life = kind ? s->params.tracer_lifetime : s->params.vorton_lifetime;
        /* blocks of whole cache lines handed out to the threads; the counts are integers,
         * so the same for any thread count */
        size_t overdue = 0, expired = 0;
        const double late = life * (1.0 + 1.0 / 32);
        const int threads = vp_threads(s);
        if (n > (1 << 16) && threads > 1) {
            const long bs = 8 * vp_block_size(((long)n + 7) / 8, threads, 1024), nb = ((long)n + bs - 1) / bs;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(+ : expired, overdue)
            for (long b = 0; b < nb; b++) {
                const long i0 = b * bs, i1 = vp_block_end(b, bs, (long)n);
                size_t o = 0;
                expired += age_range(age + i0, (size_t)(i1 - i0), dt, life, late, &o);
                overdue += o;
            }
        } else { /* (a parallel region of one thread costs more than small arrays take) */
            expired = age_range(age, n, dt, life, late, &overdue);
        }
        if (!(life > 0)) continue; /* immortal */
        /* Removal shifts the arrays (stable order), so it is batched: it runs once 1/32 of the
         * particles have expired or one is 1/32 of a lifetime overdue, whichever is first;
         * with steady emitters a particle outlives its lifetime by at most ~3%. */
        if (!expired || (!overdue && expired * 32 < n)) continue;
        /* the expired are usually the first ones (the oldest, emitted first): then they are
         * dropped from the front, the rest moved down on the threads (vp_sim_drop_front) */
        size_t pre = 0;
        while (pre < expired && age[pre] > life) pre++;
        if (pre == expired) { st = vp_sim_drop_front(s, kind, expired); continue; }
        unsigned char *keep = malloc(n);
        if (!keep) return VP_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) keep[i] = !(age[i] > life);
        st = kind ? vp_sim_compact_tracers(s, keep) : vp_sim_compact_vortons(s, keep);
        free(keep);
    }
    return st;
}

