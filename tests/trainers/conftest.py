"""Shared fixtures of the trainer tests: one real SmolLM2 tokenizer, a fresh tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from agentgym_envs.llm.models import load_tokenizer, tiny_llama


@pytest.fixture(scope="session")
def tokenizer(agentgym_cache: Path) -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer, as the "tiny" spec loads it (converted once per session)."""
    return load_tokenizer("tiny")


@pytest.fixture
def tiny_model(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    """A fresh tiny random Llama (seed 0)."""
    return tiny_llama(tokenizer)
