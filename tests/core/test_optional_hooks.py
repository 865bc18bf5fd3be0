"""The minimum env defines no oracle and no task generator: it runs on given tasks, and
what needs the missing hooks says which method to define. Task files can live in the
env's own ``task_dir``."""

from __future__ import annotations

import pytest

from agentgym_envs.core import AgentEnv, HookNotImplementedError, Task, ToolResult, tool
from agentgym_envs.core.tasks import build_task_set, load_task_set, task_path, write_task_set
from agentgym_envs.eval.conformance import oracle_episode

TASK = Task("one", "train", "easy", "Press the button.", 0, {}, ("press()",), 5)


class ButtonEnv(AgentEnv):
    name = "Button"
    noop_action = "wait()"

    @tool("Press the button.")
    def press(self) -> ToolResult:
        self.pressed = True
        return ToolResult("Pressed.")

    @tool("Wait.")
    def wait(self) -> ToolResult:
        return ToolResult("Waited.")

    def _load_task(self, task: Task) -> None:
        self.pressed = False

    def _get_world(self) -> bool:
        return self.pressed

    def _set_world(self, world: bool) -> None:
        self.pressed = world

    def render_view(self) -> str:
        return f"[pressed={self.pressed}]"

    def _goal_reached(self) -> bool:
        return self.pressed


def test_an_env_without_oracle_or_generator_runs_on_given_tasks() -> None:
    env = ButtonEnv(tasks=[TASK])
    env.reset(seed=0)
    assert env.step("press()")[4]["outcome"].value == "success"
    assert ButtonEnv.validate_task(TASK) is None  # the stored solution stands in for an oracle


def test_missing_hooks_say_which_method_to_define() -> None:
    env = ButtonEnv(tasks=[TASK])
    env.reset(seed=0)
    with pytest.raises(HookNotImplementedError, match=r"define Button\.oracle\(\)"):
        oracle_episode(env, 0)
    with pytest.raises(HookNotImplementedError, match=r"define Button\.generate_task\(\)"):
        env.reset(seed=0, options={"task_seed": 3})
    with pytest.raises(NotImplementedError, match="generate_task"):
        build_task_set(ButtonEnv, {"train": 1, "test": 1, "ood": 1})


def test_task_dir_puts_the_task_file_next_to_the_env(tmp_path, monkeypatch) -> None:
    write_task_set(tmp_path / "button.jsonl", "Button", {}, [TASK])
    assert task_path("button.jsonl", tmp_path) == tmp_path / "button.jsonl"
    assert load_task_set("button.jsonl", tmp_path).get("one") == TASK
    monkeypatch.setattr(ButtonEnv, "task_file", "button.jsonl")
    monkeypatch.setattr(ButtonEnv, "task_dir", tmp_path)
    env = ButtonEnv()
    assert env.reset(seed=0)[1]["task"]["id"] == "one"
