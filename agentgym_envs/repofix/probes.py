"""RepoFix's verdict by data: the calls the tests make into the package, replayed on the
candidate code in the sandbox, compared here with what the correct code returned.

Why. The test process runs the policy's code, which can rewrite anything in it (pytest's
hooks, their ``__code__``, builtins, the results file). No check inside that process can
decide the verdict; it can only detect the tampering it anticipated. So the verdict is a
comparison of plain data, made in this process, against expectations the sandbox never
sees:

1. Build time, on the fixture's correct code (no policy code involved): the hidden and
   visible tests run once with a recorder (``probe_harness``, the runtime's
   ``agentgym_probe``) that writes down every call a test makes into the package, as
   plain data: the target, the receiver's state and the arguments. Each call is then
   replayed three times on the correct code; what it observed (the value returned, the
   exception type raised, what it printed, the receiver's and arguments' state
   afterwards) is the expectation. Calls whose observation differs between the replays
   are dropped (replays run with a fixed hash seed, so sets iterate alike at build and at
   grading; code that reads the clock is not caught by repeating, and the fixtures have
   none). The result is ``tasks/sandbox/probes/<repo>.json``, task data the sandbox
   never mounts (:mod:`runtime`).
2. Grading: a fresh copy of the task's base with the workspace diff applied; the calls
   (inputs only) go to the harness on stdin; it makes them on that code and writes what
   it observed. This process compares every observation with the expectation.

Hostile code runs in the harness too and may write anything as its results. To pass, it
must produce the correct value for every call, on inputs it sees only at run time, with
the correct values nowhere in its reach: that is a fix.

What it does not see: behaviour no test reaches through a call with plain-data inputs
(callbacks, open files other than ``io.StringIO``), and effects other than values,
exceptions, printed text and argument state (files written, warnings). Those stay with the
pytest run of the full suites, which a takeover can hide; :func:`compare` says how many
observations decided.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import shutil
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.scratch import remove_tree
from agentgym_envs.core.tasks import tasks_root
from agentgym_envs.repofix.fixtures import OOD_REPOS, TRAIN_REPOS, content_hash, repo_dir
from agentgym_envs.sandbox.backends import ExecResult
from agentgym_envs.sandbox.runtime import PROBE
from agentgym_envs.sandbox.verify import TestRunner
from agentgym_envs.sandbox.workspace import WorkspaceManager, apply_changes

VERSION = "1"
PROBES_AT = "sandbox/probes"  # under the tasks root: one file per fixture repository
REPLAY_TIMEOUT_S = 60.0
RECORD_TIMEOUT_S = 120.0
REPLAYS = 3  # at build time: an observation must be the same in each


@dataclass(frozen=True)
class Probe:
    """One call a test made, and what the correct code observed."""

    test: str  # the node id of the test that made it ("" during collection)
    call: Mapping[str, Any]  # plain data: kind, target or name, self, args, kwargs
    expected: Mapping[str, Any]  # never sent into the sandbox

    @property
    def suite(self) -> str:
        """``hidden`` or ``visible``: the test folder the call came from."""
        return "hidden" if self.test.startswith("tests/hidden/") else "visible"


@dataclass(frozen=True)
class ProbeSet:
    """A fixture repository's probes (module docstring)."""

    repo: str
    package: str
    paths: tuple[str, ...]  # the import path entries the tests use (pytest's pythonpath)
    content_hash: str
    probes: tuple[Probe, ...]
    all_hidden: bool = False  # a real project's: every probe is a hidden test's

    def suite(self, name: str) -> tuple[Probe, ...]:
        if self.all_hidden:
            return self.probes if name == "hidden" else ()
        return tuple(p for p in self.probes if p.suite == name)


@dataclass(frozen=True)
class Comparison:
    """How the candidate's observations compare with the correct code's."""

    total: int
    matched: int
    differing: tuple[int, ...] = field(default=())  # indices into the probes compared
    problem: str | None = None  # the replay wrote nothing readable

    @property
    def ok(self) -> bool:
        return self.problem is None and self.total > 0 and self.matched == self.total

    def describe(self) -> str:
        """What a grader may say: counts only, never an expected value."""
        if self.problem is not None:
            return f"the observed calls could not be read: {self.problem}"
        return (
            f"{self.matched} of {self.total} calls the tests make into the package return "
            "what the correct code returns"
        )


def same(expected: Any, observed: Any) -> bool:
    """Whether two observations agree: plain JSON data compared exactly, numbers by value
    (``2 == 2.0``, floats to a relative 1e-9), booleans only with booleans."""
    if isinstance(expected, bool) or isinstance(observed, bool):
        return type(expected) is type(observed) and expected == observed
    if isinstance(expected, int | float) and isinstance(observed, int | float):
        if isinstance(expected, int) and isinstance(observed, int):
            return expected == observed
        try:  # an int too large for a float is no float's match
            return math.isclose(expected, observed, rel_tol=1e-9, abs_tol=1e-12)
        except OverflowError:
            return False
    if isinstance(expected, list):
        return (
            isinstance(observed, list)
            and len(observed) == len(expected)
            and all(same(a, b) for a, b in zip(expected, observed, strict=True))
        )
    mapping = isinstance(expected, dict) and _UNORDERED & expected.keys()
    if mapping and isinstance(observed, dict):  # its pairs in any order, as ``==`` compares
        (tag,) = mapping
        pairs = observed.get(tag)
        if observed.keys() != expected.keys() or not isinstance(pairs, list):
            return False
        rest = {k: v for k, v in expected.items() if k != tag}
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            return False
        return same(rest, {k: observed[k] for k in rest}) and same(
            _by_key(expected[tag]), _by_key(pairs)
        )
    if isinstance(expected, dict) and "$obj" in expected and "pairs" in expected:
        # an object of a dict subclass: its pairs in any order, as ``==`` compares them
        pairs = observed.get("pairs") if isinstance(observed, dict) else None
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 for p in pairs
        ):
            return False
        rest = {k: v for k, v in expected.items() if k != "pairs"}
        return (
            observed.keys() == expected.keys()
            and same(rest, {k: observed[k] for k in rest})
            and same(_by_key(expected["pairs"]), _by_key(pairs))
        )
    if isinstance(expected, dict):
        return (
            isinstance(observed, dict)
            and observed.keys() == expected.keys()
            and all(same(expected[k], observed[k]) for k in expected)
        )
    return type(expected) is type(observed) and expected == observed


def _agrees(probe: Probe, observed: Any) -> bool:
    """Every part of the expectation is observed the same (parts the expectation leaves
    out, such as a message no test reads, are not compared). ``observed`` was written by
    hostile code: whatever comparing it raises is a mismatch, never an error of the env."""
    try:
        return isinstance(observed, dict) and all(
            key in observed and same(value, observed[key]) for key, value in probe.expected.items()
        )
    except (ArithmeticError, ValueError, TypeError, RecursionError):
        return False


_UNORDERED = frozenset({"$dict", "$counter", "$defaultdict"})


def _by_key(pairs: list[Any]) -> list[Any]:
    return sorted(pairs, key=lambda pair: json.dumps(pair[:1], sort_keys=True))


def compare(probes: Sequence[Probe], observed: Sequence[Any] | str) -> Comparison:
    """Every probe's expectation against the observation at its index; ``observed`` is a
    string when the replay produced nothing readable."""
    if isinstance(observed, str):
        return Comparison(len(probes), 0, problem=observed)
    if len(observed) != len(probes):
        return Comparison(len(probes), 0, problem="a result per call was not written")
    differing = tuple(
        i for i, (p, o) in enumerate(zip(probes, observed, strict=True)) if not _agrees(p, o)
    )
    return Comparison(len(probes), len(probes) - len(differing), differing)


def failing_tests(known: Sequence[str], probe_set: ProbeSet, data: Comparison) -> str:
    """The ``known`` hidden tests whose calls the data found wrong, for a policy to read:
    judged here alone (the candidate's own test run is hostile code's to write, so a test
    it reports is never named)."""
    if data.problem is not None:
        return "all"
    hidden = probe_set.suite("hidden")
    named = {hidden[i].test for i in data.differing}
    # a parametrised test is named without its parameters (they can be the answers)
    found = list(dict.fromkeys(t.split("[")[0] for t in known if t in named))
    return ", ".join(found[:10]) or "none by their calls (the test run failed)"


def replay(
    runner: TestRunner,
    workdir: Path,
    package: str,
    paths: Sequence[str],
    calls: Sequence[Mapping[str, Any]],
    *,
    timeout_s: float = REPLAY_TIMEOUT_S,
) -> list[Any] | str:
    """Make ``calls`` on the code in ``workdir``, in the sandbox; the observations, or why
    there are none (a string). The code in ``workdir`` may be hostile: what it wrote is
    read as data and checked for shape only."""
    argv = ["-m", PROBE]
    for path in paths:
        argv += ["--path", path]
    result, files = runner.python(
        workdir,
        [*argv, package],
        timeout_s=timeout_s,
        env={"PYTHONHASHSEED": "0"},  # sets and dicts of strings iterate as they did at build
        stdin=json.dumps(list(calls)),
        read=("results.json",),
    )
    return _observations(files["results.json"], len(calls), result)


def _observations(raw: bytes | None, count: int, result: ExecResult) -> list[Any] | str:
    if result.timed_out:
        return "the replay timed out"
    if raw is None:
        return f"the replay wrote no results (exit code {result.exit_code})"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return "the replay's results are not valid JSON"
    observed = data.get("observed") if isinstance(data, dict) else None
    if isinstance(observed, dict) and "import_failed" in observed:
        return f"the package does not import ({observed['import_failed']})"
    if not isinstance(observed, list) or len(observed) != count:
        return "the replay's results are malformed"
    return observed


# -- the probe files ------------------------------------------------------------------------


def probes_path(repo: str) -> Path:
    return tasks_root() / PROBES_AT / f"{repo}.json"


def import_paths(repo_root: Path) -> tuple[str, ...]:
    """The import path entries the repository's tests use: pytest's ``pythonpath``
    setting in its ``pyproject.toml`` (default: the repository root)."""
    config = repo_root / "pyproject.toml"
    if config.is_file():
        options = tomllib.loads(config.read_text()).get("tool", {}).get("pytest", {})
        found = options.get("ini_options", {}).get("pythonpath")
        if isinstance(found, list) and all(isinstance(p, str) for p in found) and found:
            return tuple(found)
    return (".",)


@functools.cache
def load(repo: str) -> ProbeSet:
    """The committed probes of a fixture repository (checked against its content hash).

    Raises:
        ConfigError: the file is missing or was built from other fixture contents.
    """
    path = probes_path(repo)
    if not path.is_file():
        raise ConfigError(
            f"no probes for the fixture repository {repo!r} at {path}; build them with "
            "`python -m agentgym_envs.repofix.probes build`"
        )
    data = json.loads(path.read_text())
    if data.get("content_hash") != content_hash(repo) or data.get("version") != VERSION:
        raise ConfigError(
            f"the probes of {repo!r} were built from other fixture contents or an older "
            "format; rebuild them with `python -m agentgym_envs.repofix.probes build`"
        )
    probes = tuple(Probe(p["test"], p["call"], p["expected"]) for p in data["probes"])
    return ProbeSet(repo, data["package"], tuple(data["paths"]), data["content_hash"], probes)


def record(
    runner: TestRunner,
    repo_root: Path,
    package: str,
    work: Path,
    tests: Sequence[str] = ("tests",),
    *,
    timeout_s: float = RECORD_TIMEOUT_S,
    strict: bool = True,
    per_test: int = 0,
) -> dict[str, Any]:
    """Run the repository's tests (``tests``: folders or files) on its correct code with
    the recorder: the calls the tests made into ``package`` (one or several, joined by
    commas) and which tests reached each of its functions (``covered``; see
    ``probe_harness``), at most ``per_test`` calls per test (0: all). With ``strict`` a
    test that fails under the recorder is an error; without, its calls are kept (each is
    replayed on the correct code anyway), but a run that stopped short of the tests (a
    module that failed to import under the recorder) is still an error."""
    shutil.copytree(repo_root, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    env = {
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "AGENTGYM_PROBE_PACKAGE": package,
        "AGENTGYM_PROBE_TESTS": os.pathsep.join(tests),
        "AGENTGYM_PROBE_MAX_CALLS": str(per_test),
        "PYTHONHASHSEED": "0",
    }
    result, files = runner.python(
        work,
        ["-m", "pytest", "-q", "-p", PROBE, "-p", "no:cacheprovider", "-c", "pyproject.toml",
         "--rootdir", ".", "-o", "addopts=", *tests],
        timeout_s=timeout_s,
        env=env,
        read=("calls.json",),
    )  # fmt: skip
    raw = files["calls.json"]
    # without ``strict`` failing tests are fine (exit code 1), never a run that ran no
    # test: a collection error, an interruption, pytest's own fault (2 to 5)
    if result.exit_code not in ((0,) if strict else (0, 1)) or raw is None:
        raise ConfigError(
            f"recording the calls of {repo_root.name}'s tests failed (exit code "
            f"{result.exit_code}): {result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    try:
        data: dict[str, Any] = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(
            f"recording the calls of {repo_root.name}'s tests wrote no valid calls.json "
            f"({exc}); exit code {result.exit_code}: {result.stderr[-2000:]}"
        ) from None
    return data


def stable_probes(
    runner: TestRunner,
    root: Path,
    package: str,
    paths: Sequence[str],
    calls: Sequence[Mapping[str, Any]],
    work: Path,
    *,
    ignore: Any,
    readers: set[tuple[str, str]],
) -> list[dict[str, Any]]:
    """Replay ``calls`` :data:`REPLAYS` times on the correct code at ``root`` (copied
    without what ``ignore`` leaves out) and keep those observed alike every time: the
    probes, with the observation as their expectation. A message is kept only for tests
    that read one (``readers``)."""
    runs = []
    for i in range(REPLAYS):
        copy = work / f"replay{i}"
        shutil.copytree(root, copy, ignore=ignore)
        observed = replay(runner, copy, package, paths, [_inputs(c) for c in calls])
        remove_tree(copy)
        if isinstance(observed, str):
            raise ConfigError(
                f"replaying {root.name}'s calls on its correct code failed: {observed}"
            )
        runs.append(observed)
    probes = []
    for i, call in enumerate(calls):
        first = runs[0][i]
        stable = all(same(first, r[i]) for r in runs[1:])
        if stable and "broken" not in first and "$unencodable" not in json.dumps(first):
            if _function_of(call["test"]) not in readers:
                first.pop("message", None)  # the type is what such a test checks
            probes.append({"test": call["test"], "call": _inputs(call), "expected": first})
    return probes


def build(runner: TestRunner, repo: str, work: Path) -> dict[str, Any]:
    """The probe file's contents for a fixture repository (module docstring, step 1)."""
    root = repo_dir(repo)
    package, paths = repo, import_paths(root)
    calls = record(runner, root, package, work / "record")["calls"]
    probes = stable_probes(
        runner, root, package, paths, calls, work,
        ignore=shutil.ignore_patterns("tests", "__pycache__"),
        readers=message_readers(root, ["tests"]),
    )  # fmt: skip
    return {
        "version": VERSION,
        "repo": repo,
        "package": package,
        "paths": list(paths),
        "content_hash": content_hash(repo),
        "recorded": len(calls),
        "probes": probes,
    }


def _function_of(test: str) -> tuple[str, str]:
    """(file, function) of a node id (parameters and classes left out)."""
    file, _, rest = test.partition("::")
    return file, rest.split("::")[-1].split("[")[0]


def message_readers(root: Path, tests: Sequence[str]) -> set[tuple[str, str]]:
    """The test functions (file, name) under ``tests`` that read an exception's message:
    ``pytest.raises(..., match=...)``, ``raises(...) as info`` and then ``info.value``,
    ``assertRaisesRegex`` and its kind, an ``assertRaises(...) as`` context, or an
    ``except E as error`` clause. For the others an exception's type is the
    expectation, so a fix that words a message differently still passes where the tests
    would."""
    found = set()
    for test in tests:
        where = root / test
        files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        for path in files:
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, ValueError, OSError):
                continue
            for func in ast.walk(tree):
                if isinstance(func, ast.FunctionDef) and _reads_message(func):
                    found.add((str(path.relative_to(root)), func.name))
    return found


def _reads_message(func: ast.FunctionDef) -> bool:
    names = set()
    for node in ast.walk(func):
        if isinstance(node, ast.ExceptHandler) and node.name:  # except E as error: ...
            return True
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name.startswith("assertRaisesRegex") or name.startswith("assertWarnsRegex"):
                return True
        if isinstance(node, ast.withitem) and isinstance(node.context_expr, ast.Call):
            call = node.context_expr
            name = getattr(call.func, "attr", getattr(call.func, "id", ""))
            if name in ("assertRaises", "assertWarns") and node.optional_vars is not None:
                return True
            if name == "raises":
                if any(k.arg == "match" for k in call.keywords):
                    return True
                if isinstance(node.optional_vars, ast.Name):
                    names.add(node.optional_vars.id)
    return any(
        isinstance(n, ast.Attribute) and n.attr == "value" and getattr(n.value, "id", None) in names
        for n in ast.walk(func)
    )


def _inputs(call: Mapping[str, Any]) -> dict[str, Any]:
    """What the harness needs of a call (the test's name stays here)."""
    return {k: v for k, v in call.items() if k != "test"}


def observe(
    runner: TestRunner,
    spaces: WorkspaceManager,
    template: Path,
    changes: Mapping[str, str | None],
    probes: ProbeSet,
    suite: str,
) -> Comparison:
    """Replay ``suite``'s probes (``hidden`` or ``visible``) on a fresh copy of the task's
    base ``template`` with ``changes`` applied (protected files left out, as ``submit``
    applies them) and compare with the correct code's observations.

    Raises:
        SandboxError: the sandbox itself failed.
    """
    chosen = probes.suite(suite)
    scratch = spaces.scratch_copy(template)
    try:
        apply_changes(scratch, changes, skip_protected=True)
        observed = replay(runner, scratch, probes.package, probes.paths, [p.call for p in chosen])
    finally:
        remove_tree(scratch)
    return compare(chosen, observed)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentgym_envs.repofix.probes build [REPO ...]``: record and write the
    probe files of the fixture repositories (default: all), one line per repository."""
    import argparse
    import sys
    import tempfile
    import time

    from agentgym_envs.sandbox.backends import Limits, make_backend

    parser = argparse.ArgumentParser(prog="python -m agentgym_envs.repofix.probes")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("repos", nargs="*", default=[*TRAIN_REPOS, *OOD_REPOS])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: tasks root)")
    args = parser.parse_args(argv)
    runner = TestRunner(make_backend("auto"), Limits(cpu_s=60))
    try:
        for repo in args.repos:
            start = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="agentgym-probes-") as work:
                data = build(runner, repo, Path(work))
            out = (args.out or tasks_root() / PROBES_AT) / f"{repo}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
            print(
                f"{repo}: {len(data['probes'])} probes of {data['recorded']} recorded calls "
                f"-> {out} ({time.perf_counter() - start:.1f} s)",
                file=sys.stdout,
                flush=True,
            )
    finally:
        runner.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
