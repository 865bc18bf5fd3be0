"""A Sokoban that breaks on purpose, for the evaluator's crash tests.

Importing this module registers ``agentgym-test/CrashySokoban-v0``. With
``crash="exit"`` the process dies (``os._exit``) at step 2 of every episode of the
tasks in ``CRASH_TASKS``; with ``crash="raise"`` the step raises instead; with
``crash="foreign_info"`` every step of those tasks answers an ``info["user_llm"]`` that
is not the LLM user's report (a plugin env's own data under that key).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym

from agentgym_envs.games.sokoban import SokobanEnv

ENV_ID = "agentgym-test/CrashySokoban-v0"
SUITE_ENV = f"tests.eval.crashy:{ENV_ID}"


class CrashySokobanEnv(SokobanEnv):
    crash_tasks: tuple[str, ...] = ()

    def __init__(self, crash: str = "raise", crash_tasks: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(**kw)
        self.crash = crash
        self.crash_tasks = tuple(crash_tasks)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task.id in self.crash_tasks and self.crash == "foreign_info":
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated, truncated, {**info, "user_llm": {"voice": 1}}
        if self.task.id in self.crash_tasks and self.steps_taken == 1:
            if self.crash == "exit":
                os._exit(3)
            raise RuntimeError("the backend of this env fell over")
        return super().step(action)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=CrashySokobanEnv)
