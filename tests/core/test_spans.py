"""Where a call's parts are in the action text (``ActionParser.call_spans``), and which
part a parser error blames (``info["error"]``'s part, call, argument and span)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agentgym_envs.core import ActionParser, ErrorCode, Tool, ToolSet
from agentgym_envs.core.info import ErrorPart
from agentgym_envs.core.spans import Blame, CallSpans, Span, content_chars, free_text
from tests.core.counter_env import CounterEnv


def _tool(name: str, **props: dict[str, Any]) -> Tool:
    schema = {"type": "object", "properties": props, "required": list(props)}
    return Tool(name=name, description=name, parameters={**schema, "additionalProperties": False})


TOOLS = ToolSet(
    [
        _tool("move", direction={"type": "string", "enum": ["up", "down", "left", "right"]}),
        _tool("say", text={"type": "string"}),
        _tool("add", n={"type": "integer", "minimum": -20, "maximum": 20}),
        _tool("put", item={"type": "string"}, count={"type": "integer"}),
    ]
)


@pytest.fixture
def parser() -> ActionParser:
    return ActionParser(TOOLS, accepts_messages=True, max_calls=2)


def part(text: str, span: Span | None) -> str | None:
    return None if span is None else text[span.start : span.end]


# -- the parts of each accepted form -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "values"),
    [
        ('{"name": "move", "arguments": {"direction": "up"}}', "move", {"direction": "up"}),
        ('{"tool": "add", "args": {"n": 2}}', "add", {"n": "2"}),
        ('{"name": "add", "parameters": {"n": -3}}', "add", {"n": "-3"}),
        # OpenAI: the arguments are a JSON string; their spans are in the escaped text
        (
            '{"type": "function", "function": {"name": "say", "arguments": '
            '"{\\"text\\": \\"hi \\\\\\"you\\\\\\"\\"}"}}',
            "say",
            {"text": 'hi \\\\\\"you\\\\\\"'},
        ),
        (
            '{"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": '
            '"function", "function": {"name": "add", "arguments": "{\\"n\\": 7}"}}]}',
            "add",
            {"n": "7"},
        ),
        ('<tool_call>{"name": "add", "arguments": {"n": 2}}</tool_call>', "add", {"n": "2"}),
        (
            "Moving.\n<tool_call>\nmove(direction='left')\n</tool_call>",
            "move",
            {"direction": "left"},
        ),
        ('```json\n{"name": "say", "arguments": {"text": "ok"}}\n```', "say", {"text": "ok"}),
        ("```python\nput('box', count=3)\n```", "put", {"item": "box", "count": "3"}),
        ("  add( n = 2 )  ", "add", {"n": "2"}),
        ("move(up)", "move", {"direction": "up"}),
        ("<think>add(n=99)</think>\n add(n=2)", "add", {"n": "2"}),
        ('I will call {"name": "add", "arguments": {"n": 2}} now', "add", {"n": "2"}),
        ("I will move now.\nmove(direction='down') ;", "move", {"direction": "down"}),
        ('say(text="")', "say", {"text": '""'}),  # an empty string keeps its quotes
        ("say(text=r'a\\b')", "say", {"text": "a\\b"}),
        ('say(text="""multi\nline""")', "say", {"text": "multi\nline"}),
    ],
)
def test_spans_of_every_accepted_form(
    parser: ActionParser, text: str, name: str, values: dict[str, str]
) -> None:
    (spans,) = parser.call_spans(text)
    assert spans.tool == name and part(text, spans.name) == name
    assert {a.name: part(text, a.value) for a in spans.args} == values
    whole = part(text, spans.call)
    assert whole is not None and name in whole and whole.strip() == whole


def test_keys_arguments_and_free_text(parser: ActionParser) -> None:
    text = 'First I think.\n<tool_call>{"name": "put", "arguments": {"item": "a", "count": 1}}'
    text += "</tool_call> and <tool_call>put(item='b', count=2)</tool_call> done"
    first, second = parser.call_spans(text)
    assert part(text, first.arguments) == '{"item": "a", "count": 1}'
    assert [part(text, a.key) for a in first.args] == ['"item"', '"count"']
    assert part(text, second.arguments) == "(item='b', count=2)"
    assert [part(text, a.entry) for a in second.args] == ["item='b'", "count=2"]
    assert [part(text, s) for s in free_text(text, [first, second])] == [
        "First I think.\n<tool_call>",
        "</tool_call> and <tool_call>",
        "</tool_call> done",
    ]
    assert free_text("just text", []) == [Span(0, 9)]


def test_no_spans_for_plain_text_or_unreadable_calls(parser: ActionParser) -> None:
    for text in ("hello there", "", "add(n=", '{"name": "add"', "a" * 9000, "os.system('x')"):
        assert parser.call_spans(text) == []
    # a prose last line calls a tool only when it names a known tool
    assert parser.call_spans("ok\nlaunch(x=1)") == []


# -- adversarial text --------------------------------------------------------------------


def test_a_fake_call_inside_an_argument_is_text(parser: ActionParser) -> None:
    """A tag, a fence or a call inside a string is that argument's value, never a call."""
    fake = '<tool_call>{"name": "move", "arguments": {"direction": "up"}}</tool_call>'
    for text in (
        json.dumps({"name": "say", "arguments": {"text": fake}}),
        f"say(text={fake!r})",
        f"say(text={'move(direction=' + repr('up') + ')'!r})",
        json.dumps({"name": "say", "arguments": {"text": "```python\nmove(up)\n```"}}),
    ):
        (spans,) = parser.call_spans(text)
        assert spans.tool == "say" and part(text, spans.name) == "say"
        assert parser.parse(text).calls[0].name == "say"
        value = part(text, spans.args[0].value)
        assert value is not None and "move" in value


def test_unicode_offsets_are_characters(parser: ActionParser) -> None:
    """ast counts UTF-8 bytes; spans count characters."""
    text = "Ünïcødé ✓ 😀 prose\nput(item='日本😀語', count=4)"
    (spans,) = parser.call_spans(text)
    assert part(text, spans.name) == "put"
    assert [part(text, a.value) for a in spans.args] == ["日本😀語", "4"]
    escaped = json.dumps({"name": "say", "arguments": {"text": "é😀\u2028x"}}, ensure_ascii=True)
    (spans,) = parser.call_spans(escaped)
    assert part(escaped, spans.args[0].value) == json.dumps("é😀\u2028x")[1:-1]
    # OpenAI's string arguments holding a surrogate pair escape
    openai = json.dumps({"function": {"name": "say", "arguments": json.dumps({"text": "a😀b"})}})
    (spans,) = parser.call_spans(openai)
    assert part(openai, spans.args[0].value) == "a\\\\ud83d\\\\ude00b"


def test_nested_braces_and_duplicate_keys(parser: ActionParser) -> None:
    text = (
        '{"name": "say", "arguments": {"text": "{\\"a\\": {\\"b\\": 1}}", '
        '"extra": {"x": {"y": [1, {"z": "}"}]}}}}'
    )
    (spans,) = parser.call_spans(text)
    assert part(text, spans.argument("extra").entry) == '"extra": {"x": {"y": [1, {"z": "}"}]}}'  # type: ignore[union-attr]
    parsed = parser.parse(text)
    assert parsed.blame is not None and parsed.blame.part is ErrorPart.ARGUMENT
    assert part(text, parsed.blame.span) == '"extra": {"x": {"y": [1, {"z": "}"}]}}'
    # of duplicate keys the last counts, as json.loads keeps it
    dup = '{"name": "add", "arguments": {"n": 1, "n": 50}}'
    assert part(dup, parser.parse(dup).blame.span) == "50"  # type: ignore[union-attr]


# -- what an error blames ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code", "blame", "where"),
    [
        ("mov(direction='up')", ErrorCode.UNKNOWN_TOOL, (ErrorPart.NAME, 0, ""), "mov"),
        (
            '{"name": "jump", "arguments": {}}',
            ErrorCode.UNKNOWN_TOOL,
            (ErrorPart.NAME, 0, ""),
            "jump",
        ),
        (
            "move(direction='upp')",
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.VALUE, 0, "direction"),
            "upp",
        ),
        (
            '{"name": "add", "arguments": {"n": 99}}',
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.VALUE, 0, "n"),
            "99",
        ),
        ("add(n=a+b)", ErrorCode.BAD_ARGUMENTS, (ErrorPart.VALUE, 0, "n"), "a+b"),
        (
            "put(item='x', count=1, colour='red')",
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.ARGUMENT, 0, "colour"),
            "colour='red'",
        ),
        ("add(n=1, n=2)", ErrorCode.BAD_ARGUMENTS, (ErrorPart.ARGUMENT, 0, "n"), "n=2"),
        ("add(1, 2)", ErrorCode.BAD_ARGUMENTS, (ErrorPart.ARGUMENT, 0, "_1"), "2"),
        ("put(item='x')", ErrorCode.BAD_ARGUMENTS, (ErrorPart.ARGUMENTS, 0, ""), "(item='x')"),
        (
            '{"name": "add", "arguments": [1]}',
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.ARGUMENTS, 0, ""),
            "[1]",
        ),
        (
            '{"name": "add", "arguments": "{bad"}',
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.ARGUMENTS, 0, ""),
            '"{bad"',
        ),
        ("add(**{'n': 1})", ErrorCode.BAD_ARGUMENTS, (ErrorPart.ARGUMENTS, 0, ""), "(**{'n': 1})"),
        (
            "<tool_call>add(n=1)</tool_call><tool_call>say(text=3)</tool_call>",
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.VALUE, 1, "text"),
            "3",
        ),
        ("add(n=1)\nmov(x=1)", ErrorCode.UNKNOWN_TOOL, (ErrorPart.NAME, 1, ""), "mov"),
        (
            '[{"name": "add", "arguments": {"n": 1}}, {"name": "add", "arguments": "x"}]',
            ErrorCode.BAD_ARGUMENTS,
            (ErrorPart.ARGUMENTS, 1, ""),
            '"x"',
        ),
        ("add(n=", ErrorCode.PARSE_ERROR, (ErrorPart.ACTION, 0, ""), "add(n="),
        (
            "add(n=1)\nadd(n=2)\nadd(n=3)",
            ErrorCode.TOO_MANY_CALLS,
            (ErrorPart.ACTION, 0, ""),
            "add(n=1)\nadd(n=2)\nadd(n=3)",
        ),
    ],
)
def test_each_error_blames_its_part(
    parser: ActionParser, text: str, code: str, blame: tuple[ErrorPart, int, str], where: str
) -> None:
    parsed = parser.parse(text)
    assert parsed.error_code == code and parsed.blame is not None
    assert (parsed.blame.part, parsed.blame.call, parsed.blame.argument) == blame
    assert part(text, parsed.blame.span) == where


def test_a_valid_call_or_a_message_blames_nothing(parser: ActionParser) -> None:
    for text in ("move(direction='up')", "Hello!", '{"name": "add", "arguments": {"n": 1}}'):
        parsed = parser.parse(text)
        assert parsed.error_code is None and parsed.blame is None


def test_the_env_reports_the_blame_in_info_error() -> None:
    env = CounterEnv()
    try:
        env.reset(seed=0)
        action = '{"name": "add", "arguments": {"n": 99}}'
        info = env.step(action)[4]
        error = info["error"]
        assert error["code"] == "bad_arguments" and "<= 20" in error["message"]
        assert (error["part"], error["call"], error["argument"]) == ("value", 0, "n")
        start, end = error["span"]
        assert action[start:end] == "99"
        assert Blame.from_info(error) == Blame(ErrorPart.VALUE, 0, "n", Span(start, end))
        info = env.step("peek()")[4]
        assert info["error"] == {} and Blame.from_info(info["error"]) is None
        parse = env.step("<think>x</think> nonsense(")[4]["error"]
        assert parse["part"] == "action" and parse["span"] == [0, 26] and "call" not in parse
    finally:
        env.close()


def test_blame_from_a_malformed_report_is_none_or_unplaced() -> None:
    assert Blame.from_info({"code": "no_such_thing", "message": "x"}) is None
    assert Blame.from_info({"part": "elbow"}) is None
    assert Blame.from_info({"part": "name", "call": -1}) is None
    assert Blame.from_info({"part": "name", "span": [5, 2]}) == Blame(ErrorPart.NAME)
    assert Blame.from_info({"part": "value", "argument": "n", "span": (1, 3)}) == Blame(
        ErrorPart.VALUE, 0, "n", Span(1, 3)
    )


# -- a property over every call syntax ------------------------------------------------------

# strings for whole-text forms may hold anything; inside tags, fences and prose they may
# not hold the markers the scanners look for (that would be another action, by design)
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
PLAIN_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="<`{}"), max_size=12)


def values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalar = st.one_of(
        st.integers(-30, 30),
        st.booleans(),
        st.none(),
        st.floats(-5, 5, allow_nan=False),
        text,
        st.sampled_from(["up", "down", "move(direction='up')", '{"name": "x"}', "é😀"]),
    )
    return st.recursive(
        scalar,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abc"), inner, max_size=2)
        ),
        max_leaves=4,
    )


Render = Callable[[str, dict[str, Any], bool], tuple[str, dict[str, str]]]


def _json_source(v: Any, ascii_only: bool) -> str:
    dumped = json.dumps(v, ensure_ascii=ascii_only)
    return dumped[1:-1] if isinstance(v, str) and v else dumped


def _py_source(v: Any) -> str:
    return repr(v)[1:-1] if isinstance(v, str) and v else repr(v)


def _json_form(key_name: str, key_args: str) -> Render:
    def render(name: str, args: dict[str, Any], ascii_only: bool) -> tuple[str, dict[str, str]]:
        text = json.dumps({key_name: name, key_args: args}, ensure_ascii=ascii_only)
        return text, {k: _json_source(v, ascii_only) for k, v in args.items()}

    return render


def _openai(name: str, args: dict[str, Any], ascii_only: bool) -> tuple[str, dict[str, str]]:
    inner = json.dumps(args, ensure_ascii=ascii_only)
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": inner}}
    text = json.dumps(
        {"role": "assistant", "content": None, "tool_calls": [call]}, ensure_ascii=ascii_only
    )

    def escaped(v: Any) -> str:
        return json.dumps(_json_source(v, ascii_only), ensure_ascii=ascii_only)[1:-1]

    return text, {k: escaped(v) for k, v in args.items()}


def _python(name: str, args: dict[str, Any], ascii_only: bool) -> tuple[str, dict[str, str]]:
    text = f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
    return text, {k: _py_source(v) for k, v in args.items()}


def _positional(name: str, args: dict[str, Any], ascii_only: bool) -> tuple[str, dict[str, str]]:
    text = f"{name}({', '.join(repr(v) for v in args.values())})"
    return text, {k: _py_source(v) for k, v in args.items()}


def _wrapped(render: Render, before: str, after: str) -> Render:
    def wrapped(name: str, args: dict[str, Any], ascii_only: bool) -> tuple[str, dict[str, str]]:
        text, sources = render(name, args, ascii_only)
        return before + text + after, sources

    return wrapped


WHOLE_FORMS: dict[str, Render] = {
    "json": _json_form("name", "arguments"),
    "json-alias": _json_form("tool", "args"),
    "json-parameters": _json_form("name", "parameters"),
    "openai-message": _openai,
    "python": _python,
    "python-positional": _positional,
    "after-reasoning": _wrapped(_python, "<think>plan {x}</think>\n ", "  "),
}
WRAPPED_FORMS: dict[str, Render] = {
    "hermes-json": _wrapped(
        _json_form("name", "arguments"), "Let me.\n<tool_call>\n", "\n</tool_call>"
    ),
    "hermes-python": _wrapped(_python, "<tool_call>", "</tool_call> "),
    "fence-json": _wrapped(_json_form("name", "arguments"), "Here:\n```json\n", "\n```\nDone."),
    "fence-python": _wrapped(_python, "```python\n", "\n```"),
    "prose-json": _wrapped(_json_form("name", "arguments"), "I will call ", " now."),
    "prose-line": _wrapped(_python, "I will act now.\n", " ;"),
}


@st.composite
def actions(draw: st.DrawFn) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    form = draw(st.sampled_from(sorted(WHOLE_FORMS) + sorted(WRAPPED_FORMS)))
    whole = form in WHOLE_FORMS
    known = form in ("python-positional", "prose-line")  # only known tools are read there
    name = draw(st.sampled_from(list(TOOLS) if known else [*TOOLS, "jump"]))
    params = list(TOOLS[name].param_names) if name in TOOLS else ["direction", "n"]
    keys = (
        params if form == "python-positional" else params + draw(st.sampled_from([[], ["extra"]]))
    )
    vals = values(ANY_TEXT if whole else PLAIN_TEXT)
    args = {k: draw(vals) for k in draw(st.lists(st.sampled_from(keys), unique=True))}
    if form == "python-positional":
        args = {k: args.get(k, 0) for k in params[: len(args)]}
    render = WHOLE_FORMS.get(form) or WRAPPED_FORMS[form]
    text, sources = render(name, args, draw(st.booleans()))
    return text, name, args, sources


def _blamed(spans: CallSpans, blame: Blame) -> Span | None:
    if blame.part is ErrorPart.NAME:
        return spans.name
    if blame.part is ErrorPart.ARGUMENTS:
        return spans.arguments
    arg = spans.argument(blame.argument)
    assert arg is not None
    return arg.entry if blame.part is ErrorPart.ARGUMENT else arg.value


# found by hypothesis: a JSON object inside a prose-line call's string argument was read
# as a call of its own (tool "x"), by the parser and the span finder alike
@example(("I will act now.\nmove(direction='{\"name\": \"x\"}') ;", "move",
          {"direction": '{"name": "x"}'}, {"direction": '{"name": "x"}'}))  # fmt: skip
@given(actions())
def test_spans_find_every_part_in_every_syntax(
    action: tuple[str, str, dict[str, Any], dict[str, str]],
) -> None:
    """Whatever the syntax and the argument values: the name's and each value's spans
    hold exactly their source text, and an error's span is the part it blames."""
    text, name, args, sources = action
    parser = ActionParser(TOOLS, accepts_messages=True, max_chars=10_000)
    parsed = parser.parse(text)
    (spans,) = parser.call_spans(text)
    assert spans.tool == name and part(text, spans.name) == name
    assert {a.name: part(text, a.value) for a in spans.args} == sources
    if parsed.error_code is None:
        assert [(c.name, dict(c.arguments)) for c in parsed.calls] == [(name, args)]
        return
    assert parsed.error_code in (ErrorCode.UNKNOWN_TOOL, ErrorCode.BAD_ARGUMENTS)
    assert parsed.blame is not None and parsed.blame.span is not None
    assert parsed.blame.span == _blamed(spans, parsed.blame)
    assert (parsed.blame.part is ErrorPart.NAME) == (name not in TOOLS)


FRAGMENTS = st.sampled_from(
    ["<tool_call>", "</tool_call>", "```", "```json\n", "<think>", "</think>", "\n", "{", "}",
     '"name": "add"', '"arguments": ', '{"n": 1}', '"{\\"n\\": 99}"', "add(", "mov(", "n=99",
     ")", ", ", "'x'", "😀", "[", "]", ";", "\u2028", "\\u00e9", '"', "**k", "=", "say"]
)  # fmt: skip


@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=4)), max_size=14))
def test_spans_of_arbitrary_text_never_raise_and_stay_in_the_text(pieces: list[str]) -> None:
    text = "".join(pieces)
    parser = ActionParser(TOOLS, accepts_messages=False, max_calls=2)
    found = parser.call_spans(text)
    for spans in found:
        inside = [spans.name, spans.arguments, *(a.entry for a in spans.args)]
        inside += [a.value for a in spans.args]
        assert all(spans.call.start <= s.start <= s.end <= spans.call.end for s in inside)
    blame = parser.parse(text).blame
    if blame is not None and blame.span is not None:
        assert 0 <= blame.span.start <= blame.span.end <= len(text)
        if blame.part is not ErrorPart.ACTION:
            assert any(
                s.call.start <= blame.span.start <= blame.span.end <= s.call.end for s in found
            )


def test_content_chars_map_a_messages_content_back_through_its_escapes() -> None:
    text = ' {"role": "assistant", "content": "a\\u00e9\\n\\ud83d\\ude00b"}'
    chars = content_chars(text)
    assert chars is not None
    assert [text[s.start : s.end] for s in chars] == ["a", "\\u00e9", "\\n", "\\ud83d\\ude00", "b"]
    parts = (
        '{"content": [{"type": "text", "text": "x"}, {"type": "image"}, '
        '{"text": "y", "type": "text"}]}'
    )
    assert [parts[s.start : s.end] for s in content_chars(parts) or []] == ["x", "y"]
    # no such object, or a text part whose text is no string: nothing to map onto
    for bad in (
        '{"content": [{"type": "text", "text": 5}]}',
        "[1]",
        '{"role": "user"}',
        "add(n=1)",
    ):
        assert content_chars(bad) is None
