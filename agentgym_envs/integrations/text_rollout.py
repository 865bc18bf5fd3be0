"""Multi-turn text episodes played token in, token out, for external trainers.

Trainers that take a rollout function (TRL's ``rollout_func``, verl's agent loops) want,
per episode, the prompt ids, one completion sequence of sampled and env tokens, the
sampler's log-probabilities and a mask that tells them apart. :func:`play_text_episodes`
plays a batch of episodes with any :class:`~agentgym_envs.llm.generation.Generator`, on
the library's one turn loop (:class:`~agentgym_envs.rollout.episodes.RolloutRunner`, the
reference trainer's too, with the ``truncate`` context policy), and hands each
trajectory back as a :class:`TextEpisode`:

* the prompt is the env's system prompt and first observation, rendered by
  :class:`~agentgym_envs.llm.chat.ChatFormat` (env text encoded with special tokens
  split, so an observation cannot forge a turn);
* each turn appends the sampled ids exactly as sampled (mask 1, their log-probabilities),
  steps the env with their decoded text, then appends the template's end of the
  assistant turn and a user turn holding the observation (mask 0, log-probability 0);
* sampled ids are never re-tokenized.

An episode stops when the env ends it, after ``max_turns`` turns, or when the next turn
would not fit in ``max_completion_tokens`` (the episode is then cut, outcome
``timeout``, and scored with the rewards the env paid so far). An env that raises, or a
generation server that fails, is an env error: the episode is marked invalid (``valid``
False), which trainers mask, never a reward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

import gymnasium as gym

from agentgym_envs.core.episode import Truncation
from agentgym_envs.llm.chat import ChatFormat, Message
from agentgym_envs.llm.generation import Generator
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner, Trajectory
from agentgym_envs.rollout.local import LocalEnvSlots
from agentgym_envs.rollout.turns import head_messages

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
        envs: one env per start (with fewer, an env plays its next start once its
            episode ends). They stay open: the caller owns them.
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
    if not starts:
        return []
    slots = LocalEnvSlots.borrowed(envs)
    runner = RolloutRunner(
        slots.make_env,  # never called: the slots are given
        chat,
        generator,
        n_envs=len(envs),
        max_new_tokens=max_turn_tokens,
        max_context=None,
        context_policy="truncate",
        system_prompt=system_prompt,
        slots=slots,
        max_completion=max_completion_tokens,
        max_turns=max_turns,
        min_turn_tokens=MIN_TURN_TOKENS,
        cache_rows=False,
    )
    jobs = [RolloutJob(None, s.seed, i, options=dict(s.options)) for i, s in enumerate(starts)]
    trajectories, _ = runner.collect(jobs, policy_version=0)
    return [_text_episode(t, chat) for t in trajectories]


def _text_episode(traj: Trajectory, chat: ChatFormat) -> TextEpisode:
    """The adapters' record of one trajectory of the turn loop (one segment: the loop
    runs with the ``truncate`` policy)."""
    ep = traj.episode
    if not traj.observations:  # the reset failed: an env error, one masked token
        messages: list[Message] = [{"role": "user", "content": "(the environment failed)"}]
        failed = TextEpisode(chat.render_ids(messages, True), outcome="env_error", valid=False)
        failed.extend([chat.eos_id], None)
        failed.done = True
        return failed
    messages = head_messages(traj.system, traj.observations[0])
    prompt = chat.render_ids(messages, True)
    for action, observation in zip(traj.actions, traj.observations[1:], strict=False):
        messages.append({"role": "assistant", "content": action})
        messages.append({"role": "user", "content": observation})
    cut = ep.truncation in (Truncation.CONTEXT_LIMIT, Truncation.TURN_LIMIT)
    text = TextEpisode(
        prompt,
        reward=ep.reward,
        reward_components=dict(ep.reward_components),
        outcome=ep.outcome.value,
        valid=ep.valid,
        turns=len(traj.actions),
        cut=cut,
        done=not cut,
        messages=messages,
    )
    if traj.segments:
        (segment,) = traj.segments
        assert segment.ids[: len(prompt)] == prompt, "the segment starts with the prompt"
        n = len(prompt)
        text.completion_ids = segment.ids[n:]
        text.env_mask = segment.mask[n:]
        text.logprobs = segment.logprobs[n:]
    return text
