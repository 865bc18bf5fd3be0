"""Throughput benchmarks: steps/s, reset time, step time by tool kind, snapshot time and
memory per episode.

Speed is measured here, never asserted in tests (machines are shared and noisy).
The step loop replays the tasks' stored oracle solutions on envs made with
``gym.make`` (with Gymnasium's default wrappers), so policy time is excluded and the
figures are what a user's rollout loop pays for the env itself.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.tools import ToolKind
from agentgym_envs.registration import ENVS, EnvEntry, families


@dataclass
class BenchResult:
    env_id: str
    steps_per_s: float
    reset_ms_median: float
    read_step_ms_median: float | None  # steps whose call is a READ tool (incl. messages)
    write_step_ms_median: float | None  # steps whose call is a WRITE tool
    snapshot_us_median: float
    env_kib: float
    episode_mib: float  # memory per live episode, from `concurrent` episodes in one process
    concurrent: int
    open_fds_per_episode: float
    rss_mib: float
    steps: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def machinery_envs() -> tuple[EnvEntry, ...]:
    """The envs that benchmarks of the shared machinery play: those of the families whose
    record sets ``bench_machinery`` (cheap, pure-Python oracle episodes), in :data:`ENVS`
    order. ``agentgym bench --eval`` plays them all by default; the trajectory store's and
    the Ray pool's per-step overheads are measured on the first."""
    chosen = {f.name for f in families() if f.bench_machinery}
    found = tuple(e for e in ENVS if e.family in chosen)
    assert found, "no family record sets bench_machinery"
    return found


def _median_ms(samples: list[float]) -> float | None:
    return statistics.median(samples) * 1000.0 if samples else None


def bench_env(
    entry: EnvEntry, seconds: float = 2.0, split: str = "test", concurrent: int = 500
) -> BenchResult:
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
    times: dict[str, list[float]] = {"read": [], "write": []}
    steps, busy, i = 0, 0.0, 0
    while busy < seconds:
        task = tasks[i % len(tasks)]
        i += 1
        env.reset(seed=i, options={"task_id": task.id})
        for action in task.solution:
            start = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            took = time.perf_counter() - start
            busy += took
            steps += 1
            kinds = [inner.toolset.canonical(c["name"]).kind for c in info["tool_calls"]]
            times["write" if ToolKind.WRITE in kinds else "read"].append(took)
            if terminated or truncated:  # slippery ice can end an episode early
                break
    # 3. get_state + set_state mid-episode
    task = tasks[0]
    env.reset(seed=0, options={"task_id": task.id})
    for action in task.solution[: len(task.solution) // 2]:
        if any(env.step(action)[2:4]):
            break
    snaps = []
    for _ in range(500):
        start = time.perf_counter()
        inner.set_state(inner.get_state())
        snaps.append(time.perf_counter() - start)
    env.close()
    env_bytes = _one_env_bytes(entry, task.id)
    episode_mib, fds = _concurrent_cost(entry, [t.id for t in tasks], concurrent)
    return BenchResult(
        env_id=entry.id,
        steps_per_s=steps / busy,
        reset_ms_median=statistics.median(resets) * 1000.0,
        read_step_ms_median=_median_ms(times["read"]),
        write_step_ms_median=_median_ms(times["write"]),
        snapshot_us_median=statistics.median(snaps) * 1e6,
        env_kib=env_bytes / 1024.0,
        episode_mib=episode_mib,
        concurrent=concurrent,
        open_fds_per_episode=fds,
        rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        steps=steps,
    )


def _one_env_bytes(entry: EnvEntry, task_id: str) -> int:
    """Python-heap bytes of one more env after a reset (shared task sets excluded)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    extra = gym.make(entry.id)
    extra.reset(seed=0, options={"task_id": task_id})
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    extra.close()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _concurrent_cost(entry: EnvEntry, task_ids: list[str], n: int) -> tuple[float, float]:
    """Resident memory (MiB) and open file descriptors per episode, with ``n`` episodes
    live at once in this process (each env reset and one step in)."""
    if n <= 0:
        return 0.0, 0.0
    gc.collect()
    fds_before = len(os.listdir("/proc/self/fd"))
    rss_before = _rss_bytes()
    envs = []
    for k in range(n):
        e = gym.make(entry.id)
        e.reset(seed=k, options={"task_id": task_ids[k % len(task_ids)]})
        e.step(e.unwrapped.noop_action)  # type: ignore[attr-defined]
        envs.append(e)
    rss_after = _rss_bytes()
    fds_after = len(os.listdir("/proc/self/fd"))
    for e in envs:
        e.close()
    return (rss_after - rss_before) / n / 2**20, (fds_after - fds_before) / n
