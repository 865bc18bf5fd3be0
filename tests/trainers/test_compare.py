"""Comparing learn output folders: numbers from the inputs, paired differences, honesty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.metrics import wilson_interval
from agentgym_trainers.compare import (
    Entry,
    compare,
    main,
    parse_entry,
    sentence,
    verdict,
    window_band,
)
from agentgym_trainers.learn import algo_result, paired_difference
from agentgym_trainers.provenance import platform_info

TASKS = 20


def _eval(wins: list[int], episodes: int = 2) -> dict[str, Any]:
    """A held-out evaluation where task i is won in all ``episodes`` iff ``wins[i]``."""
    per_task = {f"t{i:02d}": [w] * episodes for i, w in enumerate(wins)}
    n = len(wins) * episodes
    return {
        "split": "test",
        "episodes": n,
        "valid_episodes": n,
        "success": sum(wins) / len(wins),
        "wall_s": 1.0,
        "tasks": len(wins),
        "per_task": per_task,
    }


def _wins(k: int) -> list[int]:
    return [int(i < k) for i in range(TASKS)]


def write_run(
    folder: Path,
    rl: dict[str, int],
    rows: dict[str, list[dict[str, float]]],
    sft: int = 5,
    greedy_rl: dict[str, int] | None = None,
    primary: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """A learn output folder: per algo, ``rl[algo]`` of the tasks won after RL (the first
    ones), ``sft`` after SFT, and its RL rows."""
    algos = {}
    for algo, won in rl.items():
        train = {
            "eval_initial": _eval(_wins(0)),
            "eval_before": _eval(_wins(sft)),
            "eval_after": _eval(_wins(won)),
            "eval_before_greedy": _eval(_wins(sft)),
            "eval_after_greedy": _eval(_wins((greedy_rl or rl)[algo])),
            "sft_seconds": 2.0,
            "rl_seconds": 30.0,
            "steps": len(rows[algo]),
        }
        algos[algo] = algo_result(train, wall_s=40.0)
    summary = {
        "recipe": "demo",
        "commands": [f"python -m agentgym_trainers.learn demo --algos {a}" for a in rl],
        "primary": primary or next(iter(rl)),
        "algos": algos,
        "config": {"overrides": overrides or {}},
    }
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    with (folder / "metrics.jsonl").open("w") as f:
        f.write(json.dumps({"algo": next(iter(rl)), "step": 0, "phase": "sft"}) + "\n")
        for algo, algo_rows in rows.items():
            for row in algo_rows:
                f.write(json.dumps({"algo": algo, "phase": "rl", **row}) + "\n")
    return folder


def rl_rows(n: int, seconds: float, tokens: float, **extra: float) -> list[dict[str, float]]:
    return [
        {
            "step": s + 1,
            "success": s / n,
            "reward": 0.0,
            "time_step_s": seconds,
            "generated_tokens": tokens,
            **extra,
        }
        for s in range(n)
    ]


def test_the_table_follows_from_the_inputs(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", {"grpo": 8}, {"grpo": rl_rows(4, 2.5, 100)})
    branch = write_run(
        tmp_path / "branch",
        {"grpo": 16},
        {"grpo": rl_rows(3, 4.0, 300, branch_tokens=120, branch_env_steps=7)},
        overrides={"branch": "entropy"},
    )
    report = compare(
        [Entry("grpo", base), Entry("branch", branch)], tmp_path / "out", "python -m x"
    )
    first, second = report["entries"]
    assert first["vs_baseline"] is None
    assert (first["rl_steps"], first["rl_step_seconds"], first["sampled_tokens"]) == (4, 10.0, 400)
    # generated_tokens already counts the branch tokens: they are reported, never added
    assert (second["sampled_tokens"], second["branch_tokens"]) == (900, 360)
    assert second["overrides"] == {"branch": "entropy"}
    assert second["commands"] == ["python -m agentgym_trainers.learn demo --algos grpo"]
    assert second["after_sft"]["success"] == 0.25 and second["after_rl"]["success"] == 0.8
    assert second["after_rl"]["greedy"]["success"] == 0.8
    assert second["after_rl"]["wilson95"][0] < 0.8 < second["after_rl"]["wilson95"][1]
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved == json.loads(json.dumps(report))
    text = (tmp_path / "out" / "README.md").read_text()
    ci = second["after_rl"]["ci95"]
    diff = second["vs_baseline"]["sampled"]
    row = (
        f"| branch | 0.250 [{second['after_sft']['ci95'][0]:.3f}, "
        f"{second['after_sft']['ci95'][1]:.3f}] | 0.800 [{ci[0]:.3f}, {ci[1]:.3f}] "
        f"| +0.400 [{diff['ci95'][0]:+.3f}, {diff['ci95'][1]:+.3f}] |"
    )
    assert row in text
    assert "| 3 | 12 | 900 |" in text and "| 4 | 10 | 400 |" in text
    assert "    python -m x" in text
    assert "    python -m agentgym_trainers.learn demo --algos grpo" in text
    assert 'overrides {"branch": "entropy"}: branch (`grpo`)' in text
    assert "It sampled 2.25x the baseline's tokens in RL and ran 1.20x its RL seconds." in text


def test_paired_differences_pair_tasks_for_sampled_and_greedy(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", {"grpo": 8}, {"grpo": rl_rows(2, 1, 1)})
    other = write_run(
        tmp_path / "other", {"ppo": 10}, {"ppo": rl_rows(2, 1, 1)}, greedy_rl={"ppo": 6}
    )
    report = compare([Entry("a", base), Entry("b", other)], tmp_path / "out")
    versus = report["entries"][1]["vs_baseline"]
    point, low, high = paired_difference(
        {f"t{i:02d}": [w] * 2 for i, w in enumerate(_wins(8))},
        {f"t{i:02d}": [w] * 2 for i, w in enumerate(_wins(10))},
    )
    assert versus["sampled"]["diff"] == pytest.approx(point) == pytest.approx(0.1)
    assert versus["sampled"]["ci95"] == [round(low, 4), round(high, 4)]
    # the same tasks won, plus two: every resample's difference is >= 0, some are 0
    assert versus["sampled"]["ci95"][0] == 0.0 and versus["sampled"]["verdict"] == "includes 0"
    assert versus["greedy"]["diff"] == pytest.approx(-0.1)
    assert versus["greedy"]["verdict"] == "includes 0"
    assert versus["sampled"]["tasks"] == TASKS
    assert report["entries"][1]["same_sft_start"] is True


def test_the_honest_sentence_says_above_below_or_includes_zero(tmp_path: Path) -> None:
    assert (verdict(0.01, 0.2), verdict(-0.2, -0.01), verdict(-0.1, 0.1)) == (
        "above 0",
        "below 0",
        "includes 0",
    )
    base = write_run(tmp_path / "base", {"grpo": 10}, {"grpo": rl_rows(2, 1, 1)})
    better = write_run(tmp_path / "better", {"grpo": 20}, {"grpo": rl_rows(2, 1, 1)})
    worse = write_run(tmp_path / "worse", {"grpo": 0}, {"grpo": rl_rows(2, 1, 1)})
    same = write_run(tmp_path / "same", {"grpo": 11}, {"grpo": rl_rows(2, 1, 1)}, sft=6)
    report = compare(
        [Entry("base", base), Entry("better", better), Entry("worse", worse), Entry("same", same)],
        tmp_path / "out",
    )
    b, up, down, flat = report["entries"]
    assert up["vs_baseline"]["sampled"]["verdict"] == "above 0"
    assert down["vs_baseline"]["sampled"]["verdict"] == "below 0"
    assert flat["vs_baseline"]["sampled"]["verdict"] == "includes 0"
    assert sentence(up, b).endswith("the 95% interval lies above 0, so better helped.")
    assert sentence(down, b).endswith(
        "the 95% interval lies below 0, so worse did not help: it did worse than base."
    )
    assert sentence(flat, b).endswith(
        "the 95% interval includes 0, so same did not help measurably over base."
    )
    text = (tmp_path / "out" / "README.md").read_text()
    assert sentence(up, b, "greedy") in text and sentence(flat, b) in text
    # a different SFT start is said, since the RL difference is then not RL's alone
    assert flat["same_sft_start"] is False and up["same_sft_start"] is True
    assert text.count("not RL's alone") == 1


def test_the_algo_picks_the_result_and_its_rows(tmp_path: Path) -> None:
    folder = write_run(
        tmp_path / "cpu",
        {"grpo": 8, "ppo": 12},
        {"grpo": rl_rows(2, 1.0, 10), "ppo": rl_rows(5, 3.0, 50)},
        primary="grpo",
    )
    report = compare([Entry("g", folder), Entry("p", folder, "ppo")], tmp_path / "out")
    g, p = report["entries"]
    assert (g["algo"], g["rl_steps"], g["sampled_tokens"]) == ("grpo", 2, 20)
    assert (p["algo"], p["rl_steps"], p["sampled_tokens"], p["rl_step_seconds"]) == (
        "ppo",
        5,
        250,
        15.0,
    )
    assert p["after_rl"]["success"] == 0.6


def test_the_cli_writes_the_plot_and_records_its_command(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", {"grpo": 8}, {"grpo": rl_rows(6, 1.0, 10)})
    other = write_run(tmp_path / "other", {"ppo": 9}, {"ppo": rl_rows(4, 2.0, 30)})
    out = tmp_path / "credit"
    args = ["--out", str(out), f"grpo={base}", f"ppo={other}:ppo", "--window", "3"]
    assert main(args) == 0
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"].startswith("python -m agentgym_trainers.compare --out ")
    assert f"ppo={other}:ppo" in summary["command"] and summary["window"] == 3
    assert [e["name"] for e in summary["entries"]] == ["grpo", "ppo"]


def test_entries_parse_with_and_without_an_algo() -> None:
    assert parse_entry("a=docs/x") == Entry("a", Path("docs/x"))
    assert parse_entry("a=docs/x:ppo") == Entry("a", Path("docs/x"), "ppo")
    assert parse_entry("a=/tmp/c:d/x") == Entry("a", Path("/tmp/c:d/x"))
    for bad in ("docs/x", "=docs/x", "a=", "a=:ppo"):
        with pytest.raises(ConfigError, match=r"NAME=DIR\[:ALGO\]"):
            parse_entry(bad)


def test_bad_inputs_raise_config_errors_that_name_the_fix(tmp_path: Path) -> None:
    base = write_run(tmp_path / "cpu" / "demo", {"grpo": 8}, {"grpo": rl_rows(2, 1, 1)})
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"no summary\.json .* run `python -m agentgym_trainers"):
        compare([Entry("a", base), Entry("b", tmp_path / "missing")], out)
    with pytest.raises(ConfigError, match=r"recipe folder inside it, e.g. b=.*cpu/demo"):
        compare([Entry("a", base), Entry("b", tmp_path / "cpu")], out)
    with pytest.raises(ConfigError, match=r"no results for 'ppo'; write b=.*:ALGO .*\['grpo'\]"):
        compare([Entry("a", base), Entry("b", base, "ppo")], out)
    with pytest.raises(ConfigError, match="at least one other entry"):
        compare([Entry("a", base)], out)
    with pytest.raises(ConfigError, match="names must differ"):
        compare([Entry("a", base), Entry("a", base)], out)
    no_rows = write_run(tmp_path / "no-rows", {"grpo": 8}, {"grpo": []})
    with pytest.raises(ConfigError, match=r"no RL rows of 'grpo'; rebuild .* --from-runs"):
        compare([Entry("a", base), Entry("b", no_rows)], out)
    (no_rows / "metrics.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"no metrics\.jsonl"):
        compare([Entry("a", base), Entry("b", no_rows)], out)
    old = write_run(tmp_path / "old", {"grpo": 8}, {"grpo": [{"step": 1, "success": 0.5}]})
    with pytest.raises(ConfigError, match=r"lacks \['time_step_s', 'generated_tokens'\]"):
        compare([Entry("a", base), Entry("b", old)], out)
    other = write_run(tmp_path / "other", {"grpo": 8}, {"grpo": rl_rows(2, 1, 1)})
    summary = json.loads((other / "summary.json").read_text())
    per_task = summary["algos"]["grpo"]["after_rl"]["per_task"]
    summary["algos"]["grpo"]["after_rl"]["per_task"] = {f"x{k}": v for k, v in per_task.items()}
    (other / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError, match="shares no held-out task with the baseline"):
        compare([Entry("a", base), Entry("b", other)], out)
    summary["algos"]["grpo"]["after_rl"]["per_task"] = {}
    (other / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError, match="no per-task outcomes"):
        compare([Entry("a", base), Entry("b", other)], out)
    (other / "summary.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        compare([Entry("a", base), Entry("b", other)], out)
    (other / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a learn summary"):
        compare([Entry("a", base), Entry("b", other)], out)
    assert not out.exists()  # nothing is written before every entry is read
    with pytest.raises(ConfigError, match="--window must be at least 1"):
        main(["--out", str(out), "--window", "0", f"a={base}", f"b={base}"])


def test_an_entry_lists_the_command_of_its_own_result(tmp_path: Path) -> None:
    """learn records each result's command: an entry shows its own, not every command
    that wrote into the same folder."""
    both = write_run(
        tmp_path / "both",
        {"grpo": 8, "ppo": 4},
        {"grpo": rl_rows(4, 2.5, 100), "ppo": rl_rows(4, 5.0, 100)},
    )
    summary = json.loads((both / "summary.json").read_text())
    for algo in ("grpo", "ppo"):
        summary["algos"][algo]["command"] = f"learn --algos {algo}"
    (both / "summary.json").write_text(json.dumps(summary))
    report = compare(
        [Entry("grpo", both, "grpo"), Entry("ppo", both, "ppo")], tmp_path / "out", "x"
    )
    assert [e["commands"] for e in report["entries"]] == [
        ["learn --algos grpo"],
        ["learn --algos ppo"],
    ]


def test_each_source_names_the_platform_it_ran_on(tmp_path: Path) -> None:
    """Runs on two CPUs are not an exact pair (provenance.py): the README says where each
    ran, and that an old result did not record it."""
    old = write_run(tmp_path / "old", {"grpo": 8}, {"grpo": rl_rows(2, 1.0, 10)})
    new = write_run(tmp_path / "new", {"grpo": 9}, {"grpo": rl_rows(2, 1.0, 10)})
    summary = json.loads((new / "summary.json").read_text())
    summary["algos"]["grpo"]["platform"] = platform_info("cpu") | {"cpu": "Example CPU 9000"}
    (new / "summary.json").write_text(json.dumps(summary))
    report = compare([Entry("old", old), Entry("new", new)], tmp_path / "out")
    assert report["entries"][0]["platform"] is None
    assert report["entries"][1]["platform"]["cpu"] == "Example CPU 9000"
    text = (tmp_path / "out" / "README.md").read_text()
    assert "Platform: not recorded (the result predates platform records)." in text
    torch_version = platform_info()["packages"]["torch"]
    assert f"Platform: Example CPU 9000 ({platform_info()['cpu_capability']}), cpu" in text
    assert f"torch {torch_version}" in text


def test_the_training_curve_band_pools_the_window_s_episodes() -> None:
    rows = [{"success": x, "episodes": 4.0} for x in (0.0, 0.5, 1.0, 0.25)]
    band = window_band(rows, 2)
    assert band is not None
    low, high = band
    # step 3's window holds steps 2 and 3: 4 + 1 successes of 8 episodes
    assert (low[3], high[3]) == wilson_interval(5, 8)
    assert (low[0], high[0]) == wilson_interval(0, 4)  # the first window is one step
    assert low[1] < 2 / 8 < high[1]  # steps 0 and 1: 0 + 2 successes of 8 episodes
    assert window_band([{"success": 0.5}], 2) is None  # rows that do not count episodes
