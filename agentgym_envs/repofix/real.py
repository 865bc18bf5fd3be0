"""RepoFix on real open-source projects (``agentgym/RepoFixReal-v0``)."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym_envs.core import AgentEnv
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.scratch import remove_tree
from agentgym_envs.core.step_checks import GENERIC_SPECS, StepCheck, StepCheckSpec, StepFacts
from agentgym_envs.core.tasks import Task
from agentgym_envs.repofix import probes, real_build, real_projects, real_tasks
from agentgym_envs.repofix.env import VERIFY_TIMEOUT_S, Progress, RepoFixEnv
from agentgym_envs.sandbox.verify import TestRun
from agentgym_envs.sandbox.workspace import AST_LOCK, Changes, apply_changes

logger = logging.getLogger(__name__)

SYSTEM_RULES = (
    "You are fixing a bug in a real open-source Python project. Its own tests are not in "
    "the repository: reproduce the problem the bug report describes with run (for example "
    "run(cmd=\"python -c 'import pkg; print(pkg.f(1))'\")); explore with list_dir, "
    "read_file and search; change the code with edit or write_file; then call submit(). "
    "The project's tests and the calls they make grade the fix. Do not write under tests/ "
    "or change test configuration (conftest.py, pytest.ini, pyproject.toml, setup.cfg, "
    "tox.ini, sitecustomize.py, .pth files), stay inside the repository, and do not use "
    "the network: each of these ends the episode."
)


class RepoFixRealEnv(RepoFixEnv):
    """Fix injected bugs in real open-source Python projects; their own tests grade.

    Description:
        A task is one of the pinned projects (``tasks/sandbox/real_projects.jsonl``:
        name, version and sha256 of the source archive on the package index, license)
        with 1 to 3 bugs injected into functions its own tests reach. The first use of a
        project downloads its archive once, checks the hash and caches it; nothing else
        is fetched and an episode never touches the network. The workspace is a fresh git
        repository with one commit holding the project's code, its license and pytest
        settings; its tests stay outside the sandbox. Tasks were kept only where the
        project's tests that reach the bug fail on it, every other test run passes, and
        calls those tests make return something else than on the correct code
        (:mod:`agentgym_envs.repofix.real_tasks`). ``train`` and ``test`` tasks of a
        project touch disjoint functions; ``ood`` tasks come from projects no other
        split uses.

    Observation:
        The bug report (up to three calls that went wrong: the call, what it returned or
        raised, what it should give; and how many of the project's tests fail) and the
        repository's file list; then each tool's output as in ``RepoFix``.

    Difficulty:
        From what the task asks (``real_tasks.difficulty``): a point for each bug beyond
        the first, a second file, a failure seen only through another function than the
        buggy one, and a bug at most two tests see; ``easy`` 0, ``medium`` 1-2, ``hard``
        3 or more. ``task.spec["measures"]`` holds the numbers.

    Tools:
        As ``RepoFix``. ``run_tests`` runs the tests in the workspace, which holds none of
        the project's: reproduce with ``run``.

    Milestones:
        As ``RepoFix``.

    Safety gates:
        As ``RepoFix``; writing under ``tests/`` stops the episode too.

    Rewards:
        As ``RepoFix``, without the ``tests_passing`` step check (``local_weight`` must be
        0).

    Termination:
        ``submit()`` applies the workspace diff to a fresh copy of the task's base and
        decides by data: the calls the task's tests make into the package, recorded on
        the correct code when the task set was built and shipped with it
        (``tasks/sandbox/repofix_real_probes``), are replayed on it in the sandbox, and
        every observation must equal the correct code's, compared in this process. The
        task's fail-to-pass and pass-to-pass tests also run on another fresh copy (the
        project's tests copied in) and must all pass, and the diff must not tamper with
        the test runner.

    Args:
        probes_dir: the folder of the graded probes of a task set built elsewhere
            (``real_build.build(out=...)`` writes it next to the task file; pass that
            task set as ``tasks``); default: those shipped with the package's task set.
        **kwargs: as ``RepoFix``.
    """

    name = "RepoFixReal"
    version = "0"
    verifier_version = "1"
    step_checks_version = "1"
    task_file = real_tasks.TASK_FILE
    task_counts = {"train": 0, "test": 0, "ood": 0}  # built by real_tasks, per project
    conformance_episodes = 2
    visible_tests = False

    def __init__(self, *, probes_dir: str | Path | None = None, **kwargs: Any) -> None:
        self.probes_dir = Path(probes_dir) if probes_dir is not None else None
        super().__init__(**kwargs)
        if self.reward_config.local_weight:
            raise ConfigError(
                "RepoFixReal has no visible tests, so no tests_passing step check: use "
                "local_weight=0 (the default)"
            )
        self._data: real_tasks.ProjectData | None = None
        self._probes: probes.ProbeSet | None = None

    # -- the task's project -------------------------------------------------------------------

    def _original_files(self) -> Mapping[str, str]:
        return real_tasks.package_files(self.task.spec["project"])

    def _code_roots(self) -> tuple[str, ...]:
        assert self._data is not None
        return tuple(
            f"{p}/" if (self._data.repo / p).is_dir() else f"{p}.py" for p in self._data.packages
        )

    def _load_task(self, task: Task) -> None:
        spec = task.spec
        data = real_tasks.graded(spec["project"], self.probes_dir)
        probe_set = data.probe_set([*spec["fail_to_pass"], *spec["pass_to_pass"]])
        if probe_set.content_hash != spec["probes"]:
            raise ConfigError(
                f"task {task.id}: its graded probes changed since it was built; rebuild the "
                "task set with `agentgym tasks build RepoFixReal`"
            )
        with AST_LOCK:  # the mutator parses: envs may reset in threads
            files = real_tasks.mutated_files(spec)
        self._data, self._probes = data, probe_set
        self._template, self._initial = self.spaces.template(
            task.id, data.repo, files, ignore=data.ignore()
        )
        self._mutated = frozenset(files)
        self.workspace = self.spaces.fresh(self._template)
        self.progress = Progress()
        self._changes = {}
        self._failure = None

    # -- grading ----------------------------------------------------------------------------

    def _observe_hidden(self, changes: Changes) -> tuple[probes.ProbeSet, probes.Comparison]:
        assert self._template is not None and self._probes is not None
        data = probes.observe(
            self.runner, self.spaces, self._template, changes, self._probes, "hidden"
        )
        return self._probes, data

    def _run_hidden(self, changes: Changes) -> TestRun:
        """The task's tests on a fresh copy of the base with ``changes`` applied and the
        project's tests copied in (written after the diff: a file the diff put there is
        replaced)."""
        assert self._template is not None and self._data is not None
        spec = self.task.spec
        scratch = self.spaces.scratch_copy(self._template)
        try:
            apply_changes(scratch, changes, skip_protected=True)
            for path in self._data.hidden:
                source, target = self._data.repo / path, scratch / path
                relative = Path(path)
                for place in [*list(reversed(relative.parents))[1:], relative]:
                    here = scratch / place  # whatever the diff left where the tests go
                    if here.is_symlink() or here.is_file():
                        here.unlink()
                    elif here == target and here.exists():
                        remove_tree(here)
                if source.is_dir():
                    shutil.copytree(source, target, dirs_exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target)
            files = real_tasks.test_selection([*spec["fail_to_pass"], *spec["pass_to_pass"]])
            run = self.runner.run(scratch, ["--", *files], timeout_s=VERIFY_TIMEOUT_S)
        finally:
            remove_tree(scratch)
        # tests the results plugin cannot vouch for on the correct code too (inherited from
        # a mixin, wrapped by a decorator) are never a task's (the baseline left them out):
        # a run whose only notes are about such other tests is sound; a note about one of
        # the task's own tests is code that swapped it
        usable, unguarded = real_projects.usable_run(run)
        own = {*spec["fail_to_pass"], *spec["pass_to_pass"]}
        if not run.consistent and usable and unguarded.isdisjoint(own):
            run = dataclasses.replace(run, consistent=True, problems=())
        return run

    def _regression_free(self, run: TestRun) -> bool:
        """Only the task's own tests count: the files they are in may hold tests that
        fail on the correct code too (an optional dependency the sandbox lacks)."""
        return True

    def system_rules(self) -> str:
        return SYSTEM_RULES

    def step_check_specs(self) -> Sequence[StepCheckSpec]:
        return GENERIC_SPECS

    def step_checks(self, facts: StepFacts) -> Sequence[StepCheck]:
        return AgentEnv.step_checks(self, facts)

    @classmethod
    def build_tasks(cls, out_root: Path, workers: int, log: Callable[[str], None]) -> int:
        """``agentgym tasks build RepoFixReal``: every pinned project's tasks
        (:func:`real_build.build`), written under ``out_root``; the number written."""
        count, funnels = real_build.build(workers=workers, out=out_root / cls.task_file, log=log)
        failed = [f"{f.project}: {f.problem}" for f in funnels if f.problem]
        if failed:
            raise ConfigError("some projects gave no tasks: " + "; ".join(failed))
        return count

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        raise ConfigError(
            "RepoFixReal's tasks are built per project: `agentgym tasks build RepoFixReal` "
            "(or python -m agentgym_envs.repofix.real_build build)"
        )

    @classmethod
    def task_key(cls, task: Task) -> Any:
        return (task.spec["project"], tuple(s["key"] for s in task.spec["sites"]))
