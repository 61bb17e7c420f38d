"""Episodes you can watch (jaxsample/runs/video.py): a run's greedy episodes
drawn by its suite's renderer, checked by decoding what was written.

A frame is an env state: the reset state, then the state after each step, so
an episode of ``L`` steps has ``L + 1`` frames. The GIF's frames are counted
by Pillow, the animated SVG's frame groups by an XML parser, the Brax
viewer's states from the JSON embedded in its page. The episodes' lengths and
returns are compared with the evaluator's own run of the same keys (what
``jaxsample eval`` reports), and `Evaluator.trace`'s states with the env's own
``is_terminal``."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import re
import types
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample import runs
from jaxsample.algos.configs import PPOConfig
from jaxsample.runs import video

pytestmark = pytest.mark.xdist_group("video")

PIL = pytest.importorskip("PIL.Image")
#: gymnax draws classic control with gymnasium's pygame renderer (the video extra)
needs_pygame = pytest.mark.skipif(
    importlib.util.find_spec("pygame") is None, reason="pygame (the video extra) not installed"
)
QUIET = {"progress": False, "say": None}
TINY = PPOConfig(
    env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=32, hidden_sizes=(8,),
    update_epochs=1, num_minibatches=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """A tiny CartPole run of 2 seeds, loaded from its folder."""
    folder = tmp_path_factory.mktemp("cartpole") / "run"
    runs.train(TINY, seeds=2, folder=folder, chunks=1, **QUIET)
    return runs.load(folder)


def _gif(path: Path) -> tuple[int, list[int]]:
    """The GIF's frame count and each frame's duration (ms), by Pillow."""
    with PIL.open(path) as im:
        durations = []
        for i in range(im.n_frames):
            im.seek(i)
            durations.append(im.info["duration"])
        return im.n_frames, durations


def _svg_frames(path: Path) -> int:
    """The animated SVG's frames: its groups of class ``frame``."""
    root = ET.parse(path).getroot()
    return sum(1 for e in root.iter() if e.get("class") == "frame")


def _brax_states(path: Path) -> int:
    """The states in Brax's viewer page: its system JSON, base64 of zlib."""
    page = path.read_text()
    (system,) = re.findall(r'var system = "([^"]*)"', page)
    data = json.loads(zlib.decompress(base64.b64decode(system)))
    return len(data["states"]["x"])


def _by_hand(run, r: int, seed: int, n: int, agent=None, params=None):
    """The evaluator's own first episodes of envs ``0 .. n - 1`` (what
    ``evaluate`` reduces): lengths and returns."""
    from jaxsample.evaluation import make_evaluator

    env, env_params = run.trainer.env, run.trainer.env_params
    evaluator = make_evaluator(env, env_params, agent or run.agent, n_envs=n,
                               max_steps=n * (run.episode_limit + 1))  # fmt: skip
    key = jax.random.fold_in(jax.random.key(seed), r)
    info = jax.jit(evaluator.run)(key, run.params_of(r) if params is None else params)
    assert bool(np.all(info.completed))
    return tuple(int(x) for x in info.length), tuple(float(x) for x in info.episode_return)


@needs_pygame
@pytest.mark.long  # trains the module's CartPole run (~15 s cold on 2 cores)
def test_a_cartpole_gif_has_one_frame_per_state(cartpole, tmp_path) -> None:
    run = cartpole
    made = run.video(tmp_path / "cp.gif", episodes=2, run=1, seed=3)
    lengths, returns = _by_hand(run, 1, 3, 2)
    assert made.lengths == lengths and made.returns == pytest.approx(returns)
    assert made.ended == (True, True) and made.run == "seed1" and made.format == "gif"
    frames, durations = _gif(tmp_path / "cp.gif")
    assert frames == made.frames == sum(n + 1 for n in lengths)
    assert set(durations) == {50}  # gymnax's classic-control rate, 20 per second
    first = (tmp_path / "cp.gif").read_bytes()
    run.video(tmp_path / "cp.gif", episodes=2, run=1, seed=3)
    assert (tmp_path / "cp.gif").read_bytes() == first  # the same episodes, the same file
    # episode 1 alone, at 5 frames per second
    one = run.video(tmp_path / "one.gif", episodes=[1], run=1, seed=3, fps=5)
    assert one.lengths == lengths[1:] and one.episodes == (1,)
    assert _gif(tmp_path / "one.gif") == (lengths[1] + 1, [200] * (lengths[1] + 1))
    # cut at 3 steps: every episode of CartPole is longer
    cut = run.video(tmp_path / "cut.gif", episodes=2, run=1, seed=3, max_steps=3)
    assert cut.lengths == (3, 3) and cut.ended == (False, False)
    assert _gif(tmp_path / "cut.gif")[0] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp.gif", "cut.gif", "one.gif"]


def test_a_trace_is_the_evaluators_episode_kept_to_its_final_state(cartpole) -> None:
    """`Evaluator.trace` of ranks 0..3: the evaluator's lengths and returns;
    the states before the end are not terminal, the one at the end is (the
    final state, not a reset), and it is held after the end."""
    run = cartpole
    env, env_params = run.trainer.env, run.trainer.env_params
    lengths, returns = _by_hand(run, 0, 7, 4)
    evaluator = run.evaluator(1)
    key = jax.random.fold_in(jax.random.key(7), 0)
    trace = jax.jit(jax.vmap(lambda r: evaluator.trace(key, run.params_of(0), r, 40)))
    episodes = jax.device_get(trace(jnp.arange(4)))
    assert tuple(int(n) for n in episodes.length) == lengths
    assert np.asarray(episodes.reward).sum(1) == pytest.approx(returns)
    assert bool(np.all(episodes.ended))
    terminal = jax.vmap(jax.vmap(lambda s: env.is_terminal(s, env_params)))(episodes.env_state)
    terminal = np.asarray(terminal)
    for e, n in enumerate(lengths):
        assert not terminal[e, :n].any() and terminal[e, n:].all()
        held = jax.tree.map(lambda x, e=e, n=n: np.ptp(x[e, n:], axis=0), episodes.env_state)
        assert all(np.all(d == 0) for d in jax.tree.leaves(held))
        assert not np.asarray(episodes.reward)[e, n:].any()


def test_bad_arguments_are_named_and_nothing_is_written(cartpole, tmp_path) -> None:
    run = cartpole
    cases = [
        ({"path": tmp_path / "cp.svg"}, ValueError, "CartPole-v1 renders an animated GIF: "
         "give a path ending in .gif"),
        ({"episodes": 0}, ValueError, "episodes must be"),
        ({"episodes": [1, 1]}, ValueError, "distinct episode numbers"),
        ({"episodes": 1.5}, TypeError, "episodes must be an int, got 1.5"),
        ({"fps": 0}, ValueError, r"fps must be in \(0, 100\]"),
        ({"max_steps": 0}, ValueError, "max_steps must be"),
        ({"run": 2}, ValueError, r"run must be in 0..1, got 2"),
        ({"opponent": run}, ValueError, "CartPole-v1 is not a two-player game"),
    ]  # fmt: skip
    for options, error, message in cases:
        options = {"path": tmp_path / "cp.gif", **options}
        with pytest.raises(error, match=message):
            run.video(**options)
    assert list(tmp_path.iterdir()) == []


def test_an_env_without_a_renderer_is_one_line_and_nothing_written(
    cartpole, tmp_path, monkeypatch, capsys
) -> None:
    """DeepSea (gymnax, no drawing): one line from Python and from ``jaxsample
    eval --video``, exit status 2, before anything is evaluated."""
    import gymnax

    from jaxsample.cli import main
    from jaxsample.envs import mask_velocity
    from jaxsample.runs import loaded

    env, env_params = gymnax.make("DeepSea-bsuite")
    deep_sea = dataclasses.replace(
        cartpole, trainer=types.SimpleNamespace(env=env, env_params=env_params)
    )
    line = ("DeepSea-bsuite has no renderer (videos are of gymnax's classic control, MinAtar, "
            "Catch, Pong, PointRobot and mazes (GIF), Pgx's games (SVG) and Brax (HTML)): no "
            "video written")  # fmt: skip
    with pytest.raises(ValueError) as e:
        deep_sea.video(tmp_path / "ds.gif")
    assert str(e.value) == line
    monkeypatch.setattr(loaded, "load", lambda *a, **k: deep_sea)
    with pytest.raises(SystemExit) as e:
        main(["eval", "--checkpoint", str(tmp_path), "--video", str(tmp_path / "ds.gif")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"jaxsample eval: error: --video '{tmp_path / 'ds.gif'}': {line}"]
    assert list(tmp_path.iterdir()) == []
    # the renderer looks through jaxsample's observation masks
    masked = mask_velocity(gymnax.make("CartPole-v1")[0])
    assert video.env_format(masked) == "gif" and video.env_format(env) is None


@needs_pygame
def test_eval_video_draws_run_0s_greedy_episodes(cartpole, tmp_path, capsys) -> None:
    from jaxsample.cli import main

    path = tmp_path / "cp.gif"
    argv = ["eval", "--checkpoint", cartpole.folder, "--episodes", "2", "--seed", "3",
            "--video", str(path), "--video-episodes", "3", "--video-fps", "10"]  # fmt: skip
    assert main(argv) == 0
    lengths, _ = _by_hand(cartpole, 0, 3, 3)
    frames = sum(n + 1 for n in lengths)
    assert _gif(path) == (frames, [100] * frames)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (f"wrote {path}: {frames} frames of seed0's greedy episode(s) 0, 1, 2 "
                    f"(lengths {', '.join(map(str, lengths))}), the reset state and one frame "
                    "per step")  # fmt: skip
    bad = [
        (["--video-episodes", "0"], "--video-episodes must be >= 1"),
        (["--video", str(tmp_path / "no" / "v.gif")], "does not exist"),
        (["--video", str(tmp_path / "v.html")], "give a path ending in .gif"),
    ]
    for flags, message in bad:
        with pytest.raises(SystemExit) as e:
            main(["eval", "--checkpoint", cartpole.folder, "--video", str(path), *flags])
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp.gif"]


def test_classic_control_without_pygame_is_one_line(tmp_path, monkeypatch) -> None:
    import gymnax

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pygame" else real(name, *a))  # fmt: skip
    env, env_params = gymnax.make("Acrobot-v1")
    with pytest.raises(ImportError) as e:
        video.write_frames(env, env_params, _random_states(env, env_params, 1), tmp_path / "a.gif")
    assert str(e.value) == ("Acrobot-v1 is drawn by gymnasium's renderer, which needs pygame: "
                            "pip install 'jaxsample[video]'")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def _random_states(env, env_params, steps: int, seed: int = 0) -> list:
    """The reset state and ``steps`` states after random legal actions (host arrays)."""
    key = jax.random.key(seed)
    _, state = env.reset(key, env_params)
    states = [state]
    space = env.action_space(env_params)
    for i in range(steps):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, i))
        if hasattr(env, "action_mask"):
            mask = env.action_mask(state, env_params)
            action = jax.random.categorical(k_act, jnp.where(mask, 0.0, -jnp.inf))
        else:
            action = space.sample(k_act)
        _, state, *_ = env.step_env(k_step, state, action, env_params)
        states.append(state)
    return jax.device_get(states)


FAST_GIFS = ("CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "Catch-bsuite")


def _gif_case(name: str) -> object:
    marks = [] if name in FAST_GIFS else [pytest.mark.slow]
    marks += [needs_pygame] if name in video.CLASSIC_CONTROL else []
    return pytest.param(name, marks=marks)


@pytest.mark.parametrize("name", [_gif_case(n) for n in video.CLASSIC_CONTROL + video.DRAWN])
def test_every_env_gymnax_draws_is_a_gif_of_its_states(name, tmp_path) -> None:
    import gymnax

    env, env_params = gymnax.make(name)
    states = _random_states(env, env_params, 3)
    assert video.write_frames(env, env_params, states, tmp_path / "v.gif") == "gif"
    frames, durations = _gif(tmp_path / "v.gif")
    assert frames == 4 and set(durations) == {50 if name in video.CLASSIC_CONTROL else 100}


def test_a_pgx_game_is_an_animated_svg_of_its_states(tmp_path) -> None:
    pytest.importorskip("pgx")
    from jaxsample.envs.suites import registry

    env, env_params = registry.make("pgx/tic_tac_toe")
    states = _random_states(env, env_params, 5)
    assert video.write_frames(env, env_params, states, tmp_path / "g.svg", fps=4) == "svg"
    assert _svg_frames(tmp_path / "g.svg") == 6
    assert "animation:1.5s" in (tmp_path / "g.svg").read_text()  # 6 frames of 0.25 s


@pytest.mark.slow  # Brax's reset and step compile (~12 s on 2 cores)
def test_a_brax_env_is_its_viewer_with_every_state(tmp_path) -> None:
    pytest.importorskip("brax")
    from jaxsample.envs.suites import registry

    env, env_params = registry.make("brax/inverted_pendulum")
    states = _random_states(env, env_params, 4)
    assert video.write_frames(env, env_params, states, tmp_path / "b.html") == "html"
    assert _brax_states(tmp_path / "b.html") == 5


@pytest.mark.slow  # trains Breakout-MinAtar
def test_a_trained_minatar_run_is_a_gif(tmp_path) -> None:
    config = dataclasses.replace(TINY, env_name="Breakout-MinAtar")
    runs.train(config, folder=tmp_path / "run", chunks=1, **QUIET)
    run = runs.load(tmp_path / "run")
    made = run.video(tmp_path / "b.gif", episodes=2, max_steps=60)
    assert _gif(tmp_path / "b.gif") == (made.frames, [100] * made.frames)
    assert made.frames == sum(n + 1 for n in made.lengths)
    lengths, _ = _by_hand(run, 0, 0, 2)
    assert made.lengths == tuple(min(n, 60) for n in lengths)
    assert made.ended == tuple(n <= 60 for n in lengths)


@pytest.mark.slow  # trains and plays tic-tac-toe (~40 s of compiles on 2 cores)
def test_a_trained_game_is_an_svg_against_random_and_itself(tmp_path, capsys) -> None:
    pytest.importorskip("pgx")
    from jaxsample.algos import configs
    from jaxsample.cli import main

    config = dataclasses.replace(
        configs.SELF_PLAY_TIC_TAC_TOE, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2,
        hidden_sizes=(8,),
    )  # fmt: skip
    runs.train(config, folder=tmp_path / "a", **QUIET)
    run = runs.load(tmp_path / "a")
    made = run.video(tmp_path / "g.svg", episodes=2, seed=3)  # the agent opens game 0
    match, other = run.match("random")
    lengths, _ = _by_hand(run, 0, 3, 2, agent=match, params=(run.params_of(0), other))
    assert made.lengths == lengths and all(made.ended)
    assert _svg_frames(tmp_path / "g.svg") == made.frames == sum(n + 1 for n in lengths)
    itself = run.video(tmp_path / "self.svg", episodes=[1], opponent=run)
    assert _svg_frames(tmp_path / "self.svg") == itself.frames == itself.lengths[0] + 1
    argv = ["eval", "--checkpoint", str(tmp_path / "a"), "--episodes", "2", "--opponent",
            str(tmp_path / "a"), "--video", str(tmp_path / "cli.svg")]  # fmt: skip
    assert main(argv) == 0
    assert f"wrote {tmp_path / 'cli.svg'}: " in capsys.readouterr().out
    assert _svg_frames(tmp_path / "cli.svg") >= 6  # a game of tic-tac-toe: 5 moves at least


@pytest.mark.slow  # Brax's compile and a tiny PPO run (~1-2 min on 2 cores)
def test_a_trained_brax_run_is_its_viewer(tmp_path) -> None:
    pytest.importorskip("brax")
    config = dataclasses.replace(TINY, env_name="brax/inverted_pendulum")
    runs.train(config, folder=tmp_path / "run", chunks=1, **QUIET)
    run = runs.load(tmp_path / "run")
    made = run.video(tmp_path / "b.html", episodes=2, max_steps=30)
    assert _brax_states(tmp_path / "b.html") == made.frames == sum(n + 1 for n in made.lengths)
    lengths, _ = _by_hand(run, 0, 0, 2)
    assert made.lengths == tuple(min(n, 30) for n in lengths)
    assert made.ended == tuple(n <= 30 for n in lengths)
