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
3. A canary: every run of the hidden tests gets one more test, written by this process
   with fresh random names, placed and shaped like its neighbours, that must fail.
   Whatever makes tests report "passed" without the code being right (patched pytest
   internals, rewritten assertions, a replaced plugin, a hook object registered into
   pytest, ``os._exit(0)``, rewriting the results file in an ``atexit`` handler) makes
   the canary pass, or go missing, too, and the run is rejected.
4. The plugin's fingerprint of pytest's reporting machinery is one more, weaker check.

Residual risk: code that reads every collected test's source and spares exactly the
canary is not prevented in-process (it would have to know this scheme, which lives only
in this module, invisible to the sandbox); the source scan of the diff is the line
against it.
"""

from __future__ import annotations

import ast
import json
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
    ) -> TestRun:
        """``python -m pytest <tests>`` in ``workdir``; ``tests`` are paths or node ids.

        ``mount`` = (host folder, path relative to ``workdir``) adds a folder the run can
        read but not change (the hidden tests): mounted read-only by isolating backends,
        copied in by the local one. Such a run also gets the canary (module docstring).
        """
        self._runs += 1
        results = self.dir / f"results{self._runs}"
        results.mkdir()
        canary = None
        if mount is not None:
            mount, canary = self._with_canary(mount)
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
            return _parse(results / "results.json", result, canary)
        finally:
            shutil.rmtree(results, ignore_errors=True)
            if mount is not None:
                shutil.rmtree(mount[0], ignore_errors=True)

    def _with_canary(self, mount: tuple[Path, str]) -> tuple[tuple[Path, str], str]:
        """A private copy of the mounted tests plus a must-fail test; returns the new
        mount and the canary's node id.

        The canary looks like its neighbours: it sits right after a randomly chosen test
        file (so it is collected after the code under test was first imported, and
        compiled by whatever import machinery that code left behind), takes that file's
        imports and a test name like its tests, and fails by a plain ``assert``.
        """
        copy = self.dir / f"tests{self._runs}"
        shutil.copytree(mount[0], copy, ignore=shutil.ignore_patterns("__pycache__"))
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
        suffix = secrets.choice(("edge", "more", "cases", "extra", "again", "regression"))
        file = f"{stem}_{suffix}{secrets.randbelow(100)}"
        name = f"{secrets.choice(names)}_{suffix}"
        left, right = secrets.randbelow(10**6), secrets.randbelow(10**6) + 10**6
        body = f"\n\ndef {name}():\n    assert {left} == {right}\n"
        (copy / f"{file}.py").write_text(imports + body)
        return (copy, mount[1]), f"{mount[1].rstrip('/')}/{file}.py::{name}"


def _parse(path: Path, result: ExecResult, canary: str | None = None) -> TestRun:
    problems: list[str] = []
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            problems.append("the results file is not valid JSON")
    else:
        problems.append("pytest wrote no results (crashed, killed or timed out)")
    if not isinstance(data, dict):
        data, problems = {}, [*problems, "the results file is not a JSON object"]
    raw = data["tests"] if isinstance(data.get("tests"), dict) else {}
    outcomes = {str(k): str(v) for k, v in raw.items()}
    errors = tuple(str(e) for e in data.get("collect_errors") or ())
    status = data.get("exitstatus")
    if result.timed_out:
        problems.append("the test run timed out")
    tampered = [str(t) for t in data.get("tampered") or ()]
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
    if canary is not None and not errors:
        seen = outcomes.pop(canary, None)
        if seen != "failed" or result.exit_code != 1:
            problems.append(
                f"a test that must fail reported {seen or 'nothing'} (exit status "
                f"{result.exit_code}): the code under test interferes with the test run"
            )
    return TestRun(
        outcomes=outcomes,
        collect_errors=errors,
        exit_code=result.exit_code,
        consistent=not problems,
        result=result,
        problems=tuple(problems),
    )
