"""Throughput benchmarks: steps/s, reset time, snapshot time and memory per env.

Speed is measured here, never asserted in tests (machines are shared and noisy).
The step loop replays the task's stored oracle solutions on envs made with
``gym.make`` (with Gymnasium's default wrappers), so policy time is excluded and the
figures are what a user's rollout loop pays for the env itself.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.registration import EnvEntry


@dataclass
class BenchResult:
    env_id: str
    steps_per_s: float
    reset_ms_median: float
    snapshot_us_median: float
    env_kib: float
    rss_mib: float
    steps: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def bench_env(entry: EnvEntry, seconds: float = 2.0, split: str = "test") -> BenchResult:
    """Benchmark one env for about ``seconds`` of stepping."""
    env = gym.make(entry.id)
    inner = env.unwrapped
    assert isinstance(inner, AgentEnv)
    tasks = inner.task_set.pool(split)
    # 1. reset time over many tasks
    resets = []
    for i in range(200):
        start = time.perf_counter()
        env.reset(seed=i, options={"task_id": tasks[i % len(tasks)].id})
        resets.append(time.perf_counter() - start)
    # 2. steps/s replaying oracle solutions (resets between episodes not counted)
    steps, busy, i = 0, 0.0, 0
    while busy < seconds:
        task = tasks[i % len(tasks)]
        i += 1
        env.reset(seed=i, options={"task_id": task.id})
        start = time.perf_counter()
        for action in task.solution:
            steps += 1
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:  # slippery ice can end an episode early
                break
        busy += time.perf_counter() - start
    # 3. get_state + set_state mid-episode
    task = tasks[0]
    env.reset(seed=0, options={"task_id": task.id})
    for action in task.solution[: len(task.solution) // 2]:
        if any(env.step(action)[2:4]):
            break
    snaps = []
    for _ in range(2000):
        start = time.perf_counter()
        inner.set_state(inner.get_state())
        snaps.append(time.perf_counter() - start)
    env.close()
    # 4. memory of one more env instance after an episode (task set shared, excluded)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    extra = gym.make(entry.id)
    extra.reset(seed=0, options={"task_id": task.id})
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    env_bytes = sum(s.size_diff for s in after.compare_to(before, "filename"))
    extra.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return BenchResult(
        env_id=entry.id,
        steps_per_s=steps / busy,
        reset_ms_median=statistics.median(resets) * 1000.0,
        snapshot_us_median=statistics.median(snaps) * 1e6,
        env_kib=env_bytes / 1024.0,
        rss_mib=rss,
        steps=steps,
    )
