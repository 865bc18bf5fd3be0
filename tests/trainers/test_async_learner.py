"""The learner's side of asynchronous rollouts reads the learner through the narrow
:class:`~agentgym_trainers.async_rollout.Learner` (the jobs of a step, the version, the
weights), not the trainer: here a fake learner and a fake worker check its schedule
with no model and no env."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentgym_envs.rollout.episodes import RolloutJob, RolloutStats
from agentgym_trainers.async_rollout import AsyncRollouts, FinishedGroup, PolicyWeights


class FakeLearner:
    """Two groups of one episode per step; weights are empty, tagged with the version."""

    def __init__(self) -> None:
        self.version = 0
        self.asked: list[int] = []

    def jobs(self, step: int) -> list[RolloutJob]:
        self.asked.append(step)
        return [RolloutJob(f"task-{step}", 100 + step, group) for group in (0, 1)]

    def weights(self) -> PolicyWeights:
        return PolicyWeights(self.version, {})


def episode(name: str) -> Any:
    """A finished episode the lag metrics skip (not valid), told apart by its name."""
    return SimpleNamespace(name=name, episode=SimpleNamespace(valid=False))


class FakeWorker:
    """Records every call; ``take`` hands back two groups out of submission order."""

    def __init__(self, fail_start: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_start = fail_start

    def start(self) -> None:
        self.calls.append(("start",))
        if self.fail_start:
            raise RuntimeError("no envs")

    def submit(self, jobs: list[RolloutJob]) -> None:
        self.calls.append(("submit", [(j.task_id, j.group) for j in jobs]))

    def push(self, weights: PolicyWeights) -> None:
        self.calls.append(("push", weights.version))

    def take(self, n: int, timeout_s: float) -> list[FinishedGroup]:
        self.calls.append(("take", n, timeout_s))
        return [FinishedGroup(7, 3, [episode("later")]), FinishedGroup(6, 1, [episode("first")])]

    def stats(self) -> tuple[RolloutStats, float]:
        return RolloutStats(2.0, 1.0, 40), 0.5

    def close(self) -> None:
        self.calls.append(("close",))


def test_the_schedule_runs_on_the_narrow_learner_interface() -> None:
    learner, worker = FakeLearner(), FakeWorker()
    rollouts = AsyncRollouts(
        learner, worker, first_step=3, tasks_per_step=2, world=2, max_lag=1, timeout_s=9.0
    )
    # max_lag + 1 steps of jobs go out at once; group ids are unique per run (4 per step)
    assert learner.asked == [3, 4]
    assert worker.calls == [
        ("start",),
        ("submit", [("task-3", 12), ("task-3", 13)]),
        ("submit", [("task-4", 16), ("task-4", 17)]),
    ]
    trajs, stats, metrics = rollouts.next_batch()
    assert worker.calls[-1] == ("take", 2, 9.0)
    assert [t.name for t in trajs] == ["first", "later"]  # in submission order
    assert stats == RolloutStats(2.0, 1.0, 40)
    assert metrics["time_worker_wait_s"] == 0.5 and metrics["lag_max"] == 0.0
    _, again, _ = rollouts.next_batch()
    assert again == RolloutStats(0.0, 0.0, 0)  # what the worker did since the last batch
    del worker.calls[:]
    learner.version = 1
    rollouts.after_update(True)  # the weights first, then the next step's jobs
    rollouts.after_update(False)
    assert worker.calls == [
        ("push", 1),
        ("submit", [("task-5", 20), ("task-5", 21)]),
        ("submit", [("task-6", 24), ("task-6", 25)]),
    ]
    rollouts.close()
    assert worker.calls[-1] == ("close",)


def test_a_worker_that_fails_to_start_is_closed() -> None:
    worker = FakeWorker(fail_start=True)
    with pytest.raises(RuntimeError, match="no envs"):
        AsyncRollouts(
            FakeLearner(), worker, first_step=0, tasks_per_step=1, max_lag=0, timeout_s=1.0
        )
    assert worker.calls == [("start",), ("close",)]
