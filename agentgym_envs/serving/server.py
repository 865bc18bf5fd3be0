"""``agentgym serve``: an OpenAI-compatible server for a local model.

Built on the standard library (``http.server.ThreadingHTTPServer``). Endpoints:

* ``GET /v1/models``: the one served model (with its ``weights_version``);
* ``POST /v1/chat/completions``: ``messages``, ``tools``, ``tool_choice``,
  ``response_format`` (decoding constrained to a JSON schema:
  :class:`~.schema.SchemaConstraint`), ``temperature``, ``top_p``, ``max_tokens``
  (or ``max_completion_tokens``), ``n``, ``seed``, ``stop``, ``logprobs``/``top_logprobs``,
  ``stream`` (with ``stream_options.include_usage``) and vLLM's ``return_token_ids``;
* ``POST /v1/completions``: the same sampling fields for ``prompt`` given as text or as
  token ids (one list of ints, or a list of them), with the legacy ``logprobs`` (an
  integer: alternatives per token); token in, token out for trainers;
* ``POST /v1/load_weights`` ``{"path": <model folder>}``: replace the weights in place
  with those of a Hugging Face folder of the same architecture (a trainer's
  checkpoint) and bump ``weights_version``. Loopback clients only.

Every POST must be JSON (``Content-Type: application/json``), name this server in its
``Host`` header and carry no foreign ``Origin``: what a web page can make a browser send
(a cross-site form, a DNS-rebinding page) is refused with 403 or 415 before the body is
read (see :mod:`.guard`). A body over ``max_body_bytes`` (``--max-body-bytes``,
8 MiB by default) is refused with 413 unread, and a prompt with more characters than the
context can hold is refused before it is tokenised.

Every choice says ``weights_version``, the version of the weights that sampled it: the
batcher reads it under the lock weight loads take, when the choice's batch runs (a
choice is one row of one batch, so it never mixes versions). A body's top-level
``weights_version`` is the oldest of its choices' (the rows of one request may run in
different batches); see :mod:`.reply` for streams.

Bad requests get a 4xx with an OpenAI-style ``{"error": {...}}`` body; the server
survives anything a request does.

Fairness: rows wait for a batch in turns, round-robin over clients (peer addresses) and
then over each client's requests, one row at a time, not first come first served: a
request for ``n=128`` long choices takes its share of each batch, and a short request
sent after it runs in the next batch instead of after all 128 rows (see
:class:`~.work_queue.FairQueue`).

Choices: each of the ``n`` choices is sampled independently, choice 0 with the request's
``seed`` and choice ``i`` with a seed derived from ``(seed, i)``, so a seeded request is
reproducible and its choice 0 is the ``n=1`` reply. Requests (and choices) that arrive
together are generated as one batch (:class:`~.engine.Batcher`), and a row's
sample depends on its own seed only, never on the batch.

Log-probabilities are those of the sampling distribution, ``log softmax(logits /
temperature)`` (temperature 0 is greedy and reports temperature-1 values), before
``top_p``: the values a trainer recomputes. With ``return_token_ids`` a chat reply
carries ``prompt_token_ids`` and each choice its ``token_ids`` (the end-of-turn token
included; a stop string cuts the ids after the token that completed it), as vLLM does.

Tools: when the chat template renders ``tools`` they go to the template; otherwise
(SmolLM2) they are listed in the system message. A tool call is read back from the
generated text into ``message.tool_calls`` with ``finish_reason="tool_calls"``.
``tool_choice``: ``"auto"``; ``"none"`` (the tools are not shown and no call is read);
``"required"`` or one named function: decoding is constrained so the reply starts as
``{"name": "<a tool>", "arguments": {`` and ends when its brackets close (see
:class:`~.engine.ToolCallConstraint`); a sampled reply whose arguments are still
not valid JSON is drawn again with a derived seed, up to :data:`REQUIRED_ATTEMPTS`
times, and after that (or at ``max_tokens``) it comes back as plain ``content``.

Streaming: server-sent events in OpenAI's chunk format, ending with ``data: [DONE]``.
Tokens go out as they are sampled; text is held back only to avoid splitting a
character or showing the start of a stop string. With tools offered, a choice's text
can only be told from a tool call once it is complete, so its content or ``tool_calls``
come in one chunk when it ends.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.extras import optional_imports
from agentgym_envs.policies.chat import derive_seed
from agentgym_envs.serving.api import BadRequest
from agentgym_envs.serving.engine import Batcher, RowEngine
from agentgym_envs.serving.guard import DEFAULT_MAX_BODY_BYTES
from agentgym_envs.serving.http_app import SOCKET_TIMEOUT_S, Handler, is_loopback

if TYPE_CHECKING:  # torch loads only when a server starts
    from agentgym_envs.policies.hf import LocalLM

__all__ = ["Batcher", "ChatServer", "is_loopback", "start_server"]

logger = logging.getLogger(__name__)


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
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        if max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
        super().__init__(address, Handler)
        self.lm, self.batcher, self.model_id = lm, batcher, model_id
        self.owns_lm = owns_lm
        self.created = int(time.time())
        self.seed = 0
        self.socket_timeout_s = SOCKET_TIMEOUT_S
        """How long a connection may stay silent while a request is read or a reply is
        written; then the handler answers 408 (or drops the reply) and frees its thread."""
        self.fingerprint = lm.fingerprint
        """The weights' fingerprint (``system_fingerprint``)."""
        self.max_body_bytes = max_body_bytes
        """The largest request body served; a larger one is refused unread (413)."""
        self.bound_host = str(address[0])
        """The host the server was bound to, as given (a ``Host`` header may name it)."""
        self.allowed_hosts = tuple(allowed_hosts)
        """Further host names a ``Host`` header may use (see :mod:`.guard`)."""
        self._context_chars: int | None = None
        self._count = 0
        self._count_lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def engine(self) -> RowEngine:
        """What generates the batches."""
        return self.batcher.engine

    @property
    def weights_version(self) -> int:
        """How many times :meth:`load_weights` replaced the weights (the batcher keeps
        the count, so each batch reads it under the lock the loads take)."""
        return self.batcher.weights_version

    @property
    def context_chars(self) -> int:
        """The most characters of text a prompt that fits the context can hold: no token
        decodes to more characters than the longest token string of the vocabulary
        (byte-level tokenizers write one character per byte), so text longer than
        ``context_length`` times that cannot fit, whatever its tokens."""
        if self._context_chars is None:
            vocab = self.lm.tokenizer.get_vocab()
            longest = max((len(token) for token in vocab), default=1)
            self._context_chars = self.lm.context_length * max(1, longest)
        return self._context_chars

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def next_seed(self) -> int:
        """A fresh seed for a request that brings none."""
        with self._count_lock:
            self._count += 1
            return derive_seed(self.seed, self._count)

    def load_weights(self, path: str) -> int:
        """Replace the served weights in place with a model folder's; the new version.

        The folder must hold a model of the same architecture (every tensor's name and
        shape must match); generation pauses while the tensors are copied, so no reply
        mixes two versions.

        Raises:
            BadRequest: the model was lent to the server, the folder is missing, or its
                weights do not fit.
        """
        if not self.owns_lm:
            raise BadRequest(
                "this server was lent its model (start_server(lm=...)) and never changes "
                "it; load the weights in the model's owner or start the server from a spec",
                status=409,
                code="model_lent",
            )
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            raise BadRequest(
                f"expected a Hugging Face model folder with config.json, got {path!r}",
                param="path",
            )
        with self._load_lock:
            state = _read_state(folder, self.lm)
            with self.batcher.new_weights() as version:  # no batch runs meanwhile
                self.lm.model.load_state_dict(state, strict=True)
                self.fingerprint = _fingerprint(folder)
            return version

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


def _read_state(folder: Path, lm: LocalLM) -> dict[str, Any]:
    """The tensors of a model folder, checked against the served model (names, shapes,
    tied embeddings) before anything is copied."""
    from transformers import AutoModelForCausalLM

    model = lm.model
    dtype = next(model.parameters()).dtype
    try:
        fresh = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise BadRequest(f"cannot load a model from {folder}: {exc}", param="path") from None
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    state = {name: tensor.to(lm.device) for name, tensor in fresh.state_dict().items()}
    current = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    given = {name: tuple(t.shape) for name, t in state.items()}
    if given != current or tied != bool(getattr(fresh.config, "tie_word_embeddings", False)):
        differ = sorted(set(given.items()) ^ set(current.items()))[:3]
        raise BadRequest(
            f"the weights in {folder} do not fit the served model (same architecture and "
            f"sizes expected; first differences: {differ}, tied embeddings served: {tied}); "
            "save the trained model with save_pretrained from the served one",
            param="path",
            code="weights_mismatch",
        )
    return state


def _fingerprint(folder: Path) -> str:
    from agentgym_envs.llm.models import weights_fingerprint

    return weights_fingerprint(str(folder))


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
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_hosts: Sequence[str] = (),
) -> tuple[ChatServer, str]:
    """Load a model and serve it in a background thread.

    Args:
        model_spec: ``"smollm2"``, a model folder or a ``.gguf`` file.
        host: the address to bind.
        port: the port (0 picks a free one).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` ...
        max_batch: the most rows (choices of requests) generated together.
        batch_wait_ms: how long a request waits for others to batch with.
        model_id: the model name clients use (default: ``model_spec``).
        seed: seeds requests that bring no ``seed``.
        lm: an already loaded model to serve (``model_spec`` then only names it); the
            caller keeps ownership (``server.close()`` does not free it).
        max_body_bytes: the largest request body served (a larger one gets 413 unread).
        allowed_hosts: host names clients may call the server by besides loopback
            names, the bound host and this machine's name (a container's service
            name, say); see :mod:`.guard`.

    Returns:
        ``(server, url)`` with ``url`` like ``http://127.0.0.1:8000/v1``. Call
        ``server.close()`` to stop.
    """
    with optional_imports("serving a local model"):  # the train extra: torch, transformers
        from agentgym_envs.policies.hf import LocalLM

    model = lm if lm is not None else LocalLM(model_spec, device=device)
    batcher = Batcher(RowEngine(model), max_batch=max_batch, wait_s=batch_wait_ms / 1000.0)
    try:
        server = ChatServer(
            (host, port),
            model,
            batcher,
            model_id or model_spec,
            lm is None,
            max_body_bytes=max_body_bytes,
            allowed_hosts=allowed_hosts,
        )
    except (OSError, ConfigError):
        batcher.close()
        if lm is None:
            model.close()
        raise
    server.seed = seed
    server.start()
    return server, server.url


def add_parser(sub: Any) -> None:
    """Register ``agentgym serve`` (imports no torch until the command runs)."""
    p = sub.add_parser(
        "serve",
        help="serve a local model over an OpenAI-compatible API (batched)",
        description="Serve a local model at /v1/chat/completions, /v1/completions (token-id "
        "prompts) and /v1/models until SIGINT or SIGTERM; POST /v1/load_weights {path} "
        "(loopback only) swaps in a checkpoint. Concurrent requests are generated as one "
        "batch.",
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
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help="refuse request bodies over N bytes, unread, with 413 "
        f"(default {DEFAULT_MAX_BODY_BYTES}: 8 MiB)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients call the server by, besides loopback names, the --host "
        "and this machine's name (e.g. a container's service name); repeatable",
    )
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
        max_body_bytes=args.max_body_bytes,
        allowed_hosts=args.allowed_host,
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
