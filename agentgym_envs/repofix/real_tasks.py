"""RepoFix tasks from real projects: bugs injected into their functions, kept only where
their own tests and the calls those tests make tell the bug apart, graded by data.

Per project (the pinned sources of :mod:`real_projects`), built once into the cache:

1. **Probes and coverage** (:func:`project_data`). The project's suite runs once on its
   correct code with the recorder (``probe_harness``): the calls its tests make into the
   package, at most :data:`CALLS_PER_TEST` per test, and which tests reach each of the
   package's functions. Each call is replayed three times on the correct code; what it
   observed alike every time is its expectation. Only the stable tests' calls are kept
   (:func:`real_projects.stored_baseline`). The file lives in the cache, never in a
   sandbox.
2. **Candidates** (:func:`candidate`). A seed draws 1 to 3 sites in functions some stable
   test reaches, all on one side of the project's split: a function belongs to ``test``
   or ``train`` by a hash of its name, so train and test tasks of a project touch
   disjoint functions; a project pinned ``"split": "ood"`` gives only ``ood`` tasks. A
   seed that draws several sites combines bugs of one-bug tasks kept before on its side,
   once there are twice as many of them as it needs (as SWE-smith combines validated
   bugs): few random combinations pass the check below that each bug shows alone.
3. **Validation.** The calls of the tests that reach the mutated functions (coverage) are
   replayed on the mutant, and for several bugs on each bug alone: most candidates are
   dropped there, before a test run. Then those tests run in the
   sandbox on the mutant, plus :data:`OTHERS` stable tests that do not reach them. A
   candidate is kept when some of the reaching tests fail (fail-to-pass), every other
   test passes, the suite runs within 3 times its pristine time plus 10 s, and calls
   those failing tests make return something else than on the correct code (the verdict
   is by those calls): for a task with several bugs, each bug alone makes such a call go
   wrong that also goes wrong with all of them (a fix that leaves one bug fails by
   data), and more calls go wrong than the report shows (hard-coding the reported
   answers is not a fix). A bug that adds a bare ``pass`` or ``return None`` to a
   project holding few such lines is dropped (a search for them would find it), and so
   is one that fails the same tests the same way as a task kept before. Last, the calls
   that will grade the task are replayed on the correct code as grading replays them
   (alone, in order): they must give their expectations, or the oracle's fix could not
   pass (an expectation depends on state calls replayed before it left).
4. **The task**: the sites (re-applied at reset: the mutator is deterministic), the
   fail-to-pass and pass-to-pass tests, a digest of the probes that grade it, a bug
   report with a call that went wrong per bug (what was called, what came back, what
   was expected; never the fix, the line or the kind of mutation), and measures of its
   difficulty.

The build (:mod:`real_build`; command line ``python -m agentgym_envs.repofix.real_build
build [NAME ...] --workers 2 --log build.log``; 60 tasks per project unless its pin asks
for another number) writes
``tasks/sandbox/repofix_real.jsonl.gz`` and, next to it, each project's graded probes
(``repofix_real_probes/<project>.json.gz``: the calls of the tests some task names, with
their expectations; task data, never mounted in a sandbox). ``agentgym tasks build
RepoFixReal`` does the same. Each seed's outcome is cached as soon as it is known
(``tasks-v<N>/<project>.jsonl``), so an interrupted build resumes at the seed where it
stopped, and a build asking for more tasks per project goes on from the seeds tried.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import gzip
import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import Task, tasks_root
from agentgym_envs.repofix import probes as probe_mod
from agentgym_envs.repofix import real_projects as rp
from agentgym_envs.repofix.mutate import MutationError, MutationKind, Site, apply_many, sample_sites
from agentgym_envs.repofix.real_reports import report
from agentgym_envs.repofix.tasks import changed_lines, hunk_edits, solution_actions
from agentgym_envs.sandbox.backends import Limits
from agentgym_envs.sandbox.verify import TestRunner

TASK_FILE = "sandbox/repofix_real.jsonl.gz"  # under the tasks root (gzip-packed)
PROBES_VERSION = 1  # of the probe files in the cache
TASKS_VERSION = 7  # of the per-project task results in the cache (the builder's rules)
CALLS_PER_TEST = 40
MAX_EXPECTED_CHARS = 20_000  # a probe whose expectation is larger is left out
OTHERS = 10  # stable tests that do not reach the bug, run with each candidate
SITE_COUNTS = (1, 1, 1, 2, 2, 3)  # sites per task, drawn by seed
KINDS = tuple(MutationKind)  # every kind (the fixture tasks keep to the classic eight)
TEST_SHARE = 5  # one function in 5 is a test-split function (by hash)
PER_PROJECT = 60  # tasks per project where its pin asks for no other number ('tasks')
TRIES_PER_TASK = 3  # seeds tried per task wanted, at most
EARLY_SEEDS, MIN_YIELD = 100, 0.1  # a project keeping under 10% of its first 100 seeds stops
RECORD_TIMEOUT_S = 300.0


# -- per-project data -----------------------------------------------------------------------


@dataclass(frozen=True)
class ProjectData:
    """What tasks of one project are built and graded from (module docstring, step 1)."""

    project: rp.Project
    repo: Path  # the staged project (code, its tests, SOURCE.json)
    packages: tuple[str, ...]
    hidden: tuple[str, ...]  # its test paths: never in a workspace
    probes: tuple[probe_mod.Probe, ...]
    # the builder's (:func:`project_data`); grading needs none of them
    stable: tuple[str, ...] = ()  # tests that passed in every baseline run
    seconds: float = 0.0  # the slowest pristine run
    covered: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # function -> tests

    @property
    def package(self) -> str:
        """The packages as the harness takes them (joined by commas)."""
        return ",".join(self.packages)

    @functools.cached_property
    def by_test(self) -> dict[str, tuple[probe_mod.Probe, ...]]:
        out: dict[str, list[probe_mod.Probe]] = {}
        for probe in self.probes:
            out.setdefault(probe.test, []).append(probe)
        return {k: tuple(v) for k, v in out.items()}

    def probes_of(self, tests: Sequence[str]) -> tuple[probe_mod.Probe, ...]:
        """The probes of ``tests``, in the order of the tests given."""
        return tuple(p for t in tests for p in self.by_test.get(t, ()))

    def probe_set(self, tests: Sequence[str]) -> probe_mod.ProbeSet:
        """The probes that grade a task whose tests are ``tests``."""
        chosen = self.probes_of(tests)
        return probe_mod.ProbeSet(
            self.project.key, self.package, (".",), digest(chosen), chosen, all_hidden=True
        )

    def ignore(self) -> Callable[[str, list[str]], set[str]]:
        """A ``copytree`` filter that leaves out the hidden tests, SOURCE.json and caches."""
        return ignore_paths(self.repo, (*self.hidden, "SOURCE.json"))


def ignore_paths(root: Path, paths: Sequence[str]) -> Callable[[str, list[str]], set[str]]:
    """A ``shutil.copytree`` ignore function that leaves out ``paths`` (relative to
    ``root``) and Python caches."""
    left_out = {os.path.normpath(root / p) for p in paths}

    def ignore(folder: str, names: list[str]) -> set[str]:
        caches = {n for n in names if n in ("__pycache__", ".pytest_cache") or n.endswith(".pyc")}
        return caches | {n for n in names if os.path.normpath(os.path.join(folder, n)) in left_out}

    return ignore


def digest(probes: Sequence[probe_mod.Probe]) -> str:
    """A hash of probes (calls and expectations): a task records the one it was built
    with, so a rebuilt probe file that grades it otherwise is never used silently."""
    text = json.dumps(
        [[p.test, p.call, p.expected] for p in probes], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _probes_path(p: rp.Project) -> Path:
    return rp.cache_dir() / f"probes-v{PROBES_VERSION}" / f"{p.cache_key}.json"


def _source_info(repo: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((repo / "SOURCE.json").read_text())
    return info


def build_probes(p: rp.Project, runner: Any) -> dict[str, Any]:
    """Record and replay the project's calls (module docstring, step 1): the probe file's
    contents.

    Raises:
        ConfigError: the project has no usable baseline, or its correct code could not be
            replayed.
    """
    base = rp.stored_baseline(p, runner)
    if base.problem:
        raise ConfigError(f"{p.key} has no usable baseline: {base.problem}")
    repo = rp.stage(p)
    info = _source_info(repo)
    packages, hidden = tuple(info["packages"]), tuple(info["hidden"])
    package = ",".join(packages)
    stable = set(base.stable)
    recorder = TestRunner(runner.backend, Limits(cpu_s=int(RECORD_TIMEOUT_S)))  # wrapped: slower
    with tempfile.TemporaryDirectory(prefix="agentgym-probes-") as tmp:
        try:
            recorded = probe_mod.record(
                recorder, repo, package, Path(tmp) / "record", hidden,
                timeout_s=RECORD_TIMEOUT_S, strict=False, per_test=CALLS_PER_TEST,
            )  # fmt: skip
        finally:
            recorder.close()
        calls = [c for c in recorded["calls"] if c["test"] in stable]
        probes = probe_mod.stable_probes(
            runner, repo, package, (".",), calls, Path(tmp),
            ignore=ignore_paths(repo, hidden), readers=probe_mod.message_readers(repo, hidden),
        )  # fmt: skip
    probes = [q for q in probes if len(json.dumps(q["expected"])) <= MAX_EXPECTED_CHARS]
    covered = {
        target: sorted(set(tests) & stable)
        for target, tests in recorded.get("covered", {}).items()
        if set(tests) & stable
    }
    return {
        "version": PROBES_VERSION,
        "project": p.key,
        "packages": list(packages),
        "recorded": len(recorded["calls"]),
        "left_out": recorded.get("left_out", 0),
        "probes": probes,
        "covered": covered,
    }


def stored_probes(p: rp.Project, runner: Any = None) -> dict[str, Any]:
    """:func:`build_probes`, built once per pinned source and kept in the cache."""
    path = _probes_path(p)
    if path.is_file():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    runner = runner or rp._runner()
    data = build_probes(p, runner)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".{os.getpid()}.part")
    part.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(part, path)
    return data


@functools.cache
def project_data(name: str) -> ProjectData:
    """The pinned project ``name``'s data (fetched, staged, baselined and recorded on
    first use, from the cache after)."""
    p = rp.project(name)
    repo = rp.stage(p)
    info = _source_info(repo)
    base = rp.stored_baseline(p)
    if base.problem:
        raise ConfigError(f"{p.key} has no usable baseline: {base.problem}")
    data = stored_probes(p)
    stable = set(base.stable)  # the probes may predate a test's leaving it (param_drift)
    probes = tuple(
        probe_mod.Probe(q["test"], q["call"], q["expected"])
        for q in data["probes"]
        if q["test"] in stable
    )
    covered = {k: tuple(t for t in v if t in stable) for k, v in data["covered"].items()}
    return ProjectData(
        project=p,
        repo=repo,
        packages=tuple(info["packages"]),
        hidden=tuple(info["hidden"]),
        probes=probes,
        stable=tuple(base.stable),
        seconds=max(base.seconds),
        covered={k: v for k, v in covered.items() if v},
    )


PROBES_AT = "sandbox/repofix_real_probes"  # under the tasks root: <project>.json.gz


def graded_path(name: str, folder: Path | None = None) -> Path:
    """Where the graded probes of project ``name`` are: in ``folder``, else next to the
    shipped task set."""
    return (folder or tasks_root() / PROBES_AT) / f"{name}.json.gz"


def write_graded(data: ProjectData, tests: set[str], folder: Path) -> Path:
    """Write the probes of ``tests`` (the tests some task names) as the project's graded
    probe file (gzip, byte for byte the same for the same probes)."""
    chosen = [p for p in data.probes if p.test in tests]
    body = {
        "version": PROBES_VERSION,
        "project": data.project.cache_key,
        "packages": list(data.packages),
        "probes": [{"test": p.test, "call": p.call, "expected": p.expected} for p in chosen],
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data.project.name}.json.gz"
    path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    return path


@functools.cache
def graded(name: str, folder: Path | None = None) -> ProjectData:
    """What grading a task of the pinned project ``name`` needs: its staged source
    (fetched and staged on first use) and the probes shipped with the task set (or
    those in ``folder``, for a task set built elsewhere).

    Raises:
        ConfigError: no probe file, or one built from another pin of the project.
    """
    p = rp.project(name)
    path = graded_path(name, folder)
    if not path.is_file():
        raise ConfigError(
            f"no graded probes for {name} at {path}; build the task set with "
            "`agentgym tasks build RepoFixReal`"
        )
    body = json.loads(gzip.decompress(path.read_bytes()))
    if body.get("project") != p.cache_key or body.get("version") != PROBES_VERSION:
        raise ConfigError(
            f"{path} was built from {body.get('project')}, the pin is {p.cache_key}; rebuild "
            "the task set with `agentgym tasks build RepoFixReal`"
        )
    repo = rp.stage(p)
    info = _source_info(repo)
    probes = tuple(probe_mod.Probe(q["test"], q["call"], q["expected"]) for q in body["probes"])
    return ProjectData(p, repo, tuple(info["packages"]), tuple(info["hidden"]), probes)


@functools.cache
def package_files(name: str) -> dict[str, str]:
    """The pinned project ``name``'s code (its tests left out), path -> text."""
    return rp.package_files(rp.stage(rp.project(name)))


# -- sites ----------------------------------------------------------------------------------


def module_of(path: str) -> str:
    """The module a source path defines (``pkg/__init__.py`` -> ``pkg``)."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def function_of(site: Site, covered: Mapping[str, Any]) -> str | None:
    """The recorded function (``module:qualname``) a site is in: the innermost enclosing
    function the recorder wrapped (a nested function counts as the one around it), or
    None where no test reached it."""
    module, names = module_of(site.path), site.function.split(".")
    for end in range(len(names), 0, -1):
        target = f"{module}:{'.'.join(names[:end])}"
        if target in covered:
            return target
    return None


def side_of(project: str, function: str) -> str:
    """``test`` or ``train``: the split a recorded function (``module:qualname``, with the
    functions nested in it) belongs to, by a hash of its name."""
    key = f"{project}:{function}".encode()
    return "test" if int(hashlib.sha256(key).hexdigest(), 16) % TEST_SHARE == 0 else "train"


# -- candidates -----------------------------------------------------------------------------


@dataclass
class Funnel:
    """What became of the seeds tried on one project (the validation funnel)."""

    project: str
    tried: int = 0
    no_site: int = 0  # no sites of the drawn side and count in reached functions
    repeated: int = 0  # the same sites as a task kept before
    broke_suite: int = 0  # the tests did not run (the package no longer imports...)
    hung: int = 0  # past 3 times the pristine time plus 10 s
    undetected: int = 0  # every test that reaches the bug passes
    spilled: int = 0  # a test that does not reach the mutated functions failed
    unseen: int = 0  # the failing tests' calls all return what the correct code returns
    site_unseen: int = 0  # one of the bugs, alone, makes no failing test's call go wrong
    thin: int = 0  # only the calls the report shows go wrong (they could be hard-coded)
    fingerprint: int = 0  # a bare pass/return None the project otherwise lacks gives it away
    duplicate: int = 0  # failed the same tests the same way as a task kept before
    unfixable: int = 0  # the graded calls, replayed alone on the correct code, go wrong
    unplayable: int = 0  # an action of the oracle's fix is longer than an agent may send
    kept: int = 0
    stopped_early: bool = False  # under 10% kept after 100 seeds
    seconds: float = 0.0
    problem: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def draw(
    data: ProjectData, seed: int, pool: Mapping[str, set[str]] | None = None
) -> tuple[str, list[Site]]:
    """A seed's split side and sites (module docstring, step 2). ``pool``: by side, the
    sites of the one-bug tasks kept so far; a seed that draws several bugs combines
    bugs from it when it holds enough of them."""
    rng = random.Random(f"{data.project.key}:{seed}")
    side = "ood" if data.project.split == "ood" else ("test" if rng.random() < 0.2 else "train")
    count = SITE_COUNTS[rng.randrange(len(SITE_COUNTS))]

    telling = telltale_kinds(data.project.name)

    def allowed(site: Site) -> bool:
        function = function_of(site, data.covered)
        if function is None or site.kind in telling:
            return False
        return side == "ood" or side_of(data.project.name, function) == side

    kept = (pool or {}).get(side, set())
    files = package_files(data.project.name)
    try:
        if count > 1 and len(kept) >= 2 * count:
            sites = sample_sites(files, count, seed, KINDS, where=lambda s: s.key in kept)
            if len(sites) == count:
                return side, sites
        sites = sample_sites(files, count, seed, KINDS, where=allowed)
    except MutationError:
        return side, []
    return side, sites if len(sites) == count else []


def _others(data: ProjectData, reached: set[str], seed: int) -> list[str]:
    rest = [t for t in data.stable if t not in reached]
    return sorted(random.Random(seed).sample(rest, min(OTHERS, len(rest))))


def _by_test(
    data: ProjectData, tests: Sequence[str], observed: Sequence[Any]
) -> dict[str, list[Any]]:
    """A replay's observations of the probes of ``tests`` (in that order), by test."""
    out: dict[str, list[Any]] = {}
    for test in tests:
        count = len(data.by_test.get(test, ()))
        out[test], observed = list(observed[:count]), observed[count:]
    return out


def _calls(probes: Sequence[probe_mod.Probe], indices: Sequence[int]) -> set[str]:
    return {json.dumps(probes[i].call, sort_keys=True) for i in indices}


def candidate(
    data: ProjectData,
    seed: int,
    runner: Any,
    funnel: Funnel,
    seen: set[str],
    pool: Mapping[str, set[str]] | None = None,
) -> dict[str, Any] | None:
    """The task a seed makes, as JSON, or None (the funnel says why).

    The cheap checks come first: the calls of the tests that reach the bugs are replayed
    on the mutant (and, for several bugs, on each bug alone) before its test run, since
    most candidates fail there."""

    name = data.project.name
    funnel.tried += 1
    side, sites = draw(data, seed, pool)
    if not sites:
        funnel.no_site += 1
        return None
    key = "|".join(sorted(s.key for s in sites))
    if key in seen:
        funnel.repeated += 1
        return None
    files = package_files(name)
    changed = {k: v for k, v in apply_many(files, sites).items() if files.get(k) != v}
    if fingerprint(files, changed):
        funnel.fingerprint += 1
        return None
    functions = sorted({function_of(s, data.covered) or "" for s in sites})
    reached = sorted({t for f in functions for t in data.covered.get(f, ())})
    timeout_s = min(rp.BASELINE_TIMEOUT_S, 3 * data.seconds + 10)
    reaching = data.probes_of(reached)
    observed_all = _observe(data, runner, changed, reaching, timeout_s)
    first = probe_mod.compare(reaching, observed_all)
    if isinstance(observed_all, str):
        if "timed out" in observed_all:
            funnel.hung += 1
        elif "does not import" in observed_all:
            funnel.broke_suite += 1
        else:
            funnel.unseen += 1
        return None
    if first.problem is not None or not first.differing:
        funnel.unseen += 1  # no call goes wrong: no verdict by data could tell the bug
        return None
    if len(_calls(reaching, first.differing)) <= 1:
        funnel.thin += 1  # the report's one call would be all that goes wrong
        return None
    alone_by_site: list[dict[str, list[Any]]] = []
    for site in sites if len(sites) > 1 else ():
        alone = {k: v for k, v in apply_many(files, [site]).items() if files.get(k) != v}
        own = _observe(data, runner, alone, reaching, timeout_s)
        own_cmp = probe_mod.compare(reaching, own)
        if isinstance(own, str) or not set(own_cmp.differing) & set(first.differing):
            funnel.site_unseen += 1  # a replay with a problem has no differing calls
            return None
        alone_by_site.append(_by_test(data, reached, own))
    others = _others(data, set(reached), seed)
    with tempfile.TemporaryDirectory(prefix="agentgym-real-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(data.repo, work, ignore=ignore_paths(data.repo, ("SOURCE.json",)))
        for relative, text in changed.items():
            (work / relative).write_text(text, encoding="utf-8")
        run = runner.run(work, test_selection([*reached, *others]), timeout_s=timeout_s)
    if run.result.timed_out or run.result.killed in ("timeout", "cpu"):
        funnel.hung += 1
        return None
    if not rp.usable_run(run)[0]:
        funnel.broke_suite += 1
        return None
    fail_to_pass = [t for t in reached if not run.passed(t)]
    pass_to_pass = [t for t in reached if run.passed(t)]
    if not fail_to_pass:
        funnel.undetected += 1
        return None
    if not all(run.passed(t) for t in others):
        funnel.spilled += 1
        return None
    order = [*fail_to_pass, *pass_to_pass]
    graded = data.probes_of(order)
    per_test = _by_test(data, reached, observed_all)
    observed = [o for t in order for o in per_test[t]]
    comparison = probe_mod.compare(graded, observed)
    failing = set(fail_to_pass)
    wrong = [i for i in comparison.differing if graded[i].test in failing]
    if not wrong:
        funnel.unseen += 1
        return None
    # every bug on its own shows in a call of a failing test that also goes wrong with all
    # of them: a fix that leaves any bug in place fails by data, and the report names each
    shown = []
    for own_by_test in alone_by_site:
        own_cmp = probe_mod.compare(graded, [o for t in order for o in own_by_test[t]])
        seen_alone = [i for i in wrong if i in set(own_cmp.differing)]
        if not seen_alone:
            funnel.site_unseen += 1
            return None
        shown.append(next((i for i in seen_alone if i not in shown), seen_alone[0]))
    shown = sorted(set(shown or wrong[:1]))
    if len(_calls(graded, wrong)) <= len(_calls(graded, shown)):
        funnel.thin += 1  # only the calls the report shows go wrong: they could be hard-coded
        return None
    signature = json.dumps(
        [fail_to_pass, [[i, observed[i]] for i in comparison.differing]], sort_keys=True
    )
    signature = hashlib.sha256(signature.encode()).hexdigest()
    if signature in seen:
        funnel.duplicate += 1
        return None
    # the oracle's fix is the correct code: replayed as grading replays them (these calls
    # alone, in this order, in one process), they must give their expectations. They need
    # not: an expectation was observed with every test's calls replayed before it, and a
    # call can depend on state an earlier one left (boolean.py's BooleanAlgebra sets class
    # attributes its Symbols' operators use)
    if not probe_mod.compare(graded, _observe(data, runner, {}, graded, timeout_s)).ok:
        funnel.unfixable += 1
        return None
    seen.update((key, signature))
    edits = [e for path in sorted(changed) for e in hunk_edits(path, changed[path], files[path])]
    lines = [(graded[i], observed[i]) for i in shown]
    text = report(name, lines, len(fail_to_pass))
    called = {called_function(graded[i].call) for i in wrong}
    measures = {
        "sites": len(sites),
        "files": len(changed),
        "lines": sum(changed_lines(files[path], changed[path]) for path in changed),
        "failing_tests": len(fail_to_pass),
        "direct": bool(called & set(functions)),
    }
    funnel.kept += 1
    return Task(
        id=f"repofix-real-{name}-{seed}",
        split=side,
        difficulty=difficulty(measures),
        instruction=(
            f"Bug report for `{name}` {data.project.version} (its own tests are not in "
            f"the repository):\n{text}\nFix the code, then call submit()."
        ),
        seed=seed,
        spec={
            "project": name,
            "source": data.project.cache_key,
            "sites": [s.to_json() for s in sites],
            "functions": functions,
            "fail_to_pass": fail_to_pass,
            "pass_to_pass": pass_to_pass,
            "probes": digest(graded),
            "measures": measures,
        },
        solution=solution_actions(edits),
        max_steps=30 + 10 * len(sites),
    ).to_json()


NODE_IDS_MAX = 100  # a run of more tests names their files instead


def test_selection(tests: Sequence[str]) -> list[str]:
    """What a pytest run of ``tests`` (node ids) is given: the node ids themselves, or,
    for more than :data:`NODE_IDS_MAX`, the files that hold them (hundreds of node ids on
    its command line cost pytest minutes). Outcomes are read by id either way."""
    tests = sorted(set(tests))
    if len(tests) <= NODE_IDS_MAX:
        return tests
    return sorted({t.split("::")[0] for t in tests})


def _observe(
    data: ProjectData,
    runner: Any,
    changed: Mapping[str, str],
    graded: Sequence[probe_mod.Probe],
    timeout_s: float,
) -> list[Any] | str:
    """The graded calls replayed in the sandbox on the project's code with ``changed``
    written over it (its tests left out)."""
    with tempfile.TemporaryDirectory(prefix="agentgym-real-") as tmp:
        code = Path(tmp) / "code"
        shutil.copytree(data.repo, code, ignore=data.ignore())
        for relative, text in changed.items():
            (code / relative).write_text(text, encoding="utf-8")
        calls = [p.call for p in graded]
        return probe_mod.replay(runner, code, data.package, (".",), calls, timeout_s=timeout_s)


def called_function(call: Mapping[str, Any]) -> str:
    """The function (``module:qualname``) a recorded call runs first."""
    kind = call.get("kind")
    if kind == "function":
        return str(call.get("target"))
    if kind == "new":
        return f"{call.get('target')}.__init__"
    if kind == "classmethod":
        return f"{call.get('target')}.{call.get('name')}"
    owner = call.get("self")
    owner = owner.get("$obj") if isinstance(owner, dict) else None
    return f"{owner}.{call.get('name')}"


@functools.cache
def telltale_kinds(name: str) -> frozenset[MutationKind]:
    """The kinds of bug that would give themselves away in project ``name``: a removed
    branch leaves a bare ``pass`` and a removed return a ``return None``, lines such a
    project holds fewer than :data:`FINGERPRINT_MIN` of (never drawn there)."""
    lines = [x.strip() for text in package_files(name).values() for x in text.splitlines()]
    out = set()
    if lines.count("pass") < FINGERPRINT_MIN:
        out.add(MutationKind.REMOVED_BRANCH)
    if lines.count("return None") + lines.count("return") < FINGERPRINT_MIN:
        out.add(MutationKind.REMOVED_RETURN)
    return frozenset(out)


_FINGERPRINTS = frozenset({"pass", "return None", "return"})
FINGERPRINT_MIN = 5  # such lines the project must already hold for a new one to blend in


def fingerprint(files: Mapping[str, str], changed: Mapping[str, str]) -> bool:
    """Whether the bugs add a line that gives them away: a bare ``pass`` or ``return
    None`` (what a removed branch or return leaves) in a project that holds fewer than
    :data:`FINGERPRINT_MIN` such lines (a search for them would find the bug)."""
    for path, text in changed.items():
        a, b = files.get(path, "").splitlines(), text.splitlines()
        ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
        added = {line.strip() for tag, _, _, j1, j2 in ops if tag != "equal" for line in b[j1:j2]}
        for line in added & _FINGERPRINTS:
            found = sum(1 for t in files.values() for x in t.splitlines() if x.strip() == line)
            if found < FINGERPRINT_MIN:
                return True
    return False


def difficulty(measures: Mapping[str, Any]) -> str:
    """``easy``, ``medium`` or ``hard`` from what the task asks: a point for each site
    beyond the first, a second file, a failure seen only through another function than
    the one with the bug, and a bug that at most two tests see."""
    points = (measures["sites"] - 1) + (measures["files"] > 1) + (not measures["direct"])
    points += measures["failing_tests"] <= 2
    return "easy" if points == 0 else "medium" if points <= 2 else "hard"


def mutated_files(spec: Mapping[str, Any]) -> dict[str, str]:
    """Re-apply a task's sites to its project's code; only the changed files come back.

    Raises:
        ConfigError: the task was built from another pin of its project.
    """
    p = rp.project(spec["project"])
    if p.cache_key != spec["source"]:
        raise ConfigError(
            f"task of {p.name} was built from {spec['source']}, the pin is now {p.cache_key}; "
            "rebuild the tasks with `agentgym tasks build RepoFixReal`"
        )
    files = package_files(p.name)
    mutated = apply_many(files, [Site.from_json(s) for s in spec["sites"]])
    return {k: v for k, v in mutated.items() if files.get(k) != v}
