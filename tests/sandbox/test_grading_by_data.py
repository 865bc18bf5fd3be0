"""RepoFix's verdict by data (issue 26): the calls the hidden tests make into the package,
replayed on the candidate code in the sandbox, compared outside it with what the correct
code returned. A takeover of the test process, however complete, cannot forge it."""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import fractions
import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentgym_envs  # noqa: F401 - registers the envs
from agentgym_envs.core import Outcome, RewardConfig
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.redteam.sandbox import CODE_SWAP, EVERY_REPO, _append
from agentgym_envs.redteam.sandbox import attacks as sandbox_attacks
from agentgym_envs.repofix import probes
from agentgym_envs.repofix import tasks as tasks
from agentgym_envs.repofix.env import RepoFixEnv
from agentgym_envs.repofix.fixtures import OOD_REPOS, TRAIN_REPOS
from agentgym_envs.sandbox import probe_harness as harness
from agentgym_envs.sandbox.backends import ExecResult, Limits, make_backend
from agentgym_envs.sandbox.verify import TestRunner
from tests.sandbox.support import needs_bwrap

REPOS = (*TRAIN_REPOS, *OOD_REPOS)
sandboxed = [pytest.mark.sandbox, needs_bwrap]


class Color(enum.Enum):
    RED = 1


# -- the encoding and the comparison, as plain data --------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None, True, 3, -2.5, "a\ud800b", [1, (2, 3)], {"k": {1, 2}}, {(1, 2): frozenset("ab")},
        b"\x00\xff", bytearray(b"x"), 1 + 2j, range(1, 9, 2), float("nan"), float("-inf"),
        datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5),
        datetime.timedelta(days=2, seconds=5), decimal.Decimal("1.10"), fractions.Fraction(2, 3),
        Color.RED, collections.Counter("abca"), collections.OrderedDict(b=1, a=2),
        collections.defaultdict(list, {"k": [1]}), collections.deque([1, 2]),
    ],
)  # fmt: skip
def test_plain_values_survive_the_trip_through_json(value: Any) -> None:
    data = json.loads(json.dumps(harness.encode(value, "nopackage")))
    back = harness.decode(data)
    if isinstance(value, float) and value != value:
        assert back != back
    else:
        assert back == value and type(back) is type(value)


def test_what_is_not_plain_data_is_refused_not_guessed() -> None:
    for value in (lambda: 1, object(), iter([1]), {1: open}):
        with pytest.raises(harness.Unencodable):
            harness.encode(value, "nopackage")
    nested: list[Any] = []
    nested.append(nested)  # a cycle
    with pytest.raises(harness.Unencodable):
        harness.encode(nested, "nopackage")
    # a replay reads an iterator out; recording never consumes one
    assert harness.encode(iter([1, 2]), "p", read_iterators=True) == {"$iter": [1, 2]}
    stream = io.StringIO("a,b\n")
    assert harness.decode(harness.encode(stream, "p")).read() == "a,b\n"


def test_a_call_too_long_to_write_is_left_out_of_the_recording(tmp_path: Path) -> None:
    """json.dump of an int past Python's 4,300-digit limit raises after writing part of the
    file: semver's test of an oversized version part left the recording's calls.json torn
    (the whole project's build failed on it). Such a call is left out, counted."""
    recorder = harness.Recorder("p", str(tmp_path))
    recorder._note(max, "function", "", (10**4000, 1), {}, "t.py")
    recorder._note(max, "function", "", (10**5000, 1), {}, "t.py")
    recorder._note(max, "function", "", (1,), {"key": -(10**5000)}, "t.py")
    assert [c["args"][0] for c in recorder.calls] == [10**4000]
    assert recorder.left_out == 2
    json.dumps({"calls": recorder.calls})


def _probes(*expected: dict[str, Any]) -> list[probes.Probe]:
    return [probes.Probe("tests/hidden/t.py::t", {}, e) for e in expected]


def test_the_comparison_is_exact_on_what_the_expectation_says() -> None:
    want = _probes({"value": 2, "after": []}, {"raised": "pkg:E"}, {"value": [1.0, True]})
    good = [
        {"value": 2.0, "after": []},
        {"raised": "pkg:E", "message": "any"},
        {"value": [1, True]},
    ]
    assert probes.compare(want, good).ok  # numbers by value; a message no test reads is free
    assert not probes.same(True, 1) and not probes.same(1, True)  # booleans only with booleans
    for wrong in (
        [{"value": 3, "after": []}, *good[1:]],
        [{"after": []}, *good[1:]],  # a part of the expectation missing
        [good[0], {"raised": "builtins:ValueError"}, good[2]],
        [good[0], good[1], {"value": [1, 1]}],
        [*good, {"value": 0}],  # one result per call, no more
    ):
        assert not probes.compare(want, wrong).ok
    assert probes.compare(want, "the replay timed out").problem == "the replay timed out"
    assert not probes.compare([], []).ok  # nothing observed decides nothing


@pytest.mark.parametrize(
    "raw",
    [None, b"", b"not json", b"[]", b'{"observed": 3}', b'{"observed": [1]}',
     b'{"observed": {"import_failed": "builtins:SyntaxError"}}', b"[" * 100_000],
)  # fmt: skip
def test_whatever_the_sandbox_wrote_is_a_problem_of_the_run_never_an_exception(raw: Any) -> None:
    result = ExecResult("", "", 0, False, False, 1.0, None)
    found = probes._observations(raw, 2, result)
    assert isinstance(found, str)
    assert not probes.compare(_probes({"value": 1}, {"value": 2}), found).ok


def test_the_committed_probes_match_their_fixtures_and_cover_both_suites() -> None:
    for repo in REPOS:
        loaded = probes.load(repo)  # raises if the fixture changed since they were built
        assert len(loaded.suite("hidden")) > 100 and loaded.suite("visible")
        assert all("expected" not in p.call for p in loaded.probes)


def test_a_message_is_expected_only_where_a_test_reads_it() -> None:
    loaded = probes.load("intervals")
    readers = probes.message_readers(tasks.repo_dir("intervals"), ["tests"])
    raised = [p for p in loaded.probes if "raised" in p.expected]
    assert raised and any("message" in p.expected for p in raised)
    for probe in raised:
        assert ("message" in probe.expected) is (probes._function_of(probe.test) in readers)


# -- in the sandbox ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner() -> Iterator[TestRunner]:
    made = TestRunner(make_backend("auto"), Limits(cpu_s=60))
    yield made
    made.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(240)
def test_the_probes_rebuild_exactly_from_the_fixtures(tmp_path: Path, capsys: Any) -> None:
    """``python -m agentgym_envs.repofix.probes build`` (the README's command) gives the
    committed files byte for byte: recording and replay are deterministic."""
    assert probes.main(["build", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out  # one line per repository, as it goes
    assert all(f"{repo}: " in printed for repo in REPOS)
    for repo in REPOS:
        built = (tmp_path / f"{repo}.json").read_text()
        assert built == probes.probes_path(repo).read_text(), f"{repo}: rebuild the probes"


def _bugs_seen(runner: TestRunner, task: Any) -> probes.Comparison:
    return tasks.bugs_seen(task.spec["repo"], tasks.mutated_files(task.spec), runner)


def _tasks(every: bool) -> list[Any]:
    all_tasks = list(load_task_set("sandbox/repofix.jsonl").tasks)
    if every:
        return all_tasks
    first: dict[tuple[str, str, str], Any] = {}
    for task in all_tasks:
        first.setdefault((task.spec["repo"], task.difficulty, task.split), task)
    return list(first.values())


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(120)
def test_some_hidden_call_sees_the_bugs_of_one_task_per_repo_level_and_split(
    runner: TestRunner,
) -> None:
    for task in _tasks(every=False):
        seen = _bugs_seen(runner, task)
        assert seen.problem is None and seen.differing, task.id


@pytest.mark.slow
@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(1800)
def test_some_hidden_call_sees_the_bugs_of_every_task(runner: TestRunner) -> None:
    blind = [t.id for t in _tasks(every=True) if not _bugs_seen(runner, t).differing]
    assert blind == []


def _play(env: RepoFixEnv, task_id: str, actions: list[str]) -> dict[str, Any]:
    env.reset(seed=0, options={"task_id": task_id})
    info: dict[str, Any] = {}
    for action in actions:
        *_, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return info


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(300)
def test_the_takeover_reads_no_progress_in_the_tests_passing_check() -> None:
    """With the takeover, the visible tests all "pass" in the policy's run and in a pytest
    run of the env's own; the check read 1.0 before it was by data."""
    task_id = "repofix-intervals-easy-test-1000057"  # a visible test fails on its base
    env = RepoFixEnv(reward_config=RewardConfig(local_weight=0.01))
    try:
        info = _play(env, task_id, [_append("intervals", CODE_SWAP), "run_tests()", "submit()"])
    finally:
        env.close()
    assert info["step_checks"]["tests_passing"] == 0.0
    assert info["outcome"] is Outcome.FAILURE


def test_the_takeover_is_a_red_team_attack_on_every_fixture_repo() -> None:
    """tests/redteam/test_sandbox.py plays every sandbox attack; issue 26's takeover (it gave
    SUCCESS 0.997 before the verdict was by data) is one per fixture repository, plus its
    variant that makes every function of the package raise."""
    found = [a for a in sandbox_attacks() if "code_swap" in a.name]
    assert {a.options["task_id"] for a in found} == {t for t, _ in EVERY_REPO}
    assert {t.split("-")[1] for t, _ in EVERY_REPO} == set(REPOS)
    assert all(a.breach is not None for a in found)


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(60)
def test_the_expectations_are_out_of_the_sandboxs_reach() -> None:
    """The probe files (task data) are hidden from the sandbox like the task files."""
    backend = make_backend("auto")
    path = probes.probes_path("intervals")
    with tempfile.TemporaryDirectory() as tmp:
        result = backend.run(
            ["/bin/sh", "-c", f"cat {path} || ls {path.parent}"], workspace=Path(tmp), timeout_s=10
        )
    backend.close()
    assert '"expected"' not in result.stdout and "intervals.json" not in result.stdout


def test_what_hostile_code_writes_as_numbers_is_a_mismatch_never_an_error() -> None:
    """A value of 10**4000 against an expected float made ``math.isclose`` raise
    OverflowError out of the comparison: the policy's input became an env_error."""
    want = _probes({"value": 1.5}, {"value": [2.0]})
    for bad in (10**4000, -(10**4000), float("nan"), float("inf"), [10**4000], "1.5"):
        observed = [{"value": bad}, {"value": bad}]
        assert not probes.compare(want, observed).ok
    deep: Any = 1.5
    for _ in range(5000):
        deep = [deep]
    assert not probes.compare(want, [{"value": deep}, {"value": deep}]).ok
