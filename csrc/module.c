/* module.c: the CPython layer (vortonpy._core): the module, the Sim type and its step.
 * The binding files (module.c, bind_*.c) share bind.h; they alone include Python.h.
 *
 * Rules kept by the binding (api.md, style.md):
 * - every view's base is a capsule holding a reference to the C block it shows, so a view
 *   stays valid after its Sim is deleted or its arrays are regrown or compacted;
 * - inputs are validated and converted completely before anything in the Sim changes;
 * - the GIL is released around each step, and Ctrl-C is checked between steps;
 * - a Sim used by one thread refuses calls from another (RuntimeError), never races. */
#define VP_PY_IMPORT_ARRAY /* this file calls import_array() */
#include "bind.h"
#include "kernel.h"
#include "fft_lines.h"
#include "cpu.h"

#if PY_VERSION_HEX < 0x030A0000 /* Python 3.9 (pyproject's floor): a 3.10 addition (Py_NewRef: bind.h) */
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *value)
{
    Py_INCREF(value);
    if (PyModule_AddObject(m, name, value) < 0) { Py_DECREF(value); return -1; } /* steals only on success */
    return 0;
}
#endif

/* ------------------------------------------------------------------ Sim object */
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
    p.threads = vp_py_default_threads();
    unsigned long long seed = DEFAULT_SEED;
    if (kw) {
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &key, &val)) {
            const char *k = PyUnicode_AsUTF8(key);
            if (!k) return -1;
            const vp_param_info *pi = vp_py_find_param(k);
            if (pi) {
                if (vp_py_set_param(&p, pi, val)) return -1;
            } else if (!strcmp(k, "seed")) {
                if (!PyLong_Check(val) || PyBool_Check(val)) {
                    PyErr_Format(PyExc_TypeError, "seed must be an int, got %R", val);
                    return -1;
                }
                seed = PyLong_AsUnsignedLongLongMask(val);
                if (seed == (unsigned long long)-1 && PyErr_Occurred()) return -1;
            } else if (vp_py_is_retired_param(k)) {
                if (vp_py_warn_retired_param(k) < 0) return -1;
            } else {
                PyObject *names = sim_keywords();
                vp_py_unknown_keyword("Sim", key, names);
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

/* Attribute assignment: the retired parameters warn; a name Sim does not have names the
 * nearest one it has. */
static int Sim_setattro(PyObject *self, PyObject *name, PyObject *val)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (n && vp_py_is_retired_param(n) && !PyObject_HasAttr((PyObject *)Py_TYPE(self), name)) return vp_py_warn_retired_param(n);
    if (PyObject_GenericSetAttr(self, name, val) == 0) return 0;
    return vp_py_explain_setattr_failure(self, name);
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
    if (vp_py_check_ready(self)) return NULL;
    npy_intp n = -1;
    PyArrayObject *pa = NULL, *wa = NULL, *ra = NULL, *da = NULL;
    PyObject *res = NULL;
    if (!(pa = vp_py_as_rows(po, "position", 3, &n))) goto done;
    if (!(wa = vp_py_as_rows(wo, "vorticity", 3, &n))) goto done;
    if (!(ra = vp_py_as_per_particle(ro, "radius", n))) goto done;
    if (dob) { if (!(da = vp_py_as_per_particle(dob, "density", n))) goto done; }
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
    if (st) { vp_py_raise_status(st, "add_vortons"); goto done; }
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
    if (vp_py_check_ready(self)) return NULL;
    npy_intp n = -1;
    PyArrayObject *pa = NULL, *da = NULL;
    PyObject *res = NULL;
    if (!(pa = vp_py_as_rows(po, "position", 3, &n))) goto done;
    if (dob) { if (!(da = vp_py_as_per_particle(dob, "density", n))) goto done; }
    else { npy_intp d1[1] = {n}; if (!(da = (PyArrayObject *)PyArray_ZEROS(1, d1, NPY_DOUBLE, 0))) goto done; }
    if (self->s->params.stratification.n && to_parcel_density(&self->s->params, n, PyArray_DATA(pa), PyArray_DATA(da)))
        goto done;
    int st = vp_sim_add_tracers(self->s, (size_t)n, PyArray_DATA(pa), PyArray_DATA(da));
    if (st) { vp_py_raise_status(st, "add_tracers"); goto done; }
    res = Py_NewRef(Py_None);
done:
    Py_XDECREF(pa); Py_XDECREF(da);
    return res;
}

static PyObject *Sim_add_body(SimObject *self, PyObject *arg)
{
    if (vp_py_check_ready(self)) return NULL;
    if (!PyObject_TypeCheck(arg, &vp_py_BodyType)) {
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
        return vp_py_raise_status(st, "add_body");
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
    if (vp_py_check_ready(self)) return NULL;
    vp_emitter e;
    memset(&e, 0, sizeof e);
    if (vp_py_parse_vec3(co, "center", e.center) || vp_py_parse_vec3(ho, "half_size", e.half_size)) return NULL;
    for (int a = 0; a < 3; a++)
        if (e.half_size[a] < 0) { PyErr_SetString(PyExc_ValueError, "half_size must be >= 0"); return NULL; }
    if (vp_py_check_param("vorton_rate", vr, 0, 0, INFINITY) || vp_py_check_param("tracer_rate", tr, 0, 0, INFINITY) ||
        vp_py_check_param("vorton_radius", rad, 0, 1, INFINITY) || vp_py_check_param("vorticity", vort, 0, 0, INFINITY) ||
        vp_py_check_param("density", dens, -least_ambient_density(&self->s->params), 1, INFINITY))
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
    if (st) return vp_py_raise_status(st, "add_emitter");
    Py_RETURN_NONE;
}

static PyObject *Sim_emitters(SimObject *self, void *c)
{
    if (!self->s) return vp_py_raise_status(VP_ERR_STATE, "Sim");
    PyObject *l = PyList_New(0);
    if (!l) return NULL;
    for (size_t i = 0; i < self->s->n_emitters; i++) {
        vp_emitter *e = &self->s->emitters[i];
        PyObject *d = Py_BuildValue("{s:N,s:N,s:d,s:d,s:d,s:d,s:d,s:(dd)}", "center", vp_py_vec3(e->center), "half_size",
                                    vp_py_vec3(e->half_size), "vorton_rate", e->vorton_rate, "tracer_rate", e->tracer_rate,
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
    if (vp_py_check_ready(self)) return NULL;
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
        if (st) { self->busy = 0; return vp_py_raise_status(st, "step"); }
        if (PyErr_CheckSignals() < 0) { self->busy = 0; return NULL; }
    }
    self->busy = 0;
    Py_RETURN_NONE;
}

static PyObject *Sim_velocity_at(SimObject *self, PyObject *arg)
{
    if (vp_py_check_ready(self)) return NULL;
    npy_intp m = -1;
    PyArrayObject *pts = vp_py_as_rows(arg, "points", 3, &m);
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
    if (st) { Py_DECREF(out); return vp_py_raise_status(st, "velocity_at"); }
    return (PyObject *)out;
}

static PyObject *Sim_ambient_density_at(SimObject *self, PyObject *arg)
{
    if (vp_py_check_ready(self)) return NULL;
    npy_intp m = -1;
    PyArrayObject *pts = vp_py_as_rows(arg, "points", 3, &m);
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
    if (vp_py_check_ready(self)) return NULL;
    int st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = op(self->s);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st) return vp_py_raise_status(st, name);
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
    if (vp_py_check_ready(self)) return NULL;
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
    return Py_BuildValue("{s:N,s:d,s:(iii),s:N,s:N}", "origin", vp_py_vec3(g->origin), "spacing", g->h, "shape", g->n[2],
                         g->n[1], g->n[0], "velocity", vel, "density", den);
}

/* The last solved grid's spacing, or 0 before any solve: grid() without its copies. */
static PyObject *Sim_grid_spacing(SimObject *self, PyObject *unused)
{
    if (vp_py_check_ready(self)) return NULL;
    const vp_sim *s = self->s;
    int solved = s->grid_velocity && vp_grid_count(&s->grid) <= s->grid_allocated;
    return PyFloat_FromDouble(solved ? s->grid.h : 0.0);
}

static PyObject *Sim_diagnostics_c(SimObject *self, PyObject *args)
{
    PyObject *oo = NULL;
    if (!PyArg_ParseTuple(args, "|O:_diagnostics", &oo)) return NULL;
    if (vp_py_check_ready(self)) return NULL;
    double origin[3] = {0, 0, 0};
    if (oo && oo != Py_None && vp_py_parse_vec3(oo, "origin", origin)) return NULL;
    vp_diagnostics d;
    vp_sim_diagnostics(self->s, origin, &d);
    return Py_BuildValue("{s:N,s:N,s:N,s:d,s:d,s:d,s:d,s:d,s:N,s:N}", "circulation", vp_py_vec3(d.circulation),
                         "linear_impulse", vp_py_vec3(d.linear_impulse), "angular_impulse", vp_py_vec3(d.angular_impulse),
                         "enstrophy", d.enstrophy, "heat", d.heat, "fluid_heat", d.fluid_heat, "mass_deviation",
                         d.mass_deviation, "kinetic_energy", d.kinetic_energy, "_interior_momentum",
                         vp_py_vec3(d.interior_momentum), "_interior_angular_momentum", vp_py_vec3(d.interior_angular_momentum));
}

static PyObject *Sim_view(SimObject *self, PyObject *args)
{
    const char *kind, *field;
    if (!PyArg_ParseTuple(args, "ss:_view", &kind, &field)) return NULL;
    if (vp_py_check_ready(self)) return NULL;
    vp_sim *s = self->s;
    if (!strcmp(kind, "vortons")) {
        vp_vortons *v = &s->vortons;
#define F(name, w) if (!strcmp(field, #name)) return vp_py_make_view(v->name, v->n, w);
        F(position, 3) F(vorticity, 3) F(radius, 1) F(density, 1) F(age, 1) F(velocity, 3)
#undef F
    } else if (!strcmp(kind, "tracers")) {
        vp_tracers *t = &s->tracers;
#define F(name, w) if (!strcmp(field, #name)) return vp_py_make_view(t->name, t->n, w);
        F(position, 3) F(velocity, 3) F(density, 1) F(age, 1)
#undef F
    }
    return PyErr_Format(PyExc_KeyError, "no particle field %s.%s", kind, field);
}

static PyObject *Sim_count(SimObject *self, PyObject *arg)
{
    if (!self->s) return vp_py_raise_status(VP_ERR_STATE, "Sim");
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
    if (vp_py_check_ready(self)) return NULL;
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
    if (st) return vp_py_raise_status(st, "remove");
    Py_RETURN_NONE;
}

static PyObject *Sim_get_time(SimObject *self, void *c) { return self->s ? PyFloat_FromDouble(self->s->time) : vp_py_raise_status(VP_ERR_STATE, "Sim"); }
static int Sim_set_time(SimObject *self, PyObject *v, void *c)
{
    double t;
    if (!v || vp_py_check_ready(self) || vp_py_get_double(v, "time", &t) || vp_py_check_param("time", t, -INFINITY, 0, INFINITY)) return -1;
    self->s->time = t;
    return 0;
}
static PyObject *Sim_get_max_rate(SimObject *self, void *c) { return self->s ? PyFloat_FromDouble(self->s->max_rate) : vp_py_raise_status(VP_ERR_STATE, "Sim"); }
static int Sim_set_max_rate(SimObject *self, PyObject *v, void *c)
{
    double t;
    if (!v || vp_py_check_ready(self) || vp_py_get_double(v, "max_rate", &t) || vp_py_check_param("max_rate", t, 0, 0, INFINITY)) return -1;
    self->s->max_rate = t;
    return 0;
}
static PyObject *Sim_get_substeps(SimObject *self, void *c) { return self->s ? PyLong_FromLong(self->s->substeps) : vp_py_raise_status(VP_ERR_STATE, "Sim"); }
static PyObject *Sim_get_diffusion_substeps(SimObject *self, void *c) { return self->s ? PyLong_FromLong(self->s->pse_substeps) : vp_py_raise_status(VP_ERR_STATE, "Sim"); }
static PyObject *Sim_get_frame(SimObject *self, void *c) { return self->s ? PyLong_FromLongLong(self->s->frame) : vp_py_raise_status(VP_ERR_STATE, "Sim"); }
static int Sim_set_frame(SimObject *self, PyObject *v, void *c)
{
    if (!v || vp_py_check_ready(self)) return -1;
    long long f = PyLong_AsLongLong(v);
    if (f == -1 && PyErr_Occurred()) return -1;
    if (f < 0) { PyErr_SetString(PyExc_ValueError, "frame must be >= 0"); return -1; }
    self->s->frame = f;
    return 0;
}
static PyObject *Sim_get_timings(SimObject *self, void *c)
{
    if (!self->s) return vp_py_raise_status(VP_ERR_STATE, "Sim");
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
static PyObject *Sim_get_interactions(SimObject *self, void *c) { return self->s ? PyLong_FromUnsignedLongLong(self->s->interactions) : vp_py_raise_status(VP_ERR_STATE, "Sim"); }
static PyObject *Sim_get_bodies(SimObject *self, void *c) { return PyList_GetSlice(self->bodies, 0, PY_SSIZE_T_MAX); }
static PyObject *Sim_get_rng(SimObject *self, void *c)
{
    if (!self->s) return vp_py_raise_status(VP_ERR_STATE, "Sim");
    uint64_t *r = self->s->rng;
    return Py_BuildValue("(KKKK)", (unsigned long long)r[0], (unsigned long long)r[1], (unsigned long long)r[2], (unsigned long long)r[3]);
}
static int Sim_set_rng(SimObject *self, PyObject *v, void *c)
{
    unsigned long long r[4];
    if (!v || vp_py_check_ready(self)) return -1;
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
    if (!(x = vp_py_as_rows(xo, "position", 3, &n)) || !(a = vp_py_as_rows(ao, "strength", 3, &n)) ||
        !(r = vp_py_as_per_particle(ro, "radius", n)) || !(p = vp_py_as_rows(po, "points", 3, &m2)))
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
    vp_py_param_getset(Sim_getset);
    size_t k = VP_PARAM_COUNT;
    for (size_t j = 0; j < sizeof Sim_state_getset / sizeof Sim_state_getset[0]; j++) Sim_getset[k++] = Sim_state_getset[j];
    if (PyType_Ready(&SimType) < 0 || PyType_Ready(&vp_py_BodyType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Sim", (PyObject *)&SimType) < 0 ||
        PyModule_AddObjectRef(m, "RigidBody", (PyObject *)&vp_py_BodyType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "DEFAULT_SEED", DEFAULT_SEED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *meta = vp_py_parameters_metadata();
    if (!meta || PyModule_AddObject(m, "PARAMETERS", meta) < 0) { /* steals meta on success */
        Py_XDECREF(meta);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
