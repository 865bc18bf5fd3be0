"""A complete agentgym env in one file: count up to a target (walkthrough: docs/add_an_env.md)."""

import random
from dataclasses import dataclass
from pathlib import Path

from agentgym_envs.core import AgentEnv, Oracle, Task, ToolKind, ToolResult, tool
from agentgym_envs.registration import EnvEntry


class CounterEnv(AgentEnv):
    """Make a counter equal a target.

    Description: the counter starts at the task's ``start``. Observation: tool results,
    then ``[counter=<value>/<target>]``. Tools: ``add(n)`` (WRITE, n in -3..3).
    Milestones: none. Safety gates: none. Rewards: the default ``RewardConfig``.
    Termination: success at the target, timeout after the task's ``max_steps``.
    """

    name = "Counter"
    family = "examples"
    version = "0"
    task_file = "counter.jsonl"
    task_dir = Path(__file__).parent / "tasks"  # tasks live next to this module
    task_counts = {"train": 20, "test": 5, "ood": 5}  # per split and difficulty
    example_action = "add(n=1)"  # shown in the system prompt and in parse errors
    noop_action = "add(n=0)"  # "doing nothing": the checks assert it never succeeds

    @tool(
        "Add n to the counter.",
        parameters={"n": {"type": "integer", "minimum": -3, "maximum": 3}},
        kind=ToolKind.WRITE,
    )
    def add(self, n: int) -> ToolResult:
        self.value += n
        return ToolResult(f"The counter is {self.value}.")

    def _load_task(self, task: Task) -> None:
        self.value, self.target = int(task.spec["start"]), int(task.spec["target"])

    def _get_world(self) -> int:  # plain data: snapshots pickle it
        return self.value

    def _set_world(self, world: int) -> None:
        self.value = world

    def render_view(self) -> str:
        return f"[counter={self.value}/{self.target}]"

    def _goal_reached(self) -> bool:
        return self.value == self.target

    # -- optional extras: `agentgym check` plays the oracle, `agentgym tasks build` generates

    def oracle(self) -> Oracle:
        return CounterOracle(self)

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        rng = random.Random(seed)  # never global random state
        start = rng.randint(-50, -1) if split == "ood" else rng.randint(0, 50)  # unseen starts
        gap = rng.randint(*{"easy": (1, 3), "medium": (4, 9), "hard": (10, 20)}[difficulty])
        steps = [3] * (gap // 3) + ([gap % 3] if gap % 3 else [])
        return Task(
            id=f"counter-{difficulty}-{split}-{seed}",
            split=split,
            difficulty=difficulty,
            instruction=f"Make the counter equal {start + gap}.",
            seed=seed,
            spec={"start": start, "target": start + gap},
            solution=tuple(f"add(n={n})" for n in steps),
            max_steps=len(steps) + 5,
        )


@dataclass
class CounterOracle:
    """Adds as much as it may without passing the target."""

    env: CounterEnv

    def act(self) -> str:
        return f"add(n={max(-3, min(3, self.env.target - self.env.value))})"


ENTRY = EnvEntry("Counter", "0", f"{__name__}:CounterEnv", "examples", description="count up")
