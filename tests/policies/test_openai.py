"""OpenAIPolicy against a local stub endpoint: retries, backoff, timeouts, concurrency,
native and text tool modes; tool-call text <-> native conversion."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.policies import openai_compat
from agentgym_envs.policies.chat import action_text, parse_tool_calls, tool_calls_to_action
from agentgym_envs.policies.openai_compat import OpenAIPolicy

Reply = tuple[int, dict[str, Any], dict[str, str]]  # status, body, headers

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "description": "Walk one cell.",
            "parameters": {"type": "object", "properties": {"direction": {"type": "string"}}},
        },
    }
]
RESET_INFO = {
    "system": 'Rules.\nExample: move(direction="up")',
    "tools": TOOLS,
    "seeds": {"env": 5},
}


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    body = {
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }
    return 200, body, {}


class Stub:
    """A scripted chat-completions endpoint that records requests and concurrency."""

    def __init__(self, respond: Callable[[int, dict[str, Any]], Reply]) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    index = len(stub.requests)
                    stub.requests.append(body)
                    stub.headers.append(dict(self.headers))
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                try:
                    status, payload, headers = stub.respond(index, body)
                finally:
                    with stub.lock:
                        stub.in_flight -= 1
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client timed out and left

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_factory() -> Iterator[Callable[[Callable[[int, dict[str, Any]], Reply]], Stub]]:
    stubs: list[Stub] = []

    def make(respond: Callable[[int, dict[str, Any]], Reply]) -> Stub:
        stubs.append(Stub(respond))
        return stubs[-1]

    yield make
    for stub in stubs:
        stub.close()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record backoff delays instead of waiting them out."""
    recorded: list[float] = []
    monkeypatch.setattr(openai_compat.time, "sleep", recorded.append)
    return recorded


def _policy(url: str, **kwargs: Any) -> OpenAIPolicy:
    return OpenAIPolicy(url, "m", **{"backoff_s": 0.01, **kwargs})


# --------------------------------------------------------------------------- retries


def test_500_then_200_is_retried(stub_factory: Any, sleeps: list[float]) -> None:
    call = {
        "id": "c9",
        "type": "function",
        "function": {"name": "move", "arguments": '{"direction": "up"}'},
    }
    stub = stub_factory(
        lambda i, _: (
            (500, {"error": {"message": "boom"}}, {}) if i == 0 else completion(calls=[call])
        )
    )
    policy = _policy(stub.url)
    (action,) = policy.act(["task"], [RESET_INFO])
    assert json.loads(action) == {"name": "move", "arguments": {"direction": "up"}}
    usage = policy.last_usage[0]
    assert usage["retries"] == 1 and usage["failed"] == 0
    assert (usage["tokens_in"], usage["tokens_out"]) == (11, 3)
    assert len(stub.requests) == 2 and len(sleeps) == 1
    policy.close()


def test_429_honours_retry_after(stub_factory: Any, sleeps: list[float]) -> None:
    stub = stub_factory(
        lambda i, _: (429, {}, {"Retry-After": "0.7"}) if i < 2 else completion("hi")
    )
    policy = _policy(stub.url, max_backoff_s=5.0)
    assert policy.act(["task"], [RESET_INFO]) == ["hi"]
    assert policy.last_usage[0]["retries"] == 2
    assert all(delay >= 0.7 for delay in sleeps) and len(sleeps) == 2
    policy.close()


def test_backoff_is_exponential_with_seeded_jitter(stub_factory: Any, sleeps: list[float]) -> None:
    stub = stub_factory(lambda i, _: (503, {}, {}))
    for _ in range(2):
        policy = _policy(stub.url, max_retries=4, backoff_s=1.0, max_backoff_s=100.0, seed=3)
        policy.act(["task"], [RESET_INFO])
        policy.close()
    first, second = sleeps[:4], sleeps[4:]
    assert first == second  # the jitter is seeded
    for attempt, delay in enumerate(first):
        assert 0.5 * 2**attempt <= delay < 2**attempt


def test_exhausted_retries_give_empty_action_and_failed(
    stub_factory: Any, sleeps: list[float]
) -> None:
    stub = stub_factory(lambda i, _: (503, {"error": {"message": "overloaded"}}, {}))
    policy = _policy(stub.url, max_retries=2)
    assert policy.act(["a", "b"], [RESET_INFO, RESET_INFO]) == ["", ""]
    assert [u["failed"] for u in policy.last_usage] == [1.0, 1.0]
    assert [u["retries"] for u in policy.last_usage] == [2.0, 2.0]
    assert len(stub.requests) == 6
    assert {f["slot"] for f in policy.failures} == {0, 1}
    assert "overloaded" in policy.failures[0]["error"]
    # the episode goes on: the next observation is the reply to the empty action
    assert policy.act(["error obs"], [{}], [0]) == [""]
    assert policy.conversation(0).turns[0].observation == "error obs"
    policy.close()


def test_permanent_errors_are_not_retried(stub_factory: Any, sleeps: list[float]) -> None:
    stub = stub_factory(lambda i, _: (400, {"error": {"message": "bad tools"}}, {}))
    policy = _policy(stub.url)
    assert policy.act(["task"], [RESET_INFO]) == [""]
    assert policy.last_usage[0]["retries"] == 0 and len(stub.requests) == 1
    assert "HTTP 400" in policy.failures[0]["error"] and "bad tools" in policy.failures[0]["error"]
    policy.close()


def test_malformed_replies_are_retried(stub_factory: Any, sleeps: list[float]) -> None:
    stub = stub_factory(lambda i, _: (200, {"nothing": 1}, {}) if i == 0 else completion("ok"))
    policy = _policy(stub.url)
    assert policy.act(["task"], [RESET_INFO]) == ["ok"]
    assert policy.last_usage[0]["retries"] == 1
    policy.close()


def test_timeouts_and_refused_connections_fail_softly(stub_factory: Any) -> None:
    stub = stub_factory(lambda i, _: (time.sleep(1.0), completion("late"))[1])
    policy = _policy(stub.url, timeout_s=0.2, max_retries=1)
    assert policy.act(["task"], [RESET_INFO]) == [""]
    usage = policy.last_usage[0]
    assert (usage["retries"], usage["failed"], usage["tokens_out"]) == (1, 1, 0)
    assert (
        "TimeoutError" in policy.failures[0]["error"] or "timed out" in policy.failures[0]["error"]
    )
    policy.close()
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    policy = _policy(f"http://127.0.0.1:{port}/v1", max_retries=1)
    assert policy.act(["task"], [RESET_INFO]) == [""]
    assert "cannot reach" in policy.failures[0]["error"]
    policy.close()


# --------------------------------------------------------------------------- concurrency


def test_concurrency_limit_is_respected(stub_factory: Any) -> None:
    def slow(i: int, body: dict[str, Any]) -> Reply:
        time.sleep(0.1)
        return completion(f"r{body['messages'][-1]['content']}")

    stub = stub_factory(slow)
    policy = _policy(stub.url, concurrency=2)
    observations = [str(i) for i in range(6)]
    actions = policy.act(observations, [RESET_INFO] * 6, slots=[10, 11, 12, 13, 14, 15])
    assert actions == [f"r{i}" for i in range(6)]  # replies stay with their slots
    assert stub.max_in_flight <= 2
    policy.close()


def test_requests_of_one_act_run_concurrently(stub_factory: Any) -> None:
    barrier = threading.Barrier(4, timeout=10)

    def together(i: int, body: dict[str, Any]) -> Reply:
        barrier.wait()  # breaks (and the request fails) unless all 4 are in flight at once
        return completion("ok")

    stub = stub_factory(together)
    policy = _policy(stub.url, concurrency=4, max_retries=0)
    assert policy.act(["a"] * 4, [RESET_INFO] * 4) == ["ok"] * 4
    assert stub.max_in_flight == 4
    policy.close()


# --------------------------------------------------------------------------- tool modes


def test_native_mode_sends_tools_and_keeps_tool_messages(
    stub_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "move", "arguments": {"direction": "left"}},
    }
    stub = stub_factory(lambda i, _: completion(calls=[call]) if i == 0 else completion("done"))
    policy = _policy(stub.url, tool_mode="native", temperature=0.3, max_tokens=17)
    (action,) = policy.act(["task"], [RESET_INFO], [2])
    assert json.loads(action) == {"name": "move", "arguments": {"direction": "left"}}
    assert policy.act(["you moved"], [{"tools": TOOLS}], [2]) == ["done"]
    first, second = stub.requests
    assert first["tools"] == TOOLS and first["tool_choice"] == "auto"
    assert (first["model"], first["temperature"], first["max_tokens"]) == ("m", 0.3, 17)
    assert [m["role"] for m in first["messages"]] == ["system", "user"]  # no one-shot
    assert (
        second["messages"][-2]["tool_calls"][0]["function"]["arguments"] == '{"direction": "left"}'
    )
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "you moved"}
    assert stub.headers[0]["Authorization"] == "Bearer sk-test"
    assert "sk-test" not in json.dumps(policy.spec)
    policy.close()


def test_text_mode_sends_messages_only(stub_factory: Any) -> None:
    stub = stub_factory(lambda i, _: completion('  move(direction="up")\n'))
    policy = _policy(stub.url, tool_mode="text", seed=1)
    assert policy.act(["task"], [RESET_INFO]) == ['move(direction="up")']
    policy.act(["moved"], [{}])
    first, second = stub.requests
    assert "tools" not in first
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # with the one-shot exchange
    assert first["messages"][2]["content"] == action_text("move", {"direction": "up"})
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": 'move(direction="up")'},
        {"role": "user", "content": "moved"},
    ]
    assert first["seed"] != second["seed"]  # per (episode, turn)
    policy.close()


def test_bad_settings_raise() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'native'"):
        OpenAIPolicy("http://x/v1", "m", tool_mode="nativ")
    with pytest.raises(ConfigError, match="http://"):
        OpenAIPolicy("localhost:8000/v1", "m")


# --------------------------------------------------------------------------- conversion


def test_tool_call_text_conversion() -> None:
    assert parse_tool_calls(
        '{"name": "move", "arguments": {"direction": "up"}} then more', TOOLS
    ) == [("move", {"direction": "up"})]
    hermes = '<tool_call>{"name": "move", "arguments": "{\\"direction\\": \\"down\\"}"}</tool_call>'
    assert parse_tool_calls(hermes, TOOLS) == [("move", {"direction": "down"})]
    assert parse_tool_calls("Sure.\nmove('left')", TOOLS) == [("move", {"direction": "left"})]
    assert parse_tool_calls('```json\n{"tool": "move", "args": {}}\n```', TOOLS) == [("move", {})]
    assert parse_tool_calls('{"name": "fly", "arguments": {}}', TOOLS) is None  # not a tool
    assert parse_tool_calls("I will move up.", TOOLS) is None
    prose = 'See [1]; then {"name": "move", "arguments": {"direction": "up"}}.'
    assert parse_tool_calls(prose, TOOLS) == [("move", {"direction": "up"})]
    assert parse_tool_calls("__import__('os')(x=1)", TOOLS) is None
    bad = [{"id": "1", "function": {"name": "move", "arguments": "{not json"}}]
    assert json.loads(tool_calls_to_action(bad)) == {"name": "move", "arguments": "{not json"}
    two = [
        {"function": {"name": "a", "arguments": "{}"}},
        {"function": {"name": "b", "arguments": {}}},
    ]
    assert json.loads(tool_calls_to_action(two)) == [
        {"name": "a", "arguments": {}},
        {"name": "b", "arguments": {}},
    ]
