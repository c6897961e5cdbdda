#!/usr/bin/env python
"""Where `poisson` overtakes the tree: the grid solve (``sim.update_velocity_grid()``, velocity
and Jacobian at every node) with each solver, for noise lattices of ~1e3 to ~3e4 vortons in a
unit cube with 2e4 tracers spread 1-4x wider (the tracers enlarge the grid, not its spacing).
Prints per case the vortons per node and the time ratio tree / poisson (> 1: poisson faster),
and per lattice size the crossover ratio n / nodes, interpolated where the ratio crosses 1.
``solver="auto"`` (csrc/vortonpy.h) picks poisson from 1000 vortons where
n / nodes >= VP_AUTO_POISSON_RATIO (1000 / n)^0.35: this script is how that rule was set.
Each time is the best of ``--repeats`` rounds of a few solves, the two solvers alternating.

    python benchmarks/bench_crossover.py [--threads 2] [--sizes 1000,3375,10000]

Writes benchmarks/results/crossover.json.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402

# auto's rule (csrc/vortonpy.h, vp_auto_solver in csrc/velocity.c): poisson where n / nodes >= RATIO (1000 / n)^EXPONENT
RATIO, EXPONENT = 0.12, 0.35


def solve_times(sim, repeats: int, solves: int) -> dict:
    best = {}
    for _ in range(repeats):
        for solver in ("tree", "poisson"):
            sim.solver = solver
            ts = []
            for _ in range(solves):
                sim.update_velocity_grid()
                ts.append(sim.timings["velocity"])
            best[solver] = min(best.get(solver, np.inf), min(ts))
    sim.solver = "auto"
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default="1000,3375,10000,30000", help="lattice sizes (vortons), comma-separated")
    ap.add_argument("--spreads", default="1,1.5,2,2.5,3,4", help="tracer box widths (the vortons' box is 1)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    print(C.header("tree vs poisson grid solve: the crossover"))
    rows, cases = [], []
    crossings = []
    for n in [int(float(s)) for s in a.sizes.split(",")]:
        pts = []
        for spread in [float(s) for s in a.spreads.split(",")]:
            sim = C.lattice_sim(vp, n, a.threads)
            if spread > 1:
                sim.add_tracers((np.random.default_rng(0).random((20000, 3)) - 0.5) * spread)
            t = solve_times(sim, a.repeats, 5 if n < 5000 else 2)
            nv, nodes = len(sim.vortons), int(np.prod(sim.grid()["shape"]))
            ratio = t["tree"] / t["poisson"]
            pts.append((nv / nodes, ratio))
            cases.append(dict(vortons=nv, spread=spread, nodes=nodes, tree_ms=t["tree"], poisson_ms=t["poisson"]))
            rows.append([nv, f"{spread:g}", nodes, f"{nv / nodes:.3f}", f"{t['tree']:.3f}", f"{t['poisson']:.3f}",
                         f"{ratio:.2f}"])
            print(f"  {nv} vortons, spread {spread:g}: tree {t['tree']:.3f} ms, poisson {t['poisson']:.3f} ms", flush=True)
        # the crossing: between the densest case where the tree is faster and its neighbour
        pts.sort()
        cross = None
        for (r0, q0), (r1, q1) in zip(pts, pts[1:]):
            if q0 < 1 <= q1:
                cross = float(np.exp(np.interp(0.0, [np.log(q0), np.log(q1)], [np.log(r0), np.log(r1)])))
        crossings.append(dict(vortons=len(sim.vortons), crossover=cross,
                              rule=RATIO * (1000 / len(sim.vortons)) ** EXPONENT if len(sim.vortons) > 1000 else RATIO))
    print()
    print(C.md_table(["vortons", "tracer spread", "nodes", "vortons/node", "tree ms", "poisson ms", "tree/poisson"], rows))
    print()
    print(C.md_table(["vortons", "crossover vortons/node (measured)", "auto's threshold"],
                     [[c["vortons"], "-" if c["crossover"] is None else f"{c['crossover']:.3f}", f"{c['rule']:.3f}"]
                      for c in crossings]))
    path = C.write_json("crossover.json", dict(threads=a.threads, cases=cases, crossings=crossings))
    print(f"\nwrote {os.path.relpath(path, C.REPO)}")


if __name__ == "__main__":
    main()
