"""HttpGenerator against a real ``agentgym serve`` on loopback with the tiny model: the
same greedy ids and log-probs as the in-process Sampler, seeded sampling, weights pushed
and reported, and every failure mapped to its error type (a real proxy server in front
of the real one injects 503s and strips token ids, as an old vLLM would)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.errors import ClosedError, ConfigError
from agentgym_envs.llm import (
    GenerationRequestError,
    GenerationServerError,
    Generator,
    HttpGenerator,
    SamplingSettings,
)
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.models import load_tokenizer, tiny_llama
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner
from agentgym_envs.serving.engine import eos_ids
from agentgym_envs.serving.server import ChatServer, start_server

PROMPTS = [[1, 9468, 28, 314, 3060, 2], [1, 4093, 2], [1, 504, 1489, 314, 253, 2, 198, 1]]
LIMITS = [6, 9, 4]


def save_tiny(folder: Path, seed: int) -> Path:
    """A tiny random Llama (untied embeddings) with the SmolLM2 tokenizer."""
    tokenizer = load_tokenizer("tiny")
    config = tiny_llama(tokenizer).config
    config.tie_word_embeddings = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny(agentgym_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-http"), seed=0)


@pytest.fixture()
def served(tiny: Path) -> Iterator[tuple[ChatServer, str]]:
    server, url = start_server(str(tiny), device="cpu", model_id="tiny")
    yield server, url
    server.close()


def in_process(folder: Path, server: ChatServer, temperature: float = 0.0) -> Sampler:
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.train(False)
    eos = eos_ids(server.lm)
    return Sampler(model, eos_ids=eos, pad_id=server.lm.pad_id, temperature=temperature)


def test_greedy_ids_and_logprobs_equal_the_in_process_sampler(
    served: tuple[ChatServer, str], tiny: Path
) -> None:
    server, url = served
    with HttpGenerator(url, "tiny", temperature=0.0) as generator:
        assert isinstance(generator, Generator)
        assert generator.settings == SamplingSettings(temperature=0.0)
        samples = generator.generate(PROMPTS, LIMITS, rows=[0, 1, 2])
        assert generator.weights_version == 0
        assert generator.tokens_generated == sum(len(s.ids) for s in samples)
    sampler = in_process(tiny, server)
    for prompt, limit, sample in zip(PROMPTS, LIMITS, samples, strict=True):
        (local,) = sampler.generate([prompt], [limit])
        assert sample.ids == local.ids and len(sample.ids) == limit
        assert sample.logprobs == pytest.approx(local.logprobs, abs=1e-4)
        assert sample.ended == local.ended


def test_the_trainer_rollout_plays_the_same_episodes_behind_the_server(
    served: tuple[ChatServer, str], tiny: Path
) -> None:
    """Token in, token out through HTTP: the trainer's rollout with the server behind it
    keeps the same ids, masks and log-probs as with the in-process sampler."""
    server, url = served
    chat = ChatFormat(server.lm.tokenizer)

    def play(generator: Generator) -> list[Any]:
        runner = RolloutRunner(
            lambda: gym.make("agentgym/FrozenLake-v0", max_steps=3),
            chat,
            generator,
            n_envs=2,
            max_new_tokens=8,
            max_context=4096,
        )
        try:
            trajectories, _ = runner.collect([RolloutJob(None, s, s) for s in range(2)], 0)
        finally:
            runner.close()
        return [seg for t in trajectories for seg in t.segments]

    with HttpGenerator(url, "tiny", temperature=0.0) as generator:
        remote = play(generator)
    local = play(in_process(tiny, server))
    assert [s.ids for s in remote] == [s.ids for s in local]
    assert [s.mask for s in remote] == [s.mask for s in local]
    assert sum(sum(s.mask) for s in remote) > 0
    for mine, theirs in zip(remote, local, strict=True):
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)


def test_sampled_requests_are_seeded_and_report_the_tempered_logprobs(
    served: tuple[ChatServer, str],
) -> None:
    server, url = served
    runs = []
    for _ in range(2):
        with HttpGenerator(url, "tiny", temperature=0.8, seed=4) as generator:
            runs.append([generator.generate(PROMPTS, LIMITS), generator.generate(PROMPTS, LIMITS)])
    assert [[s.ids for s in call] for call in runs[0]] == [
        [s.ids for s in call] for call in runs[1]
    ]
    first, second = runs[0]
    assert [s.ids for s in first] != [s.ids for s in second]  # each call draws afresh
    model = server.lm.model
    for prompt, sample in zip(PROMPTS, first, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + sample.ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits / 0.8, -1).gather(1, torch.tensor(sample.ids)[:, None])
        assert sample.logprobs == pytest.approx(expected.squeeze(1).tolist(), abs=1e-4)
    with HttpGenerator(url, "tiny", temperature=0.8, seed=4) as generator:
        assert generator.generate([PROMPTS[0], PROMPTS[1]], [0, 3])[0].ids == []


def test_pushed_weights_are_served_and_their_version_reported(
    served: tuple[ChatServer, str], tmp_path: Path
) -> None:
    server, url = served
    checkpoint = save_tiny(tmp_path / "step-1", seed=1)
    with HttpGenerator(url, "tiny", temperature=0.0) as generator:
        before = generator.generate(PROMPTS[:1], LIMITS[:1])
        assert generator.load_weights(str(checkpoint)) == 1 == generator.weights_version
        generator.weights_version = 0  # what a stale client believes: replies correct it
        after = generator.generate(PROMPTS[:1], LIMITS[:1])
        assert generator.weights_version == 1
    (local,) = in_process(checkpoint, server).generate(PROMPTS[:1], LIMITS[:1])
    assert after[0].ids == local.ids != before[0].ids
    with HttpGenerator(url, "tiny") as generator, pytest.raises(GenerationRequestError) as info:
        generator.load_weights(str(tmp_path / "missing"))
    assert info.value.status == 400 and "config.json" in str(info.value)


def test_refused_requests_raise_request_errors(served: tuple[ChatServer, str]) -> None:
    _, url = served
    with HttpGenerator(url, "tiny") as generator:
        with pytest.raises(GenerationRequestError, match="context") as info:
            generator.generate([[1] * 5000], [4])
        assert info.value.status == 400
        with pytest.raises(GenerationRequestError, match="vocabulary"):
            generator.generate([[10**7]], [4])
    with HttpGenerator(url, "gpt-9") as generator, pytest.raises(GenerationRequestError) as info:
        generator.generate(PROMPTS[:1], [2])
    assert info.value.status == 404
    with pytest.raises(ClosedError):
        generator.generate(PROMPTS[:1], [2])


def test_a_dead_or_stuck_server_raises_server_errors(served: tuple[ChatServer, str]) -> None:
    server, url = served
    generator = HttpGenerator(url, "tiny", timeout_s=0.5, retries=0)
    busy = server.batcher.hold()  # the model is busy for longer than the timeout
    with generator, busy, pytest.raises(GenerationServerError, match="timeout") as info:
        generator.generate(PROMPTS[:1], [2])
    assert info.value.status is None
    port = server.server_address[1]
    server.close()
    generator = HttpGenerator(f"http://127.0.0.1:{port}/v1", "tiny", retries=1)
    with generator, pytest.raises(GenerationServerError, match="cannot reach"):
        generator.generate(PROMPTS[:1], [2])


def _settled(lock: Any, quiet_s: float = 1.5, limit_s: float = 60.0) -> None:
    """Wait until the server's load lock stayed free for ``quiet_s`` seconds."""
    end, free_since = time.monotonic() + limit_s, None
    while time.monotonic() < end:
        if lock.locked():
            free_since = None
        elif free_since is None:
            free_since = time.monotonic()
        elif time.monotonic() - free_since >= quiet_s:
            return
        time.sleep(0.02)


def test_a_slow_weight_load_is_not_sent_again(
    served: tuple[ChatServer, str], tmp_path: Path
) -> None:
    server, url = served
    checkpoint = save_tiny(tmp_path / "step-1", seed=1)
    generator = HttpGenerator(url, "tiny", timeout_s=60, retries=2, load_timeout_s=0.5)
    # a long batch is generating meanwhile: the load waits for it and the client gives up
    with (
        generator,
        server.batcher.hold(),
        pytest.raises(GenerationServerError, match=r"timeout 0\.5 s"),
    ):
        generator.load_weights(str(checkpoint))
    _settled(server._load_lock)
    assert server.weights_version == 1  # asked once, loaded once (not once per attempt)


class _Proxy(BaseHTTPRequestHandler):
    """Forwards to the real server; fails the first ``failures`` requests with 503 and
    strips ``token_ids`` from replies when asked (as servers without them answer)."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen += 1
        self.server.record.append(json.loads(data))
        if self.server.failures > 0:
            self.server.failures -= 1
            self._reply(503, {"error": {"message": "overloaded", "type": "server_error"}})
            return
        request = urllib.request.Request(
            self.server.target + self.path.removeprefix("/v1"),
            data=data,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            reply = json.loads(response.read())
        if self.server.strip:
            for choice in reply["choices"]:
                choice.pop("token_ids", None)
        self._reply(200, reply)

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def proxy(served: tuple[ChatServer, str]) -> Iterator[Any]:
    front: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    front.target, front.failures, front.strip, front.seen = served[1], 0, False, 0
    front.record = []
    thread = threading.Thread(target=front.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    front.url = f"http://127.0.0.1:{front.server_address[1]}/v1"
    yield front
    front.shutdown()
    front.server_close()
    thread.join()


def test_overloaded_servers_are_retried_then_reported(proxy: Any) -> None:
    proxy.failures = 2
    with HttpGenerator(proxy.url, "tiny", temperature=0.0, retries=2) as generator:
        (sample,) = generator.generate(PROMPTS[:1], [3])
    assert len(sample.ids) == 3 and proxy.seen == 3
    proxy.failures = 5
    generator = HttpGenerator(proxy.url, "tiny", retries=1)
    with generator, pytest.raises(GenerationServerError, match="overloaded") as info:
        generator.generate(PROMPTS[:1], [3])
    assert info.value.status == 503


def test_a_weight_load_is_never_retried(proxy: Any, tmp_path: Path) -> None:
    proxy.failures = 1
    generator = HttpGenerator(proxy.url, "tiny", retries=2)
    with generator, pytest.raises(GenerationServerError, match="overloaded") as info:
        generator.load_weights(str(save_tiny(tmp_path / "step-1", seed=1)))
    assert info.value.status == 503 and proxy.seen == 1  # a load is not idempotent


def test_a_server_without_token_ids_is_named_as_such(proxy: Any) -> None:
    proxy.strip = True
    generator = HttpGenerator(proxy.url, "tiny")
    with generator, pytest.raises(GenerationServerError, match="return_token_ids"):
        generator.generate(PROMPTS[:1], [3])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "127.0.0.1:8000/v1"},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"timeout_s": 0},
        {"concurrency": 0},
        {"retries": -1},
        {"load_timeout_s": 0},
    ],
)
def test_bad_settings_raise_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        HttpGenerator(**{"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs})


@pytest.mark.parametrize(
    "field",
    [
        {"temperature": 0.3},
        {"top_p": 0.5},
        {"top_k": 50},
        {"stop": ["\n"]},
        {"max_tokens": 9},
        {"seed": 3},
        {"n": 2},
        {"logprobs": 5},
        {"return_token_ids": False},
    ],
)
def test_extra_body_cannot_override_the_sampling_contract(field: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=f"{next(iter(field))}.*generator.settings"):
        HttpGenerator("http://127.0.0.1:9/v1", "m", temperature=1.0, extra_body=field)


def test_extra_body_fields_that_leave_sampling_alone_are_sent(proxy: Any) -> None:
    seen: list[dict[str, Any]] = []
    proxy.record = seen
    with HttpGenerator(proxy.url, "tiny", extra_body={"user": "trainer-7"}) as generator:
        (sample,) = generator.generate(PROMPTS[:1], [2])
    assert len(sample.ids) == 2 and [b["user"] for b in seen] == ["trainer-7"]
