"""A bandit whose chosen episodes wait at a gate that works across processes (a file),
for the Ray rollout worker's tests: the env plays inside the actor, the test drives the
gate from its own process.

An episode whose env seed is in ``held`` lasts ``turns`` steps (reward 0 and outcome
``continue`` before the last, which the bandit answers). At its first step it writes
``<folder>/turn1`` and waits until ``<folder>/go`` exists: the test acts (pushes new
weights, kills the actor) while the episode is between its first and second turn.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym_envs.core.info import Outcome
from agentgym_trainers.env_slots import make_trainer_env

BANDIT = "agentgym-train/DigitFraction-v0"
BANDIT_KWARGS: dict[str, Any] = {"charset": "vowels", "prompt_words": 6}


class Gated(gym.Wrapper[str, str, str, str]):
    def __init__(
        self, env: gym.Env[str, str], folder: Path, held: frozenset[int], turns: int = 3
    ) -> None:
        super().__init__(env)
        self.folder, self.held_seeds, self.turns = folder, held, turns
        self.held, self.turn = False, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.held, self.turn = seed in self.held_seeds, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> Any:
        self.turn += 1
        if self.held and self.turn == 1:
            (self.folder / "turn1").touch()
            deadline = time.monotonic() + 120.0
            while not (self.folder / "go").exists():  # the test opens the gate
                if time.monotonic() > deadline:
                    raise RuntimeError("the gate was never opened")
                time.sleep(0.01)
        if self.held and self.turn < self.turns:
            return "go on", 0.0, False, False, {"outcome": Outcome.CONTINUE}
        return self.env.step(action)


def gated_bandit(folder: str, held: frozenset[int]) -> gym.Env[str, str]:
    """The bandit behind a gate in ``folder`` for the episodes of seeds ``held``
    (module-level, so Ray pickles it into the actor by reference)."""
    return Gated(make_trainer_env(BANDIT, BANDIT_KWARGS), Path(folder), held)


def wait_for(path: Path, within_s: float = 300.0) -> None:
    """Until ``path`` exists (the actor reached the gate)."""
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {within_s:g} s"
        time.sleep(0.01)
