"""The physical fluid-body coupling (docs/method.md, step 7): no-slip on the whole surface by
penalization, forces from the momentum the fluid gains, added mass implicit.  Each check
against a textbook answer (docs/validation.md), at a stated lattice resolution (cells per
radius, ``body_resolution``)."""
import numpy as np
import pytest

import vortonpy as vp

G = 10.0


def volume(R):
    return 4.0 / 3.0 * np.pi * R ** 3


def released_ball(ratio, resolution=4, viscosity=1e-3, R=0.5, remesh_interval=0):
    h = R / resolution
    sim = vp.Sim(dt=0.25 * h, viscosity=viscosity, gravity=(0, 0, -G), threads=2, body_resolution=resolution,
                 remesh_interval=remesh_interval)
    ball = sim.add_body(vp.RigidBody(radius=R, mass=ratio * volume(R)))
    return sim, ball


@pytest.mark.parametrize("ratio", [4.0, 1.5, 0.5])
def test_a_ball_released_from_rest_accelerates_with_the_added_mass(ratio):
    """From rest in still fluid a sphere accelerates at g (M - rho V) / (M + rho V / 2): the
    fluid it must set moving adds half its displaced mass (potential flow).  Measured over
    the first two steps, before the boundary layer's drag and history force grow (they slow
    a light ball by a few per cent a step at this viscosity); tolerance 10%."""
    sim, ball = released_ball(ratio)
    M, V = ball.mass, volume(ball.radius)
    expected = -G * (M - V) / (M + 0.5 * V)
    sim.step(2)
    measured = ball.velocity[2] / sim.time
    assert measured == pytest.approx(expected, rel=0.10)
    if ratio < 2:  # the articles' rule would give g (1 - rho V / M): a bubble at 9 g, not 1.5 g
        assert abs(measured - (-G * (1 - V / M))) > 0.2 * abs(expected)


def test_a_bubble_rises_without_overshoot():
    """A bubble (M = 0.1 rho V) released from rest rises at 1.5 g at first and then ever
    more slowly as drag grows, to a terminal speed (Re ~350) it does not overshoot by more
    than its wake's unsteadiness (2%); it does not start to spin, and the coupling stays
    stable although the body is ten times lighter than the fluid it displaces.  Remeshed
    every 5 steps, as the scenes do: the lattice leaves vortons behind as it moves."""
    sim, ball = released_ball(0.1, resolution=3, viscosity=0.01, remesh_interval=5)
    vz, spin = [], []
    for _ in range(80):
        sim.step()
        vz.append(ball.velocity[2])
        spin.append(np.abs(ball.angular_velocity).max())
    vz = np.array(vz)
    assert vz[0] / sim.dt == pytest.approx(1.5 * G, rel=0.1)
    assert np.all(np.diff(vz[:8]) > 0), vz                      # it speeds up ...
    assert np.ptp(vz[-20:]) < 0.04 * vz[-20:].mean(), vz        # ... to a terminal speed (the remesh
                                                                # every 5 steps shows as a 2% ripple)
    assert vz.max() < 1.02 * vz[-20:].mean(), vz                # with no overshoot
    assert max(spin) < 0.05 * vz.max() / ball.radius


def spun_ball(viscosity, resolution=4, start_gap=None, remesh_interval=5):
    """A fixed ball spinning at W = 1 about z; with start_gap, a shell of still vortons starting
    that far outside its surface."""
    R = 0.5
    h = R / resolution
    dt = 0.5 * h / R if viscosity == 0 else min(0.5 * h / R, 0.2 * h * h / viscosity)
    sim = vp.Sim(dt=dt, viscosity=viscosity, gravity=(0, 0, 0), threads=2, body_resolution=resolution,
                 remesh_interval=remesh_interval, remesh_threshold=0.01)
    if start_gap is not None:
        g = np.arange(-1.5, 1.51, h)
        p = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
        p = p[np.linalg.norm(p, axis=1) > R + start_gap]
        sim.add_vortons(p, np.zeros_like(p), 0.62 * h)
    ball = sim.add_body(vp.RigidBody(radius=R, mass=100.0, angular_velocity=(0, 0, 1.0), fixed=True))
    return sim, ball


def test_no_torque_on_a_spinning_ball_without_viscosity():
    """Pressure acts through a sphere's centre: in an inviscid fluid no torque can reach it,
    and the fluid it is spinning in never turns (rounding only)."""
    sim, ball = spun_ball(0.0)
    sim.step(20)
    assert np.abs(ball.fluid_angular_impulse).max() < 1e-12
    assert np.abs(sim.diagnostics()["angular_impulse"]).max() < 1e-12


def test_a_spinning_ball_spins_the_fluid_up_wherever_the_vortons_start():
    """A free ball spun in still fluid whose vortons start one lattice cell away: the ball
    spins down, the fluid spins up in its sense, and their total angular momentum stays as it
    was (the articles' rule does nothing here: no vorton touches the ball).  The coupling
    hands angular momentum over exactly; the fluid's own steps (stretching and diffusion of
    the sheet an impulsive start makes, through the grid's velocity) drift by a few per cent
    of it over these 20 steps (5% measured): tolerance 10%."""
    sim, ball = spun_ball(0.02, start_gap=0.125, remesh_interval=0)
    ball.fixed = False
    ball.mass = 2.0
    ball.angular_velocity = (0, 0, 1.0)
    L0 = sim.diagnostics()["total_angular_momentum"][2]
    W0 = ball.angular_velocity[2]
    sim.step(20)
    d = sim.diagnostics()
    assert ball.angular_velocity[2] < 0.999 * W0
    assert d["fluid_angular_momentum"][2] > 0.001 * L0
    assert d["total_angular_momentum"][2] == pytest.approx(L0, rel=0.10)


def test_fluid_and_ball_momentum_balance_through_a_passage():
    """A ball shot through smoke (the scene as shipped, Re 200 at launch, 3 lattice cells a
    step): fluid + ball momentum, linear and angular, over the 2 s passage, through the
    boundary layer it builds, the wake it sheds and the remeshing near it, within 2% of the
    ball's initial momentum.  The coupling's hand-over is exact; the vortons move with the
    step's midpoint field (the start's gains 10%), and PSE's drift gives back the impulse
    the exchange loses at the edge of the vorton set (without it, 9% lost)."""
    sim = vp.scenes.ball_through_smoke(vortons=256, tracers=0, threads=2)
    ball = sim.bodies[0]
    p0 = np.linalg.norm(ball.momentum)
    d0 = sim.diagnostics()
    P0, L0 = d0["total_momentum"].copy(), d0["total_angular_momentum"].copy()
    speed0 = np.linalg.norm(ball.velocity)
    arm = np.linalg.norm(ball.position) + ball.radius
    for _ in range(6):
        sim.step(10)
        d = sim.diagnostics()
        assert np.linalg.norm(d["total_momentum"] - P0) < 0.02 * p0, sim.time
        assert np.linalg.norm(d["total_angular_momentum"] - L0) < 0.02 * p0 * arm, sim.time
    assert sim.time == pytest.approx(2.0)
    assert np.linalg.norm(ball.velocity) < 0.5 * speed0  # it did slow down


def test_the_articles_rule_stays_available():
    """body_coupling="articles" keeps the seed articles' contact rule, which acts only on
    vortons touching the ball: in clear fluid a ball flies on."""
    sim = vp.Sim(gravity=(0, 0, 0), body_coupling="articles", threads=1)
    ball = sim.add_body(vp.RigidBody(velocity=(1, 0, 0), radius=0.2, mass=0.1))
    sim.step(10)
    assert ball.velocity[0] == 1.0 and len(sim.vortons) == 0
    sim = vp.Sim(gravity=(0, 0, 0), threads=1)
    ball = sim.add_body(vp.RigidBody(velocity=(1, 0, 0), radius=0.2, mass=0.1))
    sim.step(10)
    assert ball.velocity[0] < 0.99 and len(sim.vortons) > 0


def test_the_coarsest_lattice_allowed_steps_and_a_coarser_one_is_refused():
    """Below 1.5 cells per radius a lattice has no interior to calibrate its ramp on: the
    parameter is refused by name; at 1.5 the calibration stays inside the lattice's margin
    for any radius."""
    with pytest.raises(ValueError, match="body_resolution"):
        vp.Sim(body_resolution=1.25)
    for radius in (0.1, 0.5, 2.0):
        sim = vp.Sim(body_resolution=1.5, gravity=(0, 0, 0))
        ball = sim.add_body(vp.RigidBody(radius=radius, velocity=(0.2, 0, 0)))
        sim.step(2)
        assert np.isfinite(ball.velocity).all() and 0.0 < ball.velocity[0] <= 0.2
