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
# 1. A vortex ring moves at Saffman's speed

A ring of vorticity pushes itself along its axis. For a thin ring of radius $R$, circulation
$\\Gamma$ and a Gaussian core $\\omega \\propto e^{-r^2/\\sigma^2}$, Saffman's formula gives its speed

$$U = \\frac{\\Gamma}{4\\pi R}\\left(\\ln\\frac{8R}{\\sigma} - 0.558\\right).$$

We build the ring from vortons, let it fly, and measure its speed.""", [
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

times, centres = [sim.time], [ring_centre(sim)]
def record(s):
    times.append(s.time)
    centres.append(ring_centre(s))

gif = vp.animate(sim, 40, media / "ring.gif", view="xz", color="speed", size=(360, 240), fps=15,
                 callback=record)
vp.animate.show(gif)"""),
    ("md", """\
The vortons' own algebraic cores (radius $s$) widen the effective Gaussian core a little:
$\\sigma_{\\rm eff} = \\sqrt{\\sigma^2 + s^2}$."""),
    ("code", """\
t, z = np.array(times), np.array(centres)
U_measured = np.polyfit(t, z, 1)[0]
sigma_eff = np.hypot(core, sim.vortons.radius[0])
U_saffman = G / (4 * np.pi * R) * (np.log(8 * R / sigma_eff) - 0.558)

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(t, z - z[0], "o", ms=3, label=f"vortons: U = {U_measured:.4f}")
ax.plot(t, U_saffman * t, "k--", label=f"Saffman: U = {U_saffman:.4f}")
ax.set_xlabel("time"); ax.set_ylabel("distance travelled"); ax.legend(); ax.grid(alpha=0.3)
ax.set_title(f"Vortex ring, R = {R}, core = {core}")
print(f"measured / Saffman = {U_measured / U_saffman:.3f}")"""),
    ("md", """\
The ratio is within a few percent of 1. Saffman's formula is the thin-core limit: with
$\\sigma/R = 0.2$ the corrections of order $(\\sigma/R)^2 \\ln(\\sigma/R)$ are of that size, and they
shrink as the core thins (try `core=0.1`, at the price of more vortons)."""),
])

BOOKS["02_ball_through_smoke"] = nb("""\
# 2. A ball shot through smoke

Part 4's main scene: a ball is fired at speed 5 through a $4 \\times 0.5 \\times 0.5$ box of
smoke stirred with weak vortex noise. The fluid takes momentum from the ball, which slows
as under quadratic drag, $M\\,dv/dt = -\\tfrac12 \\rho_0 C_d \\pi R^2 v^2$ (part 4, figure 5).""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.ball_through_smoke(tracers=20000)
hist = vp.plot.History(sim)
gif = vp.animate(sim, 45, media / "ball.gif", view="xz", color="density", size=(480, 160), fps=15,
                 history=hist)
vp.animate.show(gif)"""),
    ("md", """\
`vp.plot.drag_curve` draws speed, $1/v$ and position against time. Under quadratic drag $1/v$
grows linearly, with slope $\\rho_0 C_d \\pi R^2 / 2M$; the fit uses the steps where the fluid
was still pushing the ball."""),
    ("code", """\
fig = vp.plot.drag_curve(hist)
fit = fig.drag_fit
print(f"fitted Cd = {fit['cd']:.2f}  (r^2 of the 1/v line: {fit['r2']:.3f}, {fit['n']} samples)")
fig"""),
    ("md", """\
Compare the fitted drag coefficient with the experimental value for a sphere (about 0.45 at
these Reynolds numbers, the dotted curve); the quality of the straight line in $1/v$ says how
well the quadratic law describes the slowing. Where did the momentum go? The fluid's linear impulse grows as the
ball slows; their sum stays (nearly) constant."""),
    ("code", """\
rho0 = hist.ambient_density
ball = hist.body_momentum[0][:, 0]
fluid = rho0 * hist.diagnostics["linear_impulse"][:, 0]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(hist.time, ball, label="ball")
ax.plot(hist.time, fluid - fluid[0], label="fluid (change)")
ax.plot(hist.time, ball + fluid - fluid[0], "k--", label="total")
ax.set_xlabel("time"); ax.set_ylabel("x momentum"); ax.legend(); ax.grid(alpha=0.3)"""),
])

BOOKS["03_spinning_ball"] = nb("""\
# 3. A spinning ball spins the fluid up

A heavy ball in a box of vortex noise is given a sudden twist about $z$ (part 4). The no-slip
boundary hands its angular momentum to the fluid: the ball spins down, the fluid spins up,
and their total is conserved.""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.spinning_ball(per_axis=12, tracers=8000)
ball = sim.bodies[0]
print(ball, "\\nangular velocity:", ball.angular_velocity)
hist = vp.plot.History(sim)
gif = vp.animate(sim, 45, media / "spin.gif", view="xy", color="speed", size=(300, 300), fps=15,
                 history=hist)
vp.animate.show(gif)"""),
    ("md", """\
The fluid's angular momentum is $\\rho_0$ times its angular impulse
$\\tfrac13 \\sum \\mathbf{x} \\times (\\mathbf{x} \\times \\boldsymbol{\\omega} V)$ (`Sim.diagnostics()`)."""),
    ("code", """\
rho0 = hist.ambient_density
L_ball = hist.body_angular_momentum[0][:, 2]
L_fluid = rho0 * hist.diagnostics["angular_impulse"][:, 2]
fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.5))
a1.plot(hist.time, hist.body_angular_velocity[0][:, 2], color="C4")
a1.set_xlabel("time"); a1.set_ylabel("ball angular velocity $W_z$"); a1.grid(alpha=0.3)
a2.plot(hist.time, L_ball, label="ball")
a2.plot(hist.time, L_fluid - L_fluid[0], label="fluid (change)")
a2.plot(hist.time, L_ball + L_fluid - L_fluid[0], "k--", label="total")
a2.set_xlabel("time"); a2.set_ylabel("angular momentum $L_z$"); a2.legend(); a2.grid(alpha=0.3)
print(f"ball spun down by {100 * (1 - L_ball[-1] / L_ball[0]):.1f}%")"""),
])

BOOKS["04_dye_drops"] = nb("""\
# 4. Drops of dyed fluid: heavy sinks, light rises

Part 8 gives the vortons a density. Where density varies across gravity, the baroclinic term
$\\nabla\\rho \\times \\mathbf{g} / \\rho$ creates vorticity: a heavy drop sinks and rolls up into a
vortex ring, a light drop rises.""", [
    ("code", SETUP),
    ("code", """\
def centroid_z(sim, sign):
    \"\"\"Height of the density-weighted centre of the heavy (sign=+1) or light (-1) fluid.\"\"\"
    d = sign * sim.vortons.density
    m = d > 0
    return np.sum(sim.vortons.position[m, 2] * d[m]) / np.sum(d[m])

drop = vp.scenes.dye_drop(per_axis=12, tracers=6000)
t1, z1 = [drop.time], [centroid_z(drop, +1)]
drop.step(45, callback=lambda s: (t1.append(s.time), z1.append(centroid_z(s, +1))))
fig = vp.plot.tracers(drop, color="density", view="xz")
fig.axes[0].set_title(f"dye_drop at t = {drop.time:.2f}")
fig"""),
    ("md", """\
Two drops: a light one (density deviation $-0.9$) below, a heavy one ($+0.9$) above. They
pass each other."""),
    ("code", """\
two = vp.scenes.two_drops(tracers=6000)
t2, heavy, light = [two.time], [centroid_z(two, +1)], [centroid_z(two, -1)]
def record(s):
    t2.append(s.time); heavy.append(centroid_z(s, +1)); light.append(centroid_z(s, -1))
gif = vp.animate(two, 50, media / "two_drops.gif", view="xz", color="density", size=(200, 320), fps=15,
                 callback=record)
vp.animate.show(gif)"""),
    ("code", """\
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(t1, z1, label="dye_drop (heavy)")
ax.plot(t2, heavy, label="two_drops: heavy", color="C3")
ax.plot(t2, light, label="two_drops: light", color="C0")
ax.set_xlabel("time"); ax.set_ylabel("height of the drop's centre"); ax.legend(); ax.grid(alpha=0.3)
print(f"heavy drop moved {heavy[-1] - heavy[0]:+.2f}, light drop {light[-1] - light[0]:+.2f}")"""),
])

BOOKS["05_stratified"] = nb("""\
# 5. A ball settles where the fluid is as dense as it is

Part 9: two layers, heavy fluid (density deviation $+0.6$) below light ($-0.6$) above. A ball
with the ambient density is released above the interface. Buoyancy is the weight of the fluid
it displaces: in the light layer the ball is heavier than its surroundings and sinks; below
the interface it would be lighter. It overshoots, bobs, and settles at the interface.""", [
    ("code", SETUP),
    ("code", """\
# The direct (exact) velocity solver: at 1000 vortons it costs little, and the sharp density
# jump at the interface is where approximation errors would grow.  We watch the vortons
# themselves (coloured by density), so no tracers are needed.
sim = vp.scenes.stratified(tracers=0, solver="direct")
hist = vp.plot.History(sim)
snapshots = []
def record(s):
    hist.record(s)
    if s.frame % 4 == 0:
        snapshots.append((s.time, s.vortons.position.copy(), s.vortons.density.copy(), s.bodies[0].position))
sim.step(100, callback=record)
sim"""),
    ("code", """\
from matplotlib.animation import FuncAnimation, PillowWriter

fig, ax = plt.subplots(figsize=(4, 4))
def draw(i):
    t, p, d, b = snapshots[i]
    ax.clear()
    ax.scatter(p[:, 0], p[:, 2], c=d, cmap="coolwarm", vmin=-0.6, vmax=0.6, s=6)
    ax.add_patch(plt.Circle((b[0], b[2]), sim.bodies[0].radius, color="orange"))
    ax.set_xlim(-1.3, 1.3); ax.set_ylim(-1.3, 1.3); ax.set_aspect("equal")
    ax.set_title(f"t = {t:.2f}"); ax.set_xlabel("x"); ax.set_ylabel("z")
anim = FuncAnimation(fig, draw, frames=len(snapshots))
anim.save(media / "stratified.gif", writer=PillowWriter(fps=8), dpi=60)
plt.close(fig)
vp.animate.show(media / "stratified.gif")"""),
    ("code", """\
z = hist.body_position[0][:, 2]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(hist.time, z, label="ball centre")
ax.axhline(0.0, color="k", ls="--", lw=1, label="interface")
ax.set_xlabel("time"); ax.set_ylabel("height"); ax.legend(); ax.grid(alpha=0.3)
print(f"released at z = {z[0]:.2f}, lowest z = {z.min():.2f}, now z = {z[-1]:.2f}")"""),
    ("md", "The ball's full motion (position, speed, spin) from `vp.plot.motion`:"),
    ("code", "vp.plot.motion(hist);"),
])

BOOKS["06_hot_ball"] = nb("""\
# 6. A hot ball makes a rising plume

Part 10: a fixed ball at temperature 10 (the ambient fluid is at 1) sits in a small box of
vortex noise that keeps emitting vortons and tracers. Heat conducts into the vortons that touch
the ball; hot fluid is lighter ($\\rho = \\rho_0 / T$), so it rises and rolls up into a pair of
counter-rotating vortices.""", [
    ("code", SETUP),
    ("code", """\
sim = vp.scenes.hot_ball(tracers=2000, tracer_rate=2000)
print(sim, sim.bodies[0], sep="\\n")
hist = vp.plot.History(sim)
plume = []   # height of the hot fluid's centre
def record(s):
    T = s.vortons.temperature
    hot = T > 1.01
    plume.append(np.mean(s.vortons.position[hot, 2]) if hot.any() else np.nan)
gif = vp.animate(sim, 75, media / "hot_ball.gif", view="xz", color="temperature", size=(300, 300), fps=15,
                 history=hist, callback=record)
vp.animate.show(gif)"""),
    ("code", """\
t = hist.time[1:]
heat = hist.diagnostics["fluid_heat"]
fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.5))
a1.plot(t, plume, color="C3")
a1.set_xlabel("time"); a1.set_ylabel("height of hot fluid (T > 1.01)"); a1.grid(alpha=0.3)
a2.plot(hist.time, heat - heat[0], color="C1")
a2.set_xlabel("time"); a2.set_ylabel("heat gained by the fluid"); a2.grid(alpha=0.3)
print(f"hottest vorton: T = {sim.vortons.temperature.max():.2f}; vortons now: {len(sim.vortons)}")"""),
    ("code", """\
fig = vp.plot.tracers(sim, color="temperature", view="xz")
fig.axes[0].set_title(f"tracers coloured by temperature, t = {sim.time:.2f}")
fig"""),
])


BOOKS["08_sweeps"] = nb("""\
# 8. Sweeps: the ball's drag over speeds and viscosities, on Dask

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
Part 4's ball shot through smoke (`vp.scenes.ball_through_smoke`: 512 vortons of weak noise in a
$4 \\times 0.5 \\times 0.5$ box), without its tracers: they are passive, so they do not change the
ball's drag. Each run steps 60 frames (2 s) and `vp.sweep.BallDrag` fits the quadratic drag law to
the ball's slowing, as `vp.plot.drag_curve` does, for $C_d$ and the Reynolds number
$Re = 2RU/\\nu$. With `out=` every finished run is written to that folder at once: calling the
sweep again re-runs nothing that finished (so an interrupted sweep picks up where it stopped)."""),
    ("code", """\
grid = {"speed": [1.0, 2.0, 4.0, 8.0], "viscosity": [0.001, 0.01, 0.1], "tracers": 0}
out = Path(tempfile.mkdtemp(prefix="vortonpy-sweep-"))
results = vp.sweep(vp.scenes.ball_through_smoke, grid, frames=60, seeds=3,
                   measure=[vp.sweep.BallDrag(), vp.sweep.Ball()], client=client, out=out)
assert len(results) == 36 and (results["status"] == "ok").all()
results[["speed", "viscosity", "seed", "reynolds", "cd", "cd_r2", "ball_x", "wall_s"]].head(8)"""),
    ("md", """\
The engine is deterministic for a given thread count, so the workers' numbers are the numbers of
the same runs done here one after another, and a second call with the same `out` reads them back
without running anything."""),
    ("code", """\
some = {"speed": [2.0, 8.0], "viscosity": [0.01], "tracers": 0}
here = vp.sweep(vp.scenes.ball_through_smoke, some, frames=60, seeds=3, measure=[vp.sweep.BallDrag(), vp.sweep.Ball()],
                client="serial")
there = results[(results.viscosity == 0.01) & results.speed.isin([2.0, 8.0])].reset_index(drop=True)
cols = ["speed", "seed", "cd", "ball_x", "ball_vx"]
assert here[cols].equals(there[cols])

stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
again = vp.sweep(vp.scenes.ball_through_smoke, grid, frames=60, seeds=3,
                 measure=[vp.sweep.BallDrag(), vp.sweep.Ball()], client=client, out=out)
assert {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == stamps   # nothing ran again
assert again.drop(columns="wall_s").equals(results.drop(columns="wall_s"))
print(f"{len(stamps)} runs stored in {out}; identical serially and resumed")"""),
    ("md", """\
$C_d$ against $Re$, the mean over the three seeds with their spread, next to a sphere's curve
(Brown and Lawler 2003, which follows Schiller and Naumann below $Re$ 800)."""),
    ("code", """\
cd = results.groupby(["viscosity", "speed"])["cd"].agg(["mean", "std"])
re = results.groupby(["viscosity", "speed"])["reynolds"].first()

def sphere_cd(Re):
    return 24 / Re * (1 + 0.150 * Re ** 0.681) + 0.407 / (1 + 8710 / Re)

fig, ax = plt.subplots(figsize=(6.5, 4))
for nu in grid["viscosity"]:
    ax.errorbar(re[nu], cd.loc[nu, "mean"], yerr=cd.loc[nu, "std"], fmt="o-", capsize=3, label=f"viscosity {nu:g}")
Re = np.logspace(0.5, 3.6, 100)
ax.plot(Re, sphere_cd(Re), "k--", label="sphere (Brown & Lawler)")
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("Re = 2RU/viscosity"); ax.set_ylabel("fitted Cd"); ax.legend(); ax.grid(alpha=0.3, which="both")
ratio = cd["mean"] / sphere_cd(re)
print((pd.DataFrame({"Re": re, "Cd": cd["mean"], "spread": cd["std"], "sphere": sphere_cd(re), "ratio": ratio})
       .round(3).to_string()))"""),
    ("md", """\
What this scene gives today: the ball is coupled to the fluid by the articles' contact rule
(physics.md, section 7), which pushes out the vortons that touch the ball and gives them the
vorticity that cancels the slip there. It is a plausible effect, not a boundary layer, and the
curve shows it:

- like a sphere's, the fitted $C_d$ is larger at higher viscosity for every speed, and smaller
  for the fastest ball than for the slowest at every viscosity;
- the seeds' noise moves it little: the spread is under a tenth of $C_d$ everywhere;
- but the curve is far flatter than a sphere's: from $Re$ 4 to 3200 a sphere's $C_d$ falls more
  than 15-fold, the fitted one less than 5-fold, and above $Re$ 300 it is two to four times a
  sphere's value.

A physical coupling of body and fluid, whose drag should follow the sphere's curve, will make this
the test of it: rerun the cell with the same grid."""),
    ("code", """\
for speed in grid["speed"]:
    assert cd.xs(speed, level="speed")["mean"].is_monotonic_increasing        # more viscous, more drag
for nu in grid["viscosity"]:
    assert cd.loc[(nu, 8.0), "mean"] < cd.loc[(nu, 1.0), "mean"]               # fastest below slowest
assert (cd["std"] / cd["mean"]).max() < 0.1                                    # seeds matter little
assert sphere_cd(re.min()) / sphere_cd(re.max()) > 15
assert cd["mean"][re.idxmin()] / cd["mean"][re.idxmax()] < 5
assert ratio[re >= 300].between(2, 4).all()"""),
    ("md", """\
A measure may also be sampled as the run goes: with `measure_every=k` each measure column holds the
run's list of samples, and `explode` turns them into rows, one per sample."""),
    ("code", """\
track = vp.sweep(vp.scenes.ball_through_smoke, {"speed": grid["speed"], "viscosity": [0.01], "tracers": 0},
                 frames=60, measure=lambda sim: {"t": sim.time, "v": sim.bodies[0].velocity[0]},
                 measure_every=2, client=client)
samples = track.explode(["t", "v"])
fig, ax = plt.subplots(figsize=(6, 3.5))
for speed, run in samples.groupby("speed"):
    ax.plot(run["t"].astype(float), run["v"].astype(float), label=f"launched at {speed:g}")
ax.set_xlabel("time"); ax.set_ylabel("ball velocity $v_x$"); ax.legend(); ax.grid(alpha=0.3)
assert all(len(v) == 31 for v in track["v"])"""),
    ("code", """\
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
