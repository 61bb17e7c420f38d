"""The run loop (``jaxsample.runs``): hooks owned per run, the iteration
counts a result carries, and no game in the generic code."""

from __future__ import annotations

import ast
import re
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample.algos.trainer import Reports

ROOT = Path(__file__).resolve().parents[1]

#: The names that would mean the generic code knows a game.
GAME_NAMES = re.compile(r"\bgames\b|win_or_draw|win-or-draw|vs_random|is_game|\bMETRICS\b")
#: The games' own entry points, which may name them: ``LoadedRun.play`` (and
#: ``is_game``, whether a run can play), ``jaxsample eval --opponent``.
ENTRY_POINTS = {
    "jaxsample/runs/loaded.py": {
        "LoadedRun.play",
        "LoadedRun.is_game",
        "LoadedRun.match",
        "LoadedRun.video",
    },
    "jaxsample/cli/train.py": {"evaluate", "_play"},
    "jaxsample/cli/parser.py": {"_add_eval"},
}


def _outside_entry_points(path: Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of ``path`` outside its `ENTRY_POINTS`."""
    skip = ENTRY_POINTS.get(path.relative_to(ROOT).as_posix(), set())
    lines = path.read_text().splitlines()
    hidden: set[int] = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                if name in skip:
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    hidden.update(range(first, child.end_lineno + 1))
                visit(child, name + ".")

    visit(ast.parse("\n".join(lines)), "")
    return [(i, line) for i, line in enumerate(lines, 1) if i not in hidden]


def test_the_run_loop_runs_and_cli_name_no_game() -> None:
    """0 game-specific names in the run loop, its program strategies, the
    report, ``runs/`` and ``cli/``, apart from the games' own entry points."""
    # runs/video.py draws a game's episodes against its opponent, as
    # LoadedRun.play plays them: a games' entry point as a whole
    files = [p for p in sorted((ROOT / "jaxsample" / "runs").glob("*.py")) if p.name != "video.py"]
    files += sorted((ROOT / "jaxsample" / "cli").glob("*.py"))
    assert len(files) > 10
    hits = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in files
        for i, line in _outside_entry_points(path)
        if GAME_NAMES.search(line)
    ]
    assert hits == []
    # the exclusions are real: the entry points do name the games
    loaded = (ROOT / "jaxsample/runs/loaded.py").read_text()
    assert GAME_NAMES.search(loaded) and not any(
        GAME_NAMES.search(line)
        for _, line in _outside_entry_points(ROOT / "jaxsample/runs/loaded.py")
    )


class _Toy:
    """A Trainer whose iteration is a few flops."""

    num_iterations = 6
    steps_per_iteration = 10
    reports = Reports(evaluation=("score",))

    def hparams(self, **overrides):
        return {"lr": jnp.asarray(overrides.get("lr", 0.5), jnp.float32)}

    def init(self, key, hparams=None):
        hparams = self.hparams() if hparams is None else hparams
        return {"x": jax.random.uniform(key), "lr": hparams["lr"], "i": jnp.zeros((), jnp.int32)}

    def iteration(self, state):
        x = state["x"] * (1 - state["lr"]) + 1.0
        score = jnp.where(state["i"] == 2, x, jnp.nan)  # an evaluation at iteration 3 only
        metrics = {"episode_return_mean": x, "loss": x * 3, "score": score}
        return {**state, "x": x, "i": state["i"] + 1}, metrics


def test_one_compiled_program_run_by_two_threads_reports_to_each_its_own() -> None:
    """The hooks are the run's: one compiled program run at once by two
    threads (two states), each run's progress callbacks see its own
    iterations only (and in order); its stop check is its own too."""
    from jaxsample.runs import loop, programs

    trainer = _Toy()
    runs = loop.runs_of(trainer, jax.random.key(0), 2)
    program, state = programs.OneProgram.compile(trainer, runs, 6, 2)
    states = [state, {**jax.tree.map(jnp.copy, state), "x": state["x"] + 100.0}]
    seen: dict[int, list] = {0: [], 1: []}
    out: dict[int, tuple] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(r: int) -> None:
        def progress(done, history, seconds) -> None:
            seen[r].append((done, {k: v.copy() for k, v in history.items()}))
            time.sleep(0.05)  # the other run's program goes on meanwhile

        try:
            barrier.wait()
            # run 1 asks to stop at its first check: run 0 must not stop
            hooks = programs.Hooks(progress=progress, stop=(lambda: r == 1))
            out[r] = program.run(states[r], hooks)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    _, history0, _ = out[0]
    _, history1, _ = out[1]
    assert history0["loss"].shape == (2, 6) and history1["loss"].shape == (2, 1)
    # run 0: every 2 iterations and at the evaluation (3), its own values
    assert [done for done, _ in seen[0]] == [2, 3, 4, 6]
    for done, history in seen[0]:
        np.testing.assert_array_equal(history["loss"], history0["loss"][:, :done])
    # run 1 stopped after its first iteration: no report was due
    assert seen[1] == []
    assert (history1["loss"] > 100).all() and (history0["loss"] < 100).all()


def test_two_runs_of_one_config_at_once_each_get_their_own_progress() -> None:
    """``runs.train`` of one config in two threads at once (seeds 0 and 1: the
    same program): each run's progress events are its own, and its result
    carries the iterations done and planned."""
    from jaxsample import runs
    from jaxsample.algos.configs import PPOConfig

    config = PPOConfig(
        env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=128, hidden_sizes=(8,),
        update_epochs=1, num_minibatches=1,
    )  # fmt: skip
    events: dict[int, list] = {0: [], 1: []}
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(seed: int) -> None:
        def progress(event) -> None:
            events[seed].append(event)
            time.sleep(0.02)

        try:
            barrier.wait()
            results[seed] = runs.train(config, seed=seed, chunks=4, progress=progress, say=None)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    losses = []
    for seed in (0, 1):
        result = results[seed]
        assert result.iterations == result.num_iterations == 8 and not result.interrupted
        assert [e["phase"] for e in events[seed]] == ["compiling"] + ["running"] * 4
        running = events[seed][1:]
        assert [e["steps"] for e in running] == [32, 64, 96, 128]
        loss = result.training.metrics["loss"]
        for e, done in zip(running, (2, 4, 6, 8), strict=True):  # its own run's figures
            # (the recent window of an 8-iteration run is all of it)
            assert e["recent_loss"] == pytest.approx(float(loss[:, :done].mean()))
        losses.append(loss)
    assert not np.array_equal(losses[0], losses[1])  # a leaked event would show


def test_chunks_run_meanwhile_on_a_worker_beside_the_first_chunks() -> None:
    """``meanwhile`` runs once, on another thread, after the chunk program is
    compiled (its error dropped): what a run folder imports for its checkpoints
    while the first chunks run."""
    from jaxsample.runs import loop

    calls: list[tuple[str, bool]] = []

    def meanwhile() -> None:
        import jax._src.dispatch  # anything: an import

        calls.append((threading.current_thread().name, jax.numpy.zeros(1).shape == (1,)))
        raise RuntimeError("dropped")

    result = loop.run_training(_Toy(), jax.random.key(0), seeds=2, chunks=3, meanwhile=meanwhile)
    assert result.iterations == result.num_iterations
    for _ in range(100):  # it may end after the run: wait for it
        if calls:
            break
        time.sleep(0.05)
    assert len(calls) == 1 and calls[0][0].startswith("jaxsample-compile") and calls[0][1]


def test_runs_fold_their_keys_in_inside_init_and_make_no_program_before(caplog) -> None:
    """`runs_of` is numpy and the key as given (no program compiled); init
    folds the keys in (`init_function`) to the state that vmapping
    ``trainer.init`` over `run_inputs`'s keys gives, bit for bit, for one run
    and for seeds x a sweep."""
    import logging

    from jaxsample.algos import ppo
    from jaxsample.runs import loop, programs

    trainer = ppo.make_train(
        ppo.PPOConfig(num_envs=2, num_steps=4, total_timesteps=64, hidden_sizes=(4,))
    )
    key = jax.random.key(7)
    for seeds, sweep in ((1, None), (2, trainer.hparams(lr=np.asarray([1e-3, 2e-3], np.float32)))):
        with caplog.at_level(logging.WARNING), jax.log_compiles(True):
            caplog.clear()
            runs = loop.runs_of(trainer, key, seeds, sweep)
        assert not [r for r in caplog.records if "Compiling" in r.getMessage()]
        assert runs.key is key and runs.seed.tolist() == [
            s for s in range(seeds) for _ in range(1 if sweep is None else 2)
        ]
        got = jax.jit(programs.init_function(trainer))(*runs)
        keys, hparams = loop.run_inputs(trainer, key, seeds, sweep)
        want = jax.jit(jax.vmap(trainer.init))(keys, hparams)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            if jnp.issubdtype(g.dtype, jax.dtypes.prng_key):
                g, w = jax.random.key_data(g), jax.random.key_data(w)
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize(
    "key, error, message",
    [
        (jax.random.PRNGKey(0), TypeError, "raw jax.random.PRNGKey"),
        (0, TypeError, "key must be a typed PRNG key"),
        (jax.random.split(jax.random.key(0), 2), ValueError, "single key"),
    ],
)
def test_run_training_names_a_bad_key_before_anything_compiles(key, error, message) -> None:
    from jaxsample.runs import loop

    with pytest.raises(error, match=message):
        loop.run_training(_Toy(), key, seeds=1)


def test_hparams_are_device_arrays_outside_a_trace_and_tracers_inside() -> None:
    """A trainer's ``hparams`` (numpy put on the device, no program of its
    own) are float32 ``jax.Array`` s broadcast to one shape; called inside a
    traced function with a traced override they are the same values."""
    from jaxsample.algos import ppo

    trainer = ppo.make_train(ppo.PPOConfig(num_envs=2, num_steps=4, total_timesteps=64))
    hp = trainer.hparams(lr=[1e-3, 2e-3])
    assert all(isinstance(v, jax.Array) for v in jax.tree.leaves(hp))
    assert {(v.shape, v.dtype) for v in jax.tree.leaves(hp)} == {((2,), np.dtype(np.float32))}
    np.testing.assert_array_equal(np.asarray(hp.clip_eps), np.float32([0.2, 0.2]))
    traced = jax.jit(lambda lr: trainer.hparams(lr=lr))(jnp.asarray([1e-3, 2e-3]))
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(hp), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
