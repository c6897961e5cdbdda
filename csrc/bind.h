/* bind.h: what the binding files (module.c, bind_*.c) share: the Python, NumPy and core
 * headers, the Sim and RigidBody object layouts, and the helpers more than one file uses.
 * Only these files include it; the C core knows nothing of Python. */
#ifndef VORTONPY_BIND_H
#define VORTONPY_BIND_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL vp_py_ARRAY_API /* one NumPy API table for all the binding files */
#ifndef VP_PY_IMPORT_ARRAY                     /* defined by module.c, which fills it */
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <math.h>
#include <string.h>
#include "vortonpy.h"

#if PY_VERSION_HEX < 0x030A0000 /* Python 3.9 (pyproject's floor): a 3.10 addition */
static inline PyObject *Py_NewRef(PyObject *o) { Py_INCREF(o); return o; }
#endif

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

extern PyTypeObject vp_py_BodyType; /* bind_body.c */

/* bind_convert.c: exceptions, argument conversion and checks, views (see there). */
int vp_py_check_ready(SimObject *self); /* RuntimeError unless initialised and not in use */
PyObject *vp_py_raise_status(int st, const char *what);
PyObject *vp_py_did_you_mean(PyObject *word, PyObject *candidates);
int vp_py_unknown_keyword(const char *func, PyObject *key, PyObject *names);
int vp_py_explain_setattr_failure(PyObject *self, PyObject *name);
PyArrayObject *vp_py_as_rows(PyObject *obj, const char *name, int width, npy_intp *n_io);
PyArrayObject *vp_py_as_per_particle(PyObject *obj, const char *name, npy_intp n);
int vp_py_parse_vec3(PyObject *obj, const char *name, double out[3]);
PyObject *vp_py_vec3(const double *v);
PyObject *vp_py_make_view(vp_buffer *buf, size_t n, int width);
int vp_py_check_param(const char *name, double v, double lo, int lo_open, double hi);
int vp_py_get_double(PyObject *obj, const char *name, double *out);

/* bind_params.c: the parameters through the core's table (see there). */
int vp_py_default_threads(void);
const vp_param_info *vp_py_find_param(const char *name);
int vp_py_set_param(vp_params *p, const vp_param_info *pi, PyObject *val);
int vp_py_is_retired_param(const char *name);
int vp_py_warn_retired_param(const char *name);
PyObject *vp_py_parameters_metadata(void);
void vp_py_param_getset(PyGetSetDef *out);

#endif
