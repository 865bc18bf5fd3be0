"""JsonHttpClient against a real scripted HTTP server on loopback: transient failures
(5xx, 429, dropped and refused connections, timeouts, malformed replies) are retried with
backoff, refused requests (4xx) are not, and every failure names the URL and the cause."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm.http_client import BadReplyError, HttpCallError, JsonHttpClient

# what the server does for request i: (status, body, headers), or None to drop the socket
Script = Callable[[int, dict[str, Any]], tuple[int, Any, dict[str, str]] | None]


class Server:
    """A scripted JSON endpoint that records each request's body and headers."""

    def __init__(self, script: Script) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                server.headers.append(dict(self.headers))
                answer = script(len(server.bodies) - 1, body)
                if answer is None:  # drop the connection without a reply
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, payload, headers = answer
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    if "Content-Length" not in headers:  # a script's own: a body cut short
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client timed out and left

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join()


@pytest.fixture
def serve() -> Iterator[Callable[[Script], Server]]:
    servers: list[Server] = []

    def make(script: Script) -> Server:
        servers.append(Server(script))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def ok(i: int, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    return 200, {"echo": body, "request": i}, {}


def client(url: str, **kwargs: Any) -> JsonHttpClient:
    return JsonHttpClient(url, **{"backoff_s": 0.001, "max_backoff_s": 0.01, **kwargs})


def test_a_json_body_is_posted_and_the_reply_object_returned(serve: Any) -> None:
    server = serve(ok)
    answer = client(server.url, api_key="sk-1").post("/completions", {"prompt": "héllo"})
    assert answer.value == {"echo": {"prompt": "héllo"}, "request": 0}
    assert answer.attempts == 1
    assert server.headers[0]["Authorization"] == "Bearer sk-1"
    assert server.headers[0]["Content-Type"] == "application/json"


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 429])
def test_transient_statuses_are_retried_until_they_pass(serve: Any, status: int) -> None:
    server = serve(lambda i, b: (status, {"error": {"message": "busy"}}, {}) if i < 2 else ok(i, b))
    answer = client(server.url, retries=2).post("/x", {"a": 1})
    assert answer.attempts == 3 and len(server.bodies) == 3
    assert answer.value["request"] == 2 and server.bodies == [{"a": 1}] * 3


def test_exhausted_retries_raise_with_the_last_status_and_the_attempts(serve: Any) -> None:
    server = serve(lambda i, b: (503, {"error": {"message": "overloaded"}}, {}))
    with pytest.raises(HttpCallError) as info:
        client(server.url, retries=2).post("/completions", {})
    error = info.value
    assert (error.status, error.transient, error.attempts) == (503, True, 3)
    assert len(server.bodies) == 3
    assert str(error) == f"HTTP 503 from {server.url}/completions: overloaded (after 3 attempts)"


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_refused_requests_are_not_retried(serve: Any, status: int) -> None:
    server = serve(lambda i, b: (status, {"error": {"message": "prompt too long"}}, {}))
    with pytest.raises(HttpCallError) as info:
        client(server.url, retries=3).post("/completions", {})
    assert len(server.bodies) == 1
    assert (info.value.status, info.value.transient, info.value.attempts) == (status, False, 1)
    assert str(info.value) == f"HTTP {status} from {server.url}/completions: prompt too long"


def test_an_error_body_that_is_not_openai_shaped_is_quoted(serve: Any) -> None:
    server = serve(lambda i, b: (404, b"<html>no such route</html>", {}))
    with pytest.raises(HttpCallError, match=r"HTTP 404 from .*/nope: <html>no such route"):
        client(server.url).post("/nope", {})


def test_an_error_body_cut_short_is_a_retried_http_call_error(serve: Any) -> None:
    # the body ends before its Content-Length: reading it raises http.client.IncompleteRead
    server = serve(lambda i, b: (503, b'{"error":', {"Content-Length": "100"}))
    with pytest.raises(HttpCallError) as info:
        client(server.url, retries=1).post("/completions", {})
    assert (info.value.status, info.value.transient, info.value.attempts) == (503, True, 2)
    assert len(server.bodies) == 2
    assert "IncompleteRead" in str(info.value)


def test_extra_retry_statuses_are_retried(serve: Any) -> None:
    server = serve(lambda i, b: (409, {}, {}) if i == 0 else ok(i, b))
    assert client(server.url, retry_status=frozenset({409})).post("/x", {}).attempts == 2


def test_dropped_connections_are_retried(serve: Any) -> None:
    server = serve(lambda i, b: None if i == 0 else ok(i, b))
    answer = client(server.url, retries=1).post("/x", {})
    assert answer.attempts == 2 and answer.value["request"] == 1


def test_an_unreachable_server_is_retried_then_named(serve: Any) -> None:
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(HttpCallError) as info:
        client(f"http://127.0.0.1:{port}/v1", retries=2).post("/x", {})
    error = info.value
    assert (error.status, error.transient, error.attempts) == (None, True, 3)
    assert str(error).startswith(f"cannot reach http://127.0.0.1:{port}/v1/x: ")
    assert "refused" in str(error).lower()


def test_a_request_past_its_timeout_fails_with_the_timeout_named(serve: Any) -> None:
    release = threading.Event()
    server = serve(lambda i, b: (release.wait(30), ok(i, b))[1])
    try:
        with pytest.raises(HttpCallError) as info:
            client(server.url, timeout_s=60, retries=1).post("/slow", {}, timeout_s=0.2)
    finally:
        release.set()
    error = info.value
    assert (error.status, error.transient, error.attempts) == (None, True, 2)
    assert f"from {server.url}/slow (timeout 0.2 s)" in str(error)
    assert "TimeoutError" in str(error) and len(server.bodies) == 2


def test_a_request_that_is_not_idempotent_is_sent_once(serve: Any) -> None:
    server = serve(lambda i, b: (503, {}, {}))
    with pytest.raises(HttpCallError) as info:
        client(server.url, retries=4).post("/load_weights", {}, retries=0)
    assert len(server.bodies) == 1 and info.value.attempts == 1


def test_replies_that_are_not_json_objects_are_retried(serve: Any) -> None:
    replies: list[tuple[int, Any, dict[str, str]]] = [
        (200, b"not json", {}),
        (200, [1, 2], {}),
        (200, {"fine": True}, {}),
    ]
    server = serve(lambda i, b: replies[i])
    answer = client(server.url, retries=2).post("/x", {})
    assert answer.value == {"fine": True} and answer.attempts == 3
    server = serve(lambda i, b: (200, b"<html>", {}))
    with pytest.raises(HttpCallError, match=r"answered with no JSON: b'<html>' \(after 2"):
        client(server.url, retries=1).post("/x", {})


def test_a_reply_the_parser_rejects_is_retried(serve: Any) -> None:
    def parse(reply: dict[str, Any]) -> int:
        if "choices" not in reply:
            raise BadReplyError(f"no choices in {reply}")
        return len(reply["choices"])

    server = serve(lambda i, b: (200, {"choices": [1, 2]} if i else {"nothing": 1}, {}))
    answer = client(server.url).post("/x", {}, parse)
    assert (answer.value, answer.attempts) == (2, 2)
    server = serve(lambda i, b: (200, {"nothing": 1}, {}))
    with pytest.raises(HttpCallError, match="malformed reply: no choices in"):
        client(server.url, retries=1).post("/x", {}, parse)


def test_the_backoff_doubles_up_to_its_cap() -> None:
    plain = JsonHttpClient("http://127.0.0.1:9/v1", backoff_s=0.25, max_backoff_s=1.5)
    assert [plain.delay(a) for a in range(1, 6)] == [0.25, 0.5, 1.0, 1.5, 1.5]
    assert plain.delay(1, retry_after=0.9) == 0.9  # the server's Retry-After, if longer
    assert plain.delay(1, retry_after=60.0) == 1.5  # ... but never past the cap


def test_the_jitter_is_seeded_and_bounded() -> None:
    def delays(seed: int) -> list[float]:
        jittered = JsonHttpClient(
            "http://x/v1", backoff_s=1.0, max_backoff_s=100.0, jitter_seed=seed
        )
        return [jittered.delay(a) for a in range(1, 7)]

    first = delays(3)
    assert first == delays(3) != delays(4)
    for attempt, delay in enumerate(first):
        assert 0.5 * 2**attempt <= delay < 2**attempt


def test_the_retries_wait_the_backoff_and_honour_retry_after(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(lambda i, b: (429, {}, {"Retry-After": "0.05"}) if i < 2 else ok(i, b))
    http = client(server.url, retries=2, backoff_s=0.001, max_backoff_s=1.0)
    with caplog.at_level(logging.WARNING, logger="agentgym_envs.llm.http_client"):
        assert http.post("/x", {}).attempts == 3
    waits = [r.getMessage() for r in caplog.records]
    assert len(waits) == 2
    for attempt, message in enumerate(waits, 1):
        assert message.startswith(f"HTTP 429 from {server.url}/x")
        assert message.endswith(f"retrying in 0.05 s (attempt {attempt} of 3)")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "127.0.0.1:8000/v1"},
        {"timeout_s": 0},
        {"retries": -1},
        {"backoff_s": -1.0},
        {"max_backoff_s": -0.5},
    ],
)
def test_bad_settings_raise_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"expected|http://"):
        JsonHttpClient(**{"base_url": "http://127.0.0.1:1/v1", **kwargs})
