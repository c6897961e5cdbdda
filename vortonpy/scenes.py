"""The seeds' scenes, ready to step (physics.md section 3), plus classic vortex flows.

Every function returns a :class:`vortonpy.Sim`; keyword overrides change the scene, and any
extra keyword goes to ``Sim(...)`` (for example ``threads=1`` or ``solver="direct"``).

Particle sizing: vortons sit on a lattice of spacing h and get the core radius
s = h (3 / 4 pi)^(1/3), so that their volumes 4/3 pi s^3 tile space exactly (V = h^3).  Then
sum w V is the true integral of vorticity, densities splat to the right mass, and PSE sees
overlapping particles (its kernel width is the spacing).  The seeds used s = h/2; their
volumes covered only 52% of space.
"""
from __future__ import annotations

import numpy as np

from ._sim import RigidBody, Sim

__all__ = ["vortex_ring", "jet_ring", "vortex_tube", "crossed_tubes", "ball_through_smoke", "spinning_ball",
           "dye_drop", "two_drops", "stratified", "hot_ball", "SCENES", "lattice", "radius_for_spacing"]

RADIUS_PER_SPACING = (3.0 / (4.0 * np.pi)) ** (1.0 / 3.0)

#: Scenes with strong stretching or sharp density fronts remesh their vortons onto a lattice
#: every 20 frames (csrc/remesh.c) and use a velocity grid no finer than the vortons' spacing
#: (grid_cells_per_vorton=1).  Without both, the particle noise these flows build up is
#: amplified by stretching until a step blows up (dye_drop at frame ~110, jet_ring ~90,
#: hot_ball ~360, spinning_ball ~120 with the default finer grid): a grid finer than the
#: vortons resolves velocity gradients at scales the particles cannot represent.  Pass
#: remesh_interval=0, grid_cells_per_vorton=4 to see the raw particle method.
REMESH = dict(remesh_interval=20, remesh_threshold=0.05, grid_cells_per_vorton=1.0)


def radius_for_spacing(h: float) -> float:
    """Core radius whose sphere volume equals a lattice cell h^3."""
    return h * RADIUS_PER_SPACING


def lattice(lo, hi, spacing: float) -> np.ndarray:
    """Points of a cubic lattice with the given spacing, centred in the box [lo, hi], in the
    simulation grid's memory order (x fastest, then y, then z), the order remeshing also
    produces: consecutive vortons then read neighbouring grid nodes in the step's per-vorton
    grid lookups (stretching, buoyancy, advection).  On a 1e5-vorton lattice, a whole step
    was 1.10x faster than with z fastest (stretching 1.67x)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    axes = []
    for a in range(3):
        n = max(1, int(np.floor((hi[a] - lo[a]) / spacing + 1e-9)))
        c = 0.5 * (lo[a] + hi[a])
        axes.append(c + (np.arange(n) - 0.5 * (n - 1)) * spacing)
    g = np.meshgrid(*axes, indexing="ij")
    return np.stack([x.ravel(order="F") for x in g], axis=1)


def _sim(defaults: dict, overrides: dict) -> Sim:
    kw = dict(defaults)
    kw.update(overrides)
    return Sim(**kw)


def _noise(rng, n, amplitude):
    """Random-direction vorticity of the given magnitude ("vortex noise")."""
    v = rng.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return amplitude * v


def _tracers_in_box(rng, lo, hi, n):
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return lo + (hi - lo) * rng.random((n, 3))


def ring_vortons(center=(0, 0, 0), ring_radius=1.0, core=0.2, circulation=1.0, spacing=None, extent=2.5,
                 axis=2):
    """Vortons of a ring with a Gaussian core w = G/(pi sg^2) exp(-rho^2/sg^2), sg = ``core``,
    filling the torus out to ``extent`` core radii on a lattice (default spacing sg/2).
    Returns (position, vorticity, radius); the ring travels along +``axis``."""
    h = spacing or core / 2.0
    R, rmax = ring_radius, extent * core
    pts = lattice([-R - rmax] * 2 + [-rmax], [R + rmax] * 2 + [rmax], h)
    rho_xy = np.hypot(pts[:, 0], pts[:, 1])
    d = np.hypot(rho_xy - R, pts[:, 2])
    keep = (d <= rmax) & (rho_xy > 0)
    p = pts[keep]
    rho_xy, d = rho_xy[keep], d[keep]
    mag = circulation / (np.pi * core ** 2) * np.exp(-(d / core) ** 2)
    # vorticity along +phi_hat (counter-clockwise seen from +z) drives the ring along +z
    phi_hat = np.stack([-p[:, 1] / rho_xy, p[:, 0] / rho_xy, np.zeros(len(p))], axis=1)
    w = mag[:, None] * phi_hat
    perm = {2: [0, 1, 2], 0: [2, 0, 1], 1: [1, 2, 0]}[axis]
    p, w = p[:, perm], w[:, perm]
    return p + np.asarray(center, float), w, np.full(len(p), radius_for_spacing(h))


def vortex_ring(ring_radius=1.0, core=0.2, circulation=1.0, spacing=None, tracers=20000, seed=0, **sim_kw) -> Sim:
    """A vortex ring with a Gaussian core (radius ``core``) travelling along +z, with smoke
    tracers in its core.  Saffman's speed: G/(4 pi R) (ln(8R/sg_eff) - 0.558).

    Inviscid and never remeshed (the raw particle method, for validation): it holds its
    shape for about 2000 frames, after which the particle noise grows (max |w| 8 at frame
    2000, 250 at 3000, 2.5e4 at 6000) and a run fails near frame 6400.  Remeshing and a
    viscosity keep long runs bounded: with ``viscosity=0.01, **scenes.REMESH`` (as
    ``jet_ring`` uses) it ran 8000 frames, though over that time the ring diffuses away
    (max |w| 8 -> 0.05) and remeshing spreads it onto ~7.7e4 lattice vortons."""
    sim = _sim(dict(viscosity=0.0, gravity=(0, 0, 0)), sim_kw)
    p, w, r = ring_vortons(ring_radius=ring_radius, core=core, circulation=circulation, spacing=spacing)
    sim.add_vortons(p, w, r)
    if tracers:
        rng = np.random.default_rng(seed)
        phi = rng.random(tracers) * 2 * np.pi
        rr = core * np.sqrt(rng.random(tracers)) * 1.5
        th = rng.random(tracers) * 2 * np.pi
        rad = ring_radius + rr * np.cos(th)
        sim.add_tracers(np.stack([rad * np.cos(phi), rad * np.sin(phi), rr * np.sin(th)], axis=1))
    return sim


def jet_ring(ring_radius=0.5, core=0.1, circulation=1.0, rings=3, gap=0.6, tracers=20000, seed=0, **sim_kw) -> Sim:
    """A jet: a train of coaxial vortex rings, the later ones catching and leapfrogging the first.

    The fluid is given a little viscosity (0.01): with none, classical stretching of the
    vortons' (not exactly divergence-free) vorticity grows without bound once the rings
    interact closely (frame ~80), a known weakness of vortex particle methods without
    remeshing or divergence filtering."""
    sim = _sim(dict(viscosity=0.01, **REMESH, gravity=(0, 0, 0)), sim_kw)
    rng = np.random.default_rng(seed)
    for k in range(rings):
        p, w, r = ring_vortons(center=(0, 0, -k * gap), ring_radius=ring_radius, core=core, circulation=circulation)
        sim.add_vortons(p, w, r)
    if tracers:
        n = tracers
        phi = rng.random(n) * 2 * np.pi
        rad = ring_radius * np.sqrt(rng.random(n)) * 1.2
        z = -rng.random(n) * (rings - 1) * gap
        sim.add_tracers(np.stack([rad * np.cos(phi), rad * np.sin(phi), z], axis=1))
    return sim


def _tube(center, direction, length, core, circulation, h):
    """Vortons of a straight tube with a Gaussian core along a unit axis."""
    d = np.asarray(direction, float)
    d /= np.linalg.norm(d)
    rmax = 2.5 * core
    pts = lattice([-rmax, -rmax, -length / 2], [rmax, rmax, length / 2], h)
    rho = np.hypot(pts[:, 0], pts[:, 1])
    pts = pts[rho <= rmax]
    rho = rho[rho <= rmax]
    mag = circulation / (np.pi * core ** 2) * np.exp(-(rho / core) ** 2)
    # rotate local z to d
    z = np.array([0.0, 0.0, 1.0])
    v = np.cross(z, d)
    c = float(np.dot(z, d))
    if np.linalg.norm(v) < 1e-12:
        Rm = np.eye(3) * (1 if c > 0 else -1)
    else:
        vx = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
        Rm = np.eye(3) + vx + vx @ vx / (1 + c)
    p = pts @ Rm.T + np.asarray(center, float)
    w = mag[:, None] * d[None, :]
    return p, w, np.full(len(p), radius_for_spacing(h))


def vortex_tube(length=4.0, core=0.3, circulation=1.0, spacing=None, tracers=20000, seed=0, **sim_kw) -> Sim:
    """A straight vortex tube along z with a Gaussian (Lamb-Oseen) core; its middle diffuses
    like a Lamb-Oseen vortex, s^2 = s0^2 + 4 nu t."""
    sim = _sim(dict(viscosity=0.01, gravity=(0, 0, 0)), sim_kw)
    p, w, r = _tube((0, 0, 0), (0, 0, 1), length, core, circulation, spacing or core / 2)
    sim.add_vortons(p, w, r)
    if tracers:
        rng = np.random.default_rng(seed)
        sim.add_tracers(_tracers_in_box(rng, [-2 * core, -2 * core, -length / 4], [2 * core, 2 * core, length / 4], tracers))
    return sim


def crossed_tubes(length=3.0, core=0.2, circulation=1.0, separation=0.5, tracers=20000, seed=0, **sim_kw) -> Sim:
    """Two perpendicular vortex tubes passing close to each other: they bend, stretch and
    reconnect (part 3's crossed tubes)."""
    sim = _sim(dict(viscosity=0.01, gravity=(0, 0, 0)), sim_kw)
    h = core / 2
    for center, direction in (((0, 0, -separation / 2), (1, 0, 0)), ((0, 0, separation / 2), (0, 1, 0))):
        p, w, r = _tube(center, direction, length, core, circulation, h)
        sim.add_vortons(p, w, r)
    if tracers:
        rng = np.random.default_rng(seed)
        sim.add_tracers(_tracers_in_box(rng, [-1, -1, -0.6], [1, 1, 0.6], tracers))
    return sim


def ball_through_smoke(speed=5.0, ball_radius=0.2, ball_mass=0.2, noise=0.5, vortons=512, tracers=100000,
                       box=(4.0, 0.5, 0.5), seed=0, **sim_kw) -> Sim:
    """Part 4's main scene: a ball shot at ``speed`` along +x through a 4 x 0.5 x 0.5 box of
    smoke and weak vortex noise.  The fluid slows it (figure 5).  The ball's gravity is off,
    as in the seeds."""
    sim = _sim(dict(viscosity=0.01, gravity=(0, 0, -10)), sim_kw)
    rng = np.random.default_rng(seed)
    box = np.asarray(box, float)
    h = (np.prod(box) / vortons) ** (1.0 / 3.0)
    p = lattice(-box / 2, box / 2, h)
    sim.add_vortons(p, _noise(rng, len(p), noise), radius_for_spacing(h))
    if tracers:
        sim.add_tracers(_tracers_in_box(rng, -box / 2, box / 2, tracers))
    sim.add_body(RigidBody(position=(-box[0] / 2, 0, 0), velocity=(speed, 0, 0), radius=ball_radius,
                           mass=ball_mass, gravity=False))
    return sim


def spinning_ball(torque=10.0, ball_radius=0.2, ball_mass=100.0, noise=0.5, per_axis=16, tracers=50000, seed=0,
                  **sim_kw) -> Sim:
    """Part 4's spinning ball: a heavy ball in a 1^3 box of noise, given an impulsive torque
    (0, 0, ``torque``); it spins the fluid up and itself down."""
    sim = _sim(dict(viscosity=0.01, **REMESH, gravity=(0, 0, -10)), sim_kw)
    rng = np.random.default_rng(seed)
    h = 1.0 / per_axis
    p = lattice([-0.5] * 3, [0.5] * 3, h)
    sim.add_vortons(p, _noise(rng, len(p), noise), radius_for_spacing(h))
    if tracers:
        sim.add_tracers(_tracers_in_box(rng, [-0.5] * 3, [0.5] * 3, tracers))
    ball = sim.add_body(RigidBody(position=(0, 0, 0), radius=ball_radius, mass=ball_mass, gravity=False))
    ball.apply_impulse((0, 0, 0), (0, 0, torque))
    return sim


def _fluid_box(sim, rng, lo, hi, h, density_fn, noise=0.0, tracers=0):
    p = lattice(lo, hi, h)
    sim.add_vortons(p, _noise(rng, len(p), noise) if noise else np.zeros_like(p), radius_for_spacing(h),
                    density_fn(p))
    if tracers:
        t = _tracers_in_box(rng, lo, hi, tracers)
        sim.add_tracers(t, density_fn(t))
    return p


def dye_drop(deviation=1.0, drop_radius=1.0, per_axis=16, tracers=50000, seed=0, **sim_kw) -> Sim:
    """Part 8: a ball of heavy dyed fluid (density deviation +1) in still fluid; it sinks and
    rolls up into a vortex ring."""
    sim = _sim(dict(viscosity=0.01, **REMESH), sim_kw)
    rng = np.random.default_rng(seed)
    L = 1.6 * drop_radius
    h = 2 * L / per_axis
    inside = lambda q: np.where(np.linalg.norm(q, axis=1) <= drop_radius, deviation, 0.0)  # noqa: E731
    _fluid_box(sim, rng, [-L] * 3, [L] * 3, h, inside)
    if tracers:
        t = rng.normal(size=(tracers, 3))
        t *= (drop_radius * rng.random(tracers) ** (1 / 3) / np.linalg.norm(t, axis=1))[:, None]
        sim.add_tracers(t, deviation)
    return sim


def two_drops(deviation=0.9, drop_radius=0.6, offset=2.0, per_axis=(10, 10, 24), tracers=40000, seed=0,
              **sim_kw) -> Sim:
    """Part 8's two drops: a light one (-0.9) two units below the middle rises while a heavy
    one (+0.9) two units above sinks; they pass each other."""
    sim = _sim(dict(viscosity=0.01, **REMESH), sim_kw)
    rng = np.random.default_rng(seed)
    lo = np.array([-1.2, -1.2, -offset - 1.2])
    hi = -lo
    h = float(np.min((hi - lo) / np.asarray(per_axis)))

    def dens(q):
        d = np.zeros(len(q))
        d[np.linalg.norm(q - [0, 0, -offset], axis=1) <= drop_radius] = -deviation
        d[np.linalg.norm(q - [0, 0, offset], axis=1) <= drop_radius] = deviation
        return d

    _fluid_box(sim, rng, lo, hi, h, dens)
    if tracers:
        t = rng.normal(size=(tracers, 3))
        t *= (drop_radius * rng.random(tracers) ** (1 / 3) / np.linalg.norm(t, axis=1))[:, None]
        t[: tracers // 2, 2] -= offset
        t[tracers // 2:, 2] += offset
        sim.add_tracers(t, dens(t))
    return sim


def stratified(deviation=0.6, ball_radius=0.2, ball_height=0.6, vortons=1024, tracers=30000, seed=0,
               **sim_kw) -> Sim:
    """Part 9: two layers, heavy (+0.6) below and light (-0.6) above, with a neutrally buoyant
    ball (density = ambient) released above the interface; it sinks, overshoots and settles
    at the interface, where the fluid is as dense as it is."""
    sim = _sim(dict(viscosity=0.01), sim_kw)
    rng = np.random.default_rng(seed)
    lo, hi = np.array([-1.0, -1.0, -1.0]), np.array([1.0, 1.0, 1.0])
    h = (8.0 / vortons) ** (1 / 3)
    dens = lambda q: np.where(q[:, 2] < 0, deviation, -deviation)  # noqa: E731
    _fluid_box(sim, rng, lo, hi, h, dens, tracers=tracers)
    vb = 4 / 3 * np.pi * ball_radius ** 3
    sim.add_body(RigidBody(position=(0, 0, ball_height), radius=ball_radius, mass=sim.ambient_density * vb))
    return sim


def hot_ball(temperature=10.0, ball_radius=0.2, box=0.5, vortons=512, noise=0.5, vorton_rate=100.0,
             tracer_rate=5000.0, lifetime_frames=300, tracers=5000, seed=0, **sim_kw) -> Sim:
    """Part 10: a fixed hot ball (T = 10) inside a small box of noise that keeps emitting
    vortons and tracers; the fluid it heats expands, rises and rolls up into a pair of
    counter-rotating vortices.  Particles live ``lifetime_frames`` frames.  It remeshes every
    10 frames (the emitters keep adding randomly placed vortons; every 20 frames, a 1000-frame
    run blew up at frame ~710)."""
    dt = sim_kw.get("dt", 1 / 30)
    sim = _sim(dict(viscosity=0.01, **dict(REMESH, remesh_interval=10), vorton_lifetime=lifetime_frames * dt,
                    tracer_lifetime=lifetime_frames * dt),
               sim_kw)
    rng = np.random.default_rng(seed)
    h = (box ** 3 / vortons) ** (1 / 3)
    half = box / 2
    p = lattice([-half] * 3, [half] * 3, h)
    sim.add_vortons(p, _noise(rng, len(p), noise), radius_for_spacing(h))
    if tracers:
        sim.add_tracers(_tracers_in_box(rng, [-half] * 3, [half] * 3, tracers))
    sim.add_emitter((0, 0, 0), (half, half, half), vorton_rate=vorton_rate, tracer_rate=tracer_rate,
                    vorton_radius=radius_for_spacing(h), vorticity=noise)
    sim.add_body(RigidBody(position=(0, 0, 0), radius=ball_radius, fixed=True, temperature=temperature,
                           thermal_conductivity=0.2, heat_capacity=1e5))
    return sim


SCENES = {f.__name__: f for f in (vortex_ring, jet_ring, vortex_tube, crossed_tubes, ball_through_smoke,
                                  spinning_ball, dye_drop, two_drops, stratified, hot_ball)}


# Scene files (TOML): read, build and write; see vortonpy.scene_files and docs/scenes.md.
from .scene_files import build, from_toml, read_toml, scene_spec, to_toml  # noqa: E402

__all__ += ["from_toml", "to_toml", "read_toml", "scene_spec", "build"]
