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
import importlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
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


@functools.cache
def _system_args() -> tuple[str, ...]:
    """Read-only binds of the system, then fresh /proc and /dev (computed once)."""
    args = ["--ro-bind", "/usr", "/usr"]
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
    mounted = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc"]
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
# Where Python images keep third-party packages (an image with agentgym-envs installed
# keeps its task data there): covered by empty tmpfs mounts in every container.
_IMAGE_PACKAGE_DIRS = (
    "/usr/local/lib/python{version}/site-packages", "/usr/local/lib/python{version}/dist-packages",
    "/usr/lib/python3/dist-packages", "/usr/lib/python{version}/site-packages",
)  # fmt: skip


def _docker() -> Any:
    return importlib.import_module("docker")  # optional dependency: agentgym-envs[sandbox]


@functools.cache
def docker_status() -> tuple[bool, str]:
    """Whether a Docker engine answers (probed once, cached), and why not."""
    try:
        client = _docker().from_env(timeout=3)
        client.ping()
        client.close()
    except ImportError:
        return False, "the docker SDK is not installed (pip install 'agentgym-envs[sandbox]')"
    except Exception as exc:  # the SDK raises many kinds; each means no usable engine
        return False, f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return True, "an engine answers"


def docker_available() -> bool:
    """Whether a Docker engine answers here."""
    return docker_status()[0]


class DockerBackend(_CheckedBackend):
    """Containers from a Docker engine, kept warm in a small pool and reused via exec.

    Each container has no network, a read-only root, a private ``/tmp``, no
    capabilities, no new privileges, memory and pids limits, a non-root user (the
    workspace owner, or 65534 for a root-owned workspace, which must then be writable by
    it), the sandbox runtime read-only and the workspace at
    ``/workspace``. The host's Python environment is not mounted: the image's
    interpreter runs with the sandbox runtime (pytest) instead. Containers are keyed
    by mounts and limits, so an episode's commands reuse one; a timeout kills and drops
    the container. ``stdin`` travels in an environment variable, so it must stay under
    128 KiB.

    Args:
        image: Image to run; it needs ``sh``, ``sleep`` and a Python of this minor
            version at ``image_python``. Its third-party package folders are covered
            by empty mounts; it must hold no task data anywhere else.
        image_python: The image's interpreter, which the runtime's ``python`` runs.
        pool_size: Warm containers kept; the oldest one is removed first.

    Raises:
        BackendUnavailable: The SDK is missing or no engine answers.
    """

    name = "docker"
    isolation = Isolation.STRONG

    def __init__(
        self, image: str = f"python:{VERSION}-slim", *, pool_size: int = 4,
        image_python: str = f"/usr/local/bin/python{VERSION}",
    ) -> None:  # fmt: skip
        ok, detail = docker_status()
        if not ok:
            raise BackendUnavailable(f"docker does not work here: {detail}. Fix: {_FIX}.")
        if pool_size < 1:
            raise ConfigError(f"pool_size must be >= 1, got {pool_size!r}.")
        self.image, self.pool_size, self.image_python = image, pool_size, image_python
        self._client = _docker().from_env()
        self._pool: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def _protections(self) -> list[str]:
        return ["container: no network, read-only root, private /tmp",
                f"workspace at {SANDBOX_WORKSPACE} is the only writable folder",
                "all capabilities dropped, no new privileges, non-root user",
                "memory and pids cgroup limits, rlimits: cpu, file size, open files",
                "timeout kills the container; output capped"]  # fmt: skip

    def _container(self, call: _Call) -> Any:
        key = (call.workspace, call.binds, call.limits)
        with self._lock:
            if key in self._pool:
                return self._pool[key]
            old = list(self._pool.values())[: max(0, len(self._pool) + 1 - self.pool_size)]
        for container in old:
            self._remove(container)
        volumes, tmpfs = self.mounts(call)
        st = os.stat(call.workspace)
        lim, ulimit, fsize = call.limits, _docker().types.Ulimit, call.limits.file_size_mb * _MIB
        container = self._client.containers.run(
            self.image, ["sleep", "infinity"], detach=True, network_mode="none", read_only=True,
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            user=f"{st.st_uid}:{st.st_gid}" if st.st_uid else "65534:65534",
            mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m",
            pids_limit=lim.processes, tmpfs=tmpfs,
            volumes=volumes, working_dir=SANDBOX_WORKSPACE, labels={"agentgym": "sandbox"},
            ulimits=[ulimit(name="cpu", soft=lim.cpu_s, hard=lim.cpu_s + 1),
                     ulimit(name="fsize", soft=fsize, hard=fsize),
                     ulimit(name="nofile", soft=lim.open_files, hard=lim.open_files)],
        )  # fmt: skip
        with self._lock:
            kept = self._pool.setdefault(key, container)
        if kept is not container:  # another thread started one for the same key meanwhile
            self._remove(container)
        return kept

    def mounts(self, call: _Call) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """The container's volumes and tmpfs mounts for ``call``.

        No host Python environment is mounted (it holds the task data): the image's own
        interpreter runs, with the sandbox runtime (pytest and the results plugin) at
        ``SANDBOX_PREFIX``, and the image's third-party package folders are covered by
        empty tmpfs mounts, so an image with agentgym-envs installed shows no tasks.
        """
        runtime = str(runtime_dir(self.image_python))
        volumes = {runtime: {"bind": SANDBOX_PREFIX, "mode": "ro"}}
        volumes[call.workspace] = {"bind": SANDBOX_WORKSPACE, "mode": "rw"}
        for writable, src, dest in call.binds:
            volumes[src] = {"bind": dest, "mode": "rw" if writable else "ro"}
        size = f"size={call.limits.memory_mb}m"
        tmpfs = {"/tmp": size}
        for folder in _IMAGE_PACKAGE_DIRS:
            tmpfs[folder.format(version=VERSION)] = "ro,size=1m"
        return volumes, tmpfs

    def _remove(self, container: Any) -> None:
        with self._lock:
            self._pool = {k: c for k, c in self._pool.items() if c is not container}
        try:
            container.remove(force=True)
        except Exception as exc:  # already gone or the engine went away: nothing to free
            logger.debug("could not remove container %s: %s", getattr(container, "id", "?"), exc)

    def _execute(self, call: _Call) -> ExecResult:
        start, cap = time.monotonic(), call.limits.output_bytes
        container, api = self._container(call), self._client.api
        argv, env = list(call.argv), {**_base_env(f"{SANDBOX_PREFIX}/bin"), **call.env}
        if call.stdin:
            argv = ["/bin/sh", "-c", 'printf %s "$AGENTGYM_STDIN" | "$@"', "sh", *argv]
            env["AGENTGYM_STDIN"] = call.stdin.decode()
        exec_id = api.exec_create(container.id, argv, workdir=SANDBOX_WORKSPACE, environment=env)
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            self._remove(container)

        timer = threading.Timer(call.timeout_s, expire)
        timer.start()
        out, err, reason = _Capture(cap), _Capture(cap), None
        try:
            for chunk_out, chunk_err in api.exec_start(exec_id["Id"], stream=True, demux=True):
                out.add(chunk_out or b"")
                err.add(chunk_err or b"")
                if max(out.total, err.total) > cap * _OUTPUT_KILL_FACTOR:
                    reason = "output"
                    break
        except Exception:  # the stream breaks when the timer removes the container
            if not fired.is_set():
                raise
        finally:
            timer.cancel()
        if fired.is_set() or reason:
            self._remove(container)  # the container is the unit we can kill
            return _result(out, err, 128 + signal.SIGKILL, reason or "timeout", start)
        code = api.exec_inspect(exec_id["Id"]).get("ExitCode")
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


__all__ = [
    "DEFAULT_LIMITS",
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
    "docker_available",
    "docker_status",
    "make_backend",
]
