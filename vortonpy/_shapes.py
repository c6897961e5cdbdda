"""Shapes the scenes are made of: lattices of vortons, rings and tubes with Gaussian cores,
random points in boxes (used by vortonpy.scene_files to build every scene)."""
from __future__ import annotations

import numpy as np

#: Core radius per lattice spacing: vortons on a lattice of spacing h get s = h (3 / 4 pi)^(1/3),
#: so that their volumes 4/3 pi s^3 tile space exactly (V = h^3); then sum w V is the integral
#: of vorticity, densities splat to the right mass, and PSE sees overlapping particles.
RADIUS_PER_SPACING = (3.0 / (4.0 * np.pi)) ** (1.0 / 3.0)


def radius_for_spacing(h: float) -> float:
    """Core radius whose sphere volume equals a lattice cell h^3."""
    return h * RADIUS_PER_SPACING


def lattice(lo, hi, spacing: float) -> np.ndarray:
    """Points of a cubic lattice with the given spacing, centred in the box [lo, hi], in the
    simulation grid's memory order (x fastest, then y, then z), the order remeshing also
    produces: consecutive vortons then read neighbouring grid nodes in the step's per-vorton
    grid lookups (stretching, buoyancy, advection), which keeps those lookups in cache."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    axes = []
    for a in range(3):
        n = max(1, int(np.floor((hi[a] - lo[a]) / spacing + 1e-9)))
        c = 0.5 * (lo[a] + hi[a])
        axes.append(c + (np.arange(n) - 0.5 * (n - 1)) * spacing)
    g = np.meshgrid(*axes, indexing="ij")
    return np.stack([x.ravel(order="F") for x in g], axis=1)


def noise(rng, n, amplitude):
    """Random-direction vorticity of the given magnitude ("vortex noise")."""
    v = rng.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return amplitude * v


def points_in_box(rng, lo, hi, n):
    """n points drawn uniformly in the box [lo, hi]."""
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


def tube_vortons(center, direction, length, core, circulation, h):
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
