"""A policy backed by any OpenAI-compatible chat-completions endpoint (stdlib only).

Works with OpenAI, vLLM, llama.cpp's server, Ollama and ``agentgym serve``. The slots of
one ``act`` call are requested concurrently (a thread pool of ``concurrency`` workers),
so a server that batches concurrent requests answers them in one forward pass.

Two tool modes:

* ``native``: the env's tool schemas are sent as ``tools``; a reply's ``tool_calls`` is
  turned back into the env's action text ``{"name": ..., "arguments": {...}}``; the
  history holds assistant ``tool_calls`` and ``tool`` result messages.
* ``text``: only messages are sent; the reply's text is the action (the env's system
  prompt already describes the tools and the call format).

Transient failures (HTTP 408, 409, 425, 429, 500, 502, 503 and 504, refused or dropped
connections, timeouts, replies that are not chat completions) are retried with
exponential backoff and seeded jitter, honouring ``Retry-After``. When the retries run
out, or on a permanent error (400, 401, 404, 501, ...), the slot's action is the empty
string and ``last_usage`` says ``failed=1``: ``act`` never raises, so one bad request does
not end an evaluation.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentgym_envs.core.errors import ClosedError, ConfigError, did_you_mean
from agentgym_envs.llm.http_client import RETRY_STATUS, BadReplyError, HttpCallError, JsonHttpClient
from agentgym_envs.policies.chat import ChatHistories, Conversation, derive_seed
from agentgym_envs.policies.chat import tool_calls_to_action as _to_action

logger = logging.getLogger(__name__)

TOOL_MODES = ("native", "text")
_RETRY_STATUS = RETRY_STATUS | {409, 425}  # conflict, too early: a retry may succeed
_CHARS_PER_TOKEN = 4  # the usual estimate for English text; only used by max_context


@dataclass
class _Reply:
    action: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    attempts: int = 0
    failed: bool = False
    error: str = ""
    latency_ms: float = 0.0


class OpenAIPolicy:
    """Plays env slots through an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name sent with each request.
        api_key: bearer token; default ``$OPENAI_API_KEY`` (none sent if unset).
        tool_mode: ``"native"`` (send ``tools``, read ``tool_calls``) or ``"text"``.
        temperature: sampling temperature (0 = greedy where the server supports it).
        top_p: nucleus mass (not sent when None).
        max_tokens: the longest reply in tokens.
        timeout_s: per-request timeout.
        max_retries: retries after the first attempt of a request.
        backoff_s: the first retry's delay; each retry doubles it, up to ``max_backoff_s``,
            times a seeded jitter factor in [0.5, 1).
        max_backoff_s: the longest delay between two attempts.
        concurrency: the most requests in flight at once.
        seed: seeds the jitter and the per-request ``seed`` (derived from it, the slot's
            episode seed and the turn, so replies do not depend on batch composition).
        max_context: prompt budget in *estimated* tokens (4 characters per token); the
            oldest turns are dropped beyond it. None: send the whole history.
        trim_to: when the history outgrows ``max_context``, drop old turns down to this
            share of it, and keep them dropped while it fits, so a server's prefix cache
            keeps
            serving the same prompt head (see :class:`~.chat.ChatHistories`).
        one_shot: add the one-shot example exchange; default: on in text mode only.
        extra_body: more fields for every request (e.g. ``{"stop": ["\\n\\n"]}``).

    Raises:
        ConfigError: an unknown tool mode or an invalid setting.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        tool_mode: str = "native",
        temperature: float = 0.0,
        top_p: float | None = None,
        max_tokens: int = 256,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        concurrency: int = 8,
        seed: int = 0,
        max_context: int | None = None,
        one_shot: bool | None = None,
        extra_body: Mapping[str, Any] | None = None,
        trim_to: float = 0.5,
    ) -> None:
        if tool_mode not in TOOL_MODES:
            raise ConfigError(
                f"unknown tool_mode {tool_mode!r}.{did_you_mean(tool_mode, TOOL_MODES)} "
                f"Use one of {TOOL_MODES}."
            )
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"base_url must start with http:// or https://, got {base_url!r} "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        if concurrency < 1 or max_retries < 0 or timeout_s <= 0 or max_tokens < 1:
            raise ConfigError(
                "expected concurrency >= 1, max_retries >= 0, timeout_s > 0 and "
                f"max_tokens >= 1, got {concurrency}, {max_retries}, {timeout_s}, {max_tokens}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tool_mode = tool_mode
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.seed, self.max_context = seed, max_context
        self.extra_body = dict(extra_body or {})
        self.name = f"openai:{model}"
        one_shot = tool_mode == "text" if one_shot is None else one_shot
        self.spec: dict[str, Any] = {
            "kind": "openai",
            "base_url": self.base_url,
            "model": model,
            "tool_mode": tool_mode,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
            "seed": seed,
            "max_context": max_context,
            "one_shot": one_shot,
            "trim_to": trim_to,
            "extra_body": self.extra_body,
        }
        self.last_usage: list[dict[str, float]] = []
        self.failures: list[dict[str, Any]] = []
        """Every request that failed for good: slot, error, attempts."""
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._client = JsonHttpClient(
            self.base_url,
            api_key=key,
            timeout_s=timeout_s,
            retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            retry_status=_RETRY_STATUS,
            jitter_seed=seed,
        )
        self._chats = ChatHistories(
            one_shot=one_shot, native=tool_mode == "native", trim_to=trim_to
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="openai")
        self._lock = threading.Lock()
        self._closed = False

    def reset(self, indices: Sequence[int]) -> None:
        """Start fresh chats for these slots."""
        self._chats.reset(indices)

    def conversation(self, slot: int) -> Conversation:
        """The chat history of a slot (KeyError if it has none)."""
        return self._chats[slot]

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        """One action per observation; failed requests give ``""`` (see ``last_usage``)."""
        if self._closed:
            raise ClosedError("this OpenAIPolicy was closed; make a new one to keep acting")
        chosen = list(slots) if slots is not None else list(range(len(observations)))
        bodies = []
        for slot, obs, info in zip(chosen, observations, infos, strict=True):
            conv = self._chats.observe(slot, obs, info)
            bodies.append(self._body(slot, conv))
        replies = list(self._pool.map(self._complete, bodies))
        for slot, reply in zip(chosen, replies, strict=True):
            self._chats.record(slot, reply.action, reply.tool_calls)
            if reply.failed:
                logger.warning("slot %d: request failed: %s", slot, reply.error)
                with self._lock:
                    self.failures.append(
                        {"slot": slot, "error": reply.error, "attempts": reply.attempts}
                    )
        self.last_usage = [
            {
                "tokens_in": float(r.tokens_in),
                "tokens_out": float(r.tokens_out),
                "latency_ms": r.latency_ms,
                "retries": float(max(0, r.attempts - 1)),
                "failed": float(r.failed),
            }
            for r in replies
        ]
        return [r.action for r in replies]

    def close(self) -> None:
        """Wait for requests in flight and stop the worker threads (idempotent)."""
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)

    # -- requests --------------------------------------------------------------------------

    def _body(self, slot: int, conv: Conversation) -> dict[str, Any]:
        def estimate(messages: list[dict[str, Any]]) -> int:
            return len(json.dumps(messages, ensure_ascii=False)) // _CHARS_PER_TOKEN

        budget = None if self.max_context is None else self.max_context - self.max_tokens
        messages, _ = self._chats.fit(slot, estimate, budget)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            # many servers take only 32-bit seeds
            "seed": derive_seed(self.seed, conv.episode_seed, len(conv.turns)) % (2**31),
        }
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.tool_mode == "native" and conv.tools:
            body["tools"] = conv.tools
            body["tool_choice"] = "auto"
        body.update(self.extra_body)
        return body

    def _complete(self, body: dict[str, Any]) -> _Reply:
        """Request one completion with retries (the shared client's); never raises."""
        started = time.perf_counter()
        try:
            answer = self._client.post("/chat/completions", body, _read)
            reply, reply.attempts = answer.value, answer.attempts
        except HttpCallError as exc:
            reply = _Reply(attempts=exc.attempts, failed=True, error=str(exc))
        except Exception as exc:  # a bug must not end the whole evaluation either
            logger.exception("unexpected error in a chat-completions request")
            reply = _Reply(attempts=1, failed=True, error=f"{type(exc).__name__}: {exc}")
        reply.latency_ms = (time.perf_counter() - started) * 1000.0
        return reply


def _read(data: dict[str, Any]) -> _Reply:
    """A reply from a chat-completion object (a malformed one is retried)."""
    try:
        message = data["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
    except (KeyError, IndexError, TypeError) as exc:
        raise BadReplyError(f"not a chat completion: {str(data)[:200]}") from exc
    reply = _Reply()
    usage = data.get("usage") or {}
    reply.tokens_in = int(usage.get("prompt_tokens") or 0)
    reply.tokens_out = int(usage.get("completion_tokens") or 0)
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        reply.tool_calls = [
            {
                "id": str(c.get("id") or f"call_{i}"),
                "type": "function",
                "function": {
                    "name": str((c.get("function") or {}).get("name", "")),
                    "arguments": _as_json_string((c.get("function") or {}).get("arguments")),
                },
            }
            for i, c in enumerate(calls)
        ]
        reply.action = _to_action(reply.tool_calls)
    else:
        reply.action = str(message.get("content") or "").strip()
    return reply


def _as_json_string(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
