"""A command line that explains itself: --version, `params`, --set checked with the nearest
name suggested, descriptions in full, every example of --help runs, and a scene file's output
named after the file."""
import json
import os
import shlex
import shutil

import pytest

import vortonpy as vp
from vortonpy import cli

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _help(argv, capsys):
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def _examples(text):
    """The example commands in a --help text (the lines of its examples section)."""
    lines = text.split("examples:", 1)[1].splitlines()
    out = []
    for line in lines:
        if line.startswith("  vortonpy "):
            out.append(shlex.split(line.split("  #")[0]))
    return out


def test_every_example_in_help_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the examples name files of the repository (examples/my_scene.toml)
    examples = _examples(_help(["--help"], capsys))
    assert _examples(_help(["run", "--help"], capsys)) == examples
    assert len(examples) >= 5 and {e[1] for e in examples} == {"list", "params", "run"}
    for i, argv in enumerate(examples):
        argv = argv[1:]
        out = tmp_path / f"run{i}"
        if argv[0] == "run":  # few frames, a small picture, no plots (their own tests draw them)
            argv += ["--frames", "2", "--size", "96x64", "--no-plots", "--out", str(out)]
        rc = cli.main(argv)
        captured = capsys.readouterr()
        assert rc == 0, (argv, captured.err)
        if argv[0] == "run":
            summary = json.loads((out / "summary.json").read_text())
            assert summary["frames"] == 2 and summary["error"] is None, argv
            assert summary["animation"] or "--no-animation" in argv
        else:
            assert captured.out.strip()


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"vortonpy {vp.__version__}"


def test_set_with_a_typo_suggests_and_exits_non_zero(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["run", "spinning_ball", "--set", "viscocity=0.02", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "viscocity" in err and "did you mean 'viscosity'?" in err and "vortonpy params spinning_ball" in err
    assert cli.main(["run", "ball_through_smoke", "--set", "vortns=64", "--out", str(out)]) == 2
    assert "did you mean 'vortons'?" in capsys.readouterr().err
    assert cli.main(["run", "spinning_ball", "--set", "vortons=1024", "--out", str(out)]) == 2
    assert "spinning_ball has no parameter 'vortons'" in capsys.readouterr().err
    assert cli.main(["run", "dye_drp", "--out", str(out)]) == 2
    assert "did you mean 'dye_drop'?" in capsys.readouterr().err
    assert cli.main(["run", "dye_drop", "--set", "per_axis=-3", "--out", str(out)]) == 2
    assert "per_axis" in capsys.readouterr().err
    assert not out.exists()  # nothing was run or written


def test_set_takes_scene_and_sim_parameters(tmp_path, capsys):
    out = tmp_path / "o"
    rc = cli.main(["run", "spinning_ball", "--set", "per_axis=6", "--set", "tracers=100", "--set", "stretch=false",
                   "--set", "viscosity=0.02", "--frames", "2", "--no-animation", "--no-plots", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert s["vortons_start"] == 6 ** 3 and s["tracers_start"] == 100
    assert s["overrides"] == {"per_axis": 6, "tracers": 100, "stretch": False, "viscosity": 0.02}


@pytest.mark.parametrize("name", sorted(vp.scenes.SCENES))
def test_params_lists_the_scene_and_sim_parameters(name, capsys):
    text = _help(["params", name], capsys)
    info = vp.scenes.SCENES[name].info
    scene_part, sim_part = text.split("Scene parameters", 1)[1].split("Sim parameters", 1)
    for p in info.parameters:
        line = next(ln for ln in scene_part.splitlines() if ln.split()[:1] == [p.name])
        assert p.doc in line and (not p.unit or p.unit in line), line
    sim = vp.scenes.SCENES[name](tracers=0, threads=1)
    for p in vp.parameters.PARAMETERS:
        line = next(ln for ln in sim_part.splitlines() if p.name in ln.split()[:2])
        assert p.doc in line
        if p.type == "float":  # the scene's value, as the built Sim has it
            assert vp.parameters.format_value(getattr(sim, p.name)) in line.split(), line


def test_params_without_a_scene_and_for_a_file(capsys):
    text = _help(["params"], capsys)
    for p in vp.parameters.PARAMETERS:
        assert p.name in text and p.doc in text
    text = _help(["params", os.path.join(REPO, "examples", "my_scene.toml")], capsys)
    assert "tracers" in text and "0.002" in text  # the file's viscosity


def test_list_gives_the_descriptions_in_full(capsys):
    text = " ".join(_help(["list"], capsys).split())
    for name, fn in vp.scenes.SCENES.items():
        assert name in text
        assert " ".join(fn.info.description.replace("``", "").split()) in text


def test_a_scene_files_output_is_named_after_the_file(tmp_path, capsys, monkeypatch):
    shutil.copy(os.path.join(REPO, "examples", "my_scene.toml"), tmp_path / "rising.toml")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "rising.toml", "--frames", "2", "--set", "tracers=200", "--format", "gif",
                     "--size", "96x64", "--no-plots"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "rising" / "summary.json").exists()
    assert (tmp_path / "out" / "rising" / "rising.gif").exists()
    summary = json.loads((tmp_path / "out" / "rising" / "summary.json").read_text())
    assert summary["scene"] == "ring_meets_ball" and summary["tracers"] == 200
    # --set on a file: its seed, tracers and the Sim parameters, nothing else
    assert cli.main(["run", "rising.toml", "--set", "ring_radius=1"]) == 2
    assert "rising.toml has no parameter 'ring_radius'" in capsys.readouterr().err
