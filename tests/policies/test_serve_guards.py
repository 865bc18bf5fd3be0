"""``agentgym serve`` against hostile or greedy clients, over real loopback HTTP with the
tiny model: an oversized body is refused before it is read, a prompt that cannot fit
the context is refused before it is tokenised, a browser-shaped request (foreign
``Origin`` or ``Host``, a non-JSON body) is refused on every POST endpoint, and a small
request sent behind a big one is not made to wait for all of it."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.serving.engine import RowJob
from agentgym_envs.serving.guard import DEFAULT_MAX_BODY_BYTES, host_allowed
from agentgym_envs.serving.server import ChatServer, start_server

POSTS = ("/chat/completions", "/completions", "/load_weights")


@pytest.fixture(scope="module")
def served(tiny_folder: str) -> Iterator[tuple[ChatServer, str]]:
    server, url = start_server(tiny_folder, device="cpu", max_batch=2, model_id="tiny")
    yield server, url
    server.close()


def post(
    url: str, path: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{url}{path}", data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def chat(content: str = "Say hi.", **extra: Any) -> bytes:
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(body).encode()


def status_of(server: ChatServer, head: str) -> str:
    """Send a raw request head (no body); the status code of the answer."""
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), int(port)), timeout=30) as sock:
        sock.sendall(head.encode())
        return sock.recv(64).decode().split("\r\n")[0].split()[1]


# --------------------------------------------------------------------------- huge bodies


def test_a_body_over_the_cap_is_refused_before_it_is_read(served: tuple[ChatServer, str]) -> None:
    server, url = served
    assert server.max_body_bytes == DEFAULT_MAX_BODY_BYTES < 15_000_000
    server.socket_timeout_s = 5.0  # were the body awaited, the answer would be a 408
    try:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 15000000\r\n\r\n"
        )
        assert status_of(server, head) == "413"  # announced, never sent: not read
    finally:
        server.socket_timeout_s = 60.0
    status, reply = post(url, "/chat/completions", chat(max_tokens=2))
    assert status == 200, reply


def test_the_body_cap_is_configurable(tiny_folder: str) -> None:
    server, url = start_server(tiny_folder, device="cpu", model_id="tiny", max_body_bytes=2000)
    try:
        status, reply = post(url, "/chat/completions", chat("x" * 3000, max_tokens=2))
        assert status == 413 and "--max-body-bytes" in reply["error"]["message"], reply
        assert post(url, "/chat/completions", chat(max_tokens=2))[0] == 200
    finally:
        server.close()


def test_cli_options_and_a_bad_cap(served: tuple[ChatServer, str]) -> None:
    from agentgym_envs.cli import build_parser

    args = build_parser().parse_args(
        ["serve", "--max-body-bytes", "1000", "--allowed-host", "a", "--allowed-host", "b"]
    )
    assert args.max_body_bytes == 1000 and args.allowed_host == ["a", "b"]
    defaults = build_parser().parse_args(["serve"])
    assert defaults.max_body_bytes == DEFAULT_MAX_BODY_BYTES and defaults.allowed_host == []
    server, _ = served
    with pytest.raises(ConfigError, match="max_body_bytes must be >= 1"):
        start_server("tiny", lm=server.lm, max_body_bytes=0)


def test_a_prompt_too_long_for_the_context_is_refused_before_tokenising(
    served: tuple[ChatServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, url = served
    calls: list[int] = []
    prompt_ids, tokenizer = server.lm.prompt_ids, server.lm.tokenizer

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return prompt_ids(*args, **kwargs)

    def counted_tokenizer(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return tokenizer(*args, **kwargs)

    monkeypatch.setattr(server.lm, "prompt_ids", counted)
    huge = "word " * 1_000_000  # 5 MB: under the body cap, far over any context
    status, reply = post(url, "/chat/completions", chat(huge, max_tokens=2))
    assert status == 400 and reply["error"]["code"] == "context_length_exceeded", reply
    assert "characters" in reply["error"]["message"]
    text = json.dumps({"model": "tiny", "prompt": huge, "max_tokens": 2}).encode()
    monkeypatch.setattr(server.lm, "tokenizer", counted_tokenizer)
    status, reply = post(url, "/completions", text)
    assert status == 400 and reply["error"]["code"] == "context_length_exceeded", reply
    assert calls == []  # neither prompt was tokenised
    monkeypatch.undo()
    assert post(url, "/chat/completions", chat(max_tokens=2))[0] == 200


# --------------------------------------------------------------------------- browsers


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "http://evil.example", "Content-Type": "text/plain"}, 403),
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}, 403),
        ({"Host": "evil.example"}, 403),
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ],
    ids=[
        "csrf-text-plain",
        "csrf-json",
        "opaque-origin",
        "dns-rebinding",
        "foreign-host",
        "text-plain",
        "form",
    ],
)
def test_browser_shaped_posts_are_refused_on_every_endpoint(
    served: tuple[ChatServer, str],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    headers: dict[str, str],
    status: int,
) -> None:
    server, url = served
    loads: list[str] = []
    monkeypatch.setattr(server, "load_weights", lambda folder: loads.append(folder) or 1)
    bodies = {
        "/chat/completions": chat(max_tokens=2),
        "/completions": json.dumps({"model": "tiny", "prompt": [1, 2], "max_tokens": 2}).encode(),
        "/load_weights": json.dumps({"path": "/tmp/checkpoint"}).encode(),
    }
    got, reply = post(url, path, bodies[path], headers)
    assert got == status, reply
    assert reply["error"]["type"] == (
        "permission_error" if status == 403 else "invalid_request_error"
    )
    assert loads == []


def test_same_origin_and_plain_clients_are_served(
    served: tuple[ChatServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, url = served
    port = server.server_address[1]
    loads: list[str] = []
    monkeypatch.setattr(server, "load_weights", lambda folder: loads.append(folder) or 1)
    for headers in (
        {},
        {"Content-Type": "application/json; charset=utf-8"},
        {"Origin": f"http://127.0.0.1:{port}"},
        {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
    ):
        assert post(url, "/chat/completions", chat(max_tokens=2), headers)[0] == 200, headers
    status, reply = post(url, "/load_weights", json.dumps({"path": "/tmp/w"}).encode())
    assert status == 200 and loads == ["/tmp/w"], reply


def test_host_allowed() -> None:
    for host in ("127.0.0.1:8000", "[::1]:8000", "localhost", "LOCALHOST:1", "a.localhost:2"):
        assert host_allowed(host, "127.0.0.1", ())
    assert not host_allowed("evil.example:8000", "127.0.0.1", ())
    assert not host_allowed("10.0.0.5:8000", "127.0.0.1", ())  # not the bound address
    assert host_allowed("10.0.0.5:8000", "0.0.0.0", ())  # any address when bound to all
    assert not host_allowed("evil.example", "0.0.0.0", ())  # a DNS name must be allowed
    assert host_allowed("gpu-box:8000", "0.0.0.0", ("gpu-box",))
    assert host_allowed("gpu-box:8000", "gpu-box", ())  # the name the server was bound to
    assert host_allowed(socket.gethostname(), "0.0.0.0", ())


# --------------------------------------------------------------------------- fairness


def test_a_small_request_behind_a_big_one_finishes_first(served: tuple[ChatServer, str]) -> None:
    """max_batch=2: a big request's 8 rows fill 4 batches; a 4-token request sent after
    it shares the next batch (the first already holds 2 of the big rows) instead of
    waiting for all 4."""
    server, url = served
    batches: list[list[int]] = []  # the max_new of each row, per batch
    run = server.engine.run

    def recorded(jobs: list[RowJob], version: int = 0) -> Any:
        batches.append([job.max_new for job in jobs])
        return run(jobs, version)

    server.engine.run = recorded  # type: ignore[method-assign]
    finished: list[str] = []
    big = chat("Tell me everything.", n=8, max_tokens=40, temperature=1.0, seed=1)
    small = chat("Hi.", max_tokens=4, temperature=0)

    def ask(name: str, body: bytes) -> None:
        status, reply = post(url, "/chat/completions", body)
        assert status == 200, reply
        finished.append(name)

    threads = [
        threading.Thread(target=ask, args=("big", big)),
        threading.Thread(target=ask, args=("small", small)),
    ]
    try:
        with server.batcher.hold():  # both requests queue up, the big one first
            threads[0].start()
            _wait(lambda: server.batcher.pending == 8, "the big request's rows")
            threads[1].start()
            _wait(lambda: server.batcher.pending == 9, "the small request's row")
        for thread in threads:
            thread.join(timeout=300)
    finally:
        server.engine.run = run  # type: ignore[method-assign]
    assert finished == ["small", "big"], batches
    small_batch = next(i for i, b in enumerate(batches) if 4 in b)
    last_big = max(i for i, b in enumerate(batches) if 40 in b)
    assert small_batch < last_big, batches


def _wait(condition: Any, what: str) -> None:
    for _ in range(6000):  # 120 s of 20 ms polls: a generous bound, never a timing claim
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"still waiting for {what}")
