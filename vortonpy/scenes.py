"""The seeds' scenes, ready to step, plus classic vortex flows.

Every scene is a function returning a :class:`vortonpy.Sim`; its keyword arguments change
the scene, and any other keyword goes to ``Sim(...)`` (``threads=1``, ``solver="direct"``,
``viscosity=0.02``, ...).  A misspelt keyword raises ``TypeError`` naming the nearest valid
one.

Each scene is defined once, here, as the blocks of a scene file (vortonpy.scene_files):
``vp.scenes.dye_drop.spec(per_axis=12)`` is that description, ``vp.scenes.to_toml("dye_drop",
path)`` writes it, and the command line reads ``vp.scenes.dye_drop.info`` (description,
parameters with their defaults and units, frames, view) for ``vortonpy list`` and
``vortonpy params dye_drop``.

Particle sizing: vortons sit on a lattice of spacing h and get the core radius
s = h (3 / 4 pi)^(1/3), so that their volumes 4/3 pi s^3 tile space exactly (V = h^3).  Then
sum w V is the true integral of vorticity, densities splat to the right mass, and PSE sees
overlapping particles (its kernel width is the spacing).  The seeds used s = h/2; their
volumes covered only 52% of space.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import parameters as _parameters
from . import scene_files as _files
from ._shapes import RADIUS_PER_SPACING, lattice, radius_for_spacing, ring_vortons
from ._sim import Sim
from .scene_files import build, dumps_toml, from_toml, read_toml, scene_spec, to_toml

__all__ = ["vortex_ring", "jet_ring", "vortex_tube", "crossed_tubes", "ball_through_smoke", "spinning_ball",
           "dye_drop", "two_drops", "stratified", "linear_stratification", "hot_ball", "SCENES", "SceneInfo",
           "SceneParameter", "REMESH", "INVARIANTS",
           "lattice", "radius_for_spacing", "ring_vortons", "RADIUS_PER_SPACING", "from_toml", "to_toml", "read_toml",
           "scene_spec", "build", "dumps_toml"]

#: Scenes with strong stretching or sharp density fronts remesh their vortons onto a lattice
#: every 20 frames (csrc/remesh.c) and use a velocity grid no finer than the vortons' spacing
#: (grid_cells_per_vorton=1).  Without both, the particle noise these flows build up is
#: amplified by stretching until a step blows up (dye_drop at frame ~110, jet_ring ~90,
#: hot_ball ~360, spinning_ball ~120 with the default finer grid): a grid finer than the
#: vortons resolves velocity gradients at scales the particles cannot represent.  Pass
#: remesh_interval=0, grid_cells_per_vorton=4 to see the raw particle method.
REMESH = dict(remesh_interval=20, remesh_threshold=0.05, grid_cells_per_vorton=1.0)

_NO_GRAVITY = dict(gravity=[0.0, 0.0, 0.0])

#: Free vortex flows (the ring scenes) keep their invariants with a second velocity solve a step
#: (``integrator="rk2"``: the field of the step's midpoint, not of its start) and the transpose
#: stretching form: two leapfrogging rings keep their impulse to 0.3% over 10 s at dt = 1/30,
#: where one solve a step and the classical form gain 22% (docs/method.md, "Time stepping").
#: The second solve about doubles the velocity phase.
INVARIANTS = dict(integrator="rk2", stretch_form="transpose")


@dataclass(frozen=True)
class SceneParameter:
    """One keyword argument of a scene: its default, unit (simulation units, ``""`` for a
    count or a pure number), the values it takes (``kind``: ``"num"`` any finite number,
    ``"pos"`` positive, ``"nonneg"``, ``"count"`` an integer >= 0, ``"vec3"`` three numbers;
    ``None`` is also taken where it is the default) and a one-line meaning."""

    name: str
    default: Any
    unit: str
    kind: str
    doc: str


@dataclass(frozen=True)
class SceneInfo:
    """What the command line and the scene files read about a scene: its name, the first
    paragraph of its docstring (``description``), its parameters, and how ``vortonpy run``
    shows it (``frames`` steps, ``view`` projection, ``color`` of the smoke)."""

    name: str
    description: str
    parameters: Tuple[SceneParameter, ...]
    frames: int
    view: str
    color: str

    def parameter(self, name: str) -> SceneParameter:
        """The scene parameter ``name`` (``KeyError`` naming the nearest one if none)."""
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}"
                       f"{_parameters.suggest(name, [p.name for p in self.parameters])}")

    def keywords(self) -> Tuple[str, ...]:
        """Every keyword the scene takes: its own parameters, then the Sim parameters."""
        return tuple(p.name for p in self.parameters) + _parameters.names()


#: name -> scene function, in the order ``vortonpy list`` shows them.
SCENES: Dict[str, Callable[..., Sim]] = {}

_SEED = SceneParameter("seed", 0, "", "int", "seed of the random vortex noise and tracer placement")


def _plain(v):
    """A value as the scene dicts hold it (TOML-writable): lists for tuples and arrays."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (tuple, list, np.ndarray)):
        return [_plain(x) for x in v]
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _description(doc: Optional[str]) -> str:
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def scene(*, frames: int, view: str = "xz", color: str = "density", params: Dict[str, Tuple[str, str, str]]):
    """Make a scene from a function returning its blocks.

    The decorated function takes the scene's parameters (each documented in ``params`` as
    ``name: (unit, kind, doc)``), and optionally ``sim``: the Sim keywords in effect (the
    parameters' defaults with the caller's overrides), for values derived from them.  It
    returns a dict of ``sim`` (the scene's own Sim keywords), ``vortons``, ``tracers``,
    ``bodies`` and ``emitters`` blocks, as in a scene file.  The scene function built from it
    takes those parameters, ``seed`` and any Sim keyword, and returns the built Sim; its
    ``spec(...)`` returns the whole scene dict and its ``info`` a :class:`SceneInfo`."""

    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name != "sim"]
        names = [p.name for p in own]
        if set(names) != set(params):
            raise TypeError(f"{fn.__name__}: params must document exactly {names}, got {sorted(params)}")
        plist = tuple(SceneParameter(p.name, p.default, *params[p.name]) for p in own) + (_SEED,)
        info = SceneInfo(fn.__name__, _description(fn.__doc__), plist, frames, view, color)
        public = inspect.Signature(
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default) for p in plist]
            + [inspect.Parameter("sim_kw", inspect.Parameter.VAR_KEYWORD)], return_annotation=Sim)
        wants_sim = "sim" in sig.parameters

        def prepare(args, kwargs) -> Tuple[Dict[str, Any], Dict[str, Any]]:
            """The scene dict for these arguments, and the scene parameters given."""
            try:
                bound = public.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{fn.__name__}(): {e}") from None
            given = {k: v for k, v in bound.arguments.items() if k != "sim_kw"}
            given.update(bound.arguments.get("sim_kw", {}))
            bound.apply_defaults()
            values = dict(bound.arguments)
            sim_kw = values.pop("sim_kw")
            for k in sim_kw:
                if k not in _parameters.names():
                    raise TypeError(f"{fn.__name__}() got an unexpected keyword argument {k!r}"
                                    f"{_parameters.suggest(k, info.keywords())}")
            for p in plist:
                v = values[p.name]
                if not (v is None and p.default is None):
                    try:
                        values[p.name] = _files._check(p.name, p.kind, _plain(v))
                    except ValueError as e:
                        raise ValueError(f"{fn.__name__}(): {e}") from None
            seed = values.pop("seed")
            if wants_sim:
                values["sim"] = {**{p.name: p.python_default for p in _parameters.PARAMETERS}, **sim_kw}
            body = fn(**values)
            out: Dict[str, Any] = {"format": _files.FORMAT_VERSION, "name": fn.__name__,
                                   "description": info.description, "seed": seed,
                                   "sim": _plain({**body.get("sim", {}), **sim_kw}),
                                   "run": dict(frames=frames, view=view, color=color)}
            for k in ("vortons", "tracers", "bodies", "emitters"):
                if body.get(k):
                    out[k] = _plain(body[k])
            return out, given

        @functools.wraps(fn)
        def make(*args, **kwargs) -> Sim:
            spec, given = prepare(args, kwargs)
            try:
                return _files._build(_files.validate(spec, source=fn.__name__), sim_errors_as_is=True)
            except ValueError as e:  # a block that the given values made invalid
                args_text = ", ".join(f"{k}={v!r}" for k, v in given.items())
                raise ValueError(f"{fn.__name__}({args_text}): {e}") from None

        def public_spec(*args, **kwargs) -> Dict[str, Any]:
            """The scene dict these arguments give (what to_toml writes and build builds)."""
            return prepare(args, kwargs)[0]

        make.__signature__ = public
        del make.__wrapped__  # the signature is the public one above, not the blocks function's
        make.spec = public_spec
        make.info = info
        SCENES[fn.__name__] = make
        _files.register_scene(fn.__name__, make)
        return make

    return decorate


_RING = dict(ring_radius=("length", "pos", "radius R of the ring"),
             core=("length", "pos", "radius sigma of the ring's Gaussian core"),
             circulation=("length^2/time", "num", "circulation Gamma of the ring"))
_TRACERS = ("", "count", "number of smoke tracers")
_BALL = dict(ball_radius=("length", "pos", "radius of the ball"))


@scene(frames=300, view="xz", color="speed",
       params=dict(_RING, spacing=("length", "pos", "lattice spacing of the vortons (None: core / 2)"),
                   tracers=_TRACERS))
def vortex_ring(ring_radius=1.0, core=0.2, circulation=1.0, spacing=None, tracers=20000):
    """A vortex ring with a Gaussian core (radius ``core``) travelling along +z, with smoke
    tracers in its core.  Saffman's speed: G/(4 pi R) (ln(8R/sg_eff) - 0.558).

    Inviscid and never remeshed (the raw particle method, for validation): it holds its
    shape for about 2000 frames, after which the particle noise grows and a run fails near
    frame 6400.  Remeshing and a viscosity keep long runs bounded: with
    ``viscosity=0.01, **scenes.REMESH`` (as ``jet_ring`` uses) it ran 8000 frames, though over
    that time the ring diffuses away and remeshing spreads it onto ~7.7e4 lattice vortons."""
    ring = dict(kind="ring", center=[0.0, 0.0, 0.0], ring_radius=ring_radius, core=core, circulation=circulation)
    if spacing:
        ring["spacing"] = spacing
    out = dict(sim=dict(viscosity=0.0, **_NO_GRAVITY, **INVARIANTS), vortons=[ring])
    if tracers:
        out["tracers"] = [dict(kind="ring", ring_radius=ring_radius, spread=1.5 * core, count=tracers)]
    return out


@scene(frames=200, view="xz", color="speed",
       params=dict(_RING, rings=("", "count", "number of rings"),
                   gap=("length", "nonneg", "distance between neighbouring rings along z"), tracers=_TRACERS))
def jet_ring(ring_radius=0.5, core=0.1, circulation=1.0, rings=3, gap=0.6, tracers=20000):
    """A jet: a train of coaxial vortex rings, the later ones catching and leapfrogging the first.

    The fluid is given a little viscosity (0.01): with none, classical stretching of the
    vortons' (not exactly divergence-free) vorticity grows without bound once the rings
    interact closely (frame ~80), a known weakness of vortex particle methods without
    remeshing or divergence filtering."""
    out = dict(sim=dict(viscosity=0.01, **REMESH, **_NO_GRAVITY, **INVARIANTS),
               vortons=[dict(kind="ring", center=[0.0, 0.0, -k * gap], ring_radius=ring_radius, core=core,
                             circulation=circulation) for k in range(rings)])
    if tracers and rings:
        length = (rings - 1) * gap
        out["tracers"] = [dict(kind="cylinder", center=[0.0, 0.0, -length / 2], radius=1.2 * ring_radius,
                               length=length, count=tracers)]
    return out


_TUBE = dict(length=("length", "pos", "length of the tube"),
             core=("length", "pos", "radius sigma of the Gaussian core"),
             circulation=("length^2/time", "num", "circulation Gamma of the tube"))


@scene(frames=300, view="xy", color="speed",
       params=dict(_TUBE, spacing=("length", "pos", "lattice spacing of the vortons (None: core / 2)"),
                   tracers=_TRACERS))
def vortex_tube(length=4.0, core=0.3, circulation=1.0, spacing=None, tracers=20000):
    """A straight vortex tube along z with a Gaussian (Lamb-Oseen) core; its middle diffuses
    like a Lamb-Oseen vortex, s^2 = s0^2 + 4 nu t."""
    out = dict(sim=dict(viscosity=0.01, **_NO_GRAVITY),
               vortons=[dict(kind="tube", length=length, core=core, circulation=circulation,
                             spacing=spacing or core / 2)])
    if tracers:
        c = core
        out["tracers"] = [dict(kind="box", lo=[-2 * c, -2 * c, -length / 4], hi=[2 * c, 2 * c, length / 4],
                               count=tracers)]
    return out


@scene(frames=300, view="xz", color="speed",
       params=dict(_TUBE, separation=("length", "nonneg", "distance between the tubes' axes"), tracers=_TRACERS))
def crossed_tubes(length=3.0, core=0.2, circulation=1.0, separation=0.5, tracers=20000):
    """Two perpendicular vortex tubes passing close to each other: they bend, stretch and
    reconnect (part 3's crossed tubes)."""
    s = separation
    out = dict(sim=dict(viscosity=0.01, **_NO_GRAVITY),
               vortons=[dict(kind="tube", center=center, direction=d, length=length, core=core,
                             circulation=circulation, spacing=core / 2)
                        for center, d in (([0.0, 0.0, -s / 2], [1.0, 0.0, 0.0]), ([0.0, 0.0, s / 2], [0.0, 1.0, 0.0]))])
    if tracers:
        out["tracers"] = [dict(kind="box", lo=[-1.0, -1.0, -0.6], hi=[1.0, 1.0, 0.6], count=tracers)]
    return out


_NOISE = ("1/time", "nonneg", "magnitude of the random-direction vorticity (vortex noise)")


@scene(frames=300, params=dict(speed=("length/time", "num", "the ball's launch speed along +x"), **_BALL,
                               ball_mass=("mass", "pos", "mass of the ball"), noise=_NOISE,
                               vortons=("", "posint", "number of vortons on a lattice filling the box"),
                               tracers=_TRACERS, box=("length", "vec3", "size (x, y, z) of the box of smoke")))
def ball_through_smoke(speed=5.0, ball_radius=0.2, ball_mass=0.2, noise=0.5, vortons=512, tracers=100000,
                       box=(4.0, 0.5, 0.5)):
    """Part 4's main scene: a ball shot at ``speed`` along +x through a 4 x 0.5 x 0.5 box of
    smoke and weak vortex noise.  The fluid slows it (figure 5).  The ball's gravity is off,
    as in the seeds.  The vortons are remeshed every 5 frames: the ball's boundary layer
    leaves new ones behind it at every step.  The ball crosses three lattice cells a step, so
    the vortons move with the step's midpoint field (``integrator="rk2"``): with the field of
    the step's start, fluid + ball gain 10% of the ball's momentum over the passage."""
    hi = [x / 2 for x in box]
    lo = [-x for x in hi]
    out = dict(sim=dict(viscosity=0.01, gravity=[0.0, 0.0, -10.0], remesh_interval=5, integrator="rk2"),
               vortons=[dict(kind="box", lo=lo, hi=hi, count=vortons, noise=noise)],
               bodies=[dict(position=[lo[0], 0.0, 0.0], velocity=[speed, 0.0, 0.0], radius=ball_radius,
                            mass=ball_mass, gravity=False)])
    if tracers:
        out["tracers"] = [dict(kind="box", lo=lo, hi=hi, count=tracers)]
    return out


@scene(frames=300, view="xy", color="speed",
       params=dict(torque=("mass length^2/time", "num", "angular impulse given to the ball about z"), **_BALL,
                   ball_mass=("mass", "pos", "mass of the ball"), noise=_NOISE,
                   per_axis=("", "posint", "vortons along each axis of the 1^3 box"), tracers=_TRACERS))
def spinning_ball(torque=10.0, ball_radius=0.2, ball_mass=100.0, noise=0.5, per_axis=16, tracers=50000):
    """Part 4's spinning ball: a heavy ball in a 1^3 box of noise, given an impulsive torque
    (0, 0, ``torque``); it spins the fluid up and itself down."""
    box = dict(lo=[-0.5] * 3, hi=[0.5] * 3)
    out = dict(sim=dict(viscosity=0.01, **REMESH, gravity=[0.0, 0.0, -10.0]),
               vortons=[dict(kind="box", **box, spacing=1.0 / per_axis, noise=noise)],
               bodies=[dict(position=[0.0, 0.0, 0.0], radius=ball_radius, mass=ball_mass, gravity=False,
                            angular_impulse=[0.0, 0.0, torque])])
    if tracers:
        out["tracers"] = [dict(kind="box", **box, count=tracers)]
    return out


_DEVIATION = ("mass/length^3", "num", "density deviation of the drop from the ambient fluid")


@scene(frames=300, params=dict(deviation=_DEVIATION, drop_radius=("length", "pos", "radius of the drop"),
                               per_axis=("", "posint", "vortons along each axis of the box around the drop"),
                               tracers=_TRACERS))
def dye_drop(deviation=1.0, drop_radius=1.0, per_axis=16, tracers=50000):
    """Part 8: a ball of heavy dyed fluid (density deviation +1) in still fluid; it sinks and
    rolls up into a vortex ring."""
    L = 1.6 * drop_radius
    out = dict(sim=dict(viscosity=0.01, **REMESH),
               vortons=[dict(kind="box", lo=[-L] * 3, hi=[L] * 3, spacing=2 * L / per_axis,
                             regions=[dict(shape="sphere", center=[0.0, 0.0, 0.0], radius=drop_radius,
                                           density=deviation)])])
    if tracers:
        out["tracers"] = [dict(kind="ball", radius=drop_radius, count=tracers, density=deviation)]
    return out


@scene(frames=300, params=dict(deviation=("mass/length^3", "num", "density deviation of each drop (light -, heavy +)"),
                               drop_radius=("length", "pos", "radius of each drop"),
                               offset=("length", "nonneg", "height of the drops' centres below and above the middle"),
                               per_axis=("", "vec3", "vortons along x, y and z of the box around the drops"),
                               tracers=_TRACERS))
def two_drops(deviation=0.9, drop_radius=0.6, offset=2.0, per_axis=(10, 10, 24), tracers=40000):
    """Part 8's two drops: a light one (-0.9) two units below the middle rises while a heavy
    one (+0.9) two units above sinks; they pass each other."""
    lo = np.array([-1.2, -1.2, -offset - 1.2])
    h = float(np.min((-lo - lo) / np.asarray(per_axis)))
    out = dict(sim=dict(viscosity=0.01, **REMESH),
               vortons=[dict(kind="box", lo=lo, hi=-lo, spacing=h, regions=[
                   dict(shape="sphere", center=[0.0, 0.0, -offset], radius=drop_radius, density=-deviation),
                   dict(shape="sphere", center=[0.0, 0.0, offset], radius=drop_radius, density=deviation)])])
    if tracers:
        out["tracers"] = [
            dict(kind="ball", center=[0.0, 0.0, -offset], radius=drop_radius, count=tracers // 2, density=-deviation),
            dict(kind="ball", center=[0.0, 0.0, offset], radius=drop_radius, count=tracers - tracers // 2,
                 density=deviation)]
    return out


_STILL = ("", "count", "number of still vortons of the layers' own fluid on a lattice filling the 2^3 box "
                      "(fluid for body_coupling='articles' to push; the physical coupling makes its own)")


def _ball(height, radius, density):
    """A ball of the given density released at rest at ``height`` on the z axis; it does not
    conduct heat (a ball at the reference temperature 1 would warm the layers below it)."""
    return dict(position=[0.0, 0.0, height], radius=radius, mass=density * (4 / 3 * np.pi * radius ** 3),
                thermal_conductivity=0.0)


def _layered_box(vortons, tracers):
    """Still vortons and tracers of the ambient fluid in the box [-1, 1]^3 (density 0: each
    takes the ambient of its height)."""
    box = dict(lo=[-1.0] * 3, hi=[1.0] * 3)
    out = {}
    if vortons:
        out["vortons"] = [dict(kind="box", **box, count=vortons)]
    if tracers:
        out["tracers"] = [dict(kind="box", **box, count=tracers)]
    return out


@scene(frames=300, params=dict(deviation=("mass/length^3", "num", "density of each layer less ambient_density "
                                                                  "(+ below, - above)"),
                               interface=("length", "pos", "thickness of the interface at z = 0"), **_BALL,
                               ball_height=("length", "num", "height the ball is released at"),
                               ball_density=("mass/length^3", "pos", "density of the ball (None: the interface's, "
                                                                     "neutral there)"),
                               vortons=_STILL, tracers=_TRACERS))
def stratified(deviation=0.6, interface=0.1, ball_radius=0.2, ball_height=0.5, ball_density=None, vortons=0,
               tracers=30000, *, sim):
    """Part 9, figure 3: a stratified ambient of two layers, heavy (+0.6) below and light
    (-0.6) above a thin interface at z = 0, and a neutrally buoyant ball (the interface's
    density) released above it: it sinks through the light layer, overshoots into the heavy
    one, is buoyed back and settles at the interface, where the fluid is as dense as it is.

    The layers are the ambient fluid (``stratification``): they stay at rest, and the fluid
    the ball drags out of its layer is pulled back.  The vortons are remeshed every 20
    frames (the ball's wake keeps making new ones)."""
    rho0 = sim["ambient_density"]
    layers = [[-interface / 2, rho0 + deviation], [interface / 2, rho0 - deviation]]
    density = rho0 if ball_density is None else ball_density
    return dict(sim=dict(viscosity=0.01, stratification=layers, **REMESH), **_layered_box(vortons, tracers),
                bodies=[_ball(ball_height, ball_radius, density)])


@scene(frames=300, params=dict(gradient=("mass/length^4", "pos", "|d rho / dz| of the ambient's linear profile"),
                               depth=("length", "pos", "the profile is linear from -depth to +depth, constant beyond"),
                               **_BALL, displacement=("length", "num", "height the ball starts at above its level "
                                                                       "(None: one ball radius)"),
                               vortons=_STILL, tracers=_TRACERS))
def linear_stratification(gradient=1.0, depth=0.8, ball_radius=0.2, displacement=None, vortons=0, tracers=30000,
                          *, sim):
    """A neutrally buoyant ball in a linearly stratified ambient, displaced one radius above
    its level: buoyancy pulls it back and it oscillates about its level at about
    N sqrt(M / (M + rho V / 2)) (N^2 = g |d rho / dz| / rho0, the Brunt-Vaisala frequency,
    corrected for the fluid the ball moves with), losing its energy to the internal waves and
    the wake it makes.

    The profile passes through ambient_density at z = 0 with slope -``gradient`` (densities
    must stay positive: ``gradient * depth < ambient_density``).  The vortons are remeshed
    every 20 frames."""
    rho0 = sim["ambient_density"]
    layers = [[-depth, rho0 + gradient * depth], [depth, rho0 - gradient * depth]]
    dz = ball_radius if displacement is None else displacement
    return dict(sim=dict(viscosity=0.01, stratification=layers, **REMESH), **_layered_box(vortons, tracers),
                bodies=[_ball(dz, ball_radius, rho0)])


@scene(frames=300, color="temperature",
       params=dict(temperature=("", "pos", "the ball's temperature (the ambient fluid is 1)"), **_BALL,
                   box=("length", "pos", "edge of the cube of noise around the ball"),
                   vortons=("", "posint", "number of vortons on a lattice filling the cube"), noise=_NOISE,
                   vorton_rate=("1/time", "nonneg", "vortons emitted per unit time"),
                   tracer_rate=("1/time", "nonneg", "tracers emitted per unit time"),
                   lifetime_frames=("frames", "nonneg", "particles live this many frames"),
                   tracers=("", "count", "number of tracers at the start")))
def hot_ball(temperature=10.0, ball_radius=0.2, box=0.5, vortons=512, noise=0.5, vorton_rate=100.0,
             tracer_rate=5000.0, lifetime_frames=300, tracers=5000, *, sim):
    """Part 10: a fixed hot ball (T = 10) inside a small box of noise that keeps emitting
    vortons and tracers; the fluid it heats expands, rises and rolls up into a pair of
    counter-rotating vortices.  Particles live ``lifetime_frames`` frames.  It remeshes every
    10 frames (the emitters keep adding randomly placed vortons; every 20 frames, a 1000-frame
    run blew up at frame ~710)."""
    h = (box ** 3 / vortons) ** (1 / 3)
    half = box / 2
    cube = dict(lo=[-half] * 3, hi=[half] * 3)
    lifetime = lifetime_frames * sim["dt"]
    out = dict(sim=dict(viscosity=0.01, **dict(REMESH, remesh_interval=10), vorton_lifetime=lifetime,
                        tracer_lifetime=lifetime),
               vortons=[dict(kind="box", **cube, spacing=h, noise=noise)],
               emitters=[dict(center=[0.0, 0.0, 0.0], half_size=[half] * 3, vorton_rate=vorton_rate,
                              tracer_rate=tracer_rate, vorton_radius=radius_for_spacing(h), vorticity=noise)],
               bodies=[dict(position=[0.0, 0.0, 0.0], radius=ball_radius, fixed=True, temperature=temperature,
                            thermal_conductivity=0.2, heat_capacity=1e5)])
    if tracers:
        out["tracers"] = [dict(kind="box", **cube, count=tracers)]
    return out
