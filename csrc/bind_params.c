/* bind_params.c: the parameters' Python side, read and written through the core's table
 * (vp_param_table, params.h): conversion with checks, Sim's parameter attributes and
 * vortonpy._core.PARAMETERS. */
#include "bind.h"
#ifdef _OPENMP
#include <omp.h>
#endif

int vp_py_default_threads(void)
{
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

/* ------------------------------------------------------------------ parameters
 * Every parameter is read and written through vp_param_table (params.h): by its offset in
 * vp_params and its type.  The range check is the core's (vp_param_check_value). */
const vp_param_info *vp_py_find_param(const char *name)
{
    for (int i = 0; i < VP_PARAM_COUNT; i++)
        if (!strcmp(vp_param_table[i].name, name)) return &vp_param_table[i];
    return NULL;
}

/* The i-th name of an ENUM parameter's choices, in buf. */
static int choice_name(const vp_param_info *pi, int i, char *buf, size_t n)
{
    const char *c = pi->choices;
    for (int k = 0; *c; k++) {
        size_t len = strcspn(c, " ");
        if (k == i) {
            if (len >= n) len = n - 1;
            memcpy(buf, c, len);
            buf[len] = 0;
            return 0;
        }
        c += len;
        while (*c == ' ') c++;
    }
    return -1;
}

/* The choices of an ENUM parameter as a Python list of str. */
static PyObject *choice_list(const vp_param_info *pi)
{
    PyObject *l = PyList_New(0);
    char buf[64];
    for (int i = 0; l && choice_name(pi, i, buf, sizeof buf) == 0; i++) {
        PyObject *u = PyUnicode_FromString(buf);
        if (!u || PyList_Append(l, u) < 0) Py_CLEAR(l);
        Py_XDECREF(u);
    }
    return l;
}

static PyObject *param_value_error(const vp_param_info *pi, double v)
{
    char why[320];
    vp_param_check_value(pi, v, why, sizeof why);
    PyErr_SetString(PyExc_ValueError, why);
    return NULL;
}

/* A PROFILE parameter from None, an empty sequence (no points) or (height, value) rows, an
 * (N, 2) array-like; checked by the core (vp_profile_check). */
static int set_profile(vp_profile *out, const vp_param_info *pi, PyObject *val)
{
    vp_profile pr;
    memset(&pr, 0, sizeof pr);
    int empty = val == Py_None || (PySequence_Check(val) && !PyUnicode_Check(val) && PySequence_Size(val) == 0);
    if (PyErr_Occurred()) PyErr_Clear();
    if (!empty) {
        if (PyUnicode_Check(val) || PyBytes_Check(val)) {
            PyErr_Format(PyExc_TypeError, "%s must be None or (height, density) pairs, got %R", pi->name, val);
            return -1;
        }
        npy_intp n = -1;
        PyArrayObject *a = vp_py_as_rows(val, pi->name, 2, &n);
        if (!a) return -1;
        if (n > (npy_intp)pi->max) {
            PyErr_Format(PyExc_ValueError, "%s must have at most %d points, got %zd", pi->name, (int)pi->max,
                         (Py_ssize_t)n);
            Py_DECREF(a);
            return -1;
        }
        const double *d = PyArray_DATA(a);
        pr.n = (int)n;
        for (npy_intp k = 0; k < n; k++) { pr.height[k] = d[2 * k]; pr.value[k] = d[2 * k + 1]; }
        Py_DECREF(a);
    }
    char why[320];
    if (vp_profile_check(pi, &pr, why, sizeof why)) { PyErr_SetString(PyExc_ValueError, why); return -1; }
    *out = pr;
    return 0;
}

/* A PROFILE parameter's value: None without points, else a tuple of (height, value) tuples. */
static PyObject *get_profile(const vp_profile *pr)
{
    if (!pr->n) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(pr->n);
    for (int k = 0; t && k < pr->n; k++) {
        PyObject *row = Py_BuildValue("(dd)", pr->height[k], pr->value[k]);
        if (!row) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, k, row);
    }
    return t;
}

/* Convert val and store it into p's field for pi; TypeError/ValueError naming the parameter. */
int vp_py_set_param(vp_params *p, const vp_param_info *pi, PyObject *val)
{
    char *field = (char *)p + pi->offset;
    double v;
    switch (pi->type) {
    case VP_PARAM_PROFILE:
        return set_profile((vp_profile *)field, pi, val);
    case VP_PARAM_VEC3: {
        double g[3];
        if (vp_py_parse_vec3(val, pi->name, g)) return -1;
        memcpy(field, g, sizeof g);
        return 0;
    }
    case VP_PARAM_ENUM: {
        PyObject *names = choice_list(pi);
        if (!names) return -1;
        if (!PyUnicode_Check(val)) {
            PyErr_Format(PyExc_TypeError, "%s must be a str, one of %R, got %R", pi->name, names, val);
            Py_DECREF(names);
            return -1;
        }
        Py_ssize_t i = PySequence_Index(names, val);
        if (i < 0) {
            PyErr_Clear();
            PyObject *hint = vp_py_did_you_mean(val, names);
            if (hint) PyErr_Format(PyExc_ValueError, "%s must be one of %R, got %R%U", pi->name, names, val, hint);
            Py_XDECREF(hint);
            Py_DECREF(names);
            return -1;
        }
        Py_DECREF(names);
        *(int *)field = (int)i;
        return 0;
    }
    case VP_PARAM_BOOL:
        if (!(PyBool_Check(val) || PyLong_Check(val) || PyArray_IsScalar(val, Bool) ||
              PyArray_IsScalar(val, Integer))) {
            PyErr_Format(PyExc_TypeError, "%s must be a bool (True or False; 1 or 0 also do), got %R", pi->name, val);
            return -1;
        } else {
            long t = PyArray_IsScalar(val, Bool) ? (long)PyObject_IsTrue(val) : PyLong_AsLong(val);
            if (t == -1 && PyErr_Occurred()) return -1;
            if (vp_param_check_value(pi, (double)t, NULL, 0)) { param_value_error(pi, (double)t); return -1; }
            *(int *)field = (int)t;
            return 0;
        }
    default:
        break;
    }
    if (pi->type == VP_PARAM_INT && pi == &vp_param_table[VP_PARAM_INDEX_threads] && val == Py_None) {
        *(int *)field = vp_py_default_threads();
        return 0;
    }
    if (vp_py_get_double(val, pi->name, &v)) return -1;
    if (vp_param_check_value(pi, v, NULL, 0)) { param_value_error(pi, v); return -1; }
    switch (pi->type) {
    case VP_PARAM_DOUBLE: *(double *)field = v; break;
    case VP_PARAM_SIZE: *(size_t *)field = (size_t)v; break;
    default: *(int *)field = (int)v; break;
    }
    return 0;
}

static PyObject *get_param(const vp_params *p, const vp_param_info *pi)
{
    const char *field = (const char *)p + pi->offset;
    char buf[64];
    switch (pi->type) {
    case VP_PARAM_DOUBLE: return PyFloat_FromDouble(*(const double *)field);
    case VP_PARAM_SIZE: return PyLong_FromSize_t(*(const size_t *)field);
    case VP_PARAM_BOOL: return PyBool_FromLong(*(const int *)field);
    case VP_PARAM_VEC3: return vp_py_vec3((const double *)field);
    case VP_PARAM_PROFILE: return get_profile((const vp_profile *)field);
    case VP_PARAM_ENUM:
        if (choice_name(pi, *(const int *)field, buf, sizeof buf)) return PyLong_FromLong(*(const int *)field);
        return PyUnicode_FromString(buf);
    default: return PyLong_FromLong(*(const int *)field);
    }
}

/* Parameters that are no longer used: accepted with a DeprecationWarning and ignored. */
int vp_py_is_retired_param(const char *name) { return !strcmp(name, "overlap"); }

int vp_py_warn_retired_param(const char *name)
{
    return PyErr_WarnFormat(PyExc_DeprecationWarning, 2, "the %s parameter is deprecated and has no effect", name);
}

/* vortonpy._core.PARAMETERS: a tuple of dicts, one per row of the table, defaults included. */
PyObject *vp_py_parameters_metadata(void)
{
    vp_params d;
    vp_params_init(&d);
    static const char *const type_names[] = {"float", "int", "bool", "enum", "int", "vec3", "profile"};
    PyObject *out = PyTuple_New(VP_PARAM_COUNT);
    if (!out) return NULL;
    for (int i = 0; i < VP_PARAM_COUNT; i++) {
        const vp_param_info *pi = &vp_param_table[i];
        PyObject *def = i == VP_PARAM_INDEX_threads ? Py_NewRef(Py_None) : get_param(&d, pi);
        PyObject *choices = pi->type == VP_PARAM_ENUM ? choice_list(pi) : PyList_New(0);
        PyObject *row = NULL;
        if (def && choices) {
            PyObject *ct = PyList_AsTuple(choices);
            if (ct)
                row = Py_BuildValue("{s:s,s:s,s:O,s:d,s:d,s:O,s:s,s:N,s:s}", "name", pi->name, "type",
                                    type_names[pi->type], "default", def, "min", pi->min, "max", pi->max,
                                    "min_inclusive", (pi->flags & VP_PARAM_MIN_OPEN) ? Py_False : Py_True,
                                    "unit", pi->unit, "choices", ct, "doc", pi->doc);
        }
        Py_XDECREF(def);
        Py_XDECREF(choices);
        if (!row) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, row);
    }
    return out;
}

static PyObject *Sim_getparam(SimObject *self, void *closure)
{
    if (!self->s) return vp_py_raise_status(VP_ERR_STATE, "Sim");
    return get_param(&self->s->params, &vp_param_table[(size_t)closure]);
}

static int Sim_setparam(SimObject *self, PyObject *val, void *closure)
{
    const vp_param_info *pi = &vp_param_table[(size_t)closure];
    if (!val) { PyErr_Format(PyExc_AttributeError, "cannot delete the parameter %s", pi->name); return -1; }
    if (vp_py_check_ready(self)) return -1;
    vp_params p = self->s->params;
    if (vp_py_set_param(&p, pi, val)) return -1;
    char why[320];
    if (vp_params_check(&p, why, sizeof why)) { PyErr_SetString(PyExc_ValueError, why); return -1; }
    int st = vp_sim_set_params(self->s, &p);
    if (st) { vp_py_raise_status(st, pi->name); return -1; }
    return 0;
}

static char param_docs[VP_PARAM_COUNT][400]; /* "doc [unit]" of each parameter's attribute */

/* Sim's attributes of the parameters, one per row of the table, into out[0, VP_PARAM_COUNT). */
void vp_py_param_getset(PyGetSetDef *out)
{
    for (int i = 0; i < VP_PARAM_COUNT; i++) {
        const vp_param_info *pi = &vp_param_table[i];
        PyOS_snprintf(param_docs[i], sizeof param_docs[i], "%s%s%s%s", pi->doc, *pi->unit ? " [" : "", pi->unit,
                      *pi->unit ? "]" : "");
        out[i] = (PyGetSetDef){(char *)pi->name, (getter)Sim_getparam, (setter)Sim_setparam, param_docs[i],
                               (void *)(size_t)i};
    }
}
