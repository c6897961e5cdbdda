"""vortonpy: real-time vortex-particle fluid simulation (after M. J. Gourlay's "Fluid Simulation
for Video Games"), with a C/OpenMP core and NumPy views of its particles.

    import vortonpy as vp
    sim = vp.scenes.vortex_ring()
    sim.step(100)
    sim.vortons.position      # (N, 3) live view
"""
import os as _os

# libgomp's idle threads spin for milliseconds before they sleep, taking the cores that other
# work (and, on a busy machine, the simulation's own other thread) needs: a few microseconds
# instead, unless the user set a spin count or a wait policy (OMP_WAIT_POLICY=active restores
# the long spin).  Read when libgomp loads with the core; not left for child processes.
_SPIN = "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ
if _SPIN:
    _os.environ["GOMP_SPINCOUNT"] = "200"
try:
    from . import _core
except ImportError as _e:
    if isinstance(_e, ModuleNotFoundError) or "cannot import name" in str(_e):  # not built here
        raise ImportError(
            "vortonpy's C core (vortonpy._core) is not built here. Install the package with "
            "`pip install .` and run from outside the source folder (or use the `vortonpy` command), "
            "or build in place with `pip install -e .`."
        ) from _e
    raise ImportError(f"vortonpy's C core (vortonpy._core) is built but does not load: {_e}") from _e
finally:
    if _SPIN:
        del _os.environ["GOMP_SPINCOUNT"]


def _version() -> str:
    """The installed distribution's version; in a source checkout built in place (not
    installed), the version pyproject.toml declares."""
    from importlib import metadata
    try:
        return metadata.version("vortonpy")
    except metadata.PackageNotFoundError:
        pass
    import os
    import sys
    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    try:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        with open(pyproject, "rb") as fh:
            return str(tomllib.load(fh)["project"]["version"])
    except (OSError, KeyError, ValueError, ImportError):
        return "0+unknown"


__version__ = _version()

from ._sim import RigidBody, Sim, Tracers, Vortons  # noqa: E402
from . import parameters, scenes, plot  # noqa: E402
from .animate import animate  # noqa: E402

has_openmp = _core.has_openmp()
direct_velocity = _core.direct_velocity
PARAMETERS = parameters.PARAMETERS

__all__ = ["Sim", "RigidBody", "Vortons", "Tracers", "scenes", "plot", "animate", "parameters", "PARAMETERS",
           "direct_velocity", "has_openmp", "sweep", "__version__"]


def __getattr__(name):
    # vp.sweep (parameter sweeps on Dask) is imported on first use: `import vortonpy` stays light
    if name == "sweep":
        import importlib
        return importlib.import_module(".sweep", __name__)
    raise AttributeError(f"module 'vortonpy' has no attribute {name!r}")
