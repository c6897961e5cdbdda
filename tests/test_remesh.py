"""Remeshing (csrc/remesh.c) and the subgrid eddy viscosity: what they conserve, and that they
keep a flow alive that the raw particle method blows up."""
import numpy as np
import pytest

import vortonpy as vp


def moments(sim):
    """Total strength, linear impulse 1/2 sum x x a, angular impulse 1/3 sum x x (x x a), density mass."""
    x = sim.vortons.position
    V = 4 / 3 * np.pi * sim.vortons.radius**3
    a = sim.vortons.vorticity * V[:, None]
    xa = np.cross(x, a)
    return a.sum(0), 0.5 * xa.sum(0), np.cross(x, xa).sum(0) / 3, (sim.vortons.density * V).sum()


def totals(sim):
    """moments() and the heat above the ambient's sum V (T - 1) (per unit heat capacity), each with
    the sum of its terms' magnitudes: the scale its rounding is relative to."""
    x = sim.vortons.position
    V = 4 / 3 * np.pi * sim.vortons.radius**3
    a = sim.vortons.vorticity * V[:, None]
    xa = np.cross(x, a)
    xxa = np.cross(x, xa)
    dV = sim.vortons.density * V
    heat = V * (sim.vortons.temperature - 1)
    return dict(circulation=(a.sum(0), np.abs(a).sum()), linear=(0.5 * xa.sum(0), 0.5 * np.abs(xa).sum()),
                angular=(xxa.sum(0) / 3, np.abs(xxa).sum() / 3), mass=(dV.sum(), np.abs(dV).sum()),
                heat=(heat.sum(), np.abs(heat).sum()))


def parcels_cloud(seed, jitter):
    """A lattice of vortons (spacing 0.1) jittered by `jitter` spacings, with a ball of random
    vorticity and five parcels, each hot (T = 10 or 2), heavy (+1, +7) or ambient, of radius 0.2-0.4."""
    rng = np.random.default_rng(seed)
    h = 0.1
    x = np.mgrid[-8:8, -8:8, -8:8].reshape(3, -1).T * h
    x = x + rng.uniform(-0.5, 0.5, x.shape) * h * jitter
    d = np.zeros(len(x))
    for _ in range(5):
        c = rng.uniform(-0.5, 0.5, 3)
        d[np.linalg.norm(x - c, axis=1) < rng.uniform(0.2, 0.4)] = rng.choice([-0.9, -0.5, 1.0, 7.0])
    w = rng.normal(size=x.shape) * np.exp(-(np.linalg.norm(x, axis=1) / 0.4) ** 2)[:, None]
    return x, w, vp.scenes.radius_for_spacing(h), d


@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.2])
@pytest.mark.parametrize("seed,jitter", [(1, 0.0), (2, 0.5), (3, 1.0), (4, 2.0)])
def test_remesh_conserves_circulation_impulses_mass_and_heat(seed, jitter, threshold):
    """M4' reproduces polynomials to degree 2, so the lattice holds the vortons' total strength,
    linear and angular impulse, mass and heat; the nodes weaker than the threshold (in strength,
    mass and heat) are merged into the others, which take on their moments, mass and heat; and
    one density a node keeps both mass and heat in total (temperature is not linear in density).
    All five to 1e-9 of the sum of their terms' magnitudes (rounding is ~1e-14), on clouds from a
    lattice to one jittered by two spacings, with hot and heavy parcels; fewer vortons with a
    larger threshold, and every density within the vortons' range (no new extremes)."""
    x, w, r, d = parcels_cloud(seed, jitter)
    sim = vp.Sim(remesh_threshold=threshold, gravity=(0, 0, 0))
    sim.add_vortons(x, w, r, d)
    before = totals(sim)
    sim.remesh()
    after = totals(sim)
    for k, (b, scale) in before.items():
        assert np.allclose(after[k][0], b, rtol=0, atol=1e-9 * scale), (k, after[k][0], b)
    dn = sim.vortons.density
    assert dn.min() >= min(d.min(), 0) - 1e-12 and dn.max() <= max(d.max(), 0) + 1e-12
    if threshold == 0.0:
        p = sim.vortons.position
        sp = np.cbrt(4 / 3 * np.pi * sim.vortons.radius[0] ** 3)
        assert np.allclose(p / sp, np.round(p / sp), atol=1e-6)   # on the lattice
        assert np.allclose(sim.vortons.radius, sim.vortons.radius[0])
    if threshold == 0.2:
        full = vp.Sim(remesh_threshold=0.0, gravity=(0, 0, 0))
        full.add_vortons(x, w, r, d)
        full.remesh()
        assert len(sim.vortons) < 0.5 * len(full.vortons)


def test_remesh_keeps_the_heat_of_a_weak_diluted_parcel():
    """A faint warm haze (T = 1.001) beside a strong vortex: every node of the haze is far below
    the threshold in strength, mass and heat, yet its heat stays in the fluid (merged into the kept
    nodes), and the mass with it."""
    h = 0.1
    x = np.mgrid[-10:10, -10:10, -10:10].reshape(3, -1).T * h
    w = np.zeros_like(x)
    core = np.linalg.norm(x[:, :2], axis=1) < 0.2
    w[core, 2] = 10.0
    d = np.where(x[:, 0] > 0.5, 1 / 1.001 - 1, 0.0)   # T = rho0 / (rho0 + d) = 1.001
    d[core] = -0.9   # a hot core: the haze is under 1e-3 of the largest heat
    sim = vp.Sim(gravity=(0, 0, 0))
    sim.add_vortons(x, w, vp.scenes.radius_for_spacing(h), d)
    before = totals(sim)
    sim.remesh()
    after = totals(sim)
    for k in ("mass", "heat", "circulation", "linear", "angular"):
        assert np.allclose(after[k][0], before[k][0], rtol=0, atol=1e-9 * before[k][1]), k
    assert len(sim.vortons) < len(x)


def test_remesh_of_far_apart_clusters_is_the_union_of_their_remeshes():
    """The lattice is stored by rows, each over the x nodes some kernel reaches (a plume or two
    drops fill little of their bounding box).  The nodes sit at multiples of the spacing
    whatever the box, so remeshing two clusters far apart together must give exactly the
    vortons of remeshing each alone (threshold 0: every reached node kept), and conserve."""
    rng = np.random.default_rng(11)
    r = 0.06
    clusters = []
    for c in ((0.0, 0.0, 0.0), (6.0, -5.0, 7.0)):
        p = np.asarray(c) + rng.uniform(-0.5, 0.5, (300, 3))
        clusters.append((p, rng.normal(size=(300, 3)), rng.uniform(-0.1, 0.1, 300)))

    def remeshed(parts):
        sim = vp.Sim(remesh_threshold=0.0, gravity=(0, 0, 0))
        for p, w, d in parts:
            sim.add_vortons(p, w, r, d)
        before = moments(sim)
        sim.remesh()
        for b, a in zip(before, moments(sim)):
            assert np.allclose(a, b, rtol=0, atol=1e-9 * (np.abs(b).max() + 1e-300))
        out = np.column_stack([sim.vortons.position, sim.vortons.vorticity, sim.vortons.density])
        return out[np.lexsort(out[:, 2::-1].T)]

    both = remeshed(clusters)
    alone = np.vstack([remeshed([c]) for c in clusters])
    alone = alone[np.lexsort(alone[:, 2::-1].T)]
    assert both.shape == alone.shape
    assert np.allclose(both, alone, rtol=0, atol=1e-12 * np.abs(alone).max())


def test_remesh_drops_empty_nodes_and_keeps_bodies_boundary():
    """Nodes weaker than the threshold are dropped (still fluid carries no vortons), and vortons
    whose kernel reaches into a body are left in place."""
    sim = vp.scenes.ball_through_smoke(tracers=0, noise=0.5, vortons=512, threads=1)
    ball = sim.bodies[0]
    near = np.linalg.norm(sim.vortons.position - ball.position, axis=1) < ball.radius + 0.2
    kept = sim.vortons.position[near].copy()
    sim.remesh()
    p = sim.vortons.position
    for q in kept[np.linalg.norm(kept - ball.position, axis=1) < ball.radius]:
        assert np.any(np.all(p == q, axis=1))


def test_remeshing_keeps_the_dye_drop_finite():
    """Without remeshing the heavy drop's particle noise is stretched until a step blows up
    (frame ~110 at this size); remeshing every 20 frames keeps it finite and bounded."""
    sim = vp.scenes.dye_drop(tracers=0, threads=2)
    assert sim.remesh_interval == 20
    sim.step(150)
    w = np.linalg.norm(sim.vortons.vorticity, axis=1)
    assert np.all(np.isfinite(w)) and w.max() < 500


def test_smagorinsky_is_an_extra_viscosity_that_conserves_circulation():
    """The eddy viscosity (C_s D)^2 |S| only adds diffusion: a vortex tube spreads faster with
    it, and total circulation is still conserved exactly by the symmetric exchange (stretching,
    which changes the total strength of a finite tube, is off here)."""
    spread = {}
    for cs in (0.0, 0.3):
        sim = vp.scenes.vortex_tube(tracers=0, smagorinsky=cs, stretch=0, threads=2)
        a0 = moments(sim)[0]
        sim.step(15)
        x, w = sim.vortons.position, np.linalg.norm(sim.vortons.vorticity, axis=1)
        rho2 = x[:, 0] ** 2 + x[:, 1] ** 2
        spread[cs] = (w * rho2).sum() / w.sum()
        assert np.allclose(moments(sim)[0], a0, atol=1e-9 * np.abs(a0).max() + 1e-12)
    assert spread[0.3] > spread[0.0], spread  # a non-negative extra viscosity can only spread it more


def test_remesh_gives_the_same_bits_at_any_thread_count(tmp_path):
    """The remesh scatter splits the lattice's z planes into slabs at equal counts of the
    vortons' kernel planes (a rising plume fills its box unevenly), handed out to the threads,
    and the threads then take the nodes' magnitudes and their largest value: every node still sums its
    vortons in vorton order, and max is exact, so one, two and three threads give the same
    vortons bit for bit.  hot_ball's plume at frame 200 (~1e3 vortons, above the scatter's
    parallel threshold)."""
    sim = vp.scenes.hot_ball(threads=2, tracers=0)
    sim.step(200)
    path = tmp_path / "plume.npz"
    sim.save(path)
    out = []
    for threads in (1, 2, 3):
        s = vp.Sim.load(path, threads=threads)
        n = len(s.vortons)
        s.remesh()
        assert len(s.vortons) != n or not np.array_equal(s.vortons.position, sim.vortons.position)
        v = s.vortons
        out.append(np.column_stack([v.position, v.vorticity, v.radius, v.density, v.age, v.velocity]))
    assert len(out[0]) > 256
    for other in out[1:]:
        assert other.shape == out[0].shape and np.array_equal(other, out[0])
