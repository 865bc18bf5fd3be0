"""SkyRL adapter: any agentgym env as a SkyRL-Gym ``BaseTextEnv``.

SkyRL's generator makes one env per trajectory with
``skyrl_gym.make(env_class, env_config=..., extras=row)``, where ``row`` holds the dataset
row's fields other than ``prompt`` and ``env_class``; it calls ``init(prompt)`` for the first
conversation, then ``step(model_output)`` until ``done``, then ``get_metrics()`` and
``close()``. :class:`AgentGymTextEnv` does that for any registered env:

* the row (or ``env_config``) names the env: ``env_id``; and the episode: ``task_id``,
  ``seed`` and ``options`` (any reset option: ``split``, ``difficulty`` ...), read from the
  row or from its ``extra_info``;
* ``init`` resets the env and returns the env's own system message and first observation
  (the env is the source of the prompt; :func:`skyrl_rows` puts the same conversation in
  the dataset's ``prompt`` column so lengths and logs match), with ``info["tools"]``;
* ``step`` returns the env's step reward and ``done = terminated or truncated``; the next
  observation is a user message (none once done: the final text is in
  ``metadata["final_observation"]``). The generator's ``max_turns`` (in the row as
  ``max_turns``) ends an episode early with ``done`` and ``metadata["turn_limit"]``.

Register it once per process with :func:`register_skyrl_env` (env class ``"agentgym"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.extras import jsonable, require
from agentgym_envs.registration import find

require("skyrl_gym", "skyrl-gym", "skyrl", "the SkyRL adapter (agentgym_envs.integrations.skyrl)")

import skyrl_gym  # noqa: E402
from skyrl_gym.envs.base_text_env import (  # noqa: E402
    BaseTextEnv,
    BaseTextEnvStepOutput,
    ConversationType,
)

__all__ = ["SKYRL_ENV_CLASS", "AgentGymTextEnv", "register_skyrl_env", "skyrl_rows"]

SKYRL_ENV_CLASS = "agentgym"
"""The env class name that :func:`register_skyrl_env` registers with SkyRL-Gym."""

_EPISODE_KEYS = ("env_id", "task_id", "seed", "options", "make_kwargs", "max_turns")


def _plain(value: Any) -> Any:
    """An OmegaConf container (SkyRL passes ``env_config`` as a ``DictConfig``) as plain
    Python data; anything else unchanged."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def _lookup(key: str, *sources: Mapping[str, Any]) -> Any:
    for source in sources:
        if source.get(key) is not None:
            return source[key]
    return None


class AgentGymTextEnv(BaseTextEnv):  # type: ignore[misc]  # skyrl-gym is untyped
    """A SkyRL-Gym text env that plays one episode of an agentgym env.

    Args:
        env_config: SkyRL's per-env-class config (``skyrl_gym_cfg.agentgym``): defaults for
            ``env_id``, ``make_kwargs`` (``gym.make`` keyword arguments) and ``options``.
        extras: the dataset row (SkyRL's ``env_extras``): ``env_id``, ``task_id``, ``seed``,
            ``options``, ``max_turns``, directly or under ``extra_info``.
        env_id: the env id, where neither of the above names one.

    Raises:
        ConfigError: no env id is given, or an episode field has the wrong type.
        EnvNotFoundError: the env id is not registered.
    """

    def __init__(
        self,
        env_config: Mapping[str, Any] | None = None,
        extras: Mapping[str, Any] | None = None,
        *,
        env_id: str | None = None,
    ) -> None:
        super().__init__()
        config = dict(_plain(env_config) or {})
        row = dict(_plain(extras) or {})
        extra_info = row.get("extra_info") or {}
        if not isinstance(extra_info, Mapping):
            extra_info = {}
        sources = (row, extra_info, config)
        name = _lookup("env_id", *sources) or env_id
        if not name:
            raise ConfigError(
                "AgentGymTextEnv needs an env id: put env_id in the dataset row (or its "
                "extra_info), in the env config (skyrl_gym_cfg.agentgym.env_id) or pass "
                f"env_id=...; got row keys {sorted(row)} and config keys {sorted(config)}"
            )
        self.env_id = find(str(name)).id
        options = {
            **dict(config.get("options") or {}),
            **dict(_lookup("options", row, extra_info) or {}),
        }
        task_id = _lookup("task_id", *sources)
        if task_id is not None:
            options["task_id"] = str(task_id)
        seed = _lookup("seed", *sources)
        if seed is not None and not isinstance(seed, int):
            raise ConfigError(f"seed must be an int or None, got {seed!r}")
        self.seed: int | None = seed
        self.options: dict[str, Any] = options
        max_turns = _lookup("max_turns", *sources)
        self.max_turns = int(max_turns) if max_turns else 0  # 0: only the env's own budgets
        make_kwargs = {
            **dict(config.get("make_kwargs") or {}),
            **dict(row.get("make_kwargs") or {}),
        }
        self.env: gym.Env[str, str] = gym.make(self.env_id, **make_kwargs)
        self.total_reward = 0.0
        self.last_info: dict[str, Any] = {}

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Reset the env; return its system message and first observation, and metadata
        with the tool schemas (``tools``) and the task.

        Args:
            prompt: the dataset row's prompt; replaced by the env's own first conversation.
        """
        obs, info = self.env.reset(seed=self.seed, options=self.options or None)
        self.turns = 0
        self.total_reward = 0.0
        self.last_info = jsonable(info)
        conversation: ConversationType = [
            {"role": "system", "content": info["system"]},
            {"role": "user", "content": obs},
        ]
        return conversation, {"tools": self.last_info["tools"], "task": self.last_info["task"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play the model's output as one agent turn."""
        self.turns += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total_reward += float(reward)
        self.last_info = jsonable(info)
        done = bool(terminated or truncated)
        turn_limit = not done and self.max_turns > 0 and self.turns >= self.max_turns
        metadata: dict[str, Any] = {
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "turn_limit": turn_limit,
            "outcome": self.last_info["outcome"],
            "reward_components": self.last_info["reward_components"],
            "error": self.last_info["error"],
            "episode_valid": self.last_info["episode_valid"],
        }
        if done or turn_limit:
            metadata["final_observation"] = obs
        return BaseTextEnvStepOutput(
            observations=[] if done or turn_limit else [{"role": "user", "content": obs}],
            reward=float(reward),
            done=done or turn_limit,
            metadata=metadata,
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics: turns, return, success, milestones, env errors."""
        outcome = self.last_info.get("outcome")
        return {
            "turns": self.turns,
            "return": self.total_reward,
            "success": float(outcome == "success"),
            "milestones": len(self.last_info.get("milestones") or ()),
            "env_error": float(outcome == "env_error"),
        }

    def close(self) -> None:
        """Close the agentgym env. Idempotent."""
        self.env.close()


def register_skyrl_env(name: str = SKYRL_ENV_CLASS) -> str:
    """Register :class:`AgentGymTextEnv` with SkyRL-Gym as ``name`` (idempotent).

    Call it in every process that makes envs (SkyRL's entrypoint does the registering of
    custom envs before training starts).

    Returns:
        The registered name, for ``environment.env_class``.
    """
    entry_point = f"{AgentGymTextEnv.__module__}:{AgentGymTextEnv.__name__}"
    existing = skyrl_gym.registry.get(name)
    if existing is None:
        skyrl_gym.register(id=name, entry_point=entry_point)
    elif existing.entry_point != entry_point:
        raise ConfigError(
            f"SkyRL env class {name!r} is already registered to {existing.entry_point!r}; "
            "pass another name to register_skyrl_env(name=...)"
        )
    return name


def skyrl_rows(
    env_id: str,
    *,
    split: str = "train",
    difficulty: str | None = None,
    seed: int = 0,
    limit: int | None = None,
    env_class: str = SKYRL_ENV_CLASS,
) -> list[dict[str, Any]]:
    """SkyRL dataset rows, one per task of ``split`` (write them with pandas to parquet).

    Each row has ``prompt`` (the env's system message and first observation, as ``init``
    returns them), ``env_class``, ``env_id``, ``task_id``, ``seed``, ``reward_spec``
    (``{"method": "env"}``: the env computes the reward) and ``extra_info``.

    Args:
        env_id: a registered env id or name.
        split: the task split.
        difficulty: only tasks of this difficulty (None: all).
        seed: the reset seed of every row.
        limit: at most this many rows (None: every task of the split).
        env_class: the name :func:`register_skyrl_env` registered.

    Returns:
        The rows, in task-set order.
    """
    entry = find(env_id)
    env = AgentGymTextEnv(extras={"env_id": entry.id})
    try:
        tasks: Iterable[Any] = env.env.unwrapped.task_set.pool(split, difficulty)  # type: ignore[attr-defined]
        rows: list[dict[str, Any]] = []
        for task in tasks:
            if limit is not None and len(rows) >= limit:
                break
            env.seed, env.options = seed, {"task_id": task.id}
            prompt, _ = env.init([])
            rows.append(
                {
                    "prompt": prompt,
                    "env_class": env_class,
                    "env_id": entry.id,
                    "task_id": task.id,
                    "seed": seed,
                    "reward_spec": {"method": "env"},
                    "extra_info": {"split": task.split, "difficulty": task.difficulty},
                }
            )
        return rows
    finally:
        env.close()
