#!/usr/bin/env python
"""Velocity-solver throughput: milliseconds per velocity solve for ~1e3, 1e4, 1e5 vortons
(a lattice of vortex noise in a unit cube, as in vortonpy.scenes) with the solvers
"direct", "tree" and "poisson", at 1 and 2 threads.

Two solves are timed for each case:
  * ``velocity_at``: the velocity at every vorton (N points), summed from the vortons
    (direct: N^2 pairs; tree: the tree's pair + supervorton interactions, sim.interactions;
    "poisson" answers velocity_at with the tree, so it is not repeated here);
  * ``grid``: ``sim.update_velocity_grid()``, the solve a step actually does (velocity and
    its Jacobian at every node of the domain grid), the only one "poisson" replaces.
For direct at 1e5 vortons the N^2 sum would take minutes: it is evaluated at a random subset
of points and extrapolated linearly to all N (marked "extrap.").

The raw kernels are timed separately, pairs per second per core compared with 2e9
pairs/s/core (a well-vectorised float32 Biot-Savart with AVX-512): ``vp.direct_velocity``
(float64, the reference; single-threaded), and the tree's float32 near-field kernel alone
(the grid solve with tree_theta = 0.001, so every interaction is a near-field pair; that
solve's domain and Jacobian work is included, so it slightly understates the kernel).  The tree's interactions/s/core is compared with the same 2e9.  The tree's error
is reported as the RMS of (tree - direct) over the RMS of direct, at the sampled points.

Prints markdown tables; writes benchmarks/results/solvers.json (solvers_quick.json).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402

REF_PAIRS = 2e9  # pairs/s/core, float32 AVX-512 Biot-Savart


def make_sim(p, w, r, solver, threads):
    s = vp.Sim(solver=solver, threads=threads, gravity=(0, 0, 0), viscosity=0.0)
    s.add_vortons(p, w, r)
    return s


def bench_case(p, w, r, solver, threads, repeats, max_direct_pairs, rng, max_direct_grid_pairs=1e10):
    n = len(p)
    out = dict(solver=solver, threads=threads, vortons=n)
    try:
        s = make_sim(p, w, r, solver, threads)
    except Exception as e:  # noqa: BLE001
        out["error"] = repr(e)
        return out, None
    # velocity at the vortons
    if solver != "poisson":
        pts, scale = p, 1.0
        if solver == "direct" and n * n > max_direct_pairs:
            m = max(1000, int(max_direct_pairs // n))
            pts = p[rng.choice(n, m, replace=False)]
            scale = n / m
            out["extrapolated_from_points"] = m
        times, u = [], None
        for _ in range(repeats):
            u, ms = C.timed(s.velocity_at, pts)
            times.append(ms)
        ms = C.median(times) * scale
        inter = s.interactions * scale
        out.update(velocity_at_ms=ms, velocity_at_times=times, interactions=inter,
                   pairs_per_s_per_core=inter / (ms * 1e-3) / threads)
    # the step's solve: velocity (and Jacobian) on the domain grid
    try:
        s.update_velocity_grid() if solver != "direct" else None
        g = s.grid() if solver != "direct" else None
        if solver == "direct":  # the grid is sized from the vortons, so probe it with the tree
            probe = make_sim(p, w, r, "tree", threads)
            probe.update_velocity_grid()
            nodes = int(np.prod(probe.grid()["shape"]))
            if nodes * n > max_direct_grid_pairs:
                out["grid_error"] = (f"skipped: {nodes} nodes x {n} vortons = {nodes * n:.2g} pairs > "
                                     f"--max-direct-grid-pairs {max_direct_grid_pairs:.2g}")
                return out, s
        times = []
        for _ in range(repeats if solver != "direct" or n <= 20000 else 1):
            _, ms = C.timed(s.update_velocity_grid)
            times.append(ms)
        g = s.grid()
        out.update(grid_ms=C.median(times), grid_times=times, grid_nodes=int(np.prod(g["shape"])),
                   grid_interactions=s.interactions if solver != "poisson" else None)
        if solver != "poisson":
            out["grid_pairs_per_s_per_core"] = s.interactions / (out["grid_ms"] * 1e-3) / threads
    except Exception as e:  # noqa: BLE001  (poisson may not be there yet)
        out["grid_error"] = repr(e)
    return out, s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: 1e3 and 1e4 vortons, 2 repeats")
    ap.add_argument("--sizes", type=float, nargs="+", default=None, help="vorton counts (default 1e3 1e4 1e5)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    ap.add_argument("--repeats", type=int, default=None, help="repeats (median); default 3, quick 2")
    ap.add_argument("--max-direct-pairs", type=float, default=2e8,
                    help="above this many pairs the direct sum uses a subset of points (default 2e8)")
    ap.add_argument("--max-direct-grid-pairs", type=float, default=1e10,
                    help="skip the direct grid solve above this many pairs (default 1e10; 1e5 vortons on their "
                    "76^3 grid is 4.3e10 pairs, ~4.5 min)")
    ap.add_argument("--wait-quiet", type=float, default=0, help="wait up to this many seconds for an idle machine "
                    "before each size (default 0: don't)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in (a.sizes or ([1e3, 1e4] if a.quick else [1e3, 1e4, 1e5]))]
    repeats = a.repeats or (2 if a.quick else 3)
    rng = np.random.default_rng(1)

    print(C.header("vortonpy velocity solvers"))
    rows, cases, errors = [], [], {}
    for n_target in sizes:
        if a.wait_quiet:
            C.wait_quiet(a.wait_quiet)
        p, w, r = C.noise_lattice(n_target)
        # reference: direct velocity at a sample of points, for the tree's error
        sample = rng.choice(len(p), min(len(p), 2000), replace=False)
        ref = vp.direct_velocity(p, w * (4 / 3 * np.pi * r ** 3), np.full(len(p), r), p[sample])
        for solver in ("direct", "tree", "poisson"):
            for t in a.threads:
                res, s = bench_case(p, w, r, solver, t, repeats, a.max_direct_pairs, rng, a.max_direct_grid_pairs)
                cases.append(res)
                if solver == "tree" and s is not None and len(p) not in errors:
                    u = s.velocity_at(p[sample])
                    errors[len(p)] = float(np.sqrt(np.mean((u - ref) ** 2) / np.mean(ref ** 2)))
                print(f"  {len(p)} {solver} {t} thr: " + ", ".join(
                    f"{k}={res[k]:.4g}" for k in ("velocity_at_ms", "grid_ms") if k in res)
                    + (f" [{res.get('grid_error')}]" if "grid_error" in res else ""), flush=True)
                del s

    def fmt_ms(c, key):
        if key not in c:
            return "n/a"
        return f"{c[key]:.3g}" + (" (extrap.)" if key == "velocity_at_ms" and "extrapolated_from_points" in c else "")

    for c in cases:
        rows.append([c["vortons"], c["solver"], c["threads"], fmt_ms(c, "velocity_at_ms"),
                     f"{c['interactions']:.3g}" if "interactions" in c else "n/a",
                     f"{c['pairs_per_s_per_core'] / 1e9:.3f}" if "pairs_per_s_per_core" in c else "n/a",
                     f"{c['pairs_per_s_per_core'] / REF_PAIRS:.3f}" if "pairs_per_s_per_core" in c else "n/a",
                     fmt_ms(c, "grid_ms"), c.get("grid_nodes", "n/a")])
    print()
    print(C.md_table(["vortons", "solver", "thr", "velocity_at ms (N pts)", "interactions",
                      "Gpairs/s/core", "ratio to 2e9", "grid solve ms", "grid nodes"], rows))
    # speed-ups 1 -> 2 threads
    sp = []
    for n in sorted({c["vortons"] for c in cases}):
        for solver in ("direct", "tree", "poisson"):
            by_t = {c["threads"]: c for c in cases if c["vortons"] == n and c["solver"] == solver}
            if 1 in by_t and 2 in by_t:
                f = lambda k: (by_t[1][k] / by_t[2][k]) if k in by_t[1] and k in by_t[2] else float("nan")  # noqa
                sp.append([n, solver, f("velocity_at_ms"), f("grid_ms")])
    print("\nSpeed-up from 1 to 2 threads (ratio of medians in this run):\n")
    print(C.md_table(["vortons", "solver", "velocity_at", "grid solve"], sp))
    tree_vs = []
    for n in sorted({c["vortons"] for c in cases}):
        for t in a.threads:
            by_s = {c["solver"]: c for c in cases if c["vortons"] == n and c["threads"] == t}
            d, tr, po = by_s.get("direct", {}), by_s.get("tree", {}), by_s.get("poisson", {})
            tree_vs.append([n, t, d.get("velocity_at_ms", float("nan")) / tr.get("velocity_at_ms", float("nan")),
                            d.get("grid_ms", float("nan")) / tr.get("grid_ms", float("nan")),
                            tr.get("grid_ms", float("nan")) / po["grid_ms"] if "grid_ms" in po else "n/a",
                            errors.get(n, float("nan"))])
    print("\nRatios within this run (direct/tree time, tree/poisson time) and the tree's relative RMS error:\n")
    print(C.md_table(["vortons", "thr", "direct/tree velocity_at", "direct/tree grid", "tree/poisson grid",
                      "tree rel. RMS error"], tree_vs))

    # raw kernel
    kern = []
    for n in ([1000, 4000] if a.quick else [1000, 4000, 16000]):
        p, w, r = C.noise_lattice(n)
        st, rr = w * (4 / 3 * np.pi * r ** 3), np.full(len(p), r)
        m = len(p)
        times = [C.timed(vp.direct_velocity, p, st, rr, p)[1] for _ in range(repeats)]
        ms = C.median(times)
        pps = len(p) * m / (ms * 1e-3)
        kern.append(dict(sources=len(p), points=m, ms=ms, times=times, pairs_per_s_per_core=pps))
    print("\nRaw kernel vp.direct_velocity (one thread; float64):\n")
    print(C.md_table(["sources", "points", "ms", "Gpairs/s/core", "ratio to 2e9"],
                     [[k["sources"], k["points"], k["ms"], k["pairs_per_s_per_core"] / 1e9,
                       k["pairs_per_s_per_core"] / REF_PAIRS] for k in kern]))
    # the tree's float32 near-field kernel alone: theta -> 0 turns every interaction into a pair
    near = []
    p, w, r = C.noise_lattice(1000 if a.quick else 4096)
    for t in a.threads:
        sim = vp.Sim(solver="tree", tree_theta=0.001, threads=t)
        sim.add_vortons(p, w, r)
        sim.update_velocity_grid()
        times = [C.timed(sim.update_velocity_grid)[1] for _ in range(repeats)]
        ms = C.median(times)
        pps = sim.interactions / (ms * 1e-3) / t
        near.append(dict(vortons=len(p), threads=t, nodes=int(np.prod(sim.grid()["shape"])), pairs=int(sim.interactions),
                         ms=ms, times=times, pairs_per_s_per_core=pps))
    print("\nThe tree's float32 near-field kernel (grid solve, tree_theta = 0.001: all pairs near):\n")
    print(C.md_table(["vortons", "thr", "grid nodes", "pairs", "ms", "Gpairs/s/core", "ratio to 2e9"],
                     [[k["vortons"], k["threads"], k["nodes"], k["pairs"], k["ms"], k["pairs_per_s_per_core"] / 1e9,
                       k["pairs_per_s_per_core"] / REF_PAIRS] for k in near]))
    out = C.write_json("solvers_quick.json" if a.quick else "solvers.json",
                       dict(args=vars(a), reference_pairs_per_s_per_core=REF_PAIRS, cases=cases, kernel=kern, near_kernel=near,
                            tree_relative_rms_error=errors))
    print(f"\nwrote {os.path.relpath(out, C.REPO)}")


if __name__ == "__main__":
    main()
