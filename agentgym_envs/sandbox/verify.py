"""Running a repository's tests in the sandbox and reading structured results.

Threat model. The code under test is hostile and runs inside the test process: it can
execute any Python there, at import time or from a test (swap the ``__code__`` of
pytest's hooks, say, which keeps every id this module's guard compares). Nothing inside
that process can be trusted to stay intact. So RepoFix's verdict is not taken from a test
run at all: it is a comparison of plain data made outside the sandbox (:mod:`probes`).
The test run here is required as well (regressions the observed calls do not cover), and
is made as hard to forge as it can be, which is defence in depth, not the verdict:

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
   fresh random names, placed and shaped like their neighbours, that must fail on correct
   code: one that asserts constants, and copies of the hidden tests (``controls``), which
   call the code under test: one per ``x == <literal>`` assertion with the literal
   changed to another value of its type, or, for a test without one, a copy with one
   assertion negated. Whatever makes tests report "passed" without the code being right
   (patched pytest internals, rewritten assertions, a replaced plugin, a hook object
   registered into pytest that swallows the failures of tests calling the package,
   results that claim to equal anything, ``os._exit(0)``, rewriting the results file in
   an ``atexit`` handler) makes a canary pass, or go missing, too, and the run is
   rejected. (A copy of a fail-to-pass test may pass on the buggy code; that only
   rejects a run that fails anyway.)
4. The plugin's guard (its module docstring: a fingerprint of pytest's machinery, the
   plugin manager's registry taken before collection, each test's function) is one
   more, weaker check; a run it did not see through to the end has no results.

Residual risk: code that reads every collected test's source and spares exactly the
canaries (by this scheme's names or shapes) makes a run pass here; it still has to
return the correct values for every observed call (:mod:`probes`) to succeed.
"""

from __future__ import annotations

import ast
import json
import math
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
    # node id -> its parameters as text, when the run was asked for them (AGENTGYM_PARAMS)
    params: dict[str, str] = field(default_factory=dict)
    # with params: the node ids whose parameters came from a set (named by position in
    # an order that can differ from one process to the next)
    unordered: tuple[str, ...] = field(default=())

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
        env: dict[str, str] | None = None,
    ) -> TestRun:
        """``python -m pytest <tests>`` in ``workdir``; ``tests`` are paths or node ids.

        ``mount`` = (host folder, path relative to ``workdir``) adds a folder the run can
        read but not change (the hidden tests): mounted read-only by isolating backends,
        copied in by the local one. Such a run also gets the canaries (module docstring),
        most of them copies of ``controls``: node ids of mounted tests that pass on the
        correct code. ``env`` adds environment variables.
        """
        canaries: list[str] | None = None
        if mount is not None:
            mount, canaries = self._with_canaries(mount, controls)
        config = "pyproject.toml" if (workdir / "pyproject.toml").is_file() else "/dev/null"
        argv = [
            "-m", "pytest", "-q", "-p", PLUGIN, "-p", "no:cacheprovider", "-c", config,
            "--rootdir", ".", "-o", "addopts=", "--color=no", *extra, *tests,
        ]  # fmt: skip
        # only our plugins: installed pytest plugins would slow every run 3x and could
        # change what a test run means
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})}
        try:
            result, files = self.python(
                workdir, argv, timeout_s=timeout_s, env=env, mount=mount, read=("results.json",)
            )
            return _parse(files["results.json"], result, canaries)
        finally:
            if mount is not None:
                shutil.rmtree(mount[0], ignore_errors=True)

    def python(
        self,
        workdir: Path,
        argv: Sequence[str],
        *,
        timeout_s: float,
        env: dict[str, str] | None = None,
        mount: tuple[Path, str] | None = None,
        stdin: str | None = None,
        read: Sequence[str] = (),
    ) -> tuple[ExecResult, dict[str, bytes | None]]:
        """``python -P -s -B <argv>`` in ``workdir`` with a private results folder
        (``$AGENTGYM_RESULTS_DIR``, and ``$AGENTGYM_RESULTS`` its ``results.json``) that
        only this call sees; returns the result and the contents of the files ``read``
        from that folder (None: missing, not a plain file or over 64 MiB)."""
        self._runs += 1
        results = self.dir / f"results{self._runs}"
        results.mkdir()
        isolated = self.backend.isolation is not Isolation.NONE
        results_dir = SANDBOX_RESULTS_DIR if isolated else str(results)
        full_env = {
            **(env or {}),
            "AGENTGYM_RESULTS": f"{results_dir}/results.json",
            "AGENTGYM_RESULTS_DIR": results_dir,
        }
        kwargs: dict[str, Any] = {}
        if isolated:
            ro_binds = {}
            if mount is not None:
                (workdir / mount[1]).mkdir(parents=True, exist_ok=True)  # the mount point
                ro_binds[mount[0]] = f"{SANDBOX_WORKSPACE}/{mount[1]}"
            kwargs = {"ro_binds": ro_binds, "rw_binds": {results: SANDBOX_RESULTS_DIR}}
        elif mount is not None:
            shutil.copytree(mount[0], workdir / mount[1], dirs_exist_ok=True)
        if stdin is not None:
            kwargs["stdin"] = stdin
        try:
            result = self.backend.run(
                [self.backend.python, "-P", "-s", "-B", *argv],
                workspace=workdir,
                timeout_s=timeout_s,
                limits=self.limits,
                env=full_env,
                **kwargs,
            )
            return result, {name: _read_file(results / name) for name in read}
        finally:
            shutil.rmtree(results, ignore_errors=True)

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
        (:func:`_control_copies`).
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
    for control in controls:
        relative, _, test = control.partition("::")
        if not relative.startswith(prefix + "/"):
            continue
        target = copy / relative[len(prefix) + 1 :]
        if target.is_file():
            canaries += [f"{relative}::{made}" for made in _control_copies(target, test)]
    return canaries


_SUFFIXES = ("edge", "more", "cases", "extra", "again", "regression")
_RANDOM = random.SystemRandom()
# ``not (a == b)`` read as its neighbours would write it; ``not in``/``is not`` are the
# exact negations, and ``!=`` is for every type the tests compare
_NEGATED = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is}  # fmt: skip


def _control_copies(path: Path, test: str) -> list[str]:
    """Append to ``path`` must-fail copies of its test function ``test`` under new names;
    returns their names. Each assertion ``x == <literal>`` that surely runs (a statement
    of the function's own body, before any ``return``) gives a copy expecting another
    value of the same type: correct code fails it, and so does an object that claims to
    equal anything. A test without one gives a copy with one assertion negated, which a
    hook that swallows failures makes pass. Copies of tests that fail on the buggy code
    may pass there, which only rejects a run that fails anyway. Parametrized, decorated
    or class tests give none."""
    if not test.isidentifier():
        return []
    text = path.read_text()
    tree = ast.parse(text)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test]
    if len(funcs) != 1 or funcs[0].decorator_list:
        return []
    func = funcs[0]
    asserts = []
    for statement in func.body:
        if isinstance(statement, ast.Return):
            break
        if isinstance(statement, ast.Assert):
            asserts.append(statement)
    changed = [(a, e) for a in asserts if (e := _perturbed(a.test)) is not None]
    if not changed and asserts:
        target = _RANDOM.choice(asserts)
        changed = [(target, _negated(target.test))]
    taken = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    lines = text.splitlines()
    bodies, names = [], []
    for target, check in changed:
        name = f"{test}_{_RANDOM.choice(_SUFFIXES)}"
        while name in taken:
            name += str(_RANDOM.randrange(10))
        taken.add(name)
        assert func.end_lineno is not None and target.end_lineno is not None
        head = lines[func.lineno - 1 : target.lineno - 1]
        head[0] = head[0].replace(f"def {test}(", f"def {name}(", 1)
        indent = " " * target.col_offset
        message = f", {ast.unparse(target.msg)}" if target.msg is not None else ""
        body = [*head, f"{indent}assert {ast.unparse(check)}{message}"]
        bodies.append("\n".join(body + lines[target.end_lineno : func.end_lineno]))
        names.append(name)
    if not bodies:
        return []
    copy = text.rstrip("\n") + "\n\n\n" + "\n\n\n".join(bodies) + "\n"
    try:
        ast.parse(copy)
    except SyntaxError:
        return []
    path.write_text(copy)
    return names


def _negated(check: ast.expr) -> ast.expr:
    """The assertion's test negated as its neighbours would write it."""
    if isinstance(check, ast.Compare) and len(check.ops) == 1 and type(check.ops[0]) in _NEGATED:
        return ast.Compare(check.left, [_NEGATED[type(check.ops[0])]()], check.comparators)
    return ast.UnaryOp(ast.Not(), check)


def _perturbed(check: ast.expr) -> ast.expr | None:
    """``left == <literal>`` (either side) with the literal replaced by a different value
    of the same type, or None when the assertion is no such comparison."""
    if not (isinstance(check, ast.Compare) and len(check.ops) == 1):
        return None
    if not isinstance(check.ops[0], ast.Eq):
        return None
    left, right = check.left, check.comparators[0]
    for side, other in ((right, left), (left, right)):
        try:
            value = ast.literal_eval(side)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        changed = _other_value(value)
        if changed is None:
            continue
        literal = ast.parse(repr(changed), mode="eval").body
        pair = (other, literal) if side is right else (literal, other)
        return ast.Compare(pair[0], [ast.Eq()], [pair[1]])
    return None


def _other_value(value: Any) -> Any:
    """A value of ``value``'s type that is not equal to it (None if there is none)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):  # a finite value that is surely different (no NaN, inf)
        changed = value + 1.0 if abs(value) < 2**52 else value / 2
        return changed if math.isfinite(changed) and changed != value else None
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, bytes):
        return value + b"x"
    if isinstance(value, list):
        return value[:-1] if value else [0]
    if isinstance(value, tuple):
        return value[:-1] if value else (0,)
    if isinstance(value, dict):
        return dict(list(value.items())[:-1]) if value else {0: 0}
    return None


_MAX_RESULTS_BYTES = 64 * 2**20


def _strings(value: Any) -> tuple[str, ...] | None:
    """``value`` as a tuple of strings if it is a list of them (or missing), else None."""
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _read_file(path: Path) -> bytes | None:
    """A results file's bytes; None when it is missing, not a plain file or too large (the
    code under test may have written it)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAX_RESULTS_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _parse(
    raw_file: bytes | None, result: ExecResult, canaries: Sequence[str] | None = None
) -> TestRun:
    """Read the results file written in the sandbox. It may have been written by the
    code under test: anything malformed is a problem of the run, never an exception."""
    problems: list[str] = []
    data: Any = {}
    if raw_file is not None:
        try:
            data = json.loads(raw_file)
        except (ValueError, RecursionError):
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
        params=_params(data.get("params")),
        unordered=_strings(data.get("unordered")) or (),
    )


def _params(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, str)}


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
