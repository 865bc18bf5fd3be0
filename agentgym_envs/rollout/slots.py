"""The env slots protocol: where a rollout's envs live, seen the same way everywhere.

A rollout plays one episode per env slot and steps all its live slots at once after
each generation call. It talks to its slots through :class:`EnvSlots` (reset one slot,
step several at once, snapshots, a scripted policy per slot), which three classes
satisfy:

* :class:`~agentgym_envs.rollout.local.LocalEnvSlots` -- envs in this process;
* :class:`~agentgym_envs.rollout.process.ProcessEnvSlots` -- one worker process per
  slot: a segfault, an OOM kill or a hang costs one episode;
* :class:`~agentgym_envs.rollout.ray_slots.RayEnvSlots` -- the slots of a
  :class:`~agentgym_envs.distributed.pool.RayEnvPool`, stepped in parallel on its actors.

Every call answers with a :class:`~agentgym_envs.distributed.results.SlotResult`, so a
crash looks the same wherever the env lives (``crashed``, ``error``, an ``env_error``
info). A :class:`~agentgym_envs.core.errors.ConfigError` the env raises (its settings
cannot work) is no crash for *strict* slots, the trainer's: they raise it, and the run
stops with its message instead of masking every episode as an ``env_error``. The
evaluator's slots are not strict: one entry's mistake ends only its episodes.

Scripted policies that need the live env (the oracle, do-nothing) read ``slots.envs``:
the envs themselves in this process, elsewhere stand-ins whose ``unwrapped`` answers
``oracle().act()`` and ``noop_action`` from the env (:class:`EnvCrashed` when it broke).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import gymnasium as gym

from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.distributed.results import CrashCode, SlotResult

EnvFactory = Callable[[], gym.Env[Any, Any]]
"""Builds one env (picklable where the slots live in other processes: a module-level
function or a ``functools.partial`` of one)."""

Script = Callable[[gym.Env[Any, Any]], Callable[[], str]]
"""A scripted policy: given a freshly reset env, the function that gives its next action."""

Note = Mapping[str, Any] | None
"""What the env's recording wrapper adds to the step's record (the evaluator's trial,
entry and token usage), or None."""


class EnvCrashed(AgentGymError, RuntimeError):
    """The env (or the process or actor hosting it) failed; the episode is an
    ``env_error``."""


class EnvSlots(Protocol):
    """The env slots a rollout plays on (see the module docstring)."""

    def __len__(self) -> int: ...

    @property
    def envs(self) -> Sequence[Any]:
        """What a scripted policy reads, one per slot: the env, or its stand-in."""
        ...

    def reset(self, i: int, seed: int | None, options: Mapping[str, Any] | None) -> SlotResult:
        """Reset slot ``i`` (``obs`` and ``info`` of the result), or a crashed result."""
        ...

    def step_many(
        self, actions: Sequence[tuple[int, str]], notes: Sequence[Note] | None = None
    ) -> list[SlotResult]:
        """Step each ``(slot, action)`` (with its note for the recorder, if given): all
        sent before any result is read, in parallel where the envs are remote; results
        in order, crashed ones included."""
        ...

    def script(self, i: int, script: Script) -> Callable[[], str]:
        """``script`` bound to slot ``i``'s episode that was just reset."""
        ...

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        """The snapshot of each slot's episode (taken in parallel where the envs are
        remote), None where the env (or its host) broke while taking it."""
        ...

    def set_state(self, i: int, state: Any) -> SlotResult:
        """Restore a snapshot into slot ``i`` (a reset to that state, ``call`` RESET with
        no observation), or a crashed result."""
        ...

    def close(self) -> None:
        """Close every env (and the processes or actors hosting them)."""
        ...


def oracle_script(env: gym.Env[Any, Any]) -> Callable[[], str]:
    """The env's scripted solver (``env.unwrapped.oracle().act``), made for the episode
    that was just reset. A Ray pool runs it in the env's actor instead."""
    act: Callable[[], str] = env.unwrapped.oracle().act  # type: ignore[attr-defined]
    return act


def snapshot_api(env: gym.Env[Any, Any]) -> Any:
    """``env.unwrapped``, checked to have ``get_state`` and ``set_state``.

    Raises:
        ConfigError: it has not.
    """
    inner = env.unwrapped
    if not (
        callable(getattr(inner, "get_state", None)) and callable(getattr(inner, "set_state", None))
    ):
        raise ConfigError(
            f"{type(inner).__name__} has no snapshot API (get_state/set_state), which "
            "branch rollouts need; add it (see docs/architecture.md section 2) or use --branch none"
        )
    return inner


def config_checked(result: SlotResult, strict: bool) -> SlotResult:
    """``result``, unless ``strict`` and the env refused its configuration in its host
    (a ``config_error`` result): that is raised here.

    Raises:
        ConfigError: the env raised a ConfigError where it lives.
    """
    if strict and result.code is CrashCode.CONFIG_ERROR:
        raise ConfigError(result.error)
    return result


class RemoteOracle:
    """An oracle that lives next to a remote env: each ``act`` asks for its next action."""

    def __init__(self, call: Callable[[str], Any]) -> None:
        self._call = call

    def act(self) -> str:
        text = self._call("oracle_act")
        assert isinstance(text, str)
        return text


class RemoteEnv:
    """A remote env's stand-in for scripted policies: ``unwrapped`` is itself, with
    ``oracle()`` and ``noop_action`` answered where the env lives.

    Args:
        call: runs a control command (``oracle_act``, ``noop_action``) on the env;
            failures are :class:`EnvCrashed`.
    """

    def __init__(self, call: Callable[[str], Any]) -> None:
        self._call = call
        self.unwrapped = self

    def oracle(self) -> RemoteOracle:
        return RemoteOracle(self._call)

    @property
    def noop_action(self) -> str:
        text = self._call("noop_action")
        assert isinstance(text, str)
        return text


__all__ = [
    "EnvCrashed",
    "EnvFactory",
    "EnvSlots",
    "Note",
    "RemoteEnv",
    "RemoteOracle",
    "Script",
    "config_checked",
    "oracle_script",
    "snapshot_api",
]
