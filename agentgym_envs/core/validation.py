"""Validating reset options, and a generated task by playing it (its solution succeeds,
doing nothing fails)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.tasks import SPLITS, Task

if TYPE_CHECKING:
    from agentgym_envs.core.env import AgentEnv

RESET_OPTIONS = ("task_id", "split", "difficulty", "task_seed", "verifier_seed")


def check_reset_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``reset``'s options. Raises ConfigError for an unknown option or split."""
    opts = dict(options or {})
    for key in opts:
        if key not in RESET_OPTIONS:
            raise ConfigError(
                f"unknown reset option {key!r}.{did_you_mean(key, RESET_OPTIONS)} "
                f"Valid options: {RESET_OPTIONS}"
            )
    if "split" in opts and opts["split"] not in SPLITS:
        raise ConfigError(
            f"split must be one of {SPLITS}, got {opts['split']!r}."
            f"{did_you_mean(str(opts['split']), SPLITS)}"
        )
    return opts


def constructor_kwargs(cls: type) -> tuple[str, ...]:
    """The keyword arguments ``cls(...)`` accepts: those of each ``__init__`` up the MRO,
    as long as the one below passes ``**kwargs`` on (an env family to ``AgentEnv``)."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names += [p.name for p in params if p.kind in kinds and p.name not in names]
        if all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return tuple(n for n in names if n != "self")


def check_kwargs(cls: type, kwargs: Mapping[str, Any]) -> None:
    """Raise ConfigError naming ``cls``, the first unknown keyword argument in
    ``kwargs``, the closest accepted one and all accepted ones (``gym.make`` kwargs)."""
    accepted = constructor_kwargs(cls)
    for key in kwargs:
        if key not in accepted:
            raise ConfigError(
                f"{cls.__name__} got an unknown keyword argument {key!r} (from gym.make or "
                f"the constructor).{did_you_mean(key, accepted)} Accepted keyword "
                f"arguments: {', '.join(accepted)}; help({cls.__name__}) documents them"
            )


def play_validation(env: AgentEnv, task: Task) -> str | None:
    """Check ``task`` in ``env`` (an env holding it): not solved at reset, its solution
    succeeds, and the do-nothing policy (``noop_action`` every step) does not. The
    solution is the stored one, or, for tasks that store none (actions that depend on
    the live world, such as a web page's element ids), the live oracle's. Returns why
    the task is invalid, or None. Closes ``env``."""
    try:
        env.reset(seed=0, options={"task_id": task.id})
        if env._goal_reached():
            return "already solved at reset"
        live = None if task.solution else env.oracle()
        actions = iter(task.solution)
        outcome = Outcome.CONTINUE
        while outcome is Outcome.CONTINUE:
            action = live.act() if live is not None else next(actions, None)
            if action is None:
                break
            outcome = env.step(action)[4]["outcome"]
        if outcome is not Outcome.SUCCESS:
            which = "the oracle" if live is not None else "the stored solution"
            why = f" ({env._reason})" if env._reason else ""
            return f"{which} ends with {outcome.value}{why}"
        env.reset(seed=0, options={"task_id": task.id})
        while env.outcome is Outcome.CONTINUE:
            env.step(env.noop_action)
        if env.outcome is Outcome.SUCCESS:
            return "doing nothing succeeds"
        return None
    finally:
        env.close()


__all__ = [
    "RESET_OPTIONS",
    "check_kwargs",
    "check_reset_options",
    "constructor_kwargs",
    "play_validation",
]
