"""The learning proof over seeds: its distribution, intervals and verdict (plain data, no
training)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentgym_trainers.learn import Progress, learn_recipes, seed_settings
from agentgym_trainers.learn_report import verdict_lines
from agentgym_trainers.learn_stats import (
    combine,
    distribution,
    pooled,
    spread,
    two_stage_interval,
    verdict,
)
from agentgym_trainers.recipes import RECIPES
from agentgym_trainers.run import ProgressEvent


def _table(rate: float, tasks: int = 40, episodes: int = 5) -> dict[str, list[int]]:
    """``tasks`` tasks, the first ``rate`` share of them always solved, the rest never."""
    return {f"t{i}": [int(i < rate * tasks)] * episodes for i in range(tasks)}


def _seed(before: float, sft: float, rl: float, greedy: bool = False) -> dict[str, Any]:
    def phase(rate: float) -> dict[str, Any]:
        out: dict[str, Any] = {"success": rate, "per_task": _table(rate)}
        if greedy:
            out["greedy"] = {"success": rate / 2, "per_task": _table(rate / 2)}
        return out

    return {"before_sft": phase(before), "after_sft": phase(sft), "after_rl": phase(rl)}


def test_spread_is_mean_sample_std_min_and_max() -> None:
    assert spread([0.2, 0.4, 0.6]) == {"mean": 0.4, "std": 0.2, "min": 0.2, "max": 0.6}
    assert spread([0.3]) == {"mean": 0.3, "std": 0.0, "min": 0.3, "max": 0.3}
    with pytest.raises(ValueError):
        spread([])


@pytest.mark.parametrize(
    ("gains", "sft_ci", "rl_ci", "failed"),
    [
        ([0.30, 0.26, 0.28], (0.2, 0.3), (0.45, 0.6), None),
        ([0.30, 0.20, 0.22], (0.2, 0.3), (0.45, 0.6), "mean_gain_meets_bar"),  # mean 0.24
        ([0.60, 0.25, 0.0], (0.2, 0.3), (0.45, 0.6), "every_seed_gains"),  # one seed flat
        ([0.60, 0.35, -0.05], (0.2, 0.3), (0.45, 0.6), "every_seed_gains"),
        ([0.30, 0.26, 0.28], (0.2, 0.5), (0.45, 0.6), "intervals_apart"),  # overlap
        ([0.40, 0.35], (0.2, 0.3), (0.45, 0.6), "enough_seeds"),  # two runs: an anecdote
        ([0.40], (0.2, 0.3), (0.45, 0.6), "enough_seeds"),
    ],
)
def test_verdict_needs_the_bar_every_seed_and_apart_intervals(
    gains: list[float], sft_ci: tuple[float, float], rl_ci: tuple[float, float], failed: str | None
) -> None:
    got = verdict(gains, sft_ci, rl_ci, bar=0.25)
    assert got["passes"] is (failed is None)
    checks = ("enough_seeds", "mean_gain_meets_bar", "every_seed_gains", "intervals_apart")
    assert [c for c in checks if not got[c]] == ([] if failed is None else [failed])
    assert got["bar"] == 0.25 and got["n_seeds"] == len(gains)


def test_verdict_at_exactly_the_bar_passes() -> None:
    """A mean gain of exactly +0.25 (0.1 + 0.15 in float) meets a 0.25 bar."""
    assert verdict([0.1 + 0.15] * 3, (0.0, 0.1), (0.2, 0.5), bar=0.25)["passes"] is True


def test_two_stage_interval_widens_with_the_seeds_spread() -> None:
    alike = [_table(0.5), _table(0.5), _table(0.5)]
    apart = [_table(0.2), _table(0.5), _table(0.8)]
    point_alike, low_a, high_a = two_stage_interval(alike)
    point_apart, low_b, high_b = two_stage_interval(apart)
    assert point_alike == pytest.approx(0.5) == point_apart
    assert high_b - low_b > 1.5 * (high_a - low_a)  # the seeds are a source of variation
    assert two_stage_interval(apart) == (point_apart, low_b, high_b)  # deterministic


def test_two_stage_interval_of_identical_tasks_has_no_width() -> None:
    point, low, high = two_stage_interval([_table(1.0), _table(1.0)])
    assert point == low == high == 1.0


def test_the_paired_interval_pairs_each_seed_with_its_own_tasks() -> None:
    before = [{f"t{i}": [1, 0] for i in range(10)}, {f"t{i}": [0, 0] for i in range(10)}]
    after = [{f"t{i}": [1, 1] for i in range(10)}, {f"t{i}": [1, 0] for i in range(10)}]
    point, low, high = two_stage_interval(after, before)
    assert point == pytest.approx(0.5) == low == high  # every task of every seed +0.5
    with pytest.raises(ValueError, match="baseline"):
        two_stage_interval(after, before[:1])


def test_the_distribution_reports_every_seed_and_its_spread() -> None:
    seeds = {"0": _seed(0.0, 0.3, 0.6, greedy=True), "1": _seed(0.0, 0.2, 0.55, greedy=True)}
    seeds["2"] = _seed(0.0, 0.35, 0.5, greedy=True)
    dist = distribution(seeds, bar=0.25)
    assert dist["seeds"] == ["0", "1", "2"]
    assert dist["after_sft"]["per_seed"] == [0.3, 0.2, 0.35]
    assert dist["rl_gain"]["per_seed"] == [0.3, 0.35, 0.15]
    assert dist["rl_gain"]["mean"] == pytest.approx(0.2667, abs=1e-4)
    assert dist["rl_gain"]["min"] == 0.15 and dist["rl_gain"]["max"] == 0.35
    low, high = dist["rl_gain"]["paired_ci95"]
    assert 0 < low < 0.2667 < high
    assert dist["rl_gain_greedy"]["mean"] == pytest.approx(0.1333, abs=1e-4)
    assert dist["verdict"]["passes"] is dist["verdict"]["intervals_apart"] is True


def test_seeds_are_ordered_as_numbers() -> None:
    seeds = {str(s): _seed(0.0, 0.1, 0.5) for s in (10, 2, 1)}
    assert distribution(seeds, bar=0.25)["seeds"] == ["1", "2", "10"]


def test_one_seed_that_loses_fails_a_recipe_whose_mean_passes() -> None:
    seeds = {"0": _seed(0.0, 0.1, 0.9), "1": _seed(0.0, 0.1, 0.8), "2": _seed(0.0, 0.4, 0.35)}
    got = distribution(seeds, bar=0.25)["verdict"]
    assert got["mean_gain_meets_bar"] is True
    assert got["every_seed_gains"] is False and got["passes"] is False


def test_combine_pools_the_seeds_so_the_phase_success_is_the_mean_over_seeds() -> None:
    def run(sft: float, rl: float) -> dict[str, Any]:
        res = _seed(0.0, sft, rl)
        for phase in res.values():
            phase.update(n=200, tasks=40, split="test", wall_s=1.0, episodes=200)
        return {**res, "rl_gain": rl - sft, "sft_seconds": 1.0, "rl_seconds": 10.0}

    seeds = {"0": {**run(0.2, 0.5), "rl_steps": 5, "wall_s": 3.0}}
    seeds["1"] = {**run(0.3, 0.6), "rl_steps": 5, "wall_s": 4.0}
    out = combine(seeds, bar=0.25)
    assert out["after_sft"]["success"] == pytest.approx(0.25)
    assert out["rl_gain"] == pytest.approx(0.3)
    assert out["after_rl"]["n"] == 400 and out["after_rl"]["ci_method"] == "seed and task bootstrap"
    assert set(out["after_rl"]["per_task"]) == set(pooled({s: _table(0) for s in seeds}))
    assert out["verdict"] == out["distribution"]["verdict"]
    assert out["wall_s"] == 7.0 and out["seeds"] is seeds


def test_pooled_keys_each_task_by_its_seed() -> None:
    assert pooled({"0": {"a": [1]}, "1": {"a": [0, 1]}}) == {"0/a": [1], "1/a": [0, 1]}


def test_seed_zero_is_the_recipe_and_each_seed_moves_every_seed() -> None:
    recipe = RECIPES["frozenlake"]
    assert seed_settings(recipe, 0) == {"seed": 0, "sampling_seed": 0}
    assert seed_settings(recipe, 2) == {"seed": 2, "sampling_seed": 2}


def test_seeds_are_set_by_seeds_not_by_overrides(tmp_path: Path) -> None:
    plan = [(RECIPES["frozenlake"], tmp_path / "out", tmp_path / "work")]
    with pytest.raises(Exception, match="--seeds"):
        learn_recipes(plan, ["grpo"], seed=3)
    with pytest.raises(Exception, match="distinct"):
        learn_recipes(plan, ["grpo"], seeds=[1, 1])


def test_progress_shows_each_phase_start_and_end_and_writes_the_log(tmp_path: Path) -> None:
    log = tmp_path / "progress.log"
    progress = Progress("demo grpo seed 1", log, every=3600.0)
    for step in range(1, 11):
        progress(ProgressEvent("sft", step, 10, 0.1, {"sft_loss": 1.0 / step}))
    for done in range(1, 5):
        progress(ProgressEvent("eval_before", done, 4, 0.1, {"success": done % 2}))
    for step in range(1, 4):  # stopped early by the loss stop
        progress(ProgressEvent("sft", step, 10, 0.1, {"sft_loss": 1.0}))
    progress(ProgressEvent("rl", 1, 5, 0.1, {"success": 0.25}))
    lines = log.read_text().splitlines()
    assert len(lines) == 7  # first and last of each phase, nothing between
    assert "[demo grpo seed 1] sft step 1/10 sft_loss 1.000" in lines[0]
    assert "sft step 10/10 sft_loss 0.100" in lines[1]
    assert "eval_before 4/4 episodes, success 0.500 (elapsed" in lines[3]
    assert "sft stopped by its stop criterion at step 3/10" in lines[5]
    assert "rl step 1/5 success 0.250" in lines[6]


def test_a_verdict_over_too_few_seeds_says_so_in_the_headline() -> None:
    """One seed that gains +0.8 with apart intervals still fails: one run is an anecdote."""
    dist = distribution({"0": _seed(0.0, 0.1, 0.9)}, bar=0.25)
    assert dist["verdict"]["mean_gain_meets_bar"] and not dist["verdict"]["passes"]
    report = {
        "primary": "grpo",
        "verdict": dist["verdict"],
        "algos": {"grpo": {"distribution": dist}},
    }
    (line,) = verdict_lines(report)
    assert line.startswith("**grpo fails the bar**") and "over 1 seeds (at least 3: no)" in line
