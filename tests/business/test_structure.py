"""The business framework's shapes: the world snapshot, the verdict, request kinds and
tool groups (envs composed of tool groups, not of a chain of tool base classes)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from agentgym_envs.business.base import BusinessEnv
from agentgym_envs.business.calendar import CalendarEnv
from agentgym_envs.business.calendar.reads import CalendarReadTools
from agentgym_envs.business.calendar.writes import CalendarWriteTools
from agentgym_envs.business.episode import PENDING, SUCCESS, BusinessWorld, GradeState, Verdict
from agentgym_envs.business.retail import RetailEnv
from agentgym_envs.business.retail.reads import RetailReadTools
from agentgym_envs.business.retail.writes import RetailWriteTools
from agentgym_envs.business.toolsets import ToolGroup
from agentgym_envs.business.user import Request, RequestKind
from agentgym_envs.core import Outcome, ToolResult, tool
from agentgym_envs.core.errors import AgentGymError, ConfigError

from .library_env import LibraryEnv, renew_task

WORLD_FIELDS = (
    "database",
    "auth_user",
    "seen_ids",
    "fetched_ids",
    "confirmed_writes",
    "writes",
    "chain",
    "transferred",
    "verdict",
    "trial",
    "user_state",
    "reads",
    "asked_writes",
    "voice",
)


def _mid_episode() -> LibraryEnv:
    task = renew_task(1)
    env = LibraryEnv(tasks=[task])
    env.reset(seed=0, options={"task_id": task.id})
    oracle = env.oracle()
    for _ in range(3):
        env.step(oracle.act())
    return env


def test_the_world_snapshot_is_a_frozen_dataclass() -> None:
    env = _mid_episode()
    world = env.get_state().world
    assert isinstance(world, BusinessWorld)
    assert tuple(f.name for f in dataclasses.fields(world)) == WORLD_FIELDS
    assert world.auth_user == "u1" and world.verdict is PENDING
    assert any(r.startswith("get_loan ") for r in world.reads)
    with pytest.raises(dataclasses.FrozenInstanceError):
        world.auth_user = "u2"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(world)) == world


def test_a_world_restored_from_a_snapshot_gives_the_same_snapshot() -> None:
    env = _mid_episode()
    state = env.get_state()
    other = _mid_episode()
    other.reset(seed=5, options={"task_id": "renew-1"})  # somewhere else entirely
    other.set_state(pickle.loads(pickle.dumps(state)))
    assert other.get_state().world == state.world
    assert other.state_hash() == env.state_hash()


def test_the_verdict_is_typed_pending_then_success() -> None:
    task = renew_task(2)
    env = LibraryEnv(tasks=[task])
    env.reset(seed=0, options={"task_id": task.id})
    assert env._grade() is PENDING
    oracle = env.oracle()
    for _ in range(len(task.solution)):
        env.step(oracle.act())
    assert env.outcome is Outcome.SUCCESS
    assert env._grade() == SUCCESS and env._grade().reason == ""
    assert env.get_state().world.verdict == SUCCESS


def test_the_verdict_of_a_failure_carries_its_reason() -> None:
    task = renew_task(3)
    env = LibraryEnv(tasks=[task])
    env.reset(seed=0, options={"task_id": task.id})
    env.step('find_user_id_by_email(email="reader3@lib.test")')
    env.step('transfer_to_human_agents(summary="cannot help")')
    verdict = env._grade()
    assert verdict.state is GradeState.FAILURE
    assert "the database does not match the goal" in verdict.reason
    assert env.outcome is Outcome.FAILURE


@pytest.mark.parametrize(
    ("state", "reason"),
    [(GradeState.FAILURE, ""), (GradeState.SUCCESS, "why"), (GradeState.PENDING, "why")],
)
def test_a_verdict_has_a_reason_exactly_when_it_failed(state: GradeState, reason: str) -> None:
    with pytest.raises(ValueError, match="reason exactly when"):
        Verdict(state, reason)


def test_request_kind_is_an_enum_and_unknown_kinds_are_refused() -> None:
    r = Request.from_json({"kind": "question", "intent": "q", "say": ["when?"]})
    assert r.kind is RequestKind.QUESTION and r.kind == "question"
    with pytest.raises(ConfigError, match="'write'") as err:
        Request.from_json({"kind": "writ", "intent": "x", "say": ["do it"]})
    assert isinstance(err.value, AgentGymError)


@pytest.mark.parametrize(
    ("env_cls", "groups", "fingerprint"),
    [
        (RetailEnv, (RetailReadTools, RetailWriteTools), "136546e01551"),
        (CalendarEnv, (CalendarReadTools, CalendarWriteTools), "efb5aa76a096"),
    ],
)
def test_domain_envs_are_composed_of_tool_groups(
    env_cls: type[BusinessEnv], groups: tuple[type[ToolGroup], ...], fingerprint: str
) -> None:
    assert env_cls.__bases__ == (BusinessEnv,)
    assert env_cls.tool_groups == groups
    names = [spec.name for group in groups for spec in group.specs()]
    assert list(env_cls.toolset) == ["respond", "transfer_to_human_agents", *names]
    # the tool schemas, kinds and costs (and so info["versions"]["tools"]) are unchanged
    assert env_cls.toolset.fingerprint == fingerprint


def test_a_tool_group_runs_against_its_env() -> None:
    env = RetailEnv(split="test")
    env.reset(seed=0)
    group = env.tool_group(RetailReadTools)
    assert group is env.tool_group(RetailReadTools) and group.db is env.db
    spec = env.task.spec
    email = spec["user"]["known"].get("email")
    if email is not None:
        assert env.find_user_id_by_email(email).text == spec["user_id"]
        assert env.auth_user == spec["user_id"]


class _Echo(ToolGroup):
    @tool("Echo a word.", parameters={"word": {"type": "string"}})
    def echo(self, word: str) -> ToolResult:
        return ToolResult(word)


class _EchoAgain(ToolGroup):
    @tool("Echo a word again.", parameters={"word": {"type": "string"}})
    def echo(self, word: str) -> ToolResult:
        return ToolResult(word + word)


def test_two_groups_with_one_tool_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="declared by both _Echo and _EchoAgain"):

        class _Twice(LibraryEnv):
            tool_groups = (_Echo, _EchoAgain)


def test_a_group_tool_may_not_replace_an_env_method() -> None:
    with pytest.raises(ConfigError, match="defines 'echo' itself"):

        class _Shadow(LibraryEnv):
            tool_groups = (_Echo,)

            def echo(self, word: str) -> ToolResult:
                return ToolResult(word)


def test_a_group_adds_its_tools_beside_the_env_own() -> None:
    class _WithEcho(LibraryEnv):
        tool_groups = (_Echo,)

    assert list(_WithEcho.toolset)[-1] == "echo" and "renew_loan" in _WithEcho.toolset
    task = renew_task(1)
    env = _WithEcho(tasks=[task])
    env.reset(seed=0, options={"task_id": task.id})
    obs, *_ = env.step('echo(word="hello")')
    assert "hello" in obs
