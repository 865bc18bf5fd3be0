"""RunLogger: the JSONL log (append, NaN, resume) and the PNG curves."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.runlog import RunLogger, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_log_writes_one_json_line_per_step(tmp_path: Path) -> None:
    run = RunLogger(tmp_path / "run")
    run.log(0, {"loss": 1.5, "reward": 0.25})
    run.log(1, {"loss": np.float32(1.25), "reward": torch.tensor(0.5), "episodes": 8})
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 0, "phase": "rl", "loss": 1.5, "reward": 0.25},
        {"step": 1, "phase": "rl", "loss": 1.25, "reward": 0.5, "episodes": 8},
    ]


def test_nan_and_inf_become_null(tmp_path: Path) -> None:
    run = RunLogger(tmp_path)
    run.log(3, {"loss": math.nan, "kl": math.inf, "ok": 1.0})
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert read_metrics(tmp_path / "metrics.jsonl") == [
        {"step": 3, "phase": "rl", "loss": None, "kl": None, "ok": 1.0}
    ]


def test_resumed_run_appends(tmp_path: Path) -> None:
    RunLogger(tmp_path).log(0, {"loss": 1.0})
    RunLogger(tmp_path).log(1, {"loss": 0.5})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1]


def test_resume_after_a_line_cut_mid_write(tmp_path: Path) -> None:
    RunLogger(tmp_path).log(0, {"loss": 1.0})
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 1, "lo')  # the process was killed here
    RunLogger(tmp_path).log(1, {"loss": 0.5})
    assert read_metrics(tmp_path / "metrics.jsonl") == [
        {"step": 0, "phase": "rl", "loss": 1.0},
        {"step": 1, "phase": "rl", "loss": 0.5},
    ]


def test_bad_metrics_are_rejected(tmp_path: Path) -> None:
    run = RunLogger(tmp_path)
    with pytest.raises(ConfigError, match="keys 'step' or 'phase'"):
        run.log(0, {"step": 1.0})
    with pytest.raises(ConfigError, match="keys 'step' or 'phase'"):
        run.log(0, {"phase": "sft"})
    with pytest.raises(ConfigError, match="expected a number"):
        run.log(0, {"loss": [1.0, 2.0]})
    assert (
        not (tmp_path / "metrics.jsonl").exists() or read_metrics(tmp_path / "metrics.jsonl") == []
    )


def test_plot_writes_png(tmp_path: Path) -> None:
    run = RunLogger(tmp_path)
    for step in range(5):
        run.log(step, {"loss": 1.0 / (step + 1), "reward": step / 4, "note": "train"})
    run.log(5, {"loss": math.nan})
    path = run.plot()
    assert path == tmp_path / "curves.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png", "metrics.jsonl"]


def test_plot_selected_keys(tmp_path: Path) -> None:
    run = RunLogger(tmp_path)
    run.log(0, {"loss": 1.0, "reward": 0.0})
    path = run.plot(["reward"])
    assert path is not None and path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ConfigError, match="Did you mean 'reward'"):
        run.plot(["rewrd"])


def test_plot_without_data(tmp_path: Path) -> None:
    assert RunLogger(tmp_path).plot() is None


def test_disabled_logger_writes_nothing(tmp_path: Path) -> None:
    run = RunLogger(tmp_path / "rank1", enabled=False)
    run.log(0, {"loss": 1.0})
    assert run.plot() is None
    assert not (tmp_path / "rank1").exists()


def test_sft_and_rl_metrics_keep_their_own_step_axes(tmp_path: Path) -> None:
    run = RunLogger(tmp_path)
    for step in range(3):
        run.log(step, {"sft_loss": 2.0 - step}, phase="sft")
    for step in range(1, 3):
        run.log(step, {"reward": step / 2})
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["phase"], r["step"]) for r in rows] == [
        ("sft", 0), ("sft", 1), ("sft", 2), ("rl", 1), ("rl", 2)
    ]  # fmt: skip
    assert run.plot() is not None
