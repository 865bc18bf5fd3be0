"""OpenEnv adapter: serve any agentgym env as an OpenEnv environment server, and play one
through a Gymnasium env that is an OpenEnv client.

OpenEnv (``openenv-core``) is the protocol that TRL, torchforge, SkyRL and Unsloth use for
remote environments. The server speaks its API unchanged:

* a WebSocket session at ``/ws`` (what OpenEnv's ``EnvClient`` uses): ``reset``, ``step``,
  ``state`` and ``close`` messages; every session gets its own env instance, made with
  ``gym.make`` on its first reset, and closed when the session ends, whether the client
  says ``close``, disconnects or is killed, or the session expires (unused for a minute or
  idle for 15, by default; see :mod:`.openenv_sessions` for who gets a session, when it
  expires, and where its env runs: on the event loop for cheap envs, in a thread of its
  own for heavy ones);
* HTTP ``POST /reset``, ``POST /step``, ``GET /state``, ``/schema``, ``/metadata`` and
  ``/health``. OpenEnv's HTTP ``reset`` and ``step`` are stateless (each request gets a
  fresh env), so an episode is played over the WebSocket.

The action is the model's raw text (``{"text": ...}``), in any form the env parses; the
observation carries the text, ``terminated``, ``truncated`` and the env's ``info`` as JSON
(``done`` is ``terminated or truncated``, ``reward`` the env's own step reward). Over the
WebSocket, ``info`` is whole at ``reset``; a step carries the step's own keys and those
that changed, and ``info_unchanged`` names the keys left out (the tool schemas, the
versions, the task...): :mod:`.openenv_wire` says how, :class:`OpenEnvGymEnv` puts the
whole ``info`` back together, and a ``state`` request returns the latest whole ``info``.

Run a server with ``agentgym openenv serve Sokoban --port 8000`` or :func:`serve`; play it
with :class:`OpenEnvGymEnv` (a ``gymnasium.Env``) or any OpenEnv client.
"""

from __future__ import annotations

import functools
import logging
import socket
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import AgentGymError, ClosedError, ConfigError, ResetNeeded
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.spaces import TextSpace
from agentgym_envs.core.unicode import valid_text
from agentgym_envs.integrations.extras import jsonable, require
from agentgym_envs.registration import EnvEntry, env_class, family, find

_WHAT = "the OpenEnv adapter (agentgym_envs.integrations.openenv)"
# openenv.core's __init__ imports every server module, its Gradio web UI included when
# gradio is installed: seconds of imports (20 s and more on a busy machine) that neither
# this client nor this server uses. Upstream imports the UI in a try (a missing gradio is
# its supported case), so gradio is hidden while openenv.core loads and visible again
# right after; openenv's own create_app still imports its web UI when asked for it.
_HIDE_GRADIO = "gradio" not in sys.modules and "openenv.core" not in sys.modules
if _HIDE_GRADIO:
    sys.modules["gradio"] = None  # type: ignore[assignment]  # import gradio: not found
try:
    require("openenv.core", "openenv-core", "openenv", _WHAT)
finally:
    if _HIDE_GRADIO:
        sys.modules.pop("gradio", None)
require("uvicorn", "openenv-core", "openenv", _WHAT)
require("orjson", "orjson", "openenv", _WHAT)

import orjson  # noqa: E402
import uvicorn  # noqa: E402
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import (  # noqa: E402
    Action,
    EnvironmentMetadata,
    Observation,
    State,
)
from pydantic import Field, field_validator  # noqa: E402  (a dependency of openenv-core)

from agentgym_envs.integrations.openenv_sessions import (  # noqa: E402
    EXPIRED,
    AgentGymEnvServer,
    CallerMiddleware,
    SessionLimits,
    SharedSlots,
)
from agentgym_envs.integrations.openenv_wire import (  # noqa: E402
    InfoStream,
    dumps,
    merge_info,
    observation_message,
)

logger = logging.getLogger(__name__)

__all__ = [
    "AgentGymAction",
    "AgentGymEnvClient",
    "AgentGymObservation",
    "AgentGymState",
    "OpenEnvGymEnv",
    "OpenEnvServer",
    "RemoteEnvError",
    "SessionEnvironment",
    "SessionLimits",
    "create_openenv_app",
    "preload",
    "runs_inline",
    "serve",
]


class RemoteEnvError(AgentGymError, RuntimeError):
    """The OpenEnv server answered a request with an error (its message is included)."""


# -- the wire types ----------------------------------------------------------------------


class AgentGymAction(Action):  # type: ignore[misc]  # openenv-core is untyped
    """One agent turn: the model's raw output."""

    text: str = Field(
        description="the model's raw output: a tool call in any form the env parses (JSON "
        "object, OpenAI tool_call, Hermes <tool_call>, name(arg=...)) or a message to the user"
    )

    @field_validator("text", mode="before")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        """A policy's text with lone surrogates (JSON's ``\\ud800`` escape decodes to one)
        is the policy's to lose, never an error of the client or the server: each becomes
        U+FFFD, the env's own rule (``core.unicode``); bytes are read as UTF-8 with U+FFFD
        for what does not decode, as ``env.step`` reads them."""
        if isinstance(value, bytes | bytearray):
            value = bytes(value).decode("utf-8", errors="replace")
        return valid_text(value) if isinstance(value, str) else value


class AgentGymObservation(Observation):  # type: ignore[misc]
    """What the env returned: its text observation, end flags and ``info`` as JSON."""

    text: str = Field(description="the observation text the agent sees")
    terminated: bool = Field(default=False, description="success, failure or safety stop")
    truncated: bool = Field(default=False, description="a step, time or cost budget, env_error")
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="the env's info as JSON: whole at reset; at a step over the WebSocket, "
        "the step's own keys (outcome, tool_calls, error, new_milestones, "
        "reward_components, safety) and the keys whose value changed",
    )
    info_unchanged: list[str] = Field(
        default_factory=list,
        description="info keys left out because their value is the one last sent in this "
        "episode (the tool schemas, versions, task...): the whole info is the last whole "
        "one with these keys kept and info put over them",
    )


class AgentGymState(State):  # type: ignore[misc]
    """The session's episode bookkeeping (the world state itself stays on the server)."""

    env_id: str = Field(description="the registered env id, e.g. agentgym/Sokoban-v0")
    task_id: str | None = Field(default=None, description="the episode's task, once reset")
    outcome: str | None = Field(default=None, description="the Outcome value, once reset")
    done: bool = Field(default=False, description="whether the episode has ended")
    total_reward: float = Field(default=0.0, description="the episode's return so far")
    observation_max_length: int = Field(description="max_length of the observation space")
    action_max_length: int = Field(description="max_length of the action space")
    info: dict[str, Any] | None = Field(
        default=None,
        description="the whole info of the latest reset or step, per-episode constants "
        "(tools, system) included (a WebSocket session's state; None before a reset)",
    )


# -- the server side ---------------------------------------------------------------------


class SessionEnvironment(
    Environment[AgentGymAction, AgentGymObservation, AgentGymState]  # type: ignore[misc]
):
    """One agentgym env behind OpenEnv's ``Environment`` interface (one per session).

    The Gymnasium env is made on the first ``reset``, in the thread that runs it: a heavy
    env's session runs its reset, step and close in a thread of its own, which is what
    thread-bound resources (Playwright's browser) need; a cheap env's run on the server's
    event loop (:func:`runs_inline`). Over the WebSocket the server calls
    :meth:`reset_message`, :meth:`step_message` and :meth:`state_message`, which answer
    with the JSON text of the message; HTTP's ``/reset`` and ``/step`` call
    :meth:`reset` and :meth:`step`.

    Args:
        env_id: a registered env id or name (``Sokoban``, ``agentgym/Retail-v1``).
        make_kwargs: keyword arguments for ``gym.make`` (constructor options).
        tracker: a set that this instance adds itself to (the server's list of envs).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session owns its env; nothing is shared

    def __init__(
        self,
        env_id: str,
        make_kwargs: Mapping[str, Any] | None = None,
        tracker: weakref.WeakSet[SessionEnvironment] | None = None,
    ) -> None:
        super().__init__()
        entry = find(env_id)
        self.env_id = entry.id
        self._description = entry.description
        self._cls = env_class(entry)
        self._make_kwargs = dict(make_kwargs or {})
        self.env: gym.Env[str, str] | None = None
        self.closed = False
        self.closed_because: str | None = None
        """Why the server closed this session's env (set when the session expired)."""
        self._started = False  # a reset succeeded
        self._wire = InfoStream()  # what this session last sent of the episode's info
        self._state = AgentGymState(
            env_id=self.env_id,
            observation_max_length=self._cls.max_observation_chars,
            action_max_length=self._cls.max_action_chars,
        )
        if tracker is not None:
            tracker.add(self)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AgentGymObservation:
        """Start an episode. ``options`` are the env's reset options; extra keyword
        arguments (``task_id=...``, ``split=...``) are merged into them. ``info`` is whole
        (HTTP's ``/reset``; a WebSocket session answers with :meth:`reset_message`)."""
        obs, info = self._reset(seed, episode_id, options, kwargs)
        return AgentGymObservation(text=obs, reward=None, done=False, info=jsonable(info))

    def reset_message(self, data: Mapping[str, Any]) -> str:
        """:meth:`reset` as the WebSocket answer (the whole ``info``), serialised once.

        ``data`` is the reset message's: ``seed``, ``episode_id``, ``options`` and any
        other reset option."""
        rest = dict(data)
        seed, episode_id = rest.pop("seed", None), rest.pop("episode_id", None)
        obs, info = self._reset(seed, episode_id, rest.pop("options", None), rest)
        body, unchanged = self._wire.reset(info)
        return observation_message(
            obs, body, unchanged, reward=None, terminated=False, truncated=False
        )

    def _reset(
        self,
        seed: int | None,
        episode_id: str | None,
        options: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
    ) -> tuple[str, dict[str, Any]]:
        self._check_open()
        if self.env is None:
            self.env = gym.make(self.env_id, **self._make_kwargs)
        opts = {**dict(options or {}), **extra} or None
        self._started = False  # until this reset succeeds
        obs, info = self.env.reset(seed=seed, options=opts)
        self._started = True
        self._state = self._state.model_copy(
            update={
                "episode_id": episode_id or uuid.uuid4().hex,
                "step_count": 0,
                "task_id": info["task"]["id"],
                "outcome": str(info["outcome"]),
                "done": False,
                "total_reward": 0.0,
            }
        )
        return obs, info

    def step(
        self, action: AgentGymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentGymObservation:
        """Play one agent turn. ``timeout_s`` is accepted for the protocol and unused (the
        env's own budgets bound a step). ``info`` is whole (HTTP's ``/step``; a WebSocket
        session answers with :meth:`step_message`)."""
        obs, reward, terminated, truncated, info = self._step(action)
        return AgentGymObservation(
            text=obs,
            reward=reward,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
            info=jsonable(info),
        )

    def step_message(self, action: AgentGymAction) -> str:
        """:meth:`step` as the WebSocket answer (the ``info`` that changed), serialised
        once."""
        obs, reward, terminated, truncated, info = self._step(action)
        body, unchanged = self._wire.step(info)
        return observation_message(
            obs, body, unchanged, reward=reward, terminated=terminated, truncated=truncated
        )

    def _step(self, action: AgentGymAction) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_open()
        if self.env is None or not self._started:
            raise ResetNeeded(
                f"step before a successful reset on {self.env_id}: reset the session first "
                "(OpenEnv's HTTP /step is stateless, a fresh env per request: play an episode "
                "over the WebSocket session /ws, e.g. with OpenEnvGymEnv or an EnvClient)"
            )
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        state = self._state
        self._state = state.model_copy(
            update={
                "step_count": state.step_count + 1,
                "outcome": str(info["outcome"]),
                "done": terminated or truncated,
                "total_reward": state.total_reward + reward,
            }
        )
        return obs, reward, terminated, truncated, info

    def state_message(self) -> str:
        """The ``state`` answer of a WebSocket session, with the latest whole ``info``."""
        data = self._state.model_dump(exclude={"info"})
        info = self._wire.full() if self._started else b"null"
        state = dumps(data)[:-1] + b',"info":' + info + b"}"
        return (b'{"type":"state","data":' + state + b"}").decode()

    def _check_open(self) -> None:
        if self.closed:
            why = self.closed_because or "the session ended or the server is shutting down"
            raise ClosedError(
                f"this {self.env_id} session's env is closed ({why}); open a new session"
            )

    @property
    def state(self) -> AgentGymState:
        """The session's episode bookkeeping (a copy)."""
        state: AgentGymState = self._state.model_copy()
        return state

    def get_metadata(self) -> EnvironmentMetadata:
        """The env's id, description and version."""
        return EnvironmentMetadata(
            name=self.env_id, description=self._description, version=str(self._cls.version)
        )

    def close(self) -> None:
        """Close the Gymnasium env. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.env is not None:
            self.env.close()


EXECUTORS = ("auto", "loop", "thread")
"""Where a server runs its sessions' envs: on its event loop, in a thread per session, or
(``auto``) as :func:`runs_inline` decides for the env."""


def runs_inline(
    entry: EnvEntry, executor: str = "auto", make_kwargs: Mapping[str, Any] | None = None
) -> bool:
    """Whether a server runs the sessions of ``entry`` on its event loop.

    ``auto``: yes where the env's family asks less than one CPU per env
    (:class:`~agentgym_envs.core.family.FamilyCost`): a pure-Python env whose step takes
    microseconds, which a thread per session would only slow down. A family that runs a
    browser or a process per call, or an env of a plugin (no family record), gets a thread
    per session, which thread-bound resources need; so does an env whose ``make_kwargs``
    give one of its family's ``endpoint_kwargs`` (an LLM user's model endpoint), whose
    step waits on the network.

    Raises:
        ConfigError: ``executor`` is not one of :data:`EXECUTORS`, or ``loop`` for an env
            that calls an endpoint.
    """
    if executor not in EXECUTORS:
        raise ConfigError(
            f"executor (--executor) must be one of {', '.join(EXECUTORS)}, got {executor!r}"
        )
    record = family(entry.family)
    declared = record.endpoint_kwargs if record is not None else ()
    remote = sorted(k for k in declared if (make_kwargs or {}).get(k))
    if remote and executor == "loop":  # a step that waits on an endpoint blocks every session
        raise ConfigError(
            f"{entry.id} with {', '.join(remote)} calls a model endpoint in its steps, which "
            "would stop every session on the event loop while it waits: use --executor "
            "thread (or auto)"
        )
    if executor != "auto":
        return executor == "loop"
    if remote:
        return False
    return record is not None and record.cost.cpus_per_env < 1.0


def preload(env_id: str, make_kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """Build the shared read-only state of ``env_id`` in this process: make the env and
    reset it once per split (its task sets, catalogs and world templates are built once
    per process and shared by every env made after), then close it.

    Returns:
        The splits it reset (a split the env does not have is skipped).
    """
    env = gym.make(find(env_id).id, **dict(make_kwargs or {}))
    warmed = []
    try:
        for split in ("train", "test", "ood"):
            try:
                env.reset(seed=0, options={"split": split})
            except ConfigError as exc:  # no such split here (the env says so)
                logger.debug("preload %s: split %s skipped (%s)", env_id, split, exc)
                continue
            warmed.append(split)
    finally:
        env.close()
    return warmed


def preload_for_serving(
    entry: EnvEntry, executor: str, make_kwargs: Mapping[str, Any] | None = None
) -> list[str]:
    """:func:`preload` before a server of ``entry`` starts (``--preload``).

    Raises:
        ConfigError: the env is served with a thread per session.
    """
    if not runs_inline(entry, executor, make_kwargs):
        raise ConfigError(
            f"--preload builds the shared state of an env served on the event loop; "
            f"{entry.id} is served with a thread per session (each session builds its "
            "own thread-bound resources): drop --preload, or pass --executor loop if "
            "its env is pure Python"
        )
    return preload(entry.id, make_kwargs)


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) for a server to listen on."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def create_openenv_app(
    env_id: str,
    *,
    make_kwargs: Mapping[str, Any] | None = None,
    limits: SessionLimits | None = None,
    tracker: weakref.WeakSet[SessionEnvironment] | None = None,
    executor: str = "auto",
    slots: SharedSlots | None = None,
) -> Any:
    """The FastAPI app of an OpenEnv server for ``env_id`` (serve it with any ASGI server).

    Args:
        env_id: a registered env id or name.
        make_kwargs: keyword arguments for ``gym.make`` in every session.
        limits: how many sessions, to whom, for how long (default ``SessionLimits()``).
        tracker: a set that every env the app makes is added to.
        executor: where sessions' envs run: ``loop`` (the event loop), ``thread`` (a
            thread per session) or ``auto`` (:func:`runs_inline`).
        slots: the sessions shared with the other worker processes of one server.

    Returns:
        A ``fastapi.FastAPI`` app.

    Raises:
        ConfigError: ``executor`` is unknown.
    """
    from fastapi import FastAPI

    entry = find(env_id)  # an unknown id fails here, with a did-you-mean, not in a session
    inline = runs_inline(entry, executor, make_kwargs)
    factory = functools.partial(SessionEnvironment, env_id, make_kwargs, tracker)
    server = AgentGymEnvServer(
        factory,
        AgentGymAction,
        AgentGymObservation,
        limits or SessionLimits(),
        inline=inline,
        warm=functools.partial(preload, entry.id, make_kwargs),
        slots=slots,
    )
    app = FastAPI(title=f"{entry.id} over OpenEnv", description=entry.description)
    server.register_routes(app)
    # as openenv-core starts its own tasks: while the first clients connect, not at reset
    app.router.on_startup.append(server.start_warming)
    app.add_middleware(_QuietDisconnect)
    app.add_middleware(CallerMiddleware)
    app.state.agentgym_server = server
    return app


class _QuietDisconnect:
    """ASGI middleware: a WebSocket client that left first is a normal end of session.

    openenv-core's ``/ws`` handler closes the socket after the session ends and lets the
    ``WebSocketDisconnect`` raised by a client that already left escape, which the server
    would log as a crash; the session and its env are already closed by then.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


def server_config(app: Any, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's settings for an OpenEnv server of ``app``.

    Per-message deflate is off: a step message is a few hundred bytes once the episode's
    constants go only at reset, and zlib per message (and a compression context per
    connection) cost more server CPU and memory than the bytes they save on a local
    network. A client that offers deflate simply gets plain frames.
    """
    return uvicorn.Config(
        app, log_level="warning", lifespan="on", ws_per_message_deflate=False, **kwargs
    )


class OpenEnvServer:
    """An OpenEnv server running in a background thread (see :func:`serve`).

    Attributes:
        env_id: the env it serves.
        url: its base URL, e.g. ``http://127.0.0.1:8000`` (the WebSocket is ``/ws``).
        inline: whether its sessions' envs run on its event loop (else a thread each).
    """

    def __init__(self, env_id: str, sock: socket.socket, app: Any, tracker: Any) -> None:
        self.env_id = env_id
        self.inline: bool = app.state.agentgym_server.inline
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        self._tracker: weakref.WeakSet[SessionEnvironment] = tracker
        self._server = uvicorn.Server(server_config(app))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="openenv-server", daemon=True
        )
        self._sock = sock

    def start(self, timeout_s: float = 30.0) -> None:
        """Start serving; return once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise AgentGymError(f"the OpenEnv server for {self.env_id} did not start")
            time.sleep(0.02)

    def environments(self) -> list[SessionEnvironment]:
        """The env instances this server made that are still referenced (open or closed)."""
        return list(self._tracker)

    def close(self) -> None:
        """Stop serving and close every env it still has open. Idempotent."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for env in list(self._tracker):
            env.close()
        self._sock.close()

    def __enter__(self) -> OpenEnvServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    make_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 8,
    unused_timeout_s: float | None = 60.0,
    idle_timeout_s: float | None = 900.0,
    max_mcp_sessions: int = 0,
    max_sessions_per_client: int | None = None,
    executor: str = "auto",
    preload_state: bool = False,
) -> OpenEnvServer:
    """Serve ``env_id`` as an OpenEnv environment in a background thread.

    The session arguments are those of :class:`SessionLimits` (the module
    :mod:`.openenv_sessions` explains the rules).

    Args:
        env_id: a registered env id or name.
        host: address to bind.
        port: port to bind; 0 picks a free one (read it from ``server.url``).
        make_kwargs: keyword arguments for ``gym.make`` in every session.
        max_sessions: the most concurrent sessions (each holds one env).
        unused_timeout_s: a session with no reset or step this long after it opened
            expires (None: never).
        idle_timeout_s: a session whose last reset or step is this old expires (None:
            never).
        max_mcp_sessions: the most sessions made by HTTP ``POST /mcp`` (held by no
            connection; refused by default), below ``max_sessions``.
        max_sessions_per_client: the most sessions one peer address holds (None: no cap).
        executor: where sessions' envs run: ``loop``, ``thread`` or ``auto``
            (:func:`runs_inline`).
        preload_state: build the env's shared read-only state (:func:`preload`) before
            serving, so the first sessions find it built; only for envs served on the
            event loop (a heavy env's thread-bound resources belong to its sessions).

    Returns:
        The running :class:`OpenEnvServer`; call ``close()`` (or use ``with``) to stop it.

    Raises:
        ConfigError: a limit is out of range, ``executor`` is unknown, or
            ``preload_state`` is asked of an env served in a thread per session.
    """
    limits = SessionLimits(
        max_sessions=max_sessions,
        unused_timeout_s=unused_timeout_s,
        idle_timeout_s=idle_timeout_s,
        max_mcp_sessions=max_mcp_sessions,
        max_sessions_per_client=max_sessions_per_client,
    )
    entry = find(env_id)
    if preload_state:
        preload_for_serving(entry, executor, make_kwargs)
    tracker: weakref.WeakSet[SessionEnvironment] = weakref.WeakSet()
    app = create_openenv_app(
        env_id, make_kwargs=make_kwargs, limits=limits, tracker=tracker, executor=executor
    )
    sock = bind_socket(host, port)
    server = OpenEnvServer(entry.id, sock, app, tracker)
    server.start()
    return server


# -- the client side ---------------------------------------------------------------------


class AgentGymEnvClient(
    EnvClient[AgentGymAction, AgentGymObservation, AgentGymState]  # type: ignore[misc]
):
    """OpenEnv's async ``EnvClient`` for an agentgym server, with typed results
    (``.sync()`` gives the synchronous one)."""

    def _step_payload(self, action: AgentGymAction) -> dict[str, Any]:
        payload: dict[str, Any] = action.model_dump()
        return payload

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentGymObservation]:
        obs = AgentGymObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return StepResult(observation=obs, reward=obs.reward, done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> AgentGymState:
        return AgentGymState(**payload)


def _info(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the whole ``info`` for the caller (who may change it), with ``outcome``
    an :class:`Outcome` again."""
    info: dict[str, Any] = orjson.loads(orjson.dumps(raw))
    if isinstance(info.get("outcome"), str):
        info["outcome"] = Outcome(info["outcome"])
    return info


class OpenEnvGymEnv(gym.Env[str, str]):
    """A Gymnasium env whose episodes run on an OpenEnv server (one session per instance).

    ``reset(seed=, options=)`` and ``step(text)`` behave as the served env's, with ``info``
    as JSON (``info["outcome"]`` is an :class:`Outcome` again): a step's message carries
    only the ``info`` that changed, and this client puts the whole ``info`` back together,
    so every step's ``info`` has the keys and values the env gave. Closing it ends the
    session, which closes the env on the server. A session the server expired (unused or
    idle past its timeouts) is replaced by a new one on the next ``reset``; a ``step`` in
    it raises :class:`RemoteEnvError`.

    Args:
        base_url: the server's URL, ``http://host:port`` or ``ws://host:port``.
        connect_timeout_s: how long to wait for the WebSocket to open.
        message_timeout_s: how long to wait for each answer.

    Raises:
        ConnectionError: nothing answers at ``base_url``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self, base_url: str, *, connect_timeout_s: float = 10.0, message_timeout_s: float = 60.0
    ) -> None:
        self.base_url = base_url
        self._client = AgentGymEnvClient(
            base_url=base_url,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
        ).sync()
        self._closed = False
        self._info: dict[str, Any] | None = None  # the latest whole info, as JSON
        self._client.connect()
        first = self.state()
        self.env_id = first.env_id
        self.observation_space = TextSpace(first.observation_max_length)
        self.action_space = TextSpace(first.action_max_length, min_length=0)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise ClosedError(f"this OpenEnv client of {self.base_url} is closed; make a new one")
        try:
            return getattr(self._client, name)(*args, **kwargs)
        except RuntimeError as exc:  # OpenEnv's client raises RuntimeError("Server error: ...")
            raise RemoteEnvError(f"{name} on the OpenEnv server {self.base_url}: {exc}") from exc

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on the server (the same seed and options as a local env)."""
        super().reset(seed=seed)
        payload: dict[str, Any] = {}
        if seed is not None:
            payload["seed"] = seed
        if options is not None:
            payload["options"] = options
        try:
            result = self._call("reset", **payload)
        except RemoteEnvError as exc:
            if EXPIRED not in str(exc):
                raise
            self._client.disconnect()  # the server expired the session: open a new one
            self._client.connect()
            result = self._call("reset", **payload)
        obs: AgentGymObservation = result.observation
        self._info = None  # until the reset's info is in
        self._info = self._merge(obs)
        return obs.text, _info(self._info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one agent turn on the server."""
        result = self._call("step", AgentGymAction(text=action))
        obs: AgentGymObservation = result.observation
        reward = 0.0 if result.reward is None else float(result.reward)
        self._info = self._merge(obs)
        return obs.text, reward, obs.terminated, obs.truncated, _info(self._info)

    def _merge(self, obs: AgentGymObservation) -> dict[str, Any]:
        try:
            return merge_info(self._info, obs.info, obs.info_unchanged)
        except KeyError as exc:
            raise RemoteEnvError(
                f"the OpenEnv server {self.base_url} left out info it never sent: {exc}"
            ) from None

    def state(self) -> AgentGymState:
        """The session's episode bookkeeping on the server."""
        state: AgentGymState = self._call("state")
        return state

    def close(self) -> None:
        """End the session (the server closes its env). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._client.close()
