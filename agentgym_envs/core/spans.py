"""Where the parts of a tool call are in the action text, and which part an error blames.

A trainer that credits the parts of a turn on their own (the tool name, each argument,
the text around the calls) needs to know where each part is in the text the model
sampled. :meth:`ActionParser.call_spans <agentgym_envs.core.actions.ActionParser.call_spans>`
finds, for every call the parser reads in a text, the character spans of the whole call,
its tool name, its arguments and each argument's name and value; :func:`free_text` gives
the rest. This module holds the position-keeping readers it uses, each reading exactly
what the parser reads:

* JSON objects and lists through :mod:`json`'s own scanner (``raw_decode``,
  ``scanstring``): a value's span ends where ``json.loads`` stopped reading it, and of
  duplicate keys the last counts, as in ``json.loads``;
* JSON strings with their escapes, for OpenAI's arguments written as a JSON string:
  the spans inside the decoded string are mapped back onto the escaped text (and the
  same for an assistant message's ``content``, which native tool mode parses:
  :func:`content_chars`);
* Python call lines through :mod:`ast` positions (which count UTF-8 bytes per line,
  turned into characters here).

A string value's span is its text without the quotes (an empty string keeps them):
the quotes are shared with the tokens around it. Spans are half-open ``[start, end)``
character offsets into the text given.

:class:`Blame` is the part a parser error blames (``info["error"]``'s ``part``,
``call``, ``argument`` and ``span``; see :class:`~agentgym_envs.core.info.ErrorInfo`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from agentgym_envs.core import pyast
from agentgym_envs.core.info import ErrorInfo, ErrorPart

_DECODER = json.JSONDecoder()
_JSON_SPACE = " \t\n\r"  # what json.loads skips between tokens
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line ends ast counts
_WORD = re.compile(r"\w+")
_PY_QUOTE = re.compile(r"[rRbBuUfF]{0,2}('''|\"\"\"|'|\")")
NAME_KEYS = ("name", "tool", "tool_name")
"""Keys of a JSON call's tool name, the first present counts (as the parser reads it)."""
ARGUMENT_KEYS = ("arguments", "args", "parameters", "input")
"""Keys of a JSON call's arguments, the first present counts (as the parser reads it)."""


class Span(NamedTuple):
    """Characters ``[start, end)`` of a text."""

    start: int
    end: int

    def shift(self, offset: int) -> Span:
        return Span(self.start + offset, self.end + offset)


@dataclass(frozen=True, slots=True)
class ArgumentSpan:
    """One argument of a call as written.

    Attributes:
        name: the argument's name as the parser keys it (a positional argument: the
            parameter it maps onto, ``_<i>`` past the tool's parameters).
        value: the value's text (a string's without its quotes).
        entry: the whole argument, from its name (a positional one: its value) to the
            end of its value, quotes included.
        key: the name's text (None for a positional argument).
    """

    name: str
    value: Span
    entry: Span
    key: Span | None = None

    def shift(self, offset: int) -> ArgumentSpan:
        key = None if self.key is None else self.key.shift(offset)
        return ArgumentSpan(self.name, self.value.shift(offset), self.entry.shift(offset), key)


@dataclass(frozen=True, slots=True)
class CallSpans:
    """Where one call's parts are in the action text.

    Attributes:
        call: the whole call (a JSON object, or ``name(...)``).
        name: the tool name as written (without a JSON string's quotes).
        tool: the tool name the parser read there.
        arguments: the arguments as written: the JSON value (an object, or a JSON
            string for OpenAI's form) or the parenthesised Python arguments; a JSON
            call without arguments: from the name's end to the call's end.
        args: each argument, in the order written (duplicates included).
    """

    call: Span
    name: Span
    tool: str
    arguments: Span
    args: tuple[ArgumentSpan, ...] = ()

    def argument(self, name: str) -> ArgumentSpan | None:
        """The argument ``name`` (the last one written, as the parser keeps it)."""
        for arg in reversed(self.args):
            if arg.name == name:
                return arg
        return None

    def shift(self, offset: int) -> CallSpans:
        return CallSpans(
            self.call.shift(offset),
            self.name.shift(offset),
            self.tool,
            self.arguments.shift(offset),
            tuple(a.shift(offset) for a in self.args),
        )


@dataclass(frozen=True, slots=True)
class Blame:
    """The part of an action a parser error blames (:class:`ErrorPart`).

    Attributes:
        part: which part.
        call: the index of the blamed call among the action's calls (not for ACTION).
        argument: the blamed argument's name (ARGUMENT and VALUE).
        span: that part's characters in the action text, or None where not located.
    """

    part: ErrorPart
    call: int = 0
    argument: str = ""
    span: Span | None = None

    def placed(self, text: str, calls: Sequence[CallSpans]) -> Blame:
        """This blame with ``span`` located in ``text``, whose calls are ``calls``."""
        span: Span | None = None
        if self.part is ErrorPart.ACTION:
            span = Span(0, len(text))
        elif self.call < len(calls):
            spans = calls[self.call]
            if self.part is ErrorPart.NAME:
                span = spans.name
            elif self.part is ErrorPart.ARGUMENTS:
                span = spans.arguments
            elif (arg := spans.argument(self.argument)) is not None:
                span = arg.entry if self.part is ErrorPart.ARGUMENT else arg.value
        return Blame(self.part, self.call, self.argument, span)

    def info(self) -> ErrorInfo:
        """The ``info["error"]`` keys of this blame (see ``ErrorInfo``)."""
        out: ErrorInfo = {"part": self.part.value}
        if self.part is not ErrorPart.ACTION:
            out["call"] = self.call
        if self.part in (ErrorPart.ARGUMENT, ErrorPart.VALUE):
            out["argument"] = self.argument
        if self.span is not None:
            out["span"] = [self.span.start, self.span.end]
        return out

    @classmethod
    def from_info(cls, error: Mapping[str, Any]) -> Blame | None:
        """The blame an ``info["error"]`` reports, or None (no part blamed, or a
        malformed report: a span must be ``[start, end]`` with ``0 <= start <= end``)."""
        raw_part = error.get("part")
        if not isinstance(raw_part, str) or raw_part not in {p.value for p in ErrorPart}:
            return None
        part = ErrorPart(raw_part)
        call, argument, raw = error.get("call", 0), error.get("argument", ""), error.get("span")
        if not isinstance(call, int) or call < 0 or not isinstance(argument, str):
            return None
        span = None
        if isinstance(raw, list | tuple) and len(raw) == 2:
            start, end = raw
            if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end:
                span = Span(start, end)
        return cls(part, call, argument, span)


def stripped(text: str, start: int, end: int) -> Span:
    """``text[start:end]`` without its surrounding whitespace (as ``str.strip``)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(start, end)


def free_text(text: str, calls: Sequence[CallSpans]) -> list[Span]:
    """The text outside ``calls`` (tags, fences and prose included), each piece
    without its surrounding whitespace; whitespace-only pieces are left out."""
    out, pos = [], 0
    for spans in sorted(calls, key=lambda c: c.call.start):
        if spans.call.start > pos:
            out.append(stripped(text, pos, spans.call.start))
        pos = max(pos, spans.call.end)
    out.append(stripped(text, pos, len(text)))
    return [s for s in out if s.end > s.start]


# -- JSON ---------------------------------------------------------------------------------


def json_calls(text: str) -> list[CallSpans]:
    """The calls of a JSON text as the parser reads its decoded value: one call, a list
    of calls, or an assistant message's ``tool_calls``.

    Raises:
        ValueError: the text is not JSON or holds something that is no call.
    """
    root = _json_value(text, _skip(text, 0))
    items = _items(text, root)
    if items is None:
        members = _members(text, root)
        listed = members.get("tool_calls") if members else None
        items = (_items(text, listed[1]) if listed else None) or [root]
    return [json_call(text, item) for item in items]


def json_call(text: str, item: Span) -> CallSpans:
    """The call of the JSON object at ``item`` (an OpenAI ``function`` entry unwrapped).

    Raises:
        ValueError: ``item`` is no object with a string tool name.
    """
    members = _members(text, item)
    if members is None:
        raise ValueError("a call is a JSON object")
    function = members.get("function")
    if function is not None and (inner := _members(text, function[1])) is not None:
        members = inner
    key = next((k for k in NAME_KEYS if k in members), None)
    if key is None or text[members[key][1].start] != '"':
        raise ValueError("a call names its tool with a string")
    literal = members[key][1]
    tool = json.loads(text[literal.start : literal.end])
    where = next((members[k][1] for k in ARGUMENT_KEYS if k in members), None)
    if where is None:
        return CallSpans(item, _inner(text, literal), tool, Span(literal.end, item.end))
    if text[where.start] == '"':
        args = _string_arguments(text, where)
    else:
        entries = _members(text, where)
        args = () if entries is None else _arguments(text, entries)
    return CallSpans(item, _inner(text, literal), tool, where, args)


def content_chars(text: str) -> list[Span] | None:
    """Where each character of a JSON assistant message's ``content`` is in ``text``
    (escapes map back to their whole escape sequence); the content is a string, or the
    concatenated ``text`` of its parts of type ``"text"``, as native tool mode reads it.
    None when ``text`` is no such JSON object or a part's text is no JSON string."""
    try:
        root = _json_value(text, len(text) - len(text.lstrip()))
        members = _members(text, root)
        if members is None or "content" not in members:
            return None
        value = members["content"][1]
        literals = [value] if text[value.start] == '"' else _text_parts(text, value)
    except (ValueError, RecursionError):
        return None
    if literals is None:
        return None
    out: list[Span] = []
    for literal in literals:
        decoded = _unescape(text, literal)
        if decoded is None:
            return None
        at = decoded[1]
        out += [Span(at[k], at[k + 1]) for k in range(len(at) - 1)]
    return out


def _text_parts(text: str, span: Span) -> list[Span] | None:
    """The ``text`` string literals of the ``"text"`` parts of the JSON list at ``span``
    (None: no list, or a text part whose text is no string)."""
    items = _items(text, span)
    if items is None:
        return None
    out: list[Span] = []
    for item in items:
        members = _members(text, item)
        if members is None or "type" not in members:
            continue
        kind = members["type"][1]
        if json.loads(text[kind.start : kind.end]) != "text":
            continue
        if "text" not in members:
            continue  # a text part without text adds nothing
        literal = members["text"][1]
        if text[literal.start] != '"':
            return None
        out.append(literal)
    return out


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _JSON_SPACE:
        pos += 1
    return pos


def _json_value(text: str, pos: int) -> Span:
    return Span(pos, _DECODER.raw_decode(text, pos)[1])


def _members(text: str, span: Span) -> dict[str, tuple[Span, Span]] | None:
    """key -> (key span, value span) of the JSON object at ``span`` (None: no object)."""
    if text[span.start] != "{":
        return None
    out: dict[str, tuple[Span, Span]] = {}
    pos = _skip(text, span.start + 1)
    if text[pos] == "}":
        return out
    while True:
        key, end = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
        key_span = Span(pos, end)
        pos = _skip(text, _skip(text, end) + 1)  # past the colon
        value = _json_value(text, pos)
        out[key] = (key_span, value)
        pos = _skip(text, value.end)
        if text[pos] == "}":
            return out
        pos = _skip(text, pos + 1)  # past the comma


def _items(text: str, span: Span) -> list[Span] | None:
    """The spans of the items of the JSON list at ``span`` (None: no list)."""
    if text[span.start] != "[":
        return None
    out: list[Span] = []
    pos = _skip(text, span.start + 1)
    if text[pos] == "]":
        return out
    while True:
        value = _json_value(text, pos)
        out.append(value)
        pos = _skip(text, value.end)
        if text[pos] == "]":
            return out
        pos = _skip(text, pos + 1)


def _inner(text: str, span: Span) -> Span:
    """A JSON string's span without its quotes (an empty string keeps them)."""
    if text[span.start] == '"' and span.end - span.start > 2:
        return Span(span.start + 1, span.end - 1)
    return span


def _arguments(text: str, entries: Mapping[str, tuple[Span, Span]]) -> tuple[ArgumentSpan, ...]:
    return tuple(
        ArgumentSpan(k, _inner(text, v), Span(key.start, v.end), key)
        for k, (key, v) in entries.items()
    )


def _string_arguments(text: str, literal: Span) -> tuple[ArgumentSpan, ...]:
    """The arguments inside a JSON string that holds a JSON object, mapped back onto
    the escaped text; none when it holds no object."""
    decoded = _unescape(text, literal)
    if decoded is None:
        return ()
    inside, at = decoded
    start = _skip(inside, 0)
    if start == len(inside) or inside[start] != "{":
        return ()
    try:
        root = _json_value(inside, start)
        entries = _members(inside, root)
    except ValueError:
        return ()
    if entries is None or _skip(inside, root.end) != len(inside):
        return ()

    def back(span: Span) -> Span:
        return Span(at[span.start], at[span.end])

    return tuple(
        ArgumentSpan(arg.name, back(arg.value), back(arg.entry), back(arg.key))
        for arg in _arguments(inside, entries)
        if arg.key is not None
    )


def _unescape(text: str, literal: Span) -> tuple[str, list[int]] | None:
    """The JSON string at ``literal`` decoded, and where each decoded character starts
    in ``text`` (one more entry: the closing quote); None if it is no JSON string."""
    if text[literal.start] != '"':
        return None
    chars: list[str] = []
    at: list[int] = []
    i, end = literal.start + 1, literal.end - 1
    while i < end:
        at.append(i)
        if text[i] != "\\":
            chars.append(text[i])
            i += 1
        elif text[i + 1] != "u":
            chars.append(_ESCAPES.get(text[i + 1], ""))
            i += 2
        else:
            code, i = int(text[i + 2 : i + 6], 16), i + 6
            if 0xD800 <= code <= 0xDBFF and text.startswith("\\u", i):
                low = int(text[i + 2 : i + 6], 16)
                if 0xDC00 <= low <= 0xDFFF:
                    code, i = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), i + 6
            chars.append(chr(code))
    at.append(end)
    decoded = "".join(chars)
    return (decoded, at) if decoded == json.loads(text[literal.start : literal.end]) else None


# -- Python -------------------------------------------------------------------------------


def python_calls(text: str, params: Callable[[str], Sequence[str]]) -> list[CallSpans]:
    """The calls of Python call lines as the parser reads them (a trailing ``;``
    dropped, every statement a call of a bare name); ``params(tool)`` names a tool's
    positional arguments.

    Raises:
        SyntaxError, ValueError: the text is not only calls of bare names.
    """
    source = text.rstrip(";")
    module = pyast.parse(source)
    lines = _Lines(source)
    out = []
    for stmt in module.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            raise ValueError("expected only calls of bare names")
        out.append(_python_call(call, call.func.id, lines, params(call.func.id)))
    return out


def _python_call(node: ast.Call, tool: str, lines: _Lines, names: Sequence[str]) -> CallSpans:
    whole, name = lines.span(node), lines.span(node.func)
    args = [
        ArgumentSpan(names[i] if i < len(names) else f"_{i}", lines.value(arg), lines.span(arg))
        for i, arg in enumerate(node.args)
    ]
    for kw in node.keywords:
        if kw.arg is None:  # **mapping: the parser blames the arguments as a whole
            continue
        start = lines.offset(kw.lineno, kw.col_offset)
        word = _WORD.match(lines.text, start)
        key = Span(start, word.end() if word else start + len(kw.arg))
        entry = Span(start, lines.span(kw.value).end)
        args.append(ArgumentSpan(kw.arg, lines.value(kw.value), entry, key))
    return CallSpans(whole, name, tool, Span(name.end, whole.end), tuple(args))


class _Lines:
    """Turns ``ast`` positions (line, UTF-8 byte column) into character offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]

    def offset(self, lineno: int, col: int) -> int:
        start = self.starts[lineno - 1]
        head = self.text[start : start + col]  # at least col bytes
        if head.isascii():
            return start + col
        return start + len(head.encode()[:col].decode())

    def span(self, node: ast.expr) -> Span:
        end_line = node.end_lineno if node.end_lineno is not None else node.lineno
        end_col = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        return Span(self.offset(node.lineno, node.col_offset), self.offset(end_line, end_col))

    def value(self, node: ast.expr) -> Span:
        """A value's span; a string literal's without its quotes (unless empty)."""
        span = self.span(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            quote = _PY_QUOTE.match(self.text, span.start, span.end)
            if quote is not None:
                q = len(quote.group(1))
                inner = Span(quote.end(), span.end - q)
                if inner.end > inner.start and self.text.endswith(quote.group(1), 0, span.end):
                    return inner
        return span


__all__ = [
    "ARGUMENT_KEYS",
    "NAME_KEYS",
    "ArgumentSpan",
    "Blame",
    "CallSpans",
    "Span",
    "content_chars",
    "free_text",
    "json_call",
    "json_calls",
    "python_calls",
    "stripped",
]
