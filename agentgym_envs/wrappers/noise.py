"""Observation noise: seeded typos, dropped lines and whitespace in what the agent reads.

Only the observation text is perturbed; ``info`` (the structured truth) never is, so an
evaluator can still grade and a trainer can still see what really happened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.spaces import sanitize
from agentgym_envs.wrappers.base import AgentWrapper, restored_rng, rng_state

NOISE_KINDS = ("typo", "drop_line", "whitespace")
_WORD = re.compile(r"[A-Za-z]{3,}")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class ObservationNoise(AgentWrapper):
    """Perturb observation text with seeded noise.

    Kinds, each applied independently with probability ``rate`` per unit:

    - ``typo`` (per word of 3+ letters): swap two neighbouring letters, drop, double
      or replace one letter;
    - ``drop_line`` (per non-blank line, at least one line is kept): the line is lost;
    - ``whitespace`` (per line): extra spaces between words, trailing spaces, or a
      blank line before it.

    The noise RNG is seeded from the episode seed and ``seed``, and snapshots keep it.
    The noisy observation stays inside the observation space (printable characters,
    at most ``max_length``).

    Info:
        ``info["noise"] = {"edits": n, "by_kind": {"typo": ..., ...}}`` for this
        observation.

    Args:
        env: an agentgym env.
        rate: the probability per unit, in [0, 1].
        kinds: which kinds to apply (a subset of ``typo``, ``drop_line``, ``whitespace``).
        seed: mixed with the episode seed (a non-negative int).

    Raises:
        ConfigError: a rate outside [0, 1], an unknown or empty kinds list, a bad seed.
    """

    key = "obs_noise"
    _stream = 0x0015E

    def __init__(
        self,
        env: gym.Env[str, str],
        rate: float = 0.05,
        kinds: Sequence[str] = NOISE_KINDS,
        seed: int = 0,
    ) -> None:
        super().__init__(env, rate=rate, kinds=list(kinds), seed=seed)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ConfigError(f"obs_noise rate must be a number in [0, 1], got {rate!r}")
        if isinstance(kinds, str) or not kinds:
            raise ConfigError(f"obs_noise kinds must be a non-empty list of {NOISE_KINDS}")
        for kind in kinds:
            if kind not in NOISE_KINDS:
                raise ConfigError(
                    f"unknown noise kind {kind!r}.{did_you_mean(str(kind), NOISE_KINDS)} "
                    f"Kinds: {NOISE_KINDS}"
                )
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(f"obs_noise seed must be a non-negative int, got {seed!r}")
        self.rate = float(rate)
        self.kinds = tuple(k for k in NOISE_KINDS if k in kinds)  # a fixed order
        self.seed = seed
        self._noise: np.random.Generator | None = None
        self._max = int(getattr(env.observation_space, "max_length", 16384))

    @property
    def tag(self) -> str:
        return f"obs_noise:{self.rate:g}:{','.join(self.kinds)}"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._start_episode(info)
        self._noise = self._rng(self.seed)
        obs = self._perturb(obs, info)
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._perturb(obs, info), reward, terminated, truncated, info

    def wrapper_state(self) -> Any:
        return rng_state(self._noise)

    def restore_wrapper_state(self, state: Any) -> None:
        self._noise = restored_rng(state)

    def _perturb(self, obs: str, info: dict[str, Any]) -> str:
        rng = self._noise
        assert rng is not None, "reset() seeds the noise"
        text, counts = perturb(obs, rng, self.rate, self.kinds)
        info["noise"] = {"edits": sum(counts.values()), "by_kind": counts}
        self._tag(info)
        return sanitize(text, self._max)


def perturb(
    text: str, rng: np.random.Generator, rate: float, kinds: Sequence[str] = NOISE_KINDS
) -> tuple[str, dict[str, int]]:
    """Apply noise of ``kinds`` to ``text``; returns the new text and edits per kind.

    The draws depend only on ``rng`` and ``text``, so a seeded ``rng`` gives the same
    noise every time.
    """
    counts = dict.fromkeys(kinds, 0)
    lines = text.split("\n")
    if "drop_line" in kinds:
        kept = [ln for ln in lines if not (ln.strip() and rng.random() < rate)]
        if not any(ln.strip() for ln in kept):  # never lose the whole observation
            kept = lines
        counts["drop_line"] = len(lines) - len(kept)
        lines = kept
    if "typo" in kinds:
        for i, line in enumerate(lines):
            lines[i], n = _typos(line, rng, rate)
            counts["typo"] += n
    if "whitespace" in kinds:
        spaced: list[str] = []
        for line in lines:
            if rng.random() < rate:
                counts["whitespace"] += 1
                how = int(rng.integers(3))
                if how == 0:
                    line = line.replace(" ", "  ", 1 + int(rng.integers(3)))
                elif how == 1:
                    line += " " * (1 + int(rng.integers(3)))
                else:
                    spaced.append("")
            spaced.append(line)
        lines = spaced
    return "\n".join(lines), counts


def _typos(line: str, rng: np.random.Generator, rate: float) -> tuple[str, int]:
    edits = 0

    def typo(match: re.Match[str]) -> str:
        nonlocal edits
        word = match.group(0)
        if rng.random() >= rate:
            return word
        edits += 1
        i = int(rng.integers(1, len(word) - 1))  # keep the first letter: still readable
        how = int(rng.integers(4))
        if how == 0:  # swap with the next letter
            return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
        if how == 1:  # drop
            return word[:i] + word[i + 1 :]
        if how == 2:  # double
            return word[: i + 1] + word[i:]
        return word[:i] + _LETTERS[int(rng.integers(26))] + word[i + 1 :]

    return _WORD.sub(typo, line), edits
