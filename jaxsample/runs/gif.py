"""gymnax's own frames of a sequence of env states, as an animated GIF.

gymnax draws its envs with matplotlib (``gymnax.visualize``): `Visualizer`
dispatches by env name to a drawing per env (MinAtar's grid, Catch, Pong,
PointRobot, the mazes), and its classic-control drawing is gymnasium's
pygame renderer fed with the gymnax state (``vis_gym``). Here that drawing
goes to a matplotlib ``Figure`` on the Agg canvas (no pyplot, no display);
each frame's pixels become a Pillow image, and Pillow writes the GIF (no
ffmpeg). The classic-control frames keep one gymnasium env for the whole
sequence (gymnax's ``render_gym_frame`` makes and closes one per frame, and
pygame's quit costs ~50 ms each), with gymnax's own state and parameter
mapping (``vis_gym.get_gym_state``, ``set_gym_params``).

Every frame has its own title (the caller's: the step, the return), so no two
consecutive frames are equal and Pillow keeps every one: the GIF has exactly
one frame per state.

Imported only to make a video: it imports gymnax's plotting modules
(matplotlib, seaborn) and, for classic control, gymnasium's pygame renderer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnax.visualize import vis_gym
from gymnax.visualize.visualizer import Visualizer

__all__ = ["write_gif"]

_SIZE, _DPI = (6, 5), 64  # gymnax's Visualizer's figure size; 384 x 320 pixels


class _GymFrames:
    """RGB frames ``[H, W, 3]`` of a gymnax classic-control env's states, from
    one gymnasium env drawn by pygame without a display."""

    def __init__(self, name: str, env_params: Any) -> None:
        # pygame without a window or a sound card (else ALSA errors on stderr)
        for variable, value in (("SDL_VIDEODRIVER", "dummy"), ("SDL_AUDIODRIVER", "dummy"),
                                ("PYGAME_HIDE_SUPPORT_PROMPT", "1")):  # fmt: skip
            os.environ.setdefault(variable, value)
        import gymnasium as gym

        self.name = name
        self.env = gym.make(name, render_mode="rgb_array")
        self.env.reset(seed=0)
        vis_gym.set_gym_params(self.env.unwrapped, name, env_params)

    def __call__(self, state: Any) -> np.ndarray:
        inner = self.env.unwrapped
        inner.state = vis_gym.get_gym_state(state, self.name)
        if self.name == "Pendulum-v1":
            inner.last_u = np.asarray(state.last_u, dtype=np.float64)
        return np.asarray(self.env.render())

    def close(self) -> None:
        self.env.close()


class _Drawing(Visualizer):
    """gymnax's `Visualizer` drawing on an Agg figure of its own (its
    ``init`` / ``update`` dispatch by env name), classic control through
    `_GymFrames`."""

    def __init__(self, env: Any, env_params: Any, states: Sequence[Any]) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        # Visualizer's attributes, without its pyplot figure
        self.env, self.env_params, self.state_seq, self.reward_seq = env, env_params, states, None
        self.fig = Figure(figsize=_SIZE, dpi=_DPI)
        FigureCanvasAgg(self.fig)
        self.ax = self.fig.subplots()
        classic = env.name in vis_gym.SUPPORTED_GYM_ENVS
        self.gym = _GymFrames(env.name, env_params) if classic else None

    def init(self) -> None:
        if self.gym is None:
            super().init()
            return
        self.ax.set_xticks([])
        self.ax.set_yticks([])
        self.im = self.ax.imshow(self.gym(self.state_seq[0]))
        self.fig.tight_layout(rect=[0.02, 0.03, 1.0, 0.95])

    def update(self, frame: int) -> None:
        if self.gym is None:
            super().update(frame)
        else:
            self.im.set_data(self.gym(self.state_seq[frame]))

    def image(self, frame: int, title: str) -> Any:
        """Frame ``frame`` drawn with ``title``, as a Pillow palette image."""
        from PIL import Image

        self.update(frame)
        self.ax.set_title(title, fontsize=11)
        self.fig.canvas.draw()
        rgb = np.asarray(self.fig.canvas.buffer_rgba())[..., :3]
        return Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE)

    def close(self) -> None:
        if self.gym is not None:
            self.gym.close()


def write_gif(
    env: Any, env_params: Any, states: Sequence[Any], titles: Sequence[str], path: str, fps: float
) -> None:
    """Write an animated GIF of ``states`` (one frame each, titled
    ``titles[i]``) of the gymnax env ``env`` (one its `Visualizer` draws)
    to ``path``, ``fps`` frames per second (Pillow stores a frame's duration
    in hundredths of a second), looping."""
    if len(states) != len(titles) or not states:
        raise ValueError(f"states and titles must be non-empty and of one length, got "
                         f"{len(states)} and {len(titles)}")  # fmt: skip
    drawing = _Drawing(env, env_params, states)
    try:
        drawing.init()
        images = [drawing.image(i, title) for i, title in enumerate(titles)]
    finally:
        drawing.close()
    duration = round(1000 / fps)
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:],
                   duration=duration, loop=0)  # fmt: skip
