"""The evaluator's own cost: ``agentgym eval`` of the oracle over many episodes per env
(by default the envs of :func:`~agentgym_envs.eval.bench.machinery_envs`, the text
games), against a bare loop that plays the same episodes with no evaluator at all.

The difference, per step, is what the evaluation machinery adds: lockstep batching,
metric folding and the trajectory store (one SQLite row per episode, WAL). Printed by
``agentgym bench --eval``; never asserted in tests.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym_envs.eval.bench import machinery_envs
from agentgym_envs.eval.evaluate import EvalConfig, evaluate
from agentgym_envs.eval.suite import Job, suite_from_spec


def default_envs() -> tuple[str, ...]:
    """The env names ``agentgym bench --eval`` plays when none are named."""
    return tuple(e.name for e in machinery_envs())


@dataclass
class EvalBenchResult:
    env: str
    episodes: int
    steps: int
    eval_wall_s: float  # `agentgym eval` of the oracle, trajectory store on
    bare_wall_s: float  # the same episodes in a bare reset/oracle/step loop
    overhead_ms_per_step: float  # (eval - bare) / steps
    success_rate: float
    store_kib_per_episode: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _bare(env_id: str, jobs: list[Job]) -> tuple[float, int]:
    """Play the jobs with the oracle and nothing else: the floor the evaluator adds to."""
    env = gym.make(env_id)
    steps = 0
    start = time.perf_counter()
    for job in jobs:
        env.reset(seed=job.seed, options={"task_id": job.task_id})
        oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(oracle.act())
            done = terminated or truncated
            steps += 1
    wall = time.perf_counter() - start
    env.close()
    return wall, steps


def bench_eval(
    envs: tuple[str, ...] | None = None, episodes: int = 1000, batch: int = 8
) -> list[EvalBenchResult]:
    """Evaluate the oracle on ``episodes`` train episodes of each env (None:
    :func:`default_envs`), store on."""
    results = []
    for name in default_envs() if envs is None else envs:
        probe = suite_from_spec(
            {"name": "probe", "entries": [{"env": name, "split": "train", "tasks": 1}]}
        )
        entry = probe.entries[0]
        tasks = min(_pool_size(name), episodes)
        trials = math.ceil(episodes / tasks)
        spec = {
            "name": f"bench-{name}",
            "trials": trials,
            "entries": [{"name": name.lower(), "env": name, "split": "train", "tasks": tasks}],
        }
        suite = suite_from_spec(spec)
        jobs = suite.entries[0].jobs(suite.seed, trials)[:episodes]
        with tempfile.TemporaryDirectory() as tmp:
            store = str(Path(tmp) / "bench.sqlite")
            config = EvalConfig(batch=batch, store=store, run_id="bench")
            start = time.perf_counter()
            report = evaluate(
                suite, ["oracle"], config, jobs={("oracle", suite.entries[0].name): jobs}
            )
            eval_wall = time.perf_counter() - start
            size = Path(store).stat().st_size + _wal_size(store)
        bare_wall, steps = _bare(entry.env_id, jobs)
        metrics = report["overall"]["oracle"]
        results.append(
            EvalBenchResult(
                env=entry.env_id,
                episodes=len(jobs),
                steps=steps,
                eval_wall_s=eval_wall,
                bare_wall_s=bare_wall,
                overhead_ms_per_step=(eval_wall - bare_wall) / max(steps, 1) * 1000.0,
                success_rate=metrics["success_rate"],
                store_kib_per_episode=size / 1024 / len(jobs),
            )
        )
    return results


def _pool_size(name: str) -> int:
    from agentgym_envs.core.tasks import load_task_set
    from agentgym_envs.eval.suite import env_class

    return len(load_task_set(env_class(name).task_file).pool("train"))


def _wal_size(path: str) -> int:
    wal = Path(path + "-wal")
    return wal.stat().st_size if wal.exists() else 0
