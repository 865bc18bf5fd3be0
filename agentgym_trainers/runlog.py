"""Per-step training metrics: an append-only JSONL log, a PNG of the curves, and the
optional trackers TensorBoard and Weights & Biases.

Each :meth:`RunLogger.log` call appends one JSON object to ``<run_dir>/metrics.jsonl`` and
closes the file, so a killed run keeps every finished line and a resumed run appends. The
same record also goes to every tracker named in ``--log-to`` (off by default), under the
tag ``<phase>/<key>`` against that phase's step: TensorBoard event files in
``<run_dir>/tensorboard`` (extra ``tensorboard``), a W&B run in ``<run_dir>/wandb``
(extra ``wandb``; offline unless ``WANDB_API_KEY`` or ``WANDB_MODE`` says otherwise).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from agentgym_envs.core.errors import ConfigError, did_you_mean

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"
TENSORBOARD_DIR = "tensorboard"
WANDB_PROJECT = "agentgym"
"""The W&B project unless ``WANDB_PROJECT`` names another."""


class Tracker(StrEnum):
    """An experiment tracker that :class:`RunLogger` also writes to (``--log-to``). Each
    value is also the name of its Python package and of the optional extra that installs
    it."""

    TENSORBOARD = "tensorboard"
    WANDB = "wandb"


def parse_trackers(text: str) -> tuple[Tracker, ...]:
    """The trackers of a ``--log-to`` value: comma-separated names, ``""`` for none.

    Raises:
        ConfigError: an unknown name (with the closest one), or a tracker whose package is
            not installed (with the exact command that installs it).
    """
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    known = [t.value for t in Tracker]
    trackers: list[Tracker] = []
    for name in names:
        if name not in known:
            raise ConfigError(
                f"--log-to expected comma-separated names from {known}, got {name!r}."
                f"{did_you_mean(name, known)}"
            )
        tracker = Tracker(name)
        if importlib.util.find_spec(tracker.value) is None:
            raise ConfigError(
                f"--log-to {tracker.value} needs the {tracker.value} package, which is not "
                f"installed. Install it with: pip install 'agentgym-envs[{tracker.value}]' "
                f"(from a source checkout: pip install -e '.[{tracker.value}]')"
            )
        if tracker not in trackers:
            trackers.append(tracker)
    return tuple(trackers)


def _plain(key: str, value: Any) -> Any:
    """Convert a metric value to a JSON value; NaN and infinities become None (null)."""
    if hasattr(value, "item") and callable(value.item):  # numpy scalars, 0-d tensors
        value = value.item()
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    raise ConfigError(
        f"Metric {key!r} expected a number, bool or string, got {type(value).__name__} "
        f"{value!r:.100}. Convert it (e.g. float(x)) before logging."
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read a metrics JSONL file into a list of dicts, one per logged step.

    A line that is not valid JSON (a run killed mid-write) is skipped with a warning.
    """
    records: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                logger.warning("Skipping unreadable line %d of %s", number, path)
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                logger.warning("Skipping line %d of %s: not a JSON object", number, path)
    return records


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Sink(Protocol):
    """A tracker's writer: one record (a phase's step) at a time, then ``close``."""

    def log(self, step: int, phase: str, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class _TensorBoardSink:
    """Scalars to TensorBoard event files (``torch.utils.tensorboard``), flushed at every
    step so that a killed run keeps what it logged."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))

    def log(self, step: int, phase: str, record: Mapping[str, Any]) -> None:
        for key, value in record.items():
            if _is_number(value) or isinstance(value, bool):  # strings and nulls: JSONL only
                self.writer.add_scalar(f"{phase}/{key}", float(value), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _WandbSink:
    """One W&B run per logger. Each phase gets its own step axis (``<phase>/step``): SFT
    and RL both count from their start, and W&B's own step must only grow."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        import wandb

        # offline unless the user set a mode or has a key: a run never blocks on a login
        mode = os.environ.get("WANDB_MODE") or (
            "online" if os.environ.get("WANDB_API_KEY") else "offline"
        )
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", WANDB_PROJECT),
            name=run_dir.resolve().name,
            dir=str(run_dir),
            config=dict(config),
            mode=mode,  # type: ignore[arg-type]
            settings=wandb.Settings(console="off", silent=True),
        )
        self.phases: set[str] = set()
        logger.info("W&B run %s (%s) in %s", self.run.id, mode, run_dir / "wandb")

    def log(self, step: int, phase: str, record: Mapping[str, Any]) -> None:
        if phase not in self.phases:
            self.phases.add(phase)
            self.run.define_metric(f"{phase}/step")
            self.run.define_metric(f"{phase}/*", step_metric=f"{phase}/step")
        values = {f"{phase}/{k}": v for k, v in record.items() if v is not None}
        self.run.log({f"{phase}/step": step, **values})

    def close(self) -> None:
        self.run.finish()


class RunLogger:
    """Per-step metrics to ``<run_dir>/metrics.jsonl``, PNG curves and the trackers.

    Args:
        run_dir: The run's folder (created if needed).
        enabled: False on non-zero distributed ranks: the logger then writes nothing.
        log_to: Trackers that also get every record (see :func:`parse_trackers`).
        config: The run's settings (flat names), recorded by W&B with the run.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        enabled: bool = True,
        log_to: Sequence[Tracker] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.path = self.run_dir / METRICS_FILE
        self.sinks: list[_Sink] = []
        if not enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for tracker in log_to:
            if tracker is Tracker.TENSORBOARD:
                self.sinks.append(_TensorBoardSink(self.run_dir))
            else:
                self.sinks.append(_WandbSink(self.run_dir, config or {}))
        # A run killed mid-line leaves no trailing newline; without one, the resumed run's
        # first record would be glued to the broken line and lost with it.
        if self.path.exists() and self.path.stat().st_size > 0:
            with self.path.open("rb+") as handle:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")

    def log(self, step: int, metrics: Mapping[str, Any], phase: str = "rl") -> None:
        """Append one line ``{"step": step, "phase": phase, **metrics}``; NaN and inf are
        written as null. Each phase (``sft``, ``rl``) counts its own steps: its metrics
        are drawn against that phase's step axis.

        Raises:
            ConfigError: ``metrics`` has a ``"step"`` key or a value that is not a number,
                bool or string.
        """
        if not self.enabled:
            return
        if "step" in metrics or "phase" in metrics:
            raise ConfigError(
                "metrics must not contain the keys 'step' or 'phase'; pass them as arguments."
            )
        record = {
            "step": int(step),
            "phase": phase,
            **{key: _plain(key, v) for key, v in metrics.items()},
        }
        line = json.dumps(record, allow_nan=False) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
        values = {k: v for k, v in record.items() if k not in ("step", "phase")}
        for sink in self.sinks:
            sink.log(int(step), phase, values)

    def close(self) -> None:
        """Close the trackers (W&B finishes its run); idempotent. The JSONL log needs no
        closing."""
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close()

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def plot(self, keys: Sequence[str] | None = None) -> Path | None:
        """Draw one small line plot per metric against the step into ``curves.png``.

        If a step was logged twice (a resumed run repeats steps), the later value wins.

        Args:
            keys: The metrics to draw; default every key with numeric (or null) values.

        Returns:
            The PNG's path, or None when the logger is disabled or nothing was logged.

        Raises:
            ConfigError: A requested key never appears in the log.
        """
        if not self.enabled or not self.path.exists():
            return None
        records = read_metrics(self.path)
        series: dict[str, dict[int, float]] = {}
        labels: dict[str, str] = {}  # x-axis label per key: its phase's steps
        for record in records:
            step = record.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                continue
            phase = str(record.get("phase", "rl"))
            for key, value in record.items():
                if key == "phase":
                    continue
                labels[key] = f"{phase} step" if phase != "rl" else "step"
                # A null (NaN) value still makes the key plottable: an all-NaN loss shows
                # up as an empty panel rather than silently vanishing.
                if key != "step" and (value is None or _is_number(value)):
                    points = series.setdefault(key, {})
                    if value is None:
                        points.pop(int(step), None)
                    else:
                        points[int(step)] = float(value)
        if keys is None:
            keys = list(series)
        else:
            for key in keys:
                if key not in series:
                    raise ConfigError(
                        f"Cannot plot {key!r}: expected one of the logged numeric metrics "
                        f"{sorted(series)}.{did_you_mean(key, series)}"
                    )
        if not keys:
            return None
        return self._draw(keys, series, labels)

    def _draw(
        self, keys: Sequence[str], series: dict[str, dict[int, float]], labels: dict[str, str]
    ) -> Path:
        # The Agg canvas is used directly instead of switching pyplot's global backend,
        # which would break a caller's notebook or GUI session.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        ncols = min(3, len(keys))
        nrows = math.ceil(len(keys) / ncols)
        fig = Figure(figsize=(4 * ncols, 2.8 * nrows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False)
        for ax, key in zip(axes.flat, keys, strict=False):
            points = sorted(series[key].items())
            ax.plot([s for s, _ in points], [v for _, v in points], linewidth=1.2)
            ax.set_title(key, fontsize=9)
            ax.set_xlabel(labels.get(key, "step"), fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(keys) :]:
            ax.set_visible(False)
        out = self.run_dir / CURVES_FILE
        # Write then rename, so a viewer refreshing the file never sees half a PNG.
        tmp = out.with_name(f".{CURVES_FILE}.tmp")
        fig.savefig(tmp, format="png", dpi=100)
        os.replace(tmp, out)
        return out
