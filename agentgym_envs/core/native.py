"""Native tool calling: the env side of agents that call tools through a chat API.

With ``tool_mode="native"`` (an env constructor kwarg, so ``gym.make(...,
tool_mode="native")``) an env serves agents that pass ``info["tools"]`` to their model as
native tools and send the model's assistant message back as the action:

* ``info["system"]`` keeps the env's rules but drops the text tool list and the accepted
  action forms (the tools travel natively);
* the action may be the assistant message as JSON, ``{"role": "assistant", "content":
  ..., "tool_calls": [{"id": "call_x", "type": "function", "function": {...}}]}`` (or its
  ``tool_calls`` list, or one entry); a message without tool calls is its ``content``
  (text for the user where the env has one; ``info["error"]["span"]`` still counts in
  the action, the whole message, through the JSON string's escapes). Every text form of
  the default mode is still accepted;
* ``info["messages"]`` splits the observation by speaker, as the chat needs it: one
  ``tool`` message per native call of the action, answering the model's own
  ``tool_call_id`` with that call's result (a call that reached the simulated user
  answers "Delivered to the user." and the user's words follow as a ``user`` message;
  when one action holds several calls, each is answered under its own id: an id that
  is not a short token, :data:`SAFE_CALL_ID` (chat-template tokens, newlines, escapes,
  a lone surrogate), is replaced by the env's ``call_<step>_<i>`` and the call's
  ``info["tool_calls"]`` entry gets ``"id_replaced": True``); the env's own
  text (an error, the outcome, the view, and the results of calls written as text,
  which have no id) closes the last ``tool`` message or, when there is none, is a
  ``user`` message. Each message's content is sanitized and capped like the text
  observation (``max_observation_chars``, the same charset). At reset it is ``[{"role": "user",
  "content": <the task observation>}]``. ``info["tool_calls"][i]["call_id"]`` is the
  model's id too;
* the text observation, rewards and dynamics are those of the default ``"text"`` mode;
  ``info["versions"]["env"]`` ends with ``+native``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.actions import FORMAT_NOTE, ParsedAction
from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.info import ErrorPart, ToolStatus
from agentgym_envs.core.spaces import sanitize
from agentgym_envs.core.spans import Span, content_chars
from agentgym_envs.core.tools import ToolResult
from agentgym_envs.core.unicode import valid_text
from agentgym_envs.core.variants import rename_calls

if TYPE_CHECKING:
    from agentgym_envs.core.env import AgentEnv

DELIVERED = "Delivered to the user."
"""A ``tool`` message's content when the call's result is the user's reply."""
USER_LABEL = "User: "
"""The speaker label a user reply carries in the text observation (dropped in messages)."""
NOT_RUN = "Not run: an earlier call of this turn ended the episode."
SAFE_CALL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A model's ``tool_call_id`` that goes back into the chat as it is (OpenAI's ``call_``,
vLLM's ``chatcmpl-tool-`` and Kimi's ``functions.name:0`` ids match); any other is
replaced by the env's own."""


class ToolMode(StrEnum):
    """How an env expects tools to be called (see the module docstring)."""

    TEXT = "text"
    """Tool calls written in the action text; the system prompt lists tools and forms."""
    NATIVE = "native"
    """Tools passed natively to the model; structured ``info["messages"]`` per step."""

    @classmethod
    def coerce(cls, value: ToolMode | str) -> ToolMode:
        """The mode named by ``value``.

        Raises:
            ConfigError: ``value`` names no mode.
        """
        try:
            return cls(value)
        except ValueError:
            names = [m.value for m in cls]
            raise ConfigError(
                f"tool_mode must be one of {names}, got {value!r}.{did_you_mean(str(value), names)}"
            ) from None


def system_prompt(env: AgentEnv) -> str:
    """``info["system"]``: the env's rules, then in text mode the tool list and the
    accepted action forms (with the example action), in native mode only how many
    calls a turn may hold. Under a tool variant, the renamed tools."""
    rules = env.system_rules()
    if env.tool_variant is not None:  # the rules name tools too: follow the variant
        rules = rename_calls(env.toolset, rules)
    parts = [rules] if rules else []
    if env.tool_mode is ToolMode.NATIVE:
        calls = env.max_calls_per_step
        per_turn = "one call per turn" if calls == 1 else f"up to {calls} calls per turn"
        return "\n\n".join([*parts, f"Act through the tools ({per_turn})."])
    example = rename_calls(env.toolset, env.example_action)
    example = f"\nExample: {example}" if env.example_action else ""
    parts += [f"Tools:\n{env.toolset.describe()}", FORMAT_NOTE + example]
    return "\n\n".join(parts)


def _message(action: str, max_chars: int) -> Any:
    """The action as JSON when it is an object or a list, else None (never raises). An
    action over ``max_chars`` is not decoded (the parser refuses it by its length)."""
    text = action.strip()
    if len(action) > max_chars or not text.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # bad JSON, or an integer past Python's digit limit
        return None


def record_replies(method: Callable[[Any, str], ToolResult]) -> Callable[[Any, str], ToolResult]:
    """Wrap an env's ``on_message`` so that, in native mode, the user's replies of a
    step are known (whichever tool delivered the message). Transparent otherwise."""

    @functools.wraps(method)
    def on_message(self: Any, text: str) -> ToolResult:
        native: NativeTurn | None = getattr(self, "_native", None)
        if native is None:
            return method(self, text)
        native.depth += 1
        try:
            result = method(self, text)
        finally:
            native.depth -= 1
        if native.depth == 0 and result.error_code is None:
            native.heard.append(result.text)
        return result

    return on_message


class NativeTurn:
    """Builds one step's ``info["messages"]`` in native mode (one per env).

    Args:
        max_action_chars: the env's action limit (longer actions are not decoded).
        max_observation_chars: the env's observation limit, which caps each message.
    """

    def __init__(self, max_action_chars: int, max_observation_chars: int) -> None:
        self.max_action_chars, self.max_observation_chars = max_action_chars, max_observation_chars
        self.ids: list[str] = []
        self.replaced: set[int] = set()
        """Indices of the calls whose model id was unsafe and replaced."""
        self.heard: list[str] = []
        """User replies produced this step (by :func:`record_replies`)."""
        self.depth = 0
        self.tail: list[str] = []
        """The env's own parts of the observation: error, outcome, view."""
        self._messages: list[dict[str, Any]] = []
        self._loose: list[str] = []  # results of calls the model wrote as text
        self._step = 0
        # when the parsed text is a message's content: the action's length, and where
        # each content character is in the action (None: not placeable there)
        self._content: tuple[int, list[Span] | None] | None = None

    def begin(self, action: str, step: int) -> str:
        """Start a step; the text to parse: an assistant message without tool calls is
        its content, anything else is parsed as it is."""
        self.ids, self.heard, self.tail, self._messages, self._loose = [], [], [], [], []
        self.replaced = set()
        self._step, self._content = step, None
        data = _message(action, self.max_action_chars)
        if (
            isinstance(data, dict)
            and data.get("role") == "assistant"
            and not data.get("tool_calls")
        ):
            text = valid_text(_content_text(data.get("content")))  # one for one: spans hold
            chars = content_chars(action)
            self._content = (len(action), chars if chars and len(chars) == len(text) else None)
            return text
        if isinstance(data, dict):
            calls = data.get("tool_calls")
            entries = calls if isinstance(calls, list) else [data]
        else:
            entries = data if isinstance(data, list) else []
        ids = [e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]
        self.replaced = {i for i, e in enumerate(ids) if not SAFE_CALL_ID.fullmatch(e)}
        self.ids = [f"call_{step}_{i}" if i in self.replaced else e for i, e in enumerate(ids)]
        if len(self.ids) != len(entries) or len(set(self.ids)) != len(self.ids):
            self.ids, self.replaced = [], set()  # only a complete set of distinct ids is used
        return action

    def in_action(self, parsed: ParsedAction) -> ParsedAction:
        """``parsed`` (the verdict on the text :meth:`begin` returned) with its blame's
        span counted in the action: a message's content maps back through the JSON
        string's escapes; a blamed whole action is the whole message; a span that cannot
        be mapped is dropped (nothing is blamed rather than the wrong characters)."""
        blame = parsed.blame
        if self._content is None or blame is None or blame.span is None:
            return parsed
        length, chars = self._content
        span: Span | None = None
        if blame.part is ErrorPart.ACTION:
            span = Span(0, length)
        elif chars is not None and 0 <= blame.span.start < blame.span.end <= len(chars):
            span = Span(chars[blame.span.start].start, chars[blame.span.end - 1].end)
        return dataclasses.replace(parsed, blame=dataclasses.replace(blame, span=span))

    def call_id(self, index: int) -> str:
        """The id of the action's ``index``-th call: the model's, else the env's."""
        return self.ids[index] if index < len(self.ids) else f"call_{self._step}_{index}"

    def answer(self, index: int, result: ToolResult | None, status: ToolStatus) -> None:
        """Answer call ``index`` with its result (and the user's words it produced). A
        call the model did not make natively (a text form, no id) has no ``tool``
        message: its result joins the env's text."""
        replies, self.heard = self.heard, []
        if result is None:
            text = NOT_RUN if status is ToolStatus.SKIPPED else f"The call failed ({status})."
        else:
            text = DELIVERED if replies and result.text in replies else result.text
        if index < len(self.ids):
            self._messages.append(
                {"role": "tool", "tool_call_id": self.ids[index], "content": text}
            )
        elif text != DELIVERED:
            self._loose.append(text)
        self._messages += [_user(reply) for reply in replies]

    def finish(self, refused: bool) -> list[dict[str, Any]]:
        """The step's messages, once the observation's ``tail`` is known; ``refused``:
        the action was refused as a whole (its error opens the tail)."""
        messages, tail = self._messages, self.tail
        if refused and self.ids and tail:  # each of the model's calls gets the error
            messages = [{"role": "tool", "tool_call_id": i, "content": tail[0]} for i in self.ids]
            tail = tail[1:]
        messages += [_user(reply) for reply in self.heard]  # a plain message's reply
        text = "\n\n".join(part for part in (*self._loose, *tail) if part)
        tools = [m for m in messages if m["role"] == "tool"]
        if tools and text:
            tools[-1]["content"] = f"{tools[-1]['content']}\n\n{text}"
        elif text:
            messages.append({"role": "user", "content": text})
        limit = self.max_observation_chars  # the same charset and cap as the observation
        return [{**m, "content": sanitize(m["content"], limit)} for m in messages]


def native_turn(env: AgentEnv) -> NativeTurn | None:
    """The env's :class:`NativeTurn` in native mode (its limits), else None."""
    if env.tool_mode is not ToolMode.NATIVE:
        return None
    return NativeTurn(env.max_action_chars, env.max_observation_chars)


def _content_text(content: Any) -> str:
    """An assistant message's ``content``: a string, or the text of its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _user(reply: str) -> dict[str, Any]:
    return {"role": "user", "content": reply.removeprefix(USER_LABEL)}
