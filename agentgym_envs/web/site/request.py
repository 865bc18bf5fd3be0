"""Requests, responses, HTTP errors and strict parsing of query and form fields.

A page handler gets a :class:`Request` and returns a :class:`Response`. Bad input (a
missing field, a quantity that is not a number, an unknown sort order) raises an
:class:`HttpError`, which the router renders as a readable error page: a malformed
request is the agent's mistake, shown to it as a page, never a server error.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from agentgym_envs.core.errors import did_you_mean

Params = Mapping[str, str]
MAX_FIELDS = 100
_INT = re.compile(r"[0-9]{1,9}")
_MONEY = re.compile(r"\$?([0-9]{1,7})(?:\.([0-9]{1,2}))?")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Response:
    """An HTTP response: status code, headers (without Content-Length) and body bytes."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (case-insensitive), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8")


@dataclass(frozen=True)
class Request:
    """One request to a tenant's site: its database, method, path and parsed fields."""

    conn: sqlite3.Connection
    method: str
    path: str
    query: Params = field(default_factory=dict)
    form: Params = field(default_factory=dict)
    args: tuple[str, ...] = ()  # the groups the route pattern captured from the path


class HttpError(Exception):
    """A request the site refuses; rendered as an error page with ``status``."""

    status = 500
    title = "Server error"

    def __init__(self, message: str, *, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers


class BadRequest(HttpError):
    """Malformed input: a missing or unparsable field, a value out of range."""

    status = 400
    title = "Bad request"


class Forbidden(HttpError):
    """The shopper may not do this (review a product never delivered to them)."""

    status = 403
    title = "Forbidden"


class NotFound(HttpError):
    """No page, product, order or address with that path or id."""

    status = 404
    title = "Page not found"


class MethodNotAllowed(HttpError):
    """The path exists but not for this HTTP method."""

    status = 405
    title = "Method not allowed"


class Conflict(HttpError):
    """A well-formed request that the current state forbids (cancel a shipped order)."""

    status = 409
    title = "Not possible"


def parse_params(raw: str) -> dict[str, str]:
    """Parse an urlencoded query string or form body into a field -> value dict.

    Raises:
        BadRequest: invalid percent-encoding or UTF-8, too many fields, or a field given
            more than once.
    """
    try:
        pairs = parse_qsl(
            raw, keep_blank_values=True, encoding="utf-8", errors="strict",
            max_num_fields=MAX_FIELDS,
        )  # fmt: skip
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise BadRequest(f"could not decode the form fields ({exc})") from exc
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise BadRequest(f"the field {key!r} was given more than once; send it once")
        params[key] = value
    return params


def text(params: Params, name: str, *, max_len: int = 200, default: str | None = None) -> str:
    """The stripped text of field ``name``; may be empty (callers validate emptiness).

    Raises:
        BadRequest: the field is missing (and has no default), too long, or contains
            control characters.
    """
    if name not in params:
        if default is not None:
            return default
        raise BadRequest(f"the form field {name!r} is missing; the form must send it")
    value = params[name].strip()
    if len(value) > max_len:
        raise BadRequest(f"{name} must be at most {max_len} characters, got {len(value)}")
    if _CONTROL.search(value):
        raise BadRequest(f"{name} contains control characters; use plain text")
    return value


def integer(params: Params, name: str, *, lo: int, hi: int, default: int | None = None) -> int:
    """The whole number in field ``name``, which must lie in ``lo..hi``.

    Raises:
        BadRequest: the field is missing (and has no default), not a whole number, or
            out of range.
    """
    raw = params.get(name, "").strip()
    if not raw and default is not None:
        return default
    if name not in params:
        raise BadRequest(f"the field {name!r} is missing; expected a number in {lo}..{hi}")
    if not _INT.fullmatch(raw):
        raise BadRequest(f"{name} must be a whole number in {lo}..{hi}, got {raw[:40]!r}")
    value = int(raw)
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def optional_id(params: Params, name: str) -> int | None:
    """The id chosen in a radio group ``name``, or None when nothing was chosen."""
    if not params.get(name, "").strip():
        return None
    return integer(params, name, lo=1, hi=999_999_999)


def money(params: Params, name: str) -> int | None:
    """A dollar amount such as ``25``, ``19.9`` or ``$19.99`` in cents; None when empty.

    Raises:
        BadRequest: the value is not a dollar amount.
    """
    raw = params.get(name, "").strip()
    if not raw:
        return None
    match = _MONEY.fullmatch(raw)
    if not match:
        raise BadRequest(f"{name} must be a dollar amount like 25 or 19.99, got {raw[:40]!r}")
    cents = (match.group(2) or "0").ljust(2, "0")
    return int(match.group(1)) * 100 + int(cents)


def choice(params: Params, name: str, options: Sequence[str], *, default: str) -> str:
    """One of ``options`` (matched case-insensitively), or ``default`` when empty.

    Raises:
        BadRequest: the value is not one of the options; the message lists them.
    """
    raw = params.get(name, "").strip()
    if not raw:
        return default
    by_lower = {o.lower(): o for o in options}
    if raw.lower() in by_lower:
        return by_lower[raw.lower()]
    shown = raw[:40]
    raise BadRequest(
        f"{name} must be one of {', '.join(options)}; got {shown!r}.{did_you_mean(shown, options)}"
    )
