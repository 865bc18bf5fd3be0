"""Tool specs and JSON-schema argument validation."""

import pytest

from agentgym_envs.core import SchemaError, Tool, ToolKind, ToolSet, tool
from agentgym_envs.core.tools import compile_schema
from tests.core.counter_env import CounterEnv


def obj(**props):
    return {"type": "object", "properties": props, "required": list(props)}


def test_openai_format_and_signature() -> None:
    spec = CounterEnv.toolset["add"]
    schema = spec.openai_schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "add"
    assert schema["function"]["parameters"]["properties"]["n"]["type"] == "integer"
    assert schema["function"]["parameters"]["additionalProperties"] is False
    assert spec.kind is ToolKind.WRITE and spec.cost == 2.0
    assert spec.signature() == "add(n, idempotency_key?)"


def test_toolset_schemas_are_fresh_copies() -> None:
    a, b = CounterEnv.toolset.schemas(), CounterEnv.toolset.schemas()
    assert a == b and a is not b and a[0] is not b[0]
    a[0]["function"]["name"] = "changed"
    assert CounterEnv.toolset.schemas()[0]["function"]["name"] != "changed"


def test_fingerprint_changes_with_any_spec_change() -> None:
    base = Tool("t", "d", obj(x={"type": "string"}))
    assert (
        ToolSet([base]).fingerprint
        == ToolSet([Tool("t", "d", obj(x={"type": "string"}))]).fingerprint
    )
    for other in (
        Tool("t", "d2", obj(x={"type": "string"})),
        Tool("t", "d", obj(x={"type": "integer"})),
        Tool("t", "d", obj(x={"type": "string"}), cost=2.0),
        Tool("t", "d", obj(x={"type": "string"}), kind=ToolKind.WRITE),
    ):
        assert ToolSet([other]).fingerprint != ToolSet([base]).fingerprint


@pytest.mark.parametrize(
    ("schema", "good", "bad", "message"),
    [
        ({"type": "string", "minLength": 2}, "ab", "a", "at least 2 characters"),
        ({"type": "string", "maxLength": 2}, "ab", "abc", "at most 2 characters"),
        ({"type": "string", "pattern": "^[a-z]+$"}, "abc", "ABC", "must match"),
        ({"type": "integer", "minimum": 1}, 1, 0, ">= 1"),
        ({"type": "number", "exclusiveMaximum": 1}, 0.5, 1, "< 1"),
        ({"type": "boolean"}, True, 1, "must be boolean"),
        ({"enum": ["a", 1]}, 1, True, "one of"),
        ({"const": "x"}, "x", "y", "one of"),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, [1, 2], [1, "x"], "[1]"),
        ({"type": "array", "minItems": 1}, [1], [], "at least 1 items"),
        ({"type": ["string", "null"]}, None, 3, "string or null"),
        (obj(a={"type": "integer"}), {"a": 1}, {"a": "1"}, "must be integer"),
    ],
)
def test_validator(schema, good, bad, message) -> None:
    check = compile_schema(schema)
    assert check(good, "v") is None
    error = check(bad, "v")
    assert error is not None and message in error


def test_unsupported_schema_names_the_fix() -> None:
    with pytest.raises(SchemaError, match=r"unsupported JSON-schema keyword.*oneOf"):
        Tool("t", "d", {"type": "object", "properties": {"x": {"oneOf": []}}})
    with pytest.raises(SchemaError, match="must be a JSON-schema object"):
        Tool("t", "d", {"type": "string"})
    with pytest.raises(SchemaError, match="must be an identifier"):
        Tool("bad name", "d", obj())
    with pytest.raises(SchemaError, match="not declared"):
        Tool("t", "d", {"type": "object", "properties": {}, "required": ["x"]})
    with pytest.raises(SchemaError, match="duplicate"):
        ToolSet([Tool("t", "d", obj()), Tool("t", "d", obj())])


def test_decorator_defaults_required_to_params_without_default() -> None:
    @tool("d", parameters={"a": {"type": "string"}, "b": {"type": "integer", "default": 1}})
    def f(a: str, b: int = 1) -> None: ...

    spec = f.__agentgym_tool__
    assert spec.parameters["required"] == ["a"]
    assert spec.signature() == "f(a, b?)"
    assert spec.param_names == ("a", "b")
