/* bind_body.c: the RigidBody type of vortonpy._core.  A body keeps its state in itself until
 * Sim.add_body, then reads and writes the Sim's copy (vp_sim.bodies). */
#include "bind.h"

static vp_body *body_ptr(BodyObject *b)
{
    if (b->sim && b->sim->s && b->index < (Py_ssize_t)b->sim->s->n_bodies) return &b->sim->s->bodies[b->index];
    return &b->local;
}

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
                vp_py_unknown_keyword("RigidBody", key, names);
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
    if (vp_py_parse_vec3(po, "position", b.position) || vp_py_parse_vec3(vo, "velocity", b.velocity) ||
        vp_py_parse_vec3(wo, "angular_velocity", b.angular_velocity))
        return -1;
    if (vp_py_check_param("radius", radius, 0, 1, INFINITY) || vp_py_check_param("mass", mass, 0, 1, INFINITY) ||
        vp_py_check_param("temperature", T, 0, 1, INFINITY) || vp_py_check_param("thermal_conductivity", k, 0, 0, INFINITY) ||
        vp_py_check_param("heat_capacity", C, 0, 1, INFINITY))
        return -1;
    if (oo) {
        npy_intp one = 1;
        PyArrayObject *q = vp_py_as_rows(oo, "orientation", 4, &one);
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
    case BV_POSITION: return vp_py_vec3(b->position);
    case BV_VELOCITY: return vp_py_vec3(b->velocity);
    case BV_ANGVEL: return vp_py_vec3(b->angular_velocity);
    case BV_MOMENTUM: return vp_py_vec3(b->momentum);
    case BV_ANGMOM: return vp_py_vec3(b->angular_momentum);
    case BV_FORCE: return vp_py_vec3(b->force);
    case BV_TORQUE: return vp_py_vec3(b->torque);
    case BV_FLUID_IMPULSE: return vp_py_vec3(b->fluid_impulse);
    default: return vp_py_vec3(b->fluid_angular_impulse);
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
    if (vp_py_parse_vec3(val, vec_names[which], v)) return -1;
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
    if (vp_py_get_double(val, scal_names[which], &v)) return -1;
    int bad = which == BS_CONDUCTIVITY ? vp_py_check_param(scal_names[which], v, 0, 0, INFINITY)
                                       : vp_py_check_param(scal_names[which], v, 0, 1, INFINITY);
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
    PyArrayObject *q = vp_py_as_rows(val, "orientation", 4, &one);
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
    return vp_py_explain_setattr_failure(self, name);
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
    if (vp_py_parse_vec3(io, "fluid_impulse", i3) || vp_py_parse_vec3(ao, "fluid_angular_impulse", a3)) return NULL;
    vp_body *b = body_ptr(self);
    memcpy(b->fluid_impulse, i3, sizeof i3);
    memcpy(b->fluid_angular_impulse, a3, sizeof a3);
    b->heat_received = heat;
    /* a saved body's inside moved with it */
    memcpy(b->interior_velocity, b->velocity, sizeof b->velocity);
    memcpy(b->interior_angular_velocity, b->angular_velocity, sizeof b->angular_velocity);
    Py_RETURN_NONE;
}

static PyObject *Body_apply_impulse(BodyObject *self, PyObject *args)
{
    PyObject *jo, *to = NULL;
    if (!PyArg_ParseTuple(args, "O|O:apply_impulse", &jo, &to)) return NULL;
    if (body_busy(self)) return NULL;
    double j[3], t[3] = {0, 0, 0};
    if (vp_py_parse_vec3(jo, "impulse", j) || vp_py_parse_vec3(to, "angular_impulse", t)) return NULL;
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

PyTypeObject vp_py_BodyType = {
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
