"""The env slots protocol: local and process slots answer alike; crashes and mistakes."""

from __future__ import annotations

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.distributed.results import Call, CrashCode
from agentgym_envs.rollout import (
    EnvSlots,
    LocalEnvSlots,
    ProcessEnvSlots,
    SlotIsolation,
    make_slots,
    oracle_script,
)
from tests.rollout.envs import TASK, Breaking, breaking_config, lake

OPTIONS = {"task_id": TASK}


def play_oracle(slots: EnvSlots) -> list[tuple[str, float, bool]]:
    """One oracle episode on slot 1, then its first step again on slot 0 from the snapshot
    taken before it: the steps of the episode."""
    first = slots.reset(1, 0, OPTIONS)
    assert not first.crashed and first.call is Call.RESET and first.obs
    [state] = slots.get_states([1])
    act = slots.script(1, oracle_script)
    actions: list[str] = []
    steps: list[tuple[str, float, bool]] = []
    done = False
    while not done:
        actions.append(act())
        [result] = slots.step_many([(1, actions[-1])])
        steps.append((result.obs, result.reward, result.terminated))
        done = result.terminated or result.truncated
    restored = slots.set_state(0, state)
    assert not restored.crashed and restored.call is Call.RESET
    [again] = slots.step_many([(0, actions[0])])
    assert (again.obs, again.reward, again.terminated) == steps[0]
    return steps


@pytest.mark.parametrize("isolation", ["inline", "process"])
def test_slots_play_the_episode_a_plain_env_plays(isolation: str) -> None:
    slots = make_slots(lake, 2, isolation)
    try:
        steps = play_oracle(slots)
    finally:
        slots.close()
    env = lake()
    env.reset(seed=0, options=OPTIONS)
    act = env.unwrapped.oracle().act  # type: ignore[attr-defined]
    direct = []
    for _ in steps:
        obs, reward, terminated, _, _ = env.step(act())
        direct.append((obs, float(reward), terminated))
    assert steps == direct and steps[-1][1] > 0


def test_process_slots_stand_in_for_their_envs_for_scripted_policies() -> None:
    slots = ProcessEnvSlots(lake, 1, strict=False)
    try:
        slots.reset(0, 0, OPTIONS)
        env = slots.envs[0]
        assert env.unwrapped is env and env.noop_action == lake().unwrapped.noop_action  # type: ignore[attr-defined]
        assert isinstance(env.oracle().act(), str)
    finally:
        slots.close()


def test_strict_local_slots_raise_a_config_error_and_rebuild_a_crashed_env() -> None:
    slots = LocalEnvSlots(Breaking, 1)
    before = slots.envs[0]
    crashed = slots.reset(0, 1, None)
    assert crashed.crashed and crashed.code is CrashCode.ENV_EXCEPTION
    assert crashed.error == "RuntimeError: no reset today"
    assert slots.envs[0] is not before  # a crashed env is replaced
    with pytest.raises(ConfigError, match="no reset today"):
        LocalEnvSlots(breaking_config, 1).reset(0, 1, None)


def test_lenient_local_slots_end_only_the_episode_and_keep_the_env() -> None:
    slots = LocalEnvSlots(breaking_config, 1, strict=False)
    before = slots.envs[0]
    crashed = slots.reset(0, 1, None)
    assert crashed.crashed and crashed.error == "reset failed: ConfigError: no reset today"
    assert slots.envs[0] is before  # a scripted policy holds it
    assert not slots.reset(0, 2, None).crashed
    [step] = slots.step_many([(0, "hi")])
    assert step.crashed and step.truncated and step.error.startswith("step failed: ConfigError")
    assert not slots.reset(0, 0, None).crashed  # the same env plays the next job
    [ok] = slots.step_many([(0, "hi")])
    assert (ok.obs, ok.reward, ok.terminated) == ("hi", 1.0, True)


def test_process_slots_are_strict_or_lenient_about_config_errors() -> None:
    lenient = ProcessEnvSlots(breaking_config, 1, strict=False)
    strict = ProcessEnvSlots(breaking_config, 1)
    try:
        crashed = lenient.reset(0, 1, None)
        assert crashed.crashed and crashed.code is CrashCode.CONFIG_ERROR
        assert crashed.error.startswith("env reset failed in the worker: ConfigError")
        with pytest.raises(ConfigError, match=r"^no reset today$"):
            strict.reset(0, 1, None)
    finally:
        lenient.close()
        strict.close()


def test_an_unknown_isolation_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="'inline' or 'process' or 'ray'"):
        make_slots(lake, 1, "thread")
    assert SlotIsolation.parse("ray") is SlotIsolation.RAY


def test_the_evaluator_and_the_trainer_play_on_these_slots() -> None:
    """One slots layer and one turn loop: the old homes are gone and every user imports
    them (the evaluator, the trainer and the adapters)."""
    import importlib.util

    from agentgym_envs.eval import evaluate
    from agentgym_envs.integrations import text_rollout
    from agentgym_envs.rollout import episodes, loop
    from agentgym_trainers import env_slots, trainer

    assert importlib.util.find_spec("agentgym_envs.eval.workers") is None
    assert importlib.util.find_spec("agentgym_trainers.rollout") is None
    assert vars(evaluate)["make_slots"] is make_slots
    assert vars(evaluate)["play_rounds"] is loop.play_rounds is vars(episodes)["play_rounds"]
    assert vars(episodes)["LocalEnvSlots"] is LocalEnvSlots
    assert vars(trainer)["RolloutRunner"] is episodes.RolloutRunner
    assert vars(text_rollout)["RolloutRunner"] is episodes.RolloutRunner
    assert not hasattr(env_slots, "LocalEnvSlots") and not hasattr(env_slots, "EnvSlots")
