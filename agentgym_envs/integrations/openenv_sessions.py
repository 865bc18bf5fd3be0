"""Who gets a session on the OpenEnv server, and when a session expires.

openenv-core keeps a session until its client ends it, and by default never expires one:
three ``POST /mcp {"method": "openenv/session/create"}`` against ``--max-sessions 3``
took every slot until a restart. :class:`AgentGymEnvServer` (openenv-core's
``HTTPEnvServer`` with its admission and reaper replaced) adds three rules, set by
:class:`SessionLimits`:

* **Expiry, on by default.** A session in which nothing was played (no ``reset``,
  ``step`` or MCP call) expires ``unused_timeout_s`` after it opened (60 s); a session
  whose last play is ``idle_timeout_s`` old expires too (15 minutes). A reset or step in
  progress is never cut. An expired session's env is closed and its slot freed; its
  WebSocket stays open and answers every later message with an error that says the
  session expired (:class:`~agentgym_envs.integrations.openenv.OpenEnvGymEnv` then opens
  a new session on its next ``reset``).
* **HTTP MCP sessions are capped below max_sessions, at 0 by default.** A session made by
  ``POST /mcp openenv/session/create`` is held by no connection: when its client walks
  away nothing ends it but a timeout, so a few such requests could take every slot.
  agentgym envs serve no MCP tools, so such a session can do nothing but hold its slot:
  the server refuses them unless ``max_mcp_sessions`` allows some, and then at most
  ``max_sessions - 1``, so WebSocket clients always keep a slot.
* **A per-client cap, off by default.** ``max_sessions_per_client`` bounds the sessions
  one peer address holds. It is off by default because an address is a poor name for a
  client: every loopback client shares ``127.0.0.1``, clients behind one NAT or proxy
  share its address, and a trainer on another machine honestly opens ``max_sessions``
  sessions from one address. Set it on a server that several machines share.

A WebSocket session costs its holder a live connection and, past the unused grace, play;
the cap on HTTP MCP sessions and the expiry are what stop a client that holds nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openenv.core.env_server import ConcurrencyConfig, Environment
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer

from agentgym_envs.core.errors import ConfigError

__all__ = ["EXPIRED", "AgentGymEnvServer", "CallerMiddleware", "SessionLimits"]

logger = logging.getLogger(__name__)

EXPIRED = "the session expired"
"""Starts the reason an expired session's env gives for being closed (clients look for it)."""


@dataclass(frozen=True)
class SessionLimits:
    """How many sessions the server gives, to whom, and for how long.

    Attributes:
        max_sessions: the most concurrent sessions, each with its own env.
        unused_timeout_s: a session in which nothing was played this long after it
            opened expires (None: never).
        idle_timeout_s: a session whose last reset, step or MCP call is this old expires
            (None: never).
        max_mcp_sessions: the most sessions made over HTTP ``POST /mcp`` (held by no
            connection); below ``max_sessions``.
        max_sessions_per_client: the most sessions one peer address holds (None: no cap).
    """

    max_sessions: int = 8
    unused_timeout_s: float | None = 60.0
    idle_timeout_s: float | None = 900.0
    max_mcp_sessions: int = 0
    max_sessions_per_client: int | None = None

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ConfigError(
                f"max_sessions (--max-sessions) must be >= 1, got {self.max_sessions}"
            )
        for name in ("unused_timeout_s", "idle_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ConfigError(
                    f"{name} must be > 0 seconds (or None: never), got {value!r}; "
                    "on the command line, --unused-timeout/--idle-timeout never turns it off"
                )
        if not 0 <= self.max_mcp_sessions < self.max_sessions:
            raise ConfigError(
                f"max_mcp_sessions (--max-mcp-sessions) must be >= 0 and below max_sessions "
                f"({self.max_sessions}), got {self.max_mcp_sessions}: sessions that no "
                "connection holds may never take every slot"
            )
        cap = self.max_sessions_per_client
        if cap is not None and cap < 1:
            raise ConfigError(
                f"max_sessions_per_client (--max-sessions-per-client) must be >= 1 (or None: "
                f"no cap), got {cap}"
            )


@dataclass(frozen=True)
class _Caller:
    """Who asks for a session: the peer address, and whether a connection holds it."""

    host: str
    held: bool  # a WebSocket: the session ends with the connection


_CALLER: contextvars.ContextVar[_Caller | None] = contextvars.ContextVar(
    "agentgym_openenv_caller", default=None
)


class CallerMiddleware:
    """ASGI middleware: tells the session server who is asking (peer address, and
    whether the request is a WebSocket, which holds its session, or plain HTTP)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("unknown", 0)
        token = _CALLER.set(_Caller(str(client[0]), scope["type"] == "websocket"))
        try:
            await self.app(scope, receive, send)
        finally:
            _CALLER.reset(token)


class AgentGymEnvServer(HTTPEnvServer):  # type: ignore[misc]  # openenv-core is untyped
    """openenv-core's server with session admission and expiry (see the module doc).

    Args:
        factory: makes a session's environment.
        action_cls: the wire type of an action.
        observation_cls: the wire type of an observation.
        limits: the session limits.
    """

    def __init__(
        self,
        factory: Callable[[], Environment],
        action_cls: type,
        observation_cls: type,
        limits: SessionLimits,
    ) -> None:
        config = ConcurrencyConfig(max_concurrent_envs=limits.max_sessions, session_timeout=None)
        super().__init__(factory, action_cls, observation_cls, concurrency_config=config)
        self.limits = limits
        self._callers: dict[str, _Caller] = {}
        self._asking: list[_Caller] = []  # admitted, their env still being made
        self._opened: dict[str, float] = {}
        self._played: dict[str, float] = {}  # monotonic time of the last play
        self._busy: Counter[str] = Counter()  # resets and steps running now
        self._expiry: asyncio.Task[None] | None = None

    # -- admission -------------------------------------------------------------------

    async def _create_session(self) -> tuple[str, Environment]:
        caller = _CALLER.get() or _Caller("unknown", held=False)
        self._admit(caller)
        self._asking.append(caller)
        try:
            session_id, env = await super()._create_session()
        finally:
            self._asking.remove(caller)
        self._callers[session_id] = caller
        self._opened[session_id] = time.monotonic()
        return session_id, env

    def _admit(self, caller: _Caller) -> None:
        """Raise ``SessionCapacityError`` (answered to the client) when a rule refuses."""
        self._forget_ended()
        callers = [*self._callers.values(), *self._asking]
        active, limits = len(self._sessions), self.limits
        if not caller.held:
            mcp = sum(not c.held for c in callers)
            if limits.max_mcp_sessions == 0:
                raise SessionCapacityError(
                    active,
                    limits.max_sessions,
                    "HTTP MCP sessions are off on this server: agentgym envs serve no MCP "
                    "tools, and a session that no connection holds keeps its slot until it "
                    "expires. Play over the WebSocket session at /ws (OpenEnv's EnvClient, "
                    "OpenEnvGymEnv), or start the server with --max-mcp-sessions N",
                )
            if mcp >= limits.max_mcp_sessions:
                raise SessionCapacityError(
                    active,
                    limits.max_sessions,
                    f"{mcp} HTTP MCP sessions are open, the most this server allows "
                    f"(--max-mcp-sessions {limits.max_mcp_sessions}); close one with "
                    "openenv/session/close or wait until one expires",
                )
        cap = limits.max_sessions_per_client
        mine = sum(c.host == caller.host for c in callers)
        if cap is not None and mine >= cap:
            raise SessionCapacityError(
                active,
                limits.max_sessions,
                f"the client {caller.host} holds {mine} sessions, the most one client may "
                f"hold (--max-sessions-per-client {cap}); close one first",
            )

    def _forget_ended(self) -> None:
        """Drop the bookkeeping of sessions that ended (``openenv/session/close`` removes
        a session without going through ``_destroy_session``)."""
        for session_id in [s for s in self._callers if s not in self._sessions]:
            self._callers.pop(session_id, None)
            self._opened.pop(session_id, None)
            self._played.pop(session_id, None)
            self._busy.pop(session_id, None)

    # -- activity ----------------------------------------------------------------------

    def _update_session_activity(self, session_id: str, increment_step: bool = False) -> None:
        super()._update_session_activity(session_id, increment_step)  # after a reset/step/MCP
        if session_id in self._callers:
            self._played[session_id] = time.monotonic()

    async def _run_in_session_executor(
        self, session_id: str, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        # a WebSocket reset or step: never expire a session in the middle of one
        known = session_id in self._callers
        if known:
            self._busy[session_id] += 1
            self._played[session_id] = time.monotonic()
        try:
            return await super()._run_in_session_executor(session_id, func, *args, **kwargs)
        finally:
            if known and session_id in self._callers:  # not forgotten meanwhile
                self._busy[session_id] -= 1
                self._played[session_id] = time.monotonic()

    # -- expiry ------------------------------------------------------------------------

    def expired(self, now: float) -> dict[str, str]:
        """The open sessions that expired by ``now`` (monotonic), with why."""
        self._forget_ended()
        unused, idle = self.limits.unused_timeout_s, self.limits.idle_timeout_s
        found = {}
        for session_id, opened in self._opened.items():
            if self._sessions.get(session_id) is None or self._busy[session_id] > 0:
                continue
            played = self._played.get(session_id)
            if played is None and unused is not None and now - opened > unused:
                found[session_id] = (
                    f"{EXPIRED}: no reset or step in its first {unused:g} s (the server's "
                    "--unused-timeout)"
                )
            elif played is not None and idle is not None and now - played > idle:
                found[session_id] = (
                    f"{EXPIRED}: no reset or step for {idle:g} s (the server's --idle-timeout)"
                )
        return found

    def _start_reaper(self) -> None:
        timeouts = [t for t in (self.limits.unused_timeout_s, self.limits.idle_timeout_s) if t]
        if timeouts and self._expiry is None:
            every = min(5.0, max(0.05, min(timeouts) / 4))
            self._expiry = asyncio.create_task(self._reap(every))

    async def _reap(self, every: float) -> None:
        """Close expired sessions, every ``every`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(every)
            try:
                for session_id, why in self.expired(time.monotonic()).items():
                    env = self._sessions.get(session_id)
                    if env is not None and hasattr(env, "closed_because"):
                        env.closed_because = why
                    logger.info("session %s: %s", session_id, why)
                    await self._destroy_session(session_id)
            except Exception:  # the reaper must outlive any one failed close
                logger.exception("closing an expired OpenEnv session failed")

    def _stop_reaper(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
