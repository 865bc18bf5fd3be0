"""Process lookups in ``/proc`` (Linux): descendants of a process, liveness, and the
processes that carry an environment marker (a local test cluster's)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and ")"
    return int(fields[1]), fields[0]


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    stat = _stat(pid)
    return stat is not None and stat[1] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """The live processes below ``root`` (children, grandchildren ...)."""
    parents = {pid: stat[0] for pid in _pids() if (stat := _stat(pid)) and stat[1] != "Z"}
    out = []
    for pid in parents:
        ancestor, hops = parents.get(pid, 0), 0
        while ancestor not in (0, 1, root) and hops < 32:
            ancestor, hops = parents.get(ancestor, 0), hops + 1
        if ancestor == root:
            out.append(pid)
    return sorted(out)


def marked(name: str, value: str, also_path: str = "") -> list[int]:
    """Live processes of this user whose environment has ``name=value``, or that hold a
    file open under ``also_path`` (Ray renames its workers, and some of its processes
    drop variables from their environment)."""
    needle = f"{name}={value}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid() or not alive(pid):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                hit = needle in fh.read().split(b"\0")
        except OSError:
            continue
        if not hit and also_path:
            hit = _holds(pid, also_path)
        if hit:
            found.append(pid)
    return found


def _holds(pid: int, path: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(path):
                return True
        except OSError:
            continue
    return False


def terminate(pids: Iterable[int], grace_s: float = 5.0) -> list[int]:
    """SIGTERM each pid, SIGKILL those still alive after ``grace_s``; returns the pids
    that were still alive after the SIGKILL (normally none)."""
    pids = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        pids = [p for p in pids if alive(p)]
        if not pids:
            break
    return pids
