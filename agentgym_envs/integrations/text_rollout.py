"""Multi-turn text episodes played token in, token out, for external trainers.

Trainers that take a rollout function (TRL's ``rollout_func``, verl's agent loops) want,
per episode, the prompt ids, one completion sequence of sampled and env tokens, the
sampler's log-probabilities and a mask that tells them apart. :func:`play_text_episodes`
plays a batch of episodes with any :class:`~agentgym_envs.llm.generation.Generator`:

* the prompt is the env's system prompt and first observation, rendered by
  :class:`~agentgym_envs.llm.chat.ChatFormat` (env text encoded with special tokens
  split, so an observation cannot forge a turn);
* each turn appends the sampled ids exactly as sampled (mask 1, their log-probabilities),
  steps the env with their decoded text, then appends the template's end of the
  assistant turn and a user turn holding the observation (mask 0, log-probability 0);
* sampled ids are never re-tokenized.

The chat grows as in the trainer's runner (:mod:`agentgym_envs.rollout.turns`).

An episode stops when the env ends it, after ``max_turns`` turns, or when the next turn
would not fit in ``max_completion_tokens`` (the episode is then cut, and scored with the
rewards the env paid so far). An env that raises is an env error: the episode is marked
invalid (``valid`` False), which trainers mask, never a reward.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

import gymnasium as gym

from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.llm.chat import ChatFormat, Message
from agentgym_envs.llm.generation import Generator, Sample
from agentgym_envs.rollout.turns import answer_ids, head_messages, system_of

log = logging.getLogger(__name__)

MIN_TURN_TOKENS = 8
"""A turn is not started with room for fewer sampled tokens than this."""


@dataclass(frozen=True)
class EpisodeStart:
    """How to reset the env for one episode."""

    seed: int | None
    """The env seed (``reset(seed=...)``)."""
    options: Mapping[str, Any]
    """``reset`` options: ``task_id``, ``split``, ``difficulty``, ``task_seed`` ..."""


@dataclass
class TextEpisode:
    """One played episode: its tokens and what the env paid."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    """1 for a sampled token, 0 for an env or template token."""
    reward: float = 0.0
    """The sum of the env's step rewards (each the sum of its reward components)."""
    reward_components: dict[str, float] = field(default_factory=dict)
    outcome: str = "continue"
    valid: bool = True
    """False for an env error: trainers mask the episode."""
    turns: int = 0
    cut: bool = False
    """The episode did not end: it hit ``max_turns`` or the token budget."""
    done: bool = False
    messages: list[Message] = field(default_factory=list)

    def extend(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([1 if logprobs is not None else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def pay(self, reward: SupportsFloat, info: Mapping[str, Any]) -> None:
        self.reward += float(reward)
        for name, value in (info.get("reward_components") or {}).items():
            self.reward_components[name] = self.reward_components.get(name, 0.0) + value
        outcome = info.get("outcome", self.outcome)
        self.outcome = str(getattr(outcome, "value", outcome))
        self.valid = self.valid and bool(info.get("episode_valid", True))


def play_text_episodes(
    envs: Sequence[gym.Env[Any, Any]],
    starts: Sequence[EpisodeStart],
    chat: ChatFormat,
    generator: Generator,
    *,
    max_completion_tokens: int,
    max_turn_tokens: int,
    max_turns: int | None = None,
    system_prompt: bool = True,
) -> list[TextEpisode]:
    """Play one episode per start, ``starts[i]`` on ``envs[i]``, sampling in batches.

    Args:
        envs: one env per start (at least as many as starts).
        starts: the episodes to play.
        chat: the tokenizer's chat format.
        generator: samples each turn (its settings and weights are the policy's).
        max_completion_tokens: sampled plus env tokens after the prompt, at most.
        max_turn_tokens: sampled tokens per turn, at most.
        max_turns: turns per episode, at most (None: the env's own budgets).
        system_prompt: start with the env's system prompt (``info["system"]``).

    Returns:
        The episodes, in the order of ``starts``.

    Raises:
        AgentGymError: a reset was misconfigured (an unknown task id, for example).
    """
    episodes = [
        _start(env, start, chat, system_prompt) for env, start in zip(envs, starts, strict=False)
    ]
    live = [i for i, ep in enumerate(episodes) if not ep.done]
    while live:
        prompts = [episodes[i].prompt_ids + episodes[i].completion_ids for i in live]
        budgets = [
            min(max_turn_tokens, max_completion_tokens - len(episodes[i].completion_ids))
            for i in live
        ]
        samples = generator.generate(prompts, budgets)
        live = [
            i
            for i, sample in zip(live, samples, strict=True)
            if _advance(
                envs[i],
                episodes[i],
                sample,
                chat,
                max_completion_tokens,
                max_turns,
                max_turn_tokens,
            )
        ]
    return episodes


def _start(
    env: gym.Env[Any, Any], start: EpisodeStart, chat: ChatFormat, system_prompt: bool
) -> TextEpisode:
    try:
        obs, info = env.reset(seed=start.seed, options=dict(start.options))
    except AgentGymError:
        raise  # a configuration mistake, not an env failure
    except Exception:
        log.exception("env reset failed; the episode is an env error (masked)")
        messages: list[Message] = [{"role": "user", "content": "(the environment failed)"}]
        episode = TextEpisode(chat.render_ids(messages, True), outcome="env_error", valid=False)
        episode.extend([chat.eos_id], None)
        episode.done = True
        return episode
    messages = head_messages(system_of(info, system_prompt), obs)
    return TextEpisode(chat.render_ids(messages, True), messages=messages)


def _advance(
    env: gym.Env[Any, Any],
    ep: TextEpisode,
    sample: Sample,
    chat: ChatFormat,
    max_completion_tokens: int,
    max_turns: int | None,
    max_turn_tokens: int,
) -> bool:
    """Append a sample, step the env, append the observation. False when it ended."""
    ep.extend(sample.ids, sample.logprobs)
    content = chat.content(sample.ids)
    ep.turns += 1
    try:
        obs, reward, terminated, truncated, info = env.step(content)
    except Exception:
        log.exception("env step failed; the episode is an env error (masked)")
        ep.outcome, ep.valid, ep.done = "env_error", False, True
        return False
    ep.pay(reward, info)
    if terminated or truncated:
        ep.done = True
        return False
    # 1. the template's end of the assistant turn, then a user turn with the observation
    close, opened = answer_ids(chat, ep.messages, content, sample.ended, obs)
    # 2. stop when the next turn would not fit (or the turn limit is reached)
    room = max_completion_tokens - len(ep.completion_ids) - len(close) - len(opened)
    if (max_turns is not None and ep.turns >= max_turns) or room < min(
        MIN_TURN_TOKENS, max_turn_tokens
    ):
        ep.cut = True
        return False
    ep.extend(close + opened, None)
    return True
