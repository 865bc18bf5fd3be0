"""``agentgym openenv serve ENV``: serve an env as an OpenEnv environment server.

Added to ``agentgym`` through the ``agentgym_envs.cli`` entry point ``openenv``; this
module imports only argparse-light code until the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import threading
from typing import Any

from agentgym_envs.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    """Register ``agentgym openenv`` and its ``serve`` subcommand."""
    p = sub.add_parser(
        "openenv",
        help="serve an env over the OpenEnv protocol (TRL, SkyRL, torchforge, Unsloth)",
        description="OpenEnv integration: serve an env so that OpenEnv clients play it.",
    )
    osub = p.add_subparsers(dest="openenv_command", required=True)
    s = osub.add_parser(
        "serve",
        help="serve an env as an OpenEnv environment server",
        description="Serve ENV until SIGINT or SIGTERM: WebSocket sessions at /ws (one env "
        "per session, closed when the session ends or expires), HTTP /reset /step /state "
        "/schema /metadata /health. Sessions made over HTTP POST /mcp (held by no "
        "connection) are refused unless --max-mcp-sessions allows some. Needs the openenv "
        "extra: pip install 'agentgym-envs[openenv]'.",
    )
    s.add_argument("env", help="env id or name, e.g. Sokoban or agentgym/Retail-v1")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one)")
    s.add_argument(
        "--max-sessions",
        type=int,
        default=8,
        help="most concurrent sessions, each with its own env (default 8)",
    )
    s.add_argument(
        "--unused-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="close a session with no reset or step this long after it opened, freeing "
        "its slot (default 60; 'never' turns it off)",
    )
    s.add_argument(
        "--idle-timeout",
        "--session-timeout",
        dest="idle_timeout",
        type=_seconds,
        default=900.0,
        metavar="SECONDS",
        help="close a session whose last reset or step is this old (default 900; "
        "'never' turns it off; --session-timeout is its old name)",
    )
    s.add_argument(
        "--max-mcp-sessions",
        type=int,
        default=0,
        metavar="N",
        help="allow N sessions made by HTTP POST /mcp openenv/session/create, which no "
        "connection holds (default 0: refused; must be below --max-sessions)",
    )
    s.add_argument(
        "--max-sessions-per-client",
        type=int,
        default=None,
        metavar="N",
        help="most sessions one client address holds (default: no cap; all loopback "
        "clients share one address)",
    )
    s.add_argument(
        "--executor",
        choices=("auto", "loop", "thread"),
        default="auto",
        help="where sessions' envs run: loop (the server's event loop, no thread per "
        "session), thread (a thread per session) or auto (loop for cheap pure-Python envs, "
        "thread for envs with a browser or a sandbox; the default)",
    )
    s.add_argument(
        "--preload",
        action="store_true",
        help="build the env's shared read-only state (task sets, catalogs, world "
        "templates) before serving, so the first sessions find it built (envs served on "
        "the event loop; without it the first reset builds it once)",
    )
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve from N processes that share the port (Linux; default 1): sessions use "
        "N cores, each session stays in the process that took its connection; "
        "--max-sessions bounds them all together, --max-sessions-per-client applies per "
        "process; HTTP MCP sessions need --workers 1",
    )
    s.add_argument(
        "--env-kwargs",
        default=None,
        help="gym.make keyword arguments as a JSON object, e.g. '{\"max_steps\": 30}'",
    )
    s.set_defaults(func=cmd_serve)


def _seconds(text: str) -> float | None:
    """A timeout on the command line: seconds, or ``never`` (None)."""
    if text.strip().lower() == "never":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds or 'never', got {text!r}"
        ) from None


def _env_kwargs(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--env-kwargs must be a JSON object, got {text!r} ({exc}); "
            "e.g. --env-kwargs '{\"max_steps\": 30}'"
        ) from exc
    if not isinstance(value, dict):
        raise ConfigError(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    from rich.console import Console

    from agentgym_envs.integrations.openenv import serve

    console = Console()
    if args.workers != 1:
        return _serve_workers(args, console)
    server = serve(
        args.env,
        host=args.host,
        port=args.port,
        make_kwargs=_env_kwargs(args.env_kwargs),
        max_sessions=args.max_sessions,
        unused_timeout_s=args.unused_timeout,
        idle_timeout_s=args.idle_timeout,
        max_mcp_sessions=args.max_mcp_sessions,
        max_sessions_per_client=args.max_sessions_per_client,
        executor=args.executor,
        preload_state=args.preload,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    where = "on the event loop" if server.inline else "a thread each"
    console.print(
        f"Serving {server.env_id} over OpenEnv at {server.url} (WebSocket sessions at "
        f"{server.url.replace('http', 'ws', 1)}/ws, at most {args.max_sessions}, {where})",
        soft_wrap=True,
        highlight=False,
    )
    try:
        while not stop.wait(0.5):  # a timed wait keeps the main thread responsive to signals
            pass
    finally:
        console.print("Shutting down")
        server.close()
    return 0


def _serve_workers(args: argparse.Namespace, console: Any) -> int:
    """``--workers N``: N processes forked after the socket is bound (and the shared state
    preloaded, which they then share copy-on-write), each an OpenEnv server on its own
    event loop accepting from the one socket; the parent waits for SIGINT or SIGTERM and
    stops them."""
    import os
    import traceback

    from agentgym_envs.integrations.openenv import (
        SessionLimits,
        bind_socket,
        create_openenv_app,
        preload_for_serving,
        runs_inline,
        server_config,
    )
    from agentgym_envs.integrations.openenv_sessions import SharedSlots
    from agentgym_envs.registration import find

    workers = args.workers
    if workers < 1 or not hasattr(os, "fork"):
        raise ConfigError(f"--workers must be >= 1 (and > 1 needs Linux's fork), got {workers}")
    if args.max_mcp_sessions:
        raise ConfigError(
            "--max-mcp-sessions needs --workers 1: an HTTP MCP session lives in one "
            "process, and the next request of its client may reach another"
        )
    entry, make_kwargs = find(args.env), _env_kwargs(args.env_kwargs)
    limits = SessionLimits(
        max_sessions=args.max_sessions,
        unused_timeout_s=args.unused_timeout,
        idle_timeout_s=args.idle_timeout,
        max_sessions_per_client=args.max_sessions_per_client,
    )
    runs_inline(entry, args.executor, make_kwargs)  # a bad --executor fails before any fork
    slots = SharedSlots(args.max_sessions)  # --max-sessions bounds all the workers together
    if args.preload:
        preload_for_serving(entry, args.executor, make_kwargs)
    sock = bind_socket(args.host, args.port)
    sock.listen(2048)  # connections queue from now on, before any worker accepts
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker: serve until told to stop, then leave without cleanup
            code = 1
            try:
                _stop_with_parent()
                app = create_openenv_app(
                    entry.id,
                    make_kwargs=make_kwargs,
                    limits=limits,
                    executor=args.executor,
                    slots=slots,
                )
                import uvicorn

                uvicorn.Server(server_config(app)).run(sockets=[sock])
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        children.append(pid)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    console.print(
        f"Serving {entry.id} over OpenEnv at {url} (WebSocket sessions at "
        f"{url.replace('http', 'ws', 1)}/ws, at most {args.max_sessions}, {workers} worker "
        "processes)",
        soft_wrap=True,
        highlight=False,
    )
    try:
        while not stop.wait(0.5) and all(_alive(pid) for pid in children):
            pass
    finally:
        console.print("Shutting down")
        failed = _stop_workers(children)
        sock.close()
    return 1 if failed else 0


def _stop_with_parent() -> None:
    """Have the kernel SIGTERM this worker when the process that forked it dies, even by
    SIGKILL (Linux's PR_SET_PDEATHSIG), so that no worker outlives its server."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _alive(pid: int) -> bool:
    import os

    done, _ = os.waitpid(pid, os.WNOHANG)
    return done == 0


def _stop_workers(children: list[int], timeout_s: float = 30.0) -> int:
    """SIGTERM each worker (uvicorn's graceful stop closes its sessions' envs), wait, and
    SIGKILL what is left; returns how many did not exit cleanly."""
    import os
    import time

    failed = 0
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in children:
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped already (it died while we served)
                failed += 1
                break
            if done:  # uvicorn stops gracefully, then re-raises the SIGTERM it caught
                failed += os.waitstatus_to_exitcode(status) not in (0, -signal.SIGTERM)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                failed += 1
                break
            time.sleep(0.05)
    return failed
