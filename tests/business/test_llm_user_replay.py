"""The LLM user with the embedded model (SmolLM2-135M-Instruct), replayed offline from
the cassette shipped in ``tests/business/data`` (recorded by a real run:
``python docs/results/llm_user/measure.py record --agents oracle --readers keyword
--seeds 0 --draws 1``), and live against ``agentgym serve`` (slow).

The oracle must succeed on every Retail and Calendar task of the smoke suite with the
voice on, and a replay must give the same episode every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym_envs.core import Outcome
from agentgym_envs.eval.suite import load_suite
from tests.business.test_llm_user import play_oracle, user_said

CASSETTE = Path(__file__).parent / "data" / "smoke_user.cassette.jsonl"
ENVS = {"Retail": "agentgym/Retail-v1", "Calendar": "agentgym/Calendar-v2"}
# the settings the cassette was recorded with (they are part of every call's key)
RECORDED = {"draws": 1, "max_tokens": 48}


def smoke_tasks() -> list[tuple[str, str]]:
    suite = load_suite("smoke")
    return [
        (ENVS[e.env], task_id)
        for e in suite.entries
        if e.env in ENVS
        for task_id in e.task_ids(suite.seed)
    ]


def replay_kwargs() -> dict[str, object]:
    return {
        "user": "llm",
        "user_model": "smollm2",
        "user_cassette": str(CASSETTE),
        "user_options": RECORDED,
    }


@pytest.mark.parametrize(("env_id", "task_id"), smoke_tasks())
def test_the_oracle_succeeds_on_every_smoke_task_with_the_replayed_voice(env_id, task_id) -> None:
    runs = []
    for _ in range(2):
        env = gym.make(env_id, **replay_kwargs())
        seen, info = play_oracle(env, task_id, seed=0)
        env.close()
        runs.append(seen)
        assert info["outcome"] is Outcome.SUCCESS, info.get("env_error")
        counts = info["user_llm"]["voice"]
        assert counts["replies"] >= 2 and counts["failures"] == 0
        assert counts["first_draw_pass"] + counts["fallbacks"] == counts["replies"]
    assert runs[0] == runs[1]  # the same seed and cassette: the same episode
    template = gym.make(env_id)
    plain, _ = play_oracle(template, task_id, seed=0)
    template.close()
    if counts["first_draw_pass"]:  # the voice's words, not the templates'
        assert user_said(runs[0]) != user_said(plain)


@pytest.mark.slow
def test_the_live_embedded_model_voices_a_smoke_episode_that_replays(tmp_path: Path) -> None:
    from agentgym_envs.serving.server import start_server

    server, url = start_server("smollm2", device="cpu", model_id="smollm2")
    cassette = tmp_path / "live.jsonl"
    env_id, task_id = smoke_tasks()[0]
    try:
        env = gym.make(
            env_id,
            **{
                **replay_kwargs(),
                "user_base_url": url,
                "user_cassette": str(cassette),
                "user_cassette_mode": "record",
                "user_options": {**RECORDED, "timeout_s": 900, "retries": 0},
            },
        )
        live, info = play_oracle(env, task_id, seed=11)
        env.close()
    finally:
        server.close()
    assert info["outcome"] is Outcome.SUCCESS
    env = gym.make(env_id, **{**replay_kwargs(), "user_cassette": str(cassette)})
    replayed, _ = play_oracle(env, task_id, seed=11)
    env.close()
    assert replayed == live


@pytest.fixture(scope="module")
def tiny_served(agentgym_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``agentgym serve``'s server with a tiny random Llama (SmolLM2's tokenizer)."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaForCausalLM

    from agentgym_envs.llm.models import load_tokenizer, tiny_llama
    from agentgym_envs.serving.server import start_server

    tokenizer = load_tokenizer("tiny")
    config = tiny_llama(tokenizer).config
    config.tie_word_embeddings = False  # a tied random model repeats one token forever
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    server, url = start_server(str(folder), device="cpu", max_batch=4, model_id="tiny")
    yield url
    server.close()


@pytest.mark.slow  # building the tiny model's tokenizer takes minutes on a cold cache
def test_a_live_served_model_that_talks_nonsense_never_reaches_the_agent(
    tiny_served: str, tmp_path: Path
) -> None:
    """A real endpoint (``agentgym serve``, a random model): every draft fails the
    check, the template is said, the oracle succeeds, and the record replays."""
    env_id, task_id = smoke_tasks()[0]
    cassette = tmp_path / "tiny.jsonl"
    kwargs = {
        "user": "llm",
        "user_model": "tiny",
        "user_cassette": str(cassette),
        "user_options": {"draws": 2, "max_tokens": 12, "retries": 0, "timeout_s": 300},
    }
    env = gym.make(env_id, **kwargs, user_base_url=tiny_served, user_cassette_mode="record")
    live, info = play_oracle(env, task_id, seed=2)
    env.close()
    template = gym.make(env_id)
    plain, _ = play_oracle(template, task_id, seed=2)
    template.close()
    assert info["outcome"] is Outcome.SUCCESS and live == plain
    voice = info["user_llm"]["voice"]
    assert voice["fallbacks"] == voice["replies"] >= 2 and voice["redraws"] == voice["replies"]
    env = gym.make(env_id, **kwargs)  # replay, offline
    replayed, _ = play_oracle(env, task_id, seed=2)
    env.close()
    assert replayed == live
