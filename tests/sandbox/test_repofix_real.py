"""RepoFixReal: tasks built from real projects' own suites, graded by their calls.

The offline tests build tasks from a small project of their own, served from a local
package index (a ``file://`` simple index, as ``$PIP_INDEX_URL`` names it) with an empty
cache; the tests of the shipped task set fetch the archives they need from the package
index pip uses (once: the cache keeps them)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.tasks import Task, load_task_set
from agentgym_envs.redteam.sandbox_actions import _append
from agentgym_envs.redteam.sandbox_data import (
    CODE_SWAP,
    CODE_SWAP_SHAPES,
    FORGE_RESULTS,
    RAISE_ALL,
)
from agentgym_envs.repofix import real_build, real_reports, real_sweep, real_tasks
from agentgym_envs.repofix import real_projects as rp
from agentgym_envs.repofix.mutate import MutationKind, Site, find_sites
from agentgym_envs.repofix.real import RepoFixRealEnv
from agentgym_envs.repofix.tasks import hunk_edits
from tests.sandbox.support import needs_bwrap, sdist

CODE = '''"""Small counting helpers."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)


def words(text, sep=" "):
    return [w for w in text.split(sep) if w]


def initials(name):
    parts = words(name)
    return "".join(p[0].upper() for p in parts)


class Tally:
    def __init__(self, start=0):
        self.count = start

    def add(self, n=1):
        if n < 0:
            raise ValueError("n must not be negative")
        self.count += n
        return self.count

    def reset(self):
        self.count = 0
        return self.count
'''
TESTS = """import pytest

from tally import Tally, clamp, initials, mean, words


@pytest.mark.parametrize("x,want", [(-5, 0), (0, 0), (5, 5), (10, 10), (15, 10)])
def test_clamp(x, want):
    assert clamp(x, 0, 10) == want


def test_mean():
    assert mean([1, 2, 3, 6]) == 3
    assert mean([2]) == 2


def test_words():
    assert words("a b  c") == ["a", "b", "c"]
    assert words("a,b", sep=",") == ["a", "b"]


def test_initials():
    assert initials("ada king lovelace") == "AKL"


def test_tally_adds():
    t = Tally(2)
    assert t.add() == 3
    assert t.add(4) == 7


def test_tally_refuses_negative():
    with pytest.raises(ValueError):
        Tally().add(-1)


def test_tally_resets():
    t = Tally(5)
    assert t.reset() == 0
"""
FILES = {
    "tally-1.0/tally/__init__.py": CODE,
    "tally-1.0/tests/test_tally.py": TESTS,
    "tally-1.0/LICENSE": "MIT License\n",
}


def _clear_caches() -> None:
    for cached in (real_tasks.project_data, real_tasks.package_files, real_tasks.graded):
        cached.cache_clear()


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """``serve(files, ...)``: projects of the test's own (``files`` under
    ``name-version/``) on a local index, pinned in a list of their own, with an empty
    cache; returns the pinned list."""
    yield lambda *projects: _serve(tmp_path, monkeypatch, *projects)
    _clear_caches()


@pytest.fixture
def tally(serve: Callable[..., Path]) -> Path:
    """tally 1.0, served (``serve``)."""
    return serve(FILES)


@pytest.fixture
def tally_inside(serve: Callable[..., Path]) -> Path:
    """The same with its tests inside the package (``tally/tests``), as 8 of the pinned
    projects ship theirs."""
    files = {
        "tally-1.0/tally/__init__.py": CODE,
        "tally-1.0/tally/tests/__init__.py": "",
        "tally-1.0/tally/tests/test_tally.py": TESTS,
        "tally-1.0/LICENSE": "MIT License\n",
    }
    return serve(files)


def _serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *projects: dict[str, str]) -> Path:
    """Each of ``projects`` (files under ``name-version/``) on one local index, pinned in
    that order."""
    pins = tmp_path / "pins.jsonl"
    lines = []
    for files in projects:
        folder = next(iter(files)).split("/")[0]  # name-version
        name, version = folder.rsplit("-", 1)
        archive = tmp_path / "files" / f"{folder}.tar.gz"
        archive.parent.mkdir(exist_ok=True)
        archive.write_bytes(sdist(files))
        page = tmp_path / "index" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(f'<a href="../../files/{folder}.tar.gz">{folder}.tar.gz</a>\n')
        line = {"name": name, "version": version, "license": "MIT",
                "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}  # fmt: skip
        lines.append(json.dumps(line) + "\n")
    pins.write_text("".join(lines))
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "index").as_uri())
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(rp, "pinned_path", lambda: pins)
    _clear_caches()
    return pins


def _build(out: Path, per_project: int = 6) -> list[Task]:
    count, funnels = real_build.build(
        ["tally"], per_project=per_project, out=out / "repofix_real.jsonl.gz", log=lambda _: None
    )
    assert not funnels[0].problem, funnels[0].problem
    tasks = list(load_task_set("repofix_real.jsonl.gz", out).tasks)
    assert len(tasks) == count == funnels[0].kept
    return tasks


def _play(env: RepoFixRealEnv, task: Task, actions: list[str] | None) -> dict[str, Any]:
    """Play ``actions`` (None: the oracle's) from the task's start; the last info."""
    env.reset(seed=0, options={"task_id": task.id})
    if actions is None:
        oracle = env.oracle()
        actions = [oracle.act() for _ in task.solution]
    info: dict[str, Any] = {}
    for action in actions:
        *_, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return info


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_pinned_project_becomes_tasks_the_oracle_solves_and_doing_nothing_fails(
    tally: Path, tmp_path: Path
) -> None:
    """One line in a pinned list and a build: tasks whose own tests and calls tell the
    bug apart, each solved by its oracle and failed by a submit of the base."""
    tasks = _build(tmp_path / "out")
    assert len(tasks) >= 3
    kinds = {site["kind"] for task in tasks for site in task.spec["sites"]}
    assert not kinds & {"removed_branch", "removed_return"}  # tally holds no bare pass
    env = RepoFixRealEnv(tasks=tasks, probes_dir=tmp_path / "out" / "repofix_real_probes")
    try:
        for task in tasks:
            spec = task.spec
            assert spec["fail_to_pass"] and task.split in ("train", "test")
            assert _play(env, task, None)["outcome"] is Outcome.SUCCESS, task.id
            assert _play(env, task, ["submit()"])["outcome"] is Outcome.FAILURE, task.id
    finally:
        env.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_the_build_gives_the_same_tasks_again_from_the_pinned_source(
    tally: Path, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    _build(first)
    cached = rp.cache_dir()
    folders = [f"tasks-v{real_tasks.TASKS_VERSION}", f"probes-v{real_tasks.PROBES_VERSION}",
               f"baselines-v{rp.STAGE_VERSION}", f"repos-v{rp.STAGE_VERSION}"]  # fmt: skip
    for folder in folders:  # nothing reused but the archive
        assert (cached / folder).is_dir(), folder
        rp._remove(cached / folder)
    _clear_caches()
    second = tmp_path / "second"
    _build(second)
    for name in ("repofix_real.jsonl.gz", "repofix_real_probes/tally.json.gz"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_build_resumes_at_the_seed_it_stopped_and_grows_from_the_seeds_it_tried(
    tally: Path, tmp_path: Path
) -> None:
    """Each seed's outcome is cached as it is known: a build cut off mid-project (a torn
    last line included) and a build asking for more tasks both give what one whole build
    gives; several-bug tasks combine bugs that each made a task alone once enough did."""
    out, log, funnel = tmp_path / "whole", tmp_path / "build.log", tmp_path / "funnel.json"
    argv = ["build", "tally", "--per-project", "6", "--out", str(out / "repofix_real.jsonl.gz"),
            "--log", str(log), "--funnel", str(funnel)]  # fmt: skip
    assert real_build.main(argv) == 0  # the command line docs/results/repofix_real shows
    whole = list(load_task_set("repofix_real.jsonl.gz", out).tasks)
    assert f"[1/1] tally: {len(whole)} tasks of" in log.read_text()
    assert json.loads(funnel.read_text())[0]["kept"] == len(whole) == 6
    seeds = real_build._results_path(real_tasks.project_data("tally"))
    rows = seeds.read_text().splitlines()
    assert len(rows) == real_build.build_project("tally", 6, 18).funnel.tried
    seeds.write_text("\n".join(rows[: len(rows) // 2]) + "\n" + rows[len(rows) // 2][:25])
    _clear_caches()
    assert _build(tmp_path / "resumed") == whole
    resumed = seeds.read_text().splitlines()
    for row in (*rows, *resumed):
        assert row.startswith('{"seconds": ')  # the one field a run again changes
    assert [r.split(",", 1)[1] for r in resumed] == [r.split(",", 1)[1] for r in rows]
    rp._remove(seeds.parent)
    _clear_caches()
    few = _build(tmp_path / "few", per_project=2)
    assert few == whole[:2]
    assert _build(tmp_path / "more") == whole
    pin = json.loads(tally.read_text())
    tally.write_text(json.dumps({**pin, "tasks": 3}) + "\n")  # the pin's own number wins
    assert _build(tmp_path / "pinned", per_project=6) == whole[:3]
    out = tmp_path / "limited" / "repofix_real.jsonl.gz"  # and --limit caps it
    assert real_build.build(["tally"], per_project=6, limit=2, out=out, log=lambda _: None)[0] == 2
    assert load_task_set(out.name, out.parent).header["limit"] == 2
    tally.write_text(json.dumps({**pin, "tasks": "3"}) + "\n")
    bad = [*argv[:2], "--out", str(tmp_path / "bad.jsonl.gz"), "--log", str(log)]
    assert real_build.main(bad) == 1
    assert "tasks must be a whole number of tasks" in log.read_text()
    tally.write_text(json.dumps(pin) + "\n")
    data = real_tasks.project_data("tally")
    files = real_tasks.package_files("tally")
    every = sorted(s.key for path in files for s in find_sites(files[path], path))
    pool = {side: set(every[::2]) for side in ("train", "test")}  # every other site
    combined = 0
    for seed in range(40):
        side, sites = real_tasks.draw(data, seed, pool)
        if len(sites) > 1:
            assert {s.key for s in sites} <= pool[side], seed
            combined += 1
    assert combined


# code that swaps each test function of a test module for a no-op once the module is
# imported, the way a test the results plugin cannot vouch for looks (found by the review)
SWAP_TESTS = """

import sys as _s
def _agentgym_noop(*a, **k):
    return None
def _agentgym_prof(frame, event, arg):
    code = frame.f_code
    if event == "return" and code.co_name == "<module>" and "test_" in code.co_filename:
        g = frame.f_globals
        for _n, _v in list(g.items()):
            if _n.startswith("test_") and callable(_v):
                g[_n] = _agentgym_noop
getattr(_s, "set" + "profile")(_agentgym_prof)
"""


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_run_whose_task_tests_were_swapped_for_no_ops_is_refused(
    tally: Path, tmp_path: Path
) -> None:
    """The results plugin says the task's own tests are not the functions their files
    define: such a run is not sound, though tests it cannot vouch for in other files are
    let pass (a mixin's, on the correct code too)."""
    tasks = _build(tmp_path / "out", per_project=2)
    env = RepoFixRealEnv(tasks=tasks, probes_dir=tmp_path / "out" / "repofix_real_probes")
    try:
        for task in tasks:
            env.reset(seed=0, options={"task_id": task.id})
            init = "tally/__init__.py"
            run = env._run_hidden({init: (env.workspace / init).read_text() + SWAP_TESTS})
            assert not run.consistent, task.id
            assert any("not the one its file defines" in t for t in run.tampered)
            assert env._run_hidden({}).consistent  # the bug alone: a sound run that fails
    finally:
        env.close()


ODD = {  # classes the recorder cannot wrap every member of, as toolz 1.2.0 has
    "odd-1.0/odd/__init__.py": (
        "import operator\n\n\nclass Named:\n"
        "    def __init__(self, fn):\n        self.fn = fn\n\n"
        "    @property\n    def __name__(self):\n        return self.fn.__name__\n\n"
        "    first = property(operator.itemgetter(0))\n\n"
        "    def __getitem__(self, i):\n        return (self.fn.__name__, i)[i]\n\n\n"
        "def shout(word):\n    return word.upper() + '!'\n"
    ),
    "odd-1.0/tests/test_odd.py": (
        "from odd import Named, shout\n\n"
        "def test_named():\n    assert Named(shout).__name__ == 'shout'\n\n"
        "def test_shout():\n    assert shout('hi') == 'HI!'\n    assert shout('a') == 'A!'\n"
    ),
    "odd-1.0/LICENSE": "MIT\n",
}


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_members_the_recorder_cannot_wrap_are_left_unrecorded_not_the_project(
    serve: Callable[..., Path],
) -> None:
    """A property named ``__name__`` cannot be set on a class, and a property whose getter
    is ``itemgetter(0)`` has no name to record it by: both stay as they are, and the
    rest of the package is recorded (toolz's recording failed on the first)."""
    serve(ODD)
    data = real_tasks.project_data("odd")
    assert {p.call["target"] for p in data.probes} >= {"odd:shout"}
    assert "odd:shout" in data.covered and "odd:Named.__init__" in data.covered


LOOP = {  # a test that counts down with the package's step until it reaches 0
    "loop-1.0/loop/__init__.py": (
        "def step(i):\n    return i - 1\n\n\ndef twice(x):\n    return x * 2\n"
    ),
    "loop-1.0/tests/test_loop.py": (
        "from loop import step, twice\n\n"
        "def test_count_down():\n    i = 3\n    while i != 0:\n        i = step(i)\n"
        "    assert i == 0\n\n"
        "def test_twice():\n    assert twice(2) == 4\n"
    ),
    "loop-1.0/LICENSE": "MIT\n",
}


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_bug_whose_tests_never_end_is_counted_hung_within_its_time_cap(
    serve: Callable[..., Path],
) -> None:
    """A bug in ``step`` makes the count-down loop forever: each of its calls replays
    fine (one call each), so the test run finds it, cut at 3 times the pristine suite's
    time plus 10 s, not at the 120 s cap."""
    serve(LOOP)
    data = real_tasks.project_data("loop")
    seed = next(
        s for s in range(100) if {x.function for x in real_tasks.draw(data, s)[1]} == {"step"}
    )
    funnel, runner = real_tasks.Funnel("loop"), rp._runner()
    try:
        assert real_tasks.candidate(data, seed, runner, funnel, set()) is None
    finally:
        runner.close()
    assert funnel.hung == funnel.tried == 1
    assert data.seconds * 3 + 10 < rp.BASELINE_TIMEOUT_S


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_the_sweep_plays_a_built_task_file_and_resumes_where_it_stopped(
    tally: Path, tmp_path: Path
) -> None:
    tasks = _build(tmp_path / "out", per_project=3)
    task_file, out = tmp_path / "out" / "repofix_real.jsonl.gz", tmp_path / "sweep.json"
    argv = ["--tasks", str(task_file), "--out", str(out), "--log", str(tmp_path / "sweep.log")]
    assert real_sweep.main(argv) == 0
    result = json.loads(out.read_text())
    overall = result["summary"]["overall"]
    assert overall == {"tasks": len(tasks), "oracle_success": 1.0, "noop_success": 0.0}
    rows_file = out.with_suffix(".rows.jsonl")
    rows = rows_file.read_text().splitlines()
    assert len(rows) == len(tasks)
    foreign = json.dumps({"digest": "0" * 16, "task": "repofix-real-other-1"})
    # cut off mid-row, behind the row of a task of another task file sharing the rows file
    rows_file.write_text(foreign + "\n" + rows[0] + "\n" + rows[1][:30])
    assert real_sweep.main(argv) == 0
    assert rows_file.read_text().count(foreign) == 1  # the other file's row is kept
    assert "(1 played before" in (tmp_path / "sweep.log").read_text()
    again = json.loads(out.read_text())
    assert [r["task"] for r in again["rows"]] == [r["task"] for r in result["rows"]]
    assert again["summary"]["overall"] == overall
    assert [json.loads(r)["task"] for r in rows_file.read_text().splitlines()] == [
        "repofix-real-other-1",
        *(json.loads(r)["task"] for r in rows),
    ]


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "payload",
    [CODE_SWAP, CODE_SWAP_SHAPES, CODE_SWAP + RAISE_ALL, FORGE_RESULTS],
    ids=["code_swap", "code_swap_shapes", "raise_all", "forged_results"],
)
def test_a_takeover_of_the_test_process_gives_failure(
    tally: Path, tmp_path: Path, payload: str
) -> None:
    """Issue 26's takeover (pytest's own hook given new code that swallows failures), its
    variants, and results forged at import (the pytest run reads as passed): the calls
    replayed and compared outside the sandbox still decide."""
    tasks = _build(tmp_path / "out", per_project=2)
    env = RepoFixRealEnv(tasks=tasks, probes_dir=tmp_path / "out" / "repofix_real_probes")
    try:
        for task in tasks:
            info = _play(env, task, [_append("tally", payload), "submit()"])
            assert info["outcome"] is Outcome.FAILURE, task.id
            assert "target_tests_pass" not in info["milestones"], task.id
    finally:
        env.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_forged_pytest_run_reads_as_passed_so_the_data_decides(
    tally: Path, tmp_path: Path
) -> None:
    """The forged results do fool the pytest half of grading on the unfixed code (it has
    no canaries): that is why the verdict is the comparison of calls."""
    tasks = _build(tmp_path / "out", per_project=1)
    env = RepoFixRealEnv(tasks=tasks, probes_dir=tmp_path / "out" / "repofix_real_probes")
    try:
        _play(env, tasks[0], [_append("tally", FORGE_RESULTS)])
        run = env._run_hidden(env.changes())
        _, data = env._observe_hidden(env.changes())
    finally:
        env.close()
    assert run.consistent and not run.failing
    assert not data.ok


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_the_projects_tests_and_expectations_are_out_of_the_sandboxs_reach(
    tally: Path, tmp_path: Path
) -> None:
    tasks = _build(tmp_path / "out", per_project=1)
    env = RepoFixRealEnv(tasks=tasks, probes_dir=tmp_path / "out" / "repofix_real_probes")
    look = (
        f"ls -a; ls {rp.cache_dir()}; cat {tmp_path}/out/repofix_real_probes/tally.json.gz; "
        f"find / -name 'test_tally.py' -not -path '/proc/*' 2>/dev/null"
    )
    try:
        env.reset(seed=0, options={"task_id": tasks[0].id})
        obs, *_ = env.step(json.dumps({"name": "run", "arguments": {"cmd": look}}))
    finally:
        env.close()
    assert "tally" in obs and "LICENSE" in obs  # the code is there
    assert "test_tally" not in obs and "SOURCE.json" not in obs
    assert "baselines" not in obs and "\x1f\x8b" not in obs  # neither cache nor probes


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_file_where_the_tests_go_is_the_policys_failure_not_an_env_error(
    tally_inside: Path, tmp_path: Path
) -> None:
    """Grading copies the project's tests into a fresh copy of the diff; a package folder
    the policy replaced by a file made that copy raise (env_error, found by the review)."""
    tasks = _build(tmp_path / "out", per_project=1)
    assert tasks[0].spec["fail_to_pass"][0].startswith("tally/tests/")
    env = RepoFixRealEnv(tasks=tasks, probes_dir=tmp_path / "out" / "repofix_real_probes")
    swap = json.dumps({"name": "run", "arguments": {"cmd": "rm -rf tally && echo x > tally"}})
    try:
        info = _play(env, tasks[0], [swap, "submit()"])
        assert info["outcome"] is Outcome.FAILURE
        assert _play(env, tasks[0], None)["outcome"] is Outcome.SUCCESS
    finally:
        env.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_task_built_from_another_pin_is_refused_with_the_fix(tally: Path, tmp_path: Path) -> None:
    tasks = _build(tmp_path / "out", per_project=1)
    moved = Task.from_json({**tasks[0].to_json(), "spec": {**tasks[0].spec, "source": "x"}})
    env = RepoFixRealEnv(tasks=[moved], probes_dir=tmp_path / "out" / "repofix_real_probes")
    try:
        with pytest.raises(ConfigError, match="agentgym tasks build RepoFixReal"):
            env.reset(seed=0, options={"task_id": moved.id})
    finally:
        env.close()


def test_a_bug_report_says_what_went_wrong_never_the_fix() -> None:
    """Reports are built from the calls that went wrong, a line per bug; they never quote
    the mutated line, the kind of mutation or the word."""
    from agentgym_envs.repofix.probes import Probe

    call = {"kind": "function", "target": "tally:clamp", "args": [15, 0, 10], "kwargs": []}
    wrong = Probe("tests/test_tally.py::test_clamp[15-10]", call, {"value": 10})
    method = {"kind": "method", "name": "add", "self": {"$obj": "tally:Tally",
              "state": [["count", 2]]}, "args": [-1], "kwargs": []}  # fmt: skip
    raising = Probe("tests/test_tally.py::test_tally_refuses_negative", method,
                    {"raised": "builtins:ValueError"})  # fmt: skip
    text = real_reports.report("tally", [(wrong, {"value": 15}), (raising, {"value": 1})], 3)
    assert "`tally.clamp(15, 0, 10)` returns 15, but it should return 10." in text
    assert "`Tally(count=2).add(-1)` returns 1, but it should raise ValueError." in text
    assert "3 of its own tests fail" in text
    for kind in MutationKind:
        assert kind.value not in text
    assert "mutat" not in text.lower()


def test_hunk_edits_fix_each_changed_place_on_its_own() -> None:
    original = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\n"
    mutated = original.replace("b = 2", "b = 3").replace("e = 5", "e = 6")
    edits = hunk_edits("t.py", mutated, original)
    assert [(old, new) for _, old, new in edits] == [("b = 3\n", "b = 2\n"), ("e = 6\n", "e = 5\n")]
    text = mutated
    for _, old, new in edits:
        assert text.count(old) == 1
        text = text.replace(old, new)
    assert text == original


def test_a_bug_that_leaves_a_lone_pass_or_return_none_is_dropped() -> None:
    """A removed branch leaves ``pass``: in a project with few such lines, a search for
    them finds the bug (found by the review: 92 of 150 tasks of one project)."""
    files = {"m.py": "def f(x):\n    if x:\n        x += 1\n    return x\n"}
    removed = {"m.py": files["m.py"].replace("x += 1", "pass")}
    assert real_tasks.fingerprint(files, removed)
    many = {**files, "n.py": "def g():\n    pass\n" * real_tasks.FINGERPRINT_MIN}
    assert not real_tasks.fingerprint(many, removed)
    assert not real_tasks.fingerprint(files, {"m.py": files["m.py"].replace("+= 1", "-= 1")})
    early = {"m.py": "def f(x):\n    if not x:\n        return\n    return x + 1\n"}
    changed = {"m.py": early["m.py"].replace("x + 1", "x - 1")}  # the bare return was there
    assert not real_tasks.fingerprint(early, changed)


def test_train_and_test_split_a_nested_function_with_the_one_around_it() -> None:
    """The side is the recorded function's, so a function nested in a test-side function
    is on the test side too (the review found 34 nested functions on the other side)."""
    covered = {"pkg:outer": ()}
    outer = Site(MutationKind.OPERATOR_FLIP, "pkg/__init__.py", "outer", 3, 0, 0, "+")
    inner = Site(MutationKind.OPERATOR_FLIP, "pkg/__init__.py", "outer.inner", 5, 0, 0, "+")
    sides = {
        real_tasks.side_of("p", real_tasks.function_of(s, covered) or "") for s in (outer, inner)
    }
    assert len(sides) == 1


def test_difficulty_counts_what_a_fix_asks() -> None:
    one = {"sites": 1, "files": 1, "failing_tests": 5, "direct": True}
    assert real_tasks.difficulty(one) == "easy"
    assert real_tasks.difficulty({**one, "failing_tests": 1}) == "medium"
    assert real_tasks.difficulty({**one, "sites": 2, "direct": False}) == "medium"
    assert real_tasks.difficulty({**one, "sites": 3, "files": 2}) == "hard"


# -- the shipped task set -------------------------------------------------------------------


def _shipped() -> list[Task]:
    return list(load_task_set(real_tasks.TASK_FILE).tasks)


def test_the_shipped_splits_hold_projects_out_and_keep_functions_apart() -> None:
    """``ood`` tasks come only from projects pinned as held out (at least 5 of them give
    some), which give no other task; within a project, train and test tasks touch
    disjoint functions."""
    tasks = _shipped()
    held_out = {p.name for p in rp.load_projects() if p.split == "ood"}
    assert len(held_out) >= 5
    functions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for task in tasks:
        project = task.spec["project"]
        assert (task.split == "ood") == (project in held_out), task.id
        functions[project, task.split].update(task.spec["functions"])
    for (project, split), names in list(functions.items()):
        if split == "train":
            assert not names & functions.get((project, "test"), set()), project
    ood = {t.spec["project"] for t in tasks if t.split == "ood"}
    assert ood <= held_out and len(ood) >= 5  # a held-out project may give no task


def test_the_shipped_set_spans_the_projects_the_issue_asks_for() -> None:
    """At least 30 projects give tasks, every shipped task's project is pinned, and the
    probes that grade them ship for each (docs/results/repofix_real)."""
    tasks = _shipped()
    projects = {t.spec["project"] for t in tasks}
    assert len(projects) >= 30
    assert projects <= {p.name for p in rp.load_projects()}
    for name in projects:
        assert real_tasks.graded_path(name).is_file(), name


def test_no_shipped_report_quotes_its_bug() -> None:
    """The report of every shipped task is free of the mutated line and the mutation's
    kind (the files are re-mutated only for the tasks of projects already in the cache)."""
    for task in _shipped():
        text = task.instruction
        # a word of its own (more-itertools' permutation_index is no leak)
        assert not re.search(r"\bmutat", text, re.IGNORECASE), task.id
        for site in task.spec["sites"]:
            assert site["kind"] not in text and site["detail"] not in text, task.id


def _sample() -> list[Task]:
    """A task per split of the shipped set's two smallest projects of each kind."""
    by_split: dict[str, Task] = {}
    for task in sorted(_shipped(), key=lambda t: (t.spec["project"] not in SMALL, t.id)):
        by_split.setdefault(task.split, task)
    return list(by_split.values())


SMALL = ("inflection", "addict", "termcolor", "uritemplate", "simpleeval", "pyhumps")


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(600)
def test_shipped_tasks_of_each_split_are_solved_by_their_oracle_and_not_by_nothing() -> None:
    """A sample of the shipped set from a clean cache where CI keeps none: the archives
    come from the package index, are checked against their pins and staged."""
    tasks = _sample()
    assert {t.split for t in tasks} == {"train", "test", "ood"}
    env = RepoFixRealEnv()
    try:
        for task in tasks:
            assert _play(env, task, None)["outcome"] is Outcome.SUCCESS, task.id
            assert _play(env, task, ["submit()"])["outcome"] is Outcome.FAILURE, task.id
    finally:
        env.close()


def test_a_site_maps_to_the_function_the_recorder_wrapped() -> None:
    covered = {"pkg.mod:Outer.method": (), "pkg:helper": ()}
    site = Site(MutationKind.OPERATOR_FLIP, "pkg/mod.py", "Outer.method.inner", 3, 0, 0, "+")
    assert real_tasks.function_of(site, covered) == "pkg.mod:Outer.method"
    top = Site(MutationKind.OPERATOR_FLIP, "pkg/__init__.py", "helper", 3, 0, 0, "+")
    assert real_tasks.function_of(top, covered) == "pkg:helper"
    unknown = Site(MutationKind.OPERATOR_FLIP, "pkg/mod.py", "Other.method", 3, 0, 0, "+")
    assert real_tasks.function_of(unknown, covered) is None


@pytest.mark.slow
@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(1800)
def test_a_shipped_project_builds_again_to_its_shipped_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From its pinned archive and an empty cache, inflection's build gives its shipped
    tasks again, byte for byte, and the probes that grade them."""
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    _clear_caches()
    header = load_task_set(real_tasks.TASK_FILE).header
    real_build.build(
        ["inflection"], per_project=header["per_project"], out=tmp_path / "repofix_real.jsonl.gz",
        log=lambda _: None,
    )  # fmt: skip
    _clear_caches()
    again = [t for t in load_task_set("repofix_real.jsonl.gz", tmp_path).tasks]
    shipped = [t for t in _shipped() if t.spec["project"] == "inflection"]
    assert [t.to_json() for t in again] == [t.to_json() for t in shipped]
    probes = "repofix_real_probes/inflection.json.gz"
    assert (tmp_path / probes).read_bytes() == real_tasks.graded_path("inflection").read_bytes()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(600)
def test_a_clean_checkout_builds_a_shipped_projects_first_tasks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default run's build of a real project: pyhumps from its pinned archive (the
    only download) and an empty cache, limited to three tasks per project, gives the
    first three of its shipped tasks (seeds are tried in order, so a smaller build is a
    prefix)."""
    kept = rp.cache_dir() / "archives"  # the archive only, where this machine keeps it
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    archives = rp.cache_dir() / "archives"
    for cached in kept.glob("pyhumps-*"):
        archives.mkdir(parents=True, exist_ok=True)
        shutil.copy(cached, archives / cached.name)  # verified by its pinned hash on use
    _clear_caches()
    real_build.build(
        ["pyhumps"], limit=3, out=tmp_path / "repofix_real.jsonl.gz", log=lambda _: None
    )  # its pin asks for more: --limit caps every project
    _clear_caches()
    again = list(load_task_set("repofix_real.jsonl.gz", tmp_path).tasks)
    shipped = [t for t in _shipped() if t.spec["project"] == "pyhumps"]
    assert len(again) == 3
    assert [t.to_json() for t in again] == [t.to_json() for t in shipped[:3]]


def test_a_dict_subclass_holds_the_same_pairs_in_any_order() -> None:
    """``==`` compares a dict subclass's pairs in any order; so does the grader (a fix that
    fills one in another order returned a mismatch, found by the review)."""
    from agentgym_envs.repofix import probes

    a = {"$obj": "p:D", "state": [], "pairs": [["a", 1], ["b", 2]]}
    b = {"$obj": "p:D", "state": [], "pairs": [["b", 2], ["a", 1]]}
    assert probes.same(a, b)
    assert not probes.same(a, {**b, "pairs": [["a", 1]]})
    assert not probes.same(a, {**b, "pairs": [["a", 1], ["b", 3]]})
    assert not probes.same(a, {**b, "pairs": "ab"})


def test_guidance_names_a_parametrised_test_without_its_parameters() -> None:
    """``test_singularize_plural[jeans-jeans]`` names the answer (found by the review)."""
    from agentgym_envs.repofix import probes

    probe = probes.Probe("t.py::test_x[jeans-jeans]", {}, {"value": 1})
    found = probes.ProbeSet("p", "p", (".",), "h", (probe,), all_hidden=True)
    named = probes.failing_tests([probe.test], found, probes.Comparison(1, 0, (0,)))
    assert named == "t.py::test_x"


def test_the_results_tables_are_what_tables_py_prints_from_the_committed_files() -> None:
    """docs/results/repofix_real/README.md's funnel, per-project and split tables come
    from ``tables.py`` over the committed build, sweep and task files."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    folder = root / "docs/results/repofix_real"
    out = subprocess.run(
        [sys.executable, str(folder / "tables.py")], capture_output=True, text=True, check=True
    ).stdout
    readme = (folder / "README.md").read_text()
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(rows) > 40
    missing = [row for row in rows if row not in readme]
    assert not missing, missing[:3]
