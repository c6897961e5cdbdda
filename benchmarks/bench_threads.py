#!/usr/bin/env python
"""Per-phase speed-up from 1 to 2 threads on the articles' scenes, each phase alone
(``Sim.overlap = 0``), measured on identical work and robust to a noisy second CPU.

Each scene is warmed up as in ``bench_scenes.py`` and saved; hot_ball is saved at several
frames of its 330-930 stretch (``--hot-ball-states``), since its vorton count has no steady
state, and ball_through_smoke at frames 10, 100, 200 and 290 of the 300 its run takes
(``--bts-frames``): its 512 vortons go from a long thin slab to a wider, shorter cloud behind
the ball, and the diffusion's parallel tasks change with that shape.  Every repeat loads each saved state at 1 and at 2 threads (alternating which goes
first), steps once (allocations, the thread team) and times the next ``--steps`` steps; those
steps do the same work in every repeat, so per (state, step, thread count, phase) the repeats
differ only by what else the machine did meanwhile.  Two estimates per phase are printed:

* ``best``: the sum over states and steps of each one's minimum over the repeats: what the
  code does when the machine leaves it alone (the usual reading of a micro-benchmark, as
  ``timeit`` takes the minimum);
* ``median``: the same with the median over the repeats: what a run sees on a shared
  machine, whose second CPU is often busy with other work (then a phase waits at its barriers).

The target is 1.7x or more for every phase that is not memory-bound; tracer
advection is compared with the memory bandwidth in ``bench_scenes.py``.  The compute-bound
NumPy loop of ``_common.compute_rate`` is timed before and after, as the machine's own ceiling
at that moment.  Writes ``benchmarks/results/threads.json``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (sets OPENBLAS_NUM_THREADS=1 before NumPy)

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402
from bench_scenes import warm_up  # noqa: E402

SCENES = ["ball_through_smoke", "hot_ball", "spinning_ball", "vortex_ring", "dye_drop"]
PHASES = ["domain", "velocity", "stretch", "baroclinic", "diffuse", "advect_vortons", "advect_tracers", "contact",
          "emit", "remesh"]
MEMORY_BOUND = {"advect_tracers"}  # judged against the bandwidth (bench_scenes.py), not 1.7x
# Phases that stream every particle's record: bytes a step per (vortons + tracers) for domain,
# per tracer for advect_tracers.  domain reads every position (24 bytes) and little else since
# its box pass runs on AVX2 min/max; at 2 threads it is judged memory-bound when it
# moves at least STREAM_FRACTION of the machine's 2-thread STREAM bandwidth, else by 1.7x.
# emit, in a scene without emitters, is the ages' advance alone (age += dt over every vorton
# and tracer: 16 bytes read and written a particle, one add): judged as domain is.  With
# emitters it also draws and appends particles, and is judged by 1.7x.
STREAM_BYTES = {"domain": ("particles", 24), "advect_tracers": ("tracers", 80), "emit": ("particles", 16)}
STREAM_FRACTION = 0.5


def saved_states(name, tmpdir, hot_ball_states, warm, bts_frames=()):
    """Paths of the saved states to time for one scene."""
    sim = getattr(vp.scenes, name)(threads=2)
    paths = []
    if name == "ball_through_smoke" and bts_frames:
        for f in sorted(bts_frames):
            sim.step(f - sim.frame)
            p = os.path.join(tmpdir, f"{name}_{sim.frame}.npz")
            sim.save(p)
            paths.append(p)
    elif name == "hot_ball":
        sim.step(330)
        gap = 600 // max(hot_ball_states, 1)
        for k in range(hot_ball_states):
            p = os.path.join(tmpdir, f"{name}_{sim.frame}.npz")
            sim.save(p)
            paths.append(p)
            sim.step(gap)
    else:
        warm_up(name, sim, warm, False)
        p = os.path.join(tmpdir, name + ".npz")
        sim.save(p)
        paths.append(p)
    return paths


def time_state(path, threads, steps):
    """Per step, the phases' ms, the step's wall ms and the particle counts it started with,
    after one untimed step."""
    s = vp.Sim.load(path, threads=threads)
    s.overlap = 0
    s.step()
    out = []
    for _ in range(steps):
        counts = dict(tracers=len(s.tracers), particles=len(s.tracers) + len(s.vortons), emitters=len(s.emitters))
        _, ms = C.timed(s.step)
        t = dict(s.timings)
        t["step"] = ms
        t.update({"count_" + k: v for k, v in counts.items()})
        out.append(t)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15, help="loads of each state per thread count (default 15)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps after each load (default 3)")
    ap.add_argument("--hot-ball-states", type=int, default=10, help="hot_ball states over frames 330-930 (default 10)")
    ap.add_argument("--bts-frames", type=lambda t: [int(f) for f in t.split(",") if f], default=[10, 100, 200, 290],
                    help="ball_through_smoke's states: frames, comma-separated (default 10,100,200,290)")
    ap.add_argument("--warmup", type=int, default=10, help="warm-up frames of the other scenes (default 10)")
    ap.add_argument("--min-ms", type=float, default=0.02,
                    help="phases below this many ms a step at 1 thread are not judged (default 0.02)")
    ap.add_argument("--scenes", nargs="+", default=SCENES)
    a = ap.parse_args(argv)

    print(C.header("vortonpy: per-phase speed-up from 1 to 2 threads (each phase alone)"))
    C.wait_quiet(30)
    ceil_before = C.compute_rate(2) / C.compute_rate(1)
    bw2 = C.stream_bandwidth(2, repeats=3)
    tmpdir = tempfile.mkdtemp(prefix="vortonpy-threads-")
    paths = {name: saved_states(name, tmpdir, a.hot_ball_states, a.warmup, a.bts_frames) for name in a.scenes}
    # per (scene, state, step, threads): a list over repeats of {phase: ms}.  Each repeat goes
    # over every scene, so a noisy spell falls on all of them alike.
    rec = {}
    for r in range(a.repeats):
        for name in a.scenes:
            for si, p in enumerate(paths[name]):
                for t in ((1, 2) if r % 2 == 0 else (2, 1)):
                    for k, tm in enumerate(time_state(p, t, a.steps)):
                        rec.setdefault((name, si, k, t), []).append(tm)
    results = {}
    rows = []
    for name in a.scenes:
        ns = len(paths[name])
        keys = sorted({k for (n, *_), v in rec.items() if n == name for tm in v for k in tm if not k.startswith("count_")})
        res = {}
        for ph in ["step"] + [p for p in PHASES if p in keys]:
            est = {}
            for how, f in (("best", np.min), ("median", np.median)):
                for t in (1, 2):
                    est[(how, t)] = float(sum(f([tm[ph] for tm in rec[(name, si, k, t)]])
                                              for si in range(ns) for k in range(a.steps)))
            per_step = ns * a.steps
            r1, r2 = est[("best", 1)] / per_step, est[("best", 2)] / per_step
            sb = est[("best", 1)] / est[("best", 2)] if est[("best", 2)] > 0 else float("nan")
            sm = est[("median", 1)] / est[("median", 2)] if est[("median", 2)] > 0 else float("nan")
            gbps = None  # the phase's streaming rate at 2 threads (best), where it streams records
            ages_only = all(rec[(name, si, k, 2)][0]["count_emitters"] == 0 for si in range(ns) for k in range(a.steps))
            if ph in STREAM_BYTES and (ph != "emit" or ages_only):
                what, per = STREAM_BYTES[ph]
                nbytes = sum(per * rec[(name, si, k, 2)][0]["count_" + what] for si in range(ns) for k in range(a.steps))
                gbps = nbytes / (est[("best", 2)] * 1e-3) / 1e9 if est[("best", 2)] > 0 else None
            streaming = ph in MEMORY_BOUND or (gbps is not None and gbps >= STREAM_FRACTION * bw2)
            judged = ph != "step" and not streaming and r1 >= a.min_ms
            res[ph] = dict(best_ms_1=r1, best_ms_2=r2, median_ms_1=est[("median", 1)] / per_step,
                           median_ms_2=est[("median", 2)] / per_step, speedup_best=sb, speedup_median=sm,
                           judged=judged, GBps_2=gbps, memory_bound=streaming)
            if ph == "step" or r1 >= a.min_ms:
                rate = f" ({gbps:.0f} GB/s, {gbps / bw2:.0%} of STREAM)" if gbps is not None else ""
                verdict = ("memory-bound" + rate if streaming else
                           ("" if not judged else ("met" if sb >= 1.7 else "NOT met") + rate))
                rows.append([name, ph, f"{r1:.3f}", f"{r2:.3f}", f"{sb:.2f}x", f"{sm:.2f}x", verdict])
        results[name] = dict(states=ns, steps=a.steps, repeats=a.repeats, phases=res)
        for p in paths[name]:
            os.unlink(p)
    ceil_after = C.compute_rate(2) / C.compute_rate(1)
    print()
    print(C.md_table(["scene", "phase", "1 thr ms (best)", "2 thr ms (best)", "speed-up (best)",
                      "speed-up (median)", "target >= 1.7x (best)"], rows))
    print(f"\nThe machine's own ceiling, a compute-bound loop on 2 threads vs 1: {ceil_before:.2f}x before, "
          f"{ceil_after:.2f}x after.  'best': per state and step the fastest of the repeats; 'median': their "
          f"median.  Phases under {a.min_ms} ms a step at 1 thread are left out.  STREAM copy at 2 threads: "
          f"{bw2:.1f} GB/s; domain (24 bytes a particle: every position read) counts as memory-bound from "
          f"{STREAM_FRACTION:.0%} of it, as does emit in a scene without emitters (the ages' advance: 16 bytes a "
          f"particle), advect_tracers (80 bytes a tracer) always.")
    path = C.write_json("threads.json", dict(results=results, ceiling_before=ceil_before, ceiling_after=ceil_after,
                                             stream_GBps_2=bw2, args=vars(a)))
    print(f"wrote {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
