"""Running a repository's tests in the sandbox and reading structured results.

Grading never trusts the console: pytest runs with :mod:`results_plugin`, which writes
each test's outcome to a folder outside the workspace, and the run counts only when that
file exists and agrees with pytest's exit code.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.sandbox import results_plugin
from agentgym_envs.sandbox.backends import SANDBOX_WORKSPACE, Backend, ExecResult, Isolation, Limits

PLUGIN = "agentgym_results"
SANDBOX_PLUGIN_DIR = "/agentgym/plugin"
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
        self.dir = Path(tempfile.mkdtemp(prefix="agentgym-verify-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, True)
        self.plugin_dir = self.dir / "plugin"
        self.plugin_dir.mkdir()
        shutil.copy(results_plugin.__file__, self.plugin_dir / f"{PLUGIN}.py")
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
        copied in by the local one.
        """
        self._runs += 1
        results = self.dir / f"results{self._runs}"
        results.mkdir()
        isolated = self.backend.isolation is not Isolation.NONE
        plugin_dir = SANDBOX_PLUGIN_DIR if isolated else str(self.plugin_dir)
        results_dir = SANDBOX_RESULTS_DIR if isolated else str(results)
        env = {
            "PYTHONPATH": plugin_dir,
            "AGENTGYM_RESULTS": f"{results_dir}/results.json",
            "PYTHONDONTWRITEBYTECODE": "1",
            # only our plugin: installed pytest plugins would slow every run 3x and could
            # change what a test run means
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        argv = [
            sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, "-p", "no:cacheprovider",
            "-o", "addopts=", "--color=no", *extra, *tests,
        ]  # fmt: skip
        kwargs: dict[str, Any] = {}
        if isolated:
            ro_binds = {self.plugin_dir: SANDBOX_PLUGIN_DIR}
            if mount is not None:
                (workdir / mount[1]).mkdir(parents=True, exist_ok=True)  # the mount point
                ro_binds[mount[0]] = f"{SANDBOX_WORKSPACE}/{mount[1]}"
            kwargs = {"ro_binds": ro_binds, "rw_binds": {results: SANDBOX_RESULTS_DIR}}
        elif mount is not None:
            shutil.copytree(mount[0], workdir / mount[1], dirs_exist_ok=True)
        result = self.backend.run(
            argv, workspace=workdir, timeout_s=timeout_s, limits=self.limits, env=env, **kwargs
        )
        try:
            return _parse(results / "results.json", result)
        finally:
            shutil.rmtree(results, ignore_errors=True)


def _parse(path: Path, result: ExecResult) -> TestRun:
    problems: list[str] = []
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            problems.append("the results file is not valid JSON")
    else:
        problems.append("pytest wrote no results (crashed, killed or timed out)")
    outcomes = {str(k): str(v) for k, v in (data.get("tests") or {}).items()}
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
    return TestRun(
        outcomes=outcomes,
        collect_errors=errors,
        exit_code=result.exit_code,
        consistent=not problems,
        result=result,
        problems=tuple(problems),
    )
