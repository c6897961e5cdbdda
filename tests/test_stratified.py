"""A stratified ambient fluid (method step 4, background stratification): layers at rest stay
at rest, a parcel out of its layer is pulled back, tracers and bodies feel the layers, and
the particles that the user, the emitters and the remeshing add carry the ambient of their
height."""
import numpy as np
import pytest

import vortonpy as vp
from vortonpy.scenes import lattice, radius_for_spacing

TWO_LAYERS = [(-0.05, 1.6), (0.05, 0.4)]   # +-0.6 around rho0 = 1, interface at z = 0
LINEAR = [(-1.5, 1.75), (1.5, 0.25)]       # d rho / dz = -0.5 around rho0 = 1 at z = 0
#: the articles' contact rule where the physical coupling exists: a ball in fluid without
#: vortons then feels only gravity and buoyancy, which is what the buoyancy tests measure
ARTICLES = {"body_coupling": "articles"} if "body_coupling" in vp.parameters.names() else {}


def _still_box(sim, h=0.2, half=1.0):
    """A lattice of still vortons of the ambient fluid (density 0: each that of its layer)."""
    p = lattice([-half] * 3, [half] * 3, h)
    sim.add_vortons(p, np.zeros_like(p), radius_for_spacing(h))
    return p


def _deviation(sim):
    """The vortons' density deviation from the ambient at their height."""
    v = sim.vortons
    return v.density + sim.ambient_density - sim.ambient_density_at(v.position)


def test_the_profile_is_piecewise_linear_in_height_along_minus_gravity():
    sim = vp.Sim(threads=1, stratification=[(-1.0, 2.0), (0.0, 1.0), (2.0, 0.5)])
    z = np.array([-5.0, -1.0, -0.5, 0.0, 1.0, 2.0, 9.0])
    pts = np.stack([np.full_like(z, 3.0), np.full_like(z, -7.0), z], axis=1)
    assert sim.ambient_density_at(pts) == pytest.approx([2.0, 2.0, 1.5, 1.0, 0.75, 0.5, 0.5], rel=1e-15)
    sim.gravity = (10.0, 0.0, 0.0)  # height is along -gravity: here -x
    assert sim.ambient_density_at([[0.5, 0.0, 5.0]]) == pytest.approx([1.5])
    sim.gravity = (0.0, 0.0, 0.0)  # no gravity: along z
    assert sim.ambient_density_at([[0.0, 0.0, -0.5]]) == pytest.approx([1.5])
    assert vp.Sim(threads=1, ambient_density=1.3).ambient_density_at([[0, 0, 4.0]]).tolist() == [1.3]


def test_particles_added_carry_the_ambient_of_their_height():
    """add_vortons/add_tracers/emitters take density as the deviation from the ambient where
    each particle appears (0: the layer's own fluid); the stored density is the parcel's less
    rho0.  A deviation that would make a parcel's density <= 0 is refused."""
    sim = vp.Sim(threads=1, stratification=TWO_LAYERS)
    p = np.array([[0, 0, -0.5], [0, 0, 0.5], [0, 0, 0.0], [0, 0, 0.025]])
    sim.add_vortons(p, np.zeros((4, 3)), 0.05, [0.0, 0.0, 0.0, 0.1])
    assert sim.vortons.density == pytest.approx([0.6, -0.6, 0.0, -0.2])
    assert np.all(_deviation(sim)[:3] == 0.0) and _deviation(sim)[3] == pytest.approx(0.1)
    sim.add_tracers(p, 0.2)
    assert sim.tracers.density == pytest.approx([0.8, -0.4, 0.2, -0.1])
    with pytest.raises(ValueError, match=r"density \(a deviation from the ambient\) must exceed -0.4.* at the "
                                         r"vorton's height \(row 0\)"):
        sim.add_vortons([[0, 0, 1.0]], [[0, 0, 0]], 0.05, -0.4)
    assert len(sim.vortons) == 4
    with pytest.raises(ValueError, match="density must be > -0.4"):  # the least ambient density
        sim.add_emitter((0, 0, 0), (0.5, 0.5, 0.5), vorton_rate=300, density=-0.5)
    sim.add_emitter((0, 0, 0), (0.5, 0.5, 0.5), vorton_rate=300, tracer_rate=300, vorton_radius=0.05)
    sim.gravity = (0, 0, 0)  # (the emitted fluid sits still: only what was emitted is checked)
    sim.step(2)
    new = slice(4, None)
    assert len(sim.vortons) > 10
    assert np.all(_deviation(sim)[new] == 0.0)  # ambient fluid of each one's height, exactly
    z = sim.vortons.position[new, 2]
    assert np.all(sim.vortons.density[new][z < -0.05] == pytest.approx(0.6))
    assert np.all(sim.vortons.density[new][z > 0.05] == pytest.approx(-0.6))


def test_layers_at_rest_stay_at_rest_exactly():
    """Vortons of the layers' own fluid make no baroclinic vorticity, and the diffusion of
    heat keeps the profile (it acts on the excess over the ambient): nothing moves, and
    nothing changes, to the bit.  The same densities as finite blocks in a uniform ambient
    (the seeds' construction) start to move at once."""
    sim = vp.Sim(threads=2, stratification=TWO_LAYERS, thermal_diffusivity=1e-3)
    p = _still_box(sim)
    d0 = sim.vortons.density.copy()
    sim.step(30)
    assert np.all(sim.vortons.vorticity == 0) and np.all(sim.vortons.position == p)
    assert np.all(sim.vortons.density == d0) and np.all(_deviation(sim) == 0)
    blocks = vp.Sim(threads=2, thermal_diffusivity=1e-3)
    blocks.add_vortons(p, np.zeros_like(p), radius_for_spacing(0.2), d0)
    blocks.step(30)
    assert np.abs(blocks.vortons.vorticity).max() > 1.0


@pytest.mark.parametrize("lift", [0.3, -0.3])
def test_a_parcel_out_of_its_layer_is_pulled_back(lift):
    """In a linear stratification (N^2 = g |d rho / dz| / rho0 = 5), a ball of fluid (radius
    0.4) brought from `lift` below its place keeps its parcels' densities: heavier than its new
    surroundings by |d rho / dz| lift = 0.15, it sinks back, passes its level and turns (an
    oscillation about its level, slower than N: the fluid around it moves too); from above it
    rises.  At first it moves as the same ball in a uniform ambient (the stratification acts
    over 1/N ~ 0.45 s), which keeps going."""
    def run(stratified):
        sim = vp.Sim(threads=2, viscosity=0.0, **({"stratification": LINEAR} if stratified else {}))
        p = _still_box(sim, 0.1, 0.8)
        blob = np.linalg.norm(p, axis=1) < 0.4
        if stratified:
            sim.vortons.density[blob] = sim.ambient_density_at(p[blob] - [0.0, 0.0, lift]) - 1.0
            dev = _deviation(sim)
            assert dev[blob] == pytest.approx(0.5 * lift) and np.all(dev[~blob] == 0)
        else:
            sim.vortons.density[blob] = 0.5 * lift
        moved = []
        for _ in range(30):  # 3 s
            sim.step(3)
            moved.append(-np.sign(lift) * (sim.vortons.position[blob, 2].mean() - p[blob, 2].mean()))
        return np.array(moved)
    layered, uniform = run(True), run(False)
    assert layered[2] == pytest.approx(uniform[2], rel=0.1) and layered[2] > 0.02  # t = 0.3 s
    far = layered.argmax()
    assert 0.3 < layered[far] < 0.6 and 1.2 < 0.1 * (far + 1) < 2.6, (far, layered[far])  # past its level, turns
    assert layered[-1] < layered[far] - 0.1  # and comes back
    assert uniform[-1] > 1.0 and np.all(np.diff(uniform) > 0)


def test_tracers_read_the_layers():
    """A tracer's density is the ambient's at its place plus the fluid's deviation there,
    relative to rho0 like the vortons' (so dye coloured by density shows the layers), with
    and without vortons around."""
    for with_vortons in (False, True):
        sim = vp.Sim(threads=1, stratification=TWO_LAYERS)
        if with_vortons:
            _still_box(sim)
        t = np.array([[0.1, 0.2, -0.6], [0.3, -0.1, 0.7], [0.0, 0.0, 0.0], [5.0, 5.0, -5.0]])
        sim.add_tracers(t, 9.0)  # (any density: each step samples the fluid)
        sim.step()
        assert sim.tracers.density == pytest.approx([0.6, -0.6, 0.0, 0.6], abs=1e-12)


@pytest.mark.parametrize("height", [0.5, 0.1, 0.0, -0.13, -0.3])
def test_a_body_displaces_the_layers_it_fills(height):
    """A ball in a two-layer ambient without vortons is buoyed by the ambient mass it
    displaces, the profile integrated over the ball (exact, not sampled): its first step's
    acceleration is g (M - m_displaced) / M to rounding."""
    R, M = 0.2, 0.03
    sim = vp.Sim(threads=1, stratification=TWO_LAYERS, dt=0.01, **ARTICLES)
    ball = sim.add_body(vp.RigidBody(position=(0.3, -0.2, height), radius=R, mass=M))
    sim.step()
    s = np.linspace(-R, R, 400001)  # slabs of the ball, trapezoidal rule
    rho = np.interp(height + s, [-0.05, 0.05], [1.6, 0.4])
    f = np.pi * (R * R - s * s) * rho
    displaced = ((f[1:] + f[:-1]) / 2 * np.diff(s)).sum()
    expected = -10.0 * (M - displaced) / M
    assert ball.velocity[2] / sim.dt == pytest.approx(expected, rel=1e-8, abs=1e-9)
    assert ball.velocity[0] == 0 and ball.velocity[1] == 0


def test_remeshing_keeps_the_layers_and_moves_the_deviation():
    """Remeshing spreads the deviation from the ambient and gives each new vorton the ambient
    of its own height: the layers' fluid stays exactly ambient, the deviation's mass is kept
    (no node is dropped with a zero threshold), and the lower layer's new vortons store
    +0.6, the upper's -0.6."""
    sim = vp.Sim(threads=2, stratification=TWO_LAYERS, remesh_threshold=0.0)
    p = _still_box(sim, 0.1, 0.5)
    rng = np.random.default_rng(3)
    sim.vortons.vorticity = rng.normal(size=p.shape)  # every node keeps some strength
    sim.vortons.position = p + rng.uniform(-0.03, 0.03, p.shape)
    sim.vortons.density = sim.ambient_density_at(sim.vortons.position) - 1.0
    blob = np.linalg.norm(p - [0, 0, 0.2], axis=1) < 0.2
    sim.vortons.density[blob] += 0.3
    vol = 4 / 3 * np.pi * sim.vortons.radius ** 3
    mass0 = (_deviation(sim) * vol).sum()
    sim.remesh()
    dev, z = _deviation(sim), sim.vortons.position[:, 2]
    vol = 4 / 3 * np.pi * sim.vortons.radius ** 3
    assert (dev * vol).sum() == pytest.approx(mass0, rel=1e-12)
    far = np.linalg.norm(sim.vortons.position - [0, 0, 0.2], axis=1) > 0.2 + 2 * 0.1 * np.sqrt(3) + 0.03
    assert far.sum() > 500 and np.all(dev[far] == 0)
    assert np.all(sim.vortons.density[far & (z < -0.05)] == pytest.approx(0.6))
    assert np.all(sim.vortons.density[far & (z > 0.05)] == pytest.approx(-0.6))


def test_a_stratified_run_continues_bit_identically_after_save_and_load(tmp_path):
    sim = vp.Sim(threads=2, stratification=TWO_LAYERS, remesh_interval=5)
    p = _still_box(sim, 0.25)
    sim.vortons.vorticity = np.random.default_rng(1).normal(size=p.shape) * 0.5
    sim.add_tracers(p[::3] + 0.01)
    sim.step(7)
    sim.save(tmp_path / "s.npz")
    other = vp.Sim.load(tmp_path / "s.npz")
    sim.step(8)
    other.step(8)
    for kind, field in (("vortons", "position"), ("vortons", "density"), ("vortons", "vorticity"),
                        ("tracers", "density")):
        assert np.array_equal(getattr(getattr(sim, kind), field), getattr(getattr(other, kind), field)), field


def test_stirred_layers_hold_their_heights_for_ten_seconds():
    """Two layers (+-0.6, interface at z = 0) stirred by vortex noise (0.25, the layers' own
    fluid): the mean heights of the vortons that started in each layer move less than 0.05
    in 10 s (measured: 0.01-0.02; the noise carries the lattice about as far sideways).  The
    same densities as finite blocks in a uniform ambient fly apart by more than a unit."""
    out = {}
    for stratified in (True, False):
        sim = vp.Sim(threads=2, **({"stratification": TWO_LAYERS} if stratified else {}))
        h = 0.2
        p = lattice([-1] * 3, [1] * 3, h)
        w = np.random.default_rng(0).normal(size=p.shape)
        w *= 0.25 / np.linalg.norm(w, axis=1)[:, None]
        low = p[:, 2] < 0
        sim.add_vortons(p, w, radius_for_spacing(h), 0.0 if stratified else np.where(low, 0.6, -0.6))
        sim.step(300 if stratified else 90)
        z = sim.vortons.position[:, 2]
        out[stratified] = (z[low].mean() - p[low, 2].mean(), z[~low].mean() - p[~low, 2].mean())
    assert max(abs(x) for x in out[True]) < 0.05, out
    assert out[False][0] < -1.0 and out[False][1] > 1.0, out
