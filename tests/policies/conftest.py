"""Fixtures of the LLM policy tests: a tiny random model and the real SmolLM2 (the model
cache fixture ``agentgym_cache`` is the suite's, in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_folder(agentgym_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama with the SmolLM2 tokenizer, saved as a model folder.

    Its input and output embeddings are untied: a tied random model repeats its last
    input token forever, so every action would be the same blank text.
    """
    import torch
    from transformers import LlamaForCausalLM

    from agentgym_envs.llm.models import load_tokenizer, tiny_llama

    tokenizer = load_tokenizer("tiny")
    config = tiny_llama(tokenizer).config
    config.tie_word_embeddings = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def smollm2(agentgym_cache: Path) -> Any:
    """The real SmolLM2-135M-Instruct as a :class:`LocalLM` on CPU."""
    from agentgym_envs.policies.hf import LocalLM

    return LocalLM("smollm2", device="cpu")
