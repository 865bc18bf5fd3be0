"""Request validation and message rendering for ``agentgym serve`` (no torch here).

:func:`parse_request` checks a ``/v1/chat/completions`` body and
:func:`parse_completion_request` a ``/v1/completions`` one; both raise
:class:`BadRequest` (an HTTP 400 with an OpenAI-style error body) for anything they
cannot serve. :func:`template_messages` turns OpenAI messages into what a chat template
takes; :func:`completion_body` turns generated text into a one-choice reply (the full
reply bodies are in :mod:`.reply`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.llm.chat import Message
from agentgym_envs.policies.chat import tool_calls_to_action
from agentgym_envs.serving.reply import chat_body, chat_choice

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP = 4
MAX_N = 128
MAX_TOP_LOGPROBS = 20
MAX_PROMPTS = 64
MAX_ROWS = 256
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
    """A one-choice ``chat.completion`` object for generated ``text``.

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
    return chat_body(model_id, fingerprint, [chat_choice(0, text, finish, tools)], tokens)


@dataclass(frozen=True)
class Sampling:
    """The sampling fields chat and text completions share."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    """Choices per prompt, each sampled independently (choice ``i > 0`` with the seed
    derived from ``(seed, i)``; choice 0 with ``seed`` itself)."""
    stream: bool = False
    include_usage: bool = False
    """Streaming: end with a chunk that carries ``usage``."""
    return_token_ids: bool = False
    """vLLM's extension: return the prompt's and each choice's token ids."""


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
    sampling: Sampling = Sampling()
    logprobs: bool = False
    top_logprobs: int = 0
    forced: tuple[str, ...] = ()
    """The tools one of which the reply must call (``tool_choice`` ``"required"`` or a
    named function); empty when the model may answer in text."""
    schema: dict[str, Any] | None = None
    """The JSON schema the reply must fit (``response_format`` ``json_schema``, or
    ``{"type": "object"}`` for ``json_object``); None: free text."""


@dataclass(frozen=True)
class CompletionRequest:
    """A validated (text) completions request: prompts are token ids or raw text."""

    prompts: list[list[int] | str]
    sampling: Sampling
    logprobs: int | None
    """Alternatives per token in the legacy ``logprobs`` object (None: no logprobs)."""


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise BadRequest(f"{key} must be a number in [{low}, {high}], got {value!r}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise BadRequest(f"{key} must be an integer {span}, got {value!r}", param=key)
    return value


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false, got {value!r}", param=key)
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


def _schema_problem(function: Mapping[str, Any]) -> str | None:
    """What is wrong with a function's ``description`` and ``parameters`` (the parts the
    prompt renders), or None: parameters must be a JSON-Schema object whose
    ``properties`` map names to schema objects and whose ``required`` lists names."""
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        return f"description must be a string, got {type(description).__name__}"
    parameters = function.get("parameters")
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        return f"parameters must be a JSON-Schema object, got {type(parameters).__name__}"
    properties = parameters.get("properties")
    if properties is not None and not (
        isinstance(properties, dict) and all(isinstance(v, dict) for v in properties.values())
    ):
        return "parameters.properties must map each argument name to a schema object"
    required = parameters.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        return "parameters.required must be a list of argument names"
    return None


def _tools(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The tools the model is shown, and the names one of which it must call."""
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type", "function") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        and t["function"]["name"]
        for t in tools
    ):
        raise BadRequest(
            'tools must be a list of {"type": "function", "function": {"name": ...}}',
            param="tools",
        )
    for i, tool in enumerate(tools):
        problem = _schema_problem(tool["function"])
        if problem is not None:
            raise BadRequest(
                f"tools[{i}].function ({tool['function']['name']!r}): {problem}",
                param=f"tools[{i}].function",
            )
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return [], ()
    if choice == "auto":
        return tools, ()
    if choice == "required":
        if not tools:
            raise BadRequest(
                "tool_choice 'required' needs a non-empty tools list", param="tool_choice"
            )
        return tools, tuple(t["function"]["name"] for t in tools)
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise BadRequest(
            "tool_choice must be 'none', 'auto', 'required' or "
            '{"type": "function", "function": {"name": <one of tools>}}, '
            f"got {choice!r}",
            param="tool_choice",
        )
    return chosen, (str(name),)


def _check_model(body: Mapping[str, Any], model_id: str) -> None:
    model = body.get("model", model_id)
    if model != model_id:
        raise BadRequest(
            f"The model {model!r} does not exist; this server serves {model_id!r}.",
            param="model",
            code="model_not_found",
            status=404,
        )


def _sampling(body: Mapping[str, Any]) -> Sampling:
    """The shared sampling fields of a chat or text completions body."""
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
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63
    ):
        raise BadRequest(f"seed must be a 64-bit integer, got {seed!r}", param="seed")
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise BadRequest("top_p must be > 0", param="top_p")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict)):
        raise BadRequest(
            "stream_options must be an object and needs stream=true", param="stream_options"
        )
    include_usage = _flag(options or {}, "include_usage")
    return Sampling(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=top_p,
        max_tokens=max_tokens,
        seed=seed,
        stop=tuple(stop),
        n=_integer(body, "n", 1, MAX_N) or 1,
        stream=stream,
        include_usage=include_usage,
        return_token_ids=_flag(body, "return_token_ids"),
    )


def parse_request(body: Any, model_id: str) -> ChatRequest:
    """Validate a chat-completions body.

    Raises:
        BadRequest: the body is malformed or asks for something unsupported.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    _check_model(body, model_id)
    sampling = _sampling(body)
    logprobs = _flag(body, "logprobs")
    top = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise BadRequest("top_logprobs needs logprobs=true", param="top_logprobs")
    tools, forced = _tools(body)
    schema = _response_format(body)
    if schema is not None and tools:
        raise BadRequest(
            "response_format constrains the reply to its schema, so no tool call could be "
            "made: send tools or response_format, not both (or tool_choice 'none')",
            param="response_format",
        )
    return ChatRequest(
        messages=_messages(body.get("messages")),
        tools=tools,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_tokens,
        seed=sampling.seed,
        stop=sampling.stop,
        sampling=sampling,
        logprobs=logprobs,
        top_logprobs=top or 0,
        forced=forced,
        schema=schema,
    )


def _response_format(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema a ``response_format`` asks the reply to fit (None: free text)."""
    value = body.get("response_format")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    spec = value.get("json_schema") if kind == "json_schema" and isinstance(value, dict) else None
    if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
        return dict(spec["schema"])
    raise BadRequest(
        'response_format must be {"type": "text"}, {"type": "json_object"} or '
        '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}, '
        f"got {str(value)[:200]}",
        param="response_format",
    )


def prompt_chars(request: ChatRequest) -> int:
    """Characters of a chat request that its prompt holds verbatim (message contents and
    tool descriptions): a lower bound on the prompt's length, known before tokenising."""
    contents = sum(len(m["content"]) for m in request.messages)
    descriptions = sum(len(t["function"].get("description") or "") for t in request.tools)
    return contents + descriptions


def _prompts(value: Any) -> list[list[int] | str]:
    """``prompt``: a string, a list of token ids, or a list of either."""
    if isinstance(value, str) or (
        isinstance(value, list) and value and all(isinstance(t, int) for t in value)
    ):
        value = [value]
    if not isinstance(value, list) or not value or len(value) > MAX_PROMPTS:
        raise BadRequest(
            f"prompt must be a string, a list of token ids, or a list of up to {MAX_PROMPTS} "
            "of those",
            param="prompt",
        )
    prompts: list[list[int] | str] = []
    for item in value:
        ids = isinstance(item, list) and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in item
        )
        if not (isinstance(item, str) and item) and not (ids and item):
            raise BadRequest(
                "each prompt must be a non-empty string or a non-empty list of token ids "
                f"(integers >= 0), got {str(item)[:80]!r}",
                param="prompt",
            )
        prompts.append(item)
    return prompts


def parse_completion_request(body: Any, model_id: str) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (prompts as text or token ids).

    Raises:
        BadRequest: the body is malformed or asks for something unsupported.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    _check_model(body, model_id)
    if body.get("echo"):
        raise BadRequest("echo is not supported; send echo=false", param="echo")
    if body.get("suffix"):
        raise BadRequest("suffix is not supported", param="suffix")
    if body.get("response_format") is not None:
        raise BadRequest(
            "response_format is served on /v1/chat/completions only", param="response_format"
        )
    if body.get("best_of") not in (None, 1):
        raise BadRequest("best_of is not supported; sample n choices instead", param="best_of")
    sampling = _sampling(body)
    prompts = _prompts(body.get("prompt"))
    if len(prompts) * sampling.n > MAX_ROWS:
        raise BadRequest(
            f"{len(prompts)} prompts times n={sampling.n} is more than {MAX_ROWS} choices; "
            "split the request",
            param="n",
        )
    return CompletionRequest(
        prompts=prompts, sampling=sampling, logprobs=_integer(body, "logprobs", 0, 20)
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
