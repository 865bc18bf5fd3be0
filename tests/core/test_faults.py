"""Fault injection: the refused kinds, one place to configure faults (the env's ``faults``
argument) and fault streams that stay what they were for a fixed seed."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs.wrappers
from agentgym_envs.core import AgentEnv, ConfigError, Outcome, ToolStatus
from agentgym_envs.core.faults import DEFAULT_KINDS, REFUSED_KINDS, FaultConfig, FaultKind
from agentgym_envs.eval.evaluate import build_env
from agentgym_envs.eval.suite import load_suite
from agentgym_envs.registration import find
from agentgym_envs.wrappers import WRAPPERS, apply_wrappers
from tests.core.counter_env import CounterEnv
from tests.wrappers.support import ORACLE_SAMPLE, make, play

NEW_KINDS = ["invalid_argument", "permission_denied", "state_conflict", "tool_unavailable"]
ALL_KINDS = [k.value for k in FaultKind]
OOD_KINDS = ["timeout", *NEW_KINDS]  # what tasks/suites/ood.yaml injects
CODES = {
    "invalid_argument": "request_rejected",
    "permission_denied": "permission_denied",
    "state_conflict": "conflict",
    "tool_unavailable": "unavailable",
}


def faults_met(steps: list[tuple[str, float, dict[str, Any]]]) -> list[str]:
    return [c["fault"] for _, _, i in steps[1:] for c in i["tool_calls"] if c["fault"]]


def test_default_kinds_are_the_original_four() -> None:
    assert FaultConfig().kinds == DEFAULT_KINDS
    assert [k.value for k in DEFAULT_KINDS] == [
        "timeout",
        "rate_limit",
        "empty_result",
        "transient_error",
    ]
    assert {k.value for k in REFUSED_KINDS} >= set(NEW_KINDS)


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_kind_is_refused_before_the_tool_runs(kind: str) -> None:
    env = CounterEnv(faults={"rate": 1.0, "kinds": [kind]})
    env.reset(seed=0, options={"task_id": "count-5"})
    obs, _, terminated, truncated, info = env.step('add(n=2, idempotency_key="a")')
    assert env.value == 0  # nothing was applied
    assert not (terminated or truncated) and info["outcome"] is Outcome.CONTINUE
    call = info["tool_calls"][0]
    assert call["fault"] == kind and call["status"] is ToolStatus.ERROR
    assert info["error"]["code"] == CODES[kind]
    assert "add" in info["error"]["message"] and "Nothing was applied" in obs
    assert info["cost"]["faults"] == 1 and info["cost"]["errors"] == 0  # not the policy's


def test_invalid_argument_names_an_argument_of_the_call() -> None:
    env = CounterEnv(faults={"rate": 1.0, "kinds": ["invalid_argument"]})
    env.reset(seed=0, options={"task_id": "count-5"})
    info = env.step("add(n=4)")[4]
    assert "argument 'n'" in info["error"]["message"]


def test_faults_met_are_labelled_counted_and_tagged() -> None:
    env = make("Sokoban", [], faults={"rate": 0.5, "kinds": NEW_KINDS})
    steps, info = play(env, seed=1)
    met = faults_met(steps)
    assert met and set(met) <= set(NEW_KINDS)
    assert info["cost"]["faults"] == len(met)
    assert info["versions"]["env"].endswith("+faults:0.5:" + ",".join(NEW_KINDS))


def test_same_seed_same_faults_other_seed_other_faults() -> None:
    env = make("Sokoban", [], faults={"rate": 0.4, "kinds": ALL_KINDS})
    runs = [
        [tuple(c["fault"] for c in i["tool_calls"]) for _, _, i in play(env, seed)[0][1:]]
        for seed in (3, 3, 4)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_new_kinds_are_recoverable_by_a_retrying_policy() -> None:
    """A policy that simply sends the failed call again gets past every new kind."""
    env = CounterEnv(faults={"rate": 0.5, "kinds": NEW_KINDS}, max_steps=40)
    recovered = 0
    for seed in range(10):
        env.reset(seed=seed, options={"task_id": "count-5"})
        faults = 0
        info: dict[str, Any] = {}
        while env.outcome is Outcome.CONTINUE:
            info = env.step(f'add(n=1, idempotency_key="k{env.value}")')[4]
            faults += bool(info["tool_calls"][0]["fault"])
        assert info["outcome"] is Outcome.SUCCESS and env.value == 5
        recovered += faults > 0
    assert recovered >= 8  # nearly every episode met a fault and still succeeded


@pytest.mark.parametrize("name", ["Sokoban", "Retail", "Calendar", "Dungeon"])
def test_oracle_succeeds_under_every_fault_kind(name: str) -> None:
    env = make(name, [], faults={"rate": 0.2, "kinds": ALL_KINDS})
    met: set[str] = set()
    for seed in ORACLE_SAMPLE[name]:
        steps, info = play(env, seed)
        met.update(faults_met(steps))
        if info["episode_valid"]:  # a transient fault may outlast the retries: masked
            assert info["outcome"] is Outcome.SUCCESS, (seed, faults_met(steps))
    assert met & set(NEW_KINDS), met  # the sample did meet the new kinds


def test_snapshot_round_trip_keeps_the_faults() -> None:
    env = make("Retail", [], faults={"rate": 0.5, "kinds": NEW_KINDS})
    env.reset(seed=2)
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    for _ in range(6):
        env.step(oracle.act())
    snap = env.unwrapped.get_state()  # type: ignore[attr-defined]
    actions = ("respond(message='ok')", "respond(message='yes')")
    tail = [env.step(a)[4] for a in actions]
    env.unwrapped.set_state(snap)  # type: ignore[attr-defined]
    again = [env.step(a)[4] for a in actions]
    assert [i["cost"] for i in tail] == [i["cost"] for i in again]
    assert [i["tool_calls"] for i in tail] == [i["tool_calls"] for i in again]


def test_bad_config_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'timeout'"):
        make("Sokoban", [], faults={"rate": 0.1, "kinds": ["timeotu"]})
    with pytest.raises(ConfigError, match=re.escape("[0, 1]")):
        make("Sokoban", [], faults={"rate": 1.5})
    with pytest.raises(ConfigError, match="list of fault kinds"):
        make("Sokoban", [], faults={"rate": 0.1, "kinds": "timeout"})
    assert FaultKind.STATE_CONFLICT.value == "state_conflict"


def test_fault_messages_use_the_names_the_agent_sees() -> None:
    env = make("Sokoban", ["tool_ood"], faults={"rate": 1.0, "kinds": ["tool_unavailable"]})
    env.reset(seed=0)
    new = env.names["move"]  # type: ignore[attr-defined]
    info = env.step(f'{new}(direction="up")')[4]
    assert info["error"]["code"] == "unavailable" and new in info["error"]["message"]
    assert "move" not in info["error"]["message"].replace(new, "")


# -- one place to configure faults: the env's faults argument ------------------------------

FAULTS = {"rate": 1.0, "kinds": ["tool_unavailable"]}


def test_faults_seed_their_rng_once_per_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    env = CounterEnv(faults=FAULTS)
    seeded: list[int] = []
    start: Callable[[int], None] = env.calls.start_episode
    monkeypatch.setattr(env.calls, "start_episode", lambda s: (seeded.append(s), start(s)))
    for seed in range(3):
        env.reset(seed=seed, options={"task_id": "count-5"})
        info = env.step("add(n=1)")[4]
        assert info["tool_calls"][0]["fault"] == "tool_unavailable"
    assert seeded == [0, 1, 2]


def test_the_faults_argument_is_the_only_way_in() -> None:
    """No wrapper and no setter: what the env was made with is what it injects, and its
    spec rebuilds it (a Ray actor, a trainer's env slots and an eval slot alike)."""
    assert "faults" not in WRAPPERS
    assert not hasattr(agentgym_envs.wrappers, "FaultInjection")
    assert not hasattr(AgentEnv, "configure_faults")
    env = gym.make("agentgym/Sokoban-v0", faults=FAULTS)
    again = gym.make(env.spec)  # type: ignore[arg-type]
    assert again.unwrapped.faults == env.unwrapped.faults == FaultConfig.coerce(FAULTS)  # type: ignore[attr-defined]


def test_a_faults_wrapper_spec_says_where_faults_go() -> None:
    env = gym.make("agentgym/Sokoban-v0")
    with pytest.raises(ConfigError, match=re.escape("env_kwargs: {faults: ")) as caught:
        apply_wrappers(env, [{"faults": {"rate": 0.2}}])
    # the equivalent of what the removed wrapper meant: every kind unless named
    assert str(ALL_KINDS) in str(caught.value) and "'rate': 0.2" in str(caught.value)
    with pytest.raises(ConfigError, match=re.escape("{'rate': 0.2, 'kinds': ['timeout']}")):
        apply_wrappers(env, [{"faults": {"rate": 0.2, "kinds": ["timeout"]}}])


def test_the_ood_suite_configures_its_faults_on_the_env() -> None:
    entries = [e for e in load_suite("ood").entries if e.name.endswith("-faults")]
    assert [e.name for e in entries] == ["retail-faults", "calendar-faults", "dungeon-faults"]
    for entry in entries:
        assert not entry.wrappers
        env = build_env(entry.env_id, entry.env_kwargs, entry.wrappers, None, "oracle", "", "")
        assert env.unwrapped.faults == FaultConfig(0.2, tuple(map(FaultKind, OOD_KINDS)))  # type: ignore[attr-defined]
        env.close()


# Fault streams recorded with the FaultInjection wrapper (and, identically, with the
# faults argument) before the wrapper was removed: (step index, fault kind) per episode
# of the oracle. The same seed must meet the same faults at the same steps.
STREAMS: dict[tuple[str, int], list[tuple[int, str]]] = {
    ("Retail", 0): [
        (3, "invalid_argument"),
        (5, "state_conflict"),
        (6, "invalid_argument"),
        (7, "tool_unavailable"),
        (9, "timeout"),
    ],
    ("Retail", 1): [(5, "timeout"), (6, "permission_denied")],
    ("Sokoban", 0): [
        (7, "empty_result"),
        (9, "tool_unavailable"),
        (10, "timeout"),
        (16, "transient_error"),
    ],
    ("Sokoban", 1): [
        (6, "tool_unavailable"),
        (14, "transient_error"),
        (15, "invalid_argument"),
        (16, "empty_result"),
        (21, "empty_result"),
        (23, "timeout"),
        (24, "transient_error"),
    ],
}
STREAM_FAULTS = {
    "Retail": {"rate": 0.5, "kinds": OOD_KINDS},
    "Sokoban": {"rate": 0.4, "kinds": ALL_KINDS},
}


@pytest.mark.parametrize(("name", "seed"), sorted(STREAMS))
def test_fault_streams_for_a_fixed_seed_are_unchanged(name: str, seed: int) -> None:
    env = gym.make(find(name).id, faults=STREAM_FAULTS[name])
    steps, info = play(env, seed)
    met = [(i, c["fault"]) for i, (_, _, x) in enumerate(steps[1:]) for c in x["tool_calls"]]
    assert [(i, f) for i, f in met if f] == STREAMS[name, seed]
    assert info["outcome"] is Outcome.SUCCESS
