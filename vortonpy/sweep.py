"""Parameter sweeps and ensembles: many independent runs of a scene on Dask, one table row each.

For example::

    import vortonpy as vp

    results = vp.sweep(vp.scenes.ball_through_smoke,                   # any function returning a Sim
                       {"speed": [2.0, 4.0, 8.0], "viscosity": [0.005, 0.01]},
                       frames=60,
                       measure=[vp.sweep.BallDrag(), vp.sweep.Ball()],  # or a function of the Sim
                       out="sweeps/drag")                               # resumable
    results[["speed", "viscosity", "cd", "ball_speed", "status", "wall_s"]]

The runs are tasks on ``dask.distributed``: by default a ``LocalCluster`` of
``cores // threads_per_run`` one-thread worker processes on this machine, each run's ``Sim``
stepping on ``threads_per_run`` OpenMP threads; pass a ``Client``, a cluster object or a
scheduler address (``client="tcp://host:8786"``) to use any Dask cluster (dask-jobqueue on
SLURM, Kubernetes, cloud), or ``client="serial"`` to run them one after another in this process.
Independent runs use the cores better than one run at a time on all of them: a step has serial
parts and barriers that a second run fills.

With ``out=`` each finished run is written at once to ``out/runs/<run_id>.json`` (atomically:
a temporary file, then a rename), and a later call with the same ``out`` re-runs only the runs
that are missing; ``<run_id>`` is a hash of the run's parameters, seed, frame count and
``make_sim``.  The stored results belong to one ``make_sim`` and one ``measure``: change ``out``
when you change what a run does or measures.

The engine is deterministic for a given input and thread count, so the same grid gives the
same numbers serially, on a cluster and resumed.  Needs the optional dependencies:
``pip install "vortonpy[sweep]"`` (``dask[distributed]`` and ``pandas``).
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import itertools
import json
import os
import sys
import tempfile
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["sweep", "expand_grid", "run_id", "Ball", "BallDrag", "Diagnostics", "MsPerFrame", "MEASURES",
           "measure_from_name", "SceneSpec", "read_toml", "run_toml", "write_table"]

_INSTALL = 'pip install "vortonpy[sweep]"'

#: Columns every row has besides the parameters and the measures.
COLUMNS = ("seed", "status", "error", "frames", "wall_s", "run_id")

#: ``status`` of a row: the run finished; it raised (its ``error`` says what; written to
#: ``out`` and not re-run); its worker was lost more often than the scheduler allows (not
#: written: a resumed sweep runs it again).
STATUS_OK, STATUS_FAILED, STATUS_LOST = "ok", "failed", "lost"


def _need(dask: bool):
    """pandas (and dask.distributed) or an ImportError naming the extra that installs them."""
    missing = []
    try:
        import pandas  # noqa: F401
    except ImportError:
        missing.append("pandas")
    if dask:
        try:
            import distributed  # noqa: F401
        except ImportError:
            missing.append("dask[distributed]")
    if missing:
        raise ImportError(f"vortonpy.sweep needs {' and '.join(missing)}: {_INSTALL}")


# ------------------------------------------------------------------------ grid and keys
def _plain(x, where: str):
    """``x`` as plain JSON-able Python (None, bool, int, float, str and lists of them)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, np.generic):
        return _plain(x.item(), where)
    if isinstance(x, (np.ndarray, list, tuple)):
        return [_plain(v, where) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    raise TypeError(f"{where} must be a number, bool, string, None or a list of them, got {type(x).__name__}")


def expand_grid(grid) -> List[Dict[str, Any]]:
    """The runs' parameter dicts of a ``grid``: a dict of lists is their full product (first key
    slowest; a value that is not a list is the same in every run), a list of dicts is taken as
    it is.  Values are made plain (NumPy scalars and arrays become numbers and lists)."""
    if isinstance(grid, dict):
        axes = []
        for k, v in grid.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise ValueError(f"grid keys must be parameter names, got {k!r}")
            vals = list(v) if isinstance(v, (list, tuple, np.ndarray, range)) else [v]
            if not vals:
                raise ValueError(f"grid[{k!r}] is empty")
            axes.append([_plain(x, f"grid[{k!r}] values") for x in vals])
        runs = [dict(zip(grid.keys(), combo)) for combo in itertools.product(*axes)]
    elif isinstance(grid, (list, tuple)):
        runs = []
        for i, p in enumerate(grid):
            if not isinstance(p, dict):
                raise TypeError(f"grid[{i}] must be a dict of parameters, got {type(p).__name__}")
            for k in p:
                if not isinstance(k, str) or not k.isidentifier():
                    raise ValueError(f"grid[{i}] keys must be parameter names, got {k!r}")
            runs.append({k: _plain(v, f"grid[{i}][{k!r}]") for k, v in p.items()})
    else:
        raise TypeError(f"grid must be a dict of lists or a list of dicts, got {type(grid).__name__}")
    if not runs:
        raise ValueError("grid has no runs")
    for p in runs:
        bad = [k for k in p if k in COLUMNS[1:]]
        if bad:
            raise ValueError(f"grid parameter names {bad} clash with the result columns {list(COLUMNS)}")
    return runs


def _callable_key(f) -> str:
    """A name of ``make_sim`` that is the same in every process (for run ids)."""
    key = getattr(f, "sweep_key", None)
    if isinstance(key, str):
        return key
    if hasattr(f, "func") and hasattr(f, "keywords"):  # functools.partial
        try:
            extra = json.dumps([_plain(list(f.args), "args"), {k: _plain(v, k) for k, v in f.keywords.items()}],
                               sort_keys=True)
        except TypeError:
            extra = ""
        return f"partial({_callable_key(f.func)}){extra}"
    mod = getattr(f, "__module__", None) or type(f).__module__
    name = getattr(f, "__qualname__", None) or type(f).__qualname__
    return f"{mod}.{name}"


def run_id(make_sim_key: str, params: Dict[str, Any], seed, frames: int, measure_every=None) -> str:
    """The stable id of one run: a hash of what it computes (16 hex digits)."""
    text = json.dumps(dict(make_sim=make_sim_key, params=params, seed=seed, frames=frames,
                           measure_every=measure_every), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _signature(f):
    try:
        return inspect.signature(f)
    except (TypeError, ValueError):
        return None


def _seed_default(f):
    """(accepts a seed keyword, the default seed it uses when not given one or None)."""
    sig = _signature(f)
    if sig is None:
        return False, None
    own = getattr(f, "default_seed", None)  # a SceneSpec: its file's seed
    if isinstance(own, int) and not isinstance(own, bool):
        return True, own
    p = sig.parameters.get("seed")
    if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
        d = p.default
        return True, (int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else None)
    return any(q.kind == q.VAR_KEYWORD for q in sig.parameters.values()), None


# ------------------------------------------------------------------------ one run
def _measures(measure) -> List[Any]:
    if measure is None:
        return []
    items = list(measure) if isinstance(measure, (list, tuple)) else [measure]
    for i, m in enumerate(items):
        if not callable(m):
            raise TypeError(f"measure must be a function of the Sim (or a list of them), got {type(m).__name__}"
                            + (f" at measure[{i}]" if len(items) > 1 else ""))
    return items


def _merge(out: Dict[str, Any], got, who: str, taken) -> None:
    if not isinstance(got, dict):
        raise TypeError(f"measure {who} must return a dict of numbers, got {type(got).__name__}")
    for k, v in got.items():
        if not isinstance(k, str):
            raise TypeError(f"measure {who} returned a key that is not a string: {k!r}")
        if k in taken:
            raise ValueError(f"measure {who} returned {k!r}, which is already a column (a parameter, a result "
                             "column or another measure's key)")
        out[k] = _plain(v, f"measure {who}[{k!r}]")


def _measure_name(m) -> str:
    return getattr(m, "__name__", None) or type(m).__name__


def _run_one(make_sim, params, seed, pass_seed, frames, measure, measure_every, threads, save_state):
    """One run (on a worker or in this process): build, step, measure.  Never raises for the
    run's own errors (``Exception``); they become the result's ``error``."""
    from ._core import Sim as _CoreSim
    t0 = time.perf_counter()
    res: Dict[str, Any] = dict(status=STATUS_OK, error=None, frames=0, measures={}, state=None,
                               host=_host(), threads=threads)
    sim = None
    phase = "make_sim"
    try:
        kw = dict(params)
        if pass_seed:
            kw["seed"] = seed
        sim = make_sim(**kw)
        if not isinstance(sim, _CoreSim):
            raise TypeError(f"make_sim must return a vortonpy.Sim, got {type(sim).__name__}")
        if "threads" not in params:
            sim.threads = threads
        res["threads"] = sim.threads
        items = [copy.deepcopy(m) if hasattr(m, "sample") else m for m in measure]  # fresh state per run
        recorders = [m for m in items if hasattr(m, "sample")]
        plain = [m for m in items if not hasattr(m, "sample")]
        series: List[Dict[str, List[Any]]] = [{} for _ in plain]

        def sample(s):
            for r in recorders:
                r.sample(s)
            if measure_every is not None:
                for f, ser in zip(plain, series):
                    got = f(s)
                    if not isinstance(got, dict):
                        raise TypeError(f"measure {_measure_name(f)} must return a dict of numbers, "
                                        f"got {type(got).__name__}")
                    for k, v in got.items():
                        ser.setdefault(k, []).append(v)

        phase = "step"
        if recorders or measure_every is not None:
            every = measure_every or 1
            sample(sim)
            sim.step(frames, progress=False, callback=sample, every=every)
            if frames % every:
                sample(sim)
        else:
            sim.step(frames, progress=False)
        phase = "measure"
        taken = set(params) | set(COLUMNS)
        out: Dict[str, Any] = {}
        for r in recorders:
            _merge(out, r(sim), _measure_name(r), taken | set(out))
        for f, ser in zip(plain, series):
            _merge(out, ser if measure_every is not None else f(sim), _measure_name(f), taken | set(out))
        res["measures"] = out
    except Exception as e:
        res["status"] = STATUS_FAILED
        where = {"make_sim": " (in make_sim)", "measure": " (in measure)"}.get(phase, "")
        if phase == "step" and sim is not None:
            where = f" (stepping, after frame {sim.frame})"
        res["error"] = f"{type(e).__name__}{where}: {e}"
        res["measures"] = {}
    if sim is not None:
        res["frames"] = int(sim.frame)
        if save_state and res["status"] == STATUS_OK:
            d = tempfile.mkdtemp(prefix="vortonpy-sweep-")
            try:
                path = os.path.join(d, "state.npz")
                sim.save(path)
                with open(path, "rb") as fh:
                    res["state"] = fh.read()  # sent back: the workers need not share a file system
            finally:
                for name in os.listdir(d):
                    os.unlink(os.path.join(d, name))
                os.rmdir(d)
    res["wall_s"] = time.perf_counter() - t0
    return res


def _host() -> str:
    if "distributed" in sys.modules:  # never imported by a serial sweep
        try:
            from distributed import get_worker
            return get_worker().address
        except Exception:
            pass
    return "local"


# ------------------------------------------------------------------------ files
def _write_atomic(path: str, data: bytes) -> None:
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _record_path(out: str, rid: str) -> str:
    return os.path.join(out, "runs", rid + ".json")


def _state_path(out: str, rid: str) -> str:
    return os.path.join(out, "states", rid + ".npz")


def _load_record(out: str, run: Dict[str, Any], save_state: bool, retry_failed: bool):
    """The stored record of a finished run, or None when it must run (again)."""
    path = _record_path(out, run["run_id"])
    try:
        with open(path) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    if rec.get("params") != run["params"] or rec.get("seed") != run["seed"]:
        return None
    if rec.get("status") == STATUS_FAILED and retry_failed:
        return None
    if save_state and rec.get("status") == STATUS_OK and not os.path.exists(_state_path(out, run["run_id"])):
        return None
    return rec


# ------------------------------------------------------------------------ the sweep
def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _want_progress(progress) -> bool:
    from ._sim import _want_progress as want
    return want(progress)


def sweep(make_sim: Callable[..., Any], grid, frames: int = 300, measure=None, *, client=None,
          out: Optional[Union[str, os.PathLike]] = None, threads_per_run: int = 1, seeds=None,
          measure_every: Optional[int] = None, save_state: bool = False, workers: Optional[int] = None,
          retry_failed: bool = False, progress: Optional[bool] = None):
    """Run ``make_sim(**params)`` for every parameter set of ``grid``, step each ``frames``
    frames, measure it, and return a pandas DataFrame with one row per run.

    ``make_sim``: any function returning a :class:`vortonpy.Sim` (a built-in scene such as
    ``vp.scenes.ball_through_smoke``, a :class:`SceneSpec` of a scene file, your own).  It runs
    on the workers, so it must be picklable there (module-level functions and ``functools.partial``
    always are; Dask sends lambdas and notebook functions by value).

    ``grid``: a dict of lists, whose full product is run (``{"speed": [2, 4], "viscosity":
    [0.005, 0.01]}``: four runs), or a list of dicts, one per run; a run listed twice runs once.

    ``measure``: a function of the finished ``Sim`` returning a dict of numbers (or lists of
    numbers), e.g. ``lambda sim: {"x": sim.bodies[0].position[0]}``, or a list of them, whose
    dicts are merged.  A measure may also record the run as it goes: an object with a
    ``sample(sim)`` method is given a fresh copy per run, sampled at frame 0 and every
    ``measure_every`` frames (default every frame), and called with the finished ``Sim`` for
    its dict (:class:`BallDrag`, :class:`MsPerFrame`).  With ``measure_every=k`` plain
    functions are sampled too, at frame 0, every k frames and at the end: each of their
    columns then holds the list of samples (``results.explode([...])`` gives one row a sample).

    ``client``: ``None`` (a ``LocalCluster`` of ``workers`` processes, default ``cores //
    threads_per_run``, one thread each, closed at the end), a ``distributed.Client``, a cluster
    object, a scheduler address ``"tcp://host:8786"``, or ``"serial"`` (this process, one run
    after another; no Dask needed).  Each run's ``Sim`` is set to ``threads_per_run`` threads
    (unless ``threads`` is one of the parameters), so give your own cluster's workers one
    Dask thread each and ``threads_per_run`` cores (and unset ``MALLOC_TRIM_THRESHOLD_``, which
    Dask's nannies set by default: with it a step can be ~15% slower, config
    ``distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_: null``).  A worker that dies mid-run is replaced
    and its run retried on another (Dask's ``distributed.scheduler.allowed-failures``, 3 by
    default); a run that exhausts those retries is a row with ``status`` ``"lost"``.

    ``seeds``: ``None`` (each grid point once, with ``make_sim``'s default seed), an int n
    (each grid point n times, seeds 0..n-1: an ensemble) or a list of ints.  The seed is passed
    as ``seed=`` to a ``make_sim`` that takes one, and recorded in the ``seed`` column.

    ``out``: a folder; each run's summary is written to ``out/runs/<run_id>.json`` as it
    finishes (and its final state to ``out/states/<run_id>.npz`` with ``save_state=True``,
    readable with ``vp.Sim.load``), and the runs already there are not run again (failed ones
    neither, unless ``retry_failed=True``): an interrupted sweep continues where it stopped.

    A run that raises (a blow-up's ``FloatingPointError``, bad parameters) is a row with
    ``status`` ``"failed"`` and the ``error``; the others go on.  Columns: the parameters,
    ``seed``, the measures, ``status``, ``error``, ``frames`` (the frame the run reached),
    ``wall_s`` (the run's wall time: build, steps and measures) and ``run_id``.

    ``progress``: a bar (tqdm) over the runs and the Dask dashboard's address, printed where a
    person is watching (a terminal or Jupyter; never in CI); True/False forces it.
    """
    serial = isinstance(client, str) and client.lower() in ("serial", "local", "none", "sync")
    _need(dask=not serial)
    import pandas as pd

    if not callable(make_sim):
        raise TypeError(f"make_sim must be a function returning a Sim, got {type(make_sim).__name__}")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 0:
        raise ValueError(f"frames must be a non-negative integer, got {frames!r}")
    frames = int(frames)
    if isinstance(threads_per_run, bool) or not isinstance(threads_per_run, (int, np.integer)) \
            or threads_per_run < 1:
        raise ValueError(f"threads_per_run must be a positive integer, got {threads_per_run!r}")
    threads_per_run = int(threads_per_run)
    if measure_every is not None and (isinstance(measure_every, bool)
                                      or not isinstance(measure_every, (int, np.integer)) or measure_every < 1):
        raise ValueError(f"measure_every must be a positive integer or None, got {measure_every!r}")
    measure_every = None if measure_every is None else int(measure_every)
    if workers is not None and (not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers must be a positive integer or None, got {workers!r}")
    measures = _measures(measure)
    if save_state and out is None:
        raise ValueError("save_state=True needs out= (the folder the states are written to)")
    points = expand_grid(grid)

    takes_seed, default_seed = _seed_default(make_sim)
    if seeds is None:
        seed_list, pass_seed = [None], False
    else:
        if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
            if seeds < 1:
                raise ValueError(f"seeds must be a positive count or a list of ints, got {seeds}")
            seed_list = list(range(int(seeds)))
        elif isinstance(seeds, (list, tuple, range, np.ndarray)) and len(seeds) and all(
                isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in seeds):
            seed_list = [int(s) for s in seeds]
        else:
            raise ValueError(f"seeds must be None, a positive count or a non-empty list of ints, got {seeds!r}")
        if not takes_seed:
            raise TypeError(f"seeds= needs a make_sim that takes a seed keyword; {_callable_key(make_sim)} does not")
        if any("seed" in p for p in points):
            raise ValueError("give the seeds either as a grid parameter 'seed' or as seeds=, not both")
        pass_seed = True

    key = _callable_key(make_sim)
    runs: List[Dict[str, Any]] = []
    seen = set()
    for p in points:
        for s in seed_list:
            seed = s if s is not None else p.get("seed", default_seed)
            rid = run_id(key, p, seed, frames, measure_every)
            if rid in seen:
                continue  # the same run twice in the grid: run once
            seen.add(rid)
            runs.append(dict(params=p, seed=seed, run_id=rid))

    out_dir = os.fspath(out) if out is not None else None
    records: Dict[str, Dict[str, Any]] = {}
    if out_dir is not None:
        for r in runs:
            rec = _load_record(out_dir, r, save_state, retry_failed)
            if rec is not None:
                records[r["run_id"]] = rec
    todo = [r for r in runs if r["run_id"] not in records]
    show = _want_progress(progress)

    def finish(run, res) -> None:
        rec = dict(run_id=run["run_id"], make_sim=key, params=run["params"], seed=run["seed"], frames_requested=frames,
                   measure_every=measure_every, status=res["status"], error=res["error"], frames=res["frames"],
                   wall_s=res["wall_s"], measures=res["measures"], host=res.get("host"), threads=res.get("threads"),
                   vortonpy=_version(), finished=time.strftime("%Y-%m-%dT%H:%M:%S"), state=None)
        if out_dir is not None and res["status"] != STATUS_LOST:
            if res.get("state") is not None:
                _write_atomic(_state_path(out_dir, run["run_id"]), res["state"])
                rec["state"] = os.path.join("states", run["run_id"] + ".npz")
            _write_atomic(_record_path(out_dir, run["run_id"]), json.dumps(rec, indent=1).encode())
        records[run["run_id"]] = rec

    bars = []

    def start_bar():
        if show:
            from tqdm.auto import tqdm
            bars.append(tqdm(total=len(runs), initial=len(runs) - len(todo), unit="run", desc="sweep"))

    def done_one():
        if bars:
            bars[0].update(1)

    try:
        if serial:
            start_bar()
            for r in todo:
                finish(r, _run_one(make_sim, r["params"], r["seed"], pass_seed, frames, measures, measure_every,
                                   threads_per_run, save_state))
                done_one()
        elif todo:
            _run_dask(client, todo, finish, start_bar, done_one, show, workers, threads_per_run,
                      (make_sim, pass_seed, frames, measures, measure_every, threads_per_run, save_state))
    finally:
        for b in bars:
            b.close()
    return _table(pd, runs, records)


def _version() -> str:
    from . import __version__
    return __version__


def _run_dask(client, todo, finish, start_bar, done_one, show, workers, threads_per_run, args) -> None:
    from distributed import Client, as_completed
    cluster = own = None
    if client is None:
        import dask
        from distributed import LocalCluster
        n = workers or max(1, _cores() // threads_per_run)
        # Dask's nannies set MALLOC_TRIM_THRESHOLD_ in their workers, which makes glibc hand every
        # freed particle array back to the system: hot_ball stepped 1.18x slower with it.
        # A known dashboard port where a person will open it; any free one otherwise.
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=":8787" if show else ":0")
        own = Client(cluster)
    elif isinstance(client, str):
        own = Client(client)
    elif hasattr(client, "submit"):
        pass
    elif hasattr(client, "scheduler_address"):
        own = Client(client)
    else:
        raise TypeError(f"client must be None, 'serial', a scheduler address, a distributed.Client or a cluster, "
                        f"got {type(client).__name__}")
    cl = own or client
    try:
        if show:
            try:
                import bokeh  # noqa: F401
                note = ""
            except ImportError:
                note = " (its plots need `pip install bokeh`)"
            nw = len(cl.scheduler_info().get("workers", {}))
            runs_on = f"{len(todo)} run{'s' * (len(todo) != 1)} on {nw} Dask worker{'s' * (nw != 1)}"
            print(f"vortonpy.sweep: {runs_on}; dashboard: {cl.dashboard_link}{note}", file=sys.stderr)
        start_bar()
        make_sim, pass_seed, frames, measures, measure_every, threads, save_state = args
        token = os.urandom(4).hex()
        futures = {}
        for r in todo:
            f = cl.submit(_run_one, make_sim, r["params"], r["seed"], pass_seed, frames, measures, measure_every,
                          threads, save_state, key=f"vortonpy-run-{r['run_id']}-{token}", pure=False)
            futures[f] = r
        try:
            for f in as_completed(list(futures)):
                r = futures[f]
                try:
                    res = f.result()
                except Exception as e:  # KilledWorker, a lost scheduler: not the run's own error
                    res = dict(status=STATUS_LOST, error=f"{type(e).__name__}: {e}", frames=0, measures={},
                               wall_s=float("nan"))
                finish(r, res)
                f.release()
                done_one()
        except BaseException:
            cl.cancel(list(futures))  # Ctrl-C: what finished is written; the rest stops
            raise
    finally:
        if own is not None:
            own.close()
        if cluster is not None:
            cluster.close()


def _table(pd, runs, records):
    rows, pcols, mcols = [], {}, {}
    for r in runs:
        rec = records.get(r["run_id"])
        for k in r["params"]:
            pcols.setdefault(k, None)
        for k in (rec or {}).get("measures", {}):
            mcols.setdefault(k, None)
    for r in runs:
        rec = records[r["run_id"]]
        row = dict(r["params"])
        row["seed"] = r["seed"]
        row.update(rec.get("measures", {}))
        row.update(status=rec["status"], error=rec.get("error"), frames=rec.get("frames", 0),
                   wall_s=rec.get("wall_s", float("nan")), run_id=r["run_id"])
        rows.append(row)
    cols = list(pcols) + ["seed"] + [k for k in mcols if k not in pcols] + list(COLUMNS[1:])
    df = pd.DataFrame.from_records(rows, columns=cols)
    # None where a run has no error, whether or not another has one (pandas infers a string dtype
    # only when some row has a string)
    df["error"] = pd.Series([row["error"] for row in rows], index=df.index, dtype=object)
    return df


# ------------------------------------------------------------------------ measures
class Ball:
    """Measure: a body's final position, velocity and speed: ``ball_x``, ``ball_y``, ``ball_z``,
    ``ball_vx``, ``ball_vy``, ``ball_vz``, ``ball_speed`` (``body{b}_...`` for ``body=b > 0``)."""

    def __init__(self, body: int = 0):
        self.body = int(body)

    def __call__(self, sim) -> Dict[str, float]:
        b = sim.bodies[self.body]
        pre = "ball_" if self.body == 0 else f"body{self.body}_"
        p, v = np.asarray(b.position, float), np.asarray(b.velocity, float)
        return {pre + "x": p[0], pre + "y": p[1], pre + "z": p[2], pre + "vx": v[0], pre + "vy": v[1],
                pre + "vz": v[2], pre + "speed": float(np.linalg.norm(v))}


class BallDrag:
    """Measure: the quadratic-drag fit of a body's slowing (:func:`vortonpy.plot.fit_drag`),
    sampled every frame, of the velocity along the launch direction.  Keys: ``cd``, ``cd_r2``
    (the fit's R^2), ``cd_samples``, ``reynolds`` (2 R U / viscosity at the first fitted
    frame), ``speed_start``, ``speed_end``.

    ``after``: ``None`` fits from the launch speed over the frames where quadratic drag holds
    (``vp.plot.drag_curve``'s window); a time fits the line ``1/v = a + b t`` freely over the
    frames from that time on (after the start-up transient, when the fluid is being set moving).
    ``added_mass``: the coefficient of the fluid the body carries along, ``(M + added_mass rho0
    V) dv/dt = -1/2 rho0 Cd pi R^2 v^2``; ``"auto"`` is 1/2 (a sphere in potential flow) with
    the physical body coupling, whose fluid moves with the ball, and 0 with the articles'
    contact rule."""

    def __init__(self, body: int = 0, after: Optional[float] = None, added_mass: Union[float, str] = "auto"):
        self.body = int(body)
        if after is not None and not (isinstance(after, (int, float)) and np.isfinite(after)):
            raise TypeError(f"after must be a time (a number) or None, got {after!r}")
        self.after = None if after is None else float(after)
        if isinstance(added_mass, str):
            if added_mass != "auto":
                raise ValueError(f"added_mass must be a number >= 0 or 'auto', got {added_mass!r}")
        elif not (isinstance(added_mass, (int, float)) and added_mass >= 0):
            raise ValueError(f"added_mass must be a number >= 0 or 'auto', got {added_mass!r}")
        self.added_mass = added_mass if isinstance(added_mass, str) else float(added_mass)
        self._hist = None

    def sample(self, sim) -> None:
        """Record the body's state (called by the sweep as the run goes)."""
        if self._hist is None:
            from .plot import History
            self._hist = History(diagnostics=False)
        self._hist.record(sim)

    def __call__(self, sim) -> Dict[str, float]:
        from .plot import drag_data, fit_drag
        h = self._hist
        if h is None or len(h) < 2:
            raise ValueError("BallDrag needs samples: it is a recorder (sweep samples it every frame)")
        if h.body_fixed[self.body]:
            raise ValueError(f"body {self.body} is fixed: it does not slow down")
        k = self.added_mass
        if k == "auto":
            k = 0.5 if h.body_coupling == "physical" else 0.0
        radius = float(h.body_radius[self.body])
        mass = float(h.body_mass[self.body]) + k * h.ambient_density * 4.0 / 3.0 * np.pi * radius ** 3
        if self.after is None:
            dd = drag_data(h, self.body, mass=mass, viscosity=sim.viscosity)
        else:
            dd = drag_data(h, self.body, mass=mass, viscosity=sim.viscosity, fit_range=(self.after, np.inf))
            dd.fit = fit_drag(dd.time, dd.v_along, radius, mass, dd.rho0, mask=dd.fit_mask,
                              viscosity=sim.viscosity if sim.viscosity > 0 else None)
        fit = dd.fit
        return dict(cd=fit["cd"], cd_r2=fit["r2"], cd_samples=fit["n"], reynolds=fit["reynolds"],
                    speed_start=float(dd.speed[0]), speed_end=float(dd.speed[-1]))


class Diagnostics:
    """Measure: :meth:`vortonpy.Sim.diagnostics` at the end, scalars as they are and vectors as
    ``key_x``, ``key_y``, ``key_z``; ``keys`` picks some (default all but the per-body lists)."""

    def __init__(self, keys: Optional[Sequence[str]] = None):
        self.keys = None if keys is None else [str(k) for k in keys]

    def __call__(self, sim) -> Dict[str, float]:
        d = sim.diagnostics()
        if self.keys is not None:
            bad = [k for k in self.keys if k not in d]
            if bad:
                raise KeyError(f"no diagnostics {bad}; there are: {', '.join(sorted(d))}")
        out: Dict[str, float] = {}
        for k in (self.keys if self.keys is not None else d):
            if k in ("body_momentum", "body_angular_momentum", "time", "frame") and self.keys is None:
                continue
            a = np.asarray(d[k], float)
            if a.ndim == 0:
                out[k] = float(a)
            elif a.shape == (3,):
                out.update({f"{k}_{c}": float(x) for c, x in zip("xyz", a)})
            else:
                out.update({f"{k}_{i}": float(x) for i, x in enumerate(a.ravel())})
        return out


class MsPerFrame:
    """Measure: wall milliseconds per frame of the run's stepping (``ms_per_frame``)."""

    def __init__(self):
        self._t0 = self._f0 = None

    def sample(self, sim) -> None:
        """Note the clock at the first sample (called by the sweep as the run goes)."""
        if self._t0 is None:
            self._t0, self._f0 = time.perf_counter(), sim.frame

    def __call__(self, sim) -> Dict[str, float]:
        n = sim.frame - (self._f0 or 0)
        return {"ms_per_frame": 1e3 * (time.perf_counter() - self._t0) / n if n and self._t0 else float("nan")}


#: The named measures of ``vortonpy sweep`` files: ``"name"`` or ``"name:argument"``
#: (``"ball:1"`` the second body, ``"diagnostics:enstrophy,heat"`` some keys).
MEASURES: Dict[str, Tuple[Callable[[Optional[str]], Any], str]] = {
    "ball": (lambda a: Ball(int(a or 0)), "a body's final position, velocity and speed (ball_x, ..., ball_speed)"),
    "ball_drag": (lambda a: BallDrag(int(a or 0)), "quadratic-drag fit of a body's slowing (cd, cd_r2, reynolds)"),
    "diagnostics": (lambda a: Diagnostics(a.split(",") if a else None),
                    "Sim.diagnostics() at the end; diagnostics:KEY,KEY picks some"),
    "ms_per_frame": (lambda a: MsPerFrame(), "wall milliseconds per frame of stepping"),
}


def measure_from_name(name: str):
    """The measure a name of :data:`MEASURES` stands for (``"ball_drag"``, ``"diagnostics:heat"``)."""
    if not isinstance(name, str):
        raise TypeError(f"a measure name must be a string, got {type(name).__name__}")
    base, _, arg = name.partition(":")
    if base not in MEASURES:
        raise ValueError(f"unknown measure {name!r}; choose from: {', '.join(MEASURES)}")
    try:
        return MEASURES[base][0](arg.strip() or None)
    except ValueError as e:
        raise ValueError(f"measure {name!r}: {e}") from None


# ------------------------------------------------------------------------ sweep files
class SceneSpec:
    """``make_sim`` for a scene file: ``SceneSpec("my_scene.toml")(**params)`` builds it with the
    params as overrides (:func:`vortonpy.scenes.build`).  The file is read here, once, and its
    contents travel to the workers, which need not see the file."""

    def __init__(self, path):
        from .scene_files import read_toml as read_scene
        self.path = os.fspath(path)
        self.spec = read_scene(self.path)
        #: the seed a run gets when the sweep passes none: the file's
        self.default_seed = int(self.spec.get("seed", 0))
        text = json.dumps(self.spec, sort_keys=True, default=repr)
        self.sweep_key = f"scene file {self.spec['name']} {hashlib.sha256(text.encode()).hexdigest()[:12]}"

    def __call__(self, **params):
        from .scene_files import build
        return build(self.spec, **params)

    def __repr__(self) -> str:
        return f"SceneSpec({self.path!r})"


#: Keys of a sweep file, with what each is.
SWEEP_KEYS = {
    "scene": "a built-in scene name or a scene file (.toml, relative to the sweep file)",
    "frames": "frames each run steps", "measures": "names from vortonpy.sweep.MEASURES",
    "grid": "table of lists: their full product is run", "runs": "array of tables: one per run (instead of grid)",
    "fixed": "table: parameters every run gets", "seeds": "a count or a list of ints",
    "threads_per_run": "OpenMP threads of each run", "workers": "LocalCluster workers",
    "client": "scheduler address or \"serial\"", "out": "folder of per-run results (resumable)",
    "results": "table file written: .csv or .parquet",
}


def read_toml(path) -> Dict[str, Any]:
    """Read and check a sweep file (TOML); returns ``sweep``'s keyword arguments (``make_sim``,
    ``grid``, ``frames``, ``measure``, ...) plus ``name``, ``out`` and ``results`` as written.
    A bad key or value raises ``ValueError`` naming the file and the key.  Format::

        scene = "ball_through_smoke"          # or "my_scene.toml" (relative to this file)
        frames = 60
        measures = ["ball_drag", "ball", "ms_per_frame"]
        seeds = 2                             # optional: a count or a list
        threads_per_run = 1                   # optional
        out = "out/drag"                      # optional: per-run results, resumable
        results = "out/drag/results.parquet"  # optional: .csv (default) or .parquet

        [fixed]                               # optional: every run's parameters
        tracers = 0

        [grid]                                # the full product of these lists
        speed = [2.0, 4.0, 8.0]
        viscosity = [0.005, 0.01]

    ``[[runs]]`` tables, one per run, may replace ``[grid]``.  A scene file is found relative
    to the sweep file; ``out`` and ``results`` are relative to the current directory.
    """
    if sys.version_info >= (3, 11):
        import tomllib as toml
    else:  # pragma: no cover - older Pythons
        import tomli as toml
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = toml.loads(fh.read().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    except toml.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None

    def bad(key, msg):
        return ValueError(f"{path}: {key}: {msg}")

    unknown = [k for k in data if k not in SWEEP_KEYS]
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}; a sweep file has: {', '.join(SWEEP_KEYS)}")
    if "scene" not in data or not isinstance(data["scene"], str):
        raise bad("scene", "required: a built-in scene name or a scene file path")
    from .scenes import SCENES
    scene = data["scene"]
    if scene.lower().endswith(".toml"):
        sp = scene if os.path.isabs(scene) else os.path.join(os.path.dirname(os.path.abspath(path)), scene)
        if not os.path.exists(sp):
            raise bad("scene", f"no such scene file {sp}")
        make_sim: Any = SceneSpec(sp)
    elif scene in SCENES:
        make_sim = SCENES[scene]
    else:
        raise bad("scene", f"unknown scene {scene!r}; choose one of {', '.join(SCENES)} or give a .toml file")
    frames = data.get("frames", 300)
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 0:
        raise bad("frames", f"must be a non-negative integer, got {frames!r}")
    names = data.get("measures", [])
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list):
        raise bad("measures", f"must be a list of names, got {names!r}")
    try:
        measure = [measure_from_name(n) for n in names]
    except (TypeError, ValueError) as e:
        raise bad("measures", str(e)) from None
    fixed = data.get("fixed", {})
    if not isinstance(fixed, dict):
        raise bad("fixed", "must be a table of parameters")
    if ("grid" in data) == ("runs" in data):
        raise ValueError(f"{path}: give either a [grid] table or [[runs]] tables (one of them)")
    try:
        if "grid" in data:
            if not isinstance(data["grid"], dict) or not data["grid"]:
                raise bad("grid", "must be a table of lists")
            clash = sorted(set(fixed) & set(data["grid"]))
            if clash:
                raise bad("fixed", f"{clash} are also in [grid]")
            grid: Any = dict(fixed, **data["grid"])
            expand_grid(grid)
        else:
            if not isinstance(data["runs"], list) or not all(isinstance(r, dict) for r in data["runs"]):
                raise bad("runs", "must be an array of tables ([[runs]])")
            grid = [dict(fixed, **r) for r in data["runs"]]
            expand_grid(grid)
    except (TypeError, ValueError) as e:
        if str(e).startswith(path):
            raise
        raise bad("grid" if "grid" in data else "runs", str(e)) from None
    kw: Dict[str, Any] = dict(make_sim=make_sim, grid=grid, frames=frames, measure=measure,
                              name=os.path.splitext(os.path.basename(path))[0])
    for k, kind in (("seeds", None), ("threads_per_run", int), ("workers", int), ("client", str), ("out", str),
                    ("results", str)):
        if k in data:
            v = data[k]
            if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise bad(k, f"must be a positive integer, got {v!r}")
            if kind is str and not isinstance(v, str):
                raise bad(k, f"must be a string, got {v!r}")
            if k == "seeds" and not (isinstance(v, int) and not isinstance(v, bool) and v > 0
                                     or isinstance(v, list) and v and all(isinstance(s, int) for s in v)):
                raise bad(k, f"must be a positive count or a list of ints, got {v!r}")
            kw[k] = v
    return kw


def run_toml(path, **overrides):
    """Run the sweep a sweep file describes (:func:`read_toml`); ``overrides`` replace its
    keys (``frames``, ``client``, ``out``, ...).  Returns ``(results, settings)``: the DataFrame and
    the settings used (``out`` defaults to ``out/<file name>``, ``results`` to ``<out>/results.csv``)."""
    kw = read_toml(path)
    kw.update({k: v for k, v in overrides.items() if v is not None})
    kw.setdefault("out", os.path.join("out", kw["name"]))
    kw.setdefault("results", os.path.join(kw["out"], "results.csv"))
    args = {k: v for k, v in kw.items() if k not in ("name", "results")}
    return sweep(**args), kw


def write_table(results, path) -> str:
    """Write a sweep's DataFrame to ``path`` (``.csv``, or ``.parquet`` with pyarrow), atomically."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".csv", ".parquet", ".pq"):
        raise ValueError(f"results must be a .csv or .parquet file, got {path!r}")
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=ext)
    os.close(fd)
    try:
        if ext == ".csv":
            results.to_csv(tmp, index=False)
        else:
            try:
                results.to_parquet(tmp, index=False)
            except ImportError as e:
                raise ImportError(f"writing {path} needs a Parquet engine: pip install pyarrow ({e})") from None
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# ``vp.sweep(...)`` calls :func:`sweep` and ``vp.sweep.BallDrag`` is this module's: the package
# exports the module itself (importing a submodule rebinds the package's attribute to it anyway),
# so the module is made callable.
class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
__signature__ = inspect.signature(sweep)
