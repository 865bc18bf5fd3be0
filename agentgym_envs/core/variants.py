"""Tool variants (tool OOD): renamed, re-described tools for every following episode.

:meth:`AgentEnv.set_tool_variant` stores a variant; the env applies it at reset on top
of a task's own renames. Oracles write canonical tool names, so the base class wraps
every family's ``oracle()`` with :func:`localizing`, which rewrites their actions to
the names the agent sees (nothing changes while no variant is set).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.actions import ActionParser
from agentgym_envs.core.errors import ConfigError, SchemaError
from agentgym_envs.core.tools import ToolSet

if TYPE_CHECKING:
    from agentgym_envs.core.env import AgentEnv, Oracle

Variant = tuple[dict[str, str], dict[str, str]]


def check_variant(
    toolset: ToolSet,
    names: Mapping[str, str] | None,
    descriptions: Mapping[str, str] | None,
    env_name: str,
) -> Variant | None:
    """Validate a variant against the env class's tools; None when it changes nothing.

    Raises:
        ConfigError: an unknown tool, a name that is not an identifier, or two tools
            that would share a name.
    """
    renames, described = dict(names or {}), dict(descriptions or {})
    try:
        toolset.renamed(renames, described)
    except SchemaError as exc:
        raise ConfigError(
            f"invalid tool variant for {env_name}: {exc}. Rename tools by their canonical "
            f"names {list(toolset)} to distinct identifiers"
        ) from None
    return (renames, described) if renames or described else None


def rename_calls(toolset: ToolSet, text: str) -> str:
    """``text`` with every ``canonical(`` call written with ``toolset``'s names."""
    for spec in toolset.values():
        if spec.name != spec.canonical:
            text = re.sub(rf"\b{spec.canonical}\(", f"{spec.name}(", text)
    return text


def localize(env: AgentEnv, action: str) -> str:
    """``action`` with its calls renamed to ``env``'s current tool names (see
    :meth:`AgentEnv.localize_action`)."""
    variant = env.tool_variant
    if variant is None or not variant[0]:  # no tool is renamed: nothing to rewrite
        return action
    # read with the source names first: a variant name may equal a task's alias of
    # another tool, and the action is written in source names
    parsed = _source_parser(env).parse(action)
    if parsed.error_code is not None or not parsed.calls:
        return action
    out = [
        {
            "name": env.toolset.canonical(c.name).name,
            "arguments": json.loads(json.dumps(dict(c.arguments))),
        }
        for c in parsed.calls
    ]
    return json.dumps(out[0] if len(out) == 1 else out)


def source_toolset(toolset: ToolSet, spec: Any) -> ToolSet:
    """The class's tools under their canonical names and under a task's own aliases
    (``spec["tool_names"]``): the names oracles and stored solutions use."""
    aliases = (spec.get("tool_names") if isinstance(spec, Mapping) else None) or {}
    tools = {t.name: t for t in toolset.values()}
    tools.update({t.name: t for t in toolset.renamed(aliases).values() if t.name not in tools})
    return ToolSet(tools.values())


# source parsers by (env class tools, task aliases, parser options); parsing caches
_SOURCES: dict[tuple[Any, ...], tuple[ToolSet, ActionParser]] = {}


def _source_parser(env: AgentEnv) -> ActionParser:
    own = type(env).toolset
    spec = env.task.spec
    aliases = (spec.get("tool_names") if isinstance(spec, Mapping) else None) or {}
    key = (id(own), json.dumps(aliases, sort_keys=True), env.max_calls_per_step)
    hit = _SOURCES.get(key)
    if hit is not None and hit[0] is own:
        return hit[1]
    parser = ActionParser(
        source_toolset(own, spec),
        accepts_messages=env.accepts_messages,
        max_calls=env.max_calls_per_step,
        max_chars=env.max_action_chars,
    )
    if len(_SOURCES) >= 256:
        _SOURCES.clear()
    _SOURCES[key] = (own, parser)
    return parser


def localizing(make: Callable[[Any], Oracle]) -> Callable[[Any], Oracle]:
    """Wrap a family's ``oracle()`` so that, under a tool variant, its actions call the
    renamed tools; without a variant it returns the family's oracle itself."""

    @functools.wraps(make)
    def oracle(self: AgentEnv) -> Oracle:
        solver = make(self)
        return solver if self.tool_variant is None else LocalizedOracle(self, solver)

    return oracle


class LocalizedOracle:
    """An oracle whose actions go through :meth:`AgentEnv.localize_action`."""

    def __init__(self, env: AgentEnv, solver: Oracle) -> None:
        self.env = env
        self.solver = solver

    def act(self) -> str:
        return self.env.localize_action(self.solver.act())

    def __getattr__(self, name: str) -> Any:  # the family oracle's own attributes
        return getattr(self.solver, name)
