"""The generation interface: prompt token ids in, sampled ids and their log-probabilities out.

Everything that samples from a policy -- the local
:class:`~agentgym_envs.llm.sampler.Sampler` today, a vLLM engine or a remote server
later -- implements :class:`Generator`, so rollouts (the trainer's token-in/token-out
runner, policies, ``agentgym serve``) never depend on how tokens are produced.

The contract, which off-policy corrections rely on:

* prompts are token ids, never text: the caller renders chats (see
  :class:`~agentgym_envs.llm.chat.ChatFormat`), so a backend never re-tokenizes;
* each sampled id comes with ``log softmax(logits / temperature)`` of that id under the
  weights that sampled it (temperature 0 is greedy and reports temperature-1 values);
* :attr:`Generator.settings` and :attr:`Generator.weights_version` say which sampling
  settings and which weights produced the samples.

This module imports no torch: :class:`TokenPicker` names tensors for type checkers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentgym_envs.core.errors import ConfigError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SamplingSettings:
    """How tokens are drawn from the model's distribution.

    Raises:
        ConfigError: ``temperature`` is negative or ``top_p`` is outside (0, 1].
    """

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]: tokens are drawn from the smallest set reaching it."""
    seed: int = 0
    """Seed of the sampling random stream (separate from env seeds)."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Sample:
    """One generated continuation of a prompt."""

    ids: list[int]
    """The sampled token ids, in order."""
    logprobs: list[float]
    """The sampler's log-probability of each id (one per id)."""
    ended: bool
    """Whether it ended with an end-of-turn token (else it hit its token limit)."""


@runtime_checkable
class Generator(Protocol):
    """Samples continuations of token-id prompts (see the module docstring's contract)."""

    @property
    def settings(self) -> SamplingSettings:
        """The sampling settings every sample is drawn with."""
        ...

    @property
    def weights_version(self) -> int:
        """The version of the weights that sample (the trainer's policy version)."""
        ...

    @property
    def tokens_generated(self) -> int:
        """Tokens sampled so far (a throughput measure)."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        """Sample a continuation of each prompt, at most ``max_new[i]`` tokens each.

        Args:
            prompts: Token ids of each prompt.
            max_new: The token limit of each prompt's continuation.
            rows: A stable key per prompt (the env slot), so a backend can keep the
                slot's earlier turns cached; None when prompts are unrelated.

        Returns:
            One :class:`Sample` per prompt, in order.
        """
        ...


class TokenPicker(Protocol):
    """Chooses the next token of every row from its logits: a sampler's decoding hook.

    A picker replaces the sampler's own temperature/nucleus draw, for example to give
    each row its own settings and random stream
    (:class:`~agentgym_envs.llm.sampler.RowPicker`) or to constrain decoding by masking
    logits before drawing. It must report each chosen token's log-probability under the
    distribution the sample claims to come from (the tempered one, before any nucleus
    or mask), since trainers compare it with their own.
    """

    def __call__(self, logits: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Pick one token per row.

        Args:
            logits: Next-token logits, (B, V) float32.
            step: Index of the token being generated (0 for the first).

        Returns:
            ``(token ids (B,) long, their log-probabilities (B,) float32)``.
        """
        ...
