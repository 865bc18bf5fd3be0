"""A job for tests/trainers/test_workers.py (module level: spawned workers import it)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def sleep_job(job: tuple[str, int]) -> int:
    """Writes this worker's pid to ``<folder>/<index>.pid``, then sleeps for minutes."""
    folder, index = job
    (Path(folder) / f"{index}.pid").write_text(str(os.getpid()))
    time.sleep(600)
    return index


def square_job(job: int) -> int:
    return job * job


def square_unless_three(job: int) -> int:
    if job == 3:
        raise ValueError("job 3 fails")
    return job * job
