"""A small byte-level BPE vocabulary fitted to an env's text, for CPU-sized models.

With the 49,152-token SmolLM2 vocabulary, a model with a 64-wide trunk spends most of
its training time in the output layer and the softmax over the vocabulary, and most of
its parameters in embeddings that never appear in an env's text. A vocabulary of a few
hundred tokens fitted to the env's own chats (system prompt, observations, the oracle's
tool calls, the chat template's markers) makes each token cheap and each sequence short,
so a CPU can afford the many episodes RL needs.

The tokenizer is byte-level, so every text still encodes (rare text costs more tokens,
never fails); digits are split one per token, as SmolLM2 does, and so are the cells of
a text grid (runs of capitals and map symbols such as ``FFHG`` or ``#.@#``), so a model
sees one token per cell and can learn where things are; it keeps SmolLM2's ChatML
template and its control tokens, which stay special (message text can never produce
them: see :class:`~agentgym_envs.llm.ChatTemplate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# a grid cell: a capital or map symbol next to another one (FrozenLake's FFHG, Sokoban's #.@)
_CELL = "[A-Z#@.*+]"
GRID_CELLS = f"{_CELL}(?={_CELL})|(?<={_CELL}){_CELL}"


def oracle_chats(
    env_id: str,
    env_kwargs: dict[str, Any],
    difficulty: str | None,
    episodes: int,
    seed: int = 0,
) -> Iterator[list[dict[str, str]]]:
    """Chats (system, task, tool calls, observations) of oracle episodes of ``train``."""
    env = gym.make(env_id, **env_kwargs)
    try:
        for i in range(episodes):
            options: dict[str, Any] = {"split": "train"}
            if difficulty is not None:
                options["difficulty"] = difficulty
            obs, info = env.reset(seed=seed + i, options=options)
            chat = [{"role": "system", "content": str(info.get("system") or "")}]
            chat.append({"role": "user", "content": str(obs)})
            oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
            done = False
            while not done:
                action = oracle.act()
                obs, _, terminated, truncated, _ = env.step(action)
                chat += [
                    {"role": "assistant", "content": action},
                    {"role": "user", "content": str(obs)},
                ]
                done = terminated or truncated
            yield chat
    finally:
        env.close()


def fit_tokenizer(
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    difficulty: str | None = None,
    vocab_size: int = 512,
    episodes: int = 256,
    seed: int = 0,
) -> Any:
    """A byte-level BPE tokenizer fitted to oracle chats of ``env_id``'s train split.

    Returns:
        A ``PreTrainedTokenizerFast`` with SmolLM2's chat template, ``<|im_end|>`` as
        eos and ``<|endoftext|>`` as pad.

    Raises:
        ConfigError: ``vocab_size`` cannot hold the 256 bytes and the control tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from agentgym_envs.llm.models import load_tokenizer

    floor = 256 + len(SPECIAL_TOKENS)
    if vocab_size <= floor:
        raise ConfigError(f"vocab_size must be > {floor} (256 bytes + control tokens)")
    template = load_tokenizer("tiny")
    texts = (
        template.apply_chat_template(chat, tokenize=False)
        for chat in oracle_chats(env_id, env_kwargs or {}, difficulty, episodes, seed)
    )
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GRID_CELLS), "isolated"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    tokenizer.chat_template = template.chat_template
    tokenizer.padding_side = "left"
    return tokenizer


__all__ = ["fit_tokenizer", "oracle_chats"]
