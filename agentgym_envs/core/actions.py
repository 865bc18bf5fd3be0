"""Parse the raw text a model produced into tool calls, a message, or a precise error.

Accepted forms (tried in this order, after removing leading ``<think>...</think>`` reasoning):

0. A whole action that is one structured value is read as exactly that value: a JSON
   object or list that decodes (form 3), or Python call lines that parse (form 4).
   A ``<tool_call>`` tag or a code fence inside one of its strings is that argument's
   text, never another call: the env runs exactly the call the model made.
1. Hermes ``<tool_call>{...}</tool_call>`` blocks (one call per block).
2. One fenced code block (```json / ```python / ```) holding a call.
3. The whole text as JSON: ``{"name": ..., "arguments": {...}}``; the aliases
   ``{"tool": ..., "args": ...}``, ``{"name": ..., "parameters": ...}`` and the OpenAI
   ``{"function": {"name": ..., "arguments": "<json>"}}`` (an OpenAI ``tool_calls``
   entry, ``id`` and ``type`` included); a list of those; or an OpenAI assistant message
   ``{"role": "assistant", "tool_calls": [...]}``.
4. The whole text as Python call syntax ``move(direction="up")``, one call per line,
   parsed with :mod:`ast` (arguments through ``ast.literal_eval``; never ``eval``/``exec``).
   Positional arguments map onto the tool's parameters in declaration order, and a bare
   identifier argument (``move(up)``) is read as the string ``"up"``.
5. A call embedded in prose: a JSON object with a ``name``/``tool`` key, or a last line
   that calls a known tool.
6. Otherwise plain text: a message to the user in envs that have one, else ``parse_error``.

Parsing is linear in the length of the text: the block and fence scanners walk the text
with ``str.find`` (no backtracking regular expression over the whole action), so a
hostile action cannot make parsing quadratic. An action longer than the parser's
``max_chars`` (the env's ``max_action_chars``: 2,048 characters for the games, 4,000 for
the business envs, 40,000 for RepoFix, 8,192 otherwise) is refused with a
``parse_error`` that states the limit, before any other work.

Results are cached per parser (parsing is a pure function of the text), so repeated
actions cost a dictionary lookup.

Policy text is made valid Unicode where it comes in (``core.unicode``: each lone
surrogate becomes U+FFFD): :func:`read_action` does it to the action text, and the
parser to every string it decodes from it (JSON's ``\\ud800`` escape, Python's
``"\\ud800"`` literal), and a NUL in an argument's string becomes U+FFFD as well (no
path, command or C string can hold one: the tool would raise, an env error). A call's
arguments must be JSON data (strings, finite numbers, booleans, null, lists, objects
with string keys; a tuple is read as a list): a Python literal of another kind (bytes,
a set, a complex number, ``...``) is ``bad_arguments``, whatever the tool's schema
allows, so ``info`` always holds data JSON can encode.

An error says which part of the action it blames (``ParsedAction.blame``: the whole
action, a call's tool name, its arguments, one argument, or one argument's value) and
where that part is in the text; :meth:`ActionParser.call_spans` finds every call's parts
(``core.spans``), so a trainer can credit the parts of a turn on their own.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgym_envs.core import pyast
from agentgym_envs.core.errors import did_you_mean
from agentgym_envs.core.info import ErrorCode, ErrorInfo, ErrorPart
from agentgym_envs.core.spans import Blame, CallSpans, Span, json_call, json_calls, python_calls
from agentgym_envs.core.spans import stripped as _stripped
from agentgym_envs.core.tools import Tool, ToolCall, ToolSet, compile_schema
from agentgym_envs.core.unicode import valid_argument, valid_text

if TYPE_CHECKING:
    from agentgym_envs.core.native import NativeTurn

# Only anchored, bounded patterns: each matches at one position without backtracking
# over the rest of the text.
_CALL_START = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\s*\(")
_CALL_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_FENCE_INFO = re.compile(r"[A-Za-z_]*[ \t]*\n?")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_CACHE_LIMIT = 8192
_CACHE_MAX_TEXT = 1024


class _ParseFailure(Exception):
    def __init__(
        self, code: ErrorCode, message: str, part: ErrorPart = ErrorPart.ACTION, argument: str = ""
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.part = part
        self.argument = argument
        self.call = 0  # the blamed call's index, counted up as the failure leaves each list


@dataclass(frozen=True, slots=True)
class ParsedAction:
    """The parser's verdict on one action text.

    Exactly one of these holds: ``error`` is set; ``calls`` is non-empty; ``message``
    is set (plain text for the user).
    """

    calls: tuple[ToolCall, ...] = ()
    message: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    canonical: str = ""
    """A normal form of the action (for history, loop detection and dedup)."""
    blame: Blame | None = None
    """With an error: the part of the action it blames, and where that part is."""

    def error_info(self, message: str) -> ErrorInfo:
        """``info["error"]`` for this verdict's error (``message`` shown to the agent)."""
        # a plain str, as every other ``info["error"]["code"]`` (ErrorCode is a str Enum)
        info: ErrorInfo = {"code": str(self.error_code or ""), "message": message}
        if self.blame is not None:
            info.update(self.blame.info())
        return info


class ActionParser:
    """Parses and validates actions against one env's tools.

    Args:
        tools: the tools the agent may call.
        accepts_messages: whether plain text is a message to a user (else an error).
        max_calls: the most tool calls one action may hold.
        max_chars: longer actions are rejected with ``parse_error``.
    """

    def __init__(
        self, tools: ToolSet, *, accepts_messages: bool, max_calls: int = 1, max_chars: int = 8192
    ) -> None:
        self.tools = tools
        self.accepts_messages = accepts_messages
        self.max_calls = max_calls
        self.max_chars = max_chars
        self._cache: dict[str, ParsedAction] = {}

    def parse(self, text: str) -> ParsedAction:
        """Parse ``text`` (each lone surrogate read as U+FFFD, ``core.unicode``); never
        raises."""
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        result = self._parse_uncached(valid_text(text))  # one for one: spans still hold
        if len(text) <= _CACHE_MAX_TEXT:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[text] = result
        return result

    def _parse_uncached(self, text: str) -> ParsedAction:
        if len(text) > self.max_chars:
            return _failed(
                ErrorCode.PARSE_ERROR,
                f"the action has {len(text)} characters; the limit is {self.max_chars}. "
                "Send one short tool call.",
                Blame(ErrorPart.ACTION, span=Span(0, len(text))),
            )
        body = _strip_reasoning(text)
        try:
            raws = self._extract(body)
            if raws is None:
                return self._plain(body, text)
            if not raws:
                raise _ParseFailure(ErrorCode.PARSE_ERROR, "no tool call found")
            if len(raws) > self.max_calls:
                raise _ParseFailure(
                    ErrorCode.TOO_MANY_CALLS,
                    f"the action holds {len(raws)} tool calls; at most {self.max_calls} "
                    "per step are allowed",
                )
            calls = tuple(_each(raws, lambda raw: self._resolve(*raw)))
            canonical = ";".join(
                f"{c.name} {json.dumps(c.arguments, sort_keys=True, default=repr)}" for c in calls
            )
            return ParsedAction(calls=calls, canonical=canonical)
        except _ParseFailure as failure:
            blame = Blame(failure.part, failure.call, failure.argument)
            return _failed(failure.code, failure.message, self._placed(blame, text))
        except (RecursionError, MemoryError, ValueError, TypeError) as exc:
            return _failed(
                ErrorCode.PARSE_ERROR,
                f"could not parse the action ({type(exc).__name__})",
                Blame(ErrorPart.ACTION, span=Span(0, len(text))),
            )

    def _placed(self, blame: Blame, text: str) -> Blame:
        if blame.part is ErrorPart.ACTION:
            return blame.placed(text, ())
        return blame.placed(text, self.call_spans(text))

    # -- spans: where each call's parts are ----------------------------------------------

    def call_spans(self, text: str) -> list[CallSpans]:
        """Where the parts of each call the parser reads in ``text`` are, in the
        parser's order of calls (its whole call, tool name, arguments and each
        argument; ``core.spans``). Also for calls it then rejects (an unknown tool, bad
        arguments); empty for plain text, text it cannot read as calls, and text over
        ``max_chars``. Never raises."""
        if len(text) > self.max_chars:
            return []
        body = _body_span(text)
        try:
            found = self._locate(text[body.start : body.end])
        except (SyntaxError, ValueError, TypeError, KeyError, IndexError, RecursionError,
                MemoryError):  # fmt: skip
            return []
        if not self._agrees(text[body.start : body.end], found):
            return []
        return [spans.shift(body.start) for spans in found]

    def _agrees(self, body: str, found: list[CallSpans]) -> bool:
        """Whether the calls found where the parser's extraction finds them (a guard:
        no spans rather than another call's)."""
        try:
            raws = self._extract(body)
        except _ParseFailure as failure:  # a call it could not read (a non-literal value)
            return failure.part is not ErrorPart.ACTION
        except (RecursionError, MemoryError, ValueError, TypeError):
            return False
        if raws is None or len(raws) != len(found):
            return False
        for (name, args), spans in zip(raws, found, strict=True):
            keys = set(args) if isinstance(args, dict) else set()
            if name != spans.tool or keys != {a.name for a in spans.args}:
                return False
        return True

    def _locate(self, body: str) -> list[CallSpans]:
        """``_extract``'s decisions, with spans (relative to ``body``)."""
        whole = self._locate_whole(body)
        if whole is not None:
            return whole
        if "<tool_call>" in body:
            return [c for b in _tool_call_block_spans(body) for c in self._locate_block(body, b)]
        if "```" in body:
            fences = [s for s in (_stripped(body, *f) for f in _fence_spans(body)) if s[1] > s[0]]
            if len(fences) == 1:
                return self._locate_block(body, fences[0])
        if body.startswith(("{", "[")):
            return json_calls(body)
        if _CALL_START.match(body):
            return python_calls(body, self._params)
        return self._locate_embedded(body)

    def _locate_whole(self, body: str) -> list[CallSpans] | None:
        if body.startswith(("{", "[")):
            try:
                json.loads(body)
            except json.JSONDecodeError:
                return None
            return json_calls(body)
        if _CALL_START.match(body) and ("<tool_call>" in body or "```" in body):
            try:
                return python_calls(body, self._params)
            except (SyntaxError, ValueError):
                return None
        return None

    def _locate_block(self, body: str, block: Span) -> list[CallSpans]:
        text = body[block.start : block.end]
        if text.startswith(("{", "[")):
            found = json_calls(text)
        elif _CALL_START.match(text):
            found = python_calls(text, self._params)
        else:
            return []
        return [spans.shift(block.start) for spans in found]

    def _locate_embedded(self, body: str) -> list[CallSpans]:
        embedded = self._embedded_call(body)
        if embedded is not None:
            start, end, _ = embedded
            return [json_call(body[start:end], Span(0, end - start)).shift(start)]
        last = _last_line_span(body)
        if self._is_call_line(body[last.start : last.end]):
            return self._locate_block(body, last)
        return []

    def _is_call_line(self, line: str) -> bool:
        """Whether a line of free text is a call to one of the tools (``name(...)``)."""
        match = _CALL_NAME.match(line)
        return bool(match and match.group(1) in self.tools and line.rstrip("; \t").endswith(")"))

    def _embedded_call(self, body: str) -> tuple[int, int, dict[str, Any]] | None:
        """The call object written in free text (``_embedded_object``), unless it lies
        inside a last line that calls a tool: then it is a value of that call's
        arguments (``move(direction='{"name": "x"}')``), not a call of its own."""
        embedded = _embedded_object(body)
        if embedded is None:
            return None
        last = _last_line_span(body)
        inside = last.start <= embedded[0] and embedded[1] <= last.end
        if inside and self._is_call_line(body[last.start : last.end]):
            return None
        return embedded

    def _params(self, name: str) -> tuple[str, ...]:
        return self.tools[name].param_names if name in self.tools else ()

    # -- extraction: text -> list of (name, arguments) or None for plain text --------------

    def _extract(self, body: str) -> list[tuple[str, Any]] | None:
        whole = self._whole(body)
        if whole is not None:
            return whole
        if "<tool_call>" in body:
            calls: list[tuple[str, Any]] = []
            for block in _tool_call_blocks(body):
                try:
                    calls.extend(self._calls_from_block(block))
                except _ParseFailure as failure:
                    failure.call += len(calls)
                    raise
            return calls
        if "```" in body:
            fences = [f.strip() for f in _fences(body) if f.strip()]
            if len(fences) == 1:
                return self._calls_from_block(fences[0])
        if body.startswith(("{", "[")):
            return self._calls_from_json(body)
        if _CALL_START.match(body):
            return self._calls_from_python(body)
        return self._embedded(body)

    def _whole(self, body: str) -> list[tuple[str, Any]] | None:
        """The calls when the whole text is one JSON value or only Python call lines;
        None when it is neither (then tags, fences and prose are searched)."""
        if body.startswith(("{", "[")):
            try:
                data = json.loads(body)  # a too-long integer or nesting raises: parse_error
            except json.JSONDecodeError:
                return None
            return _calls_from_data(data)
        if _CALL_START.match(body) and ("<tool_call>" in body or "```" in body):
            try:
                module = pyast.parse(body.rstrip(";"))
            except (SyntaxError, ValueError):  # not Python (null bytes: ValueError on some 3.11s)
                return None
            calls = [
                stmt.value
                for stmt in module.body
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            ]
            if calls and len(calls) == len(module.body):
                return _each(calls, self._call_from_ast)
        return None

    def _calls_from_block(self, block: str) -> list[tuple[str, Any]]:
        if block.startswith(("{", "[")):
            return self._calls_from_json(block)
        if _CALL_START.match(block):
            return self._calls_from_python(block)
        raise _ParseFailure(
            ErrorCode.PARSE_ERROR,
            f"expected a JSON object or a call like name(arg=...), got {block[:60]!r}",
        )

    def _calls_from_json(self, text: str) -> list[tuple[str, Any]]:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _ParseFailure(
                ErrorCode.PARSE_ERROR,
                f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            ) from None
        return _calls_from_data(data)

    def _calls_from_python(self, text: str) -> list[tuple[str, Any]]:
        try:
            module = pyast.parse(text.rstrip(";"))
        except (SyntaxError, ValueError) as exc:  # null bytes: ValueError on some 3.11s
            syntax = exc if isinstance(exc, SyntaxError) else None
            where = f" (column {syntax.offset})" if syntax and syntax.offset else ""
            reason = syntax.msg if syntax else str(exc)
            raise _ParseFailure(
                ErrorCode.PARSE_ERROR, f"invalid call syntax: {reason}{where}"
            ) from None
        calls = []
        for stmt in module.body:
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                raise _ParseFailure(
                    ErrorCode.PARSE_ERROR, "expected only tool calls like name(arg=...)"
                )
            calls.append(stmt.value)
        return _each(calls, self._call_from_ast)

    def _call_from_ast(self, node: ast.Call) -> tuple[str, Any]:
        if not isinstance(node.func, ast.Name):
            raise _ParseFailure(
                ErrorCode.PARSE_ERROR, "call a tool by its bare name, e.g. move(direction='up')"
            )
        name = node.func.id
        args: dict[str, Any] = {}
        params = self.tools[name].param_names if name in self.tools else ()
        if node.args:
            if name in self.tools and len(node.args) > len(params):
                raise _ParseFailure(
                    ErrorCode.BAD_ARGUMENTS,
                    f"{name} takes at most {len(params)} positional argument(s), got "
                    f"{len(node.args)}; use {self.tools[name].signature()}",
                    ErrorPart.ARGUMENT,
                    f"_{len(params)}",  # the first extra one
                )
            for i, arg in enumerate(node.args):
                key = params[i] if i < len(params) else f"_{i}"
                args[key] = _literal(arg, key)
        for kw in node.keywords:
            if kw.arg is None:
                raise _ParseFailure(
                    ErrorCode.BAD_ARGUMENTS, "**kwargs are not allowed", ErrorPart.ARGUMENTS
                )
            if kw.arg in args:
                raise _ParseFailure(
                    ErrorCode.BAD_ARGUMENTS,
                    f"argument {kw.arg!r} given twice",
                    ErrorPart.ARGUMENT,
                    kw.arg,
                )
            args[kw.arg] = _literal(kw.value, kw.arg)
        return name, args

    def _embedded(self, body: str) -> list[tuple[str, Any]] | None:
        embedded = self._embedded_call(body)
        if embedded is not None:
            return [_call_from_object(embedded[2])]
        last = _last_line(body)
        if self._is_call_line(last):
            return self._calls_from_python(last.strip())
        return None

    # -- resolution: (name, args) -> validated ToolCall ----------------------------------

    def _resolve(self, name: str, args: Any) -> ToolCall:
        name = valid_text(name)
        spec = self.tools.get(name)
        if spec is None:
            hint = did_you_mean(name, self.tools)
            raise _ParseFailure(
                ErrorCode.UNKNOWN_TOOL,
                f"unknown tool {name!r}.{hint} Available tools: {', '.join(self.tools)}",
                ErrorPart.NAME,
            )
        if not isinstance(args, dict):
            raise _ParseFailure(
                ErrorCode.BAD_ARGUMENTS,
                f"arguments of {name} must be an object, got {type(args).__name__}",
                ErrorPart.ARGUMENTS,
            )
        args = {valid_argument(k): _json_data(v, k) for k, v in args.items()}
        extra = [k for k in args if k.startswith("_") and k[1:].isdigit()]
        if extra:
            raise _ParseFailure(
                ErrorCode.BAD_ARGUMENTS,
                f"too many positional arguments for {name}",
                ErrorPart.ARGUMENT,
                extra[0],
            )
        error = spec.validate(args)
        if error is not None:
            part, argument = _bad_argument(spec, args)
            raise _ParseFailure(
                ErrorCode.BAD_ARGUMENTS, f"{error}; use {spec.signature()}", part, argument
            )
        return ToolCall(name=spec.canonical, arguments=args)

    def _plain(self, body: str, text: str) -> ParsedAction:
        if self.accepts_messages and body.strip():
            return ParsedAction(message=body.strip(), canonical=f"say {body.strip()}")
        return _failed(
            ErrorCode.PARSE_ERROR,
            "no tool call found" if body.strip() else "the action is empty",
            Blame(ErrorPart.ACTION, span=Span(0, len(text))),
        )


# -- linear scanners ---------------------------------------------------------------------


def _strip_reasoning(text: str) -> str:
    """Drop leading ``<think>...</think>`` blocks (an unclosed one runs to the end)."""
    body = _body_span(text)
    return text[body.start : body.end]


def _body_span(text: str) -> Span:
    """Where the text after leading reasoning is, without surrounding whitespace."""
    # ASCII-only lowering keeps every index valid in ``text`` (str.lower can change lengths)
    lowered = text.translate(_ASCII_LOWER)
    if "<think>" not in lowered:
        return _stripped(text, 0, len(text))
    pos = _skip_space(text, 0)
    while lowered.startswith("<think>", pos):
        close = lowered.find("</think>", pos + len("<think>"))
        if close < 0:
            return Span(len(text), len(text))
        pos = _skip_space(text, close + len("</think>"))
    return _stripped(text, pos, len(text))


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _tool_call_blocks(text: str) -> list[str]:
    """The bodies of ``<tool_call>`` blocks; an unclosed last block runs to the end."""
    return [text[s.start : s.end] for s in _tool_call_block_spans(text)]


def _tool_call_block_spans(text: str) -> list[Span]:
    """Where the ``<tool_call>`` blocks' bodies are (stripped)."""
    blocks = []
    pos = text.find("<tool_call>")
    while pos >= 0:
        start = pos + len("<tool_call>")
        end = text.find("</tool_call>", start)
        if end < 0:
            blocks.append(_stripped(text, start, len(text)))
            break
        blocks.append(_stripped(text, start, end))
        pos = text.find("<tool_call>", end + len("</tool_call>"))
    return blocks


def _fences(text: str) -> list[str]:
    """The bodies of closed ```fenced``` blocks (the info string and its newline dropped)."""
    return [text[s.start : s.end] for s in _fence_spans(text)]


def _fence_spans(text: str) -> list[Span]:
    bodies = []
    pos = text.find("```")
    while pos >= 0:
        info = _FENCE_INFO.match(text, pos + 3)
        start = info.end() if info else pos + 3
        end = text.find("```", start)
        if end < 0:
            break
        bodies.append(Span(start, end))
        pos = text.find("```", end + 3)
    return bodies


def _last_line(text: str) -> str:
    """The last line holding something other than whitespace ("" if none)."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line
    return ""


def _embedded_object(body: str) -> tuple[int, int, dict[str, Any]] | None:
    """The call object written inside free text: the JSON from the first ``{`` to the
    last ``}`` when it parses to an object naming a tool, as ``(start, end, object)``
    (``end`` exclusive); the parser and the span finder read it the same way."""
    start, end = body.find("{"), body.rfind("}")
    if not 0 <= start < end:
        return None
    try:
        data = json.loads(body[start : end + 1])
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(data, dict) and ({"name", "tool", "function"} & data.keys()):
        return start, end + 1, data
    return None


def _last_line_span(text: str) -> Span:
    """Where ``_last_line(text)`` is, stripped (empty at the end if there is none)."""
    found, pos = Span(len(text), len(text)), 0
    for line in text.splitlines(keepends=True):
        if line.strip():
            found = _stripped(text, pos, pos + len(line))
        pos += len(line)
    return found


def _failed(code: str, message: str, blame: Blame | None = None) -> ParsedAction:
    return ParsedAction(error_code=code, error_message=message, canonical=f"!{code}", blame=blame)


def _each(items: list[Any], convert: Any) -> list[Any]:
    """``convert`` of each item; a failure counts the items before it into its call."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(convert(item))
        except _ParseFailure as failure:
            failure.call += i
            raise
    return out


def _bad_argument(spec: Tool, args: dict[str, Any]) -> tuple[ErrorPart, str]:
    """The part of ``args`` that ``spec.validate`` rejected, checked in its order: a
    missing required argument blames the arguments as a whole, an undeclared one (in a
    closed schema) that argument, an invalid value that value."""
    schema = spec.parameters
    if any(name not in args for name in schema.get("required", ())):
        return ErrorPart.ARGUMENTS, ""
    declared = schema.get("properties", {})
    for name, value in args.items():
        if name not in declared:
            if schema.get("additionalProperties", True) is False:
                return ErrorPart.ARGUMENT, name
        elif compile_schema(declared[name], name)(value, name) is not None:
            return ErrorPart.VALUE, name
    return ErrorPart.ARGUMENTS, ""


FORMAT_NOTE = (
    "Act by calling one tool per turn. Accepted forms: a JSON object "
    '{"name": "<tool>", "arguments": {...}}, <tool_call>{...}</tool_call>, or a call '
    "like tool(arg=value)."
)
"""How to act, as the system prompt states it (``AgentEnv.reset``'s ``info["system"]``)."""


def read_action(
    parser: ActionParser, action: Any, native: NativeTurn | None, step: int
) -> tuple[str, ParsedAction]:
    """The text of an action ``AgentEnv.step`` got, and the parser's verdict on it.

    A str is made valid Unicode first (``core.unicode``) and, in native mode, read as
    the assistant message it may be (``NativeTurn.begin``; the text returned is the
    one parsed); bytes are decoded as UTF-8, with U+FFFD for what does not decode;
    anything else is :data:`NOT_TEXT`, with ``""`` as its text."""
    if isinstance(action, bytes | bytearray):
        text = bytes(action).decode("utf-8", errors="replace")
        return text, parser.parse(text)
    if not isinstance(action, str):
        return "", NOT_TEXT
    text = valid_text(action)
    if native is None:
        return text, parser.parse(text)
    text = native.begin(text, step)
    return text, native.in_action(parser.parse(text))  # its blame's span in the message


NOT_TEXT = _failed(
    ErrorCode.PARSE_ERROR,
    "the action must be text (a str)",
    Blame(ErrorPart.ACTION, span=Span(0, 0)),
)
"""The verdict on an action that is not text (``AgentEnv.step`` got no str or bytes)."""


def _calls_from_data(data: Any) -> list[tuple[str, Any]]:
    """The calls of decoded JSON: a call, a list of calls or an assistant message."""
    if isinstance(data, dict) and isinstance(data.get("tool_calls"), list) and data["tool_calls"]:
        data = data["tool_calls"]  # a whole OpenAI assistant message
    items = data if isinstance(data, list) else [data]
    return _each(items, _call_from_object)


def _call_from_object(item: Any) -> tuple[str, Any]:
    if not isinstance(item, dict):
        raise _ParseFailure(
            ErrorCode.PARSE_ERROR,
            f'expected an object like {{"name": ..., "arguments": {{...}}}}, got '
            f"{type(item).__name__}",
        )
    if isinstance(item.get("function"), dict):  # OpenAI tool_calls entry
        item = item["function"]
    name = item.get("name", item.get("tool", item.get("tool_name")))
    if not isinstance(name, str):
        raise _ParseFailure(
            ErrorCode.PARSE_ERROR,
            'the call has no tool name; write {"name": "<tool>", "arguments": {...}}',
        )
    args: Any = {}
    for key in ("arguments", "args", "parameters", "input"):
        if key in item:
            args = item[key]
            break
    if isinstance(args, str):  # OpenAI sends arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise _ParseFailure(
                ErrorCode.BAD_ARGUMENTS,
                f"arguments string is not valid JSON: {exc.msg}",
                ErrorPart.ARGUMENTS,
            ) from None
    return name, args


def _json_data(value: Any, key: str) -> Any:
    """Argument ``key``'s ``value`` as JSON data, its strings valid Unicode without NUL
    (tuples become lists); a value of another kind raises ``bad_arguments`` on ``key``."""
    if isinstance(value, str):
        return valid_argument(value)
    if (
        value is None
        or isinstance(value, bool | int)
        or (isinstance(value, float) and math.isfinite(value))
    ):
        return value
    if isinstance(value, list | tuple):
        return [_json_data(item, key) for item in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {valid_argument(k): _json_data(v, key) for k, v in value.items()}
    got = "an object with a key that is no string" if isinstance(value, dict) else repr(value)
    raise _ParseFailure(
        ErrorCode.BAD_ARGUMENTS,
        f"argument {valid_text(key)!r} must be JSON data (a string, a finite number, a "
        f"boolean, null, a list or an object with string keys), got {got[:40]}",
        ErrorPart.VALUE,
        key,
    )


def _literal(node: ast.expr, key: str) -> Any:
    if isinstance(node, ast.Name):  # bareword: move(up) means move("up")
        return node.id
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise _ParseFailure(
            ErrorCode.BAD_ARGUMENTS,
            "arguments must be literals (strings, numbers, booleans, lists, dicts)",
            ErrorPart.VALUE,
            key,
        ) from None
