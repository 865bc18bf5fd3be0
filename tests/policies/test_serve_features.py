"""``agentgym serve`` for trainers, over real loopback HTTP with the tiny model: n choices,
log-probs and token ids (checked against a forward pass of the served weights), token-id
prompts at /v1/completions, tool_choice required/named/none, streaming (the official
``openai`` client reads it) and the bad requests of each."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from agentgym_envs.serving.http_app import REQUIRED_ATTEMPTS
from agentgym_envs.serving.server import ChatServer, start_server

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "parameters": {"type": "object", "properties": {"direction": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}},
]
MESSAGES = [{"role": "user", "content": "Where next?"}]


@pytest.fixture(scope="module")
def served(tiny_folder: str) -> Iterator[tuple[ChatServer, str]]:
    server, url = start_server(tiny_folder, device="cpu", max_batch=8, model_id="tiny")
    yield server, url
    server.close()


def post(url: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def sse(url: str, path: str, body: Any) -> list[Any]:
    """The events of a streamed reply, read raw: every line pair is ``data: ...``."""
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        raw = response.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), raw[:300]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e.removeprefix("data: ")) for e in events[:-1]]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": MESSAGES, "max_tokens": 6, **extra}


def recomputed(server: ChatServer, prompt: list[int], ids: list[int], temperature: float) -> Any:
    """Log-probs of ``ids`` after ``prompt`` from one forward pass of the served model."""
    model = server.lm.model
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    logprobs = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logprobs.gather(1, torch.tensor(ids)[:, None]).squeeze(1), logprobs


# --------------------------------------------------------------------------- n choices


def test_n_choices_are_independent_reproducible_and_choice_0_is_the_n1_reply(
    served: tuple[ChatServer, str],
) -> None:
    server, url = served
    before = len(server.batcher.batch_sizes)
    status, body = post(url, "/chat/completions", chat(n=4, temperature=1.0, seed=7))
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert server.batcher.batch_sizes[before:] == [4]  # the group is one batch
    texts = [c["message"]["content"] for c in body["choices"]]
    assert len(set(texts)) == 4
    again = post(url, "/chat/completions", chat(n=4, temperature=1.0, seed=7))[1]
    assert [c["message"]["content"] for c in again["choices"]] == texts
    alone = post(url, "/chat/completions", chat(temperature=1.0, seed=7))[1]
    assert alone["choices"][0]["message"]["content"] == texts[0]
    assert body["usage"]["completion_tokens"] == 4 * 6
    assert body["usage"]["prompt_tokens"] == alone["usage"]["prompt_tokens"]


# --------------------------------------------------------------------------- logprobs, token ids


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_and_token_ids_match_a_forward_pass_of_the_weights(
    served: tuple[ChatServer, str], temperature: float
) -> None:
    server, url = served
    body = chat(
        temperature=temperature, seed=3, logprobs=True, top_logprobs=3, return_token_ids=True
    )
    status, reply = post(url, "/chat/completions", body)
    assert status == 200, reply
    prompt = reply["prompt_token_ids"]
    assert prompt == server.lm.prompt_ids(MESSAGES)
    choice = reply["choices"][0]
    ids, content = choice["token_ids"], choice["logprobs"]["content"]
    assert len(ids) == len(content) == 6
    assert server.lm.tokenizer.decode(ids) == choice["message"]["content"]
    expected, full = recomputed(server, prompt, ids, temperature)
    assert [e["logprob"] for e in content] == pytest.approx(expected.tolist(), abs=1e-4)
    for position, entry in enumerate(content):
        top = entry["top_logprobs"]
        assert len(top) == 3
        best = full[position].topk(3)
        assert [t["logprob"] for t in top] == pytest.approx(best.values.tolist(), abs=1e-4)
        assert entry["bytes"] == list(entry["token"].encode())
        if temperature == 0:  # greedy: the sampled token is the best one
            assert entry["token"] == top[0]["token"]


def test_completions_take_token_id_prompts_and_return_ids_and_legacy_logprobs(
    served: tuple[ChatServer, str],
) -> None:
    server, url = served
    chat_reply = post(url, "/chat/completions", chat(temperature=0, return_token_ids=True))[1]
    prompt = chat_reply["prompt_token_ids"]
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0}
    status, reply = post(url, "/completions", {**body, "logprobs": 2, "return_token_ids": True})
    assert status == 200 and reply["object"] == "text_completion", reply
    (choice,) = reply["choices"]
    assert choice["prompt_token_ids"] == prompt
    assert choice["token_ids"] == chat_reply["choices"][0]["token_ids"]  # same tokens, TITO
    assert choice["text"] == chat_reply["choices"][0]["message"]["content"]
    legacy = choice["logprobs"]
    assert (
        len(legacy["tokens"]) == len(legacy["token_logprobs"]) == len(legacy["top_logprobs"]) == 6
    )
    expected, _ = recomputed(server, prompt, choice["token_ids"], 0.0)
    assert legacy["token_logprobs"] == pytest.approx(expected.tolist(), abs=1e-4)
    assert all(1 <= len(top) <= 3 for top in legacy["top_logprobs"])
    assert reply["weights_version"] == server.weights_version == 0
    # two prompts (ids and text) with n=2: choice index = prompt * n + choice
    group = {**body, "prompt": [prompt, "Hello"], "n": 2, "temperature": 1.0, "seed": 5}
    status, reply = post(url, "/completions", {**group, "return_token_ids": True})
    assert status == 200, reply
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3]
    hello = server.lm.tokenizer("Hello")["input_ids"]
    assert [c["prompt_token_ids"] for c in reply["choices"]] == [prompt, prompt, hello, hello]
    assert reply["usage"]["prompt_tokens"] == len(prompt) + len(hello)


@pytest.mark.parametrize(
    ("prompt", "extra"),
    [
        ([], {}),
        ([1, -2], {}),
        ([1, 10**9], {}),
        ([[1, 2], []], {}),
        ([[1, 2], "a", 3], {}),
        ([True, 2], {}),
        ([1, 2], {"echo": True}),
        ([1, 2], {"logprobs": 21}),
        ([1, 2], {"best_of": 3}),
        ([[1]] * 65, {}),
        ([1, 2], {"max_tokens": 10**6}),
    ],
)
def test_bad_completion_requests_get_400(
    served: tuple[ChatServer, str], prompt: Any, extra: dict[str, Any]
) -> None:
    _, url = served
    status, reply = post(url, "/completions", {"model": "tiny", "prompt": prompt, **extra})
    assert status == 400, reply
    assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["message"]
    assert post(url, "/completions", {"prompt": [1, 2], "max_tokens": 1})[0] == 200


# --------------------------------------------------------------------------- tool_choice


def test_required_and_named_tool_choice_force_the_call_shape(
    served: tuple[ChatServer, str],
) -> None:
    _, url = served
    heads = {f'{{"name": "{t["function"]["name"]}", "arguments": {{' for t in TOOLS}
    for seed in range(3):
        body = chat(tools=TOOLS, tool_choice="required", max_tokens=40, temperature=1.0, seed=seed)
        status, reply = post(url, "/chat/completions", body)
        assert status == 200, reply
        choice = choice_of(reply)
        if choice["finish_reason"] == "tool_calls":
            (call,) = choice["message"]["tool_calls"]
            assert call["function"]["name"] in {"move", "look"}
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
        else:  # the random model never closed its arguments in 40 tokens
            assert choice["finish_reason"] == "length"
            assert any(choice["message"]["content"].startswith(h) for h in heads)
    named = {"type": "function", "function": {"name": "look"}}
    reply = post(url, "/chat/completions", chat(tools=TOOLS, tool_choice=named, max_tokens=40))[1]
    content = choice_of(reply)["message"]["content"] or ""
    calls = choice_of(reply)["message"].get("tool_calls") or []
    assert [c["function"]["name"] for c in calls] == ["look"] or content.startswith(
        '{"name": "look", "arguments": {'
    )


def test_a_required_call_that_does_not_parse_is_drawn_again_then_returned_as_text(
    served: tuple[ChatServer, str],
) -> None:
    server, url = served
    # the stop string cuts every reply inside the forced head: it never parses as a call
    body = chat(tools=TOOLS, tool_choice="required", max_tokens=20, stop=["arguments"])
    for temperature, draws in ((1.0, REQUIRED_ATTEMPTS), (0.0, 1)):  # greedy: no redraw
        before = len(server.batcher.batch_sizes)
        reply = post(url, "/chat/completions", {**body, "temperature": temperature, "seed": 1})[1]
        assert len(server.batcher.batch_sizes) - before == draws
        choice = choice_of(reply)
        assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
        assert choice["message"]["content"] in ('{"name": "move", "', '{"name": "look", "')


def choice_of(reply: dict[str, Any]) -> dict[str, Any]:
    (choice,) = reply["choices"]
    return choice


def test_tool_choice_none_shows_no_tools_and_reads_no_call(served: tuple[ChatServer, str]) -> None:
    server, url = served
    body = chat(tools=TOOLS, tool_choice="none", temperature=0, return_token_ids=True)
    reply = post(url, "/chat/completions", body)[1]
    assert reply["prompt_token_ids"] == server.lm.prompt_ids(MESSAGES)  # no tool list
    assert "tool_calls" not in choice_of(reply)["message"]


# --------------------------------------------------------------------------- streaming


def test_stream_matches_the_plain_reply_with_ids_logprobs_and_usage(
    served: tuple[ChatServer, str],
) -> None:
    _, url = served
    body = chat(n=2, temperature=1.0, seed=11, max_tokens=8, logprobs=True, return_token_ids=True)
    plain = post(url, "/chat/completions", body)[1]
    options = {"stream": True, "stream_options": {"include_usage": True}}
    events = sse(url, "/chat/completions", {**body, **options})
    assert events[0]["prompt_token_ids"] == plain["prompt_token_ids"]
    assert {e["object"] for e in events} == {"chat.completion.chunk"}
    assert len({e["id"] for e in events}) == 1
    for index in (0, 1):
        mine = [
            e["choices"][0] for e in events if e["choices"] and e["choices"][0]["index"] == index
        ]
        assert mine[0]["delta"]["role"] == "assistant"
        text = "".join(c["delta"].get("content") or "" for c in mine)
        ids = [t for c in mine for t in c.get("token_ids") or []]
        logprobs = [e["logprob"] for c in mine if c["logprobs"] for e in c["logprobs"]["content"]]
        expected = plain["choices"][index]
        assert text == expected["message"]["content"]
        assert ids == expected["token_ids"]
        assert logprobs == [e["logprob"] for e in expected["logprobs"]["content"]]
        assert mine[-1]["finish_reason"] == expected["finish_reason"] == "length"
        assert sum(1 for c in mine if c["delta"].get("content")) > 1  # token by token
    assert events[-1]["choices"] == [] and events[-1]["usage"] == plain["usage"]


def test_stream_holds_back_stop_strings_and_streams_text_completions(
    served: tuple[ChatServer, str],
) -> None:
    _, url = served
    greedy = choice_of(post(url, "/chat/completions", chat(temperature=0, max_tokens=8))[1])
    stop = greedy["message"]["content"][4:9]
    body = chat(temperature=0, max_tokens=8, stop=[stop], stream=True)
    events = sse(url, "/chat/completions", body)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    assert text == greedy["message"]["content"][: greedy["message"]["content"].index(stop)]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    completion = {"model": "tiny", "prompt": "Hello", "max_tokens": 5, "temperature": 0}
    plain = choice_of(post(url, "/completions", completion)[1])
    events = sse(url, "/completions", {**completion, "stream": True})
    assert {e["object"] for e in events} == {"text_completion"}
    assert "".join(e["choices"][0]["text"] for e in events) == plain["text"]


def test_openai_client_reads_n_logprobs_streams_and_tool_calls(
    served: tuple[ChatServer, str],
) -> None:
    openai = pytest.importorskip("openai", reason="the openai client comes with [openenv]")
    _, url = served
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="tiny", messages=MESSAGES, n=3, seed=2, max_tokens=4, logprobs=True, top_logprobs=2
    )
    assert len(reply.choices) == 3
    assert all(len(c.logprobs.content) == 4 for c in reply.choices)
    assert all(len(e.top_logprobs) == 2 for c in reply.choices for e in c.logprobs.content)
    stream = client.chat.completions.create(
        model="tiny", messages=MESSAGES, n=2, seed=2, max_tokens=4, stream=True
    )
    texts = ["", ""]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == [c.message.content for c in reply.choices[:2]]
    named = {"type": "function", "function": {"name": "look"}}
    forced = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=named, max_tokens=40, stream=True
    )
    chunks = list(forced)
    calls = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or []]
    finish = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finish in (["tool_calls"], ["length"])
    if finish == ["tool_calls"]:
        assert [tc.function.name for tc in calls] == ["look"]
    ids = client.completions.create(
        model="tiny", prompt=[1, 2, 3], max_tokens=3, extra_body={"return_token_ids": True}
    )
    assert len(ids.choices[0].model_extra["token_ids"]) == 3


def test_smollm2_must_call_a_tool_when_required(smollm2: Any) -> None:
    server, url = start_server("smollm2", lm=smollm2, model_id="smollm2")
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    joke = [{"role": "user", "content": "Tell me a short joke about cats."}]
    body = {"messages": joke, "tools": [weather], "temperature": 0, "max_tokens": 64}
    try:
        free = choice_of(post(url, "/chat/completions", body)[1])
        assert free["finish_reason"] == "stop" and free["message"]["content"]  # it talks
        forced = choice_of(post(url, "/chat/completions", {**body, "tool_choice": "required"})[1])
        assert forced["finish_reason"] == "tool_calls", forced
        (call,) = forced["message"]["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
    finally:
        server.close()
