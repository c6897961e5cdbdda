"""Plots of a simulation: tracer scatter plots, vorticity slices, body motion, drag fits and
diagnostics against time.

Everything here uses matplotlib's object API (``matplotlib.figure.Figure``), so no GUI backend
is needed and nothing touches ``pyplot``'s global state: each function returns the
``Figure`` it drew on (save it with ``fig.savefig("x.png")``; in Jupyter a returned Figure
displays itself).  Functions that draw a single panel accept ``ax=`` to draw into an existing
``Axes`` instead; they then return ``ax.figure``.

Time series come from :class:`History`, a step callback that records bodies and diagnostics::

    hist = vp.plot.History(sim)            # records the initial state
    sim.step(300, callback=hist, every=1)  # then one row per step
    vp.plot.drag_curve(hist).savefig("drag.png")
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["History", "fit_drag", "drag_curve", "motion", "tracers", "vorticity_slice", "diagnostics",
           "EXPERIMENTAL_SPHERE_CD", "VIEWS", "view_axes"]

#: The experimental drag coefficient of a sphere for Re 1e3 - 1e5 (physics.md section 4).
EXPERIMENTAL_SPHERE_CD = (0.4, 0.5)

#: Named 2D views: the two world axes shown horizontally and vertically.
VIEWS = {"xz": (0, 2), "xy": (0, 1), "yz": (1, 2), "zx": (2, 0), "yx": (1, 0), "zy": (2, 1)}
_AXIS_NAMES = "xyz"


def view_axes(view: str) -> Tuple[int, int]:
    """The (horizontal, vertical) world-axis indices of a 2D ``view`` such as ``"xz"``."""
    try:
        return VIEWS[view]
    except (KeyError, TypeError):
        raise ValueError(f"view must be one of {sorted(VIEWS)} (or '3d' where supported), got {view!r}") from None


def _new_figure(figsize=(7.0, 4.5)):
    from matplotlib.figure import Figure
    return Figure(figsize=figsize, layout="constrained")


# --------------------------------------------------------------------------------- History
_BODY_FIELDS = ("position", "velocity", "angular_velocity", "momentum", "angular_momentum", "fluid_impulse",
                "temperature", "near_vortons")
_BODY_VECTORS = ("position", "velocity", "angular_velocity", "momentum", "angular_momentum", "fluid_impulse")


class History:
    """Per-step record of a simulation, for plotting against time.

    Use it as a step callback::

        hist = vp.plot.History()
        hist.record(sim)                       # the initial state (optional, recommended)
        sim.step(300, callback=hist, every=1)

    ``History(sim)`` records the initial state at once.  After recording, these are NumPy arrays
    (T rows, one per record):

    - ``time``, ``frame`` (T,); ``step_ms`` (T,) the C core's wall time of the last step
      (NaN for the initial record); ``vortons``, ``tracers`` (T,) particle counts;
    - per body b (lists indexed by body): ``body_position[b]``, ``body_velocity[b]``,
      ``body_angular_velocity[b]``, ``body_momentum[b]``, ``body_angular_momentum[b]`` (T, 3),
      ``body_fluid_impulse[b]`` (T, 3) the total impulse the fluid has given the body so far,
      ``body_temperature[b]`` (T,), ``body_near_vortons[b]`` (T,) the number of vortons in
      contact range (closer than R + s_i to the centre); ``body_in_contact(b)`` (T,) bool, True
      where the fluid pushed the body during the step that led to the record;
      ``body_radius``, ``body_mass``, ``body_fixed`` (constants per body).
      A body added mid-run has NaN rows before it existed.
    - ``diagnostics``: a dict of arrays from :meth:`vortonpy.Sim.diagnostics` - scalars (T,)
      (``enstrophy``, ``heat``, ``kinetic_energy``, ...) and vectors (T, 3)
      (``linear_impulse``, ``angular_impulse``, ``circulation``, ``total_momentum``).
    - ``ambient_density``, ``dt`` of the sim last recorded.
    """

    def __init__(self, sim=None, diagnostics: bool = True):
        self._rows: List[Dict[str, Any]] = []
        self._cache: Optional[Dict[str, Any]] = None
        self.with_diagnostics = bool(diagnostics)
        self.ambient_density = 1.0
        self.dt = float("nan")
        self.body_radius: List[float] = []
        self.body_mass: List[float] = []
        self.body_fixed: List[bool] = []
        if sim is not None:
            self.record(sim)

    # the step callback
    def __call__(self, sim) -> None:
        self.record(sim)

    def record(self, sim) -> None:
        """Append one row: the sim's time, bodies and (unless ``diagnostics=False``) diagnostics."""
        row: Dict[str, Any] = {"time": float(sim.time), "frame": int(sim.frame)}
        timings = getattr(sim, "timings", None) or {}
        total = timings.get("total", float("nan"))
        row["step_ms"] = float(total) if sim.frame > 0 and total else float("nan")
        row["vortons"] = len(sim.vortons)
        row["tracers"] = len(sim.tracers)
        self.ambient_density = float(sim.ambient_density)
        self.dt = float(sim.dt)
        bodies = list(sim.bodies)
        vpos = vrad = None
        if bodies and len(sim.vortons):
            vpos = np.asarray(sim.vortons.position)
            vrad = np.asarray(sim.vortons.radius)
        brows = []
        for b, body in enumerate(bodies):
            if b >= len(self.body_radius):
                self.body_radius.append(float(body.radius))
                self.body_mass.append(float(body.mass))
                self.body_fixed.append(bool(body.fixed))
            pos = np.asarray(body.position, dtype=float)
            if vpos is not None:
                dist = np.linalg.norm(vpos - pos, axis=1)
                near = int(np.count_nonzero(dist < body.radius + vrad))
            else:
                near = 0
            brows.append(dict(position=pos, velocity=np.asarray(body.velocity, float),
                              angular_velocity=np.asarray(body.angular_velocity, float),
                              momentum=np.asarray(body.momentum, float),
                              angular_momentum=np.asarray(body.angular_momentum, float),
                              fluid_impulse=np.asarray(getattr(body, "fluid_impulse", (np.nan,) * 3), float),
                              temperature=float(body.temperature), near_vortons=near))
        row["bodies"] = brows
        if self.with_diagnostics:
            d = sim.diagnostics()
            keep = {}
            for k, v in d.items():
                if k in ("body_momentum", "body_angular_momentum", "time", "frame"):
                    continue
                a = np.asarray(v)
                if a.dtype.kind in "iufb" and a.ndim <= 1:
                    keep[k] = a.astype(float)
            row["diagnostics"] = keep
        self._rows.append(row)
        self._cache = None

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        if not self._rows:
            return "<vortonpy.plot.History: empty>"
        return (f"<vortonpy.plot.History: {len(self)} records, t = {self._rows[0]['time']:.4g} .. "
                f"{self._rows[-1]['time']:.4g}, {len(self.body_radius)} bodies>")

    def _arrays(self) -> Dict[str, Any]:
        if self._cache is not None:
            return self._cache
        rows = self._rows
        out: Dict[str, Any] = {}
        for k in ("time", "step_ms"):
            out[k] = np.array([r[k] for r in rows], dtype=float)
        for k in ("frame", "vortons", "tracers"):
            out[k] = np.array([r[k] for r in rows], dtype=np.int64)
        nb = len(self.body_radius)
        for f in _BODY_FIELDS:
            per_body = []
            for b in range(nb):
                vals = []
                for r in rows:
                    if b < len(r["bodies"]):
                        vals.append(r["bodies"][b][f])
                    else:
                        vals.append(np.full(3, np.nan) if f in _BODY_VECTORS else np.nan)
                per_body.append(np.array(vals, dtype=float))
            out["body_" + f] = per_body
        diag: Dict[str, np.ndarray] = {}
        if self.with_diagnostics and rows:
            keys: List[str] = []
            for r in rows:
                for k in r.get("diagnostics", {}):
                    if k not in keys:
                        keys.append(k)
            for k in keys:
                shape = None
                for r in rows:
                    if k in r["diagnostics"]:
                        shape = r["diagnostics"][k].shape
                        break
                diag[k] = np.array([r["diagnostics"].get(k, np.full(shape, np.nan)) for r in rows], dtype=float)
        out["diagnostics"] = diag
        self._cache = out
        return out

    def __getattr__(self, name):
        # time, frame, step_ms, vortons, tracers, body_*, diagnostics: built lazily from the rows
        if name.startswith("_"):
            raise AttributeError(name)
        arrays = self._arrays()
        if name in arrays:
            return arrays[name]
        raise AttributeError(f"'History' object has no attribute {name!r}")

    def body_in_contact(self, body: int = 0) -> np.ndarray:
        """(T,) bool: True where the fluid changed the body's momentum in the step before the
        record (its ``fluid_impulse`` moved), i.e. the body was in contact with vortons.  The
        first record counts as in contact.  Falls back to ``body_near_vortons > 0`` when the
        core does not report impulses."""
        fi = self.body_fluid_impulse[body]
        if len(fi) and np.all(np.isfinite(fi[1:])) and len(fi) > 1:
            step = np.linalg.norm(np.diff(fi, axis=0), axis=1)
            out = np.concatenate([[True], step > 0])
        else:
            out = self.body_near_vortons[body] > 0
            if len(out):
                out[0] = True
        return out

    def body_speed(self, body: int = 0) -> np.ndarray:
        """(T,) speed |v| of body ``body``."""
        return np.linalg.norm(self.body_velocity[body], axis=1)

    def to_dict(self) -> Dict[str, Any]:
        """All recorded arrays as a flat dict of NumPy arrays (``body{b}_{field}`` for bodies),
        e.g. for ``np.savez(path, **hist.to_dict())``."""
        a = self._arrays()
        out = {k: a[k] for k in ("time", "frame", "step_ms", "vortons", "tracers")}
        for f in _BODY_FIELDS:
            for b, arr in enumerate(a["body_" + f]):
                out[f"body{b}_{f}"] = arr
        for k, v in a["diagnostics"].items():
            out["diag_" + k] = v
        return out


# --------------------------------------------------------------------------------- drag
def fit_drag(time, speed, radius: float, mass: float, rho0: float = 1.0, mask=None,
             viscosity: Optional[float] = None) -> Dict[str, float]:
    """Fit the quadratic drag law to a body's speed history (physics.md section 4).

    Under quadratic drag ``M dv/dt = -1/2 rho0 Cd pi R^2 v^2``, so ``1/v`` grows linearly:
    ``1/v(t) = intercept + slope t`` with ``slope = rho0 Cd pi R^2 / (2 M)``.  This fits that
    line by least squares over the samples where ``speed`` is finite and positive (and
    ``mask`` is True, if given) and returns a dict:

    ``cd`` (= 2 M slope / (rho0 pi R^2)), ``slope``, ``intercept``, ``r2`` (coefficient of
    determination of the line in 1/v), ``n`` (samples used), ``t0``/``t1`` (their time span),
    and ``reynolds`` (initial speed * 2R / viscosity, when ``viscosity`` is given).
    With fewer than two usable samples every number is NaN.
    """
    t = np.asarray(time, dtype=float).ravel()
    v = np.asarray(speed, dtype=float).ravel()
    if t.shape != v.shape:
        raise ValueError(f"time and speed must have the same length, got {t.shape} and {v.shape}")
    if not (radius > 0 and mass > 0 and rho0 > 0):
        raise ValueError(f"radius, mass and rho0 must be positive, got {radius}, {mass}, {rho0}")
    sel = np.isfinite(t) & np.isfinite(v) & (v > 0)
    if mask is not None:
        m = np.asarray(mask, dtype=bool).ravel()
        if m.shape != t.shape:
            raise ValueError(f"mask must have the length of time ({t.size}), got {m.size}")
        sel &= m
    nan = float("nan")
    res = dict(cd=nan, slope=nan, intercept=nan, r2=nan, n=int(sel.sum()), t0=nan, t1=nan,
               radius=float(radius), mass=float(mass), rho0=float(rho0), reynolds=nan)
    if sel.sum() < 2 or np.ptp(t[sel]) == 0:
        return res
    ts, y = t[sel], 1.0 / v[sel]
    A = np.stack([np.ones_like(ts), ts], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(A, y, rcond=None)
    pred = intercept + slope * ts
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else nan)
    res.update(cd=float(2.0 * mass * slope / (rho0 * math.pi * radius ** 2)), slope=float(slope),
               intercept=float(intercept), r2=float(r2), t0=float(ts[0]), t1=float(ts[-1]))
    if viscosity:
        res["reynolds"] = float(v[sel][0] * 2.0 * radius / viscosity)
    return res


def _drag_data(data, body):
    """(time, speed used for the fit, |v|, x position, default fit mask, radius, mass, rho0)."""
    if isinstance(data, History):
        if body >= len(data.body_radius):
            raise ValueError(f"the history has {len(data.body_radius)} bodies; no body {body}")
        t = data.time
        vel = data.body_velocity[body]
        pos = data.body_position[body]
        speed = np.linalg.norm(vel, axis=1)
        ok = np.isfinite(speed) & (speed > 0)
        along = speed
        if ok.any():
            # velocity along the launch direction: a ball knocked backwards does not fit
            d0 = vel[np.argmax(ok)] / speed[np.argmax(ok)]
            along = vel @ d0
            axis = int(np.argmax(np.abs(d0)))
        else:
            axis = 0
        mask = data.body_in_contact(body)
        return (t, along, speed, pos[:, axis], _AXIS_NAMES[axis], mask, data.body_radius[body],
                data.body_mass[body], data.ambient_density)
    try:
        t, speed, pos = data
    except (TypeError, ValueError):
        raise TypeError("drag_curve needs a History or a (time, speed, position) tuple") from None
    t = np.asarray(t, float)
    speed = np.asarray(speed, float)
    pos = np.asarray(pos, float)
    if pos.ndim == 2:
        pos = pos[:, 0]
    return t, speed, np.abs(speed), pos, "x", None, None, None, None


def drag_curve(data, body: int = 0, radius: Optional[float] = None, mass: Optional[float] = None,
               rho0: Optional[float] = None, fit_range: Optional[Tuple[float, float]] = None, ax=None,
               reference_cd: Optional[float] = 0.45):
    """Part 4, figure 5: a ball's speed and position against time, with a quadratic-drag fit.

    ``data`` is a :class:`History` (``body`` picks the ball; radius, mass and rho0 come from it)
    or a tuple ``(time, speed, position)`` (position (T,) or (T, 3), its x is plotted; pass
    ``radius``, ``mass`` and ``rho0``, default 1).  For a History the fit uses the velocity
    along the launch direction, over the samples where the fluid was still pushing the ball
    (:meth:`History.body_in_contact`: a ball that has left the smoke feels no drag in this
    model), unless ``fit_range=(t0, t1)`` is given.  The fit ``v(t) = 1/(intercept + slope t)`` (see :func:`fit_drag`) is drawn over
    the data with the fitted Cd beside the experimental sphere value, and a dotted reference
    curve for ``reference_cd`` (None to omit).

    Without ``ax``: a Figure with three panels (speed, 1/speed, position).  With ``ax``: only
    the speed panel, drawn into ``ax``.  The fit result is attached as ``fig.drag_fit``.
    """
    t, v_fit, speed, pos, axis_name, mask, r_h, m_h, rho_h = _drag_data(data, body)
    radius = radius if radius is not None else r_h
    mass = mass if mass is not None else m_h
    rho0 = rho0 if rho0 is not None else (rho_h if rho_h is not None else 1.0)
    if radius is None or mass is None:
        raise ValueError("drag_curve needs radius= and mass= when given arrays instead of a History")
    sel = np.ones(len(t), bool) if mask is None else mask.copy()
    if fit_range is not None:
        sel = (t >= fit_range[0]) & (t <= fit_range[1])
    fit = fit_drag(t, v_fit, radius, mass, rho0, mask=sel)

    if ax is None:
        fig = _new_figure((7.5, 7.5))
        axes = fig.subplots(3, 1, sharex=True, height_ratios=(2.2, 1.2, 1.2))
    else:
        fig, axes = ax.figure, [ax]
    a0 = axes[0]
    a0.plot(t, speed, "-", color="C0", lw=1.5, label="speed |v|")
    if np.nanmax(np.abs(v_fit - speed), initial=0.0) > 0.01 * max(np.nanmax(speed, initial=0.0), 1e-300):
        a0.plot(t, v_fit, "-", color="C0", lw=0.8, alpha=0.5, label="v along launch direction")
    tt = np.linspace(np.nanmin(t), np.nanmax(t), 400) if len(t) else np.zeros(0)
    if np.isfinite(fit["cd"]):
        with np.errstate(divide="ignore", invalid="ignore"):
            vfit = 1.0 / (fit["intercept"] + fit["slope"] * tt)
        vfit[(fit["intercept"] + fit["slope"] * tt) <= 0] = np.nan
        a0.plot(tt, vfit, "--", color="C3", lw=1.5, label=f"quadratic drag fit, Cd = {fit['cd']:.3g}")
        a0.axvspan(fit["t0"], fit["t1"], color="C3", alpha=0.06, lw=0)
    v0 = None
    ok = np.isfinite(v_fit) & (v_fit > 0)
    if ok.any():
        v0 = float(v_fit[np.argmax(ok)])
    if reference_cd and v0 and len(tt):
        k = rho0 * reference_cd * math.pi * radius ** 2 / (2 * mass)
        a0.plot(tt, 1.0 / (1.0 / v0 + k * (tt - t[np.argmax(ok)])), ":", color="0.4", lw=1.2,
                label=f"Cd = {reference_cd:g} from the same start")
    cd_txt = f"fitted Cd = {fit['cd']:.3g}" if np.isfinite(fit["cd"]) else "fitted Cd: not enough samples"
    if np.isfinite(fit["r2"]):
        cd_txt += f"  (R\u00b2 = {fit['r2']:.3f}, {fit['n']} samples)"
    lo, hi = EXPERIMENTAL_SPHERE_CD
    a0.text(0.98, 0.97, f"{cd_txt}\nexperimental sphere Cd ~ {lo:g}-{hi:g} (Re 1e3-1e5)",
            transform=a0.transAxes, ha="right", va="top", fontsize=9,
            bbox=dict(boxstyle="round", fc="white", ec="0.7", alpha=0.9))
    a0.set_ylabel("speed")
    a0.set_ylim(bottom=0)
    a0.legend(loc="lower left", fontsize=8)
    a0.set_title(f"Drag on a sphere (R = {radius:g}, M = {mass:g}, \u03c1\u2080 = {rho0:g})")
    a0.grid(alpha=0.3)
    if len(axes) > 1:
        a1, a2 = axes[1], axes[2]
        with np.errstate(divide="ignore"):
            inv = np.where(v_fit > 0, 1.0 / v_fit, np.nan)
        a1.plot(t, inv, ".", ms=2.5, color="C0", label="1 / v")
        if np.isfinite(fit["cd"]):
            a1.plot(tt, fit["intercept"] + fit["slope"] * tt, "--", color="C3", lw=1.2,
                    label=f"intercept + slope t, slope = {fit['slope']:.3g}")
        a1.set_ylabel("1 / speed")
        a1.legend(loc="upper left", fontsize=8)
        a1.grid(alpha=0.3)
        a2.plot(t, pos, "-", color="C2")
        a2.set_ylabel(f"{axis_name} position")
        a2.set_xlabel("time")
        a2.grid(alpha=0.3)
    else:
        a0.set_xlabel("time")
    fig.drag_fit = fit
    return fig


def motion(history: History, body: int = 0, ax=None):
    """A body's motion against time: position components, speed |v| and angular speed |W|
    (and temperature when it changes).  Without ``ax`` a Figure with one panel per quantity;
    with ``ax`` (a sequence of Axes) draws into those."""
    if body >= len(history.body_radius):
        raise ValueError(f"the history has {len(history.body_radius)} bodies; no body {body}")
    t = history.time
    pos = history.body_position[body]
    vel = history.body_velocity[body]
    w = history.body_angular_velocity[body]
    temp = history.body_temperature[body]
    show_temp = np.nanmax(temp) - np.nanmin(temp) > 1e-12 if len(temp) else False
    n = 4 if show_temp else 3
    if ax is None:
        fig = _new_figure((7.0, 2.1 * n))
        axes = fig.subplots(n, 1, sharex=True)
    else:
        axes = list(ax)
        fig = axes[0].figure
    for i, c in enumerate("xyz"):
        axes[0].plot(t, pos[:, i], label=c)
    axes[0].set_ylabel("position")
    axes[0].legend(fontsize=8, ncol=3)
    axes[1].plot(t, np.linalg.norm(vel, axis=1), color="C0", label="|v|")
    for i, c in enumerate("xyz"):
        axes[1].plot(t, vel[:, i], lw=0.8, alpha=0.6, label=f"v{c}")
    axes[1].set_ylabel("velocity")
    axes[1].legend(fontsize=8, ncol=4)
    axes[2].plot(t, np.linalg.norm(w, axis=1), color="C4", label="|W|")
    for i, c in enumerate("xyz"):
        axes[2].plot(t, w[:, i], lw=0.8, alpha=0.6, label=f"W{c}")
    axes[2].set_ylabel("angular velocity")
    axes[2].legend(fontsize=8, ncol=4)
    if show_temp and len(axes) > 3:
        axes[3].plot(t, temp, color="C3")
        axes[3].set_ylabel("temperature")
    for a in axes:
        a.grid(alpha=0.3)
    axes[min(n, len(axes)) - 1].set_xlabel("time")
    fixed = " (fixed)" if history.body_fixed[body] else ""
    axes[0].set_title(f"Body {body}{fixed}: R = {history.body_radius[body]:g}, M = {history.body_mass[body]:g}")
    return fig


# --------------------------------------------------------------------------------- snapshots
def _body_list(sim):
    return [(np.asarray(b.position, float), float(b.radius)) for b in sim.bodies]


def tracers(sim, color: Optional[str] = "density", view: str = "xz", ax=None, s: Optional[float] = None,
            max_points: int = 200000, cmap: Optional[str] = None, bounds=None, alpha: float = 0.6,
            colorbar: bool = True, seed: int = 0):
    """Scatter plot of the tracers (the smoke) projected on a plane, or in 3D.

    ``color``: ``"density"`` (deviation from ambient), ``"temperature"``, ``"speed"`` (of the
    last advection), ``"age"``, an (N,) array, or None for plain smoke.  ``view``: ``"xz"``,
    ``"xy"``, ``"yz"`` (horizontal, vertical axes) or ``"3d"``.  At most ``max_points`` tracers
    are drawn (a fixed random subset).  Bodies are drawn as circles (spheres in 3D).
    ``bounds=(h0, h1, v0, v1)`` sets the view limits.  Returns the Figure.
    """
    pos = np.asarray(sim.tracers.position)
    n = len(pos)
    values, label = _tracer_values(sim, color)
    idx = np.arange(n)
    if n > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))
    p = pos[idx]
    c = None if values is None else np.asarray(values)[idx]
    note = ""
    if c is not None and len(c) and np.ptp(c) == 0:
        note = f", all {label} = {c[0]:.3g}"
        c = None  # a uniform colour says nothing; draw plain smoke
    if s is None:
        s = float(np.clip(20000.0 / max(len(p), 1), 0.15, 6.0))
    cmap = cmap or _default_cmap(color)
    vmin = vmax = None
    if c is not None and len(c):
        if color == "density":
            m = float(np.max(np.abs(c))) or 1.0
            vmin, vmax = -m, m
    if view == "3d":
        if ax is None:
            fig = _new_figure((7.0, 6.0))
            ax = fig.add_subplot(projection="3d")
        fig = ax.figure
        ckw = dict(c=c, cmap=cmap, vmin=vmin, vmax=vmax) if c is not None else dict(c="0.3")
        sc = ax.scatter(p[:, 0], p[:, 1], p[:, 2], s=s, alpha=alpha, linewidths=0, depthshade=False, **ckw)
        u, v = np.mgrid[0:2 * np.pi:16j, 0:np.pi:9j]
        for centre, r in _body_list(sim):
            ax.plot_wireframe(centre[0] + r * np.cos(u) * np.sin(v), centre[1] + r * np.sin(u) * np.sin(v),
                              centre[2] + r * np.cos(v), color="C1", lw=0.6)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_zlabel("z")
        try:
            ax.set_aspect("equal")
        except (NotImplementedError, ValueError):
            pass
    else:
        h, vax = view_axes(view)
        if ax is None:
            fig = _new_figure()
            ax = fig.add_subplot()
        fig = ax.figure
        if c is None:
            sc = ax.scatter(p[:, h], p[:, vax], s=s, c="0.25", alpha=alpha, linewidths=0, rasterized=True)
        else:
            order = np.argsort(np.abs(c - np.median(c))) if len(c) else slice(None)
            sc = ax.scatter(p[order, h], p[order, vax], s=s, c=c[order], cmap=cmap, vmin=vmin, vmax=vmax,
                            alpha=alpha, linewidths=0, rasterized=True)
        from matplotlib.patches import Circle
        for centre, r in _body_list(sim):
            ax.add_patch(Circle((centre[h], centre[vax]), r, fc="C1", ec="k", lw=1.0, alpha=0.9, zorder=5))
        ax.set_aspect("equal")
        ax.set_xlabel(_AXIS_NAMES[h])
        ax.set_ylabel(_AXIS_NAMES[vax])
        if bounds is not None:
            ax.set_xlim(bounds[0], bounds[1])
            ax.set_ylim(bounds[2], bounds[3])
    if c is not None and colorbar:
        fig.colorbar(sc, ax=ax, label=label, shrink=0.8)
    ax.set_title(f"{n} tracers, t = {sim.time:.3g}" + (f" ({len(p)} shown)" if len(p) < n else "") + note)
    return fig


def _default_cmap(color):
    return {"density": "coolwarm", "temperature": "inferno", "speed": "viridis", "age": "cividis"}.get(
        color if isinstance(color, str) else "", "viridis")


def _tracer_values(sim, color):
    """(values or None, label) for a tracer colouring."""
    if color is None or (isinstance(color, str) and color in ("none", "smoke")):
        return None, ""
    if isinstance(color, str):
        tr = sim.tracers
        if color == "density":
            return np.asarray(tr.density), "density deviation"
        if color == "temperature":
            return np.asarray(tr.temperature), "temperature"
        if color == "speed":
            return np.linalg.norm(np.asarray(tr.velocity), axis=1), "speed"
        if color == "age":
            return np.asarray(tr.age), "age"
        raise ValueError(f"color must be 'density', 'temperature', 'speed', 'age', None or an array, got {color!r}")
    vals = np.asarray(color, dtype=float)
    if vals.shape != (len(sim.tracers),):
        raise ValueError(f"color array must have shape ({len(sim.tracers)},), got {vals.shape}")
    return vals, ""


def _plane_axes(axis):
    normal = {"x": 0, "y": 1, "z": 2, 0: 0, 1: 1, 2: 2}.get(axis)
    if normal is None:
        raise ValueError(f"axis must be 'x', 'y' or 'z', got {axis!r}")
    h, v = [a for a in range(3) if a != normal]
    if normal == 1:
        h, v = 0, 2
    return normal, h, v


def vorticity_field(sim, axis: str = "y", value: float = 0.0, resolution: int = 128, bounds=None,
                    method: str = "splat"):
    """Vorticity (3 components) on the plane ``axis = value``.

    Returns ``(field, extent)``: ``field`` (resolution_h, resolution_v, 3) sampled at pixel
    centres, ``extent = (h0, h1, v0, v1)``.  ``method="splat"`` sums each vorton's strength
    ``a_i = w_i V_i`` with a normalised Gaussian ``exp(-r^2/e^2)/(pi^1.5 e^3)`` of width
    ``e = V_i^(1/3)`` (the particle spacing of the scenes' lattices), using vortons within 3e
    of the plane; ``method="curl"`` takes central differences of :meth:`Sim.velocity_at` on
    the plane (slower, and smoothed by the solver's core).
    """
    normal, h, v = _plane_axes(axis)
    pos = np.asarray(sim.vortons.position, dtype=float)
    rad = np.asarray(sim.vortons.radius, dtype=float)
    if bounds is None:
        if len(pos):
            lo, hi = pos.min(axis=0), pos.max(axis=0)
        else:
            lo, hi = -np.ones(3), np.ones(3)
        for c, r in _body_list(sim):
            lo, hi = np.minimum(lo, c - r), np.maximum(hi, c + r)
        pad = 0.05 * float(max(hi[h] - lo[h], hi[v] - lo[v], 1e-6)) + (2 * float(rad.max()) if len(rad) else 0.0)
        bounds = (lo[h] - pad, hi[h] + pad, lo[v] - pad, hi[v] + pad)
    h0, h1, v0, v1 = map(float, bounds)
    span = max(h1 - h0, v1 - v0)
    nh = max(2, int(round(resolution * (h1 - h0) / span)))
    nv = max(2, int(round(resolution * (v1 - v0) / span)))
    hc = h0 + (np.arange(nh) + 0.5) * (h1 - h0) / nh
    vc = v0 + (np.arange(nv) + 0.5) * (v1 - v0) / nv
    if method == "splat":
        field = np.zeros((nh, nv, 3))
        if len(pos):
            vol = 4.0 / 3.0 * np.pi * rad ** 3
            eps = np.maximum(rad, np.cbrt(vol))
            dn = pos[:, normal] - value
            near = np.abs(dn) < 3.0 * eps
            p, e, dn = pos[near], eps[near], dn[near]
            a = np.asarray(sim.vortons.vorticity, dtype=float)[near] * vol[near, None]
            gn = np.exp(-(dn / e) ** 2) / (np.pi ** 1.5 * e ** 3)
            chunk = 20000
            for s0 in range(0, len(p), chunk):
                sl = slice(s0, s0 + chunk)
                gh = np.exp(-((hc[None, :] - p[sl, h, None]) / e[sl, None]) ** 2)  # (n, nh)
                gv = np.exp(-((vc[None, :] - p[sl, v, None]) / e[sl, None]) ** 2)  # (n, nv)
                for k in range(3):
                    field[:, :, k] += (gh * (a[sl, k] * gn[sl])[:, None]).T @ gv
    elif method == "curl":
        dh, dv = (h1 - h0) / nh, (v1 - v0) / nv
        dn_step = min(dh, dv)
        H, V = np.meshgrid(hc, vc, indexing="ij")
        u = []
        for off in (-dn_step, 0.0, dn_step):
            pts = np.zeros((nh * nv, 3))
            pts[:, h], pts[:, v], pts[:, normal] = H.ravel(), V.ravel(), value + off
            u.append(np.asarray(sim.velocity_at(pts), float).reshape(nh, nv, 3))
        um, u0, up = u
        d = [None, None, None]  # d[a][..., c]: derivative of velocity component c along axis a
        d[h] = np.gradient(u0, dh, axis=0)
        d[v] = np.gradient(u0, dv, axis=1)
        d[normal] = (up - um) / (2 * dn_step)
        field = np.stack([d[1][..., 2] - d[2][..., 1], d[2][..., 0] - d[0][..., 2],
                          d[0][..., 1] - d[1][..., 0]], axis=-1)
    else:
        raise ValueError(f"method must be 'splat' or 'curl', got {method!r}")
    return field, (h0, h1, v0, v1)


def vorticity_slice(sim, axis: str = "y", value: float = 0.0, resolution: int = 128, ax=None, bounds=None,
                    component: Optional[str] = None, method: str = "splat", cmap: Optional[str] = None,
                    log: bool = False, colorbar: bool = True):
    """Image of the vorticity on the plane ``axis = value`` (default the y = 0 plane, seen as x-z).

    Shows ``|w|`` or, with ``component="x"|"y"|"z"``, that signed component.  See
    :func:`vorticity_field` for ``method`` (``"splat"``: Gaussian splat of the vortons near the
    plane, fast and robust; ``"curl"``: finite-difference curl of the solver's velocity).
    Bodies cut by the plane are outlined.  ``log=True`` uses a logarithmic colour scale for |w|.
    Returns the Figure.
    """
    field, (h0, h1, v0, v1) = vorticity_field(sim, axis, value, resolution, bounds, method)
    normal, h, v = _plane_axes(axis)
    if component is None:
        img = np.linalg.norm(field, axis=-1)
        label, cmap = "|\u03c9|", cmap or "magma"
        norm = None
        if log:
            from matplotlib.colors import LogNorm
            top = float(img.max()) if img.size and img.max() > 0 else 1.0
            img = np.maximum(img, top * 1e-4)
            norm = LogNorm(vmin=top * 1e-4, vmax=top)
        kw = dict(norm=norm) if norm is not None else dict(vmin=0)
    else:
        k = {"x": 0, "y": 1, "z": 2}.get(component)
        if k is None:
            raise ValueError(f"component must be None, 'x', 'y' or 'z', got {component!r}")
        img = field[..., k]
        m = float(np.max(np.abs(img))) or 1.0
        label, cmap = f"\u03c9_{component}", cmap or "RdBu_r"
        kw = dict(vmin=-m, vmax=m)
    if ax is None:
        fig = _new_figure()
        ax = fig.add_subplot()
    fig = ax.figure
    im = ax.imshow(img.T, origin="lower", extent=(h0, h1, v0, v1), cmap=cmap, interpolation="bilinear",
                   aspect="equal", **kw)
    from matplotlib.patches import Circle
    for centre, r in _body_list(sim):
        dd = centre[normal] - value
        if abs(dd) < r:
            ax.add_patch(Circle((centre[h], centre[v]), math.sqrt(r * r - dd * dd), fc="none", ec="w", lw=1.2))
    ax.set_xlim(h0, h1)
    ax.set_ylim(v0, v1)
    ax.set_xlabel(_AXIS_NAMES[h])
    ax.set_ylabel(_AXIS_NAMES[v])
    ax.set_title(f"vorticity on {_AXIS_NAMES[normal]} = {value:g}, t = {sim.time:.3g}")
    if colorbar:
        fig.colorbar(im, ax=ax, label=label, shrink=0.8)
    return fig


# --------------------------------------------------------------------------------- diagnostics
DEFAULT_DIAGNOSTICS = ("kinetic_energy", "enstrophy", "heat", "linear_impulse", "angular_impulse", "circulation")


def diagnostics(history: History, keys: Sequence[str] = DEFAULT_DIAGNOSTICS, ax=None, relative: bool = False):
    """Diagnostics recorded in a :class:`History` against time.

    ``keys``: names from :meth:`vortonpy.Sim.diagnostics` (missing ones are skipped); vector
    quantities are drawn as x, y, z components.  ``relative=True`` plots scalars as the change
    from their first value.  Without ``ax`` a Figure with one panel per key (two columns);
    with ``ax`` a single Axes (every key on it) or a sequence of Axes (one per key).
    """
    diag = history.diagnostics
    t = history.time
    keys = [k for k in keys if k in diag]
    if not keys:
        raise ValueError(f"none of the keys were recorded; available: {sorted(diag)}")
    if ax is None:
        ncol = 2 if len(keys) > 1 else 1
        nrow = (len(keys) + ncol - 1) // ncol
        fig = _new_figure((9.0 if ncol == 2 else 6.0, 2.4 * nrow + 0.4))
        grid = np.atleast_1d(fig.subplots(nrow, ncol, sharex=True, squeeze=False).ravel())
        axes = list(grid[: len(keys)])
        for extra in grid[len(keys):]:
            extra.set_visible(False)
    elif isinstance(ax, (list, tuple, np.ndarray)):
        axes = list(np.ravel(ax))
        if len(axes) < len(keys):
            raise ValueError(f"{len(keys)} keys need {len(keys)} axes, got {len(axes)}")
        fig = axes[0].figure
    else:
        axes = [ax] * len(keys)
        fig = ax.figure
    single = len(set(map(id, axes))) == 1
    for a, k in zip(axes, keys):
        y = diag[k]
        if y.ndim == 1:
            yy = y - y[0] if relative and len(y) else y
            a.plot(t, yy, label=k if single else None)
        else:
            for i, c in enumerate("xyz"[: y.shape[1]]):
                a.plot(t, y[:, i], label=f"{k} {c}" if single else c)
            if not single:
                a.legend(fontsize=7, ncol=3)
        if not single:
            a.set_title(k.replace("_", " ") + (" (change)" if relative and y.ndim == 1 else ""), fontsize=10)
        a.grid(alpha=0.3)
    if single:
        axes[0].legend(fontsize=8)
    for a in axes[-2:]:
        a.set_xlabel("time")
    return fig
