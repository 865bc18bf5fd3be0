"""One retrying JSON POST (stdlib only), shared by every client of an HTTP model server.

:class:`JsonHttpClient` sends a JSON body to ``base_url + path`` and returns the JSON
object of the reply. :class:`~agentgym_envs.llm.http_generator.HttpGenerator` and
:class:`~agentgym_envs.policies.openai_compat.OpenAIPolicy` both use it, and each maps
:class:`HttpCallError` to its own failure (an exception, or an empty action).

A failure is *transient* when a retry may fix it: the server cannot be reached, the
connection drops, the request times out, the status is one of ``retry_status`` (by
default 408, 429, 500, 502, 503, 504), or the reply is not a JSON object (or not what
the caller's ``parse`` expects; it raises :class:`BadReplyError`). Transient failures
are retried ``retries`` times after the first attempt, waiting
``min(max_backoff_s, backoff_s * 2**(attempt - 1))`` seconds before retry ``attempt``
(times a seeded jitter factor in [0.5, 1) when ``jitter_seed`` is set), and at least
the server's ``Retry-After`` (capped at ``max_backoff_s``). Every other status
(400, 401, 404, ...) fails at once: retrying cannot fix the request.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from agentgym_envs.core.errors import AgentGymError, ConfigError

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""The HTTP statuses that are retried by default (timeouts, rate limits, overload)."""


class HttpCallError(AgentGymError, RuntimeError):
    """A POST failed for good (after its retries, or at once when retrying cannot help).

    Attributes:
        url: the URL posted to.
        status: the last HTTP status; None when no answer came (unreachable, timeout).
        transient: True when a retry might have fixed it (it ran out of retries); False
            for a refused request (a status outside ``retry_status``).
        retry_after: the server's ``Retry-After`` in seconds, if it sent one.
        attempts: how many requests were sent.
    """

    def __init__(
        self,
        message: str,
        url: str,
        *,
        status: int | None = None,
        transient: bool = True,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message, self.url, self.status = message, url, status
        self.transient, self.retry_after, self.attempts = transient, retry_after, attempts

    def __str__(self) -> str:
        if self.attempts > 1:
            return f"{self.message} (after {self.attempts} attempts)"
        return self.message


class BadReplyError(AgentGymError, ValueError):
    """Raised by a ``parse`` callback when a reply is not what the caller expects (a
    malformed completion): the client treats it as transient and retries."""


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A successful POST: the (parsed) reply and how many requests it took."""

    value: T
    attempts: int


class JsonHttpClient:
    """POSTs JSON to one server, retrying transient failures with backoff (thread-safe).

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: sent as a bearer token when set.
        timeout_s: how long one request may take (connect and read).
        retries: extra attempts after a transient failure.
        backoff_s: the delay before the first retry; it doubles on each retry.
        max_backoff_s: the longest delay between two attempts.
        retry_status: the HTTP statuses that are transient.
        jitter_seed: seeds a jitter factor in [0.5, 1) on each delay (spreads out
            clients that failed together); None: no jitter.

    Raises:
        ConfigError: a ``base_url`` that is not http(s), non-positive ``timeout_s``, or
            negative ``retries``/``backoff_s``/``max_backoff_s``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        backoff_s: float = 0.25,
        max_backoff_s: float = 8.0,
        retry_status: frozenset[int] = RETRY_STATUS,
        jitter_seed: int | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"base_url must start with http:// or https://, got {base_url!r} "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        if timeout_s <= 0 or retries < 0 or backoff_s < 0 or max_backoff_s < 0:
            raise ConfigError(
                "expected timeout_s > 0, retries >= 0, backoff_s >= 0 and max_backoff_s >= 0, "
                f"got timeout_s={timeout_s}, retries={retries}, backoff_s={backoff_s}, "
                f"max_backoff_s={max_backoff_s}"
            )
        self.base_url = base_url.rstrip("/")
        self.timeout_s, self.retries = timeout_s, retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.retry_status = frozenset(retry_status)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._rng = random.Random(jitter_seed) if jitter_seed is not None else None
        self._lock = threading.Lock()

    @overload
    def post(
        self,
        path: str,
        body: Mapping[str, Any],
        parse: None = None,
        *,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Answer[dict[str, Any]]: ...

    @overload
    def post(
        self,
        path: str,
        body: Mapping[str, Any],
        parse: Callable[[dict[str, Any]], T],
        *,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Answer[T]: ...

    def post(
        self,
        path: str,
        body: Mapping[str, Any],
        parse: Callable[[dict[str, Any]], Any] | None = None,
        *,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Answer[Any]:
        """POST ``body`` to ``base_url + path``; the reply through ``parse``.

        Args:
            path: appended to ``base_url``, e.g. ``"/completions"``.
            body: the JSON request.
            parse: turns the reply's JSON object into the caller's value; raises
                :class:`BadReplyError` for a reply a retry may fix. None: the object.
            retries: overrides :attr:`retries` (0 for a request that is not idempotent).
            timeout_s: overrides :attr:`timeout_s`.

        Raises:
            HttpCallError: the request failed for good (see the module docstring).
        """
        url = f"{self.base_url}{path}"
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        retries = self.retries if retries is None else retries
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                reply = self._once(url, data, timeout_s)
                try:
                    return Answer(reply if parse is None else parse(reply), attempt)
                except BadReplyError as exc:
                    message = f"{url} answered with a malformed reply: {exc}"
                    raise HttpCallError(message, url) from None
            except HttpCallError as exc:
                exc.attempts = attempt
                if not exc.transient or attempt > retries:
                    raise
                delay = self.delay(attempt, exc.retry_after)
                logger.warning(
                    "%s; retrying in %.2f s (attempt %d of %d)",
                    exc.message,
                    delay,
                    attempt,
                    retries + 1,
                )
                time.sleep(delay)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next."""
        delay = min(self.max_backoff_s, self.backoff_s * 2.0 ** (attempt - 1))
        if self._rng is not None:
            with self._lock:  # random.Random is not safe to share between threads
                delay *= 0.5 + 0.5 * self._rng.random()
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return delay

    def _once(self, url: str, data: bytes, timeout_s: float) -> dict[str, Any]:
        """One POST, no retry: the reply's JSON object."""
        request = urllib.request.Request(url, data=data, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            raise HttpCallError(
                f"HTTP {status} from {url}: {_error_detail(exc)}",
                url,
                status=status,
                transient=status in self.retry_status,
                retry_after=_retry_after(exc.headers.get("Retry-After") if exc.headers else None),
            ) from None
        except urllib.error.URLError as exc:
            raise HttpCallError(f"cannot reach {url}: {exc.reason}", url) from None
        except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
            raise HttpCallError(
                f"{type(exc).__name__} from {url} (timeout {timeout_s:g} s): {exc}", url
            ) from None
        try:
            reply = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise HttpCallError(f"{url} answered with no JSON: {raw[:200]!r}", url) from None
        if not isinstance(reply, dict):
            raise HttpCallError(f"{url} answered with no JSON object: {raw[:200]!r}", url)
        return reply


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (the HTTP-date form is ignored)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The ``error.message`` of an OpenAI error body, else the start of the body.

    Never raises: a body that cannot be read (the connection dropped, or the body ended
    before its Content-Length: ``http.client.IncompleteRead``) gives the status reason,
    so the caller still raises its :class:`HttpCallError` (retried by status)."""
    try:
        raw = exc.read()
    except (OSError, http.client.HTTPException) as read_error:
        reason = exc.reason if isinstance(exc.reason, str) else ""
        return f"{reason} (the error body could not be read: {type(read_error).__name__})"
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode("utf-8", errors="replace")
