"""Jobs run in worker processes that never outlive the process that started them.

:func:`run_all` runs a queue of picklable jobs ``jobs`` at a time in ``spawn`` worker
processes (a fresh interpreter each: torch's threads do not survive a fork). However the
parent stops (an error, Ctrl-C, a SIGTERM from a scheduler or ``kill``) the workers are
terminated with it, so no run goes on burning the cores with nobody to collect it.
"""

from __future__ import annotations

import functools
import multiprocessing
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any


class Terminated(BaseException):
    """SIGTERM reached the parent while jobs were running (they are stopped). A
    ``BaseException``, as ``KeyboardInterrupt``: an ``except Exception`` does not
    swallow it."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated(f"stopped by signal {signum}")


def _numbered(work: Callable[[Any], Any], item: tuple[int, Any]) -> tuple[int, Any]:
    return item[0], work(item[1])


def run_all(
    work: Callable[[Any], Any],
    queue: Sequence[Any],
    jobs: int,
    done: Callable[[Any, Any], None],
) -> None:
    """``work(job)`` for each job of ``queue``, in order, ``jobs`` at a time (in this
    process when ``jobs`` is 1), calling ``done(job, result)`` as each one ends.

    ``work`` must be a module-level function (the workers import it). A job that
    raises lets the others finish, then its error is raised. In the main thread a
    SIGTERM raises :class:`Terminated` here for the time the jobs run.
    """
    if jobs <= 1:
        for job in queue:
            done(job, work(job))
        return
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    pool = multiprocessing.get_context("spawn").Pool(jobs)
    try:
        results = pool.imap_unordered(functools.partial(_numbered, work), enumerate(queue))
        failed: list[Exception] = []
        while True:
            try:
                index, result = next(results)
            except StopIteration:
                break
            except Exception as exc:  # one job failed: the others finish, then it is raised
                failed.append(exc)
                continue
            done(queue[index], result)
        pool.close()
    except BaseException:  # Ctrl-C, SIGTERM, or ``done`` failing: every worker stops
        pool.terminate()
        raise
    finally:
        pool.join()
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    if failed:
        raise failed[0]
