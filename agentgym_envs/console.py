"""Terminal output shared by the ``agentgym`` command and its subcommand modules.

It sits below :mod:`agentgym_envs.cli` and the modules that add subcommands (eval, traj,
serve, redteam ...), so they share one console without importing the CLI module.
"""

from __future__ import annotations

import re
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentgym_envs.core.unicode import valid_text

console = Console(width=None if sys.stdout.isatty() else 160)
"""The CLI's console; a fixed width off a terminal, so CI logs keep whole table rows."""


# C0 controls but newline and tab, DEL, C1 controls, and the bidirectional overrides
# and isolates (they reorder what the terminal shows: "Trojan source")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """``text`` safe to write to a terminal: each control character but newline and tab
    (the escape that starts ANSI sequences, bell, backspace, carriage return, C1) and each
    bidirectional override is shown as a visible escape (``\\x1b``), and a lone surrogate
    as U+FFFD. Print it as a ``rich.text.Text``, never as a markup string, so ``[bold]``
    stays text too."""
    return _CONTROL.sub(_visible, valid_text(text))


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
