"""The request handler of ``agentgym serve``: routes, chat and text completions (plain
and streamed) and the weight-loading endpoint. See :mod:`.serve` for what each endpoint
accepts."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import SchemaError
from agentgym_envs.llm.generation import SamplingSettings
from agentgym_envs.policies.chat import derive_seed
from agentgym_envs.serving.api import (
    BadRequest,
    ChatRequest,
    Sampling,
    error_body,
    parse_completion_request,
    parse_request,
    prompt_chars,
    template_messages,
)
from agentgym_envs.serving.engine import Batcher, Reply, RowJob, RowResult
from agentgym_envs.serving.guard import check_post
from agentgym_envs.serving.reply import (
    Chunks,
    chat_body,
    chat_choice,
    chat_delta,
    chat_logprobs,
    stream_tool_calls,
    text_body,
    text_choice,
    text_logprobs,
    tool_calls,
)
from agentgym_envs.serving.stream import GONE_POLL_S, stream_pieces

if TYPE_CHECKING:
    from agentgym_envs.serving.server import ChatServer

logger = logging.getLogger(__name__)

DROP_BODY_BYTES = 64 << 10
"""A refused request's body up to this size is read and dropped (keeping the
connection); a larger one closes the connection unread."""
REQUEST_TIMEOUT_S = 900.0
SOCKET_TIMEOUT_S = 60.0
"""How long a connection may stay silent while a request is read or a reply written
(a client that announces more body than it sends is answered 408, not waited on)."""
REQUIRED_ATTEMPTS = 3
"""Draws of a sampled ``tool_choice="required"`` reply before it is returned as text."""
CHAT_MAX_TOKENS = 256
"""Reply length of a chat request without ``max_tokens`` (or the room left, if less)."""
TEXT_MAX_TOKENS = 16
"""Reply length of a completions request without ``max_tokens`` (OpenAI's default)."""


def is_loopback(host: str) -> bool:
    """Whether a client address is this machine (``127.0.0.0/8``, ``::1``, or IPv4
    loopback mapped into IPv6)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def _max_new(
    server: ChatServer, prompt: Sequence[int], asked: int | None, default: int, param: str
) -> int:
    room = server.lm.context_length - len(prompt)
    max_new = asked if asked is not None else min(default, room)
    if not 1 <= max_new <= room:
        raise BadRequest(
            f"the prompt has {len(prompt)} tokens and max_tokens is {max_new}; the "
            f"model's context is {server.lm.context_length} tokens. Shorten the prompt.",
            param=param,
            code="context_length_exceeded",
        )
    return max_new


def _check_chars(server: ChatServer, chars: int, param: str) -> None:
    """Refuse text that cannot fit the context before it is tokenised (a huge prompt
    costs seconds and gigabytes to tokenise only to be refused after)."""
    if chars > server.context_chars:
        raise BadRequest(
            f"the prompt has {chars} characters; the model's context of "
            f"{server.lm.context_length} tokens holds at most {server.context_chars} "
            "characters (no token of its vocabulary is longer than "
            f"{server.context_chars // server.lm.context_length}). Shorten the prompt.",
            param=param,
            code="context_length_exceeded",
        )


def _settings(server: ChatServer, sampling: Sampling) -> list[SamplingSettings]:
    """One setting per choice: choice 0 uses the seed, choice i one derived from it."""
    seed = sampling.seed if sampling.seed is not None else server.next_seed()
    return [
        SamplingSettings(
            sampling.temperature, sampling.top_p, seed if i == 0 else derive_seed(seed, i)
        )
        for i in range(sampling.n)
    ]


def _results(
    batcher: Batcher, jobs: list[RowJob], gone: Callable[[], bool] | None
) -> list[RowResult]:
    """Generate the jobs together and wait for them. They are cancelled if ``gone``
    says the client left (asked every :data:`GONE_POLL_S` seconds) or
    :data:`REQUEST_TIMEOUT_S` passes.

    Raises:
        ConnectionAbortedError: the client went away.
        TimeoutError: the rows took longer than :data:`REQUEST_TIMEOUT_S`.
    """
    cancel = threading.Event()
    jobs = [replace(job, cancel=cancel) for job in jobs]
    futures = batcher.submit(jobs)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the reply took longer than {REQUEST_TIMEOUT_S:.0f} s")
            poll = min(left, GONE_POLL_S) if gone is not None else left
            if not concurrent.futures.wait(futures, timeout=poll).not_done:
                return [future.result() for future in futures]
            if gone is not None and gone():
                raise ConnectionAbortedError("the client went away")
    finally:
        batcher.cancel(jobs, futures)  # rows still running when we stop waiting


def _replies(
    server: ChatServer,
    jobs: list[RowJob],
    tools: Sequence[Mapping[str, Any]],
    gone: Callable[[], bool] | None = None,
) -> list[Reply]:
    """Generate the jobs together; a constrained sampled reply that holds no valid call
    is drawn again (up to :data:`REQUIRED_ATTEMPTS` draws in all). The rows are
    cancelled when the client leaves (``gone``)."""
    engine = server.engine
    replies = [
        engine.reply(job, result)
        for job, result in zip(jobs, _results(server.batcher, jobs, gone), strict=True)
    ]
    for attempt in range(1, REQUIRED_ATTEMPTS):
        redo = [
            i
            for i, (job, reply) in enumerate(zip(jobs, replies, strict=True))
            if job.tool_names
            and job.settings.temperature > 0
            and reply.finish == "stop"
            and not tool_calls(reply.text, tools)
        ]
        if not redo:
            break
        again = [
            replace(
                jobs[i],
                settings=replace(
                    jobs[i].settings, seed=derive_seed(jobs[i].settings.seed, attempt)
                ),
            )
            for i in redo
        ]
        results = _results(server.batcher, again, gone)
        for i, job, result in zip(redo, again, results, strict=True):
            replies[i] = engine.reply(job, result)
    return replies


def _grammar(server: ChatServer, schema: Mapping[str, Any]) -> str:
    """The compiled grammar of a request's ``response_format`` schema (a 400 when the
    server cannot constrain decoding to it)."""
    try:
        return server.engine.grammars.compile(schema)
    except SchemaError as exc:
        raise BadRequest(str(exc), param="response_format") from None


class Handler(BaseHTTPRequestHandler):
    """Serves one HTTP request of a :class:`~.serve.ChatServer`."""

    server: ChatServer
    server_version = "agentgym-serve"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.socket_timeout_s)  # a stalled client frees it

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = {
                "id": self.server.model_id,
                "object": "model",
                "created": self.server.created,
                "owned_by": "agentgym",
                "weights_version": self.server.weights_version,
            }
            self._send(200, {"object": "list", "data": [model]})
        elif self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, error_body(f"no route GET {self.path}", "not_found_error"))

    def do_POST(self) -> None:
        routes = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completions,
            "/v1/load_weights": self._load_weights,
        }
        route = routes.get(self.path.rstrip("/"))
        try:
            if route is None:
                self._drop_body()
                self._send(404, error_body(f"no route POST {self.path}", "not_found_error"))
                return
            route(self._body(self._checked_length()))
        except BadRequest as exc:
            self._send(exc.status, error_body(str(exc), exc.kind, exc.param, exc.code))
        except ConnectionError:  # the client gave up (its rows were cancelled)
            logger.debug("client went away before the reply ended")
        except Exception as exc:  # the server must survive anything a request does
            logger.exception("request to %s failed", self.path)
            self._send(
                500, error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error")
            )

    def _checked_length(self) -> int:
        """The body's length, once its headers passed :func:`~.guard.check_post`
        (origin, host, JSON type, size); a refused body is never read whole."""
        server = self.server
        try:
            return check_post(
                self.headers, server.bound_host, server.allowed_hosts, server.max_body_bytes
            )
        except BadRequest:
            self._drop_body()
            raise

    def _drop_body(self) -> None:
        """Skip the body of a request refused before it was read: a small one is read
        and dropped, so the connection stays usable; after a larger one (or one whose
        end is unknown) the connection closes."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= DROP_BODY_BYTES:
            self.close_connection = True
            return
        try:
            if len(self.rfile.read(length)) < length:
                self.close_connection = True
        except (TimeoutError, OSError):
            self.close_connection = True

    def _body(self, length: int) -> Any:
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise BadRequest(
                f"the body did not arrive: Content-Length is {length} and nothing came for "
                f"{self.server.socket_timeout_s:g} s; send the whole body it announces",
                status=408,
            ) from None
        if len(raw) < length:
            self.close_connection = True
            raise BadRequest(f"the body ended after {len(raw)} of {length} bytes")
        try:
            return json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the body is not valid JSON: {exc}") from None

    # -- chat completions --------------------------------------------------------------------

    def _chat(self, body: Any) -> None:
        server, lm = self.server, self.server.lm
        request = parse_request(body, server.model_id)
        _check_chars(server, prompt_chars(request), "messages")
        messages = template_messages(request.messages, request.tools, lm.template_tools)
        prompt = lm.prompt_ids(messages, request.tools)
        max_new = _max_new(server, prompt, request.max_tokens, CHAT_MAX_TOKENS, "messages")
        top = request.top_logprobs if request.logprobs else 0
        client = str(self.client_address[0])
        grammar = _grammar(server, request.schema) if request.schema is not None else None
        jobs = [
            RowJob(
                prompt,
                max_new,
                settings,
                request.stop,
                top,
                request.forced,
                grammar,
                client=client,
            )
            for settings in _settings(server, request.sampling)
        ]
        if request.sampling.stream:
            self._stream_chat(request, prompt, jobs)
            return
        replies = _replies(server, jobs, request.tools, self._client_gone)
        failed = next((r.failed for r in replies if r.failed), "")
        if failed:  # a stream says finish_reason "error" instead (its status is sent)
            raise BadRequest(
                f"decoding could not follow the response_format schema: {failed}",
                param="response_format",
            )
        choices = [self._chat_choice(i, reply, request) for i, reply in enumerate(replies)]
        ids = request.sampling.return_token_ids
        tokens = (len(prompt), sum(len(r.ids) for r in replies))
        self._send(
            200,
            chat_body(
                server.model_id,
                server.fingerprint,
                choices,
                tokens,
                prompt_ids=prompt if ids else None,
                weights_version=min(r.weights_version for r in replies),
            ),
        )

    def _token_text(self, token: int) -> str:
        return str(self.server.lm.tokenizer.decode([token]))

    def _chat_choice(self, index: int, reply: Reply, request: ChatRequest) -> dict[str, Any]:
        logprobs = (
            chat_logprobs(reply.ids, reply.logprobs, reply.top, self._token_text)
            if request.logprobs
            else None
        )
        ids = reply.ids if request.sampling.return_token_ids else None
        return chat_choice(
            index,
            reply.text,
            reply.finish,
            request.tools,
            logprobs=logprobs,
            token_ids=ids,
            weights_version=reply.weights_version,
        )

    def _stream_chat(self, request: ChatRequest, prompt: list[int], jobs: list[RowJob]) -> None:
        server, sampling = self.server, request.sampling
        chunks = Chunks(True, server.model_id, server.fingerprint)
        self._start_stream()
        head: dict[str, Any] = {"prompt_token_ids": prompt} if sampling.return_token_ids else {}
        for i in range(len(jobs)):
            role = chat_delta(i, {"role": "assistant", "content": ""})
            self._event(chunks.of([role], **(head if i == 0 else {})))
        try:
            if request.tools:  # a call is told from text only once complete
                out = self._stream_whole_replies(request, jobs, chunks)
            else:
                out = self._stream_chat_tokens(request, jobs, chunks)
            if sampling.include_usage:
                self._event(chunks.usage((len(prompt), out)))
        except ConnectionError:  # the client left: no one to tell
            raise
        except Exception as exc:  # headers are out: the error becomes an event
            logger.exception("streamed chat completion failed")
            self._event(error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error"))
        self._end_stream()

    def _stream_whole_replies(
        self, request: ChatRequest, jobs: list[RowJob], chunks: Chunks
    ) -> int:
        """Each choice in one chunk (content or tool calls) and its finish; tokens out."""
        out = 0
        for i, reply in enumerate(_replies(self.server, jobs, request.tools, self._client_gone)):
            out += len(reply.ids)
            choice = self._chat_choice(i, reply, request)
            calls = choice["message"].get("tool_calls")
            delta = {"tool_calls": stream_tool_calls(calls)} if calls else {"content": reply.text}
            version = reply.weights_version
            whole = chat_delta(
                i,
                delta,
                logprobs=choice["logprobs"],
                token_ids=choice.get("token_ids"),
                weights_version=version,
            )
            self._event(chunks.of([whole], version))
            end = chat_delta(i, {}, choice["finish_reason"], weights_version=version)
            self._event(chunks.of([end], version))
        return out

    def _stream_chat_tokens(self, request: ChatRequest, jobs: list[RowJob], chunks: Chunks) -> int:
        """A chunk per sampled token (text, log-probs, ids as asked); tokens out."""
        sampling, out = request.sampling, 0
        server = self.server
        pieces = stream_pieces(
            server.engine, server.batcher, jobs, REQUEST_TIMEOUT_S, self._client_gone
        )
        with closing(pieces):  # closing it early (the client left) cancels the rows
            for piece in pieces:
                out += len(piece.ids)
                detail = bool(piece.ids) and (request.logprobs or sampling.return_token_ids)
                if not (piece.text or piece.finish or detail):
                    continue
                logprobs = (
                    chat_logprobs(piece.ids, piece.logprobs, piece.top, self._token_text)
                    if request.logprobs and piece.ids
                    else None
                )
                delta = {"content": piece.text} if piece.text else {}
                ids = piece.ids if sampling.return_token_ids else None
                version = piece.weights_version
                choice = chat_delta(
                    piece.index,
                    delta,
                    piece.finish,
                    logprobs=logprobs,
                    token_ids=ids,
                    weights_version=version,
                )
                self._event(chunks.of([choice], version))
        return out

    # -- text completions (token ids in, token ids out) ----------------------------------------

    def _completions(self, body: Any) -> None:
        server = self.server
        request = parse_completion_request(body, server.model_id)
        sampling = request.sampling
        vocab = server.engine.vocab_size
        for text in (p for p in request.prompts if isinstance(p, str)):
            _check_chars(server, len(text), "prompt")  # every one, before any is tokenised
        jobs: list[RowJob] = []
        for prompt in request.prompts:
            ids = (
                prompt
                if isinstance(prompt, list)
                else list(server.lm.tokenizer(prompt)["input_ids"])
            )
            if any(t >= vocab for t in ids):
                raise BadRequest(
                    f"token ids must be below the vocabulary size {vocab}, got {max(ids)}",
                    param="prompt",
                )
            max_new = _max_new(server, ids, sampling.max_tokens, TEXT_MAX_TOKENS, "prompt")
            top = request.logprobs or 0
            client = str(self.client_address[0])
            jobs += [
                RowJob(ids, max_new, s, sampling.stop, top, client=client)
                for s in _settings(server, sampling)
            ]
        prompt_tokens = sum(len(j.prompt) for j in jobs[:: sampling.n])
        if sampling.stream:
            self._stream_text(request.logprobs, sampling, jobs, prompt_tokens)
            return
        replies = _replies(server, jobs, (), self._client_gone)
        choices = [
            text_choice(
                i,
                reply.text,
                reply.finish,
                logprobs=self._text_logprobs(
                    request.logprobs, reply.ids, reply.logprobs, reply.top
                ),
                token_ids=reply.ids if sampling.return_token_ids else None,
                prompt_ids=job.prompt if sampling.return_token_ids else None,
                weights_version=reply.weights_version,
            )
            for i, (job, reply) in enumerate(zip(jobs, replies, strict=True))
        ]
        tokens = (prompt_tokens, sum(len(r.ids) for r in replies))
        oldest = min(r.weights_version for r in replies)
        self._send(200, text_body(server.model_id, server.fingerprint, choices, tokens, oldest))

    def _text_logprobs(
        self, wanted: int | None, ids: list[int], logprobs: list[float], top: Any, offset: int = 0
    ) -> dict[str, Any] | None:
        if wanted is None or not ids:
            return None
        return text_logprobs(ids, logprobs, top, self._token_text, offset)

    def _stream_text(
        self, wanted: int | None, sampling: Sampling, jobs: list[RowJob], prompt_tokens: int
    ) -> None:
        server = self.server
        chunks = Chunks(False, server.model_id, server.fingerprint)
        self._start_stream()
        if sampling.return_token_ids:
            for i, job in enumerate(jobs):
                self._event(chunks.of([text_choice(i, "", None, prompt_ids=job.prompt)]))
        out, offsets = 0, [0] * len(jobs)
        try:
            pieces = stream_pieces(
                server.engine, server.batcher, jobs, REQUEST_TIMEOUT_S, self._client_gone
            )
            with closing(pieces):  # closing it early (the client left) cancels the rows
                for piece in pieces:
                    out += len(piece.ids)
                    detail = bool(piece.ids) and (wanted is not None or sampling.return_token_ids)
                    if not (piece.text or piece.finish or detail):
                        continue
                    logprobs = self._text_logprobs(
                        wanted, piece.ids, piece.logprobs, piece.top, offsets[piece.index]
                    )
                    offsets[piece.index] += len(piece.text)
                    ids = piece.ids if sampling.return_token_ids else None
                    version = piece.weights_version
                    choice = text_choice(
                        piece.index,
                        piece.text,
                        piece.finish,
                        logprobs=logprobs,
                        token_ids=ids,
                        weights_version=version,
                    )
                    self._event(chunks.of([choice], version))
            if sampling.include_usage:
                self._event(chunks.usage((prompt_tokens, out)))
        except ConnectionError:  # the client left: no one to tell
            raise
        except Exception as exc:
            logger.exception("streamed completion failed")
            self._event(error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error"))
        self._end_stream()

    # -- weights -----------------------------------------------------------------------------

    def _load_weights(self, body: Any) -> None:
        if not is_loopback(str(self.client_address[0])):
            raise BadRequest(
                "load_weights is served to loopback clients only (127.0.0.1, ::1): call it "
                "from the server's own machine",
                status=403,
                kind="permission_error",
            )
        path = body.get("path") if isinstance(body, dict) else None
        if not isinstance(path, str) or not path:
            raise BadRequest('the body must be {"path": "<model folder>"}', param="path")
        version = self.server.load_weights(path)
        self._send(200, {"weights_version": version, "system_fingerprint": self.server.fingerprint})

    # -- output ------------------------------------------------------------------------------

    def _client_gone(self) -> bool:
        """Whether the client closed the connection while its reply is generated: it
        sends nothing after its request, so a readable socket that yields no byte
        means it left (a pipelined next request would be bytes: not gone).

        ``poll``, not ``select``: ``select`` refuses descriptors of 1024 or more (a busy
        server has them), and such a refusal is no sign that the client left."""
        fd = self.connection.fileno()
        if fd < 0:  # closed on our side
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        try:
            events = poller.poll(0)
            if not events:
                return False
            if events[0][1] & select.POLLNVAL:  # the descriptor is no longer open
                return True
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:  # reset by the client
            return True

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):  # the client gave up
            self.close_connection = True
            logger.debug("client went away before the reply")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
