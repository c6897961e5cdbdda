"""The Python face of the simulation: :class:`Sim` (wrapping the C core), particle views,
diagnostics, progress bars and exact save/load."""
from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from typing import Any, Dict, Optional

import numpy as np

from . import _core
from . import parameters as _parameters

FORMAT = "vortonpy-state"
FORMAT_VERSION = 1

# parameters a state of this format may hold that no longer exist (ignored on load)
_RETIRED_PARAMS = ("overlap",)


def _written_by() -> str:
    from . import __version__
    return __version__

# The per-particle arrays that make up the state (what save/load and the sorts carry);
# the other fields (temperature, strength) are derived from them.
_VORTON_STATE = ("position", "vorticity", "radius", "density", "age", "velocity")
_TRACER_STATE = ("position", "velocity", "density", "age")


class _Particles:
    """Live access to one kind of particle.  Each attribute read returns a NumPy view into the
    C arrays: write into it between steps to edit particles.

    A view keeps the memory it shows alive on its own: it stays valid after the ``Sim`` is
    deleted.  After particles are added or removed (``add_*``, emitters, lifetimes) a view
    taken earlier is *detached*: it still shows the values of the moment it was taken (and
    writes into it are harmless) but no longer tracks the simulation; read the attribute
    again for a fresh view."""

    _fields: tuple = ()

    def __init__(self, sim: "Sim", kind: str):
        self._sim = sim
        self._kind = kind

    def __len__(self) -> int:
        return self._sim._count(self._kind)

    def _get(self, field):
        return self._sim._view(self._kind, field)

    def _set(self, field, value):
        view = self._get(field)
        arr = np.asarray(value)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"{self._kind}.{field} must be numeric, got dtype {arr.dtype}")
        try:
            arr = np.broadcast_to(arr.astype(np.float64), view.shape)
        except ValueError:
            raise ValueError(f"{self._kind}.{field} must have shape {view.shape}, got {np.shape(value)}") from None
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{self._kind}.{field} must be finite")
        view[...] = arr

    def remove(self, mask) -> None:
        """Remove the particles where ``mask`` (bool, one per particle) is True."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (len(self),):
            raise ValueError(f"mask must have shape ({len(self)},), got {mask.shape}")
        self._sim._keep(self._kind, ~mask)

    def __repr__(self) -> str:
        return f"<{self._kind}: {len(self)} particles; fields {', '.join(self._fields)}>"


def _field(name, doc):
    return property(lambda self: self._get(name), lambda self, v: self._set(name, v), doc=doc)


class Vortons(_Particles):
    """The vortons (vortex particles): ``position`` (N,3), ``vorticity`` (N,3) [w, not angular
    velocity], ``radius`` (N,), ``density`` (N,) deviation from ambient, ``age`` (N,),
    ``velocity`` (N,3) of the last advection, and ``temperature`` (N,) derived from density.

    With a ``stratification`` a vorton keeps its parcel's density as it moves: ``density`` is
    that density less ``ambient_density`` (rho0), and the part that drives buoyancy is its
    difference from the ambient at the vorton's height, ``density + rho0 -
    sim.ambient_density_at(position)``."""

    _fields = ("position", "vorticity", "radius", "density", "age", "velocity", "temperature")
    position = _field("position", "(N, 3) positions (view)")
    vorticity = _field("vorticity", "(N, 3) vorticity w (view)")
    radius = _field("radius", "(N,) core radii s (view)")
    density = _field("density", "(N,) density deviation from ambient_density: the parcel's density less rho0 (view)")
    age = _field("age", "(N,) time since creation (view)")
    velocity = _field("velocity", "(N, 3) velocity of the last advection (view)")

    @property
    def temperature(self) -> np.ndarray:
        """(N,) temperature, rho0 / (rho0 + density) (ideal gas; ambient is 1).  A copy."""
        rho0 = self._sim.ambient_density
        return rho0 / (rho0 + self.density)

    @temperature.setter
    def temperature(self, T):
        T = np.asarray(T, dtype=np.float64)
        if not np.all(np.isfinite(T)) or np.any(T <= 0):
            raise ValueError("temperature must be finite and positive")
        rho0 = self._sim.ambient_density
        self._set("density", rho0 / T - rho0)

    @property
    def strength(self) -> np.ndarray:
        """(N, 3) strengths a = w V, V = 4/3 pi s^3.  A copy."""
        return self.vorticity * (4.0 / 3.0 * np.pi * self.radius ** 3)[:, None]


class Tracers(_Particles):
    """Passive tracers: ``position`` (N,3), ``velocity`` (N,3) of the last advection,
    ``density`` (N,) sampled from the fluid's density grid, ``age`` (N,).  Like the vortons'
    densities, a tracer's is the fluid's density there less ``ambient_density``: with a
    stratification it shows the layers."""

    _fields = ("position", "velocity", "density", "age", "temperature")
    position = _field("position", "(N, 3) positions (view)")
    velocity = _field("velocity", "(N, 3) velocity of the last advection (view)")
    density = _field("density", "(N,) density deviation sampled from the fluid (view)")
    age = _field("age", "(N,) time since creation (view)")

    @property
    def temperature(self) -> np.ndarray:
        """(N,) temperature of the fluid at each tracer (a copy)."""
        rho0 = self._sim.ambient_density
        return rho0 / np.maximum(rho0 + self.density, 1e-12 * rho0)


class RigidBody(_core.RigidBody):
    __doc__ = _core.RigidBody.__doc__
    __slots__ = ("__weakref__",)  # no per-instance dict: assigning a misspelt attribute raises

    def __repr__(self) -> str:
        p, v = self.position, self.velocity
        kind = "fixed" if self.fixed else f"mass={self.mass:g}"
        return (f"RigidBody(position=({p[0]:.4g}, {p[1]:.4g}, {p[2]:.4g}), velocity=({v[0]:.4g}, {v[1]:.4g}, "
                f"{v[2]:.4g}), radius={self.radius:g}, {kind}, temperature={self.temperature:.4g})")

    def _state(self) -> Dict[str, Any]:
        return dict(position=self.position, momentum=self.momentum, angular_momentum=self.angular_momentum,
                    velocity=self.velocity, angular_velocity=self.angular_velocity, orientation=self.orientation,
                    radius=self.radius, mass=self.mass, temperature=self.temperature,
                    thermal_conductivity=self.thermal_conductivity, heat_capacity=self.heat_capacity,
                    fixed=self.fixed, gravity=self.gravity, fluid_impulse=self.fluid_impulse,
                    fluid_angular_impulse=self.fluid_angular_impulse, heat_received=self.heat_received)


def _want_progress(progress) -> bool:
    if progress is not None:
        return bool(progress)
    if os.environ.get("CI") or os.environ.get("VORTONPY_NO_PROGRESS"):
        return False
    try:
        return sys.stderr.isatty() or "ipykernel" in sys.modules
    except Exception:
        return False


class Sim(_core.Sim):
    """A vorton fluid simulation.

    ``Sim(dt=1/30, viscosity=0.01, thermal_diffusivity=1e-4, ambient_density=1.0,
    gravity=(0, 0, -10), solver="auto", threads=None, ...)``: every parameter below is a
    keyword argument and an attribute of the same name (read and write; a value outside its
    range raises ``ValueError`` naming the parameter and the range, and changes nothing).
    Gravity is on by default.

    ``solver`` is ``"direct"`` (O(N^2) reference), ``"tree"`` (supervorton hierarchy, accuracy
    set by ``tree_theta``), ``"poisson"`` (vortex-in-cell with free-space boundaries: FFT
    convolution on the grid; faster than the tree from about 1e3 vortons, smoother near vortex
    cores) or ``"auto"`` (poisson from 1000 vortons up, the tree below).
    ``threads=None`` uses every core.  With ``rollback=True`` every step first copies the
    state, and a step that raises ``FloatingPointError`` leaves the simulation exactly as it
    was before that step.  A step whose largest velocity gradient times dt exceeds
    ``max_rate_dt`` is taken as up to ``max_substeps`` shorter substeps (``sim.substeps``).
    Diffusion (PSE) is explicit: where ``4 max(viscosity, thermal_diffusivity) dt / spacing^2``
    exceeds 1 it runs as that many exchanges of a shorter dt (read ``diffusion_substeps``
    after a step; up to 16, each costing a full PSE pass), so a fine lattice with a large
    viscosity is correct but slower.  With the tree solver, ``sim.timings["domain"]``
    includes building the tree.

    ``stratification=[(z0, rho0), (z1, rho1), ...]`` makes the ambient fluid layered: its
    density is piecewise linear in the height along -gravity through those points and
    constant beyond the ends (``sim.ambient_density_at(points)`` evaluates it); the ambient
    at rest stays at rest, a parcel moved out of its layer is pulled back, and bodies are
    buoyed by the layers they displace.  ``ambient_density`` stays the reference density of
    the Boussinesq terms and of the stored densities; a density given to ``add_vortons``,
    ``add_tracers`` or an emitter is a deviation from the ambient where the particle is
    (0 adds ambient fluid of that height).

    Calls on one ``Sim`` from several threads at once are refused with ``RuntimeError``;
    separate ``Sim`` objects step concurrently (the GIL is released inside ``step``).
    Assigning an attribute ``Sim`` does not have raises ``AttributeError`` naming the nearest
    one it has.
    """

    # No per-instance dict: a misspelt attribute (sim.viscocity = 1) raises instead of being
    # stored; the particle accessors are made on first use.
    __slots__ = ("_vortons", "_tracers", "__weakref__")

    @property
    def vortons(self) -> Vortons:
        """The vortons; attributes are live NumPy views (see :class:`Vortons`)."""
        try:
            return self._vortons
        except AttributeError:
            self._vortons = Vortons(self, "vortons")
            return self._vortons

    @property
    def tracers(self) -> Tracers:
        """The passive tracers; attributes are live NumPy views (see :class:`Tracers`)."""
        try:
            return self._tracers
        except AttributeError:
            self._tracers = Tracers(self, "tracers")
            return self._tracers

    def step(self, steps: int = 1, progress: Optional[bool] = None, callback=None, every: int = 1) -> "Sim":
        """Advance ``steps`` steps of ``dt``.  The GIL is released inside; Ctrl-C stops between
        steps, leaving the state of the last completed step.  A progress bar (tqdm) is shown
        for long runs when a person is watching (a terminal or Jupyter), never in CI;
        ``progress=True/False`` forces it.  ``callback(sim)`` runs every ``every`` steps.
        Raises ``FloatingPointError`` naming the frame and phase if a value becomes
        non-finite."""
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
            raise TypeError(f"steps must be an int, got {type(steps).__name__}")
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        if every < 1:
            raise ValueError("every must be >= 1")
        show = steps > 1 and _want_progress(progress)
        if not show and callback is None:
            self._step(int(steps))
            return self
        bar = None
        if show:
            from tqdm.auto import tqdm
            bar = tqdm(total=int(steps), unit="step", leave=False)
        try:
            chunk = every if callback is not None else max(1, int(steps) // 100)
            done = 0
            while done < steps:
                k = min(chunk, steps - done)
                self._step(int(k))
                done += k
                if bar is not None:
                    bar.update(k)
                if callback is not None and done % every == 0:
                    callback(self)
        finally:
            if bar is not None:
                bar.close()
        return self

    def diagnostics(self, origin=None) -> Dict[str, Any]:
        """Conserved and monitored quantities of the flow and the bodies.

        ``circulation`` sum a_i (3,); ``linear_impulse`` 1/2 sum x x a (3,) and
        ``angular_impulse`` 1/3 sum x x (x x a) (3,), about ``origin`` (default 0); ``enstrophy``;
        ``heat``, the heat above the ambient's, sum C V (T - 1) over the vortons plus
        sum Cb (Tb - 1) over the bodies (the total that conduction, diffusion and remeshing
        conserve: ambient fluid adds nothing, whether a vorton carries it or not);
        ``fluid_heat`` (its vortons' part); ``mass_deviation`` sum d V; ``kinetic_energy`` (from
        particle velocities); ``body_momentum`` and ``body_angular_momentum`` (lists of (3,));
        ``fluid_momentum`` and ``fluid_angular_momentum``, the fluid's own: rho0 times the
        impulses, less (with the physical body coupling, where the vortons inside a body move
        with it) the fluid inside the bodies, rho0 V (U, and c x U + 2/5 R^2 W) at the motion
        the coupling last gave it (none before a body's first step);
        ``total_momentum`` and ``total_angular_momentum``: fluid + free bodies (about
        ``origin``), which the coupling conserves; ``vortons``, ``tracers``, ``time``,
        ``frame``."""
        d = self._diagnostics(origin)
        rho0 = self.ambient_density
        o = np.zeros(3) if origin is None else np.asarray(origin, dtype=float)
        bodies = self.bodies
        d["body_momentum"] = [b.momentum for b in bodies]
        d["body_angular_momentum"] = [b.angular_momentum for b in bodies]
        P = rho0 * d["linear_impulse"]
        L = rho0 * d["angular_impulse"]
        P = P - d.pop("_interior_momentum")
        L = L - d.pop("_interior_angular_momentum")
        d["fluid_momentum"], d["fluid_angular_momentum"] = P, L
        for b in bodies:
            if not b.fixed:
                P = P + b.momentum
                L = L + np.cross(b.position - o, b.momentum) + b.angular_momentum
        d["total_momentum"], d["total_angular_momentum"] = P, L
        d["vortons"] = len(self.vortons)
        d["tracers"] = len(self.tracers)
        d["time"] = self.time
        d["frame"] = self.frame
        return d

    def __repr__(self) -> str:
        return (f"<vortonpy.Sim t={self.time:.4g} frame={self.frame} vortons={len(self.vortons)} "
                f"tracers={len(self.tracers)} bodies={len(self.bodies)} solver={self.solver!r} "
                f"threads={self.threads}>")

    def params(self) -> Dict[str, Any]:
        """The parameters, as keyword arguments that rebuild an equivalent Sim (see
        :mod:`vortonpy.parameters` for their meaning, units and ranges)."""
        p = {k: getattr(self, k) for k in _parameters.names()}
        p["gravity"] = tuple(float(g) for g in p["gravity"])
        return p

    def sort_tracers(self) -> np.ndarray:
        """Reorder the tracers in place so that tracers close in space are close in memory
        (sorted by cell of the velocity grid: z, then y, then x) and return the permutation
        ``order`` (new tracer ``i`` is old tracer ``order[i]``); apply it to any per-tracer
        arrays of your own, e.g. ``colours = colours[order]``.

        Tracer advection reads the velocity cells around each tracer; in random order, with
        many tracers on a large grid, every lookup misses the cache, and sorting makes the
        lookups of neighbouring tracers hit the same cells (1e6 tracers on a 49^3 grid
        advect about 2x faster, ``benchmarks/bench_scaling.py``).  Emitted tracers start out
        well ordered; mixing scrambles them slowly, so an occasional call (every few hundred
        frames) is enough.  Before the first step it sorts by the cells of the grid that
        step will lay.  The simulation itself is unchanged: only indices move."""
        return self._sort_by_cell("tracers", _TRACER_STATE)

    def sort_vortons(self) -> np.ndarray:
        """Reorder the vortons in place by cell of the velocity grid (z, then y, then x: the
        grid's own memory order) and return the permutation ``order`` (new vorton ``i`` is
        old vorton ``order[i]``), as :meth:`sort_tracers` does for tracers.

        Stretching, buoyancy, advection and diffusion look the grid up at every vorton; in
        random order each lookup lands on another cache line, which slows large runs (see
        ``benchmarks/README.md``).  Remeshing and
        ``scenes.lattice`` already produce grid order, so this is for vortons added in another
        order by a simulation that does not remesh.  The flow is the same up to rounding:
        sums over vortons are taken in the new order."""
        return self._sort_by_cell("vortons", _VORTON_STATE)

    def _sort_by_cell(self, kind: str, fields) -> np.ndarray:
        n = len(getattr(self, kind))
        order = np.arange(n, dtype=np.intp)
        if n < 2:
            return order
        x = self._view(kind, "position")
        lo = x.min(axis=0)
        # the last solved grid's cells; with no grid yet, the cells the first step will choose
        h = self._grid_spacing() or self._first_cell_size() or float(np.max(x.max(axis=0) - lo)) / 64 or 1.0
        c = np.minimum((x - lo) / h, 2.0 ** 20 - 1).astype(np.int64)  # 20 bits an axis
        order = np.argsort((c[:, 2] << 40) | (c[:, 1] << 20) | c[:, 0], kind="stable")
        for f in fields:
            v = self._view(kind, f)
            v[...] = v[order]
        return order

    def _first_cell_size(self) -> float:
        """The grid spacing the domain phase will choose (the vortons' box,
        padded by three radii, over grid_cells_per_vorton cells per vorton), or 0 without
        vortons.  Only an estimate for sorting: the domain phase also trims outliers and
        caps the node count."""
        n = len(self.vortons)
        if n == 0:
            return 0.0
        p = self._view("vortons", "position")
        pad = 6.0 * float(self._view("vortons", "radius").max())
        vol = float(np.prod(np.maximum(p.max(axis=0) - p.min(axis=0) + pad, 1e-9)))
        return float(np.cbrt(vol / (self.grid_cells_per_vorton * max(n, 8))))

    # ---------------------------------------------------------------- checkpoints
    def save(self, path) -> None:
        """Write the complete state to ``path`` (a ``.npz``).  Atomic: written to a temporary
        file, then renamed.  ``Sim.load(path)`` continues bit-identically."""
        path = os.fspath(path)
        arrays: Dict[str, np.ndarray] = {}
        # switches as 0/1, as every reader of this format version expects them
        params = {k: (int(v) if isinstance(v, bool) else v) for k, v in self.params().items()}
        meta = dict(format=FORMAT, version=FORMAT_VERSION, written_by=_written_by(), time=self.time,
                    frame=self.frame, max_rate=self.max_rate, params=params, rng=[str(x) for x in self._rng_state],
                    emitters=[{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in e.items()}
                              for e in self.emitters],
                    bodies=[{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in b._state().items()}
                            for b in self.bodies])
        for f in _VORTON_STATE:
            arrays["vortons_" + f] = np.array(self._view("vortons", f))
        for f in _TRACER_STATE:
            arrays["tracers_" + f] = np.array(self._view("tracers", f))
        import json
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".vortonpy-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path, threads=None) -> "Sim":
        """Read a state written by :meth:`save`.  Raises ``ValueError`` for a file that is not a
        vortonpy state file (not an ``.npz`` of ``Sim.save``, truncated or corrupted), and for
        a state of another format version (saying which version it is and which this vortonpy
        reads)."""
        import json
        path = os.fspath(path)
        what = f"{path} is not a vortonpy state file (one written by Sim.save)"
        try:
            z = np.load(path, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("it holds a single array, not an .npz archive")
            with z:
                data = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            raise ValueError(f"{path} is a directory, not a vortonpy state file") from None
        except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
            # (numpy's own words would suggest allow_pickle for a pickle: never for a state)
            reason = "it holds Python objects" if "pickle" in str(e) else str(e) or type(e).__name__
            raise ValueError(f"{what}: {reason}") from None
        if "meta" not in data:
            raise ValueError(f"{what}: an .npz archive without its metadata")
        try:
            meta = json.loads(bytes(data["meta"]).decode())
        except Exception:
            raise ValueError(f"{what}: its metadata is not readable") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{what}: its metadata names no vortonpy state format")
        version = meta.get("version")
        if version != FORMAT_VERSION:
            by = f" by vortonpy {meta['written_by']}" if meta.get("written_by") else ""
            newer = isinstance(version, int) and version > FORMAT_VERSION
            raise ValueError(
                f"{path} is a vortonpy state of format version {version!r} (written{by or ' by another vortonpy'}); "
                f"this vortonpy ({_written_by()}) reads format version {FORMAT_VERSION}: "
                + ("load it with a newer vortonpy" if newer else "load it with the vortonpy that wrote it"))
        try:
            params = {k: v for k, v in dict(meta["params"]).items() if k not in _RETIRED_PARAMS}
            if threads is not None:
                params["threads"] = threads
            sim = cls(**params)
            v = {f: data["vortons_" + f] for f in _VORTON_STATE}
            # (the stored densities, through the view: add_vortons takes deviations from the ambient)
            sim.add_vortons(v["position"].reshape(-1, 3), v["vorticity"].reshape(-1, 3), v["radius"])
            sim._view("vortons", "density")[...] = v["density"]
            sim._view("vortons", "age")[...] = v["age"]
            sim._view("vortons", "velocity")[...] = v["velocity"].reshape(-1, 3)
            t = {f: data["tracers_" + f] for f in _TRACER_STATE}
            sim.add_tracers(t["position"].reshape(-1, 3))
            sim._view("tracers", "density")[...] = t["density"]
            sim._view("tracers", "velocity")[...] = t["velocity"].reshape(-1, 3)
            sim._view("tracers", "age")[...] = t["age"]
            for b in meta["bodies"]:
                body = RigidBody(position=b["position"], radius=b["radius"], mass=b["mass"],
                                 temperature=b["temperature"], thermal_conductivity=b["thermal_conductivity"],
                                 heat_capacity=b["heat_capacity"], fixed=b["fixed"], gravity=b["gravity"],
                                 orientation=b["orientation"], velocity=b["velocity"],
                                 angular_velocity=b["angular_velocity"])
                sim.add_body(body)
                if not b["fixed"]:
                    body.momentum = b["momentum"]
                    body.angular_momentum = b["angular_momentum"]
                body._set_totals(b["fluid_impulse"], b["fluid_angular_impulse"], b["heat_received"])
            for e in meta["emitters"]:
                sim.add_emitter(e["center"], e["half_size"], e["vorton_rate"], e["tracer_rate"], e["vorton_radius"],
                                e["vorticity"], e["density"], tuple(e["debt"]))
            sim._rng_state = tuple(int(x) for x in meta["rng"])
            sim.time = meta["time"]
            sim.frame = meta["frame"]
            sim.max_rate = meta.get("max_rate", 0.0)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a complete vortonpy state: missing or bad {e}") from None
        return sim


Sim.__signature__ = _parameters.signature()
Sim.__doc__ = (Sim.__doc__.rstrip() + "\n\n"
               + "\n".join("    " + line if line else "" for line in _parameters.numpydoc().splitlines()) + "\n")
