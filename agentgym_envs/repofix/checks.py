"""RepoFix's step checks (issue 18): how far the fix has got, read from observations the env
makes itself.

``tests_passing`` (``PROGRESS``) reads the visible tests' calls into the package
(:mod:`probes`): of the calls whose observation on the task's base differs from the
correct code's, the share that now matches it, less the calls that matched on the base and
differ now: ``max(0, (fixed - broken) / differing_on_base)``. It is measured only when the
policy calls ``run_tests`` (a test run it pays for anyway) on a code state not measured
before, and never from anything the policy's code decides:

* the observations come from a replay the env makes on a fresh copy of the task's base
  with the workspace diff applied (protected files left out), as ``submit`` does; the
  replay gets the calls' inputs only, and the comparison with the correct code's
  observations happens in the env's process, where no code of the policy runs. Patched
  pytest internals, hooks that swallow failures and rewritten results files change
  nothing: there is no verdict in the sandbox to forge;
* the policy's own ``run_tests`` output, files it writes and ``run`` commands are never
  read; a diff that reaches into the test runner (``RepoFixEnv``'s source scan) or changes
  no code reads 0 without a replay;
* the base's observations come from one replay of the env's own code per task, so doing
  nothing, or only what the base already got right, is worth 0.

The hidden tests' calls are never replayed for this check (they are, at ``submit``).
Cost: one replay per new code state the policy tests (a python start and the calls, well
under a second in bubblewrap) and one per task, only with ``local_weight > 0``. A task
whose visible calls all match on the base (the bug report is a symptom only) has no
signal here: the check reads 0.

Residual risk: the visible tests' inputs are visible, so code that special-cases them
matches without fixing the bug; that earns at most this check's bounded score (``λ``,
below any success by :meth:`~agentgym_envs.core.RewardConfig.check_local`), never the
hidden calls' verdict.

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

from agentgym_envs.core.step_checks import CheckKind, StepCheckSpec
from agentgym_envs.repofix import probes
from agentgym_envs.repofix.probes import Comparison
from agentgym_envs.sandbox.verify import TestRunner
from agentgym_envs.sandbox.workspace import WorkspaceManager, is_protected

logger = logging.getLogger(__name__)

TESTS_PASSING = StepCheckSpec("tests_passing", CheckKind.PROGRESS, 1.0)
MAX_KEPT = 256  # measured code states (and task baselines) kept per env


@dataclass(frozen=True, slots=True)
class Baseline:
    """The visible probes (indices into the repository's visible suite) whose observation
    on the task's base differs from the correct code's."""

    differing: frozenset[int]


def visible_level(now: Comparison, base: Baseline) -> float | None:
    """``tests_passing`` for one replay: ``(fixed - broken) / differing``, clipped to
    ``[0, 1]``; None for a replay that cannot be read (the package does not import, the
    results are malformed) or a task whose visible calls all match on the base."""
    if not base.differing or now.problem is not None:
        return None
    wrong = set(now.differing)
    fixed = len(base.differing - wrong)
    broken = len(wrong - base.differing)
    return max(0.0, (fixed - broken) / len(base.differing))


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
        if base.differing:
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
        run = probes.observe(self.runner, self.spaces, template, {}, probes.load(repo), "visible")
        if run.problem is not None:
            logger.warning(
                "%s: the visible calls of the base did not replay: %s", task_id, run.problem
            )
        base = Baseline(frozenset(run.differing) if run.problem is None else frozenset())
        if len(self._baselines) >= MAX_KEPT:
            self._baselines.clear()
        self._baselines[task_id] = base
        return base

    def _run(
        self, repo: str, template: Path, changes: Mapping[str, str | None], base: Baseline
    ) -> Comparison:
        """The visible calls replayed on the base with ``changes`` applied."""
        return probes.observe(
            self.runner, self.spaces, template, changes, probes.load(repo), "visible"
        )


__all__ = ["TESTS_PASSING", "Baseline", "VisibleTests", "code_key", "visible_level"]
