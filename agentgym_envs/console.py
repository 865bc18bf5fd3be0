"""Terminal output shared by the ``agentgym`` command and its subcommand modules.

It sits below :mod:`agentgym_envs.cli` and the modules that add subcommands (eval, traj,
serve, redteam ...), so they share one console without importing the CLI module.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

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


def format_duration(seconds: float) -> str:
    """``seconds`` for a person: ``8.2 s``, ``3m 05s``, ``2h 07m``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    return f"{minutes // 60}h {minutes % 60:02d}m"


class ProgressLog:
    """Plain progress lines for commands that run long (``eval``, ``train``).

    A progress bar shows only on a terminal; in a log file, in CI or under ``nohup`` the
    user would see nothing for tens of minutes. So each line is appended to ``path``
    (flushed at once: ``tail -f`` follows it) and, off a terminal, printed to stdout too.

    Args:
        path: the log file, e.g. ``<run folder>/progress.log`` (None: none). Its folder
            is created; an existing file is appended to (a resumed run).
        echo: print the lines (default: when stdout is not a terminal).
        out: where they are printed (default: the CLI's console).
    """

    def __init__(
        self, path: str | Path | None, *, echo: bool | None = None, out: Console | None = None
    ) -> None:
        self.path = None if path is None else Path(path)
        self.echo = not sys.stdout.isatty() if echo is None else echo
        self.out = out or console
        self._file: TextIO | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")

    def line(self, text: str) -> None:
        """Write one line (control characters shown as escapes, see :func:`terminal_text`)."""
        text = terminal_text(text).replace("\n", " ")
        if self._file is not None:
            self._file.write(text + "\n")
            self._file.flush()
        if self.echo:
            self.out.print(Text(text), soft_wrap=True, highlight=False)

    def close(self) -> None:
        """Close the file; idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> ProgressLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def print_figures(title: str, rows: Sequence[tuple[str, str]], console: Console) -> None:
    """A benchmark's figures as a two-column table (figure, median) on a rich console."""
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("median", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
