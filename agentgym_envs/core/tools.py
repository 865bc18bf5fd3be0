"""Tool specs, tool calls and their results, and argument validation against JSON schema.

An env declares its tools as methods decorated with :func:`tool`; the base env collects
them into a :class:`ToolSet`. Each tool has a JSON-schema argument spec (OpenAI function
format), a READ/WRITE kind, a per-call cost for the ledger and a nominal duration for the
env's virtual clock.

Validation is compiled once per tool from the schema into small closures (the step loop
validates every call, so it must cost microseconds, not the milliseconds of a general
JSON-schema engine). Schemas using keywords the compiler does not know raise
:class:`~agentgym_envs.core.errors.SchemaError` when the tool is defined.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

from agentgym_envs.core.errors import SchemaError, did_you_mean

Check = Callable[[Any, str], "str | None"]
IDEMPOTENCY_KEY = "idempotency_key"
F = TypeVar("F", bound=Callable[..., Any])


class ToolKind(StrEnum):
    """Whether a tool only reads the world or may change it."""

    READ = "read"
    WRITE = "write"


_SUPPORTED = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "items",
    "minItems",
    "maxItems",
    "description",
    "default",
    "title",
    "examples",
}

_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _describe(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def compile_schema(schema: Mapping[str, Any], where: str = "arguments") -> Check:
    """Compile a JSON schema into a check ``(value, path) -> error message | None``.

    Raises:
        SchemaError: the schema uses an unsupported keyword or a malformed value.
    """
    unknown = set(schema) - _SUPPORTED
    if unknown:
        raise SchemaError(
            f"{where}: unsupported JSON-schema keyword(s) {sorted(unknown)}; supported are "
            f"{sorted(_SUPPORTED)}. Express the constraint with those, or check it in the "
            "tool handler and return ToolResult.failure(...)."
        )
    checks: list[Check] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        bad = [t for t in names if t not in _TYPE_CHECKS]
        if bad:
            raise SchemaError(f"{where}: unknown type(s) {bad}; use one of {sorted(_TYPE_CHECKS)}")
        preds = [_TYPE_CHECKS[t] for t in names]
        label = " or ".join(names)

        def check_type(v: Any, path: str) -> str | None:
            if any(p(v) for p in preds):
                return None
            return f"{path} must be {label}, got {_describe(v)}"

        checks.append(check_type)
    if "enum" in schema or "const" in schema:
        allowed = list(schema["enum"]) if "enum" in schema else [schema["const"]]

        def check_enum(v: Any, path: str) -> str | None:
            if any(v == a and type(v) is type(a) for a in allowed):
                return None
            return f"{path} must be one of {allowed}, got {_describe(v)}"

        checks.append(check_enum)
    checks.extend(_bound_checks(schema))
    if "pattern" in schema:
        regex = re.compile(schema["pattern"])
        checks.append(
            lambda v, path: (
                None
                if not isinstance(v, str) or regex.search(v)
                else f"{path} must match /{regex.pattern}/, got {_describe(v)}"
            )
        )
    if "items" in schema:
        item_check = compile_schema(schema["items"], f"{where}.items")

        def check_items(v: Any, path: str) -> str | None:
            if not isinstance(v, list | tuple):
                return None
            for i, item in enumerate(v):
                if (err := item_check(item, f"{path}[{i}]")) is not None:
                    return err
            return None

        checks.append(check_items)
    if "properties" in schema or "required" in schema:
        checks.append(_object_check(schema, where))

    def check(v: Any, path: str) -> str | None:
        for c in checks:
            if (err := c(v, path)) is not None:
                return err
        return None

    return check


_COMPARE: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "minimum": (lambda v, b: v >= b, ">="),
    "maximum": (lambda v, b: v <= b, "<="),
    "exclusiveMinimum": (lambda v, b: v > b, ">"),
    "exclusiveMaximum": (lambda v, b: v < b, "<"),
}
_SIZES: dict[str, tuple[type | tuple[type, ...], bool, str]] = {
    "minLength": (str, True, "characters"),
    "maxLength": (str, False, "characters"),
    "minItems": ((list, tuple), True, "items"),
    "maxItems": ((list, tuple), False, "items"),
}


def _numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _compare_check(key: str, bound: Any) -> Check:
    op, word = _COMPARE[key]

    def check(v: Any, path: str) -> str | None:
        if not _numeric(v) or op(v, bound):
            return None
        return f"{path} must be {word} {bound}, got {_describe(v)}"

    return check


def _size_check(key: str, bound: int) -> Check:
    kinds, at_least, unit = _SIZES[key]

    def check(v: Any, path: str) -> str | None:
        if not isinstance(v, kinds):
            return None
        n = len(v)  # type: ignore[arg-type]  # str, list or tuple, checked above
        if (n >= bound) if at_least else (n <= bound):
            return None
        return f"{path} must have {'at least' if at_least else 'at most'} {bound} {unit}, got {n}"

    return check


def _bound_checks(schema: Mapping[str, Any]) -> list[Check]:
    checks = [_compare_check(k, schema[k]) for k in _COMPARE if k in schema]
    checks.extend(_size_check(k, int(schema[k])) for k in _SIZES if k in schema)
    return checks


def _object_check(schema: Mapping[str, Any], where: str) -> Check:
    props = {k: compile_schema(s, f"{where}.{k}") for k, s in schema.get("properties", {}).items()}
    required = list(schema.get("required", []))
    missing_decl = [r for r in required if r not in props]
    if missing_decl:
        raise SchemaError(f"{where}: required {missing_decl} are not declared in properties")
    closed = schema.get("additionalProperties", True) is False

    def check_object(v: Any, path: str) -> str | None:
        if not isinstance(v, dict):
            return None
        for name in required:
            if name not in v:
                return f"missing required argument {name!r} ({path} needs {required})"
        for name, value in v.items():
            sub = props.get(name)
            if sub is None:
                if closed:
                    return f"unexpected argument {name!r}." + (
                        did_you_mean(name, props) or f" Allowed: {sorted(props)}"
                    )
                continue
            if (err := sub(value, name)) is not None:
                return err
        return None

    return check_object


@dataclass(frozen=True, eq=False)
class Tool:
    """The spec of one tool.

    Attributes:
        name: the verb the agent calls, e.g. ``move`` or ``get_order``.
        description: one or two sentences for the model.
        parameters: a JSON-schema object describing the arguments.
        kind: READ or WRITE; gates and policies use it.
        cost: ledger units charged per call.
        duration_ms: nominal duration used by the env's virtual clock.
        handler: the env method that runs the call.
        canonical: the tool's own name when ``name`` is an alias (OOD tool renaming);
            gates, handlers and records use it. Defaults to ``name``.
        idempotent: a WRITE tool that accepts an optional ``idempotency_key``: a retry
            with the same key is applied once and returns the first result.
        faultable: whether injected infrastructure faults can hit it (not for talking
            to the user, which is no backend).
        staged: the call runs in three phases (``core.staging``): the env's
            ``stage_call`` hook runs it on a scratch copy, effect gates check what it
            changed, and the handler, called as ``handler(staged, **arguments)``, commits.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: ToolKind = ToolKind.READ
    cost: float = 1.0
    duration_ms: float = 0.0
    handler: str = ""
    canonical: str = ""
    idempotent: bool = False
    faultable: bool = True
    staged: bool = False
    _check: Check = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name):
            raise SchemaError(f"tool name {self.name!r} must be an identifier, like 'get_order'")
        if self.parameters.get("type") != "object":
            raise SchemaError(
                f"tool {self.name!r}: parameters must be a JSON-schema object "
                '({"type": "object", "properties": {...}}), got type '
                f"{self.parameters.get('type')!r}"
            )
        if not math.isfinite(self.cost) or self.cost < 0:
            raise SchemaError(f"tool {self.name!r}: cost must be finite and >= 0, got {self.cost}")
        object.__setattr__(self, "_check", compile_schema(self.parameters, self.name))
        if not self.canonical:
            object.__setattr__(self, "canonical", self.name)

    @property
    def param_names(self) -> tuple[str, ...]:
        """Parameter names in declaration order (positional arguments map onto these)."""
        return tuple(self.parameters.get("properties", {}))

    def openai_schema(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.parameters)),
            },
        }

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        """Return None if ``arguments`` satisfy the schema, else a message saying why not."""
        return self._check(dict(arguments), "arguments")

    def signature(self) -> str:
        """A short call signature for prompts and error messages, e.g. ``move(direction)``."""
        required = set(self.parameters.get("required", []))
        parts = [p if p in required else f"{p}?" for p in self.param_names]
        return f"{self.name}({', '.join(parts)})"


def tool(
    description: str,
    *,
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
    required: Sequence[str] | None = None,
    kind: ToolKind = ToolKind.READ,
    cost: float = 1.0,
    duration_ms: float = 0.0,
    name: str | None = None,
    idempotent: bool = False,
    faultable: bool = True,
    staged: bool = False,
) -> Callable[[F], F]:
    """Declare an env method as a tool.

    Args:
        description: what the tool does, for the model.
        parameters: JSON schema per argument name, in the order positional calls use.
        required: required argument names; by default every argument without a
            ``default`` in its schema.
        kind: READ or WRITE.
        cost: ledger units per call.
        duration_ms: nominal duration for the virtual clock.
        name: the tool name; defaults to the method name.
        idempotent: add an optional ``idempotency_key`` argument (for WRITE tools); the
            env applies a retried call with the same key once (the handler never sees it).
        faultable: whether injected infrastructure faults can hit the tool.
        staged: run the call on a scratch copy first (the env's ``stage_call`` hook),
            let the env's effect gates check what it changed, then commit: the handler
            is called as ``handler(staged, **arguments)`` (see ``core.staging``).
    """
    props = dict(parameters or {})
    if idempotent:
        props[IDEMPOTENCY_KEY] = {
            "type": "string",
            "maxLength": 200,
            "default": "",
            "description": "optional: reuse the same key when you retry this write; it is "
            "applied only once and the retry returns the first result",
        }
    req = (
        list(required)
        if required is not None
        else [k for k, s in props.items() if "default" not in s]
    )

    def decorate(fn: F) -> F:
        spec = Tool(
            name=name or fn.__name__,
            description=description,
            parameters={
                "type": "object",
                "properties": props,
                "required": req,
                "additionalProperties": False,
            },
            kind=kind,
            cost=cost,
            duration_ms=duration_ms,
            handler=fn.__name__,
            idempotent=idempotent,
            faultable=faultable,
            staged=staged,
        )
        fn.__agentgym_tool__ = spec  # type: ignore[attr-defined]
        return fn

    return decorate


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One parsed call: a known tool name and its arguments (not yet validated)."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(slots=True)
class ToolResult:
    """What a tool handler returns.

    Attributes:
        text: the message the agent reads.
        error_code: None on success, else a short code (``no_such_item``); the env
            then reports it in ``info["error"]``.
        data: optional structured result (JSON-able), recorded by wrappers and stores.
        violation: (gate, reason) when running the call broke a hard rule that only
            shows during execution (a browser request leaving the site); the env then
            stops the episode as that gate would (``SAFETY_STOP``).
    """

    text: str
    error_code: str | None = None
    data: Any = None
    violation: tuple[str, str] | None = None

    @classmethod
    def failure(cls, code: str, text: str, data: Any = None) -> ToolResult:
        """A call that ran but could not do what was asked (a policy-side error)."""
        return cls(text=text, error_code=code, data=data)

    @classmethod
    def unsafe(cls, gate: str, reason: str) -> ToolResult:
        """A call whose execution tried something a safety gate forbids (stops the episode)."""
        return cls(text=reason, violation=(gate, reason))

    @property
    def ok(self) -> bool:
        return self.error_code is None


class ToolSet(Mapping[str, Tool]):
    """An ordered, immutable set of tools with cached schemas and a content fingerprint."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise SchemaError(f"duplicate tool name {t.name!r}")
            self._tools[t.name] = t
        self._by_canonical = {t.canonical: t for t in self._tools.values()}
        schemas = [t.openai_schema() for t in self._tools.values()]
        canonical = json.dumps(
            [
                [s, t.kind.value, t.cost, t.duration_ms]
                for s, t in zip(schemas, self._tools.values(), strict=True)
            ],
            sort_keys=True,
        )
        self.fingerprint: str = hashlib.sha256(canonical.encode()).hexdigest()[:12]
        # marshal: the fastest way to hand out fresh copies (JSON-like data only)
        self._schemas_blob = marshal.dumps(schemas)
        self._description = "\n".join(
            f"- {t.signature()}: {t.description}" for t in self._tools.values()
        )

    @classmethod
    def from_class(cls, owner: type) -> ToolSet:
        """Collect every method decorated with :func:`tool` on ``owner`` and its bases."""
        found: dict[str, Tool] = {}
        for klass in reversed(owner.__mro__):
            for attr in vars(klass).values():
                spec = getattr(attr, "__agentgym_tool__", None)
                if isinstance(spec, Tool):
                    found[spec.name] = spec
        return cls(found.values())

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def canonical(self, name: str) -> Tool:
        """The tool whose canonical name is ``name`` (whatever it is called here)."""
        return self._by_canonical[name]

    def renamed(
        self, names: Mapping[str, str], descriptions: Mapping[str, str] | None = None
    ) -> ToolSet:
        """This tool set with some tools renamed and re-described (tool OOD).

        Args:
            names: canonical name -> the name the agent sees.
            descriptions: canonical name -> a paraphrased description.

        Raises:
            SchemaError: a name to rename is not in the set.
        """
        unknown = (set(names) | set(descriptions or {})) - set(self._by_canonical)
        if unknown:
            raise SchemaError(f"cannot rename unknown tools {sorted(unknown)}")
        described = descriptions or {}
        return ToolSet(
            replace(
                t,
                name=names.get(t.canonical, t.name),
                description=described.get(t.canonical, t.description),
            )
            for t in self._tools.values()
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """A fresh copy of the OpenAI-format schemas (callers may mutate it)."""
        result: list[dict[str, Any]] = marshal.loads(self._schemas_blob)
        return result

    def describe(self) -> str:
        """One line per tool, for system prompts: ``signature: description``."""
        return self._description
