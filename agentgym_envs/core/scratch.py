"""Scratch folders that name their owner, and reaping the ones whose owner died.

An env that is killed (SIGKILL, an OOM kill, an evaluator's worker kill) runs no
cleanup, so its scratch folders (RepoFix workspaces on tmpfs, verification folders in
``/tmp``) would stay forever. Every folder made by :func:`owned_dir` is named
``agentgym-<kind>-<pid>-<start>-<ns>-<random>``: the owner's pid, its start time (so a
reused pid is told apart) and its pid namespace (so a process in another namespace
that shares the folder is never judged dead). :func:`reap_stale` removes the folders
whose owner is gone; it runs whenever a new folder is made, and the evaluator calls it
after killing a worker.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from agentgym_envs.core.errors import ArgumentError

_NAME = re.compile(r"^agentgym-[a-z]+-(\d+)-(\d+)-([0-9a-f]+)-")


def start_token(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot), or "" if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ""
    fields = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and ")"
    return fields[19] if len(fields) > 19 else ""


def _namespace() -> str:
    try:
        return format(os.stat("/proc/self/ns/pid").st_ino, "x")
    except OSError:
        return "0"


def _alive(pid: int, token: str) -> bool:
    now = start_token(pid)
    if now:
        return token in ("0", now)
    if os.path.isdir("/proc/self"):  # /proc works and knows no such process
        return False
    try:  # no /proc (macOS): only whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def default_roots() -> list[Path]:
    """Where agentgym makes scratch folders: ``$AGENTGYM_WORKDIR``, /dev/shm, the temp dir."""
    roots = [Path(p) for p in (os.environ.get("AGENTGYM_WORKDIR"), "/dev/shm") if p]
    roots.append(Path(tempfile.gettempdir()))
    return [r for r in dict.fromkeys(roots) if r.is_dir()]


def owned_dir(kind: str, base: Path | None = None) -> Path:
    """A new folder under ``base`` (default: the temp dir) named after this process;
    stale folders of dead owners under ``base`` are reaped first."""
    if not re.fullmatch(r"[a-z]+", kind):
        raise ArgumentError(f"kind must be lowercase letters (it names the folder), got {kind!r}")
    root = base or Path(tempfile.gettempdir())
    reap_stale([root])
    pid = os.getpid()
    prefix = f"agentgym-{kind}-{pid}-{start_token(pid) or '0'}-{_namespace()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def remove_tree(path: Path) -> None:
    """Delete ``path`` whatever it holds (read-only folders, paths past PATH_MAX, nesting
    deeper than Python's recursion limit); never raises."""
    with contextlib.suppress(Exception):
        shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path) and shutil.which("rm"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["rm", "-rf", "--", str(path)], capture_output=True, timeout=300)


def reap_stale(roots: Iterable[Path] | None = None) -> list[Path]:
    """Remove the owned folders under ``roots`` (default :func:`default_roots`) whose
    owning process is gone or was replaced by another with the same pid. Folders of
    other users and of other pid namespaces are left alone. Returns what was removed."""
    removed = []
    namespace, uid = _namespace(), os.getuid()
    for root in default_roots() if roots is None else roots:
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            found = _NAME.match(entry.name)
            if found is None or found.group(3) != namespace:
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid or not entry.is_dir(
                    follow_symlinks=False
                ):
                    continue
            except OSError:
                continue
            if not _alive(int(found.group(1)), found.group(2)):
                remove_tree(Path(entry.path))
                removed.append(Path(entry.path))
    return removed


__all__ = ["default_roots", "owned_dir", "reap_stale", "remove_tree", "start_token"]
