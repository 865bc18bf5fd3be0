"""The evaluator's simulated-user figures (issue 30): ``evaluate`` on the smoke suite's
Retail and Calendar entries with ``user="llm"``, the embedded model replayed offline
from the cassette shipped in ``tests/business/data`` (as ``test_llm_user_replay.py``
does), against the same episodes played directly with the env.

Each entry plays its first smoke task twice: at seed 0, the episode the cassette
recorded (its calls hit), and at the suite's own seed, where the recording has no
entry (its calls miss and the template reply is said, counted). A user-side failure
comes from a real endpoint that answers HTTP 503 (``llm_endpoint.py``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from rich.console import Console

from agentgym_envs.core.episode import UserLLMCounters
from agentgym_envs.eval.cli_eval import print_tables
from agentgym_envs.eval.evaluate import EpisodeResult, EvalConfig, evaluate
from agentgym_envs.eval.journal import EpisodeJournal
from agentgym_envs.eval.report import render_html, render_markdown, write_reports
from agentgym_envs.eval.suite import Job, Suite, load_suite
from tests.business.llm_endpoint import ScriptedEndpoint
from tests.business.test_llm_user import play_oracle
from tests.business.test_llm_user_replay import replay_kwargs

ENTRIES = ("retail", "calendar")


def llm_suite(user: dict[str, Any], trials: int = 2) -> tuple[Suite, dict[tuple[str, str], list]]:
    """The smoke suite's Retail and Calendar entries with ``user``'s env kwargs, and the
    jobs: each entry's first task at seed 0 (the recorded one), then at its suite seed."""
    smoke = load_suite("smoke")
    entries = tuple(
        replace(e, env_kwargs={**e.env_kwargs, **user}) for e in smoke.entries if e.name in ENTRIES
    )
    suite = Suite("llm-user", entries, trials=trials, seed=smoke.seed)
    jobs: dict[tuple[str, str], list[Job]] = {}
    for e in entries:
        first = e.task_ids(suite.seed)[0]
        own = [j for j in e.jobs(suite.seed, trials) if j.task_id == first]
        jobs["oracle", e.name] = [Job(e.name, first, 0, 0), *own[1:trials]]
    return suite, jobs


def played_infos(suite: Suite, jobs: dict[tuple[str, str], list[Job]]) -> list[dict[str, Any]]:
    """The last ``info["user_llm"]`` of each job, played directly with the env."""
    out = []
    for e in suite.entries:
        for job in jobs["oracle", e.name]:
            env = gym.make(e.env_id, **dict(e.env_kwargs))
            _, info = play_oracle(env, job.task_id, seed=job.seed)
            env.close()
            out.append(info["user_llm"])
    return out


def summed(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """What the report's section must say: the info counters added up by hand."""

    def total(part: str, key: str) -> int:
        return sum(int(i[part][key]) for i in infos)

    replies = total("voice", "replies")
    return {
        "episodes": len(infos),
        "replies": replies,
        "first_draw_pass": total("voice", "first_draw_pass"),
        "first_draw_rate": total("voice", "first_draw_pass") / replies,
        "redraws": total("voice", "redraws"),
        "fallbacks": total("voice", "fallbacks"),
        "fallback_rate": total("voice", "fallbacks") / replies,
        "failures": sum(i["voice"]["failures"] > 0 for i in infos),
        "reads": total("reader", "reads"),
        "read_fallbacks": total("reader", "fallbacks"),
        "disagreements": total("reader", "disagreements"),
        "cassette_misses": total("cassette", "misses"),
    }


def section_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    """The ``## Simulated user`` table of a markdown report, by (entry, policy)."""
    part = markdown.split("## Simulated user\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in part.splitlines() if line.startswith("| ")][1:]  # no head
    rows = [[c.strip() for c in line.strip("| ").split(" | ")] for line in lines]
    return {(r[0], r[1]): r[2:] for r in rows}


def cells(figures: dict[str, Any]) -> list[str]:
    """``figures`` as the section's cells (counts, and rates in percent)."""
    pct = [f"{100 * figures[k]:.1f}%" for k in ("first_draw_rate", "fallback_rate")]
    counts = [str(figures[k]) for k in ("episodes", "replies")]
    rest = [str(figures[k]) for k in ("failures", "reads", "disagreements", "cassette_misses")]
    return [*counts, pct[0], str(figures["fallbacks"]), pct[1], *rest]


def terminal_rows(report: dict[str, Any]) -> dict[str, list[str]]:
    """The rows of the simulated-user table `agentgym eval` prints, by entry."""
    console = Console(record=True, width=240)
    print_tables(report, console)
    text = console.export_text()
    if "simulated user" not in text:
        return {}
    part = text.split("simulated user", 1)[1]
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in part.splitlines()]
    return {r[0]: r[1:] for r in rows if len(r) == 9 and r[0] in ("overall", *ENTRIES)}


def test_the_report_adds_up_the_llm_users_counters(tmp_path: Path) -> None:
    suite, jobs = llm_suite(replay_kwargs())
    finished: list[EpisodeResult] = []
    report = evaluate(suite, ["oracle"], EvalConfig(batch=2), jobs=jobs, on_episode=finished.append)
    infos = played_infos(suite, jobs)
    want = summed(infos)
    # the cassette's episodes hit, the others miss: every figure is there to get wrong
    assert want["replies"] > want["fallbacks"] > 0 and want["first_draw_pass"] > 0
    assert want["cassette_misses"] > 0 and want["failures"] == 0
    assert report["overall"]["oracle"]["user_llm"] == pytest.approx(want)
    assert report["overall"]["oracle"]["env_errors"] == 0
    n = len(jobs["oracle", "retail"])
    by_entry = {r["entry"]: r["metrics"]["user_llm"] for r in report["results"]}
    assert by_entry == {"retail": summed(infos[:n]), "calendar": summed(infos[n:])}
    # each episode's record keeps its final counters
    assert sorted(r.episode.user_llm.replies for r in finished if r.episode.user_llm) == sorted(
        i["voice"]["replies"] for i in infos
    )
    assert all(r.episode.user_llm.cassette_mode == "replay" for r in finished if r.episode.user_llm)

    markdown = write_reports(report, tmp_path)["md"].read_text()
    assert markdown == render_markdown(report)
    rows = section_rows(markdown)
    assert rows["overall", "oracle"] == cells(want)
    assert rows["retail", "oracle"] == cells(summed(infos[:n]))
    assert rows["calendar", "oracle"] == cells(summed(infos[n:]))
    assert "<h2>Simulated user</h2>" in render_html(report)
    # ... and the terminal tables of `agentgym eval`
    overall = terminal_rows(report)["overall"]
    assert overall[:4] == [
        "oracle",
        str(want["episodes"]),
        str(want["replies"]),
        f"{want['first_draw_rate']:.2f}",
    ]
    assert overall[4:] == [
        f"{want['fallbacks']} ({want['fallback_rate']:.2f})",
        "0",
        "0",
        str(want["cassette_misses"]),
    ]


def test_a_user_side_failure_is_counted_as_the_episode_it_ended() -> None:
    endpoint = ScriptedEndpoint(lambda body: 503)  # the user's model is down
    user = {
        "user": "llm",
        "user_model": "scripted",
        "user_base_url": endpoint.url,
        "user_options": {"retries": 0, "timeout_s": 10},
    }
    try:
        suite, jobs = llm_suite(user, trials=1)
        report = evaluate(suite, ["oracle"], EvalConfig(batch=1), jobs=jobs)
    finally:
        endpoint.close()
    m = report["overall"]["oracle"]
    assert m["env_errors"] == m["episodes"] == 2 and m["valid"] == 0
    assert m["user_llm"]["failures"] == 2 and m["user_llm"]["fallbacks"] == 0
    assert section_rows(render_markdown(report))["overall", "oracle"][5] == "2"  # failures


def test_a_run_without_the_llm_user_has_no_user_section() -> None:
    suite, jobs = llm_suite({}, trials=1)
    report = evaluate(suite, ["oracle"], EvalConfig(batch=1), jobs=jobs)
    assert report["overall"]["oracle"]["success_rate"] == 1.0
    metrics = [report["overall"]["oracle"], *(r["metrics"] for r in report["results"])]
    assert all("user_llm" not in m for m in metrics)
    assert "Simulated user" not in render_markdown(report)
    assert "Simulated user" not in render_html(report)
    assert terminal_rows(report) == {}


def test_the_counters_survive_the_evaluators_journal(tmp_path: Path) -> None:
    """A resumed run reads its finished episodes back from the journal file."""
    suite, jobs = llm_suite(replay_kwargs(), trials=1)
    journal = EpisodeJournal(tmp_path / "episodes.jsonl")
    evaluate(suite, ["oracle"], EvalConfig(batch=1), jobs=jobs, journal=journal)
    played = [job for e in suite.entries for job in jobs["oracle", e.name]]
    before = journal.results("oracle", played)
    again = EpisodeJournal.load(tmp_path / "episodes.jsonl").results("oracle", played)
    assert [r.episode for r in again] == [r.episode for r in before]
    counters = [r.episode.user_llm for r in again]
    assert all(isinstance(c, UserLLMCounters) and c.replies >= 2 for c in counters)
