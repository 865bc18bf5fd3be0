"""The LLM user's measurement (``docs/results/llm_user``): the script runs as its README
says, and the committed live episodes replay exactly from the committed cassette,
offline, so anyone can reproduce the published numbers without the model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "docs" / "results" / "llm_user"
SCRIPT = HERE / "measure.py"
sys.path.insert(0, str(HERE))

import measure  # noqa: E402  (docs/results/llm_user/measure.py)

from tests.business.llm_endpoint import ScriptedEndpoint, draft, role  # noqa: E402


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_measurement_script_records_then_measures(tmp_path: Path) -> None:
    """``record`` against an endpoint (here a faithful scripted one), then ``measure``:
    the oracle succeeds in every mode, every replay is its live episode, and the
    paraphrasing agent loses what the keyword reader cannot hear."""
    endpoint = ScriptedEndpoint(lambda body: draft(body) if role(body) == "voice" else "{}")
    cassette, live = tmp_path / "user.cassette.jsonl", tmp_path / "live.json"
    common = ["--cassette", str(cassette), "--record-out", str(live), "--model", "scripted"]
    try:
        run("record", *common, "--base-url", endpoint.url, "--agents", "oracle", "paraphrase",
            "--readers", "keyword", "llm", "--seeds", "0", "--draws", "1")  # fmt: skip
    finally:
        endpoint.close()
    rows = json.loads(live.read_text())
    assert len(rows) == 2 * 2 * len(measure.suite_tasks("smoke"))
    run("measure", *common, "--out", str(tmp_path), "--seeds", "0", "1")
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    modes = {(s["agent"], s["mode"]) for s in summary}
    assert modes == {
        (a, m) for a in ("oracle", "paraphrase") for m in ("live", "replay", "template")
    }
    for group in summary:
        assert group["env_error"] == 0.0
        if group["agent"] == "oracle":
            assert group["success"] == 1.0 and group["pass^k"] == 1.0
        if group["mode"] == "replay":
            assert group["replay_same_as_live"] is True
    paraphrased = [s for s in summary if s["agent"] == "paraphrase" and s["mode"] == "template"]
    assert paraphrased[0]["success"] < 1.0
    assert "| suite | agent | user |" in (tmp_path / "results.md").read_text()


def _replays(rows: list[dict[str, Any]]) -> None:
    for rec in rows:
        args = measure.main_parser().parse_args(
            ["measure", "--cassette", str(HERE / "measure.cassette.jsonl")]
        )
        args.draws, args.max_tokens = rec["draws"], rec["max_tokens"]
        kwargs = measure.llm_kwargs(args, None, "replay", rec["reader"], rec["structured"])
        row = measure.play(rec["env"], rec["task"], rec["seed"], rec["agent"], **kwargs)
        assert row["transcript"] == rec["transcript"], (rec["task"], rec["seed"], rec["reader"])
        assert row["outcome"] == rec["outcome"]
        assert row["user_llm"]["cassette"]["misses"] == 0


def _committed() -> list[dict[str, Any]]:
    return json.loads((HERE / "live.json").read_text())


def test_committed_live_episodes_replay_exactly_offline() -> None:
    """One committed live episode of each (suite, agent, reader, draws) replays word for
    word from the committed cassette (all of them: the slow test below)."""
    sample: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for rec in _committed():
        sample.setdefault((rec["suite"], rec["agent"], rec["reader"], rec["draws"]), rec)
    assert {key[0] for key in sample} == {"smoke", "standard"}
    _replays(list(sample.values()))


@pytest.mark.slow
def test_every_committed_live_episode_replays_exactly_offline() -> None:
    _replays(_committed())


def test_the_reading_measurement_scores_readers_and_replays(tmp_path: Path) -> None:
    """``reading`` scores the keyword reader and a model's on reworded train messages
    against the keyword reading of their original wording, and replays offline."""
    answer = json.dumps({"asks": ["email"]})
    endpoint = ScriptedEndpoint(lambda body: answer if role(body) == "reader" else "")
    common = ["--model", "scripted", "--cassette", str(tmp_path / "c.jsonl"), "--tasks", "2"]
    try:
        run("reading", *common, "--base-url", endpoint.url, "--out", str(tmp_path / "live"))
    finally:
        endpoint.close()
    run("reading", *common, "--base-url", "replay", "--out", str(tmp_path / "replay"))
    live, replayed = (
        json.loads((tmp_path / d / "reading.json").read_text()) for d in ("live", "replay")
    )
    assert live == replayed
    summary = live["summary"]
    assert summary["llm_readings_that_fit"] == summary["messages"] > 0
    accuracy = summary["accuracy"]
    assert accuracy["keyword"]["asks"] < 1.0  # the reworded email question goes unheard
    assert accuracy["llm"]["asks"] < accuracy["keyword"]["asks"]  # it asks for the email always
    assert all(row["task"].startswith(("retail-easy-train", "calendar-easy-train"))
               for row in live["rows"])  # fmt: skip
