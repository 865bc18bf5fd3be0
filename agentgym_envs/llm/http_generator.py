"""An OpenAI-compatible HTTP backend for the generation interface (no torch here).

:class:`HttpGenerator` implements :class:`~agentgym_envs.llm.generation.Generator` against
any server whose ``/v1/completions`` endpoint takes a prompt as token ids and returns
the sampled token ids with their log-probabilities: vLLM (0.10.2 and later, which
returns ``token_ids`` when asked with ``return_token_ids``) and ``agentgym serve``.
Each prompt is one request (they go out concurrently; the server batches them):

.. code-block:: json

    {"model": "...", "prompt": [ids], "max_tokens": n, "temperature": t, "top_p": p,
     "seed": s, "logprobs": 0, "return_token_ids": true}

and the reply's first choice gives ``token_ids``, ``logprobs.token_logprobs`` and
``finish_reason`` (``"stop"``: the sample ended its turn).

The log-probabilities must be those of the sampling distribution,
``log softmax(logits / temperature)`` before ``top_p`` (the generation contract).
``agentgym serve`` reports exactly that. vLLM reports raw (temperature-1) values by
default: start it with ``--logprobs-mode processed_logprobs`` when sampling at another
temperature, and keep ``top_p`` at 1 (vLLM's processed values are after its nucleus).

Requests go through :class:`~agentgym_envs.llm.http_client.JsonHttpClient` (retries
with backoff on transient failures); its failures are split by who must act:

* :class:`GenerationServerError`: the server is unreachable, timed out, answered 5xx or
  429 after the retries, or returned no token ids. The environment side broke, not the
  policy: a rollout should end the episode as ``env_error``;
* :class:`GenerationRequestError`: the server refused the request (other 4xx, such as a
  prompt longer than the context): the caller's mistake.

Weights: against ``agentgym serve``, :meth:`HttpGenerator.load_weights` pushes a
checkpoint folder (``POST /v1/load_weights``, loopback only; sent once, never retried:
a load is not idempotent) and every reply says which weights produced each choice, so
:attr:`HttpGenerator.weights_version` follows the server. Other
servers do not report versions: after updating their weights (restart, or the server's
own reload mechanism), set ``generator.weights_version`` yourself.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym_envs.core.errors import AgentGymError, ArgumentError, ClosedError, ConfigError
from agentgym_envs.llm.generation import Sample, SamplingSettings
from agentgym_envs.llm.http_client import HttpCallError, JsonHttpClient

logger = logging.getLogger(__name__)

_SEED_RANGE = 2**31  # many servers take only 32-bit seeds
OWNED_FIELDS = frozenset(
    {
        # the request and the reply the generator reads
        *("model", "prompt", "n", "best_of", "echo", "suffix", "stream", "stream_options"),
        *("logprobs", "top_logprobs", "prompt_logprobs", "return_token_ids"),
        *("max_tokens", "max_completion_tokens", "min_tokens", "ignore_eos"),
        *("stop", "stop_token_ids", "include_stop_str_in_output"),
        # the sampling distribution: settings, or knobs the log-prob contract excludes
        *("temperature", "top_p", "seed", "top_k", "min_p", "use_beam_search", "logit_bias"),
        *("presence_penalty", "frequency_penalty", "repetition_penalty"),
    }
)
"""Request fields :class:`HttpGenerator` sets or that change what is sampled: samples
and log-probs must follow :attr:`HttpGenerator.settings`, so ``extra_body`` may not
set them."""


class GenerationServerError(AgentGymError, RuntimeError):
    """The generation server failed: unreachable, timed out, 5xx or 429 after retries,
    or a reply without token ids. An environment-side failure (``env_error``), never the
    policy's; ``status`` is the last HTTP status (None when there was no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GenerationRequestError(AgentGymError, ValueError):
    """The generation server refused a request (4xx other than 408/429): fix the request
    (prompt length, model name, token ids); ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class HttpGenerator:
    """Samples from an OpenAI-compatible server that returns token ids and log-probs.

    Implements :class:`~agentgym_envs.llm.generation.Generator` (see the module
    docstring for the wire format and what each server needs).

    Args:
        base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the server serves.
        temperature: 0 is greedy decoding.
        top_p: nucleus mass in (0, 1].
        seed: seeds the samples: request ``k`` of call ``c`` gets a seed derived from
            ``(seed, c, k)``, so two generators with the same seed draw the same samples.
        timeout_s: how long one request may take.
        retries: extra attempts after a connection failure, timeout, 5xx or 429.
        concurrency: requests in flight at once.
        api_key: sent as a bearer token (default: ``$OPENAI_API_KEY`` if set).
        weights_version: the version of the weights the server holds now.
        extra_body: more fields for every request that leave sampling alone (e.g.
            vLLM's ``{"priority": 1}``); none of :data:`OWNED_FIELDS`.
        load_timeout_s: how long :meth:`load_weights` waits for the server (a load
            waits for the running batch, then reads and copies the checkpoint).

    Raises:
        ConfigError: bad sampling settings, a ``base_url`` that is not http(s),
            non-positive ``timeout_s``/``load_timeout_s``/``concurrency``, or an
            ``extra_body`` field the generator owns.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        timeout_s: float = 120.0,
        retries: int = 2,
        concurrency: int = 16,
        api_key: str | None = None,
        weights_version: int = 0,
        extra_body: dict[str, Any] | None = None,
        load_timeout_s: float = 900.0,
    ) -> None:
        self._settings = SamplingSettings(temperature, top_p, seed)  # validates them
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout_s <= 0 or load_timeout_s <= 0 or concurrency < 1 or retries < 0:
            raise ConfigError(
                "expected timeout_s > 0, load_timeout_s > 0, concurrency >= 1 and "
                f"retries >= 0, got timeout_s={timeout_s}, load_timeout_s={load_timeout_s}, "
                f"concurrency={concurrency}, retries={retries}"
            )
        owned = sorted(OWNED_FIELDS.intersection(extra_body or {}))
        if owned:
            raise ConfigError(
                f"extra_body may not set {', '.join(owned)}: the generator owns these "
                "fields, and samples and log-probs must follow generator.settings. Pass "
                "temperature, top_p and seed to HttpGenerator itself; other sampling knobs "
                "(top_k, penalties, stop) are outside the generation contract; keep "
                "extra_body for fields that leave sampling alone"
            )
        self.base_url, self.model = base_url.rstrip("/"), model
        self.timeout_s, self.retries, self.load_timeout_s = timeout_s, retries, load_timeout_s
        self.extra_body = dict(extra_body or {})
        self.weights_version = weights_version
        """The version of the weights that sample: the server's when it reports one
        (``agentgym serve``), else what you set after updating the server's weights."""
        self.tokens_generated = 0
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._client = JsonHttpClient(
            self.base_url, api_key=key, timeout_s=timeout_s, retries=retries, max_backoff_s=8.0
        )
        self._calls = 0
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="http-gen")
        self._closed = False

    @property
    def settings(self) -> SamplingSettings:
        """Temperature, nucleus mass and seed of every request."""
        return self._settings

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        """Sample a continuation of each prompt, at most ``max_new[i]`` tokens each.

        Args:
            prompts: Token ids of each prompt.
            max_new: The token limit of each continuation.
            rows: Ignored: a server keeps its own prefix cache (vLLM's automatic prefix
                caching finds a slot's earlier turns by their tokens).

        Raises:
            GenerationServerError: the server failed (see the module docstring).
            GenerationRequestError: the server refused a request.
            ArgumentError: ``prompts`` and ``max_new`` differ in length.
            ClosedError: the generator was closed.
        """
        if self._closed:
            raise ClosedError("this HttpGenerator was closed; make a new one")
        if len(prompts) != len(max_new) or (rows is not None and len(rows) != len(prompts)):
            raise ArgumentError(
                "expected one max_new (and one row, if rows are given) per prompt, got "
                f"{len(prompts)} prompts and {len(max_new)} max_new"
            )
        self._calls += 1
        bodies = [
            self._body(prompt, limit, self._calls, k)
            for k, (prompt, limit) in enumerate(zip(prompts, max_new, strict=True))
        ]
        futures = [self._pool.submit(self._sample, b) if b else None for b in bodies]
        results = [f.result() if f is not None else (Sample([], [], False), None) for f in futures]
        versions = {v for _, v in results if v is not None}
        if versions:
            if len(versions) > 1:
                logger.warning("one call sampled with weights versions %s", sorted(versions))
            self.weights_version = min(versions)  # the oldest weights that sampled
        samples = [sample for sample, _ in results]
        self.tokens_generated += sum(len(s.ids) for s in samples)
        return samples

    def load_weights(self, path: str) -> int:
        """Ask ``agentgym serve`` to load a checkpoint folder (same architecture); the
        server's new weights version, which :attr:`weights_version` takes.

        Only ``agentgym serve`` has this endpoint (and only for loopback clients); for
        another server, update its weights its own way and set :attr:`weights_version`.
        The request is sent once and waits up to ``load_timeout_s``: a load is not
        idempotent (each one bumps the server's version), so it is never retried.

        Raises:
            GenerationServerError: the server failed, timed out (it may still be loading:
                read ``weights_version`` from ``GET /v1/models`` before pushing again) or
                has no such endpoint.
            GenerationRequestError: the server refused the folder.
        """
        if self._closed:
            raise ClosedError("this HttpGenerator was closed; make a new one")
        reply = self._post(
            "/load_weights", {"path": path}, retries=0, timeout_s=self.load_timeout_s
        )
        version = reply.get("weights_version")
        if not isinstance(version, int):
            raise GenerationServerError(
                f"{self.base_url}/load_weights answered without a weights_version: "
                f"{str(reply)[:200]}"
            )
        self.weights_version = version
        return version

    def close(self) -> None:
        """Wait for requests in flight and stop the worker threads (idempotent)."""
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)

    def __enter__(self) -> HttpGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------

    def _body(self, prompt: Sequence[int], limit: int, call: int, k: int) -> dict[str, Any] | None:
        if limit <= 0:
            return None
        settings = self._settings
        return {
            "model": self.model,
            "prompt": [int(t) for t in prompt],
            "max_tokens": int(limit),
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": _derive_seed(settings.seed, call, k) % _SEED_RANGE,
            "logprobs": 0,
            "return_token_ids": True,
            **self.extra_body,
        }

    def _sample(self, body: dict[str, Any]) -> tuple[Sample, int | None]:
        reply = self._post("/completions", body)
        try:
            choice = reply["choices"][0]
            ids = choice["token_ids"]
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
                raise TypeError("token_ids is not a list of integers")
            if not isinstance(logprobs, list) or len(logprobs) != len(ids):
                raise TypeError("logprobs.token_logprobs does not match token_ids")
            values = [float(lp) for lp in logprobs]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise GenerationServerError(
                f"{self.base_url}/completions returned no token ids with log-probs ({exc}); "
                "the server must support return_token_ids and logprobs (vLLM >= 0.10.2, "
                f"agentgym serve). Reply: {str(reply)[:200]}"
            ) from None
        version = choice.get("weights_version", reply.get("weights_version"))
        ended = choice.get("finish_reason") == "stop"
        return Sample(list(ids), values, ended), version if isinstance(version, int) else None

    def _post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """POST through the shared client (retries on transient failures); the JSON
        reply. Failures become :class:`GenerationServerError` (no answer, 5xx, 408, 429,
        no JSON) or :class:`GenerationRequestError` (any other status)."""
        try:
            return self._client.post(path, body, retries=retries, timeout_s=timeout_s).value
        except HttpCallError as exc:
            if exc.status is None or exc.transient or exc.status >= 500:
                raise GenerationServerError(str(exc), exc.status) from None
            raise GenerationRequestError(str(exc), exc.status) from None


def _derive_seed(*parts: int) -> int:
    """A seed from integers such as (seed, call, prompt): reproducible, well spread."""
    digest = hashlib.sha256(":".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
