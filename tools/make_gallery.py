"""Render the gallery pictures: one still per built-in scene (its state after the scene's
default run, framed on that state) and the drag curve of ball-through-smoke.

    python tools/make_gallery.py [--frames N] [--out docs/images] [--scenes a,b]
"""
import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import vortonpy as vp  # noqa: E402
from vortonpy.animate import Renderer  # noqa: E402
from vortonpy.cli import DEFAULT_FRAMES, SCENE_VIEW  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=None, help="steps per scene (default: the CLI's)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "images"))
    ap.add_argument("--scenes", default=",".join(vp.scenes.SCENES))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.scenes.split(","):
        sim = vp.scenes.SCENES[name]()
        view, color = SCENE_VIEW.get(name, ("xz", "density"))
        hist = vp.plot.History(sim) if name == "ball_through_smoke" else None
        n = args.frames or DEFAULT_FRAMES.get(name, 200)
        sim.step(n, callback=hist, progress=False)
        # a still is framed on the final state, with its own colour range, not on the union of
        # every frame as an animation's camera is
        r = Renderer(sim, view=view, color=color, size=(320, 200), title=name)
        r.fit_view(sim)
        r.render(sim).save(os.path.join(args.out, f"{name}.png"))
        if hist is not None:
            vp.plot.drag_curve(hist).savefig(os.path.join(args.out, "drag_curve.png"), dpi=90)
        print(f"{name}: {n} steps, {len(sim.vortons)} vortons, {len(sim.tracers)} tracers")


if __name__ == "__main__":
    main()
