"""The sandbox runtime's own dependencies: what RepoFix needs comes with the ``sandbox``
extra, and a venv without it gets an error that names that extra (not ``dev``, which also
pulls the test and lint tools, TensorBoard and W&B)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.sandbox import runtime
from tests.missing_modules import run_without
from tests.plugin_support import ROOT


def _extra(name: str) -> set[str]:
    """The distribution names an extra of pyproject.toml lists."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower()
        for spec in project["optional-dependencies"][name]
    }


def test_the_sandbox_extra_installs_what_the_runtime_needs() -> None:
    """pytest runs inside the sandbox, and the runtime reads pytest's dependencies with
    ``packaging`` (which pytest requires anyway, so declaring it costs nothing)."""
    assert {"pytest", "packaging"} <= _extra("sandbox")
    assert {"hypothesis", "ruff", "mypy", "tensorboard", "wandb"}.isdisjoint(_extra("sandbox"))


def test_a_missing_runtime_distribution_names_the_sandbox_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name == "pytest":
            raise metadata.PackageNotFoundError(name)
        return found(name)

    monkeypatch.setattr(runtime.metadata, "distribution", distribution)
    with pytest.raises(ConfigError, match=re.escape("pip install 'agentgym-envs[sandbox]'")):
        runtime._distributions()


def test_without_packaging_the_runtime_error_names_the_sandbox_extra() -> None:
    run = run_without(
        ["packaging"],
        "from agentgym_envs.core.errors import ConfigError\n"
        "from agentgym_envs.sandbox.runtime import _distributions\n"
        "try:\n    _distributions()\nexcept ConfigError as exc:\n    print(exc)\n",
    )
    assert run.returncode == 0, run.stderr
    assert "pip install 'agentgym-envs[sandbox]'" in run.stdout
    assert "packaging" in run.stdout
