"""Fault injection: the new refused kinds, configure_faults and the FaultInjection wrapper."""

from __future__ import annotations

import re
from collections.abc import Callable

import gymnasium as gym
import pytest

from agentgym_envs.core import ConfigError, Outcome, ToolStatus
from agentgym_envs.core.faults import DEFAULT_KINDS, REFUSED_KINDS, FaultConfig, FaultKind
from agentgym_envs.wrappers import FaultInjection
from tests.core.counter_env import CounterEnv
from tests.wrappers.support import ORACLE_SAMPLE, make, play

NEW_KINDS = ["invalid_argument", "permission_denied", "state_conflict", "tool_unavailable"]
CODES = {
    "invalid_argument": "request_rejected",
    "permission_denied": "permission_denied",
    "state_conflict": "conflict",
    "tool_unavailable": "unavailable",
}


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


def test_configure_faults_applies_from_the_next_reset_and_retags() -> None:
    env = CounterEnv()
    env.reset(seed=0, options={"task_id": "count-5"})
    before = env.step("add(n=1)")[4]["versions"]["env"]
    env.configure_faults({"rate": 1.0, "kinds": ["tool_unavailable"]})
    info = env.step("add(n=1)")[4]  # no fault RNG until reset: nothing injected yet
    assert info["tool_calls"][0]["fault"] == "" and env.value == 2
    env.reset(seed=0, options={"task_id": "count-5"})
    info = env.step("add(n=1)")[4]
    assert info["tool_calls"][0]["fault"] == "tool_unavailable" and env.value == 0
    assert info["versions"]["env"] == before + "+faults:1:tool_unavailable"
    env.configure_faults(None)
    env.reset(seed=0, options={"task_id": "count-5"})
    info = env.step("add(n=1)")[4]
    assert info["versions"]["env"] == before and info["tool_calls"][0]["fault"] == ""
    with pytest.raises(ConfigError, match="permission_denied"):
        env.configure_faults({"rate": 0.5, "kinds": ["permision_denied"]})


def test_wrapper_reports_faults_met_and_matches_the_ledger() -> None:
    env = make("Sokoban", [{"faults": {"rate": 0.5, "kinds": NEW_KINDS}}])
    steps, info = play(env, seed=1)
    assert steps[0][2]["faults"] == {"injected": 0, "kinds": []}
    met = [c["fault"] for _, _, i in steps[1:] for c in i["tool_calls"] if c["fault"]]
    assert met and set(met) <= set(NEW_KINDS)
    assert info["faults"] == {"injected": len(met), "kinds": met}
    assert info["cost"]["faults"] == len(met)
    assert info["versions"]["wrappers"] == "faults:0.5:" + ",".join(NEW_KINDS)
    assert info["versions"]["env"].endswith("+faults:0.5:" + ",".join(NEW_KINDS))


def test_same_seed_same_faults_other_seed_other_faults() -> None:
    env = make("Sokoban", [{"faults": {"rate": 0.4}}])
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
        info: dict = {}
        while env.outcome is Outcome.CONTINUE:
            info = env.step(f'add(n=1, idempotency_key="k{env.value}")')[4]
            faults += bool(info["tool_calls"][0]["fault"])
        assert info["outcome"] is Outcome.SUCCESS and env.value == 5
        recovered += faults > 0
    assert recovered >= 8  # nearly every episode met a fault and still succeeded


@pytest.mark.parametrize("name", ["Sokoban", "Retail", "Calendar", "Dungeon"])
def test_oracle_succeeds_under_every_fault_kind(name: str) -> None:
    env = make(name, [{"faults": {"rate": 0.2}}])
    met: set[str] = set()
    for seed in ORACLE_SAMPLE[name]:
        info = play(env, seed)[1]
        met.update(info["faults"]["kinds"])
        if info["episode_valid"]:  # a transient fault may outlast the retries: masked
            assert info["outcome"] is Outcome.SUCCESS, (seed, info["faults"])
    assert met & set(NEW_KINDS), met  # the sample did meet the new kinds


def test_snapshot_round_trip_keeps_the_fault_count() -> None:
    env = make("Retail", [{"faults": {"rate": 0.5, "kinds": NEW_KINDS}}])
    env.reset(seed=2)
    oracle = env.unwrapped.oracle()
    for _ in range(6):
        env.step(oracle.act())
    snap = env.get_state()
    tail = [env.step(a)[4] for a in ("respond(message='ok')", "respond(message='yes')")]
    env.set_state(snap)
    again = [env.step(a)[4] for a in ("respond(message='ok')", "respond(message='yes')")]
    assert [i["faults"] for i in tail] == [i["faults"] for i in again]
    assert [i["tool_calls"] for i in tail] == [i["tool_calls"] for i in again]


def test_bad_config_raises_config_error() -> None:
    base = make("Sokoban", [])
    with pytest.raises(ConfigError, match="Did you mean 'timeout'"):
        FaultInjection(base, kinds=["timeotu"])
    with pytest.raises(ConfigError, match=re.escape("[0, 1]")):
        FaultInjection(base, rate=1.5)
    with pytest.raises(ConfigError, match="list of fault kinds"):
        FaultInjection(base, kinds="timeout")  # type: ignore[arg-type]
    assert FaultKind.STATE_CONFLICT.value == "state_conflict"


def test_fault_messages_use_the_names_the_agent_sees() -> None:
    env = make("Sokoban", [{"faults": {"rate": 1.0, "kinds": ["tool_unavailable"]}}, "tool_ood"])
    env.reset(seed=0)
    new = env.names["move"]  # type: ignore[attr-defined]
    info = env.step(f'{new}(direction="up")')[4]
    assert info["error"]["code"] == "unavailable" and new in info["error"]["message"]
    assert "move" not in info["error"]["message"].replace(new, "")


# -- one source of fault config: the env's call runner ------------------------------------

FAULTS = {"rate": 1.0, "kinds": ["tool_unavailable"]}


def _counted(env: CounterEnv, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count how often the env's call runner is (re)configured and its fault RNG seeded."""
    counts = {"configure": 0, "start_episode": 0}
    calls = env.calls
    for name in counts:
        original = getattr(calls, name)

        def counting(
            *args: object, _name: str = name, _original: Callable[..., None] = original
        ) -> None:
            counts[_name] += 1
            _original(*args)

        monkeypatch.setattr(calls, name, counting)
    return counts


@pytest.mark.parametrize("where", ["constructor", "wrapper"])
def test_faults_are_applied_exactly_once_per_reset(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = CounterEnv(faults=FAULTS) if where == "constructor" else CounterEnv()
    env: gym.Env[str, str] = base
    if where == "wrapper":
        env = FaultInjection(base, rate=1.0, kinds=["tool_unavailable"])
    counts = _counted(base, monkeypatch)
    for seed in range(3):
        env.reset(seed=seed, options={"task_id": "count-5"})
        info = env.step("add(n=1)")[4]
        assert info["tool_calls"][0]["fault"] == "tool_unavailable"
    assert counts == {"configure": 0, "start_episode": 3}


def test_constructor_and_wrapper_build_the_same_faults() -> None:
    def labels(env: gym.Env[str, str]) -> list[list[str]]:
        runs = []
        for seed in range(4):
            env.reset(seed=seed, options={"task_id": "count-5"})
            runs.append([env.step("add(n=1)")[4]["tool_calls"][0]["fault"] for _ in range(4)])
        return runs

    made = CounterEnv(faults={"rate": 0.5, "kinds": NEW_KINDS})
    wrapped = FaultInjection(CounterEnv(), rate=0.5, kinds=NEW_KINDS)
    assert labels(made) == labels(wrapped)
    assert made.faults == wrapped.agent_env.faults


def test_wrapper_does_not_reapply_its_faults_at_reset() -> None:
    """The env holds the config: the wrapper installs it once, and a later
    configure_faults on the env is what the next reset uses (it used to be undone)."""
    env = FaultInjection(CounterEnv(), rate=1.0, kinds=["tool_unavailable"])
    base = env.agent_env
    assert isinstance(base, CounterEnv)
    base.configure_faults(None)
    env.reset(seed=0, options={"task_id": "count-5"})
    info = env.step("add(n=1)")[4]
    assert info["tool_calls"][0]["fault"] == "" and base.value == 1
    assert base.faults is None


def test_faults_configured_twice_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="configured in one place"):
        FaultInjection(CounterEnv(faults={"rate": 0.5}), rate=0.2)
    same = FaultInjection(CounterEnv(faults=FAULTS), rate=1.0, kinds=["tool_unavailable"])
    assert same.config == FaultConfig.coerce(FAULTS)
