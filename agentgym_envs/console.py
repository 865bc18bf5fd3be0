"""Terminal output shared by the ``agentgym`` command and its subcommand modules.

It sits below :mod:`agentgym_envs.cli` and the modules that add subcommands (eval, traj,
serve, redteam ...), so they share one console without importing the CLI module.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(width=None if sys.stdout.isatty() else 160)
"""The CLI's console; a fixed width off a terminal, so CI logs keep whole table rows."""


def progress_bar(quiet: bool) -> Progress:
    """A transient progress bar on stderr, shown only on a terminal and unless ``quiet``."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet or not sys.stderr.isatty(),
        transient=True,
    )
