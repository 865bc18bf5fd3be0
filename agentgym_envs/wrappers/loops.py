"""Loop detection: repeated actions that change nothing.

A repeat is an action whose canonical form (the env's history entry: tool name and
sorted arguments, or the parse error) and resulting world state (``state_hash()``)
both match a step among the last ``window`` ones: the agent did the same thing again
and is where it was. That covers re-sending a failing call, re-reading the same page
and oscillating between two states.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, SupportsFloat

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError, ResetNeeded
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.spaces import sanitize
from agentgym_envs.wrappers.base import AgentWrapper


class LoopDetection(AgentWrapper):
    """Count repeats, optionally charge for them, optionally end looping episodes.

    Info:
        ``info["loop"] = {"repeats": n, "detected": bool, "streak": k}``: repeats so
        far this episode, whether this step was one, and how many in a row.
        ``info["reward_components"]["loop"]`` is ``-repeat_cost`` on a repeat and 0
        otherwise; the returned reward includes it, so the components still sum to it.

    Termination:
        With ``max_repeats``, the step that brings the episode's repeats to
        ``max_repeats`` is truncated with ``info["outcome"] = Outcome.TIMEOUT`` and the
        reason in the observation; ``reset()`` must follow. (The wrapped env itself is
        not told: its own ``outcome`` stays ``CONTINUE``.)

    Args:
        env: an agentgym env.
        window: how many recent steps a repeat is looked for in (>= 1).
        repeat_cost: reward charged per repeat (>= 0).
        max_repeats: end the episode at this many repeats, or None to never end it.

    Raises:
        ConfigError: a window < 1, a negative or non-finite cost, max_repeats < 1.
    """

    key = "loop_detection"

    def __init__(
        self,
        env: gym.Env[str, str],
        window: int = 8,
        repeat_cost: float = 0.0,
        max_repeats: int | None = None,
    ) -> None:
        super().__init__(env, window=window, repeat_cost=repeat_cost, max_repeats=max_repeats)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"loop_detection window must be an int >= 1, got {window!r}")
        if (
            isinstance(repeat_cost, bool)
            or not isinstance(repeat_cost, int | float)
            or not math.isfinite(repeat_cost)
            or repeat_cost < 0
        ):
            raise ConfigError(
                f"loop_detection repeat_cost must be a finite number >= 0, got {repeat_cost!r}"
            )
        if max_repeats is not None and (
            isinstance(max_repeats, bool) or not isinstance(max_repeats, int) or max_repeats < 1
        ):
            raise ConfigError(
                f"loop_detection max_repeats must be an int >= 1 or None, got {max_repeats!r}"
            )
        self.window, self.repeat_cost, self.max_repeats = window, float(repeat_cost), max_repeats
        self._max = int(getattr(env.observation_space, "max_length", 16384))
        self._recent: deque[tuple[str, str]] = deque(maxlen=window)
        self._repeats = self._streak = 0
        self._ended = False

    @property
    def tag(self) -> str:
        tag = f"loop:{self.window}"
        if self.repeat_cost:
            tag += f":cost{self.repeat_cost:g}"
        if self.max_repeats is not None:
            tag += f":max{self.max_repeats}"
        return tag

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._start_episode(info)
        self._recent.clear()
        self._repeats = self._streak = 0
        self._ended = False
        self._label(info, False, 0.0)
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._ended:
            raise ResetNeeded("loop detection ended the episode (timeout); call reset()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        inner = self.agent_env
        history = getattr(inner, "action_history", None)
        if history is None:
            history = inner._history
        key = (history[-1], inner.state_hash())
        repeat = key in self._recent
        self._recent.append(key)
        self._repeats += repeat
        self._streak = self._streak + 1 if repeat else 0
        penalty = -self.repeat_cost if repeat else 0.0
        reward = float(reward) + penalty
        if (
            self.max_repeats is not None
            and self._repeats >= self.max_repeats
            and not (terminated or truncated)
        ):
            truncated = self._ended = True
            info["outcome"] = Outcome.TIMEOUT
            why = (
                f"Episode over: stuck in a loop ({self._repeats} repeated actions that "
                "changed nothing)."
            )
            obs = f"{sanitize(obs, max(1, self._max - len(why) - 2))}\n\n{why}"
        self._label(info, repeat, penalty)
        return obs, reward, terminated, truncated, info

    def wrapper_state(self) -> Any:
        return tuple(self._recent), self._repeats, self._streak, self._ended

    def restore_wrapper_state(self, state: Any) -> None:
        recent, self._repeats, self._streak, self._ended = state
        self._recent = deque(((str(a), str(h)) for a, h in recent), maxlen=self.window)

    def _label(self, info: dict[str, Any], repeat: bool, penalty: float) -> None:
        info["loop"] = {"repeats": self._repeats, "detected": repeat, "streak": self._streak}
        components = info.get("reward_components")
        if isinstance(components, dict):
            components["loop"] = penalty
        self._tag(info)
