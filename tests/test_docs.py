"""Every public name of vortonpy has a docstring, and the type stubs cover the C core."""
import importlib
import inspect
import os

import pytest

import vortonpy as vp

MODULES = ["vortonpy", "vortonpy.scenes", "vortonpy.scene_files", "vortonpy.plot", "vortonpy.animate",
           "vortonpy.export", "vortonpy.cli"]


def _public(obj):
    names = getattr(obj, "__all__", None)
    if names is None:
        names = [n for n in vars(obj) if not n.startswith("_")]
    return [n for n in names if not n.startswith("_")]


def _members():
    """(qualified name, object) for every public module-level name and public class member."""
    seen = set()
    for modname in MODULES:
        mod = importlib.import_module(modname)
        yield modname, mod
        for name in _public(mod):
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
                continue
            if getattr(obj, "__module__", "").split(".")[0] not in ("vortonpy",) and not modname == "vortonpy":
                continue  # re-exported from elsewhere (typing, numpy, ...)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{modname}.{name}", obj
            if inspect.isclass(obj):
                for attr in dir(obj):  # inherited too: Sim's methods from the C core
                    if attr.startswith("_") or hasattr(object, attr):
                        continue
                    val = inspect.getattr_static(obj, attr)
                    if isinstance(val, (staticmethod, classmethod)):
                        val = val.__func__
                    if callable(val) or isinstance(val, property) or inspect.isgetsetdescriptor(val):
                        yield f"{modname}.{name}.{attr}", val


MEMBERS = list(_members())


@pytest.mark.parametrize("qualname, obj", MEMBERS, ids=[q for q, _ in MEMBERS])
def test_public_name_has_docstring(qualname, obj):
    doc = inspect.getdoc(obj) if not isinstance(obj, property) else (obj.__doc__ or (obj.fget and obj.fget.__doc__))
    assert doc and doc.strip(), f"{qualname} has no docstring"


def test_the_walk_found_the_api():
    names = {q for q, _ in MEMBERS}
    for q in ("vortonpy.Sim", "vortonpy.Sim.step", "vortonpy.Sim.add_vortons", "vortonpy.RigidBody",
              "vortonpy.scenes.vortex_ring", "vortonpy.scenes.from_toml", "vortonpy.plot.drag_curve"):
        assert q in names, q


def test_package_is_typed_and_stubs_cover_the_core():
    pkg = os.path.dirname(vp.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    stub = open(os.path.join(pkg, "_core.pyi")).read()
    from vortonpy import _core
    for cls in ("Sim", "RigidBody"):
        assert f"class {cls}" in stub
        for name in dir(getattr(_core, cls)):
            if not name.startswith("__"):
                assert f" {name}" in stub, f"_core.pyi lacks {cls}.{name}"
    for fn in ("has_openmp", "direct_velocity"):
        assert f"def {fn}(" in stub
