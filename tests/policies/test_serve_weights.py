"""``POST /v1/load_weights`` of ``agentgym serve`` over loopback HTTP: new weights are
served (same greedy ids as the in-process sampler on them) under a bumped
``weights_version``; bad folders and non-loopback clients are refused and change
nothing. Also the pieces of the tool-call constraint and of token streaming."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, LlamaForCausalLM

from agentgym_envs.llm.models import load_tokenizer, tiny_llama
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.serving.engine import ToolCallConstraint, Vocab, eos_ids
from agentgym_envs.serving.server import ChatServer, is_loopback, start_server
from agentgym_envs.serving.stream import TextStream

PROMPT = [1, 9468, 28, 314, 3060, 2]


def post(url: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture()
def served(tiny_folder: str) -> Iterator[tuple[ChatServer, str]]:
    server, _ = start_server(tiny_folder, host="0.0.0.0", device="cpu", model_id="tiny")
    yield server, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.close()


def greedy(url: str) -> dict[str, Any]:
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    status, reply = post(url, "/completions", body)
    assert status == 200, reply
    return reply


def random_weights(tiny_folder: str, folder: Path, seed: int) -> LlamaForCausalLM:
    config = AutoConfig.from_pretrained(tiny_folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(str(folder))
    return model


def test_loaded_weights_are_served_under_a_new_version(
    served: tuple[ChatServer, str], tiny_folder: str, tmp_path: Path
) -> None:
    server, url = served
    before = greedy(url)
    assert before["weights_version"] == 0
    model = random_weights(tiny_folder, tmp_path / "step-1", seed=1)
    status, reply = post(url, "/load_weights", {"path": str(tmp_path / "step-1")})
    assert status == 200 and reply["weights_version"] == 1, reply
    after = greedy(url)
    assert after["weights_version"] == 1
    assert after["system_fingerprint"] == reply["system_fingerprint"]
    assert after["system_fingerprint"] != before["system_fingerprint"]
    model.train(False)
    sampler = Sampler(model, eos_ids=eos_ids(server.lm), pad_id=server.lm.pad_id, temperature=0)
    (sample,) = sampler.generate([PROMPT], [6])
    assert after["choices"][0]["token_ids"] == sample.ids
    assert after["choices"][0]["token_ids"] != before["choices"][0]["token_ids"]
    models = json.loads(urllib.request.urlopen(f"{url}/models", timeout=10).read())
    assert models["data"][0]["weights_version"] == 1


def test_bad_folders_are_refused_and_change_nothing(
    served: tuple[ChatServer, str], tmp_path: Path
) -> None:
    _, url = served
    before = greedy(url)
    other = tiny_llama(load_tokenizer("tiny"), hidden_size=32, intermediate_size=64)
    other.save_pretrained(str(tmp_path / "smaller"))
    (tmp_path / "empty").mkdir()
    for body, param in [
        ({"path": str(tmp_path / "smaller")}, "path"),
        ({"path": str(tmp_path / "empty")}, "path"),
        ({"path": str(tmp_path / "missing")}, "path"),
        ({"folder": "x"}, "path"),
        ([1], "path"),
    ]:
        status, reply = post(url, "/load_weights", body)
        assert status == 400 and reply["error"]["param"] == param, reply
    status, reply = post(url, "/load_weights", {"path": str(tmp_path / "smaller")})
    assert reply["error"]["code"] == "weights_mismatch"
    assert greedy(url)["choices"] == before["choices"] and greedy(url)["weights_version"] == 0


def test_load_weights_is_loopback_only_and_never_touches_a_lent_model(
    served: tuple[ChatServer, str], tmp_path: Path, tiny_folder: str
) -> None:
    server, _ = served
    random_weights(tiny_folder, tmp_path / "w", seed=2)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        address = probe.getsockname()[0]
    except OSError:
        address = "127.0.0.1"
    finally:
        probe.close()
    if is_loopback(address):
        pytest.skip("this machine has no non-loopback address to call from")
    outside = f"http://{address}:{server.server_address[1]}/v1"
    status, reply = post(outside, "/load_weights", {"path": str(tmp_path / "w")})
    assert status == 403 and reply["error"]["type"] == "permission_error", reply
    assert greedy(outside)["weights_version"] == 0  # generation is served to anyone
    lent, lent_url = start_server("tiny", lm=server.lm, model_id="tiny")
    try:
        status, reply = post(lent_url, "/load_weights", {"path": str(tmp_path / "w")})
        assert status == 409 and reply["error"]["code"] == "model_lent", reply
    finally:
        lent.close()


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("192.0.2.2") and not is_loopback("::ffff:10.0.0.1")
    assert not is_loopback("not an address")


# --------------------------------------------------------------------------- which weights sampled


def events(url: str, path: str, body: Any) -> list[dict[str, Any]]:
    """The JSON events of a streamed reply."""
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        raw = response.read().decode()
    found = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    return [json.loads(e) for e in found if e != "[DONE]"]


def logprobs_under(folder: str, prompt: list[int], ids: list[int]) -> torch.Tensor:
    """Log-probs of ``ids`` after ``prompt`` under the weights saved in ``folder``."""
    model = LlamaForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)


def test_a_reply_is_labelled_with_the_weights_that_sampled_it(
    served: tuple[ChatServer, str], tiny_folder: str, tmp_path: Path
) -> None:
    server, url = served
    random_weights(tiny_folder, tmp_path / "step-1", seed=1)
    engine, pushed = server.engine, list[int]()
    reply = engine.reply

    def reply_then_push(job: Any, result: Any) -> Any:
        if not pushed:  # the trainer's push lands just after the batch was sampled
            pushed.append(server.load_weights(str(tmp_path / "step-1")))
        return reply(job, result)

    engine.reply = reply_then_push  # type: ignore[method-assign]
    body = {"prompt": PROMPT[:3], "max_tokens": 4, "temperature": 0, "logprobs": 0}
    status, out = post(url, "/completions", {**body, "return_token_ids": True})
    assert status == 200 and pushed == [1]
    (choice,) = out["choices"]
    sampled_by = logprobs_under(tiny_folder, PROMPT[:3], choice["token_ids"])
    got = torch.tensor(choice["logprobs"]["token_logprobs"])
    assert torch.allclose(sampled_by, got, atol=1e-4)  # the old weights sampled them
    assert out["weights_version"] == choice["weights_version"] == 0


def test_streamed_tokens_are_labelled_with_the_weights_that_sampled_them(
    served: tuple[ChatServer, str], tiny_folder: str, tmp_path: Path
) -> None:
    server, url = served
    random_weights(tiny_folder, tmp_path / "step-1", seed=1)
    batcher, pushed = server.batcher, list[int]()
    submit = batcher.submit

    def push_then_submit(jobs: Any) -> Any:
        if not pushed:  # the push lands after the stream's head went out
            pushed.append(server.load_weights(str(tmp_path / "step-1")))
        return submit(jobs)

    batcher.submit = push_then_submit  # type: ignore[method-assign]
    body = {"prompt": PROMPT[:3], "max_tokens": 4, "temperature": 0, "stream": True}
    found = events(url, "/completions", {**body, "return_token_ids": True})
    assert pushed == [1]
    sampled = [
        e for e in found if any(c.get("token_ids") or c["finish_reason"] for c in e["choices"])
    ]
    assert len(sampled) == 5  # 4 tokens and the finish
    assert {e["weights_version"] for e in sampled} == {1}
    assert {c["weights_version"] for e in sampled for c in e["choices"]} == {1}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    head, *sampled = events(url, "/chat/completions", {**chat, "return_token_ids": True})
    assert "weights_version" not in head  # the role chunk goes out before sampling
    assert sampled[-1]["choices"][0]["finish_reason"] == "length"
    assert {e["weights_version"] for e in sampled} == {1}


def test_choices_split_across_batches_each_say_their_weights(
    tiny_folder: str, tmp_path: Path
) -> None:
    """n=2 with max_batch=1: the choices run in two batches and a load lands between."""
    random_weights(tiny_folder, tmp_path / "step-1", seed=1)
    server, url = start_server(tiny_folder, device="cpu", max_batch=1, model_id="tiny")
    try:
        batcher, engine, loads = server.batcher, server.engine, list[threading.Thread]()
        run, collect = engine.run, batcher._collect

        def run_then_load(jobs: Any, version: int) -> Any:
            results = run(jobs, version)
            if not loads:  # waits for this batch to end, then for the lock
                load = threading.Thread(
                    target=server.load_weights, args=(str(tmp_path / "step-1"),)
                )
                load.start()
                loads.append(load)
            return results

        def collect_after_the_load(jobs: Any, deadline: Any) -> bool:
            if loads:  # the next batch is put together only once the load is done
                loads[0].join(timeout=60)
            return collect(jobs, deadline)

        engine.run = run_then_load  # type: ignore[method-assign,assignment]
        batcher._collect = collect_after_the_load  # type: ignore[method-assign]
        body = {"prompt": PROMPT[:3], "max_tokens": 3, "temperature": 0, "n": 2}
        status, out = post(url, "/completions", {**body, "return_token_ids": True})
        assert status == 200, out
        assert [c["weights_version"] for c in out["choices"]] == [0, 1]
        assert out["weights_version"] == 0  # the body says the oldest
        first, second = (c["token_ids"] for c in out["choices"])
        assert first != second  # greedy, but under two different weights
    finally:
        server.close()


# --------------------------------------------------------------------------- pieces


@pytest.fixture(scope="module")
def vocab(agentgym_cache: Path) -> Vocab:
    tokenizer = load_tokenizer("tiny")
    return Vocab(tokenizer, len(tokenizer))


def test_the_constraint_admits_a_call_and_nothing_else(vocab: Vocab) -> None:
    tokenizer = load_tokenizer("tiny")
    eos = [int(tokenizer.eos_token_id)]
    heads = ['{"name": "move", "arguments": {', '{"name": "look", "arguments": {']
    rule = ToolCallConstraint(["move", "look"], vocab, eos)
    allowed, banned = rule.rule()
    assert allowed and not banned
    texts = [vocab.strings[t] for t in allowed]
    assert all(any(h.startswith(t) or t.startswith(h) for h in heads) for t in texts)
    call = '{"name": "move", "arguments": {"direction": "up"}}'
    for token in tokenizer.encode(call):
        allowed, banned = rule.rule()
        assert (allowed is None or token in allowed) and token not in banned
        rule.advance(token)
    assert rule.rule() == (eos, [])  # the call is complete: only the end of the turn
    open_args = ToolCallConstraint(["look"], vocab, eos)
    for token in tokenizer.encode(heads[1]):
        open_args.advance(token)
    allowed, banned = open_args.rule()
    assert allowed is None and set(eos) <= set(banned)  # free, but may not end the turn
    junk = next(
        t
        for t in vocab.bracketed
        if vocab.strings[t].startswith("}") and vocab.strings[t][1:].strip() not in ("", "}")
    )
    assert junk in banned  # it would close the arguments with junk after them
    open_args.advance(tokenizer.encode("}")[0])
    allowed, _ = open_args.rule()
    assert allowed and all(vocab.strings[t].strip() == "}" for t in allowed)


def test_text_stream_never_splits_characters_or_shows_a_stop_prefix() -> None:
    tokenizer = load_tokenizer("tiny")
    text = "héllo wörld 日本語 END tail"
    ids = tokenizer.encode(text)

    def decode(part: list[int]) -> str:
        return str(tokenizer.decode(part, skip_special_tokens=True))

    stream = TextStream(decode, [])
    pieces = [stream.feed(t) for t in ids]
    assert "".join(pieces) + stream.rest(decode(ids)) == text
    assert not any("\ufffd" in p for p in pieces)
    stopped = TextStream(decode, [" END"])
    shown = ""
    for token in ids:
        shown += stopped.feed(token)
        assert "héllo wörld 日本語".startswith(shown)  # never " E", " EN" ... shown
        if stopped.stopped:
            break
    assert shown == "héllo wörld 日本語" and stopped.rest("héllo wörld 日本語") == ""
