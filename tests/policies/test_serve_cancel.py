"""``agentgym serve`` cancels the rows of a client that went away, over real loopback HTTP
with the tiny model: mid-stream (token chunks, text completions, tool-call replies that
stream whole), while still queued, and a plain request; the rows it shared a batch with
are untouched and the server keeps serving."""

from __future__ import annotations

import http.client
import json
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from agentgym_envs.serving.server import ChatServer, start_server
from agentgym_envs.serving.stream import GONE_POLL_S

LONG = 1500  # tokens: far more than a row samples before its client's exit is seen
TOOLS = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def served(tiny_folder: str) -> Iterator[tuple[ChatServer, str]]:
    server, url = start_server(tiny_folder, device="cpu", max_batch=8, model_id="tiny")
    yield server, url
    server.close()


def wait_for(condition: Callable[[], bool], what: str, limit_s: float = 120.0) -> None:
    """Poll ``condition`` until it holds (a generous deadline, never a timing claim)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {limit_s:g} s"
        time.sleep(0.02)


def chat(**extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Tell me a long story."}]
    return {"model": "tiny", "messages": messages, "temperature": 0, **extra}


class Client:
    """One request on its own connection, read as far as the test likes, then dropped."""

    def __init__(self, url: str, path: str, body: dict[str, Any]) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=120)
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        self.conn.request("POST", f"{parts.path}{path}", body=data, headers=headers)
        self.response: http.client.HTTPResponse | None = None

    def read_events_until(self, wanted: Callable[[dict[str, Any]], bool]) -> list[Any]:
        """Stream events up to the first one ``wanted`` accepts."""
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        events: list[dict[str, Any]] = []
        while True:
            line = self.response.readline()
            assert line, f"the stream ended before the wanted event: {events}"
            if line.startswith(b"data: {"):
                events.append(json.loads(line.removeprefix(b"data: ")))
                if wanted(events[-1]):
                    return events

    def leave(self) -> None:
        """Close the connection without reading the rest."""
        if self.response is not None:
            self.response.close()
        self.conn.close()


def has_text(event: dict[str, Any]) -> bool:
    choice = (event.get("choices") or [{}])[0]
    return bool(choice.get("text") or (choice.get("delta") or {}).get("content"))


def all_roles_sent(n: int) -> Callable[[dict[str, Any]], bool]:
    seen: set[int] = set()

    def wanted(event: dict[str, Any]) -> bool:
        seen.update(c["index"] for c in event["choices"] if c["delta"].get("role"))
        return len(seen) == n

    return wanted


def settled(server: ChatServer) -> None:
    wait_for(lambda: server.batcher.pending == 0, "the server to have no pending rows")


@pytest.mark.parametrize(
    ("path", "body", "rows", "wanted"),
    [
        ("/chat/completions", chat(max_tokens=LONG, stream=True, n=2), 2, has_text),
        (
            "/completions",
            {
                "model": "tiny",
                "prompt": "Once",
                "max_tokens": LONG,
                "temperature": 0,
                "stream": True,
            },
            1,
            has_text,
        ),
        # with tools, a reply streams whole once generated: nothing is written meanwhile
        (
            "/chat/completions",
            chat(max_tokens=LONG, stream=True, tools=TOOLS),
            1,
            all_roles_sent(1),
        ),
    ],
    ids=["chat-tokens", "text-tokens", "chat-tools-whole"],
)
def test_a_client_that_leaves_mid_stream_cancels_its_rows(
    served: tuple[ChatServer, str],
    path: str,
    body: dict[str, Any],
    rows: int,
    wanted: Callable[[dict[str, Any]], bool],
) -> None:
    server, url = served
    settled(server)
    cancelled, sampled = server.batcher.cancelled_rows, server.batcher.tokens_sampled
    client = Client(url, path, body)
    client.read_events_until(wanted)
    # the role chunks go out before the rows are queued: wait until they are
    wait_for(lambda: server.batcher.pending > 0, "the rows to reach the batcher")
    client.leave()
    settled(server)
    assert server.batcher.cancelled_rows == cancelled + rows
    assert server.batcher.tokens_sampled - sampled < LONG  # all rows together, far short


def test_a_queued_stream_whose_client_left_never_runs(served: tuple[ChatServer, str]) -> None:
    server, url = served
    settled(server)
    cancelled, sampled = server.batcher.cancelled_rows, server.batcher.tokens_sampled
    runs = len(server.batcher.batch_sizes)
    with server.batcher.hold():  # the model is busy: the request waits in the queue
        client = Client(url, "/chat/completions", chat(max_tokens=LONG, stream=True))
        client.read_events_until(all_roles_sent(1))  # headers and role chunk are out
        wait_for(lambda: server.batcher.pending == 1, "the row to be queued")
        client.leave()
        settled(server)  # given up while the model was still busy
        assert server.batcher.cancelled_rows == cancelled + 1
    after = Client(url, "/completions", {"model": "tiny", "prompt": "Hi", "max_tokens": 3})
    assert after.conn.getresponse().status == 200  # the server goes on
    after.leave()
    assert server.batcher.tokens_sampled == sampled + 3  # the cancelled row never ran
    assert server.batcher.batch_sizes[runs:] == [1]


def test_a_plain_request_whose_client_left_is_cancelled(served: tuple[ChatServer, str]) -> None:
    server, url = served
    settled(server)
    cancelled, sampled = server.batcher.cancelled_rows, server.batcher.tokens_sampled
    client = Client(url, "/chat/completions", chat(max_tokens=LONG))
    wait_for(lambda: server.batcher.pending > 0 or server.batcher.tokens_sampled > sampled, "a row")
    client.leave()
    settled(server)
    assert server.batcher.cancelled_rows == cancelled + 1
    assert server.batcher.tokens_sampled - sampled < LONG


def test_rows_sharing_a_batch_with_a_cancelled_one_are_untouched(
    served: tuple[ChatServer, str],
) -> None:
    server, url = served
    plain = chat(max_tokens=48, seed=5, temperature=0.9)

    def ask() -> dict[str, Any]:
        client = Client(url, "/chat/completions", plain)
        assert client.conn.sock is not None
        response = client.conn.getresponse()
        reply: dict[str, Any] = json.loads(response.read())
        client.leave()
        return reply

    alone = ask()
    settled(server)
    cancelled = server.batcher.cancelled_rows
    answer: list[dict[str, Any]] = []
    runs = len(server.batcher.batch_sizes)
    with server.batcher.hold():  # both requests go out in one batch
        leaving = Client(url, "/chat/completions", chat(max_tokens=LONG, stream=True))
        staying = threading.Thread(target=lambda: answer.append(ask()))
        staying.start()
        wait_for(lambda: server.batcher.pending == 2, "both rows to be queued")
    leaving.read_events_until(has_text)
    leaving.leave()
    staying.join(timeout=120)
    settled(server)
    assert server.batcher.batch_sizes[runs] == 2  # they did share a batch
    assert server.batcher.cancelled_rows == cancelled + 1
    assert answer[0]["choices"] == alone["choices"]
    assert answer[0]["usage"] == alone["usage"]


@pytest.fixture
def high_descriptors() -> Iterator[None]:
    """Hold enough descriptors open that the next sockets get numbers above 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"needs an open-file limit of 1300, the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < 1300:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1300, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_live_client_on_a_high_descriptor_gets_its_reply(
    served: tuple[ChatServer, str], high_descriptors: None
) -> None:
    """``select`` refuses descriptors of 1024 or more; the disconnect check must not take
    that refusal for a client that left (its rows cancelled, no reply)."""
    server, url = served
    settled(server)
    cancelled = server.batcher.cancelled_rows
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 3, "temperature": 0}
    with server.batcher.hold():  # the row waits while the handler polls the client
        client = Client(url, "/completions", body)
        assert client.conn.sock is not None and client.conn.sock.fileno() >= 1024
        wait_for(
            lambda: server.batcher.pending > 0 or server.batcher.cancelled_rows > cancelled,
            "the request to reach the batcher",
        )
        time.sleep(4 * GONE_POLL_S)  # several disconnect polls while the client waits
    try:
        response = client.conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["choices"][0]["finish_reason"] in ("stop", "length")
        assert server.batcher.cancelled_rows == cancelled
    finally:
        client.leave()
