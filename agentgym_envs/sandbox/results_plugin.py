"""pytest plugin the verifier loads (``-p agentgym_results``): it writes every test's
outcome, the collection errors and the exit status as JSON to ``$AGENTGYM_RESULTS``, a
folder outside the workspace, so grading never parses pytest's console output.

The sandbox mounts this file read-only. Code under test runs in the same process, so the
plugin also fingerprints pytest's reporting machinery (and itself) when it loads, before
any project code is imported, and reports what changed by the end of the session: a
"fix" that patches the test runner is caught even when it hides from a source scan.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_RESULTS: dict[str, Any] = {"tests": {}, "collect_errors": [], "exitstatus": None}
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_WATCHED = (
    "pytest", "_pytest.reports", "_pytest.runner", "_pytest.main", "_pytest.python",
    "_pytest.nodes", "_pytest.terminal", "_pytest.outcomes", "_pytest.skipping",
    "_pytest.config", "_pytest.hookspec", "pluggy", "pluggy._hooks", "pluggy._manager",
    "pluggy._callers", "json", "os", __name__,
)  # fmt: skip


def _fingerprint() -> dict[str, int]:
    """id() of every function, class and class attribute of the watched modules."""
    out: dict[str, int] = {}
    for name in _WATCHED:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) or callable(value):
                out[f"{name}.{attr}"] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for key, member in list(vars(value).items()):
                    if callable(member) or isinstance(
                        member, property | staticmethod | classmethod
                    ):
                        out[f"{name}.{attr}.{key}"] = id(member)
    return out


_BASELINE: dict[str, int] = {}


def pytest_configure(config: Any) -> None:
    import _pytest.skipping  # noqa: F401 - loaded before project code, so fingerprinted
    import pluggy._callers  # noqa: F401

    _BASELINE.update(_fingerprint())


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
    now = _fingerprint()
    changed = {k for k, v in _BASELINE.items() if now.get(k) != v}
    added = set(now) - set(_BASELINE)
    _RESULTS["tampered"] = sorted(changed | added)
    path = os.environ.get("AGENTGYM_RESULTS")
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(_RESULTS, fh)
        os.replace(tmp, path)
