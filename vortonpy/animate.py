"""Animations of the smoke: step a simulation and write its tracers to a GIF or MP4.

Frames are rasterised directly with NumPy (no matplotlib per frame): the tracers are binned
into pixels, which gives a smoke-like projected density (tone-mapped ``1 - exp(-n/ref)``),
optionally coloured by the mean density, temperature or speed of the tracers in each pixel.
Bodies are drawn as discs with Pillow, with a time label.  A 640 x 360 frame of 1e5 tracers
takes a few milliseconds.

    vp.animate(sim, 300, "ball.mp4")                 # MP4 via imageio-ffmpeg
    vp.animate(sim, 100, "ring.gif", view="yz")      # GIF via Pillow
    vp.animate.show("ball.mp4")                       # in a notebook

(``vp.animate`` is the function; :func:`show`, :class:`Renderer` and :func:`ffmpeg_works`
are also reachable as its attributes.)
"""
from __future__ import annotations

import math
import os
from typing import Callable, Optional, Tuple

import numpy as np

from .plot import VIEWS, History, view_axes

__all__ = ["animate", "Renderer", "render_frame", "show", "inline", "ffmpeg_works", "VIDEO_SUFFIXES"]

#: File suffixes written through ffmpeg (imageio-ffmpeg); ``.gif`` is written by Pillow.
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi")

_CMAPS = {"density": "coolwarm", "temperature": "inferno", "speed": "viridis", "age": "cividis"}


def _blur121(a: np.ndarray) -> np.ndarray:
    """Separable [1, 2, 1] / 4 blur over the first two axes (edges clamped)."""
    b = a * 2.0
    b[1:] += a[:-1]
    b[:-1] += a[1:]
    b[0] += a[0]
    b[-1] += a[-1]
    b *= 0.25
    c = b * 2.0
    c[:, 1:] += b[:, :-1]
    c[:, :-1] += b[:, 1:]
    c[:, 0] += b[:, 0]
    c[:, -1] += b[:, -1]
    c *= 0.25
    return c


class Renderer:
    """Rasterises a simulation's tracers and bodies into RGB images of a fixed view.

    ``view``: a 2D view such as ``"xz"`` (horizontal, vertical world axes).  ``bounds``:
    ``(h0, h1, v0, v1)`` in world units; by default the extent of the tracers (or vortons) and
    bodies *at construction*, padded 10% and widened to the image's aspect ratio (equal
    scales); with ``follow=True`` (the default when no ``bounds`` are given) the camera then
    widens, never narrows, whenever a body or the bulk of the smoke (its 0.5-99.5% quantiles)
    would leave the picture, so nothing the scene is about drifts out of frame
    (:meth:`fit_view` frames a still on the present state instead).  ``color``: ``"density"``,
    ``"temperature"``, ``"speed"``, ``"age"`` or None (white smoke); the colour range is fixed
    the first time the values are not all equal (before that, and for flows where they never
    differ, the smoke is white).  ``vrange=(lo, hi)`` fixes it explicitly.  ``exposure``
    scales the smoke's opacity; the reference density is set from the first frame.
    ``legend`` draws a scale bar in simulation length units (L) and, for coloured smoke, the
    colour key with its range.
    """

    def __init__(self, sim, view: str = "xz", color: Optional[str] = "density", size=(640, 360), bounds=None,
                 cmap: Optional[str] = None, exposure: float = 1.0, vrange=None, label: bool = True,
                 title: Optional[str] = None, background=(10, 12, 18), blur: bool = True,
                 body_color=(235, 140, 60), follow: bool = True, legend: bool = True):
        if view not in VIEWS:
            raise ValueError(f"view must be one of {sorted(VIEWS)}, got {view!r}")
        if color not in (None, "none", "smoke", "density", "temperature", "speed", "age"):
            raise ValueError(f"color must be 'density', 'temperature', 'speed', 'age' or None, got {color!r}")
        w, h = (int(size[0]), int(size[1]))
        if w < 8 or h < 8:
            raise ValueError(f"size must be at least 8 x 8 pixels, got {size}")
        self.size = (w, h)
        self.view = view
        self.axes = view_axes(view)
        self.color = None if color in ("none", "smoke") else color
        import matplotlib
        self.cmap = matplotlib.colormaps[cmap or _CMAPS.get(self.color or "", "viridis")]
        self.exposure = float(exposure)
        self.vrange = tuple(vrange) if vrange is not None else None
        self.label = label
        self.title = title
        self.background = np.asarray(background, dtype=np.float32) / 255.0
        self.blur = blur
        self.body_color = tuple(body_color)
        self.follow = bool(follow) and bounds is None
        self.legend = bool(legend)
        self.bounds = tuple(map(float, bounds)) if bounds is not None else self._auto_bounds(sim)
        self._ref: Optional[float] = None
        self._font = None

    def _auto_bounds(self, sim, robust: bool = False):
        a, b = self.axes
        pts = np.asarray(sim.tracers.position)
        if not len(pts):
            pts = np.asarray(sim.vortons.position)
        if len(pts) and robust:
            sample = pts[:: max(1, len(pts) // 20000)][:, [a, b]]
            lo, hi = np.percentile(sample, [0.5, 99.5], axis=0)
        elif len(pts):
            lo = np.array([pts[:, a].min(), pts[:, b].min()])
            hi = np.array([pts[:, a].max(), pts[:, b].max()])
        else:
            lo, hi = np.array([-1.0, -1.0]), np.array([1.0, 1.0])
        for body in sim.bodies:
            c, r = np.asarray(body.position, float), float(body.radius)
            lo = np.minimum(lo, [c[a] - r, c[b] - r])
            hi = np.maximum(hi, [c[a] + r, c[b] + r])
        span = np.maximum(hi - lo, 1e-6)
        pad = 0.1 * span.max()
        lo, hi = lo - pad, hi + pad
        return self._fit_aspect(lo, hi)

    def fit_view(self, sim) -> None:
        """Frame the view on the present state (the bulk of the smoke and the bodies, padded),
        e.g. for a still after a run; the colour range and exposure are kept."""
        self.bounds = self._auto_bounds(sim, robust=True)

    def _fit_aspect(self, lo, hi):
        """(h0, h1, v0, v1) covering [lo, hi], the narrower direction widened to the image's
        aspect ratio (equal scales on both axes)."""
        lo, hi = np.array(lo, float), np.array(hi, float)
        w, h = self.size
        width, height = hi - lo
        if width / height < w / h:
            extra = (height * w / h - width) / 2
            lo[0] -= extra
            hi[0] += extra
        else:
            extra = (width * h / w - height) / 2
            lo[1] -= extra
            hi[1] += extra
        return (float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1]))

    def _follow(self, sim):
        """Widen the view to the union of the current one and what the scene now needs."""
        h0, h1, v0, v1 = self.bounds
        n0, n1, m0, m1 = self._auto_bounds(sim, robust=True)
        if not (n0 < h0 or n1 > h1 or m0 < v0 or m1 > v1):
            return
        self.bounds = self._fit_aspect([min(h0, n0), min(v0, m0)], [max(h1, n1), max(v1, m1)])

    def _values(self, sim):
        tr = sim.tracers
        if self.color == "density":
            return np.asarray(tr.density, dtype=np.float64)
        if self.color == "temperature":
            return np.asarray(tr.temperature, dtype=np.float64)
        if self.color == "speed":
            return np.linalg.norm(np.asarray(tr.velocity), axis=1)
        if self.color == "age":
            return np.asarray(tr.age, dtype=np.float64)
        return None

    def _pixels(self, pts):
        """Flat pixel index and validity of world points (N, 3)."""
        w, h = self.size
        h0, h1, v0, v1 = self.bounds
        a, b = self.axes
        col = np.floor((pts[:, a] - h0) * (w / (h1 - h0)))
        row = np.floor((v1 - pts[:, b]) * (h / (v1 - v0)))
        ok = (col >= 0) & (col < w) & (row >= 0) & (row < h)
        return row[ok].astype(np.int64) * w + col[ok].astype(np.int64), ok

    def to_pixel(self, point) -> Tuple[float, float]:
        """(column, row) of a world point in the image (fractional; row 0 is the top)."""
        w, h = self.size
        h0, h1, v0, v1 = self.bounds
        a, b = self.axes
        return ((point[a] - h0) * w / (h1 - h0), (v1 - point[b]) * h / (v1 - v0))

    def render(self, sim):
        """The current state as a ``PIL.Image`` (RGB, ``size``)."""
        from PIL import Image, ImageDraw
        w, h = self.size
        if self.follow:
            self._follow(sim)
        pts = np.asarray(sim.tracers.position)
        idx, ok = self._pixels(pts)
        count = np.bincount(idx, minlength=w * h).astype(np.float32).reshape(h, w)
        values = self._values(sim)
        mean = None
        if values is not None and len(values):
            v = values[ok]
            if self.vrange is None and len(v) and np.ptp(v) > 1e-12:
                lo, hi = np.percentile(v, [1, 99])
                if self.color == "density":
                    m = max(abs(lo), abs(hi)) or float(np.max(np.abs(v)))
                    lo, hi = -m, m
                if hi - lo <= 1e-12:
                    lo, hi = float(v.min()), float(v.max())
                self.vrange = (float(lo), float(hi))
            if self.vrange is not None:
                vsum = np.bincount(idx, weights=v, minlength=w * h).astype(np.float32).reshape(h, w)
                mean = vsum
        if self.blur:
            count = _blur121(count)
            if mean is not None:
                mean = _blur121(mean)
        if self._ref is None:
            occupied = count[count > 0]
            self._ref = float(np.percentile(occupied, 75)) if occupied.size else 1.0
        alpha = 1.0 - np.exp(-count * (self.exposure / self._ref))
        if mean is not None:
            lo, hi = self.vrange
            with np.errstate(invalid="ignore", divide="ignore"):
                m = np.where(count > 0, mean / count, 0.5 * (lo + hi))
            rgb = self.cmap(np.clip((m - lo) / (hi - lo), 0.0, 1.0), bytes=False)[..., :3].astype(np.float32)
            # lift dark colours a little so thin smoke stays visible on the dark background
            rgb = 0.15 + 0.85 * rgb
        else:
            rgb = np.array([0.93, 0.94, 0.97], dtype=np.float32)
        img = self.background * (1.0 - alpha[..., None]) + rgb * alpha[..., None]
        im = Image.fromarray(np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8))  # (H, W, 3) uint8: RGB
        draw = ImageDraw.Draw(im)
        scale = w / (self.bounds[1] - self.bounds[0])
        for body in sim.bodies:
            cx, cy = self.to_pixel(np.asarray(body.position, float))
            r = max(float(body.radius) * scale, 1.5)
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=self.body_color, outline=(255, 255, 255),
                         width=max(1, int(r / 12)))
        if self.label:
            text = f"t = {sim.time:6.2f}   frame {sim.frame}"
            if self.title:
                text = f"{self.title}   {text}"
            draw.text((8, 6), text, fill=(230, 230, 230), font=self._get_font())
        if self.legend:
            self._draw_legend(draw, scale)
        return im

    def _draw_legend(self, draw, scale: float) -> None:
        """A scale bar (bottom left, in simulation length units L) and, for coloured smoke, the
        colour key with its range (bottom right): what a still needs to be read on its own."""
        w, h = self.size
        font = self._get_font()
        grey = (200, 200, 200)
        fs = getattr(font, "size", 10)
        target = 0.18 * w / scale  # about a sixth of the picture, rounded to 1, 2 or 5 x 10^k
        mag = 10.0 ** math.floor(math.log10(target))
        length = max(m * mag for m in (1, 2, 5) if m * mag <= target)
        px = length * scale
        x0, y0 = 10, h - 8
        draw.line((x0, y0, x0 + px, y0), fill=grey, width=2)
        draw.line((x0, y0 - 3, x0, y0 + 1), fill=grey, width=1)
        draw.line((x0 + px, y0 - 3, x0 + px, y0 + 1), fill=grey, width=1)
        draw.text((x0, y0 - 5 - fs), f"{length:g} L", fill=grey, font=font)
        if self.color is None or self.vrange is None:
            return
        lo, hi = self.vrange
        bw, bh = max(40, w // 6), 5
        bx, by = w - bw - 10, h - 8 - bh
        ramp = self.cmap(np.linspace(0.0, 1.0, bw), bytes=True)[:, :3]
        for i in range(bw):
            draw.line((bx + i, by, bx + i, by + bh), fill=tuple(int(c) for c in ramp[i]))
        text = f"{self.color} {lo:.2g} .. {hi:.2g}"
        tw = draw.textlength(text, font=font) if hasattr(draw, "textlength") else 6 * len(text)
        draw.text((w - 10 - tw, by - 3 - fs), text, fill=grey, font=font)

    def _get_font(self):
        if self._font is None:
            from PIL import ImageFont
            try:
                self._font = ImageFont.load_default(size=max(10, self.size[1] // 28))
            except TypeError:  # Pillow < 10.1: fixed bitmap font
                self._font = ImageFont.load_default()
        return self._font


def render_frame(sim, view: str = "xz", color: Optional[str] = "density", size=(640, 360), bounds=None,
                 **kwargs):
    """One image (``PIL.Image``) of the current state; see :class:`Renderer` for the options.
    For a sequence of frames keep one :class:`Renderer` so the view and exposure stay fixed."""
    return Renderer(sim, view=view, color=color, size=size, bounds=bounds, **kwargs).render(sim)


_FFMPEG_OK: Optional[bool] = None


def ffmpeg_works() -> bool:
    """True if imageio can write an MP4 here (imageio-ffmpeg present and its ffmpeg runs).
    Checked once by writing a tiny file."""
    global _FFMPEG_OK
    if _FFMPEG_OK is None:
        import tempfile
        try:
            import imageio.v2 as iio
            with tempfile.TemporaryDirectory() as d:
                p = os.path.join(d, "probe.mp4")
                with iio.get_writer(p, format="FFMPEG", mode="I", fps=10, codec="libx264", pixelformat="yuv420p",
                                    macro_block_size=1, ffmpeg_log_level="error") as wr:
                    for k in range(2):
                        wr.append_data(np.full((16, 16, 3), 40 * k, np.uint8))
                _FFMPEG_OK = os.path.getsize(p) > 0
        except Exception:
            _FFMPEG_OK = False
    return _FFMPEG_OK


class _GifWriter:
    def __init__(self, path, fps):
        self.path, self.fps, self.frames = path, fps, []

    def append(self, im):
        from PIL import Image
        self.frames.append(im.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE))

    def close(self):
        if not self.frames:
            return
        first, rest = self.frames[0], self.frames[1:]
        first.save(self.path, save_all=True, append_images=rest, duration=max(20, int(round(1000.0 / self.fps))),
                   loop=0, optimize=False, disposal=1)
        self.frames = []


class _VideoWriter:
    def __init__(self, path, fps, quality):
        import imageio.v2 as iio
        suffix = os.path.splitext(path)[1].lower()
        codec = {".webm": "libvpx-vp9"}.get(suffix, "libx264")
        self.w = iio.get_writer(path, format="FFMPEG", mode="I", fps=fps, codec=codec, quality=quality,
                                pixelformat="yuv420p", macro_block_size=1, ffmpeg_log_level="error")

    def append(self, im):
        self.w.append_data(np.asarray(im))

    def close(self):
        self.w.close()


def animate(sim, frames: int, path, every: int = 1, steps_per_frame: int = 1, view: str = "xz",
            color: Optional[str] = "density", fps: float = 30, size=(640, 360), progress: Optional[bool] = None,
            bounds=None, history: Optional[History] = None, callback: Optional[Callable] = None,
            quality: float = 7, renderer: Optional[Renderer] = None, **render_kw) -> str:
    """Step ``sim`` and write an animation of its tracers (and bodies) to ``path``.

    The animation has exactly ``frames`` images; before each one the simulation advances
    ``steps_per_frame * every`` steps (``every`` is ``Sim.step``'s name for the same thing;
    the two multiply), so afterwards ``sim.frame`` has grown by ``frames * steps_per_frame *
    every``.  ``path`` ending in ``.gif`` is written with Pillow (frames are kept in memory,
    quantised to 256 colours), ``.mp4`` (or ``.mov``, ``.mkv``, ``.webm``, ``.avi``) through
    imageio-ffmpeg (H.264, yuv420p; odd sizes are rounded up to even).

    ``view``, ``color``, ``size`` (width, height), ``bounds`` and ``render_kw`` (``cmap``,
    ``exposure``, ``vrange``, ``label``, ``title``, ...) configure the :class:`Renderer`; or
    pass a ready ``renderer``.  ``history``: a :class:`vortonpy.plot.History` that records
    every step (and the initial state, if it is empty).  ``callback(sim)`` runs after every
    step.  ``progress``: a tqdm bar over frames (None: only where a person is watching, never
    in CI).  If a step fails (for example ``FloatingPointError``), the frames rendered so far are
    still written, then the error propagates.  Returns ``path`` as a string.
    """
    path = os.fspath(path)
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise ValueError(f"frames must be a positive int, got {frames!r}")
    for name, val in (("every", every), ("steps_per_frame", steps_per_frame)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps!r}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix != ".gif" and suffix not in VIDEO_SUFFIXES:
        raise ValueError(f"path must end in .gif or one of {', '.join(VIDEO_SUFFIXES)}, got {path!r}")
    if renderer is None:
        w, h = int(size[0]), int(size[1])
        if suffix in VIDEO_SUFFIXES:
            w, h = w + w % 2, h + h % 2
        renderer = Renderer(sim, view=view, color=color, size=(w, h), bounds=bounds, **render_kw)
    elif suffix in VIDEO_SUFFIXES and (renderer.size[0] % 2 or renderer.size[1] % 2):
        raise ValueError(f"video sizes must be even, the renderer's is {renderer.size}")
    steps = int(steps_per_frame) * int(every)
    if history is not None and len(history) == 0:
        history.record(sim)

    if history is not None and callback is not None:
        def per_step(s):
            history.record(s)
            callback(s)
    elif history is not None:
        per_step = history.record
    else:
        per_step = callback

    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    writer = _GifWriter(path, fps) if suffix == ".gif" else _VideoWriter(path, fps, quality)
    from ._sim import _want_progress
    bar = None
    if _want_progress(progress):
        from tqdm.auto import tqdm
        bar = tqdm(total=int(frames), unit="frame", leave=False)
    # Each image goes to the writer after the next step, not before it: ffmpeg encodes a frame
    # on every core as soon as it arrives, and would take them from that step; this way it
    # encodes while the next image is rendered, on one core.
    pending = None
    try:
        for _ in range(int(frames)):
            sim.step(steps, progress=False, callback=per_step, every=1)
            if pending is not None:
                writer.append(pending)
            pending = renderer.render(sim)
            if bar is not None:
                bar.update(1)
    finally:
        try:
            if pending is not None:
                writer.append(pending)
        finally:
            if bar is not None:
                bar.close()
            writer.close()
    return path


def show(path, width: Optional[int] = None):
    """Display an animation or image in a notebook: an ``IPython.display.Video`` (embedded,
    looping) for videos, an ``IPython.display.Image`` for GIF/PNG.  IPython is imported only
    here."""
    from IPython import display
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in VIDEO_SUFFIXES:
        kw = {"width": width} if width else {}
        return display.Video(path, embed=True, html_attributes="controls loop autoplay muted", **kw)
    return display.Image(filename=path, width=width)


inline = show

# ``vortonpy.animate`` is this module's function (the package imports it by name), so the
# helpers are attached to it as well: ``vp.animate.show(path)``.
animate.show = show
animate.inline = inline
animate.Renderer = Renderer
animate.render_frame = render_frame
animate.ffmpeg_works = ffmpeg_works
