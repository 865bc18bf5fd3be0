"""Third-party envs through the ``agentgym_envs.envs`` entry points: a broken plugin is
skipped with a warning naming it and the fix, and never breaks the other envs."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym_envs import registration
from agentgym_envs.core import EnvNotFoundError, PluginError
from agentgym_envs.registration import ENTRY_POINT_GROUP, EnvEntry, Plugin, env_class
from tests.plugin_support import agentgym, plugin_environ, write_dist_info

# what the entry points of the in-process tests point at
NOT_AN_ENTRY = "agentgym/Counter-v0"
CLASHES_WITH_SOKOBAN = EnvEntry("Sokoban", "0", "tests.core.counter_env:CounterEnv", "test")
BAD_ID = EnvEntry("Two Words", "0", "tests.core.counter_env:CounterEnv", "test")
BAD_VERSION = EnvEntry("Counting", "zero", "tests.core.counter_env:CounterEnv", "test")
TWICE = [EnvEntry("Twice", "0", "tests.core.counter_env:CounterEnv", "test")] * 2
GOOD = [
    EnvEntry("PluginCounter", "0", "tests.core.counter_env:CounterEnv", "test"),
    EnvEntry("PluginCounterStop", "0", "tests.core.counter_env:CounterEnv", "test"),
]
GHOST = EnvEntry("PluginGhost", "0", "tests.no_such_module:GhostEnv", "test")


def _load(attribute: str, module: str = __name__) -> Plugin:
    point = EntryPoint("demo", f"{module}:{attribute}", ENTRY_POINT_GROUP)
    return registration._load_plugin(point, {e.id: "agentgym-envs" for e in registration.ENVS})


@pytest.mark.parametrize(
    ("attribute", "problem", "fix"),
    [
        ("NOT_AN_ENTRY", "points at ['str'], expected an EnvEntry", "point the entry point at"),
        ("CLASHES_WITH_SOKOBAN", "'agentgym/Sokoban-v0' is already registered", "give the"),
        ("BAD_ID", "'agentgym/Two Words-v0' is not a valid env id", "use a name of"),
        ("BAD_VERSION", "'agentgym/Counting-vzero' is not a valid env id", "use a name"),
        ("TWICE", "'agentgym/Twice-v0' is already registered by plugin 'demo'", "give the"),
        ("NO_SUCH_ATTRIBUTE", "importing it raised AttributeError", "fix that error"),
    ],
)
def test_a_broken_plugin_is_skipped_with_the_problem_and_the_fix(attribute, problem, fix) -> None:
    plugin = _load(attribute)
    assert plugin.entries == () and plugin.error is not None
    assert plugin.error.startswith(f"plugin 'demo' ({__name__}:{attribute}")
    assert problem in plugin.error and f"Fix: {fix}" in plugin.error
    assert "The other envs are unaffected" in plugin.error
    assert not any("Twice" in env_id or "Two Words" in env_id for env_id in gym.registry)


def test_a_plugin_whose_module_is_missing_is_skipped() -> None:
    plugin = _load("ENTRY", module="tests.no_such_plugin_module")
    assert plugin.error is not None and "ModuleNotFoundError" in plugin.error


def test_a_good_plugin_registers_all_its_envs() -> None:
    plugin = _load("GOOD")
    try:
        assert plugin.error is None and plugin.entries == tuple(GOOD)
        env = gym.make("agentgym/PluginCounter-v0")
        assert env.reset(seed=0)[0].startswith("Count to")
        env.close()
    finally:
        for entry in GOOD:
            gym.registry.pop(entry.id, None)


def test_find_names_the_plugins_that_failed(monkeypatch) -> None:
    broken = _load("NOT_AN_ENTRY")
    monkeypatch.setattr(registration, "_PLUGINS", (broken,))
    with pytest.raises(EnvNotFoundError) as caught:
        registration.find("Counter")
    assert "no env 'Counter' is registered" in str(caught.value)
    assert str(broken.error) in str(caught.value)


def test_an_unimportable_env_class_raises_a_plugin_error(monkeypatch) -> None:
    plugin = Plugin("ghost", f"{__name__}:GHOST", "agentgym-ghost", entries=(GHOST,))
    monkeypatch.setattr(registration, "_PLUGINS", (plugin,))
    assert registration.all_entries()[-1] == GHOST
    with pytest.raises(PluginError, match="comes from plugin 'ghost'") as caught:
        env_class(GHOST)
    assert "tests.no_such_module:GhostEnv" in str(caught.value)
    assert "reinstall 'agentgym-ghost'" in str(caught.value)
    with pytest.raises(ModuleNotFoundError):  # a built-in env's import error is a bug: raise it
        env_class(EnvEntry("Sokoban", "0", "agentgym_envs.no_such_module:X", "games"))


# -- the `agentgym` command with broken plugins installed --------------------------------


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two installed plugins: one whose module raises on import, one whose env class
    does not exist."""
    root = tmp_path_factory.mktemp("broken-plugins")
    src = root / "src"
    (src / "agentgym_boom").mkdir(parents=True)
    (src / "agentgym_boom" / "__init__.py").write_text("raise RuntimeError('boom at import')\n")
    (src / "agentgym_ghost").mkdir()
    (src / "agentgym_ghost" / "__init__.py").write_text(
        "from agentgym_envs.registration import EnvEntry\n"
        "ENTRY = EnvEntry('Ghost', '0', 'agentgym_ghost.missing:GhostEnv', 'test')\n"
    )
    site = root / "site-packages"
    write_dist_info(site, "agentgym-boom", "1.0", {ENTRY_POINT_GROUP: {"boom": "agentgym_boom"}})
    ghost = {ENTRY_POINT_GROUP: {"ghost": "agentgym_ghost:ENTRY"}}
    write_dist_info(site, "agentgym-ghost", "1.0", ghost)
    return plugin_environ(site, src)


def _flat(text: str) -> str:
    """Table output with the cell borders and line wraps removed."""
    return " ".join(text.replace("│", " ").split())


def test_list_skips_broken_plugins_and_shows_the_other_envs(
    broken_site: dict[str, str], tmp_path: Path
) -> None:
    result = agentgym(["list", "--json"], cwd=tmp_path, env=broken_site)
    assert result.returncode == 0, result.stderr
    ids = [row["id"] for row in json.loads(result.stdout)]
    assert "agentgym/Sokoban-v0" in ids and "agentgym/Ghost-v0" not in ids
    err = _flat(result.stderr)
    assert "PluginWarning: plugin 'boom' (agentgym_boom, from distribution 'agentgym-boom')" in err
    assert "RuntimeError: boom at import. Fix:" in err
    assert "skipped agentgym/Ghost-v0: agentgym/Ghost-v0 comes from plugin 'ghost'" in err


def test_check_of_a_broken_plugin_says_why(broken_site: dict[str, str], tmp_path: Path) -> None:
    result = agentgym(["check", "Boom"], cwd=tmp_path, env=broken_site)
    assert result.returncode == 2
    out = _flat(result.stdout)
    assert "no env 'Boom' is registered" in out and "plugin 'boom'" in out
    assert "boom at import" in out and "Fix:" in out

    result = agentgym(["check", "Ghost"], cwd=tmp_path, env=broken_site)
    assert result.returncode == 1
    out = _flat(result.stdout)
    assert "agentgym/Ghost-v0 import FAIL" in out and "1 check(s) failed" in out
    assert "ModuleNotFoundError" in out and "agentgym_ghost.missing" in out


def test_bench_of_an_unimportable_plugin_env_names_the_plugin(
    broken_site: dict[str, str], tmp_path: Path
) -> None:
    result = agentgym(["bench", "Ghost", "--seconds", "0.1"], cwd=tmp_path, env=broken_site)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "agentgym/Ghost-v0 comes from plugin 'ghost'" in _flat(result.stdout)
