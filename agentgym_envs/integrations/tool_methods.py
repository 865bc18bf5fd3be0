"""Python methods built from an env's JSON tool specs, typed and documented.

Trainers that take tools as Python callables (TRL's ``environment_factory``, for one)
read each tool's schema back from the function: its name, type hints and Google-style
docstring (``transformers.utils.get_json_schema``). :func:`tool_method` writes exactly
that: for a spec from ``info["tools"]`` it returns a function whose extracted schema has
the spec's name, description, parameter names, JSON types (array item types included),
enums and required set, and each parameter's description.

JSON-Schema keywords that a Python type hint cannot carry (``minLength``, ``maximum``,
``pattern``, ``examples``, ``minItems``, an item's own description, a default) are
appended to the parameter's description in words, so the model still reads them; the
env enforces them in any case, and a call that breaks them is answered with an error
observation.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from agentgym_envs.core.errors import ConfigError

ToolCall = Callable[[Any, str, dict[str, Any]], str]
"""``(instance, tool name, arguments) -> observation``: what a tool method runs."""

_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}


def python_type(schema: Mapping[str, Any], where: str) -> Any:
    """The type hint that ``get_json_schema`` turns back into ``schema``'s type.

    Raises:
        ConfigError: the schema's type has no Python equivalent here.
    """
    if "enum" in schema:
        values = tuple(schema["enum"])
        if not values or any(type(v) not in (str, int, float, bool) for v in values):
            raise ConfigError(
                f"{where}: expected an enum of JSON scalars, got {schema['enum']!r}; "
                "fix the tool spec"
            )
        return Literal[values]
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return list[python_type(items, f"{where} items")] if items else list  # type: ignore[misc]
    if isinstance(kind, str) and kind in _TYPES:
        return _TYPES[kind]
    raise ConfigError(
        f"{where}: expected a JSON type among {[*_TYPES, 'array']} or an enum, got "
        f"{kind!r}; such a tool cannot be exposed as a typed Python method"
    )


def _limits(schema: Mapping[str, Any]) -> list[str]:
    """The validation keywords of ``schema`` that a type hint cannot carry, in words."""
    out: list[str] = []
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low is not None and high is not None:
        out.append(f"{low} to {high} characters")
    elif high is not None:
        out.append(f"at most {high} characters")
    elif low is not None:
        out.append(f"at least {low} characters")
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        out.append(f"from {low} to {high}")
    elif high is not None:
        out.append(f"at most {high}")
    elif low is not None:
        out.append(f"at least {low}")
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None and high is not None:
        out.append(f"{low} to {high} items")
    elif high is not None:
        out.append(f"at most {high} items")
    elif low is not None:
        out.append(f"at least {low} items")
    if "pattern" in schema:
        out.append(f"matching {schema['pattern']}")
    examples = [str(x) for x in schema.get("examples") or ()]
    if examples and not all(x in str(schema.get("description", "")) for x in examples):
        out.append("e.g. " + ", ".join(examples))
    return out


def parameter_description(name: str, schema: Mapping[str, Any]) -> str:
    """The spec's description of a parameter, with its limits in words (one line)."""
    text = str(schema.get("description") or "").strip()
    notes = _limits(schema)
    items = schema.get("items")
    if isinstance(items, Mapping):
        each = "; ".join([str(items.get("description") or "").strip(), *_limits(items)])
        if each.strip("; "):
            notes.append(f"each: {each.strip('; ')}")
    if "default" in schema:
        notes.append(f"default {json.dumps(schema['default'])}")
    if not text:
        text = name.replace("_", " ")
    if notes:
        text += f" ({'; '.join(notes)})"
    # get_json_schema reads one description per line, and a trailing "(choices: ...)"
    # as an enum: keep it on one line and never in that form
    return " ".join(text.split())


def tool_method(spec: Mapping[str, Any], call: ToolCall) -> Callable[..., str]:
    """A method (first parameter ``self``) for one tool spec in OpenAI function format.

    Calling it runs ``call(self, name, arguments)``: the arguments the caller gave, by
    keyword or in the spec's order, and never a default the caller left out (the env
    applies its own). The method accepts any arguments, so a wrong one reaches the env,
    which answers it with an error observation instead of a Python exception.

    Raises:
        ConfigError: the spec is malformed or uses a type with no Python hint.
    """
    function = spec.get("function", spec)
    name = function.get("name")
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise ConfigError(
            f"expected a tool name that is a public Python identifier, got {name!r}; "
            "rename the tool (for example with the ToolRenameWrapper)"
        )
    parameters = function.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines: list[str] = []
    for arg, schema in properties.items():
        if not arg.isidentifier():
            raise ConfigError(
                f"tool {name!r}: expected parameter names that are Python identifiers, "
                f"got {arg!r}; rename the parameter"
            )
        hint = python_type(schema, f"tool {name!r} parameter {arg!r}")
        default = inspect.Parameter.empty if arg in required else schema.get("default")
        params.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        )
        annotations[arg] = hint
        lines.append(f"    {arg}: {parameter_description(arg, schema)}")
    description = " ".join(str(function.get("description") or name).split())
    doc = description
    if lines:
        doc += "\n\nArgs:\n" + "\n".join(lines)
    doc += "\n\nReturns:\n    The environment's observation after the call."
    order = list(properties)

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        if len(args) > len(order):
            # more positional arguments than parameters: let the env report the call
            kwargs = {**kwargs, "extra_positional_arguments": list(args[len(order) :])}
        arguments = {**dict(zip(order, args, strict=False)), **kwargs}
        return call(self, name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return method
