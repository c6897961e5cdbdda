#!/usr/bin/env python
"""Soak test (not for CI): run every scene in vortonpy.scenes.SCENES for N steps (default
10000) and check that nothing becomes NaN/inf and that enstrophy and kinetic energy stay
bounded.  Prints a table of min/max of the monitored quantities and the wall time per
scene; writes benchmarks/results/soak.json (soak_quick.json) with the sampled time series.

A scene FAILS if a step raises (FloatingPointError names the frame and phase), if a
monitored quantity is not finite, or if enstrophy or kinetic energy exceeds ``--growth``
times its largest value over the first 10% of the run (default 100).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402

KEYS = ("enstrophy", "kinetic_energy", "vortons", "tracers", "circulation", "linear_impulse")


def sample(sim):
    d = sim.diagnostics()
    out = {k: d[k] for k in ("enstrophy", "kinetic_energy", "vortons", "tracers")}
    out["circulation"] = float(np.linalg.norm(d["circulation"]))
    out["linear_impulse"] = float(np.linalg.norm(d["linear_impulse"]))
    for f in ("position", "vorticity"):
        a = getattr(sim.vortons, f)
        out[f"finite_{f}"] = bool(np.all(np.isfinite(a))) if len(a) else True
    t = sim.tracers.position
    out["finite_tracers"] = bool(np.all(np.isfinite(t))) if len(t) else True
    out["max_vorticity"] = float(np.max(np.linalg.norm(sim.vortons.vorticity, axis=1))) if len(sim.vortons) else 0.0
    return out


def soak(name, steps, every, threads, growth):
    sim = vp.scenes.SCENES[name](threads=threads)
    series = [dict(frame=0, **sample(sim))]
    error = None
    t0 = time.perf_counter()
    done = 0
    while done < steps:
        k = min(every, steps - done)
        try:
            sim.step(k)
        except Exception as e:  # noqa: BLE001
            error = f"{type(e).__name__}: {e}"
            break
        done += k
        s = sample(sim)
        series.append(dict(frame=sim.frame, **s))
        if not all(np.isfinite(s[q]) for q in ("enstrophy", "kinetic_energy", "circulation")) or \
                not (s["finite_position"] and s["finite_vorticity"] and s["finite_tracers"]):
            error = f"non-finite value at frame {sim.frame}"
            break
    wall = time.perf_counter() - t0
    res = dict(scene=name, steps_done=done, steps=steps, wall_s=wall, ms_per_step=1e3 * wall / max(done, 1),
               error=error, series=series)
    for q in ("enstrophy", "kinetic_energy", "vortons", "tracers", "max_vorticity", "circulation"):
        v = np.array([s[q] for s in series], float)
        res[q] = dict(first=float(v[0]), min=float(np.nanmin(v)), max=float(np.nanmax(v)), last=float(v[-1]))
    flags = []
    early = max(1, len(series) // 10)
    for q in ("enstrophy", "kinetic_energy"):
        v = np.array([s[q] for s in series], float)
        ref = np.nanmax(v[:early + 1])
        if ref > 0 and np.nanmax(v) > growth * ref:
            flags.append(f"{q} grew {np.nanmax(v) / ref:.0f}x")
    res["flags"] = flags
    res["ok"] = error is None and not flags
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 steps per scene")
    ap.add_argument("--steps", type=int, default=None, help="steps per scene (default 10000; quick 100)")
    ap.add_argument("--every", type=int, default=None, help="sample diagnostics every this many steps "
                    "(default steps/100, at least 1)")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    ap.add_argument("--growth", type=float, default=100.0, help="flag enstrophy/energy growth beyond this factor")
    ap.add_argument("--out", default=None, help="JSON file name under benchmarks/results (default soak.json, "
                    "soak_quick.json with --quick)")
    ap.add_argument("--scenes", nargs="+", default=list(vp.scenes.SCENES), help="scenes (default: all)")
    a = ap.parse_args(argv)
    steps = a.steps or (100 if a.quick else 10000)
    every = a.every or max(1, steps // 100)
    out_name = a.out or ("soak_quick.json" if a.quick else "soak.json")
    print(C.header(f"vortonpy soak: {steps} steps per scene"))
    results = []
    for name in a.scenes:
        r = soak(name, steps, every, a.threads, a.growth)
        results.append(r)
        print(f"  {name}: {'ok' if r['ok'] else 'FAIL'} {r['steps_done']}/{steps} steps in {r['wall_s']:.0f} s"
              + (f" [{r['error']}]" if r["error"] else "") + (f" [{'; '.join(r['flags'])}]" if r["flags"] else ""),
              flush=True)
        # written after every scene, so an interrupted soak keeps what it found
        C.write_json(out_name,
                     dict(args=vars(a), steps=steps, results=results, complete=len(results) == len(a.scenes)))
    rows = []
    for r in results:
        e, k = r["enstrophy"], r["kinetic_energy"]
        rows.append([r["scene"], "ok" if r["ok"] else "FAIL", f"{r['steps_done']}/{steps}",
                     f"{e['first']:.3g}", f"{e['min']:.3g} .. {e['max']:.3g}", f"{k['first']:.3g}",
                     f"{k['min']:.3g} .. {k['max']:.3g}",
                     f"{r['max_vorticity']['max']:.3g}",
                     f"{r['vortons']['min']:.0f} .. {r['vortons']['max']:.0f}", f"{r['wall_s']:.0f}",
                     f"{r['ms_per_step']:.1f}", r["error"] or "; ".join(r["flags"])])
    print()
    print(C.md_table(["scene", "result", "steps", "enstrophy t=0", "enstrophy min..max", "KE t=0", "KE min..max",
                      "max |w|", "vortons", "wall s", "ms/step", "notes"], rows))
    print(f"\nwrote benchmarks/results/{out_name}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
