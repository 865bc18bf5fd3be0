"""Benchmark of the trajectory store and the recording wrapper (measured, never asserted).

It lives apart from :mod:`agentgym_envs.store` because it drives the
:class:`~agentgym_envs.wrappers.recording.RecordingWrapper`, which imports the store.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.bench import machinery_envs
from agentgym_envs.store import StoredEpisode, TrajectoryStore
from agentgym_envs.wrappers.recording import RecordingWrapper


def bench_store(episodes: int = 1000, wrapper_episodes: int = 50) -> dict[str, float]:
    """Time the store and the recording wrapper (measured, never asserted in tests).

    Returns:
        ``add_ms_mean``: one committed :meth:`TrajectoryStore.add` of a 20-step episode;
        ``add_many_ms_per_episode``: the same episodes in one transaction;
        ``bytes_per_episode``: database size per episode;
        ``wrapper_step_overhead_ms``: what :class:`RecordingWrapper` adds to each step
        of the first of :func:`~agentgym_envs.eval.bench.machinery_envs` (a text game)
        played by its oracle (the write at episode end included).
    """
    with tempfile.TemporaryDirectory() as tmp:
        eps = [_bench_episode(i) for i in range(2 * episodes)]
        with TrajectoryStore(Path(tmp) / "bench.sqlite") as store:
            start = time.perf_counter()
            for ep in eps[:episodes]:
                store.add(ep)
            add_s = time.perf_counter() - start
            start = time.perf_counter()
            store.add_many(eps[episodes:])
            many_s = time.perf_counter() - start
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        overhead_ms, steps = _bench_wrapper(Path(tmp) / "wrapper.sqlite", wrapper_episodes)
    n = max(episodes, 1)
    return {
        "episodes": float(episodes),
        "add_ms_mean": add_s * 1000.0 / n,
        "add_many_ms_per_episode": many_s * 1000.0 / n,
        "bytes_per_episode": size / (2 * n),
        "wrapper_step_overhead_ms": overhead_ms,
        "wrapper_steps": float(steps),
    }


def _bench_episode(i: int, steps: int = 20) -> StoredEpisode:
    actions = [f'move(direction="{"lrud"[(i >> k) % 4]}")' for k in range(steps)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "rules " * 100},
        {"role": "user", "content": "board " * 30},
    ]
    for k, action in enumerate(actions):
        call = {"name": "move", "arguments": {"direction": action[16]}, "call_id": f"call_{k}_0"}
        messages += [
            {"role": "assistant", "content": action, "tool_calls": [call]},
            {"role": "user", "content": "board " * 30},
        ]
    return StoredEpisode(
        env_id="bench/Store-v0",
        task_id=f"task-{i % 50}",
        split="test",
        difficulty="easy",
        policy="bench",
        policy_version="",
        versions={"env": "bench-v0"},
        seeds={"env": i},
        messages=messages,
        actions=actions,
        canonical_actions=actions,
        state_hashes=[f"{i:08x}{k:04x}" for k in range(steps + 1)],
        rewards=[0.0] * steps,
        reward_components={"success": 1.0},
        outcome=Outcome.SUCCESS,
        valid=True,
        milestones=[],
        cost={"tool_calls": steps},
        started_at=time.time(),
        ended_at=time.time(),
    )


def _bench_wrapper(path: Path, episodes: int) -> tuple[float, int]:
    """Per-step time outside the inner env: wrapper time minus inner step time."""

    inner_s = 0.0

    class _Timed(gym.Wrapper[str, str, str, str]):
        def step(self, action: str) -> Any:
            nonlocal inner_s
            start = time.perf_counter()
            out = self.env.step(action)
            inner_s += time.perf_counter() - start
            return out

    with TrajectoryStore(path) as store:
        played = gym.make(machinery_envs()[0].id)
        env = RecordingWrapper(_Timed(played), store, policy="oracle")
        outer_s, steps = 0.0, 0
        for seed in range(episodes):
            env.reset(seed=seed)
            oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
            done = False
            while not done:
                action = oracle.act()
                start = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(action)
                outer_s += time.perf_counter() - start
                steps += 1
                done = terminated or truncated
        env.close()
    return (outer_s - inner_s) * 1000.0 / max(steps, 1), steps


__all__ = ["bench_store"]
