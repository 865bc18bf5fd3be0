"""``agentgym serve``: an OpenAI-compatible chat-completions server for a local model.

Built on the standard library (``http.server.ThreadingHTTPServer``). Endpoints:

* ``GET /v1/models``: the one served model;
* ``POST /v1/chat/completions``: ``messages``, ``tools``, ``tool_choice``,
  ``temperature``, ``top_p``, ``max_tokens`` (or ``max_completion_tokens``), ``n=1``,
  ``seed`` and ``stop``; no streaming. Bad requests get a 400 with an OpenAI-style
  ``{"error": {...}}`` body.

Requests that arrive together are generated as one batch: a worker thread takes the
first waiting request, collects more for ``batch_wait_ms`` (up to ``max_batch``) and runs
one batched generate for all of them. That is what makes evaluation with many concurrent
slots fast.

Tools: when the chat template renders ``tools`` they go to the template; otherwise
(SmolLM2) they are listed in the system message. A tool call is then read back from the
generated text (a JSON object, or ``<tool_call>...</tool_call>``, or ``name(arg=...)``)
into ``message.tool_calls`` with ``finish_reason="tool_calls"``. ``tool_choice`` may be
``"none"``, ``"auto"``, ``"required"`` or one named function; the server does not
constrain decoding, so ``"required"`` cannot force a call.
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ClosedError
from agentgym_envs.policies.chat import derive_seed
from agentgym_envs.policies.serve_api import (
    BadRequest,
    ChatRequest,
    completion_body,
    error_body,
    parse_request,
    template_messages,
)

if TYPE_CHECKING:  # torch loads only when a server starts
    from agentgym_envs.policies.hf import Generation, GenOptions, LocalLM

    _Job = tuple[list[int], GenOptions, Future[Generation]]  # prompt, options, reply

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 << 20
REQUEST_TIMEOUT_S = 900.0


class Batcher:
    """Collects concurrent generation requests into batched ``generate`` calls.

    Args:
        lm: the model.
        max_batch: the most requests generated together.
        wait_s: how long the first request of a batch waits for company.
    """

    def __init__(self, lm: LocalLM, max_batch: int = 8, wait_s: float = 0.005) -> None:
        self.lm, self.max_batch, self.wait_s = lm, max(1, max_batch), wait_s
        self.batch_sizes: list[int] = []
        """The size of every batch generated so far (for stats and tests)."""
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._closed = False
        self._busy = threading.Lock()  # held while generating
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], options: GenOptions) -> Future[Generation]:
        """Queue one prompt; the future holds its :class:`Generation`."""
        future: Future[Generation] = Future()
        with self._pending_lock:
            if self._closed:
                raise ClosedError(
                    "the generation server is shutting down and takes no new prompts; "
                    "start a new one"
                )
            self._pending += 1
        self._queue.put((prompt, options, future))
        return future

    @property
    def pending(self) -> int:
        """Requests submitted and not answered yet."""
        with self._pending_lock:
            return self._pending

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the model: requests queue up meanwhile and go out as one batch after."""
        with self._busy:
            yield

    def close(self) -> None:
        """Finish the queued requests and stop the worker thread (idempotent)."""
        with self._pending_lock:
            self._closed = True
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs = [first]
            deadline = time.monotonic() + self.wait_s
            stop = self._collect(jobs, deadline)
            with self._busy:
                stop = self._collect(jobs, None) or stop  # more may have come meanwhile
                self._generate(jobs)
            if stop:
                return

    def _collect(self, jobs: list[_Job], deadline: float | None) -> bool:
        """Add waiting jobs up to ``max_batch`` (until ``deadline``); True on stop."""
        while len(jobs) < self.max_batch:
            try:
                remaining = 0.0 if deadline is None else deadline - time.monotonic()
                job = (
                    self._queue.get(timeout=remaining)
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                return False
            if job is None:
                return True
            jobs.append(job)
        return False

    def _generate(self, jobs: list[_Job]) -> None:
        live = [job for job in jobs if job[2].set_running_or_notify_cancel()]
        try:
            if live:
                self.batch_sizes.append(len(live))
                results = self.lm.generate([j[0] for j in live], [j[1] for j in live])
                for job, result in zip(live, results, strict=True):
                    job[2].set_result(result)
        except Exception as exc:  # every waiting request learns about it
            logger.exception("batched generation failed")
            for job in live:
                if not job[2].done():
                    job[2].set_exception(exc)
        finally:
            with self._pending_lock:
                self._pending -= len(jobs)


class ChatServer(ThreadingHTTPServer):
    """The HTTP server; ``close()`` stops serving, the batcher and frees the model."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        lm: LocalLM,
        batcher: Batcher,
        model_id: str,
        owns_lm: bool = True,
    ) -> None:
        super().__init__(address, _Handler)
        self.lm, self.batcher, self.model_id = lm, batcher, model_id
        self.owns_lm = owns_lm
        self.created = int(time.time())
        self.seed = 0
        self._count = 0
        self._count_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def next_seed(self) -> int:
        """A fresh seed for a request that brings none."""
        with self._count_lock:
            self._count += 1
            return derive_seed(self.seed, self._count)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self.serve_forever, args=(0.1,), name="serve", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving, finish queued generations and free the model if the server
        loaded it (idempotent)."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
        self.batcher.close()
        if self.owns_lm:
            self.lm.close()


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    server_version = "agentgym-serve"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = {
                "id": self.server.model_id,
                "object": "model",
                "created": self.server.created,
                "owned_by": "agentgym",
            }
            self._send(200, {"object": "list", "data": [model]})
        elif self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, error_body(f"no route GET {self.path}", "not_found_error"))

    def do_POST(self) -> None:
        try:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, error_body(f"no route POST {self.path}", "not_found_error"))
                return
            self._send(200, self._complete(self._body()))
        except BadRequest as exc:
            self._send(exc.status, error_body(str(exc), exc.kind, exc.param, exc.code))
        except Exception as exc:  # the server must survive anything a request does
            logger.exception("chat completion failed")
            self._send(
                500, error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error")
            )

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise BadRequest("Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise BadRequest(
                f"the body has {length} bytes; the limit is {MAX_BODY_BYTES}", status=413
            )
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the body is not valid JSON: {exc}") from None

    def _complete(self, body: Any) -> dict[str, Any]:
        from agentgym_envs.policies.hf import GenOptions

        server, lm = self.server, self.server.lm
        request: ChatRequest = parse_request(body, server.model_id)
        messages = template_messages(request.messages, request.tools, lm.template_tools)
        prompt = lm.prompt_ids(messages, request.tools)
        room = lm.context_length - len(prompt)
        max_new = request.max_tokens if request.max_tokens is not None else min(256, room)
        if not 1 <= max_new <= room:
            raise BadRequest(
                f"the prompt has {len(prompt)} tokens and max_tokens is {max_new}; the "
                f"model's context is {lm.context_length} tokens. Shorten the messages.",
                param="messages",
                code="context_length_exceeded",
            )
        seed = request.seed if request.seed is not None else server.next_seed()
        options = GenOptions(max_new, request.temperature, request.top_p, seed, request.stop)
        result = server.batcher.submit(prompt, options).result(timeout=REQUEST_TIMEOUT_S)
        return completion_body(
            server.model_id,
            lm.fingerprint,
            result.text,
            result.finish,
            (result.tokens_in, result.tokens_out),
            request.tools,
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up
            logger.debug("client went away before the reply")


def start_server(
    model_spec: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    device: str = "auto",
    max_batch: int = 8,
    batch_wait_ms: float = 5.0,
    model_id: str | None = None,
    seed: int = 0,
    lm: LocalLM | None = None,
) -> tuple[ChatServer, str]:
    """Load a model and serve it in a background thread.

    Args:
        model_spec: ``"smollm2"``, a model folder or a ``.gguf`` file.
        host: the address to bind.
        port: the port (0 picks a free one).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` ...
        max_batch: the most requests generated together.
        batch_wait_ms: how long a request waits for others to batch with.
        model_id: the model name clients use (default: ``model_spec``).
        seed: seeds requests that bring no ``seed``.
        lm: an already loaded model to serve (``model_spec`` then only names it); the
            caller keeps ownership (``server.close()`` does not free it).

    Returns:
        ``(server, url)`` with ``url`` like ``http://127.0.0.1:8000/v1``. Call
        ``server.close()`` to stop.
    """
    from agentgym_envs.policies.hf import LocalLM

    model = lm if lm is not None else LocalLM(model_spec, device=device)
    batcher = Batcher(model, max_batch=max_batch, wait_s=batch_wait_ms / 1000.0)
    try:
        server = ChatServer((host, port), model, batcher, model_id or model_spec, lm is None)
    except OSError:
        batcher.close()
        raise
    server.seed = seed
    server.start()
    return server, server.url


def add_parser(sub: Any) -> None:
    """Register ``agentgym serve`` (imports no torch until the command runs)."""
    p = sub.add_parser(
        "serve",
        help="serve a local model over an OpenAI-compatible API (batched)",
        description="Serve a local model at /v1/chat/completions and /v1/models until "
        "SIGINT or SIGTERM. Concurrent requests are generated as one batch.",
    )
    p.add_argument(
        "--model", default="smollm2", help="smollm2 (default), a model folder or a .gguf file"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:1 ...")
    p.add_argument(
        "--max-batch", type=int, default=8, help="most requests generated together (default 8)"
    )
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        help="how long a request waits for others to batch with (default 5)",
    )
    p.add_argument("--name", default=None, help="model id clients send (default: the --model)")
    p.add_argument("--seed", type=int, default=0, help="seed of requests without one (default 0)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the server until SIGINT or SIGTERM."""
    from rich.console import Console

    console = Console()
    logging.basicConfig(level=logging.WARNING)
    server, url = start_server(
        args.model,
        args.host,
        args.port,
        device=args.device,
        max_batch=args.max_batch,
        batch_wait_ms=args.batch_wait_ms,
        model_id=args.name,
        seed=args.seed,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console.print(
        f"Serving {server.model_id!r} at {url} (device {server.lm.device}, max batch "
        f"{server.batcher.max_batch}); OpenAI spec: openai:{url}#{server.model_id}",
        soft_wrap=True,
    )
    while not stop.wait(0.5):  # a timed wait keeps the main thread responsive to signals
        pass
    console.print("Shutting down")
    server.close()
    return 0
