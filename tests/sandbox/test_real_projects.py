"""Real projects for RepoFix: the pinned list, fetching with hash checks, safe unpacking,
staging as a RepoFix repository and the baseline test runs in the sandbox.

The offline tests serve a small project of their own from a local package index (a
``file://`` simple index, as ``$PIP_INDEX_URL`` names it); the slow one fetches the shipped
pinned list from the real index."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.repofix import real_projects as rp
from tests.sandbox.support import needs_bwrap, sdist

FILES = {
    "mini-1.0/mini/__init__.py": (
        "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    ),
    "mini-1.0/tests/test_mini.py": (
        "from mini import add, mul\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n"
        "def test_add_strings():\n    assert add('a', 'b') == 'ab'\n\n"
        "def test_mul():\n    assert mul(2, 3) == 6\n\n"
        "def test_broken_upstream():\n    assert add(1, 1) == 3\n"
    ),
    "mini-1.0/LICENSE": "MIT License\n",
    "mini-1.0/setup.py": "raise SystemExit('never run')\n",
}


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local simple index serving mini 1.0, and an empty cache."""
    archive = tmp_path / "files" / "mini-1.0.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(sdist(FILES))
    page = tmp_path / "index" / "mini" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text('<a href="../../files/mini-1.0.tar.gz#sha256=x">mini-1.0.tar.gz</a>\n')
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "index").as_uri())
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    return archive


IN_PACKAGE = {  # tests inside the package, importing it and each other relatively
    "inpkg-2.0/inpkg/__init__.py": "def two():\n    return 2\n",
    "inpkg-2.0/inpkg/tests/__init__.py": "",
    "inpkg-2.0/inpkg/tests/helpers.py": "EXPECTED = 2\n",
    "inpkg-2.0/inpkg/tests/test_two.py": (
        "from .. import two\nfrom .helpers import EXPECTED\n\n"
        "def test_two():\n    assert two() == EXPECTED\n"
    ),
    "inpkg-2.0/LICENSE.txt": "BSD\n",
}


def _serve(index: Path, name: str, version: str, files: dict[str, str]) -> rp.Project:
    """Add an archive to the index of the ``index`` fixture; its pin."""
    archive = index.parent / f"{name}-{version}.tar.gz"
    archive.write_bytes(sdist(files))
    page = index.parents[1] / "index" / name / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(f'<a href="../../files/{archive.name}">{archive.name}</a>\n')
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    return rp.Project(name=name, version=version, sha256=digest, license="BSD-3-Clause")


def _pin(archive: Path, **extra: str) -> rp.Project:
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    return rp.Project(name="mini", version="1.0", sha256=digest, license="MIT", **extra)


def test_a_line_of_the_pinned_list_that_is_not_a_project_names_the_fix(tmp_path: Path) -> None:
    good = {"name": "a", "version": "1", "sha256": "0" * 64, "license": "MIT"}
    cases = {
        "not json": "is not JSON",
        json.dumps({**good, "sha256": "abc"}): "sha256 must be 64 hex digits",
        json.dumps({"name": "a", "version": "1"}): "missing fields \\['sha256', 'license'\\]",
        json.dumps({**good, "pakages": ["a"]}): "unknown fields \\['pakages'\\]",
        json.dumps(good) + "\n" + json.dumps(good): "pins \\['a'\\] more than once",
    }
    for text, message in cases.items():
        path = tmp_path / "pins.jsonl"
        path.write_text(text + "\n")
        with pytest.raises(ConfigError, match=message):
            rp.load_projects(path)
    path.write_text(json.dumps({**good, "tests": ["t"]}) + "\n\n")
    (only,) = rp.load_projects(path)
    assert only.tests == ("t",) and only.key == "a-1"
    with pytest.raises(ConfigError, match=r"no pinned project 'simpleevel'.*'simpleeval'"):
        rp.project("simpleevel", [rp.Project("simpleeval", "1", "0" * 64, "MIT")])


def test_the_shipped_pinned_list_is_valid_and_permissive() -> None:
    projects = rp.load_projects()
    assert len(projects) >= 30
    permissive = {"MIT", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0", "PSF-2.0", "ISC",
                  "MPL-2.0", "0BSD", "Unlicense"}  # fmt: skip
    for p in projects:  # an SPDX "A OR B" lets the user pick either
        assert set(p.license.split(" OR ")) <= permissive, (p.key, p.license)


def test_fetch_checks_the_pinned_hash_and_keeps_the_archive(index: Path) -> None:
    pinned = _pin(index)
    got = rp.fetch(pinned)
    assert got.parent == rp.cache_dir() / "archives" and got.read_bytes() == index.read_bytes()
    other = rp.Project("mini", "1.0", "1" * 64, "MIT")
    with pytest.raises(ConfigError, match="serves a different file"):
        rp.fetch(other)  # the cached file is not it, nor is the index's
    index.unlink()  # the next use needs no index: the cached archive is used
    assert rp.fetch(pinned) == got
    with pytest.raises(ConfigError, match=r"lists no source archive of mini-2\.0"):
        rp.fetch(rp.Project("mini", "2.0", "1" * 64, "MIT"))


def test_a_changed_archive_on_the_index_is_refused(index: Path) -> None:
    pinned = _pin(index)
    index.write_bytes(sdist({**FILES, "mini-1.0/mini/__init__.py": "import os\n"}))
    with pytest.raises(ConfigError, match=f"pins {pinned.sha256}: the index serves a different"):
        rp.fetch(pinned)
    assert not any((rp.cache_dir() / "archives").iterdir())  # nothing kept


@pytest.mark.parametrize("member", ["../evil.py", "/etc/evil.py", "mini-1.0/../../evil.py"])
def test_an_archive_member_outside_its_folder_is_refused(index: Path, member: str) -> None:
    index.write_bytes(sdist({**FILES, member: "x = 1\n"}))
    with pytest.raises(ConfigError, match="holds a member outside its folder"):
        rp.source(_pin(index))


def test_staging_lays_the_project_out_as_a_repofix_repository(index: Path) -> None:
    repo = rp.stage(_pin(index))
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())
    assert files == [
        "LICENSE", "SOURCE.json", "mini/__init__.py", "pyproject.toml", "tests/test_mini.py"
    ]  # fmt: skip
    source = json.loads((repo / "SOURCE.json").read_text())
    assert source["name"] == "mini" and source["license"] == "MIT"
    assert source["packages"] == ["mini"] and source["tests"] == source["hidden"] == ["tests"]
    assert rp.package_files(repo) == {"mini/__init__.py": FILES["mini-1.0/mini/__init__.py"]}
    assert not (rp.source(_pin(index)) / "mini" / "__init__.py").stat().st_mode & 0o222


@needs_bwrap
def test_the_baseline_keeps_the_tests_that_pass_in_every_sandboxed_run(index: Path) -> None:
    result = rp.baseline(_pin(index))
    assert result.problem == "" and len(result.seconds) == rp.BASELINE_RUNS
    test = "tests/test_mini.py::"
    assert result.stable == [f"{test}test_add", f"{test}test_add_strings", f"{test}test_mul"]
    assert result.failing == [f"{test}test_broken_upstream"]


@needs_bwrap
def test_tests_inside_the_package_keep_their_relative_imports(index: Path) -> None:
    pinned = _serve(index, "inpkg", "2.0", IN_PACKAGE)
    repo = rp.stage(pinned)
    assert rp.hidden_tests(repo) == ["inpkg/tests"]
    assert sorted(rp.package_files(repo)) == ["inpkg/__init__.py"]  # never the tests
    result = rp.baseline(pinned)
    assert result.problem == "" and result.stable == ["inpkg/tests/test_two.py::test_two"]


MIXIN = {  # a TestCase that inherits its test from a mixin in another file
    "mixin-1.0/mixin.py": "def half(x):\n    return x / 2\n",
    "mixin-1.0/tests/__init__.py": "",
    "mixin-1.0/tests/base.py": (
        "from mixin import half\n\nclass HalfChecks:\n"
        "    def test_half(self):\n        assert half(4) == 2\n"
    ),
    "mixin-1.0/tests/test_half.py": (
        "import unittest\nfrom mixin import half\nfrom tests.base import HalfChecks\n\n"
        "class TestHalf(HalfChecks, unittest.TestCase):\n"
        "    def test_own(self):\n        assert half(2) == 1\n"
    ),
    "mixin-1.0/COPYING": "MIT\n",
}


@needs_bwrap
def test_a_test_the_guard_cannot_vouch_for_is_left_out_not_the_project(index: Path) -> None:
    """The results plugin reports an inherited test as not the function its file defines
    (it cannot tell it from a swapped one); the baseline leaves that test out of the
    stable ones a task may rely on, and keeps the project."""
    result = rp.baseline(_serve(index, "mixin", "1.0", MIXIN))
    assert result.problem == ""
    assert result.unguarded == ["tests/test_half.py::TestHalf::test_half"]
    assert result.stable == ["tests/test_half.py::TestHalf::test_own"]


def test_the_command_line_shows_a_line_per_project(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = tmp_path / "pins.jsonl"
    pins.write_text(json.dumps(json.loads(json.dumps(_pin(index).__dict__))) + "\n")
    log = tmp_path / "fetch.log"
    assert rp.main(["fetch", "--list", str(pins), "--log", str(log)]) == 0
    line = "fetch 1/1  mini-1.0  archive mini-1.0.tar.gz verified"
    assert line in capsys.readouterr().out and line in log.read_text()
    assert rp.main(["fetch", "nope", "--list", str(pins)]) == 2


@needs_bwrap
def test_the_baseline_command_writes_each_project_in_numbers(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = tmp_path / "pins.jsonl"
    pins.write_text(json.dumps(_pin(index).__dict__) + "\n")
    out = tmp_path / "baseline.json"
    assert rp.main(["baseline", "--list", str(pins), "--out", str(out)]) == 0
    mini = json.loads(out.read_text())["mini"]
    assert mini["version"] == "1.0" and mini["license"] == "MIT" and mini["problem"] == ""
    assert mini["stable"] >= 1 and mini["drifting"] == 0 and mini["drift_check"] == 2
    assert "0 drifting" in capsys.readouterr().out
    # a baseline of some projects keeps the other pinned projects' entries, drops unpinned ones
    other = {"name": "other", "version": "2.0", "sha256": "0" * 64, "license": "MIT"}
    pins.write_text(pins.read_text() + json.dumps(other) + "\n")
    out.write_text(json.dumps({"mini": {"stable": -1}, "gone": {}, "other": {"stable": 7}}))
    assert rp.main(["baseline", "mini", "--list", str(pins), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["other"] == {"stable": 7}
    assert set(json.loads(out.read_text())) == {"mini", "other"}
    assert json.loads(out.read_text())["mini"]["stable"] == mini["stable"]
    out.write_text("[]")
    assert rp.main(["baseline", "mini", "--list", str(pins), "--out", str(out)]) == 2


DRIFT = {  # a parametrised test whose list comes in another order in every process
    "drift-1.0/drift.py": "def double(xs):\n    return tuple(2 * x for x in xs)\n",
    "drift-1.0/tests/test_drift.py": (
        "import random\n\nimport pytest\n\nfrom drift import double\n\n"
        "CASES = [((i,), (2 * i,)) for i in range(20)]\n"
        "random.SystemRandom().shuffle(CASES)\n\n"
        "@pytest.mark.parametrize('xs,want', CASES)\n"
        "def test_double(xs, want):\n    assert double(xs) == want\n\n"
        "def test_plain():\n    assert double((1, 2)) == (2, 4)\n"
    ),
    "drift-1.0/LICENSE": "MIT\n",
}


@needs_bwrap
def test_a_node_id_that_names_other_parameters_in_another_run_is_not_stable(
    index: Path,
) -> None:
    """pytest names a tuple parameter by its position (``xs3-want3``): when the list's
    order differs per process, one node id is another test in each run, though each run
    passes. Such tests are left out of the stable ones (a verdict by node id would
    compare different tests); the others stay."""
    p = _serve(index, "drift", "1.0", DRIFT)
    result = rp.stored_baseline(p)
    assert result.problem == ""
    assert result.stable == ["tests/test_drift.py::test_plain"]
    assert result.drifting is not None and len(result.drifting) >= 15
    assert all(t.startswith("tests/test_drift.py::test_double[xs") for t in result.drifting)
    assert rp.stored_baseline(p) == result  # kept in the cache with the drift check


UNORDERED = {  # parameters from a set: named by their position in the set's order
    "unordered-1.0/later.py": (
        "import datetime\n\ndef later(d):\n    return d + datetime.timedelta(days=1)\n"
    ),
    "unordered-1.0/tests/test_later.py": (
        "import datetime\n\nimport pytest\n\nfrom later import later\n\n"
        "D = datetime.date\n"
        "CASES = {(D(2020, 1, i), D(2020, 1, i + 1)) for i in range(1, 9)}\n\n"
        "@pytest.mark.parametrize('day,want', CASES)\n"
        "def test_later(day, want):\n    assert later(day) == want\n\n"
        "@pytest.mark.parametrize('n', {1, 2, 3})\n"
        "def test_numbers(n):\n    assert later(D(2020, 1, n)).day == n + 1\n"
    ),
    "unordered-1.0/LICENSE": "MIT\n",
}


@needs_bwrap
def test_a_test_parametrised_by_a_set_is_not_stable_even_when_its_order_holds(
    index: Path,
) -> None:
    """A set's order is its members' hashes: dates hash by ``PYTHONHASHSEED`` (fixed in
    the sandbox, so this order never changes between collections here) and a tuple
    holding ``None`` by an address, which changed isodate's order in one run of six.
    Sampling collections cannot see a drift that does not happen on this machine, so a
    test whose parameters come from a set and are named by position (``day0-want0``) is
    left out at once; one named by its values (``1``) is not."""
    p = _serve(index, "unordered", "1.0", UNORDERED)
    result = rp.stored_baseline(p)
    assert result.problem == "" and result.drift_check == rp.DRIFT_CHECK
    assert result.drifting is not None and len(result.drifting) == 8
    assert all(t.startswith("tests/test_later.py::test_later[day") for t in result.drifting)
    assert sorted(result.stable) == [f"tests/test_later.py::test_numbers[{n}]" for n in (1, 2, 3)]


def test_a_baseline_from_an_older_drift_check_is_checked_again(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached baseline whose drift check is older than the current one gets the new
    check on its next read; the tests the old check left out stay out."""
    p = rp.project("mini", [_pin(index)])
    path = rp.cache_dir() / f"baselines-v{rp.STAGE_VERSION}" / f"{p.cache_key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = rp.Baseline("mini", stable=["t::a", "t::b", "t::c"], drifting=["t::d"], drift_check=1)
    path.write_text(json.dumps(old.to_json()))
    monkeypatch.setattr(rp, "param_drift", lambda *_a, **_k: ["t::b"])
    result = rp.stored_baseline(p)
    assert result.stable == ["t::a", "t::c"] and result.drifting == ["t::b", "t::d"]
    assert result.drift_check == rp.DRIFT_CHECK
    assert rp.Baseline(**json.loads(path.read_text())) == result
    monkeypatch.setattr(rp, "param_drift", lambda *_a, **_k: pytest.fail("checked twice"))
    assert rp.stored_baseline(p) == result


@pytest.mark.slow
@needs_bwrap
def test_every_pinned_project_fetches_and_has_a_stable_baseline(tmp_path: Path) -> None:
    """The shipped list against the real index (network; the cache keeps the archives)."""
    problems = {}
    for p in rp.load_projects():
        result = rp.stored_baseline(p)
        if result.problem or len(result.stable) < 5:
            problems[p.name] = result.problem or f"only {len(result.stable)} stable tests"
    assert problems == {}  # every pinned project is usable


def test_a_new_pin_of_the_same_version_never_reuses_the_old_files(index: Path) -> None:
    first = rp.stage(_pin(index))
    changed = {**FILES, "mini-1.0/mini/__init__.py": "def add(a, b):\n    return b + a\n"}
    index.write_bytes(sdist(changed))
    second = rp.stage(_pin(index))
    assert second != first
    assert "b + a" in (second / "mini" / "__init__.py").read_text()
    assert "a + b" in (first / "mini" / "__init__.py").read_text()


@needs_bwrap
def test_a_pin_whose_layout_changed_is_staged_and_baselined_again(index: Path) -> None:
    """funcy's pin listed test files but not the helper module one of them imports: its
    baseline failed, and the pin, fixed, was never staged again (the stage is cached by
    the archive's key alone, which a layout change keeps)."""
    narrow = _pin(index, tests=("tests/test_mini.py",))
    first = rp.stage(narrow)
    assert json.loads((first / "SOURCE.json").read_text())["hidden"] == ["tests/test_mini.py"]
    assert rp.stored_baseline(narrow).stable
    assert rp.stage(narrow) == first  # the same pin: the staged copy is kept
    recorded = rp.cache_dir() / "probes-v1" / f"{narrow.cache_key}.json"
    recorded.parent.mkdir()
    recorded.write_text("{}")  # what the calls' recording keeps, by the same key
    wide = dataclasses.replace(narrow, tests=("tests",))
    again = rp.stage(wide)
    assert json.loads((again / "SOURCE.json").read_text())["hidden"] == ["tests"]
    assert not recorded.exists()
    baselines = list((rp.cache_dir() / f"baselines-v{rp.STAGE_VERSION}").iterdir())
    assert baselines == []  # run again at the next use, on the new layout
    assert rp.stored_baseline(wide).stable
    assert (rp.cache_dir() / "archives").is_dir() and rp.stage(wide) == again


def test_the_archive_whose_listed_hash_is_the_pin_is_taken(index: Path) -> None:
    """An index listing a .zip and a .tar.gz of one version: the file whose #sha256 is the
    pinned one is downloaded, whatever the order."""
    pinned = _pin(index)
    (index.parent / "mini-1.0.zip").write_bytes(b"not the pinned file")
    page = index.parents[1] / "index" / "mini" / "index.html"
    page.write_text(
        '<a href="../../files/mini-1.0.zip#sha256=' + "0" * 64 + '">mini-1.0.zip</a>\n'
        f'<a href="../../files/mini-1.0.tar.gz#sha256={pinned.sha256}">mini-1.0.tar.gz</a>\n'
    )
    assert rp.fetch(pinned).name == "mini-1.0.tar.gz"


def test_a_token_in_the_index_url_never_reaches_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rp._redact("https://user:s3cret@host/simple/x/") == "https://***@host/simple/x/"
    monkeypatch.setenv("PIP_INDEX_URL", "http://user:s3cret@127.0.0.1:9/simple")
    with pytest.raises(ConfigError) as info:
        rp.fetch(rp.Project("mini", "1.0", "0" * 64, "MIT"))
    assert "s3cret" not in str(info.value) and "PIP_INDEX_URL" in str(info.value)


def test_a_pinned_path_outside_the_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pins.jsonl"
    line = {"name": "a", "version": "1", "sha256": "0" * 64, "license": "MIT"}
    for bad in ({"tests": ["../../etc"]}, {"license_file": "/etc/passwd"}, {"root": "a/../.."}):
        path.write_text(json.dumps({**line, **bad}) + "\n")
        with pytest.raises(ConfigError, match="leaves the archive's folder"):
            rp.load_projects(path)
