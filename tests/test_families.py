"""The built-in families' records (``Family``, agentgym_envs/core/family.py) and the rule
they serve: a shared layer learns about a family only through the registry.

The scan reads the source with ``ast``: outside the family packages, no module may import
a family package or hold a string that names a built-in family, env or env id (the
switches ``entry.family == "web"`` and ``{"Retail": ...}`` used to). Docstrings and
comments may name them. A module a family record points at (its red-team attacks) is the
family's own code, wherever it lives; the few other exceptions are listed with why.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.family import Family, FamilyCost, resolve
from agentgym_envs.registration import ENVS, FAMILY_RECORDS, families, family

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = families()
PACKAGES = tuple(f.package for f in FAMILIES)

# modules that are a family's code outside its package, beyond what a record points at
FAMILY_HELPERS = {
    "agentgym_envs.redteam.sandbox_actions": "sandbox",  # helpers of its red-team attacks
    "agentgym_envs.redteam.sandbox_data": "sandbox",
}
# shared modules that may name a family, and the exact strings they may use
ALLOWED: dict[str, set[str] | frozenset[str] | None] = {
    # the registry itself: the env table and the records' addresses (None: anything)
    "agentgym_envs.registration": None,
    # pip extras that happen to share a family's name (pyproject's optional-dependencies)
    "agentgym_envs.integrations.extras": {"web", "sandbox"},
    # the sandbox's hostname and the label on its Docker containers
    "agentgym_envs.sandbox.backends": {"sandbox"},
    # the server attacks need one env to serve; any would do
    "agentgym_envs.redteam.servers": {"agentgym/FrozenLake-v0", "FrozenLake"},
}
SHARED_TEST_FILES = ("tests/env_params.py",)


def _forbidden() -> set[str]:
    names = {f.name for f in FAMILIES}
    for e in ENVS:
        names |= {e.name, e.id, f"{e.name}-v{e.version}"}
    return names


def _in_family_package(name: str) -> bool:
    return any(name == p or name.startswith((p + ".", p + ":")) for p in PACKAGES)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (a string expression statement)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def violations(source: str, allowed: set[str] | frozenset[str] | None = frozenset()) -> list[str]:
    """Where ``source`` imports a family package or names a built-in family or env, but
    for the ``allowed`` strings (None: anything)."""
    if allowed is None:
        return []
    tree = ast.parse(source)
    skip, forbidden = _docstrings(tree), _forbidden()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {a.name}" for a in node.names if _in_family_package(a.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(_in_family_package(t) for t in targets):
                found.append(f"{node.lineno}: from {node.module} import ...")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and node.value not in allowed
            and (node.value in forbidden or _in_family_package(node.value))
        ):
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def _family_owned() -> set[str]:
    owned = set(FAMILY_HELPERS)
    for record in FAMILIES:
        owned |= {ref.partition(":")[0] for ref in record.references().values()}
    return owned


def _shared_modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "agentgym_envs").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not _in_family_package(module) and module not in _family_owned():
            out[module] = path
    return out


def test_no_shared_layer_names_a_builtin_family() -> None:
    found = {}
    for module, path in _shared_modules().items():
        hits = violations(path.read_text(), ALLOWED.get(module, frozenset()))
        if hits:
            found[module] = hits
    for name in SHARED_TEST_FILES:
        hits = violations((ROOT / name).read_text())
        if hits:
            found[name] = hits
    assert not found, (
        "shared layers switch on built-in families; declare what they need in the family's "
        f"record (agentgym_envs/core/family.py) and iterate registration.families(): {found}"
    )


def test_the_scan_catches_a_family_switch() -> None:
    assert violations('if entry.family == "web":\n    pass\n')
    assert violations('ATTACKS = {"Retail": f}\n')
    assert violations('gym.make("agentgym/Sokoban-v0")\n')
    assert violations("from agentgym_envs.repofix.bench import bench_repofix\n")
    assert violations("from agentgym_envs import web\n")
    assert violations('sys.modules.get("agentgym_envs.web.browser")\n')
    # a docstring or comment may name them; so may a longer message
    assert not violations('"""Retail and WebShop."""\n# games\nx = "an env such as Sokoban"\n')


def test_allowed_exceptions_are_still_needed() -> None:
    for module, strings in ALLOWED.items():
        path = _shared_modules()[module]
        if strings is not None:
            assert violations(path.read_text()), f"{module} no longer needs its exception"
            left = violations(path.read_text(), strings)
            assert not left, f"{module}: {left}"
    for helper, name in FAMILY_HELPERS.items():
        importers = [
            m for m, path in _shared_modules().items() if helper in path.read_text() and m != helper
        ]
        assert not importers, f"{helper} ({name}'s helper) is used by shared modules {importers}"


def test_every_registered_family_has_a_complete_record() -> None:
    assert [f.name for f in FAMILIES] == list(dict.fromkeys(e.family for e in ENVS))
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {m.split(":")[0] for m in markers["markers"]}
    for record, ref in zip(FAMILIES, FAMILY_RECORDS, strict=True):
        assert isinstance(record, Family) and isinstance(record.cost, FamilyCost)
        assert family(record.name) is record
        assert ref == f"{record.package}:FAMILY"
        entries = [e for e in ENVS if e.family == record.name]
        assert all(e.entry_point.startswith(record.package + ".") for e in entries), record.name
        names = {e.name for e in entries}
        assert set(record.bench_ray) <= names, record.name
        classes = {resolve(e.entry_point).name for e in entries}
        assert set(record.injection) <= classes, f"{record.name}: {record.injection}"
        assert set(record.test_marks) <= declared, record.name
        assert bool(record.bench) == bool(record.bench_table)


@pytest.mark.parametrize("record", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_reference_of_a_record_resolves_to_a_function(record: Family) -> None:
    for what, ref in record.references().items():
        target = resolve(ref)
        assert callable(target), f"{record.name}.{what} = {ref!r} is not callable"
        params = inspect.signature(target).parameters
        arity = {"bench": 1, "bench_table": 2, "redteam": 0, "actor_close": 0}
        expected = 2 if what.startswith("injection") else arity[what]
        required = [p for p in params.values() if p.default is inspect.Parameter.empty]
        assert len(required) == expected, f"{record.name}.{what} takes {list(params)}"


def test_a_family_without_a_record_gets_the_defaults() -> None:
    from agentgym_envs.distributed.resources import DEFAULT_COST, default_resources
    from agentgym_envs.wrappers.attacks import _declared

    assert family("examples") is None
    assert default_resources("agentgym/Counter-v0", 2).num_cpus == 2 * DEFAULT_COST.cpus_per_env
    assert _declared("Counter") is None
    for record in FAMILIES:
        for env_name, ref in record.injection.items():
            assert _declared(env_name) is resolve(ref)


def test_a_record_refuses_malformed_references() -> None:
    cost = FamilyCost(0.5, 100, 10)
    with pytest.raises(ConfigError, match="module:attribute"):
        Family("x", "pkg", cost, redteam="pkg.redteam.attacks")
    with pytest.raises(ConfigError, match="bench_table"):
        Family("x", "pkg", cost, bench="pkg.bench:run")
    with pytest.raises(ConfigError, match=">= 0"):
        FamilyCost(-1, 0, 0)
    with pytest.raises(ConfigError, match="has no attribute"):
        resolve("agentgym_envs.core.family:nothing")


def test_records_cost_nothing_to_import() -> None:
    # importing every record loads no env module and nothing heavy
    code = (
        "import sys\n"
        "from agentgym_envs.registration import families\n"
        "families()\n"
        "heavy = ('torch', 'playwright', 'docker', 'ray', 'agentgym_envs.redteam')\n"
        f"packages = {PACKAGES!r}\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy) or "
        "m.startswith(tuple(p + '.' for p in packages))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    for record in FAMILIES:
        assert importlib.import_module(record.package).FAMILY is record
