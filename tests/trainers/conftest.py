"""Shared fixtures of the trainer tests: one real SmolLM2 tokenizer, a fresh tiny model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from trainers.model import load_tokenizer, tiny_llama

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this folder's `slow` tests (full SmolLM2, ~30 s) unless asked for.

    Run them with ``-m slow`` or ``AGENTGYM_SLOW=1``.
    """
    if "slow" in (config.option.markexpr or "") or os.environ.get("AGENTGYM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or AGENTGYM_SLOW=1")
    for item in items:
        if "slow" in item.keywords and HERE in item.path.parents:
            item.add_marker(skip)


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
