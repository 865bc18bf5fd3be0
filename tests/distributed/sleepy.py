"""A Sokoban that hangs or dies on a magic action, for the Ray pool's fault tests.

Importing this module registers ``agentgym-test/SleepySokoban-v0``: the action
``hang`` sleeps far past any step timeout, ``die`` ends the process with ``os._exit``,
``raise`` raises (the env itself fails; its actor lives on).
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym

from agentgym_envs.games.sokoban import SokobanEnv

ENV_ID = "tests.distributed.sleepy:agentgym-test/SleepySokoban-v0"


class SleepySokobanEnv(SokobanEnv):
    def __init__(self, build_s: float = 0.0, **kwargs: Any) -> None:
        time.sleep(build_s)  # a slow env to build (a browser, a big repo)
        super().__init__(**kwargs)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "hang":
            time.sleep(3600)
        if action == "die":
            os._exit(7)
        if action == "raise":
            raise RuntimeError("this step fell over")
        return super().step(action)


if "agentgym-test/SleepySokoban-v0" not in gym.registry:
    gym.register(id="agentgym-test/SleepySokoban-v0", entry_point=SleepySokobanEnv)
