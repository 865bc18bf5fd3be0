"""The load generator of ``agentgym bench --serve`` and the processes of the servers it
loads (:mod:`.openenv_bench` runs the trials and reports them).

:func:`play` opens S sessions against a server's ``/ws`` with the ``websockets`` client, as
OpenEnv's ``EnvClient`` does (its opening handshake and message timeouts, its 100 MiB
message limit, websockets' defaults otherwise): all at once, or a bounded number of
handshakes at a time. It resets each, and once all have reset, steps them all; the
server's RSS and CPU time are read from ``/proc`` at each phase, for the server process
alone (:func:`proc_figures`) and for its whole process tree (:func:`tree_figures`: the
Chromium a WebShop session drives, the sandbox a RepoFix command runs in). :class:`ServerProcess`
runs either server in its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from agentgym_envs.console import ProgressLog
from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.integrations.extras import MissingExtraError, install_hint

_MiB = 2**20


@dataclass(frozen=True)
class ProcFigures:
    """A process as ``/proc`` shows it: resident and peak resident bytes, CPU seconds of
    all its threads (user and system), and its thread count."""

    rss: int
    hwm: int
    cpu_s: float
    threads: int


def proc_figures(pid: int) -> ProcFigures | None:
    """RSS, peak RSS, CPU seconds (all threads) and threads of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    after_name = stat.rsplit(")", 1)[1].split()  # field 3 (state) onwards
    ticks = os.sysconf("SC_CLK_TCK")
    return ProcFigures(
        rss=int(fields["VmRSS"].split()[0]) * 1024,
        hwm=int(fields["VmHWM"].split()[0]) * 1024,
        cpu_s=(int(after_name[11]) + int(after_name[12])) / ticks,  # utime + stime
        threads=int(fields["Threads"]),
    )


@dataclass(frozen=True)
class TreeFigures:
    """A process and every descendant it has, summed over ``/proc``: what a server whose
    sessions run in child processes (Chromium, a sandbox per command) costs in all.

    Attributes:
        processes: the live processes in the tree, the root included.
        rss: the sum of their resident bytes (``VmRSS``); pages that several of them map
            (shared libraries, Chromium's shared memory) count once per process, so this
            is an upper bound on the memory the tree takes.
        pss: the sum of their proportional set sizes (``Pss`` of ``smaps_rollup``: each
            shared page split among the processes that map it), the tree's fair share;
            None where the kernel did not let this process read a member's.
        cpu_s: CPU seconds (user and system) of every live member's threads, plus the
            children each has waited for (``cutime``, ``cstime``): a command that ran in a
            child and exited between two readings still counts, once its parent reaped it
            (but not one reaped outside the tree: see :class:`CpuCgroup`).
        cgroup_cpu_s: CPU seconds of the server's :class:`CpuCgroup`, every process it
            ever started included (None: the server has none).
    """

    processes: int
    rss: int
    pss: int | None
    cpu_s: float
    cgroup_cpu_s: float | None = None


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` from field 3 (state) onwards (the name may hold spaces)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, theirs, ...), from each process's parent
    in ``/proc``; processes that end while it reads are left out."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry.name))[1])
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


def _member(pid: int, pss: bool) -> tuple[int, int | None, float] | None:
    """(RSS bytes, PSS bytes or None, CPU seconds with reaped children) of one process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        after_name = _stat_fields(pid)
    except OSError:
        return None
    rss = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS:")), "0")
    proportional = None
    if pss:
        with contextlib.suppress(OSError):  # a member this process may not inspect
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            proportional = next(
                (int(ln.split()[1]) * 1024 for ln in rollup.splitlines() if ln.startswith("Pss:")),
                None,
            )
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = sum(int(after_name[i]) for i in (11, 12, 13, 14)) / ticks  # u, s, cu, cs time
    return int(rss) * 1024, proportional, cpu


def tree_figures(
    pid: int, *, pss: bool = True, cgroup: CpuCgroup | None = None
) -> TreeFigures | None:
    """:class:`TreeFigures` of ``pid`` and its descendants (None: ``pid`` is gone).
    ``pss=False`` skips ``smaps_rollup``, whose reading costs time per mapping; ``cgroup``
    is the server's :class:`CpuCgroup`, if it has one."""
    root = _member(pid, pss)
    if root is None:
        return None
    members = [root, *filter(None, (_member(child, pss) for child in descendants(pid)))]
    shares = [m[1] for m in members]
    return TreeFigures(
        processes=len(members),
        rss=sum(m[0] for m in members),
        pss=None if not pss or None in shares else sum(s or 0 for s in shares),
        cpu_s=sum(m[2] for m in members),
        cgroup_cpu_s=cgroup.cpu_s() if cgroup is not None else None,
    )


class CpuCgroup:
    """A cgroup v1 ``cpuacct`` group of its own for one server: the kernel's count of the
    CPU time of every process in it, those that have ended included.

    A child's CPU reaches its parent's ``cutime`` only if the parent waits for it, and a
    sandbox in a pid namespace (bubblewrap's ``--unshare-pid``: RepoFix's commands) ends
    with its init reaped by the host's init, not by the server: :class:`TreeFigures`' sum
    misses it. Processes stay in their cgroup whoever reaps them, so this count does not.
    Only where the ``cpuacct`` hierarchy is mounted and writable (root, cgroup v1).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, name: str) -> CpuCgroup | None:
        """A new group beside this process's own (None: no writable ``cpuacct`` here)."""
        try:
            mine = next(
                line.split(":", 2)[2]
                for line in Path("/proc/self/cgroup").read_text().splitlines()
                if "cpuacct" in line.split(":", 2)[1].split(",")
            )
            root = next(
                Path(line.split()[1])
                for line in Path("/proc/self/mounts").read_text().splitlines()
                if line.split()[2] == "cgroup" and "cpuacct" in line.split()[3].split(",")
            )
            path = root / mine.lstrip("/") / name
            path.mkdir()
        except (OSError, StopIteration, IndexError):
            return None
        return cls(path)

    def add(self, pid: int) -> None:
        """Put ``pid`` in the group (the processes it starts from then on join it too)."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def cpu_s(self) -> float | None:
        """CPU seconds of everything that has run in the group (None: it is gone)."""
        try:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        """Move what is left (processes the server's tree orphaned) to the parent group,
        then delete the group."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # it ended meanwhile
                    (self.path.parent / "cgroup.procs").write_text(pid)
            self.path.rmdir()


def percentile_ms(samples: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile, in milliseconds."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * q) - 1)] * 1000


# -- the load generator -------------------------------------------------------------------


@dataclass(frozen=True)
class LoadPlan:
    """What each session of a round sends."""

    url: str
    sessions: int
    steps: int  # 0: connect and reset only
    seed: int
    step_text: str  # the step message, JSON
    connect_timeout_s: float
    message_timeout_s: float
    connecting: int = 0  # the most opening handshakes in flight at once (0: all)

    def reset_text(self, seed: int) -> str:
        return json.dumps({"type": "reset", "data": {"seed": seed}})


class _Countdown:
    def __init__(self, n: int) -> None:
        self.left = n
        self.event = asyncio.Event()
        if n <= 0:
            self.event.set()

    def done(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.event.set()


class _SessionFailed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


@dataclass
class LoadRound:
    """What one round measured, filled in by its sessions."""

    sessions: int
    connected: int = 0
    opened: int = 0  # reset done
    held: int = 0
    steps: int = 0
    episode_resets: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    connect_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    reset_bytes: int = 0
    step_bytes: int = 0
    before: ProcFigures | None = None  # the server process alone
    open: ProcFigures | None = None
    end: ProcFigures | None = None
    tree_before: TreeFigures | None = None  # the server and its descendants
    tree_open: TreeFigures | None = None
    tree_end: TreeFigures | None = None
    tree_peak_rss: int = 0  # the most tree RSS seen, read every TREE_SAMPLE_S
    step_wall_s: float = 0.0
    client_cpu_s: float = 0.0
    open_wall_s: float = 0.0  # from the first connect to the last reset
    open_client_cpu_s: float = 0.0  # this process's CPU time meanwhile

    def fail(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        self.examples.setdefault(kind, detail[:300])


@dataclass
class _Gates:
    ready: _Countdown  # every session reset (or failed)
    stepped: _Countdown  # every session played its steps (or failed)
    connecting: asyncio.Semaphore | None = None  # None: every handshake at once
    go: asyncio.Event = field(default_factory=asyncio.Event)
    finish: asyncio.Event = field(default_factory=asyncio.Event)


async def _open(plan: LoadPlan) -> Any:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake

    try:
        # OpenEnv's EnvClient.connect: these two options, websockets' defaults otherwise
        return await connect(plan.url, open_timeout=plan.connect_timeout_s, max_size=100 * _MiB)
    except TimeoutError as exc:
        raise _SessionFailed(
            f"handshake timeout ({plan.connect_timeout_s:g} s)", repr(exc)
        ) from exc
    except InvalidHandshake as exc:
        raise _SessionFailed("handshake refused", repr(exc)) from exc
    except OSError as exc:
        raise _SessionFailed("connect failed", repr(exc)) from exc


async def _ask(ws: Any, text: str, plan: LoadPlan) -> tuple[int, dict[str, Any]]:
    """Send one message, wait for its answer: (answer bytes, its data). A server that
    refuses a session answers before the first message and closes (openenv-core's
    protocol): the send then fails, and the refusal is the message already received."""
    from websockets.exceptions import ConnectionClosed

    try:
        await ws.send(text)
    except ConnectionClosed:
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            async with asyncio.timeout(1.0):
                _answer(await ws.recv())  # raises the refusal it holds
        raise
    try:
        async with asyncio.timeout(plan.message_timeout_s):  # EnvClient: asyncio.wait_for
            raw = await ws.recv()
    except TimeoutError as exc:
        raise _SessionFailed(
            f"message timeout ({plan.message_timeout_s:g} s)", "no answer in time"
        ) from exc
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8"))
    return size, _answer(raw)


def _answer(raw: str | bytes) -> dict[str, Any]:
    """An answer's data; an error answer raises it as the session's failure."""
    answer = json.loads(raw)
    if answer.get("type") == "error":
        error = answer.get("data") or {}
        raise _SessionFailed(f"server error {error.get('code', '?')}", str(error.get("message")))
    data: dict[str, Any] = answer.get("data") or {}
    return data


async def _session(i: int, plan: LoadPlan, r: LoadRound, gates: _Gates) -> None:
    from websockets.exceptions import ConnectionClosed

    ws, ready = None, False
    try:
        async with gates.connecting or contextlib.nullcontext():
            start = time.perf_counter()  # the handshake's clock starts when it is sent
            ws = await _open(plan)
        r.connected += 1
        r.connect_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        size, _ = await _ask(ws, plan.reset_text(plan.seed + i), plan)
        r.reset_s.append(time.perf_counter() - start)
        r.reset_bytes += size
        r.opened += 1
        ready = True
        gates.ready.done()
        await gates.go.wait()
        episodes = 0
        for _ in range(plan.steps):
            start = time.perf_counter()
            size, data = await _ask(ws, plan.step_text, plan)
            r.step_s.append(time.perf_counter() - start)
            r.step_bytes += size
            r.steps += 1
            if data.get("done"):  # the episode ended: a new one, the next seed of this session
                episodes += 1
                await _ask(ws, plan.reset_text(plan.seed + i + episodes * plan.sessions), plan)
                r.episode_resets += 1
        r.held += 1
    except _SessionFailed as exc:
        r.fail(exc.kind, str(exc))
    except ConnectionClosed as exc:
        r.fail("connection closed", repr(exc))
    except OSError as exc:
        r.fail("connection error", repr(exc))
    except ValueError as exc:  # not JSON
        r.fail("unreadable answer", repr(exc))
    finally:
        if not ready:
            gates.ready.done()
        gates.stepped.done()
        await gates.finish.wait()  # every session stays open until all have stepped
        if ws is not None:
            try:
                await ws.send(json.dumps({"type": "close"}))
                await ws.close()
            except Exception:  # a connection that already broke: counted above
                pass


async def _monitor(r: LoadRound, plan: LoadPlan, label: str, log: ProgressLog) -> None:
    while True:
        await asyncio.sleep(10)
        log.line(
            f"  {label}: {r.connected}/{r.sessions} connected, {r.opened} reset, "
            f"{r.steps:,}/{r.sessions * plan.steps:,} steps, {sum(r.errors.values())} errors"
        )


TREE_SAMPLE_S = 0.25
"""How often :func:`play` reads the server's tree RSS for its peak (no PSS: it is dear)."""


async def _sample_tree(r: LoadRound, pid: int) -> None:
    while True:
        tree = tree_figures(pid, pss=False)
        if tree is not None:
            r.tree_peak_rss = max(r.tree_peak_rss, tree.rss)
        await asyncio.sleep(TREE_SAMPLE_S)


async def play(
    plan: LoadPlan, pid: int, label: str, log: ProgressLog, cgroup: CpuCgroup | None = None
) -> LoadRound:
    """Open ``plan.sessions`` sessions at once; reset each; then step them all. The
    server's figures are read before, once all have reset, and after the steps, for the
    server process (``before``...) and its whole tree (``tree_before``...; its CPU also
    from ``cgroup``, the server's :class:`CpuCgroup`, if it has one)."""
    r = LoadRound(plan.sessions, before=proc_figures(pid))
    r.tree_before = tree_figures(pid, cgroup=cgroup)
    sampler = asyncio.create_task(_sample_tree(r, pid))
    gates = _Gates(_Countdown(plan.sessions), _Countdown(plan.sessions))
    if 0 < plan.connecting < plan.sessions:
        gates.connecting = asyncio.Semaphore(plan.connecting)
    monitor = asyncio.create_task(_monitor(r, plan, label, log))
    cpu, start = time.process_time(), time.perf_counter()
    sessions = [asyncio.create_task(_session(i, plan, r, gates)) for i in range(plan.sessions)]
    await gates.ready.event.wait()
    r.open_wall_s = time.perf_counter() - start
    r.open_client_cpu_s = time.process_time() - cpu
    r.open, r.tree_open = proc_figures(pid), tree_figures(pid, cgroup=cgroup)
    cpu, start = time.process_time(), time.perf_counter()
    gates.go.set()
    await gates.stepped.event.wait()
    r.step_wall_s = time.perf_counter() - start
    r.client_cpu_s = time.process_time() - cpu
    r.end, r.tree_end = proc_figures(pid), tree_figures(pid, cgroup=cgroup)
    gates.finish.set()
    await asyncio.gather(*sessions)
    monitor.cancel()
    sampler.cancel()
    for tree in (r.tree_before, r.tree_open, r.tree_end):
        r.tree_peak_rss = max(r.tree_peak_rss, tree.rss if tree else 0)
    return r


# -- the servers --------------------------------------------------------------------------

_ECHO_SERVER = """\
import sys
root, host, port, max_sessions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root)
sys.modules["gradio"] = None  # as agentgym's server: openenv.core loads without its web UI
try:
    from echo_env.models import EchoAction, EchoObservation
    from echo_env.server.echo_env_environment import EchoEnvironment
    from openenv.core.env_server.http_server import create_app
finally:
    sys.modules.pop("gradio", None)
import uvicorn

app = create_app(EchoEnvironment, EchoAction, EchoObservation, env_name="echo_env",
                 max_concurrent_envs=max_sessions)
uvicorn.run(app, host=host, port=port, log_level="warning")
"""
"""The echo server's process: the app of ``openenv init``'s ``server/app.py`` (the
template's ``max_concurrent_envs=1`` raised to fit S), run by uvicorn as its ``main``."""


def render_echo_env(folder: Path) -> Path:
    """Write OpenEnv's echo env into ``folder/echo_env``, as ``openenv init echo_env``
    does (openenv-core's own template and substitutions; no ``uv lock``)."""
    if find_spec("openenv") is None or find_spec("uvicorn") is None:
        raise MissingExtraError(
            "agentgym bench --serve needs openenv-core (its echo env, create_app, uvicorn); "
            f"fix: {install_hint('openenv')}"
        )
    hide = "gradio" not in sys.modules  # its web UI: seconds of imports that nothing here uses
    if hide:
        sys.modules["gradio"] = None  # type: ignore[assignment]
    try:
        from openenv.cli.commands import init as openenv_init
    finally:
        if hide:
            sys.modules.pop("gradio", None)
    try:
        replacements = openenv_init._create_template_replacements("echo_env")
        openenv_init._copy_template_directory(
            "openenv.cli.templates.openenv_env", "", folder / "echo_env", replacements, "echo_env"
        )
    except (AttributeError, TypeError) as exc:  # its private helpers moved
        version = metadata.version("openenv-core")
        raise AgentGymError(
            f"openenv-core {version} no longer writes its echo env the way 0.3 did ({exc}); "
            "install openenv-core 0.3 (pip install 'openenv-core>=0.3,<0.4') or update "
            "render_echo_env"
        ) from exc
    return folder / "echo_env"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """One server in its own process, from start to ``/health`` to stop; in a
    :class:`CpuCgroup` of its own where this host lets us make one (``cgroup``)."""

    def __init__(
        self, name: str, argv: list[str], port: int, folder: Path, pythonpath: str = ""
    ) -> None:
        self.name, self.port = name, port
        self.url = f"ws://127.0.0.1:{port}/ws"
        self._log = folder / f"{name}-{port}.log"
        env = {k: v for k, v in os.environ.items() if k != "ENABLE_WEB_INTERFACE"}
        env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        if pythonpath:  # ahead of the editable install's path: another copy of the code
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
        start = time.perf_counter()
        with self._log.open("wb") as out:
            # cwd: not this one, which ``python -m`` would put ahead of PYTHONPATH
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder
            )
        # before its imports are done, long before it starts a child: they all join it
        self.cgroup = CpuCgroup.create(f"agentgym-serve-bench-{os.getpid()}-{self.proc.pid}")
        if self.cgroup is not None:
            try:
                self.cgroup.add(self.proc.pid)
            except OSError:
                self.cgroup.remove()
                self.cgroup = None
        self.start_s = time.perf_counter() - start

    def wait_healthy(self, timeout_s: float) -> None:
        start = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/health", timeout=2
                ) as answer:
                    if answer.status == 200:
                        self.start_s += time.perf_counter() - start
                        return
            except OSError:
                time.sleep(0.1)
        tail = self._log.read_text(errors="replace")[-2000:]
        self.stop()
        raise AgentGymError(
            f"the {self.name} server did not answer /health within {timeout_s:g} s "
            f"(exit status {self.proc.returncode}); its output ends:\n{tail}\n"
            "check --serve-args, or that the port range is free"
        )

    def stop(self) -> int | None:
        """Stop it (SIGTERM, then SIGKILL); the exit status it had before, if it died."""
        died = self.proc.poll()
        if died is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        return died


def agentgym_argv(env_id: str, port: int, sessions: int, serve_args: Sequence[str]) -> list[str]:
    """``agentgym openenv serve env_id`` on 127.0.0.1:``port`` with room for ``sessions``."""
    where = ["--host", "127.0.0.1", "--port", str(port), "--max-sessions", str(sessions)]
    return [
        sys.executable,
        "-m",
        "agentgym_envs.cli",
        "openenv",
        "serve",
        env_id,
        *where,
        *serve_args,
    ]


def echo_argv(echo: Path, port: int, sessions: int) -> list[str]:
    """The echo env that :func:`render_echo_env` wrote to ``echo``, served on
    127.0.0.1:``port`` with room for ``sessions``."""
    return [
        sys.executable,
        "-c",
        _ECHO_SERVER,
        str(echo.parent),
        "127.0.0.1",
        str(port),
        str(sessions),
    ]
