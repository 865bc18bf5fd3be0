"""Worker processes of ``learn`` (agentgym_trainers.workers): results come back in
full, and a SIGTERM to the parent stops the workers too, not only the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgym_trainers.workers import run_all
from tests.trainers.workers_job import square_job, square_unless_three

ROOT = Path(__file__).resolve().parents[2]
PARENT = """
import sys
from agentgym_trainers.workers import Terminated, run_all
from tests.trainers.workers_job import sleep_job
try:
    run_all(sleep_job, [(sys.argv[1], i) for i in range(4)], 2, lambda job, result: None)
except Terminated:
    sys.exit(143)
"""


def test_every_job_comes_back_to_done() -> None:
    got: dict[int, int] = {}
    run_all(square_job, [1, 2, 3, 4, 5], 2, lambda job, result: got.__setitem__(job, result))
    assert got == {1: 1, 2: 4, 3: 9, 4: 16, 5: 25}


def test_a_failing_job_lets_the_others_finish_then_raises() -> None:
    got: dict[int, int] = {}
    with pytest.raises(ValueError, match="job 3 fails"):
        run_all(square_unless_three, [1, 2, 3, 4, 5], 2, lambda j, r: got.__setitem__(j, r))
    assert got == {1: 1, 2: 4, 4: 16, 5: 25}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_sigterm_to_the_parent_stops_its_workers(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=ROOT)
    pids: list[int] = []
    try:
        for _ in range(1200):  # the two workers start (spawned interpreters)
            files = sorted(tmp_path.glob("*.pid"))
            if len(files) == 2 and all(f.read_text() for f in files):
                pids = [int(f.read_text()) for f in files]
                break
            time.sleep(0.1)
        assert len(pids) == 2, "the workers never started"
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=120) == 143  # stopped by the handler, not killed
        for _ in range(300):
            if not any(_alive(pid) for pid in pids):
                break
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in pids), "a worker outlived its parent"
    finally:
        parent.kill()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
