"""Running one sandboxed command: resource limits, output capture, timeouts, cgroups.

The backends in :mod:`agentgym_envs.sandbox.backends` build the command line (bwrap,
docker or a plain process); this module runs it with rlimits set in the child, reads
its output without blocking (capped, a runaway writer killed), kills the whole process
group on timeout and, where the host allows, puts the run in its own pids and memory
cgroups.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import resource
import selectors
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentgym_envs.core.errors import AgentGymError, ConfigError

logger = logging.getLogger(__name__)

_MIB = 2**20
_CHUNK = 65536
# A command that writes more than this many times ``Limits.output_bytes`` to one stream is
# a runaway writer: everything past the cap is dropped anyway, so it is killed.
_OUTPUT_KILL_FACTOR = 1024
_LINGER_S = 0.5  # after the command exits, how long stray children may keep its pipes open


class SandboxError(AgentGymError, RuntimeError):
    """The sandbox itself failed (not the command inside it)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        cpu_s: CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later).
        memory_mb: Address space per process (RLIMIT_AS) and, where the host lets us
            create cgroups, the memory of the whole run.
        processes: Processes and threads of the whole run, through a pids cgroup where
            available. RLIMIT_NPROC is not used: it is not enforced for root and, for
            other users, counts every process the user runs on the host.
        file_size_mb: Largest file a process may write (RLIMIT_FSIZE).
        open_files: Open file descriptors per process (RLIMIT_NOFILE).
        output_bytes: Bytes kept of stdout and of stderr each; the rest is read and
            dropped. A command that writes 1024 times more to one stream is killed.
    """

    cpu_s: int = 30
    memory_mb: int = 1024
    processes: int = 64
    file_size_mb: int = 64
    open_files: int = 256
    output_bytes: int = 64_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"Limits.{f.name} must be a positive int, got {value!r}; "
                    f"for example Limits({f.name}={f.default})."
                )


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class ExecResult:
    """What one run produced.

    Attributes:
        stdout: Standard output, at most ``Limits.output_bytes`` of it (UTF-8, errors replaced).
        stderr: Standard error, capped the same way.
        exit_code: The exit status; 128 + N when signal N ended the command.
        timed_out: The run exceeded its timeout and was killed.
        truncated: Some output was dropped because of the cap.
        elapsed_ms: Wall time from the start to the end of the command.
        killed: Why the backend or the kernel ended the run: "timeout", "memory",
            "cpu", "output" or None.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    truncated: bool
    elapsed_ms: float
    killed: str | None

    def text(self, stdout_chars: int, stderr_chars: int) -> str:
        """How a tool shows the run: exit code, time, why it stopped, and the ends of
        its output (the last ``stdout_chars`` and ``stderr_chars``)."""
        head = f"exit code {self.exit_code} in {self.elapsed_ms:.0f} ms"
        if self.timed_out:
            head += " (timed out)"
        elif self.killed:
            head += f" (killed: {self.killed} limit)"
        cut = self.truncated or len(self.stdout) > stdout_chars or len(self.stderr) > stderr_chars
        if cut:
            head += " (output truncated)"
        parts = [head]
        if self.stdout:
            parts.append("stdout:\n" + self.stdout[-stdout_chars:])
        if self.stderr:
            parts.append("stderr:\n" + self.stderr[-stderr_chars:])
        return "\n".join(parts)


@dataclass(frozen=True)
class _Call:
    """One validated ``run`` call."""

    argv: tuple[str, ...]
    workspace: str  # resolved host path
    timeout_s: float
    limits: Limits
    env: dict[str, str]  # the caller's additions
    binds: tuple[tuple[bool, str, str], ...]  # (writable, host path, sandbox path)
    stdin: bytes | None


# -------- running a process
class _Capture:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap, self.data, self.total = cap, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.data) < self.cap:
            self.data += chunk[: self.cap - len(self.data)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _result(out: _Capture, err: _Capture, code: int, why: str | None, start: float) -> ExecResult:
    why = "cpu" if why is None and code == 128 + signal.SIGXCPU else why
    truncated = out.total > out.cap or err.total > err.cap
    ms = (time.monotonic() - start) * 1000
    return ExecResult(out.text(), err.text(), code, why == "timeout", truncated, ms, why)


def _base_env(python_bin: str) -> dict[str, str]:
    """The minimal environment of a sandboxed command; ``python_bin`` (the sandbox
    runtime's ``bin``) comes first on PATH, so ``python`` is the runtime's."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {
        "PATH": f"{python_bin}:{path}",
        "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        # glibc reserves 64 MiB of address space per thread arena; RLIMIT_AS counts it
        "MALLOC_ARENA_MAX": "2",
    }  # fmt: skip


def _child_setup(limits: Limits, cgroup_procs: Sequence[str] = ()) -> Callable[[], None]:
    """What the child runs between fork and exec: join the run's cgroups, set rlimits.

    Only system calls happen there (no Python locks), which keeps it safe with threads.
    """
    mem, fsize, files = limits.memory_mb * _MIB, limits.file_size_mb * _MIB, limits.open_files
    rlimits = []
    for res, soft, hard in (
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1), (resource.RLIMIT_AS, mem, mem),
        (resource.RLIMIT_FSIZE, fsize, fsize), (resource.RLIMIT_NOFILE, files, files),
        (resource.RLIMIT_CORE, 0, 0),
    ):  # fmt: skip
        current = resource.getrlimit(res)[1]
        if current != resource.RLIM_INFINITY:  # never ask for more than we have
            soft, hard = min(soft, current), min(hard, current)
        rlimits.append((res, (soft, hard)))

    def setup() -> None:
        pid = str(os.getpid()).encode()
        for path in cgroup_procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        for res, value in rlimits:
            resource.setrlimit(res, value)

    return setup


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the child exited, without reaping it: its pid, and so its process group
    id, stays reserved until ``wait``, so killing the group afterwards is safe."""
    try:
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, proc.pid, flags) is not None
    except ChildProcessError:
        return True


def _pump(
    proc: subprocess.Popen[bytes], call: _Call, start: float, kill: Callable[[], None]
) -> tuple[_Capture, _Capture, str | None]:
    """Feed stdin and read both outputs incrementally until the command ends.

    Output past the cap is read and dropped, so the child never blocks on a full pipe
    and memory stays bounded. Returns the captures and "timeout"/"output" if we killed.
    """
    assert proc.stdout is not None and proc.stderr is not None
    cap, deadline = call.limits.output_bytes, start + call.timeout_s
    captures = {proc.stdout.fileno(): _Capture(cap), proc.stderr.fileno(): _Capture(cap)}
    sel = selectors.DefaultSelector()
    for fd in captures:
        sel.register(fd, selectors.EVENT_READ)
    pending = memoryview(call.stdin or b"")
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    reason: str | None = None
    linger_until: float | None = None
    nap = 0.0005
    try:
        while True:
            now = time.monotonic()
            if reason is None and now >= deadline:
                kill()
                reason = "timeout"
            if linger_until is None and (reason is not None or _exited(proc)):
                linger_until = now + _LINGER_S
            if linger_until is not None and (not sel.get_map() or now >= linger_until):
                out, err = captures.values()
                return out, err, reason
            wake = min(now + 0.05, deadline if reason is None else now + _LINGER_S)
            wait = max(0.0, min(wake, linger_until or wake) - now)
            if not sel.get_map():  # pipes closed, process still running: wait for its exit
                time.sleep(min(wait, nap))
                nap = min(nap * 2, 0.02)
                continue
            for key, _ in sel.select(wait):
                fd = int(key.fd)
                if fd not in captures:  # stdin is writable
                    try:
                        pending = pending[os.write(fd, pending[:_CHUNK]) :]
                    except (BrokenPipeError, BlockingIOError):
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()  # type: ignore[union-attr]  # registered above
                    continue
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    sel.unregister(fd)
                    continue
                captures[fd].add(chunk)
                if reason is None and captures[fd].total > cap * _OUTPUT_KILL_FACTOR:
                    kill()
                    reason = "output"
    finally:
        sel.close()


def _run_process(
    argv: Sequence[str], call: _Call, env: Mapping[str, str], setup: Callable[[], None],
    extra_kill: Callable[[], None] | None = None,
) -> ExecResult:  # fmt: skip
    """Start ``argv`` in a new session, pump its pipes, kill its process group at the end."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv), cwd=call.workspace, env=dict(env), start_new_session=True, preexec_fn=setup,
        stdin=subprocess.PIPE if call.stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if extra_kill is not None:
            extra_kill()

    try:
        out, err, reason = _pump(proc, call, start, kill)
    finally:
        kill()  # background children left in the group end with the command
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):  # stdin: the child may be gone
                    stream.close()
    code = proc.returncode
    return _result(out, err, 128 - code if code < 0 else code, reason, start)


# -------- cgroups
@dataclass(frozen=True)
class _CgroupRoot:
    controller: str  # "pids" or "memory"
    path: Path  # our own cgroup in that (v1) hierarchy; per-run cgroups are made under it


def _cgroup_candidates() -> list[_CgroupRoot]:
    """Our pids and memory cgroups in v1 hierarchies. (Under cgroup v2 a root service is
    rarely delegated controllers; the pid namespace and rlimits then have to do.)"""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        membership = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    where: dict[str, tuple[str, str]] = {}  # controller -> (mount root, mount point)
    for head, _, tail in (tuple(part.split() for part in m.partition(" - ")) for m in mounts):
        if len(head) >= 5 and len(tail) >= 3 and tail[0] == "cgroup":
            where.update((option, (head[3], head[4])) for option in tail[2].split(","))
    found = []
    for _, controllers, path in (e.split(":", 2) for e in membership if e.count(":") >= 2):
        for name in set(controllers.split(",")) & {"pids", "memory"} & set(where):
            found.append(
                _CgroupRoot(name, Path(where[name][1]) / os.path.relpath(path, where[name][0]))
            )
    return found


class _RunCgroups:
    """One run's cgroups: a cap on processes and memory, and a way to kill everything."""

    def __init__(self, roots: Sequence[_CgroupRoot], limits: Limits) -> None:
        name = f"agentgym-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        values = {"pids": ("pids.max", limits.processes),
                  "memory": ("memory.limit_in_bytes", limits.memory_mb * _MIB)}  # fmt: skip
        self.dirs: list[Path] = []
        self.procs: tuple[str, ...] = ()  # remove() (on a failed mkdir below) kills these
        try:
            for root in roots:
                self.dirs.append(root.path / name)
                self.dirs[-1].mkdir()
                limit, value = values[root.controller]
                (self.dirs[-1] / limit).write_text(str(value))
        except OSError as exc:
            self.remove()
            raise SandboxError(
                f"could not create the run's cgroups under {[str(r.path) for r in roots]}: "
                f"{exc}; pass cgroups=False to BubblewrapBackend to rely on rlimits only."
            ) from exc
        self.procs = tuple(str(folder / "cgroup.procs") for folder in self.dirs)

    def oom_killed(self) -> bool:
        for folder in self.dirs:
            with contextlib.suppress(OSError, ValueError):  # only memory cgroups have it
                lines = (folder / "memory.oom_control").read_text().splitlines()
                if any(
                    k == "oom_kill" and int(v) > 0 for k, _, v in (x.partition(" ") for x in lines)
                ):
                    return True
        return False

    def kill(self) -> None:
        for path in self.procs:
            with contextlib.suppress(OSError):
                for pid in Path(path).read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and delete the folders (a cgroup with members cannot go)."""
        for _attempt in range(300):
            self.kill()
            for folder in list(self.dirs):
                with contextlib.suppress(OSError):
                    folder.rmdir()
                if not folder.exists():
                    self.dirs.remove(folder)
            if not self.dirs:
                return
            time.sleep(0.01)
        logger.warning("could not remove the cgroups %s", [str(f) for f in self.dirs])


@functools.cache
def _cgroup_roots() -> tuple[_CgroupRoot, ...]:
    """Hierarchies where we can create a cgroup and move a child into it (probed once)."""
    usable = []
    for root in _cgroup_candidates():
        with contextlib.suppress(SandboxError, OSError, subprocess.SubprocessError):
            group = _RunCgroups([root], DEFAULT_LIMITS)
            try:
                setup = _child_setup(DEFAULT_LIMITS, group.procs)
                subprocess.run(["true"], preexec_fn=setup, check=True)
                usable.append(root)
            finally:
                group.remove()
    return tuple(usable)
