"""Type stubs for vortonpy._core, the C extension (csrc/module.c)."""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray

_Vec3 = Union[Sequence[float], NDArray[np.floating]]
_Scalars = Union[float, ArrayLike]

def has_openmp() -> bool:
    """True if the core was built with OpenMP."""

def _fft_isa() -> str:
    """'avx2' or 'baseline': the FFT code the poisson solver runs."""

def _cpu_level() -> int:
    """The hand-written SIMD paths this process runs: 0 portable (or VORTONPY_PORTABLE=1), 1 AVX2, 2 AVX-512."""

def direct_velocity(position: ArrayLike, strength: ArrayLike, radius: _Scalars, points: ArrayLike) -> NDArray[np.float64]:
    """Velocity (K, 3) at (K, 3) points induced by vortons of the given strengths (w V), by
    direct summation of the regularised Biot-Savart kernel."""

class RigidBody:
    """A rigid sphere that stirs the fluid and is pushed, slowed, spun and heated by it."""

    def __init__(
        self,
        position: Optional[_Vec3] = ...,
        velocity: Optional[_Vec3] = ...,
        angular_velocity: Optional[_Vec3] = ...,
        radius: float = ...,
        mass: float = ...,
        temperature: float = ...,
        thermal_conductivity: float = ...,
        heat_capacity: float = ...,
        fixed: bool = ...,
        gravity: bool = ...,
        orientation: Optional[Sequence[float]] = ...,
    ) -> None: ...
    # vectors: (3,) copies; assign to change
    position: NDArray[np.float64]
    velocity: NDArray[np.float64]
    angular_velocity: NDArray[np.float64]
    momentum: NDArray[np.float64]
    angular_momentum: NDArray[np.float64]
    @property
    def force(self) -> NDArray[np.float64]: ...
    @property
    def torque(self) -> NDArray[np.float64]: ...
    @property
    def fluid_impulse(self) -> NDArray[np.float64]: ...
    @property
    def fluid_angular_impulse(self) -> NDArray[np.float64]: ...
    radius: float
    mass: float
    temperature: float
    thermal_conductivity: float
    heat_capacity: float
    @property
    def heat_received(self) -> float: ...
    @property
    def inertia(self) -> float: ...
    fixed: bool
    gravity: bool
    orientation: NDArray[np.float64]
    @property
    def sim(self) -> Optional["Sim"]: ...
    def apply_impulse(self, impulse: _Vec3, angular_impulse: _Vec3 = ...) -> None:
        """Change momentum and angular momentum at once (ignored by fixed bodies)."""
    def _set_totals(self, fluid_impulse: _Vec3, fluid_angular_impulse: _Vec3, heat_received: float) -> None: ...

class Sim:
    """The C core of a vorton fluid simulation (see vortonpy.Sim)."""

    def __init__(
        self,
        *,
        dt: float = ...,
        viscosity: float = ...,
        smagorinsky: float = ...,
        remesh_interval: int = ...,
        remesh_threshold: float = ...,
        max_rate_dt: float = ...,
        max_substeps: int = ...,
        thermal_diffusivity: float = ...,
        ambient_density: float = ...,
        fluid_heat_capacity: float = ...,
        gravity: _Vec3 = ...,
        solver: str = ...,
        threads: Optional[int] = ...,
        tree_theta: float = ...,
        tree_leaf_size: int = ...,
        grid_cells_per_vorton: float = ...,
        grid_max_points: int = ...,
        pse_width: float = ...,
        pse_cutoff: float = ...,
        contact_blend: float = ...,
        vorton_lifetime: float = ...,
        tracer_lifetime: float = ...,
        advect_order: int = ...,
        stretch: int = ...,
        baroclinic: int = ...,
        rollback: int = ...,
        overlap: int = ...,
        seed: int = ...,
    ) -> None: ...
    # parameters (read and write)
    dt: float
    viscosity: float
    smagorinsky: float
    remesh_interval: int
    remesh_threshold: float
    max_rate_dt: float
    max_substeps: int
    max_rate: float
    @property
    def substeps(self) -> int: ...
    @property
    def diffusion_substeps(self) -> int: ...
    thermal_diffusivity: float
    ambient_density: float
    fluid_heat_capacity: float
    tree_theta: float
    tree_leaf_size: int
    grid_cells_per_vorton: float
    pse_width: float
    pse_cutoff: float
    contact_blend: float
    vorton_lifetime: float
    tracer_lifetime: float
    advect_order: int
    stretch: int
    baroclinic: int
    rollback: int
    overlap: int
    time: float
    frame: int
    gravity: NDArray[np.float64]
    solver: str
    threads: int
    grid_max_points: int
    _rng_state: Tuple[int, int, int, int]
    # read-only
    @property
    def timings(self) -> Dict[str, float]: ...
    @property
    def interactions(self) -> int: ...
    @property
    def bodies(self) -> List[RigidBody]: ...
    @property
    def emitters(self) -> List[Dict[str, Any]]: ...
    def add_vortons(self, position: ArrayLike, vorticity: ArrayLike, radius: _Scalars, density: _Scalars = ...) -> None:
        """Add vortons: position and vorticity (N, 3), radius and density deviation scalars or (N,)."""
    def add_tracers(self, position: ArrayLike, density: _Scalars = ...) -> None:
        """Add passive tracers at (N, 3) positions."""
    def add_body(self, body: RigidBody) -> RigidBody:
        """Add a RigidBody; returns it, now live."""
    def add_emitter(
        self,
        center: _Vec3,
        half_size: _Vec3,
        vorton_rate: float = ...,
        tracer_rate: float = ...,
        vorton_radius: float = ...,
        vorticity: float = ...,
        density: float = ...,
        debt: Optional[Tuple[float, float]] = ...,
    ) -> None:
        """Add a source of vortons and tracers (per unit time) in a box."""
    def velocity_at(self, points: ArrayLike) -> NDArray[np.float64]:
        """Fluid velocity (K, 3) at (K, 3) points, summed from the vortons by the sim's
        solver (the tree for 'tree' and 'poisson'), not interpolated from the grid; finite at
        any finite point (beyond 1e4 times the vortons' cloud size, the tree's root expansion
        in float64)."""
    def update_velocity_grid(self) -> None:
        """Recompute the domain grid and the velocity on it from the current vortons."""
    def collide(self) -> None:
        """Apply the fluid-body boundary conditions now."""
    def remesh(self) -> None:
        """Redistribute the vortons onto a regular lattice now (M4' kernel)."""
    def _grid_spacing(self) -> float: ...
    def grid(self) -> Dict[str, Any]:
        """The last step's grid: origin, spacing, shape (z, y, x), velocity and density copies."""
    def _step(self, n: int = ...) -> None: ...
    def _diagnostics(self, origin: Optional[_Vec3] = ...) -> Dict[str, Any]: ...
    def _view(self, kind: str, field: str) -> NDArray[np.float64]: ...
    def _count(self, kind: str) -> int: ...
    def _keep(self, kind: str, mask: ArrayLike) -> None: ...
