"""The base env's step loop, budgets, gates, env errors and snapshots, on a counter env."""

import pickle

import pytest

from agentgym_envs.core import (
    ConfigError,
    ErrorCode,
    Outcome,
    ResetNeeded,
    RewardConfig,
    StateError,
    TaskNotFoundError,
    ToolStatus,
)
from tests.core.counter_env import CounterEnv

INFO_KEYS = {
    "outcome",
    "tools",
    "tool_calls",
    "error",
    "milestones",
    "new_milestones",
    "reward_components",
    "cost",
    "safety",
    "versions",
    "seeds",
    "task",
    "episode_valid",
}


@pytest.fixture
def env():
    e = CounterEnv()
    e.reset(seed=0, options={"task_id": "count-3"})
    yield e
    e.close()


def test_reset_info_and_versions() -> None:
    env = CounterEnv()
    obs, info = env.reset(seed=7, options={"task_id": "count-3"})
    assert "Count to 3." in obs and "[counter=0/3]" in obs
    assert info.keys() >= INFO_KEYS and "system" in info
    assert "add(n, idempotency_key?)" in info["system"] and "Example: add(n=1)" in info["system"]
    assert info["seeds"] == {"env": 7, "task": 3, "verifier": 7}
    assert info["versions"]["env"] == "Counter-v0"
    assert info["versions"]["reward"] == RewardConfig().version_tag
    assert info["task"]["id"] == "count-3"


def test_success_path_with_milestones_ledger_and_virtual_time(env) -> None:
    _, r1, *_, i1 = env.step("add(n=1)")
    assert i1["tool_calls"][0]["status"] is ToolStatus.OK
    assert i1["tool_calls"][0]["latency_ms"] == 5.0  # virtual clock: the tool's duration
    _, r2, *_, i2 = env.step("add(n=1)")
    assert i2["new_milestones"] == ["half", "almost"] and i2["milestones"] == ["half", "almost"]
    obs, r3, term, trunc, i3 = env.step("add(n=1)")
    assert (term, trunc, i3["outcome"]) == (True, False, Outcome.SUCCESS)
    assert "Task complete." in obs
    assert i3["cost"]["tool_calls"] == 3 and i3["cost"]["per_tool"] == {"add": 6.0}
    assert i3["cost"]["env_time_ms"] == 15.0
    cfg = RewardConfig()
    assert r1 + r2 + r3 == pytest.approx(cfg.success - 6.0 * cfg.cost_weight)
    with pytest.raises(ResetNeeded, match="call reset"):
        env.step("peek()")


def test_policy_errors_are_observations(env) -> None:
    obs, reward, term, trunc, info = env.step("add(n=")
    assert info["error"]["code"] == ErrorCode.PARSE_ERROR
    assert "Example of a valid action: add(n=1)" in info["error"]["message"]
    assert "Error (parse_error)" in obs and not (term or trunc)
    assert info["cost"]["errors"] == 1
    assert reward == pytest.approx(-RewardConfig().format_penalty)
    _, _, _, _, info = env.step("fail()")
    assert info["error"] == {"code": "no_such_thing", "message": "There is no such thing."}
    assert info["tool_calls"][0]["status"] is ToolStatus.ERROR


@pytest.mark.parametrize("action", [None, b"add(n=1)", 3.5, ["x"]])
def test_non_text_actions_never_raise(env, action) -> None:
    obs, _, _, _, info = env.step(action)
    assert obs in env.observation_space
    if action == b"add(n=1)":
        assert info["error"] == {}
    else:
        assert info["error"]["code"] == ErrorCode.PARSE_ERROR


def test_messages_reach_the_user(env) -> None:
    obs, *_, info = env.step("Hello!")
    assert "User heard: Hello!" in obs and info["error"] == {}
    assert env.messages == ["Hello!"]


def test_gate_stop_gives_hard_fail_return() -> None:
    env = CounterEnv()
    env.reset(seed=0, options={"task_id": "count-5"})
    ret = sum(env.step("add(n=2)")[1] for _ in range(2))
    obs, r, term, trunc, info = env.step("add(n=13)")
    assert (term, trunc, info["outcome"]) == (True, False, Outcome.SAFETY_STOP)
    assert info["safety"]["verdict"] == "stopped" and info["safety"]["gate"] == "forbidden_number"
    assert env.value == 4  # the gate ran before the side effect
    assert ret + r == pytest.approx(RewardConfig().hard_fail)
    assert "safety gate forbidden_number" in obs


def test_gate_block_refuses_and_continues() -> None:
    env = CounterEnv(gate_mode="block")
    env.reset(seed=0, options={"task_id": "count-5"})
    _, _, term, trunc, info = env.step("add(n=13)")
    assert not (term or trunc) and env.value == 0
    assert info["safety"]["verdict"] == "blocked" and info["error"]["code"] == "blocked"
    assert info["tool_calls"][0]["status"] is ToolStatus.BLOCKED


def test_backend_crash_is_env_error_not_policy_failure(env) -> None:
    obs, reward, term, trunc, info = env.step("crash()")
    assert (term, trunc) == (False, True)
    assert info["outcome"] is Outcome.ENV_ERROR and info["episode_valid"] is False
    assert reward == 0.0 and "not the agent's fault" in obs
    assert "RuntimeError: backend exploded" in info["env_error"]["message"]


def test_transient_failures_are_retried() -> None:
    env = CounterEnv(tool_retries=2)
    env.reset(seed=0, options={"task_id": "count-3"})
    assert env.step("flaky(failures=2)")[4]["outcome"] is Outcome.CONTINUE
    env.reset(seed=0, options={"task_id": "count-3"})
    env.flaky_failures = 0
    info = env.step("flaky(failures=3)")[4]
    assert info["outcome"] is Outcome.ENV_ERROR and "backend busy" in info["env_error"]["message"]


def test_budgets_truncate_with_timeout() -> None:
    env = CounterEnv(max_steps=2)
    env.reset(seed=0, options={"task_id": "count-5"})
    env.step("peek()")
    _, _, term, trunc, info = env.step("peek()")
    assert (term, trunc, info["outcome"]) == (False, True, Outcome.TIMEOUT)
    env = CounterEnv(max_errors=2)
    env.reset(seed=0, options={"task_id": "count-5"})
    env.step("add(")
    assert env.step("add(")[4]["outcome"] is Outcome.TIMEOUT
    env = CounterEnv(max_cost=3.0)
    env.reset(seed=0, options={"task_id": "count-5"})
    env.step("add(n=1)")
    assert env.step("add(n=1)")[4]["outcome"] is Outcome.TIMEOUT


def test_dead_end_and_invariant_failures() -> None:
    env = CounterEnv()
    env.reset(seed=0, options={"task_id": "count-3"})
    obs, _, term, _, info = env.step("add(n=5)")
    assert term and info["outcome"] is Outcome.FAILURE and "overshot" in obs
    env.reset(seed=0, options={"task_id": "count-3"})
    _, _, term, _, info = env.step("add(n=-6)")
    assert term and info["outcome"] is Outcome.FAILURE


def test_bad_configuration_names_the_fix() -> None:
    with pytest.raises(ConfigError, match="timing must be"):
        CounterEnv(timing="sundial")
    with pytest.raises(ConfigError, match="max_steps"):
        CounterEnv(max_steps=0)
    with pytest.raises(ConfigError, match="RewardConfig"):
        CounterEnv(reward_config="layered-1")  # a dict of its fields is accepted
    with pytest.raises(ConfigError, match="render_mode"):
        CounterEnv(render_mode="human")
    with pytest.raises(TaskNotFoundError, match=r"unknown split 'tset'.*Did you mean 'test'"):
        CounterEnv(split="tset")
    env = CounterEnv()
    with pytest.raises(ConfigError, match="Did you mean 'task_id'"):
        env.reset(options={"task": "count-3"})
    with pytest.raises(TaskNotFoundError, match="Did you mean 'count-3'"):
        env.reset(options={"task_id": "count-33"})


def test_reset_without_seed_reports_a_replayable_seed() -> None:
    env = CounterEnv()
    _, info = env.reset()
    _, info2 = env.reset(seed=info["seeds"]["env"])
    assert info2["task"] == info["task"]
    a, b = CounterEnv(), CounterEnv()
    assert [a.reset(seed=1)[1]["seeds"] for _ in range(3)][1:] == [
        b.reset(seed=1)[1]["seeds"] for _ in range(3)
    ][1:]


def test_task_seed_generates_a_fresh_task() -> None:
    env = CounterEnv()
    _, info = env.reset(seed=0, options={"task_seed": 7})
    assert info["task"]["id"] == "count-gen-7" and info["seeds"]["task"] == 4


def test_snapshots_branch_and_refuse_foreign_states(env) -> None:
    env.step("add(n=1)")
    snap = env.get_state()
    digest = env.state_hash()
    obs_a = env.step("add(n=1)")
    env.set_state(pickle.loads(pickle.dumps(snap)))
    assert env.state_hash() == digest
    assert env.step("add(n=1)")[0] == obs_a[0]
    env.set_state(snap)
    env.step("add(n=2)")  # a different branch from the same point
    assert env.outcome is Outcome.SUCCESS
    with pytest.raises(StateError, match="expects an EnvState"):
        env.set_state({"value": 1})
    from agentgym_envs.core import EnvState

    with pytest.raises(StateError, match="restore it into the env that took it"):
        env.set_state(EnvState("Other", "0", "x", 0, {}))


def test_close_is_idempotent_and_final(env) -> None:
    env.close()
    env.close()
    with pytest.raises(ResetNeeded, match="closed"):
        env.reset()


def test_state_visits_count_loops(env) -> None:
    assert env.step("add(n=1)")[4]["state_visits"] == 1
    assert env.step("peek()")[4]["state_visits"] == 2
    assert env.step("add(n=-1)")[4]["state_visits"] == 2  # back at 0, seen at reset


def test_validation_uses_the_live_oracle_when_no_solution_is_stored() -> None:
    import dataclasses

    from tests.core.counter_env import CounterEnv, make_task

    live = dataclasses.replace(make_task(target=3), solution=())
    assert CounterEnv.validate_task(live) is None  # the oracle counts to 3
    short = dataclasses.replace(make_task(target=3), solution=("add(n=1)",))
    assert "stored solution ends with continue" in (CounterEnv.validate_task(short) or "")


def test_sanitize_escapes_every_character_outside_the_charset() -> None:
    # the charset's blocks hold non-printable characters (soft hyphen, line separator);
    # every code point must come out inside the space
    from agentgym_envs.core.spaces import TextSpace, sanitize

    space = TextSpace(64)
    for code in (*range(0x0, 0x3000), 0xFEFF, 0x1F600):
        out = sanitize(chr(code), 64)
        assert space.contains(out), hex(code)
    assert sanitize("a\xadb\u2028", 64) == "a\\u00adb\\u2028"


def test_an_argument_error_names_the_tool_called_not_an_example_of_another() -> None:
    env = CounterEnv()
    env.reset(seed=0)
    _, _, _, _, info = env.step("peek(n=1)")  # peek takes no arguments
    message = info["error"]["message"]
    assert info["error"]["code"] == "bad_arguments" and "peek()" in message
    assert "add(n=1)" not in message  # the example action is another tool's
    _, _, _, _, info = env.step("ad(n=1)")  # not calling a tool yet: the example helps
    assert "Example of a valid action: add(n=1)" in info["error"]["message"]


@pytest.mark.parametrize(
    ("gate_mode", "action", "code"),
    [
        ("stop", "add(n=", "parse_error"),  # the parser's ErrorCode
        ("stop", "nope()", "unknown_tool"),
        ("block", "add(n=13)", "blocked"),  # a gate's refusal
        ("stop", "fail()", "no_such_thing"),  # a tool's own code
    ],
)
def test_the_error_code_is_always_a_plain_string(gate_mode: str, action: str, code: str) -> None:
    env = CounterEnv(gate_mode=gate_mode)
    env.reset(seed=0)
    _, _, _, _, info = env.step(action)
    assert type(info["error"]["code"]) is str and info["error"]["code"] == code


def test_the_example_follows_a_full_stop_without_doubling_it(env) -> None:
    _, _, _, _, info = env.step("x" * (env.parser.max_chars + 1))
    message = info["error"]["message"]
    assert "Send one short tool call. Example of a valid action: add(n=1)" in message
    assert ".." not in message
