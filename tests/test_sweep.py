"""vp.sweep: a parameter sweep on a 2-worker Dask LocalCluster gives a serial run's numbers,
survives a worker killed mid-run, resumes an interrupted sweep running only what is missing,
and reports a run that blows up in its own row while the others complete.

Tiny scenes (64 vortons, no tracers, 15 frames): the whole file takes seconds, most of it the
cluster's start."""
import functools
import json
import os
import signal
import sys
import threading
import time

os.environ.setdefault("VORTONPY_NO_PROGRESS", "1")

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (a dependency of distributed)

import vortonpy as vp  # noqa: E402
from vortonpy import cli  # noqa: E402
from _child import run_child  # noqa: E402

# the workers receive this file's functions by value: they need not import the test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FRAMES = 15
GRID = {"speed": [2.0, 5.0], "viscosity": [0.005, 0.01, 0.02]}
MEASURE = [vp.sweep.Ball(), vp.sweep.Diagnostics(["enstrophy", "linear_impulse"])]


def small(speed=5.0, viscosity=0.01, noise=0.5, seed=0):
    """ball_through_smoke at 64 vortons without tracers: about a millisecond a frame."""
    return vp.scenes.ball_through_smoke(speed=speed, viscosity=viscosity, noise=noise, seed=seed, vortons=64,
                                        tracers=0)


def counted(log_dir, seed=0, **params):
    """``small`` that logs each run it builds; raises KeyboardInterrupt (a Ctrl-C) at the 4th
    run while the file ``interrupt`` exists."""
    log = os.path.join(log_dir, "runs.log")
    with open(log, "a") as fh:
        fh.write(json.dumps(params, sort_keys=True) + "\n")
    if os.path.exists(os.path.join(log_dir, "interrupt")):
        with open(log) as fh:
            if len(fh.readlines()) >= 4:
                raise KeyboardInterrupt
    return small(seed=seed, **params)


class Marker:
    """A recorder that measures nothing: at frame 3 it writes ``started-<pid>`` into its folder
    (a run is under way in that process) and from then on slows each frame by 20 ms, so that
    the run is still going when the test kills its process."""

    def __init__(self, folder):
        self.folder = folder

    def sample(self, sim):
        if sim.frame == 3:
            with open(os.path.join(self.folder, f"started-{os.getpid()}"), "w"):
                pass
        if sim.frame >= 3:
            time.sleep(0.02)

    def __call__(self, sim):
        return {}


def same(a, b, drop=("wall_s",)):
    pd.testing.assert_frame_equal(a.drop(columns=list(drop)).reset_index(drop=True),
                                  b.drop(columns=list(drop)).reset_index(drop=True))


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def serial():
    return vp.sweep(small, GRID, frames=FRAMES, measure=MEASURE, client="serial")


# ------------------------------------------------------------------ the table
def test_serial_table_has_a_row_per_run(serial):
    assert len(serial) == 6
    assert list(serial.columns[:3]) == ["speed", "viscosity", "seed"]
    assert list(serial.columns[-5:]) == ["status", "error", "frames", "wall_s", "run_id"]
    assert (serial["status"] == "ok").all() and serial["error"].isna().all()
    assert (serial["frames"] == FRAMES).all() and (serial["seed"] == 0).all()  # small's default seed
    # the product, first key slowest
    assert serial["speed"].tolist() == [2.0] * 3 + [5.0] * 3
    assert serial["viscosity"].tolist() == [0.005, 0.01, 0.02] * 2
    # the measures are the runs' own: the faster ball got further
    assert (serial.loc[serial.speed == 5.0, "ball_x"].to_numpy() > serial.loc[serial.speed == 2.0, "ball_x"].to_numpy()
            + 0.5).all()
    assert {"ball_x", "ball_speed", "enstrophy", "linear_impulse_x", "linear_impulse_z"} <= set(serial.columns)
    assert serial["run_id"].nunique() == 6


def test_a_row_matches_the_same_run_done_by_hand(serial):
    sim = small(speed=5.0, viscosity=0.01)
    sim.threads = 1
    sim.step(FRAMES)
    row = serial[(serial.speed == 5.0) & (serial.viscosity == 0.01)].iloc[0]
    assert row["ball_x"] == sim.bodies[0].position[0]
    assert row["enstrophy"] == sim.diagnostics()["enstrophy"]


def test_expand_grid():
    assert vp.sweep.expand_grid({"a": [1, 2], "b": ["x", "y"], "c": 7}) == [
        {"a": 1, "b": "x", "c": 7}, {"a": 1, "b": "y", "c": 7}, {"a": 2, "b": "x", "c": 7}, {"a": 2, "b": "y", "c": 7}]
    assert vp.sweep.expand_grid([{"a": np.float64(0.5)}, {"a": 1, "b": np.arange(2)}]) == [
        {"a": 0.5}, {"a": 1, "b": [0, 1]}]
    with pytest.raises(ValueError, match="empty"):
        vp.sweep.expand_grid({"a": []})
    with pytest.raises(ValueError, match="clash"):
        vp.sweep.expand_grid({"status": [1]})
    with pytest.raises(TypeError, match="dict of lists or a list of dicts"):
        vp.sweep.expand_grid("speed")
    with pytest.raises(TypeError, match="number, bool, string"):
        vp.sweep.expand_grid({"a": [object()]})


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="frames"):
        vp.sweep(small, GRID, frames=-1, client="serial")
    with pytest.raises(ValueError, match="threads_per_run"):
        vp.sweep(small, GRID, frames=1, client="serial", threads_per_run=0)
    with pytest.raises(ValueError, match="save_state=True needs out="):
        vp.sweep(small, GRID, frames=1, client="serial", save_state=True)
    with pytest.raises(TypeError, match="takes a seed"):
        vp.sweep(lambda speed: small(speed), {"speed": [1.0]}, frames=1, client="serial", seeds=2)
    with pytest.raises(ValueError, match="not both"):
        vp.sweep(small, {"seed": [1, 2]}, frames=1, client="serial", seeds=2)
    with pytest.raises(TypeError, match="measure"):
        vp.sweep(small, GRID, frames=1, client="serial", measure=3)


def test_seeds_make_an_ensemble():
    df = vp.sweep(small, {"speed": [5.0]}, frames=5, measure=vp.sweep.Ball(), client="serial", seeds=[0, 1, 0])
    assert df["seed"].tolist() == [0, 1]  # a run asked for twice runs once
    df2 = vp.sweep(small, {"speed": [5.0]}, frames=5, measure=vp.sweep.Ball(), client="serial", seeds=2)
    same(df, df2)
    assert df["ball_vx"][0] != df["ball_vx"][1]  # the noise differs between seeds


def test_measure_every_samples_a_time_series():
    def track(sim):
        return {"t": sim.time, "x": sim.bodies[0].position[0]}
    df = vp.sweep(small, {"speed": [2.0, 5.0]}, frames=7, measure=track, measure_every=3, client="serial")
    assert [len(x) for x in df["x"]] == [4, 4]  # frames 0, 3, 6 and the end, 7
    np.testing.assert_allclose(df["t"][0], np.array([0, 3, 6, 7]) / 30)
    end = vp.sweep(small, {"speed": [2.0, 5.0]}, frames=7, measure=track, client="serial")
    assert [x[-1] for x in df["x"]] == end["x"].tolist()  # sampling does not change the run
    long = df.explode(["t", "x"])
    assert len(long) == 8


def test_measure_errors_fail_their_row():
    df = vp.sweep(small, {"speed": [5.0]}, frames=2, client="serial",
                  measure=[vp.sweep.Ball(), lambda sim: {"ball_x": 1.0}])
    assert df["status"][0] == "failed" and "already a column" in df["error"][0]
    df = vp.sweep(small, {"speed": [5.0]}, frames=2, client="serial", measure=lambda sim: 3.0)
    assert df["status"][0] == "failed" and "must return a dict" in df["error"][0]


# ------------------------------------------------------------------ on the cluster
def test_cluster_equals_serial(client, serial, tmp_path):
    df = vp.sweep(small, GRID, frames=FRAMES, measure=MEASURE, client=client, out=tmp_path)
    same(df, serial)
    hosts = {json.load(open(tmp_path / "runs" / f"{r}.json"))["host"] for r in df["run_id"]}
    assert hosts <= set(client.scheduler_info()["workers"]) and hosts  # ran on the workers


def test_a_scheduler_address_is_a_client(client, serial, capsys):
    df = vp.sweep(small, {"speed": [5.0], "viscosity": [0.01]}, frames=FRAMES, measure=MEASURE,
                  client=client.scheduler.address, progress=True)
    same(df, serial[(serial.speed == 5.0) & (serial.viscosity == 0.01)])
    err = capsys.readouterr().err
    assert "on 2 Dask workers; dashboard: http" in err and "1/1" in err  # the link and the bar


def test_a_killed_worker_is_replaced_and_its_run_retried(client, serial, tmp_path):
    pids = set(client.run(os.getpid).values())
    killed = []

    def kill_first_started():
        t_end = time.time() + 60
        while time.time() < t_end and not killed:
            for name in os.listdir(tmp_path):
                if name.startswith("started-"):
                    pid = int(name.split("-")[1])
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.005)

    killer = threading.Thread(target=kill_first_started, daemon=True)
    killer.start()
    df = vp.sweep(small, GRID, frames=FRAMES, measure=MEASURE + [Marker(str(tmp_path))], client=client)
    killer.join()
    assert len(killed) == 1 and killed[0] in pids
    same(df, serial)  # every row, the killed run's too, as in the serial sweep
    # the nanny started a new worker process in place of the one killed
    client.wait_for_workers(2, timeout=30)
    now = set(client.run(os.getpid).values())
    assert killed[0] not in now and len(now) == 2


def test_an_interrupted_sweep_resumes_with_only_the_missing_runs(client, serial, tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    make = functools.partial(counted, str(logs))
    (logs / "interrupt").touch()
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C during the 4th run
        vp.sweep(make, GRID, frames=FRAMES, measure=MEASURE, client="serial", out=out)
    finished = sorted(os.listdir(out / "runs"))
    assert len(finished) == 3
    first = (logs / "runs.log").read_text().splitlines()
    (logs / "interrupt").unlink()
    (logs / "runs.log").unlink()

    df = vp.sweep(make, GRID, frames=FRAMES, measure=MEASURE, client=client, out=out)
    ran = (logs / "runs.log").read_text().splitlines()
    every = [json.dumps(p, sort_keys=True) for p in vp.sweep.expand_grid(GRID)]
    assert first[:3] == every[:3] and sorted(ran) == sorted(every[3:])  # only the missing ones ran
    same(df, serial, drop=("wall_s", "run_id"))
    assert len(os.listdir(out / "runs")) == 6

    again = vp.sweep(make, GRID, frames=FRAMES, measure=MEASURE, client=client, out=out)
    assert len((logs / "runs.log").read_text().splitlines()) == 3  # nothing ran
    same(again, df, drop=())


def test_a_blow_up_is_a_row_with_its_error(client, serial, tmp_path):
    grid = [dict(speed=s, viscosity=v) for s in GRID["speed"] for v in GRID["viscosity"]]
    grid.insert(2, dict(speed=5.0, viscosity=0.01, noise=1e8))   # blows up in its first frame
    grid.insert(4, dict(speed=5.0, viscosity=-1.0))              # refused by Sim
    df = vp.sweep(small, grid, frames=FRAMES, measure=MEASURE, client=client, out=tmp_path)
    assert len(df) == 8
    blew, refused = df.iloc[2], df.iloc[4]
    assert blew["status"] == "failed" and blew["error"].startswith("FloatingPointError (stepping, after frame 0)")
    assert blew["frames"] == 0 and np.isnan(blew["ball_x"])
    assert refused["status"] == "failed" and "viscosity" in refused["error"] and "make_sim" in refused["error"]
    rest = df.drop(index=[2, 4]).drop(columns="noise")
    assert (rest["status"] == "ok").all()
    same(rest, serial)
    rec = json.load(open(tmp_path / "runs" / f"{blew['run_id']}.json"))
    assert rec["status"] == "failed" and "FloatingPointError" in rec["error"]


# ------------------------------------------------------------------ files, imports, the command line
def test_out_holds_a_record_and_the_final_state(tmp_path):
    df = vp.sweep(small, {"speed": [5.0]}, frames=4, measure=vp.sweep.Ball(), client="serial", out=tmp_path,
                  save_state=True)
    rid = df["run_id"][0]
    rec = json.load(open(tmp_path / "runs" / f"{rid}.json"))
    assert rec["params"] == {"speed": 5.0} and rec["seed"] == 0 and rec["frames"] == 4 and rec["threads"] == 1
    assert rec["measures"]["ball_x"] == df["ball_x"][0]
    sim = vp.Sim.load(tmp_path / rec["state"])
    assert sim.frame == 4 and sim.bodies[0].position[0] == df["ball_x"][0]
    assert not [n for n in os.listdir(tmp_path / "runs") if n.startswith(".tmp")]


def test_public_names_have_docstrings():
    import inspect
    for name in vp.sweep.__all__:
        obj = getattr(vp.sweep, name)
        if callable(obj):
            assert inspect.getdoc(obj), name
            for attr in [a for a in vars(obj) if not a.startswith("_")] if inspect.isclass(obj) else []:
                if callable(getattr(obj, attr)):
                    assert inspect.getdoc(getattr(obj, attr)), f"{name}.{attr}"
    assert "sweep" in inspect.getdoc(vp.sweep)


def test_import_vortonpy_does_not_import_dask():
    code = ("import sys, vortonpy as vp; assert 'dask' not in sys.modules and 'pandas' not in sys.modules; "
            "assert callable(vp.sweep) and vp.sweep.sweep is not None; "
            "import vortonpy.sweep as m; assert m is vp.sweep; print(vp.__file__)")
    r = run_child(code)  # from a neutral folder, importing this process's vortonpy
    assert r.returncode == 0, r.stderr
    assert os.path.samefile(r.stdout.strip(), vp.__file__)


def test_missing_dependencies_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r'needs dask\[distributed\]: pip install "vortonpy\[sweep\]"'):
        vp.sweep(small, GRID, frames=1)
    vp.sweep(small, {"speed": [1.0]}, frames=1, client="serial")  # serial runs need no Dask
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r'needs pandas: pip install "vortonpy\[sweep\]"'):
        vp.sweep(small, GRID, frames=1, client="serial")


SWEEP_FILE = """\
scene = "ball_through_smoke"
frames = 6
measures = ["ball", "ball_drag", "diagnostics:enstrophy", "ms_per_frame"]
client = "serial"

[fixed]
vortons = 64
tracers = 0

[grid]
speed = [2.0, 5.0]
noise = [0.5, 1e8]
"""


def test_command_line_sweep_writes_the_table_and_resumes(tmp_path, capsys):
    f = tmp_path / "drag.toml"
    f.write_text(SWEEP_FILE)
    out, table = tmp_path / "o", tmp_path / "drag.csv"
    code = cli.main(["sweep", str(f), "--out", str(out), "--results", str(table)])
    assert code == cli.EXIT_SIM_FAILED  # two runs blew up
    df = pd.read_csv(table)
    assert len(df) == 4 and df["status"].tolist() == ["ok", "failed", "ok", "failed"]
    assert {"ball_x", "cd", "cd_r2", "reynolds", "enstrophy", "ms_per_frame"} <= set(df.columns)
    ok = df[df.status == "ok"]
    assert (ok["cd"] > 0).all() and (ok["reynolds"] == ok["speed"] * 0.4 / 0.01).all()
    assert "FloatingPointError" in capsys.readouterr().err
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    assert len(mtimes) == 4
    assert cli.main(["sweep", str(f), "--out", str(out), "--results", str(table)]) == cli.EXIT_SIM_FAILED
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == mtimes  # resumed: nothing re-run
    same(pd.read_csv(table), df)


def test_command_line_sweep_rejects_a_bad_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "bad.toml"
    f.write_text(SWEEP_FILE.replace('measures = [', 'measures = ["lift", '))
    assert cli.main(["sweep", str(f)]) == cli.EXIT_USAGE
    assert "unknown measure 'lift'" in capsys.readouterr().err
    f.write_text("colour = 1\n" + SWEEP_FILE)
    assert cli.main(["sweep", str(f)]) == cli.EXIT_USAGE
    assert "unknown keys ['colour']" in capsys.readouterr().err
    assert cli.main(["sweep", str(tmp_path / "missing.toml")]) == cli.EXIT_USAGE
    assert "no such file" in capsys.readouterr().err


def test_a_sweep_file_may_name_a_scene_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    vp.scenes.to_toml("ball_through_smoke", "ball.toml", vortons=64, tracers=0)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "visc.toml").write_text('scene = "../ball.toml"\nframes = 5\nmeasures = ["ball"]\n'
                                                 'client = "serial"\n[grid]\nviscosity = [0.005, 0.02]\n')
    assert cli.main(["sweep", "sub/visc.toml"]) == cli.EXIT_OK
    df = pd.read_csv(tmp_path / "out" / "visc" / "results.csv")
    assert df["status"].tolist() == ["ok", "ok"] and df["seed"].tolist() == [0, 0]
    sim = vp.scenes.from_toml("ball.toml", viscosity=0.02, threads=1)
    sim.step(5)
    assert df["ball_x"][1] == pytest.approx(sim.bodies[0].position[0], rel=1e-15)


def heavy(speed=2.0, viscosity=0.02, seed=0):
    """``small`` with a ball sixty times the fluid it displaces: it keeps most of its speed."""
    return vp.scenes.ball_through_smoke(speed=speed, viscosity=viscosity, seed=seed, ball_mass=2.0, vortons=64,
                                        tracers=0)


def test_ball_drag_fits_after_the_start_with_the_added_mass():
    def track(sim):
        return {"t": sim.time, "v": sim.bodies[0].velocity[0]}
    measures = [vp.sweep.BallDrag(after=0.5), track]
    row = vp.sweep(heavy, {"speed": [2.0]}, frames=45, measure=measures, measure_every=1, client="serial").iloc[0]
    R, V = 0.2, 4 / 3 * np.pi * 0.2 ** 3
    t, v = np.asarray(row["t"]), np.asarray(row["v"])
    fit = vp.plot.fit_drag(t, v, R, 2.0 + V / 2, mask=t >= 0.5, viscosity=0.02)
    assert row["cd"] == pytest.approx(fit["cd"], rel=1e-12) and row["cd_samples"] == (t >= 0.5).sum()
    assert row["reynolds"] == pytest.approx(fit["reynolds"], rel=1e-12)
    # after the start-up the steady sphere's drag (Schiller-Naumann, Re 40) within 15%
    assert abs(row["cd"] / vp.plot.sphere_drag_coefficient(row["reynolds"]) - 1) < 0.15
    # without the added mass the same line gives a Cd smaller by M / (M + rho V / 2)
    bare = vp.sweep(heavy, {"speed": [2.0]}, frames=45, measure=vp.sweep.BallDrag(after=0.5, added_mass=0),
                    client="serial").iloc[0]
    assert bare["cd"] == pytest.approx(row["cd"] * 2.0 / (2.0 + V / 2), rel=1e-12)
    for bad, err in (({"after": "1"}, TypeError), ({"added_mass": -0.5}, ValueError),
                     ({"added_mass": "half"}, ValueError)):
        with pytest.raises(err, match=next(iter(bad))):
            vp.sweep.BallDrag(**bad)
