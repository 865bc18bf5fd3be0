"""WebShop benchmark: reset, step (action + observation), concurrent episodes on one
browser and memory per episode (``agentgym bench WebShop``).

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.console import print_figures
from agentgym_envs.core import Outcome, Task
from agentgym_envs.registration import EnvEntry
from agentgym_envs.web.browser import browser_pids
from agentgym_envs.web.webshop import WebShopEnv


@dataclass
class WebBench:
    env_id: str
    reset_ms_median: float  # database restore + fresh browser context + first page
    step_ms_median: float  # one action and the observation after it
    steps: int
    step_prewarm_ms_median: float  # the same while the next context opens in the background
    concurrent: int
    concurrent_steps_per_s: float  # aggregate, `concurrent` episodes on one browser
    concurrent_success: float
    browser_mib_per_episode: float  # browser memory growth per live episode
    browser_processes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _episode(
    env: WebShopEnv,
    task: Task,
    times: list[float] | None = None,
    resets: list[float] | None = None,
) -> tuple[Outcome, int]:
    env.split = task.split
    start = time.perf_counter()
    env.reset(seed=0, options={"task_id": task.id, "split": task.split})
    if resets is not None:
        resets.append(time.perf_counter() - start)
    oracle = env.oracle()
    steps = 0
    while env.outcome is Outcome.CONTINUE:
        action = oracle.act()
        start = time.perf_counter()
        env.step(action)
        if times is not None:
            times.append(time.perf_counter() - start)
        steps += 1
    return env.outcome, steps


def bench_webshop(entry: EnvEntry, *, episodes: int = 20, concurrent: int = 4) -> WebBench:
    made = gym.make(entry.id)
    env = made.unwrapped
    assert isinstance(env, WebShopEnv)
    tasks = [t for split in ("test", "ood") for t in env.task_set.pool(split)][::5]
    _episode(env, tasks[0])  # warm the browser
    resets: list[float] = []  # each after an episode, as in a rollout loop
    busy: list[float] = []  # steps while the spare context for the next reset opens
    for task in tasks[:episodes]:
        _episode(env, task, busy, resets)
    rss_one = env.driver.rss_mb()
    made.close()
    # a step's own cost: no context opening in the background on our two cores
    quiet = WebShopEnv(prewarm=False)
    steps: list[float] = []
    for task in tasks[:episodes]:
        _episode(quiet, task, steps)
    quiet.close()
    rate, success, rss_many = _concurrent(tasks, concurrent)
    return WebBench(
        env_id=entry.id,
        reset_ms_median=statistics.median(resets) * 1000.0,
        step_ms_median=statistics.median(steps) * 1000.0,
        steps=len(steps),
        step_prewarm_ms_median=statistics.median(busy) * 1000.0,
        concurrent=concurrent,
        concurrent_steps_per_s=rate,
        concurrent_success=success,
        browser_mib_per_episode=max(0.0, rss_many - rss_one) / max(1, concurrent - 1),
        browser_processes=len(browser_pids()),
    )


def _concurrent(tasks: Sequence[Task], n: int) -> tuple[float, float, float]:
    """``n`` envs in threads sharing the process's browser, each playing oracle episodes
    for a few seconds; aggregate steps/s, success rate and browser memory at the peak."""
    envs = [WebShopEnv() for _ in range(n)]
    outcomes: list[Outcome] = []
    counts = [0] * n
    peak = [0.0]
    deadline = time.perf_counter() + 8.0

    def worker(k: int) -> None:
        i = k
        while time.perf_counter() < deadline:
            outcome, steps = _episode(envs[k], tasks[i % len(tasks)])
            outcomes.append(outcome)
            counts[k] += steps
            peak[0] = max(peak[0], envs[k].driver.rss_mb())
            i += n

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    for e in envs:
        e.close()
    success = sum(o is Outcome.SUCCESS for o in outcomes) / max(1, len(outcomes))
    return sum(counts) / wall, success, peak[0]


def print_bench(r: WebBench, console: Any) -> None:
    """The table of :func:`bench_webshop` (``agentgym bench WebShop``; rich)."""
    title = f"{r.env_id} benchmark (headless Chromium, one browser per process)"
    rows = (
        ("reset (database restore + fresh context + first page)", f"{r.reset_ms_median:.0f} ms"),
        (f"step: action + observation ({r.steps} oracle steps)", f"{r.step_ms_median:.0f} ms"),
        (
            "step while the next context opens (prewarm)",
            f"{r.step_prewarm_ms_median:.0f} ms",
        ),
        (
            f"{r.concurrent} concurrent episodes on one browser",
            f"{r.concurrent_steps_per_s:.1f} steps/s aggregate, success {r.concurrent_success:.0%}",
        ),
        ("browser memory per extra live episode", f"{r.browser_mib_per_episode:.0f} MiB"),
        ("Chromium processes", str(r.browser_processes)),
    )
    print_figures(title, rows, console)
