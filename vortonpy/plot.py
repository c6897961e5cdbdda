"""Plots of a simulation: tracer scatter plots, vorticity slices, body motion, drag fits and
diagnostics against time.

Everything here uses matplotlib's object API (``matplotlib.figure.Figure``), so no GUI backend
is needed and nothing touches ``pyplot``'s global state: each function returns the
``Figure`` it drew on (save it with ``fig.savefig("x.png")``; in Jupyter a returned Figure
displays itself).  Functions that draw a single panel accept ``ax=`` to draw into an existing
``Axes`` instead; they then return ``ax.figure``.

Two kinds of input:

- a :class:`vortonpy.Sim` for pictures of the current state (:func:`tracers`,
  :func:`vorticity_slice`);
- a :class:`History` for quantities against time (:func:`drag_curve`, :func:`motion`,
  :func:`diagnostics`).  A ``Sim`` knows only its present, so record its history while
  stepping::

    hist = vp.plot.History(sim)            # records the initial state
    sim.step(300, callback=hist, every=1)  # then one row per step
    vp.plot.drag_curve(hist).savefig("drag.png")

Quantities are in simulation units: the scene's units of length (L), time (T) and mass (M).
Axis labels give each quantity's dimension in those units (a speed is in L/T), and every
figure made here says so once, under its panels.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["History", "fit_drag", "drag_fit_window", "DragData", "drag_data", "drag_curve", "drag_speed_panel",
           "drag_inverse_speed_panel", "drag_contact_panel", "sphere_drag_coefficient", "sphere_speed", "motion",
           "tracers", "vorticity_field", "vorticity_slice", "diagnostics", "EXPERIMENTAL_SPHERE_CD", "VIEWS",
           "view_axes", "UNITS_NOTE"]

#: The experimental drag coefficient of a sphere for Re 1e3 - 1e5 (the standard drag curve's plateau).
EXPERIMENTAL_SPHERE_CD = (0.4, 0.5)

#: The note under every figure made here: the units its axis labels refer to.
UNITS_NOTE = "simulation units: L length, T time, M mass"

#: Named 2D views: the two world axes shown horizontally and vertically.
VIEWS = {"xz": (0, 2), "xy": (0, 1), "yz": (1, 2), "zx": (2, 0), "yx": (1, 0), "zy": (2, 1)}
_AXIS_NAMES = "xyz"
_TIME = "time t [T]"


def view_axes(view: str) -> Tuple[int, int]:
    """The (horizontal, vertical) world-axis indices of a 2D ``view`` such as ``"xz"``."""
    try:
        return VIEWS[view]
    except (KeyError, TypeError):
        raise ValueError(f"view must be one of {sorted(VIEWS)} (or '3d' where supported), got {view!r}") from None


def _new_figure(figsize=(7.0, 4.5)):
    from matplotlib.figure import Figure
    return Figure(figsize=figsize, layout="constrained")


def _units_note(fig, extra: str = "") -> None:
    """The units line under a figure's panels (constrained layout keeps room for it)."""
    fig.supxlabel(UNITS_NOTE + (f"; {extra}" if extra else ""), fontsize=8, color="0.35")


def _is_sim(obj) -> bool:
    return hasattr(obj, "step") and hasattr(obj, "vortons") and hasattr(obj, "bodies")


def _need_history(obj, func: str) -> None:
    """Plots against time need a History: say so, and how to record one, when given a Sim."""
    if isinstance(obj, History):
        return
    if _is_sim(obj):
        raise TypeError(
            f"{func}() plots quantities against time, so it needs a vortonpy.plot.History, and a Sim holds only "
            f"its current state. Record the history while stepping: hist = vp.plot.History(sim); "
            f"sim.step(300, callback=hist); vp.plot.{func}(hist)")
    raise TypeError(f"{func}() needs a vortonpy.plot.History, got {type(obj).__name__}")


def _need_sim(obj, func: str) -> None:
    """Snapshot plots need a Sim (the current state); a History holds no particles."""
    if _is_sim(obj):
        return
    if isinstance(obj, History):
        raise TypeError(f"{func}() draws the particles of a Sim's current state; a History records only bodies "
                        f"and diagnostics. Pass the Sim: vp.plot.{func}(sim)")
    raise TypeError(f"{func}() needs a vortonpy.Sim, got {type(obj).__name__}")


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
    - ``ambient_density``, ``viscosity``, ``dt``, ``body_coupling`` of the sim last recorded.
    """

    def __init__(self, sim=None, diagnostics: bool = True):
        self._rows: List[Dict[str, Any]] = []
        self._cache: Optional[Dict[str, Any]] = None
        self.with_diagnostics = bool(diagnostics)
        self.ambient_density = 1.0
        self.viscosity = float("nan")
        self.dt = float("nan")
        self.body_coupling = "physical"
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
        if not _is_sim(sim):
            raise TypeError(f"History records a vortonpy.Sim, got {type(sim).__name__}")
        row: Dict[str, Any] = {"time": float(sim.time), "frame": int(sim.frame)}
        timings = getattr(sim, "timings", None) or {}
        total = timings.get("total", float("nan"))
        row["step_ms"] = float(total) if sim.frame > 0 and total else float("nan")
        row["vortons"] = len(sim.vortons)
        row["tracers"] = len(sim.tracers)
        self.ambient_density = float(sim.ambient_density)
        self.viscosity = float(sim.viscosity)
        self.dt = float(sim.dt)
        self.body_coupling = str(sim.body_coupling)
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
             viscosity: Optional[float] = None, anchor: bool = False) -> Dict[str, float]:
    """Fit the quadratic drag law to a body's speed history.

    Under quadratic drag ``M dv/dt = -1/2 rho0 Cd pi R^2 v^2``, so ``1/v`` grows linearly:
    ``1/v(t) = intercept + slope t`` with ``slope = rho0 Cd pi R^2 / (2 M)``.  This fits that
    line by least squares over the samples where ``speed`` is finite and positive (and
    ``mask`` is True, if given).  ``anchor=True`` makes the line pass through the first fitted
    sample (the launch speed is known, so only Cd is fitted).  Returns a dict:

    ``cd`` (= 2 M slope / (rho0 pi R^2)), ``slope``, ``intercept``, ``r2`` (coefficient of
    determination of the line in 1/v), ``max_error`` (largest ``|v_fit / v - 1|`` over the fitted
    samples), ``n`` (samples used), ``t0``/``t1`` (their time span), ``anchored``, and
    ``reynolds`` (first fitted speed * 2R / viscosity, when ``viscosity`` is given).
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
    res = dict(cd=nan, slope=nan, intercept=nan, r2=nan, max_error=nan, n=int(sel.sum()), t0=nan, t1=nan,
               radius=float(radius), mass=float(mass), rho0=float(rho0), reynolds=nan, anchored=bool(anchor))
    if sel.sum() < 2 or np.ptp(t[sel]) == 0:
        return res
    ts, y = t[sel], 1.0 / v[sel]
    if anchor:
        tau = ts - ts[0]
        slope = float(np.dot(tau, y - y[0]) / np.dot(tau, tau))
        intercept = float(y[0] - slope * ts[0])
    else:
        A = np.stack([np.ones_like(ts), ts], axis=1)
        (intercept, slope), *_ = np.linalg.lstsq(A, y, rcond=None)
    pred = intercept + slope * ts
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.where(pred > 0, np.abs(y / pred - 1.0), np.inf)
    res.update(cd=float(2.0 * mass * slope / (rho0 * math.pi * radius ** 2)), slope=float(slope),
               intercept=float(intercept), r2=float(r2), max_error=float(np.max(err)), t0=float(ts[0]),
               t1=float(ts[-1]))
    if viscosity:
        res["reynolds"] = float(v[sel][0] * 2.0 * radius / viscosity)
    return res


def drag_fit_window(time, speed, mask=None, tolerance: float = 0.03, min_samples: int = 4) -> np.ndarray:
    """The samples over which quadratic drag describes a launched body: a boolean mask.

    Starting at the first usable sample (finite, positive speed, ``mask`` True), the window is
    the longest stretch of consecutive usable samples over which the quadratic law from that
    first speed (:func:`fit_drag` with ``anchor=True``) reproduces every measured speed within
    ``tolerance`` (relative).  A law that holds only while a ball ploughs into fluid at rest, or
    only until it leaves the fluid, is then fitted where it holds.  All False when not even
    ``min_samples`` samples fit.
    """
    t = np.asarray(time, dtype=float).ravel()
    v = np.asarray(speed, dtype=float).ravel()
    ok = np.isfinite(t) & np.isfinite(v) & (v > 0)
    if mask is not None:
        ok &= np.asarray(mask, dtype=bool).ravel()
    out = np.zeros(len(t), bool)
    if not ok.any():
        return out
    i0 = int(np.argmax(ok))
    run = np.flatnonzero(~ok[i0:])
    i1 = i0 + (int(run[0]) if len(run) else len(t) - i0)  # end of the first run of usable samples
    tau, y = t[i0:i1] - t[i0], 1.0 / v[i0:i1]
    num, den = np.cumsum(tau * (y - y[0])), np.cumsum(tau * tau)
    best = 0
    for k in range(max(min_samples, 2), i1 - i0 + 1):
        if den[k - 1] <= 0:
            continue
        pred = y[0] + num[k - 1] / den[k - 1] * tau[:k]
        if np.all(pred > 0) and np.max(np.abs(y[:k] / pred - 1.0)) <= tolerance:
            best = k
    out[i0:i0 + best] = True
    return out


def sphere_drag_coefficient(reynolds, law: str = "auto"):
    """Drag coefficient of a sphere in steady flow against the Reynolds number ``2 R U / nu``:
    ``"schiller-naumann"`` (1933) ``24/Re (1 + 0.15 Re^0.687)`` (Re < 800), ``"brown-lawler"``
    (J. Environ. Eng. 129, 2003) ``24/Re (1 + 0.150 Re^0.681) + 0.407 / (1 + 8710/Re)`` (Re < 2e5),
    or ``"auto"``: Schiller-Naumann up to Re 800, Brown-Lawler above."""
    re = np.asarray(reynolds, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        sn = 24.0 / re * (1.0 + 0.15 * re ** 0.687)
        bl = 24.0 / re * (1.0 + 0.150 * re ** 0.681) + 0.407 / (1.0 + 8710.0 / re)
    if law == "schiller-naumann":
        out = sn
    elif law == "brown-lawler":
        out = bl
    elif law == "auto":
        out = np.where(re <= 800.0, sn, bl)
    else:
        raise ValueError(f"law must be 'auto', 'schiller-naumann' or 'brown-lawler', got {law!r}")
    return out if out.ndim else float(out)


def sphere_speed(time, v0: float, radius: float, mass: float, rho0: float, viscosity: float,
                 added_mass: float = 0.5, law: str = "auto") -> np.ndarray:
    """Speed of a sphere launched at ``v0`` into still fluid, slowed by the standard drag curve
    (:func:`sphere_drag_coefficient`) with the potential-flow added mass:
    ``(M + added_mass rho0 Vb) dv/dt = -1/2 rho0 Cd(Re) pi R^2 v^2``, ``Re = 2 R v / viscosity``
    (no gravity, no history force).  ``time`` starts at the launch.  RK4, 20 steps per sample."""
    t = np.asarray(time, dtype=float).ravel()
    if not (viscosity > 0 and radius > 0 and mass > 0 and rho0 > 0 and v0 > 0):
        raise ValueError("sphere_speed needs positive v0, radius, mass, rho0 and viscosity")
    if law not in ("auto", "schiller-naumann", "brown-lawler"):
        raise ValueError(f"law must be 'auto', 'schiller-naumann' or 'brown-lawler', got {law!r}")
    m_eff = mass + added_mass * rho0 * 4.0 / 3.0 * math.pi * radius ** 3
    k = 0.5 * rho0 * math.pi * radius ** 2 / m_eff

    def accel(v):  # scalar arithmetic: thousands of calls, NumPy's per-call cost would dominate
        re = max(2.0 * radius * v / viscosity, 1e-12)
        if law == "schiller-naumann" or (law == "auto" and re <= 800.0):
            cd = 24.0 / re * (1.0 + 0.15 * re ** 0.687)
        else:
            cd = 24.0 / re * (1.0 + 0.150 * re ** 0.681) + 0.407 / (1.0 + 8710.0 / re)
        return -k * cd * v * v

    out = np.empty(len(t))
    v = float(v0)
    for i in range(len(t)):
        if i:
            h = (t[i] - t[i - 1]) / 20
            for _ in range(20):
                k1 = accel(v)
                k2 = accel(v + 0.5 * h * k1)
                k3 = accel(v + 0.5 * h * k2)
                k4 = accel(v + h * k3)
                v = max(v + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), 0.0)
        out[i] = v
    return out


class DragData:
    """What the drag panels draw, from :func:`drag_data`.

    Arrays (T,): ``time``; ``speed`` |v|; ``v_along`` the velocity along the launch direction
    (the fitted quantity); ``position`` along the launch axis (named ``axis``); ``contact``
    (bool: the fluid pushed the body in the step before the sample, or None);
    ``near_vortons`` (vortons in contact range, or None); ``fit_mask`` (the fitted samples).
    Scalars: ``radius``, ``mass``, ``rho0``, ``viscosity`` (NaN when unknown), ``v0`` (the
    speed of the first fitted sample), ``reynolds0`` (``2 R v0 / viscosity``), ``tolerance``.
    ``fit``: the :func:`fit_drag` dict, with ``window`` ``"auto"`` or ``"given"`` and
    ``within_tolerance`` (False when no stretch from launch follows quadratic drag, and every
    sample in contact was fitted instead).
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def left_fluid(self) -> Optional[float]:
        """Time of the last sample with the body in contact with the fluid, when the record
        goes on after it (the body then coasts: no vortons reach it); else None."""
        if self.contact is None or not len(self.contact):
            return None
        idx = np.flatnonzero(self.contact)
        if not len(idx) or idx[-1] >= len(self.contact) - 2:
            return None
        return float(self.time[idx[-1]])


def _drag_arrays(data, body):
    """(time, v_along, |v|, position along the launch axis, axis name, contact, near, R, M, rho0, nu)."""
    if isinstance(data, History):
        if body >= len(data.body_radius):
            raise ValueError(f"the history has {len(data.body_radius)} bodies; no body {body}")
        t = data.time
        vel = data.body_velocity[body]
        pos = data.body_position[body]
        speed = np.linalg.norm(vel, axis=1)
        ok = np.isfinite(speed) & (speed > 0)
        along = speed
        axis = 0
        if ok.any():
            # velocity along the launch direction: a ball knocked backwards does not fit
            d0 = vel[np.argmax(ok)] / speed[np.argmax(ok)]
            along = vel @ d0
            axis = int(np.argmax(np.abs(d0)))
        return (t, along, speed, pos[:, axis], _AXIS_NAMES[axis], data.body_in_contact(body),
                data.body_near_vortons[body], data.body_radius[body], data.body_mass[body], data.ambient_density,
                getattr(data, "viscosity", float("nan")))
    if _is_sim(data):
        _need_history(data, "drag_curve")
    try:
        t, speed, pos = data
    except (TypeError, ValueError):
        raise TypeError("drag_curve needs a History or a (time, speed, position) tuple, "
                        f"got {type(data).__name__}") from None
    t = np.asarray(t, float)
    speed = np.asarray(speed, float)
    pos = np.asarray(pos, float)
    if pos.ndim == 2:
        pos = pos[:, 0]
    return t, speed, np.abs(speed), pos, "x", None, None, None, None, None, float("nan")


def drag_data(data, body: int = 0, radius: Optional[float] = None, mass: Optional[float] = None,
              rho0: Optional[float] = None, viscosity: Optional[float] = None,
              fit_range: Optional[Tuple[float, float]] = None, tolerance: float = 0.03) -> DragData:
    """The data and quadratic-drag fit that :func:`drag_curve` draws, as a :class:`DragData`.

    ``data``: a :class:`History` (``body`` picks the ball; radius, mass, density and viscosity
    come from it) or a tuple ``(time, speed, position)`` (then pass ``radius`` and ``mass``;
    ``rho0`` defaults to 1).  The fit window is ``fit_range=(t0, t1)`` if given, else
    :func:`drag_fit_window` over the samples where the fluid pushed the ball.
    """
    t, v_along, speed, pos, axis, contact, near, r_h, m_h, rho_h, nu_h = _drag_arrays(data, body)
    radius = radius if radius is not None else r_h
    mass = mass if mass is not None else m_h
    rho0 = rho0 if rho0 is not None else (rho_h if rho_h is not None else 1.0)
    viscosity = float(viscosity) if viscosity is not None else float(nu_h)
    if radius is None or mass is None:
        raise ValueError("drag_curve needs radius= and mass= when given arrays instead of a History")
    within = True
    if fit_range is not None:
        sel = (t >= fit_range[0]) & (t <= fit_range[1])
        window = "given"
    else:
        sel = drag_fit_window(t, v_along, contact, tolerance)
        window = "auto"
        if not sel.any():
            within = False  # fit the first contact run, and say the law does not hold
            sel = np.ones(len(t), bool) if contact is None else contact.copy()
    fit = fit_drag(t, v_along, radius, mass, rho0, mask=sel, anchor=True,
                   viscosity=viscosity if viscosity > 0 else None)
    fit.update(window=window, within_tolerance=within, tolerance=float(tolerance))
    ok = np.isfinite(v_along) & (v_along > 0) & sel
    v0 = float(v_along[np.argmax(ok)]) if ok.any() else float("nan")
    re0 = 2 * radius * v0 / viscosity if viscosity > 0 else float("nan")
    coupling = getattr(data, "body_coupling", None) if isinstance(data, History) else None
    return DragData(coupling=coupling, time=t, speed=speed, v_along=v_along, position=pos, axis=axis, contact=contact,
                    near_vortons=near, fit_mask=sel, radius=float(radius), mass=float(mass), rho0=float(rho0),
                    viscosity=viscosity, v0=v0, reynolds0=re0, tolerance=float(tolerance), fit=fit)


_FIT_COLOR, _REF_COLOR, _COAST_COLOR = "C3", "0.35", "0.55"


def _shade_regions(ax, dd: DragData, labels: bool = False):
    """The fit window (red band) and the stretch after the body left the fluid (grey band)."""
    fit = dd.fit
    if np.isfinite(fit["t0"]):
        ax.axvspan(fit["t0"], fit["t1"], color=_FIT_COLOR, alpha=0.08, lw=0)
        if labels:
            ax.text(0.5 * (fit["t0"] + fit["t1"]), 0.02, "fit\nwindow", transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8, color=_FIT_COLOR)
    t_left = dd.left_fluid()
    if t_left is not None:
        ax.axvspan(t_left, float(np.nanmax(dd.time)), color=_COAST_COLOR, alpha=0.12, lw=0)
        if labels:
            ax.text(0.5 * (t_left + float(np.nanmax(dd.time))), 0.35,
                    "ball has left the smoke:\nno vortons in contact,\nno drag", transform=ax.get_xaxis_transform(),
                    ha="center", va="center", fontsize=8, color="0.25")


def _fit_curve(dd: DragData, tt):
    fit = dd.fit
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = fit["intercept"] + fit["slope"] * tt
        v = np.where(inv > 0, 1.0 / inv, np.nan)
    return inv, v


def drag_speed_panel(ax, dd: DragData, reference: bool = True, reference_cd: Optional[float] = None):
    """The speed against time with the quadratic-drag fit (solid over its window, dashed
    beyond), the fit window and the coasting stretch labelled, and, with ``reference``, a real
    sphere launched alike (:func:`sphere_speed`, when the viscosity is known).  ``reference_cd``
    adds the quadratic law with that constant Cd from the same start."""
    t, fit = dd.time, dd.fit
    _shade_regions(ax, dd, labels=True)
    ax.plot(t, dd.speed, "-", color="C0", lw=1.8, label="simulated ball |v|")
    if np.nanmax(np.abs(dd.v_along - dd.speed), initial=0.0) > 0.01 * max(np.nanmax(dd.speed, initial=0.0), 1e-300):
        ax.plot(t, dd.v_along, "-", color="C0", lw=0.8, alpha=0.5, label="v along the launch direction")
    t_end = float(np.nanmax(t)) if len(t) else 0.0
    lines = []
    if np.isfinite(fit["cd"]):
        tw = np.linspace(fit["t0"], fit["t1"], 200)
        tx = np.linspace(fit["t1"], t_end, 200)
        ax.plot(tw, _fit_curve(dd, tw)[1], "-", color=_FIT_COLOR, lw=1.6,
                label=f"quadratic drag, Cd = {fit['cd']:.3g} (fitted over the window)")
        if t_end > fit["t1"]:
            ax.plot(tx, _fit_curve(dd, tx)[1], "--", color=_FIT_COLOR, lw=1.0, label="the same law, extrapolated")
        how = (f"within {100 * dd.tolerance:g}% of the speed" if fit["within_tolerance"]
               else f"no stretch fits within {100 * dd.tolerance:g}%; max error {100 * fit['max_error']:.0f}%")
        lines.append(f"fitted over t = {fit['t0']:.2f}-{fit['t1']:.2f} ({how}): Cd = {fit['cd']:.3g}")
    else:
        lines.append("fit: not enough samples")
    if reference and dd.viscosity > 0 and np.isfinite(dd.v0) and np.isfinite(fit["t0"]):
        tr = np.linspace(fit["t0"], t_end, 300)
        law = "schiller-naumann" if dd.reynolds0 <= 800 else "brown-lawler"
        ax.plot(tr, sphere_speed(tr - tr[0], dd.v0, dd.radius, dd.mass, dd.rho0, dd.viscosity, law=law), ":",
                color=_REF_COLOR, lw=1.4, label="real sphere, same launch")
        name = "Schiller-Naumann" if law == "schiller-naumann" else "Brown-Lawler"
        lines.append(f"real sphere at Re\u2080 = {dd.reynolds0:.3g}: Cd = "
                     f"{sphere_drag_coefficient(dd.reynolds0, law):.3g} ({name}, added mass \u00bd)")
    if reference_cd and np.isfinite(dd.v0) and np.isfinite(fit["t0"]):
        k = dd.rho0 * reference_cd * math.pi * dd.radius ** 2 / (2 * dd.mass)
        tr = np.linspace(fit["t0"], t_end, 300)
        ax.plot(tr, 1.0 / (1.0 / dd.v0 + k * (tr - tr[0])), "-.", color="0.5", lw=1.0,
                label=f"Cd = {reference_cd:g}, same launch")
    ax.text(0.98, 0.97, "\n".join(lines), transform=ax.transAxes, ha="right", va="top", fontsize=8,
            bbox=dict(boxstyle="round", fc="white", ec="0.7", alpha=0.9))
    ax.set_ylabel("speed |v| [L/T]")
    ax.set_ylim(0, 1.08 * float(np.nanmax(dd.speed, initial=1.0)))
    t_start = float(np.nanmin(t)) if len(t) else 0.0
    ax.set_xlim(t_start, t_end)
    # the legend just right of the fit window, below the text box: the speed has dropped there
    x = 0.03
    if np.isfinite(fit["t1"]) and t_end > t_start:
        x = min(0.45, (fit["t1"] - t_start) / (t_end - t_start) + 0.03)
    ax.legend(loc="upper left", fontsize=8, bbox_to_anchor=(x, 0.86))
    ax.grid(alpha=0.3)


def drag_inverse_speed_panel(ax, dd: DragData):
    """1 / speed against time: a straight line where quadratic drag holds, the fitted line
    over its window (solid) and beyond (dashed)."""
    t, fit = dd.time, dd.fit
    _shade_regions(ax, dd)
    with np.errstate(divide="ignore"):
        inv = np.where(dd.v_along > 0, 1.0 / dd.v_along, np.nan)
    ax.plot(t, inv, ".", ms=2.5, color="C0", label="1 / v (simulated)")
    if np.isfinite(fit["cd"]):
        tw = np.linspace(fit["t0"], fit["t1"], 50)
        ax.plot(tw, _fit_curve(dd, tw)[0], "-", color=_FIT_COLOR, lw=1.4,
                label=f"fit: slope \u03c1\u2080 Cd \u03c0R\u00b2 / 2M = {fit['slope']:.3g} [1/L]")
        t_end = float(np.nanmax(t))
        if t_end > fit["t1"]:
            tx = np.linspace(fit["t1"], t_end, 50)
            ax.plot(tx, _fit_curve(dd, tx)[0], "--", color=_FIT_COLOR, lw=1.0)
        top = np.nanmax(inv) if np.isfinite(inv).any() else 1.0
        ax.set_ylim(0, 1.15 * top)
    ax.set_ylabel("1 / speed [T/L]")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)


def drag_contact_panel(ax, dd: DragData):
    """The number of vortons within contact range of the ball (closer than R + s): the contact
    rule acts only on these, so none means no drag.  Without contact data, the position."""
    _shade_regions(ax, dd)
    if dd.near_vortons is not None:
        ax.step(dd.time, dd.near_vortons, where="mid", color="C2", lw=1.0)
        ax.set_ylabel("vortons in\ncontact range")
        ax.set_ylim(bottom=0)
    else:
        ax.plot(dd.time, dd.position, "-", color="C2")
        ax.set_ylabel(f"{dd.axis} [L]")
    ax.grid(alpha=0.3)


def drag_reynolds_panel(ax, dd: DragData, smooth: int = 5):
    """The drag coefficient against the Reynolds number along the run, beside the sphere's
    standard curve (:func:`sphere_drag_coefficient`): from the ball's deceleration a,
    Cd = (M + rho0 V / 2) |a| / (1/2 rho0 v^2 pi R^2), the added mass included (the fluid the
    ball accelerates), Re = 2 R v / viscosity.  The speeds are smoothed over ``smooth`` samples.
    It assumes no other force along the motion (a body without gravity); the fluid's own
    motion around the ball (smoke it flies through) shows as scatter."""
    t, v = np.asarray(dd.time, float), np.asarray(dd.v_along, float)
    ok = np.isfinite(v) & (v > 0)
    if dd.viscosity > 0 and ok.sum() > 2 * smooth + 2:
        k = np.ones(smooth) / smooth
        vs = np.convolve(v[ok], k, mode="valid")
        ts = np.convolve(t[ok], k, mode="valid")
        a = np.gradient(vs, ts)
        V = 4.0 / 3.0 * np.pi * dd.radius ** 3
        cd = (dd.mass + 0.5 * dd.rho0 * V) * -a / (0.5 * dd.rho0 * vs ** 2 * np.pi * dd.radius ** 2)
        re = 2 * dd.radius * vs / dd.viscosity
        good = (cd > 0) & np.isfinite(cd)
        ax.plot(re[good], cd[good], ".", color="C0", ms=4, zorder=3, label="this run (time runs right to left)")
        if good.any():
            i0 = np.flatnonzero(good)[0]
            ax.annotate(f"t = {ts[i0]:.2g}", (re[i0], cd[i0]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        lo, hi = (re[good].min(), re[good].max()) if good.any() else (1.0, 1e3)
        rr = np.geomspace(max(lo / 2, 0.1), hi * 2, 200)
        ax.plot(rr, sphere_drag_coefficient(rr), "-", color=_REF_COLOR, lw=1.2, label="sphere, steady (Schiller-Naumann)")
        ax.set_xscale("log"); ax.set_yscale("log")
        from matplotlib.ticker import LogFormatter
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
            axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
        ax.legend(loc="lower left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no viscosity: no Reynolds number", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("Reynolds number 2 R v / \u03bd")
    ax.set_ylabel("drag coefficient Cd")
    ax.grid(alpha=0.3, which="both")


def drag_curve(data, body: int = 0, radius: Optional[float] = None, mass: Optional[float] = None,
               rho0: Optional[float] = None, fit_range: Optional[Tuple[float, float]] = None, ax=None,
               reference_cd: Optional[float] = None, viscosity: Optional[float] = None,
               tolerance: float = 0.03, reference: bool = True):
    """Part 4, figure 5: a ball's speed against time, with a quadratic-drag fit.

    ``data`` is a :class:`History` (``body`` picks the ball; radius, mass, density and viscosity
    come from it) or a tuple ``(time, speed, position)`` (position (T,) or (T, 3), its x is
    used; pass ``radius``, ``mass``, and ``rho0`` and ``viscosity`` if known).  A ``Sim`` is
    refused with a note on recording a History.

    The fit is quadratic drag from the launch speed, ``v(t) = v0 / (1 + v0 k t)`` with
    ``k = rho0 Cd pi R^2 / (2 M)``: only Cd is fitted, over the window where that law matches
    every sample within ``tolerance`` (:func:`drag_fit_window`; while the fluid pushes the ball)
    or over ``fit_range=(t0, t1)``.  Drawn solid over the window and dashed beyond; the window
    is shaded and labelled, and so is the stretch after the ball left the fluid (no vortons in
    contact range: the contact rule exerts no force there).  With ``reference`` and a known
    viscosity, a real sphere's speed from the same launch (:func:`sphere_speed`) is dotted;
    ``reference_cd`` adds a constant-Cd curve.

    Without ``ax``: three panels, one function each: speed (:func:`drag_speed_panel`),
    1/speed (:func:`drag_inverse_speed_panel`) and, with the physical body coupling, the drag
    coefficient against the Reynolds number along the run over the sphere's standard curve
    (:func:`drag_reynolds_panel`), or with the articles' contact rule the vortons in contact
    range (:func:`drag_contact_panel`).  With ``ax``: only the speed panel.  The fit dict
    (:func:`fit_drag`, plus ``window``, ``within_tolerance``, ``tolerance``) is attached as
    ``fig.drag_fit`` and the :class:`DragData` as ``fig.drag_data``.
    """
    dd = drag_data(data, body, radius, mass, rho0, viscosity, fit_range, tolerance)
    if ax is None and dd.coupling == "articles":
        fig = _new_figure((7.5, 7.0))
        axes = fig.subplots(3, 1, sharex=True, height_ratios=(2.4, 1.2, 0.9))
        drag_speed_panel(axes[0], dd, reference, reference_cd)
        drag_inverse_speed_panel(axes[1], dd)
        drag_contact_panel(axes[2], dd)
        axes[2].set_xlabel(_TIME)
    elif ax is None:
        fig = _new_figure((7.5, 9.0))
        gs = fig.add_gridspec(4, 1, height_ratios=(2.4, 1.2, 0.45, 2.2), hspace=0.08)
        axes = [fig.add_subplot(gs[0])]
        axes.append(fig.add_subplot(gs[1], sharex=axes[0]))
        axes.append(fig.add_subplot(gs[3]))
        drag_speed_panel(axes[0], dd, reference, reference_cd)
        drag_inverse_speed_panel(axes[1], dd)
        axes[1].set_xlabel(_TIME)
        plt_setp = [lab.set_visible(False) for lab in axes[0].get_xticklabels()]
        del plt_setp
        drag_reynolds_panel(axes[2], dd)
        nu = f", \u03bd = {dd.viscosity:g}" if dd.viscosity > 0 else ""
        axes[0].set_title(f"Ball launched at {dd.v0:.3g} L/T (R = {dd.radius:g}, M = {dd.mass:g}) into fluid of "
                          f"density {dd.rho0:g}{nu}", fontsize=10)
        _units_note(fig)
    else:
        fig = ax.figure
        drag_speed_panel(ax, dd, reference, reference_cd)
        ax.set_xlabel(_TIME)
    fig.drag_fit = dd.fit
    fig.drag_data = dd
    return fig


def motion(history: History, body: int = 0, ax=None):
    """A body's motion against time: position components, velocity (|v| and components) and
    angular velocity (|W| and components), and its temperature when that changes by more than
    1e-4 of its value.  Without
    ``ax`` a Figure with one panel per quantity; with ``ax`` (a sequence of Axes, one per panel)
    draws into those.  Needs a :class:`History` (a ``Sim`` is refused with a note on recording
    one)."""
    _need_history(history, "motion")
    if body >= len(history.body_radius):
        raise ValueError(f"the history has {len(history.body_radius)} bodies; no body {body}")
    t = history.time
    pos = history.body_position[body]
    vel = history.body_velocity[body]
    w = history.body_angular_velocity[body]
    temp = history.body_temperature[body]
    # a temperature panel only where the body's temperature changes visibly (1e-4 of its value)
    show_temp = bool(np.nanmax(temp) - np.nanmin(temp) > 1e-4 * np.nanmax(np.abs(temp))) if len(temp) else False
    n = 4 if show_temp else 3
    if ax is None:
        fig = _new_figure((7.0, 1.9 * n + 0.6))
        axes = fig.subplots(n, 1, sharex=True)
        own = True
    else:
        axes = list(np.ravel(ax))
        if len(axes) < n:
            raise ValueError(f"motion() draws {n} panels here; got {len(axes)} Axes")
        fig = axes[0].figure
        own = False
    for i, c in enumerate("xyz"):
        axes[0].plot(t, pos[:, i], label=c)
    axes[0].set_ylabel("position [L]")
    axes[0].legend(fontsize=8, ncol=3, loc="best")
    axes[1].plot(t, np.linalg.norm(vel, axis=1), color="k", lw=1.5, label="|v|")
    for i, c in enumerate("xyz"):
        axes[1].plot(t, vel[:, i], lw=0.9, alpha=0.8, label=f"v{c}")
    axes[1].set_ylabel("velocity [L/T]")
    axes[1].legend(fontsize=8, ncol=4, loc="best")
    axes[2].plot(t, np.linalg.norm(w, axis=1), color="k", lw=1.5, label="|W|")
    for i, c in enumerate("xyz"):
        axes[2].plot(t, w[:, i], lw=0.9, alpha=0.8, label=f"W{c}")
    axes[2].set_ylabel("angular\nvelocity [1/T]")
    axes[2].legend(fontsize=8, ncol=4, loc="best")
    if show_temp:
        axes[3].plot(t, temp, color="C3")
        axes[3].set_ylabel("temperature\n(ambient = 1)")
    for a in axes[:n]:
        a.grid(alpha=0.3)
    axes[n - 1].set_xlabel(_TIME)
    fixed = ", fixed" if history.body_fixed[body] else ""
    axes[0].set_title(f"Body {body}: R = {history.body_radius[body]:g}, M = {history.body_mass[body]:g}{fixed}",
                      fontsize=10)
    if own:
        _units_note(fig)
    return fig


# --------------------------------------------------------------------------------- snapshots
def _body_list(sim):
    return [(np.asarray(b.position, float), float(b.radius)) for b in sim.bodies]


def _snapshot_figure(extent, colorbar: bool, max_width: float = 7.0, max_height: float = 5.5):
    """A Figure and Axes sized so that an equal-aspect picture of ``extent = (h0, h1, v0, v1)``
    fills it with little empty margin; a wide picture gets its colour bar underneath.  Returns
    (fig, ax, colorbar keywords)."""
    h0, h1, v0, v1 = extent
    aspect = max(h1 - h0, 1e-12) / max(v1 - v0, 1e-12)
    wide = aspect > 2.2
    side = 0.85 if colorbar and not wide else 0.0    # a vertical colour bar and its label
    below = 0.75 if colorbar and wide else 0.0       # a horizontal one
    frame_w, frame_h = 0.75, 0.85                    # tick labels, axis labels, title, units note
    pw = max_width - frame_w - side
    ph = pw / aspect
    if ph > max_height - frame_h - below:
        ph = max_height - frame_h - below
        pw = ph * aspect
    ph = max(ph, 0.6)
    fig = _new_figure((pw + frame_w + side, ph + frame_h + below))
    ax = fig.add_subplot()
    cbar = dict(location="bottom", shrink=0.6, aspect=30, pad=0.02) if wide else dict(shrink=0.9, pad=0.02)
    return fig, ax, cbar


def _extent_of(points, sim, h: int, v: int, pad: float = 0.03):
    lo = np.array([points[:, h].min(), points[:, v].min()]) if len(points) else np.array([-1.0, -1.0])
    hi = np.array([points[:, h].max(), points[:, v].max()]) if len(points) else np.array([1.0, 1.0])
    for c, r in _body_list(sim):
        lo = np.minimum(lo, [c[h] - r, c[v] - r])
        hi = np.maximum(hi, [c[h] + r, c[v] + r])
    m = pad * float(max(np.max(hi - lo), 1e-6))
    return (float(lo[0] - m), float(hi[0] + m), float(lo[1] - m), float(hi[1] + m))


def tracers(sim, color: Optional[str] = "density", view: str = "xz", ax=None, s: Optional[float] = None,
            max_points: int = 200000, cmap: Optional[str] = None, bounds=None, alpha: float = 0.6,
            colorbar: bool = True, seed: int = 0):
    """Scatter plot of a Sim's tracers (the smoke) projected on a plane, or in 3D.

    ``color``: ``"density"`` (deviation from ambient), ``"temperature"``, ``"speed"`` (of the
    last advection), ``"age"``, an (N,) array, or None for plain smoke; a colouring that is the
    same for every tracer draws plain smoke and says so in the title.  ``view``: ``"xz"``,
    ``"xy"``, ``"yz"`` (horizontal, vertical axes) or ``"3d"``.  At most ``max_points`` tracers
    are drawn (a fixed random subset).  The colour range covers the middle 98% of the values
    (symmetric about 0 for density); the colour bar's arrows mark values beyond it.  Bodies are
    drawn as circles (spheres in 3D).
    ``bounds=(h0, h1, v0, v1)`` sets the view limits (default: the tracers and bodies); the
    figure is sized to them.  Returns the Figure.
    """
    _need_sim(sim, "tracers")
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
        note = f"; {label.split(' [')[0]} {c[0]:.3g} everywhere"
        c = None  # a uniform colour says nothing; draw plain smoke
    if s is None:
        s = float(np.clip(20000.0 / max(len(p), 1), 0.15, 6.0))
    cmap = cmap or _default_cmap(color)
    vmin = vmax = None
    extend = "neither"
    if c is not None and len(c):
        # the colour range covers 98% of the tracers, so that a few outliers do not wash out the rest
        finite = c[np.isfinite(c)]
        if color == "density":
            m = float(np.percentile(np.abs(finite), 99)) or float(np.max(np.abs(finite))) or 1.0
            vmin, vmax = -m, m
        else:
            vmin, vmax = (float(x) for x in np.percentile(finite, [1, 99]))
            if vmax <= vmin:
                vmin, vmax = float(finite.min()), float(finite.max())
        below, above = bool(np.any(finite < vmin)), bool(np.any(finite > vmax))
        extend = {(False, False): "neither", (True, False): "min", (False, True): "max"}.get((below, above), "both")
    own = ax is None
    cbar_kw: Dict[str, Any] = dict(shrink=0.8)
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
        ax.set_xlabel("x [L]")
        ax.set_ylabel("y [L]")
        ax.set_zlabel("z [L]")
        try:
            ax.set_aspect("equal")
        except (NotImplementedError, ValueError):
            pass
    else:
        h, vax = view_axes(view)
        extent = tuple(map(float, bounds)) if bounds is not None else _extent_of(pos, sim, h, vax)
        if ax is None:
            fig, ax, cbar_kw = _snapshot_figure(extent, colorbar and c is not None)
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
        ax.set_xlabel(f"{_AXIS_NAMES[h]} [L]")
        ax.set_ylabel(f"{_AXIS_NAMES[vax]} [L]")
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
    if c is not None and colorbar:
        fig.colorbar(sc, ax=ax, label=label, extend=extend, **cbar_kw)
    shown = f" ({len(p)} shown)" if len(p) < n else ""
    ax.set_title(f"{n} tracers{shown} at t = {sim.time:.3g}{note}", fontsize=10)
    if own:
        _units_note(fig)
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
            return np.asarray(tr.density), "density deviation [M/L\u00b3]"
        if color == "temperature":
            return np.asarray(tr.temperature), "temperature (ambient = 1)"
        if color == "speed":
            return np.linalg.norm(np.asarray(tr.velocity), axis=1), "speed [L/T]"
        if color == "age":
            return np.asarray(tr.age), "age [T]"
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
    _need_sim(sim, "vorticity_field")
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
    """Image of a Sim's vorticity on the plane ``axis = value`` (default the y = 0 plane, seen
    as x-z).

    Shows ``|w|`` or, with ``component="x"|"y"|"z"``, that signed component.  See
    :func:`vorticity_field` for ``method`` (``"splat"``: Gaussian splat of the vortons near the
    plane, fast and robust; ``"curl"``: finite-difference curl of the solver's velocity).
    Bodies cut by the plane are outlined.  ``log=True`` uses a logarithmic colour scale for |w|.
    The figure is sized to the picture.  Returns the Figure.
    """
    _need_sim(sim, "vorticity_slice")
    field, (h0, h1, v0, v1) = vorticity_field(sim, axis, value, resolution, bounds, method)
    normal, h, v = _plane_axes(axis)
    if component is None:
        img = np.linalg.norm(field, axis=-1)
        label, cmap = "|\u03c9| [1/T]", cmap or "magma"
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
        label, cmap = f"\u03c9_{component} [1/T]", cmap or "RdBu_r"
        kw = dict(vmin=-m, vmax=m)
    own = ax is None
    cbar_kw: Dict[str, Any] = dict(shrink=0.8)
    if ax is None:
        fig, ax, cbar_kw = _snapshot_figure((h0, h1, v0, v1), colorbar)
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
    ax.set_xlabel(f"{_AXIS_NAMES[h]} [L]")
    ax.set_ylabel(f"{_AXIS_NAMES[v]} [L]")
    ax.set_title(f"vorticity on the plane {_AXIS_NAMES[normal]} = {value:g} at t = {sim.time:.3g}", fontsize=10)
    if colorbar:
        fig.colorbar(im, ax=ax, label=label, **cbar_kw)
    if own:
        _units_note(fig)
    return fig


# --------------------------------------------------------------------------------- diagnostics
#: The panels of :func:`diagnostics` by default.  ``momentum``, ``angular_momentum`` and
#: ``heat`` combine the fluid's diagnostics with the bodies' state (see :func:`diagnostics`).
DEFAULT_DIAGNOSTICS = ("kinetic_energy", "enstrophy", "momentum", "angular_momentum", "heat", "circulation")

# key: (panel title, y-axis label)
_DIAG_LABELS = {
    "kinetic_energy": ("kinetic energy of the fluid", "E [M L\u00b2/T\u00b2]"),
    "enstrophy": ("enstrophy \u03a3 |\u03c9|\u00b2 V", "[L\u00b3/T\u00b2]"),
    "circulation": ("total vortex strength \u03a3 \u03c9 V", "[L\u00b3/T]"),
    "linear_impulse": ("linear impulse \u00bd \u03a3 x \u00d7 \u03c9V", "[L\u2074/T]"),
    "angular_impulse": ("angular impulse \u2153 \u03a3 x \u00d7 (x \u00d7 \u03c9V)", "[L\u2075/T]"),
    "total_momentum": ("momentum, fluid + free bodies", "[M L/T]"),
    "mass_deviation": ("mass deviation \u03a3 d V", "[M]"),
    "fluid_heat": ("heat of the fluid", "Q"),
    "heat": ("heat change since the start (Q = heat capacity \u00d7 temperature)", "\u0394Q"),
    "momentum": ("linear momentum: fluid \u03c1\u2080I + free bodies", "[M L/T]"),
    "angular_momentum": ("angular momentum about the origin", "[M L\u00b2/T]"),
    "vortons": ("vortons", "count"),
    "tracers": ("tracers", "count"),
}
_COMPONENT_COLORS = ("C0", "C1", "C2")


def _free_bodies(history: History):
    return [b for b, fixed in enumerate(history.body_fixed) if not fixed]


def _parts_series(fluid, bodies):
    """Lines for a vector conserved by fluid + bodies together: the total's components, and the
    fluid's and the bodies' shares of the component the bodies exchange most of."""
    total = fluid if bodies is None else fluid + bodies
    out = [(f"total {c}", total[:, i], dict(color=_COMPONENT_COLORS[i], lw=1.6)) for i, c in enumerate("xyz")]
    if bodies is not None and len(bodies):
        k = int(np.argmax(np.nanmax(bodies, axis=0) - np.nanmin(bodies, axis=0)))
        c = "xyz"[k]
        out.append((f"fluid {c}", fluid[:, k], dict(color=_COMPONENT_COLORS[k], ls="--", lw=1.0)))
        out.append((f"bodies {c}", bodies[:, k], dict(color=_COMPONENT_COLORS[k], ls=":", lw=1.2)))
    return out


def _diag_series(history: History, key: str, relative: bool):
    """[(label, y, plot keywords)] for one panel, or None if the key was not recorded."""
    diag = history.diagnostics
    rho0 = history.ambient_density
    free = _free_bodies(history)
    if key == "momentum":
        if "linear_impulse" not in diag:
            return None
        bodies = None
        if free:
            bodies = sum(np.nan_to_num(history.body_momentum[b]) for b in free)
        return _parts_series(rho0 * diag["linear_impulse"], bodies)
    if key == "angular_momentum":
        if "angular_impulse" not in diag:
            return None
        bodies = None
        if free:
            bodies = sum(np.nan_to_num(history.body_angular_momentum[b])
                         + np.cross(np.nan_to_num(history.body_position[b]), np.nan_to_num(history.body_momentum[b]))
                         for b in free)
        return _parts_series(rho0 * diag["angular_impulse"], bodies)
    if key == "heat" and "heat" in diag and "fluid_heat" in diag:
        total, fluid = diag["heat"], diag["fluid_heat"]
        out = [("fluid", fluid - fluid[0], dict(color="C0", lw=1.4))]
        if len(history.body_radius):
            bodies = total - fluid
            out.append(("bodies", bodies - bodies[0], dict(color="C3", lw=1.4)))
            out.append(("total", total - total[0], dict(color="k", ls="--", lw=1.0)))
        return out
    if key not in diag:
        return None
    y = diag[key]
    if y.ndim == 1:
        return [(key.replace("_", " "), y - y[0] if relative and len(y) else y, dict(color="C0", lw=1.4))]
    return [(c, y[:, i], dict(color=_COMPONENT_COLORS[i], lw=1.4)) for i, c in enumerate("xyz"[: y.shape[1]])]


def _is_constant(series) -> bool:
    for _, y, _ in series:
        y = np.asarray(y, float)
        y = y[np.isfinite(y)]
        if len(y) and np.ptp(y) > 1e-9 * max(1.0, float(np.max(np.abs(y)))):
            return False
    return True


def diagnostics(history: History, keys: Sequence[str] = DEFAULT_DIAGNOSTICS, ax=None, relative: bool = False,
                hide_constant: Optional[bool] = None):
    """Diagnostics recorded in a :class:`History` against time, one panel per key.

    ``keys``: names from :meth:`vortonpy.Sim.diagnostics` (vectors drawn as x, y, z
    components; missing ones are skipped) and three that combine the fluid with the bodies:

    - ``"momentum"``: fluid (``rho0 * linear_impulse``) + free bodies, the total's components
      and, where bodies move, the fluid's and the bodies' shares of the component they
      exchange most of; fluid + bodies is what the model conserves when no outside force acts;
    - ``"angular_momentum"``: the same for ``rho0 * angular_impulse`` and the bodies' spin and
      orbital angular momentum about the origin;
    - ``"heat"``: the change since the first record of the fluid's heat, the bodies' and their
      total (conserved through conduction).

    ``relative=True`` plots other scalars as the change from their first value.  A panel in
    which nothing changes is left out and named under the figure (``hide_constant``, on by
    default for a Figure made here).  Without ``ax`` a Figure (two columns); with ``ax`` a
    single Axes (every key on it) or a sequence of Axes (one per key).  Needs a History: a
    ``Sim`` is refused with a note on recording one.
    """
    _need_history(history, "diagnostics")
    if isinstance(keys, str):
        keys = (keys,)
    panels = []
    for k in keys:
        series = _diag_series(history, k, relative)
        if series is not None:
            panels.append((k, series))
    if not panels:
        raise ValueError(f"none of the keys {list(keys)} were recorded; available: "
                         f"{sorted(history.diagnostics) + ['momentum', 'angular_momentum', 'heat']}")
    if hide_constant is None:
        hide_constant = ax is None
    hidden = []
    if hide_constant and len(panels) > 1:
        hidden = [k for k, series in panels if _is_constant(series)]
        panels = [(k, series) for k, series in panels if k not in hidden] or panels[:1]
    t = history.time
    own = ax is None
    if ax is None:
        n = len(panels)
        ncol = 2 if n > 1 else 1
        nrow = (n + ncol - 1) // ncol
        fig = _new_figure((9.0 if ncol == 2 else 6.0, 2.3 * nrow + 0.5))
        gs = fig.add_gridspec(nrow, ncol)
        axes = []
        for i in range(n):
            r, c = divmod(i, ncol)
            spec = gs[r, :] if (i == n - 1 and n % ncol) else gs[r, c]  # an odd last panel spans the row
            axes.append(fig.add_subplot(spec, sharex=axes[0] if axes else None))
    elif isinstance(ax, (list, tuple, np.ndarray)):
        axes = list(np.ravel(ax))
        if len(axes) < len(panels):
            raise ValueError(f"{len(panels)} panels need {len(panels)} axes, got {len(axes)}")
        fig = axes[0].figure
    else:
        axes = [ax] * len(panels)
        fig = ax.figure
    single = len(set(map(id, axes[: len(panels)]))) == 1
    for a, (k, series) in zip(axes, panels):
        title, ylabel = _DIAG_LABELS.get(k, (k.replace("_", " "), ""))
        if relative and k in history.diagnostics and history.diagnostics[k].ndim == 1 and k != "heat":
            title += " (change)"
        for label, y, kw in series:
            a.plot(t, y, label=f"{k}: {label}" if single else label, **kw)
        if not single:
            a.set_title(title, fontsize=9)
            a.set_ylabel(ylabel)
            if len(series) > 1:
                a.legend(fontsize=7, ncol=3 if len(series) > 3 else len(series), loc="best")
        a.grid(alpha=0.3)
    if single:
        axes[0].legend(fontsize=8)
        axes[0].set_xlabel(_TIME)
    else:
        for a in axes[: len(panels)]:
            spec = a.get_subplotspec()
            if spec is None or spec.is_last_row():
                a.set_xlabel(_TIME)
            else:
                a.tick_params(labelbottom=False)
    if own:
        _units_note(fig, ("unchanged, not drawn: " + ", ".join(h.replace("_", " ") for h in hidden)) if hidden else "")
    return fig
