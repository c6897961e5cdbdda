"""Command line: run a scene, write its animation, plots and a summary; list the scenes and
their parameters.  ``vortonpy`` (the console script) is the same as ``python -m vortonpy``;
``vortonpy --help`` shows the examples (EXAMPLES below; each one is run by the tests).

Each subcommand is a pair of functions: ``_setup_NAME(subparsers)`` adds its parser (and sets
``func``), ``_cmd_NAME(args)`` runs it and returns the exit code; SUBCOMMANDS lists the setups.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import textwrap
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: The examples ``vortonpy --help`` shows (tests/test_cli.py runs every one, with few frames).
EXAMPLES = (
    ("vortonpy list", "the scenes"),
    ("vortonpy params spinning_ball", "a scene's parameters, defaults and units"),
    ("vortonpy run ball_through_smoke", "-> out/ball_through_smoke/"),
    ("vortonpy run spinning_ball --set per_axis=12 --set viscosity=0.02", "change the scene and the Sim"),
    ("vortonpy run dye_drop --frames 200 --format gif --threads 2", ""),
    ("vortonpy run examples/my_scene.toml --export ply,vtk --export-every 10", "a scene file -> out/my_scene/"),
)

EXIT_OK, EXIT_USAGE, EXIT_SIM_FAILED = 0, 2, 3


def _examples_text() -> str:
    width = max(len(c) for c, _ in EXAMPLES)
    return "examples:\n" + "\n".join(f"  {c:<{width}}  {'# ' + w if w else ''}".rstrip() for c, w in EXAMPLES)


class UsageError(Exception):
    """A command-line mistake: printed as ``vortonpy: error: ...``, exit code 2."""


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
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k.isidentifier():
            raise UsageError(f"--set NAME must be a name, got {k!r}")
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


# ----------------------------------------------------------------------------- scenes
class _Source:
    """What ``run`` and ``params`` know about SCENE: a built-in scene's name or a .toml file."""

    def __init__(self, text: str):
        import vortonpy as vp
        self.text = text
        self.is_file = text.lower().endswith(".toml")
        self.spec: Optional[Dict[str, Any]] = None
        if self.is_file:
            if not os.path.exists(text):
                raise UsageError(f"{text}: no such file")
            try:
                self.spec = vp.scenes.read_toml(text)  # its [run] table: defaults for frames, view, ...
            except ValueError as e:
                raise UsageError(f"bad scene file: {e}") from None
            # the output folder, animation and summary are named after the file
            self.name = os.path.splitext(os.path.basename(text))[0]
            self.title = self.spec.get("name", self.name)
            base = self.spec.get("scene")
            self.info = vp.scenes.SCENES[base["base"]].info if base else None
            self.run_defaults = dict(self.spec.get("run", {}))
        else:
            if text not in vp.scenes.SCENES:
                from .parameters import suggest
                raise UsageError(f"unknown scene {text!r}{suggest(text, vp.scenes.SCENES)}; choose one of: "
                                 f"{', '.join(vp.scenes.SCENES)} (or give a .toml scene file)")
            self.name = self.title = text
            self.info = vp.scenes.SCENES[text].info
            self.run_defaults = dict(frames=self.info.frames, view=self.info.view, color=self.info.color)

    def keywords(self) -> Tuple[str, ...]:
        """The names --set takes for this scene."""
        from .parameters import names
        own: Tuple[str, ...] = tuple(p.name for p in self.info.parameters) if self.info else ()
        if self.is_file and not self.info:
            own = ("seed", "tracers")
        return own + names()

    def check_sets(self, overrides: Dict[str, Any]) -> None:
        from .parameters import suggest
        known = self.keywords()
        for k in overrides:
            if k not in known:
                raise UsageError(f"--set {k}: {self.text} has no parameter {k!r}{suggest(k, known)} "
                                 f"(see: vortonpy params {self.text})")

    def build(self, overrides: Dict[str, Any]):
        import vortonpy as vp
        if self.is_file:
            return vp.scenes.build(self.spec, **overrides)
        return vp.scenes.SCENES[self.text](**overrides)


# ----------------------------------------------------------------------------- list
def _setup_list(sub) -> None:
    p = sub.add_parser("list", help="list the scenes", description="List the built-in scenes: name, default "
                       "frames and what each shows.")
    p.set_defaults(func=_cmd_list)


def _cmd_list(args=None, out=None) -> int:
    import vortonpy as vp
    out = out or sys.stdout
    width = max(len(n) for n in vp.scenes.SCENES)
    indent = " " * (width + 2)
    for name, fn in vp.scenes.SCENES.items():
        info = fn.info
        text = textwrap.fill(info.description.replace("``", ""), width=max(60, _columns() - 1),
                             initial_indent=indent, subsequent_indent=indent)
        print(f"{name:<{width}}  {info.frames} frames\n{text}", file=out)
    print("\nvortonpy params SCENE lists a scene's parameters; vortonpy run SCENE runs it.", file=out)
    return EXIT_OK


def _columns() -> int:
    import shutil
    return shutil.get_terminal_size((100, 24)).columns


# ----------------------------------------------------------------------------- params
def _setup_params(sub) -> None:
    p = sub.add_parser("params", help="list a scene's parameters (or the Sim's), with defaults and units",
                       description="List the parameters SCENE takes with --set: the scene's own and the Sim "
                                   "parameters it passes through, with their values, units and meanings. "
                                   "Without SCENE: every Sim parameter with its default and valid values.")
    p.add_argument("scene", metavar="SCENE", nargs="?", help="scene name or .toml scene file")
    p.set_defaults(func=_cmd_params)


def _table(rows: Sequence[Sequence[str]], out) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  " + "  ".join(f"{c:<{w}}" for c, w in zip(r, widths)) + "  " + r[-1], file=out)


def _cmd_params(args, out=None) -> int:
    from .parameters import PARAMETERS, SEED, format_value
    out = out or sys.stdout
    if not args.scene:
        print("Sim parameters (vortonpy.Sim keywords and attributes; --set NAME=VALUE):", file=out)
        _table([("name", "default", "unit", "valid", "meaning")]
               + [(p.name, format_value(p.python_default), p.unit or "-", "any int >= 0" if p is SEED else p.range,
                   p.doc) for p in PARAMETERS + (SEED,)], out)
        print("Units are simulation units; temperature is relative (the ambient fluid is 1).", file=out)
        return EXIT_OK
    src = _Source(args.scene)
    sim_values: Dict[str, Any] = {}
    if src.is_file:
        print(f"{src.text}: {src.spec.get('description') or src.title}", file=out)
        sim_values = dict(src.spec.get("sim", {}))
        if src.info:
            base = src.spec["scene"]
            print(f"\nParameters of its base scene {src.info.name} (--set NAME=VALUE):", file=out)
            _table([("name", "value", "unit", "meaning")]
                   + [(p.name, format_value(base.get(p.name, p.default)), p.unit or "-", p.doc)
                      for p in src.info.parameters], out)
        else:
            print("\nScene file parameters (--set NAME=VALUE):", file=out)
            _table([("name", "value", "unit", "meaning"),
                    ("seed", format_value(src.spec.get("seed", 0)), "-", "seed of the noise and tracer placement"),
                    ("tracers", "(the file's)", "-", "total tracers, shared among the [[tracers]] blocks")], out)
    else:
        import vortonpy as vp
        info = src.info
        text = f"{info.name}: {info.description}".replace("``", "")
        print(textwrap.fill(text, width=max(60, _columns() - 1)), file=out)
        print(f"\nScene parameters (vortonpy run {info.name} --set NAME=VALUE):", file=out)
        _table([("name", "default", "unit", "meaning")]
               + [(p.name, format_value(p.default), p.unit or "-", p.doc) for p in info.parameters], out)
        sim_values = vp.scenes.SCENES[info.name].spec()["sim"]
    print("\nSim parameters (* set by this scene, the others at Sim's default):", file=out)
    _table([("", "name", "value", "unit", "meaning")]
           + [("*" if p.name in sim_values else "", p.name, format_value(sim_values.get(p.name, p.python_default)),
               p.unit or "-", p.doc) for p in PARAMETERS], out)
    print("Units are simulation units; temperature is relative (the ambient fluid is 1).", file=out)
    return EXIT_OK


# ----------------------------------------------------------------------------- run
def _setup_run(sub) -> None:
    r = sub.add_parser("run", help="run a scene and write animation, plots and summary.json",
                       description="Run SCENE (a name from 'vortonpy list' or a .toml scene file) and write into "
                                   "--out: the animation, plots and summary.json.",
                       epilog=_examples_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("scene", metavar="SCENE", help="scene name or path to a .toml scene file")
    r.add_argument("--frames", type=int, default=None, help="simulation steps (default: per scene, mostly 300)")
    r.add_argument("--out", default=None, help="output directory (default out/SCENE, SCENE a name or the file's "
                   "name without .toml)")
    r.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: all cores)")
    r.add_argument("--solver", choices=("direct", "tree", "poisson", "auto"), default=None, help="velocity solver")
    r.add_argument("--format", choices=("mp4", "gif"), default="mp4",
                   help="animation format (default mp4; falls back to gif when ffmpeg does not work)")
    r.add_argument("--no-animation", action="store_true", help="only simulate, plot and summarise")
    r.add_argument("--no-plots", action="store_true", help="write no plots (the animation and summary.json only)")
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a scene or Sim parameter (see 'vortonpy params SCENE'), e.g. --set viscosity=0.02 "
                        "(repeatable)")
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
    r.set_defaults(func=_cmd_run)


def _cmd_run(args) -> int:
    from . import plot
    from .animate import animate, ffmpeg_works
    from .export import export_frame

    try:
        overrides = _parse_sets(args.set)
        size = tuple(int(x) for x in args.size.lower().split("x"))
        if len(size) != 2 or min(size) < 8:
            raise ValueError
    except ValueError:
        return _usage(f"--size must be WIDTHxHEIGHT, got {args.size!r}")
    except UsageError as e:
        return _usage(e)
    export_formats = [f.strip().lower() for f in args.export.split(",") if f.strip()]
    bad = [f for f in export_formats if f not in ("ply", "vtk")]
    if bad:
        return _usage(f"--export formats must be ply and/or vtk, got {bad}")
    if args.export_every < 1 or (args.steps_per_frame is not None and args.steps_per_frame < 1):
        return _usage("--export-every and --steps-per-frame must be >= 1")
    if args.frames is not None and args.frames < 1:
        return _usage("--frames must be >= 1")
    if args.fps is not None and not args.fps > 0:
        return _usage(f"--fps must be positive, got {args.fps}")
    try:
        src = _Source(args.scene)
        src.check_sets(overrides)
    except UsageError as e:
        return _usage(e)
    if args.threads is not None:
        overrides.setdefault("threads", args.threads)
    if args.solver is not None:
        overrides.setdefault("solver", args.solver)
    try:
        sim = src.build(overrides)
    except (TypeError, ValueError) as e:
        return _usage(f"bad scene settings for {args.scene}: {e}")
    name, run_defaults = src.title, src.run_defaults

    steps = args.frames or run_defaults.get("frames") or 200
    spf = args.steps_per_frame or run_defaults.get("steps_per_frame", 1)
    if args.fps is None:
        args.fps = float(run_defaults.get("fps", 30.0))
    frames = max(1, steps // spf)
    steps = frames * spf
    out = args.out or os.path.join("out", src.name)
    os.makedirs(out, exist_ok=True)
    view = args.view or run_defaults.get("view", "xz")
    color = args.color or run_defaults.get("color", "density")
    if color in ("none", "smoke"):
        color = None

    log = sys.stderr
    print(f"vortonpy: {name}: {len(sim.vortons)} vortons, {len(sim.tracers)} tracers, {len(sim.bodies)} bodies, "
          f"solver {sim.solver}, {sim.threads} threads; {steps} steps -> {out}", file=log)
    hist = plot.History(sim)
    start_counts = dict(vortons_start=len(sim.vortons), tracers_start=len(sim.tracers))
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
            anim_path = os.path.join(out, f"{src.name}.{fmt}")
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
        dt=sim.dt, solver=sim.solver, threads=sim.threads, vortons=len(sim.vortons), tracers=len(sim.tracers), **start_counts,
        wall_s=wall, ms_per_frame=1e3 * wall / done if done else None,
        sim_ms_per_frame=float(np.nanmean(hist.step_ms[1:])) if done else None,
        animation=os.path.basename(anim_path) if anim_path and os.path.exists(anim_path) else None,
        error=error)
    summary["plots"] = {} if args.no_plots else _write_plots(sim, hist, name, out, view, color, done, summary, log)
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


def _write_plots(sim, hist, name, out, view, color, done, summary, log) -> Dict[str, str]:
    """The run's figures into out; returns {kind: file}.  The drag fit goes into summary."""
    from . import plot
    plots: Dict[str, str] = {}
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
    return plots


def _setup_sweep(sub) -> None:
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
    s.set_defaults(func=_cmd_sweep)


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


def _usage(message) -> int:
    print(f"vortonpy: error: {message}", file=sys.stderr)
    return EXIT_USAGE


#: Each adds one subcommand to the parser (see the module's docstring).
SUBCOMMANDS: Tuple[Callable[[Any], None], ...] = (_setup_list, _setup_params, _setup_run, _setup_sweep)


def _build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = argparse.ArgumentParser(prog="vortonpy", description="Vortex-particle fluid simulation: run the seeds' "
                                "scenes, or your own scene files.", epilog=_examples_text(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"vortonpy {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for setup in SUBCOMMANDS:
        setup(sub)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m vortonpy`` and the ``vortonpy`` script; returns the exit code
    (0 success, 2 bad usage, 3 the simulation failed part-way; what it recorded is still written)."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help, --version and on errors
        return int(e.code or 0)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_USAGE
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
