/* module.c: the CPython layer (vortonpy._core): the Sim and RigidBody types and the NumPy
 * views of the particle arrays.  The only file of the core that includes Python.h.
 *
 * Rules kept here (api.md, style.md):
 * - every view's base is a capsule holding a reference to the C block it shows, so a view
 *   stays valid after its Sim is deleted or its arrays are regrown or compacted;
 * - inputs are validated and converted completely before anything in the Sim changes;
 * - the GIL is released around each step, and Ctrl-C is checked between steps;
 * - a Sim used by one thread refuses calls from another (RuntimeError), never races. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "vortonpy.h"
#include "kernel.h"
#include "fft_lines.h"
#include "cpu.h"

#if PY_VERSION_HEX < 0x030A0000 /* Python 3.9 (pyproject's floor): two 3.10 additions */
static inline PyObject *Py_NewRef(PyObject *o) { Py_INCREF(o); return o; }
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *value)
{
    Py_INCREF(value);
    if (PyModule_AddObject(m, name, value) < 0) { Py_DECREF(value); return -1; } /* steals only on success */
    return 0;
}
#endif

/* ------------------------------------------------------------------ status -> exception */
/* Raise the exception of C status st: "what: detail", detail the table's words if NULL. */
static PyObject *raise_status_detail(int st, const char *what, const char *detail)
{
    const struct { int status; PyObject *type; const char *words; } table[] = {
        {VP_ERR_NOMEM, PyExc_MemoryError, "out of memory"},
        {VP_ERR_VALUE, PyExc_ValueError, "invalid value"},
        {VP_ERR_NONFINITE, PyExc_FloatingPointError, "non-finite value"},
        {VP_ERR_STATE, PyExc_RuntimeError, "not available in this state"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].status == st)
            return PyErr_Format(table[i].type, "%s: %s", what, detail ? detail : table[i].words);
    return PyErr_Format(PyExc_RuntimeError, "%s: error %d", what, st);
}

static PyObject *raise_status(int st, const char *what) { return raise_status_detail(st, what, NULL); }

/* "; did you mean 'x'?" for the name among candidates (a list of str) closest to word
 * (difflib), or "" when none is close; a new reference, NULL with an exception set. */
static PyObject *did_you_mean(PyObject *word, PyObject *candidates)
{
    PyObject *difflib = PyImport_ImportModule("difflib");
    if (!difflib) return NULL;
    PyObject *close = PyObject_CallMethod(difflib, "get_close_matches", "OOi", word, candidates, 1);
    Py_DECREF(difflib);
    if (!close) return NULL;
    PyObject *out = PyList_Check(close) && PyList_GET_SIZE(close) > 0
                        ? PyUnicode_FromFormat("; did you mean %R?", PyList_GET_ITEM(close, 0))
                        : PyUnicode_FromString("");
    Py_DECREF(close);
    return out;
}

/* The public names of type t (dir() without the _-prefixed), a new list. */
static PyObject *public_names(PyTypeObject *t)
{
    PyObject *all = PyObject_Dir((PyObject *)t), *out = PyList_New(0);
    if (!all || !out) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *n = PyList_GET_ITEM(all, i);
        if (PyUnicode_Check(n) && PyUnicode_READ_CHAR(n, 0) != '_' && PyList_Append(out, n) < 0) goto fail;
    }
    Py_DECREF(all);
    return out;
fail:
    Py_XDECREF(all);
    Py_XDECREF(out);
    return NULL;
}

/* TypeError for an unknown keyword argument `key` of `func`, suggesting the nearest of
 * `names` (a list of str).  Returns -1. */
static int unknown_keyword(const char *func, PyObject *key, PyObject *names)
{
    PyObject *hint = names ? did_you_mean(key, names) : NULL;
    if (!hint) return -1;
    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R%U", func, key, hint);
    Py_DECREF(hint);
    return -1;
}

/* After a failed setattr on an instance of a type with fixed attributes: an AttributeError
 * for a name the type does not have names the nearest one it has.  Returns -1. */
static int explain_setattr_failure(PyObject *self, PyObject *name)
{
    if (!PyErr_ExceptionMatches(PyExc_AttributeError) || !PyUnicode_Check(name)) return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int has = PyObject_HasAttr((PyObject *)Py_TYPE(self), name);
    if (has) { /* a read-only attribute: its own message stands */
        PyErr_Restore(type, value, tb);
        return -1;
    }
    Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
    PyObject *names = public_names(Py_TYPE(self));
    PyObject *hint = names ? did_you_mean(name, names) : NULL;
    Py_XDECREF(names);
    if (!hint) return -1;
    const char *dot = strrchr(Py_TYPE(self)->tp_name, '.');
    PyErr_Format(PyExc_AttributeError, "%s has no attribute %R%U", dot ? dot + 1 : Py_TYPE(self)->tp_name, name,
                 hint);
    Py_DECREF(hint);
    return -1;
}

static int default_threads(void)
{
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

/* ------------------------------------------------------------------ input conversion */
/* The shape of a as a tuple (for messages). */
static PyObject *shape_tuple(PyArrayObject *a)
{
    PyObject *t = PyTuple_New(PyArray_NDIM(a));
    for (int i = 0; t && i < PyArray_NDIM(a); i++) {
        PyObject *d = PyLong_FromSsize_t((Py_ssize_t)PyArray_DIM(a, i));
        if (!d) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, i, d);
    }
    return t;
}

/* Convert obj to a C-contiguous float64 array of shape (n, width) (width 0: shape (n,)).
 * A (width,) input is one row.  Rejects non-numeric dtypes (TypeError), wrong shapes and
 * non-finite values (ValueError), naming the argument.  *n_io: -1 to infer, else required. */
static PyArrayObject *as_rows(PyObject *obj, const char *name, int width, npy_intp *n_io)
{
    PyArrayObject *raw = (PyArrayObject *)PyArray_FromAny(obj, NULL, 0, 0, 0, NULL);
    if (!raw) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be array-like of numbers", name);
        return NULL;
    }
    char kind = PyArray_DESCR(raw)->kind;
    if (kind != 'f' && kind != 'i' && kind != 'u') {
        PyErr_Format(PyExc_TypeError, "%s must have a real numeric dtype, got %R", name,
                     (PyObject *)PyArray_DESCR(raw));
        Py_DECREF(raw);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny((PyObject *)raw, PyArray_DescrFromType(NPY_DOUBLE), 0, 0,
                                                       NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST |
                                                           NPY_ARRAY_ENSURECOPY, NULL);
    Py_DECREF(raw);
    if (!a) return NULL;
    int nd = PyArray_NDIM(a);
    npy_intp *dims = PyArray_DIMS(a);
    npy_intp n;
    int ok;
    if (width > 0) {
        ok = (nd == 1 && dims[0] == width) || (nd == 2 && dims[1] == width);
        n = nd == 1 ? 1 : nd == 2 ? dims[0] : 0;
    } else {
        ok = nd == 1;
        n = nd == 1 ? dims[0] : 0;
    }
    if (ok && *n_io >= 0 && n != *n_io) ok = 0;
    if (!ok) {
        PyObject *got = shape_tuple(a);
        if (got) {
            if (*n_io == 1 && width > 0)
                PyErr_Format(PyExc_ValueError, "%s must have shape (%d,), got shape %R", name, width, got);
            else if (*n_io >= 0 && width > 0)
                PyErr_Format(PyExc_ValueError, "%s must have shape (%zd, %d) (a row per particle), got shape %R", name,
                             (Py_ssize_t)*n_io, width, got);
            else if (*n_io >= 0)
                PyErr_Format(PyExc_ValueError,
                             "%s must be a scalar or have shape (%zd,) (one per particle), got shape %R", name,
                             (Py_ssize_t)*n_io, got);
            else if (width > 0)
                PyErr_Format(PyExc_ValueError, "%s must have shape (N, %d), got shape %R", name, width, got);
            else
                PyErr_Format(PyExc_ValueError, "%s must have shape (N,) or be a scalar, got shape %R", name, got);
            Py_DECREF(got);
        }
        Py_DECREF(a);
        return NULL;
    }
    const double *d = (const double *)PyArray_DATA(a);
    npy_intp total = PyArray_SIZE(a);
    for (npy_intp i = 0; i < total; i++)
        if (!isfinite(d[i])) {
            PyErr_Format(PyExc_ValueError, "%s must be finite (found %s at flat index %zd)", name,
                         isnan(d[i]) ? "nan" : "inf", (Py_ssize_t)i);
            Py_DECREF(a);
            return NULL;
        }
    *n_io = n;
    return a;
}

/* A per-particle scalar: a number broadcast to n, or an (n,) array. */
static PyArrayObject *as_per_particle(PyObject *obj, const char *name, npy_intp n)
{
    PyArrayObject *raw = (PyArrayObject *)PyArray_FromAny(obj, NULL, 0, 0, 0, NULL);
    if (!raw) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a number or array-like of numbers", name);
        return NULL;
    }
    int scalar = PyArray_NDIM(raw) == 0;
    Py_DECREF(raw);
    npy_intp m = scalar ? -1 : n;
    if (!scalar) return as_rows(obj, name, 0, &m);
    PyObject *wrapped = Py_BuildValue("(O)", obj);
    if (!wrapped) return NULL;
    m = 1;
    PyArrayObject *one = as_rows(wrapped, name, 0, &m);
    Py_DECREF(wrapped);
    if (!one) return NULL;
    npy_intp dims[1] = {n};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_DOUBLE);
    if (out) {
        double v = *(double *)PyArray_DATA(one), *o = (double *)PyArray_DATA(out);
        for (npy_intp i = 0; i < n; i++) o[i] = v;
    }
    Py_DECREF(one);
    return out;
}

/* A (3,) vector; NULL or None (not given) leaves out as it is. */
static int parse_vec3(PyObject *obj, const char *name, double out[3])
{
    npy_intp n = 1;
    if (obj == NULL || obj == Py_None) return 0;
    PyArrayObject *a = as_rows(obj, name, 3, &n);
    if (!a) return -1;
    memcpy(out, PyArray_DATA(a), 3 * sizeof(double));
    Py_DECREF(a);
    return 0;
}

static PyObject *vec3(const double *v)
{
    npy_intp dims[1] = {3};
    PyObject *a = PyArray_SimpleNew(1, dims, NPY_DOUBLE);
    if (a) memcpy(PyArray_DATA((PyArrayObject *)a), v, 3 * sizeof(double));
    return a;
}

/* ------------------------------------------------------------------ views */
static void capsule_release(PyObject *cap)
{
    vp_buffer_release((vp_buffer *)PyCapsule_GetPointer(cap, "vortonpy.buffer"));
}

/* A writable ndarray over rows [0, n) of buf, owning a reference to the block. */
static PyObject *make_view(vp_buffer *buf, size_t n, int width)
{
    npy_intp dims[2] = {(npy_intp)n, width};
    int nd = width == 1 ? 1 : 2;
    if (!buf) return PyArray_ZEROS(nd, dims, NPY_DOUBLE, 0);
    PyObject *arr = PyArray_SimpleNewFromData(nd, dims, NPY_DOUBLE, buf->data);
    if (!arr) return NULL;
    vp_buffer_retain(buf);
    PyObject *cap = PyCapsule_New(buf, "vortonpy.buffer", capsule_release);
    if (!cap) {
        vp_buffer_release(buf);
        Py_DECREF(arr);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, cap) < 0) { /* steals cap */
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* ------------------------------------------------------------------ Sim object */
typedef struct {
    PyObject_HEAD
    vp_sim *s;
    int busy;           /* a thread is inside a call that released the GIL */
    PyObject *bodies;   /* list of RigidBody objects attached to this sim */
} SimObject;

typedef struct {
    PyObject_HEAD
    vp_body local;      /* state while not attached */
    SimObject *sim;     /* owner once added (strong reference), or NULL */
    Py_ssize_t index;
} BodyObject;

static PyTypeObject SimType, BodyType;

static int check_ready(SimObject *self)
{
    if (!self->s) {
        PyErr_SetString(PyExc_RuntimeError, "Sim is not initialised");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Sim is busy in another thread; calls on one Sim must not overlap");
        return -1;
    }
    return 0;
}

/* Numeric parameter with a range check; name is the keyword the user typed. */
static int check_param(const char *name, double v, double lo, int lo_open, double hi)
{
    if (!isfinite(v) && !(isinf(v) && v > 0 && isinf(hi))) {
        PyErr_Format(PyExc_ValueError, "%s must be finite, got %s", name, isnan(v) ? "nan" : "inf");
        return -1;
    }
    if ((lo_open ? !(v > lo) : !(v >= lo)) || v > hi) {
        char vb[40], lb[40], hb[40];
        PyOS_snprintf(vb, sizeof vb, "%.6g", v);
        PyOS_snprintf(lb, sizeof lb, "%.6g", lo);
        PyOS_snprintf(hb, sizeof hb, "%.6g", hi);
        if (isinf(hi))
            PyErr_Format(PyExc_ValueError, "%s must be %s %s, got %s", name, lo_open ? ">" : ">=", lb, vb);
        else
            PyErr_Format(PyExc_ValueError, "%s must be in %s%s, %s], got %s", name, lo_open ? "(" : "[", lb, hb, vb);
        return -1;
    }
    return 0;
}

static int get_double(PyObject *obj, const char *name, double *out)
{
    if (PyBool_Check(obj) || !(PyFloat_Check(obj) || PyLong_Check(obj) || PyNumber_Check(obj)) ||
        PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a real number, got %R", name, obj);
        return -1;
    }
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a real number, got %R", name, obj);
        return -1;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------ parameters
 * Every parameter is read and written through vp_param_table (params.h): by its offset in
 * vp_params and its type.  The range check is the core's (vp_param_check_value). */
static const vp_param_info *find_param(const char *name)
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
        PyArrayObject *a = as_rows(val, pi->name, 2, &n);
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
static int set_param(vp_params *p, const vp_param_info *pi, PyObject *val)
{
    char *field = (char *)p + pi->offset;
    double v;
    switch (pi->type) {
    case VP_PARAM_PROFILE:
        return set_profile((vp_profile *)field, pi, val);
    case VP_PARAM_VEC3: {
        double g[3];
        if (parse_vec3(val, pi->name, g)) return -1;
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
            PyObject *hint = did_you_mean(val, names);
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
        *(int *)field = default_threads();
        return 0;
    }
    if (get_double(val, pi->name, &v)) return -1;
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
    case VP_PARAM_VEC3: return vec3((const double *)field);
    case VP_PARAM_PROFILE: return get_profile((const vp_profile *)field);
    case VP_PARAM_ENUM:
        if (choice_name(pi, *(const int *)field, buf, sizeof buf)) return PyLong_FromLong(*(const int *)field);
        return PyUnicode_FromString(buf);
    default: return PyLong_FromLong(*(const int *)field);
    }
}

/* Parameters that are no longer used: accepted with a DeprecationWarning and ignored. */
static int is_retired_param(const char *name) { return !strcmp(name, "overlap"); }

static int warn_retired_param(const char *name)
{
    return PyErr_WarnFormat(PyExc_DeprecationWarning, 2, "the %s parameter is deprecated and has no effect", name);
}

/* vortonpy._core.PARAMETERS: a tuple of dicts, one per row of the table, defaults included. */
static PyObject *parameters_metadata(void)
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

static void Sim_dealloc(SimObject *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->bodies);
    vp_sim_free(self->s);
    self->s = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Sim_traverse(SimObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->bodies);
    return 0;
}

static int Sim_clear(SimObject *self)
{
    Py_CLEAR(self->bodies);
    return 0;
}

static PyObject *Sim_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    SimObject *self = (SimObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->bodies = PyList_New(0);
    if (!self->bodies) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

#define DEFAULT_SEED 12345 /* of the emitters' random numbers, as vp_sim_create seeds them */

/* The names Sim() accepts: the parameters and seed, a new list. */
static PyObject *sim_keywords(void)
{
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i <= VP_PARAM_COUNT; i++) {
        PyObject *u = PyUnicode_FromString(i < VP_PARAM_COUNT ? vp_param_table[i].name : "seed");
        if (!u || PyList_Append(l, u) < 0) Py_CLEAR(l);
        Py_XDECREF(u);
    }
    return l;
}

static int Sim_init(SimObject *self, PyObject *args, PyObject *kw)
{
    if (self->s) { PyErr_SetString(PyExc_RuntimeError, "Sim is already initialised"); return -1; }
    if (args && PyTuple_GET_SIZE(args) > 0) {
        PyErr_SetString(PyExc_TypeError, "Sim() takes keyword arguments only");
        return -1;
    }
    vp_params p;
    vp_params_init(&p);
    p.threads = default_threads();
    unsigned long long seed = DEFAULT_SEED;
    if (kw) {
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &key, &val)) {
            const char *k = PyUnicode_AsUTF8(key);
            if (!k) return -1;
            const vp_param_info *pi = find_param(k);
            if (pi) {
                if (set_param(&p, pi, val)) return -1;
            } else if (!strcmp(k, "seed")) {
                if (!PyLong_Check(val) || PyBool_Check(val)) {
                    PyErr_Format(PyExc_TypeError, "seed must be an int, got %R", val);
                    return -1;
                }
                seed = PyLong_AsUnsignedLongLongMask(val);
                if (seed == (unsigned long long)-1 && PyErr_Occurred()) return -1;
            } else if (is_retired_param(k)) {
                if (warn_retired_param(k) < 0) return -1;
            } else {
                PyObject *names = sim_keywords();
                unknown_keyword("Sim", key, names);
                Py_XDECREF(names);
                return -1;
            }
        }
    }
    char why[320];
    if (vp_params_check(&p, why, sizeof why)) { PyErr_SetString(PyExc_ValueError, why); return -1; }
    self->s = vp_sim_create(&p);
    if (!self->s) { PyErr_NoMemory(); return -1; }
    /* The particle blocks exist from the start (empty), so no phase ever forms a pointer from a
     * NULL block (`v->position->data` with no vortons is undefined behaviour; UBSan reports it). */
    if (vp_sim_reserve_vortons(self->s, 0) || vp_sim_reserve_tracers(self->s, 0)) {
        vp_sim_free(self->s);
        self->s = NULL;
        PyErr_NoMemory();
        return -1;
    }
    vp_rng_seed(self->s->rng, (uint64_t)seed);
    return 0;
}

static PyObject *Sim_getparam(SimObject *self, void *closure)
{
    if (!self->s) return raise_status(VP_ERR_STATE, "Sim");
    return get_param(&self->s->params, &vp_param_table[(size_t)closure]);
}

static int Sim_setparam(SimObject *self, PyObject *val, void *closure)
{
    const vp_param_info *pi = &vp_param_table[(size_t)closure];
    if (!val) { PyErr_Format(PyExc_AttributeError, "cannot delete the parameter %s", pi->name); return -1; }
    if (check_ready(self)) return -1;
    vp_params p = self->s->params;
    if (set_param(&p, pi, val)) return -1;
    char why[320];
    if (vp_params_check(&p, why, sizeof why)) { PyErr_SetString(PyExc_ValueError, why); return -1; }
    int st = vp_sim_set_params(self->s, &p);
    if (st) { raise_status(st, pi->name); return -1; }
    return 0;
}

/* Attribute assignment: the retired parameters warn; a name Sim does not have names the
 * nearest one it has. */
static int Sim_setattro(PyObject *self, PyObject *name, PyObject *val)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (n && is_retired_param(n) && !PyObject_HasAttr((PyObject *)Py_TYPE(self), name)) return warn_retired_param(n);
    if (PyObject_GenericSetAttr(self, name, val) == 0) return 0;
    return explain_setattr_failure(self, name);
}

/* With a stratification, the densities d given to add_vortons, add_tracers (deviations from
 * the ambient at each particle's height) become the stored ones (the parcel's density less
 * ambient_density): d += rho_bar(x) - rho0. */
static int to_parcel_density(const vp_params *p, npy_intp n, const double *x, double *d)
{
    double *e = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!e) { PyErr_NoMemory(); return -1; }
    vp_ambient_deviation(p, (size_t)n, x, e);
    for (npy_intp i = 0; i < n; i++) d[i] += e[i];
    free(e);
    return 0;
}

static PyObject *Sim_add_vortons(SimObject *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"position", "vorticity", "radius", "density", NULL};
    PyObject *po, *wo, *ro, *dob = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:add_vortons", kwl, &po, &wo, &ro, &dob)) return NULL;
    if (check_ready(self)) return NULL;
    npy_intp n = -1;
    PyArrayObject *pa = NULL, *wa = NULL, *ra = NULL, *da = NULL;
    PyObject *res = NULL;
    if (!(pa = as_rows(po, "position", 3, &n))) goto done;
    if (!(wa = as_rows(wo, "vorticity", 3, &n))) goto done;
    if (!(ra = as_per_particle(ro, "radius", n))) goto done;
    if (dob) { if (!(da = as_per_particle(dob, "density", n))) goto done; }
    else { npy_intp d1[1] = {n}; if (!(da = (PyArrayObject *)PyArray_ZEROS(1, d1, NPY_DOUBLE, 0))) goto done; }
    const double *r = PyArray_DATA(ra);
    double *d = PyArray_DATA(da); /* (a fresh array: as_rows and the default copy) */
    double rho0 = self->s->params.ambient_density;
    const int stratified = self->s->params.stratification.n > 0;
    if (stratified && to_parcel_density(&self->s->params, n, PyArray_DATA(pa), d)) goto done;
    for (npy_intp i = 0; i < n; i++) {
        if (!(r[i] > 0)) { PyErr_Format(PyExc_ValueError, "radius must be positive (row %zd is not)", (Py_ssize_t)i); goto done; }
        if (!(d[i] > -rho0)) { /* (PyErr_Format has no %g: Python 3.12 raises SystemError on it) */
            char rb[40];
            PyOS_snprintf(rb, sizeof rb, "%.6g", stratified ? vp_ambient_density(&self->s->params, (double *)PyArray_DATA(pa) + 3 * i) : rho0);
            PyErr_Format(PyExc_ValueError, "density (a deviation from the ambient) must exceed -%s, minus the ambient density%s (row %zd)",
                         rb, stratified ? " at the vorton's height" : "", (Py_ssize_t)i);
            goto done;
        }
    }
    int st = vp_sim_add_vortons(self->s, (size_t)n, PyArray_DATA(pa), PyArray_DATA(wa), r, d);
    if (st) { raise_status(st, "add_vortons"); goto done; }
    res = Py_NewRef(Py_None);
done:
    Py_XDECREF(pa); Py_XDECREF(wa); Py_XDECREF(ra); Py_XDECREF(da);
    return res;
}

static PyObject *Sim_add_tracers(SimObject *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"position", "density", NULL};
    PyObject *po, *dob = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:add_tracers", kwl, &po, &dob)) return NULL;
    if (check_ready(self)) return NULL;
    npy_intp n = -1;
    PyArrayObject *pa = NULL, *da = NULL;
    PyObject *res = NULL;
    if (!(pa = as_rows(po, "position", 3, &n))) goto done;
    if (dob) { if (!(da = as_per_particle(dob, "density", n))) goto done; }
    else { npy_intp d1[1] = {n}; if (!(da = (PyArrayObject *)PyArray_ZEROS(1, d1, NPY_DOUBLE, 0))) goto done; }
    if (self->s->params.stratification.n && to_parcel_density(&self->s->params, n, PyArray_DATA(pa), PyArray_DATA(da)))
        goto done;
    int st = vp_sim_add_tracers(self->s, (size_t)n, PyArray_DATA(pa), PyArray_DATA(da));
    if (st) { raise_status(st, "add_tracers"); goto done; }
    res = Py_NewRef(Py_None);
done:
    Py_XDECREF(pa); Py_XDECREF(da);
    return res;
}

static vp_body *body_ptr(BodyObject *b)
{
    if (b->sim && b->sim->s && b->index < (Py_ssize_t)b->sim->s->n_bodies) return &b->sim->s->bodies[b->index];
    return &b->local;
}

static PyObject *Sim_add_body(SimObject *self, PyObject *arg)
{
    if (check_ready(self)) return NULL;
    if (!PyObject_TypeCheck(arg, &BodyType)) {
        PyErr_Format(PyExc_TypeError, "body must be a vortonpy.RigidBody, got %R", Py_TYPE(arg));
        return NULL;
    }
    BodyObject *b = (BodyObject *)arg;
    if (b->sim) {
        PyErr_SetString(PyExc_ValueError, "body is already part of a Sim");
        return NULL;
    }
    if (PyList_Append(self->bodies, arg) < 0) return NULL;
    int st = vp_sim_add_body(self->s, &b->local);
    if (st) {
        PySequence_DelItem(self->bodies, PyList_GET_SIZE(self->bodies) - 1);
        return raise_status(st, "add_body");
    }
    b->index = (Py_ssize_t)self->s->n_bodies - 1;
    Py_INCREF(self);
    b->sim = self;
    return Py_NewRef(arg);
}

/* The least density of the ambient fluid anywhere: an emitter's density deviation must
 * exceed minus it, so that every parcel it makes has a positive density. */
static double least_ambient_density(const vp_params *p)
{
    const vp_profile *pr = &p->stratification;
    double m = pr->n ? pr->value[0] : p->ambient_density;
    for (int k = 1; k < pr->n; k++) m = pr->value[k] < m ? pr->value[k] : m;
    return m;
}

static PyObject *Sim_add_emitter(SimObject *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"center", "half_size", "vorton_rate", "tracer_rate", "vorton_radius", "vorticity",
                          "density", "debt", NULL};
    PyObject *co, *ho, *debt = NULL;
    double vr = 0, tr = 0, rad = 0.05, vort = 0, dens = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|dddddO:add_emitter", kwl, &co, &ho, &vr, &tr, &rad, &vort, &dens, &debt))
        return NULL;
    if (check_ready(self)) return NULL;
    vp_emitter e;
    memset(&e, 0, sizeof e);
    if (parse_vec3(co, "center", e.center) || parse_vec3(ho, "half_size", e.half_size)) return NULL;
    for (int a = 0; a < 3; a++)
        if (e.half_size[a] < 0) { PyErr_SetString(PyExc_ValueError, "half_size must be >= 0"); return NULL; }
    if (check_param("vorton_rate", vr, 0, 0, INFINITY) || check_param("tracer_rate", tr, 0, 0, INFINITY) ||
        check_param("vorton_radius", rad, 0, 1, INFINITY) || check_param("vorticity", vort, 0, 0, INFINITY) ||
        check_param("density", dens, -least_ambient_density(&self->s->params), 1, INFINITY))
        return NULL;
    if (!isfinite(vr) || !isfinite(tr)) {
        PyErr_Format(PyExc_ValueError, "%s must be finite", isfinite(vr) ? "tracer_rate" : "vorton_rate");
        return NULL;
    }
    if (debt && debt != Py_None) {
        double dd[2];
        if (!PyArg_ParseTuple(debt, "dd", &dd[0], &dd[1])) return NULL;
        if (!isfinite(dd[0]) || !isfinite(dd[1])) { PyErr_SetString(PyExc_ValueError, "debt must be finite"); return NULL; }
        e.vorton_debt = dd[0]; e.tracer_debt = dd[1];
    }
    e.vorton_rate = vr; e.tracer_rate = tr; e.vorton_radius = rad; e.vorticity = vort; e.density = dens;
    int st = vp_sim_add_emitter(self->s, &e);
    if (st) return raise_status(st, "add_emitter");
    Py_RETURN_NONE;
}

static PyObject *Sim_emitters(SimObject *self, void *c)
{
    if (!self->s) return raise_status(VP_ERR_STATE, "Sim");
    PyObject *l = PyList_New(0);
    if (!l) return NULL;
    for (size_t i = 0; i < self->s->n_emitters; i++) {
        vp_emitter *e = &self->s->emitters[i];
        PyObject *d = Py_BuildValue("{s:N,s:N,s:d,s:d,s:d,s:d,s:d,s:(dd)}", "center", vec3(e->center), "half_size",
                                    vec3(e->half_size), "vorton_rate", e->vorton_rate, "tracer_rate", e->tracer_rate,
                                    "vorton_radius", e->vorton_radius, "vorticity", e->vorticity, "density", e->density,
                                    "debt", e->vorton_debt, e->tracer_debt);
        if (!d || PyList_Append(l, d) < 0) { Py_XDECREF(d); Py_DECREF(l); return NULL; }
        Py_DECREF(d);
    }
    return l;
}

static const char *phase_name(int p) { return p >= 0 && p < VP_PHASE_COUNT ? vp_phase_names[p] : "unknown"; }

/* Particles an emitter may add in one step before the request is refused: 2^40 vortons are
 * 70 TB of particle data, more than any machine holds, and far below the count at which the
 * byte sizes computed in vp_emit (count * 64) would overflow size_t and under-allocate. */
#define MAX_EMIT_PER_STEP 1099511627776.0

/* MemoryError (and 0 steps taken) if an emitter would ask for an absurd number of particles in
 * the next step, or a non-finite one; checked before each step so the state is left as it is. */
static int check_emitters(SimObject *self)
{
    const vp_sim *s = self->s;
    double dt = s->params.dt;
    for (size_t i = 0; i < s->n_emitters; i++) {
        const vp_emitter *e = &s->emitters[i];
        double nv = e->vorton_debt + (e->vorton_rate > 0 ? e->vorton_rate * dt : 0.0);
        double nt = e->tracer_debt + (e->tracer_rate > 0 ? e->tracer_rate * dt : 0.0);
        if (!(nv < MAX_EMIT_PER_STEP) || !(nt < MAX_EMIT_PER_STEP)) {
            char msg[256];
            PyOS_snprintf(msg, sizeof msg,
                          "step: emitter %zu would add %.3g vortons and %.3g tracers in one step (rate * dt + debt), "
                          "more than memory can hold: lower vorton_rate / tracer_rate or dt", i, nv, nt);
            PyErr_SetString(PyExc_MemoryError, msg);
            return -1;
        }
    }
    return 0;
}

static PyObject *Sim_step_n(SimObject *self, PyObject *args)
{
    Py_ssize_t n = 1;
    if (!PyArg_ParseTuple(args, "|n:_step", &n)) return NULL;
    if (check_ready(self)) return NULL;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "steps must be >= 0"); return NULL; }
    self->busy = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int st;
        if (check_emitters(self)) { self->busy = 0; return NULL; }
        Py_BEGIN_ALLOW_THREADS
        st = vp_sim_step(self->s);
        Py_END_ALLOW_THREADS
        if (st == VP_ERR_NONFINITE) {
            self->busy = 0;
            return PyErr_Format(PyExc_FloatingPointError, "non-finite value in frame %lld, phase '%s'",
                                (long long)self->s->frame + 1, phase_name(self->s->failed_phase));
        }
        if (st) { self->busy = 0; return raise_status(st, "step"); }
        if (PyErr_CheckSignals() < 0) { self->busy = 0; return NULL; }
    }
    self->busy = 0;
    Py_RETURN_NONE;
}

static PyObject *Sim_velocity_at(SimObject *self, PyObject *arg)
{
    if (check_ready(self)) return NULL;
    npy_intp m = -1;
    PyArrayObject *pts = as_rows(arg, "points", 3, &m);
    if (!pts) return NULL;
    npy_intp dims[2] = {m, 3};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_DOUBLE);
    if (!out) { Py_DECREF(pts); return NULL; }
    int st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = vp_sim_velocity_at(self->s, (size_t)m, PyArray_DATA(pts), PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    self->busy = 0;
    Py_DECREF(pts);
    if (st) { Py_DECREF(out); return raise_status(st, "velocity_at"); }
    return (PyObject *)out;
}

static PyObject *Sim_ambient_density_at(SimObject *self, PyObject *arg)
{
    if (check_ready(self)) return NULL;
    npy_intp m = -1;
    PyArrayObject *pts = as_rows(arg, "points", 3, &m);
    if (!pts) return NULL;
    npy_intp dims[1] = {m};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_DOUBLE);
    if (!out) { Py_DECREF(pts); return NULL; }
    const double *x = PyArray_DATA(pts);
    double *o = PyArray_DATA(out);
    for (npy_intp i = 0; i < m; i++) o[i] = vp_ambient_density(&self->s->params, x + 3 * i);
    Py_DECREF(pts);
    return (PyObject *)out;
}

/* Run one whole-sim C operation with the GIL released, marked busy so another Python
 * thread is refused rather than racing it. */
static PyObject *run_released(SimObject *self, int (*op)(vp_sim *), const char *name)
{
    if (check_ready(self)) return NULL;
    int st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = op(self->s);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st) return raise_status(st, name);
    Py_RETURN_NONE;
}

static PyObject *Sim_update_velocity_grid(SimObject *self, PyObject *unused)
{
    return run_released(self, vp_sim_update_velocity_grid, "update_velocity_grid");
}

static PyObject *Sim_collide(SimObject *self, PyObject *unused) { return run_released(self, vp_sim_collide, "collide"); }

static PyObject *Sim_remesh(SimObject *self, PyObject *unused) { return run_released(self, vp_sim_remesh, "remesh"); }

static PyObject *Sim_grid(SimObject *self, PyObject *unused)
{
    if (check_ready(self)) return NULL;
    vp_grid *g = &self->s->grid;
    size_t nn = vp_grid_count(g);
    npy_intp dims[4] = {g->n[2], g->n[1], g->n[0], 3};
    PyObject *vel = NULL, *den = NULL;
    if (self->s->grid_velocity && nn <= self->s->grid_allocated) {
        vel = PyArray_SimpleNew(4, dims, NPY_DOUBLE);
        den = PyArray_SimpleNew(3, dims, NPY_DOUBLE);
        if (!vel || !den) { Py_XDECREF(vel); Py_XDECREF(den); return NULL; }
        memcpy(PyArray_DATA((PyArrayObject *)vel), self->s->grid_velocity, 3 * nn * sizeof(double));
        memcpy(PyArray_DATA((PyArrayObject *)den), self->s->grid_density, nn * sizeof(double));
    } else {
        vel = Py_NewRef(Py_None); den = Py_NewRef(Py_None);
    }
    return Py_BuildValue("{s:N,s:d,s:(iii),s:N,s:N}", "origin", vec3(g->origin), "spacing", g->h, "shape", g->n[2],
                         g->n[1], g->n[0], "velocity", vel, "density", den);
}

/* The last solved grid's spacing, or 0 before any solve: grid() without its copies. */
static PyObject *Sim_grid_spacing(SimObject *self, PyObject *unused)
{
    if (check_ready(self)) return NULL;
    const vp_sim *s = self->s;
    int solved = s->grid_velocity && vp_grid_count(&s->grid) <= s->grid_allocated;
    return PyFloat_FromDouble(solved ? s->grid.h : 0.0);
}

static PyObject *Sim_diagnostics_c(SimObject *self, PyObject *args)
{
    PyObject *oo = NULL;
    if (!PyArg_ParseTuple(args, "|O:_diagnostics", &oo)) return NULL;
    if (check_ready(self)) return NULL;
    double origin[3] = {0, 0, 0};
    if (oo && oo != Py_None && parse_vec3(oo, "origin", origin)) return NULL;
    vp_diagnostics d;
    vp_sim_diagnostics(self->s, origin, &d);
    return Py_BuildValue("{s:N,s:N,s:N,s:d,s:d,s:d,s:d,s:d}", "circulation", vec3(d.circulation), "linear_impulse",
                         vec3(d.linear_impulse), "angular_impulse", vec3(d.angular_impulse), "enstrophy", d.enstrophy,
                         "heat", d.heat, "fluid_heat", d.fluid_heat, "mass_deviation", d.mass_deviation,
                         "kinetic_energy", d.kinetic_energy);
}

static PyObject *Sim_view(SimObject *self, PyObject *args)
{
    const char *kind, *field;
    if (!PyArg_ParseTuple(args, "ss:_view", &kind, &field)) return NULL;
    if (check_ready(self)) return NULL;
    vp_sim *s = self->s;
    if (!strcmp(kind, "vortons")) {
        vp_vortons *v = &s->vortons;
#define F(name, w) if (!strcmp(field, #name)) return make_view(v->name, v->n, w);
        F(position, 3) F(vorticity, 3) F(radius, 1) F(density, 1) F(age, 1) F(velocity, 3)
#undef F
    } else if (!strcmp(kind, "tracers")) {
        vp_tracers *t = &s->tracers;
#define F(name, w) if (!strcmp(field, #name)) return make_view(t->name, t->n, w);
        F(position, 3) F(velocity, 3) F(density, 1) F(age, 1)
#undef F
    }
    return PyErr_Format(PyExc_KeyError, "no particle field %s.%s", kind, field);
}

static PyObject *Sim_count(SimObject *self, PyObject *arg)
{
    if (!self->s) return raise_status(VP_ERR_STATE, "Sim");
    const char *kind = PyUnicode_AsUTF8(arg);
    if (!kind) return NULL;
    if (!strcmp(kind, "vortons")) return PyLong_FromSize_t(self->s->vortons.n);
    if (!strcmp(kind, "tracers")) return PyLong_FromSize_t(self->s->tracers.n);
    return PyErr_Format(PyExc_KeyError, "no particle kind %s", kind);
}

/* Remove particles where keep is False (a boolean mask of the current length). */
static PyObject *Sim_keep(SimObject *self, PyObject *args)
{
    const char *kind;
    PyObject *mo;
    if (!PyArg_ParseTuple(args, "sO:_keep", &kind, &mo)) return NULL;
    if (check_ready(self)) return NULL;
    int vort = !strcmp(kind, "vortons");
    size_t n = vort ? self->s->vortons.n : self->s->tracers.n;
    PyArrayObject *m = (PyArrayObject *)PyArray_FromAny(mo, PyArray_DescrFromType(NPY_BOOL), 1, 1,
                                                       NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
    if (!m) return NULL;
    if ((size_t)PyArray_DIM(m, 0) != n) {
        Py_DECREF(m);
        return PyErr_Format(PyExc_ValueError, "keep must have shape (%zu,)", n);
    }
    int st = vort ? vp_sim_compact_vortons(self->s, PyArray_DATA(m)) : vp_sim_compact_tracers(self->s, PyArray_DATA(m));
    Py_DECREF(m);
    if (st) return raise_status(st, "remove");
    Py_RETURN_NONE;
}

static PyObject *Sim_get_time(SimObject *self, void *c) { return self->s ? PyFloat_FromDouble(self->s->time) : raise_status(VP_ERR_STATE, "Sim"); }
static int Sim_set_time(SimObject *self, PyObject *v, void *c)
{
    double t;
    if (!v || check_ready(self) || get_double(v, "time", &t) || check_param("time", t, -INFINITY, 0, INFINITY)) return -1;
    self->s->time = t;
    return 0;
}
static PyObject *Sim_get_max_rate(SimObject *self, void *c) { return self->s ? PyFloat_FromDouble(self->s->max_rate) : raise_status(VP_ERR_STATE, "Sim"); }
static int Sim_set_max_rate(SimObject *self, PyObject *v, void *c)
{
    double t;
    if (!v || check_ready(self) || get_double(v, "max_rate", &t) || check_param("max_rate", t, 0, 0, INFINITY)) return -1;
    self->s->max_rate = t;
    return 0;
}
static PyObject *Sim_get_substeps(SimObject *self, void *c) { return self->s ? PyLong_FromLong(self->s->substeps) : raise_status(VP_ERR_STATE, "Sim"); }
static PyObject *Sim_get_diffusion_substeps(SimObject *self, void *c) { return self->s ? PyLong_FromLong(self->s->pse_substeps) : raise_status(VP_ERR_STATE, "Sim"); }
static PyObject *Sim_get_frame(SimObject *self, void *c) { return self->s ? PyLong_FromLongLong(self->s->frame) : raise_status(VP_ERR_STATE, "Sim"); }
static int Sim_set_frame(SimObject *self, PyObject *v, void *c)
{
    if (!v || check_ready(self)) return -1;
    long long f = PyLong_AsLongLong(v);
    if (f == -1 && PyErr_Occurred()) return -1;
    if (f < 0) { PyErr_SetString(PyExc_ValueError, "frame must be >= 0"); return -1; }
    self->s->frame = f;
    return 0;
}
static PyObject *Sim_get_timings(SimObject *self, void *c)
{
    if (!self->s) return raise_status(VP_ERR_STATE, "Sim");
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    double total = 0;
    for (int p = 0; p < VP_PHASE_COUNT; p++) {
        PyObject *v = PyFloat_FromDouble(self->s->timings[p]);
        total += self->s->timings[p];
        if (!v || PyDict_SetItemString(d, vp_phase_names[p], v) < 0) { Py_XDECREF(v); Py_DECREF(d); return NULL; }
        Py_DECREF(v);
    }
    PyObject *v = PyFloat_FromDouble(total);
    if (!v || PyDict_SetItemString(d, "total", v) < 0) { Py_XDECREF(v); Py_DECREF(d); return NULL; }
    Py_DECREF(v);
    return d;
}
static PyObject *Sim_get_interactions(SimObject *self, void *c) { return self->s ? PyLong_FromUnsignedLongLong(self->s->interactions) : raise_status(VP_ERR_STATE, "Sim"); }
static PyObject *Sim_get_bodies(SimObject *self, void *c) { return PyList_GetSlice(self->bodies, 0, PY_SSIZE_T_MAX); }
static PyObject *Sim_get_rng(SimObject *self, void *c)
{
    if (!self->s) return raise_status(VP_ERR_STATE, "Sim");
    uint64_t *r = self->s->rng;
    return Py_BuildValue("(KKKK)", (unsigned long long)r[0], (unsigned long long)r[1], (unsigned long long)r[2], (unsigned long long)r[3]);
}
static int Sim_set_rng(SimObject *self, PyObject *v, void *c)
{
    unsigned long long r[4];
    if (!v || check_ready(self)) return -1;
    if (!PyArg_ParseTuple(v, "KKKK", &r[0], &r[1], &r[2], &r[3])) return -1;
    for (int i = 0; i < 4; i++) self->s->rng[i] = r[i];
    return 0;
}

static PyMethodDef Sim_methods[] = {
    {"add_vortons", (PyCFunction)(void (*)(void))Sim_add_vortons, METH_VARARGS | METH_KEYWORDS,
     "add_vortons(position, vorticity, radius, density=0.0)\n--\n\nAdd vortons: position and vorticity (N, 3), "
     "radius and density deviation scalars or (N,). Vorticity is w, not angular velocity (w/2). The density is "
     "the deviation from the ambient fluid at each vorton's place (0: ambient fluid); with a stratification the "
     "vorton keeps its parcel's density, and vortons.density reads it as the parcel's density less "
     "ambient_density."},
    {"add_tracers", (PyCFunction)(void (*)(void))Sim_add_tracers, METH_VARARGS | METH_KEYWORDS,
     "add_tracers(position, density=0.0)\n--\n\nAdd passive tracers at (N, 3) positions; density as for "
     "add_vortons (each step resamples it from the fluid)."},
    {"add_body", (PyCFunction)Sim_add_body, METH_O, "add_body(body)\n--\n\nAdd a RigidBody; returns it, now live."},
    {"add_emitter", (PyCFunction)(void (*)(void))Sim_add_emitter, METH_VARARGS | METH_KEYWORDS,
     "add_emitter(center, half_size, vorton_rate=0, tracer_rate=0, vorton_radius=0.05, vorticity=0, density=0)\n--\n\n"
     "Add a source of vortons and tracers (per unit time) in a box."},
    {"_step", (PyCFunction)Sim_step_n, METH_VARARGS, "_step(n=1): n steps in C, GIL released."},
    {"velocity_at", (PyCFunction)Sim_velocity_at, METH_O,
     "velocity_at(points)\n--\n\nFluid velocity (K, 3) at (K, 3) points, summed from the vortons by the "
     "sim's solver (the tree for 'tree' and 'poisson'), not interpolated from the grid; finite at any "
     "finite point (beyond 1e4 times the vortons' cloud size, the tree's root expansion in float64)."},
    {"ambient_density_at", (PyCFunction)Sim_ambient_density_at, METH_O,
     "ambient_density_at(points)\n--\n\nDensity (K,) of the ambient fluid at (K, 3) points: the stratification's "
     "profile at their height along -gravity, or ambient_density without one."},
    {"update_velocity_grid", (PyCFunction)Sim_update_velocity_grid, METH_NOARGS,
     "update_velocity_grid()\n--\n\nRecompute the domain grid and the velocity on it from the current vortons."},
    {"remesh", (PyCFunction)Sim_remesh, METH_NOARGS,
     "remesh()\n--\n\nRedistribute the vortons onto a regular lattice now (M4' kernel; see the "
     "remesh_interval parameter, which does it every few frames).  Conserves circulation, linear and "
     "angular impulse, density mass and heat to rounding (the nodes weaker than remesh_threshold are "
     "merged into the others).  Views taken before are detached."},
    {"collide", (PyCFunction)Sim_collide, METH_NOARGS,
     "collide()\n--\n\nApply the fluid-body boundary conditions now (ejection, vorticity assignment, momentum and "
     "heat hand-over)."},
    {"grid", (PyCFunction)Sim_grid, METH_NOARGS, "grid()\n--\n\nThe last step's grid: origin, spacing, shape (z, y, x), velocity and density copies."},
    {"_grid_spacing", (PyCFunction)Sim_grid_spacing, METH_NOARGS, "_grid_spacing(): the last solved grid's spacing, 0 before any"},
    {"_diagnostics", (PyCFunction)Sim_diagnostics_c, METH_VARARGS, "_diagnostics(origin=None)"},
    {"_view", (PyCFunction)Sim_view, METH_VARARGS, "_view(kind, field): a live view"},
    {"_count", (PyCFunction)Sim_count, METH_O, "_count(kind)"},
    {"_keep", (PyCFunction)Sim_keep, METH_VARARGS, "_keep(kind, mask): remove particles where mask is False"},
    {NULL}};

/* The attributes that are not parameters; PyInit__core puts one per parameter before them. */
static PyGetSetDef Sim_state_getset[] = {
    {"time", (getter)Sim_get_time, (setter)Sim_set_time, "simulated time", NULL},
    {"frame", (getter)Sim_get_frame, (setter)Sim_set_frame, "steps taken", NULL},
    {"max_rate", (getter)Sim_get_max_rate, (setter)Sim_set_max_rate,
     "largest |grad u| on the grid at the last velocity solve (1/time; with integrator rk2, the larger of "
     "the step's two solves'); decides the next step's substeps", NULL},
    {"substeps", (getter)Sim_get_substeps, NULL,
     "substeps the last step took (more than 1 when max_rate * dt exceeded max_rate_dt)", NULL},
    {"diffusion_substeps", (getter)Sim_get_diffusion_substeps, NULL,
     "PSE exchanges the last step's diffusion took (more than 1 when 4 max(nu, kappa) dt / spacing^2 > 1: the "
     "explicit limit)", NULL},
    {"timings", (getter)Sim_get_timings, NULL, "milliseconds per phase of the last step", NULL},
    {"interactions", (getter)Sim_get_interactions, NULL,
     "velocity-solver interactions (pairs + supervortons) of the last solve", NULL},
    {"bodies", (getter)Sim_get_bodies, NULL, "list of RigidBody", NULL},
    {"emitters", (getter)Sim_emitters, NULL, "list of emitter settings (dicts)", NULL},
    {"_rng_state", (getter)Sim_get_rng, (setter)Sim_set_rng, "emitter RNG state", NULL},
    {NULL}};

static PyGetSetDef Sim_getset[VP_PARAM_COUNT + sizeof Sim_state_getset / sizeof Sim_state_getset[0]];
static char param_docs[VP_PARAM_COUNT][400]; /* "doc [unit]" of each parameter's attribute */

static PyTypeObject SimType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vortonpy._core.Sim",
    .tp_basicsize = sizeof(SimObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C core of a vorton fluid simulation (see vortonpy.Sim).",
    .tp_new = Sim_new,
    .tp_init = (initproc)Sim_init,
    .tp_dealloc = (destructor)Sim_dealloc,
    .tp_traverse = (traverseproc)Sim_traverse,
    .tp_clear = (inquiry)Sim_clear,
    .tp_methods = Sim_methods,
    .tp_getset = Sim_getset,
    .tp_setattro = Sim_setattro,
};

/* ------------------------------------------------------------------ RigidBody */
static void Body_dealloc(BodyObject *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->sim);
    Py_TYPE(self)->tp_free((PyObject *)self);
}
static int Body_traverse(BodyObject *self, visitproc visit, void *arg) { Py_VISIT(self->sim); return 0; }
static int Body_clear(BodyObject *self) { Py_CLEAR(self->sim); return 0; }

static int body_busy(BodyObject *self)
{
    if (self->sim && self->sim->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the body's Sim is busy in another thread");
        return -1;
    }
    return 0;
}

static int Body_init(BodyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"position", "velocity", "angular_velocity", "radius", "mass", "temperature",
                          "thermal_conductivity", "heat_capacity", "fixed", "gravity", "orientation", NULL};
    PyObject *po = NULL, *vo = NULL, *wo = NULL, *oo = NULL;
    double radius = 1.0, mass = 1.0, T = 1.0, k = 0.2, C = 1e5;
    int fixed = 0, grav = 1;
    if (self->sim) { PyErr_SetString(PyExc_RuntimeError, "body is already part of a Sim"); return -1; }
    if (kw) { /* an unknown keyword names the nearest known one */
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &key, &val)) {
            const char *k = PyUnicode_AsUTF8(key);
            if (!k) return -1;
            int known = 0;
            for (char **w = kwl; *w && !known; w++) known = !strcmp(*w, k);
            if (!known) {
                PyObject *names = PyList_New(0);
                for (char **w = kwl; names && *w; w++) {
                    PyObject *u = PyUnicode_FromString(*w);
                    if (!u || PyList_Append(names, u) < 0) Py_CLEAR(names);
                    Py_XDECREF(u);
                }
                unknown_keyword("RigidBody", key, names);
                Py_XDECREF(names);
                return -1;
            }
        }
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOdddddppO:RigidBody", kwl, &po, &vo, &wo, &radius, &mass, &T, &k,
                                     &C, &fixed, &grav, &oo))
        return -1;
    vp_body b;
    vp_body_init(&b);
    if (parse_vec3(po, "position", b.position) || parse_vec3(vo, "velocity", b.velocity) ||
        parse_vec3(wo, "angular_velocity", b.angular_velocity))
        return -1;
    if (check_param("radius", radius, 0, 1, INFINITY) || check_param("mass", mass, 0, 1, INFINITY) ||
        check_param("temperature", T, 0, 1, INFINITY) || check_param("thermal_conductivity", k, 0, 0, INFINITY) ||
        check_param("heat_capacity", C, 0, 1, INFINITY))
        return -1;
    if (oo) {
        npy_intp one = 1;
        PyArrayObject *q = as_rows(oo, "orientation", 4, &one);
        if (!q) return -1;
        double *d = PyArray_DATA(q), nrm = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + d[3] * d[3]);
        if (!(nrm > 0)) { Py_DECREF(q); PyErr_SetString(PyExc_ValueError, "orientation must be a non-zero quaternion"); return -1; }
        for (int i = 0; i < 4; i++) b.orientation[i] = d[i] / nrm;
        Py_DECREF(q);
    }
    b.radius = radius; b.mass = mass; b.temperature = T; b.thermal_conductivity = k; b.heat_capacity = C;
    b.fixed = fixed || isinf(mass); b.gravity = grav;
    /* momenta from the given velocities */
    int f = b.fixed; b.fixed = 1; vp_body_sync(&b); b.fixed = f;
    self->local = b;
    return 0;
}

enum { BV_POSITION, BV_VELOCITY, BV_ANGVEL, BV_MOMENTUM, BV_ANGMOM, BV_FORCE, BV_TORQUE, BV_FLUID_IMPULSE, BV_FLUID_ANGIMP };

static PyObject *Body_getvec(BodyObject *self, void *closure)
{
    vp_body *b = body_ptr(self);
    switch ((int)(size_t)closure) {
    case BV_POSITION: return vec3(b->position);
    case BV_VELOCITY: return vec3(b->velocity);
    case BV_ANGVEL: return vec3(b->angular_velocity);
    case BV_MOMENTUM: return vec3(b->momentum);
    case BV_ANGMOM: return vec3(b->angular_momentum);
    case BV_FORCE: return vec3(b->force);
    case BV_TORQUE: return vec3(b->torque);
    case BV_FLUID_IMPULSE: return vec3(b->fluid_impulse);
    default: return vec3(b->fluid_angular_impulse);
    }
}

static const char *const vec_names[] = {"position", "velocity", "angular_velocity", "momentum", "angular_momentum",
                                        "force", "torque", "fluid_impulse", "fluid_angular_impulse"};

static int Body_setvec(BodyObject *self, PyObject *val, void *closure)
{
    int which = (int)(size_t)closure;
    if (!val) { PyErr_SetString(PyExc_AttributeError, "cannot delete"); return -1; }
    if (body_busy(self)) return -1;
    double v[3];
    if (parse_vec3(val, vec_names[which], v)) return -1;
    vp_body *b = body_ptr(self);
    double inertia = vp_body_inertia(b);
    switch (which) {
    case BV_POSITION: memcpy(b->position, v, sizeof v); break;
    case BV_VELOCITY: for (int a = 0; a < 3; a++) { b->velocity[a] = v[a]; b->momentum[a] = b->mass * v[a]; } break;
    case BV_ANGVEL: for (int a = 0; a < 3; a++) { b->angular_velocity[a] = v[a]; b->angular_momentum[a] = inertia * v[a]; } break;
    case BV_MOMENTUM: for (int a = 0; a < 3; a++) { b->momentum[a] = v[a]; b->velocity[a] = v[a] / b->mass; } break;
    case BV_ANGMOM: for (int a = 0; a < 3; a++) { b->angular_momentum[a] = v[a]; b->angular_velocity[a] = v[a] / inertia; } break;
    default: PyErr_Format(PyExc_AttributeError, "%s is read-only", vec_names[which]); return -1;
    }
    return 0;
}

enum { BS_RADIUS, BS_MASS, BS_TEMPERATURE, BS_CONDUCTIVITY, BS_CAPACITY, BS_HEAT_RECEIVED, BS_INERTIA };
static const char *const scal_names[] = {"radius", "mass", "temperature", "thermal_conductivity", "heat_capacity",
                                         "heat_received", "inertia"};

static PyObject *Body_getscal(BodyObject *self, void *closure)
{
    vp_body *b = body_ptr(self);
    switch ((int)(size_t)closure) {
    case BS_RADIUS: return PyFloat_FromDouble(b->radius);
    case BS_MASS: return PyFloat_FromDouble(b->mass);
    case BS_TEMPERATURE: return PyFloat_FromDouble(b->temperature);
    case BS_CONDUCTIVITY: return PyFloat_FromDouble(b->thermal_conductivity);
    case BS_CAPACITY: return PyFloat_FromDouble(b->heat_capacity);
    case BS_HEAT_RECEIVED: return PyFloat_FromDouble(b->heat_received);
    default: return PyFloat_FromDouble(vp_body_inertia(b));
    }
}

static int Body_setscal(BodyObject *self, PyObject *val, void *closure)
{
    int which = (int)(size_t)closure;
    double v;
    if (!val) { PyErr_SetString(PyExc_AttributeError, "cannot delete"); return -1; }
    if (body_busy(self)) return -1;
    if (which >= BS_HEAT_RECEIVED) { PyErr_Format(PyExc_AttributeError, "%s is read-only", scal_names[which]); return -1; }
    if (get_double(val, scal_names[which], &v)) return -1;
    int bad = which == BS_CONDUCTIVITY ? check_param(scal_names[which], v, 0, 0, INFINITY)
                                       : check_param(scal_names[which], v, 0, 1, INFINITY);
    if (bad) return -1;
    if (which == BS_TEMPERATURE && !isfinite(v)) { PyErr_SetString(PyExc_ValueError, "temperature must be finite"); return -1; }
    vp_body *b = body_ptr(self);
    switch (which) {
    case BS_RADIUS: b->radius = v; break;
    case BS_MASS: if (isinf(v)) b->fixed = 1; b->mass = v; break;
    case BS_TEMPERATURE: b->temperature = v; break;
    case BS_CONDUCTIVITY: b->thermal_conductivity = v; break;
    case BS_CAPACITY: b->heat_capacity = v; break;
    }
    if (which == BS_RADIUS || which == BS_MASS) { /* keep velocities, recompute momenta */
        int f = b->fixed; b->fixed = 1; vp_body_sync(b); b->fixed = f;
    }
    return 0;
}

static PyObject *Body_getflag(BodyObject *self, void *closure)
{
    vp_body *b = body_ptr(self);
    return PyBool_FromLong(closure ? b->gravity : b->fixed);
}

static int Body_setflag(BodyObject *self, PyObject *val, void *closure)
{
    if (!val) { PyErr_SetString(PyExc_AttributeError, "cannot delete"); return -1; }
    if (body_busy(self)) return -1;
    int t = PyObject_IsTrue(val);
    if (t < 0) return -1;
    vp_body *b = body_ptr(self);
    if (closure) b->gravity = t;
    else {
        if (!t && isinf(b->mass)) { PyErr_SetString(PyExc_ValueError, "a body of infinite mass must stay fixed"); return -1; }
        if (b->fixed && !t) { int f = 1; b->fixed = 1; vp_body_sync(b); b->fixed = f; }
        b->fixed = t;
    }
    return 0;
}

static PyObject *Body_get_orientation(BodyObject *self, void *c)
{
    npy_intp dims[1] = {4};
    PyObject *a = PyArray_SimpleNew(1, dims, NPY_DOUBLE);
    if (a) memcpy(PyArray_DATA((PyArrayObject *)a), body_ptr(self)->orientation, 4 * sizeof(double));
    return a;
}

static int Body_set_orientation(BodyObject *self, PyObject *val, void *c)
{
    if (!val) { PyErr_SetString(PyExc_AttributeError, "cannot delete"); return -1; }
    if (body_busy(self)) return -1;
    npy_intp one = 1;
    PyArrayObject *q = as_rows(val, "orientation", 4, &one);
    if (!q) return -1;
    double *d = PyArray_DATA(q), nrm = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + d[3] * d[3]);
    if (!(nrm > 0)) { Py_DECREF(q); PyErr_SetString(PyExc_ValueError, "orientation must be a non-zero quaternion"); return -1; }
    for (int i = 0; i < 4; i++) body_ptr(self)->orientation[i] = d[i] / nrm;
    Py_DECREF(q);
    return 0;
}

static int Body_setattro(PyObject *self, PyObject *name, PyObject *val)
{
    if (PyObject_GenericSetAttr(self, name, val) == 0) return 0;
    return explain_setattr_failure(self, name);
}

static PyObject *Body_get_sim(BodyObject *self, void *c) { return Py_NewRef(self->sim ? (PyObject *)self->sim : Py_None); }

/* Restore the accumulated hand-over totals (used by Sim.load). */
static PyObject *Body_set_totals(BodyObject *self, PyObject *args)
{
    PyObject *io, *ao;
    double heat;
    if (!PyArg_ParseTuple(args, "OOd:_set_totals", &io, &ao, &heat)) return NULL;
    if (body_busy(self)) return NULL;
    double i3[3], a3[3];
    if (parse_vec3(io, "fluid_impulse", i3) || parse_vec3(ao, "fluid_angular_impulse", a3)) return NULL;
    vp_body *b = body_ptr(self);
    memcpy(b->fluid_impulse, i3, sizeof i3);
    memcpy(b->fluid_angular_impulse, a3, sizeof a3);
    b->heat_received = heat;
    Py_RETURN_NONE;
}

static PyObject *Body_apply_impulse(BodyObject *self, PyObject *args)
{
    PyObject *jo, *to = NULL;
    if (!PyArg_ParseTuple(args, "O|O:apply_impulse", &jo, &to)) return NULL;
    if (body_busy(self)) return NULL;
    double j[3], t[3] = {0, 0, 0};
    if (parse_vec3(jo, "impulse", j) || parse_vec3(to, "angular_impulse", t)) return NULL;
    vp_body *b = body_ptr(self);
    if (b->fixed) Py_RETURN_NONE;
    for (int a = 0; a < 3; a++) { b->momentum[a] += j[a]; b->angular_momentum[a] += t[a]; }
    vp_body_sync(b);
    Py_RETURN_NONE;
}

static PyMethodDef Body_methods[] = {
    {"apply_impulse", (PyCFunction)Body_apply_impulse, METH_VARARGS,
     "apply_impulse(impulse, angular_impulse=(0, 0, 0))\n--\n\nChange momentum and angular momentum at once "
     "(ignored by fixed bodies)."},
    {"_set_totals", (PyCFunction)Body_set_totals, METH_VARARGS, "restore hand-over totals"},
    {NULL}};

#define VG(name, id, doc) {name, (getter)Body_getvec, (setter)Body_setvec, doc, (void *)(size_t)(id)}
#define SG(name, id, doc) {name, (getter)Body_getscal, (setter)Body_setscal, doc, (void *)(size_t)(id)}
static PyGetSetDef Body_getset[] = {
    VG("position", BV_POSITION, "centre (3,) [copy; assign to move]"),
    VG("velocity", BV_VELOCITY, "linear velocity (3,)"),
    VG("angular_velocity", BV_ANGVEL, "angular velocity (3,) [rad/time]"),
    VG("momentum", BV_MOMENTUM, "linear momentum M v (3,)"),
    VG("angular_momentum", BV_ANGMOM, "angular momentum I W about the centre (3,)"),
    VG("force", BV_FORCE, "force accumulated for the next integration (read-only)"),
    VG("torque", BV_TORQUE, "torque accumulated for the next integration (read-only)"),
    VG("fluid_impulse", BV_FLUID_IMPULSE, "total linear impulse the fluid has handed to the body (read-only)"),
    VG("fluid_angular_impulse", BV_FLUID_ANGIMP, "total angular impulse the fluid has handed to the body (read-only)"),
    SG("radius", BS_RADIUS, "sphere radius R"),
    SG("mass", BS_MASS, "mass M (inf: fixed)"),
    SG("temperature", BS_TEMPERATURE, "temperature Tb (ambient fluid is 1)"),
    SG("thermal_conductivity", BS_CONDUCTIVITY, "conductance kb to each vorton in contact"),
    SG("heat_capacity", BS_CAPACITY, "heat capacity Cb (inf: a thermostat)"),
    SG("heat_received", BS_HEAT_RECEIVED, "total heat received from the fluid (read-only)"),
    SG("inertia", BS_INERTIA, "moment of inertia 2/5 M R^2 (read-only)"),
    {"fixed", (getter)Body_getflag, (setter)Body_setflag, "kinematic: moves with its set velocities, never pushed", (void *)0},
    {"gravity", (getter)Body_getflag, (setter)Body_setflag, "gravity and buoyancy act on this body", (void *)1},
    {"orientation", (getter)Body_get_orientation, (setter)Body_set_orientation, "unit quaternion (w, x, y, z)", NULL},
    {"sim", (getter)Body_get_sim, NULL, "the Sim this body belongs to, or None", NULL},
    {NULL}};

static PyTypeObject BodyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vortonpy._core.RigidBody",
    .tp_basicsize = sizeof(BodyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RigidBody(position=None, velocity=None, angular_velocity=None, radius=1.0, mass=1.0, temperature=1.0, "
              "thermal_conductivity=0.2, heat_capacity=100000.0, fixed=False, gravity=True, orientation=None)\n--\n\n"
              "A rigid sphere that stirs the fluid and is pushed, slowed, spun and heated by it.\n\n"
              "position, velocity, angular_velocity: (3,) [length, length/time, rad/time], None: zero;\n"
              "radius [length]; mass (inf: fixed); temperature (the ambient fluid is 1); thermal_conductivity:\n"
              "heat per time per unit temperature difference to each vorton in contact; heat_capacity: heat per\n"
              "unit temperature (inf: a thermostat); fixed: moves with its set velocities, never pushed;\n"
              "gravity: gravity and buoyancy act on it; orientation: unit quaternion (w, x, y, z).\n"
              "Vector attributes return copies; assign to change them.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Body_init,
    .tp_dealloc = (destructor)Body_dealloc,
    .tp_traverse = (traverseproc)Body_traverse,
    .tp_clear = (inquiry)Body_clear,
    .tp_methods = Body_methods,
    .tp_getset = Body_getset,
    .tp_setattro = Body_setattro,
};

/* ------------------------------------------------------------------ module */
static PyObject *mod_fft_isa(PyObject *m, PyObject *u)
{
    (void)m; (void)u;
    return PyUnicode_FromString(vp_fft_isa());
}

static PyObject *mod_cpu_level(PyObject *m, PyObject *u)
{
    (void)m; (void)u;
    return PyLong_FromLong(vp_cpu_level());
}

static PyObject *mod_openmp(PyObject *m, PyObject *u)
{
#ifdef _OPENMP
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *mod_kernel_velocity(PyObject *m, PyObject *args)
{
    /* the regularised kernel itself, for tests: velocity at points from given vortons */
    PyObject *xo, *ao, *ro, *po;
    if (!PyArg_ParseTuple(args, "OOOO:direct_velocity", &xo, &ao, &ro, &po)) return NULL;
    npy_intp n = -1, m2 = -1;
    PyArrayObject *x = NULL, *a = NULL, *r = NULL, *p = NULL, *out = NULL;
    if (!(x = as_rows(xo, "position", 3, &n)) || !(a = as_rows(ao, "strength", 3, &n)) ||
        !(r = as_per_particle(ro, "radius", n)) || !(p = as_rows(po, "points", 3, &m2)))
        goto done;
    npy_intp dims[2] = {m2, 3};
    if (!(out = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_DOUBLE))) goto done;
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = vp_direct_velocity((size_t)n, PyArray_DATA(x), PyArray_DATA(a), PyArray_DATA(r), (size_t)m2, PyArray_DATA(p),
                            PyArray_DATA(out), 1);
    Py_END_ALLOW_THREADS
    if (st) { Py_CLEAR(out); PyErr_NoMemory(); }
done:
    Py_XDECREF(x); Py_XDECREF(a); Py_XDECREF(r); Py_XDECREF(p);
    return (PyObject *)out;
}

static PyMethodDef mod_methods[] = {
    {"has_openmp", mod_openmp, METH_NOARGS, "True if the core was built with OpenMP."},
    {"_fft_isa", mod_fft_isa, METH_NOARGS, "_fft_isa(): 'avx2' or 'baseline', the FFT code the poisson solver runs"},
    {"_cpu_level", mod_cpu_level, METH_NOARGS, "_cpu_level(): the hand-written SIMD paths this process runs: 0 portable (or VORTONPY_PORTABLE=1), 1 AVX2, 2 AVX-512"},
    {"direct_velocity", mod_kernel_velocity, METH_VARARGS,
     "direct_velocity(position, strength, radius, points)\n--\n\nVelocity at points induced by vortons of the given "
     "strengths (w V), by direct summation of the regularised Biot-Savart kernel."},
    {NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "vortonpy._core", "The C core of vortonpy.", -1, mod_methods};

PyMODINIT_FUNC PyInit__core(void)
{
    import_array();
    size_t k = 0;
    for (int i = 0; i < VP_PARAM_COUNT; i++, k++) {
        const vp_param_info *pi = &vp_param_table[i];
        PyOS_snprintf(param_docs[i], sizeof param_docs[i], "%s%s%s%s", pi->doc, *pi->unit ? " [" : "", pi->unit,
                      *pi->unit ? "]" : "");
        Sim_getset[k] = (PyGetSetDef){(char *)pi->name, (getter)Sim_getparam, (setter)Sim_setparam, param_docs[i],
                                      (void *)(size_t)i};
    }
    for (size_t j = 0; j < sizeof Sim_state_getset / sizeof Sim_state_getset[0]; j++) Sim_getset[k++] = Sim_state_getset[j];
    if (PyType_Ready(&SimType) < 0 || PyType_Ready(&BodyType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Sim", (PyObject *)&SimType) < 0 ||
        PyModule_AddObjectRef(m, "RigidBody", (PyObject *)&BodyType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "DEFAULT_SEED", DEFAULT_SEED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *meta = parameters_metadata();
    if (!meta || PyModule_AddObject(m, "PARAMETERS", meta) < 0) { /* steals meta on success */
        Py_XDECREF(meta);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
