"""Replaying an eval report: the same episodes run again (same suite, policies, seeds and
slots), and what came out differently (``agentgym eval --replay``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.evaluate import REPORT_SCHEMA, EvalConfig, evaluate
from agentgym_envs.eval.suite import Job, suite_from_spec
from agentgym_envs.rollout import SlotIsolation

COMPARED = (
    "task_id",
    "seed",
    "outcome",
    "valid",
    "steps",
    "reward",
    "milestones",
    "tool_calls",
    "reward_components",
)


def replay(
    report: Mapping[str, Any], config: EvalConfig | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Re-run exactly the episodes of ``report``; return the new report and the
    differences (empty when every episode came out the same)."""
    if report.get("schema") != REPORT_SCHEMA:
        raise ConfigError(
            f"not an agentgym eval report (schema {report.get('schema')!r}, "
            f"expected {REPORT_SCHEMA!r}); pass the report.json that `agentgym eval` wrote"
        )
    suite = suite_from_spec(report["suite"]["spec"])
    old = dict(report["config"])
    options = replay_options(report)
    config = config or EvalConfig(
        batch=old["batch"],
        # a report from before entries played side by side played them one by one
        max_slots=int(old.get("max_slots") or old["batch"]),
        isolation=SlotIsolation.parse(old["isolation"]),
        store=None,
        policy_options=options,
        step_timeout_s=old["step_timeout_s"],
        envs_per_actor=old.get("envs_per_actor", 1),
        ray_address=old.get("ray_address", ""),
    )
    jobs: dict[tuple[str, str], list[Job]] = {}
    for ep in report["episodes"]:
        job = Job(ep["entry"], ep["task_id"], ep["trial"], ep["seed"])
        jobs.setdefault((ep["policy"], ep["entry"]), []).append(job)
    policies = [p["id"] for p in report["policies"]]
    entries = list(dict.fromkeys(ep["entry"] for ep in report["episodes"]))
    new = evaluate(suite, policies, config, entries=entries, jobs=jobs)
    return new, compare_episodes(report["episodes"], new["episodes"])


def replay_options(report: Mapping[str, Any]) -> dict[str, Any]:
    """The LLM options a replay of ``report`` uses: the recorded ones, plus what a
    report from before an option existed ran with (``trim_to`` 1.0: histories cut as
    little as fits)."""
    options = dict(report["config"].get("policy_options") or {})
    specs = [p.get("spec") or {} for p in report["policies"]]
    if any(s.get("kind") in ("hf", "openai") and "trim_to" not in s for s in specs):
        options.setdefault("trim_to", 1.0)
    return options


def compare_episodes(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Human-readable differences between two runs of the same jobs."""

    def key(e: Mapping[str, Any]) -> tuple[Any, ...]:
        return (e["policy"], e["entry"], e["task_id"], e["trial"])

    before, after = {key(e): e for e in old}, {key(e): e for e in new}
    diffs = [f"{k}: missing in the replay" for k in before if k not in after]
    for k, e in before.items():
        if k in after:
            for name in COMPARED:
                if e.get(name) != after[k].get(name):
                    diffs.append(f"{k}: {name} {e.get(name)!r} -> {after[k].get(name)!r}")
    return diffs


def load_report(path: str | Path) -> dict[str, Any]:
    import json

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"report {p} does not exist; pass the report.json of an earlier run")
    data: dict[str, Any] = json.loads(p.read_text())
    return data
