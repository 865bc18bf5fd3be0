"""The trainer's rollouts on a Ray env pool (``--env-backend ray``), on the real two-node
cluster of tests/ray_cluster.py: the same trajectories as in-process for the same seeds
(oracle and greedy tiny model), an actor killed mid-episode as an ``env_error`` while the
rollout goes on, and ``agentgym train --env-backend ray`` end to end (sync and async),
its pool closed with the trainer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.distributed.cluster import LocalCluster
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Generator, Sample, SamplingSettings
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout import RayEnvSlots, oracle_script
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner, Trajectory
from agentgym_trainers.env_slots import pool_slots
from tests.distributed.kills import dead

LAKE = "agentgym/FrozenLake-v0"
SHORT = {"max_steps": 4}  # a random model rarely ends an episode: keep them short
JOBS = [RolloutJob(None, seed, seed) for seed in (3, 5, 8, 13)]


def runner(
    tokenizer: Any, generator: Generator, slots: RayEnvSlots | None, **env_kwargs: Any
) -> RolloutRunner:
    return RolloutRunner(
        lambda: gym.make(LAKE, **env_kwargs),
        ChatFormat(tokenizer),
        generator,
        n_envs=2,
        max_new_tokens=12,
        max_context=2048,
        slots=slots,
    )


def greedy(tokenizer: Any, model: Any) -> Sampler:
    chat = ChatFormat(tokenizer)
    return Sampler(model, eos_ids=[chat.eos_id], pad_id=chat.pad_id, temperature=0.0, seed=0)


def on_pool(**env_kwargs: Any) -> RayEnvSlots:
    return pool_slots(LAKE, 2, env_kwargs=env_kwargs, envs_per_actor=1)


def trajectory_facts(t: Trajectory) -> dict[str, Any]:
    """Everything an episode's training sees (token ids, masks, log-probs, rewards) and
    what it played; not wall times."""
    ep = t.episode
    return {
        "job": t.job,
        "segments": [(s.ids, s.mask, s.logprobs, s.turn_ends) for s in t.segments],
        "actions": t.actions,
        "observations": t.observations,
        "system": t.system,
        "rewards": ep.rewards,
        "reward_components": ep.reward_components,
        "outcome": ep.outcome,
        "success": ep.success,
        "valid": ep.valid,
        "milestones": ep.milestones,
        "tail_ids": t.tail_ids,
        "turn_versions": t.turn_versions,
    }


def play_both(
    tokenizer: Any, make_generator: Any, script: Any = None, **env_kwargs: Any
) -> tuple[list[Trajectory], list[Trajectory]]:
    here = runner(tokenizer, make_generator(), None, **env_kwargs)
    there = runner(tokenizer, make_generator(), on_pool(**env_kwargs), **env_kwargs)
    try:
        local, _ = here.collect(JOBS, 0, script=script)
        remote, _ = there.collect(JOBS, 0, script=script)
    finally:
        here.close()
        there.close()
    return local, remote


def test_oracle_rollouts_on_the_pool_equal_the_in_process_ones(
    ray_cluster: LocalCluster, tokenizer: Any, tiny_model: Any
) -> None:
    """The oracle runs in the actor next to its env (``oracle_act``)."""
    local, remote = play_both(tokenizer, lambda: greedy(tokenizer, tiny_model), oracle_script)
    assert all(t.episode.success for t in local)  # the oracle solves FrozenLake
    assert [trajectory_facts(t) for t in remote] == [trajectory_facts(t) for t in local]


def test_greedy_model_rollouts_on_the_pool_equal_the_in_process_ones(
    ray_cluster: LocalCluster, tokenizer: Any, tiny_model: Any
) -> None:
    local, remote = play_both(tokenizer, lambda: greedy(tokenizer, tiny_model), **SHORT)
    assert sum(len(t.actions) for t in local) > len(JOBS)  # multi-turn episodes
    assert [trajectory_facts(t) for t in remote] == [trajectory_facts(t) for t in local]


class KillsAnActor:
    """A generator that kills the actor of slot ``slot`` before its ``at``-th call (a
    real ``ray.kill`` of the actor process, between two turns of a live episode)."""

    def __init__(self, inner: Sampler, slots: RayEnvSlots, slot: int, at: int) -> None:
        self.inner, self.slots, self.slot, self.at = inner, slots, slot, at
        self.calls = 0

    @property
    def settings(self) -> SamplingSettings:
        return self.inner.settings

    @property
    def weights_version(self) -> int:
        return self.inner.weights_version

    @property
    def tokens_generated(self) -> int:
        return self.inner.tokens_generated

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        import ray

        self.calls += 1
        if self.calls == self.at:
            handle = self.slots.pool.handle(self.slot)
            ray.kill(handle, no_restart=True)
            assert dead(handle)  # before the next step is sent
        return self.inner.generate(prompts, max_new, rows)


def test_an_actor_killed_mid_episode_is_an_env_error_and_the_rollout_goes_on(
    ray_cluster: LocalCluster, tokenizer: Any, tiny_model: Any
) -> None:
    slots = on_pool(**SHORT)
    killer = KillsAnActor(greedy(tokenizer, tiny_model), slots, slot=0, at=2)
    r = runner(tokenizer, killer, slots, **SHORT)
    try:
        trajs, _ = r.collect(JOBS, 0)
        restarts = slots.pool.restarts
    finally:
        r.close()
    killed, *others = trajs  # job 0 played on slot 0 when its actor was killed
    assert killed.episode.outcome is Outcome.ENV_ERROR and not killed.episode.valid
    assert len(killed.actions) == 2  # the second turn's step found the actor dead
    assert "died" in killed.episode.error
    assert killed.record()["outcome"] == "env_error"
    # the pool restarted the actor; the other episodes (slot 0's next one included) played
    assert restarts == 1
    assert all(t.episode.valid and t.episode.outcome is not Outcome.ENV_ERROR for t in others)
    assert all(len(t.actions) >= 1 for t in others)


def test_a_pool_runs_only_the_oracle_as_a_script(
    ray_cluster: LocalCluster, tokenizer: Any, tiny_model: Any
) -> None:
    r = runner(tokenizer, greedy(tokenizer, tiny_model), on_pool(), **{})
    try:
        with pytest.raises(ConfigError, match="oracle_script"):
            r.collect(JOBS[:1], 0, script=lambda env: env.unwrapped.oracle().act)  # type: ignore[attr-defined]
        with pytest.raises(TypeError, match=r"runner\.slots"):
            r.envs  # noqa: B018  (the envs are not in this process)
    finally:
        r.close()


def test_a_config_error_in_an_actor_stops_the_rollout_with_its_message(
    ray_cluster: LocalCluster, tokenizer: Any
) -> None:
    """A local_weight too large for the env raises ConfigError at reset in the actor: the
    rollout raises it (not an env_error for every episode, a masked run)."""
    from agentgym_envs.core import RewardConfig

    too_large = {**SHORT, "reward_config": RewardConfig(local_weight=0.5)}
    r = runner(tokenizer, None, on_pool(**too_large), **too_large)  # type: ignore[arg-type]
    try:
        with pytest.raises(ConfigError, match="local_weight"):
            r.collect(JOBS[:1], 0, script=oracle_script)
    finally:
        r.close()


def test_bad_env_backend_settings_are_refused_with_the_fix() -> None:
    from agentgym_trainers.config import TrainConfig, parse

    with pytest.raises(ConfigError, match="envs_per_actor must be >= 1"):
        TrainConfig.from_flat(env_backend="ray", envs_per_actor=0)
    with pytest.raises(SystemExit):  # argparse lists the choices
        parse(["--env-backend", "kubernetes"])
    cfg = parse(["--env-backend", "ray", "--envs-per-actor", "4", "--ray-address", "h:6379"])
    assert (cfg.rollout.env_backend, cfg.rollout.envs_per_actor) == ("ray", 4)
    assert cfg.rollout.ray_address == "h:6379"


# -- agentgym train --env-backend ray --------------------------------------------------------


def cluster_cpus_free(within_s: float = 20.0) -> bool:
    """Every CPU of the cluster is free again (no env actor holds one): the pools closed."""
    import ray

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        free = ray.available_resources().get("CPU", 0.0)  # type: ignore[no-untyped-call]
        if free >= ray.cluster_resources()["CPU"]:  # type: ignore[no-untyped-call]
            return True
        time.sleep(0.2)
    return False


TRAIN = [
    "train", "--env", LAKE, "--model", "tiny", "--device", "cpu", "--steps", "2",
    "--tasks-per-step", "2", "--group-size", "2", "--n-envs", "2",
    "--max-new-tokens", "8", "--max-context", "1024", "--env-kwargs", json.dumps(SHORT),
    "--env-backend", "ray", "--envs-per-actor", "2", "--quiet",
]  # fmt: skip


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_agentgym_train_env_backend_ray_on_frozenlake(
    ray_cluster: LocalCluster, tmp_path: Path, mode: str
) -> None:
    run = tmp_path / "lake"
    extra = ["--sft-steps", "1", "--sft-episodes", "2", "--eval-episodes", "2"]
    if mode == "async":
        extra = ["--rollout", "async", "--max-lag", "1", "--async-timeout-s", "120"]
    args = [*TRAIN, "--ray-address", ray_cluster.address, "--run-dir", str(run), *extra]
    assert main([*args, "--rollout", mode] if mode == "sync" else args) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["env_backend"] == "ray"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2]
    if mode == "sync":  # the SFT warm start played the oracle in the actors
        assert len(summary["sft_loss"]) == 1 and "eval_after" in summary
    assert not [t for t in threading.enumerate() if t.name == "rollout-worker"]
    assert cluster_cpus_free()  # the trainer's pools (the worker's too) were closed
