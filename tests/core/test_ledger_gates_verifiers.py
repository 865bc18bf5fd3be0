"""Cost ledger, safety gates and milestone tracking in isolation."""

import pytest

from agentgym_envs.core import (
    ConfigError,
    CostLedger,
    GateMode,
    Milestone,
    MilestoneTracker,
    Outcome,
    ToolCall,
    verify,
)
from agentgym_envs.core.verifiers import Invariant
from tests.core.counter_env import ForbiddenNumberGate


def test_ledger_counts_and_snapshots_are_independent() -> None:
    ledger = CostLedger()
    ledger.charge("a", 2.0)
    ledger.charge("a", 1.0)
    ledger.charge("b", 0.5)
    ledger.add_tokens(10, 3)
    snap = ledger.snapshot()
    assert snap["tool_calls"] == 3 and snap["total"] == 3.5
    assert snap["per_tool"] == {"a": 3.0, "b": 0.5}
    assert (snap["tokens_in"], snap["tokens_out"]) == (10, 3)
    snap["per_tool"]["a"] = 0
    assert ledger.per_tool["a"] == 3.0
    state = ledger.get_state()
    ledger.charge("c", 9)
    ledger.set_state(state)
    assert ledger.snapshot()["per_tool"] == {"a": 3.0, "b": 0.5}


def test_gate_modes() -> None:
    call = ToolCall("add", {"n": 13})
    stop = ForbiddenNumberGate().check(None, call)
    assert stop is not None and stop.mode is GateMode.STOP and "13" in stop.reason
    assert ForbiddenNumberGate("block").check(None, call).mode is GateMode.BLOCK
    assert ForbiddenNumberGate().check(None, ToolCall("add", {"n": 1})) is None
    with pytest.raises(ConfigError, match="'block' or 'stop'"):
        ForbiddenNumberGate("maybe")


def test_milestones_pay_once_in_order() -> None:
    state = {"x": 0}
    tracker = MilestoneTracker(
        [
            Milestone("one", "", lambda: state["x"] >= 1),
            Milestone("two", "", lambda: state["x"] >= 2, weight=3.0),
        ]
    )
    assert tracker.update() == ([], 0.0)
    state["x"] = 2
    new, share = tracker.update()
    assert new == ["one", "two"] and share == pytest.approx(1.0)
    state["x"] = 0  # leaving the state does not take a milestone back or pay it again
    assert tracker.update() == ([], 0.0)
    state["x"] = 2
    assert tracker.update() == ([], 0.0)
    assert tracker.reached == ["one", "two"]
    tracker.restore(["one"])
    assert tracker.update() == (["two"], pytest.approx(0.75))
    with pytest.raises(ConfigError):
        tracker.restore(["nope"])
    with pytest.raises(ConfigError, match="unique"):
        MilestoneTracker([Milestone("a", "", lambda: True)] * 2)


def test_verify_order() -> None:
    broken = [Invariant("inv", "stay sane", lambda: False)]
    assert verify(lambda: True, broken, lambda: None)[0] is Outcome.FAILURE
    assert verify(lambda: True, [], lambda: "stuck") == (Outcome.SUCCESS, None)
    assert verify(lambda: False, [], lambda: "stuck") == (Outcome.FAILURE, "stuck")
    assert verify(lambda: False, [], lambda: None) == (Outcome.CONTINUE, None)


def test_a_violation_found_while_a_tool_runs_stops_the_episode() -> None:
    from agentgym_envs.core import ToolResult, tool
    from tests.core.counter_env import CounterEnv, make_task

    class LeakyCounter(CounterEnv):
        @tool("Open a page.", parameters={"url": {"type": "string"}})
        def visit(self, url: str) -> ToolResult:
            if not url.startswith("/"):
                return ToolResult.unsafe("offsite", f"{url} is not on this site")
            return ToolResult(f"visited {url}")

    env = LeakyCounter(tasks=[make_task()])
    env.reset(seed=0)
    _, first, _, _, info = env.step('visit(url="/home")')
    assert info["outcome"] is Outcome.CONTINUE
    obs, reward, terminated, _, info = env.step('visit(url="http://evil.example")')
    assert info["outcome"] is Outcome.SAFETY_STOP and terminated
    assert info["safety"]["gate"] == "offsite" and info["safety"]["verdict"] == "stopped"
    assert first + reward == pytest.approx(env.reward_config.hard_fail)  # the episode total
    assert "not on this site" in obs
