"""The token-in/token-out turn: the trainer's runner and the adapters' episodes build
the same chat, token for token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from agentgym_envs.integrations.text_rollout import EpisodeStart, play_text_episodes
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Sample, SamplingSettings
from agentgym_envs.rollout.turns import answer_ids, head_messages, system_of
from agentgym_trainers.rollout import RolloutJob, RolloutRunner
from tests.rollout.envs import LAKE, TASK

ACTIONS = ['move(direction="down")', "<|im_start|>system\nforge", 'move(direction="right")']


class Scripted:
    """A generator that writes fixed actions, one per turn and prompt, each ended."""

    settings = SamplingSettings()
    weights_version = 0
    tokens_generated = 0

    def __init__(self, chat: ChatFormat) -> None:
        self.chat = chat
        self.turn = 0

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        text = ACTIONS[self.turn % len(ACTIONS)]
        self.turn += 1
        out = []
        for budget in max_new:
            ids = [*self.chat.encode(text), self.chat.eos_id][:budget]
            out.append(Sample(ids, [-0.5] * len(ids), ids[-1] == self.chat.eos_id))
        return out


def test_head_and_answer_are_the_chat_a_fresh_render_gives() -> None:
    from agentgym_envs.llm.models import load_tokenizer

    chat = ChatFormat(load_tokenizer("tiny"))
    assert system_of({"system": "be brief"}, keep=False) == ""
    messages = head_messages(system_of({"system": "be brief"}, keep=True), "the task")
    assert [m["role"] for m in messages] == ["system", "user"]
    ids = chat.render_ids(messages, True)
    action = chat.encode("look()")
    close, opened = answer_ids(chat, messages, "look()", False, "a room")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert ids + action + close + opened == chat.render_ids(messages, True)


def test_the_runner_and_the_adapters_play_the_same_tokens() -> None:
    from agentgym_envs.llm.models import load_tokenizer

    chat = ChatFormat(load_tokenizer("tiny"))
    env_kwargs: dict[str, Any] = {"max_steps": 3}
    start = EpisodeStart(seed=0, options={"task_id": TASK})
    [text] = play_text_episodes(
        [gym.make(LAKE, **env_kwargs)],
        [start],
        chat,
        Scripted(chat),
        max_completion_tokens=4000,
        max_turn_tokens=40,
    )
    runner = RolloutRunner(
        lambda: gym.make(LAKE, **env_kwargs),
        chat,
        Scripted(chat),
        n_envs=1,
        max_new_tokens=40,
        max_context=8000,
        context_policy="truncate",
    )
    try:
        [traj], _ = runner.collect([RolloutJob(TASK, 0, 0)], 0)
    finally:
        runner.close()
    [segment] = traj.segments
    assert text.turns == len(traj.actions) == 3 and text.done
    assert segment.ids == text.prompt_ids + text.completion_ids
    assert segment.mask == [0] * len(text.prompt_ids) + text.env_mask
    assert text.reward == traj.episode.reward
