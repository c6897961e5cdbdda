"""Scene files: describe a simulation in TOML, build it, and write the built-in scenes out.

    sim = vp.scenes.from_toml("my_scene.toml", viscosity=0.02)   # build a Sim
    spec = vp.scenes.read_toml("my_scene.toml")                  # the checked contents (a dict)
    vp.scenes.to_toml("dye_drop", "dye_drop.toml", tracers=5000)  # a built-in scene as a file

The format (version 1; full reference with examples in ``docs/scenes.md``)::

    name = "my_scene"            # optional: the title (default: the file's name)
    description = "..."          # optional
    format = 1                   # optional: the format version
    seed = 0                     # optional: seeds the random noise and tracer placement

    [sim]                        # keyword arguments of vortonpy.Sim
    dt = 0.0333
    viscosity = 0.01
    gravity = [0, 0, -10]
    stratification = [[-0.05, 1.6], [0.05, 0.4]]   # [height, density] points ([]: none)
    solver = "tree"              # "direct" | "tree" | "poisson" | "auto"

    [run]                        # defaults for `vortonpy run FILE` (the command line wins)
    frames = 300
    view = "xz"                  # "xz" | "xy" | "yz"
    color = "density"            # "density" | "temperature" | "speed" | "age" | "none"
    steps_per_frame = 1
    fps = 30

    [[vortons]]                  # any number of blocks, each of one kind:
    kind = "box"                 # a cubic lattice filling [lo, hi]
    lo = [-2, -0.25, -0.25]
    hi = [2, 0.25, 0.25]
    count = 512                  # or spacing = 0.0625
    noise = 0.5                  # random-direction vorticity of this magnitude
    vorticity = [0, 0, 0]        # plus a uniform vorticity
    density = 0.0                # density deviation from ambient ...
    regions = [{shape = "sphere", center = [0, 0, 0], radius = 0.2, density = 1.0}]  # ... and where it differs

    [[vortons]]
    kind = "ring"                # a vortex ring with a Gaussian core
    center = [0, 0, 0]
    ring_radius = 1.0
    core = 0.2
    circulation = 1.0
    axis = "z"                   # travels along +axis

    [[tracers]]
    kind = "box"                 # also "ball", "ring", "cylinder", "points"
    lo = [-2, -0.25, -0.25]
    hi = [2, 0.25, 0.25]
    count = 100000

    [[bodies]]                   # vortonpy.RigidBody keyword arguments, plus impulse,
    position = [-2, 0, 0]        # angular_impulse and density (instead of mass)
    velocity = [5, 0, 0]
    radius = 0.2
    mass = 0.2
    gravity = false

    [[emitters]]                 # Sim.add_emitter keyword arguments
    center = [0, 0, 0]
    half_size = [0.25, 0.25, 0.25]
    vorton_rate = 100
    tracer_rate = 5000
    vorton_radius = 0.04
    vorticity = 0.5

A file may also start from a built-in scene and add to it::

    [scene]
    base = "vortex_ring"         # a name from vortonpy.scenes.SCENES
    ring_radius = 1.5            # that scene's parameters

Anything wrong in a file raises ``ValueError`` naming the key (``vortons[1].core: ...``).
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable, Dict, List, Union

import numpy as np

from . import _shapes as S
from . import parameters as _parameters
from ._sim import RigidBody, Sim

if sys.version_info >= (3, 11):
    import tomllib as _toml
else:  # pragma: no cover - older Pythons
    import tomli as _toml

__all__ = ["from_toml", "read_toml", "build", "to_toml", "scene_spec", "dumps_toml", "FORMAT_VERSION"]

#: Version of the scene-file format this vortonpy reads and writes.
FORMAT_VERSION = 1

#: Keys of the [sim] table: the Sim keywords (every parameter, and seed: the emitters'
#: random numbers).
SIM_KEYS = frozenset(_parameters.sim_keywords())
TOP_KEYS = ("format", "name", "description", "seed", "scene", "sim", "run", "vortons", "tracers", "bodies",
            "emitters")
RUN_KEYS = {"frames": "int", "steps_per_frame": "int", "view": "str", "color": "str", "fps": "pos"}
BODY_KEYS = ("position", "velocity", "angular_velocity", "radius", "mass", "density", "temperature",
             "thermal_conductivity", "heat_capacity", "fixed", "gravity", "orientation", "impulse",
             "angular_impulse")
EMITTER_KEYS = ("center", "half_size", "vorton_rate", "tracer_rate", "vorton_radius", "vorticity", "density")

# kind -> {key: (checker, default)}; a default of _REQ means required.
_REQ = object()
_DENS = {"density": ("num", 0.0), "regions": ("regions", [])}
VORTON_KINDS: Dict[str, Dict[str, tuple]] = {
    "box": {"lo": ("vec3", _REQ), "hi": ("vec3", _REQ), "spacing": ("pos", None), "count": ("count", None),
            "noise": ("nonneg", 0.0), "vorticity": ("vec3", [0.0, 0.0, 0.0]), "radius": ("pos", None),
            "seed": ("int", None), **_DENS},
    "blob": {"center": ("vec3", [0.0, 0.0, 0.0]), "radius": ("pos", _REQ), "spacing": ("pos", None),
             "count": ("count", None), "noise": ("nonneg", 0.0), "vorticity": ("vec3", [0.0, 0.0, 0.0]),
             "core_radius": ("pos", None), "seed": ("int", None), **_DENS},
    "ring": {"center": ("vec3", [0.0, 0.0, 0.0]), "ring_radius": ("pos", 1.0), "core": ("pos", 0.2),
             "circulation": ("num", 1.0), "spacing": ("pos", None), "extent": ("pos", 2.5), "axis": ("axis", "z"),
             "density": ("num", 0.0)},
    "tube": {"center": ("vec3", [0.0, 0.0, 0.0]), "direction": ("dir3", [0.0, 0.0, 1.0]), "length": ("pos", _REQ),
             "core": ("pos", 0.2), "circulation": ("num", 1.0), "spacing": ("pos", None), "density": ("num", 0.0)},
    "points": {"position": ("rows3", _REQ), "vorticity": ("rows3", _REQ), "radius": ("pos_or_list", _REQ),
               "density": ("num_or_list", 0.0)},
}
TRACER_KINDS: Dict[str, Dict[str, tuple]] = {
    "box": {"lo": ("vec3", _REQ), "hi": ("vec3", _REQ), "count": ("count", _REQ), "seed": ("int", None), **_DENS},
    "ball": {"center": ("vec3", [0.0, 0.0, 0.0]), "radius": ("pos", _REQ), "count": ("count", _REQ),
             "seed": ("int", None), **_DENS},
    "ring": {"center": ("vec3", [0.0, 0.0, 0.0]), "ring_radius": ("pos", 1.0), "spread": ("pos", 0.3),
             "count": ("count", _REQ), "axis": ("axis", "z"), "seed": ("int", None), **_DENS},
    "cylinder": {"center": ("vec3", [0.0, 0.0, 0.0]), "radius": ("pos", _REQ), "length": ("nonneg", _REQ),
                 "count": ("count", _REQ), "axis": ("axis", "z"), "seed": ("int", None), **_DENS},
    "points": {"position": ("rows3", _REQ), "density": ("num_or_list", 0.0)},
}
REGION_SHAPES = {"sphere": ("center", "radius"), "box": ("lo", "hi"), "halfspace": ("axis", "below", "above")}
_AXES = {"x": 0, "y": 1, "z": 2, 0: 0, 1: 1, 2: 2}

# The built-in scenes by name (vortonpy.scenes registers each as it defines it), for the
# [scene] base form and scene_spec.
_BUILTIN: Dict[str, Callable[..., Sim]] = {}


def register_scene(name: str, fn: Callable[..., Sim]) -> None:
    """Make ``fn`` (a scene function with ``.spec`` and ``.info``) known as ``name``."""
    _BUILTIN[name] = fn


def _unknown(where: str, key, expected, what: str = "unknown key") -> ValueError:
    expected = list(expected)
    hint = _parameters.suggest(str(key), expected) or f" (expected one of: {', '.join(map(str, expected))})"
    return _bad(where, f"{what}{hint}")


# ----------------------------------------------------------------------------- checking
def _bad(where: str, msg: str) -> ValueError:
    return ValueError(f"{where}: {msg}")


def _is_num(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _check(where: str, kind: str, v):
    """Check and normalise one value; raise ValueError naming ``where``."""
    if kind == "num":
        if not _is_num(v) or not math.isfinite(v):
            raise _bad(where, f"must be a finite number, got {v!r}")
        return float(v)
    if kind in ("pos", "nonneg"):
        if not _is_num(v) or not math.isfinite(v) or v < 0 or (kind == "pos" and v == 0):
            raise _bad(where, f"must be a {'positive' if kind == 'pos' else 'non-negative'} number, got {v!r}")
        return float(v)
    if kind in ("int", "count", "posint"):
        low = {"int": None, "count": 0, "posint": 1}[kind]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or (low is not None and v < low):
            words = {"int": "an integer", "count": "a non-negative integer", "posint": "a positive integer"}[kind]
            raise _bad(where, f"must be {words}, got {v!r}")
        return int(v)
    if kind == "str":
        if not isinstance(v, str):
            raise _bad(where, f"must be a string, got {v!r}")
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            raise _bad(where, f"must be true or false, got {v!r}")
        return v
    if kind in ("vec3", "dir3"):
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_num(x) and math.isfinite(x) for x in v):
            raise _bad(where, f"must be a list of 3 finite numbers, got {v!r}")
        out = [float(x) for x in v]
        if kind == "dir3" and not any(out):
            raise _bad(where, "must be a non-zero direction")
        return out
    if kind == "axis":
        if isinstance(v, bool) or v not in _AXES:
            raise _bad(where, f'must be "x", "y" or "z", got {v!r}')
        return "xyz"[_AXES[v]]
    if kind == "profile":
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, (list, tuple)) or not all(
                isinstance(r, (list, tuple)) and len(r) == 2 and all(_is_num(x) and math.isfinite(x) for x in r)
                for r in v):
            raise _bad(where, f"must be a list of [height, density] pairs of finite numbers, got {v!r}")
        return [[float(x) for x in r] for r in v]
    if kind == "rows3":
        try:
            a = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            raise _bad(where, "must be a list of [x, y, z] rows of numbers") from None
        if a.ndim != 2 or a.shape[1] != 3 or not np.all(np.isfinite(a)):
            raise _bad(where, f"must be a list of [x, y, z] rows of finite numbers, got shape {a.shape}")
        return a.tolist()
    if kind in ("pos_or_list", "num_or_list"):
        if isinstance(v, list):
            return [_check(f"{where}[{i}]", kind[:3] if kind.startswith("pos") else "num", x)
                    for i, x in enumerate(v)]
        return _check(where, "pos" if kind.startswith("pos") else "num", v)
    if kind == "regions":
        if not isinstance(v, list):
            raise _bad(where, "must be a list of tables like {shape = \"sphere\", center = [0, 0, 0], radius = 1, "
                              "density = 1}")
        return [_check_region(f"{where}[{i}]", r) for i, r in enumerate(v)]
    raise AssertionError(kind)


def _check_region(where: str, r) -> Dict[str, Any]:
    if not isinstance(r, dict):
        raise _bad(where, f"must be a table, got {r!r}")
    shape = r.get("shape")
    if shape not in REGION_SHAPES:
        raise _bad(f"{where}.shape", f"must be one of {', '.join(REGION_SHAPES)}, got {shape!r}")
    allowed = set(REGION_SHAPES[shape]) | {"shape", "density"}
    for k in r:
        if k not in allowed:
            raise _unknown(f"{where}.{k}", k, sorted(allowed), f"unknown key for a {shape} region")
    if "density" not in r:
        raise _bad(f"{where}.density", "missing")
    out: Dict[str, Any] = {"shape": shape, "density": _check(f"{where}.density", "num", r["density"])}
    if shape == "sphere":
        out["center"] = _check(f"{where}.center", "vec3", r.get("center", [0, 0, 0]))
        if "radius" not in r:
            raise _bad(f"{where}.radius", "missing")
        out["radius"] = _check(f"{where}.radius", "pos", r["radius"])
    elif shape == "box":
        for k in ("lo", "hi"):
            if k not in r:
                raise _bad(f"{where}.{k}", "missing")
            out[k] = _check(f"{where}.{k}", "vec3", r[k])
    else:
        out["axis"] = _check(f"{where}.axis", "axis", r.get("axis", "z"))
        if ("below" in r) == ("above" in r):
            raise _bad(where, "a halfspace needs exactly one of below = VALUE or above = VALUE")
        k = "below" if "below" in r else "above"
        out[k] = _check(f"{where}.{k}", "num", r[k])
    return out


def _check_block(where: str, block, kinds: Dict[str, Dict[str, tuple]]) -> Dict[str, Any]:
    if not isinstance(block, dict):
        raise _bad(where, "must be a table")
    kind = block.get("kind")
    if kind not in kinds:
        raise _bad(f"{where}.kind", f"must be one of {', '.join(kinds)}, got {kind!r}")
    schema = kinds[kind]
    out: Dict[str, Any] = {"kind": kind}
    for k, v in block.items():
        if k == "kind":
            continue
        if k not in schema:
            raise _unknown(f"{where}.{k}", k, schema, f"unknown key for kind {kind!r}")
        out[k] = _check(f"{where}.{k}", schema[k][0], v)
    for k, (_, default) in schema.items():
        if k not in out:
            if default is _REQ:
                raise _bad(f"{where}.{k}", f"missing (required for kind {kind!r})")
            if default is not None:
                out[k] = default
    if kind in ("box", "blob") and "spacing" in out and "count" in out:
        raise _bad(where, "give spacing or count, not both")
    if kind == "box" and where.startswith("vortons") and "spacing" not in out and "count" not in out:
        raise _bad(f"{where}.spacing", "missing: give spacing or count")
    if kind == "blob" and "spacing" not in out and "count" not in out:
        raise _bad(f"{where}.spacing", "missing: give spacing or count")
    if kind in ("box",) and any(h <= l for l, h in zip(out["lo"], out["hi"])):
        raise _bad(f"{where}.hi", f"must be above lo in every axis, got lo={out['lo']} hi={out['hi']}")
    if kind == "points":
        n = len(out["position"])
        if "vorticity" in out and len(out["vorticity"]) != n:
            raise _bad(f"{where}.vorticity", f"must have {n} rows like position")
        for k in ("radius", "density"):
            if isinstance(out.get(k), list) and len(out[k]) != n:
                raise _bad(f"{where}.{k}", f"must be one number or {n} numbers")
    if "count" in out and kind in ("box", "blob") and where.startswith("vortons") and out["count"] == 0:
        raise _bad(f"{where}.count", "must be positive")
    return out


def _check_body(where: str, b) -> Dict[str, Any]:
    if not isinstance(b, dict):
        raise _bad(where, "must be a table")
    kinds = dict(position="vec3", velocity="vec3", angular_velocity="vec3", radius="pos", mass="pos", density="pos",
                 temperature="pos", thermal_conductivity="nonneg", heat_capacity="pos", fixed="bool", gravity="bool",
                 orientation="quat", impulse="vec3", angular_impulse="vec3")
    out = {}
    for k, v in b.items():
        if k not in kinds:
            raise _unknown(f"{where}.{k}", k, BODY_KEYS)
        if kinds[k] == "quat":
            if not isinstance(v, list) or len(v) != 4 or not all(_is_num(x) for x in v) or not any(v):
                raise _bad(f"{where}.{k}", f"must be a non-zero quaternion [w, x, y, z], got {v!r}")
            out[k] = [float(x) for x in v]
        elif kinds[k] == "pos" and k in ("mass", "heat_capacity") and v == float("inf"):
            out[k] = v
        else:
            out[k] = _check(f"{where}.{k}", kinds[k], v)
    if "mass" in out and "density" in out:
        raise _bad(where, "give mass or density, not both")
    return out


def _check_emitter(where: str, e) -> Dict[str, Any]:
    if not isinstance(e, dict):
        raise _bad(where, "must be a table")
    kinds = dict(center="vec3", half_size="vec3", vorton_rate="nonneg", tracer_rate="nonneg", vorton_radius="pos",
                 vorticity="nonneg", density="num")
    out = {}
    for k, v in e.items():
        if k not in kinds:
            raise _unknown(f"{where}.{k}", k, EMITTER_KEYS)
        out[k] = _check(f"{where}.{k}", kinds[k], v)
    for k in ("center", "half_size"):
        if k not in out:
            raise _bad(f"{where}.{k}", "missing")
    if any(x < 0 for x in out["half_size"]):
        raise _bad(f"{where}.half_size", "must be >= 0 in every axis")
    return out


def _check_sim_table(where: str, t) -> Dict[str, Any]:
    """Check the types of a [sim] table against the parameter table (the ranges are the
    core's to check, when the Sim is made)."""
    if not isinstance(t, dict):
        raise _bad(where, "must be a table")
    out = {}
    for k, v in t.items():
        at = f"{where}.{k}"
        if k not in SIM_KEYS:
            raise _unknown(at, k, sorted(SIM_KEYS), "unknown Sim parameter")
        if k == "seed":
            out[k] = _check(at, "int", v)
            continue
        p = _parameters.get(k)
        if p.type == "vec3":
            out[k] = _check(at, "vec3", v)
        elif p.type == "profile":  # (the core checks the heights' order and the densities)
            out[k] = _check(at, "profile", [] if v is None else v)
        elif p.type == "enum":
            if v not in p.choices:
                raise _bad(at, f"must be {p.range}, got {v!r}{_parameters.suggest(str(v), p.choices)}")
            out[k] = v
        elif p.type == "bool":
            if not isinstance(v, bool) and v not in (0, 1):
                raise _bad(at, f"must be true or false, got {v!r}")
            out[k] = bool(v)
        elif k == "threads" and v is None:
            out[k] = v
        elif p.type == "int":
            out[k] = _check(at, "int", v) if not (_is_num(v) and float(v).is_integer()) else int(v)
        else:
            if not _is_num(v) or math.isnan(v):
                raise _bad(at, f"must be a number, got {v!r}")
            out[k] = v
    return out


def validate(data: Dict[str, Any], source: str = "scene") -> Dict[str, Any]:
    """Check a parsed scene (the dict TOML gives) and return it normalised: every block with
    its defaults filled in.  Raises ``ValueError`` naming the offending key."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a scene must be a table")
    for k in data:
        if k not in TOP_KEYS:
            hint = _parameters.suggest(str(k), TOP_KEYS) or f" (expected: {', '.join(TOP_KEYS)})"
            raise ValueError(f"{source}: unknown top-level key {k!r}{hint}")
    fmt = data.get("format", FORMAT_VERSION)
    if fmt != FORMAT_VERSION:
        raise ValueError(f"{source}: format: this vortonpy reads scene format {FORMAT_VERSION}, got {fmt!r}")
    out: Dict[str, Any] = {"format": FORMAT_VERSION}
    for k in ("name", "description"):
        if k in data:
            out[k] = _check(k, "str", data[k])
    out["seed"] = _check("seed", "int", data.get("seed", 0))
    out["sim"] = _check_sim_table("sim", data.get("sim", {}))
    run = data.get("run", {})
    if not isinstance(run, dict):
        raise ValueError("run: must be a table")
    out["run"] = {}
    for k, v in run.items():
        if k not in RUN_KEYS:
            raise _unknown(f"run.{k}", k, RUN_KEYS)
        v = _check(f"run.{k}", RUN_KEYS[k], v)
        if k in ("frames", "steps_per_frame") and v < 1:
            raise _bad(f"run.{k}", f"must be >= 1, got {v}")
        if k == "view" and v not in ("xz", "xy", "yz", "zx", "yx", "zy"):
            raise _bad(f"run.{k}", f'must be "xz", "xy" or "yz", got {v!r}')
        if k == "color" and v not in ("density", "temperature", "speed", "age", "none"):
            raise _bad(f"run.{k}", f'must be "density", "temperature", "speed", "age" or "none", got {v!r}')
        out["run"][k] = v
    if "scene" in data:
        sc = data["scene"]
        if not isinstance(sc, dict) or "base" not in sc:
            raise _bad("scene", 'must be a table with base = "<built-in scene name>"')
        if sc["base"] not in _BUILTIN:
            raise _unknown("scene.base", sc["base"], _BUILTIN, f"unknown scene {sc['base']!r}")
        params = [p.name for p in _BUILTIN[sc["base"]].info.parameters]
        for k in sc:
            if k != "base" and k not in params:
                raise _unknown(f"scene.{k}", k, params, f"not a parameter of {sc['base']}")
        out["scene"] = dict(sc)
    for table, kinds in (("vortons", VORTON_KINDS), ("tracers", TRACER_KINDS)):
        blocks = data.get(table, [])
        if not isinstance(blocks, list):
            raise _bad(table, f"must be an array of tables ([[{table}]])")
        out[table] = [_check_block(f"{table}[{i}]", b, kinds) for i, b in enumerate(blocks)]
    for table, fn in (("bodies", _check_body), ("emitters", _check_emitter)):
        blocks = data.get(table, [])
        if not isinstance(blocks, list):
            raise _bad(table, f"must be an array of tables ([[{table}]])")
        out[table] = [fn(f"{table}[{i}]", b) for i, b in enumerate(blocks)]
    return out


def read_toml(path) -> Dict[str, Any]:
    """Read and check a scene file; returns the normalised scene (see :func:`validate`).
    A file that is not valid TOML, or names an unknown key or a bad value, raises
    ``ValueError`` naming the file and the key."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        data = _toml.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    except _toml.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    try:
        spec = validate(data, source=path)
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith(path) else f"{path}: {msg}") from None
    spec.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return spec


# ----------------------------------------------------------------------------- building
def _rng(block, shared):
    return np.random.default_rng(block["seed"]) if "seed" in block else shared


def _apply_density(p: np.ndarray, block) -> np.ndarray:
    d = np.full(len(p), float(block.get("density", 0.0)))
    for r in block.get("regions", []):
        if r["shape"] == "sphere":
            inside = np.linalg.norm(p - np.asarray(r["center"]), axis=1) <= r["radius"]
        elif r["shape"] == "box":
            inside = np.all((p >= np.asarray(r["lo"])) & (p <= np.asarray(r["hi"])), axis=1)
        else:
            c = p[:, _AXES[r["axis"]]]
            inside = c < r["below"] if "below" in r else c >= r["above"]
        d[inside] = r["density"]
    return d


def _orient(p: np.ndarray, axis: str) -> np.ndarray:
    """Columns of points built travelling along +z, permuted to travel along +axis."""
    return p[:, {"z": [0, 1, 2], "x": [2, 0, 1], "y": [1, 2, 0]}[axis]]


def _lattice_spacing(block, volume: float) -> float:
    if "spacing" in block:
        return block["spacing"]
    return (volume / block["count"]) ** (1.0 / 3.0)


def _add_vortons(sim: Sim, where: str, b, rng) -> None:
    kind = b["kind"]
    if kind == "box":
        lo, hi = np.asarray(b["lo"]), np.asarray(b["hi"])
        h = _lattice_spacing(b, float(np.prod(hi - lo)))
        p = S.lattice(lo, hi, h)
        r = b.get("radius", S.radius_for_spacing(h))
    elif kind == "blob":
        c, R = np.asarray(b["center"]), b["radius"]
        h = _lattice_spacing(b, 4.0 / 3.0 * np.pi * R ** 3)
        p = S.lattice(c - R, c + R, h)
        p = p[np.linalg.norm(p - c, axis=1) <= R]
        r = b.get("core_radius", S.radius_for_spacing(h))
    elif kind == "ring":
        p, w, r = S.ring_vortons(center=b["center"], ring_radius=b["ring_radius"], core=b["core"],
                                 circulation=b["circulation"], spacing=b.get("spacing"), extent=b["extent"],
                                 axis=_AXES[b["axis"]])
        sim.add_vortons(p, w, r, b["density"])
        return
    elif kind == "tube":
        p, w, r = S.tube_vortons(b["center"], b["direction"], b["length"], b["core"], b["circulation"],
                          b.get("spacing") or b["core"] / 2)
        sim.add_vortons(p, w, r, b["density"])
        return
    else:  # points
        p = np.asarray(b["position"], float).reshape(-1, 3)
        sim.add_vortons(p, np.asarray(b["vorticity"], float).reshape(-1, 3), np.asarray(b["radius"], float),
                        np.asarray(b["density"], float))
        return
    if len(p) == 0:
        raise _bad(where, "holds no lattice points: the spacing is larger than the region")
    w = S.noise(rng, len(p), b["noise"]) if b["noise"] else np.zeros_like(p)
    w = w + np.asarray(b["vorticity"])
    sim.add_vortons(p, w, r, _apply_density(p, b))


def _tracer_points(b, rng) -> np.ndarray:
    kind, n = b["kind"], b.get("count", 0)
    if kind == "box":
        return S.points_in_box(rng, b["lo"], b["hi"], n)
    if kind == "ball":
        t = rng.normal(size=(n, 3))
        t *= (b["radius"] * rng.random(n) ** (1 / 3) / np.linalg.norm(t, axis=1))[:, None]
        return t + np.asarray(b["center"])
    if kind == "ring":
        phi = rng.random(n) * 2 * np.pi
        rr = b["spread"] * np.sqrt(rng.random(n))
        th = rng.random(n) * 2 * np.pi
        rad = b["ring_radius"] + rr * np.cos(th)
        t = np.stack([rad * np.cos(phi), rad * np.sin(phi), rr * np.sin(th)], axis=1)
        return _orient(t, b["axis"]) + np.asarray(b["center"])
    if kind == "cylinder":
        phi = rng.random(n) * 2 * np.pi
        rad = b["radius"] * np.sqrt(rng.random(n))
        z = (rng.random(n) - 0.5) * b["length"]
        t = np.stack([rad * np.cos(phi), rad * np.sin(phi), z], axis=1)
        return _orient(t, b["axis"]) + np.asarray(b["center"])
    return np.asarray(b["position"], float).reshape(-1, 3)


def _scale_tracers(blocks: List[Dict[str, Any]], total: int) -> List[Dict[str, Any]]:
    """Share ``total`` tracers among the counted blocks in proportion to their counts."""
    counted = [i for i, b in enumerate(blocks) if "count" in b]
    have = sum(blocks[i]["count"] for i in counted)
    out = [dict(b) for b in blocks]
    if not counted:
        return out
    left = total
    for j, i in enumerate(counted):
        share = left if j == len(counted) - 1 else (int(round(total * blocks[i]["count"] / have)) if have else
                                                    total // len(counted))
        share = min(share, left)
        out[i]["count"] = share
        left -= share
    return out


def build(spec: Dict[str, Any], **overrides) -> Sim:
    """Build the :class:`Sim` a (checked or raw) scene dict describes.

    ``overrides``: any ``Sim`` parameter (``viscosity=0.02``, ``threads=2``, ...) replaces the
    ``[sim]`` value; ``seed`` the file's seed; ``tracers=N`` shares N tracers among the
    ``[[tracers]]`` blocks in proportion to their counts (0 drops them); for a file with a
    ``[scene] base``, other keywords are that scene's parameters.  An unknown keyword raises
    ``TypeError`` naming the nearest valid one."""
    spec = validate(spec, source=str(spec.get("name", "scene")) if isinstance(spec, dict) else "scene")
    spec["sim"] = dict(spec["sim"])
    base = spec.get("scene")
    if base is not None:
        spec["scene"] = dict(base)
    tracer_total = None
    for k, v in overrides.items():
        if k in _parameters.names():
            spec["sim"][k] = v
        elif k == "seed":
            if base is not None:
                spec["scene"]["seed"] = v
            else:
                spec["seed"] = _check("seed", "int", v)
        elif base is not None:
            spec["scene"][k] = v
        elif k == "tracers":
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"tracers must be a non-negative integer, got {v!r}")
            tracer_total = int(v)
        else:
            expected = list(_parameters.names()) + ["seed", "tracers"]
            hint = _parameters.suggest(k, expected) or ": expected a Sim parameter, seed or tracers"
            raise TypeError(f"unknown override {k!r}{hint}")
    if tracer_total is not None:
        spec["tracers"] = _scale_tracers(spec.get("tracers", []), tracer_total)
    return _build(spec)


def _build(spec: Dict[str, Any], sim_errors_as_is: bool = False) -> Sim:
    """Build a checked scene dict (``validate``'s form).  ``Sim()``'s own errors are raised as
    they are with ``sim_errors_as_is``, else as ``ValueError`` under the key ``sim``."""
    sim_kw = dict(spec.get("sim", {}))
    base = spec.get("scene")
    if base is not None:
        scene_kw = {k: v for k, v in base.items() if k != "base"}
        sim = _BUILTIN[base["base"]](**scene_kw, **sim_kw)
    else:
        try:
            sim = Sim(**sim_kw)
        except (TypeError, ValueError) as e:
            if sim_errors_as_is:
                raise
            raise ValueError(f"sim: {e}") from None
    rng = np.random.default_rng(spec.get("seed", 0))
    for i, b in enumerate(spec.get("vortons", [])):
        try:
            _add_vortons(sim, f"vortons[{i}]", b, _rng(b, rng))
        except (TypeError, ValueError) as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith("vortons[") else f"vortons[{i}]: {msg}") from None
    for i, b in enumerate(spec.get("tracers", [])):
        t = _tracer_points(b, _rng(b, rng))
        if len(t):
            try:
                d = np.asarray(b["density"], float) if b["kind"] == "points" else _apply_density(t, b)
                sim.add_tracers(t, d)
            except (TypeError, ValueError) as e:
                raise ValueError(f"tracers[{i}]: {e}") from None
    for i, e in enumerate(spec.get("emitters", [])):
        try:
            sim.add_emitter(**e)
        except (TypeError, ValueError) as err:
            raise ValueError(f"emitters[{i}]: {err}") from None
    for i, b in enumerate(spec.get("bodies", [])):
        kw = {k: v for k, v in b.items() if k not in ("impulse", "angular_impulse", "density")}
        if "density" in b:
            kw["mass"] = b["density"] * 4.0 / 3.0 * np.pi * b.get("radius", 1.0) ** 3
        try:
            body = sim.add_body(RigidBody(**kw))
        except (TypeError, ValueError) as err:
            raise ValueError(f"bodies[{i}]: {err}") from None
        if "impulse" in b or "angular_impulse" in b:
            body.apply_impulse(b.get("impulse", (0, 0, 0)), b.get("angular_impulse", (0, 0, 0)))
    return sim


def from_toml(path, **overrides) -> Sim:
    """Build the simulation a TOML scene file describes (format in :mod:`vortonpy.scene_files`
    and ``docs/scenes.md``).  ``overrides`` as for :func:`build`: Sim keywords
    (``viscosity=0.02``, ``threads=2``), ``seed``, ``tracers=N``, or a base scene's parameters.
    Bad TOML, unknown keys or bad values raise ``ValueError`` naming the key."""
    spec = read_toml(path)
    try:
        return build(spec, **overrides)
    except ValueError as e:
        where = os.fspath(path)
        msg = str(e)
        raise ValueError(msg if msg.startswith(where) else f"{where}: {msg}") from None


# ----------------------------------------------------------------------------- writing
def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_fmt(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps_toml(spec: Dict[str, Any]) -> str:
    """The TOML text of a scene dict (the inverse of :func:`read_toml`)."""
    lines: List[str] = []
    lines.append(f"# vortonpy scene file (format {FORMAT_VERSION}); run with: vortonpy run FILE.toml")
    for k in ("format", "name", "description", "seed"):
        if k in spec:
            lines.append(f"{k} = {_fmt(spec[k])}")
    for table in ("scene", "sim", "run"):
        if spec.get(table):
            lines += ["", f"[{table}]"] + [f"{k} = {_fmt(v)}" for k, v in spec[table].items()]
    for table in ("vortons", "tracers", "bodies", "emitters"):
        for b in spec.get(table, []):
            lines += ["", f"[[{table}]]"] + [f"{k} = {_fmt(v)}" for k, v in b.items()]
    return "\n".join(lines) + "\n"


def scene_spec(name: str, **params) -> Dict[str, Any]:
    """A built-in scene (a name in ``vortonpy.scenes.SCENES``), with ``params`` applied (its
    own parameters and Sim keywords), as a scene dict of [[vortons]], [[tracers]],
    [[bodies]] and [[emitters]] blocks: the scene's own definition.  Building it gives the
    same simulation as ``vortonpy.scenes.NAME(**params)``, particle for particle."""
    if name not in _BUILTIN:
        raise ValueError(f"unknown scene {name!r}{_parameters.suggest(name, _BUILTIN)}; "
                         f"choose one of: {', '.join(_BUILTIN)}")
    return _BUILTIN[name].spec(**params)


def to_toml(scene: Union[str, Dict[str, Any]], path=None, **params) -> str:
    """Write a scene as TOML and return the text.  ``scene`` is a built-in scene's name (with
    ``params`` its keyword overrides, see :func:`scene_spec`) or a scene dict; ``path``: the
    file to write (None: only return the text).  ``from_toml(path)`` builds it back."""
    if isinstance(scene, str):
        spec = scene_spec(scene, **params)
    else:
        if params:
            raise TypeError("params apply only to a built-in scene given by name")
        spec = validate(scene)
    text = dumps_toml(spec)
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as fh:
            fh.write(text)
    return text
