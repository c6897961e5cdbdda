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

import inspect
import math
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ._sim import _PARAM_NAMES, RigidBody, Sim

if sys.version_info >= (3, 11):
    import tomllib as _toml
else:  # pragma: no cover - older Pythons
    import tomli as _toml

__all__ = ["from_toml", "read_toml", "build", "to_toml", "scene_spec", "dumps_toml", "FORMAT_VERSION"]

#: Version of the scene-file format this vortonpy reads and writes.
FORMAT_VERSION = 1

SIM_KEYS = frozenset(_PARAM_NAMES) | {"gravity", "solver", "threads", "grid_max_points", "seed"}
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


# ----------------------------------------------------------------------------- checking
def _bad(where: str, msg: str) -> ValueError:
    return ValueError(f"{where}: {msg}")


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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
    if kind in ("int", "count"):
        if isinstance(v, bool) or not isinstance(v, int) or (kind == "count" and v < 0):
            raise _bad(where, f"must be a{' non-negative' if kind == 'count' else 'n'} integer, got {v!r}")
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
            raise _bad(f"{where}.{k}", f"unknown key for a {shape} region (expected {', '.join(sorted(allowed))})")
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
            raise _bad(f"{where}.{k}", f"unknown key for kind {kind!r} (expected one of: {', '.join(schema)})")
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
            raise _bad(f"{where}.{k}", f"unknown key (expected one of: {', '.join(BODY_KEYS)})")
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
            raise _bad(f"{where}.{k}", f"unknown key (expected one of: {', '.join(EMITTER_KEYS)})")
        out[k] = _check(f"{where}.{k}", kinds[k], v)
    for k in ("center", "half_size"):
        if k not in out:
            raise _bad(f"{where}.{k}", "missing")
    if any(x < 0 for x in out["half_size"]):
        raise _bad(f"{where}.half_size", "must be >= 0 in every axis")
    return out


def _check_sim_table(where: str, t) -> Dict[str, Any]:
    if not isinstance(t, dict):
        raise _bad(where, "must be a table")
    out = {}
    for k, v in t.items():
        if k not in SIM_KEYS:
            raise _bad(f"{where}.{k}", f"unknown Sim parameter (expected one of: {', '.join(sorted(SIM_KEYS))})")
        if k == "gravity":
            out[k] = _check(f"{where}.{k}", "vec3", v)
        elif k == "solver":
            if v not in ("direct", "tree", "poisson", "auto"):
                raise _bad(f"{where}.{k}", f'must be "direct", "tree", "poisson" or "auto", got {v!r}')
            out[k] = v
        elif k == "threads":
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise _bad(f"{where}.{k}", f"must be a positive integer, got {v!r}")
            out[k] = v
        elif k == "seed":
            out[k] = _check(f"{where}.{k}", "int", v)
        elif isinstance(v, bool) and k in ("stretch", "baroclinic", "rollback", "overlap"):
            out[k] = int(v)
        else:
            if not _is_num(v) or math.isnan(v):
                raise _bad(f"{where}.{k}", f"must be a number, got {v!r}")
            out[k] = v
    return out


def validate(data: Dict[str, Any], source: str = "scene") -> Dict[str, Any]:
    """Check a parsed scene (the dict TOML gives) and return it normalised: every block with
    its defaults filled in.  Raises ``ValueError`` naming the offending key."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a scene must be a table")
    for k in data:
        if k not in TOP_KEYS:
            raise ValueError(f"{source}: unknown top-level key {k!r} (expected: {', '.join(TOP_KEYS)})")
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
            raise _bad(f"run.{k}", f"unknown key (expected one of: {', '.join(RUN_KEYS)})")
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
        from .scenes import SCENES
        if sc["base"] not in SCENES:
            raise _bad("scene.base", f"unknown scene {sc['base']!r} (choose one of: {', '.join(SCENES)})")
        params = set(inspect.signature(SCENES[sc["base"]]).parameters) - {"sim_kw"}
        for k in sc:
            if k != "base" and k not in params:
                raise _bad(f"scene.{k}", f"not a parameter of {sc['base']} (expected one of: {', '.join(sorted(params))})")
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
    from . import scenes as S
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
        p, w, r = S._tube(b["center"], b["direction"], b["length"], b["core"], b["circulation"],
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
    w = S._noise(rng, len(p), b["noise"]) if b["noise"] else np.zeros_like(p)
    w = w + np.asarray(b["vorticity"])
    sim.add_vortons(p, w, r, _apply_density(p, b))


def _tracer_points(b, rng) -> np.ndarray:
    from . import scenes as S
    kind, n = b["kind"], b.get("count", 0)
    if kind == "box":
        return S._tracers_in_box(rng, b["lo"], b["hi"], n)
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

    ``overrides``: any ``Sim`` keyword (``viscosity=0.02``, ``threads=2``, ...) replaces the
    ``[sim]`` value; ``seed`` the file's seed; ``tracers=N`` shares N tracers among the
    ``[[tracers]]`` blocks in proportion to their counts (0 drops them); for a file with a
    ``[scene] base``, other keywords are that scene's parameters.  An unknown keyword raises
    ``TypeError``."""
    spec = validate(spec, source=str(spec.get("name", "scene")) if isinstance(spec, dict) else "scene")
    sim_kw = dict(spec.get("sim", {}))
    seed = spec.get("seed", 0)
    base = spec.get("scene")
    scene_kw = {k: v for k, v in (base or {}).items() if k != "base"}
    tracer_total = None
    for k, v in overrides.items():
        if k in SIM_KEYS and not (base and k == "seed"):
            sim_kw[k] = v
        elif k == "seed":
            seed = v
            scene_kw["seed"] = v
        elif base is not None:
            scene_kw[k] = v
        elif k == "tracers":
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"tracers must be a non-negative integer, got {v!r}")
            tracer_total = int(v)
        else:
            raise TypeError(f"unknown override {k!r}: expected a Sim parameter ({', '.join(sorted(SIM_KEYS))}), "
                            "seed or tracers")
    if base is not None:
        from .scenes import SCENES
        sim = SCENES[base["base"]](**scene_kw, **sim_kw)
    else:
        try:
            sim = Sim(**sim_kw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"sim: {e}") from None
    rng = np.random.default_rng(seed)
    for i, b in enumerate(spec.get("vortons", [])):
        try:
            _add_vortons(sim, f"vortons[{i}]", b, _rng(b, rng))
        except (TypeError, ValueError) as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith("vortons[") else f"vortons[{i}]: {msg}") from None
    tracer_blocks = spec.get("tracers", [])
    if tracer_total is not None:
        tracer_blocks = _scale_tracers(tracer_blocks, tracer_total)
    for i, b in enumerate(tracer_blocks):
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


def _scene_params(name: str, params: Dict[str, Any]):
    from .scenes import SCENES
    if name not in SCENES:
        raise ValueError(f"unknown scene {name!r}; choose one of: {', '.join(SCENES)}")
    sig = inspect.signature(SCENES[name])
    p = {k: v.default for k, v in sig.parameters.items() if v.default is not inspect.Parameter.empty}
    sim_kw = {}
    for k, v in params.items():
        if k in p:
            p[k] = v
        elif k in SIM_KEYS:
            sim_kw[k] = v
        else:
            raise TypeError(f"{name}() got an unexpected keyword argument {k!r}")
    return p, sim_kw


def _half(box):
    return [-x / 2 for x in box], [x / 2 for x in box]


def scene_spec(name: str, **params) -> Dict[str, Any]:
    """A built-in scene (a name in ``vortonpy.scenes.SCENES``), with ``params`` applied, as a
    scene dict of [[vortons]], [[tracers]], [[bodies]] and [[emitters]] blocks.  Building it
    gives a simulation equivalent to ``vortonpy.scenes.NAME(**params)``: the same particles,
    counts, bodies and parameters (the random noise and tracer positions are drawn anew)."""
    from . import scenes as S
    from .cli import DEFAULT_FRAMES, FALLBACK_FRAMES, SCENE_VIEW
    p, sim_kw = _scene_params(name, params)
    fn = S.SCENES[name]
    doc = " ".join((fn.__doc__ or "").split())
    spec: Dict[str, Any] = {"format": FORMAT_VERSION, "name": name, "description": doc, "seed": p.get("seed", 0)}
    sim: Dict[str, Any] = {}
    V: List[Dict[str, Any]] = []
    T: List[Dict[str, Any]] = []
    B: List[Dict[str, Any]] = []
    E: List[Dict[str, Any]] = []
    nt = p.get("tracers", 0)
    if name in ("vortex_ring", "jet_ring"):
        sim.update(viscosity=0.0 if name == "vortex_ring" else 0.01, gravity=[0.0, 0.0, 0.0])
        if name == "vortex_ring":
            V.append(dict(kind="ring", center=[0.0, 0.0, 0.0], ring_radius=p["ring_radius"], core=p["core"],
                          circulation=p["circulation"], **({"spacing": p["spacing"]} if p["spacing"] else {})))
            if nt:
                T.append(dict(kind="ring", ring_radius=p["ring_radius"], spread=1.5 * p["core"], count=nt))
        else:
            for k in range(p["rings"]):
                V.append(dict(kind="ring", center=[0.0, 0.0, -k * p["gap"]], ring_radius=p["ring_radius"],
                              core=p["core"], circulation=p["circulation"]))
            if nt:
                L = (p["rings"] - 1) * p["gap"]
                T.append(dict(kind="cylinder", center=[0.0, 0.0, -L / 2], radius=1.2 * p["ring_radius"], length=L,
                              count=nt))
    elif name == "vortex_tube":
        sim.update(viscosity=0.01, gravity=[0.0, 0.0, 0.0])
        c = p["core"]
        V.append(dict(kind="tube", length=p["length"], core=c, circulation=p["circulation"],
                      spacing=p["spacing"] or c / 2))
        if nt:
            L = p["length"]
            T.append(dict(kind="box", lo=[-2 * c, -2 * c, -L / 4], hi=[2 * c, 2 * c, L / 4], count=nt))
    elif name == "crossed_tubes":
        sim.update(viscosity=0.01, gravity=[0.0, 0.0, 0.0])
        s = p["separation"]
        for center, d in (([0.0, 0.0, -s / 2], [1.0, 0.0, 0.0]), ([0.0, 0.0, s / 2], [0.0, 1.0, 0.0])):
            V.append(dict(kind="tube", center=center, direction=d, length=p["length"], core=p["core"],
                          circulation=p["circulation"], spacing=p["core"] / 2))
        if nt:
            T.append(dict(kind="box", lo=[-1.0, -1.0, -0.6], hi=[1.0, 1.0, 0.6], count=nt))
    elif name == "ball_through_smoke":
        sim.update(viscosity=0.01, gravity=[0.0, 0.0, -10.0])
        lo, hi = _half([float(x) for x in p["box"]])
        V.append(dict(kind="box", lo=lo, hi=hi, count=p["vortons"], noise=p["noise"]))
        if nt:
            T.append(dict(kind="box", lo=lo, hi=hi, count=nt))
        B.append(dict(position=[lo[0], 0.0, 0.0], velocity=[p["speed"], 0.0, 0.0], radius=p["ball_radius"],
                      mass=p["ball_mass"], gravity=False))
    elif name == "spinning_ball":
        sim.update(viscosity=0.01, gravity=[0.0, 0.0, -10.0])
        V.append(dict(kind="box", lo=[-0.5] * 3, hi=[0.5] * 3, spacing=1.0 / p["per_axis"], noise=p["noise"]))
        if nt:
            T.append(dict(kind="box", lo=[-0.5] * 3, hi=[0.5] * 3, count=nt))
        B.append(dict(position=[0.0, 0.0, 0.0], radius=p["ball_radius"], mass=p["ball_mass"], gravity=False,
                      angular_impulse=[0.0, 0.0, p["torque"]]))
    elif name == "dye_drop":
        sim.update(viscosity=0.01)
        L = 1.6 * p["drop_radius"]
        V.append(dict(kind="box", lo=[-L] * 3, hi=[L] * 3, spacing=2 * L / p["per_axis"],
                      regions=[dict(shape="sphere", center=[0.0, 0.0, 0.0], radius=p["drop_radius"],
                                    density=p["deviation"])]))
        if nt:
            T.append(dict(kind="ball", radius=p["drop_radius"], count=nt, density=p["deviation"]))
    elif name == "two_drops":
        sim.update(viscosity=0.01)
        off, dev, r = p["offset"], p["deviation"], p["drop_radius"]
        lo = np.array([-1.2, -1.2, -off - 1.2])
        h = float(np.min((-lo - lo) / np.asarray(p["per_axis"])))
        V.append(dict(kind="box", lo=lo.tolist(), hi=(-lo).tolist(), spacing=h, regions=[
            dict(shape="sphere", center=[0.0, 0.0, -off], radius=r, density=-dev),
            dict(shape="sphere", center=[0.0, 0.0, off], radius=r, density=dev)]))
        if nt:
            T.append(dict(kind="ball", center=[0.0, 0.0, -off], radius=r, count=nt // 2, density=-dev))
            T.append(dict(kind="ball", center=[0.0, 0.0, off], radius=r, count=nt - nt // 2, density=dev))
    elif name == "stratified":
        sim.update(viscosity=0.01)
        dev = p["deviation"]
        layers = dict(density=-dev, regions=[dict(shape="halfspace", axis="z", below=0.0, density=dev)])
        V.append(dict(kind="box", lo=[-1.0] * 3, hi=[1.0] * 3, count=p["vortons"], **layers))
        if nt:
            T.append(dict(kind="box", lo=[-1.0] * 3, hi=[1.0] * 3, count=nt, **layers))
        rho0 = float(sim_kw.get("ambient_density", 1.0))
        B.append(dict(position=[0.0, 0.0, p["ball_height"]], radius=p["ball_radius"],
                      mass=rho0 * 4 / 3 * np.pi * p["ball_radius"] ** 3))
    elif name == "hot_ball":
        dt = sim_kw.get("dt", 1 / 30)
        sim.update(viscosity=0.01, vorton_lifetime=p["lifetime_frames"] * dt,
                   tracer_lifetime=p["lifetime_frames"] * dt)
        half = p["box"] / 2
        h = (p["box"] ** 3 / p["vortons"]) ** (1 / 3)
        V.append(dict(kind="box", lo=[-half] * 3, hi=[half] * 3, spacing=h, noise=p["noise"]))
        if nt:
            T.append(dict(kind="box", lo=[-half] * 3, hi=[half] * 3, count=nt))
        E.append(dict(center=[0.0, 0.0, 0.0], half_size=[half] * 3, vorton_rate=p["vorton_rate"],
                      tracer_rate=p["tracer_rate"], vorton_radius=S.radius_for_spacing(h), vorticity=p["noise"]))
        B.append(dict(position=[0.0, 0.0, 0.0], radius=p["ball_radius"], fixed=True, temperature=p["temperature"],
                      thermal_conductivity=0.2, heat_capacity=1e5))
    else:  # a scene added later without a block description: fall back to the base form
        spec["scene"] = dict(base=name, **{k: v for k, v in params.items() if k not in SIM_KEYS})
    if name in ("jet_ring", "dye_drop", "two_drops", "spinning_ball", "hot_ball"):
        sim.update(S.REMESH)  # these scenes remesh their vortons (see vortonpy.scenes.REMESH)
    if name == "hot_ball":
        sim.update(remesh_interval=10)  # its emitters keep adding unordered vortons
    sim.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in sim_kw.items()})
    spec["sim"] = sim
    view, color = SCENE_VIEW.get(name, ("xz", "density"))
    spec["run"] = dict(frames=DEFAULT_FRAMES.get(name, FALLBACK_FRAMES), view=view, color=color)
    for k, v in (("vortons", V), ("tracers", T), ("bodies", B), ("emitters", E)):
        if v:
            spec[k] = v
    return spec


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
