"""The episode fold and summary: pure data, no env."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentgym_envs.core.episode import (
    EpisodeFold,
    EpisodeStateError,
    EpisodeSummary,
    Truncation,
    UserLLMCounters,
)
from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.metrics import episode_metrics

RESET: dict[str, Any] = {
    "task": {"id": "t1", "split": "test", "difficulty": "easy", "instruction": "go"},
    "versions": {"env": "e1", "tools": "t1"},
    "seeds": {"env": 3, "task": 4, "verifier": 5},
    "cost": {"total": 0.0, "errors": 0, "faults": 0, "env_time_ms": 1.0},
}


def info(outcome: str = "continue", **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "outcome": outcome,
        "reward_components": {"milestone": 0.25, "cost": -0.05},
        "milestones": ["stage:1"],
        "tool_calls": [{"name": "move"}],
        "cost": {"total": 1.0, "errors": 1, "faults": 2},
        "episode_valid": True,
    }
    out.update(kw)
    return out


def play(*steps: tuple[float, bool, bool, dict[str, Any]]) -> EpisodeSummary:
    fold = EpisodeFold(started_at=100.0)
    fold.reset(RESET)
    for reward, terminated, truncated, step_info in steps:
        fold.step(reward, terminated, truncated, step_info)
    return fold.summary()


def test_a_success_adds_rewards_and_keeps_the_last_state() -> None:
    ep = play(
        (0.2, False, False, info()),
        (1.0, True, False, info("success", milestones=["stage:1", "stage:2"], safety={"x": 1})),
    )
    assert ep.outcome is Outcome.SUCCESS and ep.truncation is Truncation.NONE
    assert ep.success and ep.valid and not ep.cut
    assert ep.steps == 2 and ep.rewards == (0.2, 1.0) and ep.reward == pytest.approx(1.2)
    assert ep.reward_components == {"milestone": 0.5, "cost": pytest.approx(-0.1)}
    assert ep.milestones == ("stage:1", "stage:2") and ep.tool_calls == 2 and ep.violations == 1
    assert (ep.task_id, ep.split, ep.difficulty) == ("t1", "test", "easy")
    assert ep.versions == {"env": "e1", "tools": "t1"} and ep.seeds["verifier"] == 5
    assert ep.cost_total == 1.0 and ep.errors == 1 and ep.faults == 2
    assert ep.started_at == 100.0 and ep.ended_at >= ep.started_at


def test_a_wrapper_cut_is_a_timeout_and_a_budget_is_told_apart() -> None:
    cut = play((0.0, False, True, info()))  # TimeLimit: the env still says continue
    assert cut.outcome is Outcome.TIMEOUT and cut.truncation is Truncation.WRAPPER
    assert cut.cut and not cut.success
    budget = play((0.0, False, True, info("timeout")))
    assert budget.outcome is Outcome.TIMEOUT and budget.truncation is Truncation.BUDGET
    failed = play((0.0, True, False, info("failure")))
    assert failed.truncation is Truncation.NONE and not failed.cut


def test_env_errors_are_invalid_and_keep_their_message() -> None:
    ep = play(
        (0.0, False, True, info("env_error", env_error={"code": "x", "message": "browser died"}))
    )
    assert ep.outcome is Outcome.ENV_ERROR and not ep.valid and not ep.success
    assert ep.error == "browser died" and ep.truncation is Truncation.NONE
    masked = play((1.0, True, False, info("success", episode_valid=False)))
    assert not masked.valid and not masked.success


def test_crash_and_context_cut_end_the_episode() -> None:
    fold = EpisodeFold()
    fold.crash("reset failed: boom")
    ep = fold.summary()
    assert fold.done and ep.outcome is Outcome.ENV_ERROR and not ep.valid and ep.steps == 0
    assert ep.error == "reset failed: boom"
    fold = EpisodeFold()
    fold.reset(RESET)
    fold.step(0.1, False, False, info())
    fold.cut(Truncation.CONTEXT_LIMIT)
    ep = fold.summary()
    assert ep.outcome is Outcome.TIMEOUT and ep.truncation is Truncation.CONTEXT_LIMIT
    assert ep.cut and ep.valid and ep.rewards == (0.1,)
    with pytest.raises(EpisodeStateError, match="after the episode ended"):
        fold.step(0.0, False, False, info())
    with pytest.raises(EpisodeStateError, match="truncation reason"):
        EpisodeFold().cut(Truncation.NONE)


def test_usage_loops_and_attacks_are_folded() -> None:
    fold = EpisodeFold()
    fold.reset(RESET)
    fold.usage(tokens_in=10, tokens_out=3)
    fold.step(0.0, False, False, info(loop={"repeats": 2}, injection={"planted": True}))
    fold.usage(tokens_in=20, tokens_out=4, failed=1)
    fold.step(0.0, True, False, info("failure", loop={"repeats": 3}))
    ep = fold.summary()
    assert (ep.tokens_in, ep.tokens_out, ep.llm_failures) == (30, 7, 1)
    assert ep.loops == 3 and ep.attack == {"planted": True}


def test_plain_envs_without_agentgym_keys_fold_too() -> None:
    fold = EpisodeFold()
    fold.reset({})
    fold.step(1.0, False, False, {})
    fold.step(1.0, True, False, {"outcome": Outcome.SUCCESS})
    ep = fold.summary()
    assert ep.success and ep.steps == 2 and ep.task_id == "" and ep.cost == {}
    with pytest.raises(EpisodeStateError, match="must be one of"):
        EpisodeFold().step(0.0, False, False, {"outcome": "won"})


def test_summary_is_frozen_and_round_trips_through_json() -> None:
    ep = play((0.5, False, True, info()))
    with pytest.raises(AttributeError):
        ep.steps = 3  # type: ignore[misc]
    data = json.loads(json.dumps(ep.to_json()))
    assert data["outcome"] == "timeout" and data["truncation"] == "wrapper"
    assert EpisodeSummary.from_json(data) == ep
    with pytest.raises(EpisodeStateError, match="unknown EpisodeSummary fields"):
        EpisodeSummary.from_json({**data, "colour": "red"})


def test_metrics_of_summaries() -> None:
    eps = [
        play((1.0, True, False, info("success"))),
        play((0.0, False, True, info())),
        play((0.0, False, True, info("env_error"))),
    ]
    m = episode_metrics(eps)
    assert (m["episodes"], m["valid"], m["successes"], m["env_errors"]) == (3, 2, 1, 1)
    assert m["outcomes"] == {"success": 1, "timeout": 1, "env_error": 1}
    assert m["truncations"] == {"wrapper": 1}
    assert m["mean_return"] == pytest.approx(0.5)
    assert m["mean_reward_components"]["milestone"] == pytest.approx(0.25)
    assert m["tasks"] == 1 and m["trials"] == 3 and m["pass_k_tasks"]["2"] == 1
    split = episode_metrics(eps, task_keys=["a", "b", "c"])
    assert split["tasks"] == 3 and split["trials"] == 1
    with pytest.raises(ValueError, match="one key per episode"):
        episode_metrics(eps, task_keys=["a"])


def user_llm(replies: int, fallbacks: int = 0, failures: int = 0) -> dict[str, Any]:
    """``info["user_llm"]`` as the LLM user of Retail and Calendar writes it."""
    return {
        "voice": {"replies": replies, "first_draw_pass": replies - fallbacks, "redraws": 1,
                  "fallbacks": fallbacks, "failures": failures},
        "reader": {"reads": 2, "fallbacks": 0, "disagreements": 1},
        "cassette": {"mode": "replay", "position": 7, "misses": fallbacks},
        "fault": "down" if failures else "",
        "last": {"turn": 3, "rejections": [], "fallback": False, "disagreement": {}},
    }  # fmt: skip


def test_the_llm_users_last_counters_are_kept_and_round_trip() -> None:
    fold = EpisodeFold()
    fold.reset({**RESET, "user_llm": user_llm(1)})
    fold.step(0.0, False, False, info(user_llm=user_llm(2, fallbacks=1)))
    fold.step(0.0, True, False, info("env_error", user_llm=user_llm(3, 1, failures=1)))
    ep = fold.summary()
    assert ep.user_llm == UserLLMCounters(
        replies=3, first_draw_pass=2, redraws=1, fallbacks=1, failures=1, reads=2,
        read_fallbacks=0, disagreements=1, cassette_mode="replay", cassette_position=7,
        cassette_misses=1, fault="down",
    )  # fmt: skip
    data = json.loads(json.dumps(ep.to_json()))
    assert data["user_llm"]["replies"] == 3 and EpisodeSummary.from_json(data) == ep
    assert play((1.0, True, False, info("success"))).user_llm is None  # no LLM user
    old = {k: v for k, v in data.items() if k != "user_llm"}  # a record from before the field
    assert EpisodeSummary.from_json(old).user_llm is None
    with pytest.raises(EpisodeStateError, match="unknown UserLLMCounters fields"):
        EpisodeSummary.from_json({**data, "user_llm": {**data["user_llm"], "mood": "cross"}})
    with pytest.raises(EpisodeStateError, match=r"info\['user_llm'\] must be"):
        EpisodeFold().step(0.0, False, False, {"user_llm": {"voice": {"replies": 1}}})


def test_metrics_add_up_the_llm_users_counters_only_where_there_is_one() -> None:
    def voiced(*users: dict[str, Any]) -> EpisodeSummary:
        return play(
            *((0.0, i == len(users) - 1, False, info(user_llm=u)) for i, u in enumerate(users))
        )

    eps = [voiced(user_llm(1), user_llm(4, fallbacks=1)), voiced(user_llm(2, 2, failures=1))]
    m = episode_metrics([*eps, play((1.0, True, False, info("success")))])["user_llm"]
    assert (m["episodes"], m["replies"], m["first_draw_pass"], m["fallbacks"]) == (2, 6, 3, 3)
    assert m["first_draw_rate"] == m["fallback_rate"] == 0.5 and m["failures"] == 1
    assert (m["redraws"], m["reads"], m["disagreements"], m["cassette_misses"]) == (2, 4, 2, 3)
    assert episode_metrics([voiced(user_llm(0))])["user_llm"]["fallback_rate"] is None
    assert "user_llm" not in episode_metrics([play((1.0, True, False, info("success")))])
