"""The recording wrapper writes each finished episode to the trajectory store."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.episode import Truncation
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.spaces import TextSpace
from agentgym_envs.store import TrajectoryStore
from agentgym_envs.wrappers.recording import RecordingWrapper


@pytest.fixture()
def store(tmp_path: Path) -> Any:
    with TrajectoryStore(tmp_path / "t.sqlite") as s:
        yield s


def play_oracle(env: RecordingWrapper, seed: int) -> dict[str, Any]:
    """Play one oracle episode; return what the caller saw."""
    obs, info = env.reset(seed=seed)
    inner = env.unwrapped
    assert isinstance(inner, AgentEnv)
    seen: dict[str, Any] = {
        "reset_obs": obs,
        "system": info["system"],
        "hashes": [inner.state_hash()],
        "obs": [],
        "actions": [],
        "rewards": [],
        "calls": [],
        "components": {},
    }
    oracle = inner.oracle()
    while True:
        action = oracle.act()
        obs, reward, terminated, truncated, info = env.step(action)
        seen["actions"].append(action)
        seen["obs"].append(obs)
        seen["rewards"].append(float(reward))
        seen["calls"].append(info["tool_calls"])
        seen["hashes"].append(inner.state_hash())
        for k, v in info["reward_components"].items():
            seen["components"][k] = seen["components"].get(k, 0.0) + v
        if terminated or truncated:
            seen["info"] = info
            seen["canonical"] = list(inner.action_history)
            return seen


def test_an_oracle_episode_is_recorded_as_played(store: TrajectoryStore) -> None:
    env = RecordingWrapper(
        gym.make("agentgym/Sokoban-v0"), store, policy="oracle", policy_version="v1", run_id="r"
    )
    seen = play_oracle(env, seed=3)
    assert env.last_episode_id is not None
    ep = store.get(env.last_episode_id)
    info = seen["info"]
    steps = len(seen["actions"])
    assert ep.env_id == "agentgym/Sokoban-v0" and ep.task_id == info["task"]["id"]
    assert (ep.split, ep.difficulty) == (info["task"]["split"], info["task"]["difficulty"])
    assert (ep.policy, ep.policy_version, ep.run_id) == ("oracle", "v1", "r")
    assert ep.outcome == "success" and ep.success and ep.valid
    assert ep.actions == seen["actions"] and ep.canonical_actions == seen["canonical"]
    assert ep.canonical_actions != ep.actions  # the canonical form is the env's, not the text
    assert ep.state_hashes == seen["hashes"] and len(set(ep.state_hashes)) > 1
    assert ep.rewards == seen["rewards"]
    assert ep.reward_components == pytest.approx(seen["components"])
    assert ep.versions == info["versions"] and ep.seeds == info["seeds"]
    assert ep.milestones == info["milestones"] and ep.cost == info["cost"]
    assert ep.started_at <= ep.ended_at
    # system, task, then assistant/user per step
    assert [m["role"] for m in ep.messages] == ["system", "user"] + ["assistant", "user"] * steps
    assert ep.messages[0]["content"] == seen["system"]
    assert ep.messages[1]["content"] == seen["reset_obs"]
    assert [m["content"] for m in ep.messages[2::2]] == seen["actions"]
    assert [m["content"] for m in ep.messages[3::2]] == seen["obs"]
    assert [m["tool_calls"] for m in ep.messages[2::2]] == [
        [{**c, "status": str(c["status"])} for c in calls] for calls in seen["calls"]
    ]
    assert env.last_episode is not None and env.last_episode.to_json() == ep.to_json()


def test_the_episode_is_committed_before_the_last_step_returns(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with TrajectoryStore(path) as writer, TrajectoryStore(path) as reader:
        env = RecordingWrapper(gym.make("agentgym/Sokoban-v0"), writer)
        env.reset(seed=0)
        oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
        while True:
            done = any(env.step(oracle.act())[2:4])
            # another connection sees the episode exactly when the episode has ended
            assert reader.count() == int(done)
            if done:
                break


def test_replaying_an_episode_is_deduplicated(store: TrajectoryStore) -> None:
    env = RecordingWrapper(gym.make("agentgym/Sokoban-v0"), store)
    play_oracle(env, seed=5)
    first = env.last_episode_id
    play_oracle(env, seed=5)
    assert first is not None and env.last_episode_id is None and store.count() == 1
    play_oracle(env, seed=6)
    assert env.last_episode_id is not None and store.count() == 2


def test_notes_land_in_extra_of_that_episode_only(store: TrajectoryStore) -> None:
    env = RecordingWrapper(gym.make("agentgym/Sokoban-v0"), store, priority=2.0)
    env.note(trial=1)  # before reset: applies to the coming episode
    env.reset(seed=1)
    env.note(tokens_in=10)
    env.note(tokens_in=25, tokens_out=4)
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    while not any(env.step(oracle.act())[2:4]):
        pass
    assert env.last_episode_id is not None
    ep = store.get(env.last_episode_id)
    assert ep.extra == {"trial": 1, "tokens_in": 25, "tokens_out": 4} and ep.priority == 2.0
    play_oracle(env, seed=2)
    assert env.last_episode_id is not None
    assert store.get(env.last_episode_id).extra == {}


def test_unfinished_episodes_are_not_recorded(store: TrajectoryStore) -> None:
    env = RecordingWrapper(gym.make("agentgym/Sokoban-v0"), store)
    env.reset(seed=0)
    env.step('move(direction="up")')
    env.reset(seed=1)  # abandons the first episode
    env.step('move(direction="up")')
    env.close()
    assert store.count() == 0 and env.last_episode_id is None


def test_failures_and_bad_actions_are_recorded(store: TrajectoryStore) -> None:
    env = RecordingWrapper(gym.make("agentgym/Sokoban-v0", max_steps=4), store, policy="noop")
    env.reset(seed=0)
    actions = ["", "not a tool call", b'move(direction="up")', 'move(direction="left")']
    for action in actions:
        env.step(action)  # type: ignore[arg-type]
    assert env.last_episode_id is not None
    ep = store.get(env.last_episode_id)
    assert ep.outcome == "timeout" and not ep.success and ep.valid
    assert ep.actions == ["", "not a tool call", 'move(direction="up")', 'move(direction="left")']
    assert ep.messages[2]["tool_calls"] == [] and ep.cost["errors"] >= 2
    assert len(ep.state_hashes) == 5


class EchoEnv(gym.Env[str, str]):
    """A plain text env (not an AgentEnv): no system prompt, state hash or history."""

    observation_space = TextSpace(100)
    action_space = TextSpace(100, min_length=0)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.n = 0
        return "say something", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.n += 1
        return f"you said {action}", 1.0, self.n >= 2, False, {"outcome": "success"}


def test_plain_gymnasium_envs_are_recorded_too(store: TrajectoryStore) -> None:
    env = RecordingWrapper(EchoEnv(), store, policy="echo")
    env.reset(seed=0)
    env.step("hi")
    env.step("bye")
    assert env.last_episode_id is not None
    ep = store.get(env.last_episode_id)
    assert ep.env_id == "EchoEnv" and ep.state_hashes == ["", "", ""]
    assert ep.canonical_actions == ["hi", "bye"] and ep.rewards == [1.0, 1.0]
    assert [m["role"] for m in ep.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert ep.outcome == "success" and ep.valid


def test_an_episode_a_wrapper_cuts_is_recorded_as_a_timeout(store: TrajectoryStore) -> None:
    # TimeLimit ends the episode while Sokoban itself still says "continue"
    inner = gym.make("agentgym/Sokoban-v0", max_episode_steps=2)
    env = RecordingWrapper(inner, store, policy="noop")
    env.reset(seed=0)
    env.step('move(direction="up")')
    _, _, terminated, truncated, info = env.step('move(direction="up")')
    assert truncated and not terminated and info["outcome"] == "continue"
    assert env.last_episode_id is not None
    ep = store.get(env.last_episode_id)
    assert ep.outcome is Outcome.TIMEOUT and ep.truncation is Truncation.WRAPPER
    assert ep.valid and not ep.success and ep.steps == 2
    assert ep.summary.cut
    # written as such, not as the legacy "continue" that the store still reads
    row = sqlite3.connect(store.path).execute("SELECT outcome, truncation FROM episodes")
    assert row.fetchone() == ("timeout", "wrapper")


def test_a_lone_surrogate_in_an_action_is_recorded_not_raised(
    store: TrajectoryStore,
) -> None:
    """A policy's lone surrogate (a str action, or JSON's ``\\ud800``) is recorded with
    U+FFFD in its place; the store write at the episode's end raised on it (an
    ``env_error`` in the evaluator)."""
    env = RecordingWrapper(gym.make("agentgym/Retail-v1", max_steps=2), store, policy="p")
    for action in ("One moment \ud800", '{"name": "respond", "arguments": {"message": '
                   '"One moment \\ud800"}}'):  # fmt: skip
        env.reset(seed=0)
        env.step(action)
        *_, truncated, info = env.step(action)
        assert truncated and info["outcome"] is Outcome.TIMEOUT
        assert env.last_episode is not None and env.last_episode.valid
        assert "\ufffd" in env.last_episode.actions[0] + str(env.last_episode.messages)
    assert store.count() == 2
