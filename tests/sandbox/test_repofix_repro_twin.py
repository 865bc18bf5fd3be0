"""RepoFix's ``reproduced_failure`` pays for behaviour, not for telling files apart, and a
write through a link to a test is refused (issue 26).

The private check reruns a failing command on the base, on its twin (same behaviour,
other text), on the fixed base and on its twin: a hash of the files or a grep for the
buggy or the fixed line fails on one twin and earns nothing. The protected-file gate
judges the file a write lands on, through symbolic and hard links.
"""

from __future__ import annotations

import ast
import io
import json
import os
import random
import shlex
import shutil
import tokenize
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentgym_envs  # noqa: F401 - registers the envs
from agentgym_envs.core import Outcome, ToolCall
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.repofix import tasks as tasks
from agentgym_envs.repofix.env import RepoFixEnv
from agentgym_envs.repofix.gates import ProtectedFileGate
from agentgym_envs.repofix.twin import twin_files, twin_source
from agentgym_envs.sandbox.backends import BubblewrapBackend, Limits
from agentgym_envs.sandbox.verify import TestRunner
from tests.sandbox.support import needs_bwrap


def sandboxed(test: Any) -> Any:
    """Marks a test that runs commands in the real bubblewrap sandbox."""
    for mark in (pytest.mark.sandbox, needs_bwrap, pytest.mark.timeout(300)):
        test = mark(test)
    return test


# easy tasks whose visible tests pass on the base: only a command can reproduce the bug
LEDGER = "repofix-ledger-easy-train-20"  # Ledger.cost_of_goods_sold: total = 0 -> 1
INTERVALS = "repofix-intervals-easy-train-14"  # ops.find: index < 0 -> index <= 0
VISIBLE_FAILS = "repofix-ledger-easy-train-19"  # a visible test fails on the base
TEST_FILE = "tests/visible/test_ledger_basic.py"


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture(scope="module")
def env() -> Iterator[RepoFixEnv]:
    e = RepoFixEnv()
    yield e
    e.close()


def start(env: RepoFixEnv, task_id: str) -> None:
    env.reset(seed=0, options={"task_id": task_id})
    assert env.task.id == task_id


def reproduced(info: dict[str, Any]) -> bool:
    return "reproduced_failure" in info["milestones"]


def site_lines(env: RepoFixEnv) -> tuple[str, str, str]:
    """The mutated file, and its buggy and its fixed line."""
    site = env.task.spec["sites"][0]
    path, index = site["path"], site["lineno"] - 1
    buggy = env._initial[path].splitlines()[index].strip()
    fixed = tasks.source_files(env.task.spec["repo"])[path].splitlines()[index].strip()
    assert buggy != fixed
    return path, buggy, fixed


# -- reproduced_failure: content distinguishers earn nothing -------------------------------


@sandboxed
@pytest.mark.parametrize("task_id", [LEDGER, INTERVALS])
def test_a_hash_of_the_code_is_not_a_reproduction(env: RepoFixEnv, task_id: str) -> None:
    start(env, task_id)
    digest = f"cat {env.task.spec['repo']}/*.py | md5sum | cut -c1-32"
    obs, *_ = env.step(call("run", cmd=digest))
    value = obs.split("stdout:\n", 1)[1].split()[0]
    assert len(value) == 32
    obs, *_, info = env.step(call("run", cmd=f'test "$({digest})" != {value}'))
    assert obs.startswith("exit code 1 ")  # it fails on the base and passes on the fix
    assert env.progress.repro_checks == 1 and not reproduced(info)


@sandboxed
@pytest.mark.parametrize("task_id", [LEDGER, INTERVALS])
@pytest.mark.parametrize("line", ["buggy", "fixed"])
def test_a_grep_for_the_buggy_or_the_fixed_line_is_not_a_reproduction(
    env: RepoFixEnv, task_id: str, line: str
) -> None:
    start(env, task_id)
    path, buggy, fixed = site_lines(env)
    if line == "buggy":  # fails while the buggy line is there: on the twin of the base it is not
        cmd = f"! grep -qF {shlex.quote(buggy)} {path}"
    else:  # fails until the fixed line is there: on the twin of the fix it never is
        cmd = f"grep -qF {shlex.quote(fixed)} {path}"
    obs, *_, info = env.step(call("run", cmd=cmd))
    assert obs.startswith("exit code 1 ")
    assert env.progress.repro_checks == 1 and not reproduced(info)


@sandboxed
@pytest.mark.parametrize(
    ("task_id", "cmd"),
    [
        (VISIBLE_FAILS, "python -m pytest tests -x -q"),
        (LEDGER, "python -c 'from ledger.book import Ledger; "
                 "assert Ledger().cost_of_goods_sold() == 0'"),
        (INTERVALS, "python -c 'from intervals import Interval, find; "
                    "assert find([Interval(0, 5)], 3) == 0'"),
    ],
)  # fmt: skip
def test_a_command_that_runs_the_buggy_code_still_reproduces(
    env: RepoFixEnv, task_id: str, cmd: str
) -> None:
    start(env, task_id)
    obs, *_, info = env.step(call("run", cmd=cmd))
    assert not obs.startswith("exit code 0 ")
    assert reproduced(info) and env.progress.repro_checks == 1


# -- protected files: a write through a link lands on the file it points at ----------------

LINKED = [
    ("write_file", "ln -s tests/visible/test_ledger_basic.py link.py", "link.py"),
    ("edit", "ln -s tests/visible/test_ledger_basic.py link.py", "link.py"),
    ("write_file", "ln -s tests t", "t/conftest.py"),
    ("edit", "ln -s tests t", "t/visible/test_ledger_basic.py"),
    ("write_file", "ln tests/visible/test_ledger_basic.py hard.py", "hard.py"),
    ("edit", "ln tests/visible/test_ledger_basic.py hard.py", "hard.py"),
]


def write_through(env: RepoFixEnv, tool: str, path: str) -> str:
    if tool == "write_file":
        return call("write_file", path=path, content="def test_nothing():\n    pass\n")
    text = (env.workspace / TEST_FILE).read_text()
    old = text.splitlines()[0]
    assert text.count(old) == 1
    return call("edit", path=path, old=old, new=old + "  # changed")


@sandboxed
@pytest.mark.parametrize(("tool", "link", "path"), LINKED)
def test_a_write_through_a_link_to_a_test_stops_the_episode(
    env: RepoFixEnv, tool: str, link: str, path: str
) -> None:
    start(env, LEDGER)
    *_, info = env.step(call("run", cmd=link))
    assert info["outcome"] is Outcome.CONTINUE  # a link inside the workspace is allowed
    before = env.changes()
    *_, terminated, _, info = env.step(write_through(env, tool, path))
    assert info["outcome"] is Outcome.SAFETY_STOP and terminated
    assert info["safety"]["gate"] == "protected_files"
    assert env.changes() == before  # the test and the conftest are untouched


@sandboxed
def test_a_write_through_a_link_to_the_code_is_allowed(env: RepoFixEnv) -> None:
    start(env, LEDGER)
    env.step(call("run", cmd="ln -s ledger/book.py book.py"))
    text = (env.workspace / "ledger" / "book.py").read_text()
    *_, info = env.step(call("write_file", path="book.py", content=text + "\n"))
    assert info["outcome"] is Outcome.CONTINUE and info["error"] == {}
    assert (env.workspace / "ledger" / "book.py").read_text() == text + "\n"


@pytest.mark.parametrize(
    ("make", "path"),
    [
        (lambda ws: os.symlink("tests/visible/test_a.py", ws / "a.py"), "a.py"),
        (lambda ws: os.symlink("tests/visible/new_test.py", ws / "a.py"), "a.py"),  # dangling
        (lambda ws: os.symlink("tests", ws / "t"), "t/conftest.py"),
        (lambda ws: os.symlink("pkg", ws / "p"), "p/conftest.py"),
        (lambda ws: os.symlink("setup.cfg", ws / "pkg" / "notes.txt"), "pkg/notes.txt"),
        (lambda ws: os.link(ws / "tests" / "visible" / "test_a.py", ws / "h.py"), "h.py"),
    ],
)
def test_the_gate_judges_the_file_a_write_lands_on(tmp_path, make, path: str) -> None:
    (tmp_path / "tests" / "visible").mkdir(parents=True)
    (tmp_path / "tests" / "visible" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text("x = 1\n")
    make(tmp_path)
    gate = ProtectedFileGate()
    space = SimpleNamespace(workspace=tmp_path)
    for tool in ("write_file", "edit"):
        verdict = gate.check(space, ToolCall(tool, {"path": path, "content": "x"}))
        assert verdict is not None and verdict.gate == "protected_files", (tool, path)
        assert verdict.mode == gate.mode


def test_the_gate_lets_a_write_through_a_link_to_the_code_pass(tmp_path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text("x = 1\n")
    os.symlink("pkg", tmp_path / "p")
    os.symlink("pkg/core.py", tmp_path / "c.py")
    os.link(tmp_path / "pkg" / "core.py", tmp_path / "h.py")
    gate, space = ProtectedFileGate(), SimpleNamespace(workspace=tmp_path)
    for path in ("p/core.py", "c.py", "h.py", "p/new.py", "../outside.py"):
        assert gate.check(space, ToolCall("write_file", {"path": path, "content": ""})) is None


# -- the twin: the same behaviour, other text ------------------------------------------------

REPOS = (*tasks.TRAIN_REPOS, *tasks.OOD_REPOS)


@pytest.fixture(scope="module")
def runner() -> Iterator[TestRunner]:
    r = TestRunner(BubblewrapBackend(), Limits(cpu_s=60))
    yield r
    r.close()


def outcomes(runner: TestRunner, work: Path, repo: str, files: Mapping[str, str]) -> dict:
    """Every test's outcome (visible and hidden) on the fixture ``repo`` with ``files``
    written over it."""
    shutil.copytree(
        tasks.repo_dir(repo), work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache")
    )
    for relative, text in files.items():
        (work / relative).write_text(text)
    run = runner.run(work, ["tests"], timeout_s=120)
    assert run.consistent and not run.collect_errors and run.outcomes, run.problems
    return run.outcomes


@sandboxed
@pytest.mark.parametrize("repo", REPOS)
def test_the_twin_of_each_fixture_repo_passes_every_test(runner, tmp_path, repo: str) -> None:
    original = tasks.source_files(repo)
    twin = twin_files(original)
    assert twin.keys() == original.keys()
    assert all(twin[p] != original[p] for p in original)
    expected = outcomes(runner, tmp_path / "code", repo, {})
    assert set(expected.values()) == {"passed"}
    assert any(t.startswith("tests/visible/") for t in expected)
    assert outcomes(runner, tmp_path / "twin", repo, twin) == expected


@sandboxed
@pytest.mark.parametrize(
    "count",
    [8, pytest.param(80, marks=[pytest.mark.slow, pytest.mark.timeout(1200)])],
    ids=lambda n: f"{n}-tasks",
)
def test_the_twin_of_a_task_base_has_its_test_outcomes(runner, tmp_path, count: int) -> None:
    every = load_task_set(RepoFixEnv.task_file).tasks
    sample = random.Random(26).sample(every, count)
    assert {t.spec["repo"] for t in sample} == set(REPOS)
    for n, task in enumerate(sample):
        repo = task.spec["repo"]
        base = {**tasks.source_files(repo), **tasks.mutated_files(task.spec)}
        expected = outcomes(runner, tmp_path / f"base{n}", repo, base)
        assert any(o != "passed" for o in expected.values()), task.id  # the bug shows
        assert outcomes(runner, tmp_path / f"twin{n}", repo, twin_files(base)) == expected, task.id


def interface(source: str) -> list[str]:
    """What callers see of a module: its global names, and its functions' and classes'
    names, parameters and docstrings."""
    tree = ast.parse(source)
    out = [name for stmt in tree.body for name in sorted(_bound(stmt))]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            args = "" if isinstance(node, ast.ClassDef) else ast.dump(node.args)
            out.append(f"{node.name}{args}{ast.get_docstring(node, clean=False)!r}")
    return out


def _bound(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {a.asname or a.name for a in stmt.names}
    return {
        n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def comments(source: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


@pytest.mark.parametrize("repo", REPOS)
def test_the_twin_of_a_fixture_renames_only_what_no_caller_sees(repo: str, caplog) -> None:
    for path, text in tasks.source_files(repo).items():
        twin = twin_source(text)
        assert twin != text and twin_source(text) == twin, path  # a pure function
        assert interface(twin) == interface(text), path
        assert not comments(twin), path
        if any(isinstance(n, ast.FunctionDef) for n in ast.walk(ast.parse(text))):
            assert "_v0" in twin, path  # variables were renamed
    assert not caplog.records  # no file was only reformatted


TRICKY = """
from __future__ import annotations
import functools

COUNT = 0

def counter():
    total = 0  # a cell, rebound by the nested function
    def bump(step=1):
        nonlocal total
        total += step
        return total
    return bump

def uses_global():
    global COUNT
    COUNT += 1
    return COUNT

def shadowing(items):
    x = 10
    squares = [x * x for x in items]
    evens = {x for x in items if x % 2 == 0}
    pairs = {k: v for k, v in zip(items, squares)}
    total = sum(y for y in items)
    nested = [[x + z for z in items if z > x] for x in items]
    return x, squares, sorted(evens), pairs, total, nested

def walrus(items):
    if any((hit := v) > 2 for v in items):
        return hit
    return None

def class_in_function(seed):
    base = seed * 2
    class Box:
        value = base
        def get(self, extra=base):
            return self.value + extra + seed
    return Box().get(), Box.value

def defaults_and_lambdas(a, *args, key=None, **kwargs):
    scale = 3
    f = lambda q, s=scale: q * s + a
    return [f(v) for v in args], key, sorted(kwargs)

def handlers(data):
    try:
        result = data["missing"]
    except KeyError as error:
        result = type(error).__name__
    try:
        return error
    except NameError:
        return result

def deleting(n):
    tmp = n + 1
    del tmp
    try:
        return tmp
    except UnboundLocalError:
        return "unbound"

def generator(n):
    for i in range(n):
        received = yield i * n
        n = received or n

async def coroutine(value):
    doubled = value * 2
    return doubled

class Base:
    def hello(self, name):
        return f"hello {name}"

class Child(Base):
    label = "child"
    def hello(self, name):
        greeting = super().hello(name)
        label = self.label
        return f"{greeting.upper()} {label} {name=}"

def matching(value):
    match value:
        case [first, *rest]:
            return first, rest
        case {"k": got, **others}:
            return got, others
        case int(n) if n > 0:
            return n
        case _:
            return None

def keyword_call(value):
    other = value * 2
    return keyword_target(value=value, other=other)

def keyword_target(value, other):
    return value - other

def decorated():
    tag = "t"
    def deco(fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            return tag + fn(*a, **k)
        return inner
    @deco
    def leaf(x: int) -> str:
        return str(x)
    return leaf(5), leaf.__name__, leaf.__qualname__

def late_binding():
    fns = [lambda: i for i in range(3)]
    later = 1
    def read():
        return later
    later = 2
    return [f() for f in fns], read()

def main():
    import asyncio
    import inspect
    bump = counter()
    bump()
    gen = generator(3)
    steps = [next(gen), gen.send(5), gen.send(None)]
    signatures = [str(inspect.signature(f)) for f in (defaults_and_lambdas, keyword_target)]
    return [
        bump(2), uses_global(), uses_global(), shadowing([1, 2, 3, 4]), walrus([1, 5]),
        class_in_function(3), defaults_and_lambdas(1, 2, 3, key="k", z=1), handlers({}),
        deleting(1), steps, asyncio.run(coroutine(4)), Child().hello("x"),
        matching([1, 2, 3]), matching({"k": 1, "j": 2}), matching(7), matching("s"),
        keyword_call(4), decorated(), late_binding(), signatures,
    ]
"""


def run_module(source: str) -> Any:
    namespace: dict[str, Any] = {"__name__": "tricky"}
    exec(compile(source, "tricky.py", "exec"), namespace)  # the test's own code
    return namespace["main"]()


def test_the_twin_behaves_as_the_code_through_closures_comprehensions_and_classes() -> None:
    twin = twin_source(TRICKY)
    assert "_v0" in twin and "nonlocal _v" in twin
    assert "first, *rest" in twin and "got" in twin  # names a match pattern binds stay
    assert "def bump(step=1)" in twin  # parameters stay (callers may name them)
    assert run_module(twin) == run_module(TRICKY)


def test_a_module_that_reads_its_variables_by_name_is_only_reformatted(caplog) -> None:
    source = "def f(a):\n    b = a + 1  # note\n    return locals()\n"
    twin = twin_source(source)
    assert twin == "def f(a):\n    b = a + 1\n    return locals()\n"
    assert run_module(twin + "def main():\n    return f(1)\n") == {"a": 1, "b": 2}


@given(st.text(max_size=200))
def test_the_twin_of_any_text_never_raises(text: str) -> None:
    twin = twin_source(text)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        assert twin == text
    else:
        assert ast.dump(ast.parse(twin)) == ast.dump(tree) or "_v" in twin
