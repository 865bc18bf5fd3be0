"""The token-in/token-out turn: the trainer's runner and the adapters' episodes build
the same chat, token for token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.integrations.text_rollout import EpisodeStart, play_text_episodes
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Sample, SamplingSettings
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner
from agentgym_envs.rollout.turns import answer_ids, head_messages, system_of
from tests.rollout.envs import LAKE, TASK, Breaking

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


def _play(chat: ChatFormat, generator: Any, envs: Sequence[gym.Env[Any, Any]], **kw: Any) -> Any:
    starts = [EpisodeStart(seed=s, options={"task_id": TASK}) for s in range(len(envs))]
    kw.setdefault("max_completion_tokens", 4000)
    return play_text_episodes(envs, starts, chat, generator, max_turn_tokens=40, **kw)


def test_a_turn_limit_cuts_the_episode_on_the_one_loop() -> None:
    """``max_turns`` cuts an episode that goes on (truncation ``turn_limit``): the
    adapters see a cut, timed-out episode that ends with its last sampled token, and the
    runner keeps the observation after it as the tail a critic bootstraps from."""
    from agentgym_envs.core.episode import Outcome, Truncation
    from agentgym_envs.llm.models import load_tokenizer

    chat = ChatFormat(load_tokenizer("tiny"))
    [text] = _play(chat, Scripted(chat), [gym.make(LAKE)], max_turns=1)
    assert text.turns == 1 and text.cut and not text.done
    assert text.outcome == "timeout" and text.valid
    assert text.env_mask[-1] == 1  # nothing after the last action is trained on
    runner = RolloutRunner(
        lambda: gym.make(LAKE), chat, Scripted(chat), n_envs=1, max_new_tokens=40,
        max_context=8000, context_policy="truncate", max_turns=1,
    )  # fmt: skip
    try:
        [traj], _ = runner.collect([RolloutJob(TASK, 0, 0)], 0)
    finally:
        runner.close()
    assert traj.episode.outcome is Outcome.TIMEOUT
    assert traj.episode.truncation is Truncation.TURN_LIMIT and traj.tail_ids


def test_the_completion_budget_bounds_the_tokens_after_the_prompt() -> None:
    from agentgym_envs.llm.models import load_tokenizer

    chat = ChatFormat(load_tokenizer("tiny"))
    [free] = _play(chat, Scripted(chat), [gym.make(LAKE, max_steps=3)])
    budget = len(free.completion_ids) - 5  # the last turn no longer fits
    [text] = _play(
        chat, Scripted(chat), [gym.make(LAKE, max_steps=3)], max_completion_tokens=budget
    )
    assert text.cut and text.outcome == "timeout" and text.turns < free.turns
    assert len(text.completion_ids) <= budget
    assert text.completion_ids == free.completion_ids[: len(text.completion_ids)]
    with pytest.raises(ValueError, match="truncate"):
        RolloutRunner(
            lambda: gym.make(LAKE), chat, Scripted(chat), n_envs=1, max_new_tokens=8,
            max_context=None, context_policy="drop", max_completion=100,
        )  # fmt: skip


def test_the_adapters_envs_are_borrowed_and_their_faults_are_env_errors() -> None:
    """The caller's envs stay open; a misconfigured reset raises; an env that raises in
    a step, and a generation server that fails, end their episodes as env errors."""
    from agentgym_envs.core.errors import TaskNotFoundError
    from agentgym_envs.llm.http_generator import GenerationServerError
    from agentgym_envs.llm.models import load_tokenizer

    chat = ChatFormat(load_tokenizer("tiny"))
    env = Breaking()
    [broken, fine] = play_text_episodes(
        [env, Breaking()],
        [EpisodeStart(seed=2, options={}), EpisodeStart(seed=0, options={})],
        chat,
        Scripted(chat),
        max_completion_tokens=400,
        max_turn_tokens=40,
    )
    assert broken.outcome == "env_error" and not broken.valid and broken.env_mask[-1] == 1
    assert fine.valid and fine.reward == 1.0 and fine.done
    assert env.closed is False
    [failed] = play_text_episodes(
        [env], [EpisodeStart(seed=1, options={})], chat, Scripted(chat),
        max_completion_tokens=400, max_turn_tokens=40,
    )  # fmt: skip
    assert failed.outcome == "env_error" and not failed.valid and failed.env_mask == [0]
    with pytest.raises(TaskNotFoundError):
        play_text_episodes(
            [gym.make(LAKE)], [EpisodeStart(seed=0, options={"task_id": "no-such-task"})],
            chat, Scripted(chat), max_completion_tokens=400, max_turn_tokens=40,
        )  # fmt: skip

    class Down(Scripted):
        def generate(self, prompts: Any, max_new: Any, rows: Any = None) -> list[Sample]:
            raise GenerationServerError("server down", status=503)

    [down] = _play(chat, Down(chat), [gym.make(LAKE)])
    assert down.outcome == "env_error" and not down.valid and down.completion_ids == []
