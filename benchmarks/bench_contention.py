#!/usr/bin/env python
"""Two threads beside a busy core: each case at 2 threads while a busy-loop process occupies
one core, next to the same case at 1 thread with the machine otherwise left alone.

A game renders on the cores the simulation runs on, and a notebook shares them; a thread team
that waits for a thread the operating system has set aside (or that splits work evenly onto a
core running at half speed) can lose far more than the one core's worth taken from it.  The
targets: the median frame at 2 threads under load at most 1.3x the quiet 1-thread median, and
no frame under load over 10x its median.

Each case is built, warmed up and saved once; each round then loads that state and steps
``--frames`` frames at 1 thread (quiet), then starts a busy loop (a separate process that
spins in pure Python), loads the same state at 2 threads and steps the same frames, and stops
the loop.  Frames are timed around ``Sim.step`` (wall clock).  The machine's other load is
printed as the fraction of CPUs busy before the run: "quiet" means only as quiet as that.
vortonpy sets libgomp's spin count when it loads (vortonpy/__init__.py); GOMP_SPINCOUNT or
OMP_WAIT_POLICY in the environment replace it, for comparing.

    python benchmarks/bench_contention.py                       # the three cases
    python benchmarks/bench_contention.py --cases hot_ball --rounds 5
    python benchmarks/bench_contention.py --main-job            # also `vortonpy run` with/without video

``--main-job`` also runs ``vortonpy run ball_through_smoke`` at 2 threads with its video and
with ``--no-animation`` (in that order, then the reverse) and prints the ratio of their
``sim_ms_per_frame``: the target is at most 1.5x.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (pins BLAS threads before NumPy)

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402

# case: (how to build it, warm-up frames, frames timed per round)
CASES = {
    "ball_through_smoke": (lambda: vp.scenes.ball_through_smoke(), 60, 200),
    "hot_ball": (lambda: vp.scenes.hot_ball(), 330, 200),
    "large": (None, 2, 15),
}
LARGE_VORTONS, LARGE_TRACERS = 100_000, 1_000_000


def build(case: str):
    make, warm, _ = CASES[case]
    if make is None:  # the large case: a noise lattice of 1e5 vortons with 1e6 tracers
        sim = C.lattice_sim(vp, LARGE_VORTONS, 2)
        sim.add_tracers(np.random.default_rng(1).random((LARGE_TRACERS, 3)) - 0.5)
    else:
        sim = make()
    sim.threads = 2
    sim.step(warm)
    return sim


def frames_ms(state: str, threads: int, frames: int) -> np.ndarray:
    sim = vp.Sim.load(state, threads=threads)
    sim.step()  # the thread team, the allocations
    out = np.empty(frames)
    for k in range(frames):
        t0 = time.perf_counter()
        sim.step()
        out[k] = (time.perf_counter() - t0) * 1e3
    return out


class BusyLoop:
    """A separate process spinning in pure Python: one core's worth of someone else's work."""

    def __enter__(self):
        self.p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)  # let it start and take its core
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait()


def run_case(case: str, rounds: int, frames: int | None, tmp: str) -> dict:
    frames = frames or CASES[case][2]
    state = os.path.join(tmp, f"{case}.npz")
    build(case).save(state)
    quiet, loaded = [], []
    for _ in range(rounds):
        quiet.append(frames_ms(state, 1, frames))
        with BusyLoop():
            loaded.append(frames_ms(state, 2, frames))
    q, b = np.concatenate(quiet), np.concatenate(loaded)
    mq, mb = float(np.median(q)), float(np.median(b))
    return dict(case=case, frames=frames, rounds=rounds, quiet_1t_median_ms=mq, loaded_2t_median_ms=mb,
                ratio=mb / mq, loaded_worst_over_median=float(b.max() / mb), quiet_worst_over_median=float(q.max() / mq),
                round_medians_quiet=[float(np.median(x)) for x in quiet],
                round_medians_loaded=[float(np.median(x)) for x in loaded])


def main_job(frames: int, tmp: str) -> dict:
    """sim_ms_per_frame of `vortonpy run ball_through_smoke` at 2 threads, with video and without."""
    env = dict(os.environ, PYTHONPATH=C.REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = {"video": [], "no_animation": []}
    for order in (("video", "no_animation"), ("no_animation", "video")):
        for kind in order:
            out = os.path.join(tmp, f"run_{kind}")
            cmd = [sys.executable, "-m", "vortonpy", "run", "ball_through_smoke", "--threads", "2", "--frames",
                   str(frames), "--out", out, "--no-progress"]
            if kind == "no_animation":
                cmd.append("--no-animation")
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            with open(os.path.join(out, "summary.json")) as f:
                res[kind].append(json.load(f)["sim_ms_per_frame"])
    v, n = float(np.median(res["video"])), float(np.median(res["no_animation"]))
    return dict(video_ms=res["video"], no_animation_ms=res["no_animation"], ratio=v / n)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=None, help="frames timed per round (default per case)")
    ap.add_argument("--main-job", action="store_true", help="also time `vortonpy run ball_through_smoke`")
    ap.add_argument("--main-job-frames", type=int, default=300)
    a = ap.parse_args(argv)
    print(C.header("Two threads beside a busy core"))
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for case in a.cases.split(","):
            r = run_case(case.strip(), a.rounds, a.frames, tmp)
            results.append(r)
            rows.append([r["case"], r["quiet_1t_median_ms"], r["loaded_2t_median_ms"], r["ratio"],
                         r["loaded_worst_over_median"], r["quiet_worst_over_median"]])
            print(f"{case}: quiet 1 thread {r['round_medians_quiet']}, loaded 2 threads {r['round_medians_loaded']} "
                  "(ms, medians per round)", flush=True)
        print()
        print(C.md_table(["case", "1 thread, quiet (ms)", "2 threads + busy core (ms)", "ratio (<= 1.3)",
                          "worst / median, loaded (<= 10)", "worst / median, quiet"], rows))
        if a.main_job:
            m = main_job(a.main_job_frames, tmp)
            print(f"\nvortonpy run ball_through_smoke, 2 threads, sim_ms_per_frame: with video {m['video_ms']}, "
                  f"--no-animation {m['no_animation_ms']}; ratio of medians {m['ratio']:.2f} (<= 1.5)")
    print(f"\nCPUs busy after: {C.busy_fraction():.0%}")
    print("wrote", C.write_json("contention.json", dict(cases=results, main_job=m if a.main_job else None)))


if __name__ == "__main__":
    main()
