"""Shared fixtures of the trainer tests: one real SmolLM2 tokenizer, a fresh tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from trainers.model import load_tokenizer, tiny_llama


@pytest.fixture(scope="session", autouse=True)
def agentgym_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point the model cache at a fresh folder, so tests never touch the user's cache."""
    root = tmp_path_factory.mktemp("agentgym-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTGYM_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def tokenizer(agentgym_cache: Path) -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer, as the "tiny" spec loads it (converted once per session)."""
    return load_tokenizer("tiny")


@pytest.fixture
def tiny_model(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    """A fresh tiny random Llama (seed 0)."""
    return tiny_llama(tokenizer)
