"""The red team's step watchdog: a step that runs past its limit is a hang, not a wait.

SIGALRM interrupts pure-Python loops and the re engine alike; it needs the main thread,
so elsewhere steps simply run unwatched.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


class Hang(BaseException):
    """Raised by the watchdog; a BaseException so env code cannot swallow it."""


@contextlib.contextmanager
def watchdog() -> Iterator[Callable[[float], None]]:
    """Install the watchdog; yields ``arm(seconds)``, which (re)starts its timer: the
    code that runs next raises :class:`Hang` once ``seconds`` have passed. Disarmed on
    exit. Off the main thread ``arm`` does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda seconds: None
        return

    def fire(signum: int, frame: Any) -> None:
        raise Hang

    def arm(seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.0))

    old = signal.signal(signal.SIGALRM, fire)
    try:
        yield arm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the body once ``seconds`` have passed (none if <= 0)."""
    with watchdog() as arm:
        arm(seconds)
        yield
