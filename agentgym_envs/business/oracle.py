"""The oracle of the business simulators: it plays a task's gold conversation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentgym_envs.core.faults import REFUSED_KINDS, FaultKind

if TYPE_CHECKING:
    from agentgym_envs.business.base import BusinessEnv


class GoldConversationOracle:
    """Follows the task's gold conversation, repeating a call the infrastructure failed
    (timeout, rate limit, empty result, or another refused fault; the same idempotency
    key makes a repeated write safe). After a snapshot restore it finds its place by
    matching the env's history.

    Args:
        env: the env whose current task it plays.
    """

    _RETRY = ("timeout", "rate_limited")
    _REPEAT = frozenset(k.value for k in REFUSED_KINDS | {FaultKind.EMPTY_RESULT})

    def __init__(self, env: BusinessEnv) -> None:
        self.env = env
        self._plan = env.task.solution
        self._canon = [env.parser.parse(env.localize_action(a)).canonical for a in self._plan]
        self._index = self._position()

    def _position(self) -> int:
        i = 0
        for entry in self.env._history:
            if i < len(self._canon) and entry == self._canon[i]:
                i += 1
        return i

    def act(self) -> str:
        """The next action of the gold conversation (or a repeat of a faulted one)."""
        info = self.env.last_info
        if info is not None and self._index > 0 and info["step"] == self.env.steps_taken:
            calls = info["tool_calls"]
            faulted = any(c["fault"] in self._REPEAT for c in calls)
            if info["error"].get("code") in self._RETRY or faulted:
                return self._plan[self._index - 1]
        if self._index >= len(self._plan):
            return self.env.noop_action
        action = self._plan[self._index]
        self._index += 1
        return action
