"""The queue of rows waiting for a batch in ``agentgym serve``, served in fair turns.

First come, first served per row let one request for ``n=128`` choices of 2000 tokens
fill every batch for minutes while a 4-token request behind it waited. :class:`FairQueue`
hands rows out round-robin instead: over clients (peer addresses), then over each
client's requests, one row at a time. A big request still fills batches when nobody
else waits, and a request that arrives behind it gets a row in the next batch.

Loopback clients all share one address, so two local clients are one client here; their
requests still take turns, as any two requests do.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["FairQueue", "QueueStopped"]

T = TypeVar("T")


class QueueStopped(Exception):
    """The queue was stopped and every row in it has been handed out."""


class FairQueue(Generic[T]):
    """Rows of requests from clients, handed out round-robin (thread-safe)."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        # client -> request number -> its waiting rows, each in turn order
        self._clients: OrderedDict[Hashable, OrderedDict[int, deque[T]]] = OrderedDict()
        self._numbers = itertools.count()
        self._stopped = False

    def put(self, client: Hashable, rows: Sequence[T]) -> None:
        """Queue the rows of one request of ``client``."""
        if not rows:
            return
        with self._ready:
            requests = self._clients.setdefault(client, OrderedDict())
            requests[next(self._numbers)] = deque(rows)
            self._ready.notify()

    def stop(self) -> None:
        """Let :meth:`get` raise :class:`QueueStopped` once the queue is empty."""
        with self._ready:
            self._stopped = True
            self._ready.notify_all()

    def get(self, timeout: float | None = None) -> T | None:
        """The next row in turn, waiting up to ``timeout`` seconds (None: forever; 0:
        not at all); None when none came.

        Raises:
            QueueStopped: the queue was stopped and is empty.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ready:
            while not self._clients:
                if self._stopped:
                    raise QueueStopped
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._ready.wait(left)
            return self._next()

    def _next(self) -> T:
        """Pop one row of the first client's first request; both go to the back of
        their turns (the caller holds the lock)."""
        client, requests = self._clients.popitem(last=False)
        number, rows = requests.popitem(last=False)
        row = rows.popleft()
        if rows:
            requests[number] = rows
        if requests:
            self._clients[client] = requests
        return row

    def __len__(self) -> int:
        with self._ready:
            return sum(len(rows) for r in self._clients.values() for rows in r.values())

    def __repr__(self) -> str:
        return f"FairQueue({len(self)} rows of {len(self._clients)} clients)"
