"""vortonpy: real-time vortex-particle fluid simulation (after M. J. Gourlay's "Fluid Simulation
for Video Games"), with a C/OpenMP core and NumPy views of its particles.

    import vortonpy as vp
    sim = vp.scenes.vortex_ring()
    sim.step(100)
    sim.vortons.position      # (N, 3) live view
"""
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
from ._sim import RigidBody, Sim, Tracers, Vortons
from . import scenes, plot
from .animate import animate

__version__ = "0.1.0"
has_openmp = _core.has_openmp()
direct_velocity = _core.direct_velocity

__all__ = ["Sim", "RigidBody", "Vortons", "Tracers", "scenes", "plot", "animate", "direct_velocity",
           "has_openmp", "sweep", "__version__"]


def __getattr__(name):
    # vp.sweep (parameter sweeps on Dask) is imported on first use: `import vortonpy` stays light
    if name == "sweep":
        import importlib
        return importlib.import_module(".sweep", __name__)
    raise AttributeError(f"module 'vortonpy' has no attribute {name!r}")
