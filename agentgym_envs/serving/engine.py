"""Generation for ``agentgym serve``: rows with their own settings, recorded log-probs,
top alternatives, token streaming and tool-call constraints, and the request batcher.

A request becomes one :class:`RowJob` per choice. The :class:`Batcher` runs the jobs that
arrive together as one batch through the local
:class:`~agentgym_envs.llm.sampler.Sampler`, whose decoding hook is a :class:`ServePicker`:

* each row draws with its own temperature, nucleus and seeded random stream
  (:class:`~agentgym_envs.llm.sampler.RowPicker`), so a choice depends on its own seed
  only, never on the batch;
* each sampled id keeps ``log softmax(logits / temperature)`` (temperature 0 reports
  temperature-1 values), the quantity the trainer recomputes, and optionally the top
  alternatives under the same distribution;
* a row may stream: its sink sees every token as it is sampled;
* a row may be cancelled (its client left): it stops at its next token, and a row
  still queued never runs;
* a row may be constrained to one tool call (``tool_choice`` ``"required"`` or a named
  function): see :class:`ToolCallConstraint`;
* a row may be constrained to JSON that fits a schema (``response_format``): see
  :class:`~.schema.SchemaConstraint`.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ArgumentError, ClosedError
from agentgym_envs.llm.generation import SamplingSettings
from agentgym_envs.serving.schema import Grammars, SchemaConstraint
from agentgym_envs.serving.work_queue import FairQueue, QueueStopped

if TYPE_CHECKING:  # torch loads only when a server starts
    import torch

    from agentgym_envs.llm.sampler import Sampler
    from agentgym_envs.policies.hf import LocalLM

logger = logging.getLogger(__name__)

TopLogprobs = list[tuple[int, float]]
"""The most likely ids at one position with their log-probabilities, best first."""


@dataclass(frozen=True)
class TokenStep:
    """One sampled token, as a streaming sink sees it."""

    id: int
    logprob: float
    top: TopLogprobs
    weights_version: int = 0
    """The version of the weights that sampled it (its batch's)."""


@dataclass(frozen=True)
class RowJob:
    """One continuation to sample (one choice of a request)."""

    prompt: list[int]
    max_new: int
    settings: SamplingSettings
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0
    """How many alternatives to record per token (0: none)."""
    tool_names: tuple[str, ...] = ()
    """Non-empty: the reply must be one call of one of these tools."""
    grammar: str | None = None
    """A compiled JSON-schema grammar (:meth:`.schema.Grammars.compile`): the reply must
    be one JSON value that fits the schema."""
    sink: Callable[[TokenStep], None] | None = field(default=None, compare=False)
    """Called with every token of this row as it is sampled (streaming)."""
    cancel: threading.Event | None = field(default=None, compare=False)
    """Set when nobody waits for the row any more (its client left): a queued row
    never runs, a running one stops before its next token (see :meth:`Batcher.cancel`)."""
    client: str | None = field(default=None, compare=False)
    """Who asked (a peer address): rows wait their turn round-robin over clients, then
    over each client's requests (None: the request is a client of its own)."""


@dataclass(frozen=True)
class RowResult:
    """What a row sampled: ids with their log-probs and alternatives."""

    ids: list[int]
    logprobs: list[float]
    top: list[TopLogprobs]
    ended: bool
    """It ended with an end-of-turn token (else it hit its token limit)."""
    weights_version: int = 0
    """The version of the weights that sampled the row: read by the batcher under its
    batch lock, so a weight load can never fall between sampling and this label."""
    cancelled: bool = False
    """The row was cancelled mid-batch: ``ids`` are the tokens sampled before it
    stopped (its client is gone; nobody reads it)."""
    failed: str = ""
    """Why a schema-constrained row left its grammar (a grammar the matcher could not
    follow, found only while decoding); "" for none. Its reply's finish is ``"error"``."""


@dataclass(frozen=True)
class Reply:
    """A row's result read as text: stop strings applied, ids cut to match."""

    text: str
    ids: list[int]
    logprobs: list[float]
    top: list[TopLogprobs]
    finish: str
    """``"stop"`` (end of turn or a stop string) or ``"length"``."""
    weights_version: int = 0
    """The version of the weights that sampled it."""
    failed: str = ""
    """Why a schema-constrained reply left its grammar ("" for none; finish ``"error"``)."""


# --------------------------------------------------------------------------- vocabulary


class Vocab:
    """Every token id's text (special tokens as ``""``), for constrained decoding.

    Args:
        tokenizer: the model's tokenizer.
        size: the model's vocabulary size (its logits' width; may exceed the tokenizer's).
    """

    def __init__(self, tokenizer: Any, size: int) -> None:
        known = min(size, len(tokenizer))
        texts = tokenizer.batch_decode([[i] for i in range(known)], skip_special_tokens=True)
        self.strings: list[str] = [str(t) for t in texts] + [""] * (size - known)
        self._by_text: dict[str, list[int]] = {}
        for token, text in enumerate(self.strings):
            if text:
                self._by_text.setdefault(text, []).append(token)
        ordered = sorted((text, token) for token, text in enumerate(self.strings) if text)
        self._texts = [text for text, _ in ordered]
        self._ids = [token for _, token in ordered]
        self.bracketed = [t for t, text in enumerate(self.strings) if "}" in text or "]" in text]
        """Tokens that may close a JSON object or array."""
        self.closers = [t for t, text in enumerate(self.strings) if text.strip() == "}"]
        """Tokens that are one closing brace, maybe with whitespace."""
        self._junk: dict[tuple[int, bool, bool], list[int]] = {}
        self._junk_lock = threading.Lock()

    def junk_after(self, scan: _JsonDepth) -> list[int]:
        """Tokens that would close a call's arguments with junk after them, in the
        scanner's state (cached per state: a few thousand checks each)."""
        key = scan.key()
        with self._junk_lock:
            junk = self._junk.get(key)
            if junk is None:
                junk = self._junk[key] = [
                    t for t in self.bracketed if not scan.fits(self.strings[t])
                ]
        return junk

    def continuing(self, remainders: Sequence[str]) -> list[int]:
        """Ids of the tokens that keep the text on one of ``remainders``: the token is a
        prefix of a remainder, or a remainder is a prefix of the token."""
        allowed: set[int] = set()
        for rest in remainders:
            for end in range(1, len(rest) + 1):
                allowed.update(self._by_text.get(rest[:end], ()))
            start = bisect.bisect_left(self._texts, rest)
            stop = start
            while stop < len(self._texts) and self._texts[stop].startswith(rest):
                stop += 1
            allowed.update(self._ids[start:stop])
        return sorted(allowed)


class _JsonDepth:
    """Tracks the bracket depth of JSON text outside strings."""

    def __init__(self, depth: int) -> None:
        self.depth, self._in_string, self._escape = depth, False, False

    def key(self) -> tuple[int, bool, bool]:
        """The whole state: what follows depends on nothing else."""
        return self.depth, self._in_string, self._escape

    def copy(self) -> _JsonDepth:
        twin = _JsonDepth(self.depth)
        twin._in_string, twin._escape = self._in_string, self._escape
        return twin

    def feed(self, char: str) -> None:
        if self._in_string:
            if self._escape:
                self._escape = False
            elif char == "\\":
                self._escape = True
            elif char == '"':
                self._in_string = False
        elif char == '"':
            self._in_string = True
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1

    def fits(self, text: str) -> bool:
        """Whether ``text`` can follow without junk after the arguments close: once the
        depth drops to 1 only whitespace and the call's closing brace may come."""
        probe = self.copy()
        for at, char in enumerate(text):
            probe.feed(char)
            if probe.depth <= 1:
                return text[at + 1 :].strip() in ("", "}")
        return True

    def feed_text(self, text: str) -> None:
        for char in text:
            if self.depth <= 0:
                return
            self.feed(char)


class ToolCallConstraint:
    """Constrains one row to write exactly one JSON tool call.

    1. The reply must start with ``{"name": "<one of the names>", "arguments": {``: only
       tokens that keep it on such a head are allowed (the model still picks the name
       and its own tokenization).
    2. The model writes the arguments freely, except that it may not end its turn and
       may not close the arguments with anything but the call's closing brace after.
    3. Once the arguments close, only the closing brace; then only an end-of-turn token.

    The JSON inside the arguments is the model's own (the server parses it after).
    Log-probabilities stay those of the unconstrained distribution. Exact for tokenizers
    whose tokens decode independently (byte-level BPE such as SmolLM2's, Llama 3's,
    Qwen's).
    """

    def __init__(self, names: Sequence[str], vocab: Vocab, eos: Sequence[int]) -> None:
        self._heads = [
            f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {{' for name in names
        ]
        self._vocab, self._eos = vocab, sorted(eos)
        self._text = ""
        self._scan: _JsonDepth | None = None

    def rule(self) -> tuple[list[int] | None, list[int]]:
        """``(allowed ids or None for any, banned ids)`` for the next token."""
        strings = self._vocab.strings
        if self._scan is None:
            heads = [h for h in self._heads if h.startswith(self._text)]
            candidates = self._vocab.continuing([h[len(self._text) :] for h in heads])
            return [t for t in candidates if self._head_fits(heads, strings[t])], []
        if self._scan.depth <= 0:
            return self._eos, []
        if self._scan.depth == 1:
            return self._vocab.closers, []
        return None, self._eos + self._vocab.junk_after(self._scan)

    def _head_fits(self, heads: Sequence[str], token: str) -> bool:
        grown = self._text + token
        done = [h for h in heads if grown.startswith(h)]
        return not done or _JsonDepth(2).fits(grown[len(done[0]) :])

    def advance(self, token: int) -> None:
        """Account for the token the row sampled."""
        text = self._vocab.strings[token] if 0 <= token < len(self._vocab.strings) else ""
        if self._scan is not None:
            self._scan.feed_text(text)
            return
        self._text += text
        head = next((h for h in self._heads if self._text.startswith(h)), None)
        if head is not None:
            self._scan = _JsonDepth(depth=2)  # the call object and its arguments are open
            self._scan.feed_text(self._text[len(head) :])


# --------------------------------------------------------------------------- the picker


class ServePicker:
    """The server's :class:`~agentgym_envs.llm.generation.TokenPicker` for one batch.

    Args:
        jobs: the batch's rows.
        device: where the logits live.
        eos: end-of-turn ids.
        vocab: needed when a job has ``tool_names``.
        grammars: needed when a job has a ``grammar`` (:attr:`RowEngine.grammars`).
        weights_version: the version of the weights sampling this batch (streamed
            tokens carry it).
    """

    def __init__(
        self,
        jobs: Sequence[RowJob],
        device: torch.device | str,
        eos: Sequence[int],
        vocab: Vocab | None = None,
        weights_version: int = 0,
        grammars: Grammars | None = None,
    ) -> None:
        import torch

        from agentgym_envs.llm.sampler import RowPicker

        self._jobs = list(jobs)
        self._version = weights_version
        steps = max(j.max_new for j in jobs)
        self._draw = RowPicker([j.settings for j in jobs], steps=steps, device=device)
        temps = [j.settings.temperature or 1.0 for j in jobs]
        self._scale = torch.tensor(temps, device=device)[:, None]  # (B, 1)
        self._k = max(j.top_logprobs for j in jobs)
        self._eos = set(eos)
        self._count = [0] * len(jobs)
        self._alive = [j.max_new > 0 for j in jobs]
        self._end = min(eos) if eos else 0  # what a cancelled row "samples" to stop
        self.cancelled = [False] * len(jobs)
        """Per row: it was cancelled mid-batch (and stopped there)."""
        if any(j.tool_names for j in jobs) and vocab is None:
            raise ArgumentError("expected a vocabulary for tool-call constraints, got None")
        if any(j.grammar for j in jobs) and grammars is None:
            raise ArgumentError("expected the compiled grammars for schema constraints, got None")
        self._rules: list[ToolCallConstraint | SchemaConstraint | None] = []
        for j in jobs:
            if j.tool_names and vocab is not None:
                self._rules.append(ToolCallConstraint(j.tool_names, vocab, sorted(eos)))
            elif j.grammar and grammars is not None:
                self._rules.append(grammars.constraint(j.grammar))
            else:
                self._rules.append(None)
        self.top: list[list[TopLogprobs]] = [[] for _ in jobs]
        """Per row, per sampled token: the recorded alternatives."""

    def __call__(self, logits: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        stopped = self._stop_cancelled()
        token, _ = self._draw(self._masked(logits), step)
        if stopped:  # an end-of-turn token ends the row in the decode loop
            token[stopped] = self._end
        logprobs = torch.log_softmax(logits / self._scale, dim=-1)  # (B, V), unconstrained
        chosen = logprobs.gather(1, token[:, None]).squeeze(1)
        top = logprobs.topk(min(self._k, logprobs.shape[-1]), dim=-1) if self._k else None
        self._record(token.tolist(), chosen.tolist(), top)
        return token, chosen

    @property
    def failures(self) -> list[str]:
        """Per row: why its constrained reply left its grammar ("" for none)."""
        return [r.error if isinstance(r, SchemaConstraint) else "" for r in self._rules]

    def _stop_cancelled(self) -> list[int]:
        """The live rows whose client left: they stop now, recording nothing more."""
        rows = [
            row
            for row, job in enumerate(self._jobs)
            if self._alive[row] and job.cancel is not None and job.cancel.is_set()
        ]
        for row in rows:
            self._alive[row], self.cancelled[row] = False, True
        return rows

    def _masked(self, logits: torch.Tensor) -> torch.Tensor:
        rules = [(r, rule.rule()) for r, rule in enumerate(self._rules) if rule and self._alive[r]]
        if not rules:
            return logits
        masked = logits.clone()
        for row, (allowed, banned) in rules:
            if allowed is not None:
                if len(allowed) == 0:  # nothing continues the head: leave the row free
                    logger.warning("no token continues the constrained reply of row %d", row)
                    continue
                keep = masked[row, allowed]
                masked[row] = float("-inf")
                masked[row, allowed] = keep
            if banned:
                masked[row, banned] = float("-inf")
        return masked

    def _record(self, tokens: list[int], chosen: list[float], top: Any) -> None:
        values = top.values.tolist() if top is not None else None
        indices = top.indices.tolist() if top is not None else None
        for row, job in enumerate(self._jobs):
            if not self._alive[row]:
                continue
            alternatives: TopLogprobs = []
            if values is not None and indices is not None and job.top_logprobs:
                k = job.top_logprobs
                alternatives = list(zip(indices[row][:k], values[row][:k], strict=True))
            self.top[row].append(alternatives)
            rule = self._rules[row]
            if rule is not None:
                rule.advance(tokens[row])
            if job.sink is not None:
                job.sink(TokenStep(tokens[row], chosen[row], alternatives, self._version))
            self._count[row] += 1
            if tokens[row] in self._eos or self._count[row] >= job.max_new:
                self._alive[row] = False


def eos_ids(lm: LocalLM) -> list[int]:
    """The ids that end a turn: the tokenizer's eos and the generation config's."""
    eos = {int(lm.tokenizer.eos_token_id)}
    configured = getattr(lm.model.generation_config, "eos_token_id", None)
    eos |= {int(i) for i in ([configured] if isinstance(configured, int) else configured or [])}
    return sorted(eos)


class RowEngine:
    """Runs batches of :class:`RowJob` through a local model.

    Args:
        lm: the model (its weights may be replaced in place between batches).
    """

    def __init__(self, lm: LocalLM) -> None:
        from agentgym_envs.llm.sampler import Sampler

        self.lm = lm
        self.eos = eos_ids(lm)
        self._sampler: Sampler = Sampler(lm.model, eos_ids=self.eos, pad_id=lm.pad_id)
        self._vocab: Vocab | None = None
        self.grammars = Grammars(lm.tokenizer, int(lm.model.config.vocab_size), self.eos)
        """``response_format`` schemas compiled for this model (:mod:`.schema`)."""

    @property
    def vocab(self) -> Vocab:
        """Every token's text (built on first use: about half a second)."""
        if self._vocab is None:
            self._vocab = Vocab(self.lm.tokenizer, self.vocab_size)
        return self._vocab

    @property
    def vocab_size(self) -> int:
        """The width of the model's logits: token ids must be below it."""
        return int(self.lm.model.config.vocab_size)

    def close(self) -> None:
        """Drop the reference to the model's weights (the owner frees them)."""
        self._sampler.model = None  # type: ignore[assignment]

    def run(self, jobs: Sequence[RowJob], weights_version: int = 0) -> list[RowResult]:
        """Sample every job in one batch with the weights of ``weights_version`` (the
        label every result and streamed token gets; the caller holds the weights)."""
        vocab = self.vocab if any(j.tool_names for j in jobs) else None
        grammars = self.grammars if any(j.grammar for j in jobs) else None
        picker = ServePicker(jobs, self._sampler.device, self.eos, vocab, weights_version, grammars)
        samples = self._sampler.generate(
            [j.prompt for j in jobs], [j.max_new for j in jobs], picker=picker
        )
        results = []
        rows = zip(samples, picker.top, picker.cancelled, picker.failures, strict=True)
        for s, top, cancelled, failed in rows:
            kept = len(top) if cancelled else len(s.ids)  # not the end token that stopped it
            ids, logprobs = list(s.ids[:kept]), list(s.logprobs[:kept])
            ended = bool(s.ended) and not cancelled and not failed
            results.append(RowResult(ids, logprobs, top, ended, weights_version, cancelled, failed))
        return results

    def reply(self, job: RowJob, result: RowResult) -> Reply:
        """Decode a result; a stop string cuts the text before it and the ids after the
        token that completed it."""
        decode = self.lm.tokenizer.decode
        text = str(decode(result.ids, skip_special_tokens=True))
        finish = "error" if result.failed else "stop" if result.ended else "length"
        found = [(text.index(s), s) for s in job.stop if s and s in text]
        keep = len(result.ids)
        if found:
            at, stop = min(found)
            text, finish = text[:at], "stop"
            keep = next(
                k
                for k in range(1, len(result.ids) + 1)
                if stop in str(decode(result.ids[:k], skip_special_tokens=True))
            )
        return Reply(
            text,
            result.ids[:keep],
            result.logprobs[:keep],
            result.top[:keep],
            finish,
            result.weights_version,
            result.failed,
        )


# --------------------------------------------------------------------------- batching

_Job = tuple[RowJob, "Future[RowResult]"]


class Batcher:
    """Collects concurrent rows into batched generations on one worker thread.

    Waiting rows are taken in fair turns (:class:`~.work_queue.FairQueue`):
    round-robin over clients, then over each client's requests, one row at a time.

    Args:
        engine: generates a batch of rows.
        max_batch: the most rows generated together.
        wait_s: how long the first row of a batch waits for company.
    """

    def __init__(self, engine: RowEngine, max_batch: int = 8, wait_s: float = 0.005) -> None:
        self.engine, self.max_batch, self.wait_s = engine, max(1, max_batch), wait_s
        self.batch_sizes: list[int] = []
        """The size of every batch generated so far (for stats and tests)."""
        self.cancelled_rows = 0
        """Rows cancelled so far (their client left): never run, or stopped mid-batch."""
        self.tokens_sampled = 0
        """Tokens sampled so far, over all rows (a cancelled row's up to its stop)."""
        self.weights_version = 0
        """The version of the weights the next batch samples with. It changes only while
        the model is held (:meth:`new_weights`), and each batch reads it under the same
        lock, so every result is labelled with the weights that sampled it."""
        self._queue: FairQueue[_Job] = FairQueue()
        self._closed = False
        self._busy = threading.Lock()  # held while generating
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="batcher", daemon=True)
        self._thread.start()

    def submit(self, jobs: Sequence[RowJob]) -> list[Future[RowResult]]:
        """Queue rows together (the choices of one request, of the first job's
        ``client``); one future per row."""
        futures: list[Future[RowResult]] = [Future() for _ in jobs]
        with self._pending_lock:
            if self._closed:
                raise ClosedError(
                    "the generation server is shutting down and takes no new prompts; "
                    "start a new one"
                )
            self._pending += len(jobs)
        for future in futures:
            future.add_done_callback(self._count_cancelled)
        client = jobs[0].client if jobs and jobs[0].client is not None else object()
        self._queue.put(client, list(zip(jobs, futures, strict=True)))
        return futures

    def _count_cancelled(self, future: Future[RowResult]) -> None:
        """A queued row given up is answered at once: it no longer counts as pending."""
        if future.cancelled():
            with self._pending_lock:
                self._pending -= 1
                self.cancelled_rows += 1

    @staticmethod
    def cancel(jobs: Sequence[RowJob], futures: Sequence[Future[RowResult]]) -> None:
        """Give up rows nobody waits for: queued ones are dropped at once (they never
        run), running ones stop before their next token (their ``cancel`` event is
        set). Rows already done are left alone."""
        for job, future in zip(jobs, futures, strict=True):
            if future.done():
                continue
            if job.cancel is not None:
                job.cancel.set()
            future.cancel()  # succeeds only while the row is queued

    @property
    def pending(self) -> int:
        """Rows submitted and not answered yet. A cancelled row is answered at once
        while queued; a running one stops sampling at its next token and is answered
        when its batch ends."""
        with self._pending_lock:
            return self._pending

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the model: rows queue up meanwhile and go out as one batch after."""
        with self._busy:
            yield

    @contextmanager
    def new_weights(self) -> Iterator[int]:
        """Hold the model while its weights are replaced; yields the version they get.

        The version goes up only if the block ends without an exception; no batch runs
        meanwhile.
        """
        with self._busy:
            yield self.weights_version + 1
            self.weights_version += 1

    def close(self) -> None:
        """Finish the queued rows and stop the worker thread (idempotent)."""
        with self._pending_lock:
            self._closed = True
        if self._thread.is_alive():
            self._queue.stop()
            self._thread.join()
        self.engine.close()

    def _run(self) -> None:
        while True:
            try:
                first = self._take(None)
            except QueueStopped:
                return
            if first is None:  # no timeout: get waits until a row or the stop
                continue
            jobs = [first]
            stop = self._collect(jobs, time.monotonic() + self.wait_s)
            with self._busy:
                stop = self._collect(jobs, None) or stop  # more may have come meanwhile
                self._generate(jobs)
            if stop:
                return

    def _collect(self, jobs: list[_Job], deadline: float | None) -> bool:
        """Add waiting rows up to ``max_batch`` (until ``deadline``); True on stop."""
        while len(jobs) < self.max_batch:
            remaining = 0.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                job = self._take(remaining)
            except QueueStopped:
                return True
            if job is None:
                return False
            jobs.append(job)
        return False

    def _take(self, timeout: float | None) -> _Job | None:
        """The next waiting row in turn (None if none came within ``timeout``); rows
        given up while queued are skipped (they are answered already)."""
        while True:
            job = self._queue.get(timeout)
            if job is None or not job[1].cancelled():
                return job

    def _generate(self, jobs: list[_Job]) -> None:
        """Run one batch (the caller holds ``_busy``: the weights cannot change)."""
        for queued, future in jobs:  # the row's client left while it was queued
            if queued.cancel is not None and queued.cancel.is_set():
                future.cancel()
        live = [job for job in jobs if job[1].set_running_or_notify_cancel()]
        try:
            if live:
                self.batch_sizes.append(len(live))
                results = self.engine.run([j[0] for j in live], self.weights_version)
                with self._pending_lock:
                    self.cancelled_rows += sum(r.cancelled for r in results)
                    self.tokens_sampled += sum(len(r.ids) for r in results)
                for job, result in zip(live, results, strict=True):
                    job[1].set_result(result)
        except Exception as exc:  # every waiting request learns about it
            logger.exception("batched generation failed")
            for job in live:
                if not job[1].done():
                    job[1].set_exception(exc)
        finally:
            with self._pending_lock:
                self._pending -= len(live)  # the cancelled rest: see _count_cancelled
