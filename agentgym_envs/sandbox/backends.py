"""Execution backends: where RepoFix runs an agent's commands and the tests.

A backend runs one command in a workspace folder with a timeout, resource limits and a
cap on the output it keeps. :class:`BubblewrapBackend` (the default) and
:class:`DockerBackend` isolate it: read-only system, private ``/tmp``, the workspace at
``/workspace`` as the only writable folder, no network. :class:`LocalBackend` is a plain
subprocess with NO isolation and is never chosen automatically. :func:`make_backend`
picks one by name; ``"auto"`` takes the first isolating backend that works here.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import AgentGymError, ConfigError, did_you_mean
from agentgym_envs.sandbox._process import (
    _OUTPUT_KILL_FACTOR,
    DEFAULT_LIMITS,
    ExecResult,
    Limits,
    SandboxError,
    _base_env,
    _Call,
    _Capture,
    _cgroup_roots,
    _child_setup,
    _result,
    _run_process,
    _RunCgroups,
)
from agentgym_envs.sandbox.docker_image import (
    DEFAULT_DOCKER_IMAGE,
    DOCKER_IMAGE_ENV,
    IMAGE_PYTHONS,
    ImageUnavailable,
    docker_module,
    docker_status,
    image_id,
    probe_image,
)
from agentgym_envs.sandbox.runtime import (
    SANDBOX_PREFIX,
    SANDBOX_PYTHON,
    VERSION,
    hidden_paths,
    in_venv,
    interpreter_paths,
    runtime_dir,
)

logger = logging.getLogger(__name__)

SANDBOX_WORKSPACE = "/workspace"
_MIB = 2**20
_FIX = (
    "install bubblewrap (apt-get install -y bubblewrap) or start a Docker engine; the "
    "unsafe local backend is only used with backend='local', unsafe=True"
)
# The part of /etc the sandbox needs (users, name lookup, libraries, certificates). Never
# all of it: the sandbox user is the host's root underneath, so /etc/shadow would be open.
_ETC = (
    "alternatives", "ca-certificates", "ca-certificates.conf", "crypto-policies",
    "debian_version", "gai.conf", "group", "host.conf", "hosts", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "localtime", "mime.types", "nsswitch.conf", "os-release", "passwd", "pki",
    "protocols", "services", "ssl", "timezone",
)  # fmt: skip


class BackendUnavailable(AgentGymError, RuntimeError):
    """No backend of the requested kind works on this machine."""


class Isolation(StrEnum):
    """How strongly a backend separates the command from the host."""

    STRONG = "strong"  # namespaces or containers: bubblewrap, docker
    NONE = "none"  # a plain subprocess: local


class Backend(ABC):
    """Runs commands in a workspace with limits. Subclasses fill in :meth:`run`."""

    name: str
    isolation: Isolation
    #: the Python to run inside: the sandbox runtime's (interpreter, stdlib, pytest)
    python: str = SANDBOX_PYTHON

    def describe(self) -> dict[str, Any]:
        """Name, isolation and protections, for ``info`` and logs."""
        protections = self._protections()
        return {"name": self.name, "isolation": str(self.isolation), "protections": protections}

    def _protections(self) -> list[str]:
        return []

    @abstractmethod
    def run(
        self, argv: Sequence[str], *, workspace: Path, timeout_s: float,
        limits: Limits = DEFAULT_LIMITS, env: Mapping[str, str] | None = None,
        ro_binds: Mapping[Path, str] | None = None, rw_binds: Mapping[Path, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:  # fmt: skip
        """Run ``argv`` with the workspace as its working directory.

        Args:
            argv: Program and arguments (no shell; use ``["/bin/sh", "-c", cmd]``).
            workspace: Host folder; at ``/workspace`` in isolating backends, used in place
                by the local one. The only place the command may write.
            timeout_s: Wall-clock limit; the whole run is killed past it.
            limits: Resource limits.
            env: Variables added to the backend's minimal environment.
            ro_binds: Host path -> sandbox path, mounted read-only (hidden tests, plugins).
            rw_binds: Host path -> sandbox path, writable (the verifier's results folder).
            stdin: Text fed to standard input; None gives an empty input.

        Returns:
            The :class:`ExecResult`. A failing, crashing or killed command is a result,
            not an exception.

        Raises:
            ConfigError: An argument is invalid (missing workspace, relative bind target).
        """

    def close(self) -> None:  # noqa: B027 - most backends hold nothing
        """Release what the backend holds (containers). Safe to call twice."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _CheckedBackend(Backend):
    """Validates the arguments of :meth:`run` once for every backend below."""

    def run(
        self, argv: Sequence[str], *, workspace: Path, timeout_s: float,
        limits: Limits = DEFAULT_LIMITS, env: Mapping[str, str] | None = None,
        ro_binds: Mapping[Path, str] | None = None, rw_binds: Mapping[Path, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:  # fmt: skip
        """See :meth:`Backend.run`."""
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError(
                f"argv must be a non-empty list of strings, got {argv!r}; for a shell "
                "command pass ['/bin/sh', '-c', command]."
            )
        if not Path(workspace).is_dir():
            raise ConfigError(f"workspace must be an existing folder, got {str(workspace)!r}.")
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0 seconds, got {timeout_s!r}.")
        if not isinstance(limits, Limits):
            raise ConfigError(f"limits must be a Limits, got {limits!r}; e.g. Limits(cpu_s=30).")
        for key in env or {}:
            if not key or "=" in key or "\0" in key:
                raise ConfigError(f"env names must be non-empty without '=', got {key!r}.")
        binds = []
        for writable, mapping in ((False, ro_binds), (True, rw_binds)):
            for src, dest in (mapping or {}).items():
                what = "rw_binds" if writable else "ro_binds"
                if not Path(src).exists():
                    raise ConfigError(
                        f"{what} source {str(src)!r} does not exist; expected an existing "
                        "host file or folder. Create it before the run."
                    )
                if not isinstance(dest, str) or not dest.startswith("/") or not dest.strip("/"):
                    raise ConfigError(
                        f"{what} target must be an absolute path below '/', got {dest!r}; "
                        "for example '/agentgym/results'."
                    )
                binds.append((writable, str(Path(src).resolve()), dest))
        data = None if stdin is None else stdin.encode()
        ws = str(Path(workspace).resolve())
        call = _Call(tuple(argv), ws, float(timeout_s), limits, dict(env or {}), tuple(binds), data)
        return self._execute(call)

    @abstractmethod
    def _execute(self, call: _Call) -> ExecResult: ...


# -------- bubblewrap
@dataclass(frozen=True)
class _BwrapProbe:
    ok: bool
    detail: str
    exe: str = ""
    flags: tuple[str, ...] = ()


_UID = ("--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534")
_COMMON = ("--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox")


# What of /usr a sandbox sees: programs, shared libraries, the system Python's standard
# library, git's helpers, locales and time zones. Never all of /usr: other software keeps
# vendored copies of Python projects there (a cloud SDK's third_party/inflection, pip's
# _vendor/distro), and a pinned project's correct code in reach is a fix to copy.
_USR = (
    "bin", "sbin", "libexec", "lib64", "lib/*-linux-gnu*", "lib/git-core", "lib/locale",
    "lib/python3.[0-9]*", "lib/os-release", "lib/ssl", "share/zoneinfo", "share/git-core",
    "share/terminfo", "share/misc", "share/file", "share/ca-certificates", "local/bin",
    "local/lib",
)  # fmt: skip


@functools.cache
def usr_paths() -> tuple[str, ...]:
    """The folders and files of /usr the sandbox mounts (:data:`_USR` as found here)."""
    found = {p for pattern in _USR for p in glob.glob(f"/usr/{pattern}")}
    return tuple(sorted(p for p in found if not os.path.islink(p) or os.path.exists(p)))


@functools.cache
def _system_args() -> tuple[str, ...]:
    """Read-only binds of the system, then fresh /proc and /dev (computed once)."""
    args = []
    for path in usr_paths():
        args += ["--ro-bind", path, path]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in _ETC:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return (*args, "--proc", "/proc", "--dev", "/dev")


@functools.cache
def _python_args() -> tuple[str, ...]:
    """Read-only binds of the sandbox's Python (see :mod:`runtime`): the runtime at
    ``SANDBOX_PREFIX`` (and at ``sys.prefix``, so ``sys.executable`` works inside), the
    base interpreter and its standard library at their host paths; then an empty
    read-only folder over every third-party package folder and every place holding task
    data that those binds (or the system's) would show. The library's own environment
    is never mounted."""
    runtime = str(runtime_dir())
    args = ["--ro-bind", runtime, SANDBOX_PREFIX]
    if in_venv():
        args += ["--ro-bind", runtime, sys.prefix]
    mounted = [*usr_paths(), "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc"]
    for path in interpreter_paths():
        mounted.append(path)
        if not (path + "/").startswith(("/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/")):
            args += ["--ro-bind", path, path]
    for path in hidden_paths(mounted):
        args += ["--tmpfs", path, "--remount-ro", path]
    return tuple(args)


@functools.cache
def _bubblewrap_probe(exe: str | None = None) -> _BwrapProbe:
    """Find the strongest bwrap options that work here, by running ``true`` with them."""
    path = exe or shutil.which("bwrap")
    if path is None:
        return _BwrapProbe(False, "the bwrap executable is not on PATH")
    true = shutil.which("true", path="/usr/bin:/bin") or "/usr/bin/true"
    errors = []
    for flags in ((*_UID, "--disable-userns"), _UID, ("--unshare-all",)):  # strongest first
        tmpfs = ("--size", "65536", "--tmpfs", "/tmp") if "--disable-userns" in flags else ()
        argv = [path, *flags, *_COMMON, *_system_args(), *tmpfs, *_python_args(), "--", true]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={})
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        if done.returncode == 0:
            return _BwrapProbe(True, "works", path, (*flags, *_COMMON))
        errors.append(done.stderr.strip() or f"exit status {done.returncode}")
    return _BwrapProbe(False, f"bwrap cannot create a sandbox here ({'; '.join(errors)})", path)


def bubblewrap_status() -> tuple[bool, str]:
    """Whether a bubblewrap sandbox works here, and why not (probed once, cached)."""
    probe = _bubblewrap_probe()
    return probe.ok, probe.detail


def bubblewrap_available() -> bool:
    """Whether a bubblewrap sandbox works here."""
    return bubblewrap_status()[0]


class BubblewrapBackend(_CheckedBackend):
    """Sandbox with bubblewrap: namespaces, a read-only system, rlimits and cgroups.

    The command sees the system read-only (``/usr``, part of ``/etc``, the sandbox
    runtime: the base interpreter, its standard library and pytest, never the library's
    environment nor any task data; see :mod:`runtime`), a private ``/tmp``, fresh
    ``/proc`` and ``/dev`` and the workspace at ``/workspace``, its only writable folder
    besides ``rw_binds``. It has its own user (uid 65534 where the host allows), pid,
    network (loopback only), ipc, uts and cgroup namespaces, no capabilities and a
    cleared environment. Where the host lets us create cgroups, per-run pids and memory
    cgroups cap processes (fork bombs) and memory. Killing the init of its pid namespace
    on timeout ends every process inside.

    Args:
        bwrap: Path of the ``bwrap`` executable; found on PATH by default.
        cgroups: Use per-run cgroups where the host allows them.

    Raises:
        BackendUnavailable: bwrap is missing or cannot create namespaces here.
    """

    name = "bubblewrap"
    isolation = Isolation.STRONG

    def __init__(self, *, bwrap: str | None = None, cgroups: bool = True) -> None:
        probe = _bubblewrap_probe(bwrap)
        if not probe.ok:
            raise BackendUnavailable(f"bubblewrap does not work here: {probe.detail}. Fix: {_FIX}.")
        self._probe = probe
        self._head = (probe.exe, *probe.flags, *_system_args())  # argv is built once
        self._python = _python_args()
        self._user_ns_off = "--disable-userns" in probe.flags
        self._cgroups = _cgroup_roots() if cgroups else ()
        self._env = _base_env(f"{SANDBOX_PREFIX}/bin")

    def _protections(self) -> list[str]:
        flags = self._probe.flags
        return [
            "read-only system (/usr, part of /etc, the Python interpreter)",
            "no task data: only the interpreter, its stdlib and pytest; package folders hidden",
            "private /tmp (tmpfs), fresh /proc and /dev",
            f"workspace at {SANDBOX_WORKSPACE} is the only writable folder",
            "network namespace with loopback only (no network)",
            "pid, ipc, uts, mount and cgroup namespaces",
            "all capabilities dropped, new session, cleared environment",
            "rlimits: cpu, address space, file size, open files",
            "timeout kills the whole sandbox; output capped",
            *(["runs as uid 65534 in a user namespace"] if "--uid" in flags else []),
            *(["no nested user namespaces"] if "--disable-userns" in flags else []),
            *[f"{r.controller} cgroup per run" for r in self._cgroups],
        ]

    def _command(self, call: _Call) -> list[str]:
        # --size came with bwrap 0.7, --disable-userns with 0.8
        size = ["--size", str(call.limits.memory_mb * _MIB)] if self._user_ns_off else []
        args = [*self._head, *size, "--tmpfs", "/tmp", *self._python]
        args += ["--bind", call.workspace, SANDBOX_WORKSPACE]
        for writable, src, dest in sorted(call.binds, key=lambda b: b[2].count("/")):
            args += ["--bind" if writable else "--ro-bind", src, dest]
        # the sandbox's root is a tmpfs bwrap builds; once every mount is in place it
        # becomes read-only (not recursively: /tmp, /dev and the binds keep their modes)
        args += ["--remount-ro", "/", "--chdir", SANDBOX_WORKSPACE, "--clearenv"]
        for key, value in {**self._env, **call.env}.items():
            args += ["--setenv", key, value]
        return [*args, "--", *call.argv]

    def _execute(self, call: _Call) -> ExecResult:
        group = _RunCgroups(self._cgroups, call.limits) if self._cgroups else None
        try:
            setup = _child_setup(call.limits, group.procs if group else ())
            env = {"PATH": "/usr/bin:/bin"}  # bwrap itself gets no host variables either
            kill = group.kill if group is not None else None
            result = _run_process(self._command(call), call, env, setup, kill)
            if result.killed is None and group is not None and group.oom_killed():
                result = dataclasses.replace(result, killed="memory")
        finally:
            if group is not None:
                group.remove()
        return result


class LocalBackend(_CheckedBackend):
    """A plain subprocess in the workspace folder: NO isolation.

    The command can read and write anything the host user can and use the network. It
    gets the same timeout, rlimits and output cap as the sandbox. For debugging only.

    Args:
        unsafe: Must be True, to say you accept running agent code on the host.

    Raises:
        ConfigError: ``unsafe`` is not True.
    """

    name = "local"
    isolation = Isolation.NONE

    def __init__(self, *, unsafe: bool = False) -> None:
        if unsafe is not True:
            raise ConfigError(
                "the local backend runs commands on the host with no isolation; expected "
                f"unsafe=True, got unsafe={unsafe!r}. If you accept that, pass "
                "backend='local', unsafe=True (gym.make, RepoFixEnv, make_backend) or "
                "LocalBackend(unsafe=True); else use backend='auto' (bubblewrap or docker)."
            )
        home, tmp = os.environ.get("HOME", "/tmp"), os.environ.get("TMPDIR", "/tmp")
        self._env = {**_base_env(str(runtime_dir() / "bin")), "HOME": home, "TMPDIR": tmp}
        self.python = str(runtime_dir() / "bin" / "python")

    def _protections(self) -> list[str]:
        return ["none: runs on the host", "rlimits: cpu, address space, file size, open files",
                "timeout kills the process group; output capped"]  # fmt: skip

    def _execute(self, call: _Call) -> ExecResult:
        if call.binds:
            raise ConfigError(
                "the local backend cannot mount ro_binds or rw_binds (it has no mount "
                "namespace); pass host paths to the command instead, as the verifier does "
                "when backend.isolation is Isolation.NONE."
            )
        env = {**self._env, **call.env}
        return _run_process(call.argv, call, env, _child_setup(call.limits))


# -------- docker
_STDIN_AT = "/agentgym/stdin"  # a run's standard input, as a file (read-only mount)
# Where Python images keep third-party packages (an image with agentgym-envs installed
# keeps its task data there): covered by empty tmpfs mounts in every container.
_IMAGE_PACKAGE_DIRS = (
    "/usr/local/lib/python{version}/site-packages", "/usr/local/lib/python{version}/dist-packages",
    "/usr/lib/python3/dist-packages", "/usr/lib/python{version}/site-packages",
    # pip's wheels vendor copies of other projects (distro, idna...), pinned ones among them
    "/usr/share/python-wheels", "/usr/lib/python{version}/ensurepip/_bundled",
    "/usr/local/lib/python{version}/ensurepip/_bundled",
)  # fmt: skip
# Every command: RLIMIT_AS (docker has no such ulimit) and no core files, then the
# command with its standard input from a file ("$2": /dev/null or a file under _STDIN_AT).
_LIMIT_AND_EXEC = 'ulimit -v "$1" && ulimit -c 0 || exit 126; f=$2; shift 2; exec "$@" < "$f"'
_docker = docker_module


def docker_available() -> bool:
    """Whether a Docker engine answers here."""
    return docker_status()[0]


class DockerBackend(_CheckedBackend):
    """Containers from a Docker engine, kept warm in a small pool and reused via exec.

    Each container has no network, a read-only root, a private ``/tmp``, no
    capabilities, no new privileges, memory and pids limits, the workspace owner's user
    (a root-owned workspace runs as uid 0 with no capabilities, which is what
    bubblewrap maps it to), the sandbox runtime read-only and the workspace at
    ``/workspace``. The host's Python environment is not mounted: the image's
    interpreter runs with the sandbox runtime (pytest) instead, and every folder of the
    image holding an ``agentgym_envs`` package (found once per image) is covered by an
    empty mount, as are its third-party package folders. Containers are keyed by
    mounts and limits, so an episode's commands reuse one; a timeout kills and drops
    the container. ``stdin`` reaches the command as a file.

    Args:
        image: Image to run; default ``$AGENTGYM_DOCKER_IMAGE``, else
            ``python:3.X-slim`` for this Python 3.X. Pulled if the engine lacks it. It
            needs ``sh``, ``sleep`` and a Python of this minor version.
        image_python: The image's interpreter, which the runtime's ``python`` runs;
            default the first of ``/usr/local/bin/python3.X`` and ``/usr/bin/python3.X``
            that the image has.
        pool_size: Warm containers kept; the oldest idle one is removed first (one
            running a command never is, so concurrent runs may exceed it for a while).

    Raises:
        BackendUnavailable: The SDK is missing, no engine answers, or the image is not
            there and cannot be pulled.
        ConfigError: The image has no such Python.
    """

    name = "docker"
    isolation = Isolation.STRONG

    def __init__(
        self, image: str | None = None, *, pool_size: int = 4, image_python: str | None = None,
    ) -> None:  # fmt: skip
        ok, detail = docker_status()
        if not ok:
            raise BackendUnavailable(f"docker does not work here: {detail}. Fix: {_FIX}.")
        if pool_size < 1:
            raise ConfigError(f"pool_size must be >= 1, got {pool_size!r}.")
        self.image = image or os.environ.get(DOCKER_IMAGE_ENV) or DEFAULT_DOCKER_IMAGE
        self.pool_size = pool_size
        self._client = _docker().from_env()
        try:
            self._image_id = image_id(self._client, self.image)
        except ImageUnavailable as exc:
            raise BackendUnavailable(str(exc)) from exc
        pythons = (image_python,) if image_python else IMAGE_PYTHONS
        facts = probe_image(self._client, self.image, self._image_id, pythons)
        self.image_python, self._covered = facts.python, facts.data
        self._pool: dict[tuple[Any, ...], Any] = {}
        self._stdin: dict[str, Path] = {}  # container id -> its host folder at _STDIN_AT
        self._busy: dict[str, int] = {}  # container id -> runs in it now (never evicted)
        self._lock = threading.Lock()

    def _protections(self) -> list[str]:
        return ["container: no network, read-only root, private /tmp",
                f"workspace at {SANDBOX_WORKSPACE} is the only writable folder",
                "no task data: the image's agentgym_envs and package folders covered",
                "all capabilities dropped, no new privileges, the workspace owner's uid",
                "memory and pids cgroup limits",
                "rlimits: cpu, address space, file size, open files",
                "timeout kills the container; output capped"]  # fmt: skip

    def _acquire(self, call: _Call) -> tuple[Any, Path | None]:
        """The warm container for the call's key, marked busy until :meth:`_release`,
        and its stdin folder. Only idle containers are evicted to keep the pool size."""
        key = (call.workspace, call.binds, call.limits)
        with self._lock:
            old = [c for c in self._pool.values() if not self._busy.get(c.id)]
            old = old[: max(0, len(self._pool) + 1 - self.pool_size)]
            missing = key not in self._pool
        if missing:
            for container in old:
                self._remove(container)
            made, stdin = self._create(call)
            with self._lock:
                kept = self._pool.setdefault(key, made)
                if kept is made:
                    self._stdin[made.id] = stdin
            if kept is not made:  # another thread started one meanwhile
                made.remove(force=True)
                shutil.rmtree(stdin, ignore_errors=True)
        with self._lock:
            container = self._pool.get(key)
            if container is not None:
                self._busy[container.id] = self._busy.get(container.id, 0) + 1
                return container, self._stdin.get(container.id)
        return self._acquire(call)  # removed at once (a concurrent timeout): start over

    def _release(self, container: Any) -> None:
        with self._lock:
            left = self._busy.pop(container.id, 0) - 1
            if left > 0:
                self._busy[container.id] = left

    def _create(self, call: _Call) -> tuple[Any, Path]:
        """Start a container for ``call``; also returns its stdin folder."""
        stdin = Path(tempfile.mkdtemp(prefix="agentgym-stdin-"))
        stdin.chmod(0o755)  # readable by the container's user
        volumes, tmpfs = self.mounts(call, stdin)
        st = os.stat(call.workspace)
        lim, ulimit, fsize = call.limits, _docker().types.Ulimit, call.limits.file_size_mb * _MIB
        try:
            container = self._client.containers.run(
                self._image_id, ["infinity"], entrypoint=["sleep"], detach=True,
                network_mode="none", read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], init=True, user=f"{st.st_uid}:{st.st_gid}",
                mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m",
                pids_limit=lim.processes, tmpfs=tmpfs,
                volumes=volumes, working_dir=SANDBOX_WORKSPACE, labels={"agentgym": "sandbox"},
                ulimits=[ulimit(name="cpu", soft=lim.cpu_s, hard=lim.cpu_s + 1),
                         ulimit(name="fsize", soft=fsize, hard=fsize),
                         ulimit(name="nofile", soft=lim.open_files, hard=lim.open_files)],
            )  # fmt: skip
        except BaseException:
            shutil.rmtree(stdin, ignore_errors=True)
            raise
        return container, stdin

    def mounts(
        self, call: _Call, stdin: Path | None = None
    ) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """The container's volumes and tmpfs mounts for ``call``.

        No host Python environment is mounted (it holds the task data): the image's own
        interpreter runs, with the sandbox runtime (pytest and the results plugin) at
        ``SANDBOX_PREFIX``; the image's third-party package folders and every folder of
        it holding an ``agentgym_envs`` package are covered by empty tmpfs mounts, so an
        image with agentgym-envs installed shows no tasks. ``stdin``: the host folder
        mounted read-only at ``/agentgym/stdin`` (the runs' standard input files).
        """
        runtime = str(runtime_dir(self.image_python))
        volumes = {runtime: {"bind": SANDBOX_PREFIX, "mode": "ro"}}
        volumes[call.workspace] = {"bind": SANDBOX_WORKSPACE, "mode": "rw"}
        if stdin is not None:
            volumes[str(stdin)] = {"bind": _STDIN_AT, "mode": "ro"}
        for writable, src, dest in call.binds:
            volumes[src] = {"bind": dest, "mode": "rw" if writable else "ro"}
        size = f"size={call.limits.memory_mb}m"
        tmpfs = {"/tmp": size}
        covered = [f.format(version=VERSION) for f in _IMAGE_PACKAGE_DIRS]
        for folder in [*covered, *getattr(self, "_covered", ())]:
            tmpfs[folder] = "ro,size=1m"
        return volumes, tmpfs

    def _remove(self, container: Any) -> None:
        with self._lock:
            self._pool = {k: c for k, c in self._pool.items() if c is not container}
            stdin = self._stdin.pop(container.id, None)
        try:
            container.remove(force=True)
        except Exception as exc:  # already gone or the engine went away: nothing to free
            logger.debug("could not remove container %s: %s", getattr(container, "id", "?"), exc)
        if stdin is not None:
            shutil.rmtree(stdin, ignore_errors=True)

    def _execute(self, call: _Call) -> ExecResult:
        start = time.monotonic()
        try:
            container, exec_id, feed = self._start(call)
            try:
                return self._collect(container, exec_id, call, start)
            finally:
                self._release(container)
                if feed is not None:
                    feed.unlink(missing_ok=True)
        except AgentGymError:
            raise
        except Exception as exc:  # the engine failed (gone, full, API error): not the command
            raise SandboxError(
                f"the Docker engine failed to run the command ({type(exc).__name__}: {exc}); "
                "check that it still runs (docker info)."
            ) from exc

    def _start(self, call: _Call) -> tuple[Any, str, Path | None]:
        """Create the run's exec in the key's container (busy on return): (container,
        exec id, the stdin file). A pooled container that is gone (removed or stopped
        behind our back) is replaced once."""
        memory_kib = str(call.limits.memory_mb * 1024)
        env = {**_base_env(f"{SANDBOX_PREFIX}/bin"), **call.env}
        for attempt in range(2):
            container, folder = self._acquire(call)
            feed = None
            try:
                if call.stdin is not None and folder is not None:
                    feed = folder / uuid.uuid4().hex
                    feed.write_bytes(call.stdin)
                    feed.chmod(0o644)
                stdin_at = f"{_STDIN_AT}/{feed.name}" if feed is not None else "/dev/null"
                argv = ["/bin/sh", "-c", _LIMIT_AND_EXEC, "sh", memory_kib, stdin_at, *call.argv]
                made = self._client.api.exec_create(
                    container.id, argv, workdir=SANDBOX_WORKSPACE, environment=env
                )
                return container, str(made["Id"]), feed
            except Exception as exc:
                self._release(container)
                if feed is not None:
                    feed.unlink(missing_ok=True)
                gone = isinstance(exc, _docker().errors.APIError)  # 404 no such, 409 stopped
                if gone:
                    self._remove(container)
                if attempt or not gone:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _collect(self, container: Any, exec_id: str, call: _Call, start: float) -> ExecResult:
        """Run the exec, keeping capped output; kill the container on timeout or flood."""
        api, cap = self._client.api, call.limits.output_bytes
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            self._remove(container)

        out, err, reason = _Capture(cap), _Capture(cap), None
        timer = threading.Timer(call.timeout_s, expire)
        timer.start()
        try:
            for chunk_out, chunk_err in api.exec_start(exec_id, stream=True, demux=True):
                out.add(chunk_out or b"")
                err.add(chunk_err or b"")
                if reason is None and max(out.total, err.total) > cap * _OUTPUT_KILL_FACTOR:
                    # kill now, and keep reading: the engine will not remove a container
                    # while its exec waits to write to a stream that nobody reads
                    reason = "output"
                    timer.cancel()
                    timer = threading.Timer(0, expire)
                    timer.start()
        except Exception:  # the stream breaks when the timer removes the container
            if not fired.is_set():
                raise
        finally:
            timer.cancel()
        if fired.is_set() or reason:
            self._remove(container)  # the container is the unit we can kill
            return _result(out, err, 128 + signal.SIGKILL, reason or "timeout", start)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return _result(out, err, 1 if code is None else int(code), None, start)

    def close(self) -> None:
        """Remove the warm containers."""
        for container in list(self._pool.values()):
            self._remove(container)


# -------- choosing a backend
_BACKENDS: dict[str, Callable[..., Backend]] = {
    "bubblewrap": BubblewrapBackend,
    "docker": DockerBackend,
    "local": LocalBackend,
}
_ALIASES = {"bwrap": "bubblewrap"}


def available_backends() -> list[str]:
    """Backends that work here, strongest first; ``local`` (no isolation) always comes
    last: it works everywhere, but only with ``unsafe=True``."""
    found = (("bubblewrap", bubblewrap_available()), ("docker", docker_available()))
    return [name for name, ok in found if ok] + ["local"]


def make_backend(name: str = "auto", **kwargs: Any) -> Backend:
    """Create a backend by name.

    Args:
        name: ``"auto"``, ``"bubblewrap"`` (or ``"bwrap"``), ``"docker"`` or ``"local"``.
            ``"auto"`` takes bubblewrap if it works here, else docker if an engine
            answers; it never chooses the unsafe local backend.
        **kwargs: Passed to the backend's constructor (``unsafe=True`` for local).

    Raises:
        ConfigError: Unknown name, or local without ``unsafe=True``.
        BackendUnavailable: No isolating backend works here (auto), or the named one doesn't.
    """
    key = _ALIASES.get(name, name)
    if key == "auto":
        bwrap_ok, bwrap_why = bubblewrap_status()
        if bwrap_ok:
            return BubblewrapBackend(**kwargs)
        docker_ok, docker_why = docker_status()
        if docker_ok:
            return DockerBackend(**kwargs)
        raise BackendUnavailable(
            f"no isolating backend works here (bubblewrap: {bwrap_why}; docker: "
            f"{docker_why}). Fix: {_FIX}."
        )
    if key not in _BACKENDS:
        choices = ["auto", *_BACKENDS, *_ALIASES]
        raise ConfigError(
            f"unknown backend {name!r}; expected one of {choices}.{did_you_mean(name, choices)}"
        )
    return _BACKENDS[key](**kwargs)


def choose_backend(backend: str | Backend, unsafe: bool) -> Backend:
    """The backend that ``RepoFixEnv(backend=..., unsafe=...)`` runs commands in.

    Raises:
        ConfigError: ``unsafe`` is not a bool, ``unsafe=True`` with a backend other than
            the local one, or ``backend="local"`` without ``unsafe=True``.
        BackendUnavailable: the backend asked for does not work here.
    """
    if not isinstance(unsafe, bool):
        raise ConfigError(f"unsafe must be True or False, got {unsafe!r}")
    if not unsafe:
        return make_backend(backend) if isinstance(backend, str) else backend
    if isinstance(backend, LocalBackend):
        return backend
    if backend == "local":
        return make_backend("local", unsafe=True)
    raise ConfigError(
        "unsafe=True only applies to the local backend (commands on the host, no "
        f"isolation); got backend={backend!r}. Pass backend='local', unsafe=True to run "
        "on the host, or drop unsafe=True to keep the sandbox"
    )


__all__ = [
    "DEFAULT_LIMITS",
    "DOCKER_IMAGE_ENV",
    "SANDBOX_WORKSPACE",
    "Backend",
    "BackendUnavailable",
    "BubblewrapBackend",
    "DockerBackend",
    "ExecResult",
    "Isolation",
    "Limits",
    "LocalBackend",
    "SandboxError",
    "available_backends",
    "bubblewrap_available",
    "bubblewrap_status",
    "choose_backend",
    "docker_available",
    "docker_status",
    "make_backend",
]
