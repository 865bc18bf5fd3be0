"""``agentgym train``: the command line generated from :class:`TrainConfig`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgym_envs.cli import TRAIN_INSTALL
from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.config import TrainConfig, add_arguments, from_args

SHOWN = ("reward", "success", "kl", "entropy", "clip_frac", "grad_norm", "time_step_s")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train an LLM policy on an env (GRPO, RLOO, REINFORCE, PPO, SFT)",
        description=TrainConfig.__doc__,
    )  # no ArgumentDefaultsHelpFormatter: add_arguments puts each default in its help
    add_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    p.set_defaults(func=cmd_train)


TRAIN_EXTRA = ("torch", "transformers", "gguf", "accelerate", "matplotlib")
"""Top-level modules of the ``train`` extra (see pyproject.toml)."""


def cmd_train(args: argparse.Namespace, console: Console | None = None) -> int:
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

    console = console or Console()
    config: TrainConfig = from_args(args)
    logging.basicConfig(level=logging.WARNING)

    def progress(step: int, metrics: dict[str, float]) -> None:
        if not args.quiet:
            shown = "  ".join(f"{k} {metrics.get(k, float('nan')):.4g}" for k in SHOWN)
            console.print(f"step {step:>4}  {shown}")

    summary = train(config, progress=progress)
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
        f"{summary['steps']} steps in {summary['train_seconds']:.1f} s; "
        f"run folder {config.run.run_dir} (metrics.jsonl, trajectories.sqlite, curves.png); "
        f"checkpoint {summary['checkpoint']}"
    )
    return 0
