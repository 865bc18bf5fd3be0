"""Tool groups: the components a business env's tools are composed of.

A domain's tools live in :class:`ToolGroup` subclasses (Retail's READ tools, its WRITE
tools ...), not in a chain of env base classes. The env names its groups in
``tool_groups``; :func:`install_tool_groups` then gives the env class one method per
tool, which hands the call to the episode's instance of the group. The core still sees
ordinary tool methods on the env (:meth:`~agentgym_envs.core.tools.ToolSet.from_class`
collects them, the call runner calls ``env.<handler>(**arguments)``), so tool schemas,
their order and the tool fingerprint are those of the methods as declared.

A group holds no state of its own: it reads and changes the world through its env
(``self.env.db``, ``self.env.authenticate``), so snapshots stay the env's business.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tools import Tool, ToolResult

if TYPE_CHECKING:
    from agentgym_envs.business.base import BusinessEnv
    from agentgym_envs.business.db import EpisodeDB


def json_result(data: Any) -> ToolResult:
    """A tool result carrying ``data`` as compact JSON text (keys sorted)."""
    return ToolResult(json.dumps(data, sort_keys=True, default=str), data=data)


class ToolGroup:
    """A set of tools bound to one env.

    Subclasses declare the tools as methods decorated with
    :func:`~agentgym_envs.core.tools.tool`; an env lists the group in ``tool_groups``.

    Args:
        env: the env whose world the tools read and change.
    """

    def __init__(self, env: BusinessEnv) -> None:
        self.env = env

    @property
    def db(self) -> EpisodeDB:
        """The episode's database."""
        return self.env.db

    @classmethod
    def specs(cls) -> Iterator[Tool]:
        """The group's tools, in declaration order (bases first)."""
        found: dict[str, Tool] = {}  # an override keeps its base's place
        for klass in reversed(cls.__mro__):
            for attr in vars(klass).values():
                spec = getattr(attr, "__agentgym_tool__", None)
                if isinstance(spec, Tool):
                    found[spec.handler] = spec
        yield from found.values()


def install_tool_groups(env_cls: type[BusinessEnv], groups: tuple[type[ToolGroup], ...]) -> None:
    """Give ``env_cls`` one tool method per tool of ``groups`` (called by the env base).

    Raises:
        ConfigError: two groups declare the same tool, or a tool would replace a method
            the env class defines itself.
    """
    owners: dict[str, type[ToolGroup]] = {}
    for group in groups:
        for spec in group.specs():
            name = spec.handler
            if name in owners:
                raise ConfigError(
                    f"{env_cls.__name__}: tool {name!r} is declared by both "
                    f"{owners[name].__name__} and {group.__name__}; expected each tool in one "
                    "group. Rename one, or drop one group from tool_groups."
                )
            if name in vars(env_cls):
                raise ConfigError(
                    f"{env_cls.__name__} defines {name!r} itself and tool group "
                    f"{group.__name__} declares a tool of that name; expected one. Remove "
                    "the method or the tool."
                )
            owners[name] = group
    for name, group in owners.items():
        setattr(env_cls, name, _delegate(group, name))


def _delegate(group: type[ToolGroup], name: str) -> Callable[..., ToolResult]:
    method = getattr(group, name)

    def run(env: BusinessEnv, *args: Any, **arguments: Any) -> ToolResult:
        # positional args pass through too (a staged tool's handler gets the stage first)
        result: ToolResult = method(env.tool_group(group), *args, **arguments)
        return result

    run.__name__ = name
    run.__qualname__ = f"{group.__qualname__}.{name}"
    run.__doc__ = method.__doc__
    run.__agentgym_tool__ = method.__agentgym_tool__  # type: ignore[attr-defined]
    return run
