"""Shared helpers for the benchmark scripts (not a benchmark itself).

Importing this module pins BLAS to one thread *before* NumPy is imported, so that the
only parallelism measured is vortonpy's own OpenMP.  Every script imports it first.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("VORTONPY_NO_PROGRESS", "1")

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

# a source checkout: make `import vortonpy` find the in-place build
if REPO not in sys.path and os.path.isdir(os.path.join(REPO, "vortonpy")):
    sys.path.insert(0, REPO)


def cpu_info() -> dict:
    """CPU model, logical CPUs, AVX2/AVX-512 flags of this machine."""
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("unknown", "", "x86_64"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return dict(model=model, cpus=os.cpu_count(), avx2="avx2" in flags, avx512f="avx512f" in flags,
                avx512_flags=sorted(f for f in flags if f.startswith("avx512")))


def busy_fraction(seconds: float = 0.25) -> float:
    """Fraction of all CPUs busy (any process) over a short window, from /proc/stat.
    Other people's work on the machine shows up here; it is recorded with each result."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    try:
        t0, i0 = read()
        time.sleep(seconds)
        t1, i1 = read()
        return round(1.0 - (i1 - i0) / max(1, t1 - t0), 3)
    except OSError:
        return float("nan")


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "csrc", "vortonpy"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except Exception:
        return "unknown"


def machine() -> dict:
    import vortonpy as vp
    return dict(cpu=cpu_info(), python=platform.python_version(), numpy=np.__version__,
                vortonpy=getattr(vp, "__version__", "?"), openmp=bool(getattr(vp, "has_openmp", False)),
                commit=git_commit(), loadavg=os.getloadavg(), busy_before=busy_fraction(),
                date=datetime.datetime.now().isoformat(timespec="seconds"))


def _best_parallel(fn, threads: int, repeats: int) -> float:
    """Best wall time in seconds of ``fn(0) .. fn(threads - 1)`` run at once on a thread pool."""
    from concurrent.futures import ThreadPoolExecutor
    best = float("inf")
    with ThreadPoolExecutor(threads) as ex:
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(ex.map(fn, range(threads)))
            best = min(best, time.perf_counter() - t0)
    return best


def stream_bandwidth(threads: int = 1, mb: int = 256, repeats: int = 5) -> float:
    """This machine's memory bandwidth in GB/s, STREAM "copy" style: the best of ``repeats``
    NumPy copies of a ``mb`` MiB array (far larger than the caches), split across ``threads``
    Python threads (NumPy releases the GIL while copying), counting bytes read + written."""
    n = mb * 2 ** 20 // 8
    src, dst = np.ones(n), np.zeros(n)
    cut = np.linspace(0, n, threads + 1).astype(int)

    def part(k):
        np.copyto(dst[cut[k]:cut[k + 1]], src[cut[k]:cut[k + 1]])

    return 2 * n * 8 / _best_parallel(part, threads, repeats) / 1e9


def compute_rate(threads: int = 1, reps: int = 300, repeats: int = 5) -> float:
    """A compute-bound ceiling for thread scaling: NumPy exp of cache-resident arrays, one per
    Python thread (the GIL is released in the loop); best of ``repeats``, in exps per second.
    rate(2) / rate(1) is what two threads can gain on this machine at best."""
    m = 16384
    rng = np.random.default_rng(0)
    arrs = [rng.random(m) for _ in range(threads)]
    outs = [np.empty(m) for _ in range(threads)]

    def work(k):
        for _ in range(reps):
            np.exp(arrs[k], out=outs[k])

    return threads * reps * m / _best_parallel(work, threads, repeats)


def machine_ceilings(threads=(1, 2)) -> dict:
    """Memory bandwidth (GB/s) and compute rate at each thread count, interleaved 3 times and
    the best kept (the machine is noisy)."""
    bw = {t: 0.0 for t in threads}
    cr = {t: 0.0 for t in threads}
    for _ in range(3):
        for t in threads:
            bw[t] = max(bw[t], stream_bandwidth(t, repeats=3))
            cr[t] = max(cr[t], compute_rate(t, repeats=3))
    return dict(stream_GBps=bw, compute_per_s=cr)


def median(xs):
    xs = [x for x in xs if x == x]
    return float(np.median(xs)) if xs else float("nan")


def timed(fn, *args, **kw):
    """(result, milliseconds) of one call."""
    t0 = time.perf_counter()
    r = fn(*args, **kw)
    return r, (time.perf_counter() - t0) * 1e3


def md_table(headers, rows) -> str:
    def fmt(x):
        if isinstance(x, float):
            if x != x:
                return "n/a"
            if abs(x) >= 1e5 or (0 < abs(x) < 1e-2):
                return f"{x:.3g}"
            return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"
        return str(x)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def write_json(name: str, data: dict) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, name)
    data = dict(data)
    data.setdefault("machine", machine())
    data["machine"]["busy_after"] = busy_fraction()
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=_jsonable)
    return path


def _jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def header(title: str) -> str:
    c = cpu_info()
    return (f"## {title}\n\nCPU: {c['model']} ({c['cpus']} logical CPUs; AVX2 {'yes' if c['avx2'] else 'no'}, "
            f"AVX-512 {'yes' if c['avx512f'] else 'no'}); load average {os.getloadavg()[0]:.2f}; "
            f"CPUs busy before start {busy_fraction():.0%}\n")


def wait_quiet(max_seconds: float, threshold: float = 0.25) -> float:
    """Wait (up to ``max_seconds``) until less than ``threshold`` of the CPUs are busy with
    other work; returns the busy fraction last seen.  0 disables waiting."""
    t_end = time.time() + max_seconds
    b = busy_fraction()
    while b > threshold and time.time() < t_end:
        time.sleep(1.0)
        b = busy_fraction()
    return b


def noise_lattice(n_target: int, seed: int = 0, amplitude: float = 1.0):
    """A lattice of vortex noise in the unit cube, as the scenes build it (spinning_ball):
    about ``n_target`` vortons with random-direction vorticity.  Returns (p, w, radius)."""
    from vortonpy.scenes import lattice, radius_for_spacing
    k = max(2, int(round(n_target ** (1 / 3))))
    h = 1.0 / k
    p = lattice([-0.5] * 3, [0.5] * 3, h)
    rng = np.random.default_rng(seed)
    w = rng.normal(size=p.shape)
    w *= amplitude / np.linalg.norm(w, axis=1, keepdims=True)
    return p, w, radius_for_spacing(h)


def lattice_sim(vp, n_target: int, threads: int, seed: int = 0, solver: str = "auto"):
    """The scaling benchmark's case: a noise lattice of about ``n_target`` vortons in a ``Sim``
    of the given ``vp`` module (vortonpy, or a snapshot of it for ab.py), gravity on and
    viscosity 0.01 but at most 0.1 h^2 / dt (the eddy viscosity's ceiling): past
    4 nu dt / h^2 = 1 the explicit PSE exchange would need substeps, and a run with 1e6
    vortons in a unit cube has no use for a viscosity that smears out its spacing."""
    p, w, r = noise_lattice(n_target, seed=seed)
    h = 1.0 / round(len(p) ** (1 / 3))
    sim = vp.Sim(threads=threads, viscosity=min(0.01, 0.1 * h * h / (1 / 30)), gravity=(0, 0, -10), solver=solver)
    sim.add_vortons(p, w, r)
    return sim
