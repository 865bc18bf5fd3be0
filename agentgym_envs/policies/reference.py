"""Scripted reference policies: baselines (random, do-nothing) and the ceiling (oracle)."""

from __future__ import annotations

import json
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_envs.core.env import AgentEnv, Oracle
from agentgym_envs.core.errors import ConfigError

# words for random string arguments (some hit real item names, most do not)
_WORDS = "north south east west key door box up down left right lamp red blue item the a x"


def _agent_env(env: gym.Env[Any, Any]) -> Any:
    inner = env.unwrapped
    # an evaluator's worker-process slot stands in for its env (oracle() and noop_action)
    if not isinstance(inner, AgentEnv) and not (
        hasattr(inner, "oracle") and hasattr(inner, "noop_action")
    ):
        raise ConfigError(
            f"this policy needs agentgym envs (AgentEnv), got {type(inner).__name__}; "
            "make them with gym.make('agentgym/<Name>-v0')"
        )
    return inner


class ScriptedPolicy(ABC):
    """A policy that picks each slot's action on its own (no batching benefit)."""

    name = ""

    def reset(self, indices: Sequence[int]) -> None:  # noqa: B027  (optional hook)
        """Scripted policies keep no per-episode state unless they override this."""

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        chosen = slots if slots is not None else range(len(observations))
        return [self.act_one(slot, info) for slot, info in zip(chosen, infos, strict=True)]

    @abstractmethod
    def act_one(self, slot: int, info: Mapping[str, Any]) -> str:
        """The action for one env slot."""


class OraclePolicy(ScriptedPolicy):
    """Each env's scripted solver, which reads the true state (a ceiling, not an agent)."""

    name = "oracle"

    def __init__(self, envs: Sequence[gym.Env[Any, Any]]) -> None:
        self._envs = [_agent_env(e) for e in envs]
        self._oracles: list[Oracle | None] = [None] * len(self._envs)

    def reset(self, indices: Sequence[int]) -> None:
        for i in indices:
            self._oracles[i] = None

    def act_one(self, slot: int, info: Mapping[str, Any]) -> str:
        oracle = self._oracles[slot]
        if oracle is None:
            oracle = self._oracles[slot] = self._envs[slot].oracle()
        return oracle.act()


class NoopPolicy(ScriptedPolicy):
    """Does nothing: sends each env's ``noop_action`` every step (a floor baseline)."""

    name = "noop"

    def __init__(self, envs: Sequence[gym.Env[Any, Any]]) -> None:
        self._actions = [str(_agent_env(e).noop_action) for e in envs]

    def act_one(self, slot: int, info: Mapping[str, Any]) -> str:
        return self._actions[slot]


class RandomPolicy(ScriptedPolicy):
    """Calls a uniformly chosen tool with random arguments drawn from its JSON schema.

    Args:
        seed: seeds the policy's own RNG (independent of the envs' RNGs).
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._rngs: dict[int, np.random.Generator] = {}

    def reset(self, indices: Sequence[int]) -> None:
        for i in indices:
            self._rngs.pop(i, None)

    def act_one(self, slot: int, info: Mapping[str, Any]) -> str:
        tools: Sequence[Mapping[str, Any]] = info.get("tools", [])
        if not tools:
            return ""
        # each episode draws from its own stream, keyed by the policy seed and the
        # episode's env seed and task: its actions do not depend on which other episodes
        # share the batch or in what order they ran (so evaluations replay exactly)
        rng = self._rngs.get(slot)
        if rng is None:
            env_seed = int((info.get("seeds") or {}).get("env") or 0) % 2**63
            task_id = str((info.get("task") or {}).get("id", ""))
            key = [self._seed, env_seed, zlib.crc32(task_id.encode())]
            rng = self._rngs[slot] = np.random.default_rng(key)
        self._rng = rng
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
        for key in ("enum", "examples"):  # examples: valid values for patterned strings
            if schema.get(key):
                return schema[key][int(self._rng.integers(len(schema[key])))]
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
            low = int(schema.get("minItems", 0))
            count = int(self._rng.integers(low, max(low, int(schema.get("maxItems", 3))) + 1))
            return [self._value(schema.get("items", {"type": "string"})) for _ in range(count)]
        if kind == "object":
            return {}
        words = _WORDS.split()
        return " ".join(words[int(i)] for i in self._rng.integers(len(words), size=2))
