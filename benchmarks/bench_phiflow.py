#!/usr/bin/env python
"""vortonpy's hot_ball against PhiFlow's 3D buoyant smoke with a sphere obstacle (NumPy
backend): frames per second of each for the same simulated time, and their ratio.

The PhiFlow scene is built to match hot_ball (the default of Gourlay's part 10): a fixed ball
of radius 0.2 at the origin at temperature 10 (ambient 1) heats the fluid next to it; the
heated fluid is lighter (density rho0/T, gravity (0, 0, -10)) and rises in a plume.  Domain
2 x 2 x 2 (z from -0.6 to 1.4), closed walls, dt = 1/30, viscosity 0.01.  Per step:
MacCormack advection of the temperature, semi-Lagrangian advection of the staggered
velocity, buoyancy, explicit viscous diffusion, and a pressure projection (CG, tolerance
1e-3, at most 1000 iterations; a solve that does not converge is accepted, not fatal)
with the ball as an Obstacle.  At 32^3 the cell (0.0625) equals the spacing of
hot_ball's initial vortons, so the grid resolves the same smallest scale.

PhiFlow runs in its own virtual environment so that vortonpy's stays clean: by default the
script uses a ``phi`` importable from this interpreter, else ``--phiflow-python``, else it
creates ``<cache>/vortonpy-bench/phiflow-venv`` (``python -m venv`` + ``pip install
phiflow``; needs network access once; ``--no-install`` forbids it).  Both sides run with
OPENBLAS_NUM_THREADS=1; PhiFlow's NumPy backend is single-threaded, so vortonpy is timed at
1 thread (like for like) and at 2 threads.

Writes benchmarks/results/phiflow.json (phiflow_quick.json).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (OPENBLAS_NUM_THREADS=1 before NumPy)

DT = 1 / 30


# ----------------------------------------------------------------------------- PhiFlow side
def phiflow_worker(frames: int, resolution: int, tol: float) -> dict:
    """Runs inside the PhiFlow environment; returns timings as a dict."""
    import warnings
    warnings.filterwarnings("ignore")  # rank-deficiency notice of the closed-box pressure solve
    import phi
    from phi.flow import (Box, CenteredGrid, Obstacle, Solve, Sphere, StaggeredGrid, advect, diffuse,
                          extrapolation, fluid, math)
    n = resolution
    dom = dict(x=n, y=n, z=n, bounds=Box(x=(-1, 1), y=(-1, 1), z=(-0.6, 1.4)))
    h = 2.0 / n
    ball_T, R = 10.0, 0.2
    ball = Sphere(x=0, y=0, z=0, radius=R)
    obstacle = Obstacle(ball)
    # the fluid next to the ball (a shell ~2 cells thick) is held at the ball's temperature
    shell = CenteredGrid(Sphere(x=0, y=0, z=0, radius=R + 2 * h), 0, **dom) - CenteredGrid(ball, 0, **dom)
    v = StaggeredGrid(0, extrapolation.ZERO, **dom)
    T = CenteredGrid(0, extrapolation.BOUNDARY, **dom)  # temperature excess T - 1
    p = None

    def step(v, T, p):
        T = advect.mac_cormack(T, v, DT)
        T = T * (1 - shell) + (ball_T - 1) * shell
        dens = 1.0 / (1.0 + T) - 1.0  # density deviation rho0/T - rho0, rho0 = 1
        v = advect.semi_lagrangian(v, v, DT) + (dens * (0, 0, -10.0)) @ v * DT
        v = diffuse.explicit(v, 0.01, DT)
        # a solve that stops at 1000 iterations short of the tolerance is kept (and counted),
        # as a game-style solver would; it happens once the plume reaches the lid
        v, p = fluid.make_incompressible(v, (obstacle,), Solve("CG", tol, tol, x0=p, suppress=(math.NotConverged,)))
        return v, T, p

    times, stopped = [], None
    t_all = time.perf_counter()
    for k in range(frames):
        t0 = time.perf_counter()
        try:
            v, T, p = step(v, T, p)
        except math.Diverged as e:  # CG blew up: the run cannot go on; rate over the frames done
            stopped = f"pressure solve diverged at frame {k + 1}: {str(e).splitlines()[0][:120]}"
            break
        times.append(time.perf_counter() - t0)
    wall = sum(times)
    done = len(times)
    vmax = float(math.max(abs(v.at_centers().values)))
    return dict(version=phi.__version__, backend="numpy", resolution=[n, n, n], cells=n ** 3, cell_size=h,
                frames=done, frames_asked=frames, stopped=stopped, simulated_time=done * DT, wall_s=wall,
                fps=done / wall if wall > 0 else float("nan"),
                median_frame_ms=1e3 * sorted(times)[done // 2] if done else float("nan"),
                first_frame_ms=1e3 * times[0] if done else float("nan"),
                max_speed=vmax, max_temperature_excess=float(math.max(T.values)))


def find_phiflow_python(a) -> str | None:
    if a.phiflow_python:
        return a.phiflow_python
    try:
        import phi  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    venv = a.phiflow_venv or os.path.join(cache, "vortonpy-bench", "phiflow-venv")
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run([py, "-c", "import phi"], capture_output=True).returncode == 0
    if ok:
        return py
    if a.no_install:
        return None
    print(f"installing PhiFlow into {venv} (python -m venv; pip install phiflow) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "phiflow"], check=True)
    return py


# ----------------------------------------------------------------------------- vortonpy side
def vortonpy_run(frames: int, threads: int) -> dict:
    import vortonpy as vp
    sim = vp.scenes.hot_ball(threads=threads)
    t0 = time.perf_counter()
    sim.step(frames)
    wall = time.perf_counter() - t0
    return dict(threads=threads, frames=frames, simulated_time=sim.time, wall_s=wall, fps=frames / wall,
                vortons_end=len(sim.vortons), tracers_end=len(sim.tracers), grid_shape=list(sim.grid()["shape"]),
                grid_spacing=float(sim.grid()["spacing"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: 30 frames (1 s simulated)")
    ap.add_argument("--frames", type=int, default=None, help="frames of 1/30 s for both (default 300 = hot_ball's "
                    "10 s run; quick 30)")
    ap.add_argument("--resolution", type=int, default=32, help="PhiFlow grid cells per axis (default 32)")
    ap.add_argument("--tol", type=float, default=1e-3, help="PhiFlow pressure-solve tolerance (default 1e-3)")
    ap.add_argument("--phiflow-python", help="a Python interpreter that can import phi (PhiFlow)")
    ap.add_argument("--phiflow-venv", help="where to find or create PhiFlow's virtual environment")
    ap.add_argument("--no-install", action="store_true", help="never create a venv or pip install")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="vortonpy thread counts (default 1 2)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    frames = a.frames or (30 if a.quick else 300)
    if a.worker:
        print(json.dumps(phiflow_worker(frames, a.resolution, a.tol)))
        return

    print(C.header(f"vortonpy hot_ball vs PhiFlow buoyant smoke + sphere, {frames} frames "
                   f"({frames * DT:.3g} s simulated)"))
    vres = []
    for t in a.threads:
        r = vortonpy_run(frames, t)
        vres.append(r)
        print(f"  vortonpy hot_ball, {t} thr: {r['fps']:.1f} fps ({r['vortons_end']} vortons, "
              f"{r['tracers_end']} tracers at the end)", flush=True)
    py = find_phiflow_python(a)
    phi_res = None
    if py is None:
        print("  PhiFlow: not installed (pip install phiflow, or run without --no-install)")
    else:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [py, os.path.abspath(__file__), "--worker", "--frames", str(frames), "--resolution", str(a.resolution),
               "--tol", str(a.tol)]
        pr = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if pr.returncode != 0:
            print("  PhiFlow failed:\n" + pr.stderr[-3000:])
        else:
            phi_res = json.loads(pr.stdout.strip().splitlines()[-1])
            print(f"  PhiFlow {phi_res['version']} ({a.resolution}^3, numpy): {phi_res['fps']:.2f} fps over "
                  f"{phi_res['frames']} frames" + (f" (stopped: {phi_res['stopped']})" if phi_res["stopped"] else ""),
                  flush=True)

    rows = [[f"vortonpy hot_ball, {r['threads']} thr", f"~{r['vortons_end']} vortons + {r['tracers_end']} tracers "
             f"(grid {'x'.join(map(str, r['grid_shape']))}, h={r['grid_spacing']:.3f})", r["wall_s"], r["fps"],
             (r["fps"] / phi_res["fps"]) if phi_res else float("nan")] for r in vres]
    if phi_res:
        rows.append([f"PhiFlow {phi_res['version']} (NumPy)", f"{a.resolution}^3 grid (h={phi_res['cell_size']:.3f})"
                 + (f", stopped after {phi_res['frames']} frames" if phi_res.get("stopped") else ""),
                     phi_res["wall_s"], phi_res["fps"], 1.0])
    print()
    print(C.md_table(["simulator", "resolution", "wall s", "frames/s", "ratio to PhiFlow"], rows))
    out = C.write_json("phiflow_quick.json" if a.quick else "phiflow.json",
                       dict(args=vars(a), frames=frames, simulated_time=frames * DT, vortonpy=vres, phiflow=phi_res))
    print(f"\nwrote {os.path.relpath(out, C.REPO)}")


if __name__ == "__main__":
    main()
