"""Metric functions."""

from dataclasses import replace

import pytest

from agentgym_envs.core.info import Outcome
from agentgym_envs.eval import run_episodes, wilson_interval
from agentgym_envs.eval.runner import run_summary


def test_wilson_interval_known_values() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] > 0.2
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_summary_of_real_episodes() -> None:
    records = run_episodes("Sokoban", "oracle", 5, split="test", difficulty="hard", seed=3)
    assert [r.seed for r in records] == [3, 4, 5, 6, 7]
    s = run_summary("agentgym/Sokoban-v0", "oracle", records)
    assert s["success_rate"] == 1.0 and s["valid"] == 5 and s["env_error_rate"] == 0.0
    assert s["cost_per_success"] == pytest.approx(s["mean_cost"])
    assert list(s["stage_rates"]) == sorted(s["stage_rates"], key=lambda k: int(k.split(":")[1]))
    assert {r.episode.difficulty for r in records} == {"hard"}
    again = run_episodes("Sokoban", "oracle", 5, split="test", difficulty="hard", seed=3, batch=2)
    assert [r.task_id for r in again] == [r.task_id for r in records]
    assert [r.episode.reward for r in again] == [r.episode.reward for r in records]


def test_env_errors_leave_the_denominator() -> None:
    records = run_episodes("Sokoban", "oracle", 4, seed=0)
    crashed = replace(records[0].episode, valid=False, outcome=Outcome.ENV_ERROR)
    broken = [replace(records[0], episode=crashed), *records[1:]]
    s = run_summary("agentgym/Sokoban-v0", "oracle", broken)
    assert s["valid"] == 3 and s["success_rate"] == 1.0 and s["env_error_rate"] == 0.25
    assert s["outcomes"] == {"env_error": 1, "success": 3}
