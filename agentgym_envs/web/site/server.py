"""The shop's HTTP server: one local process serving many tenants, each its own world.

A tenant is one episode's shop: an in-memory SQLite database made from a world's
bytes. The browser env creates a tenant per episode and sets the cookie
``agentgym_tenant=<id>`` on its browser context (or the header ``X-Agentgym-Tenant``);
a request without a known tenant gets a 403 page. Requests to one tenant run one at a
time under that tenant's lock, requests to different tenants run concurrently. A
guarded tenant (:meth:`SiteServer.guard_tenant`, one per agent episode) has every
request an agent must not send refused and recorded, as the router itself reads it.

Example::

    with SiteServer() as site:
        tenant = site.create_tenant(build_world(seed=7))
        # browse f"{site.url}/search?q=shoe" with the cookie agentgym_tenant=<tenant>
        orders = site.connection(tenant).execute("SELECT * FROM orders").fetchall()
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from agentgym_envs.core.errors import AgentGymError, did_you_mean
from agentgym_envs.web.site import pages
from agentgym_envs.web.site.request import BadRequest, Forbidden, HttpError, Response
from agentgym_envs.web.site.world import open_world

logger = logging.getLogger(__name__)

TENANT_COOKIE = "agentgym_tenant"
TENANT_HEADER = "X-Agentgym-Tenant"


class TenantNotFoundError(AgentGymError, KeyError):
    """A tenant id that the server never created or has dropped."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class SiteNotRunningError(AgentGymError, RuntimeError):
    """The server's URL was asked for before ``start()`` or after ``stop()``."""


@dataclass
class _Tenant:
    conn: sqlite3.Connection
    history: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    recent: deque[str] = field(default_factory=deque)
    dropped: bool = False
    guarded: bool = False  # refuse and record requests an agent must not send
    allowed_payment: int | None = None
    violations: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.history)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, site: SiteServer, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.site = site

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A browser closing a keep-alive socket mid-request is routine, not an error.
        logger.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, asks the site for the response and writes it back."""

    protocol_version = "HTTP/1.1"  # keep-alive: a browser reuses its connections
    timeout = 60  # seconds an idle keep-alive connection may stay open
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log lines that http.server prints to stderr."""

    def do_GET(self) -> None:
        """Serve GET."""
        self._serve()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def _serve(self) -> None:
        length = self.headers.get("Content-Length", "").strip() or "0"
        problem: HttpError | None = None
        if self.headers.get("Transfer-Encoding"):
            problem = BadRequest("send forms with a Content-Length, not a Transfer-Encoding")
        elif not (length.isascii() and length.isdigit()):
            problem = BadRequest(f"Content-Length must be a byte count, got {length[:40]!r}")
        elif int(length) > pages.MAX_BODY:
            problem = pages.PayloadTooLarge(
                f"form bodies are limited to {pages.MAX_BODY} bytes, got {length}"
            )
        if problem is not None:
            self.close_connection = True  # an unread body would be taken for the next request
            self._send(pages.error_page(None, problem))
            return
        body = self.rfile.read(int(length)) if int(length) else b""
        response = self.server.site.serve(
            self._tenant_id(), self.command, self.path, body, self.headers.get("Content-Type")
        )
        self._send(response)

    def _tenant_id(self) -> str:
        header = self.headers.get(TENANT_HEADER, "").strip()
        if header:
            return header
        for cookie in self.headers.get_all("Cookie", []):
            for part in cookie.split(";"):
                name, _, value = part.strip().partition("=")
                if name == TENANT_COOKIE:
                    return value.strip().strip('"')
        return ""

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)


class SiteServer:
    """The shop site on 127.0.0.1 at an ephemeral port, served from a daemon thread.

    Args:
        host: Interface to bind; keep the default so only this machine can connect.
        port: Port to bind; 0 picks a free one (read it from :attr:`url`).
        history: How many recent requests to remember per tenant, for debugging.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, history: int = 50) -> None:
        self._address = (host, port)
        self._history = history
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tenants: dict[str, _Tenant] = {}
        self._lock = threading.Lock()  # guards _tenants (each tenant has its own lock)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Bind the socket and start serving; does nothing when already running."""
        if self._httpd is not None:
            return
        self._httpd = _HTTPServer(self, self._address)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="agentgym-shop-site", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice. Tenants are kept."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> SiteServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()

    @property
    def url(self) -> str:
        """The base URL, such as ``http://127.0.0.1:40123`` (no trailing slash).

        Raises:
            SiteNotRunningError: the server is not started.
        """
        if self._httpd is None:
            raise SiteNotRunningError("the site is not running; call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- tenants -----------------------------------------------------------------------

    def create_tenant(self, data: bytes) -> str:
        """Add a tenant whose database is a copy of ``data``; returns its id (a token).

        Raises:
            StateError: ``data`` is not a shop world.
        """
        tenant = _Tenant(open_world(data), self._history)
        with self._lock:
            tenant_id = secrets.token_hex(16)
            self._tenants[tenant_id] = tenant
        return tenant_id

    def restore_tenant(self, tenant: str, data: bytes) -> None:
        """Replace the tenant's database with ``data`` (a world or a snapshot).

        The tenant's connection object stays the same, so a grader's handle stays valid.
        The request count and history are kept.
        """
        open_world(data).close()  # validates before the tenant's database is touched
        state = self._get(tenant)
        with state.lock:
            state.conn.deserialize(data)

    def snapshot_tenant(self, tenant: str) -> bytes:
        """The tenant's database as bytes, for :meth:`restore_tenant` or :meth:`create_tenant`."""
        state = self._get(tenant)
        with state.lock:
            return state.conn.serialize()

    def drop_tenant(self, tenant: str) -> None:
        """Forget the tenant and close its database; later requests for it get a 403."""
        with self._lock:
            state = self._tenants.pop(tenant, None)
        if state is None:
            raise self._unknown(tenant)
        with state.lock:
            state.dropped = True
            state.conn.close()

    def guard_tenant(self, tenant: str, *, allowed_payment: int | None = None) -> None:
        """From now on refuse (403) and record the tenant's requests that
        :func:`~agentgym_envs.web.site.pages.violation` forbids: any request routed to
        the admin or account-deletion area and, when ``allowed_payment`` is set, a
        checkout paying with another method. Clears the violations recorded so far (a
        new episode); read them with :meth:`violations`."""
        state = self._get(tenant)
        with state.lock:
            state.guarded, state.allowed_payment = True, allowed_payment
            state.violations.clear()

    def violations(self, tenant: str) -> list[tuple[str, str]]:
        """The (gate, reason) of each request refused since :meth:`guard_tenant`."""
        state = self._get(tenant)
        with state.lock:
            return list(state.violations)

    def connection(self, tenant: str) -> sqlite3.Connection:
        """The tenant's live connection, for graders; read it between requests."""
        return self._get(tenant).conn

    def request_count(self, tenant: str) -> int:
        """How many requests named this tenant."""
        return self._get(tenant).requests

    def recent_requests(self, tenant: str) -> list[str]:
        """The tenant's last requests, oldest first, as ``"METHOD /path?query"``."""
        state = self._get(tenant)
        with state.lock:
            return list(state.recent)

    def tenants(self) -> list[str]:
        """The ids of every live tenant."""
        with self._lock:
            return sorted(self._tenants)

    def serve(
        self, tenant: str, method: str, target: str, body: bytes = b"",
        content_type: str | None = None,
    ) -> Response:  # fmt: skip
        """Answer one request for ``tenant`` as the HTTP handler does (usable without a
        socket); an empty or unknown tenant gets the 403 page."""
        with self._lock:
            state = self._tenants.get(tenant) if tenant else None
        if state is None:
            return pages.error_page(None, self._forbidden(tenant))
        with state.lock:
            if state.dropped:
                return pages.error_page(None, self._forbidden(tenant))
            state.requests += 1
            state.recent.append(f"{method} {target}")
            if state.guarded:  # judged by the router's own reading of the request
                found = pages.violation(method, target, body, content_type, state.allowed_payment)
                if found is not None:
                    state.violations.append(found)
                    return pages.error_page(state.conn, Forbidden(found[1]))
            return pages.respond(state.conn, method, target, body, content_type)

    def _get(self, tenant: str) -> _Tenant:
        with self._lock:
            state = self._tenants.get(tenant)
        if state is None:
            raise self._unknown(tenant)
        return state

    def _unknown(self, tenant: str) -> TenantNotFoundError:
        with self._lock:
            known = list(self._tenants)
        return TenantNotFoundError(
            f"unknown tenant {tenant!r}: expected an id returned by create_tenant() and not "
            f"dropped since ({len(known)} live).{did_you_mean(tenant, known)}"
        )

    @staticmethod
    def _forbidden(tenant: str) -> Forbidden:
        if not tenant:
            return Forbidden(
                f"No shop tenant was given. Set the cookie {TENANT_COOKIE}=<id> or the "
                f"header {TENANT_HEADER}: <id> to the id that create_tenant() returned."
            )
        return Forbidden(
            f"The shop tenant {tenant[:64]!r} is unknown or was dropped. Use an id that "
            "create_tenant() returned."
        )
