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
from ._sim import RigidBody, Sim, Tracers, Vortons
from . import scenes, plot
from .animate import animate

__version__ = "0.1.0"
has_openmp = _core.has_openmp()
direct_velocity = _core.direct_velocity

__all__ = ["Sim", "RigidBody", "Vortons", "Tracers", "scenes", "plot", "animate", "direct_velocity",
           "has_openmp", "__version__"]
