"""A sphere's drag against the standard drag curve (docs/validation.md): a ball held at constant
speed, a ball settling under gravity, a ball spinning in a viscous fluid.  Each case at a
stated lattice resolution (``body_resolution``, cells per radius) with a second resolution
showing that the error shrinks.

The ball has radius R = 0.5 and moves at U = 1 (Re = 2 R U / nu), dt = h / (2 U) with
h = R / resolution, the velocity grid four cells per vorton spacing, and remeshing every five
steps (dropping vortons below 1% of the peak vorticity): the settings the drag converges
with (a coarser velocity grid adds up to 15% at Re 200)."""
import functools

import numpy as np
import pytest

import vortonpy as vp

pytestmark = pytest.mark.slow  # each case runs until its flow is steady

R = 0.5
U = 1.0
AREA = np.pi * R ** 2
VOLUME = 4.0 / 3.0 * np.pi * R ** 3


def schiller_naumann(re):
    return 24.0 / re * (1.0 + 0.15 * re ** 0.687)


def sim_for(re, resolution, gravity=0.0, grid_cells_per_vorton=4.0):
    h = R / resolution
    return vp.Sim(dt=0.5 * h / U, viscosity=2 * R * U / re, gravity=(0, 0, -gravity), threads=2,
                  body_resolution=resolution, grid_cells_per_vorton=grid_cells_per_vorton, remesh_interval=5,
                  remesh_threshold=0.01)


@functools.lru_cache(maxsize=None)
def steady_cd(re, resolution, duration=10.0, grid_cells_per_vorton=4.0):
    """Cd of a fixed ball moved at U from rest, from the rate at which the fluid takes
    momentum from it (a line fitted to its ``fluid_impulse`` over the last time unit)."""
    sim = sim_for(re, resolution, grid_cells_per_vorton=grid_cells_per_vorton)
    ball = sim.add_body(vp.RigidBody(velocity=(U, 0, 0), radius=R, mass=1.0, fixed=True))
    n = int(round(duration / sim.dt))
    t, impulse = [], []
    for k in range(n):
        sim.step()
        if sim.time > duration - 1.0 - 1e-9:
            t.append(sim.time)
            impulse.append(ball.fluid_impulse[0])
    force = -np.polyfit(t, impulse, 1)[0]
    return force / (0.5 * U * U * AREA)


@pytest.mark.parametrize("re", [20, 50, 100, 200])
def test_steady_drag_follows_the_sphere_drag_curve(re):
    """Steady drag within 15% of Schiller-Naumann (itself within ~5% of the measurements)
    at resolution 5.  The ball starts impulsively: Cd falls from ~1.2x its steady value over
    the first diameters as the boundary layer thickens and the wake grows, and over the tenth
    diameter travelled it still moves by under 1%.  Measured Cd / Schiller-Naumann: 1.03,
    0.945, 0.905, 0.955 at Re 20, 50, 100, 200 (0.90-1.00 at resolution 4, 0.88-1.02 at 6),
    and 0.96 at Re 10 (0.97 at resolution 4, 0.94 at 6)."""
    ratio = steady_cd(re, 5) / schiller_naumann(re)
    assert ratio == pytest.approx(1.0, abs=0.15)


def test_steady_drag_error_shrinks_with_resolution():
    """At Re 50 the drag's error shrinks as the lattice refines: 9%, 5.5%, 2% short at
    resolution 4, 5 and 6."""
    errors = [abs(steady_cd(50, res) / schiller_naumann(50) - 1.0) for res in (4, 5, 6)]
    assert errors[0] > errors[1] > errors[2], errors


def brown_lawler(re):
    return 24.0 / re * (1.0 + 0.150 * re ** 0.681) + 0.407 / (1.0 + 8710.0 / re)


def test_drag_at_re_500_is_steady_and_above_the_curve_on_the_default_grid():
    """At Re 500 the boundary layer (delta ~ R / sqrt(Re), under a cell at 4 cells per
    radius) is not resolved: on the default velocity grid (one cell per vorton) the run is
    steady and its drag 1.40x Brown and Lawler's at 4 and 6 cells per radius, 1.21x at 8.
    The fine grid of the lower-Re checks (4 cells per vorton) blows up here.  Asserted at 4
    cells per radius: the run stays finite and its Cd lies between the curve and 1.5x it."""
    cd = steady_cd(500.0, 4, grid_cells_per_vorton=1.0)
    assert brown_lawler(500.0) < cd < 1.5 * brown_lawler(500.0), cd


@functools.lru_cache(maxsize=None)
def settle(ratio, re_t, resolution, duration):
    """A free ball of density ``ratio`` times the fluid's, released from rest under the gravity
    that the balance (M - rho V) g = 1/2 rho U^2 pi R^2 Cd(Re) makes settle at U = 1 (Re = re_t
    with Schiller-Naumann's Cd): its mean speed over the last two time units, each."""
    g = 0.5 * U * U * AREA * schiller_naumann(re_t) / ((ratio - 1.0) * VOLUME)
    sim = sim_for(re_t, resolution, gravity=g)
    ball = sim.add_body(vp.RigidBody(radius=R, mass=ratio * VOLUME))
    speeds = []
    for _ in range(int(round(duration / sim.dt))):
        sim.step()
        speeds.append(-ball.velocity[2])
    per_unit = int(round(1.0 / sim.dt))
    return np.mean(speeds[-2 * per_unit:-per_unit]), np.mean(speeds[-per_unit:])


@pytest.mark.parametrize("re_t,resolution,duration", [(20, 4, 10.0), (100, 4, 16.0), (300, 4, 40.0)])
def test_a_settling_ball_reaches_the_terminal_speed_of_the_drag_curve(re_t, resolution, duration):
    """A ball twice as dense as the fluid settles at the speed the drag-curve balance gives,
    within 15% at resolution 4: measured 1.00x at Re 20 and 1.05x at Re 100 (the steady drag at
    this resolution is 1.00x and 0.90x Schiller-Naumann's), and 0.87x at Re 300 (after
    overshooting to 1.04x at 17 time units; the wake there is unsteady).  The speed has levelled
    off: it changes by under 1% over the last time unit."""
    before, last = settle(2.0, re_t, resolution, duration)
    assert last == pytest.approx(U, rel=0.15)
    assert abs(last / before - 1.0) < 0.01


def test_the_settling_speed_stays_on_the_curve_at_a_finer_lattice():
    """At Re 20 the terminal speed is the drag curve's within the steady drag's own error at
    resolution 4 and 5: measured 1.00x and 0.98x (the drag 1.00x and 1.03x Schiller-Naumann's).
    Asserted: within 5% at both."""
    for resolution in (4, 5):
        assert settle(2.0, 20, resolution, 10.0)[1] == pytest.approx(U, rel=0.05)


def stokes_torque_ratio(resolution, viscosity=0.5, diffusion_times=2.0, flow_at=()):
    """A fixed ball spinning at W = 1 in still fluid (rotational Re = W R^2 / nu = 0.5): the
    torque the fluid puts on it over the last half of ``diffusion_times`` R^2 / nu, over
    Stokes' 8 pi mu R^3 W; and the flow's speed about the axis at the distances ``flow_at``
    (in radii, in the equatorial plane) over Stokes' rotlet W R^3 / r^2."""
    W, h = 1.0, R / resolution
    sim = vp.Sim(dt=min(0.5 * h / (W * R), 0.2 * h * h / viscosity), viscosity=viscosity, gravity=(0, 0, 0),
                 threads=2, body_resolution=resolution, remesh_interval=5, remesh_threshold=0.01)
    ball = sim.add_body(vp.RigidBody(radius=R, mass=100.0, angular_velocity=(0, 0, W), fixed=True))
    duration = diffusion_times * R * R / viscosity
    t, angular = [], []
    for _ in range(int(round(duration / sim.dt))):
        sim.step()
        if sim.time > 0.5 * duration:
            t.append(sim.time)
            angular.append(ball.fluid_angular_impulse[2])
    torque = -np.polyfit(t, angular, 1)[0] / (8.0 * np.pi * viscosity * R ** 3 * W)
    if not flow_at:
        return torque
    r = np.asarray(flow_at, float) * R
    u = sim.velocity_at(np.stack([r, np.zeros_like(r), np.zeros_like(r)], 1))[:, 1]
    return torque, u / (W * R ** 3 / r ** 2)


def test_the_stokes_torque_on_a_spinning_ball_converges_with_resolution():
    """The torque on a ball spinning slowly in a viscous fluid is Stokes' 8 pi mu R^3 W within
    20% (the acceptance), steady after 2 R^2 / nu: measured 1.00x, 1.05x, 1.05x at resolution
    3, 4, 5 (1.035x at 6).  The no-slip holds at R: the lattice's forced nodes near the surface
    follow the outer flow's profile continued into the body.  Asserted: within 10% at each
    resolution.  And the flow around it is Stokes' rotlet W R^3 / r^2 where the spin-up has
    reached (0.97 of it at 1.5 R, 0.87 at 2.5 R at resolution 4): vorticity diffuses out of
    the vorton set's edge (PSE's drift) instead of piling up there, which had reversed the
    flow beyond 2 R."""
    torque4, flow = stokes_torque_ratio(4, flow_at=(1.5, 2.5))
    ratios = [stokes_torque_ratio(3), torque4, stokes_torque_ratio(5)]
    assert all(abs(r - 1.0) < 0.1 for r in ratios), ratios
    assert abs(flow[0] - 1.0) < 0.1 and 0.7 < flow[1] < 1.05, flow
