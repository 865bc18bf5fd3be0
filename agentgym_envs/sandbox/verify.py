"""Running a repository's tests in the sandbox and reading structured results.

Threat model. The code under test is hostile and runs inside the test process: it can
execute any Python there, at import time or from a test. Nothing inside that process
can be trusted to stay intact, so grading rests on what the code cannot reach:

1. No workspace file becomes part of the grader. pytest runs from the sandbox runtime
   (:mod:`runtime`), read-only and outside the workspace, as ``python -P -s -B -m
   pytest``: the workspace is not on ``sys.path`` when pytest and the results plugin
   (loaded by name from the runtime's ``site-packages``) are imported, no user site,
   ``sitecustomize`` or ``.pth`` of the workspace runs, and the workspace enters
   ``sys.path`` only through the task's own ``pythonpath`` setting afterwards. pytest's
   configuration is pinned (``-c`` the repository's ``pyproject.toml``, which the agent
   may not change) so no new config file is ever discovered.
2. The verdict is taken by this process, which the workspace code never runs in, from
   the results file *and* the process's exit status, which must agree.
3. Canaries: every run of the hidden tests gets more tests, written by this process with
   fresh random names, placed and shaped like their neighbours, that must fail: one
   that asserts constants, and copies of pass-to-pass tests (``controls``), which call
   the code under test, with one assertion negated, so they fail on correct and on
   buggy code alike. Whatever makes tests report "passed" without the code being right
   (patched pytest internals, rewritten assertions, a replaced plugin, a hook object
   registered into pytest that swallows the failures of tests calling the package,
   ``os._exit(0)``, rewriting the results file in an ``atexit`` handler) makes a
   canary pass, or go missing, too, and the run is rejected.
4. The plugin's guard (its module docstring: a fingerprint of pytest's machinery, the
   plugin manager's registry taken before collection, each test's function) is one
   more, weaker check; a run it did not see through to the end has no results.

Residual risk: code that reads every collected test's source and spares exactly the
canary is not prevented in-process (it would have to know this scheme, which lives only
in this module, invisible to the sandbox); the source scan of the diff is the line
against it.
"""

from __future__ import annotations

import ast
import json
import random
import secrets
import shutil
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.scratch import owned_dir
from agentgym_envs.sandbox.backends import SANDBOX_WORKSPACE, Backend, ExecResult, Isolation, Limits
from agentgym_envs.sandbox.runtime import PLUGIN
from agentgym_envs.sandbox.workspace import AST_LOCK

SANDBOX_RESULTS_DIR = "/agentgym/results"


@dataclass(frozen=True)
class TestRun:
    """Outcomes of one pytest run (node id -> passed/failed/skipped/error)."""

    __test__ = False  # not a pytest test class

    outcomes: dict[str, str]
    collect_errors: tuple[str, ...]
    exit_code: int
    consistent: bool  # the results file exists and agrees with the exit code
    result: ExecResult
    problems: tuple[str, ...] = field(default=())
    tampered: tuple[str, ...] = field(default=())  # what the results plugin saw changed

    def passed(self, test: str) -> bool:
        return self.outcomes.get(test) == "passed"

    @property
    def failing(self) -> list[str]:
        return sorted(t for t, o in self.outcomes.items() if o in ("failed", "error"))


class TestRunner:
    """Runs pytest through a backend with the results plugin mounted read-only."""

    __test__ = False  # not a pytest test class

    def __init__(self, backend: Backend, limits: Limits | None = None) -> None:
        self.backend = backend
        self.limits = limits or Limits()
        self.dir = owned_dir("verify")  # named after this process: reaped if it is killed
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, True)
        self._runs = 0

    def close(self) -> None:
        self._cleanup()

    def run(
        self,
        workdir: Path,
        tests: Sequence[str],
        *,
        timeout_s: float = 60.0,
        extra: Sequence[str] = (),
        mount: tuple[Path, str] | None = None,
        controls: Sequence[str] = (),
    ) -> TestRun:
        """``python -m pytest <tests>`` in ``workdir``; ``tests`` are paths or node ids.

        ``mount`` = (host folder, path relative to ``workdir``) adds a folder the run can
        read but not change (the hidden tests): mounted read-only by isolating backends,
        copied in by the local one. Such a run also gets the canaries (module docstring),
        some of them copies of ``controls``: node ids of mounted tests that pass on the
        correct code and the buggy code alike.
        """
        self._runs += 1
        results = self.dir / f"results{self._runs}"
        results.mkdir()
        canaries: list[str] | None = None
        if mount is not None:
            mount, canaries = self._with_canaries(mount, controls)
        isolated = self.backend.isolation is not Isolation.NONE
        results_dir = SANDBOX_RESULTS_DIR if isolated else str(results)
        env = {
            "AGENTGYM_RESULTS": f"{results_dir}/results.json",
            # only our plugin: installed pytest plugins would slow every run 3x and could
            # change what a test run means
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        config = "pyproject.toml" if (workdir / "pyproject.toml").is_file() else "/dev/null"
        argv = [
            self.backend.python, "-P", "-s", "-B", "-m", "pytest", "-q", "-p", PLUGIN,
            "-p", "no:cacheprovider", "-c", config, "--rootdir", ".", "-o", "addopts=",
            "--color=no", *extra, *tests,
        ]  # fmt: skip
        kwargs: dict[str, Any] = {}
        if isolated:
            ro_binds = {}
            if mount is not None:
                (workdir / mount[1]).mkdir(parents=True, exist_ok=True)  # the mount point
                ro_binds[mount[0]] = f"{SANDBOX_WORKSPACE}/{mount[1]}"
            kwargs = {"ro_binds": ro_binds, "rw_binds": {results: SANDBOX_RESULTS_DIR}}
        elif mount is not None:
            shutil.copytree(mount[0], workdir / mount[1], dirs_exist_ok=True)
        try:
            result = self.backend.run(
                argv, workspace=workdir, timeout_s=timeout_s, limits=self.limits, env=env, **kwargs
            )
            return _parse(results / "results.json", result, canaries)
        finally:
            shutil.rmtree(results, ignore_errors=True)
            if mount is not None:
                shutil.rmtree(mount[0], ignore_errors=True)

    def _with_canaries(
        self, mount: tuple[Path, str], controls: Sequence[str]
    ) -> tuple[tuple[Path, str], list[str]]:
        """A private copy of the mounted tests plus must-fail tests; returns the new mount
        and the canaries' node ids.

        The constant canary looks like its neighbours: it sits right after a randomly
        chosen test file (so it is collected after the code under test was first
        imported, and compiled by whatever import machinery that code left behind), takes
        that file's imports and a test name like its tests, and fails by a plain
        ``assert``. The control canaries are appended to their tests' own files
        (:func:`_negated_copy`).
        """
        copy = self.dir / f"tests{self._runs}"
        shutil.copytree(mount[0], copy, ignore=shutil.ignore_patterns("__pycache__"))
        with AST_LOCK:
            return (copy, mount[1]), _write_canaries(copy, mount[1].rstrip("/"), controls)


def _write_canaries(copy: Path, prefix: str, controls: Sequence[str]) -> list[str]:
    """Write the canaries into the tests' copy ``copy``; their node ids."""
    files = sorted(copy.glob("test_*.py"))
    imports, names, stem = "", ["test_case"], "test_checks"
    if files:
        neighbour = files[secrets.randbelow(len(files))]
        tree = ast.parse(neighbour.read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        imports = "".join(ast.unparse(n) + "\n" for n in top)
        found = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        names = [n for n in found if n.startswith("test_")] or names
        stem = neighbour.stem
    suffix = secrets.choice(_SUFFIXES)
    file = f"{stem}_{suffix}{secrets.randbelow(100)}"
    name = f"{secrets.choice(names)}_{suffix}"
    left, right = secrets.randbelow(10**6), secrets.randbelow(10**6) + 10**6
    body = f"\n\ndef {name}():\n    assert {left} == {right}\n"
    (copy / f"{file}.py").write_text(imports + body)
    canaries = [f"{prefix}/{file}.py::{name}"]
    pool = list(controls)
    _RANDOM.shuffle(pool)
    used: set[str] = set()
    for control in pool:
        if len(canaries) > CONTROL_CANARIES:
            break
        relative, _, test = control.partition("::")
        if not relative.startswith(prefix + "/") or relative in used:
            continue  # one per file, spread over the files
        target = copy / relative[len(prefix) + 1 :]
        made = _negated_copy(target, test) if target.is_file() else None
        if made is not None:
            used.add(relative)
            canaries.append(f"{relative}::{made}")
    return canaries


CONTROL_CANARIES = 2  # copies of pass-to-pass tests per run, besides the constant canary
_SUFFIXES = ("edge", "more", "cases", "extra", "again", "regression")
_RANDOM = random.SystemRandom()
# ``not (a == b)`` read as its neighbours would write it; ``not in``/``is not`` are the
# exact negations, and ``!=`` is for every type the tests compare
_NEGATED = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is}  # fmt: skip


def _negated_copy(path: Path, test: str) -> str | None:
    """Append to ``path`` a copy of its test function ``test`` under a new name, with one
    assertion negated: a test that passes on correct and buggy code makes a copy that
    fails on both. Returns the copy's name, or None when ``test`` is no plain function
    (parametrized, decorated, in a class) or has no assertion that surely runs (a
    statement of the function's own body, before any ``return``)."""
    if not test.isidentifier():
        return None
    text = path.read_text()
    tree = ast.parse(text)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test]
    if len(funcs) != 1 or funcs[0].decorator_list:
        return None
    func = funcs[0]
    asserts = []
    for statement in func.body:
        if isinstance(statement, ast.Return):
            break
        if isinstance(statement, ast.Assert):
            asserts.append(statement)
    if not asserts:
        return None
    target = asserts[_RANDOM.randrange(len(asserts))]
    check = target.test
    if isinstance(check, ast.Compare) and len(check.ops) == 1 and type(check.ops[0]) in _NEGATED:
        negated: ast.expr = ast.Compare(
            check.left, [_NEGATED[type(check.ops[0])]()], check.comparators
        )
    else:
        negated = ast.UnaryOp(ast.Not(), check)
    taken = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    name = f"{test}_{_RANDOM.choice(_SUFFIXES)}"
    while name in taken:
        name += str(_RANDOM.randrange(10))
    lines = text.splitlines()
    assert func.end_lineno is not None and target.end_lineno is not None
    head = lines[func.lineno - 1 : target.lineno - 1]
    head[0] = head[0].replace(f"def {test}(", f"def {name}(", 1)
    indent = " " * target.col_offset
    message = f", {ast.unparse(target.msg)}" if target.msg is not None else ""
    body = [*head, f"{indent}assert {ast.unparse(negated)}{message}"]
    body += lines[target.end_lineno : func.end_lineno]
    copy = text.rstrip("\n") + "\n\n\n" + "\n".join(body) + "\n"
    try:
        ast.parse(copy)
    except SyntaxError:
        return None
    path.write_text(copy)
    return name


_MAX_RESULTS_BYTES = 8 * 2**20


def _strings(value: Any) -> tuple[str, ...] | None:
    """``value`` as a tuple of strings if it is a list of them (or missing), else None."""
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _parse(path: Path, result: ExecResult, canaries: Sequence[str] | None = None) -> TestRun:
    """Read the results file written in the sandbox. It may have been written by the
    code under test: anything malformed is a problem of the run, never an exception."""
    problems: list[str] = []
    data: Any = {}
    if path.is_file() and not path.is_symlink():
        try:
            if path.stat().st_size > _MAX_RESULTS_BYTES:
                raise ValueError("too large")
            data = json.loads(path.read_text())
        except (ValueError, OSError):
            problems.append("the results file is not valid JSON")
    else:
        problems.append("pytest wrote no results (crashed, killed or timed out)")
    if not isinstance(data, dict):
        data, problems = {}, [*problems, "the results file is not a JSON object"]
    raw = data.get("tests")
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raw = {}
        if data:
            problems.append("the results file has no valid test outcomes")
    outcomes = {str(k): str(v) for k, v in raw.items()}
    errors, tampered = _strings(data.get("collect_errors")), _strings(data.get("tampered"))
    if errors is None or tampered is None:
        problems.append("the results file is malformed")
    errors, tampered = errors or (), tampered or ()
    status = data.get("exitstatus")
    if not isinstance(status, int | None) or isinstance(status, bool):
        problems.append("the results file is malformed")
        status = None
    if data and data.get("guarded") is not True:
        problems.append("the results plugin did not guard the run")
    if result.timed_out:
        problems.append("the test run timed out")
    if tampered:
        problems.append("the code under test patched pytest: " + ", ".join(tampered[:5]))
    if status is not None and status != result.exit_code:
        problems.append(
            f"pytest's exit status {status} differs from the process's {result.exit_code}"
        )
    bad = any(o in ("failed", "error") for o in outcomes.values()) or errors
    if status == 0 and bad:
        problems.append("exit status 0 although tests failed")
    if status not in (None, 0) and not bad and status != 5:
        problems.append(f"exit status {status} although every test passed")
    if canaries is not None and not errors:
        for canary in canaries:
            seen = outcomes.pop(canary, None)
            if seen != "failed" or result.exit_code != 1:
                problems.append(
                    f"a test that must fail reported {seen or 'nothing'} (exit status "
                    f"{result.exit_code}): the code under test interferes with the test run"
                )
                break
    return TestRun(
        outcomes=outcomes,
        collect_errors=errors,
        exit_code=result.exit_code,
        consistent=not problems,
        result=result,
        problems=tuple(problems),
        tampered=tuple(tampered),
    )


def grade(
    run: TestRun, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> tuple[bool, str]:
    """Success needs a consistent run with no collection error and every fail-to-pass and
    pass-to-pass test passing (a missing, skipped or erroring test is a failure)."""
    if not run.consistent:
        return False, "the test run was not valid: " + "; ".join(run.problems)
    if run.collect_errors:
        return False, "tests failed to collect: " + ", ".join(run.collect_errors)
    if not run.outcomes:
        return False, "no test ran"
    missing = [t for t in [*fail_to_pass, *pass_to_pass] if not run.passed(t)]
    if missing:
        shown = ", ".join(missing[:10])
        return False, f"{len(missing)} hidden test(s) do not pass: {shown}"
    return True, "all hidden tests pass"
