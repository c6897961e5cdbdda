"""Helper for tests that run a child Python process (not a test module)."""
import os
import subprocess
import sys
import tempfile

import vortonpy as vp


def child_env(**extra):
    """The environment for a child `python -c` that must import the same vortonpy as this
    process: its package folder first on PYTHONPATH (run the child from a neutral cwd too, as
    `-c` puts the cwd first on sys.path and a source checkout there holds no built core),
    plus `extra` variables."""
    path = os.pathsep.join(q for q in [os.path.dirname(os.path.dirname(vp.__file__)), os.environ.get("PYTHONPATH", "")] if q)
    return dict(os.environ, PYTHONPATH=path, **extra)


def run_child(code, *args, cwd=None, **extra):
    """`python -c code args` with child_env(**extra), run from cwd (a neutral folder: a fresh
    temporary one unless given); its CompletedProcess, output captured as text."""
    if cwd is None:
        with tempfile.TemporaryDirectory() as d:
            return run_child(code, *args, cwd=d, **extra)
    return subprocess.run([sys.executable, "-c", code, *args], env=child_env(**extra), capture_output=True,
                          text=True, cwd=cwd)


def child_npz(code, envs):
    """Per dict of environment variables in envs, the arrays a child `python -c code PATH`
    (run_child) saved with `np.savez(sys.argv[1], ...)`, as a dict of arrays: how the tests
    compare run-time code paths (VORTONPY_PORTABLE=1), which a process picks once."""
    import numpy as np
    outs = []
    with tempfile.TemporaryDirectory() as d:
        for k, env in enumerate(envs):
            path = os.path.join(d, f"out{k}.npz")
            r = run_child(code, path, cwd=d, **env)
            assert r.returncode == 0, r.stderr
            with np.load(path) as z:
                outs.append({name: z[name] for name in z.files})
    return outs
