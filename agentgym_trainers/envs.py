"""Training fixtures: small envs with a dense, known reward for testing and benchmarking
the trainer itself.

They are registered under the ``agentgym-train`` namespace, not ``agentgym``: they are
not part of the benchmark suite (``agentgym list`` does not show them), but they follow
the same contract (text spaces, seeded reset, ``get_state``/``set_state``, the trainer's
``info`` keys) and pass Gymnasium's ``check_env`` (tested).
"""

from __future__ import annotations

import hashlib
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_envs.core.errors import StateError
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.spaces import TextSpace, sanitize

NAMESPACE = "agentgym-train"

# character classes the reward can count
CHARSETS = {
    "digits": str.isdigit,
    "vowels": lambda c: c.lower() in "aeiou",
    "upper": str.isupper,
}

_TOPICS = (
    "inventory counts",
    "lottery numbers",
    "phone extensions",
    "sensor readings",
    "page numbers",
    "train times",
    "zip codes",
    "dice rolls",
)


class DigitFractionEnv(gym.Env[str, str]):
    """A one-step bandit: the reward is the fraction of the reply's characters that are digits
    (or, with ``charset``, vowels or capitals).

    Description:
        Each task asks for a reply about a topic; whatever the reply says, the reward is
        ``digits / non-space characters`` (0 for an empty reply). It is the single-turn
        "digit fraction" workload used to compare trainer speed with TRL. With
        ``charset="vowels"`` even a random policy's reward varies, which makes it the
        bandit on which tests check that a few RL steps raise the reward.
    Observation:
        The task text, padded with a fixed preamble to about ``prompt_words`` words so
        the prompt length is controlled.
    Rewards:
        ``reward_components = {"digits": fraction}``; the episode ends after one step.
    Termination:
        Always terminated after the first step; success when the fraction reaches
        ``success_threshold``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    version = "2"

    def __init__(
        self,
        *,
        prompt_words: int = 60,
        success_threshold: float = 0.9,
        num_tasks: int = 64,
        charset: str = "digits",
        render_mode: str | None = None,
    ) -> None:
        if charset not in CHARSETS:
            raise ValueError(f"charset must be one of {sorted(CHARSETS)}, got {charset!r}")
        self.charset = charset
        if not 0.0 < success_threshold <= 1.0:
            raise ValueError(
                f"success_threshold must be in (0, 1], got {success_threshold}; use e.g. 0.9"
            )
        if prompt_words < 0 or num_tasks < 1:
            raise ValueError("prompt_words must be >= 0 and num_tasks >= 1")
        self.prompt_words = prompt_words
        self.success_threshold = success_threshold
        # held-out tasks have their own ids (and so their own prompts): an evaluation on
        # "test" never replays a training prompt
        self.split_ids = {
            "train": tuple(f"digits-{i:04d}" for i in range(num_tasks)),
            "test": tuple(f"digits-test-{i:04d}" for i in range(num_tasks)),
        }
        self.task_ids = self.split_ids["train"] + self.split_ids["test"]
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_length=8192)
        self.action_space = TextSpace(max_length=8192)
        self._task: str | None = None
        self._done = True
        self._obs = ""
        self._seed = 0

    def _instruction(self, task_id: str) -> str:
        index = int(hashlib.sha256(task_id.encode()).hexdigest(), 16)
        topic = _TOPICS[index % len(_TOPICS)]
        filler = " ".join(["Reply", "with", "text."] * (self.prompt_words // 3))
        return f"Task {task_id}: list some {topic}. {filler}".strip()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; the only one is task_id")
        train = self.split_ids["train"]
        if task_id is None:
            task_id = train[int(self.np_random.integers(len(train)))]
        elif task_id not in self.task_ids:
            raise KeyError(
                f"unknown task {task_id!r}; ids are digits-0000..{train[-1]} (train) and "
                f"digits-test-0000..{self.split_ids['test'][-1]} (test)"
            )
        self._task, self._done = task_id, False
        self._seed = int(seed) if seed is not None else 0
        self._obs = self._instruction(task_id)
        info = self._info(Outcome.CONTINUE, 0.0)
        info["system"] = "Answer the user. Digits are rewarded."
        return self._obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None or self._done:
            raise RuntimeError("call reset() before step()")
        text = action if isinstance(action, str) else str(action)
        chars = [c for c in text if not c.isspace()]
        counts = CHARSETS[self.charset]
        fraction = sum(bool(counts(c)) for c in chars) / len(chars) if chars else 0.0
        outcome = Outcome.SUCCESS if fraction >= self.success_threshold else Outcome.FAILURE
        self._done = True
        self._obs = sanitize(f"Fraction of {self.charset}: {fraction:.3f}", 8192)
        return self._obs, fraction, True, False, self._info(outcome, fraction)

    def _info(self, outcome: Outcome, fraction: float) -> dict[str, Any]:
        return {
            "outcome": outcome,
            "reward_components": {self.charset: fraction},
            "task": {"id": self._task, "split": self._split(), "difficulty": "easy"},
            "seeds": {"env": self._seed},
            "versions": {"env": f"DigitFraction-v0/{self.version}"},
            "episode_valid": True,
            "error": {},
            "cost": {"env_time_ms": 0.0},
        }

    def _split(self) -> str:
        return "test" if self._task in self.split_ids["test"] else "train"

    def render(self) -> str | None:
        return self._obs if self.render_mode == "ansi" else None

    def get_state(self) -> tuple[str | None, bool, str, int, Any]:
        return (self._task, self._done, self._obs, self._seed, self.np_random.bit_generator.state)

    def set_state(self, state: tuple[str | None, bool, str, int, Any]) -> None:
        try:
            self._task, self._done, self._obs, self._seed, rng = state
            generator = np.random.Generator(np.random.PCG64())
            generator.bit_generator.state = rng
        except (TypeError, ValueError) as exc:
            raise StateError(f"not a DigitFractionEnv state: {exc}") from exc
        self._np_random = generator

    def oracle(self) -> _DigitOracle:
        """A scripted solver: a reply made only of the counted characters."""
        return _DigitOracle(self.charset)


class _DigitOracle:
    def __init__(self, charset: str) -> None:
        self.text = {"digits": "0123456789", "vowels": "aeiou", "upper": "ABCDE"}[charset]

    def act(self) -> str:
        return self.text


def register() -> None:
    """Register the fixtures (idempotent)."""
    env_id = f"{NAMESPACE}/DigitFraction-v0"
    if env_id not in gym.registry:
        gym.register(
            env_id, entry_point="agentgym_trainers.envs:DigitFractionEnv", max_episode_steps=1
        )
