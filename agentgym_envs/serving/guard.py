"""What ``agentgym serve`` checks before it reads a POST body (no torch here).

A web page the user visits can make their browser send requests to a server on their
machine: a cross-site form or ``fetch`` (CSRF), or a page whose DNS name was re-pointed at
``127.0.0.1`` (DNS rebinding), so that the browser thinks the server is the page's own
origin. Both would reach ``/v1/load_weights``, which trusts loopback clients. A browser
always says where such a request comes from, and what it cannot do without asking the
server first (a CORS preflight, which this server never answers), so every POST must:

* carry a JSON ``Content-Type`` (``application/json``): a page can send ``text/plain``,
  form and multipart bodies to any server without a preflight, but not JSON;
* name an allowed ``Host`` (:func:`host_allowed`): a rebound page's requests name the
  attacker's DNS name, never a loopback address or this machine's own name;
* carry no ``Origin``, or the server's own: ``http(s)://`` + the ``Host`` header (a
  browser sends ``Origin`` with every cross-origin POST; API clients send none).

Clients that are not browsers (the OpenAI client, ``curl -H 'Content-Type:
application/json'``, ``HttpGenerator``) pass untouched.

The body's size is checked from ``Content-Length`` before a byte is read
(:data:`DEFAULT_MAX_BODY_BYTES`, ``--max-body-bytes``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from email.message import Message
from urllib.parse import urlsplit

from agentgym_envs.serving.api import BadRequest

__all__ = ["DEFAULT_MAX_BODY_BYTES", "check_post", "host_allowed"]

DEFAULT_MAX_BODY_BYTES = 8 << 20
"""The largest request body served by default (8 MiB): 64 token-id prompts of 16k tokens
fit, and a chat of any context a local model has."""

_WILDCARDS = ("", "0.0.0.0", "::")


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return None


def _hostname(host: str) -> str | None:
    """The name in a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowercased."""
    try:
        return urlsplit(f"//{host.strip()}").hostname
    except ValueError:
        return None


def host_allowed(host: str, bound: str, allowed: Iterable[str] = ()) -> bool:
    """Whether a request's ``Host`` header names this server.

    Allowed: ``localhost`` and its subdomains (browsers resolve them to loopback
    themselves), loopback addresses, the name or address the server was bound to, this
    machine's host name, the names in ``allowed`` (``--allowed-host``), and, when the
    server listens on every address (``0.0.0.0``, ``::``), any IP address: only a DNS
    name can be re-pointed by an attacker, so a name must be one of the above.

    Args:
        host: the ``Host`` header.
        bound: the address or name the server was bound to.
        allowed: further host names clients use (e.g. a container's service name).
    """
    name = _hostname(host)
    if not name:
        return False
    names = {"localhost", bound.lower(), socket.gethostname().lower()}
    names |= {a.lower() for a in allowed}
    if name in names or name.endswith(".localhost"):
        return True
    address = _address(name)
    if address is None:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    if address.is_loopback or (mapped is not None and mapped.is_loopback):
        return True
    bound_address = _address(bound)
    return bound.lower() in _WILDCARDS or (bound_address is not None and address == bound_address)


def check_post(headers: Message, bound: str, allowed: Iterable[str], max_body_bytes: int) -> int:
    """Check a POST's headers before its body is read; the body's length.

    Raises:
        BadRequest: 403 for a foreign ``Host`` or ``Origin``, 415 for a body that is not
            JSON, 413 for one over ``max_body_bytes``, 400 for a bad ``Content-Length``.
    """
    host = headers.get("Host")
    if host is not None and not host_allowed(host, bound, allowed):
        raise BadRequest(
            f"the Host header {host!r} does not name this server (the shape of a DNS "
            "rebinding attack); call it by a loopback address, the address it is bound to, "
            "or start it with --allowed-host NAME",
            status=403,
            kind="permission_error",
        )
    origin = headers.get("Origin")
    if origin is not None and not _same_origin(origin, host, bound, allowed):
        raise BadRequest(
            f"the Origin {origin!r} is not this server's (the shape of a cross-site request "
            "from a web page); API clients send no Origin header",
            status=403,
            kind="permission_error",
        )
    if headers.get_content_type() != "application/json":
        raise BadRequest(
            f"the body must be JSON sent as Content-Type: application/json, got "
            f"{headers.get('Content-Type')!r}",
            status=415,
            code="unsupported_media_type",
        )
    try:
        length = int(headers.get("Content-Length") or 0)
    except ValueError:
        raise BadRequest("Content-Length is not a number") from None
    if length < 0:
        raise BadRequest(f"Content-Length must be >= 0, got {length}")
    if length > max_body_bytes:
        raise BadRequest(
            f"the body has {length} bytes; this server takes at most {max_body_bytes} "
            "(--max-body-bytes)",
            status=413,
            code="request_too_large",
        )
    return length


def _same_origin(origin: str, host: str | None, bound: str, allowed: Iterable[str]) -> bool:
    """Whether ``Origin`` is ``http(s)://`` + the ``Host`` header, an allowed host."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False  # "null" (a sandboxed page, a file) and anything else
    if host is not None and parts.netloc.lower() != host.strip().lower():
        return False
    return host_allowed(parts.netloc, bound, allowed)
