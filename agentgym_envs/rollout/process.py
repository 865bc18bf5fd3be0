"""Env slots each in a worker process (see :mod:`agentgym_envs.rollout.slots`).

Every slot's env lives in its own spawned process. A worker that dies (a segfault in a
native library, an OOM kill, ``os._exit``) or hangs past ``step_timeout_s`` costs one
episode, recorded as ``env_error``; the slot starts a new worker at its next call and the
rollout goes on. Scripted policies that need the live env (the oracle, do-nothing) work
through the same pipe: the worker keeps the episode's oracle and answers
``oracle().act()`` calls.

Only plain data crosses the pipe: action text in; observation, reward, flags and the
info dict out (and snapshots, which are plain data too).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from agentgym_envs.core.errors import ArgumentError, ConfigError
from agentgym_envs.core.scratch import reap_stale
from agentgym_envs.distributed.results import Call, CrashCode, SlotResult, crashed_result
from agentgym_envs.rollout.local import _recorder
from agentgym_envs.rollout.slots import (
    EnvCrashed,
    EnvFactory,
    Note,
    RemoteEnv,
    Script,
    snapshot_api,
)

logger = logging.getLogger(__name__)


def _serve(conn: Connection, factory: EnvFactory) -> None:
    """The worker's loop: build the env, then answer commands until ``close``."""
    # Ctrl-C reaches the whole process group: the rollout decides when its workers stop
    # (it finishes the step and closes them), so Ctrl-C does not turn the episodes in
    # flight into env errors. SIGTERM still ends a worker (multiprocessing's exit sends it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = factory()
    recorder = _recorder(env)
    oracle: Any = None
    was_reset = False  # wrappers refuse a step before a reset, even after a set_state
    while True:
        try:
            cmd, payload = conn.recv()
        except EOFError:
            break
        try:
            if cmd == "reset":
                oracle = None
                result: Any = env.reset(seed=payload[0], options=payload[1])
                was_reset = True
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
            elif cmd == "get_state":
                result = snapshot_api(env).get_state()
            elif cmd == "set_state":
                oracle = None
                if not was_reset:
                    env.reset(seed=0)
                    was_reset = True
                snapshot_api(env).set_state(payload)
                result = None
            elif cmd == "close":
                env.close()
                conn.send(("ok", None))
                break
            else:
                raise ArgumentError(
                    f"unknown worker command {cmd!r}: expected reset, step, oracle_act, "
                    "noop_action, get_state, set_state or close; this is a bug in the code "
                    "that drives the worker"
                )
            conn.send(("ok", result))
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            status = "config_error" if isinstance(exc, ConfigError) else "error"
            conn.send((status, (text, str(exc))))
    conn.close()


class _WorkerCrashed(EnvCrashed):
    """A worker's call failed; ``code`` says how, ``detail`` is the env's own message."""

    def __init__(self, message: str, code: CrashCode, detail: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail or message


class ProcessWorker:
    """One env in a worker process (started lazily, restarted after a crash).

    Args:
        factory: builds the env inside the worker (picklable).
        step_timeout_s: a command that takes longer kills the worker (``env_error``).
    """

    def __init__(self, factory: EnvFactory, step_timeout_s: float = 300.0) -> None:
        self._factory = factory
        self._timeout = step_timeout_s
        self._proc: Any = None
        self._conn: Connection | None = None
        self.restarts = 0
        self.env = RemoteEnv(lambda cmd: self.call(cmd, None))
        """The env's stand-in for scripted policies (``oracle()``, ``noop_action``)."""

    def call(self, cmd: str, payload: Any) -> Any:
        """Run ``cmd`` in the worker and return its answer.

        Raises:
            EnvCrashed: the env raised, or the worker died or hung (then it is killed).
        """
        conn = self._ensure()
        try:
            conn.send((cmd, payload))
            if not conn.poll(self._timeout):
                self._kill()
                raise _WorkerCrashed(
                    f"env worker did not answer {cmd!r} in {self._timeout:g} s",
                    CrashCode.STEP_TIMEOUT,
                )
            status, result = conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            code = self._proc.exitcode if self._proc is not None else None
            self._kill()
            raise _WorkerCrashed(
                f"env worker died during {cmd!r} (exit code {code})", CrashCode.ACTOR_DIED
            ) from exc
        if status != "ok":
            text, message = result
            crash = CrashCode.CONFIG_ERROR if status == "config_error" else CrashCode.ENV_EXCEPTION
            raise _WorkerCrashed(f"env {cmd} failed in the worker: {text}", crash, message)
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


class ProcessEnvSlots:
    """``n`` env slots, each in its own worker process.

    Args:
        factory: builds one env inside a worker (picklable).
        n: slots.
        step_timeout_s: a command that takes longer kills its worker (``env_error``).
        strict: a ConfigError the env raises is raised here (the trainer's slots); not
            strict, it ends only its episode (the evaluator's).
    """

    def __init__(
        self, factory: EnvFactory, n: int, step_timeout_s: float = 300.0, *, strict: bool = True
    ) -> None:
        self.workers = [ProcessWorker(factory, step_timeout_s) for _ in range(n)]
        self.strict = strict

    def __len__(self) -> int:
        return len(self.workers)

    @property
    def envs(self) -> list[RemoteEnv]:
        return [w.env for w in self.workers]

    def reset(self, i: int, seed: int | None, options: Mapping[str, Any] | None) -> SlotResult:
        opts = dict(options) if options is not None else None
        try:
            obs, info = self.workers[i].call("reset", (seed, opts))
        except _WorkerCrashed as exc:
            return self._crashed(i, Call.RESET, exc)
        return SlotResult(i, Call.RESET, obs, info=info)

    def step_many(
        self, actions: Sequence[tuple[int, str]], notes: Sequence[Note] | None = None
    ) -> list[SlotResult]:
        out = []
        for k, (i, action) in enumerate(actions):
            note = notes[k] if notes else None
            try:
                result = self.workers[i].call("step", (action, dict(note or {})))
            except _WorkerCrashed as exc:
                out.append(self._crashed(i, Call.STEP, exc))
                continue
            out.append(SlotResult(i, Call.STEP, *result))
        return out

    def script(self, i: int, script: Script) -> Callable[[], str]:
        return script(self.workers[i].env)  # type: ignore[arg-type]

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        out = []
        for i in slots:
            try:
                out.append(self.workers[i].call("get_state", None))
            except _WorkerCrashed as exc:
                self._crashed(i, Call.RESET, exc)  # raises a ConfigError when strict
                logger.warning("env snapshot failed (slot %d): %s", i, exc)
                out.append(None)
        return out

    def set_state(self, i: int, state: Any) -> SlotResult:
        try:
            self.workers[i].call("set_state", state)
        except _WorkerCrashed as exc:
            return self._crashed(i, Call.RESET, exc)
        return SlotResult(i, Call.RESET)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def _crashed(self, i: int, call: Call, exc: _WorkerCrashed) -> SlotResult:
        """Raises:
        ConfigError: the env refused its configuration and the slots are strict."""
        if self.strict and exc.code is CrashCode.CONFIG_ERROR:
            raise ConfigError(exc.detail) from exc
        return crashed_result(i, call, exc.code, str(exc))


__all__ = ["ProcessEnvSlots", "ProcessWorker"]
