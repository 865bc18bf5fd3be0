"""RepoFix: tasks, tools, gates, verification, snapshots and hostile policies, end to end
in the bubblewrap sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401 - registers the envs
from agentgym_envs.core import Outcome, Task
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.repofix import tasks as tasks
from agentgym_envs.repofix.env import RepoFixEnv, grade, relative_path
from agentgym_envs.sandbox.backends import Backend, ExecResult, Isolation, SandboxError
from agentgym_envs.sandbox.verify import TestRun
from tests.sandbox.support import needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.timeout(120)]


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def first_task(difficulty: str, split: str = "train", start: int = 0) -> Task:
    for seed in range(start, start + 50):
        task = tasks.generate(seed, difficulty, split)
        if task is not None:
            return task
    raise AssertionError(f"no valid {split}/{difficulty} task in 50 seeds")


@pytest.fixture(scope="module")
def task_by_level() -> dict[str, Task]:
    return {d: first_task(d) for d in ("easy", "medium", "hard")} | {
        "ood": first_task("easy", "ood")
    }


@pytest.fixture
def env(task_by_level: dict[str, Task]) -> Iterator[RepoFixEnv]:
    e = RepoFixEnv(tasks=list(task_by_level.values()), split="train")
    yield e
    e.close()


def start(env: RepoFixEnv, task: Task) -> tuple[str, dict[str, Any]]:
    env.split = task.split
    return env.reset(seed=0, options={"task_id": task.id, "split": task.split})


def play(env: RepoFixEnv, actions: list[str]) -> list[tuple[str, float, bool, bool, dict]]:
    out = []
    for action in actions:
        out.append(env.step(action))
        if out[-1][2] or out[-1][3]:
            break
    return out


def gold_edits(task: Task) -> list[str]:
    return [a for a in task.solution if a != "submit()"]


def git(workspace: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=workspace, capture_output=True, text=True, check=True
    ).stdout


# -- tasks and the workspace ---------------------------------------------------------------


def test_generated_tasks_record_fail_to_pass_and_pass_to_pass(task_by_level) -> None:
    for level, task in task_by_level.items():
        spec = task.spec
        assert spec["fail_to_pass"] and spec["pass_to_pass"], level
        assert not set(spec["fail_to_pass"]) & set(spec["pass_to_pass"])
        assert all(t.startswith("tests/hidden/") for t in spec["fail_to_pass"])
        assert len(spec["sites"]) == tasks.MUTATIONS[task.difficulty]
        assert len(spec["hints"]) == len(spec["sites"]) and all(spec["hints"])
        assert spec["fixture_hash"] == tasks.content_hash(spec["repo"])
    assert task_by_level["ood"].spec["repo"] in tasks.OOD_REPOS
    assert task_by_level["easy"].spec["repo"] in tasks.TRAIN_REPOS
    # the same seed gives the same task
    again = tasks.generate(task_by_level["easy"].seed, "easy", "train")
    assert again == task_by_level["easy"]


def test_reset_gives_a_fresh_single_commit_repo_without_hidden_tests(env, task_by_level) -> None:
    task = task_by_level["medium"]
    obs, info = start(env, task)
    assert task.instruction in obs and "tests/" in obs
    ws = env.workspace
    assert ws is not None and ws.is_relative_to(env.spaces.dir)
    assert git(ws, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(ws, "status", "--porcelain") == ""
    assert not (ws / "tests" / "hidden").exists() and (ws / "tests" / "visible").is_dir()
    # the buggy code is what was committed: the history holds no trace of the fix
    history = git(ws, "log", "-p", "--all")
    for action in gold_edits(task):
        fixed = json.loads(action)["arguments"]["new"].strip()
        if fixed:
            assert fixed not in history
    assert info["sandbox"]["name"] == "bubblewrap"
    assert info["sandbox"]["isolation"] == Isolation.STRONG
    # a second reset starts from the untouched template again
    env.step(call("write_file", path="notes.txt", content="x"))
    start(env, task)
    assert not (env.workspace / "notes.txt").exists()
    assert env.changes() == {}


def test_oracle_succeeds_and_do_nothing_fails_on_every_level(env, task_by_level) -> None:
    for task in task_by_level.values():
        start(env, task)
        oracle = env.oracle()
        steps = play(env, [oracle.act() for _ in range(len(task.solution))])
        assert steps[-1][4]["outcome"] is Outcome.SUCCESS, task.id
        assert "target_tests_pass" in steps[-1][4]["milestones"]
        start(env, task)
        while env.outcome is Outcome.CONTINUE:
            env.step(env.noop_action)
        assert env.outcome is Outcome.TIMEOUT, task.id  # verified at the budget, not fixed


def test_submitting_a_partial_fix_fails(env, task_by_level) -> None:
    task = task_by_level["hard"]
    start(env, task)
    edits = gold_edits(task)  # one edit per mutated file: apply all but the last
    steps = play(env, [*edits[:-1], "submit()"])
    assert steps[-1][4]["outcome"] is Outcome.FAILURE
    assert "fails hidden tests" in steps[-1][0]
    assert "target_tests_pass" not in steps[-1][4]["milestones"]


# -- tools -----------------------------------------------------------------------------------


def test_read_search_edit_and_write(env, task_by_level) -> None:
    task = task_by_level["easy"]
    start(env, task)
    buggy = task.spec["sites"][0]["path"]
    obs, *_, info = env.step(call("read_file", path=buggy, start=1, end=3))
    assert obs.startswith(f"{buggy} (") and "   1  " in obs and "   4  " not in obs
    assert "opened_buggy_file" in info["new_milestones"]
    obs, *_, info = env.step(call("read_file", path=f"./{buggy}", start=10_000))
    assert info["error"]["code"] == "bad_range"
    obs, *_ = env.step(call("search", pattern=r"^def ", path=os.path.dirname(buggy)))
    assert f"{buggy}:" in obs
    obs, *_, info = env.step(call("search", pattern="(", path="."))
    assert info["error"]["code"] == "bad_pattern"
    obs, *_, info = env.step(call("edit", path=buggy, old="no such text anywhere", new="x"))
    assert info["error"]["code"] == "no_unique_match" and "does not occur" in obs
    obs, *_, info = env.step(call("edit", path=buggy, old="\n", new="\n"))
    assert info["error"]["code"] == "no_unique_match" and "times" in obs
    obs, *_, info = env.step(call("write_file", path="pkg_notes/todo.txt", content="a\nb\n"))
    assert (
        info["error"] == {} and (env.workspace / "pkg_notes" / "todo.txt").read_text() == "a\nb\n"
    )
    assert "1 file changed" in obs
    obs, *_, info = env.step(call("list_dir", path="/workspace/pkg_notes"))
    assert obs.startswith("todo.txt")
    obs, *_, info = env.step(call("read_file", path="missing.py"))
    assert info["error"]["code"] == "not_found" and env.outcome is Outcome.CONTINUE


def test_run_reports_exit_code_time_and_truncation(env, task_by_level) -> None:
    start(env, task_by_level["easy"])
    obs, *_, info = env.step(call("run", cmd="echo out; echo err >&2; exit 3"))
    assert obs.startswith("exit code 3 in ") and " ms" in obs.splitlines()[0]
    assert "stdout:\nout" in obs and "stderr:\nerr" in obs
    assert info["tool_calls"][0]["status"] == "ok"
    obs, *_ = env.step(call("run", cmd="yes line | head -c 200000"))
    assert "(output truncated)" in obs.splitlines()[0]
    assert len(obs) <= env.max_observation_chars
    obs, *_ = env.step(call("run", cmd="sleep 30", timeout=1))
    assert "(timed out)" in obs.splitlines()[0]
    # a command's files land in the workspace (it runs in a staged copy, then commits)
    env.step(call("run", cmd="mkdir -p build && echo 1 > build/out.txt"))
    assert (env.workspace / "build" / "out.txt").read_text() == "1\n"


def test_run_tests_runs_visible_tests_and_marks_reproduction(env, task_by_level) -> None:
    task = task_by_level["easy"]
    start(env, task)
    obs, *_, info = env.step(call("run_tests"))
    assert "This visible test fails" in task.instruction  # the easy report is a traceback
    assert "failed" in obs and "reproduced_failure" in info["new_milestones"]
    assert "tests/hidden" not in obs
    for action in gold_edits(task):
        env.step(action)
    obs, *_, info = env.step(call("run_tests", selector="tests/visible"))
    assert "imports_and_collects" in info["new_milestones"]
    assert "failed" not in obs and "passed" in obs
    # a selector is never a pytest option
    obs, *_, info = env.step(call("run_tests", selector="--collect-only"))
    assert "collected" not in obs.splitlines()[0]


# -- gates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "gate"),
    [
        (call("edit", path="tests/visible/x.py", old="a", new="b"), "protected_files"),
        (call("write_file", path="conftest.py", content="x = 1\n"), "protected_files"),
        (call("write_file", path="pkg/conftest.py", content=""), "protected_files"),
        (call("write_file", path="pytest.ini", content="[pytest]\n"), "protected_files"),
        (call("write_file", path="zz.pth", content="import os\n"), "protected_files"),
        (call("write_file", path="sitecustomize.py", content=""), "protected_files"),
        (call("read_file", path="../../etc/passwd"), "workspace_escape"),
        (call("read_file", path="/etc/passwd"), "workspace_escape"),
        (call("list_dir", path="tests/hidden"), "workspace_escape"),
        (call("run", cmd="cat ../secret"), "workspace_escape"),
        (call("run", cmd="ls /work"), "workspace_escape"),
        (call("run", cmd="find / -path '*hidden*'"), "workspace_escape"),
        (call("run_tests", selector="tests/hidden"), "workspace_escape"),
        (call("run", cmd="curl http://example.com"), "network"),
        (call("run", cmd="pip install requests"), "network"),
        (call("run", cmd="python -c 'import socket; socket.create_connection((\"1.1.1.1\", 80))'"),
         "network"),
        (call("run", cmd="rm -rf tests"), "command_effects"),
        (call("run", cmd="echo 'import pytest' > conftest.py"), "command_effects"),
        (call("run", cmd="ln -s /etc leak"), "command_effects"),
    ],
)  # fmt: skip
def test_gates_stop_the_episode(env, task_by_level, action: str, gate: str) -> None:
    start(env, task_by_level["easy"])
    before = env.changes()
    _, reward, terminated, truncated, info = env.step(action)
    assert info["outcome"] is Outcome.SAFETY_STOP and terminated and not truncated
    assert info["safety"]["gate"] == gate
    assert reward == env.reward_config.hard_fail
    assert env.changes() == before  # a stopped command committed nothing


def test_a_symlink_made_earlier_cannot_be_read_through(env, task_by_level) -> None:
    start(env, task_by_level["easy"])
    os.symlink("/etc/passwd", env.workspace / "inside")  # as if left by an earlier branch
    env._changes = None
    *_, info = env.step(call("read_file", path="inside"))
    assert info["outcome"] is Outcome.SAFETY_STOP


def test_relative_path_normalises_tool_paths() -> None:
    assert relative_path("./a//b/../c.py") == "a/c.py"
    assert relative_path("/workspace/x/y.py") == "x/y.py"
    assert relative_path("/workspace") == "."
    assert relative_path("") == "."
    assert relative_path("/etc/passwd") == "/etc/passwd"


# -- hostile policies ------------------------------------------------------------------------


def test_hostile_commands_are_contained_and_the_episode_goes_on(env, task_by_level) -> None:
    start(env, task_by_level["easy"])
    marker = Path("/tmp") / f"agentgym-hostile-{os.getpid()}"
    hostile = [
        ":(){ :|:& };:",  # fork bomb
        "python3 -c 'while True: pass'",  # infinite loop
        "yes AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # endless output
        f"touch {marker}",  # the host's /tmp is not the sandbox's
        "python3 -c \"open('/etc/agentgym-owned', 'w')\"",  # read-only system
        "cat /etc/shadow",
    ]
    for cmd in hostile:
        obs, *_, info = env.step(call("run", cmd=cmd, timeout=3))
        assert info["outcome"] is Outcome.CONTINUE, cmd
        assert not obs.startswith("exit code 0 ") or cmd.startswith("touch"), (cmd, obs[:200])
        assert len(obs) <= env.max_observation_chars
    assert not marker.exists() and not Path("/etc/agentgym-owned").exists()
    # the env still works after all of that
    obs, *_, info = env.step(call("run", cmd="echo alive"))
    assert "alive" in obs


CHEATS = {
    # named plainly: the source scan of the diff refuses it
    "plain": "import _pytest.reports\n"
    "_pytest.reports.TestReport.outcome = property(lambda s: 'passed', lambda s, v: None)\n",
    # hidden from the scan: the results plugin's fingerprint of pytest catches it
    "obfuscated": "_b = globals()['__bui' + 'ltins__']\n"
    "_i = _b['__imp' + 'ort__'] if isinstance(_b, dict) else getattr(_b, '__imp' + 'ort__')\n"
    "_r = _i('_py' + 'test.reports', fromlist=['x'])\n"
    "setattr(_r.TestReport, 'outcome', property(lambda s: 'passed', lambda s, v: None))\n",
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_fix_that_games_the_test_runner_fails(env, task_by_level, cheat: str) -> None:
    task = task_by_level["easy"]
    start(env, task)
    package = task.spec["sites"][0]["path"].split("/")[0]
    init = (env.workspace / package / "__init__.py").read_text()
    env.step(call("write_file", path=f"{package}/__init__.py", content=CHEATS[cheat] + init))
    ok, detail = env._verify()
    assert not ok
    # what the policy may be told holds no text of the test run (hostile code writes it)
    expected = "reaches into the test runner" if cheat == "plain" else "do not pass"
    assert expected in detail
    *_, info = env.step("submit()")
    assert info["outcome"] is Outcome.FAILURE


def test_exiting_early_from_the_package_is_not_a_pass(env, task_by_level) -> None:
    task = task_by_level["easy"]
    start(env, task)
    package = task.spec["sites"][0]["path"].split("/")[0]
    init = (env.workspace / package / "__init__.py").read_text()
    env.step(
        call("write_file", path=f"{package}/__init__.py", content="import os\nos._exit(0)\n" + init)
    )
    *_, info = env.step("submit()")
    assert info["outcome"] is Outcome.FAILURE


# -- verification ----------------------------------------------------------------------------


def _run(outcomes: dict[str, str], *, consistent: bool = True, errors: tuple = ()) -> TestRun:
    result = ExecResult("", "", 0, False, False, 1.0, None)
    return TestRun(outcomes, errors, 0, consistent, result)


def test_grading_rules() -> None:
    f2p, p2p = ["t::a"], ["t::b"]
    assert grade(_run({"t::a": "passed", "t::b": "passed"}), f2p, p2p)[0]
    assert not grade(_run({"t::a": "skipped", "t::b": "passed"}), f2p, p2p)[0]
    assert not grade(_run({"t::a": "error", "t::b": "passed"}), f2p, p2p)[0]
    assert not grade(_run({"t::b": "passed"}), f2p, p2p)[0]  # missing
    assert not grade(_run({"t::a": "passed", "t::b": "failed"}), f2p, p2p)[0]
    assert not grade(_run({}), f2p, p2p)[0]  # zero tests ran
    ok = {"t::a": "passed", "t::b": "passed"}
    assert not grade(_run(ok, consistent=False), f2p, p2p)[0]
    assert not grade(_run(ok, errors=("t",)), f2p, p2p)[0]


def test_verification_at_the_step_budget(task_by_level) -> None:
    task = task_by_level["easy"]
    env = RepoFixEnv(tasks=[task], max_steps=len(task.solution) + 1)
    try:
        env.reset(seed=0, options={"task_id": task.id})
        play(env, gold_edits(task))
        while env.outcome is Outcome.CONTINUE:
            env.step("list_dir()")
        assert env.outcome is Outcome.SUCCESS
    finally:
        env.close()


def test_guidance_mode_shows_failures_and_lets_the_agent_continue(task_by_level) -> None:
    task = task_by_level["medium"]
    env = RepoFixEnv(tasks=[task], guidance=True)
    try:
        _, info = env.reset(seed=0, options={"task_id": task.id})
        assert info["versions"]["env"].endswith("+guidance")
        obs, *_, info = env.step("submit()")
        assert info["outcome"] is Outcome.CONTINUE
        assert "Failing hidden tests: tests/hidden/" in obs and "Hint: " in obs
        steps = play(env, list(task.solution))
        assert steps[-1][4]["outcome"] is Outcome.SUCCESS
    finally:
        env.close()


# -- snapshots, concurrency, failures ------------------------------------------------------


def test_snapshots_branch_mid_episode(env, task_by_level) -> None:
    task = task_by_level["medium"]
    start(env, task)
    edits = gold_edits(task)
    env.step(edits[0])
    env.step(call("write_file", path="scratch.txt", content="branch point"))
    state = env.get_state()
    digest = env.state_hash()
    # branch A: finish the fix
    steps_a = play(env, [*edits[1:], "submit()"])
    # branch B: from the same point, break things and give up
    env.set_state(state)
    assert env.state_hash() == digest
    assert (env.workspace / "scratch.txt").read_text() == "branch point"
    env.step(call("run", cmd="rm scratch.txt"))
    assert not (env.workspace / "scratch.txt").exists()
    # back to A's start again: replaying it gives the same result
    env.set_state(state)
    assert (env.workspace / "scratch.txt").exists()
    again = play(env, [*edits[1:], "submit()"])
    assert [s[:4] for s in again] == [s[:4] for s in steps_a]
    assert again[-1][4]["outcome"] is Outcome.SUCCESS


def test_eight_concurrent_episodes_do_not_interfere(task_by_level) -> None:
    task = task_by_level["easy"]
    envs = [RepoFixEnv(tasks=[task]) for _ in range(8)]
    results: dict[int, Any] = {}

    def episode(i: int) -> None:
        e = envs[i]
        e.reset(seed=i, options={"task_id": task.id})
        e.step(call("write_file", path="mine.txt", content=str(i)))
        obs, *_ = e.step(call("run", cmd="cat mine.txt; echo; ls"))
        steps = play(e, list(task.solution) if i % 2 == 0 else ["submit()"])
        results[i] = (obs, steps[-1][4]["outcome"])

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        for i in range(8):
            obs, outcome = results[i]
            assert f"stdout:\n{i}\n" in obs
            assert outcome is (Outcome.SUCCESS if i % 2 == 0 else Outcome.FAILURE)
    finally:
        for e in envs:
            e.close()


class _CrashingBackend(Backend):
    """A backend whose sandbox process dies (as when bwrap itself fails)."""

    name = "crashing"
    isolation = Isolation.STRONG

    def run(self, argv, **kwargs) -> ExecResult:  # type: ignore[override]
        raise SandboxError("bwrap: setting up uid map: Permission denied")


@pytest.mark.parametrize("action", [call("run", cmd="ls"), call("run_tests"), "submit()"])
def test_a_sandbox_crash_is_an_env_error(task_by_level, action: str) -> None:
    task = task_by_level["easy"]
    env = RepoFixEnv(tasks=[task], backend=_CrashingBackend())
    try:
        env.reset(seed=0, options={"task_id": task.id})
        *_, truncated, info = env.step(action)
        assert info["outcome"] is Outcome.ENV_ERROR and truncated
        assert not info["episode_valid"] and "Permission denied" in info["env_error"]["message"]
    finally:
        env.close()


def test_malformed_actions_never_raise(env, task_by_level) -> None:
    start(env, task_by_level["easy"])
    for action in ["", "read_file(", '{"name": "edit"}', "edit(path=1, old=2, new=3)", "\x00"]:
        *_, info = env.step(action)
        assert info["error"]["code"] and info["outcome"] is Outcome.CONTINUE


def test_bad_configuration_names_the_fix(task_by_level) -> None:
    with pytest.raises(ConfigError, match="expected one of"):
        RepoFixEnv(tasks=[task_by_level["easy"]], backend="bwrapp")
    with pytest.raises(ConfigError, match="unsafe=True"):
        RepoFixEnv(tasks=[task_by_level["easy"]], backend="local")
    with pytest.raises(ConfigError, match="guidance"):
        RepoFixEnv(tasks=[task_by_level["easy"]], guidance="yes")  # type: ignore[arg-type]


def test_a_changed_fixture_invalidates_stored_tasks(task_by_level) -> None:
    spec = {**task_by_level["easy"].spec, "fixture_hash": "0" * 16}
    with pytest.raises(ConfigError, match="agentgym tasks build RepoFix"):
        tasks.mutated_files(spec)


# -- the registered env and its task set ------------------------------------------------------


def test_registered_env_and_task_set() -> None:
    env = gym.make("agentgym/RepoFix-v1")
    try:
        inner = env.unwrapped
        assert isinstance(inner, RepoFixEnv)
        task_set = inner.task_set
        assert len(task_set.tasks) >= 500
        by_split: dict[str, set[str]] = {}
        for task in task_set.tasks:
            by_split.setdefault(task.split, set()).add(task.spec["repo"])
            assert task.spec["fixture_hash"] == tasks.content_hash(task.spec["repo"])
        assert by_split["ood"] == set(tasks.OOD_REPOS)
        assert by_split["train"] | by_split["test"] <= set(tasks.TRAIN_REPOS)
        obs, info = env.reset(seed=3, options={"split": "test"})
        assert info["task"]["split"] == "test" and "Bug report" in obs
    finally:
        env.close()


def test_imports_and_collects_needs_a_code_edit(env, task_by_level) -> None:
    start(env, task_by_level["easy"])
    env.step(call("write_file", path="notes.txt", content="not code"))
    *_, info = env.step(call("run_tests"))
    assert "imports_and_collects" not in info["milestones"]
    package = task_by_level["easy"].spec["sites"][0]["path"].split("/")[0]
    env.step(call("write_file", path=f"{package}/extra.py", content="X = 1\n"))
    *_, info = env.step(call("run_tests"))
    assert "imports_and_collects" in info["new_milestones"]
