"""The README's ten-line API example runs as written and its video shows the scene: the
ball and the smoke stay inside the rendered view, which does not zoom out into emptiness."""
import os
import re

import numpy as np
import pytest

import vortonpy as vp
from vortonpy.animate import Renderer

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def readme_example() -> str:
    """The first Python block under the README's "The API in ten lines"."""
    text = open(README, encoding="utf-8").read()
    section = text.split("## The API in ten lines", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_is_ten_lines_and_says_gravity_is_on():
    code = readme_example()
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.startswith("import ")]
    assert len(lines) <= 12, code
    assert "gravity" in code and "default" in code  # the example says gravity is on by default


@pytest.mark.slow  # renders the README's video
def test_readme_example_video_keeps_ball_and_smoke_in_view(tmp_path, monkeypatch):
    """Runs the README's code with half the frames (a step before the video and the video's
    frames), recording every rendered frame's view: the ball's centre is inside it, at least
    90% of the tracers are, and the view's width grows by less than 1.5x (the camera widens
    to keep the scene in frame; a ball falling away would widen it without bound and leave
    the smoke a speck)."""
    code = readme_example()
    code, n_steps = re.subn(r"sim\.step\((\d+)\)", lambda m: f"sim.step({max(1, int(m.group(1)) // 2)})", code)
    code, n_frames = re.subn(r"vp\.animate\(sim, (\d+),", lambda m: f"vp.animate(sim, {max(2, int(m.group(1)) // 2)},",
                             code)
    assert n_steps == 1 and n_frames == 1, code
    if not vp.animate.ffmpeg_works():
        code = code.replace('"run.mp4"', '"run.gif"')  # the same frames through Pillow

    views = []
    render = Renderer.render

    def recording_render(self, sim):
        image = render(self, sim)
        h0, h1, v0, v1 = self.bounds
        a, b = self.axes
        p = np.asarray(sim.tracers.position)
        inside = (p[:, a] >= h0) & (p[:, a] <= h1) & (p[:, b] >= v0) & (p[:, b] <= v1)
        c = sim.bodies[0].position
        views.append(dict(width=h1 - h0, tracers_inside=inside.mean(),
                          ball_inside=h0 <= c[a] <= h1 and v0 <= c[b] <= v1))
        return image

    monkeypatch.setattr(Renderer, "render", recording_render)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})

    assert len(views) >= 2
    assert all(v["ball_inside"] for v in views), views
    assert min(v["tracers_inside"] for v in views) >= 0.9, views
    assert views[-1]["width"] < 1.5 * views[0]["width"], views
    video = [f for f in os.listdir(tmp_path) if f.startswith("run.")]
    assert video and os.path.getsize(tmp_path / video[0]) > 0


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")
