"""Env slots for the evaluator: in this process, each in a worker process, or on Ray actors.

``isolation="process"`` runs every env slot in its own spawned process. A worker that
dies (a segfault in a native library, an OOM kill, ``os._exit``) or hangs past
``step_timeout_s`` costs one episode, recorded as ``env_error``; the slot starts a new
worker at its next reset and the evaluation goes on. Scripted policies that need the
live env (the oracle, do-nothing) work through the same pipe: the worker keeps the
episode's oracle and answers ``oracle().act()`` calls.

``isolation="ray"`` hosts the slots on Ray actors (:mod:`agentgym_envs.distributed`,
the ``dist`` extra), across the nodes of a cluster; a dead or hung actor costs the
episodes it hosted, as ``env_error``, and is restarted. Its slots step in parallel
(:func:`step_slots`). The actors open no trajectory store: their envs record into an
:class:`~agentgym_envs.distributed.host.EpisodeOutbox`, each finished episode comes
back with the step that ended it, and the slot writes it into the run's store here.

Only plain data crosses the pipe: action text in; observation, reward, flags and the
info dict out.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import traceback
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import AgentGymError, ArgumentError, ConfigError
from agentgym_envs.core.scratch import reap_stale

logger = logging.getLogger(__name__)

EnvFactory = Callable[[], gym.Env[Any, Any]]


class SlotIsolation(StrEnum):
    """Where the evaluator runs its env slots."""

    INLINE = "inline"  # in this process: an exception from the env ends its episode
    PROCESS = "process"  # one worker process per slot: crashes and hangs end it too
    RAY = "ray"  # slots on Ray actors (the dist extra), across a cluster's nodes

    @classmethod
    def parse(cls, value: SlotIsolation | str) -> SlotIsolation:
        """The member for ``value`` (a member or its string, as CLIs and configs give).

        Raises:
            ConfigError: no member has this value.
        """
        try:
            return cls(value)
        except ValueError:
            names = " or ".join(repr(m.value) for m in cls)
            raise ConfigError(f"isolation must be {names}, got {value!r}") from None


class EnvCrashed(AgentGymError, RuntimeError):
    """The env (or its worker process) failed; the episode is an ``env_error``."""


def _recorder(env: gym.Env[Any, Any]) -> Any:
    """The RecordingWrapper in ``env``'s wrapper chain, if any."""
    from agentgym_envs.wrappers.recording import RecordingWrapper

    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecordingWrapper):
            return env
        env = env.env
    return None


class InlineSlot:
    """An env slot in this process; exceptions from the env become :class:`EnvCrashed`."""

    def __init__(self, factory: EnvFactory) -> None:
        self.env = factory()
        self._recorder = _recorder(self.env)
        self.unwrapped = self.env.unwrapped

    def reset(self, seed: int, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            obs, info = self.env.reset(seed=seed, options=dict(options))
        except Exception as exc:
            logger.exception("env reset crashed")
            raise EnvCrashed(f"reset failed: {type(exc).__name__}: {exc}") from exc
        return obs, info

    def step(
        self, action: str, note: Mapping[str, Any] | None = None
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if note and self._recorder is not None:
            self._recorder.note(**note)
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:
            logger.exception("env step crashed")
            raise EnvCrashed(f"step failed: {type(exc).__name__}: {exc}") from exc
        return obs, float(reward), bool(terminated), bool(truncated), info

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:  # closing a broken env must not stop the evaluation
            logger.exception("env close failed")


def _serve(conn: Connection, factory: EnvFactory) -> None:
    """The worker's loop: build the env, then answer commands until ``close``."""
    # Ctrl-C reaches the whole process group: the evaluator decides when its workers stop
    # (it finishes the step and closes them), so Ctrl-C does not turn the episodes in
    # flight into env errors. SIGTERM still ends a worker (multiprocessing's exit sends it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = factory()
    recorder = _recorder(env)
    oracle: Any = None
    while True:
        try:
            cmd, payload = conn.recv()
        except EOFError:
            break
        try:
            if cmd == "reset":
                oracle = None
                result: Any = env.reset(seed=payload[0], options=payload[1])
            elif cmd == "step":
                action, note = payload
                if note and recorder is not None:
                    recorder.note(**note)
                obs, reward, terminated, truncated, info = env.step(action)
                result = (obs, float(reward), bool(terminated), bool(truncated), info)
            elif cmd == "oracle_act":
                if oracle is None:
                    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
                result = oracle.act()
            elif cmd == "noop_action":
                result = env.unwrapped.noop_action  # type: ignore[attr-defined]
            elif cmd == "close":
                env.close()
                conn.send(("ok", None))
                break
            else:
                raise ArgumentError(
                    f"unknown worker command {cmd!r}: expected reset, step, oracle_act, "
                    "noop_action or close; this is a bug in the code that drives the worker"
                )
            conn.send(("ok", result))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    conn.close()


class _RemoteOracle:
    def __init__(self, slot: ProcessSlot | RaySlot) -> None:
        self._slot = slot

    def act(self) -> str:
        text = self._slot.call("oracle_act", None)
        assert isinstance(text, str)
        return text


class ProcessSlot:
    """An env slot whose env lives in a worker process (started lazily, restarted after
    a crash). It looks enough like an agentgym env for the scripted policies:
    ``unwrapped`` is itself, with ``oracle()`` and ``noop_action``.

    Args:
        factory: builds the env inside the worker (must be picklable: a module-level
            function or a ``functools.partial`` of one).
        step_timeout_s: a command that takes longer kills the worker (``env_error``).
    """

    def __init__(self, factory: EnvFactory, step_timeout_s: float = 300.0) -> None:
        self._factory = factory
        self._timeout = step_timeout_s
        self._proc: Any = None
        self._conn: Connection | None = None
        self.unwrapped = self
        self.restarts = 0

    # -- the scripted policies' view of an env ---------------------------------------

    def oracle(self) -> _RemoteOracle:
        return _RemoteOracle(self)

    @property
    def noop_action(self) -> str:
        text = self.call("noop_action", None)
        assert isinstance(text, str)
        return text

    # -- slot API ------------------------------------------------------------------------

    def reset(self, seed: int, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        obs, info = self.call("reset", (seed, dict(options)))
        return obs, info

    def step(
        self, action: str, note: Mapping[str, Any] | None = None
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = self.call("step", (action, dict(note or {})))
        obs, reward, terminated, truncated, info = result
        return obs, reward, terminated, truncated, info

    def call(self, cmd: str, payload: Any) -> Any:
        conn = self._ensure()
        try:
            conn.send((cmd, payload))
            if not conn.poll(self._timeout):
                self._kill()
                raise EnvCrashed(f"env worker did not answer {cmd!r} in {self._timeout:g} s")
            status, result = conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            code = self._proc.exitcode if self._proc is not None else None
            self._kill()
            raise EnvCrashed(f"env worker died during {cmd!r} (exit code {code})") from exc
        if status == "error":
            raise EnvCrashed(f"env {cmd} failed in the worker: {result}")
        return result

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("close", None))
                if self._conn.poll(10):
                    self._conn.recv()
            except (EOFError, OSError):
                pass
        self._kill()

    def _ensure(self) -> Connection:
        if self._proc is not None and self._proc.is_alive() and self._conn is not None:
            return self._conn
        if self._proc is not None:
            self._kill()
            self.restarts += 1
        ctx = mp.get_context("spawn")  # fork is unsafe with the browser's driver thread
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self._factory), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        return parent

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=10)
            if self._proc.exitcode is not None:
                # a killed worker ran no cleanup: delete the scratch folders it owned
                # (workspaces on tmpfs, verification folders), named after its pid
                reap_stale()
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None


class RaySlot:
    """An env slot on a Ray actor of a shared
    :class:`~agentgym_envs.distributed.pool.RayEnvPool` (which closes with its last
    slot). Like :class:`ProcessSlot`, it stands in for its env for the scripted
    policies: ``unwrapped`` is itself, with ``oracle()`` and ``noop_action``.

    Args:
        pool: the pool.
        index: the slot's index in the pool.
        users: open slots of the pool, shared by its slots.
        store: the run's open trajectory store, where the episodes the actor recorded
            are written (None: nothing is recorded).
    """

    def __init__(self, pool: Any, index: int, users: list[int], store: Any = None) -> None:
        self.pool = pool
        self.index = index
        self.unwrapped = self
        self.store = store
        self._users = users
        self._closed = False

    def oracle(self) -> _RemoteOracle:
        return _RemoteOracle(self)

    @property
    def noop_action(self) -> str:
        text = self.call("noop_action", None)
        assert isinstance(text, str)
        return text

    def call(self, cmd: str, payload: Any) -> Any:
        """``oracle_act`` or ``noop_action`` on the actor; failures are :class:`EnvCrashed`."""
        try:
            return getattr(self.pool, cmd)(self.index)
        except Exception as exc:
            raise EnvCrashed(f"env {cmd} failed on its Ray actor: {exc}") from exc

    def reset(self, seed: int, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        result = self.pool.reset(self.index, seed, dict(options))
        if result.crashed:
            raise EnvCrashed(result.error)
        return result.obs, result.info

    def step(
        self, action: str, note: Mapping[str, Any] | None = None
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = self.record(self.pool.step(self.index, action, note))
        if result.crashed:
            raise EnvCrashed(result.error)
        return result.step_tuple()  # type: ignore[no-any-return]

    def record(self, result: Any) -> Any:
        """Write the episodes a step result brings into the run's store; the result."""
        if result.episodes and self.store is not None:
            self.store.add_many(result.episodes)
        return result

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._users[0] -= 1
        if self._users[0] == 0:
            self.pool.close()


Slot = InlineSlot | ProcessSlot | RaySlot


def step_slots(
    slots: Sequence[Slot],
    actions: Sequence[str],
    notes: Sequence[Mapping[str, Any] | None],
) -> list[tuple[str, float, bool, bool, dict[str, Any]] | EnvCrashed]:
    """Step each slot with its action: the step's result, or the :class:`EnvCrashed`
    that ended its episode. Ray slots of one pool step in parallel."""
    if slots and all(isinstance(s, RaySlot) for s in slots):
        pools = {id(s.pool) for s in slots}  # type: ignore[union-attr]
        if len(pools) == 1:
            pool = slots[0].pool  # type: ignore[union-attr]
            items = [(s.index, a) for s, a in zip(slots, actions, strict=True)]  # type: ignore[union-attr]
            results = [
                slot.record(r)  # type: ignore[union-attr]
                for slot, r in zip(slots, pool.step_many(items, notes), strict=True)
            ]
            return [EnvCrashed(r.error) if r.crashed else r.step_tuple() for r in results]
    out: list[tuple[str, float, bool, bool, dict[str, Any]] | EnvCrashed] = []
    for slot, action, note in zip(slots, actions, notes, strict=True):
        try:
            out.append(slot.step(action, note))
        except EnvCrashed as exc:
            out.append(exc)
    return out


def make_slots(
    factory: EnvFactory,
    count: int,
    isolation: SlotIsolation | str,
    step_timeout_s: float = 300.0,
    *,
    env_id: str = "",
    envs_per_actor: int = 1,
    ray_address: str = "",
    store: Any = None,
) -> Sequence[Slot]:
    """``count`` env slots built by ``factory``.

    Args:
        factory: builds one env (picklable for process and ray isolation).
        count: slots.
        isolation: where the slots run (:class:`SlotIsolation`).
        step_timeout_s: with process or ray isolation, a slower step ends its worker.
        env_id: the env ``factory`` builds (ray: picks the family's actor resources).
        envs_per_actor: ray: slots hosted by one actor.
        ray_address: ray: the cluster to join (default: connected, or a local Ray).
        store: ray: the run's open trajectory store; ``factory``'s envs record into an
            :class:`~agentgym_envs.distributed.host.EpisodeOutbox` and the slots write
            the episodes that come back here.

    Raises:
        ConfigError: ``isolation`` is not a :class:`SlotIsolation` value, or (ray) ray
            is missing or the pool's configuration is bad.
    """
    kind = SlotIsolation.parse(isolation)
    if kind is SlotIsolation.INLINE:
        return [InlineSlot(factory) for _ in range(count)]
    if kind is SlotIsolation.PROCESS:
        return [ProcessSlot(factory, step_timeout_s) for _ in range(count)]
    from agentgym_envs.distributed.pool import RayEnvPool

    pool = RayEnvPool(
        env_id or None,
        count,
        factory=factory,
        envs_per_actor=envs_per_actor,
        step_timeout_s=step_timeout_s,
        address=ray_address or None,
    )
    users = [count]
    return [RaySlot(pool, i, users, store) for i in range(count)]
