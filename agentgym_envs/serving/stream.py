"""Token streaming for ``agentgym serve``: rows' tokens as they are sampled, turned into
text pieces that never split a character and never show part of a stop string.

:func:`stream_pieces` submits rows with a sink each and yields a :class:`Piece` per
sampled token (its text may be empty while characters are held back) and a last one
per row with its ``finish`` reason and whatever text was still held back. The
concatenated pieces of a row are exactly the non-streamed reply: the same text and the
same ids.

A stream that ends early (its reader stops, or ``gone`` says the client left, or nothing
arrives in time) cancels its rows: none keeps generating for a client that is gone.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace

from agentgym_envs.serving.engine import (
    Batcher,
    RowEngine,
    RowJob,
    TokenStep,
    TopLogprobs,
)

_HELD = "\ufffd"  # what a decoder shows for the first bytes of an unfinished character
GONE_POLL_S = 0.25
"""How often a stream waiting for tokens asks whether its client is still there."""


@dataclass(frozen=True)
class Piece:
    """What one row adds to a stream."""

    index: int
    text: str
    ids: list[int]
    logprobs: list[float]
    top: list[TopLogprobs]
    finish: str | None = None
    """Set on the row's last piece: ``"stop"`` or ``"length"``."""
    weights_version: int | None = None
    """The version of the weights that sampled the row (None only on an empty last
    piece of a row that sampled nothing)."""


class TextStream:
    """The growing text of one row.

    Args:
        decode: token ids to text (special tokens left out).
        stop: the row's stop strings.
    """

    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str]) -> None:
        self._decode, self._stop = decode, [s for s in stop if s]
        self._ids: list[int] = []
        self.sent = ""
        """The text emitted so far."""
        self.stopped = False
        """A stop string was found: the row's text is complete."""

    def feed(self, token: int) -> str:
        """Add a sampled token; the text that can be shown now."""
        self._ids.append(token)
        stable = self._decode(self._ids).rstrip(_HELD)
        start = max(0, len(self.sent) - max((len(s) for s in self._stop), default=0))
        found = [at for s in self._stop if (at := stable.find(s, start)) >= 0]
        if found:
            self.stopped = True
            return self._emit(stable, min(found))
        hold = max(
            (k for s in self._stop for k in range(1, len(s)) if stable.endswith(s[:k])),
            default=0,
        )
        return self._emit(stable, len(stable) - hold)

    def _emit(self, stable: str, end: int) -> str:
        if end <= len(self.sent) or not stable.startswith(self.sent):
            return ""
        piece = stable[len(self.sent) : end]
        self.sent += piece
        return piece

    def rest(self, final: str) -> str:
        """What the finished reply's text adds to what was sent."""
        return final[len(self.sent) :] if final.startswith(self.sent) else ""


def _closer(
    events: queue.Queue[tuple[int, TokenStep | None]], index: int
) -> Callable[[object], None]:
    """Marks a row's end in the event queue once its future is done."""
    return lambda _future: events.put((index, None))


def stream_pieces(
    engine: RowEngine,
    batcher: Batcher,
    jobs: Sequence[RowJob],
    timeout_s: float,
    gone: Callable[[], bool] | None = None,
) -> Generator[Piece, None, None]:
    """Generate ``jobs`` together and yield their pieces as tokens are sampled.

    The rows are cancelled when the stream ends before they do: the caller closes it
    (a client that went away mid-write), ``gone`` returns True (asked every
    :data:`GONE_POLL_S` seconds while no token arrives), or ``timeout_s`` passes.

    Raises:
        TimeoutError: nothing arrived for ``timeout_s`` seconds.
        ConnectionAbortedError: ``gone`` said the client left.
        Exception: whatever the batched generation raised.
    """
    events: queue.Queue[tuple[int, TokenStep | None]] = queue.Queue()

    def sink(index: int) -> Callable[[TokenStep], None]:
        return lambda step: events.put((index, step))

    cancel = threading.Event()
    jobs = [replace(job, sink=sink(i), cancel=cancel) for i, job in enumerate(jobs)]
    futures = batcher.submit(jobs)
    open_rows = len(jobs)
    try:
        for i, future in enumerate(futures):
            future.add_done_callback(_closer(events, i))
        tokenizer = engine.lm.tokenizer

        def decode(ids: list[int]) -> str:
            return str(tokenizer.decode(ids, skip_special_tokens=True))

        streams = [TextStream(decode, job.stop) for job in jobs]
        versions: list[int | None] = [None] * len(jobs)
        while open_rows:
            index, step = _next_event(events, timeout_s, gone)
            stream = streams[index]
            version = step.weights_version if step is not None else None
            if step is None:
                open_rows -= 1
                reply = engine.reply(jobs[index], futures[index].result())
                version = reply.weights_version
            _same_weights(versions, index, version)
            if step is None:
                yield Piece(index, stream.rest(reply.text), [], [], [], reply.finish, version)
            elif not stream.stopped:
                text = stream.feed(step.id)
                yield Piece(index, text, [step.id], [step.logprob], [step.top], None, version)
    finally:
        if open_rows:  # ended early: nobody reads the rest
            batcher.cancel(jobs, futures)


def _next_event(
    events: queue.Queue[tuple[int, TokenStep | None]],
    timeout_s: float,
    gone: Callable[[], bool] | None,
) -> tuple[int, TokenStep | None]:
    """The next token or row end; asks ``gone`` while waiting."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no token for {timeout_s:.0f} s")
        try:
            return events.get(timeout=min(left, GONE_POLL_S) if gone is not None else left)
        except queue.Empty:
            if gone is not None and gone():
                raise ConnectionAbortedError("the client went away") from None


def _same_weights(versions: list[int | None], index: int, version: int | None) -> None:
    """Record a row's weights version; a row is one batch, so it never changes (a
    choice mixing two versions would be mislabelled: refuse it)."""
    if versions[index] is None:
        versions[index] = version
    elif version != versions[index]:
        raise RuntimeError(
            f"choice {index} was sampled by weights versions {versions[index]} and "
            f"{version}; a choice must come from one version (a bug in the batcher)"
        )
