"""Third-party env packages made on the fly, and the `agentgym` command run against them.

A plugin here is real: its package sits in a folder on ``PYTHONPATH`` and its
``*.dist-info`` (``METADATA`` + ``entry_points.txt``) in another, which is exactly what
``importlib.metadata`` reads for an installed distribution. No mocks, no pip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_dist_info(
    site: Path, name: str, version: str, entry_points: Mapping[str, Mapping[str, str]]
) -> Path:
    """Write ``<name>-<version>.dist-info`` with its entry points (group -> name -> value)."""
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines: list[str] = []
    for group, points in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{key} = {value}" for key, value in points.items())
        lines.append("")
    (folder / "entry_points.txt").write_text("\n".join(lines))
    return folder


def plugin_environ(*paths: Path) -> dict[str, str]:
    """The environment of a process that sees ``paths`` (and this checkout) on sys.path."""
    env = dict(os.environ)
    extra = [str(p) for p in paths] + [str(ROOT)]
    if env.get("PYTHONPATH"):
        extra.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(extra)
    env.pop("PYTHONWARNINGS", None)  # the default filters: warnings print once on stderr
    return env


def agentgym(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run ``agentgym ARGS`` as a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "agentgym_envs.cli", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
