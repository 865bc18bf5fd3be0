"""``agentgym serve``: the OpenAI-compatible server on loopback with a tiny model, batching,
bad requests, OpenAIPolicy episodes against it, the CLI, and real SmolLM2 tool calls."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.eval.runner import run_episodes
from agentgym_envs.policies.openai_compat import OpenAIPolicy
from agentgym_envs.serving.api import completion_body, template_messages
from agentgym_envs.serving.http_app import SOCKET_TIMEOUT_S
from agentgym_envs.serving.server import ChatServer, start_server


@pytest.fixture(scope="module")
def served(tiny_folder: str) -> Iterator[tuple[ChatServer, str]]:
    server, url = start_server(tiny_folder, device="cpu", max_batch=8, model_id="tiny")
    yield server, url
    server.close()


def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}/chat/completions", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def chat(content: str = "Say hi.", **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], **extra}


def test_models_and_a_completion(served: tuple[ChatServer, str]) -> None:
    _, url = served
    with urllib.request.urlopen(f"{url}/models", timeout=10) as response:
        models = json.loads(response.read())
    assert [m["id"] for m in models["data"]] == ["tiny"]
    status, body = post(url, chat(max_tokens=5, temperature=0))
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and isinstance(
        choice["message"]["content"], str
    )
    assert choice["finish_reason"] == "length"  # a random model never ends its turn in 5
    usage = body["usage"]
    assert usage["completion_tokens"] == 5 and usage["prompt_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5


def test_seeds_and_stop_strings(served: tuple[ChatServer, str]) -> None:
    _, url = served
    sampled = [post(url, chat(max_tokens=8, temperature=1.0, seed=s))[1] for s in (1, 1, 2)]
    texts = [b["choices"][0]["message"]["content"] for b in sampled]
    assert texts[0] == texts[1] != texts[2]
    greedy = post(url, chat(max_tokens=8, temperature=0))[1]["choices"][0]["message"]["content"]
    stop = greedy[3:6]
    cut = post(url, chat(max_tokens=8, temperature=0, stop=[stop]))[1]["choices"][0]
    assert cut["message"]["content"] == greedy[: greedy.index(stop)]
    assert cut["finish_reason"] == "stop"


def test_concurrent_requests_are_batched(served: tuple[ChatServer, str]) -> None:
    server, url = served
    bodies = [chat(f"question {i}", max_tokens=6, temperature=1.0, seed=i) for i in range(4)]
    alone = [post(url, b)[1]["choices"][0]["message"]["content"] for b in bodies]
    before = len(server.batcher.batch_sizes)
    with ThreadPoolExecutor(4) as pool:
        with server.batcher.hold():  # the model is busy: all 4 requests queue up
            futures = [pool.submit(post, url, b) for b in bodies]
            # pending counts every row submitted and not answered: the one the
            # worker took and the 3 behind it. Waiting for only 3 let the hold end
            # before the 4th arrived, and the rows went out as [3, 1].
            deadline = time.monotonic() + 120
            while server.batcher.pending < 4:
                assert time.monotonic() < deadline, "the 4 requests never reached the batcher"
                time.sleep(0.01)
        together = [f.result()[1]["choices"][0]["message"]["content"] for f in futures]
    assert server.batcher.batch_sizes[before:] == [4]
    assert together == alone  # each row follows its own seed, whatever the batch


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0]"),
        ({**chat(), "n": 0}, 400, "n"),
        ({**chat(), "n": 10_000}, 400, "n"),
        ({**chat(), "stream": "yes"}, 400, "stream"),
        ({**chat(), "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({**chat(), "logprobs": 1}, 400, "logprobs"),
        ({**chat(), "top_logprobs": 3}, 400, "top_logprobs"),
        ({**chat(), "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
        ({**chat(), "return_token_ids": "yes"}, 400, "return_token_ids"),
        ({**chat(), "seed": 2**70}, 400, "seed"),
        ({**chat(), "tool_choice": "required"}, 400, "tool_choice"),
        ({**chat(), "temperature": 7}, 400, "temperature"),
        ({**chat(), "max_tokens": 0}, 400, "max_tokens"),
        ({**chat(), "seed": "one"}, 400, "seed"),
        ({**chat(), "stop": [1]}, 400, "stop"),
        ({**chat(), "tools": [{"type": "function"}]}, 400, "tools"),
        (
            {**chat(), "tool_choice": {"type": "function", "function": {"name": "x"}}},
            400,
            "tool_choice",
        ),
        ({**chat(), "model": "gpt-9"}, 404, "model"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages[0]"),
        ([1, 2], 400, None),
    ],
)
def test_bad_requests_get_openai_errors(
    served: tuple[ChatServer, str], body: Any, status: int, param: str | None
) -> None:
    _, url = served
    got, reply = post(url, body)
    assert got == status
    assert reply["error"]["param"] == param and reply["error"]["message"]


def test_malformed_bodies_long_prompts_and_survival(served: tuple[ChatServer, str]) -> None:
    _, url = served
    assert post(url, None, raw=b"{not json")[0] == 400
    status, reply = post(url, chat("word " * 5000, max_tokens=10))
    assert status == 400 and reply["error"]["code"] == "context_length_exceeded"
    request = urllib.request.Request(f"{url}/nowhere", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 404
    assert post(url, chat(max_tokens=2))[0] == 200  # still serving


@pytest.mark.parametrize(
    "function",
    [
        {"name": "a", "parameters": [1, 2]},
        {"name": "a", "parameters": {"properties": [1]}},
        {"name": "a", "parameters": {"properties": {"x": "string"}}},
        {"name": "a", "parameters": {"required": "x"}},
        {"name": "a", "description": 7},
        {"name": ""},
    ],
)
def test_malformed_tool_schemas_are_a_400_not_a_500(
    served: tuple[ChatServer, str], function: dict[str, Any]
) -> None:
    _, url = served
    status, reply = post(url, chat(tools=[{"type": "function", "function": function}]))
    assert status == 400, reply
    assert reply["error"]["param"].startswith("tools"), reply


def raw_request(server: ChatServer, head: bytes, body: bytes = b"") -> str:
    """Send raw bytes; the status line of the answer."""
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), int(port)), timeout=30) as sock:
        sock.sendall(head + body)
        return sock.recv(64).decode().split("\r\n")[0]


def test_bad_content_lengths_are_answered_and_free_the_handler(
    served: tuple[ChatServer, str],
) -> None:
    server, url = served
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    )
    assert raw_request(server, head % -5).split()[1] == "400"
    server.socket_timeout_s = 0.5  # read by each new connection's handler
    try:
        # announces 100 bytes, sends 10 and waits: the handler gives up instead of hanging
        assert raw_request(server, head % 100, b'{"model": ').split()[1] == "408"
    finally:
        server.socket_timeout_s = SOCKET_TIMEOUT_S
    assert post(url, chat(max_tokens=2))[0] == 200  # still serving


@pytest.mark.parametrize("tool_mode", ["text", "native"])
def test_openai_policy_plays_episodes_against_the_server(
    served: tuple[ChatServer, str], tool_mode: str
) -> None:
    server, url = served
    policies: list[OpenAIPolicy] = []

    def factory(envs: Any) -> OpenAIPolicy:
        policies.append(OpenAIPolicy(url, "tiny", tool_mode=tool_mode, max_tokens=8, concurrency=3))
        return policies[0]

    before = len(server.batcher.batch_sizes)
    records = run_episodes(
        "Sokoban", factory, episodes=3, batch=3, seed=0, env_kwargs={"max_steps": 3}
    )
    assert [r.episode.steps for r in records] == [3, 3, 3]
    assert {r.policy for r in records} == {"openai:tiny"}
    usage = policies[0].last_usage
    assert all(u["failed"] == 0 and u["tokens_in"] > 0 and u["tokens_out"] > 0 for u in usage)
    assert policies[0].failures == []
    assert len(server.batcher.batch_sizes) > before
    policies[0].close()


def test_serve_cli_prints_url_and_stops_on_sigterm(tiny_folder: str) -> None:
    command = [sys.executable, "-m", "agentgym_envs.cli", "serve", "--model", tiny_folder]
    env = {**os.environ, "COLUMNS": "400"}
    process = subprocess.Popen(
        [*command, "--port", "0", "--device", "cpu", "--name", "t"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = next(word for word in line.split() if word.startswith("http://"))
        with urllib.request.urlopen(f"{url}/models", timeout=10) as response:
            assert json.loads(response.read())["data"][0]["id"] == "t"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "Shutting down" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_served_smollm2_returns_native_tool_calls(smollm2: Any) -> None:
    server, url = start_server("smollm2", lm=smollm2, model_id="smollm2")
    env = gym.make("agentgym/Sokoban-v0")
    policy = OpenAIPolicy(url, "smollm2", tool_mode="native", one_shot=True, max_tokens=48)
    try:
        obs, info = env.reset(seed=0)
        (action,) = policy.act([obs], [info])
        assert policy.conversation(0).turns[0].tool_calls, f"no native tool call: {action!r}"
        assert env.unwrapped.parser.parse(action).error_code is None
        # the raw reply: finish_reason tool_calls, arguments as a JSON string
        messages = policy.conversation(0).messages(one_shot=True)[:-1]
        status, body = post(url, {"messages": messages, "tools": info["tools"], "temperature": 0})
        choice = body["choices"][0]
        assert status == 200 and choice["finish_reason"] == "tool_calls", body
        (call,) = choice["message"]["tool_calls"]
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"]["name"] == "move"
        assert set(json.loads(call["function"]["arguments"])) == {"direction"}
        assert choice["message"]["content"] is None
    finally:
        policy.close()
        env.close()
        server.close()
    assert smollm2.model is not None  # the server did not free a model it was lent


# --------------------------------------------------------------------------- pure helpers

TOOLS = [
    {"type": "function", "function": {"name": "move", "parameters": {"properties": {"d": {}}}}}
]


def test_completion_body_turns_calls_into_tool_calls() -> None:
    body = completion_body(
        "m", "fp", 'ok {"name": "move", "arguments": {"d": 1}}', "stop", (5, 2), TOOLS
    )
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "move", "arguments": '{"d": 1}'}
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    text = '{"name": "move", "arguments": {}}'
    assert completion_body("m", "fp", text, "length", (1, 1), [])["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "length",
        "logprobs": None,
    }
    unknown = completion_body("m", "fp", '{"name": "fly", "arguments": {}}', "stop", (1, 1), TOOLS)
    assert "tool_calls" not in unknown["choices"][0]["message"]


def test_template_messages_with_and_without_template_tools() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "move", "arguments": '{"d": 2}'}}
    messages = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "moved"},
    ]
    plain = template_messages(messages, TOOLS, template_tools=False)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user"]
    assert plain[0]["content"].startswith("rules\n\nYou can call these tools:\n- move(d)")
    assert json.loads(plain[2]["content"]) == {"name": "move", "arguments": {"d": 2}}
    native = template_messages(messages, TOOLS, template_tools=True)
    assert native[2]["tool_calls"][0]["function"]["arguments"] == {"d": 2}
    assert native[3] == {"role": "tool", "content": "moved", "tool_call_id": "c"}
    assert native[0] == {"role": "system", "content": "rules"}  # the template shows tools
