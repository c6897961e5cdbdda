#!/usr/bin/env python
"""The hand-written SIMD paths against the portable ones, per phase, on this CPU.

A few kernels choose a hand-written path at run time by the CPU's level (csrc/cpu.h): PSE's
packing of the pairs (AVX-512 or AVX2), the tree's 16-float kernel (AVX-512) and the FFT
lines' AVX2 + FMA copy.  ``VORTONPY_PORTABLE=1`` makes a process take the portable paths
(the compiler's clones still pick their own ISA).  Both give the same bits (tested), except
the FFT copies, which agree to rounding.  Two variants:

* ``default``: what a process picks on this CPU;
* ``portable``: ``VORTONPY_PORTABLE=1``.

The choice is cached per process, so each variant runs in its own process: a scene is
warmed up and saved once, then ``--rounds`` rounds each start one process per variant (the
order rotating) that loads the state and times ``--steps`` steps; printed per phase: the
median ms of each variant and its ratio to the default (> 1: the default is faster).
Writes ``benchmarks/results/simd_paths.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402

PHASES = ["domain", "velocity", "stretch", "baroclinic", "diffuse", "advect_vortons", "advect_tracers", "contact"]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[4])
import vortonpy as vp
s = vp.Sim.load(sys.argv[1], threads=int(sys.argv[2]))
s.step()
out = []
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter(); s.step(); ms = (time.perf_counter() - t0) * 1e3
    t = dict(s.timings); t["step"] = ms; out.append(t)
print(json.dumps(out))
"""


VARIANTS = {"default": {}, "portable": {"VORTONPY_PORTABLE": "1"}}


def run_child(path, threads, steps, extra):
    env = dict(os.environ)
    env.pop("VORTONPY_PORTABLE", None)
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", CHILD, path, str(threads), str(steps), C.REPO], env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", nargs="+", default=["hot_ball", "ball_through_smoke"])
    ap.add_argument("--warmup", type=int, default=330, help="frames before the saved state (default 330)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60, help="timed steps per process (default 60)")
    ap.add_argument("--rounds", type=int, default=5, help="processes per variant (default 5)")
    a = ap.parse_args(argv)
    print(C.header("vortonpy: the hand-written SIMD paths against the portable ones"))
    tmpdir = tempfile.TemporaryDirectory(prefix="vortonpy-simd-")
    tmp = tmpdir.name
    results = {}
    for name in a.scenes:
        sim = getattr(vp.scenes, name)(threads=a.threads)
        sim.step(min(a.warmup, 300) if name == "ball_through_smoke" else a.warmup)
        path = os.path.join(tmp, name + ".npz")
        sim.save(path)
        names = list(VARIANTS)
        rec = {v: [] for v in names}
        for r in range(a.rounds):
            for k in range(len(names)):
                v = names[(r + k) % len(names)]
                rec[v] += run_child(path, a.threads, a.steps, VARIANTS[v])
        rows, res = [], {}
        for ph in ["step"] + PHASES:
            if not all(ph in t for v in names for t in rec[v]):
                continue
            med = {v: float(np.median([t[ph] for t in rec[v]])) for v in names}
            if max(med.values()) < 0.005:
                continue
            res[ph] = dict(ms=med, ratio={v: med[v] / med["default"] for v in names if med["default"] > 0})
            rows.append([ph] + [f"{med[v]:.4g}" for v in names] +
                        [f"{med[v] / med['default']:.3f}" if med["default"] > 0 else "-" for v in names[1:]])
        results[name] = res
        print(f"\n{name}: {len(sim.vortons)} vortons, {len(sim.tracers)} tracers, {a.threads} threads, "
              f"{a.rounds} x {a.steps} steps per variant\n")
        print(C.md_table(["phase"] + [f"{v} ms (median)" for v in names] +
                         [f"{v} / default" for v in names[1:]], rows))
    path = C.write_json("simd_paths.json", dict(machine=C.machine(), args=vars(a), results=results))
    print(f"\nwrote {os.path.relpath(path, C.REPO)}")


if __name__ == "__main__":
    main()
