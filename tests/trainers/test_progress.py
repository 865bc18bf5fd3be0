"""A run shows its progress as it goes, terminal or not, and its folder grows with it:
progress lines per evaluation episode and per step, metrics rows, summary.json and the
curves before the end (issue 27)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgym_trainers import run as run_module
from agentgym_trainers.config import parse
from agentgym_trainers.run import ProgressEvent, train
from tests.trainers.test_run import BANDIT_ARGS

ROOT = Path(__file__).resolve().parents[2]
PHASES = ["--steps", "2", "--sft-steps", "2", "--sft-episodes", "4", "--eval-episodes", "3"]


def test_train_prints_a_line_per_episode_and_step_off_a_terminal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentgym_envs.cli", "train", *BANDIT_ARGS, *PHASES,
           "--run-dir", str(run)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    # every evaluation shows each episode: the first one before any training step too
    for phase in ("eval_initial", "eval_before", "eval_after"):
        shown = [x for x in lines if x.startswith(f"{phase} episode ")]
        assert [x.split()[2] for x in shown] == ["1/3", "2/3", "3/3"], lines
        assert all(re.search(r"outcome \w+  reward \S+  \d+\.\d s  ETA \S", x) for x in shown)
    assert len([x for x in lines if x.startswith("sft step ")]) == 2
    steps = [x for x in lines if x.startswith("step ")]
    assert [x.split()[1] for x in steps] == ["1/2", "2/2"]
    for line in steps:
        assert re.search(r"reward -?\d.* success \d.* \d+\.\d s .*ETA \S", line), line
    # the same lines, in the run folder
    logged = (run / "progress.log").read_text().splitlines()
    assert logged == [x for x in lines if x in logged] and len(logged) == 3 * 3 + 2 + 2


def test_metrics_summary_and_curves_grow_during_the_run(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_module, "CURVES_EVERY_S", 0.0)  # redraw after every step
    run = tmp_path / "run"
    config = parse([*BANDIT_ARGS, *PHASES, "--run-dir", str(run)])
    events: list[ProgressEvent] = []
    seen: dict[int, tuple[list[dict[str, Any]], dict[str, Any], bool]] = {}

    def on_event(event: ProgressEvent) -> None:
        events.append(event)
        if event.phase == "rl":  # what a user sees in the folder after this step
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            summary = json.loads((run / "summary.json").read_text())
            seen[event.done] = (rows, summary, (run / "curves.png").exists())

    summary = train(config, on_event=on_event)
    rows, early, curves = seen[1]
    assert [r["step"] for r in rows if r["phase"] == "rl"] == [1]
    assert [r["step"] for r in rows if r["phase"] == "sft"] == [0, 1]
    evals = [r for r in rows if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, 0]
    assert evals[0]["eval_initial_episodes"] == evals[1]["eval_before_episodes"] == 3
    assert 0 <= evals[1]["eval_before_success"] <= 1 and evals[1]["eval_before_wall_s"] > 0
    assert early["status"] == "running" and "eval_before" in early and curves
    rows, _, _ = seen[2]
    assert [r["step"] for r in rows if r["phase"] == "rl"] == [1, 2]
    assert summary["status"] == "finished"
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    by_phase: dict[str, list[ProgressEvent]] = {}
    for event in events:
        by_phase.setdefault(event.phase, []).append(event)
    assert [(e.done, e.total) for e in by_phase["rl"]] == [(1, 2), (2, 2)]
    assert [(e.done, e.total) for e in by_phase["sft"]] == [(1, 2), (2, 2)]
    for phase in ("eval_initial", "eval_before", "eval_after"):
        assert [e.done for e in by_phase[phase]] == [1, 2, 3]
        assert all(e.total == 3 and "outcome" in e.values for e in by_phase[phase])
