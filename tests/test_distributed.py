"""Scale out: envs sharded over a mesh, several processes, sharded PPO.

The reference is always the one-device sampler (or PPO) in this process: a
sharded run must give the same samples whatever the device or process count.
In-process meshes use conftest's 4 forced CPU devices; other device counts and
``jax.distributed`` run in subprocesses (``tests/distributed_worker.py``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import gymnax
import jax
import numpy as np
import pytest
from jax.sharding import Mesh

import jaxsample as js
from jaxsample.algos import ppo
from jaxsample.distributed import ShardedSampler, process_env_ranks, process_local, shard_sampler

sys.path.insert(0, str(Path(__file__).parent))
import distributed_worker as worker

# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_distributed")


WORKER = str(Path(__file__).parent / "distributed_worker.py")
TIMEOUT = 240  # seconds per subprocess; they are killed past it


def mesh_of(n: int, name: str = "envs") -> Mesh:
    return Mesh(np.array(jax.devices()[:n]), (name,))


def assert_same(expected: dict, got: dict, exact_floats: bool = True) -> None:
    """Every leaf equal; with ``exact_floats=False``, float leaves to rounding.

    What the keys decide (actions, resets, done flags, ranks, keys, counts) is
    always compared bit for bit. A network's float outputs are not: XLA's CPU
    matmuls round differently for different per-device batch widths.
    """
    assert sorted(expected) == sorted(got)
    for name in expected:
        a, b = np.asarray(expected[name]), np.asarray(got[name])
        assert a.shape == b.shape and a.dtype == b.dtype, name
        if exact_floats or not np.issubdtype(a.dtype, np.floating):
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.fixture(scope="module")
def references() -> dict:
    """One-device results, computed once per configuration."""
    return {}


def reference(references: dict, mode: str, agent: str) -> dict:
    if (mode, agent) not in references:
        references[mode, agent] = worker.sampler_batches(mode, agent, None)
    return references[mode, agent]


# ---------------------------------------------------------------- in-process


# The default run compares "auto" with the random agent bit for bit in
# test_other_mesh_axes_are_replicated; the per-mode cases here (the recurrent
# agent's floats compared to rounding; 11-16 s each) are in the slow set.
@pytest.mark.parametrize(
    ("mode", "agent", "n"),
    [
        pytest.param("auto", "random", 1, marks=pytest.mark.slow),
        pytest.param("auto", "random", 4, marks=pytest.mark.slow),
        pytest.param("auto", "recurrent", 4, marks=pytest.mark.slow),
        pytest.param("wait", "recurrent", 4, marks=pytest.mark.slow),  # 16 s
        pytest.param("episodic", "recurrent", 2, marks=pytest.mark.slow),  # 12 s
        pytest.param("episodic", "recurrent", 4, marks=pytest.mark.slow),
    ],
)
def test_sharded_sampler_equals_one_device(references, mode, agent, n):
    got = worker.sampler_batches(mode, agent, mesh_of(n))
    assert_same(reference(references, mode, agent), got, exact_floats=agent == "random")


@pytest.mark.slow
def test_pgx_masks_and_turns_are_the_same_on_two_devices(references):
    """Pgx's tic-tac-toe (legal-action masks, the acting player, per-player
    rewards and returns) on 2 devices: the one-device batches, bit for bit."""
    pytest.importorskip("pgx")  # the optional suite (not in the Python 3.11 CI subset's env)
    want = reference(references, "auto", "pgx")
    for field in ("action_mask", "final_mask_store", "'player'", "player0_return"):
        assert any(field in name for name in want), field
    assert_same(want, worker.sampler_batches("auto", "pgx", mesh_of(2)))


def test_sharded_batch_is_sharded_along_B():
    # the sampler of test_sharded_sampler_equals_one_device[wait-recurrent-4]: compiled once
    sampler, agent_params = worker.make_sampler("wait", "recurrent", mesh_of(4))
    assert isinstance(sampler, ShardedSampler) and sampler.num_shards == 4
    T = worker.T
    assert sampler.local.batch_spec == js.BatchSpec(T, 4)
    init, collect = worker.jitted(sampler)
    state, batch = collect(init(jax.random.key(0), agent_params), agent_params)
    obs = batch.samples.env.observation
    assert obs.shape == (T, 16, 4)
    assert obs.sharding.spec == jax.sharding.PartitionSpec(None, "envs")
    # each device holds its contiguous block of 4 envs, of all T steps
    blocks = sorted((s.index[1].start, s.data.shape) for s in obs.addressable_shards)
    assert blocks == [(0, (T, 4, 4)), (4, (T, 4, 4)), (8, (T, 4, 4)), (12, (T, 4, 4))]
    assert state.env.agent.env_rank.sharding.spec == jax.sharding.PartitionSpec("envs")
    np.testing.assert_array_equal(np.asarray(state.env.agent.env_rank), np.arange(16))
    np.testing.assert_array_equal(process_local(obs), np.asarray(obs))


@pytest.mark.slow
def test_other_mesh_axes_are_replicated(references):
    devices = np.array(jax.devices()).reshape(2, 2)
    mesh = Mesh(devices, ("model", "envs"))
    # envs split over "envs" (2 ways), replicated over "model": the one-device batches
    got = worker.sampler_batches("auto", "random", mesh)
    assert_same(reference(references, "auto", "random"), got)


def test_sharded_collect_does_not_retrace_and_donates():
    # the sampler of test_sharded_sampler_equals_one_device[wait-recurrent-4], jitted
    # as the worker does (same name, donation and options): compiled once
    sampler, agent_params = worker.make_sampler("wait", "recurrent", mesh_of(4))
    traces = []

    def collect(state, p):
        traces.append(1)
        return sampler.collect(state, p)

    collect = jax.jit(collect, donate_argnums=0)
    state = worker.jitted(sampler)[0](jax.random.key(0), agent_params)
    for i in range(3):
        new_params = jax.tree.map(lambda x, i=i: x + i, agent_params)
        state, _ = collect(state, new_params)
    assert len(traces) == 1


# ----------------------------------------------------------------------- errors


def test_errors_name_the_problem():
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    with pytest.raises(ValueError, match=r"batch_spec.B=6 is not divisible by the 4 devices"):
        js.make_sampler(env, params, agent, js.BatchSpec(8, 6), mesh=mesh_of(4))
    with pytest.raises(ValueError, match=r"mesh has no axis named 'envs'.*\('data',\)"):
        js.make_sampler(env, params, agent, js.BatchSpec(8, 8), mesh=mesh_of(4, "data"))
    with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh"):
        js.make_sampler(env, params, agent, js.BatchSpec(8, 8), mesh=jax.devices())
    sampler = js.make_sampler(env, params, agent, js.BatchSpec(8, 8), mesh=mesh_of(2))
    with pytest.raises(TypeError, match="already sharded"):
        shard_sampler(sampler, mesh_of(2))
    state = jax.eval_shape(sampler.local.init, jax.random.key(0), None)  # 4 envs, not 8
    with pytest.raises(ValueError, match="B=8"):
        sampler.collect(state, None)
    with pytest.raises(ValueError, match="minibatch of 2 env sequences cannot be split over"):
        ppo.make_train(
            ppo.PPOConfig(num_envs=8, num_minibatches=4, recurrent=True), mesh=mesh_of(4)
        )
    with pytest.raises(ValueError, match="rank < world_size"):
        process_env_ranks(4, rank=2, world_size=2)


def test_disagreeing_processes_are_a_clear_error(monkeypatch):
    """The check of test_processes_that_disagree_on_B_get_a_clear_error (slow: 2
    processes) in this process: 2 processes faked, the other one with 4 more envs."""
    from jax.experimental import multihost_utils

    from jaxsample import distributed

    gathered = []

    def allgather(x):
        gathered.append(np.asarray(x))
        return np.stack([x, np.asarray(x) + np.array([0, 4, 4])])

    monkeypatch.setattr(distributed.jax, "process_count", lambda: 2)
    monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    with pytest.raises(ValueError, match="the processes disagree on BatchSpec") as info:
        js.make_sampler(env, params, agent, js.BatchSpec(48, 16), mesh=mesh_of(2))
    assert "[[48, 16, 16], [48, 20, 20]]" in str(info.value)
    np.testing.assert_array_equal(gathered[0], [48, 16, 16])  # T, B, global_B


def test_process_env_ranks_are_rlpyt_slices():
    assert process_env_ranks(4, rank=1, world_size=3) == range(4, 8)
    assert process_env_ranks(4) == range(0, 4)  # one process here


# ----------------------------------------------------------------- sharded PPO


# Sharded PPO has collectives (the gradient all-reduce). XLA's CPU client runs
# a process's devices on a thread pool the size of the machine's cores, and on
# this 2-core machine 4 in-process devices meeting in an all-reduce can stall;
# so in-process PPO runs on 2 devices, and 4 devices are 2 processes x 2
# (test_two_processes_train_ppo_as_one). The sampler has no collectives.
@pytest.mark.slow
def test_sharded_recurrent_ppo_equals_one_device():
    # (feedforward: test_sharded_ppo_all_reduces_gradients_and_vmaps_over_seeds)
    one = worker.ppo_params(None, recurrent=True)
    two = worker.ppo_params(mesh_of(2), recurrent=True)
    assert sorted(one) == sorted(two)
    for name in one:
        np.testing.assert_allclose(one[name], two[name], rtol=2e-4, atol=2e-5, err_msg=name)
    assert np.isfinite(two["metrics['loss']"]).all()


@pytest.mark.slow
def test_sharded_ppo_all_reduces_gradients_and_vmaps_over_seeds():
    config = ppo.PPOConfig(num_envs=8, num_steps=8, total_timesteps=8 * 8, num_minibatches=2)
    trainer = ppo.make_train(config, mesh=mesh_of(2))
    keys = jax.vmap(jax.random.key)(np.arange(2, dtype=np.uint32))
    train = jax.jit(jax.vmap(trainer.train)).lower(keys).compile()
    assert "all-reduce" in train.as_text()  # each minibatch gradient is averaged over devices
    state, metrics = train(keys)
    assert metrics["loss"].shape == (2, 1)
    single, _ = jax.jit(ppo.make_train(config).train)(keys[1])
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(single.params), strict=True):
        np.testing.assert_allclose(np.asarray(a)[1], np.asarray(b), rtol=2e-4, atol=2e-5)


# --------------------------------------------------------------- subprocesses


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(tmp_path: Path, job: list[str], processes: int, local_devices: int) -> list[dict]:
    """Start ``processes`` workers (joined by jax.distributed when > 1), wait for
    all with a time limit, kill them all on any failure, return their outputs."""
    port = free_port()
    env = dict(os.environ)  # the session's XLA flags, without its device count
    env["XLA_FLAGS"] = " ".join(
        f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f
    )
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])
    procs, outs = [], []
    try:
        for i in range(processes):
            out = tmp_path / f"p{i}.npz"
            outs.append(out)
            cmd = [sys.executable, WORKER, *job, "--out", str(out)]
            cmd += ["--local-devices", str(local_devices)]
            if processes > 1:
                cmd += ["--process-id", str(i), "--num-processes", str(processes)]
                cmd += ["--port", str(port)]
            procs.append(
                subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            )
        logs = [p.communicate(timeout=TIMEOUT)[0].decode(errors="replace") for p in procs]
        for p, log in zip(procs, logs, strict=True):
            assert p.returncode == 0, log[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [dict(np.load(out)) for out in outs]


@pytest.mark.slow
@pytest.mark.parametrize("devices", [8])
def test_device_count_invariance_in_subprocess(tmp_path, references, devices):
    (got,) = run_workers(tmp_path, ["--job", "sampler", "--agent", "recurrent"], 1, devices)
    assert_same(reference(references, "auto", "recurrent"), got, exact_floats=False)


def concat_processes(parts: list[dict]) -> dict:
    """Join the processes' local parts along B (axis 1 of batch leaves, 0 of state)."""
    out = {}
    for name in parts[0]:
        axis = 0 if name.startswith("state") or "initial_state" in name else 1
        if name.endswith("bootstrap_value"):
            axis = 0
        out[name] = np.concatenate([p[name] for p in parts], axis=axis)
    return out


@pytest.mark.slow
def test_two_processes_collect_the_one_process_batch(tmp_path, references):
    parts = run_workers(tmp_path, ["--job", "sampler", "--mode", "wait"], 2, 2)
    # process p holds envs 8p..8p+7 (rlpyt's env_ranks of B=8 per process)
    np.testing.assert_array_equal(parts[1]["state.env.agent.env_rank"], np.arange(8, 16))
    assert_same(reference(references, "wait", "random"), concat_processes(parts))


@pytest.mark.slow
def test_two_processes_train_ppo_as_one(tmp_path):
    parts = run_workers(tmp_path, ["--job", "ppo"], 2, 2)
    one = worker.ppo_params(None)
    for part in parts:  # params and metrics are replicated: each process has all of them
        for name in one:
            np.testing.assert_allclose(one[name], part[name], rtol=2e-4, atol=2e-5, err_msg=name)


@pytest.mark.slow  # in-process: test_disagreeing_processes_are_a_clear_error
def test_processes_that_disagree_on_B_get_a_clear_error(tmp_path):
    parts = run_workers(tmp_path, ["--job", "disagree"], 2, 2)
    for part in parts:
        assert "the processes disagree on BatchSpec(T, B)" in str(part["error"])
        assert "[[48, 16, 16], [48, 20, 20]]" in str(part["error"])


@pytest.mark.slow  # 3 samplers compiled with XLA's full optimizations (what it times)
def test_device_scaling_benchmark_runs_and_reports(tmp_path, capsys):
    from jaxsample.bench import devices as bench_devices

    out = tmp_path / "devices.json"
    argv = ["--B", "8", "--T", "4", "--devices", "1", "2", "--reps", "2", "--json", str(out)]
    assert bench_devices.main(argv) == 0
    report = json.loads(out.read_text())
    assert [r["devices"] for r in report["rows"]] == [1, 2]
    for r in report["rows"]:
        assert r["steps_per_s"] > 0 and r["compile_s"] > 0
        assert r["spread"][0] <= r["steps_per_s"] <= r["spread"][1]
        assert r["ratio"] == pytest.approx(r["steps_per_s"] / report["unsharded_steps_per_s"])
    assert "vs 1 dev" in capsys.readouterr().out
    with pytest.raises(ValueError, match="asked for 64"):
        bench_devices.device_scaling(B=64, T=2, devices=(64,))
