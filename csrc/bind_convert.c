/* bind_convert.c: between Python objects and the core's C values, for the binding files:
 * exceptions from C statuses, argument conversion and checks (a clear TypeError/ValueError
 * naming the argument), and the NumPy views of the particle arrays.  Every view's base is a
 * capsule holding a reference to the C block it shows, so a view stays valid after its Sim
 * is deleted or its arrays are regrown or compacted. */
#include "bind.h"

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

PyObject *vp_py_raise_status(int st, const char *what) { return raise_status_detail(st, what, NULL); }

/* "; did you mean 'x'?" for the name among candidates (a list of str) closest to word
 * (difflib), or "" when none is close; a new reference, NULL with an exception set. */
PyObject *vp_py_did_you_mean(PyObject *word, PyObject *candidates)
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
int vp_py_unknown_keyword(const char *func, PyObject *key, PyObject *names)
{
    PyObject *hint = names ? vp_py_did_you_mean(key, names) : NULL;
    if (!hint) return -1;
    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R%U", func, key, hint);
    Py_DECREF(hint);
    return -1;
}

/* After a failed setattr on an instance of a type with fixed attributes: an AttributeError
 * for a name the type does not have names the nearest one it has.  Returns -1. */
int vp_py_explain_setattr_failure(PyObject *self, PyObject *name)
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
    PyObject *hint = names ? vp_py_did_you_mean(name, names) : NULL;
    Py_XDECREF(names);
    if (!hint) return -1;
    const char *dot = strrchr(Py_TYPE(self)->tp_name, '.');
    PyErr_Format(PyExc_AttributeError, "%s has no attribute %R%U", dot ? dot + 1 : Py_TYPE(self)->tp_name, name,
                 hint);
    Py_DECREF(hint);
    return -1;
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
PyArrayObject *vp_py_as_rows(PyObject *obj, const char *name, int width, npy_intp *n_io)
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
PyArrayObject *vp_py_as_per_particle(PyObject *obj, const char *name, npy_intp n)
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
    if (!scalar) return vp_py_as_rows(obj, name, 0, &m);
    PyObject *wrapped = Py_BuildValue("(O)", obj);
    if (!wrapped) return NULL;
    m = 1;
    PyArrayObject *one = vp_py_as_rows(wrapped, name, 0, &m);
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
int vp_py_parse_vec3(PyObject *obj, const char *name, double out[3])
{
    npy_intp n = 1;
    if (obj == NULL || obj == Py_None) return 0;
    PyArrayObject *a = vp_py_as_rows(obj, name, 3, &n);
    if (!a) return -1;
    memcpy(out, PyArray_DATA(a), 3 * sizeof(double));
    Py_DECREF(a);
    return 0;
}

PyObject *vp_py_vec3(const double *v)
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
PyObject *vp_py_make_view(vp_buffer *buf, size_t n, int width)
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

/* ------------------------------------------------------------------ checks */
int vp_py_check_ready(SimObject *self)
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
int vp_py_check_param(const char *name, double v, double lo, int lo_open, double hi)
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

int vp_py_get_double(PyObject *obj, const char *name, double *out)
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
