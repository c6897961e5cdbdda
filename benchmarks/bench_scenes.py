#!/usr/bin/env python
"""Milliseconds per frame of the articles' scenes, simulation only (sim.step()), at 1 and 2
threads, with the per-phase breakdown from ``sim.timings``.

Each scene is built once, warmed up (hot_ball: until its vorton count is steady), and saved;
every repeat then goes over all the scenes, loading each saved state with threads=1, with
threads=2 and with threads=2 and ``overlap=0``, and times ``--frames`` single steps (so a busy
spell of this shared machine falls on every scene and thread count alike).  The speed-up is
the median of the per-repeat ratios.  Then hot_ball once more, over frames 330-930 of its
run, the thread counts stepped in lockstep (its vorton count has no steady state, so one
saved state says little; its target is judged there).  Prints markdown tables; writes benchmarks/results/scenes.json (or
scenes_quick.json with --quick).
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

# scene -> (target ms at 2 threads or None, the articles' numbers, note)
SCENES = {
    "ball_through_smoke": (2.0, "20.9 (1 CPU) / 6.3 (8 CPUs), part 5 Xeon 2.33 GHz, simulation only"),
    "hot_ball": (1.0, "10.7 (1 thr) / 7.55 (2 thr), part 10 i7-2600, whole frame"),
    "spinning_ball": (None, ""),
    "vortex_ring": (None, ""),
    "dye_drop": (None, ""),
}


def warm_up(name, sim, frames, quick):
    """Step until the scene is in the state we want to time; returns a note."""
    if name != "hot_ball":
        sim.step(frames)
        return f"{frames} frames"
    # hot_ball: particles live 300 frames and are emitted at a fixed rate, so the counts
    # level off after ~300 frames; step until the vorton count changes < 2% over 30 frames.
    history = []
    while True:
        sim.step(30)
        history.append(len(sim.vortons))
        if sim.frame >= 330 and len(history) >= 2 and abs(history[-1] - history[-2]) <= 0.02 * history[-1]:
            break
        if sim.frame >= 900:
            break
    return f"{sim.frame} frames until steady (vortons per 30 frames: {history[-4:]})"


def time_frames(sim, frames, errors):
    times, phases = [], {}
    for _ in range(frames):
        try:
            _, ms = C.timed(sim.step)
        except FloatingPointError as e:  # report it, keep the frames timed so far
            errors.append(f"{e}")
            break
        times.append(ms)
        for k, v in sim.timings.items():
            phases.setdefault(k, []).append(v)
    return times, {k: float(np.mean(v)) for k, v in phases.items()}


def hot_ball_run(threads, start, frames, tmpdir, kw):
    """hot_ball averaged over a stretch of its run rather than one state: its vorton count
    swings between a few hundred and several thousand as remeshing drops weak vortons, and
    which state frame 900 lands in depends on every rounding before it (any change to the
    code moves it).  From the state at frame `start` (the emitted particles' lifetimes have
    levelled the counts by then), each thread count steps the same `frames` frames (results
    are the same bits at any thread count, so every thread count times identical work);
    returns ms per frame (mean, median, p90, p99, max) and the mean vorton and tracer counts,
    and the mean over the frames that start with 500-1500 vortons: the issue's target names
    hot_ball's steady state as "about 1e3 vortons" (the articles' count, without remeshing),
    while remeshing keeps this scene's count at about twice that on average.  Also at the
    most threads with ``overlap=0`` (key "N, overlap 0"): every phase alone on all threads, for
    comparison with the default, where tracer advection may run beside diffusion.  The runs
    step in lockstep, so noise on this shared machine falls on all of them alike."""
    sim = vp.scenes.hot_ball(threads=max(threads), **kw)
    sim.step(start)
    path = os.path.join(tmpdir, "hot_ball_run.npz")
    sim.save(path)
    del sim
    keys = list(threads) + ([f"{max(threads)}, overlap 0"] if max(threads) > 1 else [])
    sims = {}
    for t in keys:
        sims[t] = vp.Sim.load(path, threads=max(threads) if isinstance(t, str) else t)
        if isinstance(t, str):
            sims[t].overlap = 0
    rec = {t: dict(ms=[], nv=[], nt=[], core=[], nv0=[]) for t in keys}
    # the runs step in lockstep, alternating which goes first, so that a busy spell of the
    # machine falls on all of them alike (run one after another, one row caught it alone)
    for f in range(frames):
        for t in (keys if f % 2 == 0 else keys[::-1]):
            s, r = sims[t], rec[t]
            r["nv0"].append(len(s.vortons))
            _, m = C.timed(s.step)
            r["ms"].append(m); r["nv"].append(len(s.vortons)); r["nt"].append(len(s.tracers))
            r["core"].append(s.timings["total"])
    out = {}
    for t in keys:
        r = rec[t]
        ms, nv, nt, core, nv0 = r["ms"], r["nv"], r["nt"], r["core"], r["nv0"]
        near = [m for m, k in zip(ms, nv0) if 500 <= k <= 1500]
        out[t] = dict(mean_ms=float(np.mean(ms)), median_ms=float(np.median(ms)), p90_ms=float(np.percentile(ms, 90)),
                      p99_ms=float(np.percentile(ms, 99)), max_ms=float(np.max(ms)),
                      max_core_ms=float(np.max(core)),  # the C step alone (sim.timings): no Python, GC
                      mean_vortons=float(np.mean(nv)), min_vortons=int(np.min(nv)), max_vortons=int(np.max(nv)),
                      mean_tracers=float(np.mean(nt)),
                      near_1e3_mean_ms=float(np.mean(near)) if near else None,
                      near_1e3_median_ms=float(np.median(near)) if near else None,
                      near_1e3_max_ms=float(np.max(near)) if near else None, near_1e3_frames=len(near))
    del sims
    os.unlink(path)
    return dict(start_frame=start, frames=frames, threads=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (fewer frames and repeats) for a smoke test")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per thread count (default 5; quick 2)")
    ap.add_argument("--frames", type=int, default=None, help="timed frames per repeat (default 30; quick 8)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up frames before timing (default 10; quick 3); "
                    "hot_ball always runs to steady state")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    ap.add_argument("--hot-ball-seed", type=int, default=None,
                    help="hot_ball's random seed (default: the scene's, 0; before remeshing (commit 164c846) seed 0 "
                    "blew up at frame 361 and seed 1 at 225, seed 2 survived)")
    ap.add_argument("--scenes", nargs="+", default=list(SCENES), help=f"scenes (default {' '.join(SCENES)})")
    a = ap.parse_args(argv)
    repeats = a.repeats or (2 if a.quick else 5)
    frames = a.frames or (8 if a.quick else 30)
    warm = a.warmup if a.warmup is not None else (3 if a.quick else 10)

    print(C.header("vortonpy scenes: ms per frame (sim.step only)"))
    results = {}
    tmpdir = tempfile.mkdtemp(prefix="vortonpy-bench-")
    # each scene warmed up once and saved; then every repeat times every scene (1 thread, 2,
    # 2 with overlap=0), so that a busy spell of the shared vCPU falls on all of them alike
    # rather than on one scene's repeats
    state = {}
    for name in a.scenes:
        kw = dict(seed=a.hot_ball_seed) if name == "hot_ball" and a.hot_ball_seed is not None else {}
        sim = getattr(vp.scenes, name)(threads=max(a.threads), **kw)
        try:
            note = warm_up(name, sim, warm, a.quick)
        except FloatingPointError as e:
            print(f"  {name}: blew up during warm-up: {e}")
            results[name] = dict(error=str(e), scene_kw=kw)
            continue
        path = os.path.join(tmpdir, name + ".npz")
        sim.save(path)
        state[name] = dict(kw=kw, sim=sim, note=note, path=path, errors=[], ratios=[],
                           per={t: dict(frame_ms=[], repeat_median_ms=[], phases=[]) for t in a.threads},
                           alone=dict(repeat_median_ms=[], phases=[]))
    for r in range(repeats):
        for name, S in state.items():
            path, per, alone, errors = S["path"], S["per"], S["alone"], S["errors"]
            med = {}
            for t in a.threads:
                s = vp.Sim.load(path, threads=t)
                times, ph = time_frames(s, frames, errors)
                if not times:
                    continue
                per[t]["frame_ms"] += times
                per[t]["repeat_median_ms"].append(C.median(times))
                per[t]["phases"].append(ph)
                med[t] = C.median(times)
                del s
            if 1 in med and len(med) > 1:
                S["ratios"].append(med[1] / med[max(med)])
            if max(a.threads) > 1:  # each phase alone (overlap=0): the per-phase speed-ups below
                s = vp.Sim.load(path, threads=max(a.threads))
                s.overlap = 0
                times, ph = time_frames(s, frames, errors)
                if times:
                    alone["repeat_median_ms"].append(C.median(times))
                    alone["phases"].append(ph)
                del s
    for name, S in state.items():
        kw, sim, note, path, errors, ratios = S["kw"], S["sim"], S["note"], S["path"], S["errors"], S["ratios"]
        per, alone = S["per"], S["alone"]
        if any(not per[t]["frame_ms"] for t in a.threads):
            print(f"  {name}: no frames timed: {errors[:1]}")
            results[name] = dict(error=errors[0] if errors else "no frames", scene_kw=kw)
            continue
        res = dict(vortons=len(sim.vortons), tracers=len(sim.tracers), warmup=note, scene_kw=kw, errors=errors,
                   target_ms_2threads=SCENES.get(name, (None, ""))[0], seeds=SCENES.get(name, (None, ""))[1],
                   speedup=C.median(ratios), speedup_per_repeat=ratios, threads={})
        for t in a.threads:
            phases = {k: C.median([p[k] for p in per[t]["phases"]]) for k in per[t]["phases"][0]}
            res["threads"][t] = dict(median_ms=C.median(per[t]["repeat_median_ms"]),
                                     min_ms=float(np.min(per[t]["frame_ms"])),
                                     p90_ms=float(np.percentile(per[t]["frame_ms"], 90)),
                                     repeat_median_ms=per[t]["repeat_median_ms"], phases_ms=phases)
        if alone["phases"]:
            res["alone"] = dict(threads=max(a.threads), median_ms=C.median(alone["repeat_median_ms"]),
                                phases_ms={k: C.median([p[k] for p in alone["phases"]]) for k in alone["phases"][0]})
        results[name] = res
        os.unlink(path)
        print(f"  {name}: {res['vortons']} vortons, {res['tracers']} tracers; "
              + ", ".join(f"{t} thr {res['threads'][t]['median_ms']:.2f} ms" for t in a.threads), flush=True)

    ts = a.threads
    rows = []
    results_ok = {k: v for k, v in results.items() if "threads" in v}
    for name, r in results.items():
        if "threads" not in r:
            rows.append([name, "", ""] + ["failed"] * len(ts) + ["", r["error"][:80]])
            continue
        row = [name, r["vortons"], r["tracers"]]
        row += [f"{r['threads'][t]['median_ms']:.2f} (min {r['threads'][t]['min_ms']:.2f})" for t in ts]
        row += [f"{r['speedup']:.2f}x" if r["speedup"] == r["speedup"] else "n/a"]
        tgt = r["target_ms_2threads"]
        if name == "hot_ball" and tgt:  # the target is for ~1e3 vortons: judged over the run below
            row += [f"<= {tgt} ms at ~1e3 vortons: judged over frames 330-930 below"]
        else:
            row += [f"<= {tgt} ms: " + ("met" if r["threads"][max(ts)]["median_ms"] <= tgt else "NOT met") if tgt else ""]
        rows.append(row)
    print()
    print(C.md_table(["scene", "vortons", "tracers"] + [f"{t} thread{'s' if t > 1 else ''} ms/frame" for t in ts]
                     + ["speed-up", f"target ({max(ts)} threads)"], rows))
    for name, r in results_ok.items():
        if r["errors"]:
            print(f"\n{name}: {len(r['errors'])} repeat(s) stopped early: {r['errors'][0]}")
    if "ball_through_smoke" in results_ok:
        b = results["ball_through_smoke"]["threads"]
        print(f"\nball_through_smoke vs the articles' simulation update (20.9 ms on 1 CPU, 6.3 ms on 8 CPUs): "
              + ", ".join(f"{t} thread(s) {20.9 / b[t]['median_ms']:.1f}x faster than the articles' 1 CPU, "
                          f"{6.3 / b[t]['median_ms']:.1f}x faster than their 8 CPUs" for t in ts))
    # phase breakdown
    phase_names = [k for k in next(iter(results_ok.values()))["threads"][ts[0]]["phases_ms"] if k != "total"]
    rows = []
    for name, r in results_ok.items():
        for t in ts:
            ph = r["threads"][t]["phases_ms"]
            rows.append([name, t] + [ph[k] for k in phase_names] + [ph["total"]])
        if "alone" in r:
            ph = r["alone"]["phases_ms"]
            rows.append([name, f"{r['alone']['threads']}, overlap 0"] + [ph[k] for k in phase_names] + [ph["total"]])
    print("\nPhase breakdown (sim.timings, ms, mean over the timed frames, median over repeats).  At 2 threads "
          "the tracers' advection may run beside diffusion, vorton advection and contact (Sim.overlap, on by "
          "default when the tracers are the larger work): those are then one thread's times, "
          "advect_tracers the time the tracers added beyond them.  'overlap 0': every phase alone on all "
          "threads.\n")
    print(C.md_table(["scene", "thr"] + phase_names + ["total"], rows))
    ceil = None
    if 1 in ts and len(ts) > 1:
        t2 = max(ts)
        ceil = C.machine_ceilings((1, t2))
        bw, cr = ceil["stream_GBps"], ceil["compute_per_s"]
        print(f"\nThis machine's ceilings: memory bandwidth (STREAM copy) {bw[1]:.1f} GB/s at 1 thread, "
              f"{bw[t2]:.1f} at {t2}; a compute-bound loop runs {cr[t2] / cr[1]:.2f}x faster on {t2} threads.")
        print(f"\nSpeed-up 1 -> {t2} threads per phase, each phase alone (overlap 0; phases over 0.05 ms at 1 "
              "thread; target >= 1.7x for phases that are not memory-bound).  Tracer advection moves 80 bytes per tracer per step "
              "(position read and written, velocity and density written): its GB/s is compared with the "
              "bandwidth.\n")
        rows = []
        for name, r in results_ok.items():
            p1 = r["threads"][1]["phases_ms"]
            p2 = r["alone"]["phases_ms"] if "alone" in r else r["threads"][t2]["phases_ms"]
            cells = [f"{k} {p1[k] / p2[k]:.2f}x" for k in phase_names if p1[k] > 0.05 and p2[k] > 0]
            gbs = r["tracers"] * 80 / (p2["advect_tracers"] * 1e-3) / 1e9 if p2["advect_tracers"] > 0 else 0.0
            r["phase_speedup"] = {k: p1[k] / p2[k] for k in phase_names if p1[k] > 0.05 and p2[k] > 0}
            r["tracer_GBps"] = gbs
            rows.append([name, ", ".join(cells), f"{gbs:.1f} ({gbs / bw[t2]:.0%})" if gbs else ""])
        print(C.md_table(["scene", "phase speed-ups", f"tracers GB/s at {t2} thr (of bandwidth)"], rows))
    run = None
    if "hot_ball" in a.scenes:
        kw = dict(seed=a.hot_ball_seed) if a.hot_ball_seed is not None else {}
        n_run = 120 if a.quick else 600
        run = hot_ball_run(ts, 330, n_run, tmpdir, kw)
        r0 = run["threads"][ts[0]]
        print(f"\nhot_ball over frames 330-{330 + n_run} (the same frames at each thread count; "
              f"{r0['mean_vortons']:.0f} vortons on average, {r0['min_vortons']}-{r0['max_vortons']}, "
              f"{r0['mean_tracers']:.0f} tracers):\n")
        # p99 and the maximum: the frame-time spikes a game sees (remeshing every 20 frames, a
        # lattice change that rebuilds the Poisson kernel)
        def near(t):
            r = run["threads"][t]
            return (f"{r['near_1e3_mean_ms']:.2f} (median {r['near_1e3_median_ms']:.2f}, max {r['near_1e3_max_ms']:.1f}; "
                    f"{r['near_1e3_frames']} frames)" if r["near_1e3_frames"] else "-")
        print(C.md_table(["threads", "mean ms/frame", "median", "p90", "p99", "max", "max in C",
                          "at 500-1500 vortons: mean"],
                         [[t, f"{run['threads'][t]['mean_ms']:.2f}", f"{run['threads'][t]['median_ms']:.2f}",
                           f"{run['threads'][t]['p90_ms']:.2f}", f"{run['threads'][t]['p99_ms']:.2f}",
                           f"{run['threads'][t]['max_ms']:.2f}", f"{run['threads'][t]['max_core_ms']:.2f}", near(t)]
                          for t in run["threads"]]))
        r2 = run["threads"].get(max(ts))
        if r2 and r2["near_1e3_frames"]:
            tgt = SCENES["hot_ball"][0]
            print(f"\nhot_ball target (<= {tgt} ms a frame at {max(ts)} threads at ~1e3 vortons): "
                  f"{r2['near_1e3_mean_ms']:.2f} ms on average over the {r2['near_1e3_frames']} frames that start with "
                  f"500-1500 vortons (median {r2['near_1e3_median_ms']:.2f}): "
                  f"{'met' if r2['near_1e3_mean_ms'] <= tgt else 'NOT met'}.  A single frame stalled by the "
                  f"machine (a shared virtual machine stalls one for 10-50 ms now and then) adds its time / "
                  f"{r2['near_1e3_frames']} to the mean: see the max.")
    out = C.write_json("scenes_quick.json" if a.quick else "scenes.json",
                       dict(args=vars(a), repeats=repeats, frames=frames, results=results, machine_ceilings=ceil,
                            hot_ball_run=run))
    print(f"\nwrote {os.path.relpath(out, C.REPO)}")


if __name__ == "__main__":
    main()
