#!/usr/bin/env python
"""How the cost of a step grows with the number of vortons: ms per step and microseconds
per vorton per step, from 1e3 to 1e6 vortons (a lattice of vortex noise in a unit cube, no
tracers, the default solver "auto": poisson from 1000 vortons; --solver tree for the tree;
viscosity 0.01 capped at 0.1 h^2/dt so that PSE needs no substeps), plus the large case "1e5 vortons + 1e6 tracers" (target 33 ms
per frame, aim 16.7) with its sim.timings phase breakdown.

Writes benchmarks/results/scaling.json (scaling_quick.json) and scaling.png (log-log plots
of ms/step and us/vorton/step against vortons).  1e6 vortons take seconds per step: use
--max to stop earlier.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import vortonpy as vp  # noqa: E402


def run_case(n, tracers, threads, warmup, steps, seed=0, solver="auto", sort=False):
    sim = C.lattice_sim(vp, n, threads, seed=seed, solver=solver)
    if tracers:
        rng = np.random.default_rng(seed + 1)
        sim.add_tracers(rng.random((int(tracers), 3)) - 0.5)
    sim.step(warmup)
    if sort:
        sim.sort_tracers()
    times, phases = [], {}
    for _ in range(steps):
        _, ms = C.timed(sim.step)
        times.append(ms)
        for k, v in sim.timings.items():
            phases.setdefault(k, []).append(v)
    return dict(solver=solver, sorted_tracers=sort, vortons=len(sim.vortons), tracers=len(sim.tracers), threads=threads, step_times_ms=times,
                ms=C.median(times), min_ms=float(np.min(times)), interactions=int(sim.interactions),
                grid_shape=list(sim.grid()["shape"]), phases_ms={k: C.median(v) for k, v in phases.items()})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: up to 1e5 vortons (unless --max), "
                    "1e5 vortons + 2e5 tracers for the large case, fewer steps")
    ap.add_argument("--max", type=float, default=None, help="largest vorton count (default 1e6; quick 1e5)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    ap.add_argument("--solver", default="auto", choices=["auto", "tree", "poisson", "direct"], help="velocity solver (default auto)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per size (default 5; quick 2); "
                    "sizes above 2e5 use at most 3")
    ap.add_argument("--big-tracers", type=float, default=None, help="tracers of the large case (default 1e6)")
    ap.add_argument("--no-big", action="store_true", help="skip the 1e5 vortons + 1e6 tracers case")
    ap.add_argument("--wait-quiet", type=float, default=0, help="wait up to this many seconds for an idle "
                    "machine before each size (default 0)")
    a = ap.parse_args(argv)
    nmax = a.max or (1e5 if a.quick else 1e6)
    steps = a.steps or (2 if a.quick else 5)
    sizes = [n for n in (1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6) if n <= nmax * 1.001]
    big_tracers = a.big_tracers or (2e5 if a.quick else 1e6)

    print(C.header("vortonpy scaling: cost per vorton per step"))
    cases = []
    for n in sizes:
        for t in a.threads:
            if a.wait_quiet:
                C.wait_quiet(a.wait_quiet)
            # steps of the small sizes cost little, and their first ones (allocations, the
            # poisson kernel's transform) weighed on a median of five: at 1e3 vortons and 2
            # threads the five after one warm-up step took 0.43 -> 0.31 ms, and two runs gave
            # 0.42 and 0.55 us a vorton; five warm-up and twenty timed steps up to 1e4
            small = n <= 1e4
            k = max(steps, 20) if small else (steps if n <= 2e5 else min(steps, 3))
            c = run_case(int(n), 0, t, warmup=5 if small else 1, steps=k, solver=a.solver)
            c["us_per_vorton"] = c["ms"] * 1e3 / c["vortons"]
            cases.append(c)
            print(f"  {c['vortons']} vortons, {t} thr: {c['ms']:.2f} ms/step, {c['us_per_vorton']:.3f} us/vorton",
                  flush=True)
    rows = []
    for c in cases:
        ph = c["phases_ms"]
        rows.append([c["vortons"], c["threads"], c["ms"], c["us_per_vorton"], "x".join(map(str, c["grid_shape"])),
                     ph["velocity"], ph["diffuse"], ph["stretch"]])
    print()
    print(C.md_table(["vortons", "thr", "ms/step", "us/vorton/step", "grid (z,y,x)", "velocity ms",
                      "diffuse ms", "stretch ms"], rows))
    sp = []
    for n in sorted({c["vortons"] for c in cases}):
        by = {c["threads"]: c for c in cases if c["vortons"] == n}
        if 1 in by and 2 in by:
            sp.append([n, by[1]["ms"] / by[2]["ms"]])
    if sp:
        print("\nSpeed-up 1 -> 2 threads:\n")
        print(C.md_table(["vortons", "speed-up"], sp))

    big = []
    if not a.no_big:
        for t in a.threads:
            for sort in (False, True):
                if a.wait_quiet:
                    C.wait_quiet(a.wait_quiet)
                c = run_case(100000, big_tracers, t, warmup=1, steps=steps, solver=a.solver, sort=sort)
                c["tracer_GBps"] = c["tracers"] * 80 / (c["phases_ms"]["advect_tracers"] * 1e-3) / 1e9
                big.append(c)
                print(f"  large case, {t} thr, tracers {'sorted' if sort else 'random'}: {c['ms']:.1f} ms/frame",
                      flush=True)
        names = [k for k in big[0]["phases_ms"] if k != "total" and max(c["phases_ms"][k] for c in big) > 0.05]
        print(f"\nLarge case: {big[0]['vortons']} vortons + {big[0]['tracers']} tracers (target 33 ms/frame, aim 16.7),"
              " tracers in random order and after sim.sort_tracers(); tracer GB/s counts 80 bytes a tracer:\n")
        print(C.md_table(["thr", "tracers", "ms/frame", "target 33", "aim 16.7"] + names + ["tracer GB/s"],
                         [[c["threads"], "sorted" if c["sorted_tracers"] else "random", c["ms"],
                           "met" if c["ms"] <= 33.3 else f"{c['ms'] / 33.3:.1f}x over",
                           "met" if c["ms"] <= 16.7 else f"{c['ms'] / 16.7:.1f}x over"]
                          + [c["phases_ms"][k] for k in names] + [c["tracer_GBps"]] for c in big]))
        ceil = C.machine_ceilings(tuple(sorted(set(a.threads) | {1})))
        print("\nMemory bandwidth (STREAM copy): " + ", ".join(f"{v:.1f} GB/s at {t} thr" for t, v in
                                                              ceil["stream_GBps"].items()))
        big_ceil = ceil
    else:
        big_ceil = None

    png = os.path.join(C.RESULTS, "scaling_quick.png" if a.quick else "scaling.png")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for t in a.threads:
            cs = [c for c in cases if c["threads"] == t]
            n = np.array([c["vortons"] for c in cs])
            ax[0].loglog(n, [c["ms"] for c in cs], "o-", label=f"{t} thread{'s' if t > 1 else ''}")
            ax[1].semilogx(n, [c["us_per_vorton"] for c in cs], "o-", label=f"{t} thread{'s' if t > 1 else ''}")
        if cases:
            n = np.array(sorted({c["vortons"] for c in cases}), float)
            c0 = min((c for c in cases if c["vortons"] == n[0]), key=lambda c: c["ms"])
            ax[0].loglog(n, c0["ms"] * n / n[0], "k:", lw=1, label="O(N) from the smallest")
            ax[0].loglog(n, c0["ms"] * (n / n[0]) * np.log(n) / np.log(n[0]), "k--", lw=1, label="O(N log N)")
        for c in big:
            if c["sorted_tracers"]:
                continue
            ax[0].plot([c["vortons"]], [c["ms"]], "s", ms=9, mfc="none",
                       label=f"+{c['tracers']:.0e} tracers, {c['threads']} thr")
        ax[0].axhline(33.3, color="r", lw=0.8, ls="--")
        ax[0].text(ax[0].get_xlim()[0] * 1.1 if False else 1.1e3, 36, "33 ms (30 fps)", color="r", fontsize=8)
        ax[0].set_xlabel("vortons")
        ax[0].set_ylabel("ms per step")
        ax[0].legend(fontsize=8)
        ax[0].grid(True, which="both", alpha=0.3)
        ax[1].set_xlabel("vortons")
        ax[1].set_ylabel("microseconds per vorton per step")
        ax[1].set_ylim(bottom=0)
        ax[1].legend(fontsize=8)
        ax[1].grid(True, which="both", alpha=0.3)
        cpu = C.cpu_info()
        fig.suptitle(f"vortonpy step cost vs vortons (noise lattice, solver {a.solver}) - {cpu['model']}, "
                     f"{cpu['cpus']} CPUs", fontsize=10)
        fig.tight_layout()
        os.makedirs(C.RESULTS, exist_ok=True)
        fig.savefig(png, dpi=110)
        print(f"\nwrote {os.path.relpath(png, C.REPO)}")
    except ImportError:
        print("\n(matplotlib not installed: no plot)")
    out = C.write_json("scaling_quick.json" if a.quick else "scaling.json",
                       dict(args=vars(a), cases=cases, large_case=big, machine_ceilings=big_ceil))
    print(f"wrote {os.path.relpath(out, C.REPO)}")


if __name__ == "__main__":
    main()
