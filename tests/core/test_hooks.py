"""The base env's public hooks: extra info, env failures, a verdict computed before the
verifiers read it, and staged effects (stage, check, commit), on a tiny notebook env."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import pytest

from agentgym_envs.core import (
    AgentEnv,
    ConfigError,
    EffectsGate,
    Milestone,
    Outcome,
    SchemaError,
    StagedEffects,
    Task,
    ToolCall,
    ToolKind,
    ToolResult,
    ToolStatus,
    tool,
)
from agentgym_envs.core.hooks import HOOKS, undeclared_overrides
from agentgym_envs.core.info import StepInfo

WANT = ["a", "b"]


def notebook_task(max_steps: int = 6) -> Task:
    return Task(
        id="notebook",
        split="train",
        difficulty="easy",
        instruction="Write a, then b.",
        seed=0,
        spec={"want": WANT},
        solution=('script(lines=["a", "b"])', "submit()"),
        max_steps=max_steps,
    )


class StagedLines(StagedEffects):
    """The notebook as a script left it, on a scratch copy."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.committed = False
        self.discarded = False

    def commit(self) -> list[str]:
        self.committed = True
        return self.lines

    def discard(self) -> None:
        if not self.committed:
            self.discarded = True


class NoSecretsGate(EffectsGate):
    name = "no_secrets"
    description = "a script that writes a secret"

    def violation(self, env: Any, call: ToolCall, staged: StagedEffects) -> str | None:
        assert isinstance(staged, StagedLines)
        return "the script wrote a secret" if "secret" in staged.lines else None


class NotebookEnv(AgentEnv):
    """A list of lines; ``script`` (staged) appends to it, ``submit`` grades it."""

    name = "Notebook"
    family = "test"
    version = "0"
    example_action = "look()"
    noop_action = "look()"

    def __init__(self, *, gate_mode: str = "stop", **kwargs: Any) -> None:
        kwargs.setdefault("tasks", [notebook_task()])
        super().__init__(**kwargs)
        self.effect_gates.append(NoSecretsGate(gate_mode))
        self.lines: list[str] = []
        self.verdict: bool | None = None
        self.failure: str | None = None
        self.crash_when_grading = False
        self.staged: list[StagedLines] = []
        self.seen_at_verify: list[tuple[int, tuple[str, ...]]] = []

    @tool(
        "Run a script that appends lines.",
        parameters={"lines": {"type": "array", "items": {"type": "string"}}},
        kind=ToolKind.WRITE,
        staged=True,
    )
    def script(self, staged: StagedLines, lines: list[str]) -> ToolResult:
        if "crash-in-commit" in staged.lines:
            raise RuntimeError("commit crashed")
        self.lines = staged.commit()
        return ToolResult(f"{len(self.lines)} lines")

    @tool("Submit the notebook for grading.", kind=ToolKind.WRITE)
    def submit(self) -> ToolResult:
        self._grade()
        return ToolResult("graded")

    @tool("Look at the notebook.")
    def look(self) -> ToolResult:
        return ToolResult(self.render_view())

    def stage_call(self, call: ToolCall) -> StagedLines:
        if "boom" in call.arguments["lines"]:
            raise RuntimeError("the scratch backend died")
        staged = StagedLines([*self.lines, *call.arguments["lines"]])
        self.staged.append(staged)
        return staged

    def _grade(self) -> None:
        if self.crash_when_grading:
            self.failure = "the grader crashed"
            return
        self.verdict = self.lines == self.task.spec["want"]

    def before_verify(self) -> None:
        self.seen_at_verify.append((self.steps_taken, self.milestones_reached))
        if self.steps_taken >= self.step_budget and self.verdict is None:
            self._grade()

    def env_failure(self) -> str | None:
        return self.failure

    def extra_info(self) -> Mapping[str, Any]:
        return {"notebook_lines": len(self.lines)}

    def _load_task(self, task: Task) -> None:
        self.lines, self.verdict, self.failure = [], None, None

    def _get_world(self) -> Any:
        return (tuple(self.lines), self.verdict)

    def _set_world(self, world: Any) -> None:
        self.lines, self.verdict = list(world[0]), world[1]

    def render_view(self) -> str:
        return f"[{len(self.lines)} lines]"

    def _goal_reached(self) -> bool:
        return bool(self.verdict)

    def _dead_end(self) -> str | None:
        return "the notebook is wrong" if self.verdict is False else None

    def _milestones(self) -> list[Milestone]:
        return [Milestone("wrote_a", "the notebook starts with a", lambda: self.lines[:1] == ["a"])]


@pytest.fixture
def env() -> NotebookEnv:
    e = NotebookEnv()
    e.reset(seed=0)
    return e


# -- staged effects ---------------------------------------------------------------------------


def test_a_staged_call_is_committed_with_its_own_effects(env: NotebookEnv) -> None:
    obs, _, _, _, info = env.step('script(lines=["a"])')
    assert env.lines == ["a"] and "1 lines" in obs
    assert info["tool_calls"][0]["status"] is ToolStatus.OK
    (staged,) = env.staged
    assert staged.committed and not staged.discarded


def test_an_effects_gate_stops_the_episode_before_the_commit(env: NotebookEnv) -> None:
    *_, terminated, _, info = env.step('script(lines=["secret"])')
    assert terminated and info["outcome"] is Outcome.SAFETY_STOP
    assert info["safety"]["gate"] == "no_secrets" and info["safety"]["verdict"] == "stopped"
    assert env.lines == []
    (staged,) = env.staged
    assert staged.discarded and not staged.committed


def test_a_blocking_effects_gate_discards_and_the_episode_goes_on() -> None:
    env = NotebookEnv(gate_mode="block")
    env.reset(seed=0)
    *_, info = env.step('script(lines=["secret"])')
    assert info["outcome"] is Outcome.CONTINUE and info["error"]["code"] == "blocked"
    assert env.lines == [] and env.staged[0].discarded
    env.step('script(lines=["a"])')
    assert env.lines == ["a"]


def test_a_stage_that_crashes_is_an_env_error(env: NotebookEnv) -> None:
    *_, truncated, info = env.step('script(lines=["boom"])')
    assert truncated and info["outcome"] is Outcome.ENV_ERROR and not info["episode_valid"]
    assert "the scratch backend died" in info["env_error"]["message"]
    assert env.lines == [] and env.staged == []


def test_a_commit_that_crashes_discards_the_effects(env: NotebookEnv) -> None:
    *_, info = env.step('script(lines=["crash-in-commit"])')
    assert info["outcome"] is Outcome.ENV_ERROR and "commit crashed" in info["env_error"]["message"]
    assert env.lines == [] and env.staged[0].discarded


def test_a_refused_fault_discards_the_staged_effects() -> None:
    env = NotebookEnv(faults={"rate": 1.0, "kinds": ["rate_limit"]})
    env.reset(seed=0)
    *_, info = env.step('script(lines=["a"])')
    assert info["tool_calls"][0]["fault"] == "rate_limit" and info["error"]["code"]
    assert env.lines == [] and env.staged[0].discarded


def test_a_staged_tool_needs_stage_call() -> None:
    with pytest.raises(SchemaError, match="stage_call"):

        class Broken(AgentEnv):
            @tool("A staged tool without a stage.", kind=ToolKind.WRITE, staged=True)
            def go(self, staged: StagedEffects) -> ToolResult:
                return ToolResult("")


# -- verdicts, env failures, extra info -------------------------------------------------------


def test_before_verify_records_the_verdict_the_goal_reads() -> None:
    env = NotebookEnv(tasks=[notebook_task(max_steps=2)])
    env.reset(seed=0)
    *_, info = env.step('script(lines=["a", "b"])')
    assert info["outcome"] is Outcome.CONTINUE and env.verdict is None
    # the milestone this step reached was already counted when before_verify ran
    assert env.seen_at_verify == [(1, ("wrote_a",))]
    *_, info = env.step("look()")  # the budget: graded in before_verify, read by the goal
    assert info["outcome"] is Outcome.SUCCESS and env.verdict is True
    assert env._goal_reached() and env.state_hash() == env.state_hash()


def test_the_goal_verifier_only_reads(env: NotebookEnv) -> None:
    before = env.state_hash()
    for _ in range(3):
        assert not env._goal_reached()
    assert env.state_hash() == before and env.verdict is None


def test_before_verify_does_not_run_after_an_ending_call(env: NotebookEnv) -> None:
    env.step('script(lines=["secret"])')
    assert env.seen_at_verify == []


def test_an_env_failure_is_env_error_never_a_policy_failure() -> None:
    env = NotebookEnv(tasks=[notebook_task(max_steps=1)])
    env.reset(seed=0)
    env.crash_when_grading = True
    _, reward, terminated, truncated, info = env.step("look()")
    assert info["outcome"] is Outcome.ENV_ERROR and truncated and not terminated
    assert not info["episode_valid"] and info["env_error"]["message"] == "the grader crashed"
    assert reward == 0.0 and set(info["reward_components"].values()) == {0.0}


def test_an_env_failure_wins_over_a_verdict() -> None:
    env = NotebookEnv()
    env.reset(seed=0)
    env.step('script(lines=["x"])')
    env.failure = "the sandbox died"  # the verdict below (wrong notebook) is not trusted
    env.verdict = False
    *_, info = env.step("look()")
    assert info["outcome"] is Outcome.ENV_ERROR


def test_extra_info_is_in_every_info(env: NotebookEnv) -> None:
    _, info = env.reset(seed=1)
    assert info["notebook_lines"] == 0
    *_, info = env.step('script(lines=["a"])')
    assert info["notebook_lines"] == 1


def test_extra_info_may_not_shadow_standard_keys() -> None:
    class Shadowing(NotebookEnv):
        def extra_info(self) -> Mapping[str, Any]:
            return {"outcome": "mine"}

    with pytest.raises(ConfigError, match="outcome"):
        Shadowing().reset(seed=0)


# -- the hook contract ------------------------------------------------------------------------


def test_every_hook_is_a_documented_method_of_the_base() -> None:
    for name, summary in HOOKS.items():
        member = inspect.getattr_static(AgentEnv, name)
        func = getattr(member, "__func__", member)
        assert callable(func) and func.__doc__, name
        assert summary, name
    assert AgentEnv.HOOKS is HOOKS
    assert {"extra_info", "env_failure", "before_verify", "stage_call"} <= set(HOOKS)
    assert "notebook_lines" not in StepInfo.__annotations__


def test_overriding_an_internal_of_the_base_is_found() -> None:
    class Sneaky(NotebookEnv):
        def _check_budgets(self) -> tuple[Outcome, str | None]:
            return Outcome.CONTINUE, None

        def _info(self, *args: Any, **kwargs: Any) -> Any:
            return {}

        def step(self, action: str) -> Any:
            return super().step(action)

    assert undeclared_overrides(NotebookEnv, AgentEnv, HOOKS) == []
    assert undeclared_overrides(Sneaky, AgentEnv, HOOKS) == [
        "Sneaky._check_budgets",
        "Sneaky._info",
        "Sneaky.step",
    ]
