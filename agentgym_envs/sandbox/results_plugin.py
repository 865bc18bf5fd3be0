"""pytest plugin the verifier loads (``-p agentgym_results``): it writes every test's
outcome, the collection errors and the exit status as JSON to ``$AGENTGYM_RESULTS``, a
folder outside the workspace, so grading never parses pytest's console output.

The sandbox mounts this file read-only. Code under test runs in the same process, so the
plugin also guards the test run, from state it takes before any project code runs:

* a fingerprint of pytest's reporting machinery (and of itself), taken when it loads;
* the plugin manager's registry, every plugin and every hook's implementations, taken
  when collection starts (the first moment project code can run: test modules import
  it): a plugin or hook object that project code registers (found with ``gc``, say) or
  removes shows up;
* each collected test's function, taken from its module (or class) once collection is
  done: a test whose ``obj``, ``runtest`` or code is replaced afterwards shows up.

Each check runs around every test and again at the end of the session; anything found is
written as ``tampered``. Whatever disables the plugin instead (unregistering it, patching
its functions) loses the end-of-session record, which the verifier treats as a failure;
the functions it needs are bound when it loads, not looked up later.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types
from typing import Any

import pytest

_RESULTS: dict[str, Any] = {"tests": {}, "collect_errors": [], "exitstatus": None}
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_WATCHED = (
    "pytest", "_pytest.reports", "_pytest.runner", "_pytest.main", "_pytest.python",
    "_pytest.nodes", "_pytest.terminal", "_pytest.outcomes", "_pytest.skipping",
    "_pytest.config", "_pytest.hookspec", "pluggy", "pluggy._hooks", "pluggy._manager",
    "pluggy._callers", "pluggy._caller", "pluggy._execution", "pluggy._impl", "json", "os",
    "gc", __name__,
)  # fmt: skip
# bound now, before any project code runs: rebinding the module names later changes nothing
_dump, _replace, _getenv, _open = json.dump, os.replace, os.environ.get, open
_isinstance, _getattr, _id, _vars, _sorted = isinstance, getattr, id, vars, sorted


def _fingerprint() -> dict[str, int]:
    """id() of every function, class and class attribute of the watched modules."""
    out: dict[str, int] = {}
    for name in _WATCHED:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in list(_vars(module).items()):
            if _isinstance(value, type) or callable(value):
                out[f"{name}.{attr}"] = _id(value)
            if _isinstance(value, type) and value.__module__ == name:
                for key, member in list(_vars(value).items()):
                    if callable(member) or _isinstance(
                        member, property | staticmethod | classmethod
                    ):
                        out[f"{name}.{attr}.{key}"] = _id(member)
    return out


def _registry(pm: Any) -> dict[str, Any]:
    """The plugin manager's live state: its plugins, each hook's caller and
    implementations (plugin, function, ordering), and its hook executor."""
    out: dict[str, Any] = {"executor": _id(_getattr(pm, "_inner_hookexec", None))}
    out["plugins"] = frozenset((str(n), _id(p)) for n, p in pm.list_name_plugin())
    for name, caller in list(_vars(pm.hook).items()):
        impls = tuple(
            (_id(i.plugin), _id(i.function), i.hookwrapper, _getattr(i, "wrapper", False),
             i.tryfirst, i.trylast)
            for i in caller.get_hookimpls()
        )  # fmt: skip
        out[f"hook {name}"] = (_id(caller), _id(_getattr(caller, "_hookexec", None)), impls)
    return out


def _original(item: Any) -> Any:
    """The test function as its module (or class) defines it, or None (not a function)."""
    name = _getattr(item, "originalname", None)
    module = _getattr(item, "module", None)
    if not _isinstance(name, str) or not _isinstance(module, types.ModuleType):
        return None
    cls = _getattr(item, "cls", None)
    owners = _getattr(cls, "__mro__", ()) if _isinstance(cls, type) else (module,)
    for owner in owners:
        if name in _vars(owner):
            found = _vars(owner)[name]
            return _getattr(found, "__func__", found)
    return None


class _Guard:
    """What the plugin took before project code ran, and what it found changed since."""

    def __init__(self) -> None:
        self.fingerprint: dict[str, int] = {}
        self.pm: Any = None
        self.registry: dict[str, Any] = {}
        self.items: dict[str, tuple[Any, Any, Any, Any]] = {}  # nodeid -> item, fn, code, type
        self.found: list[str] = []

    def note(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)

    def start(self, pm: Any) -> None:
        self.pm, self.registry = pm, _registry(pm)

    def record(self, items: Any) -> None:
        for item in items:
            fn = _original(item)
            if fn is None:
                continue
            code = _getattr(fn, "__code__", None)
            path = os.path.realpath(str(_getattr(item, "path", "")))
            if code is None or os.path.realpath(code.co_filename) != path:
                self.note(f"{item.nodeid}: the test function is not the one its file defines")
            self.items[item.nodeid] = (item, fn, code, type(item))
            self.check_item(item)

    def check_item(self, item: Any) -> None:
        nodeid: Any = _getattr(item, "nodeid", None)
        seen = self.items.get(nodeid)
        if seen is None:
            return
        _, fn, code, kind = seen
        obj = _getattr(item, "obj", None)
        if _getattr(obj, "__func__", obj) is not fn or _getattr(fn, "__code__", None) is not code:
            self.note(f"{item.nodeid}: the test function was replaced")
        if type(item) is not kind or "runtest" in _vars(item):
            self.note(f"{item.nodeid}: the test's runtest was replaced")

    def check_registry(self) -> None:
        if self.pm is None:
            return
        now = _registry(self.pm)
        for key in _sorted(set(now) | set(self.registry)):
            if now.get(key) != self.registry.get(key):
                self.note(f"plugin manager: {key} changed")

    def check_all(self) -> None:
        self.check_registry()
        for item, *_ in list(self.items.values()):
            self.check_item(item)
        now = _fingerprint()
        changed = {k for k, v in self.fingerprint.items() if now.get(k) != v}
        for key in _sorted(changed | (set(now) - set(self.fingerprint))):
            self.note(key)


_GUARD = _Guard()


def pytest_configure(config: Any) -> None:
    import _pytest.skipping  # noqa: F401 - loaded before project code, so fingerprinted
    import pluggy._callers  # noqa: F401

    _GUARD.fingerprint.update(_fingerprint())


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: Any) -> None:
    _GUARD.start(session.config.pluginmanager)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: Any) -> None:
    _GUARD.record(session.items)
    _GUARD.check_registry()
    if _getenv("AGENTGYM_PARAMS"):  # asked by a baseline: what each node id stands for
        _RESULTS["params"] = {item.nodeid: _params(item) for item in session.items}
        _RESULTS["unordered"] = [item.nodeid for item in session.items if _unordered(item)]


def _params(item: Any) -> str:
    """A parametrised test's parameters as text (object addresses left out: they differ
    from run to run while the object does not); "" for a plain test."""
    spec = getattr(item, "callspec", None)
    if spec is None:
        return ""
    try:
        text = repr(sorted(spec.params.items()))
    except Exception as exc:  # a parameter whose repr fails
        text = f"<unrepresentable: {type(exc).__name__}>"
    return _ADDRESS.sub("", text)


# parameters pytest names by their value; any other is named by its position in the list
_BY_VALUE = (str, bytes, int, float, complex, bool, type(None), type)


def _unordered(item: Any) -> bool:
    """Whether ``item``'s node id may stand for other parameters in another process: a
    parameter pytest names by its position (``expected24``) in a list given as a set,
    whose order is its members' hashes, and a hash can be an address (a tuple holding
    ``None`` before Python 3.12) or depend on ``PYTHONHASHSEED``. Sampling collections
    finds such a test only when its order changes often (isodate 0.7.2's ``test_parse``
    named other dates in one run of six); this finds it in one."""
    spec = _getattr(item, "callspec", None)
    if spec is None or all(_isinstance(v, _BY_VALUE) for v in spec.params.values()):
        return False
    for mark in item.iter_markers(name="parametrize"):
        values = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("argvalues")
        if _isinstance(values, set | frozenset):
            return True
    return False


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    _GUARD.check_item(item)
    _GUARD.check_registry()
    yield
    _GUARD.check_item(item)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    yield
    _GUARD.check_item(item)
    _GUARD.check_registry()


def _record(nodeid: str, outcome: str) -> None:
    tests = _RESULTS["tests"]
    if nodeid not in tests or _RANK[outcome] >= _RANK[tests[nodeid]]:
        tests[nodeid] = outcome


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call":
        _record(report.nodeid, report.outcome)
    elif report.outcome == "failed":  # setup or teardown failed
        _record(report.nodeid, "error")
    elif report.outcome == "skipped":
        _record(report.nodeid, "skipped")


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _RESULTS["collect_errors"].append(report.nodeid)


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    _RESULTS["exitstatus"] = int(exitstatus)
    _GUARD.check_all()
    _RESULTS["tampered"] = list(_GUARD.found)
    _RESULTS["guarded"] = _GUARD.pm is not None  # the registry was taken before collection
    path = _getenv("AGENTGYM_RESULTS")
    if path:
        tmp = path + ".tmp"
        with _open(tmp, "w") as fh:
            _dump(_RESULTS, fh)
        _replace(tmp, path)
