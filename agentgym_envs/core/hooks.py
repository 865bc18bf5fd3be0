"""The env base's extension points: every method a family may override, and a check.

:class:`~agentgym_envs.core.env.AgentEnv` fixes the step loop; a family fills in the
hooks named in :data:`HOOKS` and nothing else. Some hooks keep a leading underscore
(``_load_task``, ``_goal_reached``...) because they are called by the base only, never
by users of an env; they are hooks all the same. Any other method of the base (the
budget check, the info builder, the call loop) is internal: overriding it is a bug that
:func:`undeclared_overrides` finds.
"""

from __future__ import annotations

from collections.abc import Mapping

# name -> what the family's override does (the base's docstring has the details)
HOOKS: Mapping[str, str] = {
    # the world (required)
    "_load_task": "build the world of a task in its initial state",
    "_get_world": "the world state as plain data the caller owns (snapshots)",
    "_set_world": "restore the world from _get_world output",
    "render_view": "the agent's current view of the world",
    "_goal_reached": "the goal verifier: reads state (a recorded verdict), never computes it",
    # tasks and oracles
    "oracle": "a scripted solver from the current state",
    "oracle_success_probability": "the oracle's exact success probability",
    "generate_task": "one validated task from a seed",
    "validate_task": "why a generated task is invalid, or None",
    "task_key": "hashable data identifying a task's initial state",
    "_generate": "generate a task for reset(options={'task_seed': ...})",
    # what the agent sees
    "reset_view": "the view shown under the instruction at reset",
    "system_rules": "the env's standing rules for the system prompt",
    "variant": "a suffix for versions['env'] naming dynamics-changing options",
    "extra_info": "family-specific keys added to every info dict",
    # verification
    "_world_key": "hashable data identifying the world state",
    "_milestones": "the task's milestones",
    "_invariants": "the task's invariants",
    "_dead_end": "why the goal can no longer be reached, or None",
    "before_verify": "compute what the verifiers read (a verdict) before they run",
    "env_failure": "why the environment itself broke (ENV_ERROR), or None",
    "step_check_specs": "the step checks (local scores) the env reads (core.step_checks)",
    "step_checks": "read each step check from the state after a step",
    # calls
    "on_message": "handle a plain-text message to the user",
    "stage_call": "run a staged tool's call on a scratch copy, uncommitted",
    "after_call": "called after a tool's handler ran",
    "on_observation": "called with every observation shown",
    "_close": "release processes, files and ports",
}


def undeclared_overrides(
    cls: type, base: type, hooks: Mapping[str, str] | None = None
) -> list[str]:
    """The methods that ``cls`` or a class between it and ``base`` defines over one of
    ``base``'s that is no hook: neither in ``hooks`` nor abstract in ``base``. Dunder
    methods (``__init__``) are constructors and protocols, not hooks.

    Args:
        cls: a subclass of ``base``.
        base: the class whose internals must not be overridden.
        hooks: the hook names ``base`` documents (abstract methods always count).

    Returns:
        ``"Class.method"`` for each offending override, sorted.
    """
    if not issubclass(cls, base):
        raise TypeError(f"{cls.__name__} is not a subclass of {base.__name__}")
    allowed = set(hooks or ())
    found = []
    for klass in cls.__mro__[: cls.__mro__.index(base)]:
        for name in vars(klass):
            if name.startswith("__") and name.endswith("__"):
                continue
            inherited = getattr(base, name, None)
            if not callable(inherited) and not isinstance(inherited, property):
                continue  # data (a ClassVar such as ``name``) or not the base's at all
            if name not in allowed and not getattr(inherited, "__isabstractmethod__", False):
                found.append(f"{klass.__name__}.{name}")
    return sorted(found)


__all__ = ["HOOKS", "undeclared_overrides"]
