"""The presentation layer: drag fits, plots, animations, exporters and the command line.

Small scenes only (a few seconds in all); matplotlib runs headless (Agg, Figure API)."""
import json
import math
import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("VORTONPY_NO_PROGRESS", "1")

import numpy as np
import pytest

import vortonpy as vp
from vortonpy import cli, export, plot
from vortonpy.animate import Renderer, animate, ffmpeg_works

R, M, RHO0 = 0.2, 0.2, 1.0


def small_ball(**kw):
    kw = {"vortons": 64, "tracers": 2000, **kw}
    return vp.scenes.ball_through_smoke(**kw)


@pytest.fixture(scope="module")
def stepped():
    """A small ball-through-smoke stepped 10 frames, with its History."""
    sim = small_ball()
    hist = plot.History(sim)
    sim.step(10, callback=hist, every=1, progress=False)
    return sim, hist


# ------------------------------------------------------------------ drag fit
def synthetic(k, v0=5.0, n=200, t1=3.0):
    t = np.linspace(0.0, t1, n)
    return t, 1.0 / (1.0 / v0 + k * t)


def cd_of(k):
    return 2 * M * k / (RHO0 * math.pi * R ** 2)


def test_fit_drag_recovers_known_cd():
    k = RHO0 * 0.45 * math.pi * R ** 2 / (2 * M)  # the slope of Cd = 0.45
    t, v = synthetic(k)
    fit = plot.fit_drag(t, v, radius=R, mass=M, rho0=RHO0)
    assert abs(fit["cd"] - 0.45) < 1e-6
    assert abs(fit["slope"] - k) < 1e-9
    assert abs(fit["intercept"] - 0.2) < 1e-9
    assert fit["r2"] > 1 - 1e-9
    assert fit["n"] == len(t)


def test_fit_drag_distinguishes_a_different_slope():
    k = RHO0 * 0.45 * math.pi * R ** 2 / (2 * M)
    t, v = synthetic(2 * k)
    fit = plot.fit_drag(t, v, radius=R, mass=M, rho0=RHO0)
    assert abs(fit["cd"] - 0.9) < 1e-6
    assert abs(fit["cd"] - 0.45) > 0.4


def test_fit_drag_skips_bad_samples_and_needs_two():
    k = 0.2
    t, v = synthetic(k)
    v = v.copy()
    v[5], v[7], v[9] = np.nan, 0.0, -1.0
    fit = plot.fit_drag(t, v, R, M)
    assert fit["n"] == len(t) - 3
    assert abs(fit["cd"] - cd_of(k)) < 1e-6
    assert math.isnan(plot.fit_drag([0.0], [1.0], R, M)["cd"])
    with pytest.raises(ValueError):
        plot.fit_drag([0, 1], [1.0], R, M)


# ------------------------------------------------------------------ plots
def test_history_records_bodies_and_diagnostics(stepped):
    sim, hist = stepped
    assert len(hist) == 11
    assert hist.time.shape == (11,) and hist.time[0] == 0.0
    assert np.isclose(hist.time[-1], sim.time)
    assert hist.body_position[0].shape == (11, 3)
    assert hist.body_velocity[0].shape == (11, 3)
    assert hist.body_angular_velocity[0].shape == (11, 3)
    assert np.allclose(hist.body_velocity[0][0], (5, 0, 0))
    assert np.allclose(hist.body_position[0][-1], sim.bodies[0].position)
    d = hist.diagnostics
    assert d["enstrophy"].shape == (11,)
    assert d["linear_impulse"].shape == (11, 3)
    assert hist.body_in_contact(0).shape == (11,)


def test_drag_curve_figure_saves(stepped, tmp_path):
    from matplotlib.figure import Figure
    _, hist = stepped
    fig = plot.drag_curve(hist)
    assert isinstance(fig, Figure)
    assert "cd" in fig.drag_fit
    p = tmp_path / "drag.png"
    fig.savefig(p)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # arrays instead of a History, drawn into a given Axes
    t, v = synthetic(0.3)
    fig2 = Figure()
    ax = fig2.add_subplot()
    out = plot.drag_curve((t, v, 5 * t), radius=R, mass=M, ax=ax)
    assert out is fig2 and abs(out.drag_fit["cd"] - cd_of(0.3)) < 1e-6
    out.savefig(tmp_path / "drag2.png")


def test_snapshot_plots(stepped, tmp_path):
    sim, hist = stepped
    for i, fig in enumerate([plot.tracers(sim), plot.tracers(sim, color="speed", view="xy"),
                             plot.tracers(sim, color=None, view="3d"), plot.vorticity_slice(sim),
                             plot.vorticity_slice(sim, axis="z", component="z", resolution=32),
                             plot.diagnostics(hist), plot.motion(hist)]):
        fig.savefig(tmp_path / f"p{i}.png")
        assert (tmp_path / f"p{i}.png").stat().st_size > 1000


def test_history_plots_refuse_a_sim_and_say_how_to_record(stepped):
    sim, hist = stepped
    for func in (plot.diagnostics, plot.motion, plot.drag_curve):
        with pytest.raises(TypeError, match=r"History.*sim\.step\(300, callback=hist\)"):
            func(sim)
    with pytest.raises(TypeError, match="needs a vortonpy.plot.History, got int"):
        plot.diagnostics(3)
    with pytest.raises(TypeError, match="History records a vortonpy.Sim, got History"):
        plot.History().record(hist)


def test_snapshot_plots_refuse_a_history(stepped):
    _, hist = stepped
    for func in (plot.tracers, plot.vorticity_slice, plot.vorticity_field):
        with pytest.raises(TypeError, match="Pass the Sim"):
            func(hist)
    with pytest.raises(TypeError, match="needs a vortonpy.Sim, got str"):
        plot.tracers("sim")


def test_fit_drag_anchored_passes_through_the_first_sample():
    k = 0.3
    t, v = synthetic(k)
    v = v * (1 + 0.01 * np.sin(40 * t))  # noise that a free intercept would follow
    v[0] = 5.0
    fit = plot.fit_drag(t, v, R, M, anchor=True)
    assert fit["anchored"] and fit["intercept"] == pytest.approx(0.2, abs=1e-12)
    assert fit["cd"] == pytest.approx(cd_of(k), rel=0.02)
    assert fit["max_error"] < 0.02


def test_drag_fit_window_stops_where_quadratic_drag_stops():
    """Quadratic drag until t = 1, then coasting at constant speed: the window is the
    quadratic stretch (to within the samples the 3% tolerance lets through), and a contact
    mask that ends earlier ends it there."""
    k = 0.3
    t = np.linspace(0, 3, 301)
    v = 1.0 / (0.2 + k * np.minimum(t, 1.0))
    w = plot.drag_fit_window(t, v)
    assert w[0] and w[90] and not w[200]
    end = t[w][-1]
    assert 1.0 <= end < 1.5
    fit = plot.fit_drag(t, v, R, M, mask=w, anchor=True)
    assert fit["cd"] == pytest.approx(cd_of(k), rel=0.05)
    contact = t <= 0.5
    assert t[plot.drag_fit_window(t, v, mask=contact)][-1] == pytest.approx(0.5)
    assert not plot.drag_fit_window(t, -v).any()


def test_drag_curve_starts_at_the_data_and_labels_the_window_and_the_coast(tmp_path):
    """With the articles' contact rule a ball through a short box of smoke leaves it within the
    run and then coasts: the figure's fit starts at the launch speed, and the fit window and
    the coasting stretch are labelled."""
    sim = small_ball(box=(1.0, 0.5, 0.5), tracers=500, body_coupling="articles")
    hist = plot.History(sim)
    sim.step(30, callback=hist, progress=False)
    fig = plot.drag_curve(hist)
    fit, dd = fig.drag_fit, fig.drag_data
    assert 1.0 / fit["intercept"] == pytest.approx(5.0)
    assert fit["t0"] == 0.0 and fit["window"] == "auto" and fit["reynolds"] == pytest.approx(200.0)
    t_left = dd.left_fluid()
    assert t_left is not None and fit["t1"] <= t_left
    speed_after = dd.speed[dd.time > t_left + 2 * sim.dt]
    assert np.ptp(speed_after) < 1e-9 * speed_after.max()
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "fit\nwindow" in texts and "left the smoke" in texts and "Cd = " in texts
    assert fig.axes[0].get_ylabel() == "speed |v| [L/T]" and fig.axes[-1].get_xlabel() == "time t [T]"
    fig.savefig(tmp_path / "drag.png")


def test_sphere_drag_coefficient_matches_the_standard_curve():
    """The standard sphere drag curve's values: Cd 2.6 at Re 20, 1.09 at 100, 0.65-0.68 at
    300, 0.44-0.47 at 1000 (Brown and Lawler above Re 800)."""
    cd = plot.sphere_drag_coefficient
    assert cd(20) == pytest.approx(2.6, abs=0.05)
    assert cd(100) == pytest.approx(1.09, abs=0.01)
    assert 0.65 <= cd(300, "brown-lawler") <= 0.68
    assert 0.44 <= cd(1000) <= 0.47
    with pytest.raises(ValueError, match="law must be"):
        cd(100, "stokes")


def test_sphere_speed_starts_with_the_drag_deceleration():
    v0, nu = 5.0, 0.01
    t = np.linspace(0, 1e-3, 3)
    v = plot.sphere_speed(t, v0, R, M, RHO0, nu)
    m_eff = M + 0.5 * RHO0 * 4 / 3 * math.pi * R ** 3
    decel = 0.5 * RHO0 * plot.sphere_drag_coefficient(2 * R * v0 / nu) * math.pi * R ** 2 * v0 ** 2 / m_eff
    assert (v0 - v[1]) / t[1] == pytest.approx(decel, rel=1e-3)
    assert np.all(np.diff(plot.sphere_speed(np.linspace(0, 10, 50), v0, R, M, RHO0, nu)) < 0)


def test_diagnostics_heat_per_part_and_constant_panels_named():
    sim = vp.scenes.hot_ball(vortons=64, tracers=200, tracer_rate=100, vorton_rate=30)
    hist = plot.History(sim)
    sim.step(5, callback=hist, progress=False)
    fig = plot.diagnostics(hist)
    heat = [a for a in fig.axes if a.get_title().startswith("heat change")]
    assert len(heat) == 1
    lines = {ln.get_label(): ln.get_ydata() for ln in heat[0].lines}
    assert set(lines) == {"fluid", "bodies", "total"}
    assert lines["fluid"][0] == 0 and lines["fluid"][-1] > 0 and lines["bodies"][-1] < 0
    # the total is conserved: its change and fluid + bodies' are both rounding of the ball's
    # heat Cb (Tb - 1) ~ 1e6, far below the heat that moved
    assert abs(lines["total"][-1]) < 1e-8 * lines["fluid"][-1]
    assert lines["total"][-1] == pytest.approx(lines["fluid"][-1] + lines["bodies"][-1], abs=1e-8 * lines["fluid"][-1])
    assert all(a.get_ylabel() for a in fig.axes)
    assert "simulation units" in fig._supxlabel.get_text()


def test_diagnostics_leaves_out_what_does_not_change(stepped):
    _, hist = stepped  # a ball at ambient temperature: no heat moves
    fig = plot.diagnostics(hist)
    assert not any(a.get_title().startswith("heat") for a in fig.axes)
    assert "unchanged, not drawn: heat" in fig._supxlabel.get_text()
    with pytest.raises(ValueError, match="none of the keys"):
        plot.diagnostics(hist, keys=("nonsense",))


def test_snapshot_figures_fit_their_content(stepped):
    """A long thin view gets a long thin figure, not a tall one with empty margins."""
    sim, _ = stepped
    w, h = plot.tracers(sim, view="xz").get_size_inches()
    assert w / h > 2.0
    w, h = plot.tracers(sim, view="yz").get_size_inches()
    assert w / h < 2.0


def test_renderer_fit_view_frames_the_present_state():
    sim = small_ball(tracers=2000)
    r = Renderer(sim, size=(160, 90), label=False)
    wide = r.bounds
    sim.tracers.position[:] *= 0.25
    sim.bodies[0].position = (0.0, 0.0, 0.0)
    r.fit_view(sim)
    assert r.bounds[1] - r.bounds[0] < 0.5 * (wide[1] - wide[0])


def test_vorticity_splat_matches_integral():
    """The splat is a normalised kernel: one vorton's field integrates (in 3D) to its strength."""
    sim = vp.Sim(gravity=(0, 0, 0))
    sim.add_vortons([[0.0, 0.0, 0.0]], [[0.0, 2.0, 0.0]], 0.1)
    a = 2.0 * 4 / 3 * math.pi * 0.1 ** 3
    zs = np.linspace(-0.5, 0.5, 41)
    total = 0.0
    for y in zs:
        f, (h0, h1, v0, v1) = plot.vorticity_field(sim, "y", y, 64, bounds=(-0.5, 0.5, -0.5, 0.5))
        total += f[..., 1].sum() * (h1 - h0) * (v1 - v0) / f[..., 1].size * (zs[1] - zs[0])
    assert abs(total - a) / a < 1e-3


# ------------------------------------------------------------------ animation
def test_animate_gif_frame_count(tmp_path):
    from PIL import Image
    sim = small_ball()
    hist = plot.History()
    p = animate(sim, 6, tmp_path / "a.gif", size=(96, 64), history=hist, progress=False)
    assert os.path.getsize(p) > 0
    with Image.open(p) as im:
        assert im.n_frames == 6
        assert im.size == (96, 64)
    assert sim.frame == 6
    assert len(hist) == 7  # initial state + one per step


def test_animate_steps_per_frame_and_history(tmp_path):
    sim = small_ball()
    seen = []
    animate(sim, 3, tmp_path / "b.gif", steps_per_frame=2, size=(64, 48), callback=lambda s: seen.append(s.frame),
            progress=False)
    assert sim.frame == 6 and seen == [1, 2, 3, 4, 5, 6]


@pytest.mark.skipif(not ffmpeg_works(), reason="imageio-ffmpeg cannot write MP4 here")
def test_animate_mp4(tmp_path):
    import imageio.v2 as iio
    sim = small_ball()
    p = animate(sim, 5, tmp_path / "a.mp4", size=(97, 61), progress=False)  # odd sizes are made even
    assert os.path.getsize(p) > 0
    with iio.get_reader(p) as r:
        frames = [f for f in r]
    assert len(frames) == 5 and frames[0].shape == (62, 98, 3)


def test_renderer_draws_smoke_and_bodies():
    sim = small_ball(tracers=5000)
    r = Renderer(sim, size=(160, 90), label=False)
    img = np.asarray(r.render(sim)).astype(int)
    assert img.shape == (90, 160, 3)
    bg = img[0, 0]
    cx, cy = r.to_pixel(sim.bodies[0].position)
    assert tuple(img[int(cy), int(cx)]) == (235, 140, 60)  # the ball's disc
    assert (np.abs(img - bg).sum(axis=2) > 60).mean() > 0.05  # some smoke
    with pytest.raises(ValueError):
        animate(sim, 2, "x.avi.txt")


# ------------------------------------------------------------------ export
def read_ply(path):
    with open(path, "rb") as fh:
        data = fh.read()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    assert header[0] == "ply" and header[1] == "format binary_little_endian 1.0"
    n = int(next(line.split()[2] for line in header if line.startswith("element vertex")))
    props = [line.split()[2] for line in header if line.startswith("property")]
    assert all(line.split()[1] == "float" for line in header if line.startswith("property"))
    arr = np.frombuffer(data[end:], dtype=[(p, "<f4") for p in props])
    assert len(arr) == n
    return arr


def test_ply_roundtrip(tmp_path):
    pts = np.arange(12, dtype=float).reshape(4, 3)
    vel = -pts
    dens = np.array([0.5, 1.5, 2.5, 3.5])
    p = export.write_ply(tmp_path / "a.ply", pts, {"velocity": vel, "density": dens})
    arr = read_ply(p)
    assert arr.dtype.names == ("x", "y", "z", "velocity_x", "velocity_y", "velocity_z", "density")
    assert arr["y"][2] == 7.0 and arr["velocity_z"][3] == -11.0 and arr["density"][1] == 1.5
    with pytest.raises(ValueError):
        export.write_ply(tmp_path / "b.ply", pts, {"bad": np.zeros(3)})


def test_vtk_header_and_data(tmp_path):
    pts = np.arange(12, dtype=float).reshape(4, 3)
    p = export.write_vtk(tmp_path / "a.vtk", pts, {"vorticity": -pts, "radius": np.full(4, 0.1)})
    data = open(p, "rb").read()
    lines = data.split(b"\n")
    assert lines[0] == b"# vtk DataFile Version 3.0"
    assert lines[2] == b"BINARY" and lines[3] == b"DATASET POLYDATA" and lines[4] == b"POINTS 4 float"
    body = np.frombuffer(data[data.index(b"POINTS 4 float\n") + 15:][:48], dtype=">f4")
    assert np.array_equal(body, pts.ravel().astype(np.float32))
    for token in (b"VERTICES 4 8", b"POINT_DATA 4", b"VECTORS vorticity float", b"SCALARS radius float 1"):
        assert token in data
    q = export.write_vtk(tmp_path / "b.vtk", pts, {"radius": np.full(4, 0.1)}, binary=False)
    text = open(q).read().splitlines()
    assert text[2] == "ASCII" and text[5] == "0 1 2" and "LOOKUP_TABLE default" in text


def test_export_frame(stepped, tmp_path):
    sim, _ = stepped
    paths = export.export_frame(sim, tmp_path / "f" / "frame_00010")
    assert sorted(os.path.basename(p) for p in paths) == sorted(
        f"frame_00010_{k}.{f}" for k in ("tracers", "vortons") for f in ("ply", "vtk"))
    arr = read_ply(tmp_path / "f" / "frame_00010_vortons.ply")
    assert len(arr) == len(sim.vortons)
    assert {"vorticity_x", "radius", "density", "temperature"} <= set(arr.dtype.names)
    assert np.allclose(arr["radius"], sim.vortons.radius, rtol=1e-6)


# ------------------------------------------------------------------ command line
def test_cli_run(tmp_path):
    out = tmp_path / "run"
    rc = cli.main(["run", "ball_through_smoke", "--frames", "5", "--out", str(out), "--set", "vortons=64",
                   "--set", "tracers=2000", "--format", "gif", "--size", "96x64", "--export", "ply",
                   "--export-every", "5"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["frames"] == 5 and s["vortons"] > 0 and s["overrides"] == {"vortons": 64, "tracers": 2000}
    assert "cd" in s and s["ms_per_frame"] > 0 and "enstrophy" in s["final_diagnostics"]
    for f in ("drag.png", "diagnostics.png", "ball_through_smoke.gif"):
        assert (out / f).stat().st_size > 0, f
    assert (out / "frames" / "frame_00005_tracers.ply").exists()


def test_cli_no_animation_default_format(tmp_path):
    out = tmp_path / "run2"
    rc = cli.main(["run", "ball_through_smoke", "--frames", "3", "--out", str(out), "--set", "vortons=64",
                   "--set", "tracers=500", "--no-animation"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["animation"] is None and s["frames"] == 3


def test_cli_list_and_errors(tmp_path, capsys):
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in vp.scenes.SCENES)
    assert cli.main(["run", "no_such_scene", "--out", str(tmp_path)]) == 2
    assert "unknown scene" in capsys.readouterr().err
    assert cli.main(["run", "ball_through_smoke", "--set", "oops"]) == 2
    if not hasattr(vp.scenes, "from_toml"):
        assert cli.main(["run", str(tmp_path / "x.toml"), "--out", str(tmp_path)]) == 2
        assert "toml" in capsys.readouterr().err
