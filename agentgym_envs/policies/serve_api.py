"""Request validation and message rendering for ``agentgym serve`` (no torch here).

:func:`parse_request` checks a ``/v1/chat/completions`` body and raises
:class:`BadRequest` (an HTTP 400 with an OpenAI-style error body) for anything it cannot
serve; :func:`template_messages` turns OpenAI messages into what a chat template takes;
:func:`completion_body` turns generated text into the reply.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.llm.chat import Message
from agentgym_envs.policies.chat import parse_tool_calls, tool_calls_to_action

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP = 4
TOOLS_INSTRUCTION = (
    'To call a tool, reply with only a JSON object {"name": "<tool>", "arguments": {...}}.'
)


class BadRequest(AgentGymError, ValueError):
    """A request the server cannot serve; ``status`` is its HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.param, self.code, self.status, self.kind = param, code, status, kind


def error_body(
    message: str, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def completion_body(
    model_id: str,
    fingerprint: str,
    text: str,
    finish: str,
    tokens: tuple[int, int],
    tools: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """A ``chat.completion`` object for generated ``text``.

    With ``tools``, a tool call read from the text becomes ``message.tool_calls`` (its
    arguments as a JSON string, ``content`` null) and ``finish_reason="tool_calls"``.

    Args:
        model_id: the served model's id.
        fingerprint: the weights' fingerprint (``system_fingerprint``).
        text: the generated text.
        finish: ``"stop"`` or ``"length"``.
        tokens: (prompt tokens, completion tokens).
        tools: the tools the request offered.
    """
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls = parse_tool_calls(text, tools) if tools else None
    if calls:
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for name, args in calls
        ]
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "system_fingerprint": fingerprint,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": tokens[0] + tokens[1],
        },
    }


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completions request."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    temperature: float
    top_p: float
    max_tokens: int | None
    seed: int | None
    stop: tuple[str, ...]


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise BadRequest(f"{key} must be a number in [{low}, {high}], got {value!r}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadRequest(f"{key} must be an integer >= {low}, got {value!r}", param=key)
    return value


def _text(content: Any, where: str) -> str:
    """The text of a message ``content``: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise BadRequest(f"{where}: only text content parts are supported", param=where)
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of parts", param=where)


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise BadRequest("messages must be a non-empty list of messages", param="messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise BadRequest(f"{where} must be an object with a role among {ROLES}", param=where)
        calls = message.get("tool_calls")
        if calls is not None and not (
            isinstance(calls, list)
            and all(isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)
        ):
            raise BadRequest(f"{where}.tool_calls must be a list of function calls", param=where)
        out.append({**message, "content": _text(message.get("content"), where)})
    return out


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type", "function") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise BadRequest(
            'tools must be a list of {"type": "function", "function": {"name": ...}}',
            param="tools",
        )
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return []
    if choice in ("auto", "required"):
        return tools
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise BadRequest(
            "tool_choice must be 'none', 'auto', 'required' or "
            '{"type": "function", "function": {"name": <one of tools>}}, '
            f"got {choice!r}",
            param="tool_choice",
        )
    return chosen


def parse_request(body: Any, model_id: str) -> ChatRequest:
    """Validate a chat-completions body.

    Raises:
        BadRequest: the body is malformed or asks for something unsupported.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model", model_id)
    if model != model_id:
        raise BadRequest(
            f"The model {model!r} does not exist; this server serves {model_id!r}.",
            param="model",
            code="model_not_found",
            status=404,
        )
    if body.get("stream"):
        raise BadRequest("streaming is not supported; send stream=false", param="stream")
    if body.get("n", 1) != 1:
        raise BadRequest(f"only n=1 is supported, got {body.get('n')!r}", param="n")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else stop
    if (
        not isinstance(stop, list | tuple)
        or len(stop) > MAX_STOP
        or not all(isinstance(s, str) for s in stop)
    ):
        raise BadRequest(f"stop must be a string or up to {MAX_STOP} strings", param="stop")
    max_tokens = _integer(body, "max_completion_tokens", 1)
    max_tokens = max_tokens if max_tokens is not None else _integer(body, "max_tokens", 1)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(f"seed must be an integer, got {seed!r}", param="seed")
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise BadRequest("top_p must be > 0", param="top_p")
    return ChatRequest(
        messages=_messages(body.get("messages")),
        tools=_tools(body),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=top_p,
        max_tokens=max_tokens,
        seed=seed,
        stop=tuple(stop),
    )


def _tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = ["You can call these tools:"]
    for tool in tools:
        fn = tool["function"]
        params = ", ".join((fn.get("parameters") or {}).get("properties") or {})
        lines.append(f"- {fn['name']}({params}): {fn.get('description', '')}".rstrip(": "))
    return "\n".join([*lines, TOOLS_INSTRUCTION])


def template_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    template_tools: bool,
) -> list[Message]:
    """OpenAI messages as chat-template messages.

    When the template knows tools (``template_tools``), tool calls and ``tool`` messages
    pass through (arguments as objects, as templates expect). Otherwise an assistant's
    tool calls become their JSON action text, ``tool`` results become user messages and
    the tools are listed in the system message (one is added if there is none).
    """
    out: list[Message] = []
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        content = str(message.get("content") or "")
        calls = message.get("tool_calls")
        if template_tools:
            item: Message = {"role": role, "content": content}
            if calls:
                item["tool_calls"] = [_with_object_arguments(c) for c in calls]
            if role == "tool" and "tool_call_id" in message:
                item["tool_call_id"] = message["tool_call_id"]
            out.append(item)
            continue
        if calls:
            content = (content + "\n" if content else "") + tool_calls_to_action(calls)
        out.append({"role": "user" if role == "tool" else role, "content": content})
    if tools and not template_tools:
        block = _tools_text(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def _with_object_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        # on bad JSON the template shows the raw string, as the model wrote it
        with contextlib.suppress(json.JSONDecodeError):
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
    return {**call, "function": function}
