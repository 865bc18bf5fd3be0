"""The cost ledger: what an episode has spent, reported in ``info["cost"]``."""

from __future__ import annotations

from typing import Any

from agentgym_envs.core.info import CostInfo


class CostLedger:
    """Counts tool calls, per-tool cost, policy errors, env time, characters and tokens.

    Tokens are unknown to the env; trainers and policies report them with
    :meth:`add_tokens` (``env.unwrapped.ledger.add_tokens(...)``).
    """

    __slots__ = (
        "chars_in",
        "chars_out",
        "env_time_ms",
        "errors",
        "faults",
        "per_tool",
        "tokens_in",
        "tokens_out",
        "tool_calls",
        "total",
    )

    def __init__(self) -> None:
        self.tool_calls = 0
        self.per_tool: dict[str, float] = {}
        self.total = 0.0
        self.errors = 0
        self.faults = 0
        self.env_time_ms = 0.0
        self.chars_in = 0
        self.chars_out = 0
        self.tokens_in = 0
        self.tokens_out = 0

    def charge(self, tool: str, cost: float) -> None:
        """Record one call of ``tool`` costing ``cost`` units."""
        self.tool_calls += 1
        self.per_tool[tool] = self.per_tool.get(tool, 0.0) + cost
        self.total += cost

    def add_tokens(self, tokens_in: int, tokens_out: int) -> None:
        """Record tokens the policy read and wrote (called by trainers and policies)."""
        self.tokens_in += int(tokens_in)
        self.tokens_out += int(tokens_out)

    def snapshot(self) -> CostInfo:
        """A fresh ``info["cost"]`` dictionary."""
        return {
            "tool_calls": self.tool_calls,
            "per_tool": dict(self.per_tool),
            "total": self.total,
            "errors": self.errors,
            "faults": self.faults,
            "env_time_ms": self.env_time_ms,
            "chars_in": self.chars_in,
            "chars_out": self.chars_out,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }

    def get_state(self) -> tuple[Any, ...]:
        """Plain data for a snapshot."""
        return tuple(
            dict(self.per_tool) if name == "per_tool" else getattr(self, name)
            for name in self.__slots__
        )

    def set_state(self, state: tuple[Any, ...]) -> None:
        """Restore from :meth:`get_state` output."""
        for name, value in zip(self.__slots__, state, strict=True):
            setattr(self, name, dict(value) if name == "per_tool" else value)
