"""``agentgym openenv serve ENV``: serve an env as an OpenEnv environment server.

Added to ``agentgym`` through the ``agentgym_envs.cli`` entry point ``openenv``; this
module imports only argparse-light code until the command runs.
"""

from __future__ import annotations

import argparse
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
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console.print(
        f"Serving {server.env_id} over OpenEnv at {server.url} (WebSocket sessions at "
        f"{server.url.replace('http', 'ws', 1)}/ws, at most {args.max_sessions})",
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
