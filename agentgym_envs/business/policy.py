"""Policy documents generated from a registry of rules, and the gates that enforce them.

Each rule has an id. The policy document the agent reads at reset is rendered from the
same registry the gates cite, so the text and the enforcement cannot drift apart: a
gate's verdict names the rule id it enforces.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentgym_envs.core.gates import GateMode, SafetyGate
from agentgym_envs.core.tools import ToolCall

if TYPE_CHECKING:
    from agentgym_envs.business.base import BusinessEnv


@dataclass(frozen=True)
class Rule:
    """One rule of a domain policy."""

    id: str
    title: str
    text: str


def policy_document(title: str, intro: str, rules: Sequence[Rule]) -> str:
    """The markdown policy the agent gets at reset."""
    lines = [f"# {title}", "", intro, "", "## Rules", ""]
    lines += [f"- **{r.id}** ({r.title}): {r.text}" for r in rules]
    return "\n".join(lines)


class RuleGate(SafetyGate["BusinessEnv"]):
    """A safety gate that enforces one policy rule.

    Subclasses set ``rule`` and implement :meth:`broken`, returning why the call breaks
    the rule. The gate's name is the rule id; the reason cites the rule.
    """

    rule: Rule
    default_mode = GateMode.STOP

    def __init__(self, mode: GateMode | str | None = None, *, rule: Rule | None = None) -> None:
        if rule is not None:  # the same rule in a domain's words (see BusinessEnv.auth_rule)
            self.rule = rule
        self.name = self.rule.id
        self.description = self.rule.text
        super().__init__(mode)

    def violation(self, env: BusinessEnv, call: ToolCall) -> str | None:
        why = self.broken(env, call)
        if why is None:
            return None
        if self.mode is GateMode.BLOCK:
            env.on_blocked(call)  # the env decides what a blocked call costs
        return f"{why} (policy {self.rule.id}: {self.rule.title})"

    @abstractmethod
    def broken(self, env: BusinessEnv, call: ToolCall) -> str | None:
        """Why ``call`` breaks the rule in ``env``'s current state, or None."""
