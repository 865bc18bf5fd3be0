"""A tiny env used to test the core's step loop: a counter with a write tool and a gate.

It is a test fixture, not a registered env.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_envs.core import (
    AgentEnv,
    Invariant,
    Milestone,
    SafetyGate,
    Task,
    ToolCall,
    ToolKind,
    ToolResult,
    TransientToolError,
    tool,
)


def make_task(target: int = 3, task_id: str = "count-3", split: str = "train") -> Task:
    return Task(
        id=task_id,
        split=split,
        difficulty="easy",
        instruction=f"Count to {target}.",
        seed=target,
        spec={"target": target},
        solution=("add(n=1)",) * target,
        max_steps=10,
    )


class ForbiddenNumberGate(SafetyGate):
    """Adding 13 is forbidden."""

    name = "forbidden_number"

    def violation(self, env: Any, call: ToolCall) -> str | None:
        if call.name == "add" and call.arguments.get("n") == 13:
            return "adding 13 is forbidden"
        return None


class CounterEnv(AgentEnv):
    name = "Counter"
    family = "test"
    version = "0"
    example_action = "add(n=1)"
    noop_action = "peek()"
    accepts_messages = True

    def __init__(self, *, gate_mode: str = "stop", **kwargs: Any) -> None:
        kwargs.setdefault("tasks", [make_task(3), make_task(5, "count-5", "test")])
        super().__init__(**kwargs)
        self.gates.append(ForbiddenNumberGate(gate_mode))
        self.value = 0
        self.flaky_failures = 0
        self.messages: list[str] = []

    @tool(
        "Add n to the counter.",
        parameters={"n": {"type": "integer", "minimum": -20, "maximum": 20}},
        kind=ToolKind.WRITE,
        cost=2.0,
        duration_ms=5.0,
        idempotent=True,
    )
    def add(self, n: int) -> ToolResult:
        self.value += n
        return ToolResult(f"The counter is {self.value}.")

    @tool("Read the counter.", cost=0.5)
    def peek(self) -> ToolResult:
        return ToolResult(f"The counter is {self.value}.")

    @tool(
        "A backend that fails transiently `failures` times, then works.",
        parameters={"failures": {"type": "integer", "minimum": 0}},
    )
    def flaky(self, failures: int) -> ToolResult:
        if self.flaky_failures < failures:
            self.flaky_failures += 1
            raise TransientToolError("backend busy")
        return ToolResult("flaky backend answered")

    @tool("A tool whose backend crashes.")
    def crash(self) -> ToolResult:
        raise RuntimeError("backend exploded")

    @tool("Fails as a policy error.")
    def fail(self) -> ToolResult:
        return ToolResult.failure("no_such_thing", "There is no such thing.")

    def on_message(self, text: str) -> ToolResult:
        self.messages.append(text)
        return ToolResult(f"User heard: {text}")

    def _load_task(self, task: Task) -> None:
        self.value = 0
        self.target = int(task.spec["target"])

    def _get_world(self) -> int:
        return self.value

    def _set_world(self, world: int) -> None:
        self.value = world

    def render_view(self) -> str:
        return f"[counter={self.value}/{self.target}]"

    def _goal_reached(self) -> bool:
        return self.value == self.target

    def _dead_end(self) -> str | None:
        return "overshot the target" if self.value > self.target else None

    def _milestones(self) -> Sequence[Milestone]:
        return [
            Milestone("half", "halfway", lambda: self.value * 2 >= self.target),
            Milestone("almost", "one short", lambda: self.value >= self.target - 1, weight=2.0),
        ]

    def _invariants(self) -> Sequence[Invariant]:
        return [
            Invariant("not_negative", "the counter never goes below -5", lambda: self.value >= -5)
        ]

    def oracle(self) -> Any:
        env = self

        class _Oracle:
            def act(self) -> str:
                return "add(n=1)" if env.value < env.target else "peek()"

        return _Oracle()

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        return make_task(2 + seed % 5, f"count-gen-{seed}", split)
