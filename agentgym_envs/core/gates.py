"""Safety gates: checks that run before a tool call's side effect.

A gate either blocks the call (nothing changes, the agent sees why) or stops the
episode with ``Outcome.SAFETY_STOP`` and the reward config's ``hard_fail`` return.
A finite penalty is not enough for hard constraints: a policy could learn "violate,
then succeed" if success pays more than the penalty costs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tools import ToolCall

# The env type a gate reads: an env class, or a Protocol of what the gate reads where the
# gate's module may not import its env. Contravariant: a gate written for a family's base
# env (``SafetyGate[BusinessEnv]``) also guards each of its subclasses (``RetailEnv``).
EnvT = TypeVar("EnvT", contravariant=True)


class GateMode(StrEnum):
    """What a gate does when it fires."""

    BLOCK = "block"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """A fired gate: which one, what it did, and why."""

    gate: str
    mode: GateMode
    reason: str


class GateBase:
    """What every gate has: a name, a description and a mode (block or stop), and the
    verdict it gives when it fires. :class:`SafetyGate` checks a call before it runs;
    :class:`~agentgym_envs.core.staging.EffectsGate` checks a staged call's effects.

    Args:
        mode: block the call or stop the episode (the subclass's default if None).
    """

    name: str = ""
    description: str = ""
    default_mode: GateMode = GateMode.STOP

    def __init__(self, mode: GateMode | str | None = None) -> None:
        try:
            self.mode = GateMode(mode) if mode is not None else self.default_mode
        except ValueError:
            raise ConfigError(
                f"gate {self.name!r}: mode must be 'block' or 'stop', got {mode!r}"
            ) from None

    def _verdict(self, reason: str | None) -> GateVerdict | None:
        if reason is None:
            return None
        return GateVerdict(gate=self.name, mode=self.mode, reason=reason)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode.value!r})"


class SafetyGate(GateBase, ABC, Generic[EnvT]):
    """Base class of safety gates, generic over the env type they read.

    Subclasses name that type (``class IrreversibleTrapGate(SafetyGate["DungeonEnv"])``),
    set ``name`` and ``description`` and implement :meth:`violation`.

    Args:
        mode: block the call or stop the episode (the subclass's default if None).
    """

    @abstractmethod
    def violation(self, env: EnvT, call: ToolCall) -> str | None:
        """Return why ``call`` must not run in ``env``'s current state, or None if it may."""

    def check(self, env: EnvT, call: ToolCall) -> GateVerdict | None:
        """Run the gate; a verdict if it fires."""
        return self._verdict(self.violation(env, call))
