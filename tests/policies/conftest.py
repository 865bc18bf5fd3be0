"""Fixtures of the LLM policy tests: a model cache, a tiny random model, real SmolLM2.

The model cache lives in pytest's cache folder (``.pytest_cache``), never in the user's
cache, and survives between test sessions: the SmolLM2 tokenizer and weights are
converted once per checkout, not once per session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def agentgym_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    cache = request.config.cache  # None under -p no:cacheprovider: then one per session
    if cache is not None:
        root = Path(cache.mkdir("agentgym-model-cache"))
    else:
        root = tmp_path_factory.mktemp("agentgym-model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTGYM_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def tiny_folder(agentgym_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama with the SmolLM2 tokenizer, saved as a model folder.

    Its input and output embeddings are untied: a tied random model repeats its last
    input token forever, so every action would be the same blank text.
    """
    import torch
    from transformers import LlamaForCausalLM

    from trainers.model import load_tokenizer, tiny_llama

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
