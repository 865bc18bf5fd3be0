"""Scripted reference policies: baselines (random, do-nothing) and the ceiling (oracle)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_envs.core.env import AgentEnv, Oracle
from agentgym_envs.core.errors import ConfigError

_WORDS = (
    "north",
    "south",
    "east",
    "west",
    "key",
    "door",
    "box",
    "up",
    "down",
    "left",
    "right",
    "lamp",
    "red",
    "blue",
    "item",
    "the",
    "a",
    "x",
)


def _agent_env(env: gym.Env[Any, Any]) -> AgentEnv:
    inner = env.unwrapped
    if not isinstance(inner, AgentEnv):
        raise ConfigError(
            f"this policy needs agentgym envs (AgentEnv), got {type(inner).__name__}; "
            "make them with gym.make('agentgym/<Name>-v0')"
        )
    return inner


class OraclePolicy:
    """Each env's scripted solver, which reads the true state (a ceiling, not an agent)."""

    name = "oracle"

    def __init__(self, envs: Sequence[gym.Env[Any, Any]]) -> None:
        self._envs = [_agent_env(e) for e in envs]
        self._oracles: list[Oracle | None] = [None] * len(self._envs)

    def reset(self, indices: Sequence[int]) -> None:
        for i in indices:
            self._oracles[i] = None

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        actions = []
        for i in slots if slots is not None else range(len(observations)):
            oracle = self._oracles[i]
            if oracle is None:
                oracle = self._oracles[i] = self._envs[i].oracle()
            actions.append(oracle.act())
        return actions


class NoopPolicy:
    """Does nothing: sends each env's ``noop_action`` every step (a floor baseline)."""

    name = "noop"

    def __init__(self, envs: Sequence[gym.Env[Any, Any]]) -> None:
        self._actions = [_agent_env(e).noop_action for e in envs]

    def reset(self, indices: Sequence[int]) -> None:
        return None

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        return [self._actions[i] for i in (slots if slots is not None else range(len(infos)))]


class RandomPolicy:
    """Calls a uniformly chosen tool with random arguments drawn from its JSON schema.

    Args:
        seed: seeds the policy's own RNG (independent of the envs' RNGs).
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def reset(self, indices: Sequence[int]) -> None:
        return None

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        return [self._call(info.get("tools", [])) for info in infos]

    def _call(self, tools: Sequence[Mapping[str, Any]]) -> str:
        if not tools:
            return ""
        fn = tools[int(self._rng.integers(len(tools)))]["function"]
        params = fn.get("parameters", {})
        required = set(params.get("required", []))
        args = {
            name: self._value(schema)
            for name, schema in params.get("properties", {}).items()
            if name in required or self._rng.random() < 0.5
        }
        return json.dumps({"name": fn["name"], "arguments": args})

    def _value(self, schema: Mapping[str, Any]) -> Any:
        if "enum" in schema:
            return schema["enum"][int(self._rng.integers(len(schema["enum"])))]
        kind = schema.get("type", "string")
        kind = kind[0] if isinstance(kind, list) else kind
        if kind == "integer":
            low, high = int(schema.get("minimum", 0)), int(schema.get("maximum", 10))
            return int(self._rng.integers(low, high + 1))
        if kind == "number":
            return float(self._rng.uniform(schema.get("minimum", 0.0), schema.get("maximum", 10.0)))
        if kind == "boolean":
            return bool(self._rng.integers(2))
        if kind == "array":
            return []
        if kind == "object":
            return {}
        return " ".join(_WORDS[int(i)] for i in self._rng.integers(len(_WORDS), size=2))
