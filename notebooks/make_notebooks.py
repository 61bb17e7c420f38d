"""Write the notebooks of this folder from the cell sources below (no outputs).

Run ``python3 notebooks/make_notebooks.py`` after editing a cell here; the test
suite checks that the committed ``.ipynb`` files match these sources, carry no
outputs, and run top to bottom (``JAXSAMPLE_NOTEBOOK_SCALE=small`` shrinks them).
"""

from __future__ import annotations

import pathlib

import nbformat
from nbformat import v4

HERE = pathlib.Path(__file__).resolve().parent

INSTALL = """\
# Install jaxsample when this Python does not have it (Colab, a fresh runtime),
# from the first of: the pip requirement in JAXSAMPLE_PIP_SPEC (a wheel's path or
# URL, a git URL); the checkout this notebook sits in (its notebooks/ folder); a
# wheel uploaded next to this notebook (on Colab: the Files panel, /content). Build
# the wheel in a checkout with `pip wheel --no-deps -w dist .`.
import glob
import importlib.util
import os

if importlib.util.find_spec("jaxsample") is None:
    spec = os.environ.get("JAXSAMPLE_PIP_SPEC")
    wheels = sorted(glob.glob("jaxsample-*.whl"), key=os.path.getmtime)
    if spec:
        %pip install -q {spec}
    elif os.path.isfile("../pyproject.toml") and os.path.isdir("../jaxsample"):
        %pip install -q -e ..
    elif wheels:
        wheel = wheels[-1]
        %pip install -q {wheel}
    else:
        raise RuntimeError(
            "jaxsample is not installed: upload a jaxsample-*.whl (built in a checkout with "
            "`pip wheel --no-deps -w dist .`) next to this notebook, or set JAXSAMPLE_PIP_SPEC "
            "to a pip requirement"
        )"""

SCALE = """\
# The test suite runs this notebook small (JAXSAMPLE_NOTEBOOK_SCALE=small).
SMALL = os.environ.get("JAXSAMPLE_NOTEBOOK_SCALE") == "small"
"""

QUICKSTART = [
    (
        "markdown",
        """\
# jaxsample quickstart

jaxsample collects reinforcement-learning experience inside XLA: the environment
step (a [gymnax](https://github.com/RobertTLange/gymnax) env), the agent step and
the writes into the batch are pure functions of **one** environment, which
jaxsample `vmap`s over `B` environments and `scan`s over `T` time steps. One
`collect` call is one compiled program, on CPU, GPU or TPU.

This notebook makes a sampler, collects a batch, looks at what is in it, plots
the episodes it finished, and shows the three reset modes side by side.

**What to expect.** The first cell installs jaxsample if this Python lacks it
(about a minute on Colab). Then every cell takes seconds on a CPU runtime: two
figures (episode returns and lengths; the reset modes), and printed shapes.""",
    ),
    ("code", INSTALL),
    (
        "code",
        """\
import gymnax
import jax
import matplotlib.pyplot as plt
import numpy as np

import jaxsample as js

"""
        + SCALE
        + """
print("jax", jax.__version__, "on", jax.default_backend(), jax.devices()[0].device_kind)""",
    ),
    (
        "markdown",
        """\
## A sampler

`make_sampler(env, env_params, agent, BatchSpec(T, B), ...)` checks its arguments
in Python and returns an object of two pure functions: `init(key, agent_params)`
makes the state (the `B` envs, reset and then decorrelated: each takes its own
random number `1..max_decorrelation_steps` of random actions, so they do not
move in lockstep) and `collect(state, agent_params)` returns the next state and
a `Batch` of `T` steps. Jit them yourself; donating the state lets XLA update it
in place. The agent here acts uniformly at random and has no parameters (`()`).""",
    ),
    (
        "code",
        """\
env, env_params = gymnax.make("CartPole-v1")
agent = js.agents.RandomAgent(env.action_space(env_params))
T, B = 128, 64
sampler = js.make_sampler(
    env, env_params, agent, js.BatchSpec(T=T, B=B),
    max_decorrelation_steps=100, reset_mode="auto", discount=0.99,
)
state = jax.jit(sampler.init)(jax.random.key(0), ())
collect = jax.jit(sampler.collect, donate_argnums=0)
state, batch = collect(state, ())      # compiles once, then runs
state, batch = collect(state, ())      # the next T steps of the same B envs""",
    ),
    (
        "markdown",
        """\
## What is in a Batch

Every array is time-major, `[T, B, ...]`. At step `t` the agent saw
`observation[t]` (and `prev_action[t]`, `prev_reward[t]`), chose `action[t]`,
and the env returned `reward[t]`, `terminated[t]`, `truncated[t]` and
`done[t] = terminated | truncated`. A done env resets at once: `observation[t+1]`
is then the reset observation, and the true next observation is kept in
`final_observation[t]` (so a truncated step can still be bootstrapped).""",
    ),
    (
        "code",
        """\
samples = batch.samples
fields = {
    "env.observation": samples.env.observation,
    "env.final_observation": samples.env.final_observation,
    "env.reward": samples.env.reward,
    "env.prev_reward": samples.env.prev_reward,
    "env.terminated": samples.env.terminated,
    "env.truncated": samples.env.truncated,
    "env.done": samples.env.done,
    "agent.action": samples.agent.action,
    "agent.prev_action": samples.agent.prev_action,
    "valid": samples.valid,
}
for name, x in fields.items():
    print(f"{name:<24} {x.shape!s:<14} {x.dtype}")

# After a done step, the next inputs restart: null previous action, zero reward.
done = np.asarray(samples.env.done)
print("episodes ended in this batch:", int(done.sum()))
prev_reward = np.asarray(samples.env.prev_reward)
print("prev_reward after a done step is 0:", bool((prev_reward[1:][done[:-1]] == 0).all()))""",
    ),
    (
        "markdown",
        """\
## Episodes: returns and lengths

`batch.traj_infos` holds the running statistics of each env's trajectory
(`length`, `episode_return`, `discounted_return`, `nonzero_rewards`), `[T, B]`;
where `completed` is True they are the totals of an episode that ended at that
step. `js.summarize` reduces them inside `jit`. Collect a few batches and plot
the finished episodes.""",
    ),
    (
        "code",
        """\
n_batches = 3 if SMALL else 20
summarize = jax.jit(js.summarize)
returns, lengths, discounted = [], [], []
for _ in range(n_batches):
    state, batch = collect(state, ())
    ti = jax.device_get(batch.traj_infos)
    returns.extend(ti.episode_return[ti.completed])
    lengths.extend(ti.length[ti.completed])
    discounted.extend(ti.discounted_return[ti.completed])
summary = summarize(batch.traj_infos)
for k in ["n_trajectories", "episode_return_mean", "length_mean", "discounted_return_mean"]:
    print(f"{k:<24} {float(summary[k]):8.2f}   (last batch)")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
ax1.hist(returns, bins=30)
ax1.set(xlabel="episode return", ylabel="episodes", title=f"{len(returns)} random episodes")
ax2.scatter(lengths, discounted, s=6, alpha=0.5, label="episodes")
L = np.arange(1, max(lengths) + 1)
ax2.plot(L, (1 - 0.99**L) / (1 - 0.99), color="black", lw=0.8, label="sum of 0.99^k, k < length")
ax2.set(xlabel="episode length", ylabel="discounted return", title="discount 0.99")
ax2.legend()
fig.tight_layout()
plt.show()""",
    ),
    (
        "markdown",
        """\
## Three reset modes

* `"auto"` (rlpyt's ResetCollector): a done env resets at once, mid-batch.
* `"wait"` (WaitResetCollector): a done env idles for the rest of the batch
  (`valid` False, its steps zeros) and resets when the next batch starts: at
  most one episode end per env per batch, which recurrent learners like.
* `"episodic"` (BatchedEpisodicSampler): every batch resets all envs first and
  is one `T`-step episode per env; `done[-1]` is True for every env.

Below, the same 8 envs for 64 steps in each mode: white is a valid step, grey
an idle one, and a red dot marks the step where an episode ended
(`traj_infos.completed`).""",
    ),
    (
        "code",
        """\
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharey=True)
for ax, mode in zip(axes, ["auto", "wait", "episodic"], strict=True):
    s = js.make_sampler(
        env, env_params, agent, js.BatchSpec(T=64, B=8), reset_mode=mode,
        max_decorrelation_steps=0 if mode == "episodic" else 50,
    )
    st = jax.jit(s.init)(jax.random.key(1), ())
    st, b = jax.jit(s.collect)(st, ())
    valid = np.asarray(b.samples.valid)
    done = np.asarray(b.samples.env.done)
    ended = np.asarray(b.traj_infos.completed)
    ax.imshow(valid.T, cmap="gray", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    t, env_index = np.nonzero(ended)
    ax.scatter(t, env_index, s=10, color="red")
    ax.set(title=f'"{mode}": {int(ended.sum())} episodes ended', xlabel="t")
    print(f"{mode:>8}: episodes ended per env {ended.sum(axis=0).tolist()}, "
          f"valid steps {int(valid.sum())}/{valid.size}, done[-1] all: {bool(done[-1].all())}")
axes[0].set_ylabel("env")
fig.tight_layout()
plt.show()""",
    ),
    (
        "markdown",
        """\
In `"wait"` and `"episodic"` mode a done flag stays up while the env idles, so
count episodes with `traj_infos.completed` (one per episode), not with `done`.

Next: `end_to_end_ppo.ipynb` trains PPO with this sampler inside one compiled
program, and `accelerator_benchmark.ipynb` measures how fast it runs on your
device.""",
    ),
]

PPO = [
    (
        "markdown",
        """\
# End-to-end PPO, vmapped over seeds

`jaxsample.algos.ppo.make_train(config)` returns a trainer of pure functions;
`trainer.train(key, hparams)` is a whole PPO run — collection with the jaxsample
sampler, GAE, the epochs and minibatches — inside one `lax.scan`. Jit it and it
is one compiled program; `vmap` it and several seeds (and learning rates) train
at once in that program.

The defaults are CleanRL's CartPole-v1 PPO (4 envs x 128 steps, 5e5 steps,
Adam 2.5e-4 annealed, 4 epochs x 4 minibatches).

**What to expect.** After the install cell (about a minute on Colab), compiling
takes ~15-30 s and the 8 runs of 5e5 steps ~40 s on a 2-core CPU (less on a
GPU); one figure of learning curves, where every run ends near 500. Then the
same training as `jaxsample train` runs it, from the tuned preset: its lines,
its display and its table.""",
    ),
    ("code", INSTALL),
    (
        "code",
        """\
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from jaxsample.algos import ppo

"""
        + SCALE
        + """
print("jax", jax.__version__, "on", jax.default_backend(), jax.devices()[0].device_kind)""",
    ),
    (
        "markdown",
        """\
## One compiled call: 4 seeds x 2 learning rates

`trainer.hparams(lr=...)` makes the learning rate (and the clip, entropy and
value coefficients) an array: each of the 8 runs below gets its own key and its
own learning rate, and `jax.vmap(trainer.train)` trains them together.""",
    ),
    (
        "code",
        """\
config = ppo.PPOConfig(total_timesteps=4 * 128 * 6 if SMALL else 500_000)
trainer = ppo.make_train(config)
seeds = 2 if SMALL else 4
lrs = [2.5e-4, 1e-3]
run_lr = np.repeat(lrs, seeds)                                   # [runs]
keys = jax.random.split(jax.random.key(0), len(run_lr))
hparams = trainer.hparams(lr=jnp.asarray(run_lr, jnp.float32))

train = jax.jit(jax.vmap(trainer.train))
t0 = time.perf_counter()
compiled = train.lower(keys, hparams).compile()
print(f"compiled in {time.perf_counter() - t0:.1f} s")
t0 = time.perf_counter()
state, metrics = jax.block_until_ready(compiled(keys, hparams))
seconds = time.perf_counter() - t0
steps = len(run_lr) * trainer.num_iterations * config.batch_size
print(f"{len(run_lr)} runs x {trainer.num_iterations} iterations in {seconds:.1f} s "
      f"({steps / seconds:,.0f} env steps/s including the learning)")""",
    ),
    (
        "markdown",
        """\
## Learning curves

`metrics` holds one value per run and iteration (`[runs, iterations]`):
`average_return` is the mean return of the last `metrics_window` episodes,
`env_steps` the steps taken so far by one run.""",
    ),
    (
        "code",
        """\
metrics = jax.device_get(metrics)
x = metrics["env_steps"][0]
fig, ax = plt.subplots(figsize=(7, 4))
for lr, color, ls in zip(lrs, ["tab:blue", "tab:orange"], ["-", "--"], strict=True):
    runs = metrics["average_return"][run_lr == lr]
    for curve in runs:
        ax.plot(x, curve, color=color, alpha=0.35, lw=0.8)
    label = f"lr {lr:g} (mean of {len(runs)})"
    ax.plot(x, np.nanmean(runs, axis=0), color=color, ls=ls, lw=2, label=label)
ax.set(xlabel="environment steps per run", ylabel="average return (last 20 episodes)",
       title="PPO on CartPole-v1")
ax.legend()
ax.grid(alpha=0.3)
plt.show()

for lr, final in zip(run_lr, metrics["average_return"][:, -1], strict=True):
    print(f"lr {lr:g}: final average return {final:.1f}")""",
    ),
    (
        "markdown",
        """\
CartPole's best return is 500. On a 2-core CPU the full run (8 runs x 5e5
steps) takes well under a minute after compiling; on a GPU the same program
runs unchanged. `jaxsample.algos.dqn` and the recurrent PPO
(`PPOConfig(recurrent=True)`) follow the same pattern.

## A run, as the command line trains it

`jaxsample.runs.train` is what `jaxsample train` calls: the run with its
display, summary, outputs, checkpoints (`folder=`) and the interrupt button
(which stops it, keeps what it trained and says so). `preset="CartPole-v1"`
trains what `jaxsample train --env CartPole-v1` trains: the tuned settings of
`jaxsample/algos/presets.toml` (8 envs x 32 steps, 100,000 steps), not the
defaults above; a config given (`runs.train(config)`) is trained exactly as
given. Its first line names the preset and the steps per seed; the closing
table gives each seed's final return, the mean of the episodes of its last
iterations (the figure the display and the CSV show as the recent return).""",
    ),
    (
        "code",
        """\
from jaxsample import runs

# jaxsample train --env CartPole-v1 --seeds 2 (the test suite runs 4 iterations)
overrides = {"total_timesteps": 4 * 256} if SMALL else {}
result = runs.train(preset="CartPole-v1", overrides=overrides, seeds=2)
print("final returns:", result.final_returns())""",
    ),
]

BENCH = [
    (
        "markdown",
        """\
# Benchmark your accelerator

**What to expect.** After the install cell (about a minute on Colab), the grid
takes a few minutes on a CPU runtime and less on a GPU or TPU; it prints a table
(ratios to the bare floor), a markdown copy, a plot of steps/s against `B`, and
writes `bench.json` and `bench.png`.

`jaxsample.bench.run_grid` measures, for each environment, number of envs `B`
and steps `T`, the same `T x B` steps done by:

* **bare** — the floor: a hand-written `lax.scan(vmap(env.step))` with random
  actions that stores observation, action, reward and done;
* **random** — `sampler.collect` with a random agent;
* **mlp** — `sampler.collect` with PPO's 64x64 MLP actor-critic;
* **gymnasium** / **envpool** — the host-CPU vector envs one would compare with,
  when installed (`pip install gymnasium envpool`; skipped with a note otherwise).

Compile time is measured apart; the run times are medians of repetitions
interleaved method by method. On Colab pick a GPU or TPU under *Runtime > Change
runtime type*; the code is the same on every backend. `jaxsample bench --quick`
runs a small grid from a terminal. The project's own results, and its other
benchmarks (host envs, the actor/learner driver, device count:
`python -m jaxsample.bench.host`, `jaxsample.bench.driver`,
`jaxsample.bench.devices`), are in the repository's `docs/benchmarks.md`.""",
    ),
    ("code", INSTALL),
    (
        "code",
        """\
import json

import jax
from IPython.display import Image

from jaxsample import bench

"""
        + SCALE
        + """
info = bench.system_info()
for k in ["backend", "device_kind", "device_count", "jax", "gymnax", "cpu_count"]:
    print(f"{k:>12}: {info[k]}")""",
    ),
    (
        "markdown",
        """\
## The grid

On an accelerator B grows to `2**18` (as far as memory and time allow: cells
that would not fit, or whose calls take over `max_call_seconds`, are skipped
and listed); on a CPU the quick grid. Each cell prints as it is measured.""",
    ),
    (
        "code",
        """\
if SMALL:
    spec = bench.GridSpec(envs=("CartPole-v1",), Bs=(4,), Ts=(4,), reps=2)
elif jax.default_backend() == "cpu":
    spec = bench.GridSpec.quick()
else:
    spec = bench.GridSpec(
        envs=("CartPole-v1", "Breakout-MinAtar"),
        Bs=tuple(4**i for i in range(10)),     # 1 .. 2**18
        Ts=(128,),
        reps=9,
    )
result = bench.run_grid(spec, progress=print)""",
    ),
    ("code", "print(bench.format_table(result))"),
    (
        "markdown",
        """\
## Plots

Left: steps per second against `B`, log-log, one line per method (the band is
the interquartile range of the repetitions). Right: each method's throughput
relative to the bare floor; jaxsample's `collect` with a random agent should sit
near 1.""",
    ),
    ("code", """bench.plot(result, "bench.png")\nImage("bench.png")"""),
    (
        "markdown",
        """\
## The JSON

`bench.write_json` writes the whole result: the system (backend, device,
versions, CPUs), the settings, one entry per cell with every method's compile
time, run-time quartiles and raw repetitions, steps/s, ratio to the floor and
peak memory, plus what was skipped and why. Its schema is
`bench.RESULT_SCHEMA`.""",
    ),
    (
        "code",
        """\
bench.write_json(result, "bench.json")
with open("bench.json") as f:
    saved = json.load(f)
cell = saved["cells"][-1]
print(f"{cell['env']} B={cell['B']} T={cell['T']}:")
for method, row in cell["methods"].items():
    ratio = row["ratio_to_floor"]
    print(f"  {method:<10} {row['steps_per_s']['median']:>14,.0f} steps/s"
          + ("" if ratio is None else f"  ({ratio:.2f} x floor)"))
print(bench.markdown_table(saved))""",
    ),
]

NOTEBOOKS = {
    "quickstart.ipynb": QUICKSTART,
    "end_to_end_ppo.ipynb": PPO,
    "accelerator_benchmark.ipynb": BENCH,
}


def build(cells: list[tuple[str, str]], gpu: bool = False) -> nbformat.NotebookNode:
    """A notebook of ``cells`` (kind, source), without outputs, with stable cell ids;
    ``gpu`` asks Colab for a GPU runtime."""
    nb = v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    if gpu:
        nb.metadata["accelerator"] = "GPU"
    for i, (kind, source) in enumerate(cells):
        make = v4.new_markdown_cell if kind == "markdown" else v4.new_code_cell
        nb.cells.append(make(source, id=f"cell-{i}"))
    return nb


def main() -> None:
    """Write every notebook next to this file."""
    for name, cells in NOTEBOOKS.items():
        nb = build(cells, gpu=name == "accelerator_benchmark.ipynb")
        nbformat.validate(nb)
        nbformat.write(nb, HERE / name)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
