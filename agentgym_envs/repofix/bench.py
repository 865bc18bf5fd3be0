"""RepoFix benchmark: reset, file tools, sandbox start overhead, hidden-test verification
and concurrent episodes (``agentgym bench RepoFix``).

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.console import print_figures
from agentgym_envs.core import Outcome, Task
from agentgym_envs.registration import EnvEntry
from agentgym_envs.repofix.env import RepoFixEnv


@dataclass
class SandboxBench:
    env_id: str
    backend: str
    isolation: str
    reset_cold_ms_median: float  # first reset of a task: template built (git init + commit)
    reset_ms_median: float  # later resets: a copy of the template on tmpfs
    read_file_ms_median: float
    edit_ms_median: float
    bare_true_ms_median: float  # `true` as a plain subprocess
    sandbox_true_ms_median: float  # `true` through the backend
    run_tool_ms_median: float  # run("true") as a tool step (staging copy and commit included)
    verify_ms_median: float  # a full hidden-test verification (submit of the gold fix)
    concurrent: int
    concurrent_wall_s: float  # wall time of `concurrent` oracle episodes in threads
    single_episode_s: float  # one oracle episode alone
    concurrent_success: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000.0


def _timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _oracle_episode(env: RepoFixEnv, task: Task) -> Outcome:
    env.reset(seed=0, options={"task_id": task.id, "split": task.split})
    oracle = env.oracle()
    while env.outcome is Outcome.CONTINUE:
        env.step(oracle.act())
    return env.outcome


def bench_repofix(
    entry: EnvEntry, *, resets: int = 40, verifications: int = 8, concurrent: int = 8
) -> SandboxBench:
    """Benchmark RepoFix on the ``test`` split with the default backend."""
    made = gym.make(entry.id, max_steps=10_000)  # room for every timed step in one episode
    env = made.unwrapped
    assert isinstance(env, RepoFixEnv)
    tasks = list(env.task_set.pool("test"))
    env.split = "test"
    cold: list[float] = []
    for task in tasks[:resets]:
        start = time.perf_counter()
        env.reset(seed=0, options={"task_id": task.id})
        cold.append(time.perf_counter() - start)
    task = tasks[0]
    warm = _timed(lambda: env.reset(seed=0, options={"task_id": task.id}), resets)
    path = task.spec["sites"][0]["path"]
    read = _timed(
        lambda: env.step(json.dumps({"name": "read_file", "arguments": {"path": path}})), 50
    )
    assert env.workspace is not None
    text = (env.workspace / path).read_text()
    line = next(ln for ln in text.splitlines() if ln.strip() and text.count(ln) == 1)

    def edit_round_trip() -> None:
        for old, new in ((line, line + "  # x"), (line + "  # x", line)):
            env.step(
                json.dumps({"name": "edit", "arguments": {"path": path, "old": old, "new": new}})
            )

    edits = [t / 2 for t in _timed(edit_round_trip, 25)]
    bare = _timed(lambda: subprocess.run(["true"], check=True), 30)
    workspace = env.workspace
    assert workspace is not None
    sandboxed = _timed(lambda: env.backend.run(["true"], workspace=workspace, timeout_s=10), 30)
    run_tool = _timed(lambda: env.step('run(cmd="true")'), 20)
    verify = []
    for task in tasks[:verifications]:
        env.reset(seed=0, options={"task_id": task.id})
        for action in task.solution[:-1]:
            env.step(action)
        start = time.perf_counter()
        env.step("submit()")
        verify.append(time.perf_counter() - start)
        assert env.outcome is Outcome.SUCCESS, task.id
    start = time.perf_counter()
    _oracle_episode(env, tasks[1])
    single = time.perf_counter() - start
    describe = env.backend.describe()
    made.close()
    wall, success = _concurrent(tasks, concurrent)
    return SandboxBench(
        env_id=entry.id,
        backend=describe["name"],
        isolation=describe["isolation"],
        reset_cold_ms_median=_ms(cold),
        reset_ms_median=_ms(warm),
        read_file_ms_median=_ms(read),
        edit_ms_median=_ms(edits),
        bare_true_ms_median=_ms(bare),
        sandbox_true_ms_median=_ms(sandboxed),
        run_tool_ms_median=_ms(run_tool),
        verify_ms_median=_ms(verify),
        concurrent=concurrent,
        concurrent_wall_s=wall,
        single_episode_s=single,
        concurrent_success=success,
    )


def _concurrent(tasks: Sequence[Task], n: int) -> tuple[float, float]:
    """``n`` oracle episodes at once, one env per thread (sandboxes are processes)."""
    envs = [RepoFixEnv(tasks=tasks, split="test") for _ in range(n)]
    outcomes: list[Outcome] = []
    threads = [
        threading.Thread(target=lambda e=e, t=tasks[k]: outcomes.append(_oracle_episode(e, t)))
        for k, e in enumerate(envs)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    for e in envs:
        e.close()
    return wall, sum(o is Outcome.SUCCESS for o in outcomes) / n


def print_bench(r: SandboxBench, console: Any) -> None:
    """The table of :func:`bench_repofix` (``agentgym bench RepoFix``; rich)."""
    title = f"{r.env_id} benchmark ({r.backend} backend, isolation {r.isolation})"
    rows = (
        ("reset, first time for a task (git repo built)", f"{r.reset_cold_ms_median:.1f} ms"),
        ("reset (copy of the task's template on tmpfs)", f"{r.reset_ms_median:.1f} ms"),
        ("read_file step", f"{r.read_file_ms_median:.2f} ms"),
        ("edit step", f"{r.edit_ms_median:.2f} ms"),
        ("`true` as a plain subprocess", f"{r.bare_true_ms_median:.1f} ms"),
        ("`true` in the sandbox", f"{r.sandbox_true_ms_median:.1f} ms"),
        (
            "sandbox start overhead",
            f"{r.sandbox_true_ms_median - r.bare_true_ms_median:.1f} ms",
        ),
        ("run('true') step (staged copy + commit)", f"{r.run_tool_ms_median:.1f} ms"),
        ("hidden-test verification (submit)", f"{r.verify_ms_median:.0f} ms"),
        ("one oracle episode alone", f"{r.single_episode_s:.2f} s"),
        (
            f"{r.concurrent} oracle episodes at once",
            f"{r.concurrent_wall_s:.2f} s wall, success {r.concurrent_success:.0%}",
        ),
    )
    print_figures(title, rows, console)
