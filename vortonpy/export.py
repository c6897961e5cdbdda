"""Write particles to files that ParaView, Blender, MeshLab or Houdini open.

- :func:`write_ply`: binary little-endian PLY point cloud, one ``float`` (or ``double``)
  property per scalar attribute; an (N, 3) attribute ``name`` becomes ``name_x``, ``name_y``,
  ``name_z``.
- :func:`write_vtk`: legacy VTK ``POLYDATA`` (binary big-endian, or ASCII) with one vertex cell
  per point and ``POINT_DATA`` ``SCALARS`` / ``VECTORS``.
- :func:`export_frame`: a simulation's tracers and vortons, with their attributes.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

__all__ = ["write_ply", "write_vtk", "export_frame", "FORMATS"]

FORMATS = ("ply", "vtk")


def _check(points, attributes):
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"points must have shape (N, 3), got {pts.shape}")
    n = len(pts)
    attrs = {}
    for name, val in (attributes or {}).items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"attribute names must be identifiers (letters, digits, _), got {name!r}")
        a = np.asarray(val)
        if a.dtype.kind not in "iufb":
            raise TypeError(f"attribute {name!r} must be numeric, got dtype {a.dtype}")
        a = a.astype(np.float64)
        if a.ndim == 0:
            a = np.full(n, float(a))
        if a.shape not in ((n,), (n, 3)):
            raise ValueError(f"attribute {name!r} must have shape ({n},) or ({n}, 3), got {a.shape}")
        attrs[name] = a
    return pts, attrs


def write_ply(path, points, attributes: Optional[Mapping[str, np.ndarray]] = None, double: bool = False) -> str:
    """Write a binary little-endian PLY point cloud.

    ``points`` (N, 3); ``attributes``: name -> (N,) or (N, 3) array (or a scalar, repeated);
    vectors become three properties ``name_x``, ``name_y``, ``name_z``.  Properties are
    ``float`` (float32), or ``double`` with ``double=True``.  Returns the path.
    """
    pts, attrs = _check(points, attributes)
    ftype, ply_type = (np.dtype("<f8"), "double") if double else (np.dtype("<f4"), "float")
    fields = [("x", pts[:, 0]), ("y", pts[:, 1]), ("z", pts[:, 2])]
    for name, a in attrs.items():
        if a.ndim == 2:
            fields += [(f"{name}_{c}", a[:, i]) for i, c in enumerate("xyz")]
        else:
            fields.append((name, a))
    names = [f for f, _ in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"property names collide: {names}")
    rec = np.empty(len(pts), dtype=[(f, ftype) for f in names])
    for f, col in fields:
        rec[f] = col
    header = ["ply", "format binary_little_endian 1.0", "comment written by vortonpy",
              f"element vertex {len(pts)}"]
    header += [f"property {ply_type} {f}" for f in names]
    header.append("end_header")
    path = os.fspath(path)
    with open(path, "wb") as fh:
        fh.write(("\n".join(header) + "\n").encode("ascii"))
        fh.write(rec.tobytes())
    return path


def write_vtk(path, points, attributes: Optional[Mapping[str, np.ndarray]] = None, binary: bool = True,
              title: str = "vortonpy particles") -> str:
    """Write a legacy VTK file (``DATASET POLYDATA``) that ParaView opens as a point cloud.

    One ``VERTICES`` cell per point; ``POINT_DATA`` with a ``SCALARS name float 1`` block per
    (N,) attribute and a ``VECTORS name float`` block per (N, 3) attribute.  ``binary=True``
    writes big-endian binary data (the legacy format's byte order), else ASCII.  Returns the
    path.
    """
    pts, attrs = _check(points, attributes)
    n = len(pts)
    title = title.replace("\n", " ")[:255]
    path = os.fspath(path)

    def block(fh, arr, dtype, fmt):
        if binary:
            fh.write(np.ascontiguousarray(arr, dtype=dtype).tobytes())
            fh.write(b"\n")
        else:
            a = np.asarray(arr)
            if a.ndim == 1:
                a = a[:, None]
            np.savetxt(fh, a, fmt=fmt)

    with open(path, "wb") as fh:
        fh.write(f"# vtk DataFile Version 3.0\n{title}\n{'BINARY' if binary else 'ASCII'}\n"
                 f"DATASET POLYDATA\nPOINTS {n} float\n".encode("ascii"))
        block(fh, pts.astype(np.float32), ">f4", "%.7g")
        fh.write(f"VERTICES {n} {2 * n}\n".encode("ascii"))
        cells = np.empty((n, 2), dtype=np.int64)
        cells[:, 0] = 1
        cells[:, 1] = np.arange(n)
        block(fh, cells, ">i4", "%d")
        if attrs:
            fh.write(f"POINT_DATA {n}\n".encode("ascii"))
            for name, a in attrs.items():
                if a.ndim == 2:
                    fh.write(f"VECTORS {name} float\n".encode("ascii"))
                else:
                    fh.write(f"SCALARS {name} float 1\nLOOKUP_TABLE default\n".encode("ascii"))
                block(fh, a.astype(np.float32), ">f4", "%.7g")
    return path


def _particle_data(sim):
    v, t = sim.vortons, sim.tracers
    vortons = dict(vorticity=np.array(v.vorticity), radius=np.array(v.radius), density=np.array(v.density),
                   temperature=np.array(v.temperature), velocity=np.array(v.velocity))
    tracers = dict(velocity=np.array(t.velocity), density=np.array(t.density),
                   temperature=np.array(t.temperature))
    return {"vortons": (np.array(v.position), vortons), "tracers": (np.array(t.position), tracers)}


def export_frame(sim, path_prefix, formats: Sequence[str] = FORMATS, binary: bool = True) -> List[str]:
    """Write the sim's particles: ``{path_prefix}_tracers.{fmt}`` (velocity, density,
    temperature) and ``{path_prefix}_vortons.{fmt}`` (vorticity, radius, density, temperature,
    velocity) for each format in ``formats`` (``"ply"``, ``"vtk"``).  Creates the directory.
    Returns the paths written."""
    if isinstance(formats, str):
        formats = [f for f in formats.split(",") if f]
    formats = [f.strip().lower().lstrip(".") for f in formats]
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"formats must be among {FORMATS}, got {bad}")
    prefix = os.fspath(path_prefix)
    d = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(d, exist_ok=True)
    out = []
    for kind, (pos, attrs) in _particle_data(sim).items():
        for fmt in formats:
            p = f"{prefix}_{kind}.{fmt}"
            if fmt == "ply":
                write_ply(p, pos, attrs)
            else:
                write_vtk(p, pos, attrs, binary=binary, title=f"vortonpy {kind} t={sim.time:.6g} frame={sim.frame}")
            out.append(p)
    return out
