"""Play a policy on one env for many episodes (``agentgym run``): a thin use of the
evaluator, whose tasks the env draws from each episode's reset seed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import ArgumentError
from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.evaluate import EpisodeResult, EvalConfig, _Policies, run_entry
from agentgym_envs.eval.metrics import episode_metrics
from agentgym_envs.eval.suite import Job, SuiteEntry
from agentgym_envs.policies.base import Policy
from agentgym_envs.registration import find

PolicyFactory = Callable[[Sequence[gym.Env[Any, Any]]], Policy]


class _Built(_Policies):
    """Serves a policy factory's policy where the evaluator asks for a spec."""

    def __init__(self, factory: PolicyFactory) -> None:
        super().__init__(0, {})
        self.factory = factory

    def get(self, spec: str, envs: Sequence[Any]) -> Any:
        return self.factory(envs)


def run_episodes(
    env_id: str,
    policy: str | PolicyFactory,
    episodes: int,
    *,
    split: str | None = None,
    difficulty: str | None = None,
    seed: int = 0,
    batch: int = 8,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Play ``episodes`` episodes of ``env_id`` with ``policy``, in reset-seed order.

    Episode ``i`` resets with seed ``seed + i`` (and the split and difficulty), so the
    env draws its task from the seed: a run is reproducible and two policies evaluated
    with the same arguments face the same tasks. Results have ``entry`` set to the env's
    name and ``trial`` to ``i``.

    Args:
        env_id: a registered id or bare name (``Sokoban``).
        policy: a reference policy name (``oracle``, ``random``, ``noop``) or a factory
            that builds a policy for the env slots (results then carry its ``name``).
        episodes: how many episodes to play.
        split: the task split (the env's default if None).
        difficulty: the difficulty (all if None).
        seed: the first episode's reset seed.
        batch: env slots played in lockstep (policies act on a batch).
        env_kwargs: extra constructor kwargs for ``gym.make``.
        on_episode: called with each result as its episode ends (progress bars).
    """
    found = find(env_id)
    entry = SuiteEntry(
        name=found.name,
        env=found.id,
        split=split or "",
        difficulty=(difficulty,) if difficulty else (),
        tasks=episodes,
        env_kwargs=dict(env_kwargs or {}),
    )
    jobs = [Job(entry.name, "", i, seed + i) for i in range(episodes)]
    if isinstance(policy, str):
        spec, policies = policy, _Policies(seed, {})
    else:
        spec, policies = "", _Built(policy)
    try:
        return run_entry(entry, jobs, spec, policies, EvalConfig(batch=batch), on_episode)
    finally:
        policies.close()


RUN_SUMMARY_KEYS = (
    "episodes",
    "valid",
    "success_rate",
    "success_ci",
    "stage_rates",
    "mean_steps",
    "mean_return",
    "mean_cost",
    "cost_per_success",
    "env_error_rate",
    "outcomes",
)


def run_summary(env_id: str, policy: str, results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """What ``agentgym run`` reports for one env and policy: a part of
    :func:`~agentgym_envs.eval.metrics.episode_metrics`, plus the safety-stop rate.

    Raises:
        ArgumentError: no results (a ValueError).
    """
    if not results:
        raise ArgumentError(
            "run_summary needs at least one episode result, got none; run at least one episode"
        )
    m = episode_metrics([r.episode for r in results])
    stops = m["outcomes"].get(Outcome.SAFETY_STOP.value, 0)
    return {
        "env_id": env_id,
        "policy": policy,
        **{k: m[k] for k in RUN_SUMMARY_KEYS},
        "safety_stop_rate": stops / m["valid"] if m["valid"] else 0.0,
    }


__all__ = ["RUN_SUMMARY_KEYS", "run_episodes", "run_summary"]
