"""The public API documents itself: every public name has a docstring, every callable a
signature (Sim's lists every parameter with its default), and the type stubs cover the core
and are what tools/gen_stubs.py writes from the parameter table."""
import builtins
import importlib
import importlib.util
import inspect
import os

import vortonpy as vp

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["vortonpy", "vortonpy.scenes", "vortonpy.scene_files", "vortonpy.parameters", "vortonpy.plot",
           "vortonpy.animate", "vortonpy.export", "vortonpy.cli"]
_BUILTIN_TYPES = tuple(v for v in vars(builtins).values() if isinstance(v, type))


def _public(mod):
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in vars(mod) if not n.startswith("_")]
    return [n for n in names if not n.startswith("_") or n == "__version__"]


def _inherited_from_builtins(cls, attr):
    owner = next((k for k in cls.__mro__ if attr in vars(k)), None)
    return owner is not None and owner in _BUILTIN_TYPES


def walk():
    """(qualified name, object) for every public module, module-level name and class member
    of vortonpy, each object once."""
    seen = set()
    for modname in MODULES:
        mod = importlib.import_module(modname)
        yield modname, mod
        for name in _public(mod):
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
                continue
            if not getattr(obj, "__module__", "").startswith("vortonpy") and modname != "vortonpy":
                continue  # re-exported from elsewhere (typing, numpy, ...)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{modname}.{name}", obj
            if inspect.isclass(obj):
                for attr in dir(obj):  # inherited too: Sim's methods and parameters from the C core
                    if attr.startswith("_") or hasattr(object, attr) or _inherited_from_builtins(obj, attr):
                        continue
                    val = inspect.getattr_static(obj, attr)
                    if isinstance(val, (staticmethod, classmethod)):
                        val = val.__func__
                    if callable(val) or isinstance(val, property) or inspect.isgetsetdescriptor(val):
                        yield f"{modname}.{name}.{attr}", val


def test_the_public_api_is_documented_and_has_signatures():
    undocumented, unsigned, names = [], [], set()
    for qualname, obj in walk():
        names.add(qualname)
        if isinstance(obj, property):
            doc = obj.__doc__ or (obj.fget and obj.fget.__doc__)
        else:
            doc = inspect.getdoc(obj)
        if not (doc and doc.strip()):
            undocumented.append(qualname)
        if callable(obj) and not isinstance(obj, property) and not inspect.isgetsetdescriptor(obj) \
                and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
            try:
                inspect.signature(obj)
            except (TypeError, ValueError):
                unsigned.append(qualname)
    assert not undocumented, f"no docstring: {undocumented}"
    assert not unsigned, f"no signature: {unsigned}"
    # the walk reached the API (a walk that found nothing would pass)
    for q in ("vortonpy.Sim", "vortonpy.Sim.step", "vortonpy.Sim.add_vortons", "vortonpy.Sim.viscosity",
              "vortonpy.RigidBody", "vortonpy.RigidBody.mass", "vortonpy.scenes.vortex_ring",
              "vortonpy.scenes.from_toml", "vortonpy.plot.drag_curve", "vortonpy.parameters.markdown"):
        assert q in names, q
    assert len(names) > 150


def test_sim_signature_and_docstring_list_every_parameter():
    sig = inspect.signature(vp.Sim)
    doc = inspect.getdoc(vp.Sim)
    for p in vp.parameters.PARAMETERS + (vp.parameters.SEED,):
        s = sig.parameters[p.name]
        assert s.kind is inspect.Parameter.KEYWORD_ONLY and s.default == p.python_default, p.name
        assert f"{p.name} :" in doc, p.name
        if p.unit:
            assert f"[{p.unit}]" in doc, p.name
    assert len(sig.parameters) == len(vp.parameters.PARAMETERS) + 1
    assert "viscosity: float = 0.01" in str(sig)
    rb = inspect.signature(vp.RigidBody)
    assert list(rb.parameters)[:5] == ["position", "velocity", "angular_velocity", "radius", "mass"]
    assert str(inspect.signature(vp.scenes.dye_drop)).startswith("(deviation=1.0, drop_radius=1.0")


def test_stubs_cover_the_core_and_are_generated_from_the_table():
    pkg = os.path.dirname(vp.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    stub = open(os.path.join(pkg, "_core.pyi"), encoding="utf-8").read()
    from vortonpy import _core
    for cls in ("Sim", "RigidBody"):
        assert f"class {cls}" in stub
        for name in dir(getattr(_core, cls)):
            if not name.startswith("__"):
                assert f" {name}" in stub, f"_core.pyi lacks {cls}.{name}"
    for fn in ("has_openmp", "direct_velocity"):
        assert f"def {fn}(" in stub
    spec = importlib.util.spec_from_file_location("gen_stubs", os.path.join(HERE, os.pardir, "tools", "gen_stubs.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    expected = gen.render(vp.parameters.PARAMETERS, vp.parameters.SEED)
    checked_in = open(os.path.join(HERE, os.pardir, "vortonpy", "_core.pyi"), encoding="utf-8").read()
    assert checked_in == expected, "vortonpy/_core.pyi is out of date: run python tools/gen_stubs.py"
    assert stub == expected  # and the package's copy is that file
