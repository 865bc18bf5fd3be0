"""The fixture repositories RepoFix's tasks are built from: where they are, their sources and
a hash of their contents (task files and probe files record it)."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.sandbox.runtime import fixtures_root

TRAIN_REPOS = ("intervals", "toktext", "ledger")
OOD_REPOS = ("minicalc",)  # held out of train and test


def repo_dir(name: str) -> Path:
    path = fixtures_root() / name
    if not path.is_dir():
        raise ConfigError(f"unknown fixture repository {name!r}; known: {TRAIN_REPOS + OOD_REPOS}")
    return path


@cache
def source_files(name: str) -> dict[str, str]:
    """The package's Python sources (tests excluded), relative path -> text."""
    root = repo_dir(name)
    out = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] != "tests" and "__pycache__" not in relative.parts:
            out[str(relative)] = path.read_text()
    return out


@cache
def content_hash(name: str) -> str:
    """Hash of every file of a fixture repository (sources and both test suites)."""
    root = repo_dir(name)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        caches = {"__pycache__", ".pytest_cache"}
        if path.is_file() and not caches & set(path.parts) and path.suffix != ".pyc":
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]
