"""docs/add_an_env.md and examples/counter_env.py: every code block of the guide is either
a verbatim excerpt of the example or is run here, and the example passes the conformance
checks, in process and as an installed plugin driven by the `agentgym` command."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import pytest

from agentgym_envs.core.tasks import build_task_set, write_task_set
from agentgym_envs.eval.conformance import CHECKS
from tests.plugin_support import ROOT, agentgym, plugin_environ, write_dist_info

GUIDE = ROOT / "docs" / "add_an_env.md"
EXAMPLE = ROOT / "examples" / "counter_env.py"
PLUGIN_ENV_ID = "agentgym/Counter-v0"


def code_blocks(lang: str | None = None) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of the guide, in order."""
    found = re.findall(r"^```(\w*)\n(.*?)^```", GUIDE.read_text(), flags=re.S | re.M)
    return [(lg, text) for lg, text in found if lang is None or lg == lang]


def _is_script(block: str) -> bool:
    return block.startswith("import ")


def test_every_code_block_is_exercised_by_this_module() -> None:
    blocks = code_blocks()
    assert blocks, "the guide has no code blocks"
    assert {lang for lang, _ in blocks} <= {"python", "toml", "text", "bash"}, (
        "a new kind of code block needs a test here"
    )
    assert len(code_blocks("toml")) == 1 and len(code_blocks("text")) == 1


def test_python_blocks_are_verbatim_excerpts_of_the_example() -> None:
    source = EXAMPLE.read_text()
    excerpts = [text for _, text in code_blocks("python") if not _is_script(text)]
    assert len(excerpts) >= 5
    for text in excerpts:
        assert text in source, f"the guide quotes code the example does not have:\n{text}"


def test_the_example_stays_small() -> None:
    assert len(EXAMPLE.read_text().splitlines()) <= 90


# -- the example, in process -------------------------------------------------------------


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The example module, with its task set built into a tmp ``task_dir`` and its
    ``ENTRY`` registered with Gymnasium for the duration of the module."""
    spec = importlib.util.spec_from_file_location("counter_env_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cls = module.CounterEnv
    assert cls.task_dir == EXAMPLE.parent / "tasks"  # next to its module
    cls.task_dir = tmp_path_factory.mktemp("counter-tasks")
    write_task_set(cls.task_dir / cls.task_file, cls.name, {}, build_task_set(cls))
    entry = module.ENTRY
    gym.register(id=entry.id, entry_point=entry.entry_point)
    try:
        yield module
    finally:
        gym.registry.pop(entry.id, None)
        sys.modules.pop(spec.name, None)


def test_example_entry_matches_its_class(example: ModuleType) -> None:
    entry, cls = example.ENTRY, example.CounterEnv
    assert entry.id == PLUGIN_ENV_ID and entry.version == cls.version and entry.name == cls.name
    assert entry.entry_point == "counter_env_example:CounterEnv"


def test_example_task_set_has_every_split_and_difficulty(example: ModuleType) -> None:
    env = gym.make(PLUGIN_ENV_ID)
    try:
        counts = env.unwrapped.task_set.counts()  # type: ignore[attr-defined]
    finally:
        env.close()
    assert counts == {
        s: {"easy": n, "medium": n, "hard": n} for s, n in example.CounterEnv.task_counts.items()
    }


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_example_passes_conformance(example: ModuleType, check) -> None:
    assert check.run(example.ENTRY)


# -- the example as an installed plugin, as the guide sets it up -------------------------


@dataclass
class Plugin:
    root: Path  # the tmp folder holding the plugin project and its site dir
    project: Path  # agentgym-counter/
    environ: dict[str, str]
    runs: dict[str, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Plugin:
    """Build the plugin of section 4 from the guide's own pyproject.toml, install it by
    putting its dist-info on PYTHONPATH, then run each `agentgym` line of the guide."""
    root = tmp_path_factory.mktemp("plugin")
    ((_, pyproject),) = code_blocks("toml")
    project_cfg = tomllib.loads(pyproject)["project"]
    project = root / "agentgym-counter"
    package = project / "agentgym_counter"
    package.mkdir(parents=True)
    (project / "pyproject.toml").write_text(pyproject)
    (package / "__init__.py").write_text('"""Counting, an agentgym env plugin."""\n')
    shutil.copy(EXAMPLE, package / "counter_env.py")
    site = root / "site-packages"
    write_dist_info(site, project_cfg["name"], project_cfg["version"], project_cfg["entry-points"])
    environ = plugin_environ(site, project)
    runs = {}
    for _, block in code_blocks("bash"):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if not argv:
                continue
            assert argv[0] == "agentgym", f"the guide runs {line!r}, which no test runs"
            runs[line] = agentgym(argv[1:], cwd=project, env=environ)
    return Plugin(root, project, environ, runs)


def _run(plugin: Plugin, prefix: str) -> subprocess.CompletedProcess[str]:
    (line,) = [cmd for cmd in plugin.runs if cmd.startswith(prefix)]
    result = plugin.runs[line]
    assert result.returncode == 0, f"{line} failed:\n{result.stdout}\n{result.stderr}"
    assert "PluginWarning" not in result.stderr, result.stderr
    return result


def test_plugin_tasks_build_writes_next_to_the_plugin_code(plugin: Plugin) -> None:
    _run(plugin, "agentgym tasks build")
    path = plugin.project / "agentgym_counter" / "tasks" / "counter.jsonl"
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["env"] == "Counter"
    assert len(lines) == 1 + (20 + 5 + 5) * 3  # task_counts per split, three difficulties
    assert not (plugin.project / "tasks").exists()  # not agentgym's default ./tasks


def test_plugin_layout_is_the_guides(plugin: Plugin) -> None:
    ((_, layout),) = code_blocks("text")
    for line in layout.splitlines():
        path = line.split("#")[0].strip()
        assert (plugin.root / path).is_file(), f"the guide lists {path}, which is not built"


def test_plugin_check_passes_every_check(plugin: Plugin) -> None:
    out = _run(plugin, "agentgym check").stdout
    assert PLUGIN_ENV_ID in out and "FAIL" not in out
    for check in CHECKS:
        assert check.name in out
    assert out.count("pass") == len(CHECKS)


def test_plugin_bench(plugin: Plugin) -> None:
    assert PLUGIN_ENV_ID in _run(plugin, "agentgym bench").stdout


def test_plugin_is_listed_with_the_built_in_envs(plugin: Plugin) -> None:
    listed = _run(plugin, "agentgym list").stdout
    assert PLUGIN_ENV_ID in listed and "agentgym/Sokoban-v0" in listed


def test_plugin_python_snippets_run(plugin: Plugin) -> None:
    scripts = [text for _, text in code_blocks("python") if _is_script(text)]
    assert scripts
    for script in scripts:
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=plugin.root,
            env=plugin.environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
