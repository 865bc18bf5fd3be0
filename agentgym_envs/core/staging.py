"""Staged effects: run a call on a scratch copy of the world, check what it changed, commit.

Some tools run code the agent wrote (a shell command, a test run), which can change the
world in ways no argument shows. Such a tool is declared ``@tool(..., staged=True)``
and the call runner gives it three phases after the safety gates passed:

1. **stage**: the env's :meth:`~agentgym_envs.core.env.AgentEnv.stage_call` hook runs
   the call on a scratch copy and returns its :class:`StagedEffects`, uncommitted;
2. **check**: each :class:`EffectsGate` of the env (``env.effect_gates``) reads the
   effects; one that fires blocks the call or stops the episode, and the effects are
   discarded;
3. **commit**: the tool's handler is called as ``handler(staged, **arguments)`` and
   makes the effects the live world (or reports a policy-side problem recorded in them).

The runner owns the effects between the phases and calls :meth:`StagedEffects.discard`
whenever they are not committed (a gate fired, an injected fault refused the call, the
handler failed), so no scratch copy outlives its step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic

from agentgym_envs.core.gates import EnvT, GateBase, GateVerdict
from agentgym_envs.core.tools import ToolCall


class StagedEffects(ABC):
    """What one call did on a scratch copy of the world, not yet committed.

    An env subclasses it with the plain data its effect gates read (RepoFix: the changed
    files of the command's copy of the workspace, and the command's result).
    """

    @abstractmethod
    def discard(self) -> None:
        """Drop the scratch copy unless the handler committed it. Idempotent; never raises."""


class EffectsGate(GateBase, ABC, Generic[EnvT]):
    """A safety gate over a staged call's effects (it runs after staging, before commit),
    generic over the env type it reads (like :class:`~agentgym_envs.core.gates.SafetyGate`).

    Subclasses set ``name`` and ``description`` and implement :meth:`violation`, which
    only reads the effects.

    Args:
        mode: block the call or stop the episode (the subclass's default if None).
    """

    @abstractmethod
    def violation(self, env: EnvT, call: ToolCall, staged: StagedEffects) -> str | None:
        """Why the effects ``staged`` of ``call`` must not be committed, or None."""

    def check(self, env: EnvT, call: ToolCall, staged: StagedEffects) -> GateVerdict | None:
        """Run the gate; a verdict if it fires."""
        return self._verdict(self.violation(env, call, staged))


__all__ = ["EffectsGate", "StagedEffects"]
