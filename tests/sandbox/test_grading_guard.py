"""The grader's second line: the results plugin's guard, control canaries drawn from the
pass-to-pass tests, tolerant parsing of what the sandbox wrote, and milestones that need
a real code change (review findings on RepoFix-v1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym_envs.core import Outcome
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.redteam.sandbox import _LENIENT, _SILENCE, _speedups
from agentgym_envs.repofix import env as rf
from agentgym_envs.repofix.env import RepoFixEnv
from agentgym_envs.sandbox.backends import ExecResult, Limits
from agentgym_envs.sandbox.verify import _control_copies, _parse
from agentgym_envs.sandbox.workspace import code_of, search_output
from tests.sandbox.support import ISOLATING, ISOLATING_SLOW_DOCKER, make_isolating
from tests.sandbox.test_repofix import call, start

TEST_FILE = """import pytest
from math import floor

VALUES = [1, 2, 3]


def helper():
    return sum(VALUES)


def test_plain():
    total = helper()
    assert total == 6
    assert floor(2.5) == 2, "floor"
    assert 2 in VALUES


def test_truthy():
    assert VALUES
    assert sorted(VALUES) == [
        1,
        2,
        3,
    ]


@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x in VALUES


def test_no_direct_assert():
    for value in []:
        assert value


def test_negated():
    assert helper() > 5
"""
ALWAYS_EQUAL = """class _Liar(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def helper():
    return _Liar(sum(VALUES))"""


# -- control canaries ------------------------------------------------------------------------


def _pytest(path: Path) -> str:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        cwd=path.parent, capture_output=True, text=True,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    ).stdout  # fmt: skip


@pytest.mark.parametrize(
    ("test", "copies"), [("test_plain", 2), ("test_truthy", 1), ("test_negated", 1)]
)
def test_control_copies_of_a_passing_test_fail(tmp_path: Path, test: str, copies: int) -> None:
    # one copy per `== literal` assertion (the literal changed), else one negated copy
    path = tmp_path / "test_sample.py"
    path.write_text(TEST_FILE)
    names = _control_copies(path, test)
    assert len(names) == copies and all(n.startswith(test + "_") for n in names)
    assert path.read_text().startswith(TEST_FILE.rstrip("\n"))  # the originals are untouched
    out = _pytest(path)
    for name in names:
        assert f"FAILED test_sample.py::{name}" in out, out[-2000:]
    assert out.count("FAILED") == copies, out[-2000:]


def test_copies_catch_a_value_that_claims_to_equal_anything(tmp_path: Path) -> None:
    # A helper returning an object equal to anything: its changed-literal copy passes,
    # which is exactly what makes the grader reject the run (a canary must fail).
    path = tmp_path / "test_sample.py"
    path.write_text(TEST_FILE.replace("def helper():\n    return sum(VALUES)", ALWAYS_EQUAL))
    names = _control_copies(path, "test_plain")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(path)],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    ).stdout  # fmt: skip
    assert any(f"PASSED test_sample.py::{name}" in out for name in names), out[-2000:]


@pytest.mark.parametrize("test", ["test_param", "test_no_direct_assert", "test_missing", "x[1]"])
def test_no_control_copy_where_an_assertion_might_not_run(tmp_path: Path, test: str) -> None:
    path = tmp_path / "test_sample.py"
    path.write_text(TEST_FILE)
    assert _control_copies(path, test) == []
    assert path.read_text() == TEST_FILE


# -- results the sandbox wrote -----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        {"tests": {"t": "passed"}, "collect_errors": 5, "exitstatus": 0, "guarded": True},
        {"tests": {"t": "passed"}, "tampered": 3, "exitstatus": 0, "guarded": True},
        {"tests": ["t"], "exitstatus": 0, "guarded": True},
        {"tests": {"t": ["passed"]}, "exitstatus": 0, "guarded": True},
        {"tests": {"t": "passed"}, "exitstatus": "0", "guarded": True},
        {"tests": {"t": "passed"}, "exitstatus": 0},  # no guard ran
        [1, 2],
        "passed",
    ],
)
def test_malformed_results_are_an_invalid_run_not_an_exception(tmp_path: Path, data) -> None:
    run = _parse(json.dumps(data).encode(), ExecResult("", "", 0, False, False, 1.0, None))
    assert not run.consistent and run.problems


def test_search_output_that_is_cut_or_garbled_is_refused() -> None:
    assert search_output('{"hits": ["a:1: x"], "total": 3}') == (["a:1: x"], 3)
    assert search_output('{"error": "bad"}') == "bad"
    for text in ['{"hits": ["a:1', "", "[]", '{"hits": [1], "total": 1}', '{"hits": []}']:
        assert search_output(text) is None


# -- milestones --------------------------------------------------------------------------------


def test_code_of_ignores_comments_blank_lines_and_docstrings() -> None:
    base = "def f(x):\n    return x + 1\n"
    same = (
        '"""Module."""\n# a comment\n\ndef f(x):  # why\n    """Doc."""\n\n    return x + 1\n"x"\n'
    )
    assert code_of(same) == code_of(base)
    assert code_of("# only a comment\n") == code_of("")
    assert code_of("def f(x):\n    return x - 1\n") != code_of(base)
    assert code_of("def f(:\n") is None


# -- in each isolating backend (bubblewrap, docker) ------------------------------------------


@pytest.fixture
def easy_env(request: pytest.FixtureRequest):
    task = load_task_set("sandbox/repofix.jsonl").get("repofix-toktext-easy-test-1000004")
    env = RepoFixEnv(tasks=[task], split="test", backend=make_isolating(request.param))
    start(env, task)
    yield env, task
    env.close()


def _hidden_run(env: RepoFixEnv, controls: bool) -> rf.TestRun:
    spec = env.task.spec
    scratch = env.spaces.scratch_copy(env._template)
    try:
        rf.apply_changes(scratch, env.changes(), skip_protected=True)
        hidden = rf.tasks.repo_dir(spec["repo"]) / rf.HIDDEN_AT
        return env.runner.run(
            scratch,
            [rf.HIDDEN_AT],
            mount=(hidden, rf.HIDDEN_AT),
            controls=spec["pass_to_pass"] if controls else (),
        )
    finally:
        rf.remove_tree(scratch)


@pytest.mark.sandbox
@pytest.mark.timeout(180)
@pytest.mark.parametrize("easy_env", ISOLATING_SLOW_DOCKER, indirect=True)
def test_each_layer_alone_catches_a_hook_that_swallows_failures(easy_env) -> None:
    env, task = easy_env
    package = task.spec["repo"]
    clean = _hidden_run(env, controls=True)  # the buggy base: honest failures, no problems
    assert clean.consistent and clean.failing and not clean.tampered, clean.problems
    for action in _speedups(package, _LENIENT):
        env.step(action)
    assert env._tampering() == []  # hidden from the source scan
    guarded = _hidden_run(env, controls=False)  # the guard alone
    assert not guarded.consistent
    assert any("plugin manager" in t for t in guarded.tampered), guarded.tampered
    assert any("test function was replaced" in t for t in guarded.tampered), guarded.tampered
    # the same hook, with the guard silenced first: the canaries alone
    env.step(_speedups(package, _LENIENT.replace("for o in", _SILENCE + "for o in"))[0])
    silenced = _hidden_run(env, controls=False)
    assert silenced.consistent, "expected the guard to be silenced in this test"
    canaries = _hidden_run(env, controls=True)
    assert not canaries.consistent and "must fail" in " ".join(canaries.problems)


@pytest.mark.sandbox
@pytest.mark.timeout(120)
@pytest.mark.parametrize("easy_env", ISOLATING, indirect=True)
def test_search_keeps_its_output_within_the_cap(easy_env) -> None:
    env, _ = easy_env
    line = "x" + "\U0001f600" * 220 + "\n"
    (env.workspace / "notes.txt").write_text(line * 120)
    for limits in (Limits(), Limits(output_bytes=4000)):
        env.limits = limits
        obs, *_, info = env.step(call("search", pattern="x", path="notes.txt"))
        assert not info.get("error") and info["outcome"] is Outcome.CONTINUE, obs[:300]
        assert obs.startswith("notes.txt:1: x"), obs[:300]
