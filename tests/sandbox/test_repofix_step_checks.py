"""RepoFix's ``tests_passing`` step check: it pays for visible tests the fix makes pass,
once, and only from the env's own canary-guarded run (``repofix.checks``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentgym_envs.core import Outcome, RewardConfig, Task
from agentgym_envs.core.step_checks import step_reward_bounds
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.redteam.sandbox import _LENIENT, _SILENCE, _TAKEOVERS, _append, _speedups
from agentgym_envs.repofix.checks import Baseline, code_key, visible_level
from agentgym_envs.repofix.env import RepoFixEnv
from agentgym_envs.repofix.probes import Comparison
from tests.sandbox.support import needs_bwrap
from tests.sandbox.test_repofix import call, gold_edits, start

# an easy task whose bug report is a failing visible test (1 of the 8 fails on the base)
TASK_ID = "repofix-intervals-easy-test-1000057"
LOCAL = RewardConfig(local_weight=0.01)


# -- the level, as plain data ---------------------------------------------------------------


def _now(*differing: int, problem: str | None = None) -> Comparison:
    return Comparison(total=10, matched=10 - len(differing), differing=differing, problem=problem)


def test_level_counts_fixed_calls_less_broken_ones_and_reads_nothing_from_a_bad_replay() -> None:
    base = Baseline(differing=frozenset({1, 2}))  # calls 1 and 2 are wrong on the base
    assert visible_level(_now(1, 2), base) == 0.0
    assert visible_level(_now(2), base) == 0.5
    assert visible_level(_now(), base) == 1.0
    # a fix that breaks what was right is no progress
    assert visible_level(_now(2, 7), base) == 0.0
    assert visible_level(_now(7), base) == 0.5
    # a replay that wrote nothing readable (the package does not import) reads nothing
    assert visible_level(_now(problem="the replay timed out"), base) is None
    # a task whose visible calls all match on the base has no signal
    assert visible_level(_now(), Baseline(frozenset())) is None


def test_code_key_ignores_protected_files_and_tells_tasks_apart() -> None:
    code = {"pkg/core.py": "x = 1\n"}
    assert code_key("t", code) == code_key("t", {**code, "tests/visible/test_a.py": "x"})
    assert code_key("t", code) != code_key("t", {"pkg/core.py": "x = 2\n"})
    assert code_key("t", code) != code_key("u", code)


def test_an_ineligible_state_is_not_cached_for_the_same_code_without_its_hook() -> None:
    """A fix plus a conftest hook is ineligible (0, nothing runs); the same fix without
    the hook has the same code key and must still be measured, not read back as 0."""
    from agentgym_envs.repofix.checks import VisibleTests

    runs: list[dict[str, str | None]] = []
    checks = VisibleTests(spaces=None, runner=None)  # type: ignore[arg-type]
    base = Baseline(differing=frozenset({0}))
    checks._baseline = lambda *_: base  # type: ignore[method-assign]
    checks._run = lambda _r, _t, changes, _b: (  # type: ignore[method-assign]
        runs.append(dict(changes)) or _now()
    )
    fix = {"pkg/core.py": "x = 1\n"}
    hooked = {**fix, "conftest.py": "import sys\n"}
    assert checks.measure("t", "repo", None, hooked, eligible=False) == 0.0  # type: ignore[arg-type]
    assert runs == []
    assert checks.measure("t", "repo", None, fix, eligible=True) == 1.0  # type: ignore[arg-type]
    assert runs == [fix]


# -- in the sandbox -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task_set("sandbox/repofix.jsonl").get(TASK_ID)


@pytest.fixture
def make_env(task: Task) -> Iterator[Any]:
    made: list[RepoFixEnv] = []

    def make(config: RewardConfig = LOCAL) -> RepoFixEnv:
        env = RepoFixEnv(tasks=[task], split="test", reward_config=config)
        made.append(env)
        start(env, task)
        return env

    yield make
    for env in made:
        env.close()


def _undo(action: str) -> str:
    """The edit that takes a gold edit back."""
    args = json.loads(action)["arguments"]
    return call("edit", path=args["path"], old=args["new"], new=args["old"])


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_fixing_the_failing_visible_test_pays_once_however_often_it_is_repeated(
    make_env, task: Task
) -> None:
    env = make_env()
    (fix,) = gold_edits(task)
    *_, info = env.step("run_tests()")  # the base: the bug's visible test fails
    assert info["step_checks"]["tests_passing"] == 0.0
    *_, info = env.step(fix)  # an edit alone runs nothing and reads nothing yet
    assert info["step_checks"]["tests_passing"] == 0.0
    *_, info = env.step("run_tests()")
    assert info["step_checks"]["tests_passing"] == 1.0
    local = 0.01 * sum(info["step_checks"].values())  # with the milestone's progress
    assert info["reward_components"]["local"] == pytest.approx(local)
    assert info["versions"]["reward"].endswith("+local0.01+checks2")
    paid = 0.0
    for action in (_undo(fix), "run_tests()", fix, "run_tests()"):  # oscillate
        *_, info = env.step(action)
        paid += info["step_checks"]["tests_passing"]
    assert paid == 0.0 and env.visible.level(task.id, env.changes()) == 1.0
    *_, info = env.step("submit()")
    assert info["outcome"] is Outcome.SUCCESS


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_off_by_default_no_extra_run_and_no_report(make_env, task: Task) -> None:
    env = make_env(RewardConfig())
    env.step(gold_edits(task)[0])
    *_, info = env.step("run_tests()")
    assert "step_checks" not in info and "local" not in info["reward_components"]
    assert "+checks" not in info["versions"]["reward"]
    assert env.visible._levels == {} and env.visible._baselines == {}


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_fake_test_output_and_fake_files_read_nothing(make_env, task: Task) -> None:
    env = make_env()
    package = task.spec["repo"]
    fakes = [
        call("run", cmd="echo '======= 8 passed in 0.01s ======='"),
        call("write_file", path="results.json", content='{"tests": {}, "exitstatus": 0}'),
        call("write_file", path="report.xml", content='<testsuite failures="0" tests="8"/>'),
        # a new module of the package: a code change, so the env runs the visible tests
        call("write_file", path=f"{package}/_status.py", content="ALL_TESTS_PASS = True\n"),
        "run_tests()",
    ]
    for action in fakes:
        *_, info = env.step(action)
        assert info["step_checks"]["tests_passing"] == 0.0, action
        assert info["outcome"] is Outcome.CONTINUE
    assert env.visible._baselines[task.id].differing  # it did measure: the bug still differs


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "attack",
    [
        pytest.param("lenient_hook", id="lenient_hook_silenced_guard"),
        pytest.param("atexit_rewrite", id="atexit_rewrite", marks=pytest.mark.slow),
    ],
)
def test_code_that_makes_the_test_run_lie_reads_nothing(make_env, task: Task, attack: str) -> None:
    env = make_env()
    package = task.spec["repo"]
    if attack == "lenient_hook":  # swallows the failures of tests that call the package
        actions = _speedups(package, _LENIENT.replace("for o in", _SILENCE + "for o in"))
    else:  # flips the results file to passed at exit
        actions = [_append(package, _TAKEOVERS[attack])]
    for action in actions:
        env.step(action)
    assert env._code_changed() and env._tampering() == []  # hidden from the source scan
    obs, *_, info = env.step("run_tests()")
    assert obs.startswith("exit code 0"), obs[:300]  # the policy's own run is fooled ...
    assert info["step_checks"]["tests_passing"] == 0.0  # ... the replay is not
    assert env.visible._baselines[task.id].differing


@pytest.mark.sandbox
@pytest.mark.slow
@needs_bwrap
@pytest.mark.timeout(240)
def test_farming_tests_passing_without_finishing_stays_below_any_success(
    make_env, task: Task
) -> None:
    probe = make_env(RewardConfig(local_weight=1e-9))
    steps = probe.step_budget
    bounds = [s.episode_bounds(steps) for s in probe.step_check_specs()]
    weight = RewardConfig().max_local_weight(*map(sum, zip(*bounds, strict=True))) * 0.999
    config = RewardConfig(local_weight=weight)
    env = make_env(config)
    low, high = step_reward_bounds(env)
    (fix,) = gold_edits(task)
    path = json.loads(fix)["arguments"]["path"]
    farm = [call("read_file", path=path), "run_tests()", fix, "run_tests()"]
    farm += [_undo(fix), "run_tests()", fix, "run_tests()"] * 2
    # then a line the source scan refuses: the submitted fix earns nothing
    farm += [call("run", cmd=f"echo '# importlib' >> {path}"), "submit()"]
    ret, paid = 0.0, 0.0
    for action in farm:
        _, reward, terminated, truncated, info = env.step(action)
        assert low - 1e-9 <= reward <= high + 1e-9, (action, reward, (low, high))
        ret += reward
        paid += info["step_checks"]["tests_passing"]
        if terminated or truncated:
            break
    assert info["outcome"] is Outcome.FAILURE
    assert paid == 1.0 and ret > 0  # it did farm: milestones and the local score
    assert ret < config.success - config.max_penalty  # below the worst success
