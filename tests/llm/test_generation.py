"""The generation interface and the local sampler's decoding hook."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm import Generator, SamplingSettings
from agentgym_envs.llm.models import load_tokenizer, tiny_llama
from agentgym_envs.llm.sampler import RowPicker, Sampler

PROMPTS = [[1, 2, 3, 4], [5, 6]]


@pytest.fixture(scope="module")
def model(agentgym_cache: Path) -> LlamaForCausalLM:
    lm = tiny_llama(load_tokenizer("tiny"), seed=3)
    lm.train(False)
    return lm


def test_the_sampler_is_a_generator_with_its_settings_and_weights_version(
    model: LlamaForCausalLM,
) -> None:
    sampler = Sampler(model, eos_ids=[0], pad_id=0, temperature=0.7, top_p=0.9, seed=5)
    assert isinstance(sampler, Generator)
    assert sampler.settings == SamplingSettings(temperature=0.7, top_p=0.9, seed=5)
    assert sampler.weights_version == 0
    samples = sampler.generate(PROMPTS, [3, 2])
    assert [len(s.ids) for s in samples] == [len(s.logprobs) for s in samples]
    assert sampler.tokens_generated == sum(len(s.ids) for s in samples)


@pytest.mark.parametrize(("temperature", "top_p"), [(-0.1, 1.0), (1.0, 0.0), (1.0, 1.5)])
def test_bad_sampling_settings_raise(temperature: float, top_p: float) -> None:
    with pytest.raises(ConfigError, match=r"(temperature|top_p) must be"):
        SamplingSettings(temperature, top_p)


def test_a_picker_replaces_the_draw_at_every_step(model: LlamaForCausalLM) -> None:
    sampler = Sampler(model, eos_ids=[0], pad_id=0, seed=0)
    steps: list[int] = []

    def only_seven(logits: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        # a constraint: every row may only write token 7
        steps.append(step)
        logprobs = torch.log_softmax(logits, dim=-1)  # (B, V)
        token = torch.full((logits.shape[0],), 7, dtype=torch.long, device=logits.device)
        return token, logprobs[:, 7]

    samples = sampler.generate(PROMPTS, [4, 4], picker=only_seven)
    assert [s.ids for s in samples] == [[7] * 4, [7] * 4]
    assert steps == [0, 1, 2, 3]
    assert all(lp < 0 for s in samples for lp in s.logprobs)
    # the default draw is untouched by a call with a picker: same stream as a fresh sampler
    fresh = Sampler(model, eos_ids=[0], pad_id=0, seed=0)
    assert [s.ids for s in sampler.generate(PROMPTS, [4, 4])] == [
        s.ids for s in fresh.generate(PROMPTS, [4, 4])
    ]


def test_row_picker_rows_follow_their_own_seed_only(model: LlamaForCausalLM) -> None:
    sampler = Sampler(model, eos_ids=[0], pad_id=0)

    def run(settings: list[SamplingSettings], prompts: list[list[int]]) -> list[list[int]]:
        picker = RowPicker(settings, steps=6, device=sampler.device)
        return [s.ids for s in sampler.generate(prompts, [6] * len(prompts), picker=picker)]

    hot = SamplingSettings(temperature=1.5, seed=11)
    alone = run([hot], [PROMPTS[0]])
    batched = run([hot, SamplingSettings(temperature=1.5, seed=12)], PROMPTS)
    assert batched[0] == alone[0]
    greedy = run([SamplingSettings(temperature=0.0, seed=1)], [PROMPTS[0]])
    assert greedy == run([SamplingSettings(temperature=0.0, seed=2)], [PROMPTS[0]])
