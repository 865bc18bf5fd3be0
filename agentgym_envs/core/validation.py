"""Validating reset options, and a generated task by playing it (its solution succeeds,
doing nothing fails)."""

from __future__ import annotations

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


__all__ = ["RESET_OPTIONS", "check_reset_options", "play_validation"]
