"""RepoFix task generation: seeded bug injection into the fixture repositories, validated
by running their hidden tests in the sandbox.

A task is (repository, mutation sites, seed). It is kept only if at least one hidden test
fails with the bugs and passes without them (fail-to-pass), at least one passes in both
(pass-to-pass), the tests still collect (the package imports), and some call the hidden
tests make into the package observes the bugs (:mod:`probes`: the verdict is by those
observations). The task file stores
the sites, not the mutated sources: loading re-applies them (the mutator is
deterministic) and checks the fixture's content hash, so a changed fixture cannot
silently invalidate stored tasks.
"""

from __future__ import annotations

import difflib
import json
import random
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import Task
from agentgym_envs.repofix import probes
from agentgym_envs.repofix.fixtures import OOD_REPOS as OOD_REPOS
from agentgym_envs.repofix.fixtures import TRAIN_REPOS as TRAIN_REPOS
from agentgym_envs.repofix.fixtures import content_hash as content_hash
from agentgym_envs.repofix.fixtures import repo_dir as repo_dir
from agentgym_envs.repofix.fixtures import source_files as source_files
from agentgym_envs.repofix.mutate import (
    Site,
    apply,
    apply_many,
    describe_symptom,
    sample_sites,
)
from agentgym_envs.sandbox.verify import TestRun, TestRunner

MUTATIONS = {"easy": 1, "medium": 2, "hard": 3}
TASK_COUNTS = {"train": 100, "test": 50, "ood": 50}  # per difficulty: 600 tasks
GEN_TIMEOUT_S = 20.0


def mutated_files(spec: Mapping[str, Any]) -> dict[str, str]:
    """Re-apply a task's mutations; only the changed files come back."""
    name = spec["repo"]
    if spec.get("fixture_hash") != content_hash(name):
        raise ConfigError(
            f"fixture repository {name!r} changed since its tasks were built; rebuild them "
            "with `agentgym tasks build RepoFix`"
        )
    files = source_files(name)
    mutated = apply_many(files, [Site.from_json(s) for s in spec["sites"]])
    return {p: t for p, t in mutated.items() if files.get(p) != t}


# -- generation ---------------------------------------------------------------------------------


@cache
def _runner() -> TestRunner:
    from agentgym_envs.sandbox.backends import Limits, make_backend

    return TestRunner(make_backend("auto"), Limits(cpu_s=30))


def _run_suite(
    name: str, files: Mapping[str, str], suite: str, extra: tuple[str, ...] = ()
) -> TestRun:
    with tempfile.TemporaryDirectory(prefix="agentgym-gen-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(
            repo_dir(name), work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache")
        )
        for relative, text in files.items():
            (work / relative).write_text(text)
        return _runner().run(work, [suite], timeout_s=GEN_TIMEOUT_S, extra=extra)


@cache
def _original_passing(name: str) -> frozenset[str]:
    run = _run_suite(name, {}, "tests/hidden")
    if not run.consistent or run.failing or not run.outcomes:
        raise ConfigError(f"fixture {name!r}: its hidden tests must all pass ({run.problems})")
    return frozenset(t for t, o in run.outcomes.items() if o == "passed")


def bugs_seen(
    name: str, changed: Mapping[str, str], runner: TestRunner | None = None
) -> probes.Comparison:
    """The hidden calls replayed on the repository with ``changed`` applied: a task is
    kept only where some of them observe its bugs (the verdict is by these observations;
    a task whose bugs no call sees could only be graded by the test run)."""
    probe_set = probes.load(name)
    hidden = probe_set.suite("hidden")
    with tempfile.TemporaryDirectory(prefix="agentgym-gen-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(repo_dir(name), work, ignore=shutil.ignore_patterns("tests", "__pycache__"))
        for relative, text in changed.items():
            (work / relative).write_text(text)
        calls = [p.call for p in hidden]
        observed = probes.replay(
            runner or _runner(), work, probe_set.package, probe_set.paths, calls
        )
    return probes.compare(hidden, observed)


def gold_edits(path: str, mutated: str, original: str) -> list[tuple[str, str, str]]:
    """One exact-once edit (path, old, new) turning ``mutated`` back into ``original``."""
    a, b = mutated.splitlines(keepends=True), original.splitlines(keepends=True)
    ops = [
        op
        for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
        if op[0] != "equal"
    ]
    lo_a, hi_a = ops[0][1], ops[-1][2]
    lo_b, hi_b = ops[0][3], ops[-1][4]
    while True:
        old = "".join(a[lo_a:hi_a])
        if old and mutated.count(old) == 1:
            return [(path, old, "".join(b[lo_b:hi_b]))]
        if lo_a == 0 and hi_a == len(a):
            return [(path, mutated, original)]
        lo_a, lo_b = max(lo_a - 1, 0), max(lo_b - 1, 0) if lo_a > 0 else lo_b
        if hi_a < len(a):
            hi_a, hi_b = hi_a + 1, hi_b + 1


def hunk_edits(path: str, mutated: str, original: str) -> list[tuple[str, str, str]]:
    """Edits (path, old, new) that turn ``mutated`` back into ``original`` one changed
    place at a time, each ``old`` widened by whole lines until it occurs once; the whole
    span of :func:`gold_edits` where applying them in order would not give
    ``original``."""
    a, b = mutated.splitlines(keepends=True), original.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    edits, text = [], mutated
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            continue
        lo_a, hi_a, lo_b, hi_b = i1, i2, j1, j2
        while True:
            old = "".join(a[lo_a:hi_a])
            if old and text.count(old) == 1:
                break
            if lo_a == 0 and hi_a == len(a):
                return gold_edits(path, mutated, original)
            if lo_a > 0:
                lo_a, lo_b = lo_a - 1, lo_b - 1
            if hi_a < len(a):
                hi_a, hi_b = hi_a + 1, hi_b + 1
        new = "".join(b[lo_b:hi_b])
        text = text.replace(old, new, 1)
        edits.append((path, old, new))
    return edits if text == original else gold_edits(path, mutated, original)


def changed_lines(original: str, mutated: str) -> int:
    """How many lines of ``original`` a fix has to touch (the lines the bugs changed)."""
    a, b = original.splitlines(), mutated.splitlines()
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_NOISE = re.compile(
    r"^(?:[.FEsxX]+(?:\s+\[\s*\d+%\])?|[=!_-]{3,}.*|\d+ (?:failed|passed|error).*)$"
)


def clean_traceback(output: str) -> str:
    """pytest's failure output without progress, rulers and timings, and with object
    addresses removed (``<X object at 0x7f..>`` differs from run to run)."""
    lines = [
        ln for ln in output.strip().splitlines() if ln.strip() and not _NOISE.match(ln.strip())
    ]
    return _ADDRESS.sub("", "\n".join(lines[:40]))


def _report(difficulty: str, name: str, changed: Mapping[str, str], sites: list[Site]) -> str:
    """The bug report: a failing visible test's traceback (easy, when a visible test
    catches the bug), a precise symptom (medium) or a vague one (hard)."""
    if difficulty == "easy":
        visible = _run_suite(name, changed, "tests/visible", ("--tb=short", "-x"))
        if visible.failing:
            return "This visible test fails:\n" + clean_traceback(visible.result.stdout)
    vague = difficulty == "hard"
    return " ".join(describe_symptom(s, vague=vague) for s in sites)


def solution_actions(edits: Sequence[tuple[str, str, str]]) -> tuple[str, ...]:
    """Action texts of a gold fix: one JSON edit call per (path, old, new), then submit."""
    calls = [
        json.dumps({"name": "edit", "arguments": {"path": p, "old": o, "new": n}})
        for p, o, n in edits
    ]
    return (*calls, "submit()")


def generate(seed: int, difficulty: str, split: str) -> Task | None:
    """A validated task, or None when the draw is rejected (no fail-to-pass test, ...)."""
    if difficulty not in MUTATIONS:
        raise ConfigError(f"unknown difficulty {difficulty!r} for RepoFix; use {tuple(MUTATIONS)}")
    rng = random.Random(seed)
    name = rng.choice(OOD_REPOS if split == "ood" else TRAIN_REPOS)
    files = source_files(name)
    sites = sample_sites(files, MUTATIONS[difficulty], seed)
    if len(sites) < MUTATIONS[difficulty]:
        return None
    mutated = apply_many(files, sites)
    changed = {p: t for p, t in mutated.items() if files[p] != t}
    run = _run_suite(name, changed, "tests/hidden")
    if not run.consistent or run.collect_errors or run.result.timed_out:
        return None  # the package must still import and its tests collect
    passing = _original_passing(name)
    fail_to_pass = sorted(t for t in passing if not run.passed(t))
    pass_to_pass = sorted(t for t in passing if run.passed(t))
    if not fail_to_pass or not pass_to_pass:
        return None
    seen = bugs_seen(name, changed)
    if seen.problem is not None or not seen.differing:
        return None
    report = _report(difficulty, name, changed, sites)
    edits = [e for p in sorted(changed) for e in gold_edits(p, changed[p], files[p])]
    hints = [apply(files[s.path], s).explanation for s in sites]
    spec = {
        "repo": name,
        "fixture_hash": content_hash(name),
        "sites": [s.to_json() for s in sites],
        "fail_to_pass": fail_to_pass,
        "pass_to_pass": pass_to_pass,
        "hints": hints,
    }
    return Task(
        id=f"repofix-{name}-{difficulty}-{split}-{seed}",
        split=split,
        difficulty=difficulty,
        instruction=(
            f"Bug report for the `{name}` repository:\n{report}\n"
            "Fix the code (not the tests), then call submit()."
        ),
        seed=seed,
        spec=spec,
        solution=solution_actions(edits),
        max_steps=30 + 10 * MUTATIONS[difficulty],
    )


class ScriptOracle:
    """Replays the task's gold fix (edits back to the original code), then submits."""

    def __init__(self, actions: Sequence[str]) -> None:
        self.actions = list(actions)

    def act(self) -> str:
        return self.actions.pop(0) if self.actions else "submit()"
