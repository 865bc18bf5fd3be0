"""A Sokoban that takes its time, for the tests that interrupt an evaluation.

Importing this module registers ``agentgym-test/SlowSokoban-v0``: each step sleeps
``delay_s`` seconds first, so a test can stop ``agentgym eval`` between episodes.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from agentgym_envs.games.sokoban import SokobanEnv

ENV_ID = "agentgym-test/SlowSokoban-v0"
SUITE_ENV = f"tests.eval.slow:{ENV_ID}"


class SlowSokobanEnv(SokobanEnv):
    def __init__(self, delay_s: float = 0.1, **kw: Any) -> None:
        super().__init__(**kw)
        self.delay_s = delay_s

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        time.sleep(self.delay_s)
        return super().step(action)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=SlowSokobanEnv)
