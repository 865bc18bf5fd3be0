"""Env slots in this process (see :mod:`agentgym_envs.rollout.slots`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.distributed.results import Call, CrashCode, SlotResult, crashed_result
from agentgym_envs.rollout.slots import EnvFactory, Note, Script, snapshot_api

log = logging.getLogger(__name__)


def _recorder(env: gym.Env[Any, Any]) -> Any:
    """The RecordingWrapper in ``env``'s wrapper chain, if any."""
    from agentgym_envs.wrappers.recording import RecordingWrapper

    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecordingWrapper):
            return env
        env = env.env
    return None


class LocalEnvSlots:
    """``n`` envs built by ``make_env`` in this process.

    Args:
        make_env: builds one env (called ``n`` times, and again after an env crash when
            ``strict``).
        n: slots.
        strict: the trainer's slots: a ConfigError the env raises is raised, and an env
            that raised anything else is closed and replaced by a new one (its episode an
            ``env_error`` whose message is the exception). Not strict, the evaluator's:
            every exception ends only its episode (``"reset failed: ..."``), and the env
            stays, to be reset for the next job, since scripted policies hold it.
    """

    def __init__(self, make_env: EnvFactory, n: int, *, strict: bool = True) -> None:
        self.make_env = make_env
        self.strict = strict
        self.envs = [make_env() for _ in range(n)]
        self._was_reset = [False] * n
        self._borrowed = False

    @classmethod
    def borrowed(cls, envs: Sequence[gym.Env[Any, Any]]) -> LocalEnvSlots:
        """Slots over envs the caller owns (an adapter's): not strict, so an exception
        ends only its episode and the env stays (never replaced, and :meth:`close` leaves
        it open), except an :class:`~agentgym_envs.core.errors.AgentGymError` from a
        reset (a misconfigured reset, such as an unknown task id), which is raised."""

        def no_factory() -> gym.Env[Any, Any]:
            raise AssertionError("borrowed slots never build an env")

        slots = cls(no_factory, 0, strict=False)
        slots.envs = list(envs)
        slots._was_reset = [False] * len(slots.envs)
        slots._borrowed = True
        return slots

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, i: int, seed: int | None, options: Mapping[str, Any] | None) -> SlotResult:
        opts = dict(options) if options is not None else None
        try:
            obs, info = self.envs[i].reset(seed=seed, options=opts)
        except Exception as exc:  # an env crash is an env error, never a policy failure
            if self._borrowed and isinstance(exc, AgentGymError):
                raise  # a misconfigured reset: the caller's mistake, not an env failure
            return self._crashed(i, Call.RESET, exc)
        self._was_reset[i] = True
        return SlotResult(i, Call.RESET, obs, info=info)

    def step_many(
        self, actions: Sequence[tuple[int, str]], notes: Sequence[Note] | None = None
    ) -> list[SlotResult]:
        return [
            self._step(i, action, notes[k] if notes else None)
            for k, (i, action) in enumerate(actions)
        ]

    def script(self, i: int, script: Script) -> Callable[[], str]:
        return script(self.envs[i])

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        """Raises:
        ConfigError: an env has no snapshot API (``get_state``/``set_state``)."""
        return [self._snapshot(i) for i in slots]

    def set_state(self, i: int, state: Any) -> SlotResult:
        env = self.envs[i]
        inner = snapshot_api(env)
        try:
            if not self._was_reset[i]:  # wrappers refuse a step before a reset
                env.reset(seed=0)
                self._was_reset[i] = True
            inner.set_state(state)
        except Exception as exc:
            return self._crashed(i, Call.RESET, exc)
        return SlotResult(i, Call.RESET)

    def close(self) -> None:
        if self._borrowed:
            return
        for env in self.envs:
            if self.strict:
                env.close()
                continue
            try:
                env.close()
            except Exception:  # closing a broken env must not stop the evaluation
                log.exception("env close failed")

    def _snapshot(self, i: int) -> Any:
        inner = snapshot_api(self.envs[i])
        try:
            return inner.get_state()
        except Exception as exc:
            log.warning("env snapshot failed (slot %d): %r", i, exc)
            return None

    def _step(self, i: int, action: str, note: Note) -> SlotResult:
        if note and (recorder := _recorder(self.envs[i])) is not None:
            recorder.note(**note)
        try:
            obs, reward, terminated, truncated, info = self.envs[i].step(action)
        except Exception as exc:
            return self._crashed(i, Call.STEP, exc)
        return SlotResult(i, Call.STEP, obs, float(reward), bool(terminated), bool(truncated), info)

    def _crashed(self, i: int, call: Call, exc: Exception) -> SlotResult:
        """``exc`` from the env as a crashed result (see ``strict``).

        Raises:
            ConfigError: ``exc`` is one and the slots are strict (a configuration
                mistake: the run stops with its fix).
        """
        if self.strict and isinstance(exc, ConfigError):
            raise exc
        message = f"{type(exc).__name__}: {exc}"
        if not self.strict:
            log.exception("env %s crashed", call.value)
            return crashed_result(
                i, call, CrashCode.ENV_EXCEPTION, f"{call.value} failed: {message}"
            )
        log.warning("env crashed (slot %d): %r; replacing it", i, exc)
        try:
            self.envs[i].close()
        finally:
            self.envs[i] = self.make_env()
            self._was_reset[i] = False
        return crashed_result(i, call, CrashCode.ENV_EXCEPTION, message)


__all__ = ["LocalEnvSlots"]
