"""The asynchronous rollout worker on a Ray actor (``--rollout-worker ray``), on the real
two-node cluster of tests/ray_cluster.py with the tiny random Llama: the actor plays
what the in-process thread worker plays; weights pushed while an episode is between two
turns sample its later turns (versions and log-probabilities checked against the
learner's recomputation); ``train`` runs with it; a killed actor is a
``RolloutWorkerError`` in the learner; ``close`` leaves no actor.

Interleavings are forced with a gate the env in the actor waits at (a file the test
creates: tests/trainers/gated.py), never with sleeps."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym_envs.core.errors import ClosedError, ConfigError
from agentgym_envs.distributed.cluster import LocalCluster
from agentgym_envs.rollout.episodes import RolloutJob, Trajectory
from agentgym_envs.store import TrajectoryStore
from agentgym_trainers import ray_rollout
from agentgym_trainers.async_rollout import RolloutTimeoutError, RolloutWorkerError, snapshot
from agentgym_trainers.batch import sequences
from agentgym_trainers.config import TrainConfig, parse
from agentgym_trainers.ray_rollout import RayRolloutWorker
from agentgym_trainers.run import train
from agentgym_trainers.trainer import Trainer, env_seed
from tests.distributed.kills import dead
from tests.trainers.gated import gated_bandit, wait_for
from tests.trainers.test_async_rollout import config
from tests.trainers.test_rollout_ray import cluster_cpus_free


def ray_config(tmp_path: Path, cluster: LocalCluster, **overrides: Any) -> TrainConfig:
    return config(tmp_path, rollout_worker="ray", ray_address=cluster.address, **overrides)


def facts(t: Trajectory) -> dict[str, Any]:
    """What an episode's training sees and what it played (not wall times)."""
    ep = t.episode
    return {
        "job": t.job,
        "segments": [(s.ids, s.mask, s.logprobs, s.turn_ends) for s in t.segments],
        "actions": t.actions,
        "observations": t.observations,
        "rewards": ep.rewards,
        "outcome": ep.outcome,
        "valid": ep.valid,
        "policy_version": t.policy_version,
        "turn_versions": t.turn_versions,
    }


def test_the_ray_worker_plays_what_the_thread_worker_plays(
    ray_cluster: LocalCluster, tmp_path: Path, tokenizer: Any, request: Any
) -> None:
    """Same config, weights, random stream and torch thread count: the actor's episodes
    equal the in-process worker's, token for token; close() ends the actor and frees its
    CPU. (The actor computes with the 1 CPU it asks for; float sums, and so the sampled
    tokens, depend on the thread count, so the in-process worker uses 1 thread too.)"""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    trainer = Trainer(ray_config(tmp_path, ray_cluster))
    jobs = trainer.jobs(0)
    thread, remote = trainer.thread_worker(), trainer.ray_worker()
    handle = remote.actor
    try:
        got = []
        for worker in (thread, remote):
            worker.submit(jobs)
            worker.start()
            groups = worker.take(2, timeout_s=120)
            got.append([t for g in groups for t in g.trajectories])
        stats, _ = remote.stats()
        with pytest.raises(RolloutWorkerError, match="submit their jobs first"):
            remote.take(1, timeout_s=60)  # raised in the actor, re-raised here
    finally:
        thread.close()
        remote.close()
        trainer.close()
    here, there = got
    assert len(there) == len(jobs) == 4 and all(t.episode.valid for t in there)
    assert [facts(t) for t in there] == [facts(t) for t in here]
    assert all(t.turn_versions == [0] for t in there)
    assert stats.generated_tokens == sum(s.agent_tokens for t in there for s in t.segments)
    remote.close()  # idempotent
    with pytest.raises(ClosedError):
        remote.take(1, timeout_s=1)
    assert dead(handle)
    assert cluster_cpus_free()


def test_pushed_weights_sample_the_turns_after_the_push(
    ray_cluster: LocalCluster, tmp_path: Path, tokenizer: Any
) -> None:
    """Group A (seed 7) waits at the gate after its first turn; the learner pushes
    version 1 (perturbed weights), then opens the gate: A's later turns and the whole
    of group B (submitted after the push) are version 1, and every turn's sampler
    log-probabilities are those of the weights its version names."""
    gate = tmp_path / "gate"
    gate.mkdir()
    make_env = functools.partial(gated_bandit, str(gate), frozenset({7}))
    trainer = Trainer(ray_config(tmp_path, ray_cluster), make_env=make_env)
    new = copy.deepcopy(trainer.lm)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.05)
    worker = trainer.ray_worker()
    try:
        worker.submit([RolloutJob(trainer.tasks[0], 7, 0)] * 2)
        worker.start()
        wait_for(gate / "turn1")  # A's first turn was sampled; its env step waits
        with pytest.raises(RolloutTimeoutError, match="async-timeout-s"):
            worker.take(1, timeout_s=0.2)
        worker.push(snapshot(new, 1))
        (gate / "go").touch()
        (a,) = worker.take(1, timeout_s=120)
        worker.submit([RolloutJob(trainer.tasks[1], 8, 1)] * 2)
        (b,) = worker.take(1, timeout_s=120)
        trajs = a.trajectories + b.trajectories
        assert [t.turn_versions for t in trajs] == [[0, 1, 1], [0, 1, 1], [1], [1]]
        assert [t.policy_version for t in trajs] == [0, 0, 1, 1]
        assert all(t.episode.valid for t in trajs)
        seqs = sequences(trajs, 1.0, [[1.0] * 3] * 2 + [[1.0]] * 2)
        old = trainer.evaluate(seqs, values=False)
        fresh = trainer.evaluate(seqs, values=False, model=new)
        moved = 0
        for i, s in enumerate(seqs):
            versions = s.token_versions or [s.version] * len(s.ids)
            for t, m in enumerate(s.mask):
                if not m:
                    continue
                want = (old if versions[t] == 0 else fresh)[i][t]
                assert s.sampler_logprobs[t] == pytest.approx(want, abs=1e-4)
                moved += abs(old[i][t] - fresh[i][t]) > 1e-3
        assert moved > 0  # the two versions give different log-probabilities
    finally:
        (gate / "go").touch()
        worker.close()
        trainer.close()


def test_a_killed_actor_is_a_rollout_worker_error_in_the_learner(
    ray_cluster: LocalCluster, tmp_path: Path, tokenizer: Any
) -> None:
    """The actor is killed (``ray.kill``) while its episodes wait between two turns: the
    learner's next step raises RolloutWorkerError saying it died (the episodes are
    lost, never counted as policy failures), and closing leaves nothing behind."""
    import ray

    gate = tmp_path / "gate"
    gate.mkdir()
    held = frozenset({env_seed(0, 0, 0)})  # the group of generation step 0
    make_env = functools.partial(gated_bandit, str(gate), held)
    cfg = ray_config(tmp_path, ray_cluster, tasks_per_step=1, max_lag=0)
    trainer = Trainer(cfg, make_env=make_env)
    try:
        trainer.rollouts = trainer.async_rollouts()
        worker = trainer.rollouts.worker
        assert isinstance(worker, RayRolloutWorker)
        handle = worker.actor
        wait_for(gate / "turn1")
        ray.kill(handle, no_restart=True)
        with pytest.raises(RolloutWorkerError, match="actor died") as info:
            trainer.rl_step()
        assert isinstance(info.value.__cause__, ray.exceptions.RayActorError)
        assert trainer.step == 0 and trainer.version == 0  # nothing was trained
    finally:
        trainer.close()
    assert trainer.rollouts is None
    assert dead(handle)
    assert cluster_cpus_free()


def test_train_with_a_ray_rollout_worker(
    ray_cluster: LocalCluster, tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three asynchronous steps with max_lag 1 on one Ray rollout worker: the third batch
    was handed out after the first update's push, so the actor sampled it with version 1;
    no token is staler than max_lag, and the actor is gone when train() returns."""
    actors: list[Any] = []
    ray_worker = Trainer.ray_worker

    def recorded(trainer: Trainer) -> RayRolloutWorker:
        worker = ray_worker(trainer)
        actors.append(worker.actor)
        return worker

    monkeypatch.setattr(Trainer, "ray_worker", recorded)  # rollout_worker looks it up
    summary = train(ray_config(tmp_path, ray_cluster, steps=3, max_lag=1))
    assert len(actors) == 1 and dead(actors[0])
    run = Path(summary["config"]["run_dir"])
    assert summary["steps"] == 3 and summary["config"]["rollout_worker"] == "ray"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "reward" in r]
    assert [r["step"] for r in rl] == [1, 2, 3]
    assert [r["updates"] for r in rl] == [1.0, 1.0, 1.0]
    assert all(r["lag_max"] <= 1.0 and r["stale_token_frac"] == 0.0 for r in rl)
    with TrajectoryStore(run / "trajectories.sqlite") as store:
        versions = [ep.extra["turn_versions"] for _, ep in store.query()]
    assert len(versions) == 12 and sorted({v for vs in versions for v in vs}) == [0, 1]
    assert cluster_cpus_free()


def test_rollout_worker_ray_needs_async_rollouts() -> None:
    with pytest.raises(ConfigError, match="add --rollout async"):
        TrainConfig.from_flat(rollout_worker="ray")
    with pytest.raises(SystemExit):  # argparse lists the choices
        parse(["--rollout-worker", "process"])
    cfg = parse(["--rollout", "async", "--rollout-worker", "ray", "--ray-address", "h:6379"])
    assert (cfg.rollout.rollout_worker, cfg.rollout.ray_address) == ("ray", "h:6379")
    assert TrainConfig().rollout.rollout_worker == "thread"


def test_the_rollout_actor_plays_the_learners_grown_tasks_and_never_regrows_them(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --train-pool the actor's spec carries the learner's env factory and grown
    task set (pickled, as Ray sends it): the actor plays a generated task by its id, and
    never grows the pool again in its own process (it used to, at start-up, for every
    actor). The actor class is plain Python, so no cluster is needed here."""
    import pickle

    import gymnasium as gym

    cfg = config(
        tmp_path,
        env="agentgym/FrozenLake-v0",
        env_kwargs={"max_steps": 4},
        difficulty="easy",
        train_pool=260,
        max_context=1024,
    )
    trainer = Trainer(cfg)
    actor = None
    try:
        shipped_set = gym.make("agentgym/FrozenLake-v0").unwrapped.task_set
        shipped = {t.id for t in shipped_set.pool("train", "easy")}
        generated = [t for t in trainer.tasks if t not in shipped]
        assert len(trainer.tasks) == 260 and generated
        spec = pickle.loads(pickle.dumps(trainer.actor_spec()))

        def regrow(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the actor grew the train pool in its own process")

        monkeypatch.setattr(ray_rollout, "trainer_env_kwargs", regrow)
        actor = ray_rollout.RolloutActor(spec, snapshot(trainer.lm, trainer.version))
        jobs = [RolloutJob(generated[-1], env_seed(0, 0, i), 0) for i in range(2)]
        actor.submit(jobs)
        actor.start()
        groups = actor.take(1, 120.0)
        assert isinstance(groups, list)
        played = [t for g in groups for t in g.trajectories]
        assert [t.job.task_id for t in played] == [generated[-1]] * 2
        assert all(t.episode.valid for t in played)
    finally:
        if actor is not None:
            actor.close()
        trainer.close()
