"""The parameter table (csrc/params.h) as the one source of truth, and an API that catches
slips: range checks in the core, bools for switches, unknown names answered with the nearest
valid one, shapes in messages, foreign state files named as such."""
import json
import math
import os
import re
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import vortonpy as vp
from vortonpy.parameters import PARAMETERS

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, os.pardir, "csrc")


# ------------------------------------------------------------------ the table
def test_every_parameter_is_an_attribute_with_its_default():
    sim = vp.Sim(threads=1)
    assert [p.name for p in PARAMETERS] == list(sim.params())
    for p in PARAMETERS:
        v = getattr(sim, p.name)
        if p.name == "threads":
            assert v == 1
        elif p.type == "vec3":
            assert tuple(v) == p.python_default
        elif p.type == "profile":
            assert v is None and p.default is None
        else:
            assert v == p.default and type(v) is {"float": float, "int": int, "bool": bool, "enum": str}[p.type]
        assert sim.params()[p.name] == (tuple(v) if p.type == "vec3" else v)
        doc = type(sim).__mro__[1].__dict__[p.name].__doc__
        assert doc.startswith(p.doc) and (not p.unit or f"[{p.unit}]" in doc)
    assert vp.Sim(**sim.params()).params() == sim.params()


def test_metadata_is_complete_and_the_docs_table_lists_it():
    kinds = {"float", "int", "bool", "enum", "vec3", "profile"}
    table = vp.parameters.markdown()
    for p in PARAMETERS:
        assert p.type in kinds and p.doc and p.min <= p.max or p.type == "vec3", p
        assert f"| `{p.name}` |" in table
    assert vp.parameters.get("solver").choices == ("direct", "tree", "poisson", "auto")
    with pytest.raises(KeyError, match="did you mean 'viscosity'"):
        vp.parameters.get("viscosty")
    assert "overlap" not in vp.parameters.names()


def _outside(p):
    """Values just outside p's range (and NaN for floats)."""
    if p.type == "bool":
        return [2, -1]
    if p.type in ("enum", "vec3", "profile"):  # (tested apart)
        return []
    out = [float("nan"), float("inf")] if p.type == "float" else []
    lo = p.min - (1 if p.type == "int" else 0.5 if p.min == 0 else abs(p.min) * 0.5)
    if p.min_inclusive:
        out.append(int(lo) if p.type == "int" else lo)
    else:
        out.append(p.min)
    if not math.isinf(p.max):
        out.append(int(p.max) + 1 if p.type == "int" else p.max * 2 + 1)
    return out


@pytest.mark.parametrize("p", [p for p in PARAMETERS if _outside(p)], ids=lambda p: p.name)
def test_values_outside_the_range_are_refused_by_the_core(p):
    """Sim(name=bad) and sim.name = bad raise ValueError naming the parameter and its range
    (the message is the core's, vp_params_check), and change nothing."""
    sim = vp.Sim(threads=1)
    before = sim.params()
    for bad in _outside(p):
        with pytest.raises(ValueError, match=rf"^{p.name} must be ") as e:
            vp.Sim(**{p.name: bad})
        msg = str(e.value)
        if not (isinstance(bad, float) and math.isnan(bad)) and p.type not in ("bool",):
            assert p.range.split(" ")[-1].strip("[]()") in msg or "whole" in msg, msg
        with pytest.raises(ValueError, match=rf"^{p.name} must be "):
            setattr(sim, p.name, bad)
    assert sim.params() == before


def test_dt_below_zero_is_refused_with_its_range():
    with pytest.raises(ValueError, match=r"^dt must be > 0, got -1$"):
        vp.Sim(dt=-1)
    sim = vp.Sim(threads=1)
    with pytest.raises(ValueError, match=r"^dt must be > 0, got -1$"):
        sim.dt = -1
    with pytest.raises(ValueError, match=r"^smagorinsky must be in \[0, 1\], got 5$"):
        sim.smagorinsky = 5
    with pytest.raises(ValueError, match=r"^stretch must be 0 or 1"):
        sim.stretch = 2
    with pytest.raises(ValueError, match=r"^tree_leaf_size must be a whole number, got 2.5$"):
        sim.tree_leaf_size = 2.5
    assert sim.dt == pytest.approx(1 / 30) and sim.smagorinsky == 0 and sim.stretch is True


def test_switches_take_bools_and_still_ints():
    sim = vp.Sim(threads=1, stretch=False, baroclinic=0, rollback=np.bool_(True))
    assert sim.stretch is False and sim.baroclinic is False and sim.rollback is True
    sim.stretch = 1
    sim.rollback = np.int64(0)
    assert sim.stretch is True and sim.rollback is False
    for bad in ("yes", 1.0, None):
        with pytest.raises(TypeError, match="^stretch must be a bool"):
            sim.stretch = bad
    with pytest.raises(TypeError, match="viscosity must be a real number"):
        sim.viscosity = True


def test_enum_and_vector_parameters():
    sim = vp.Sim(threads=1, solver="tree", gravity=(0, 0, -1))
    assert sim.solver == "tree" and list(sim.gravity) == [0, 0, -1]
    with pytest.raises(ValueError, match=r"solver must be one of .*got 'trie'; did you mean 'tree'\?"):
        sim.solver = "trie"
    with pytest.raises(TypeError, match="solver must be a str"):
        sim.solver = 1
    with pytest.raises(ValueError, match=r"gravity must have shape \(3,\), got shape \(2,\)"):
        sim.gravity = (0, 0)
    with pytest.raises(ValueError, match="gravity must be finite"):
        sim.gravity = (0, np.nan, 0)
    sim.threads = None
    assert sim.threads >= 1
    assert sim.solver == "tree" and list(sim.gravity) == [0, 0, -1]


def test_the_stratification_is_checked_read_back_and_kept(tmp_path):
    """stratification: (height, density) points, read back as a tuple of pairs (None without
    one); bad profiles are refused with a message naming the parameter and the rule, and
    change nothing; a state file and a scene file keep it exactly."""
    layers = [(-0.05, 1.6), (0.05, 0.4)]
    sim = vp.Sim(threads=1, stratification=layers)
    assert sim.stratification == ((-0.05, 1.6), (0.05, 0.4)) and sim.params()["stratification"] == sim.stratification
    assert vp.parameters.get("stratification").max == 16
    bad = [
        (((0.1, 1.0), (0.1, 2.0)), ValueError, r"point 1 .*heights strictly increasing"),
        (((0.0, 1.0), (1.0, 0.0)), ValueError, r"point 1 .*density > 0, got \(1, 0\)"),
        (((0.0, float("nan")),), ValueError, "must be finite"),
        (tuple((float(k), 1.0) for k in range(17)), ValueError, "must have at most 16 points, got 17"),
        (((0.0, 1.0, 2.0),), ValueError, r"must have shape \(N, 2\)"),
        ("layers", TypeError, r"must be None or \(height, density\) pairs"),
        ((("a", 1.0),), TypeError, "real numeric dtype"),
    ]
    for value, err, words in bad:
        with pytest.raises(err, match=f"^stratification .*{words}"):
            sim.stratification = value
        with pytest.raises(err, match=f"^stratification .*{words}"):
            vp.Sim(stratification=value)
    assert sim.stratification == ((-0.05, 1.6), (0.05, 0.4))
    for none in (None, [], ()):
        sim.stratification = none
        assert sim.stratification is None
    sim.stratification = np.array([[0.0, 1.2]])  # one point: a uniform ambient of that density
    assert sim.stratification == ((0.0, 1.2),)
    assert sim.ambient_density_at([[5.0, 0, -9.0]]).tolist() == [1.2]
    # exact through a state file (JSON floats round-trip) and a scene file
    weird = [(-0.1 / 3, 1 + 1e-15), (2 ** -30, 0.3), (7.25, 0.1 / 7)]
    sim = vp.Sim(threads=1, stratification=weird)
    sim.save(tmp_path / "s.npz")
    assert vp.Sim.load(tmp_path / "s.npz").stratification == tuple(weird)
    text = vp.scenes.to_toml("dye_drop", tracers=0, stratification=weird)
    assert "stratification = [[" in text
    (tmp_path / "d.toml").write_text(text)
    assert vp.scenes.from_toml(tmp_path / "d.toml", threads=1).stratification == tuple(weird)
    assert vp.scenes.read_toml(tmp_path / "d.toml")["sim"]["stratification"] == [list(p) for p in weird]
    (tmp_path / "e.toml").write_text("[sim]\nstratification = [[0, 1], [1]]\n")
    with pytest.raises(ValueError, match=r"sim.stratification: must be a list of \[height, density\] pairs"):
        vp.scenes.read_toml(tmp_path / "e.toml")


def test_the_state_file_keeps_switches_as_0_and_1(tmp_path):
    """A state's parameters keep the switches as 0 and 1, as every reader of this format
    version (older vortonpy included) takes them; loading gives bools back."""
    sim = vp.Sim(threads=1, stretch=False)
    sim.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        meta = json.loads(bytes(z["meta"]).decode())
    assert meta["params"]["stretch"] == 0 and meta["params"]["baroclinic"] == 1
    assert meta["written_by"] == vp.__version__
    assert vp.Sim.load(tmp_path / "s.npz").stretch is False


def test_overlap_is_deprecated_and_ignored(tmp_path):
    with pytest.warns(DeprecationWarning, match="overlap"):
        sim = vp.Sim(threads=1, overlap=0)
    with pytest.warns(DeprecationWarning, match="overlap"):
        sim.overlap = 1
    assert "overlap" not in sim.params()
    # a state written when overlap was a parameter loads without a warning
    sim.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta["params"]["overlap"] = 1
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vp.Sim.load(tmp_path / "old.npz").params() == sim.params()


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the core's check on its own")
def test_the_c_core_refuses_bad_parameters_on_its_own(tmp_path):
    """The range check is the core's: a C program using only params.c gets VP_ERR_VALUE and a
    message naming dt and its range for dt < 0, and vp_sim_set_params leaves the sim as it was."""
    main = tmp_path / "main.c"
    main.write_text(r'''
#include <stdio.h>
#include <string.h>
#include "vortonpy.h"
int main(void) {
    vp_params p; vp_sim s; char why[200] = "";
    vp_params_init(&p);
    memset(&s, 0, sizeof s); s.params = p;
    if (vp_params_check(&p, why, sizeof why) != VP_OK) return 1;
    p.dt = -1;
    int st = vp_params_check(&p, why, sizeof why);
    printf("%d|%s|", st, why);
    printf("%d|%g|", vp_sim_set_params(&s, &p), s.params.dt);
    p.dt = 0.1; p.stretch = 3;
    vp_params_check(&p, why, sizeof why);
    printf("%s|%d\n", why, VP_PARAM_COUNT);
    return 0;
}
''')
    exe = tmp_path / "check"
    r = subprocess.run(["cc", "-std=gnu11", "-I", CSRC, str(main), os.path.join(CSRC, "params.c"), "-lm", "-o",
                        str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip().split("|")
    assert out[0] == "-2" and out[1] == "dt must be > 0, got -1"
    assert out[2] == "-2" and float(out[3]) == pytest.approx(1 / 30)
    assert out[4].startswith("stretch must be 0 or 1") and int(out[5]) == len(PARAMETERS)


# ------------------------------------------------------------------ slips
def test_unknown_attributes_and_keywords_name_the_nearest():
    sim = vp.Sim(threads=1)
    with pytest.raises(AttributeError, match=r"Sim has no attribute 'viscocity'; did you mean 'viscosity'\?"):
        sim.viscocity = 1
    with pytest.raises(AttributeError, match="did you mean 'remesh_interval'"):
        sim.remesh_intervall = 3
    assert not hasattr(sim, "viscocity") and sim.viscosity == 0.01
    with pytest.raises(AttributeError, match="not writable"):  # read-only: its own message
        sim.substeps = 3
    with pytest.raises(TypeError, match=r"Sim\(\) got an unexpected keyword argument 'viscositty'; "
                                        r"did you mean 'viscosity'\?"):
        vp.Sim(viscositty=0.1)
    body = vp.RigidBody()
    with pytest.raises(AttributeError, match=r"RigidBody has no attribute 'mas'; did you mean 'mass'\?"):
        body.mas = 1
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'positon'; did you mean 'position'\?"):
        vp.RigidBody(positon=(0, 0, 0))
    with pytest.raises(TypeError, match=r"dye_drop\(\) got an unexpected keyword argument 'per_axs'; "
                                        r"did you mean 'per_axis'\?"):
        vp.scenes.dye_drop(per_axs=8)
    with pytest.raises(TypeError, match="did you mean 'viscosity'"):
        vp.scenes.dye_drop(viscosty=0.1)
    with pytest.raises(ValueError, match=r"dye_drop\(\): per_axis: must be a positive integer, got 0"):
        vp.scenes.dye_drop(per_axis=0)
    # subclasses keep a dict of their own
    class Mine(vp.Sim):
        pass
    m = Mine(threads=1)
    m.note = "mine"
    assert m.note == "mine"


@pytest.mark.parametrize("call, message", [
    (lambda s: s.add_vortons(np.zeros((3, 2)), np.zeros((3, 3)), 0.1), r"position must have shape \(N, 3\), got shape \(3, 2\)"),
    (lambda s: s.add_vortons(np.zeros((3, 3)), np.zeros((4, 3)), 0.1),
     r"vorticity must have shape \(3, 3\) \(a row per particle\), got shape \(4, 3\)"),
    (lambda s: s.add_vortons(np.zeros((3, 3)), np.zeros((3, 3)), [0.1, 0.2]),
     r"radius must be a scalar or have shape \(3,\) \(one per particle\), got shape \(2,\)"),
    (lambda s: s.velocity_at(np.zeros(5)), r"points must have shape \(N, 3\), got shape \(5,\)"),
    (lambda s: s.add_emitter((0, 0), (1, 1, 1)), r"center must have shape \(3,\), got shape \(2,\)"),
    (lambda s: setattr(s.vortons, "position", np.zeros((2, 2))), r"vortons.position must have shape \(1, 3\), got \(2, 2\)"),
])
def test_shape_errors_give_the_shape_received_and_expected(call, message):
    sim = vp.Sim(threads=1)
    sim.add_vortons([[0, 0, 0]], [[0, 0, 1]], 0.1)
    with pytest.raises(ValueError, match=message):
        call(sim)
    assert len(sim.vortons) == 1


def test_load_of_a_foreign_file_says_so(tmp_path):
    cases = {"garbage.npz": b"this is not a state file at all",
             "empty.npz": b""}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object))
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    np.save(tmp_path / "array.npy", np.zeros(3))
    for name in ("garbage.npz", "empty.npz", "pickled.npy", "other.npz", "array.npy"):
        with pytest.raises(ValueError) as e:
            vp.Sim.load(tmp_path / name)
        msg = str(e.value)
        assert "is not a vortonpy state file" in msg and "allow_pickle" not in msg, msg
    with pytest.raises(FileNotFoundError):
        vp.Sim.load(tmp_path / "missing.npz")
    # a state of another format version: which one, and which this vortonpy reads
    sim = vp.Sim(threads=1)
    sim.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta.update(version=2, written_by="9.0")
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(ValueError, match=r"format version 2 \(written by vortonpy 9.0\); this vortonpy .* reads "
                                         r"format version 1: load it with a newer vortonpy"):
        vp.Sim.load(tmp_path / "future.npz")


def test_version_comes_from_the_package_metadata():
    from importlib import metadata
    try:
        expected = metadata.version("vortonpy")
    except metadata.PackageNotFoundError:  # built in place, not installed: pyproject's
        text = open(os.path.join(HERE, os.pardir, "pyproject.toml")).read()
        expected = re.search(r'^version = "([^"]+)"', text, re.M).group(1)
    assert vp.__version__ == expected
