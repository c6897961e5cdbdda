"""In-process A/B timing of two builds of vortonpy: both loaded in one process and stepped
alternately from one saved state, so both see the same machine (a shared virtual machine's speed can drift by
+-40% between runs minutes apart; a ratio taken this way is steady to a few per cent).

    python benchmarks/ab.py snapshot base          # copy the current build (vortonpy/ + its .so)
    ... change csrc/, rebuild (tools/build_inplace.sh) ...
    python benchmarks/ab.py snapshot new
    python benchmarks/ab.py run base new --case lattice --n 1e5 --threads 2
    python benchmarks/ab.py run base new --case ball_through_smoke --warmup 60

Snapshots live in `.ab/NAME/` (git-ignored), each as a package named `vp_NAME`.  The case
is built and warmed up with the first build, saved, and loaded into both; then each round
steps both `--steps` frames from that state, one step of A and one of B in turns (the order
alternating), and records each step's `sim.timings`.  Prints per phase the median ms and
the median of the paired steps' ratios A/B (> 1: B is faster), and whether both ended
bitwise the same.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (pins BLAS threads before NumPy)

import numpy as np  # noqa: E402

AB = os.path.join(C.REPO, ".ab")


def snapshot(name: str) -> None:
    src = os.path.join(C.REPO, "vortonpy")
    dst = os.path.join(AB, name, f"vp_{name}")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    print(f"snapshot {name}: {dst}")


def load(name: str):
    sys.path.insert(0, os.path.join(AB, name))
    return importlib.import_module(f"vp_{name}")


def build_case(vp, a):
    if a.case == "lattice":
        sim = C.lattice_sim(vp, int(float(a.n)), a.threads)
        if a.tracers:
            sim.add_tracers(np.random.default_rng(1).random((int(float(a.tracers)), 3)) - 0.5)
    else:
        sim = getattr(vp.scenes, a.case)()
        sim.threads = a.threads
    sim.step(a.warmup)
    if a.sort and len(sim.tracers):
        sim.sort_tracers()
    return sim


def run(a) -> None:
    A, B = load(a.a), load(a.b)
    tmp = tempfile.mkdtemp()
    state = os.path.join(tmp, "state.npz")
    build_case(A, a).save(state)
    rec = {a.a: [], a.b: []}
    finals = {}
    for rnd in range(a.rounds):
        sims = {a.a: A.Sim.load(state, threads=a.threads), a.b: B.Sim.load(state, threads=a.threads)}
        for sim in sims.values():
            for key, value in a.set:  # a parameter an older build lacks keeps that build's only behaviour
                if hasattr(sim, key):
                    setattr(sim, key, type(getattr(sim, key))(value))
        for st in range(a.steps):
            # one step of each, in turns (the order alternates): paired steps see the same machine
            names = [a.a, a.b] if (rnd + st) % 2 == 0 else [a.b, a.a]
            for name in names:
                sim = sims[name]
                t0 = time.perf_counter()
                sim.step()
                phases = dict(sim.timings)
                phases["wall"] = (time.perf_counter() - t0) * 1e3
                rec[name].append(phases)
        for name, sim in sims.items():
            finals[name] = (np.array(sim.vortons.position).copy(), np.array(sim.vortons.vorticity).copy(),
                            np.array(sim.tracers.position).copy(), np.array(sim.vortons.density).copy(),
                            [np.r_[b.position, b.velocity, b.angular_velocity, b.temperature] for b in sim.bodies])
        del sims
    shutil.rmtree(tmp)
    keys = [k for k in rec[a.a][0] if np.mean([r[k] for r in rec[a.a]]) > 0.01]
    print(f"case {a.case} (n={a.n}, tracers={a.tracers}), {a.threads} threads, {a.rounds} rounds x {a.steps} steps")
    print(f"| phase | {a.a} ms (median, mean, max) | {a.b} ms (median, mean, max) | ratio {a.a}/{a.b} (median of paired steps; of means) |")
    print("|---|---|---|---|")
    for k in keys:
        ra = np.array([r[k] for r in rec[a.a]])
        rb = np.array([r[k] for r in rec[a.b]])
        pairs = [x / y for x, y in zip(ra, rb) if y > 0 and x > 0]
        ratio = np.median(pairs) if pairs else float("nan")
        print(f"| {k} | {np.median(ra):.3f}, {ra.mean():.3f}, {ra.max():.3f} | {np.median(rb):.3f}, {rb.mean():.3f}, {rb.max():.3f} "
              f"| {ratio:.3f}; {ra.mean() / rb.mean() if rb.mean() > 0 else float('nan'):.3f} |")
    pa, wa, ta, da, ba = finals[a.a]
    pb, wb, tb, db, bb = finals[a.b]
    same = (pa.shape == pb.shape and np.array_equal(pa, pb) and np.array_equal(wa, wb) and np.array_equal(da, db)
            and len(ba) == len(bb) and all(np.array_equal(x, y) for x, y in zip(ba, bb)))
    diff = float(np.max(np.abs(pa - pb))) if pa.shape == pb.shape else float("nan")
    print(f"final state (vortons, density, bodies) bitwise equal: {same} (max |dx| {diff:.3g})")
    tsame = ta.shape == tb.shape and np.array_equal(ta, tb)
    tdiff = float(np.max(np.abs(ta - tb), initial=0.0)) if ta.shape == tb.shape else float("nan")
    print(f"final tracers bitwise equal: {tsame} (max |dx| {tdiff:.3g})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot", help="copy the current build to .ab/NAME")
    s.add_argument("name")
    r = sub.add_parser("run", help="time snapshots A and B in one process")
    r.add_argument("a")
    r.add_argument("b")
    r.add_argument("--case", default="lattice", help="lattice, or a scene name (vortonpy.scenes)")
    r.add_argument("--n", default="1e5", help="vortons of the lattice case")
    r.add_argument("--tracers", default="0", help="random tracers of the lattice case")
    r.add_argument("--sort", action="store_true", help="sort_tracers() after the warm-up")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--steps", type=int, default=5)
    r.add_argument("--rounds", type=int, default=6)
    r.add_argument("--set", action="append", default=[], type=lambda kv: tuple(kv.split("=", 1)),
                   metavar="KEY=VALUE", help="a Sim parameter for both builds after loading (e.g. body_coupling=articles "
                                             "to time the engine on the previous build's physics); repeatable")
    a = ap.parse_args(argv)
    if a.cmd == "snapshot":
        snapshot(a.name)
    else:
        run(a)


if __name__ == "__main__":
    main()
