"""RepoFix's step checks (issue 18): how far the fix has got, read from test runs the env
makes itself.

``tests_passing`` (``PROGRESS``) is the share of the task's *visible* tests that failed on
the task's base and pass now, less those that passed on the base and fail now:
``max(0, (fixed - broken) / failing_on_base)``. It is measured only when the policy
calls ``run_tests`` (a test run it pays for anyway) on a code state not measured before,
and never from anything the policy wrote:

* the outcomes come from a run the env makes on a fresh copy of the task's base with the
  workspace diff applied (protected files left out), as ``submit`` does, with the visible
  tests mounted read-only from the fixture and the grader's canaries (``verify``): a
  constant must-fail test and must-fail copies of the visible tests that pass on the base.
  Patched pytest internals, hooks that swallow failures and rewritten results make a
  canary pass or go missing, and the run then reads nothing;
* the policy's own ``run_tests`` output, files it writes (fake results, fake test
  reports) and ``run`` commands are never read; a diff that reaches into the test runner
  (``RepoFixEnv``'s source scan) or changes no code reads 0 without a run;
* the base's outcomes (``failing_on_base``) come from one run of the env's own code per
  task, so doing nothing, or only what the base already passed, is worth 0.

The hidden tests never run for this check (they run once, at ``submit``). Cost: one
extra visible run per new code state the policy tests (about a second in bubblewrap) and
one per task, only with ``local_weight > 0``. A task whose visible tests all pass on the
base (the bug report is a symptom only) has no signal here: the check reads 0.

Residual risk: the visible tests are visible, so code that special-cases their inputs
passes them without fixing the bug; that earns at most this check's bounded score
(``λ``, below any success by :meth:`~agentgym_envs.core.RewardConfig.check_local`),
never the hidden tests' verdict.

Left out: ``no_irreversible_error``. Nothing the policy can do to the workspace is
irreversible: deleted or broken files can be rewritten (the first commit is in ``.git``,
and the base is what ``submit`` diffs against), and what would be (changing the tests or
their configuration, escaping the workspace, the network) is a safety gate that stops the
episode, which the generic ``no_violation`` check and ``hard_fail`` already cover.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentgym_envs.core.scratch import remove_tree
from agentgym_envs.core.step_checks import CheckKind, StepCheckSpec
from agentgym_envs.sandbox import repofix_tasks as tasks
from agentgym_envs.sandbox.verify import TestRun, TestRunner
from agentgym_envs.sandbox.workspace import WorkspaceManager, apply_changes, is_protected

logger = logging.getLogger(__name__)

VISIBLE_AT = "tests/visible"  # where the fixtures keep the tests the agent sees
VISIBLE_TIMEOUT_S = 60.0
TESTS_PASSING = StepCheckSpec("tests_passing", CheckKind.PROGRESS, 1.0)
MAX_KEPT = 256  # measured code states (and task baselines) kept per env


@dataclass(frozen=True, slots=True)
class Baseline:
    """The visible tests' outcomes on a task's base (its injected bugs, no edit)."""

    failing: tuple[str, ...]
    passing: tuple[str, ...]


def visible_level(run: TestRun, base: Baseline) -> float | None:
    """``tests_passing`` for one verified run: ``(fixed - broken) / failing``, clipped to
    ``[0, 1]``; None for a run that cannot be read (inconsistent, a canary that did not
    fail, a collection error, no outcomes) or a task with no failing visible test."""
    if not base.failing or not run.consistent or run.collect_errors or not run.outcomes:
        return None
    fixed = sum(run.passed(t) for t in base.failing)
    broken = sum(not run.passed(t) for t in base.passing)
    return max(0.0, (fixed - broken) / len(base.failing))


def code_key(task_id: str, changes: Mapping[str, str | None]) -> str:
    """A fingerprint of what a run of the workspace would test: the task and the diff
    verification applies (protected files left out)."""
    kept = [(p, t) for p, t in sorted(changes.items()) if not is_protected(p, t)]
    blob = json.dumps([task_id, kept]).encode()
    return hashlib.sha256(blob).hexdigest()


class VisibleTests:
    """Measures ``tests_passing`` for RepoFix (module docstring) and keeps the levels
    measured, per task and code state, so a repeated ``run_tests`` costs nothing.

    The levels are a pure function of the task and the code, so they survive
    ``set_state`` (a restored branch reads what its code measured)."""

    def __init__(self, spaces: WorkspaceManager, runner: TestRunner) -> None:
        self.spaces = spaces
        self.runner = runner
        self._levels: dict[str, float] = {}
        self._baselines: dict[str, Baseline] = {}

    def level(self, task_id: str, changes: Mapping[str, str | None]) -> float:
        """The measured level of this code state, or 0 when it was never measured."""
        return self._levels.get(code_key(task_id, changes), 0.0)

    def measure(
        self,
        task_id: str,
        repo: str,
        template: Path,
        changes: Mapping[str, str | None],
        *,
        eligible: bool,
    ) -> float:
        """Measure (once per code state) and return the level of ``changes``.

        Args:
            task_id: the task's id (levels are per task).
            repo: the task's fixture repository.
            template: the task's base (``WorkspaceManager.template``).
            changes: the workspace diff against the base.
            eligible: the diff changes the package's code and does not reach into the
                test runner; otherwise the level is 0 and nothing runs.

        Raises:
            SandboxError: the sandbox itself failed (the tool reports ``env_error``).
        """
        if not eligible:  # never cached: the key leaves out the protected files that
            return 0.0  # made it ineligible, so the same code without them must still pay
        key = code_key(task_id, changes)
        if key in self._levels:
            return self._levels[key]
        level = 0.0
        base = self._baseline(task_id, repo, template)
        if base.failing:
            measured = visible_level(self._run(repo, template, changes, base), base)
            level = 0.0 if measured is None else measured
        if len(self._levels) >= MAX_KEPT:
            self._levels.clear()
        self._levels[key] = level
        return level

    def _baseline(self, task_id: str, repo: str, template: Path) -> Baseline:
        found = self._baselines.get(task_id)
        if found is not None:
            return found
        scratch = self.spaces.scratch_copy(template)
        try:  # the env's own code: no canaries needed
            run = self.runner.run(scratch, [VISIBLE_AT], timeout_s=VISIBLE_TIMEOUT_S)
        finally:
            remove_tree(scratch)
        if run.consistent and not run.collect_errors and run.outcomes:
            base = Baseline(
                failing=tuple(sorted(run.failing)),
                passing=tuple(sorted(t for t in run.outcomes if run.passed(t))),
            )
        else:
            logger.warning(
                "%s: the visible tests of the base did not run: %s", task_id, run.problems
            )
            base = Baseline((), ())
        if len(self._baselines) >= MAX_KEPT:
            self._baselines.clear()
        self._baselines[task_id] = base
        return base

    def _run(
        self, repo: str, template: Path, changes: Mapping[str, str | None], base: Baseline
    ) -> TestRun:
        """The visible tests on the base with ``changes`` applied, as ``submit`` runs the
        hidden ones: fixture tests mounted read-only, canaries from the passing ones."""
        scratch = self.spaces.scratch_copy(template)
        try:
            apply_changes(scratch, changes, skip_protected=True)
            return self.runner.run(
                scratch,
                [VISIBLE_AT],
                timeout_s=VISIBLE_TIMEOUT_S,
                mount=(tasks.repo_dir(repo) / VISIBLE_AT, VISIBLE_AT),
                controls=base.passing,
            )
        finally:
            remove_tree(scratch)


__all__ = ["TESTS_PASSING", "Baseline", "VisibleTests", "code_key", "visible_level"]
