"""``agentgym train``: the command line generated from :class:`TrainConfig`."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from agentgym_envs.cli import TRAIN_INSTALL
from agentgym_envs.console import ProgressLog, format_duration, progress_bar
from agentgym_envs.console import console as shared_console
from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.config import GIVEN, TrainConfig, add_arguments, from_args
from agentgym_trainers.recipes import train_settings

if TYPE_CHECKING:
    from agentgym_trainers.run import ProgressEvent

SHOWN = ("reward", "success", "kl", "entropy", "clip_frac", "grad_norm")
SHOWN_FIRST = ("reward", "success")
PROGRESS_FILE = "progress.log"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train an LLM policy on an env (GRPO, RLOO, REINFORCE, PPO, SFT)",
        description=TrainConfig.__doc__,
    )  # no ArgumentDefaultsHelpFormatter: add_arguments puts each default in its help
    add_arguments(p)
    p.add_argument(
        "--config",
        metavar="FILE",
        help="start from the settings of this TOML or JSON file (a learning recipe such as "
        "agentgym_trainers/configs/frozenlake.toml, whose [train] table is read, a run's "
        "summary.json, or flat names as keys); flags given here override it",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="print no progress (progress.log in the run folder still gets every line)",
    )
    p.set_defaults(func=cmd_train)


TRAIN_EXTRA = ("torch", "transformers", "gguf", "accelerate", "matplotlib")
"""Top-level modules of the ``train`` extra (see pyproject.toml)."""


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The config of ``agentgym train``: the flags given, over the ``--config`` file's
    settings, over the defaults; checked (the env too) before any model loads."""
    if not args.config:
        return from_args(args)
    algo = args.algo if "algo" in getattr(args, GIVEN, ()) else None
    return from_args(args, under=train_settings(args.config, algo))


def cmd_train(args: argparse.Namespace, console: Console | None = None) -> int:
    config = train_config(args)  # a bad setting fails before torch loads
    try:  # torch and transformers load only for this command
        from transformers.utils import logging as hf_logging

        from agentgym_trainers.run import train
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TRAIN_EXTRA:
            raise
        raise ConfigError(
            f"`agentgym train` needs the train extra, but the module {exc.name!r} is not "
            f"installed. Install it with: {TRAIN_INSTALL}"
        ) from exc

    hf_logging.disable_progress_bar()  # rich prints the progress instead

    console = console or shared_console
    logging.basicConfig(level=logging.WARNING)
    first = int(os.environ.get("RANK", "0")) == 0  # one process of a torchrun reports
    run_dir = Path(config.run.run_dir)
    with TrainProgress(
        run_dir / PROGRESS_FILE if first else None, quiet=args.quiet or not first, out=console
    ) as progress:
        summary = train(config, on_event=progress)
    table = Table(title=f"{config.algo} on {config.data.env} ({config.policy.model})")
    table.add_column("")
    table.add_column("success")
    table.add_column("reward")
    for key in ("eval_initial", "eval_before", "eval_after"):
        if key in summary:
            res = summary[key]
            table.add_row(
                f"{key} ({res['split']}, n={res['episodes']})",
                f"{res['success']:.3f}",
                f"{res['reward']:.3f}",
            )
    if table.row_count:
        console.print(table)
    console.print(
        f"{summary['steps']} steps in {summary['train_seconds']:.1f} s; run folder {run_dir} "
        f"(metrics.jsonl, progress.log, summary.json, trajectories.sqlite, curves.png); "
        f"checkpoint {summary['checkpoint']}"
    )
    return 0


class TrainProgress:
    """The progress of ``agentgym train``, fed :class:`~agentgym_trainers.run.ProgressEvent`.

    Every episode of an evaluation, SFT step and RL step is a line in ``path``
    (``<run folder>/progress.log``). RL steps are printed as lines (with the ETA); the
    evaluations and SFT show a transient bar on a terminal and a line each elsewhere (a
    log file, CI, ``nohup``), where a bar would show nothing for minutes.

    Args:
        path: the progress log (None: none).
        quiet: print nothing (the log is still written).
        out: the console lines are printed to.
    """

    def __init__(self, path: Path | None, *, quiet: bool, out: Console) -> None:
        self.log = ProgressLog(path, echo=False)
        self.quiet = quiet
        self.out = out
        self.phase = ""
        self.started = 0.0
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __call__(self, event: ProgressEvent) -> None:
        now = time.perf_counter()
        if event.phase != self.phase:
            self._end_bar()
            self.phase, self.started = event.phase, now - event.seconds
        eta = (now - self.started) / max(event.done, 1) * max(event.total - event.done, 0)
        text = progress_line(event, eta)
        self.log.line(text)
        if self.quiet:
            return
        if event.phase == "rl" or not self.out.is_terminal:
            self.out.print(Text(text), soft_wrap=True, highlight=False)
            return
        if self.bar is None:
            self.bar = progress_bar(False)
            self.bar.start()
            self.task = self.bar.add_task(event.phase, total=event.total)
        assert self.task is not None
        self.bar.update(self.task, completed=event.done)
        if event.done >= event.total:
            self._end_bar()

    def _end_bar(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.bar, self.task = None, None

    def close(self) -> None:
        self._end_bar()
        self.log.close()

    def __enter__(self) -> TrainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_line(event: ProgressEvent, eta_s: float) -> str:
    """One plain progress line: an evaluation episode (task, outcome, reward), an SFT
    step (loss) or an RL step (reward, success, the shown metrics); then its seconds and
    the phase's ETA."""
    v = event.values
    count = f"{event.done}/{event.total}"
    if event.phase == "rl":
        head = f"step {count}  reward {_num(v.get('reward'))}  success {_num(v.get('success'))}"
        tail = "  ".join(f"{k} {_num(v.get(k))}" for k in SHOWN if k not in SHOWN_FIRST)
    elif event.phase == "sft":
        head, tail = f"sft step {count}  loss {_num(v.get('sft_loss'))}", ""
    else:
        head = (
            f"{event.phase} episode {count}  task {v.get('task_id', '')}  "
            f"outcome {v.get('outcome', '')}  reward {_num(v.get('reward'))}"
        )
        tail = ""
    line = f"{head}  {event.seconds:.1f} s  ETA {format_duration(eta_s)}"
    return f"{line}  {tail}" if tail else line


def _num(value: Any) -> str:
    return "nan" if value is None else f"{float(value):.4g}"
