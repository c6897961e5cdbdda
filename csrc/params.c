/* params.c: the parameters' defaults, range check and metadata, all expanded from
 * VP_PARAM_TABLE (params.h). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "vortonpy.h"

const vp_param_info vp_param_table[VP_PARAM_COUNT] = {
#define X(name, type, def, lo, hi, flags, unit, choices, doc) \
    {#name, VP_PARAM_##type, offsetof(vp_params, name), lo, hi, flags, unit, choices, doc},
    VP_PARAM_TABLE(X)
#undef X
};

#define VP_UNPAREN(...) __VA_ARGS__
#define SET_DOUBLE(f, d) (f) = (d);
#define SET_INT(f, d) (f) = (d);
#define SET_BOOL(f, d) (f) = (d);
#define SET_ENUM(f, d) (f) = (d);
#define SET_SIZE(f, d) (f) = (d);
#define SET_PROFILE(f, d) (f).n = (d);
#define SET_VEC3(f, d)                                 \
    {                                                  \
        const double v_[3] = {VP_UNPAREN d};           \
        memcpy((f), v_, sizeof v_);                    \
    }

void vp_params_init(vp_params *p)
{
    memset(p, 0, sizeof *p);
#define X(name, type, def, ...) SET_##type(p->name, def)
    VP_PARAM_TABLE(X)
#undef X
}

/* Writes "name must be ..., got v" into why. */
static int refuse(const vp_param_info *pi, const char *rule, double v, char *why, size_t n)
{
    if (why && n) snprintf(why, n, "%s must be %s, got %.6g", pi->name, rule, v);
    return VP_ERR_VALUE;
}

/* The valid values of pi in words: "> 0", "in [0, 1]", "0 or 1 (false or true)", ... */
static void range_words(const vp_param_info *pi, char *rule, size_t n)
{
    int open = pi->flags & VP_PARAM_MIN_OPEN;
    if (pi->type == VP_PARAM_BOOL) snprintf(rule, n, "0 or 1 (false or true)");
    else if (pi->type == VP_PARAM_ENUM) snprintf(rule, n, "one of %s (0 to %.0f)", pi->choices, pi->max);
    else if (isinf(pi->max)) snprintf(rule, n, "%s %.6g", open ? ">" : ">=", pi->min);
    else snprintf(rule, n, "in %s%.6g, %.6g]", open ? "(" : "[", pi->min, pi->max);
}

int vp_param_check_value(const vp_param_info *pi, double v, char *why, size_t n)
{
    char rule[160], finite[200];
    if (pi->type == VP_PARAM_VEC3) return isfinite(v) ? VP_OK : refuse(pi, "finite", v, why, n);
    if (pi->type == VP_PARAM_PROFILE) return isfinite(v) ? VP_OK : refuse(pi, "finite", v, why, n); /* a point's number */
    range_words(pi, rule, sizeof rule);
    if (!isfinite(v)) {
        snprintf(finite, sizeof finite, "finite and %s", rule);
        return refuse(pi, finite, v, why, n);
    }
    if (pi->type != VP_PARAM_DOUBLE && v != floor(v)) return refuse(pi, "a whole number", v, why, n);
    int open = pi->flags & VP_PARAM_MIN_OPEN;
    if ((open ? v > pi->min : v >= pi->min) && v <= pi->max) return VP_OK;
    return refuse(pi, rule, v, why, n);
}

int vp_profile_check(const vp_param_info *pi, const vp_profile *pr, char *why, size_t n)
{
    const char *name = pi->name;
    if (pr->n < 0 || pr->n > (int)pi->max) {
        if (why && n) snprintf(why, n, "%s must have at most %.0f points, got %d", name, pi->max, pr->n);
        return VP_ERR_VALUE;
    }
    for (int k = 0; k < pr->n; k++) {
        const double h = pr->height[k], v = pr->value[k];
        const char *bad = NULL;
        if (!isfinite(h)) bad = "a finite height";
        else if (k > 0 && !(h > pr->height[k - 1])) bad = "a height above the point before (heights strictly increasing)";
        else if (!isfinite(v) || !(v > 0)) bad = "a finite density > 0";
        if (bad) {
            if (why && n)
                snprintf(why, n, "%s point %d must be (height, density) with %s, got (%.6g, %.6g)", name, k, bad, h, v);
            return VP_ERR_VALUE;
        }
    }
    return VP_OK;
}

int vp_params_check(const vp_params *p, char *why, size_t n)
{
    for (int i = 0; i < VP_PARAM_COUNT; i++) {
        const vp_param_info *pi = &vp_param_table[i];
        const char *f = (const char *)p + pi->offset;
        double v[3];
        int count = 1;
        switch (pi->type) {
        case VP_PARAM_DOUBLE: v[0] = *(const double *)f; break;
        case VP_PARAM_SIZE: v[0] = (double)*(const size_t *)f; break;
        case VP_PARAM_VEC3: memcpy(v, f, sizeof v); count = 3; break;
        case VP_PARAM_PROFILE: {
            int st = vp_profile_check(pi, (const vp_profile *)f, why, n);
            if (st) return st;
            continue;
        }
        default: v[0] = *(const int *)f; break;
        }
        for (int k = 0; k < count; k++) {
            int st = vp_param_check_value(pi, v[k], why, n);
            if (st) return st;
        }
    }
    return VP_OK;
}

int vp_sim_set_params(vp_sim *s, const vp_params *p)
{
    int st = vp_params_check(p, NULL, 0);
    if (st) return st;
    s->params = *p;
    return VP_OK;
}
