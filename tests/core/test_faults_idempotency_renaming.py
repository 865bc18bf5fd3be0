"""Injected faults, idempotent writes and per-task tool renaming."""

import pytest

from agentgym_envs.core import ConfigError, Outcome, ToolStatus
from agentgym_envs.core.faults import FaultConfig, FaultKind
from tests.core.counter_env import CounterEnv, make_task


def _env(**kwargs) -> CounterEnv:
    env = CounterEnv(**kwargs)
    env.reset(seed=0, options={"task_id": "count-5"})
    return env


def test_idempotent_write_is_applied_once() -> None:
    env = _env()
    first = env.step('add(n=2, idempotency_key="k1")')
    again = env.step('add(n=2, idempotency_key="k1")')
    assert env.value == 2
    assert again[0].split("\n")[0] == first[0].split("\n")[0] == "The counter is 2."
    assert again[4]["cost"]["tool_calls"] == 2  # the retry is still a (charged) call
    conflict = env.step('add(n=3, idempotency_key="k1")')[4]
    assert conflict["error"]["code"] == "idempotency_conflict" and env.value == 2
    env.step('add(n=1, idempotency_key="k2")')
    env.step("add(n=1)")  # no key: applied every time
    assert env.value == 4


def test_idempotency_key_is_optional_and_documented() -> None:
    schema = CounterEnv.toolset["add"].openai_schema()["function"]["parameters"]
    assert "idempotency_key" in schema["properties"]
    assert schema["required"] == ["n"]


def test_timeout_after_commit_then_retry_with_key_applies_once() -> None:
    env = _env(faults={"rate": 1.0, "kinds": ["timeout"]})
    for seed in range(20):  # find an episode whose first timeout hit after the commit
        env.reset(seed=seed, options={"task_id": "count-5"})
        info = env.step('add(n=2, idempotency_key="w")')[4]
        assert info["error"]["code"] == "timeout"
        assert info["tool_calls"][0]["fault"] == "timeout"
        if env.value == 2:
            break
    else:
        pytest.fail("no timeout after commit in 20 seeds")
    env.calls.faults = None  # the backend recovers
    info = env.step('add(n=2, idempotency_key="w")')[4]
    assert env.value == 2 and info["error"] == {}
    assert info["cost"]["faults"] == 1 and info["cost"]["env_time_ms"] >= 30_000


def test_rate_limit_refuses_before_running() -> None:
    env = _env(faults={"rate": 1.0, "kinds": ["rate_limit"]})
    info = env.step("add(n=1)")[4]
    assert env.value == 0 and info["error"]["code"] == "rate_limited"
    assert info["tool_calls"][0]["status"] is ToolStatus.ERROR


def test_empty_result_only_hits_reads() -> None:
    env = _env(faults={"rate": 1.0, "kinds": ["empty_result"]})
    obs, *_, info = env.step("peek()")
    assert obs.startswith("(no results)") and info["tool_calls"][0]["fault"] == "empty_result"
    info = env.step("add(n=1)")[4]  # a write is never silently emptied
    assert env.value == 1 and info["tool_calls"][0]["fault"] == ""


def test_persistent_transient_fault_is_env_error() -> None:
    env = _env(faults={"rate": 1.0, "kinds": ["transient_error"]}, tool_retries=2)
    _, reward, term, trunc, info = env.step("add(n=1)")
    assert info["outcome"] is Outcome.ENV_ERROR and trunc and not term
    assert info["episode_valid"] is False and reward == 0.0 and env.value == 0
    assert "outlasted 2 retries" in info["env_error"]["message"]


def test_faults_are_seeded_labelled_and_restored_by_snapshots() -> None:
    def run(env, seed):
        env.reset(seed=seed, options={"task_id": "count-5"})
        return [env.step("peek()")[4]["tool_calls"][0]["fault"] for _ in range(8)]

    cfg = {"rate": 0.5, "kinds": ["rate_limit", "empty_result"]}
    a, b = CounterEnv(faults=cfg), CounterEnv(faults=cfg)
    assert run(a, 3) == run(b, 3)
    assert any(run(a, 3)) and not all(run(a, 3))
    a.reset(seed=3, options={"task_id": "count-5"})
    a.step("peek()")
    snap = a.get_state()
    tail = [a.step("peek()")[4]["tool_calls"][0]["fault"] for _ in range(5)]
    a.set_state(snap)
    assert [a.step("peek()")[4]["tool_calls"][0]["fault"] for _ in range(5)] == tail
    assert a.reset(seed=0)[1]["versions"]["env"].endswith("+faults:0.5:rate_limit,empty_result")


def test_fault_config_errors_name_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        FaultConfig(rate=2)
    with pytest.raises(ConfigError, match="Did you mean 'timeout'"):
        FaultConfig.coerce({"rate": 0.1, "kinds": ["timeuot"]})
    with pytest.raises(ConfigError, match="Did you mean 'rate'"):
        FaultConfig.coerce({"rat": 0.1})
    # the default kinds stay the original four (the newer kinds are opt-in)
    assert FaultConfig.coerce({"rate": 0.2}).kinds == (
        FaultKind.TIMEOUT,
        FaultKind.RATE_LIMIT,
        FaultKind.EMPTY_RESULT,
        FaultKind.TRANSIENT,
    )


def test_a_task_can_rename_and_redescribe_tools() -> None:
    from dataclasses import replace

    spec = {
        "target": 3,
        "tool_names": {"add": "increment"},
        "tool_descriptions": {"add": "Raise the tally by n."},
    }
    renamed = replace(make_task(3, "count-renamed"), spec=spec)
    env = CounterEnv(tasks=[make_task(3), renamed])
    _, plain = env.reset(seed=0, options={"task_id": "count-3"})
    _, info = env.reset(seed=0, options={"task_id": "count-renamed"})
    names = [t["function"]["name"] for t in info["tools"]]
    assert "increment" in names and "add" not in names
    assert "increment(n, idempotency_key?)" in info["system"]
    assert "Raise the tally by n." in info["system"] and "Example: increment(n=1)" in info["system"]
    assert info["versions"]["tools"] != plain["versions"]["tools"]
    step = env.step("increment(n=1)")[4]
    assert step["tool_calls"][0]["name"] == "add" and env.value == 1  # canonical in records
    assert env.step("add(n=1)")[4]["error"]["code"] == "unknown_tool"
    env.reset(seed=0, options={"task_id": "count-3"})
    assert env.step("add(n=1)")[4]["error"] == {}
