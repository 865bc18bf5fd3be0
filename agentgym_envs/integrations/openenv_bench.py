"""The OpenEnv server under load, side by side with OpenEnv's reference server (``agentgym
bench --serve ENV``; measured, never asserted in tests).

Two servers, each in its own process and started fresh for every trial, take turns:

* **agentgym**: ``agentgym openenv serve ENV`` (:mod:`.openenv_cli`), as a user runs it;
* **openenv-echo**: OpenEnv's reference env, the echo env that ``openenv init`` writes
  from openenv-core's template, served by openenv-core's ``create_app`` and uvicorn, as
  its template's ``server/app.py`` does (with room for every session).

Neither loads gradio's web UI (our server hides it while ``openenv.core`` imports; the
echo server does the same, so both start alike). This process is the load generator:
asyncio and the ``websockets`` client, speaking what OpenEnv's ``EnvClient`` speaks at
``/ws`` (``reset``, ``step`` and ``close`` messages, JSON text), with its defaults: a 10 s
opening handshake, 60 s for each answer, 100 MiB messages, ``websockets``' own
compression and keepalive. For each S and each repeat, each server plays two trials:

* **cold**: on a fresh server, S sessions open at once and each resets: held sessions,
  handshake timeouts and other errors, the first-reset latency (caches that the env
  builds on first use are in it) and the server's peak RSS;
* **warm**: on a fresh server warmed by two sessions (a reset and a step each, closed),
  S sessions open at once and reset; once all have, each plays its steps one after the
  other (a valid action: the env's ``example_action`` or ``--action``; the echo env gets
  the same text as its message), resetting an episode that ends. Steps/s over the step
  phase, step latency, server RSS before the sessions opened vs with them open (per
  session), server CPU seconds per step (``/proc/<pid>/stat``), bytes per step answer.

Memory and CPU are read twice over: for the **server** process alone, and for its whole
**tree**, the server and every descendant summed over ``/proc`` (RSS, PSS and CPU with the
children reaped; :func:`~.openenv_load.tree_figures`), its CPU from a ``cpuacct`` cgroup of
the server's own where the host allows (:class:`~.openenv_load.CpuCgroup`: a sandbox in a
pid namespace is reaped outside the tree). A WebShop session's pages live in
Chromium's processes and a RepoFix command in a bubblewrap child, so only the tree says what
a heavy env's session costs; from it the summary derives a capacity: steps/s per core
(``1000 / tree CPU ms per step``) and sessions per GiB (``1024 / tree MiB per session``).

The order of the two servers alternates from one repeat to the next.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import platform
import resource
import shlex
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Any

from agentgym_envs.console import ProgressLog
from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.integrations.openenv_load import (
    LoadPlan,
    LoadRound,
    ServerProcess,
    TreeFigures,
    agentgym_argv,
    echo_argv,
    free_port,
    percentile_ms,
    play,
    render_echo_env,
)
from agentgym_envs.registration import env_class, find


class Server(StrEnum):
    """The servers compared, in the order the first repeat plays them."""

    AGENTGYM = "agentgym"  # agentgym openenv serve ENV
    ECHO = "openenv-echo"  # OpenEnv's echo env, create_app and uvicorn


class TrialKind(StrEnum):
    """What a trial measures (see the module doc)."""

    COLD = "cold"  # a fresh server's first resets
    WARM = "warm"  # a warmed server's steps


SERVERS = tuple(Server)

WARMUP_SESSIONS = 2
"""Sessions that warm a server before a warm trial (a reset and a step each)."""

_MiB = 2**20


@dataclass(frozen=True)
class ServeBenchConfig:
    """What ``agentgym bench --serve`` runs.

    Attributes:
        env: the env our server serves (a registered id or name).
        sessions: the numbers of concurrent sessions (S) to try, in order.
        steps: steps each session plays in a warm trial.
        repeats: trials per S and server (each on fresh servers).
        seed: reset seed of session 0 (session i resets with ``seed + i``).
        action: the action every step sends ("": the env's ``example_action``).
        serve_args: extra options for ``agentgym openenv serve`` (``--max-sessions`` is
            set to fit S).
        server_src: a source tree our server runs from instead of this one (put first on
            its ``PYTHONPATH``), e.g. a commit written out by ``git archive``: a committed
            server measured by this benchmark ("": this installation's).
        connect_timeout_s: the opening handshake's limit (OpenEnv's client: 10 s).
        connect_concurrency: the most opening handshakes this load generator has in
            flight at once (0: all S at once, each session's clock starting together).
            S clients on S machines each spend their own CPU on their handshake; one
            process opening thousands spends its own, and on a busy machine its
            handshakes can run out of time before the server's turn: a bound measures
            the server rather than this process.
        message_timeout_s: the limit on each answer (OpenEnv's client: 60 s).
        start_timeout_s: how long a server may take to answer ``/health``.
    """

    env: str
    sessions: tuple[int, ...] = (64, 256, 2048)
    steps: int = 10
    repeats: int = 3
    seed: int = 0
    action: str = ""
    serve_args: tuple[str, ...] = ()
    server_src: str = ""
    connect_timeout_s: float = 10.0
    connect_concurrency: int = 0
    message_timeout_s: float = 60.0
    start_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        if not self.sessions or any(s < 1 for s in self.sessions):
            raise ConfigError(
                f"--sessions takes session counts >= 1, got {list(self.sessions)}; "
                "e.g. --sessions 64,256,2048"
            )
        if self.steps < 1:
            raise ConfigError(f"--steps must be >= 1 (steps per session), got {self.steps}")
        if self.repeats < 1:
            raise ConfigError(f"--repeats must be >= 1, got {self.repeats}")
        if self.connect_concurrency < 0:
            raise ConfigError(
                f"--connect-concurrency must be >= 0 (0: every handshake at once), got "
                f"{self.connect_concurrency}"
            )
        if self.connect_timeout_s <= 0 or self.message_timeout_s <= 0:
            raise ConfigError("the handshake and message timeouts must be > 0 seconds")
        bad = {"--port", "--host", "--max-sessions"} & {a.split("=")[0] for a in self.serve_args}
        if bad:
            raise ConfigError(
                f"--serve-args may not set {', '.join(sorted(bad))}: the benchmark picks the "
                "port and sizes --max-sessions to fit S; drop them"
            )

        if self.server_src and not (Path(self.server_src) / "agentgym_envs" / "cli.py").is_file():
            raise ConfigError(
                f"--server-src {self.server_src!r} holds no agentgym_envs/cli.py; give the root "
                "of a source tree, e.g. mkdir /tmp/before && git archive HEAD | tar -x -C "
                "/tmp/before, then --server-src /tmp/before"
            )

    def command(self, out: str | Path | None = None, log: str | Path | None = None) -> str:
        """The ``agentgym`` command line that runs this configuration."""
        argv = ["agentgym", "bench", "--serve", self.env]
        argv += ["--sessions", ",".join(map(str, self.sessions)), "--steps", str(self.steps)]
        argv += ["--repeats", str(self.repeats), "--seed", str(self.seed)]
        if self.action:
            argv += ["--action", self.action]
        if self.serve_args:
            argv += ["--serve-args", shlex.join(self.serve_args)]
        if self.server_src:
            argv += ["--server-src", self.server_src]
        if self.connect_concurrency:
            argv += ["--connect-concurrency", str(self.connect_concurrency)]
        argv += ["--out", str(out)] if out is not None else []
        argv += ["--log", str(log)] if log is not None else []
        return shlex.join(argv)


def parse_sessions(text: str) -> tuple[int, ...]:
    """``"64,256,2048"`` -> ``(64, 256, 2048)``; anything else is a :class:`ConfigError`."""
    try:
        found = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        found = ()
    if not found or any(s < 1 for s in found):
        raise ConfigError(
            f"--sessions takes session counts >= 1 separated by commas, got {text!r}; "
            "e.g. --sessions 64,256,2048"
        )
    return found


# -- one trial's figures ------------------------------------------------------------------


@dataclass
class Trial:
    """One server, one S, one repeat: a cold or a warm trial (see the module doc)."""

    server: Server
    kind: TrialKind
    sessions: int
    repeat: int
    held: int  # sessions that played their whole script without an error
    errors: dict[str, int]  # kind of error -> sessions it ended
    error_examples: dict[str, str]
    steps: int
    episode_resets: int  # resets after an episode ended mid-trial
    step_wall_s: float | None
    steps_per_s: float | None
    step_p50_ms: float | None
    step_p99_ms: float | None
    reset_p50_ms: float | None  # the sessions' first reset
    reset_p99_ms: float | None
    connect_p99_ms: float | None
    open_wall_s: float  # from the first connect to the last session's reset
    client_open_cpu_s: float  # this load generator's CPU time meanwhile
    rss_before_mib: float | None
    rss_open_mib: float | None  # with the sessions open (after their steps, if any)
    rss_peak_mib: float | None  # the server's VmHWM at the end of the trial
    rss_per_session_mib: float | None
    server_threads_open: int | None
    server_cpu_ms_per_step: float | None
    # the server and its descendants (Chromium, sandboxes): see the module doc
    tree_processes_open: int | None
    tree_rss_before_mib: float | None
    tree_rss_open_mib: float | None
    tree_rss_peak_mib: float | None  # sampled every TREE_SAMPLE_S, and at each phase
    tree_rss_per_session_mib: float | None  # the sessions held open, after their steps
    tree_peak_per_session_mib: float | None  # (peak - before) / sessions: with commands running
    tree_pss_before_mib: float | None  # None: a member's smaps_rollup was unreadable
    tree_pss_open_mib: float | None
    tree_pss_per_session_mib: float | None
    tree_cpu_ms_per_step: float | None  # by the server's cgroup where it had one, else /proc
    tree_cpu_source: str | None  # "cgroup" or "proc"
    tree_proc_cpu_ms_per_step: float | None  # by /proc: misses children reaped outside
    client_cpu_ms_per_step: float | None  # this load generator's
    step_message_bytes: float | None  # a step's answer, JSON text (mean)
    action_message_bytes: float | None  # a step's request
    reset_message_bytes: float | None
    server_start_s: float
    server_exit: int | None  # exit status, where the server died during the trial
    load_avg_1m: float  # this machine's, at the end of the trial


# -- trials -------------------------------------------------------------------------------


def _step_text(server: str, action: str) -> str:
    field_name = "text" if server == Server.AGENTGYM else "message"  # each server's action type
    return json.dumps({"type": "step", "data": {field_name: action}})


def run_trial(
    server: Server,
    kind: TrialKind,
    sessions: int,
    repeat: int,
    cfg: ServeBenchConfig,
    env_id: str,
    action: str,
    echo: Path,
    log: ProgressLog,
) -> Trial:
    """One cold or warm trial (see the module doc) on a fresh ``server`` process."""
    port = free_port()
    room = sessions + (WARMUP_SESSIONS if kind == TrialKind.WARM else 0)
    if server == Server.AGENTGYM:
        argv, src = agentgym_argv(env_id, port, room, cfg.serve_args), cfg.server_src
    else:
        argv, src = echo_argv(echo, port, room), ""
    proc = ServerProcess(server, argv, port, echo.parent, pythonpath=src)
    label = f"S={sessions} #{repeat + 1} {server} {kind}"
    step_text = _step_text(server, action)
    try:
        proc.wait_healthy(cfg.start_timeout_s)
        plan = LoadPlan(
            proc.url,
            sessions,
            cfg.steps if kind == TrialKind.WARM else 0,
            cfg.seed,
            step_text,
            cfg.connect_timeout_s,
            cfg.message_timeout_s,
            cfg.connect_concurrency,
        )
        if kind == TrialKind.WARM:
            warm = dataclasses.replace(plan, sessions=WARMUP_SESSIONS, steps=1)
            got = asyncio.run(play(warm, proc.proc.pid, label + " warm-up", log, proc.cgroup))
            if got.held < WARMUP_SESSIONS:
                raise AgentGymError(
                    f"the {server} server failed its warm-up ({got.examples}); nothing was "
                    "measured. Is --action a valid action of the env?"
                )
            time.sleep(0.5)  # the server ends the warm-up sessions after they close
        r = asyncio.run(play(plan, proc.proc.pid, label, log, proc.cgroup))
    finally:
        died = proc.stop()
    return _trial(server, kind, sessions, repeat, r, len(step_text.encode()), proc.start_s, died)


def _trial(
    server: Server,
    kind: TrialKind,
    sessions: int,
    repeat: int,
    r: LoadRound,
    action_bytes: int,
    start_s: float,
    died: int | None,
) -> Trial:
    before, opened, end = r.before, r.open, r.end
    per_session = cpu = tree_cpu = proc_tree_cpu = source = None
    if before and end and r.opened:
        per_session = (end.rss - before.rss) / r.opened / _MiB
    if opened and end and r.steps:
        cpu = (end.cpu_s - opened.cpu_s) / r.steps * 1000
    tree_before, tree_end = r.tree_before, r.tree_end
    if r.tree_open and tree_end and r.steps:
        proc_tree_cpu = tree_cpu = (tree_end.cpu_s - r.tree_open.cpu_s) / r.steps * 1000
        source = "proc"
        first, last = r.tree_open.cgroup_cpu_s, tree_end.cgroup_cpu_s
        if first is not None and last is not None:
            tree_cpu, source = (last - first) / r.steps * 1000, "cgroup"

    def mib(tree: TreeFigures | None, pss: bool = False) -> float | None:
        value = (tree.pss if pss else tree.rss) if tree else None
        return value / _MiB if value is not None else None

    def per(pss: bool) -> float | None:
        first, last = mib(tree_before, pss), mib(tree_end, pss)
        if first is None or last is None or not r.opened:
            return None
        return (last - first) / r.opened

    stepped = r.steps > 0 and r.step_wall_s > 0
    return Trial(
        server=server,
        kind=kind,
        sessions=sessions,
        repeat=repeat,
        held=r.held,
        errors=dict(r.errors),
        error_examples=r.examples,
        steps=r.steps,
        episode_resets=r.episode_resets,
        step_wall_s=r.step_wall_s if stepped else None,
        steps_per_s=r.steps / r.step_wall_s if stepped else None,
        step_p50_ms=percentile_ms(r.step_s, 0.5),
        step_p99_ms=percentile_ms(r.step_s, 0.99),
        reset_p50_ms=percentile_ms(r.reset_s, 0.5),
        reset_p99_ms=percentile_ms(r.reset_s, 0.99),
        connect_p99_ms=percentile_ms(r.connect_s, 0.99),
        open_wall_s=r.open_wall_s,
        client_open_cpu_s=r.open_client_cpu_s,
        rss_before_mib=before.rss / _MiB if before else None,
        rss_open_mib=end.rss / _MiB if end else None,
        rss_peak_mib=end.hwm / _MiB if end else None,
        rss_per_session_mib=per_session,
        server_threads_open=end.threads if end else None,
        server_cpu_ms_per_step=cpu,
        tree_processes_open=tree_end.processes if tree_end else None,
        tree_rss_before_mib=mib(tree_before),
        tree_rss_open_mib=mib(tree_end),
        tree_rss_peak_mib=r.tree_peak_rss / _MiB if r.tree_peak_rss else None,
        tree_rss_per_session_mib=per(pss=False),
        tree_peak_per_session_mib=(
            (r.tree_peak_rss - tree_before.rss) / r.opened / _MiB
            if tree_before and r.tree_peak_rss and r.opened
            else None
        ),
        tree_pss_before_mib=mib(tree_before, pss=True),
        tree_pss_open_mib=mib(tree_end, pss=True),
        tree_pss_per_session_mib=per(pss=True),
        tree_cpu_ms_per_step=tree_cpu,
        tree_cpu_source=source,
        tree_proc_cpu_ms_per_step=proc_tree_cpu,
        client_cpu_ms_per_step=r.client_cpu_s / r.steps * 1000 if r.steps else None,
        step_message_bytes=r.step_bytes / r.steps if r.steps else None,
        action_message_bytes=action_bytes if r.steps else None,
        reset_message_bytes=r.reset_bytes / r.opened if r.opened else None,
        server_start_s=start_s,
        server_exit=died,
        load_avg_1m=os.getloadavg()[0],
    )


def _raise_fd_limit(sessions: int) -> None:
    """Let this process and the servers it starts (they inherit it) hold the sockets."""
    needed = sessions + WARMUP_SESSIONS + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise ConfigError(
            f"--sessions {sessions} needs about {needed} open files per process, but the hard "
            f"limit is {hard}: raise it (ulimit -Hn, /etc/security/limits.conf) or use fewer "
            "sessions"
        )
    if needed > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _machine() -> dict[str, Any]:
    model = platform.processor()
    meminfo: dict[str, str] = {}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(
            (x.split(":", 1)[1].strip() for x in cpuinfo if x.startswith("model name")), model
        )
        meminfo = dict(x.split(":", 1) for x in Path("/proc/meminfo").read_text().splitlines())
    except OSError:
        pass
    packages: dict[str, str | None] = {}
    for name in ("openenv-core", "websockets", "uvicorn", "fastapi"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(int(meminfo.get("MemTotal", "0 kB").split()[0]) / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": packages,
        "load_avg_start": list(os.getloadavg()),
    }


# -- the run and its report ---------------------------------------------------------------

FIGURES = (
    # (summary key, trial kind, Trial attribute)
    ("steps_per_s", TrialKind.WARM, "steps_per_s"),
    ("step_p50_ms", TrialKind.WARM, "step_p50_ms"),
    ("step_p99_ms", TrialKind.WARM, "step_p99_ms"),
    ("first_reset_p99_ms", TrialKind.COLD, "reset_p99_ms"),
    ("warm_reset_p99_ms", TrialKind.WARM, "reset_p99_ms"),
    ("rss_per_session_mib", TrialKind.WARM, "rss_per_session_mib"),
    ("cold_rss_per_session_mib", TrialKind.COLD, "rss_per_session_mib"),
    ("cold_rss_peak_mib", TrialKind.COLD, "rss_peak_mib"),
    ("server_cpu_ms_per_step", TrialKind.WARM, "server_cpu_ms_per_step"),
    ("tree_processes_open", TrialKind.WARM, "tree_processes_open"),
    ("tree_rss_before_mib", TrialKind.WARM, "tree_rss_before_mib"),
    ("tree_rss_open_mib", TrialKind.WARM, "tree_rss_open_mib"),
    ("tree_pss_open_mib", TrialKind.WARM, "tree_pss_open_mib"),
    ("tree_rss_per_session_mib", TrialKind.WARM, "tree_rss_per_session_mib"),
    ("tree_pss_per_session_mib", TrialKind.WARM, "tree_pss_per_session_mib"),
    ("tree_peak_per_session_mib", TrialKind.WARM, "tree_peak_per_session_mib"),
    ("cold_tree_rss_per_session_mib", TrialKind.COLD, "tree_rss_per_session_mib"),
    ("cold_tree_rss_peak_mib", TrialKind.COLD, "tree_rss_peak_mib"),
    ("tree_cpu_ms_per_step", TrialKind.WARM, "tree_cpu_ms_per_step"),
    ("tree_proc_cpu_ms_per_step", TrialKind.WARM, "tree_proc_cpu_ms_per_step"),
    ("client_cpu_ms_per_step", TrialKind.WARM, "client_cpu_ms_per_step"),
    ("step_message_bytes", TrialKind.WARM, "step_message_bytes"),
)
"""What the summary gives per S and server, as median, min and max over the repeats."""


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def capacity(row: dict[str, Any]) -> dict[str, float]:
    """What one core and one GiB hold, from a summary row's medians for the whole tree:
    ``steps_per_s_per_core`` (1000 / tree CPU ms per step: steps one core sustains at
    saturation), ``sessions_per_gib_rss`` (1024 / the tree's peak RSS per session, the
    children of the commands in flight included; RSS counts a page that several processes
    share in each, so this errs low) and ``sessions_per_gib_pss`` (by the PSS of the
    sessions held open: shared pages split). A figure that was not measured, or not above
    0, is left out; the tree's RSS before the sessions comes on top."""
    found = {}
    for key, figure, scale in (
        ("steps_per_s_per_core", "tree_cpu_ms_per_step", 1000.0),
        ("sessions_per_gib_rss", "tree_peak_per_session_mib", 1024.0),
        ("sessions_per_gib_pss", "tree_pss_per_session_mib", 1024.0),
    ):
        spread = row.get(figure)
        if spread and spread["median"] > 0:
            found[key] = scale / spread["median"]
    return found


@dataclass
class ServeBench:
    """A whole ``agentgym bench --serve`` run: every trial, and how it was made."""

    command: str
    env_id: str
    action: str
    config: dict[str, Any]
    machine: dict[str, Any]
    started_at: str
    finished_at: str = ""
    trials: list[Trial] = field(default_factory=list)

    def summary(self) -> list[dict[str, Any]]:
        """Per S and server: held sessions (the fewest over the repeats), errors (all
        trials), and each of :data:`FIGURES` as median, min and max over the repeats; the
        agentgym rows add ``vs_echo``, the ratios of their medians to the echo env's."""
        rows = []
        for s in dict.fromkeys(t.sessions for t in self.trials):
            by_server = {}
            for server in SERVERS:
                mine = [t for t in self.trials if t.sessions == s and t.server == server]
                if not mine:
                    continue
                errors: Counter[str] = Counter()
                for t in mine:
                    errors.update(t.errors)
                row: dict[str, Any] = {
                    "sessions": s,
                    "server": server,
                    "repeats": sum(t.kind == TrialKind.WARM for t in mine),
                    "held_min": min(
                        (t.held for t in mine if t.kind == TrialKind.WARM), default=None
                    ),
                    "cold_held_min": min(
                        (t.held for t in mine if t.kind == TrialKind.COLD), default=None
                    ),
                    "errors": dict(errors),
                    "server_exits": sum(t.server_exit is not None for t in mine),
                }
                for key, kind, attr in FIGURES:
                    values = [getattr(t, attr) for t in mine if t.kind == kind]
                    row[key] = _spread([v for v in values if v is not None])
                row["capacity"] = capacity(row)
                by_server[server] = row
                rows.append(row)
            ours, echo = by_server.get(Server.AGENTGYM), by_server.get(Server.ECHO)
            if ours and echo:
                ours["vs_echo"] = {
                    key: ours[key]["median"] / echo[key]["median"]
                    for key in (
                        "steps_per_s",
                        "step_p99_ms",
                        "server_cpu_ms_per_step",
                        "rss_per_session_mib",
                        "first_reset_p99_ms",
                    )
                    if ours[key] and echo[key] and echo[key]["median"]
                }
        return rows

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


COLUMNS = (
    "S",
    "server",
    "held warm / cold",
    "errors",
    "steps/s",
    "step P50 ms",
    "step P99 ms",
    "first reset P99 ms (cold)",
    "server MiB/session (warm)",
    "server CPU ms/step",
    "tree procs",
    "tree MiB/session RSS / peak / PSS (warm)",
    "tree CPU ms/step",
    "bytes/step",
)


TREE_MEMORY = ("rss", "peak", "pss")  # the tree's MiB per session in the table, in order


def _fmt(spread: dict[str, float] | None, digits: int) -> str:
    if spread is None:
        return "-"
    one = f"{{:,.{digits}f}}"
    median = one.format(spread["median"])
    if spread["min"] == spread["max"]:
        return median
    return f"{median} ({one.format(spread['min'])}-{one.format(spread['max'])})"


def table_rows(result: ServeBench) -> list[list[str]]:
    """The summary as table cells (median, and min-max over the repeats), :data:`COLUMNS`."""
    rows = []
    for r in result.summary():
        errors = ", ".join(f"{n} {kind}" for kind, n in sorted(r["errors"].items())) or "0"
        if r["server_exits"]:
            errors += f", server died in {r['server_exits']} trial(s)"
        rows.append(
            [
                str(r["sessions"]),
                r["server"],
                f"{r['held_min']} / {r['cold_held_min']}",
                errors,
                _fmt(r["steps_per_s"], 0),
                _fmt(r["step_p50_ms"], 1),
                _fmt(r["step_p99_ms"], 1),
                _fmt(r["first_reset_p99_ms"], 0),
                _fmt(r["rss_per_session_mib"], 3),
                _fmt(r["server_cpu_ms_per_step"], 3),
                _fmt(r["tree_processes_open"], 0),
                " / ".join(_fmt(r[f"tree_{m}_per_session_mib"], 1) for m in TREE_MEMORY),
                _fmt(r["tree_cpu_ms_per_step"], 3),
                _fmt(r["step_message_bytes"], 0),
            ]
        )
    return rows


def ratio_lines(result: ServeBench) -> list[str]:
    """Per S, agentgym's medians over the echo env's."""
    names = {
        "steps_per_s": "steps/s",
        "step_p99_ms": "step P99",
        "server_cpu_ms_per_step": "CPU/step",
        "rss_per_session_mib": "RSS/session",
        "first_reset_p99_ms": "first reset P99",
    }
    lines = []
    for r in result.summary():
        if "vs_echo" in r:
            ratios = ", ".join(f"{names[k]} {v:.2f}x" for k, v in r["vs_echo"].items())
            lines.append(f"S={r['sessions']}: agentgym / echo: {ratios}")
    return lines


def capacity_lines(result: ServeBench) -> list[str]:
    """Per S and server, the capacity of the whole tree (:func:`capacity`)."""
    lines = []
    for r in result.summary():
        cap, base = r["capacity"], r["tree_rss_before_mib"]
        if not cap:
            continue
        said = []
        if "steps_per_s_per_core" in cap:
            said.append(f"{cap['steps_per_s_per_core']:,.1f} steps/s per core")
        if "sessions_per_gib_rss" in cap:
            pss = cap.get("sessions_per_gib_pss")
            said.append(
                f"{cap['sessions_per_gib_rss']:,.1f} sessions per GiB of peak tree RSS"
                + (f" ({pss:,.1f} by the PSS of those held)" if pss else "")
            )
        if base:
            said.append(f"over a tree of {base['median']:,.0f} MiB RSS before the sessions")
        lines.append(f"S={r['sessions']} {r['server']}, whole tree: " + ", ".join(said))
    return lines


def markdown(result: ServeBench) -> str:
    """The summary table in Markdown, with the command and the machine."""
    m = result.machine
    head = [
        f"`{result.command}`",
        "",
        f"{result.env_id}, action `{result.action}`; {m['cpus']} CPUs ({m['cpu_model']}), "
        f"{m['memory_gib']} GiB, Python {m['python']}, "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items())
        + f"; load average {m['load_avg_start'][0]:.2f} at the start, "
        f"{m.get('load_avg_end', [float('nan')])[0]:.2f} at the end.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    body = ["| " + " | ".join(row) + " |" for row in table_rows(result)]
    lines = [*ratio_lines(result), *capacity_lines(result)]
    return "\n".join([*head, *body, "", *(f"- {x}" for x in lines)]) + "\n"


def print_serve_bench(result: ServeBench, console: Any) -> None:
    """The summary as a rich table on ``console``."""
    from rich.table import Table

    table = Table(
        title=f"OpenEnv serving: {result.env_id} vs OpenEnv's echo env "
        "(median, min-max over the repeats)"
    )
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("server", "errors") else "right")
    for row in table_rows(result):
        table.add_row(*row)
    console.print(table)
    for line in [*ratio_lines(result), *capacity_lines(result)]:
        console.print(line, highlight=False)
    console.print(result.command, soft_wrap=True, highlight=False, markup=False)


def bench_serve(
    cfg: ServeBenchConfig,
    log: ProgressLog,
    *,
    out: str | Path | None = None,
    log_path: str | Path | None = None,
) -> ServeBench:
    """Run every trial of ``cfg`` (see the module doc).

    Args:
        cfg: what to run.
        log: where progress lines go.
        out, log_path: recorded in the command (where the caller writes the results and
            the log).

    Raises:
        EnvNotFoundError: ``cfg.env`` is not registered.
        ConfigError: the env has no example action and none was given, or the open-file
            limit is below what S needs.
        MissingExtraError: openenv-core is not installed.
    """
    entry = find(cfg.env)
    action = cfg.action or env_class(entry).example_action
    if not action:
        raise ConfigError(
            f"{entry.id} declares no example_action to step with; pass --action TEXT, one "
            "valid action of the env (a cheap tool call)"
        )
    _raise_fd_limit(max(cfg.sessions))
    result = ServeBench(
        command=cfg.command(out, log_path),
        env_id=entry.id,
        action=action,
        config=asdict(cfg),
        machine=_machine(),
        started_at=_now(),
    )
    total = len(cfg.sessions) * cfg.repeats * len(SERVERS) * 2
    log.line(f"{result.command}: {total} trials, each on a fresh server")
    with tempfile.TemporaryDirectory(prefix="agentgym-serve-bench-") as tmp:
        echo = render_echo_env(Path(tmp))
        for s in cfg.sessions:
            for repeat in range(cfg.repeats):
                for server in SERVERS if repeat % 2 == 0 else SERVERS[::-1]:
                    for kind in TrialKind:
                        t = run_trial(server, kind, s, repeat, cfg, entry.id, action, echo, log)
                        result.trials.append(t)
                        log.line(f"[{len(result.trials)}/{total}] {_trial_line(t)}")
    result.finished_at = _now()
    result.machine["load_avg_end"] = list(os.getloadavg())
    return result


def _trial_line(t: Trial) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f} ms"

    errors = sum(t.errors.values())
    text = (
        f"S={t.sessions} #{t.repeat + 1} {t.server} {t.kind}: held {t.held}/{t.sessions}"
        f"{f' ({errors} errors: {t.errors})' if errors else ''}, reset P99 {ms(t.reset_p99_ms)}"
    )
    if t.kind == TrialKind.WARM and t.steps_per_s is not None:
        text += (
            f", {t.steps:,} steps at {t.steps_per_s:,.0f}/s, P50 {ms(t.step_p50_ms)} "
            f"P99 {ms(t.step_p99_ms)}, {t.rss_per_session_mib or 0:.3f} MiB/session, "
            f"{t.server_cpu_ms_per_step or 0:.3f} CPU ms/step, "
            f"{t.step_message_bytes or 0:,.0f} B/step; tree of {t.tree_processes_open} "
            f"processes: {t.tree_rss_per_session_mib or 0:.1f} MiB/session (RSS; peak "
            f"{t.tree_peak_per_session_mib or 0:.1f}), "
            f"{t.tree_cpu_ms_per_step or 0:.3f} CPU ms/step"
        )
    else:
        text += (
            f", peak RSS {t.rss_peak_mib or 0:,.0f} MiB (tree: {t.tree_rss_peak_mib or 0:,.0f} MiB)"
        )
    return text + f" (load {t.load_avg_1m:.2f})"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_results(result: ServeBench, out: str | Path) -> tuple[Path, Path]:
    """Write the JSON to ``out`` and the Markdown table next to it (``.md``)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    table = path.with_suffix(".md")
    table.write_text(markdown(result))
    return path, table
