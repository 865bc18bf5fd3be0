"""Reply bodies of ``agentgym serve`` (no torch here): chat and text completions, their
stream chunks, log-probabilities in OpenAI's two formats, and token ids in vLLM's shape.

Token ids follow vLLM's ``return_token_ids`` extension: a chat completion carries
``prompt_token_ids`` at the top level and ``token_ids`` in each choice; a text
completion carries both in each choice (its prompts may differ). In a stream, the
prompt's ids come in the first chunk and each chunk's ``token_ids`` are the ids it adds.
Weights: each choice says ``weights_version``, the version of the weights that sampled
it (the server's count of weight loads when the choice's batch ran; a choice always
comes from one batch). A body's top-level ``weights_version`` is the oldest of its
choices' versions (the choices of one request may run in different batches). A stream
chunk that carries sampled tokens or a finish says its choice's version at the top level
and in the choice; the opening chunks (role, prompt ids) precede sampling and say none.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentgym_envs.policies.chat import parse_tool_calls

TokenText = Callable[[int], str]
"""The text of one token id, as a logprob entry shows it."""


def usage(prompt: int, completion: int) -> dict[str, int]:
    """An OpenAI ``usage`` object."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _extras(
    token_ids: Sequence[int] | None = None,
    prompt_ids: Sequence[int] | None = None,
    weights_version: int | None = None,
) -> dict[str, Any]:
    """The vLLM-style fields a reply carries only when asked: ``token_ids``,
    ``prompt_token_ids`` and ``weights_version``."""
    out: dict[str, Any] = {}
    if token_ids is not None:
        out["token_ids"] = list(token_ids)
    if prompt_ids is not None:
        out["prompt_token_ids"] = list(prompt_ids)
    if weights_version is not None:
        out["weights_version"] = weights_version
    return out


def tool_calls(text: str, tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The OpenAI ``tool_calls`` a text holds (arguments as JSON strings), else None."""
    calls = parse_tool_calls(text, tools) if tools else None
    if not calls:
        return None
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        for name, args in calls
    ]


def _entry(token: int, logprob: float, text: TokenText) -> dict[str, Any]:
    shown = text(token)
    return {"token": shown, "logprob": logprob, "bytes": list(shown.encode("utf-8"))}


def chat_logprobs(
    ids: Sequence[int],
    logprobs: Sequence[float],
    top: Sequence[Sequence[tuple[int, float]]],
    text: TokenText,
) -> dict[str, Any]:
    """Chat ``logprobs``: one ``content`` entry per sampled token (the end-of-turn token
    included, so entries line up with ``token_ids``), with its ``top_logprobs``."""
    return {
        "content": [
            {
                **_entry(token, lp, text),
                "top_logprobs": [_entry(alt, alt_lp, text) for alt, alt_lp in alternatives],
            }
            for token, lp, alternatives in zip(ids, logprobs, top, strict=True)
        ]
    }


def text_logprobs(
    ids: Sequence[int],
    logprobs: Sequence[float],
    top: Sequence[Sequence[tuple[int, float]]],
    text: TokenText,
    offset: int = 0,
) -> dict[str, Any]:
    """The legacy completions ``logprobs`` object: tokens, their log-probs, a dict of
    alternatives per token (the sampled token included) and character offsets."""
    tokens = [text(token) for token in ids]
    offsets, at = [], offset
    for token in tokens:
        offsets.append(at)
        at += len(token)
    tops = []
    for sampled, lp, alternatives in zip(ids, logprobs, top, strict=True):
        row = {text(alt): alt_lp for alt, alt_lp in alternatives}
        row.setdefault(text(sampled), lp)
        tops.append(row)
    return {
        "tokens": tokens,
        "token_logprobs": list(logprobs),
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def chat_choice(
    index: int,
    text: str,
    finish: str,
    tools: Sequence[Mapping[str, Any]],
    *,
    logprobs: dict[str, Any] | None = None,
    token_ids: Sequence[int] | None = None,
    weights_version: int | None = None,
) -> dict[str, Any]:
    """One chat choice; a tool call read from the text becomes ``message.tool_calls``
    (``content`` null) with ``finish_reason="tool_calls"``."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls = tool_calls(text, tools)
    if calls:
        message["content"] = None
        message["tool_calls"] = calls
        finish = "tool_calls"
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "finish_reason": finish,
        "logprobs": logprobs,
    }
    return {**choice, **_extras(token_ids, weights_version=weights_version)}


def chat_body(
    model_id: str,
    fingerprint: str,
    choices: list[dict[str, Any]],
    tokens: tuple[int, int],
    *,
    prompt_ids: Sequence[int] | None = None,
    weights_version: int | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object (``weights_version``: the oldest of the choices')."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "system_fingerprint": fingerprint,
        "choices": choices,
        "usage": usage(*tokens),
    }
    return {**body, **_extras(prompt_ids=prompt_ids, weights_version=weights_version)}


def text_choice(
    index: int,
    text: str,
    finish: str | None,
    *,
    logprobs: dict[str, Any] | None = None,
    token_ids: Sequence[int] | None = None,
    prompt_ids: Sequence[int] | None = None,
    weights_version: int | None = None,
) -> dict[str, Any]:
    """One text-completion choice (also a stream chunk's choice)."""
    choice: dict[str, Any] = {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish,
    }
    return {**choice, **_extras(token_ids, prompt_ids, weights_version)}


def text_body(
    model_id: str,
    fingerprint: str,
    choices: list[dict[str, Any]],
    tokens: tuple[int, int],
    weights_version: int,
) -> dict[str, Any]:
    """A ``text_completion`` object (``weights_version``: the oldest of the choices')."""
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model_id,
        "system_fingerprint": fingerprint,
        "choices": choices,
        "usage": usage(*tokens),
        "weights_version": weights_version,
    }


class Chunks:
    """Builds the chunks of one streamed response (same id and creation time).

    Args:
        chat: chat completion chunks (else text completion chunks).
        model_id: the served model's id.
        fingerprint: ``system_fingerprint``.
    """

    def __init__(self, chat: bool, model_id: str, fingerprint: str) -> None:
        prefix, self.kind = (
            ("chatcmpl", "chat.completion.chunk") if chat else ("cmpl", "text_completion")
        )
        self._head = {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": self.kind,
            "created": int(time.time()),
            "model": model_id,
            "system_fingerprint": fingerprint,
        }

    def of(
        self, choices: list[dict[str, Any]], weights_version: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """A chunk with these choices (and extra top-level fields); ``weights_version``:
        the version of the weights that sampled what the chunk carries."""
        version = _extras(weights_version=weights_version)
        return {**self._head, **version, "choices": choices, **extra}

    def usage(self, tokens: tuple[int, int]) -> dict[str, Any]:
        """The closing chunk of ``stream_options.include_usage``: no choices, usage."""
        return {**self._head, "choices": [], "usage": usage(*tokens)}


def chat_delta(
    index: int,
    delta: dict[str, Any],
    finish: str | None = None,
    *,
    logprobs: dict[str, Any] | None = None,
    token_ids: Sequence[int] | None = None,
    weights_version: int | None = None,
) -> dict[str, Any]:
    """One choice of a chat stream chunk."""
    choice: dict[str, Any] = {
        "index": index,
        "delta": delta,
        "logprobs": logprobs,
        "finish_reason": finish,
    }
    return {**choice, **_extras(token_ids, weights_version=weights_version)}


def stream_tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tool_calls`` as a stream delta shows them: each with its ``index``."""
    return [{"index": i, **call} for i, call in enumerate(calls)]
