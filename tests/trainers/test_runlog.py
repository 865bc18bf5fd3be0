"""RunLogger: the JSONL log (append, NaN, resume) and the PNG curves."""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.runlog import RunLogger, parse_trackers, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# a 2-step tiny run with one SFT step before RL (both phases), on the trainer's bandit env
TINY_ARGS = [
    "--env", "agentgym-train/DigitFraction-v0",
    "--env-kwargs", '{"charset": "vowels", "prompt_words": 6}',
    "--model", "tiny", "--device", "cpu", "--group-size", "2", "--tasks-per-step", "2",
    "--n-envs", "4", "--max-new-tokens", "6", "--max-context", "256", "--steps", "2",
    "--sft-steps", "1", "--sft-episodes", "2", "--quiet",
]  # fmt: skip


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


# -- trackers: TensorBoard and Weights & Biases (extras `tensorboard`, `wandb`) -------------

WANDB_FRAMES = {1: "full", 2: "first", 3: "middle", 4: "last"}


def _tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """Every scalar of the event files in ``folder``, read back with TensorBoard's own
    EventAccumulator: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def _wandb_history(run_dir: Path) -> list[dict[str, Any]]:
    """The history rows of the one offline W&B run under ``run_dir/wandb``, once its
    transaction log holds the run's exit record. ``run.finish()`` returns when the run is
    done, but W&B's service writes the log's last frames when it closes the run's stream,
    a moment later: on a loaded machine the log was read before them (no history at all).
    """
    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 120  # a bound on the wait, not a timing under test
    rows, done = _wandb_log(path.read_bytes())
    while not done and time.monotonic() < deadline:
        time.sleep(0.2)
        rows, done = _wandb_log(path.read_bytes())
    assert done, f"the W&B run's exit record never reached {path}"
    return rows


def _wandb_log(data: bytes) -> tuple[list[dict[str, Any]], bool]:
    """The history rows of a W&B transaction log, decoded with wandb's own protobuf
    ``Record``, and whether it holds the run's exit record. The .wandb file is a 7-byte
    header (":W&B", magic, version), then LevelDB-log frames (crc32, length, type) in
    32 KiB blocks; a frame not yet written whole ends the reading."""
    from wandb.proto import wandb_internal_pb2

    assert data[:4] == b":W&B"
    rows: list[dict[str, Any]] = []
    pos, pending, done = 7, b"", False
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a frame header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        assert kind in WANDB_FRAMES, f"unexpected frame type {kind} at {pos}"
        if WANDB_FRAMES[kind] in ("full", "last"):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            what = record.WhichOneof("record_type")
            done = done or what == "exit"
            if what == "history":
                items = record.history.item
                rows.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
    return rows, done


def test_tensorboard_gets_every_numeric_record(tmp_path: Path) -> None:
    with RunLogger(tmp_path, log_to=parse_trackers("tensorboard")) as run:
        run.log(0, {"sft_loss": 2.5}, phase="sft")
        run.log(1, {"sft_loss": 1.25}, phase="sft")
        run.log(1, {"reward": np.float32(0.1), "episodes": 8, "loss": math.nan, "note": "x"})
        run.log(2, {"reward": 0.7, "episodes": 8, "loss": 0.5, "note": "y"})
    scalars = _tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars == {
        "sft/sft_loss": {0: 2.5, 1: 1.25},
        "rl/reward": {1: pytest.approx(0.1), 2: pytest.approx(0.7)},
        "rl/episodes": {1: 8.0, 2: 8.0},
        "rl/loss": {2: 0.5},  # NaN is null in the JSONL and absent here; strings too
    }


def test_two_step_run_logs_the_same_values_to_tensorboard_and_wandb(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)  # the default: offline, no login
    run = tmp_path / "run"
    code = main(["train", *TINY_ARGS, "--run-dir", str(run), "--log-to", "tensorboard,wandb"])
    assert code == 0, capsys.readouterr().out
    records = read_metrics(run / "metrics.jsonl")
    assert [(r["phase"], r["step"]) for r in records] == [("sft", 0), ("rl", 1), ("rl", 2)]
    # TensorBoard holds every numeric value of metrics.jsonl (as float32), and nothing else
    expected: dict[str, dict[int, float]] = {}
    for r in records:
        for key, value in r.items():
            if key not in ("step", "phase") and isinstance(value, int | float):
                expected.setdefault(f"{r['phase']}/{key}", {})[r["step"]] = float(value)
    scalars = _tensorboard_scalars(run / "tensorboard")
    assert {"rl/reward", "rl/kl", "rl/grad_norm", "sft/sft_loss"} <= set(scalars)
    assert set(scalars) == set(expected)
    for tag, points in expected.items():
        assert scalars[tag] == {s: float(np.float32(v)) for s, v in points.items()}, tag
    # the offline W&B run holds the same records on each phase's own step axis
    rows = [{k: v for k, v in row.items() if not k.startswith("_")} for row in _wandb_history(run)]
    want = [
        {f"{r['phase']}/step": r["step"]}
        | {
            f"{r['phase']}/{k}": v
            for k, v in r.items()
            if k not in ("step", "phase") and v is not None  # nulls (NaN) are not sent
        }
        for r in records
    ]
    assert rows == want


def test_log_to_names_the_fix(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="Did you mean 'tensorboard'"):
        TrainConfig.from_flat(log_to="tensorbord")
    assert TrainConfig.from_flat(log_to=" TensorBoard, wandb ,").run.log_to
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now fails: not installed
    with pytest.raises(ConfigError, match=re.escape("pip install 'agentgym-envs[wandb]'")):
        parse_trackers("tensorboard,wandb")
    assert main(["train", "--model", "tiny", "--log-to", "wandb"]) == 2
    assert "pip install 'agentgym-envs[wandb]'" in " ".join(capsys.readouterr().out.split())
