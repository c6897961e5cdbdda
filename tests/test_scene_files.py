"""TOML scene files: round trips of the built-in scenes, the CLI on a file, and named errors."""
import json
import os

import numpy as np
import pytest

import vortonpy as vp
from vortonpy import cli
from vortonpy.scene_files import read_toml

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, "examples", "my_scene.toml")


def _params(sim):
    p = sim.params()
    p.pop("threads")
    return p


@pytest.mark.parametrize("name", sorted(vp.scenes.SCENES))
def test_builtin_scene_round_trip(name, tmp_path):
    kw = dict(tracers=500)
    a = vp.scenes.SCENES[name](**kw)
    path = tmp_path / f"{name}.toml"
    text = vp.scenes.to_toml(name, path, **kw)
    assert path.read_text() == text
    b = vp.scenes.from_toml(path)
    assert _params(a) == _params(b)
    assert len(a.vortons) == len(b.vortons)
    assert len(a.tracers) == len(b.tracers)
    assert len(a.bodies) == len(b.bodies)
    assert len(a.emitters) == len(b.emitters)
    # the scene is defined as those blocks: the file builds it particle for particle
    for kind, fields in (("vortons", ("position", "vorticity", "radius", "density")),
                         ("tracers", ("position", "density"))):
        for f in fields:
            assert np.array_equal(getattr(getattr(a, kind), f), getattr(getattr(b, kind), f)), (kind, f)
    for x, y in zip(a.bodies, b.bodies):
        for attr in ("position", "velocity", "angular_velocity", "radius", "mass", "temperature", "fixed",
                     "gravity", "thermal_conductivity", "heat_capacity"):
            np.testing.assert_allclose(getattr(x, attr), getattr(y, attr), err_msg=attr)
    for e, f in zip(a.emitters, b.emitters):
        for k in ("center", "half_size", "vorton_rate", "tracer_rate", "vorton_radius", "vorticity", "density"):
            np.testing.assert_allclose(e[k], f[k], err_msg=k)
    # written again from the read-back scene: the same scene
    path2 = tmp_path / "again.toml"
    vp.scenes.to_toml(read_toml(path), path2)
    assert read_toml(path2) == read_toml(path)


def test_each_scene_is_defined_once():
    """scene_files builds scenes without importing vortonpy.scenes (no import circle), and the
    scene functions, their files and the command line read one definition: the blocks and
    run settings of scene_spec are the function's own spec and info."""
    import ast
    import inspect
    from vortonpy import scene_files
    tree = ast.parse(inspect.getsource(scene_files))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "scenes" not in imported and "cli" not in imported, imported
    for name, fn in vp.scenes.SCENES.items():
        spec = vp.scenes.scene_spec(name, tracers=10)
        assert spec == fn.spec(tracers=10)
        assert spec["run"] == dict(frames=fn.info.frames, view=fn.info.view, color=fn.info.color)
        sig = inspect.signature(fn)
        assert [p.name for p in fn.info.parameters] == [n for n in sig.parameters if n != "sim_kw"]
        assert all(sig.parameters[p.name].default == p.default for p in fn.info.parameters)
        assert fn.info.description and all(p.doc for p in fn.info.parameters)


def test_overrides_and_params(tmp_path):
    path = tmp_path / "ring.toml"
    vp.scenes.to_toml("vortex_ring", path, tracers=300, ring_radius=0.8, viscosity=0.003)
    sim = vp.scenes.from_toml(path, threads=1, dt=0.01, tracers=100)
    assert sim.viscosity == 0.003 and sim.dt == 0.01 and sim.threads == 1
    assert len(sim.tracers) == 100
    assert len(sim.vortons) == len(vp.scenes.vortex_ring(ring_radius=0.8, tracers=0).vortons)
    with pytest.raises(TypeError, match="unknown override 'bogus'"):
        vp.scenes.from_toml(path, bogus=1)


def test_base_scene_form(tmp_path):
    path = tmp_path / "base.toml"
    path.write_text('[scene]\nbase = "dye_drop"\nper_axis = 8\ntracers = 100\n[sim]\nviscosity = 0.02\n'
                    '[[bodies]]\nposition = [0, 0, 3]\nradius = 0.1\ndensity = 2.0\n')
    sim = vp.scenes.from_toml(path)
    assert len(sim.vortons) == 8 ** 3 and len(sim.tracers) == 100 and sim.viscosity == 0.02
    assert sim.bodies[0].mass == pytest.approx(2.0 * 4 / 3 * np.pi * 0.1 ** 3)


def test_example_file_builds_and_steps():
    sim = vp.scenes.from_toml(EXAMPLE, tracers=200, threads=1)
    assert len(sim.tracers) == 200 and len(sim.bodies) == 1 and sim.bodies[0].fixed
    assert np.any(sim.vortons.density < 0)
    sim.step(2)
    assert np.all(np.isfinite(sim.vortons.position))
    assert read_toml(EXAMPLE)["run"]["frames"] == 150


def test_cli_runs_toml_file(tmp_path):
    path = tmp_path / "small.toml"
    vp.scenes.to_toml("ball_through_smoke", path, tracers=300, vortons=64)
    out = tmp_path / "out"
    rc = cli.main(["run", str(path), "--frames", "3", "--no-animation", "--out", str(out), "--threads", "1"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 3 and summary["tracers"] == 300
    assert summary["scene"] == "ball_through_smoke"


def test_cli_uses_run_table(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('name = "tiny"\n[run]\nframes = 2\n[sim]\nthreads = 1\n'
                    '[[vortons]]\nkind = "blob"\nradius = 0.3\ncount = 50\nnoise = 0.2\n'
                    '[[tracers]]\nkind = "ball"\nradius = 0.3\ncount = 50\n')
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--no-animation", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["frames"] == 2


def test_cli_bad_file_is_usage_error(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('[sim]\nviscosityy = 0.1\n')
    assert cli.main(["run", str(path), "--frames", "1", "--no-animation", "--out", str(tmp_path / "o")]) == 2
    assert "viscosityy" in capsys.readouterr().err


@pytest.mark.parametrize("text, key", [
    ("[sim\nviscosity = 1", "not valid TOML"),
    ("[sim]\nviscosityy = 0.1", "sim.viscosityy"),
    ("[sim]\nsolver = 'fast'", "sim.solver"),
    ("[sim]\nviscosity = -1", "viscosity"),
    ("[sim]\ngravity = [0, 0]", "sim.gravity"),
    ("colour = 1", "unknown top-level key 'colour'"),
    ("format = 2", "format"),
    ("[run]\nframes = 0", "run.frames"),
    ("[run]\nview = 'top'", "run.view"),
    ("[run]\nspeed = 2", "run.speed"),
    ("[[vortons]]\nkind = 'donut'", "vortons[0].kind"),
    ("[[vortons]]\nkind = 'ring'\ncore = -0.1", "vortons[0].core"),
    ("[[vortons]]\nkind = 'ring'\naxis = 'w'", "vortons[0].axis"),
    ("[[vortons]]\nkind = 'box'\nlo = [0, 0, 0]\nhi = [1, 1, 1]", "vortons[0].spacing"),
    ("[[vortons]]\nkind = 'box'\nlo = [0, 0, 0]\nhi = [1, 1, 1]\nspacing = 0.1\ncount = 3", "vortons[0]"),
    ("[[vortons]]\nkind = 'box'\nlo = [0, 0, 0]\nhi = [1, 1, 0]\nspacing = 0.1", "vortons[0].hi"),
    ("[[vortons]]\nkind = 'tube'\nlength = 1\ncolor = 'red'", "vortons[0].color"),
    ("[[vortons]]\nkind = 'tube'", "vortons[0].length"),
    ("[[vortons]]\nkind = 'blob'\nradius = 1\nspacing = 0.5\nregions = [{shape = 'cone', density = 1}]",
     "vortons[0].regions[0].shape"),
    ("[[vortons]]\nkind = 'blob'\nradius = 1\nspacing = 0.5\nregions = [{shape = 'sphere', radius = 1}]",
     "vortons[0].regions[0].density"),
    ("[[vortons]]\nkind = 'points'\nposition = [[0, 0, 0]]\nvorticity = [[0, 0, 1], [0, 0, 1]]\nradius = 0.1",
     "vortons[0].vorticity"),
    ("[[tracers]]\nkind = 'box'\nlo = [0, 0, 0]\nhi = [1, 1, 1]", "tracers[0].count"),
    ("[[tracers]]\nkind = 'ball'\nradius = 1\ncount = -5", "tracers[0].count"),
    ("[[bodies]]\nradius = 0.2\nmas = 1", "bodies[0].mas"),
    ("[[bodies]]\nradius = 'big'", "bodies[0].radius"),
    ("[[bodies]]\nmass = 1\ndensity = 1", "bodies[0]"),
    ("[[emitters]]\ncenter = [0, 0, 0]", "emitters[0].half_size"),
    ("[[emitters]]\ncenter = [0, 0, 0]\nhalf_size = [1, 1, 1]\nrate = 3", "emitters[0].rate"),
    ("[scene]\nbase = 'nope'", "scene.base"),
    ("[scene]\nbase = 'dye_drop'\nwobble = 1", "scene.wobble"),
    ("vortons = 3", "vortons"),
])
def test_bad_files_name_the_key(tmp_path, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as ei:
        vp.scenes.from_toml(path)
    assert key in str(ei.value)
    assert str(path) in str(ei.value)


def test_to_toml_rejects_unknown_scene_and_params():
    with pytest.raises(ValueError, match="unknown scene"):
        vp.scenes.to_toml("nope")
    with pytest.raises(TypeError, match="wobble"):
        vp.scenes.to_toml("dye_drop", wobble=1)
