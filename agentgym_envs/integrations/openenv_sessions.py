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
A client refused because every slot is taken gets the error code ``CAPACITY_REACHED`` and a
message that says so, naming ``--max-sessions``.

**Where a session's env runs.** The server answers ``/ws`` itself (openenv-core's protocol,
message for message; see :mod:`.openenv_wire` for what a step message carries). With
``inline`` (cheap envs: pure Python steps of microseconds), every session's env runs on the
server's event loop: no thread per session; the env's shared read-only state (task sets,
catalogs, world templates) is built once in a worker thread, started as the server starts,
and the first sessions wait for it off the loop, so that concurrent first sessions never
each build it nor stall each other's handshakes. Otherwise (heavy envs: a
browser, a sandbox) each session gets a thread of its own, as openenv-core gives it, and
``max_sessions`` bounds them. Either way each session has its own env instance.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import WebSocket, WebSocketDisconnect
from openenv.core.env_server import ConcurrencyConfig, Environment
from openenv.core.env_server.exceptions import EnvironmentFactoryError, SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.mcp_types import (
    JsonRpcErrorCode,
    JsonRpcRequest,
    JsonRpcResponse,
    McpMethod,
    WSMCPMessage,
)
from openenv.core.env_server.serialization import deserialize_action
from openenv.core.env_server.types import (
    WSCloseMessage,
    WSErrorCode,
    WSResetMessage,
    WSStateMessage,
    WSStepMessage,
)
from pydantic import ValidationError

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.extras import jsonable

__all__ = ["EXPIRED", "AgentGymEnvServer", "CallerMiddleware", "SessionLimits", "SharedSlots"]

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


class SharedSlots:
    """The sessions that the worker processes of one server (``--workers``) hold together:
    a semaphore made before they fork, so that ``--max-sessions`` bounds them all however
    the kernel spreads the connections."""

    def __init__(self, total: int) -> None:
        import multiprocessing

        self.total = total
        self._free = multiprocessing.get_context("fork").BoundedSemaphore(total)

    def take(self) -> bool:
        """Take a slot if one is free (never waits)."""
        return bool(self._free.acquire(block=False))

    def give(self) -> None:
        """Give a slot back."""
        self._free.release()


class _InlineExecutor(concurrent.futures.Executor):
    """Runs each call at once, in the calling thread (the server's event loop): what
    openenv-core runs in a session's executor (making and closing its env) then needs no
    thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


class AgentGymEnvServer(HTTPEnvServer):  # type: ignore[misc]  # openenv-core is untyped
    """openenv-core's server with session admission and expiry, and its own ``/ws``
    endpoint (see the module doc).

    Args:
        factory: makes a session's environment.
        action_cls: the wire type of an action.
        observation_cls: the wire type of an observation.
        limits: the session limits.
        inline: run every session's env on the event loop (cheap envs) instead of in a
            thread per session.
        warm: builds the env's shared read-only state once (inline servers run it in a
            worker thread from :meth:`start_warming`, and make no env before it is done);
            None: nothing to build.
        slots: the session count shared with the other worker processes of one server
            (``--workers``), on top of this process's own limits.
    """

    def __init__(
        self,
        factory: Callable[[], Environment],
        action_cls: type,
        observation_cls: type,
        limits: SessionLimits,
        *,
        inline: bool = False,
        warm: Callable[[], object] | None = None,
        slots: SharedSlots | None = None,
    ) -> None:
        config = ConcurrencyConfig(max_concurrent_envs=limits.max_sessions, session_timeout=None)
        super().__init__(factory, action_cls, observation_cls, concurrency_config=config)
        self.limits = limits
        self.inline = inline
        if inline:  # openenv-core makes and closes a session's env here: no thread each
            self._shared_session_executor = _InlineExecutor()
        self.slots = slots
        self._holding: set[str] = set()  # sessions that hold one of the shared slots
        self._warm = warm if inline else None
        self._warming: asyncio.Future[Any] | None = None
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
        if self.slots is not None and not self.slots.take():
            raise SessionCapacityError(
                len(self._sessions),
                self.slots.total,
                f"the server is at capacity: its {self.slots.total} sessions (--max-sessions, "
                "shared by its worker processes) are open, each with its own env. Retry once "
                "a session closes, or start the server with a larger --max-sessions",
            )
        self._asking.append(caller)
        try:
            await self._warmed()  # the first env made on the loop would build it there
            session_id, env = await super()._create_session()
        except BaseException:
            if self.slots is not None:
                self.slots.give()
            raise
        finally:
            self._asking.remove(caller)
        if self.slots is not None:
            self._holding.add(session_id)
        self._callers[session_id] = caller
        self._opened[session_id] = time.monotonic()
        return session_id, env

    async def _destroy_session(self, session_id: str) -> None:
        await super()._destroy_session(session_id)
        if session_id in self._holding:  # give the shared slot back, once
            self._holding.discard(session_id)
            self.slots.give()  # type: ignore[union-attr]  # held only with slots

    def _admit(self, caller: _Caller) -> None:
        """Raise ``SessionCapacityError`` (answered to the client) when a rule refuses."""
        self._forget_ended()
        callers = [*self._callers.values(), *self._asking]
        active, limits = len(self._sessions), self.limits
        if active >= limits.max_sessions:
            raise SessionCapacityError(
                active,
                limits.max_sessions,
                f"the server is at capacity: {active} of {limits.max_sessions} sessions are "
                "open (--max-sessions), each with its own env. Retry once a session closes, "
                "or start the server with a larger --max-sessions",
            )
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
            if self.inline:
                return func(*args, **kwargs)
            return await super()._run_in_session_executor(session_id, func, *args, **kwargs)
        finally:
            if known and session_id in self._callers:  # not forgotten meanwhile
                self._busy[session_id] -= 1
                self._played[session_id] = time.monotonic()

    # -- the WebSocket session ---------------------------------------------------------

    def register_routes(self, app: Any, mode: Any = "simulation") -> None:
        """openenv-core's routes, with ``/ws`` answered by :meth:`websocket_session`."""
        super().register_routes(app, mode)
        app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", "") != "/ws"]
        app.add_api_websocket_route("/ws", self.websocket_session)

    async def websocket_session(self, websocket: WebSocket) -> None:
        """One session: openenv-core's ``/ws`` protocol (``reset``, ``step``, ``state``,
        ``close``, ``mcp``), answered with the env's own wire messages."""
        await websocket.accept()
        session_id = None
        try:
            session_id, env = await self._create_session()
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                raw = message.get("text")
                answer = await self._answer(session_id, env, raw or message.get("bytes") or b"")
                if answer is None:
                    break
                await websocket.send_text(answer)
        except WebSocketDisconnect:
            pass
        except SessionCapacityError as exc:
            await _send_quietly(
                websocket,
                _error(
                    str(exc),
                    WSErrorCode.CAPACITY_REACHED,
                    active_sessions=exc.active_sessions,
                    max_sessions=exc.max_sessions,
                ),
            )
        except EnvironmentFactoryError as exc:
            await _send_quietly(
                websocket,
                _error(str(exc), WSErrorCode.FACTORY_ERROR, factory_name=exc.factory_name),
            )
        except Exception as exc:
            logger.exception("OpenEnv session %s failed", session_id)
            await _send_quietly(websocket, _error(str(exc), WSErrorCode.SESSION_ERROR))
        finally:
            if session_id:
                await self._destroy_session(session_id)
            with contextlib.suppress(RuntimeError):
                await websocket.close()

    async def _answer(self, session_id: str, env: Any, raw: str | bytes) -> str | None:
        """The answer to one message (None: the client closed the session)."""
        try:
            message = orjson.loads(raw)
        except orjson.JSONDecodeError:
            try:  # JSON's \ud800 escape: a lone surrogate orjson refuses, a policy may send
                message = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, nesting
                return _error(f"Invalid JSON: {exc}"[:300], WSErrorCode.INVALID_JSON)
        kind = message.get("type", "") if isinstance(message, dict) else ""
        try:
            if kind == "step":
                step = WSStepMessage(**message)
                action = deserialize_action(step.data, self.action_cls)
                answer: str = await self._run_in_session_executor(
                    session_id, env.step_message, action
                )
                self._update_session_activity(session_id, increment_step=True)
            elif kind == "reset":
                reset = WSResetMessage(**message)
                await self._warmed()
                answer = await self._run_in_session_executor(
                    session_id, env.reset_message, reset.data
                )
                self._update_session_activity(session_id)
            elif kind == "state":
                WSStateMessage(**message)
                answer = env.state_message()
            elif kind == "close":
                WSCloseMessage(**message)
                return None
            elif kind == "mcp":
                answer = await self._mcp(session_id, WSMCPMessage(**message).data)
            else:
                answer = _error(f"Unknown message type: {kind}", WSErrorCode.UNKNOWN_TYPE)
        except ValidationError as exc:
            errors = jsonable(exc.errors(include_url=False))
            return _error("Invalid message", WSErrorCode.VALIDATION_ERROR, errors=errors)
        except Exception as exc:  # the env's own error, answered as openenv-core answers it
            return _error(str(exc), WSErrorCode.EXECUTION_ERROR)
        return answer

    def start_warming(self) -> None:
        """Start building the env's shared state in a worker thread (as the server
        starts: the first sessions then find it built, or wait for it off the loop)."""
        if self._warm is not None and self._warming is None:
            self._warming = asyncio.ensure_future(asyncio.to_thread(self._warm))

    async def _warmed(self) -> None:
        """Wait until the env's shared state is built (once, in a worker thread)."""
        if self._warm is None:
            return
        self.start_warming()
        assert self._warming is not None
        try:
            await asyncio.shield(self._warming)
        except Exception:  # a session's own reset then says what is wrong
            logger.exception("warming up the env's shared state failed")
        self._warm = None

    async def _mcp(self, session_id: str, data: dict[str, Any]) -> str:
        """An MCP JSON-RPC request over the session: agentgym envs serve no MCP tools, so
        only openenv-core's session methods do anything."""
        try:
            request = JsonRpcRequest(**data)
        except Exception as exc:
            response = JsonRpcResponse.error_response(
                JsonRpcErrorCode.INVALID_REQUEST, f"Invalid request: {exc}"
            )
        else:
            response = await self._mcp_response(session_id, request)
        return orjson.dumps({"type": "mcp", "data": jsonable(response.model_dump())}).decode()

    async def _mcp_response(self, session_id: str, request: Any) -> Any:
        """openenv-core's answers to the session methods, and "not supported" to the tools
        methods (what openenv-core answers for an env without MCP tools)."""
        method, rid, params = request.method, request.id, request.params
        if method == "openenv/session/create":
            return JsonRpcResponse.success({"session_id": session_id}, request_id=rid)
        if method == "openenv/session/close":
            target = params.get("session_id")
            if target == session_id:
                return JsonRpcResponse.error_response(
                    JsonRpcErrorCode.INVALID_REQUEST,
                    "Cannot close active WebSocket-managed session via MCP method",
                    request_id=rid,
                )
            if not target or self._sessions.get(target) is None:
                return JsonRpcResponse.error_response(
                    JsonRpcErrorCode.INVALID_PARAMS,
                    f"Unknown session_id: {target}",
                    request_id=rid,
                )
            caller = self._callers.get(target)
            if caller is None or caller.held:  # another client's connection holds it
                return JsonRpcResponse.error_response(
                    JsonRpcErrorCode.INVALID_REQUEST,
                    f"Session {target} is held by its WebSocket connection and ends with it; "
                    "only sessions made over HTTP POST /mcp are closed by id",
                    request_id=rid,
                )
            await self._destroy_session(target)
            return JsonRpcResponse.success({"session_id": target, "closed": True}, rid)
        if method in (McpMethod.TOOLS_LIST, McpMethod.TOOLS_CALL):
            return JsonRpcResponse.error_response(
                JsonRpcErrorCode.INTERNAL_ERROR,
                "Environment does not support MCP",
                request_id=rid,
            )
        return JsonRpcResponse.error_response(
            JsonRpcErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}", request_id=rid
        )

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


def _error(message: str, code: str, **extra: Any) -> str:
    """An OpenEnv error answer: ``{"type": "error", "data": {"message", "code", ...}}``."""
    data = {"message": message, "code": str(getattr(code, "value", code)), **extra}
    return orjson.dumps({"type": "error", "data": jsonable(data)}).decode()


async def _send_quietly(websocket: Any, text: str) -> None:
    """Send a last answer to a client that may have left already."""
    with contextlib.suppress(Exception):
        await websocket.send_text(text)
