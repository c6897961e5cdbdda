"""Write the example notebooks under notebooks/ (outputs stripped).

    python tools/make_notebooks.py            # regenerate notebooks/*.ipynb
    python tools/make_notebooks.py --check    # exit 1 if a stored notebook differs

Each notebook tells one seed's story in a few cells, at a size that runs in about a minute on
two cores (fewer tracers, fewer frames than the CLI's defaults).  CI executes them with
``pytest --nbmake`` (see pyproject's [tool.pytest.ini_options]).
"""
from __future__ import annotations

import os
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = os.path.join(HERE, os.pardir, "notebooks")

SETUP = """\
%matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import vortonpy as vp

media = Path(tempfile.mkdtemp(prefix="vortonpy-nb-"))   # animations go here (not into the repo)
print(f"vortonpy {vp.__version__}, OpenMP: {vp.has_openmp}")"""


def nb(title, cells):
    out = [new_markdown_cell(title)]
    for kind, src in cells:
        out.append(new_markdown_cell(src) if kind == "md" else new_code_cell(src))
    book = new_notebook(cells=out)
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.metadata["language_info"] = {"name": "python"}
    return book


BOOKS = {}

BOOKS["01_vortex_ring"] = nb("""\
# 1. A vortex ring and Saffman's speed

A ring of vorticity pushes itself along its axis. For a thin ring of radius $R$, circulation
$\\Gamma$ and a Gaussian core $\\omega \\propto e^{-r^2/\\sigma^2}$, Saffman's formula (Saffman 1970;
*Vortex Dynamics*, 1992) gives its speed

$$U = \\frac{\\Gamma}{4\\pi R}\\left(\\ln\\frac{8R}{\\sigma} - 0.558\\right).$$

We build the ring from vortons, let it fly, measure its speed, and find out how close to
Saffman's it comes and why it falls short. All quantities are in simulation units.""", [
    ("code", SETUP),
    ("code", """\
R, core, G = 1.0, 0.2, 1.0
sim = vp.scenes.vortex_ring(ring_radius=R, core=core, circulation=G, tracers=3000)
sim"""),
    ("md", """\
The ring's position is the impulse-weighted centroid of its vortons (weight $\\rho\\,\\omega_\\varphi V$,
with $\\rho$ the distance from the axis). We record it at every step while rendering an animation."""),
    ("code", """\
def ring_centre(sim):
    p, w = sim.vortons.position, sim.vortons.vorticity
    rho = np.hypot(p[:, 0], p[:, 1])
    w_phi = (-p[:, 1] * w[:, 0] + p[:, 0] * w[:, 1]) / rho
    weight = rho * w_phi * sim.vortons.radius ** 3
    return np.sum(p[:, 2] * weight) / np.sum(weight)

def ring_speed(times, centres):
    return np.polyfit(times, centres, 1)[0]

STEPS = 40
times, centres = [sim.time], [ring_centre(sim)]
def record(s):
    times.append(s.time)
    centres.append(ring_centre(s))

gif = vp.animate(sim, STEPS, media / "ring.gif", view="xz", color="speed", size=(360, 240), fps=15,
                 callback=record)
vp.animate.show(gif)"""),
    ("md", """\
Which $\\sigma$? The vortons carry the Gaussian profile with smooth cores of their own (radius
$s$, the high-order algebraic core of Winckelmans and Leonard), whose smoothing has the same
per-axis variance $s^2/2$ as a Gaussian $e^{-r^2/s^2}$. The ring therefore behaves like a Gaussian
ring of radius $\\sigma_{\\rm eff} = \\sqrt{\\sigma^2 + s^2}$, and Saffman's speed for the core used is the
formula with $\\sigma_{\\rm eff}$."""),
    ("code", """\
s = sim.vortons.radius[0]
sigma_eff = np.hypot(core, s)
U_saffman = G / (4 * np.pi * R) * (np.log(8 * R / sigma_eff) - 0.558)
t, z = np.array(times), np.array(centres)
U_default = ring_speed(t, z)
h_default = sim.grid()["spacing"]

fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
ax.plot(t, z - z[0], "o", ms=3, label=f"vortons: U = {U_default:.4f}")
ax.plot(t, U_saffman * t, "k--", label=f"Saffman: U = {U_saffman:.4f}")
ax.set_xlabel("time t [T]"); ax.set_ylabel("distance travelled [L]"); ax.legend(); ax.grid(alpha=0.3)
ax.set_title(f"Vortex ring, R = {R}, core = {core} (simulation units)")
plt.show()
print(f"sigma_eff = {sigma_eff:.4f}; measured / Saffman = {U_default / U_saffman:.3f}; "
      f"core radius / grid spacing = {core / h_default:.2f}")
assert 0.85 < U_default / U_saffman < 0.95
assert 1.0 < core / h_default < 2.0"""),
    ("md", """\
At the default resolution the ring runs 5-15% slower than Saffman's speed (the ratio printed
above). The velocity is computed on a grid and interpolated trilinearly to the vortons; by
default the grid has about one cell per vorton, which here is fewer than two cells per core
radius, and interpolation flattens the velocity peak of the core. Trilinear interpolation is
second order, so while the grid is coarse the error should fall as the square of the grid
spacing $h$. We repeat the run with finer grids (`grid_cells_per_vorton` 2 to 64; the default
is 1)."""),
    ("code", """\
cells, spacing, speeds = [1], [h_default], [U_default]
for g in (2, 4, 8, 16, 32, 64):
    ring = vp.scenes.vortex_ring(ring_radius=R, core=core, circulation=G, tracers=0, grid_cells_per_vorton=g)
    ts, zs = [ring.time], [ring_centre(ring)]
    ring.step(STEPS, callback=lambda r: (ts.append(r.time), zs.append(ring_centre(r))), progress=False)
    cells.append(g); spacing.append(ring.grid()["spacing"]); speeds.append(ring_speed(ts, zs))
h, err = np.array(spacing), 1 - np.array(speeds) / U_saffman
# grids coarser than the vortons' cores: error = a + C h^2, the second-order interpolation error
coarse = h > s
(a, C), *_ = np.linalg.lstsq(np.stack([np.ones_like(h[coarse]), h[coarse] ** 2], axis=1), err[coarse], rcond=None)
residual = np.max(np.abs(err[coarse] - (a + C * h[coarse] ** 2)))
e_fine, last_change = err[-1], err[-2] - err[-1]

eps = sigma_eff / R
thin_core = eps ** 2 * np.log(1 / eps) / (np.log(8 / eps) - 0.558)  # relative size of the next terms

fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
ax.plot(h ** 2, 100 * err, "o", label="measured")
hh = np.linspace(s, h.max(), 50)
ax.plot(hh ** 2, 100 * (a + C * hh ** 2), "--", color="C3", label="fit over h > s: a + C h\u00b2")
ax.axvline(s ** 2, color="0.5", lw=0.8, ls=":", label="h = s (vorton core radius)")
ax.axhspan(0, 100 * thin_core, color="0.85", label="size of the thin-core terms")
for g, x, y in zip(cells, h ** 2, 100 * err):
    if g in (1, 8, 64):
        ax.annotate(f"{g} cell{'s' if g > 1 else ''}/vorton", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
ax.set_xlim(left=0); ax.set_ylim(bottom=0)
ax.set_xlabel("grid spacing squared h\u00b2 [L\u00b2]"); ax.set_ylabel("1 - U / U_Saffman [%]")
ax.legend(fontsize=8, loc="upper left"); ax.grid(alpha=0.3)
plt.show()
for g, hg, e in zip(cells, h, err):
    print(f"{g} cells per vorton: h = {hg:.4f}, {100 * e:.1f}% slow")
print(f"grids with h > s = {s:.3f}: straight in h^2 within {100 * residual:.2f} points; "
      f"finest grid: {100 * e_fine:.1f}% slow, {100 * last_change:.2f} points from the one before; "
      f"thin-core terms: {100 * thin_core:.1f}%")
assert np.all(np.diff(err) < 0)                      # every refinement brings the ring closer
assert coarse.sum() >= 4 and residual < 0.003        # on coarse grids the error is a straight line in h^2
assert 0 < last_change < 0.1 * (err[0] - err[1])    # on fine grids it has levelled off
assert 0.5 * thin_core < e_fine < 2 * thin_core      # what remains is the size of the thin-core terms"""),
    ("md", """\
While the grid is coarser than the vortons' own cores ($h > s$) the error falls on a straight
line in $h^2$, as second-order interpolation should make it. Once the grid resolves the vortons'
cores the error falls faster than that line and levels off: halving the cell volume once more
changes the speed by less than a tenth of what the first refinement did. The ring is then still about 2% slower
than Saffman's speed (printed above), and that is the size it should be: Saffman's formula is
the thin-core limit, and the next terms (Fukumoto and Moffatt, J. Fluid Mech. 417, 2000) are of
relative size $\\varepsilon^2 \\ln(1/\\varepsilon) / (\\ln(8/\\varepsilon) - 0.558)$, about 2% for
$\\varepsilon = \\sigma_{\\rm eff}/R \\approx 0.21$. A thinner core (`core=0.1`, eight times the vortons)
would shrink them."""),
])

BOOKS["02_ball_through_smoke"] = nb("""\
# 2. A ball shot through smoke

Part 4's main scene: a ball ($R = 0.2$, $M = 0.2$) is fired at speed 5 through a
$4 \\times 0.5 \\times 0.5$ box of smoke stirred with weak vortex noise, and on into the clear
fluid beyond it. With viscosity 0.01 the launch Reynolds number $2RU/\\nu$ is 200.

The ball couples to the fluid physically: the fluid inside and at the ball is made to move
with it (no-slip, by Brinkman penalization), which sheds vorticity into a boundary layer and a
wake, and the ball takes the opposite momentum. Drag then comes from the no-slip condition and
the viscosity, as on a real sphere, so the ball slows in clear fluid as well as in the smoke.
This notebook measures how close its drag comes to a real sphere's. All quantities are in
simulation units.""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.ball_through_smoke(tracers=20000)
hist = vp.plot.History(sim)
gif = vp.animate(sim, 60, media / "ball.gif", steps_per_frame=3, view="xz", color="density", size=(480, 160),
                 fps=15, history=hist)
vp.animate.show(gif)"""),
    ("md", """\
`vp.plot.drag_curve` draws the speed and $1/v$ against time, and the drag coefficient against
the Reynolds number along the run. Under quadratic drag with a constant $C_d$,
$M\\,dv/dt = -\\tfrac12 \\rho_0 C_d \\pi R^2 v^2$, $1/v$ grows linearly; the red band is the
stretch from launch where that law holds within 3%. The dotted curve is a real sphere launched
alike: the standard drag curve (Schiller-Naumann) with the added mass $\\tfrac12 \\rho_0 V$.
The bottom panel takes $C_d$ from the ball's deceleration $a$ at each moment,
$C_d = (M + \\tfrac12\\rho_0 V)\\,|a| \\,/\\, (\\tfrac12 \\rho_0 v^2 \\pi R^2)$ (the added mass included),
against $Re = 2Rv/\\nu$, over the sphere's standard curve."""),
    ("code", """\
fig = vp.plot.drag_curve(hist)
fit, dd = fig.drag_fit, fig.drag_data
R, M, rho0, nu = dd.radius, dd.mass, dd.rho0, dd.viscosity
t, v, x = dd.time, dd.v_along, dd.position
# Cd from the deceleration, as the bottom panel draws it (speeds smoothed over 5 samples)
k = np.ones(5) / 5
vs, ts = np.convolve(v, k, mode="valid"), np.convolve(t, k, mode="valid")
cd = (M + 0.5 * rho0 * 4 / 3 * np.pi * R ** 3) * -np.gradient(vs, ts) / (0.5 * rho0 * vs ** 2 * np.pi * R ** 2)
re = 2 * R * vs / nu
ratio = cd / vp.plot.sphere_drag_coefficient(re)
start, settled = ts < 0.4, (ts > 1.0) & (ts < ts[-1] - 0.2)
t_out = t[np.argmax(x > 2.0)]    # the ball leaves the smoke box (x = 2)
v_out = np.interp(t_out, t, v)

print(f"constant Cd within 3% over t = {fit['t0']:.2f}-{fit['t1']:.2f} (Cd = {fit['cd']:.2f} without added mass)")
print(f"first {ts[start][-1]:.1f} T (Re {re[start].min():.0f}-{re[start].max():.0f}): Cd / Schiller-Naumann "
      f"{ratio[start].min():.2f}-{ratio[start].max():.2f}")
print(f"t = {ts[settled][0]:.1f}-{ts[settled][-1]:.1f} (Re {re[settled].min():.0f}-{re[settled].max():.0f}): "
      f"Cd {cd[settled].min():.2f}-{cd[settled].max():.2f}, Cd / Schiller-Naumann "
      f"{ratio[settled].min():.2f}-{ratio[settled].max():.2f}")
print(f"the ball leaves the smoke at t = {t_out:.2f} at speed {v_out:.2f}; {v[-1]:.2f} at t = {t[-1]:.1f} "
      f"({100 * v[-1] / v_out:.0f}%)")
assert fit["within_tolerance"] and fit["t1"] - fit["t0"] >= 0.3
assert np.all(ratio[start] > 1.0)                        # the impulsive start: more drag than steady flow
assert 0.7 < ratio[settled].min() and ratio[settled].max() < 0.9   # below the steady curve, within 30% of it
assert re[settled].max() > 3 * re[settled].min() and cd[settled][-1] > 1.5 * cd[settled][0]   # Cd rises as Re falls
assert v[-1] < 0.5 * v_out                               # clear fluid slows it too
fig"""),
    ("md", """\
What the figure shows (numbers printed above):

- Just after the launch the ball meets more drag than a sphere in steady flow at the same
  Reynolds number: an impulsively started body must first set up its boundary layer and wake
  (the history force of unsteady flow). A constant $C_d$ describes only this first half time
  unit (the red band).
- From $t \\approx 1$ on, the drag coefficient follows the sphere's curve as the ball slows and
  the Reynolds number falls from about 70 to 14, at 0.7-0.9 of Schiller-Naumann's steady value:
  this is the other side of the history force. A decelerating sphere's wake still carries the
  momentum it was given when the ball was faster, and it pushes the ball on, so the drag stays
  below the steady curve. (A ball held at constant speed is within 10% of the curve at every
  $Re$ here: notebook 07.)
- The ball goes on slowing after it has left the smoke (at $x = 2$): the no-slip condition
  exerts drag in clear fluid as on a real sphere, unlike the articles' contact rule, which acts
  only where vortons touch the ball.

Where did the momentum go? `Sim.diagnostics()` gives the fluid's momentum ($\\rho_0$ times its
linear impulse $\\tfrac12\\sum \\mathbf{x} \\times \\boldsymbol{\\omega} V$, less the fluid inside the ball)
and the total with the ball. Nothing outside pushes on the ball or the fluid, so the total
should stay at the ball's launch momentum."""),
    ("code", """\
ball = hist.body_momentum[0][:, 0]
fluid = hist.diagnostics["fluid_momentum"][:, 0]
total = hist.diagnostics["total_momentum"][:, 0]
fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
ax.plot(hist.time, ball, label="ball")
ax.plot(hist.time, fluid - fluid[0], label="fluid (change)")
ax.plot(hist.time, total, "k--", label="total")
ax.set_xlabel("time t [T]"); ax.set_ylabel("x momentum [M L/T]"); ax.legend(); ax.grid(alpha=0.3)
plt.show()
peak = np.argmax(total)
print(f"ball: {ball[0]:.3f} at launch, {ball[-1]:.3f} at the end; fluid gained {fluid[peak] - fluid[0]:.3f} "
      f"by t = {hist.time[peak]:.2f}")
drift = np.abs(total - total[0]).max() / ball[0]
print(f"total: {total[0]:.3f} at launch, {total[-1]:.3f} at the end; it never moves more than "
      f"{100 * drift:.1f}% of the ball's launch momentum")
assert ball[-1] < 0.1 * ball[0] and fluid[-1] - fluid[0] > 0.9 * ball[0]
assert drift < 0.02"""),
    ("md", """\
The ball's momentum goes into the fluid, and the total stays within 2% of the launch momentum
for the whole run (printed above). Two parts of the method keep it: the vortons move with
the field of the step's midpoint (`integrator="rk2"`; with the field of the step's start the
total rose 10% while the ball was fast), and particle strength exchange moves a vorton at the
edge of the vorton set with the diffusion velocity of its vorticity, where it has no
neighbours to pass vorticity to (without it the fluid lost impulse there, and the total fell
below the launch momentum by a third in 10 time units)."""),
])

BOOKS["03_spinning_ball"] = nb("""\
# 3. A spinning ball spins the fluid up

A heavy ball ($M = 100$, $R = 0.2$) in a box of vortex noise is given a sudden twist about $z$
(part 4). The body coupling holds the fluid to the ball's surface (no slip): the fluid next to
the ball is dragged round, viscosity carries that spin outward, and the ball pays for it with
its own angular momentum. We check how much goes where, and how fast compared with Stokes'
torque. All quantities are in simulation units.""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.spinning_ball(per_axis=12, tracers=8000)
ball = sim.bodies[0]
print(ball, "\\nangular velocity:", ball.angular_velocity, "\\nbody coupling:", sim.body_coupling)
hist = vp.plot.History(sim)
gif = vp.animate(sim, 45, media / "spin.gif", view="xy", color="speed", size=(300, 300), fps=15,
                 history=hist)
vp.animate.show(gif)"""),
    ("md", """\
The fluid's own angular momentum (`fluid_angular_momentum` in `Sim.diagnostics()`) is $\\rho_0$
times its angular impulse $\\tfrac13 \\sum \\mathbf{x} \\times (\\mathbf{x} \\times \\boldsymbol{\\omega} V)$,
less the fluid inside the ball, which the coupling turns with the ball. The same scene without
the twist shows how much the noise alone changes it.

For the torque, Stokes' $8\\pi\\mu R^3 W$ ($\\mu = \\rho_0\\nu$) is what steady rotation at a small
rotational Reynolds number costs. This ball is started impulsively and the spun-up layer needs
$R^2/\\nu = 4$ time units to spread over a radius, so early on the torque is larger: for a step
in $W$ the unsteady Stokes equations give
$T(t) = 8\\pi\\mu R^3 W \\,[1 + \\tfrac{R^2}{3\\nu}\\,(\\tfrac{1}{\\sqrt{\\pi t}}
- \\tfrac{1}{a} e^{t/a^2} \\operatorname{erfc}(\\sqrt{t}/a)) / a]$ with $a = R/\\sqrt{\\nu}$,
whose integral over a run of length $t$ is $8\\pi\\mu R^3 W\\,[t + \\tfrac{R^2}{3\\nu}(1 - e^{t/a^2}
\\operatorname{erfc}(\\sqrt{t}/a))]$."""),
    ("code", """\
from math import erfc

rho0, nu, R = hist.ambient_density, hist.viscosity, hist.body_radius[0]
t = hist.time
L_ball = hist.body_angular_momentum[0][:, 2]
L_fluid = hist.diagnostics["fluid_angular_momentum"][:, 2]
L_total = hist.diagnostics["total_angular_momentum"][:, 2]
W = hist.body_angular_velocity[0][:, 2]
loss, gain = L_ball[0] - L_ball[-1], L_fluid[-1] - L_fluid[0]
imbalance = L_total[-1] - L_total[0]

stokes_rate = 8 * np.pi * rho0 * nu * R ** 3            # steady torque per unit W
a2 = R ** 2 / nu
E = np.array([np.exp(s / a2) * erfc(np.sqrt(s / a2)) for s in t])
unsteady = stokes_rate * W[0] * (t + a2 / 3 * (1 - E))  # unsteady Stokes: angular momentum taken by t
steady = stokes_rate * W[0] * t

calm = vp.scenes.spinning_ball(per_axis=12, tracers=0, torque=0.0)
L0 = calm.diagnostics()["fluid_angular_momentum"][2]
calm.step(len(hist) - 1, progress=False)
noise_drift = abs(calm.diagnostics()["fluid_angular_momentum"][2] - L0)

fig, (a1, a2_) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
a1.plot(t, L_ball[0] - L_ball, label="ball's loss")
a1.plot(t, L_fluid - L_fluid[0], label="fluid's gain")
a1.plot(t, L_total - L_total[0], "k--", label="total (change)")
a1.plot(t, unsteady, ":", color="C3", label="unsteady Stokes")
a1.plot(t, steady, ":", color="C7", label="steady Stokes")
a1.set_xlabel("time t [T]"); a1.set_ylabel("angular momentum $L_z$ [M L\\u00b2/T]"); a1.legend(fontsize=8)
a1.grid(alpha=0.3)
torque = -np.gradient(L_ball, t)                        # the torque on the ball, frame by frame
s = t[2:]                                                # (t > 0: the unsteady torque is infinite at t = 0)
a = np.sqrt(a2)
T_unsteady = stokes_rate * W[2:] * (1 + a / 3 * (1 / np.sqrt(np.pi * s) - E[2:] / a))
ratio = torque[2:] / T_unsteady
late = s > 0.75
a2_.plot(s, ratio, color="C4", label="/ unsteady Stokes")
a2_.plot(s, torque[2:] / (stokes_rate * W[2:]), color="C7", label="/ steady Stokes")
a2_.set_xlabel("time t [T]"); a2_.set_ylabel("torque on the ball / Stokes'"); a2_.legend(fontsize=8)
a2_.grid(alpha=0.3)
plt.show()
print(f"rotational Reynolds number W R^2 / nu = {W[0] * R ** 2 / nu:.0f}")
print(f"ball lost {loss:.5f} ({100 * loss / L_ball[0]:.2f}%), the fluid gained {gain:.5f} ({gain / loss:.2f} x the loss); "
      f"fluid + ball changed by {imbalance:+.5f} ({imbalance / loss:+.2f} x the loss); the noise alone: {noise_drift:.1e}")
print(f"Stokes' torque: steady {steady[-1]:.5f}, unsteady {unsteady[-1]:.5f}; "
      f"the ball lost {loss / steady[-1]:.2f} x and {loss / unsteady[-1]:.2f} x that")
print(f"torque / unsteady Stokes: {ratio[0]:.2f} at t = {s[0]:.2f}, {ratio[late].mean():.2f} on average after t = 0.75, "
      f"{ratio[-1]:.2f} at the end")
assert loss > 0 and gain > 0 and noise_drift < 0.01 * gain
assert 0.95 < gain / loss < 1.05 and abs(imbalance) < 0.05 * loss
assert 0.45 < loss / unsteady[-1] < 0.8 and 0.55 < ratio[late].mean() < 0.85"""),
    ("md", """\
The ball spins down and the fluid spins up by as much: fluid plus ball keep their angular
momentum to within a few hundredths of what changed hands, while the noise alone moves the
fluid's by well under a hundredth of it (numbers above).

The torque has the viscous origin Stokes' law describes, but it is low at first. Over the run
the ball loses about 0.9 times what the steady Stokes torque would take, and about 0.7 times what
the unsteady Stokes torque of an impulsive start takes, which is what this run should follow.
The right panel shows the torque frame by frame: about 0.7 of the unsteady value in the first
frames, when the spun-up layer is far thinner than the lattice that holds the fluid to the ball
(about four points per radius, `body_resolution`), rising to about 0.8 as the layer thickens and
the lattice resolves it. (In the very first step the ball's angular momentum even rises a
little, which is why the run's total ratio is lower than the frame-by-frame one.) Once the layer
is a few lattice cells thick, a slowly spinning ball feels Stokes' torque within a few per cent.
A rotational Reynolds number of 25 raises a real ball's torque a little above Stokes', so the
shortfall is, if anything, larger than these ratios say."""),
])

BOOKS["04_dye_drops"] = nb("""\
# 4. Drops of dyed fluid: heavy sinks, light rises

Part 8 gives the vortons a density. Where density varies across gravity, the baroclinic term
$\\nabla\\rho \\times \\mathbf{g} / \\rho_0$ creates vorticity: a heavy drop sinks and rolls up into a
vortex ring, a light drop rises. All quantities are in simulation units.""", [
    ("code", SETUP),
    ("code", """\
def centroid_z(sim, sign):
    \"\"\"Height of the centre of the heavy (sign=+1) or light (-1) fluid, weighted by density and volume.\"\"\"
    d = sign * sim.vortons.density * sim.vortons.radius ** 3
    m = d > 0
    return np.sum(sim.vortons.position[m, 2] * d[m]) / np.sum(d[m])

def ring_share(sim, sign):
    \"\"\"Share of the vorticity of the dyed fluid (of the given sign) that circles the vertical axis
    through its centre: +1 for a ring whose inner side moves up, -1 for one moving down.\"\"\"
    p, w, V = sim.vortons.position, sim.vortons.vorticity, sim.vortons.radius ** 3
    d = sign * sim.vortons.density
    m = d > 0.05 * d.max()
    c = np.average(p[m], axis=0, weights=(d * V)[m])
    x, y = p[m, 0] - c[0], p[m, 1] - c[1]
    w_phi = (-y * w[m, 0] + x * w[m, 1]) / (np.hypot(x, y) + 1e-12)
    return np.sum(w_phi * V[m]) / np.sum(np.linalg.norm(w[m], axis=1) * V[m])

def start_acceleration(times, heights, t_max=0.3):
    \"\"\"Acceleration of a height that starts from rest, fitted as a parabola over t <= t_max.\"\"\"
    times, heights = np.asarray(times), np.asarray(heights)
    k = times <= t_max + 1e-9
    return 2 * np.polyfit(times[k], heights[k], 2)[0]

drop = vp.scenes.dye_drop(per_axis=12, tracers=6000)
deviation = drop.vortons.density.max()
t1, z1 = [drop.time], [centroid_z(drop, +1)]
drop.step(45, callback=lambda s: (t1.append(s.time), z1.append(centroid_z(s, +1))), progress=False)
fig = vp.plot.tracers(drop, color="density", view="xz")
fig.axes[0].set_title(f"dye_drop at t = {drop.time:.2f}")
fig"""),
    ("md", """\
How fast should it start? A sphere of heavy fluid released from rest accelerates at
$\\tfrac23\\, g\\, d/\\rho_0$: the buoyancy $g\\,d/\\rho_0$ per unit mass (the model is Boussinesq), less
the fluid it must push aside, the potential-flow added mass $\\tfrac12$. We fit the drop's centre
over the first 0.3 time units at this resolution (12 vortons across the box) and at two finer
ones (short runs, no tracers)."""),
    ("code", """\
g = abs(drop.gravity[2])
expected = -2 / 3 * g * deviation / drop.ambient_density
ratios = {12: start_acceleration(t1, z1) / expected}
for n in (16, 20):
    fine = vp.scenes.dye_drop(per_axis=n, tracers=0)
    tf, zf = [fine.time], [centroid_z(fine, +1)]
    fine.step(9, callback=lambda s: (tf.append(s.time), zf.append(centroid_z(s, +1))), progress=False)
    ratios[n] = start_acceleration(tf, zf) / expected
share = ring_share(drop, +1)
for n, r in ratios.items():
    print(f"{n} vortons across: starts at {100 * r:.0f}% of 2/3 g d / rho0 = {expected:.2f}")
print(f"after {drop.time:.1f} time units the drop has sunk {z1[0] - z1[-1]:.2f}; "
      f"{100 * abs(share):.0f}% of its vorticity circles the vertical axis (a ring, moving down: {share < 0})")
r = list(ratios.values())
assert 0.4 < r[0] and np.all(np.diff(r) > 0) and max(r) < 1.05
assert z1[-1] < z1[0] - 1.0 and share < -0.8"""),
    ("md", """\
The drop starts slower than a rigid heavy sphere would, at 40-100% of its acceleration, and
closer to it the finer the vortons (printed above): the density jump at the drop's edge is
spread over a few grid cells, and so is the vorticity it creates. By the end the heavy fluid
has rolled up into a ring moving down: nearly all of its vorticity circles the vertical axis.

Two drops: a light one (density deviation $-0.9$) two units below the middle and a heavy one
($+0.9$) two units above, on the same vertical axis."""),
    ("code", """\
def spread(sim, sign):
    \"\"\"Horizontal radius of the heavy (+1) or light (-1) fluid about the vertical axis.\"\"\"
    d = sign * sim.vortons.density
    m = d > 0.1 * d.max()
    p = sim.vortons.position[m]
    return np.sqrt(np.average(p[:, 0] ** 2 + p[:, 1] ** 2, weights=d[m]))

two = vp.scenes.two_drops(tracers=6000)
t2, heavy, light = [two.time], [centroid_z(two, +1)], [centroid_z(two, -1)]
r0 = spread(two, +1)
def record(s):
    t2.append(s.time); heavy.append(centroid_z(s, +1)); light.append(centroid_z(s, -1))
gif = vp.animate(two, 75, media / "two_drops.gif", view="xz", color="density", size=(240, 320), fps=15,
                 callback=record)
vp.animate.show(gif)"""),
    ("code", """\
fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
ax.plot(t1, z1, label="dye_drop (heavy)", color="0.4", ls="--")
ax.plot(t2, heavy, label="two_drops: heavy", color="C3")
ax.plot(t2, light, label="two_drops: light", color="C0")
ax.set_xlabel("time t [T]"); ax.set_ylabel("height of the drop's centre [L]"); ax.legend(); ax.grid(alpha=0.3)
plt.show()
r1 = spread(two, +1)
print(f"heavy drop moved {heavy[-1] - heavy[0]:+.2f}, light drop {light[-1] - light[0]:+.2f}; "
      f"gap between their centres now {heavy[-1] - light[-1]:.2f}; heavy fluid's radius {r0:.2f} -> {r1:.2f}")
assert heavy[-1] - heavy[0] < -1.2 and light[-1] - light[0] > 1.2
assert 0 < heavy[-1] - light[-1] < 1.0   # they meet, and neither passes the other
assert r1 > 2.5 * r0                     # they spread sideways instead
dh = np.diff(heavy)                                     # dh[k]: from frame k to k + 1
odd = np.abs(dh[1:-1] - 0.5 * (dh[:-2] + dh[2:]))       # odd[j]: how far the step to frame j + 2 is off
print(f"the largest jump in the heavy drop's height comes at frame {np.argmax(odd) + 2}; "
      f"remeshing every {two.remesh_interval} frames")
assert (np.argmax(odd) + 2) % two.remesh_interval == 0"""),
    ("md", """\
The heavy drop sinks and the light one rises, each faster as it goes, until they meet in the
middle and stop there: on one axis neither can pass the other, and the two spread sideways
into a flat layer instead (the heavy fluid's radius grows more than two and a half times).
The small steps in the two drops' curves come at remeshings (every 20 frames in this scene),
which move the fluid onto a fresh lattice and keep only the points with appreciable vorticity:
the drops' centres shift a little each time."""),
])

BOOKS["05_stratified"] = nb("""\
# 5. A ball in a stratified fluid

Part 9: two layers, heavy fluid (density deviation $+0.6$) below light ($-0.6$) above a thin
interface, with a ball of the interface's density released above it. Buoyancy is the weight of
the fluid it displaces: in the light layer the ball is heavier than its surroundings and sinks;
in the heavy layer it is lighter and is pushed back. Part 9 shows it settling at the interface.
The layers are the ambient fluid (`Sim(stratification=...)`): they are at rest by themselves,
and only the fluid the ball drags along moves. All quantities are in simulation units.""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.stratified(tracers=6000)
print(sim, sim.bodies[0], "stratification (z, density):", sim.stratification, sep="\\n")
hist = vp.plot.History(sim)
gif = vp.animate(sim, 240, media / "stratified.gif", view="xz", color="speed", size=(300, 300), fps=30,
                 history=hist)
vp.animate.show(gif)"""),
    ("code", """\
R = hist.body_radius[0]
t, z = hist.time, hist.body_position[0][:, 2]
i_low = np.argmin(z)
i_up = i_low + np.argmax(z[i_low:])              # the highest point after the overshoot
settled = t > t[-1] - 2.0                        # the last two time units

fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
ax.plot(t, z, label="ball centre")
ax.axhspan(-0.05, 0.05, color="k", alpha=0.15, label="interface")
ax.set_xlabel("time t [T]"); ax.set_ylabel("height z [L]"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.show()
print(f"released at z = {z[0]:.2f}; lowest z = {z[i_low]:.3f} at t = {t[i_low]:.2f}, back up to z = {z[i_up]:+.3f} "
      f"at t = {t[i_up]:.2f}; over the last two time units z = {z[settled].mean():+.4f} "
      f"(from {z[settled].min():+.4f} to {z[settled].max():+.4f})")
assert -R < z[i_low] < -0.05                     # overshoots into the heavy layer, by less than a radius
assert 0 < z[i_up] < 0.5 * (0 - z[i_low])        # is pushed back, above the middle, less far
assert np.all(np.abs(z[settled]) < 0.05)         # and stays inside the interface"""),
    ("md", """\
The ball sinks through the light layer, overshoots into the heavy one, is pushed back and
settles at the interface, where the fluid is as dense as it is (numbers above): the bobbing
that remains stays inside the interface's thickness of 0.1.

## A linear profile: the buoyancy frequency

In a fluid whose density falls linearly with height a displaced parcel oscillates at the
buoyancy (Brunt-Vaisala) frequency, $N^2 = g\\,|d\\rho/dz| / \\rho_0$. A neutrally buoyant ball
must also move the fluid around it, the added mass $\\rho V/2$ of potential flow, so it
oscillates more slowly, at $N_\\mathrm{eff}^2 = N^2 \\rho V / (M + \\rho V/2)$ ($= N^2/1.5$ here).
The scene `linear_stratification` releases one a radius above its level."""),
    ("code", """\
lin = vp.scenes.linear_stratification(tracers=0)
lh = vp.plot.History(lin)
lin.step(150, callback=lh.record, progress=False)
(z_lo, rho_lo), (z_hi, rho_hi) = lin.stratification
rho0, g, ball = lin.ambient_density, -lin.gravity[2], lin.bodies[0]
V = 4 / 3 * np.pi * ball.radius ** 3
N = np.sqrt(g * abs(rho_hi - rho_lo) / (z_hi - z_lo) / rho0)
N_eff = N * np.sqrt(rho0 * V / (ball.mass + rho0 * V / 2))
lt, lz = lh.time, lh.body_position[0][:, 2]
i_min = np.argmin(lz)
i_max = i_min + np.argmax(lz[i_min:])
period = lt[i_max]                                # from the release (a top) to the next top
fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
ax.plot(lt, lz, label="ball centre")
ax.plot(lt, lz[0] * np.cos(N_eff * lt), ":", color="C3", label="$z_0 \\\\cos N_\\\\mathrm{eff} t$")
ax.set_xlabel("time t [T]"); ax.set_ylabel("height z [L]"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.show()
print(f"N = {N:.3f} (2 pi / N = {2 * np.pi / N:.2f}), N_eff = {N_eff:.3f} (2 pi / N_eff = {2 * np.pi / N_eff:.2f})")
print(f"lowest z = {lz[i_min]:+.3f} at t = {lt[i_min]:.2f}, next top z = {lz[i_max]:+.3f} at t = {lt[i_max]:.2f}: "
      f"period {period:.2f} = {period * N_eff / (2 * np.pi):.2f} x 2 pi / N_eff; "
      f"first swing {-lz[i_min] / lz[0]:.2f} x the release height")
assert 1.0 < period * N_eff / (2 * np.pi) < 1.4
assert -0.8 * lz[0] < lz[i_min] < -0.2 * lz[0]"""),
    ("md", """\
The ball does oscillate about its level, but the oscillation is strongly damped (its first
swing below the level reaches about half its release height, and the next top stays just
below the level) and slower than $N_\\mathrm{eff}$ says, by about a fifth. Both belong to a real ball
at this viscosity: the Stokes layer around it, $\\sqrt{2\\nu/\\omega} \\approx 0.1$, is half a
radius, and the unsteady (Basset) viscous force it carries both damps the motion and adds to the
fluid the ball moves with; potential flow's $\\rho V/2$ is the inviscid limit. The internal waves
and the wake the ball leaves take the rest of its energy.

The ball's full motion in the two-layer case (position, velocity, spin) from `vp.plot.motion`:"""),
    ("code", "vp.plot.motion(hist)"),
])

BOOKS["06_hot_ball"] = nb("""\
# 6. A hot ball makes a rising plume

Part 10: a fixed ball at temperature 10 (the ambient fluid is at 1) sits in a small box of
vortex noise that keeps emitting vortons and tracers. Heat conducts into the vortons that touch
the ball; hot fluid is lighter ($\\rho = \\rho_0 / T$), so it rises and rolls up into a vortex
ring, seen from the side as a pair of counter-rotating vortices. All quantities are in
simulation units.""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.hot_ball(tracers=2000, tracer_rate=2000)
print(sim, sim.bodies[0], f"remeshing every {sim.remesh_interval} steps", sep="\\n")
hist = vp.plot.History(sim)
plume, counts = [], [len(sim.vortons)]   # height of the hot fluid's centre; vortons
def record(s):
    T = s.vortons.temperature
    hot = T > 1.01
    plume.append(np.mean(s.vortons.position[hot, 2]) if hot.any() else np.nan)
    counts.append(len(s.vortons))
gif = vp.animate(sim, 75, media / "hot_ball.gif", view="xz", color="temperature", size=(300, 300), fps=15,
                 history=hist, callback=record)
vp.animate.show(gif)"""),
    ("md", """\
Heat is conducted between the ball and the vortons at its surface, and conduction moves heat
without making or losing any. The heat counted is the heat above the ambient's, so the vortons
the emitter adds (at the ambient temperature 1) add none, and remeshing, which replaces the
vortons by a lattice, keeps both their mass and their heat. So the fluid's heat plus the
ball's should stay constant to rounding at every step, the remeshing ones included."""),
    ("code", """\
d = hist.diagnostics
total, fluid = d["heat"], d["fluid_heat"]
frames = hist.frame
remesh = frames[1:] % sim.remesh_interval == 0
step_total = np.diff(total)  # heat made or lost in a step
step_fluid = np.diff(fluid)  # heat the fluid gained

fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
a1.plot(hist.time[1:], plume, color="C3")
a1.set_xlabel("time t [T]"); a1.set_ylabel("height of the hot fluid (T > 1.01) [L]"); a1.grid(alpha=0.3)
a2.plot(hist.time, fluid - fluid[0], color="C1", label="fluid")
a2.plot(hist.time[1:][remesh], (fluid - fluid[0])[1:][remesh], "kx", ms=5, label="remeshed")
a2.set_xlabel("time t [T]"); a2.set_ylabel("heat gained by the fluid \\u0394Q"); a2.grid(alpha=0.3); a2.legend()
plt.show()
print(f"every step: |heat made or lost| <= {np.abs(step_total).max():.1e} "
      f"(the fluid gained up to {np.abs(step_fluid).max():.1e} a step; the ball holds {total[0]:.3g})")
print(f"remeshing steps: fluid heat changed by {np.round(step_fluid[remesh], 4)}")
print(f"hot fluid's centre rose from {plume[0]:.2f} to {plume[-1]:.2f}; hottest vorton T = "
      f"{sim.vortons.temperature.max():.2f}, the ball T = {sim.bodies[0].temperature:.5f}")
assert np.abs(step_total).max() < 1e-7 * np.abs(step_fluid).max()  # only rounding of the totals ~1e6
assert step_fluid[remesh].min() > 0                  # remeshing steps too: the fluid only gains
assert 1 - 1e-9 <= sim.vortons.temperature.min() and sim.vortons.temperature.max() <= sim.bodies[0].temperature + 1e-9
assert plume[-1] - plume[0] > 0.5"""),
    ("code", """\
def ring_share(sim, above=0.3):
    \"\"\"Share of the vorticity above z = `above` that circles the vertical axis (+1: a rising ring).\"\"\"
    p, w, V = sim.vortons.position, sim.vortons.vorticity, sim.vortons.radius ** 3
    m = p[:, 2] > above
    x, y = p[m, 0], p[m, 1]
    w_phi = (-y * w[m, 0] + x * w[m, 1]) / (np.hypot(x, y) + 1e-12)
    return np.sum(w_phi * V[m]) / np.sum(np.linalg.norm(w[m], axis=1) * V[m])

share = ring_share(sim)
print(f"{100 * share:.0f}% of the plume's vorticity circles the vertical axis, in the sense of a rising ring")
print(f"tracers' sampled density deviation: {sim.tracers.density.min():.2f} .. {sim.tracers.density.max():.2f}")
assert share > 0.6
assert sim.tracers.density.min() < -sim.ambient_density   # below -rho0 the temperature means nothing
fig = vp.plot.tracers(sim, color="temperature", view="xz")
fig.axes[0].set_title(f"tracers coloured by temperature, t = {sim.time:.2f}")
fig"""),
    ("md", """\
The hot fluid rises, more than half a unit in these two and a half time units, and rolls up
into a ring: most of the plume's vorticity circles the vertical axis in the sense of a rising
ring (a pair of counter-rotating vortices in the side view above).

Heat is conserved to rounding on every step, the remeshings (every 10 steps here, the crosses)
included: remeshing moves the vortons' strength onto a fresh lattice, merges the weak lattice
points into their neighbours without changing the totals, and gives each point a density that
keeps both the mass and the heat of the vortons it replaces, with no temperature outside the
range they had, so no vorton is hotter than the ball that heats it. The tracers take their
density from the fluid's density grid, which undershoots further near the ball, below $-\\rho_0$
(printed above), where the temperature $\\rho_0/(\\rho_0 + d)$ means nothing: the colour scale of
the tracer picture covers the middle 98% of the tracers, and its arrows mark the rest."""),
])


BOOKS["07_sphere_drag"] = nb("""\
# 7. A sphere's drag curve

How hard does the fluid pull back on a ball? For a sphere in steady flow the answer is one
curve, the drag coefficient $C_d = F / (\\tfrac12 \\rho_0 U^2 \\pi R^2)$ against the Reynolds
number $Re = 2RU/\\nu$, measured many times over a century. Schiller and Naumann's fit
$C_d = \\tfrac{24}{Re}(1 + 0.15\\,Re^{0.687})$ holds within a few per cent up to $Re \\approx 800$;
Brown and Lawler's $\\tfrac{24}{Re}(1 + 0.150\\,Re^{0.681}) + 0.407/(1 + 8710/Re)$ extends it to
$Re = 2\\cdot10^5$.

The ball couples to the fluid by penalization: on a lattice of spacing $h = R/$`body_resolution`
around it the fluid is forced to the ball's rigid motion at every step, which creates the
boundary layer's vorticity, and the momentum this takes is the ball's `fluid_impulse`. Here we
hold a ball ($R = 0.5$) at constant speed $U = 1$ through still fluid at several viscosities,
read the drag from that impulse, and set it against the curve; then let a heavy ball settle
under gravity and compare its terminal speed with the curve's. All quantities are in
simulation units.""", [
    ("code", SETUP),
    ("code", """\
import time

R, U, T = 0.5, 1.0, 8.0            # radius, speed, duration: 8 diameters travelled
REYNOLDS = [10, 20, 50, 100, 200]
area = np.pi * R ** 2

def sim_for(re, resolution, gravity=0.0):
    h = R / resolution
    return vp.Sim(dt=0.5 * h / U, viscosity=2 * R * U / re, gravity=(0, 0, -gravity),
                  body_resolution=resolution, grid_cells_per_vorton=4.0,
                  remesh_interval=5, remesh_threshold=0.01)

def towed(re, resolution):
    \"\"\"A fixed ball moved at U from rest: the times and the fluid's impulse on it.\"\"\"
    sim = sim_for(re, resolution)
    ball = sim.add_body(vp.RigidBody(velocity=(U, 0, 0), radius=R, mass=1.0, fixed=True))
    t, J = [0.0], [0.0]
    for _ in range(int(round(T / sim.dt))):
        sim.step()
        t.append(sim.time); J.append(ball.fluid_impulse[0])
    return np.array(t), np.array(J)

def drag_coefficient(t, J, t0, t1):
    \"\"\"Cd from the mean force over [t0, t1]: the slope of the impulse the fluid takes.\"\"\"
    m = (t >= t0 - 1e-9) & (t <= t1 + 1e-9)
    return -np.polyfit(t[m], J[m], 1)[0] / (0.5 * U ** 2 * area)

start = time.perf_counter()
runs = {(re, res): towed(re, res) for res in (4, 5) for re in REYNOLDS}
print(f"{len(runs)} runs in {time.perf_counter() - start:.0f} s")"""),
    ("md", """\
An impulsively started ball first feels a large drag: the boundary layer is thin and the wake
not yet grown. Over the first diameters $C_d$ falls towards its steady value. The left panel
shows it, each run's drag over half-unit windows, as a fraction of Schiller-Naumann's; we take
the steady value from the last diameter travelled, by then changing by 2% per diameter or less
(least at low $Re$; at $Re$ 200 the wake grows longest).
The right panel sets those values on the drag curve, at two lattice resolutions."""),
    ("code", """\
sn = lambda re: vp.plot.sphere_drag_coefficient(re, law="schiller-naumann")
cd = {key: drag_coefficient(t, J, T - 1.0, T) for key, (t, J) in runs.items()}
ratio = {key: cd[key] / sn(key[0]) for key in runs}

fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for i, re in enumerate(REYNOLDS):
    t, J = runs[(re, 5)]
    edges = np.arange(0.5, T + 0.01, 0.5)
    history = [drag_coefficient(t, J, a, b) / sn(re) for a, b in zip(edges[:-1], edges[1:])]
    a1.plot(0.5 * (edges[:-1] + edges[1:]), history, "o-", ms=3, color=f"C{i}", label=f"Re {re}")
a1.axhline(1.0, color="k", lw=0.8); a1.axhspan(0.85, 1.15, color="0.9", zorder=0)
a1.set_xlabel("time t = distance travelled / diameter"); a1.set_ylabel("$C_d$ / Schiller-Naumann")
a1.set_title("resolution 5: the start-up transient"); a1.legend(fontsize=8); a1.grid(alpha=0.3)

rr = np.geomspace(5, 1000, 200)
a2.plot(rr, vp.plot.sphere_drag_coefficient(rr, law="schiller-naumann"), "k-", lw=1.2, label="Schiller-Naumann")
a2.plot(rr, vp.plot.sphere_drag_coefficient(rr, law="brown-lawler"), "k:", lw=1.2, label="Brown-Lawler")
for res, marker in ((4, "s"), (5, "o")):
    a2.plot(REYNOLDS, [cd[(re, res)] for re in REYNOLDS], marker, mfc="none" if res == 4 else None,
            label=f"this model, R/h = {res}")
a2.set_xscale("log"); a2.set_yscale("log")
a2.set_xlabel("Reynolds number 2 R U / \\u03bd"); a2.set_ylabel("drag coefficient $C_d$")
a2.set_title("steady drag"); a2.legend(fontsize=8); a2.grid(alpha=0.3, which="both")
plt.show()

print(" Re   Schiller-Naumann   Cd (R/h=4)   Cd (R/h=5)   ratio 4   ratio 5")
for re in REYNOLDS:
    print(f"{re:4d}   {sn(re):16.3f}   {cd[(re, 4)]:10.3f}   {cd[(re, 5)]:10.3f}   {ratio[(re, 4)]:7.3f}   {ratio[(re, 5)]:7.3f}")

for re in REYNOLDS:
    t, J = runs[(re, 5)]
    assert drag_coefficient(t, J, 0.5, 1.0) > 1.05 * cd[(re, 5)]                            # the start-up drag is higher
    assert abs(drag_coefficient(t, J, T - 2.0, T - 1.0) / cd[(re, 5)] - 1.0) < 0.02            # and has levelled off
assert all(abs(drag_coefficient(*runs[(re, 5)], T - 2.0, T - 1.0) / cd[(re, 5)] - 1.0) < 0.01 for re in (10, 20, 50))
assert all(0.85 < ratio[(re, 5)] < 1.15 for re in REYNOLDS)                                # within 15% from Re 10 to 200
assert all(abs(ratio[key] - 1) < 0.12 for key in ratio)                                    # within 12% everywhere
assert all(abs(ratio[(re, res)] - 1) < 0.05 for re in (10, 20) for res in (4, 5))           # within 5% at Re 10 and 20"""),
    ("md", """\
From $Re$ 10 to 200 the steady drag is within 12% of Schiller-Naumann's at both resolutions
(four and five lattice cells per radius), and within 5% at $Re$ 10 and 20, where
the boundary layer is thick and the lattice resolves it: there the fluid next to the ball is
held to the outer flow's profile continued to the surface, so it sticks at the ball's radius.
Where the boundary layer is thinner than a lattice cell the penalized wall stands for it.

Above $Re \\approx 210$ a real sphere's wake loses its symmetry and above about 270 it sheds
vortices: the drag becomes unsteady, and so it does here. Those runs need finer lattices and
longer averages than a notebook affords.

## A settling ball

A free ball twice as dense as the fluid, released from rest, falls until the drag balances its
weight less its buoyancy: $(M - \\rho_0 V) g = \\tfrac12 \\rho_0 U_t^2 \\pi R^2 C_d(Re)$. We choose $g$
so that with Schiller-Naumann's $C_d$ this balance gives $U_t = 1$ at $Re = 100$, and watch. The
dashed curve is the quasi-steady model of the same ball: added mass $\\tfrac12\\rho_0 V$ and the
steady drag curve at every instant, $(M + \\tfrac12\\rho_0 V)\\,\\dot U = (M - \\rho_0 V) g - \\tfrac12
\\rho_0 C_d U^2 \\pi R^2$."""),
    ("code", """\
ratio_m, re_t, resolution, T_fall = 2.0, 100, 4, 16.0
V = 4 / 3 * np.pi * R ** 3
M = ratio_m * V
g = 0.5 * U ** 2 * area * sn(re_t) / ((ratio_m - 1) * V)
sim = sim_for(re_t, resolution, gravity=g)
ball = sim.add_body(vp.RigidBody(radius=R, mass=M))
t, w = [0.0], [0.0]
for _ in range(int(round(T_fall / sim.dt))):
    sim.step()
    t.append(sim.time); w.append(-ball.velocity[2])
t, w = np.array(t), np.array(w)

model = [0.0]                      # the quasi-steady model, by small explicit steps
for _ in range(len(t) - 1):
    u = model[-1]
    drag = 0.5 * sn(max(2 * R * u / sim.viscosity, 1e-9)) * u * u * area
    model.append(u + sim.dt * ((M - V) * g - drag) / (M + 0.5 * V))
model = np.array(model)

fig, ax = plt.subplots(figsize=(6.5, 3.6), layout="constrained")
ax.plot(t, w, label=f"this model, R/h = {resolution}")
ax.plot(t, model, "--", color="0.4", label="quasi-steady, Schiller-Naumann")
ax.axhline(U, color="k", lw=0.8, label="terminal speed of the balance")
ax.set_xlabel("time t"); ax.set_ylabel("settling speed"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.show()

last = w[t > T_fall - 1.0].mean()
before = w[(t > T_fall - 2.0) & (t <= T_fall - 1.0)].mean()
print(f"Re {re_t}: settling speed {last:.3f} (terminal speed of the balance 1), "
      f"changing {100 * abs(last / before - 1):.2f}% over the last time unit")
deficit = 1.0 - ratio[(100, 4)]                           # the steady drag's shortfall at R/h = 4
print(f"steady drag at Re 100, R/h = 4: {100 * deficit:.1f}% low; settling speed {100 * (last - 1):.1f}% high; "
      f"largest lag behind the quasi-steady model while accelerating {np.max(model - w):.3f}")
assert abs(last - U) < 0.15 and last > U                   # within 15%, a little fast ...
assert abs(last / before - 1.0) < 0.01                     # ... and no longer changing
assert 0.05 < deficit < 0.11 and 0.3 < (last - U) / deficit < 0.8   # about half the drag's shortfall
assert 0.01 < np.max((model - w)[t < 4]) < 0.07            # lagging while it accelerates"""),
    ("md", """\
The ball settles within 15% of the speed the drag curve predicts, a few per cent fast. At this
resolution its steady drag at $Re$ 100 is about 9% low, and near $Re$ 100 the curve falls roughly
as $Re^{-1/2}$, so the balance fixes $U^2 C_d \\propto U^{3/2}$ and the speed comes out about half as
much high. While it accelerates, the ball lags the quasi-steady model by up to a few hundredths
of $U_t$: the boundary layer and wake it drags along lag behind its speed (the Basset history
force), which the quasi-steady model leaves out."""),
])

BOOKS["08_sweeps"] = nb("""\
# 8. Sweeps: a ball's drag curve over speeds and viscosities, on Dask

A drag curve is many runs: one per speed and viscosity, and a few seeds of the smoke's random
noise each to see how much that matters. `vp.sweep` runs them as tasks on
[Dask](https://distributed.dask.org): here a `LocalCluster` of two one-thread workers on this
machine, each run stepping on one thread. Two independent runs use two cores better than one
run on both (a step has serial parts and barriers that the other run fills). The same call
takes the address of any Dask cluster (`client="tcp://scheduler:8786"`: SLURM through
dask-jobqueue, Kubernetes, a cloud) or runs in this process (`client="serial"`). It needs
`pip install "vortonpy[sweep]"`.""", [
    ("code", SETUP + """
import pandas as pd
from distributed import Client, LocalCluster

cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
client = Client(cluster)
print("dashboard:", client.dashboard_link)"""),
    ("md", """\
Part 4's ball shot through smoke (`vp.scenes.ball_through_smoke`), with the physical coupling of
body and fluid (no slip on the ball's surface, the default): the ball makes its own boundary
layer and wake, whatever vortons it meets. To measure a *steady* drag curve the ball is heavy
($M = 2$, sixty times the fluid it displaces), so it loses only a few per cent of its speed in a
run and each run is one point of the curve, at $Re = 2RU/\\nu$ with $R = 0.2$. The scene is kept
small: no tracers (they are passive), 64 noise vortons, the lattice at its default 4 cells per
radius, and remeshing every 5 frames, which keeps the wake's vortons few. Each run steps 60
frames (2 s); `measure_every=1` samples the ball's velocity every frame, so each measure column
holds the run's list of samples. With `out=` every finished run is written to that folder at
once: calling the sweep again re-runs nothing that finished (so an interrupted sweep picks up
where it stopped)."""),
    ("code", """\
scene = vp.scenes.ball_through_smoke
fixed = dict(ball_mass=2.0, vortons=64, tracers=0, remesh_interval=5, remesh_threshold=0.01)
grid = {"speed": [1.0, 2.0, 4.0], "viscosity": [0.005, 0.01, 0.02], **fixed}

def ball_track(sim):
    return {"t": sim.time, "v": sim.bodies[0].velocity[0]}

out = Path(tempfile.mkdtemp(prefix="vortonpy-sweep-"))
results = vp.sweep(scene, grid, frames=60, seeds=2, measure=ball_track, measure_every=1, client=client, out=out)
assert len(results) == 18 and (results["status"] == "ok").all()
assert all(len(t) == 61 for t in results["t"])   # frames 0 to 60
results[["speed", "viscosity", "seed", "t", "v", "wall_s"]].head(6)"""),
    ("md", """\
The engine is deterministic for a given thread count, so the workers' numbers are the numbers of
the same runs done here one after another, and a second call with the same `out` reads them back
without running anything."""),
    ("code", """\
some = {**grid, "speed": [2.0, 4.0], "viscosity": [0.01]}
here = vp.sweep(scene, some, frames=60, seeds=2, measure=ball_track, measure_every=1, client="serial")
there = results[(results.viscosity == 0.01) & results.speed.isin([2.0, 4.0])].reset_index(drop=True)
cols = ["speed", "seed", "t", "v"]
assert here[cols].equals(there[cols])

stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
again = vp.sweep(scene, grid, frames=60, seeds=2, measure=ball_track, measure_every=1, client=client, out=out)
assert {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == stamps   # nothing ran again
assert again.drop(columns="wall_s").equals(results.drop(columns="wall_s"))
print(f"{len(stamps)} runs stored in {out}; identical serially and resumed")"""),
    ("md", """\
From each run's samples, the drag coefficient: a ball slowed by drag in still fluid obeys
$(M + \\tfrac12\\rho_0 V)\\,\\dot v = -\\tfrac12\\rho_0 C_d \\pi R^2 v^2$ (the fluid it must carry
along adds half its displaced mass), so $1/v$ grows linearly in time and `vp.plot.fit_drag`
fits that line, here over the second half of each run ($t \\ge 1$): just after the launch the
ball slows faster than steady drag would make it (the fluid around it is being set moving and a
thin boundary layer shears hard), and it takes about a second to relax (right panel). The left
panel puts the mean over the seeds, with their spread, over a sphere's steady drag curve
(`vp.plot.sphere_drag_coefficient`: Schiller and Naumann below $Re$ 800)."""),
    ("code", """\
R, M = 0.2, fixed["ball_mass"]
m_eff = M + 0.5 * 4 / 3 * np.pi * R ** 3

def drag(row, after=1.0):
    t, v = np.asarray(row["t"]), np.asarray(row["v"])
    fit = vp.plot.fit_drag(t, v, R, m_eff, mask=t >= after)
    return pd.Series({"reynolds": 2 * R * v[t >= after].mean() / row["viscosity"], "cd": fit["cd"], "r2": fit["r2"]})

results = results.join(results.apply(drag, axis=1))
by = results.groupby(["viscosity", "speed"])
cd, re = by["cd"].agg(["mean", "min", "max"]), by["reynolds"].mean()
sphere = vp.plot.sphere_drag_coefficient(re)
table = pd.DataFrame({"Re": re, "Cd": cd["mean"], "seed_spread": (cd["max"] - cd["min"]) / cd["mean"],
                      "sphere": sphere, "ratio": cd["mean"] / sphere})

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
for nu in grid["viscosity"]:
    c = cd.loc[nu]
    ax.errorbar(re[nu], c["mean"], yerr=[c["mean"] - c["min"], c["max"] - c["mean"]], fmt="o-", capsize=3,
                label=f"viscosity {nu:g}")
Re = np.geomspace(10, 400, 100)
ax.plot(Re, vp.plot.sphere_drag_coefficient(Re), "k--", label="sphere, steady (Schiller-Naumann)")
ax.set_xscale("log"); ax.set_yscale("log")
for axis in (ax.xaxis, ax.yaxis):
    axis.set_major_formatter(plt.ScalarFormatter()); axis.set_minor_formatter(plt.NullFormatter())
ax.set_yticks([0.6, 0.8, 1, 1.5, 2, 3, 4])
ax.set_xlabel("Re = 2RU / viscosity"); ax.set_ylabel("Cd (fitted over t ≥ 1)"); ax.legend(fontsize=8)
ax.grid(alpha=0.3, which="both")

def running_ratio(row):   # the drag from the deceleration, frame by frame, over the sphere's
    t, v = np.asarray(row["t"]), np.asarray(row["v"])
    cd_now = m_eff * -np.gradient(v, t) / (0.5 * v ** 2 * np.pi * R ** 2)
    return t, cd_now / vp.plot.sphere_drag_coefficient(2 * R * v / row["viscosity"])

first_loss, early = [], []   # the first step's loss of speed; early drag over late, every run
for _, row in results.iterrows():
    t, r = running_ratio(row)
    first_loss.append(1 - row["v"][1] / row["v"][0])
    early.append(r[(t > 0) & (t <= 0.25)].mean() / r[t >= 1].mean())
    if row["seed"] == 0:
        bx.plot(t[1:], r[1:], lw=1, label=f"U {row['speed']:g}, viscosity {row['viscosity']:g}")
bx.axvspan(1.0, t[-1], color="C3", alpha=0.08, lw=0)
bx.axhline(1.0, color="k", ls="--", lw=0.8)
bx.set_yscale("log"); bx.set_yticks([0.8, 1, 1.5, 2, 3])
bx.yaxis.set_major_formatter(plt.ScalarFormatter()); bx.yaxis.set_minor_formatter(plt.NullFormatter())
bx.set_xlabel("time"); bx.set_ylabel("Cd now / sphere's steady Cd")
bx.legend(fontsize=7, ncol=2); bx.grid(alpha=0.3, which="both")
print(table.sort_values("Re").round(3).to_string())
print(f"fits: R² ≥ {results.r2.min():.4f}; first step's loss of speed {min(first_loss):.2%} to "
      f"{max(first_loss):.2%}; drag over the first quarter second / after t = 1: {min(early):.2f} to {max(early):.2f}")"""),
    ("md", """\
What the curve shows (the numbers are printed above):

- like a sphere's, the drag coefficient falls with the speed at each viscosity and grows with
  the viscosity at each speed;
- from $Re$ 17 to 145 it is within 12% of the sphere's steady curve (0.97-1.11 of it), the
  largest excess near $Re$ 140;
- the one point above $Re$ 200 is about 30% above the sphere's: there the boundary layer, about
  $R/\\sqrt{Re}$ thick, is a quarter of a lattice cell;
- the seeds' noise matters little: the two seeds' drag coefficients differ by under 1% at every
  point below $Re$ 200, and by a few per cent above;
- each fit is good: the $1/v$ line's $R^2$ is above 0.99 in every run;
- the first step after the launch takes 0.5-1% of the ball's speed in every run, whether it
  starts at speed 1 or 4: it is mostly the fluid being set moving with the ball, which costs a
  fraction of the speed, where drag alone would cost a fraction four times larger at speed 4
  than at 1 (in proportion to the speed); over the
  first quarter second the drag is then more than 1.25 times what it settles to after $t = 1$,
  in every run (right panel).

The lattice's resolution is the knob for the points above $Re$ 100: the Re-140 point again at 6
cells per radius (`body_resolution=6`), a grid given as a list of runs:"""),
    ("code", """\
low, high = table[table.Re < 200], table[table.Re > 200]
for nu in grid["viscosity"]:
    assert cd.loc[nu, "mean"].is_monotonic_decreasing                     # faster, less drag
for speed in grid["speed"]:
    assert cd.xs(speed, level="speed")["mean"].is_monotonic_increasing     # more viscous, more drag
assert low.Re.min() < 20 and (abs(low.ratio - 1) < 0.12).all()
assert low.ratio.idxmax() == (0.005, 2.0)                                 # the largest excess near Re 140
assert len(high) == 1 and high.ratio.iloc[0] > 1.15
assert (low.seed_spread < 0.01).all() and (table.seed_spread < 0.06).all()
assert (results["r2"] > 0.99).all()
assert max(first_loss) < 0.01 and max(first_loss) < 2.5 * min(first_loss)    # far from 4x apart
assert min(early) > 1.25

finer = vp.sweep(scene, [{**fixed, "speed": 2.0, "viscosity": 0.005, "body_resolution": 6}], frames=60,
                 measure=ball_track, measure_every=1, client=client)
fine = drag(finer.iloc[0])
coarse = table.loc[(0.005, 2.0)]
ratio6 = fine["cd"] / vp.plot.sphere_drag_coefficient(fine["reynolds"])
print(f"Re {fine['reynolds']:.0f}: Cd {fine['cd']:.3f} at 6 cells per radius, {coarse.Cd:.3f} at 4; "
      f"sphere {vp.plot.sphere_drag_coefficient(fine['reynolds']):.3f}")"""),
    ("md", """\
At 6 cells per radius the excess over the sphere's drag at $Re$ 140 is less than half of what it
is at 4 (the run costs several times more)."""),
    ("code", """\
assert abs(ratio6 - 1) < 0.5 * (coarse.ratio - 1)
client.close()
cluster.close()"""),
])

def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    os.makedirs(NOTEBOOKS, exist_ok=True)
    stale = []
    for name, book in BOOKS.items():
        for i, cell in enumerate(book.cells):  # stable ids: regenerating changes nothing
            cell["id"] = f"c{i:02d}"
        path = os.path.join(NOTEBOOKS, name + ".ipynb")
        text = nbformat.writes(book)
        if check:
            old = open(path).read() if os.path.exists(path) else None
            if old != text:
                stale.append(path)
            continue
        with open(path, "w") as fh:
            fh.write(text)
        print("wrote", os.path.relpath(path))
    if stale:
        print("stale:", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
