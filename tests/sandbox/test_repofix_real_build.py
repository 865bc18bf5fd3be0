"""RepoFixReal's build across projects and its faults: builds of disjoint projects merge
into one build's bytes, the shipped set is what a build of every pin asks for, a fault on
one project is that project's line, a call too long to write is left out of the
recording, and no task is kept whose graded calls fail on the correct code or whose
oracle sends too long an action. The projects are the test's own, served as in
``test_repofix_real``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.repofix import real_build, real_tasks
from agentgym_envs.repofix import real_projects as rp
from agentgym_envs.repofix.real import RepoFixRealEnv
from tests.sandbox.support import needs_bwrap
from tests.sandbox.test_repofix_real import CODE, FILES, TESTS, _play, _shipped, serve

__all__ = ["serve"]  # the fixture, used by name


def _renamed(files: dict[str, str], new: str) -> dict[str, str]:
    """``files`` of tally as a project called ``new``, its package ``new`` too."""
    return {
        re.sub(r"\btally\b", new, path): re.sub(r"\btally\b", new, text)
        for path, text in files.items()
    }


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(600)
def test_builds_of_disjoint_projects_merge_into_the_file_one_build_of_all_writes(
    serve: Callable[..., Path], tmp_path: Path
) -> None:
    """Projects built apart (other machines, other days) and merged give the bytes of one
    build of them all: tasks in the pinned order, each project's probes and funnel."""
    serve(FILES, _renamed(FILES, "tallyb"))
    whole, apart = tmp_path / "whole", tmp_path / "apart"
    argv = ["--per-project", "4", "--log", str(tmp_path / "build.log")]
    assert real_build.main(["build", *argv, "--out", str(whole / "repofix_real.jsonl.gz"),
                            "--funnel", str(whole / "funnel.json")]) == 0  # fmt: skip
    for name in ("tally", "tallyb"):
        out = apart / name / "repofix_real.jsonl.gz"
        assert real_build.main(["build", name, *argv, "--out", str(out),
                                "--funnel", str(out.parent / "funnel.json")]) == 0  # fmt: skip
    merged = tmp_path / "merged"
    parts = [str(apart / n / "repofix_real.jsonl.gz") for n in ("tallyb", "tally")]
    funnels = [str(apart / n / "funnel.json") for n in ("tallyb", "tally")]
    to = ["--out", str(merged / "repofix_real.jsonl.gz")]
    funnel = ["--funnels", *funnels, "--funnel", str(merged / "funnel.json")]
    assert real_build.main(["merge", *parts, *to, *funnel]) == 0
    projects = {t.spec["project"] for t in load_task_set("repofix_real.jsonl.gz", whole).tasks}
    assert projects == {"tally", "tallyb"}
    for name in ("repofix_real.jsonl.gz", "funnel.json", "repofix_real_probes/tally.json.gz",
                 "repofix_real_probes/tallyb.json.gz"):  # fmt: skip
        assert (whole / name).read_bytes() == (merged / name).read_bytes(), name
    with pytest.raises(ConfigError, match="tally's tasks are in"):
        real_build.merge([Path(parts[1]), Path(parts[1])], tmp_path / "twice.jsonl.gz")
    twice = ["merge", parts[1], parts[1], "--out", str(tmp_path / "twice.jsonl.gz")]
    assert real_build.main(twice) == 1  # an error line, no traceback
    # tally grown to 5 tasks by its pin and built alone replaces its 4 in the whole set:
    # the bytes of a build of both with that pin
    pins = rp.pinned_path()
    lines = [json.loads(line) for line in pins.read_text().splitlines()]
    pins.write_text("".join(json.dumps({**p, "tasks": 5} if p["name"] == "tally" else p) + "\n"
                            for p in lines))  # fmt: skip
    grown, again = tmp_path / "grown", tmp_path / "again"
    assert real_build.main(["build", "tally", *argv, "--out", str(grown / "repofix_real.jsonl.gz"),
                            "--funnel", str(grown / "funnel.json")]) == 0  # fmt: skip
    assert real_build.main(["build", *argv, "--out", str(again / "repofix_real.jsonl.gz"),
                            "--funnel", str(again / "funnel.json")]) == 0  # fmt: skip
    joined = tmp_path / "joined"
    assert real_build.main([
        "merge", str(whole / "repofix_real.jsonl.gz"), str(grown / "repofix_real.jsonl.gz"),
        "--out", str(joined / "repofix_real.jsonl.gz"), "--replace", "--funnels",
        str(whole / "funnel.json"), str(grown / "funnel.json"),
        "--funnel", str(joined / "funnel.json"),
    ]) == 0  # fmt: skip
    tasks = load_task_set("repofix_real.jsonl.gz", joined).tasks
    assert sum(t.spec["project"] == "tally" for t in tasks) == 5
    for name in ("repofix_real.jsonl.gz", "funnel.json", "repofix_real_probes/tally.json.gz"):
        assert (again / name).read_bytes() == (joined / name).read_bytes(), name
    probes = "repofix_real_probes/tally.json.gz"  # the winning part's probes
    assert (joined / probes).read_bytes() == (grown / probes).read_bytes()
    header = load_task_set("repofix_real.jsonl.gz", joined).header
    assert header["projects"] == ["tally", "tallyb"] and header["tasks"] == {"tally": 5}
    # the whole set alone now holds tally built toward 4 tasks, where its pin asks for 5
    whole_part, whole_funnel = whole / "repofix_real.jsonl.gz", whole / "funnel.json"
    with pytest.raises(ConfigError, match="built tally toward 4 tasks; its pin now asks for 5"):
        real_build.merge([whole_part], tmp_path / "stale" / "repofix_real.jsonl.gz")
    # the funnels go with the parts, one each, in their order
    grown_part, grown_funnel = grown / "repofix_real.jsonl.gz", grown / "funnel.json"
    for funnels in ([whole_funnel], [grown_funnel, whole_funnel]):
        with pytest.raises(ConfigError, match="funnel"):
            real_build.merge(
                [whole_part, grown_part], tmp_path / "bad" / "repofix_real.jsonl.gz",
                funnels, tmp_path / "bad" / "funnel.json", replace=True,
            )  # fmt: skip
    with pytest.raises(ConfigError, match="limit must be a whole number"):
        real_build.build(["tally"], limit=True, out=tmp_path / "x.jsonl.gz", log=lambda _: None)
    with pytest.raises(SystemExit) as usage:
        real_build.main(["merge", parts[0]])  # no --out
    assert usage.value.code == 2


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_test_passing_an_int_too_long_to_write_is_recorded_without_that_call(
    serve: Callable[..., Path], tmp_path: Path
) -> None:
    """semver's suite passes a 5,000-digit part to a constructor: the recording wrote half
    a calls.json (json.dump raised midway) and the project's build failed on invalid
    JSON. That call is left out; the others are recorded."""
    files = {**FILES, "tally-1.0/tests/test_huge.py": (
        "from tally import clamp\n\n\ndef test_huge():\n"
        "    assert clamp(10**5000, 0, 10) == 10\n"
    )}  # fmt: skip
    serve(files)
    data = real_tasks.project_data("tally")
    tests = {p.test for p in data.probes}
    assert "tests/test_huge.py::test_huge" not in tests
    assert "tests/test_tally.py::test_mean" in tests
    assert real_tasks.stored_probes(data.project)["left_out"] >= 1


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_recording_that_ran_no_test_is_the_projects_problem_not_zero_tasks(
    serve: Callable[..., Path], tmp_path: Path
) -> None:
    """w3lib's tests/test_util.py checks the warning that importing a deprecated module
    gives; the recorder wraps the package's modules first, so no warning came, the test
    module's collection failed and pytest ran nothing (exit code 2). The recording was
    taken as a run with failing tests: no call, no task, and no word of why."""
    files = {**FILES, "tally-1.0/tally/old.py": (
        "import warnings\n\nwarnings.warn('tally.old is deprecated', DeprecationWarning)\n"
    ), "tally-1.0/tests/test_old.py": (
        "import pytest\n\nwith pytest.warns(DeprecationWarning):\n    import tally.old\n\n\n"
        "def test_old():\n    assert tally.old\n"
    )}  # fmt: skip
    serve(files)
    out, log = tmp_path / "out" / "repofix_real.jsonl.gz", tmp_path / "build.log"
    argv = ["build", "tally", "--per-project", "2", "--out", str(out), "--log", str(log)]
    assert real_build.main(argv) == 1
    assert "recording the calls of tally-1.0" in log.read_text()
    assert "exit code 2" in log.read_text()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_a_fault_of_the_build_on_one_project_is_that_projects_line_not_the_builds_end(
    serve: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception other than a ConfigError on one project ended a pooled build unwritten
    after every other project had been built; it is now that project's problem."""
    serve(FILES, _renamed(FILES, "tallyb"))
    real_candidate = real_build.candidate

    def candidate(data: Any, *args: Any) -> Any:
        if data.project.name == "tallyb":
            raise RuntimeError("a fault of the build")
        return real_candidate(data, *args)

    monkeypatch.setattr(real_build, "candidate", candidate)
    out, log = tmp_path / "out" / "repofix_real.jsonl.gz", tmp_path / "build.log"
    argv = ["build", "--per-project", "3", "--workers", "2", "--out", str(out), "--log", str(log)]
    assert real_build.main([*argv, "--funnel", str(out.parent / "funnel.json")]) == 1
    assert "tallyb: 0 tasks of 0 seeds" in log.read_text()
    assert "RuntimeError: a fault of the build" in log.read_text()
    tasks = load_task_set(out.name, out.parent).tasks
    assert tasks and {t.spec["project"] for t in tasks} == {"tally"}
    # merged after a good build with --replace, this build's tallyb (no task) wins: merge
    # knows a part's projects from its header, not from its tasks
    monkeypatch.setattr(real_build, "candidate", real_candidate)  # (undo() would unserve)
    good = tmp_path / "good" / "repofix_real.jsonl.gz"
    good_argv = ["build", "--per-project", "3", "--out", str(good), "--log", str(tmp_path / "g")]
    assert real_build.main([*good_argv, "--funnel", str(good.parent / "funnel.json")]) == 0
    assert "tallyb" in {t.spec["project"] for t in load_task_set(good.name, good.parent).tasks}
    joined = tmp_path / "joined" / "repofix_real.jsonl.gz"
    real_build.merge(
        [good, out], joined, [good.parent / "funnel.json", out.parent / "funnel.json"],
        joined.parent / "funnel.json", replace=True,
    )  # fmt: skip
    assert {t.spec["project"] for t in load_task_set(joined.name, joined.parent).tasks} == {"tally"}
    rows = {r["project"]: r for r in json.loads((joined.parent / "funnel.json").read_text())}
    assert (
        rows["tallyb-1.0"]["kept"] == 0 and "a fault of the build" in rows["tallyb-1.0"]["problem"]
    )


STATEFUL_CODE = """

class Sym:
    NOT = None

    def __init__(self, name):
        self.name = name

    def invert(self):
        return self.NOT(self)


class Not:
    def __init__(self, sym):
        self.sym = sym
        self.depth = 1


def setup():
    Sym.NOT = Not
    return 3
"""
STATEFUL_TESTS = """

def test_setup():
    from tally import setup

    assert setup() == 3


def test_invert():
    from tally import Sym

    assert Sym("a").invert().sym.name == "a"
    assert Sym("b").invert().depth == 1
    assert Sym("c").invert().sym.name == "c"
"""
STATEFUL = {  # tally, and calls whose results depend on state another test's call left
    "tally-1.0/tally/__init__.py": CODE + STATEFUL_CODE,
    "tally-1.0/tests/test_tally.py": TESTS + STATEFUL_TESTS,
    "tally-1.0/LICENSE": "MIT License\n",
}


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_no_task_is_kept_whose_graded_calls_fail_on_the_correct_code(
    serve: Callable[..., Path], tmp_path: Path
) -> None:
    """boolean.py's 60 tasks were all kept and all unsolvable: an expectation was observed
    after every test's calls (one set the class attribute the next ones use), and grading
    replays a task's calls alone. The build now replays them so on the correct code."""
    serve(STATEFUL)
    out = tmp_path / "out" / "repofix_real.jsonl.gz"
    _, funnels = real_build.build(["tally"], per_project=6, out=out, log=lambda _: None)
    assert not funnels[0].problem, funnels[0].problem
    assert funnels[0].unfixable >= 1  # the bugs in invert's path: unfixable by data
    tasks = list(load_task_set(out.name, out.parent).tasks)
    env = RepoFixRealEnv(tasks=tasks, probes_dir=out.parent / "repofix_real_probes")
    try:
        for task in tasks:
            assert _play(env, task, None)["outcome"] is Outcome.SUCCESS, task.id
    finally:
        env.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_no_task_is_kept_whose_oracle_sends_an_action_longer_than_an_agent_may(
    serve: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two persiantools tasks' oracle fixed bugs 900 lines apart in one file with one edit
    of 63,256 characters, over the 40,000 an action may have: the sweep's oracle failed
    them. Such a task is not kept, whether its seed was tried now or read from the
    cache. Here the limit is lowered so that tally's fixes are over it."""
    from agentgym_envs.repofix.env import RepoFixEnv

    serve(FILES)
    out = tmp_path / "out" / "repofix_real.jsonl.gz"
    count, funnels = real_build.build(["tally"], per_project=2, out=out, log=lambda _: None)
    assert count == 2 and funnels[0].unplayable == 0
    longest = max(len(a) for t in load_task_set(out.name, out.parent).tasks for a in t.solution)
    monkeypatch.setattr(RepoFixEnv, "max_action_chars", longest - 1)
    again = tmp_path / "again" / "repofix_real.jsonl.gz"
    count, funnels = real_build.build(["tally"], per_project=2, out=again, log=lambda _: None)
    assert funnels[0].unplayable >= 1  # the cached seed whose oracle sent it
    assert count == funnels[0].kept
    for task in load_task_set(again.name, again.parent).tasks:
        assert all(len(a) < longest for a in task.solution)


def test_the_shipped_set_is_what_a_build_of_every_pin_asks_for() -> None:
    """The shipped file's header names every pinned project and the number of tasks each
    pin asks for: a pin changed without the set built again (a project grown, added or
    dropped) fails here, and each project holds no more tasks than its pin asks for."""
    header = load_task_set(real_tasks.TASK_FILE).header
    pins = rp.load_projects()
    wanted = {p.name: real_build.tasks_wanted(p, header["per_project"]) for p in pins}
    assert header["projects"] == [p.name for p in pins]
    assert header["tasks"] == {n: w for n, w in wanted.items() if w != header["per_project"]}
    counts: dict[str, int] = {}
    for task in _shipped():
        counts[task.spec["project"]] = counts.get(task.spec["project"], 0) + 1
    assert all(count <= wanted[name] for name, count in counts.items()), counts
