#!/usr/bin/env python
"""Throughput of an ensemble as a Dask sweep against the same runs one after another.

Eight short hot_ball runs (two temperatures x four seeds, ``--frames`` frames each) are run
(A) as ``vp.sweep`` on a LocalCluster of ``--workers`` one-thread workers (each run at one
OpenMP thread), and (B) one after another in this process at ``--workers`` threads each
(``client="serial"``), the way a hand-written loop uses the cores.  The cluster is started and
its workers warmed up (vortonpy imported, one tiny run) before the clock starts: that second
or two is paid once per sweep, and is printed apart.  A and B alternate over ``--rounds``
rounds (the order swapping) so that both see the same machine; the ratio is runs per second
of A over B per round, and its median and range are printed.  Writes
``benchmarks/results/sweep.json`` (``sweep_quick.json`` with ``--quick``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (sets OPENBLAS_NUM_THREADS=1 before NumPy)

import vortonpy as vp  # noqa: E402

GRID = {"temperature": [5.0, 10.0]}


def tiny(**kw):
    return vp.scenes.hot_ball(vortons=64, tracers=0, tracer_rate=0.0, **kw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=300, help="frames each run steps (default 300)")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per temperature (default 4: 8 runs)")
    ap.add_argument("--workers", type=int, default=2, help="Dask workers, and B's threads (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds (default 3)")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                    help="before each round, wait up to S seconds for the other CPUs' load to drop")
    ap.add_argument("--quick", action="store_true", help="60 frames, 1 round")
    args = ap.parse_args(argv)
    if args.quick:
        args.frames, args.rounds = 60, 1
    from distributed import Client, LocalCluster

    n_runs = len(GRID["temperature"]) * args.seeds
    print(C.header(f"Sweep throughput: {n_runs} hot_ball runs of {args.frames} frames"))
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(cluster)
    client.wait_for_workers(args.workers)
    vp.sweep(tiny, {"temperature": [1.0]}, frames=2, client=client, seeds=args.workers)  # warm the workers
    start_s = time.perf_counter() - t0

    rounds = []
    try:
        for r in range(args.rounds):
            busy = C.wait_quiet(args.wait_quiet) if args.wait_quiet else C.busy_fraction()
            times, tables = {}, {}
            for which in (("A", "B") if r % 2 == 0 else ("B", "A")):
                t = time.perf_counter()
                if which == "A":
                    tables[which] = vp.sweep(vp.scenes.hot_ball, GRID, frames=args.frames, client=client,
                                             seeds=args.seeds, threads_per_run=1,
                                             measure=vp.sweep.Diagnostics(["vortons"]))
                else:
                    tables[which] = vp.sweep(vp.scenes.hot_ball, GRID, frames=args.frames, client="serial",
                                             seeds=args.seeds, threads_per_run=args.workers,
                                             measure=vp.sweep.Diagnostics(["vortons"]))
                times[which] = time.perf_counter() - t
            for k, df in tables.items():
                bad = df[df.status != "ok"]
                if len(bad):
                    raise RuntimeError(f"{k}: runs failed: {bad[['temperature', 'seed', 'error']].to_dict('records')}")
            ratio = times["B"] / times["A"]  # (runs/s of A) / (runs/s of B)
            rounds.append(dict(sweep_s=times["A"], serial_s=times["B"], ratio=ratio, busy_before=busy,
                               run_s_sweep=float(tables["A"].wall_s.median()),
                               run_s_serial=float(tables["B"].wall_s.median()),
                               vortons=int(tables["A"].vortons.median())))
            print(f"round {r + 1}: sweep on {args.workers} one-thread workers {times['A']:.2f} s, one after another at "
                  f"{args.workers} threads {times['B']:.2f} s: {ratio:.2f}x (CPUs busy before {busy:.0%})", flush=True)
    finally:
        client.close()
        cluster.close()

    ratios = sorted(x["ratio"] for x in rounds)
    med = C.median(ratios)
    print()
    print(C.md_table(["", "median", "min", "max"],
                     [["sweep / one-after-another throughput", med, ratios[0], ratios[-1]],
                      ["sweep wall s", C.median([x["sweep_s"] for x in rounds]),
                       min(x["sweep_s"] for x in rounds), max(x["sweep_s"] for x in rounds)],
                      ["one-after-another wall s", C.median([x["serial_s"] for x in rounds]),
                       min(x["serial_s"] for x in rounds), max(x["serial_s"] for x in rounds)]]))
    print(f"\ncluster start and warm-up (paid once per sweep, not in the times above): {start_s:.1f} s")
    print(f"throughput ratio: {med:.2f}x (median of {len(rounds)} rounds, range {ratios[0]:.2f}-{ratios[-1]:.2f})")
    path = C.write_json("sweep_quick.json" if args.quick else "sweep.json",
                        dict(runs=n_runs, frames=args.frames, workers=args.workers, rounds=rounds, ratio_median=med,
                             cluster_start_s=start_s))
    print("wrote", os.path.relpath(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
