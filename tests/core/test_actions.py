"""The action parser: every accepted form, and precise error codes."""

import json
from collections.abc import Callable

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import ActionParser, ErrorCode, ToolSet
from tests.core.counter_env import CounterEnv


@pytest.fixture
def parser() -> ActionParser:
    return ActionParser(CounterEnv.toolset, accepts_messages=False, max_calls=2)


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "add", "arguments": {"n": 2}}',
        '{"tool": "add", "args": {"n": 2}}',
        '{"name": "add", "parameters": {"n": 2}}',
        '{"type": "function", "function": {"name": "add", "arguments": "{\\"n\\": 2}"}}',
        # an OpenAI tool_calls entry as the SDK dumps it, alone, in a list, in its message
        '{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '
        '"{\\"n\\": 2}"}}',
        '[{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '
        '"{\\"n\\": 2}"}}]',
        '{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": '
        '"function", "function": {"name": "add", "arguments": "{\\"n\\": 2}"}}]}',
        '<tool_call>{"name": "add", "arguments": {"n": 2}}</tool_call>',
        'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"n": 2}}\n</tool_call>',
        "<tool_call>add(n=2)</tool_call>",
        "add(n=2)",
        "add(2)",
        "  add( n = 2 )  ",
        '```json\n{"name": "add", "arguments": {"n": 2}}\n```',
        "```python\nadd(n=2)\n```",
        "<think>I should add two. add(n=99)</think>add(n=2)",
        'I will call {"name": "add", "arguments": {"n": 2}} now',
        "I will add two.\nadd(n=2)",
        "add(n=2.0)",
    ],
)
def test_accepted_forms(parser: ActionParser, text: str) -> None:
    parsed = parser.parse(text)
    assert parsed.error_code is None, parsed.error_message
    assert len(parsed.calls) == 1
    assert parsed.calls[0].name == "add"
    assert parsed.calls[0].arguments["n"] == 2


def test_bareword_argument_is_a_string() -> None:
    from agentgym_envs.games.sokoban import SokobanEnv

    parsed = ActionParser(SokobanEnv.toolset, accepts_messages=False).parse("move(up)")
    assert parsed.calls[0].arguments == {"direction": "up"}


def test_zero_argument_tool(parser: ActionParser) -> None:
    parsed = parser.parse("peek()")
    assert parsed.calls[0].name == "peek" and parsed.calls[0].arguments == {}
    assert parser.parse('{"name": "peek"}').calls[0].name == "peek"


def test_several_calls_up_to_the_limit(parser: ActionParser) -> None:
    two = parser.parse("<tool_call>peek()</tool_call><tool_call>add(n=1)</tool_call>")
    assert [c.name for c in two.calls] == ["peek", "add"]
    assert parser.parse('[{"name": "peek"}, {"name": "peek"}]').error_code is None
    three = parser.parse("peek()\npeek()\npeek()")
    assert three.error_code == ErrorCode.TOO_MANY_CALLS


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ("", ErrorCode.PARSE_ERROR, "empty"),
        ("hello there", ErrorCode.PARSE_ERROR, "no tool call"),
        ('{"name": "add", "arguments": {"n": 2}', ErrorCode.PARSE_ERROR, "invalid JSON"),
        ("add(n=", ErrorCode.PARSE_ERROR, "invalid call syntax"),
        ('{"arguments": {"n": 1}}', ErrorCode.PARSE_ERROR, "no tool name"),
        ("[1, 2]", ErrorCode.PARSE_ERROR, "expected an object"),
        ("ad(n=1)", ErrorCode.UNKNOWN_TOOL, "Did you mean 'add'"),
        ('{"name": "launch_missiles"}', ErrorCode.UNKNOWN_TOOL, "Available tools"),
        ("add()", ErrorCode.BAD_ARGUMENTS, "missing required argument 'n'"),
        ('add(n="two")', ErrorCode.BAD_ARGUMENTS, "must be integer"),
        ("add(n=99)", ErrorCode.BAD_ARGUMENTS, "<= 20"),
        ("add(n=1, m=2)", ErrorCode.BAD_ARGUMENTS, "unexpected argument 'm'"),
        ("add(1, 'k', 3)", ErrorCode.BAD_ARGUMENTS, "at most 2 positional"),
        ("add(n=1, n=2)", ErrorCode.BAD_ARGUMENTS, "given twice"),
        ("add(n=__import__('os'))", ErrorCode.BAD_ARGUMENTS, "literals"),
        ("add(**{'n': 1})", ErrorCode.BAD_ARGUMENTS, "kwargs"),
        ("os.system('ls')", ErrorCode.PARSE_ERROR, "bare name"),
        ('{"name": "add", "arguments": [1]}', ErrorCode.BAD_ARGUMENTS, "must be an object"),
        ('{"name": "add", "arguments": "{bad"}', ErrorCode.BAD_ARGUMENTS, "not valid JSON"),
        ("add(n=True)", ErrorCode.BAD_ARGUMENTS, "must be integer"),
    ],
)
def test_errors_are_precise(parser: ActionParser, text: str, code: str, fragment: str) -> None:
    parsed = parser.parse(text)
    assert parsed.calls == ()
    assert parsed.error_code == code
    assert fragment in (parsed.error_message or "")


def test_never_executes_code(parser: ActionParser, tmp_path) -> None:
    marker = tmp_path / "pwned"
    parsed = parser.parse(f"add(n=open({str(marker)!r}, 'w').write('x'))")
    assert parsed.error_code == ErrorCode.BAD_ARGUMENTS
    assert not marker.exists()


def test_length_limit_and_deep_nesting() -> None:
    parser = ActionParser(CounterEnv.toolset, accepts_messages=False, max_chars=100)
    assert "limit is 100" in (parser.parse("x" * 101).error_message or "")
    deep = ActionParser(CounterEnv.toolset, accepts_messages=False, max_chars=10**7)
    for text in ("[" * 100_000, "add(n=" + "(" * 10_000 + "1" + ")" * 10_000 + ")"):
        assert deep.parse(text).error_code is not None


def test_plain_text_is_a_message_where_the_env_has_a_user() -> None:
    parser = ActionParser(CounterEnv.toolset, accepts_messages=True)
    assert parser.parse("  Hello, how can I help?  ").message == "Hello, how can I help?"
    # an attempted but broken call is still an error, not a message
    assert parser.parse('{"name": "add"').error_code == ErrorCode.PARSE_ERROR


def test_results_are_cached_and_canonical(parser: ActionParser) -> None:
    first = parser.parse("add(n=2)")
    assert parser.parse("add(n=2)") is first
    assert first.canonical == parser.parse('{"name": "add", "arguments": {"n": 2}}').canonical


def test_empty_toolset_parses_nothing() -> None:
    parser = ActionParser(ToolSet([]), accepts_messages=False)
    assert parser.parse("add(n=1)").error_code == ErrorCode.UNKNOWN_TOOL


def test_think_tags_inside_an_argument_are_kept() -> None:
    parser = ActionParser(CounterEnv.toolset, accepts_messages=True)
    assert parser.parse('<think>plan</think>\n"<think> is a tag"').message == '"<think> is a tag"'
    parsed = parser.parse("<think>a</think> <think>b</think> add(n=2)")
    assert parsed.calls and parsed.calls[0].arguments == {"n": 2}
    # A message whose text is literally "<think>" is a message, not stripped reasoning.
    assert parser.parse('"<think>"').message == '"<think>"'


# Hostile shapes that made the old regular expressions backtrack (the fence's info string
# took 2.4 s at 20,000 characters and grew with the square of the length), plus the other
# block scanners' worst cases. At 400,000 characters a quadratic parser runs for many
# minutes; a linear one takes milliseconds, so the generous timeout only catches a hang.
_HOSTILE = {
    "fence_info": "```" + "a" * 400_000,
    "fence_info_spaces": "```" + "a" * 200_000 + " " * 200_000,
    "many_fences": "```a\n" * 80_000,
    "unclosed_tool_call": "<tool_call>" + " " * 400_000 + "x",
    "many_tool_calls": "<tool_call>" * 36_000,
    "unclosed_think": "<think>" + " " * 400_000 + "x",
    "many_thinks": "<think></think>" * 26_000 + "add(n=1)",
    "call_line": "hi\nadd(" + ") " * 200_000 + "x",
    "call_start": "a" * 400_000 + "(",
    "braces": "say " + '{"name":' * 50_000,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", sorted(_HOSTILE))
def test_parsing_is_linear_on_hostile_text(shape: str) -> None:
    parser = ActionParser(CounterEnv.toolset, accepts_messages=True, max_chars=10**6)
    parsed = parser.parse(_HOSTILE[shape])
    assert (parsed.error_code is None) != (parsed.calls == () and parsed.message is None)


def test_block_scanners_keep_their_meaning() -> None:
    parser = ActionParser(CounterEnv.toolset, accepts_messages=True, max_calls=2)
    # the fence's info string (language tag) and its newline are not part of the body
    assert parser.parse("```python   \nadd(n=3)\n```").calls[0].arguments == {"n": 3}
    # two tool-call blocks, the last one unclosed
    two = parser.parse("<tool_call>add(n=1)</tool_call> then <tool_call>add(n=2)")
    assert [c.arguments["n"] for c in two.calls] == [1, 2]
    # unclosed reasoning swallows the rest; a closed one is dropped with its whitespace
    assert parser.parse("<think>add(n=1)").error_code == ErrorCode.PARSE_ERROR
    assert parser.parse("  <THINK>x</Think>\n add(n=5)").calls[0].arguments == {"n": 5}
    # a prose last line calls a tool only when it is a whole call
    assert parser.parse("ok\nadd(n=6) ;").calls[0].arguments == {"n": 6}
    assert parser.parse("ok\nadd(n=6) and more").message == "ok\nadd(n=6) and more"
    # the Turkish dotted I lowers to two characters: indices must not drift
    assert parser.parse("İİ<think>x</think>").message == "İİ<think>x</think>"


def test_over_long_action_is_a_clear_parse_error() -> None:
    parser = ActionParser(CounterEnv.toolset, accepts_messages=True, max_chars=40_000)
    parsed = parser.parse("```" + "a" * 40_001)
    assert parsed.error_code == ErrorCode.PARSE_ERROR
    assert parsed.error_message is not None
    assert "40004 characters; the limit is 40000" in parsed.error_message


HANDOVER = "Agents write <tool_call>transfer_to_human_agents(summary='x')</tool_call> to hand over."
FENCED = "Please run:\n```\nx = 1\n```\nDid that work?"


@pytest.mark.parametrize("say", [HANDOVER, FENCED])
@pytest.mark.parametrize(
    "form",
    [
        lambda m: json.dumps({"name": "respond", "arguments": {"message": m}}),
        lambda m: json.dumps([{"name": "respond", "arguments": {"message": m}}]),
        lambda m: json.dumps(
            {"function": {"name": "respond", "arguments": json.dumps({"message": m})}}
        ),
        lambda m: f"respond(message={m!r})",
        lambda m: f"<think>plan</think>\n respond(message={m!r})  ",
    ],
    ids=["json", "json-list", "openai-entry", "python", "python-after-reasoning"],
)
def test_a_whole_call_runs_as_written_whatever_its_strings_hold(
    form: Callable[[str], str], say: str
) -> None:
    """A tag or a fence inside an argument is text: the call is the one the model made
    (the parser used to search the tags and fences first and ran the handover)."""
    env = gym.make("agentgym/Retail-v1")
    parsed = env.unwrapped.parser.parse(form(say))  # type: ignore[attr-defined]
    assert parsed.error_code is None, parsed.error_message
    assert [(c.name, c.arguments) for c in parsed.calls] == [("respond", {"message": say})]


def test_text_around_tags_and_fences_still_finds_the_call(parser: ActionParser) -> None:
    """Only a whole structured action is read as one value; prose still gets searched."""
    broken = '{"name": "add", "arguments": {"n": 2}\n<tool_call>add(n=3)</tool_call>'
    assert parser.parse(broken).calls[0].arguments == {"n": 3}
    assert parser.parse("Adding.\n```\nadd(n=4)\n```").calls[0].arguments == {"n": 4}
    huge = '{"name": "add", "arguments": {"n": 1' + "0" * 4400 + "}}"
    assert parser.parse(huge).error_code == ErrorCode.PARSE_ERROR  # never raises


# -- policy text is valid Unicode (issue 26) ----------------------------------------------

_MOMENT = "One moment \ufffd"  # the lone surrogate, replaced


@pytest.mark.parametrize(
    "action",
    [
        '{"name": "respond", "arguments": {"message": "One moment \\ud800"}}',
        "respond(message='One moment \\ud800')",
        "respond(message='One moment \ud800')",
        '{"function": {"name": "respond", "arguments": "{\\"message\\": \\"One moment '
        '\\\\udfff\\"}"}}',
        '{"name": "respond", "arguments": {"message": "One moment \ud800"}}',
        "respond(message='One moment \\U0000dc80')",
    ],
    ids=["json-escape", "python-escape", "raw-str", "openai-string", "raw-in-json", "U-escape"],
)
def test_lone_surrogates_in_an_action_become_replacement_characters(action: str) -> None:
    """A lone surrogate (JSON's ``\\ud800`` decodes to one) is no text UTF-8 can hold:
    each becomes U+FFFD where the env reads the action, so nothing the step returns is
    invalid Unicode (the recorder's store write used to raise on it, an env_error)."""
    env = gym.make("agentgym/Retail-v1")
    env.reset(seed=0)
    *_, info = env.step(action)
    json.dumps(info, default=str, ensure_ascii=False).encode()  # no UnicodeEncodeError
    assert info["tool_calls"][0]["arguments"] == {"message": _MOMENT}
    assert env.unwrapped.action_history[-1].encode()  # type: ignore[attr-defined]


def test_a_lone_surrogate_in_a_message_or_a_key_is_replaced() -> None:
    env = gym.make("agentgym/Retail-v1")
    env.reset(seed=0)
    *_, info = env.step("One moment \ud800")
    history = env.unwrapped.action_history  # type: ignore[attr-defined]
    assert history[-1] == f"say {_MOMENT}" and not info["error"]
    parser = env.unwrapped.parser  # type: ignore[attr-defined]
    parsed = parser.parse('{"name": "respond", "arguments": {"message": "hi", "\\udc00": 1}}')
    assert parsed.error_code == ErrorCode.BAD_ARGUMENTS
    assert "\ufffd" in (parsed.error_message or "") and "\udc00" not in parsed.canonical
    pair = parser.parse('{"name": "respond", "arguments": {"message": "\\ud83d\\ude00"}}')
    assert pair.calls[0].arguments == {"message": "\U0001f600"}  # a valid pair is one char


@pytest.mark.parametrize(
    "value",
    ["b'x'", "{1, 2}", "1j", "...", "{(1, 2): 3}", "{1: 'a'}", "1e999"],
)
def test_arguments_must_be_json_data(value: str) -> None:
    """Arguments are JSON data whatever the tool's schema allows: a Python literal of
    another kind (bytes, a set, a complex number, Ellipsis, a key that is no string, a
    number that is not finite) is a bad argument, never a value the store or a JSON
    encoder cannot hold. A NUL in a string, which no command or path can hold (the
    sandbox's ``run`` raised on it: an env error), becomes U+FFFD."""
    from agentgym_envs.core import Tool

    free = Tool("note", "Note anything.", {"type": "object", "properties": {"x": {}}})
    parser = ActionParser(ToolSet([free]), accepts_messages=False)
    parsed = parser.parse(f"note(x={value})")
    assert parsed.error_code == ErrorCode.BAD_ARGUMENTS, parsed
    assert "JSON" in (parsed.error_message or "") and parsed.blame is not None
    assert parsed.blame.argument == "x"
    nan = parser.parse('{"name": "note", "arguments": {"x": [NaN]}}')
    assert nan.error_code == ErrorCode.BAD_ARGUMENTS and "finite" in (nan.error_message or "")
    assert parser.parse("note(x=(1, [2, 'a'], {'k': None}))").calls[0].arguments == {
        "x": [1, [2, "a"], {"k": None}]
    }
    nul = parser.parse(
        '{"name": "note", "arguments": {"x": ["a\\u0000", {"k\\u0000": "\\u0000"}]}}'
    )
    assert nul.calls[0].arguments == {"x": ["a\ufffd", {"k\ufffd": "\ufffd"}]}
