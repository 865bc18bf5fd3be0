"""Where a rollout runner's env slots live: in this process, or on a Ray env pool.

:class:`~agentgym_trainers.rollout.RolloutRunner` plays one episode per slot and steps
all its live slots once per generation call. It talks to its slots through
:class:`EnvSlots` (reset one slot, step several at once, a scripted policy per slot),
which two classes satisfy:

* :class:`LocalEnvSlots` -- ``n`` envs built in this process (``--env-backend local``);
  an env that raises is closed and rebuilt, its episode an ``env_error``;
* :class:`PoolEnvSlots` -- the slots of a
  :class:`~agentgym_envs.distributed.pool.RayEnvPool` (``--env-backend ray``): one
  generation call's steps go to the actors at once; an actor that dies or hangs ends its
  episodes as ``env_error`` and the pool restarts it.

Both answer with the pool's :class:`~agentgym_envs.distributed.results.SlotResult`, so a
crash looks the same wherever the env lives (``crashed``, ``error``, an ``env_error``
info). A :class:`~agentgym_envs.core.errors.ConfigError` the env raises (its settings
cannot work: a ``local_weight`` too large for its step budget, an unknown difficulty)
is no crash: both raise it, and the run stops with its message instead of masking every
episode as an ``env_error``. Both take and restore snapshots of a slot's episode
through the public snapshot API (``env.unwrapped.get_state()``/``set_state()``), which
branch rollouts use; state that wrappers keep outside the env (Gymnasium's
``TimeLimit`` count) is not in it.

Scripted policies that need the live env (the oracle of the SFT warm start) run next to
it: in-process they get the env, on a pool only :func:`oracle_script` is
accepted, and it runs in the actor (``RayEnvPool.oracle_act``).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.distributed.results import (
    ActorLost,
    Call,
    CrashCode,
    SlotResult,
    crashed_result,
)

if TYPE_CHECKING:
    from agentgym_envs.distributed.pool import RayEnvPool
    from agentgym_trainers.config import DataConfig

log = logging.getLogger(__name__)

Script = Callable[[gym.Env[Any, Any]], Callable[[], str]]
"""A scripted policy: given a freshly reset env, the function that gives its next action."""


def oracle_script(env: gym.Env[Any, Any]) -> Callable[[], str]:
    """The env's scripted solver (``env.unwrapped.oracle().act``), made for the episode
    that was just reset. A pool runs it in the env's actor instead."""
    act: Callable[[], str] = env.unwrapped.oracle().act  # type: ignore[attr-defined]
    return act


class EnvSlots(Protocol):
    """The env slots a rollout runner plays on (see the module docstring)."""

    def __len__(self) -> int: ...

    def reset(self, i: int, seed: int, options: Mapping[str, Any] | None) -> SlotResult:
        """Reset slot ``i`` (``obs`` and ``info`` of the result), or a crashed result."""
        ...

    def step_many(self, actions: Sequence[tuple[int, str]]) -> list[SlotResult]:
        """Step each ``(slot, action)``; results in order, crashed ones included."""
        ...

    def script(self, i: int, script: Script) -> Callable[[], str]:
        """``script`` bound to slot ``i``'s episode that was just reset."""
        ...

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        """The snapshot of each slot's episode (taken in parallel where the envs are
        remote), None where the env (or its actor) broke while taking it."""
        ...

    def set_state(self, i: int, state: Any) -> SlotResult:
        """Restore a snapshot into slot ``i`` (a reset to that state, ``call`` RESET with
        no observation), or a crashed result."""
        ...

    def close(self) -> None:
        """Close every env (and the actors hosting them)."""
        ...


class LocalEnvSlots:
    """``n`` envs built by ``make_env`` in this process.

    Args:
        make_env: builds one env (called ``n`` times, and again after an env crash).
        n: slots.
    """

    def __init__(self, make_env: Callable[[], gym.Env[Any, Any]], n: int) -> None:
        self.make_env = make_env
        self.envs = [make_env() for _ in range(n)]
        self._was_reset = [False] * n

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, i: int, seed: int, options: Mapping[str, Any] | None) -> SlotResult:
        opts = dict(options) if options is not None else None
        try:
            obs, info = self.envs[i].reset(seed=seed, options=opts)
        except ConfigError:  # a configuration mistake: the run stops with its fix
            raise
        except Exception as exc:  # an env crash is an env error, never a policy failure
            return self._crashed(i, Call.RESET, exc)
        self._was_reset[i] = True
        return SlotResult(i, Call.RESET, obs, info=info)

    def step_many(self, actions: Sequence[tuple[int, str]]) -> list[SlotResult]:
        return [self._step(i, action) for i, action in actions]

    def script(self, i: int, script: Script) -> Callable[[], str]:
        return script(self.envs[i])

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        """Raises:
        ConfigError: an env has no snapshot API (``get_state``/``set_state``)."""
        return [self._snapshot(i) for i in slots]

    def _snapshot(self, i: int) -> Any:
        inner = snapshot_api(self.envs[i])
        try:
            return inner.get_state()
        except Exception as exc:
            log.warning("env snapshot failed (slot %d): %r", i, exc)
            return None

    def set_state(self, i: int, state: Any) -> SlotResult:
        env = self.envs[i]
        inner = snapshot_api(env)
        try:
            if not self._was_reset[i]:  # wrappers refuse a step before a reset
                env.reset(seed=0)
                self._was_reset[i] = True
            inner.set_state(state)
        except ConfigError:
            raise
        except Exception as exc:
            return self._crashed(i, Call.RESET, exc)
        return SlotResult(i, Call.RESET)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _step(self, i: int, action: str) -> SlotResult:
        try:
            obs, reward, terminated, truncated, info = self.envs[i].step(action)
        except ConfigError:
            raise
        except Exception as exc:
            return self._crashed(i, Call.STEP, exc)
        return SlotResult(i, Call.STEP, obs, float(reward), terminated, truncated, info)

    def _crashed(self, i: int, call: Call, exc: Exception) -> SlotResult:
        """The crash as a result; the env is closed and replaced by a new one."""
        log.warning("env crashed (slot %d): %r; replacing it", i, exc)
        try:
            self.envs[i].close()
        finally:
            self.envs[i] = self.make_env()
            self._was_reset[i] = False
        message = f"{type(exc).__name__}: {exc}"
        return crashed_result(i, call, CrashCode.ENV_EXCEPTION, message)


class PoolEnvSlots:
    """The slots of a Ray env pool (which this object closes).

    Args:
        pool: the pool; its length is the number of slots.
    """

    def __init__(self, pool: RayEnvPool) -> None:
        self.pool = pool

    def __len__(self) -> int:
        return len(self.pool)

    def reset(self, i: int, seed: int, options: Mapping[str, Any] | None) -> SlotResult:
        return _config_checked(self.pool.reset(i, seed, options))

    def step_many(self, actions: Sequence[tuple[int, str]]) -> list[SlotResult]:
        return [_config_checked(r) for r in self.pool.step_many(actions)]

    def script(self, i: int, script: Script) -> Callable[[], str]:
        """Raises:
        ConfigError: ``script`` is not :func:`oracle_script` (only the oracle runs in
            the actor next to its env)."""
        if script is not oracle_script:
            raise ConfigError(
                f"a Ray env pool runs only the oracle as a scripted policy, got {script!r}; "
                "pass agentgym_trainers.env_slots.oracle_script, or use --env-backend local "
                "for scripts that need the env object"
            )
        return functools.partial(self._oracle_act, i)

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        """Taken on the actors in parallel, so a turn's snapshots cost one round trip."""
        out = []
        for i, state in zip(slots, self.pool.get_state_many(slots), strict=True):
            # ActorLost, or the env's own exception from its actor: no branch from here
            if isinstance(state, Exception):
                log.warning("env snapshot failed (slot %d): %r", i, state)
                state = None
            out.append(state)
        return out

    def set_state(self, i: int, state: Any) -> SlotResult:
        try:
            self.pool.set_state(i, state)
        except ConfigError:  # raised in the actor (Ray's error is an instance of it)
            raise
        except ActorLost as exc:
            return crashed_result(i, Call.RESET, CrashCode.EPISODE_LOST, str(exc))
        except Exception as exc:  # the env's own exception, raised in its actor
            message = f"{type(exc).__name__}: {exc}"
            return crashed_result(i, Call.RESET, CrashCode.ENV_EXCEPTION, message)
        return SlotResult(i, Call.RESET)

    def close(self) -> None:
        self.pool.close()

    def _oracle_act(self, i: int) -> str:
        try:
            return self.pool.oracle_act(i)
        except ActorLost as exc:
            # the episode is gone with its actor: the step that follows comes back
            # crashed (episode_lost), which ends the episode as an env_error
            log.warning("slot %d: the oracle's actor was lost (%s)", i, exc)
            return ""


def _config_checked(result: SlotResult) -> SlotResult:
    """``result``, unless the env raised a ConfigError in its actor: that is raised here.

    Raises:
        ConfigError: the env refused its configuration (the pool's ``config_error``)."""
    if result.code is CrashCode.CONFIG_ERROR:
        raise ConfigError(result.error)
    return result


def snapshot_api(env: gym.Env[Any, Any]) -> Any:
    """``env.unwrapped``, checked to have ``get_state`` and ``set_state``.

    Raises:
        ConfigError: it has not.
    """
    inner = env.unwrapped
    if not (
        callable(getattr(inner, "get_state", None)) and callable(getattr(inner, "set_state", None))
    ):
        raise ConfigError(
            f"{type(inner).__name__} has no snapshot API (get_state/set_state), which "
            "branch rollouts need; add it (see docs/architecture.md section 2) or use --branch none"
        )
    return inner


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

    env = make_trainer_env(env_id, json.loads(kwargs_json))
    try:
        inner = env.unwrapped
        task_set = getattr(inner, "task_set", None)
        # AgentEnv's own generate_task only raises: a family must define its own
        generate = getattr(getattr(type(inner), "generate_task", None), "__func__", None)
        if task_set is None or generate in (
            None,
            getattr(AgentEnv.generate_task, "__func__", None),
        ):
            raise ConfigError(
                f"{env_id} has no task generator, so --train-pool cannot grow its tasks"
            )
        shipped = len(task_set.pool(split, difficulty))
        if total <= shipped:
            raise ConfigError(
                f"--train-pool {total} is not above the {shipped} shipped {split}/{difficulty} "
                "tasks, so it would change nothing: ask for more, or 0 for the shipped ones"
            )
        return grow_split(type(inner), task_set, split, difficulty, total)
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
) -> PoolEnvSlots:
    """``n`` slots on a new :class:`~agentgym_envs.distributed.pool.RayEnvPool`.

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
    return PoolEnvSlots(pool)


__all__ = [
    "EnvSlots",
    "LocalEnvSlots",
    "PoolEnvSlots",
    "Script",
    "make_trainer_env",
    "oracle_script",
    "pool_slots",
    "snapshot_api",
    "trainer_env_kwargs",
]
