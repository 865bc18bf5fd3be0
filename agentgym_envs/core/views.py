"""Typed views of what an env offers beyond the Gymnasium API, and the one way to reach them.

A trainer sometimes needs more from an env than ``reset`` and ``step``: the ids of a
split's tasks, the tool set, the scripted oracle, the task generator. Each need is a
:class:`~typing.Protocol` here; an env class provides a view by having its members (it
may also name the protocol among its bases, so mypy checks that it does):

* :data:`TASK_SET` (``task_set``): every ``AgentEnv``;
* :data:`TASK_GENERATOR` (``task_set``, ``generate_task``, ``task_key``,
  ``validate_task``): every ``AgentEnv``, though only a family that defines
  ``generate_task`` generates;
* :data:`TOOLSET` (``toolset``): every ``AgentEnv``;
* :data:`ORACLE` (``oracle()``): every ``AgentEnv``, the trainer's DigitFraction fixture;
* :data:`SPLIT_IDS` (``split_ids``, split -> ids): DigitFraction;
* :data:`TASK_IDS` (``task_ids``, every split's): DigitFraction, small test envs.

Code that needs a view asks :func:`env_view`, which looks through the wrappers
(``env.unwrapped``) and returns the env typed as the view, or None when it has no such
members: never ``getattr`` with a default on an env's attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, runtime_checkable

if TYPE_CHECKING:
    import gymnasium as gym

    from agentgym_envs.core.env import Oracle
    from agentgym_envs.core.tasks import Task, TaskSet
    from agentgym_envs.core.tools import ToolSet

V = TypeVar("V")


@runtime_checkable
class TaskSetEnv(Protocol):
    """An env that plays the tasks of a :class:`~agentgym_envs.core.tasks.TaskSet`."""

    task_set: TaskSet


@runtime_checkable
class TaskGeneratorEnv(Protocol):
    """An env whose class can generate, key and validate tasks
    (:func:`~agentgym_envs.core.tasks.grow_split` grows a split with them). ``AgentEnv``
    declares ``generate_task``, but only a family that defines it generates."""

    task_set: TaskSet

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        """One validated task from a seed, or None if the draw is rejected."""
        ...

    @classmethod
    def task_key(cls, task: Task) -> Any:
        """Hashable data identifying a task's initial state."""
        ...

    @classmethod
    def validate_task(cls, task: Task, **env_kwargs: Any) -> str | None:
        """Why a generated task is invalid, or None."""
        ...


@runtime_checkable
class ToolSetEnv(Protocol):
    """An env with a :class:`~agentgym_envs.core.tools.ToolSet` (what ``info["tools"]``
    and ``info["tool_calls"]`` name)."""

    toolset: ToolSet


@runtime_checkable
class OracleEnv(Protocol):
    """An env with a scripted solver bound to its current episode."""

    def oracle(self) -> Oracle:
        """The solver; its ``act()`` is the next action text towards success."""
        ...


@runtime_checkable
class SplitIdsEnv(Protocol):
    """An env that lists its task ids per split (``{"train": (...), "test": (...)}``)."""

    split_ids: Mapping[str, Sequence[str]]


@runtime_checkable
class TaskIdsEnv(Protocol):
    """An env that lists its task ids, every split's together."""

    task_ids: Sequence[str]


class View(Generic[V]):
    """A view to ask :func:`env_view` for: one of the protocols above, checked at run
    time. (A protocol class itself cannot be passed where mypy expects a ``type[V]``.)

    Args:
        protocol: the ``runtime_checkable`` protocol an env must satisfy.
    """

    def __init__(self, protocol: type) -> None:
        self.protocol = protocol

    def __repr__(self) -> str:
        return f"View({self.protocol.__name__})"


TASK_SET: View[TaskSetEnv] = View(TaskSetEnv)
TASK_GENERATOR: View[TaskGeneratorEnv] = View(TaskGeneratorEnv)
TOOLSET: View[ToolSetEnv] = View(ToolSetEnv)
ORACLE: View[OracleEnv] = View(OracleEnv)
SPLIT_IDS: View[SplitIdsEnv] = View(SplitIdsEnv)
TASK_IDS: View[TaskIdsEnv] = View(TaskIdsEnv)


def env_view(env: gym.Env[Any, Any], view: View[V]) -> V | None:
    """The innermost env under ``env``'s wrappers, typed as ``view``, or None when it
    does not have the view's members.

    Args:
        env: a Gymnasium env, wrapped or not.
        view: what the caller needs (:data:`TASK_SET`, :data:`TOOLSET` ...).
    """
    inner = env.unwrapped
    return cast(V, inner) if isinstance(inner, view.protocol) else None


__all__ = [
    "ORACLE",
    "SPLIT_IDS",
    "TASK_GENERATOR",
    "TASK_IDS",
    "TASK_SET",
    "TOOLSET",
    "OracleEnv",
    "SplitIdsEnv",
    "TaskGeneratorEnv",
    "TaskIdsEnv",
    "TaskSetEnv",
    "ToolSetEnv",
    "View",
    "env_view",
]
