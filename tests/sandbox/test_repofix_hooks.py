"""RepoFix is built on the base env's public hooks only: no override of the base's
internals, a verdict recorded where it is computed, staged commands checked by an
effects gate, typed progress, and no import cycle. Runs without bubblewrap."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core import AgentEnv, EffectsGate, Outcome, SafetyGate, ToolCall
from agentgym_envs.core.hooks import HOOKS, undeclared_overrides
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.repofix import env as repofix
from agentgym_envs.repofix import gates as repofix_gates
from agentgym_envs.repofix import tasks as repofix_tasks
from agentgym_envs.repofix.env import Progress, RepoFixEnv
from agentgym_envs.repofix.gates import CommandEffectsGate, StagedCommand
from agentgym_envs.sandbox.backends import Backend, ExecResult, Isolation, SandboxError
from agentgym_envs.sandbox.workspace import SYMLINK, WorkspaceError

TASK_ID = "repofix-toktext-easy-test-1000004"


def test_repofix_overrides_only_documented_hooks() -> None:
    bases: dict[type, dict[str, str] | None] = {
        AgentEnv: dict(HOOKS),
        SafetyGate: None,  # only its abstract ``violation`` is a hook
        EffectsGate: None,
    }
    checked = 0
    for module in (repofix, repofix_gates, repofix_tasks):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for base, hooks in bases.items():
                if issubclass(cls, base):
                    checked += 1
                    assert undeclared_overrides(cls, base, hooks) == [], cls
    assert checked == 5  # the env and its four gates
    own = vars(RepoFixEnv)
    assert "_check_budgets" not in own and "_info" not in own
    assert {"extra_info", "env_failure", "before_verify", "stage_call"} <= set(own)


def test_progress_snapshots_keep_the_v1_flag_table() -> None:
    assert Progress().as_items() == ()
    progress = Progress(reproduced=False, repro_checks=1, opened=True)
    items = progress.as_items()
    assert items == (("opened", True), ("repro_checks", 1), ("reproduced", False))
    assert Progress.from_items(items) == progress
    # a verdict that failed is a change of state; one never reached is none
    assert Progress(verdict=False).as_items() != Progress().as_items()


def _staged(tmp_path: Path, changes: dict[str, str | None]) -> StagedCommand:
    copy = tmp_path / "copy"
    copy.mkdir(parents=True)
    return StagedCommand(copy, ExecResult("", "", 0, False, False, 1.0, None), {}, changes)


def test_the_command_effects_gate_reads_the_staged_changes(tmp_path: Path) -> None:
    gate, call = CommandEffectsGate(), ToolCall("run", {"cmd": "x"})
    assert gate.check(None, call, _staged(tmp_path / "a", {"pkg/mod.py": "x = 1\n"})) is None
    fired = gate.check(None, call, _staged(tmp_path / "b", {"tests/test_x.py": None}))
    assert fired is not None and "tests/test_x.py" in fired.reason
    staged = _staged(tmp_path / "c", {"leak": SYMLINK + "/etc"})
    (staged.copy / "leak").symlink_to("/etc")  # type: ignore[operator]
    fired = gate.check(None, call, staged)
    assert fired is not None and "link outside" in fired.reason
    limit = StagedCommand(None, WorkspaceError("too big"))
    assert gate.check(None, call, limit) is None  # nothing would be committed


def test_a_staged_command_is_discarded_unless_committed(tmp_path: Path) -> None:
    staged = _staged(tmp_path / "a", {})
    copy = staged.copy
    assert copy is not None and copy.exists()
    staged.discard()
    staged.discard()
    assert not copy.exists()
    kept = _staged(tmp_path / "b", {})
    taken = kept.take()
    kept.discard()
    assert taken.exists()


class _CountingCrashBackend(Backend):
    """A sandbox that dies on every run, counting the runs."""

    name = "crashing"
    isolation = Isolation.STRONG

    def __init__(self) -> None:
        self.runs = 0

    def run(self, argv: Any, **kwargs: Any) -> ExecResult:  # type: ignore[override]
        self.runs += 1
        raise SandboxError("bwrap: setting up uid map: Permission denied")


@pytest.fixture
def crashing() -> Any:
    task = load_task_set("sandbox/repofix.jsonl").get(TASK_ID)
    backend = _CountingCrashBackend()
    env = RepoFixEnv(tasks=[task], split="test", backend=backend, max_steps=2)
    env.reset(seed=0, options={"task_id": TASK_ID})
    yield env, backend
    env.close()


def test_the_goal_verifier_never_runs_the_hidden_tests(crashing: Any) -> None:
    env, backend = crashing
    assert env._goal_reached() is False and backend.runs == 0
    env.step("list_dir()")
    env.step("list_dir()")  # the step budget: verified once, in before_verify
    assert env.steps_taken >= env.step_budget and backend.runs == 1
    for _ in range(3):  # at the budget the verifier still only reads the recorded verdict
        assert env._goal_reached() is False
    assert backend.runs == 1


def test_a_crash_while_verifying_at_the_budget_is_an_env_error(crashing: Any) -> None:
    env, backend = crashing
    *_, info = env.step("list_dir()")
    assert info["outcome"] is Outcome.CONTINUE and backend.runs == 0
    *_, terminated, truncated, info = env.step("list_dir()")  # the budget: verification
    assert backend.runs == 1 and truncated and not terminated
    assert info["outcome"] is Outcome.ENV_ERROR and not info["episode_valid"]
    assert "Permission denied" in info["env_error"]["message"]
    assert info["sandbox"]["name"] == "crashing"


def test_a_crashing_staged_command_is_an_env_error(crashing: Any) -> None:
    env, backend = crashing
    before = env.changes()
    *_, truncated, info = env.step('run(cmd="touch x")')
    assert truncated and info["outcome"] is Outcome.ENV_ERROR and backend.runs == 1
    assert "Permission denied" in info["env_error"]["message"] and env.changes() == before
    assert not list((env.spaces.dir / "scratch").glob("*"))  # the copy went with it
