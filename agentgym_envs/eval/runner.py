"""Run a policy on an env for many episodes, in lockstep batches, and record each episode."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.info import Outcome
from agentgym_envs.policies.base import Policy, make_policy
from agentgym_envs.registration import find


@dataclass
class EpisodeRecord:
    """One finished episode, as plain data (JSON-able with ``asdict``)."""

    env_id: str
    task_id: str
    split: str
    difficulty: str
    seed: int
    outcome: str
    steps: int
    reward: float
    reward_components: dict[str, float]
    milestones: list[str]
    cost: dict[str, Any]
    errors: int
    versions: dict[str, str]
    seeds: dict[str, Any]
    valid: bool
    wall_ms: float
    policy: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.outcome == Outcome.SUCCESS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_episodes(
    env_id: str,
    policy: str | Callable[[Sequence[gym.Env[Any, Any]]], Policy],
    episodes: int,
    *,
    split: str | None = None,
    difficulty: str | None = None,
    seed: int = 0,
    batch: int = 8,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
) -> list[EpisodeRecord]:
    """Play ``episodes`` episodes of ``env_id`` with ``policy``.

    Episode ``i`` resets with seed ``seed + i``, so a run is reproducible and two
    policies evaluated with the same arguments face the same tasks.

    Args:
        env_id: a registered id or bare name (``Sokoban``).
        policy: a reference policy name (``oracle``, ``random``, ``noop``) or a factory
            that builds a policy for the env slots.
        episodes: how many episodes to play.
        split: the task split (the env's default if None).
        difficulty: the difficulty (all if None).
        seed: the first episode's reset seed.
        batch: env slots played in lockstep (policies act on a batch).
        env_kwargs: extra constructor kwargs for ``gym.make``.
        on_episode: called with each record as its episode ends (progress bars).
    """
    entry = find(env_id)
    slots = max(1, min(batch, episodes))
    envs = [gym.make(entry.id, **(env_kwargs or {})) for _ in range(slots)]
    agent = make_policy(policy, envs, seed=seed) if isinstance(policy, str) else policy(envs)
    options: dict[str, Any] = {}
    if split is not None:
        options["split"] = split
    if difficulty is not None:
        options["difficulty"] = difficulty
    records: list[EpisodeRecord] = []
    try:
        next_episode = 0
        active: dict[int, tuple[int, str, dict[str, Any], float, float, dict[str, float]]] = {}

        def start(slot: int) -> None:
            nonlocal next_episode
            ep_seed = seed + next_episode
            next_episode += 1
            obs, info = envs[slot].reset(seed=ep_seed, options=options)
            agent.reset([slot])
            active[slot] = (ep_seed, obs, info, time.perf_counter(), 0.0, {})

        for slot in range(slots):
            if next_episode < episodes:
                start(slot)
        while active:
            order = sorted(active)
            actions = agent.act([active[s][1] for s in order], [active[s][2] for s in order], order)
            for slot, action in zip(order, actions, strict=True):
                ep_seed, _, _, started, ret, comps = active[slot]
                obs, reward, terminated, truncated, info = envs[slot].step(action)
                ret += float(reward)
                for k, v in info["reward_components"].items():
                    comps[k] = comps.get(k, 0.0) + v
                if not (terminated or truncated):
                    active[slot] = (ep_seed, obs, info, started, ret, comps)
                    continue
                record = _record(entry.id, agent.name, ep_seed, info, ret, comps, started)
                records.append(record)
                if on_episode is not None:
                    on_episode(record)
                del active[slot]
                if next_episode < episodes:
                    start(slot)
    finally:
        for env in envs:
            env.close()
    records.sort(key=lambda r: r.seed)
    return records


def _record(
    env_id: str,
    policy: str,
    seed: int,
    info: dict[str, Any],
    ret: float,
    comps: dict[str, float],
    started: float,
) -> EpisodeRecord:
    task = info["task"]
    return EpisodeRecord(
        env_id=env_id,
        task_id=task["id"],
        split=task["split"],
        difficulty=task["difficulty"],
        seed=seed,
        outcome=str(info["outcome"]),
        steps=int(info["step"]),
        reward=ret,
        reward_components=comps,
        milestones=list(info["milestones"]),
        cost=info["cost"],
        errors=int(info["cost"]["errors"]),
        versions=dict(info["versions"]),
        seeds=dict(info["seeds"]),
        valid=bool(info["episode_valid"]),
        wall_ms=(time.perf_counter() - started) * 1000.0,
        policy=policy,
    )
