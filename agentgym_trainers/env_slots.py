"""The trainer's env slots: how its envs are built, and its Ray env pool.

:class:`~agentgym_envs.rollout.episodes.RolloutRunner` plays on the env slots of
:mod:`agentgym_envs.rollout` (:class:`~agentgym_envs.rollout.EnvSlots`): ``n`` envs in
this process (:class:`~agentgym_envs.rollout.LocalEnvSlots`, ``--env-backend local``)
or the slots of a Ray env pool (:func:`pool_slots`, ``--env-backend ray``). Both are
strict: a :class:`~agentgym_envs.core.errors.ConfigError` the env raises (its settings
cannot work: a ``local_weight`` too large for its step budget, an unknown difficulty)
stops the run with its message instead of masking every episode as an ``env_error``.
What is the trainer's own lives here: the envs' ``gym.make`` arguments (with a grown
task set, :func:`trainer_env_kwargs`), the factory its pool pickles into the actors
(:func:`make_trainer_env`) and the pool itself (:func:`pool_slots`).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.rollout import RayEnvSlots

if TYPE_CHECKING:
    from agentgym_trainers.config import DataConfig


def trainer_env_kwargs(data: DataConfig) -> dict[str, Any]:
    """The ``gym.make`` keyword arguments of a trainer's envs: ``data.env_kwargs``, plus
    the grown task set (``tasks``) when ``data.train_pool`` asks for more training tasks.

    Raises:
        ConfigError: ``train_pool`` on a split other than ``train``, without a
            difficulty, with ``tasks`` in env_kwargs, not above the shipped count, or on
            an env without a task generator.
    """
    kwargs = dict(data.env_kwargs)
    if not data.train_pool:
        return kwargs
    if data.split != "train":
        raise ConfigError(
            f"--train-pool grows the train split only, never a held-out one (--split is "
            f"{data.split!r}): use --split train"
        )
    if data.difficulty is None:
        raise ConfigError("--train-pool grows one difficulty's tasks: set --difficulty")
    if "tasks" in kwargs:
        raise ConfigError("--train-pool grows the env's own tasks: drop 'tasks' from env_kwargs")
    kwargs["tasks"] = _grown_tasks(
        data.env, json.dumps(kwargs, sort_keys=True), data.split, data.difficulty, data.train_pool
    )
    return kwargs


@functools.lru_cache(maxsize=4)
def _grown_tasks(env_id: str, kwargs_json: str, split: str, difficulty: str, total: int) -> Any:
    from agentgym_envs.core.env import AgentEnv
    from agentgym_envs.core.tasks import grow_split
    from agentgym_envs.core.views import TASK_GENERATOR, env_view

    env = make_trainer_env(env_id, json.loads(kwargs_json))
    try:
        gen = env_view(env, TASK_GENERATOR)
        # AgentEnv's own generate_task only raises: a family must define its own
        own = inspect.getattr_static(type(gen), "generate_task", None) if gen else None
        if gen is None or own is None or own is AgentEnv.__dict__["generate_task"]:
            raise ConfigError(
                f"{env_id} has no task generator, so --train-pool cannot grow its tasks"
            )
        shipped = len(gen.task_set.pool(split, difficulty))
        if total <= shipped:
            raise ConfigError(
                f"--train-pool {total} is not above the {shipped} shipped {split}/{difficulty} "
                "tasks, so it would change nothing: ask for more, or 0 for the shipped ones"
            )
        return grow_split(type(gen), gen.task_set, split, difficulty, total)
    finally:
        env.close()


def make_trainer_env(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
    """``gym.make(env_id, **env_kwargs)`` after registering the agentgym envs and the
    trainer's fixture envs (``agentgym-train/...``): the factory of a trainer's pool,
    module-level so Ray can pickle it into the actors."""
    import agentgym_envs  # noqa: F401  (registers the envs in a fresh worker process)
    from agentgym_trainers.envs import register

    register()
    return gym.make(env_id, **env_kwargs)


def pool_slots(
    env_id: str,
    n: int,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    make_env: Callable[[], gym.Env[Any, Any]] | None = None,
    envs_per_actor: int = 1,
    address: str | None = None,
) -> RayEnvSlots:
    """``n`` strict slots on a new :class:`~agentgym_envs.distributed.pool.RayEnvPool`.

    Args:
        env_id: the env (its family sets the actors' default resources).
        n: slots.
        env_kwargs: keyword arguments of ``gym.make`` (with the default factory).
        make_env: build the envs with this instead (pickled into the actors).
        envs_per_actor: envs hosted by one actor.
        address: the Ray cluster to join if this process is not connected yet
            (default: ``$RAY_ADDRESS``, else a new local Ray).

    Raises:
        ConfigError: ray is not installed, or the cluster cannot host the actors.
    """
    from agentgym_envs.distributed.pool import RayEnvPool

    factory = make_env or functools.partial(make_trainer_env, env_id, dict(env_kwargs or {}))
    pool = RayEnvPool(
        env_id, n, factory=factory, envs_per_actor=envs_per_actor, address=address or None
    )
    return RayEnvSlots(pool)


__all__ = [
    "make_trainer_env",
    "pool_slots",
    "trainer_env_kwargs",
]
