"""Success by task difficulty and by project in the evaluator's report: counted from real
evaluations, rendered in markdown and HTML, and absent (without harm) where a report
predates them or an entry's task set cannot be loaded."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import TaskSet, load_task_set
from agentgym_envs.eval.evaluate import EvalConfig, evaluate
from agentgym_envs.eval.replay import replay
from agentgym_envs.eval.report import render_html, render_markdown
from agentgym_envs.eval.suite import Job, Suite, SuiteEntry, env_class, suite_from_spec
from tests.eval import crashy
from tests.eval.test_report import _tables

LEVELS = ["easy", "medium", "hard"]
SPEC = {
    "name": "levels",
    "trials": 2,
    "seed": 5,
    "entries": [
        {"name": "lake", "env": "FrozenLake", "difficulty": LEVELS, "tasks": 6},
        {"name": "crashy", "env": crashy.SUITE_ENV, "difficulty": LEVELS, "tasks": 4},
    ],
}
SECTIONS = ("Success by difficulty", "Success by project")


def _suite() -> Suite:
    """SPEC with crashy's first task raising at its second step: env errors."""
    doomed = suite_from_spec(SPEC).entries[1].task_ids(SPEC["seed"])[0]  # type: ignore[arg-type]
    spec = copy.deepcopy(SPEC)
    spec["entries"][1]["env_kwargs"] = {"crash": "raise", "crash_tasks": [doomed]}  # type: ignore[index]
    return suite_from_spec(spec)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return evaluate(_suite(), ["oracle", "random"], EvalConfig(batch=3))


def _counted(report: dict[str, Any], policy: str, entry: str, level_of: Any) -> dict[str, Any]:
    """The breakdown recounted from the report's episodes."""
    episodes: Counter[str] = Counter()
    wins: Counter[str] = Counter()
    for e in report["episodes"]:
        if e["policy"] == policy and e["entry"] == entry:
            level = level_of(e["task_id"])
            episodes[level] += e["valid"]
            wins[level] += e["valid"] and e["success"]
    return {
        k: {"episodes": n, "successes": wins[k], "success": wins[k] / n if n else None}
        for k, n in episodes.items()
    }


def test_by_difficulty_counts_what_the_episodes_say(report: dict[str, Any]) -> None:
    rows = {(r["policy"], r["entry"]): r for r in report["results"]}
    assert len(rows) == 4
    for (policy, entry), row in rows.items():
        # the level is in the task id (frozenlake-hard-test-1200012): no task set needed
        counted = _counted(report, policy, entry, lambda tid: tid.split("-")[1])
        assert row["by_difficulty"] == counted, (policy, entry)
        assert list(row["by_difficulty"]) == [k for k in LEVELS if k in counted]  # in order
        assert sum(c["episodes"] for c in counted.values()) == row["metrics"]["valid"]
        assert sum(c["successes"] for c in counted.values()) == row["metrics"]["successes"]
        assert "by_project" not in row  # no task of these envs names a project
    # env errors leave the breakdown as they leave every denominator
    crashed = rows["oracle", "crashy"]
    assert crashed["metrics"]["env_errors"] == 2
    assert sum(c["episodes"] for c in crashed["by_difficulty"].values()) == 6
    assert all(c["success"] == 1.0 for c in crashed["by_difficulty"].values())
    json.dumps(report)  # plain data


def test_the_report_renders_the_difficulty_section(report: dict[str, Any]) -> None:
    md = render_markdown(report, plot_dir=None)
    assert "## Success by difficulty" in md and "## Success by project" not in md
    page = render_html(report)
    assert "<h2>Success by difficulty</h2>" in page and "Success by project" not in page
    (table,) = [t for t in _tables(page) if t[0][:3] == ["entry", "policy", "level"]]
    assert table[0] == ["entry", "policy", "level", "episodes", "success"]
    expected = [
        [entry, policy, level, str(c["episodes"]),
         "-" if c["success"] is None else f"{100 * c['success']:.1f}%"]
        for entry in ("lake", "crashy") for policy in ("oracle", "random")
        for r in report["results"] if (r["entry"], r["policy"]) == (entry, policy)
        for level, c in r["by_difficulty"].items()
    ]  # fmt: skip
    assert table[1:] == expected


def _project_tasks() -> TaskSet:
    """FrozenLake tasks of two levels, each naming one of two projects in its spec."""
    lake = load_task_set(env_class("FrozenLake").task_file)
    picked = [*lake.pool("test", "easy")[:3], *lake.pool("test", "medium")[:3]]
    return TaskSet.from_tasks(
        "FrozenLake",
        [
            dataclasses.replace(t, spec={**t.spec, "project": "beta" if i % 2 else "alpha"})
            for i, t in enumerate(picked)
        ],
    )


def test_by_project_from_the_tasks_an_entry_passes() -> None:
    tasks = _project_tasks()
    entry = SuiteEntry("projects", "FrozenLake", difficulty=("easy", "medium"),
                       env_kwargs={"tasks": tasks, "split": "test"})  # fmt: skip
    suite = Suite("projects", (entry,), 1, 0)
    jobs = {(p, "projects"): [Job("projects", t.id, 0, 11 + i) for i, t in enumerate(tasks.tasks)]
            for p in ("oracle", "noop")}  # fmt: skip
    report = evaluate(suite, ["oracle", "noop"], EvalConfig(batch=2), jobs=jobs)
    project = {t.id: t.spec["project"] for t in tasks.tasks}
    level = {t.id: t.difficulty for t in tasks.tasks}
    for row in report["results"]:
        assert row["by_project"] == _counted(report, row["policy"], "projects", project.get)
        assert row["by_difficulty"] == _counted(report, row["policy"], "projects", level.get)
        assert list(row["by_project"]) == ["alpha", "beta"]
        assert {c["episodes"] for c in row["by_project"].values()} == {3}
    oracle, noop = report["results"]
    assert oracle["by_project"]["beta"] == {"episodes": 3, "successes": 3, "success": 1.0}
    assert noop["by_project"]["alpha"] == {"episodes": 3, "successes": 0, "success": 0.0}
    md = render_markdown(report, plot_dir=None)
    assert "## Success by difficulty" in md and "## Success by project" in md
    assert "| projects | oracle | beta | 3 | 100.0% |" in md
    assert "| projects | noop | alpha | 3 | 0.0% |" in md
    page = render_html(report)
    assert all(f"<h2>{title}</h2>" in page for title in SECTIONS)
    (table,) = [t for t in _tables(page) if t[0][:3] == ["entry", "policy", "project"]]
    assert ["projects", "oracle", "alpha", "3", "100.0%"] in table


def test_no_task_set_no_breakdown(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym_envs.eval import breakdown as ev

    def missing(*args: object) -> TaskSet:
        raise ConfigError("task file is missing")

    spec = {"name": "one", "seed": 1, "entries": [{"env": "FrozenLake", "tasks": 2}]}
    suite = suite_from_spec(spec)
    jobs = {("oracle", "frozenlake-test"): suite.entries[0].jobs(1, 1)}  # before the patch
    monkeypatch.setattr(ev, "load_task_set", missing)
    report = evaluate(suite, ["oracle"], EvalConfig(batch=2), jobs=jobs)
    (row,) = report["results"]
    assert row["metrics"]["successes"] == 2
    assert "by_difficulty" not in row and "by_project" not in row
    assert not any(title in render_markdown(report) for title in SECTIONS)


def test_a_report_from_before_the_breakdowns_renders_and_replays(
    report: dict[str, Any], tmp_path: Path
) -> None:
    old = copy.deepcopy(report)
    for row in old["results"]:
        del row["by_difficulty"]
    md, page = render_markdown(old), render_html(old)
    assert not any(title in md or title in page for title in SECTIONS)
    assert "## Per entry" in md and "<h2>Envs and versions</h2>" in page
    lake = {**old, "episodes": [e for e in old["episodes"] if e["entry"] == "lake"]}
    again, diffs = replay(lake, EvalConfig(batch=2))
    assert diffs == [] and all("by_difficulty" in r for r in again["results"])
    path = tmp_path / "report.json"
    path.write_text(json.dumps(lake))
    assert main(["eval", "--replay", str(path), "--out", str(tmp_path / "r")]) == 0
    assert "## Success by difficulty" in (tmp_path / "r" / "report.md").read_text()
