"""Command line: run a scene, write its animation, plots and a summary.

    python -m vortonpy list
    python -m vortonpy run ball_through_smoke                      # -> out/ball_through_smoke/
    python -m vortonpy run dye_drop --frames 200 --format gif --set deviation=2 --threads 2
    python -m vortonpy run my_scene.toml --export ply,vtk --export-every 10
    python -m vortonpy sweep drag.toml                             # a parameter sweep (vortonpy.sweep)

``vortonpy`` (the console script) is the same as ``python -m vortonpy``.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

#: Frames each scene runs by default: the seeds' 300 where that fits in well under a
#: minute on 2 cores (measured), fewer for the heavy jet; stratified 90 (3 s): the ball sinks
#: to the interface and turns back in the first 1.5 s, then the finite layers slump into the
#: unbounded ambient fluid (the light block rises as a whole and carries the ball up).
DEFAULT_FRAMES = {
    "ball_through_smoke": 300, "vortex_ring": 300, "jet_ring": 200, "vortex_tube": 300, "crossed_tubes": 300,
    "spinning_ball": 300, "dye_drop": 300, "two_drops": 300, "stratified": 90, "hot_ball": 300,
}
FALLBACK_FRAMES = 200

#: View and colouring of the animation per scene (scenes not named: x-z, density).
SCENE_VIEW = {"spinning_ball": ("xy", "speed"), "hot_ball": ("xz", "temperature"), "vortex_tube": ("xy", "speed"),
              "crossed_tubes": ("xz", "speed"), "vortex_ring": ("xz", "speed"), "jet_ring": ("xz", "speed")}

EXIT_OK, EXIT_USAGE, EXIT_SIM_FAILED = 0, 2, 3


def _first_line(doc: Optional[str], width: int = 100) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    para = " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "")
    end = para.find(". ")
    text = para if end < 0 else para[: end + 1]
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _parse_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _parse_sets(items: List[str]) -> Dict[str, Any]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k.isidentifier():
            raise ValueError(f"--set key must be a name, got {k!r}")
        out[k] = _parse_value(v)
    return out


def _json_safe(x):
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.ndarray):
        return _json_safe(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    return x


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vortonpy", description="Vortex-particle fluid simulation: run the seeds' scenes.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("list", help="list the scenes")
    r = sub.add_parser("run", help="run a scene and write animation, plots and summary.json",
                       description="Run SCENE (a name from 'vortonpy list' or a .toml scene file) and write into "
                                   "--out: the animation, plots and summary.json.")
    r.add_argument("scene", metavar="SCENE", help="scene name or path to a .toml scene file")
    r.add_argument("--frames", type=int, default=None, help="simulation steps (default: per scene, mostly 300)")
    r.add_argument("--out", default=None, help="output directory (default out/SCENE)")
    r.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: all cores)")
    r.add_argument("--solver", choices=("direct", "tree", "poisson", "auto"), default=None, help="velocity solver")
    r.add_argument("--format", choices=("mp4", "gif"), default="mp4",
                   help="animation format (default mp4; falls back to gif when ffmpeg does not work)")
    r.add_argument("--no-animation", action="store_true", help="only simulate, plot and summarise")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="scene or Sim keyword override, e.g. --set vortons=1024 --set viscosity=0.02 (repeatable)")
    r.add_argument("--steps-per-frame", type=int, default=None,
                   help="simulation steps per animation frame (default 1, or the scene file's [run] value)")
    r.add_argument("--fps", type=float, default=None,
                   help="animation frames per second (default 30, or the scene file's [run] value)")
    r.add_argument("--size", default="640x360", help="animation size WIDTHxHEIGHT (default 640x360)")
    r.add_argument("--view", default=None, help="projection: xz, xy or yz (default per scene)")
    r.add_argument("--color", default=None, help="colour the smoke by density, temperature, speed, age or none")
    r.add_argument("--export", default="", metavar="FORMATS", help="also write particles every --export-every "
                   "steps, comma-separated formats: ply,vtk")
    r.add_argument("--export-every", type=int, default=10, metavar="K", help="steps between exported frames")
    r.add_argument("--progress", dest="progress", action="store_true", default=None, help="force a progress bar")
    r.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    _add_sweep_parser(sub)
    return p


def _add_sweep_parser(sub) -> None:
    s = sub.add_parser("sweep", help="run a parameter sweep described in a TOML file (on Dask)",
                       description="Run the sweep FILE.toml describes (a scene, a grid of parameters, frames and "
                                   "measures; see vortonpy.sweep.read_toml), on a Dask LocalCluster unless --client "
                                   "says otherwise, and write one row per run to a CSV or Parquet table. Each run's "
                                   "result is kept under --out as it finishes: running it again resumes. "
                                   "Needs: pip install \"vortonpy[sweep]\".")
    s.add_argument("file", metavar="FILE.toml", help="the sweep file")
    s.add_argument("--frames", type=int, default=None, help="frames each run steps (default: the file's)")
    s.add_argument("--out", default=None, help="folder of per-run results (default: the file's out, else out/NAME)")
    s.add_argument("--results", default=None, help="table to write, .csv or .parquet (default OUT/results.csv)")
    s.add_argument("--client", default=None, help="Dask scheduler address (tcp://host:8786) or 'serial' "
                                                   "(default: a LocalCluster on this machine)")
    s.add_argument("--workers", type=int, default=None, help="LocalCluster workers (default cores // threads per run)")
    s.add_argument("--threads-per-run", type=int, default=None, help="OpenMP threads of each run (default 1)")
    s.add_argument("--retry-failed", action="store_true", help="run again the runs that failed before")
    s.add_argument("--progress", dest="progress", action="store_true", default=None, help="force a progress bar")
    s.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def _load_scene(spec: str, overrides: Dict[str, Any]):
    import vortonpy as vp
    if spec.lower().endswith(".toml"):
        loader = getattr(vp.scenes, "from_toml", None)
        if loader is None:
            raise LookupError(f"{spec}: this vortonpy cannot read .toml scene files (vortonpy.scenes.from_toml "
                              "is missing); run a named scene instead (see 'vortonpy list')")
        if not os.path.exists(spec):
            raise LookupError(f"{spec}: no such file")
        reader = getattr(vp.scenes, "read_toml", None)
        if reader is None:
            name = os.path.splitext(os.path.basename(spec))[0]
            return name, loader(spec, **overrides), {}
        scene = reader(spec)  # the file's [run] table gives defaults for frames, view, colour, ...
        return scene["name"], vp.scenes.build(scene, **overrides), dict(scene.get("run", {}))
    if spec not in vp.scenes.SCENES:
        raise LookupError(f"unknown scene {spec!r}; choose one of: {', '.join(vp.scenes.SCENES)} "
                          "(or give a .toml file)")
    return spec, vp.scenes.SCENES[spec](**overrides), {}


def _cmd_list(out=None) -> int:
    import vortonpy as vp
    out = out or sys.stdout
    width = max(len(n) for n in vp.scenes.SCENES)
    for name, fn in vp.scenes.SCENES.items():
        frames = DEFAULT_FRAMES.get(name, FALLBACK_FRAMES)
        print(f"{name:<{width}}  {frames:>4} frames  {_first_line(fn.__doc__)}", file=out)
    return EXIT_OK


def _cmd_run(args) -> int:
    import vortonpy as vp
    from . import plot
    from .animate import animate, ffmpeg_works
    from .export import export_frame

    try:
        overrides = _parse_sets(args.set)
        size = tuple(int(x) for x in args.size.lower().split("x"))
        if len(size) != 2 or min(size) < 8:
            raise ValueError(f"--size must be WIDTHxHEIGHT, got {args.size!r}")
        export_formats = [f.strip().lower() for f in args.export.split(",") if f.strip()]
        bad = [f for f in export_formats if f not in ("ply", "vtk")]
        if bad:
            raise ValueError(f"--export formats must be ply and/or vtk, got {bad}")
        if args.export_every < 1 or (args.steps_per_frame is not None and args.steps_per_frame < 1):
            raise ValueError("--export-every and --steps-per-frame must be >= 1")
        if args.frames is not None and args.frames < 1:
            raise ValueError("--frames must be >= 1")
    except ValueError as e:
        print(f"vortonpy: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.threads is not None:
        overrides.setdefault("threads", args.threads)
    if args.solver is not None:
        overrides.setdefault("solver", args.solver)
    try:
        name, sim, run_defaults = _load_scene(args.scene, overrides)
    except LookupError as e:
        print(f"vortonpy: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (TypeError, ValueError) as e:
        print(f"vortonpy: error: bad scene settings for {args.scene}: {e}", file=sys.stderr)
        return EXIT_USAGE

    steps = args.frames or run_defaults.get("frames") or DEFAULT_FRAMES.get(name, FALLBACK_FRAMES)
    spf = args.steps_per_frame or run_defaults.get("steps_per_frame", 1)
    if args.fps is None:
        args.fps = float(run_defaults.get("fps", 30.0))
    elif not args.fps > 0:
        print(f"vortonpy: error: --fps must be positive, got {args.fps}", file=sys.stderr)
        return EXIT_USAGE
    frames = max(1, steps // spf)
    steps = frames * spf
    out = args.out or os.path.join("out", name)
    os.makedirs(out, exist_ok=True)
    view, color = SCENE_VIEW.get(name, ("xz", "density"))
    view, color = run_defaults.get("view", view), run_defaults.get("color", color)
    view = args.view or view
    color = args.color or color
    if color in ("none", "smoke"):
        color = None

    log = sys.stderr
    print(f"vortonpy: {name}: {len(sim.vortons)} vortons, {len(sim.tracers)} tracers, {len(sim.bodies)} bodies, "
          f"solver {sim.solver}, {sim.threads} threads; {steps} steps -> {out}", file=log)
    hist = plot.History(sim)
    exported: List[str] = []

    def export_cb(s):
        if export_formats and s.frame % args.export_every == 0:
            exported.extend(export_frame(
                s, os.path.join(out, "frames", f"frame_{s.frame:05d}"), export_formats))

    if export_formats:
        export_cb(sim)
    anim_path = None
    error = None
    t0 = time.perf_counter()
    try:
        if args.no_animation:
            from ._sim import _want_progress
            bar = None
            if _want_progress(args.progress):
                from tqdm.auto import tqdm
                bar = tqdm(total=steps, unit="step", leave=False)

            def cb(s):
                hist.record(s)
                export_cb(s)
                if bar is not None:
                    bar.update(1)
            try:
                sim.step(steps, progress=False, callback=cb, every=1)
            finally:
                if bar is not None:
                    bar.close()
        else:
            fmt = args.format
            if fmt == "mp4" and not ffmpeg_works():
                print("vortonpy: ffmpeg (imageio-ffmpeg) does not work here; writing a GIF instead", file=log)
                fmt = "gif"
            anim_path = os.path.join(out, f"{name}.{fmt}")
            animate(sim, frames, anim_path, steps_per_frame=spf, view=view, color=color, fps=args.fps, size=size,
                    progress=args.progress, history=hist, callback=export_cb if export_formats else None,
                    title=name)
    except (FloatingPointError, MemoryError, RuntimeError) as e:
        error = f"{type(e).__name__} at frame {sim.frame}: {e}"
        print(f"vortonpy: simulation failed: {error}; writing what was recorded", file=log)
    except KeyboardInterrupt:
        error = f"interrupted at frame {sim.frame}"
        print(f"vortonpy: {error}; writing what was recorded", file=log)
    wall = time.perf_counter() - t0
    done = len(hist) - 1

    summary: Dict[str, Any] = dict(
        scene=name, source=args.scene, overrides=overrides, steps_requested=steps, frames=done, time=sim.time,
        dt=sim.dt, solver=sim.solver, threads=sim.threads, vortons=len(sim.vortons), tracers=len(sim.tracers),
        wall_s=wall, ms_per_frame=1e3 * wall / done if done else None,
        sim_ms_per_frame=float(np.nanmean(hist.step_ms[1:])) if done else None,
        animation=os.path.basename(anim_path) if anim_path and os.path.exists(anim_path) else None,
        error=error)
    plots = {}
    free = [b for b, fixed in enumerate(hist.body_fixed) if not fixed]
    try:
        if free and done >= 1:
            b = free[0]
            if name == "ball_through_smoke":
                fig = plot.drag_curve(hist, body=b)
                fit = dict(fig.drag_fit)
                fit["reynolds"] = float(np.linalg.norm(hist.body_velocity[b][0]) * 2 * hist.body_radius[b]
                                        / sim.viscosity) if sim.viscosity > 0 else None
                summary["drag_fit"] = fit
                summary["cd"] = fit["cd"]
                plots["drag"] = "drag.png"
                fig.savefig(os.path.join(out, "drag.png"), dpi=110)
            else:
                plots["motion"] = "motion.png"
                plot.motion(hist, body=b).savefig(os.path.join(out, "motion.png"), dpi=110)
        if done >= 1:
            plot.diagnostics(hist).savefig(os.path.join(out, "diagnostics.png"), dpi=100)
            plots["diagnostics"] = "diagnostics.png"
        plot.tracers(sim, view=view if view in plot.VIEWS else "xz",
                     color=color if color != "age" else None).savefig(os.path.join(out, "tracers.png"), dpi=110)
        plots["tracers"] = "tracers.png"
        if len(sim.vortons):
            normal = {"xz": "y", "zx": "y", "xy": "z", "yx": "z", "yz": "x", "zy": "x"}.get(view, "y")
            plot.vorticity_slice(sim, axis=normal).savefig(os.path.join(out, "vorticity.png"), dpi=110)
            plots["vorticity"] = "vorticity.png"
    except Exception as e:  # a plot must not lose the run's summary
        summary["plot_error"] = f"{type(e).__name__}: {e}"
        print(f"vortonpy: plotting failed: {e}", file=log)
    summary["plots"] = plots
    try:
        diag = sim.diagnostics()
    except Exception as e:
        diag = {"error": str(e)}
    summary["final_diagnostics"] = diag
    summary["bodies"] = [dict(position=b.position, velocity=b.velocity, angular_velocity=b.angular_velocity,
                              temperature=b.temperature, radius=b.radius, mass=b.mass, fixed=b.fixed)
                         for b in sim.bodies]
    if exported:
        summary["exported_files"] = len(exported)
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump(_json_safe(summary), fh, indent=2)
    msg = f"vortonpy: {done} frames in {wall:.1f} s ({summary['ms_per_frame'] or float('nan'):.1f} ms/frame)"
    if "cd" in summary:
        msg += f", fitted Cd = {summary['cd']:.3g}"
    print(msg + f"; wrote {out}", file=log)
    return EXIT_SIM_FAILED if error else EXIT_OK


def _cmd_sweep(args) -> int:
    """``vortonpy sweep FILE.toml``: run the sweep (vortonpy.sweep.run_toml) and write its table."""
    try:
        from . import sweep as sw
        results, used = sw.run_toml(args.file, frames=args.frames, out=args.out, results=args.results,
                                    client=args.client, workers=args.workers, threads_per_run=args.threads_per_run,
                                    retry_failed=args.retry_failed or None, progress=args.progress)
        path = sw.write_table(results, used["results"])
    except FileNotFoundError as e:
        print(f"vortonpy: error: {e.filename or args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    except (ImportError, TypeError, ValueError) as e:
        print(f"vortonpy: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("vortonpy: interrupted; the runs that finished are kept: the same command resumes", file=sys.stderr)
        return EXIT_SIM_FAILED
    bad = results[results["status"] != "ok"]
    print(f"vortonpy: {len(results)} runs, {len(bad)} not ok; wrote {path} (per-run results in {used['out']})",
          file=sys.stderr)
    for _, row in bad.iterrows():
        params = {k: row[k] for k in results.columns[:list(results.columns).index("seed")]}
        print(f"  {row['status']}: {params}: {row['error']}", file=sys.stderr)
    return EXIT_SIM_FAILED if len(bad) else EXIT_OK


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m vortonpy`` and the ``vortonpy`` script; returns the exit code
    (0 success, 2 bad usage, 3 the simulation failed part-way; what it recorded is still written)."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help and on errors
        return int(e.code or 0)
    if args.command == "list":
        return _cmd_list()
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "sweep":
        return _cmd_sweep(args)
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
