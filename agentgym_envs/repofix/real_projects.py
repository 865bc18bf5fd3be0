"""Real open-source projects for RepoFix: pinned source archives, fetched once, verified,
and laid out as RepoFix repositories.

The pinned list (``tasks/sandbox/real_projects.jsonl``) holds one project per line: its
name and version on the package registry, the sha256 of its source distribution, its
license and, where the layout is not the usual one, where its code and tests are. The
first use downloads each archive from the package index pip is set up for (as a file:
nothing of it is built or run), refuses one whose hash differs, and keeps it in the cache
(``$AGENTGYM_CACHE/real-projects``); nothing else is ever fetched, and an episode never
touches the network.

:func:`stage` lays a project out as a RepoFix repository: its importable code as
shipped, its own test suite where it ships it (the hidden tests: never in the workspace), its
license file and a ``SOURCE.json`` that says where the code comes from. :func:`baseline`
runs that suite in the sandbox twice on the pristine code and keeps the tests that pass
both times within a time cap, and :func:`param_drift` drops those whose node id stands
for other parameters from one run to the next: only the rest can tell a bug from a
flake. The tasks are built from them by :mod:`real_tasks`.

Command line (each step does the ones before it that are missing)::

    python -m agentgym_envs.repofix.real_projects fetch [NAME ...]
    python -m agentgym_envs.repofix.real_projects baseline [NAME ...] --log build.log
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError, did_you_mean

# the archives and the cache: real_sources (named here too, as callers know them)
from agentgym_envs.repofix.real_sources import PINNED as PINNED
from agentgym_envs.repofix.real_sources import _publish as _publish
from agentgym_envs.repofix.real_sources import _redact as _redact
from agentgym_envs.repofix.real_sources import _remove as _remove
from agentgym_envs.repofix.real_sources import cache_dir as cache_dir
from agentgym_envs.repofix.real_sources import fetch as fetch
from agentgym_envs.repofix.real_sources import source as source

LICENSE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENSE.rst", "COPYING", "LICENCE")
TEST_DIRS = ("tests", "test", "testing")
BASELINE_RUNS = 2
BASELINE_TIMEOUT_S = 120.0
DRIFT_RUNS = 4  # collections of a suite that must give each node id the same parameters
DRIFT_CHECK = 2  # the drift check's version: 2 also leaves out tests parametrised by a set
STAGE_VERSION = 3  # of the staged layout: a new one stages every project again
PYPROJECT = (
    "[tool.pytest.ini_options]\n"
    'pythonpath = ["."]\n'
    # projects name test files test_x.py, x_test.py, tests.py or test.py
    'python_files = ["test_*.py", "*_test.py", "*_tests.py", "tests.py", "test.py"]\n'
)
"""pytest's settings of a staged project: its code imports from the repository root."""


@dataclass(frozen=True)
class Project:
    """One pinned project.

    Attributes:
        name: the distribution's name on the package registry.
        version: the pinned version.
        sha256: hash of its source archive.
        license: SPDX identifier.
        root: folder of the archive that goes on ``sys.path`` ("" or ``src``...).
        packages: the importable top-level packages or modules (default: found).
        tests: test folders or files of the archive (default: found).
        license_file: the license's path in the archive (default: found).
        split: ``ood`` holds the project out: its tasks form the ``ood`` split and no
            ``train`` or ``test`` task comes from it ("" for the others).
        tasks: how many tasks a build keeps of it, where that is not the build's
            ``--per-project`` (0): a project whose bugs its tests see well can give more.
    """

    name: str
    version: str
    sha256: str
    license: str
    root: str = ""
    packages: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    license_file: str = ""
    split: str = ""
    tasks: int = 0

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def cache_key(self) -> str:
        """The key of what the cache holds for it: a new pin of the same version is a
        new entry, never the old one's files."""
        return f"{self.key}-{self.sha256[:16]}"


def pinned_path() -> Path:
    from agentgym_envs.core.tasks import tasks_root

    return tasks_root() / PINNED


def load_projects(path: str | Path | None = None) -> list[Project]:
    """The pinned projects, in file order.

    Raises:
        ConfigError: a line that is not a project (its number and what is wrong).
    """
    path = Path(path) if path is not None else pinned_path()
    known = {f.name for f in dataclasses.fields(Project)}
    projects: list[Project] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} is not JSON ({exc}); one project object per line") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - known)
        missing = [k for k in ("name", "version", "sha256", "license") if not data.get(k)]
        if unknown or missing:
            raise ConfigError(
                f"{where}: unknown fields {unknown} or missing fields {missing}; a project "
                f'line reads {{"name": ..., "version": ..., "sha256": ..., "license": ...}} '
                f"with optional {sorted(known - {'name', 'version', 'sha256', 'license'})}"
            )
        sha = str(data["sha256"]).lower()
        if len(sha) != 64 or set(sha) - set("0123456789abcdef"):
            raise ConfigError(f"{where}: sha256 must be 64 hex digits, got {data['sha256']!r}")
        if data.get("split", "") not in ("", "ood"):
            raise ConfigError(
                f'{where}: split must be "ood" (held out) or left out, got {data["split"]!r}'
            )
        tasks = data.get("tasks", 0)
        if type(tasks) is not int or tasks < 0:
            raise ConfigError(
                f"{where}: tasks must be a whole number of tasks to build from the project "
                f"(or left out for the build's --per-project), got {tasks!r}"
            )
        for many in ("packages", "tests"):
            data[many] = tuple(data.get(many) or ())
        for path_field in (*data["packages"], *data["tests"], data.get("root") or "",
                           data.get("license_file") or ""):  # fmt: skip
            if path_field.startswith("/") or ".." in Path(path_field).parts:
                raise ConfigError(f"{where}: {path_field!r} leaves the archive's folder")
        projects.append(Project(**{**data, "sha256": sha}))
    names = [p.name for p in projects]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{path} pins {twice} more than once; keep one line per project")
    return projects


@functools.lru_cache(maxsize=8)
def _pinned(path: str, mtime_ns: int) -> tuple[Project, ...]:
    return tuple(load_projects(path))


def project(name: str, projects: Sequence[Project] | None = None) -> Project:
    """The pinned project called ``name`` (the list is read again only once changed)."""
    if projects is None:  # an env looks its project up at every reset
        projects = _pinned(str(pinned_path()), pinned_path().stat().st_mtime_ns)
    for p in projects:
        if p.name == name:
            return p
    names = [p.name for p in projects]
    raise ConfigError(f"no pinned project {name!r}.{did_you_mean(name, names)}")


# -- layout ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a project's parts are in its archive."""

    root: str
    packages: tuple[str, ...]
    tests: tuple[str, ...]
    license_file: str


def layout(p: Project, tree: Path) -> Layout:
    """The project's layout: the pinned fields, else found in ``tree``.

    Raises:
        ConfigError: no package, no tests or no license file found (pin them).
    """
    root = p.root or ("src" if (tree / "src").is_dir() else "")
    base = tree / root
    packages = p.packages or tuple(
        sorted(
            d.name if d.is_dir() else d.stem
            for d in base.iterdir()
            if (d.is_dir() and (d / "__init__.py").is_file() and d.name not in TEST_DIRS)
            or (
                d.suffix == ".py"
                and d.name not in ("setup.py", "conftest.py", "noxfile.py", "fabfile.py")
                and not d.name.startswith("test")
            )
        )
    )
    tests = p.tests or tuple(
        t
        for t in [*TEST_DIRS, *(f"{root}/{pkg}/tests".lstrip("/") for pkg in packages)]
        if (tree / t).is_dir()
    )
    license_file = p.license_file or next(
        (n for n in LICENSE_NAMES if (tree / n).is_file()),
        next((f.name for f in sorted(tree.iterdir()) if f.name.upper().startswith("LICEN")), ""),
    )
    lacking = [
        what
        for what, value in (
            ("packages", packages),
            ("tests", tests),
            ("license_file", license_file),
        )
        if not value
    ]
    if lacking:
        raise ConfigError(
            f"{p.key}: found no {lacking} in its archive; pin them on its line of "
            f"{PINNED} (paths inside the archive)"
        )
    return Layout(root, packages, tests, license_file)


def stage(p: Project) -> Path:
    """The project as a RepoFix repository, built once in the cache::

        <package or module as shipped>   the code the agent works on
        <its tests, where it ships them> the hidden tests (SOURCE.json lists them)
        LICENSE                          its license file
        SOURCE.json                      name, version, sha256, license, layout
        pyproject.toml                   pytest's settings (the code imports from the root)

    Tests keep their paths (less a ``src/`` prefix), so their imports of each other
    (``from tests.util import ...``, relative imports inside a package's ``tests``) work
    as upstream wrote them.
    """
    final = cache_dir() / f"repos-v{STAGE_VERSION}" / p.cache_key
    if (final / "SOURCE.json").is_file():
        if _staged_as_pinned(p, final):
            return final
        _forget(p)  # the pin's layout changed since it was staged: stage and baseline again
    tree = source(p)
    found = layout(p, tree)
    final.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{p.key}-", dir=final.parent))

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in ("__pycache__", ".pytest_cache") or n.endswith(".pyc")}

    try:
        for name in found.packages:
            src = tree / found.root / name
            if src.is_dir():
                shutil.copytree(src, build / name, ignore=ignore)
            else:
                shutil.copyfile(src.with_suffix(".py"), build / f"{name}.py")
        hidden = []
        for t in found.tests:
            staged = t.removeprefix(f"{found.root}/") if found.root else t
            hidden.append(staged)
            if (build / staged).exists():  # inside a package, copied with it
                continue
            (build / staged).parent.mkdir(parents=True, exist_ok=True)
            if (tree / t).is_dir():
                shutil.copytree(tree / t, build / staged, ignore=ignore)
            else:
                shutil.copyfile(tree / t, build / staged)
        shutil.copyfile(tree / found.license_file, build / "LICENSE")
        (build / "pyproject.toml").write_text(PYPROJECT)
        info = {**dataclasses.asdict(p), **dataclasses.asdict(found), "hidden": hidden}
        (build / "SOURCE.json").write_text(json.dumps(info, indent=2) + "\n")
        for folder, _, files in os.walk(build):  # the copies of read-only sources
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        _publish(build, final, "SOURCE.json")
    finally:
        _remove(build)
    return final


_LAYOUT_FIELDS = ("root", "packages", "tests", "license_file")


def _staged_as_pinned(p: Project, repo: Path) -> bool:
    """Whether the staged ``repo`` has the layout the pin now asks for (every layout field
    the pin sets; the others were found in the archive)."""
    info = json.loads((repo / "SOURCE.json").read_text())
    for name in _LAYOUT_FIELDS:
        want = getattr(p, name)
        got = info.get(name)
        if want and (tuple(got) if isinstance(got, list) else got) != want:
            return False
    return True


def _forget(p: Project) -> None:
    """Drop what the cache keeps of ``p`` that its layout decides (its staged repository,
    baseline and recorded calls: every entry of a ``repos-``, ``baselines-`` or
    ``probes-`` folder named after its cache key); its archive and unpacked source stay."""
    for folder in cache_dir().glob("*-v*"):
        if folder.name.split("-v")[0] in ("repos", "baselines", "probes"):
            for entry in folder.glob(f"{p.cache_key}*"):
                if entry.is_dir():
                    _remove(entry)
                else:
                    entry.unlink()


def hidden_tests(repo: Path) -> list[str]:
    """The staged project's test paths (relative to ``repo``): what grading runs and the
    agent never sees."""
    hidden: list[str] = json.loads((repo / "SOURCE.json").read_text())["hidden"]
    return hidden


def package_files(repo: Path) -> dict[str, str]:
    """The staged project's Python sources (its tests left out), path -> text."""
    hidden = [Path(h) for h in hidden_tests(repo)]
    out = {}
    for path in sorted(repo.rglob("*.py")):
        relative = path.relative_to(repo)
        inside = any(relative == h or h in relative.parents for h in hidden)
        if not inside and "__pycache__" not in relative.parts:
            out[str(relative)] = path.read_text(encoding="utf-8")
    return out


# -- baseline -------------------------------------------------------------------------------


@dataclass
class Baseline:
    """What the pristine code's test runs showed."""

    project: str
    stable: list[str] = field(default_factory=list)  # passed in every run
    flaky: list[str] = field(default_factory=list)  # passed in some runs only
    failing: list[str] = field(default_factory=list)  # failed in every run
    skipped: int = 0
    unguarded: list[str] = field(default_factory=list)  # see :func:`usable_run`
    seconds: list[float] = field(default_factory=list)
    problem: str = ""  # why the project cannot be used (empty: it can)
    # parametrised tests whose node id stood for other parameters in another collection
    # (:func:`param_drift`); left out of ``stable``. None: not checked yet
    drifting: list[str] | None = None
    drift_check: int = 0  # the version of the check (DRIFT_CHECK) that found them

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def counts(self, p: Project) -> dict[str, Any]:
        """The baseline in numbers, for a results file: each list's length."""
        out: dict[str, Any] = {"version": p.version, "license": p.license}
        for name, value in self.to_json().items():
            out[name] = len(value) if isinstance(value, list) and name != "seconds" else value
        out.pop("project")
        return out


def _runner() -> Any:
    """A sandboxed test runner for a project's suite (the best backend here)."""
    from agentgym_envs.sandbox.backends import Limits, make_backend
    from agentgym_envs.sandbox.verify import TestRunner

    return TestRunner(make_backend("auto"), Limits(cpu_s=int(BASELINE_TIMEOUT_S)))


_UNGUARDED = ": the test function is not the one its file defines"


def usable_run(run: Any) -> tuple[bool, set[str]]:
    """Whether a test run of a project's suite can be used, and the tests it cannot vouch
    for.

    The results plugin checks that each test runs the function its file defines. Real
    suites break that rule in plain ways (a ``TestCase`` inheriting its tests from a
    mixin in another file, a test wrapped by a decorator), and the plugin reports those
    tests as tampered with, on the pristine code too. Such a test is left out of the
    tests a task may rely on (never counted as passed), and the run stays usable; any
    other report of tampering, a collection error or an unexpected exit makes it
    unusable."""
    notes = list(run.tampered)
    unguarded = {n[: -len(_UNGUARDED)] for n in notes if n.endswith(_UNGUARDED)}
    others = [p for p in run.problems if not p.startswith("the code under test patched pytest")]
    usable = (
        len(unguarded) == len(notes)
        and not others
        and run.exit_code in (0, 1)
        and bool(run.outcomes)
        and not run.collect_errors
    )
    return usable, unguarded


def _suite_run(runner: Any, repo: Path, **kwargs: Any) -> Any:
    """The staged project's whole suite, once, on a fresh copy of it (``kwargs``: as
    ``TestRunner.run``)."""
    with tempfile.TemporaryDirectory(prefix="agentgym-suite-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work)
        return runner.run(work, hidden_tests(repo), timeout_s=BASELINE_TIMEOUT_S, **kwargs)


def baseline(p: Project, runner: Any = None, runs: int = BASELINE_RUNS) -> Baseline:
    """Run the project's suite in the sandbox ``runs`` times on its pristine code.

    A project is usable when its suite ran in every run within the time cap and at least
    one test passed every time; ``stable`` are those tests.
    """
    runner = runner or _runner()
    repo = stage(p)
    result = Baseline(p.key)
    outcomes: list[dict[str, str]] = []
    for _ in range(runs):
        start = time.perf_counter()
        run = _suite_run(runner, repo)
        result.seconds.append(round(time.perf_counter() - start, 2))
        usable, unguarded = usable_run(run)
        if not usable:
            result.problem = (
                f"the suite did not run cleanly (exit code {run.exit_code}; "
                f"{'; '.join(run.problems or run.collect_errors)[:500]})"
            )
            return result
        result.unguarded = sorted(set(result.unguarded) | unguarded)
        outcomes.append({t: o for t, o in run.outcomes.items() if t not in unguarded})
    tests = sorted(set().union(*outcomes))
    for test in tests:
        seen = [o.get(test) for o in outcomes]
        if all(s == "passed" for s in seen):
            result.stable.append(test)
        elif any(s == "passed" for s in seen):
            result.flaky.append(test)
        elif all(s == "skipped" for s in seen):
            result.skipped += 1
        else:
            result.failing.append(test)
    if not result.stable:
        result.problem = "no test passed in every run"
    return result


def param_drift(p: Project, runner: Any = None, runs: int = DRIFT_RUNS) -> list[str]:
    """The parametrised tests whose node id stands for other parameters from one run to
    the next: the suite collected ``runs`` times, each in a fresh process.

    pytest names a parameter it cannot print by its position in the list (``expected9``).
    A list built from a set whose order differs per process (a set of tuples holding
    ``None``, whose hash is its address) gives one id other parameters in another run, so
    a verdict by node id would compare different tests (isodate 0.7.2's ``test_parse``).
    Each collection also names the tests whose parameters come straight from a set
    (``TestRun.unordered``): they drift however rarely their order changes, so they are
    left out without waiting to see it change (isodate's did in about one run of six,
    and four collections had missed it).

    Raises:
        ConfigError: a collection gave no parameters (the suite did not collect).
    """
    runner = runner or _runner()
    repo = stage(p)
    seen: list[dict[str, str]] = []
    unordered: set[str] = set()
    for _ in range(runs):
        run = _suite_run(runner, repo, extra=["--collect-only"], env={"AGENTGYM_PARAMS": "1"})
        if not run.params:
            raise ConfigError(
                f"{p.key}: collecting its tests gave no parameters (exit code "
                f"{run.exit_code}; {'; '.join(run.problems or run.collect_errors)[:300]})"
            )
        seen.append(run.params)
        unordered.update(run.unordered)
    ids = set().union(*seen)
    return sorted(unordered | {t for t in ids if len({s.get(t) for s in seen}) > 1})


def stored_baseline(p: Project, runner: Any = None) -> Baseline:
    """:func:`baseline` and :func:`param_drift`, run once per staged layout and kept in
    the cache (a baseline cached before the current drift check gets it on its next
    read; the tests an older check left out stay out)."""
    path = cache_dir() / f"baselines-v{STAGE_VERSION}" / f"{p.cache_key}.json"
    if path.is_file():
        result = Baseline(**json.loads(path.read_text()))
        if result.problem or (result.drifting is not None and result.drift_check >= DRIFT_CHECK):
            return result
    else:
        result = baseline(p, runner)
    if not result.problem:
        result.drifting = sorted({*(result.drifting or ()), *param_drift(p, runner)})
        result.drift_check = DRIFT_CHECK
        result.stable = [t for t in result.stable if t not in set(result.drifting)]
        if not result.stable:
            result.problem = "no test passed in every run with the same parameters"
    if not result.problem:  # a failed baseline (a timeout on a busy machine...) is re-run
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(result.to_json()) + "\n")
        os.replace(part, path)
    return result


# -- command line ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from agentgym_envs.console import ProgressLog

    parser = argparse.ArgumentParser(
        prog="python -m agentgym_envs.repofix.real_projects",
        description="Fetch, verify and test the pinned real projects RepoFix builds tasks from.",
    )
    parser.add_argument("step", choices=("fetch", "stage", "baseline"))
    parser.add_argument("names", nargs="*", help="pinned project names (default: all)")
    parser.add_argument("--list", default=None, help="the pinned list (default: the shipped one)")
    parser.add_argument("--log", default=None, help="also append the progress lines here")
    parser.add_argument(
        "--out", default=None,
        help="baseline: write the results here (the entries of pinned projects not named "
        "this time are kept from the file)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        projects = load_projects(args.list)
        chosen = [project(n, projects) for n in args.names] if args.names else projects
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    earlier = Path(args.out) if args.out else None
    if args.step == "baseline" and earlier is not None and earlier.is_file():
        try:  # a baseline of some projects updates their entries
            kept = json.loads(earlier.read_text())
        except ValueError:
            kept = None
        if not isinstance(kept, dict):
            print(f"error: {earlier} is not a baseline file; pass another --out", file=sys.stderr)
            return 2
        pinned = {p.name for p in projects}
        results = {k: v for k, v in kept.items() if k in pinned}
    failed = 0
    with ProgressLog(args.log, echo=True) as log:
        for i, p in enumerate(chosen, start=1):
            start = time.perf_counter()
            try:
                if args.step == "fetch":
                    what = f"archive {fetch(p).name} verified"
                elif args.step == "stage":
                    what = f"staged at {stage(p)}"
                else:
                    b = stored_baseline(p)
                    results[p.name] = b.counts(p)
                    what = b.problem or (
                        f"{len(b.stable)} stable tests, {len(b.flaky)} flaky, "
                        f"{len(b.failing)} failing, {b.skipped} skipped, "
                        f"{len(b.drifting or ())} drifting"
                    )
                    failed += bool(b.problem)
            except Exception as exc:  # one project's failure is its line, not the run's end
                what, failed = f"error: {exc}", failed + 1
            if args.out and results:  # as each project finishes: a stopped run keeps them
                Path(args.out).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
            seconds = time.perf_counter() - start
            log.line(f"{args.step} {i}/{len(chosen)}  {p.key}  {what}  {seconds:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
