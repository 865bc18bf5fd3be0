"""Every path that imports an optional library, run without it: the user gets
``MissingExtraError`` (or a ``ConfigError``) with the exact ``pip install
'agentgym-envs[<extra>]'`` command, and the ``agentgym`` command prints it and exits non-zero,
never a traceback. A missing extra is played by hiding its modules in a subprocess
(tests/missing_modules.py), so the test needs no second venv."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from agentgym_envs.distributed.procs import marked
from agentgym_envs.integrations import extras
from tests.missing_modules import CLI, run_without
from tests.plugin_support import ROOT

# (case id, hidden modules, agentgym command line, the extra the message names); {out} is a
# fresh folder. Each run stops at the missing import, before any episode is played.
COMMANDS = [
    ("openenv-serve-pydantic", ["pydantic"], "openenv serve Retail --port 0", "openenv"),
    ("openenv-serve-openenv", ["openenv"], "openenv serve Retail --port 0", "openenv"),
    ("openenv-serve-orjson", ["orjson"], "openenv serve Retail --port 0", "openenv"),
    ("eval-hf-transformers", ["transformers"], "eval --policy hf:smollm2 --out {out}", "train"),
    ("eval-hf-torch", ["torch"], "eval --policy hf:smollm2 --out {out}", "train"),
    ("serve-torch", ["torch"], "serve --port 0", "train"),
    ("serve-transformers", ["transformers"], "serve --port 0", "train"),
    ("train-torch", ["torch"], "train --steps 1", "train"),
    ("train-tensorboard", ["tensorboard"], "train --log-to tensorboard", "tensorboard"),
    ("train-wandb", ["wandb"], "train --log-to wandb", "wandb"),
    ("eval-suite-yaml", ["yaml"], "eval --policy oracle --out {out}", "eval"),
    (
        "eval-report-matplotlib",
        ["matplotlib"],
        "eval --policy noop --entries frozenlake --trials 1 --no-store --out {out}",
        "eval",
    ),
    (
        "eval-isolation-ray",
        ["ray"],
        "eval --policy noop --entries frozenlake --trials 1 --isolation ray --out {out}",
        "dist",
    ),
    ("bench-ray", ["ray"], "bench --ray", "dist"),
    ("run-webshop-playwright", ["playwright"], "run WebShop --episodes 1", "web"),
    ("redteam-servers-torch", ["torch"], "redteam --family servers -k serve", "train"),
]

# (case id, hidden modules, Python code, the extra the message names): the library API
CALLS = [
    ("openenv-pydantic", ["pydantic"], "import agentgym_envs.integrations.openenv", "openenv"),
    ("openenv-openenv", ["openenv"], "import agentgym_envs.integrations.openenv", "openenv"),
    ("skyrl", ["skyrl_gym"], "import agentgym_envs.integrations.skyrl", "skyrl"),
    ("verl", ["verl"], "import agentgym_envs.integrations.verl", "verl"),
    (
        "trl-dataset",
        ["datasets"],
        "from agentgym_envs.integrations.trl import task_dataset\n"
        "task_dataset('agentgym/FrozenLake-v0')",
        "trl",
    ),
    (
        "trl-template",
        ["trl"],
        "from agentgym_envs.integrations.trl import use_tool_calling_template\n"
        "use_tool_calling_template(None)",
        "trl",
    ),
    (
        "hf-policy",
        ["torch"],
        "import gymnasium as gym\nfrom agentgym_envs.policies.base import make_policy\n"
        "make_policy('hf:smollm2', [gym.make('agentgym/FrozenLake-v0')])",
        "train",
    ),
    (
        "serve-local-model",
        ["torch"],
        "from agentgym_envs.serving.server import start_server\nstart_server('smollm2')",
        "train",
    ),
    (
        "ray-pool",
        ["ray"],
        "from agentgym_envs.distributed.pool import RayEnvPool\n"
        "RayEnvPool('agentgym/FrozenLake-v0', 1)",
        "dist",
    ),
    (
        "docker-backend",
        ["docker"],
        "from agentgym_envs.sandbox.backends import make_backend\nmake_backend('docker')",
        "sandbox",
    ),
    (
        "sandbox-runtime",
        ["packaging"],
        "from agentgym_envs.sandbox.runtime import runtime_dir\nruntime_dir()",
        "sandbox",
    ),
    (
        "hf-export",
        ["datasets"],
        "import tempfile\nfrom agentgym_envs.eval.export import export_hf\n"
        "from agentgym_envs.store import TrajectoryStore\n"
        "folder = tempfile.mkdtemp()\n"
        "export_hf(TrajectoryStore(folder + '/t.sqlite'), folder + '/out')",
        "eval",
    ),
    (
        "suite-yaml",
        ["yaml"],
        "from agentgym_envs.eval.suite import load_suite\nload_suite('smoke')",
        "eval",
    ),
]

CAUGHT = """
import sys
from agentgym_envs.core.errors import AgentGymError
try:
{body}
except AgentGymError as exc:
    print(type(exc).__name__ + ": " + str(exc))
    sys.exit(3)
"""


def _pip(extra: str) -> str:
    return f"pip install 'agentgym-envs[{extra}]'"


@pytest.mark.parametrize(
    ("hidden", "command", "extra"),
    [pytest.param(h, c, e, id=i) for i, h, c, e in COMMANDS],
)
def test_the_cli_names_the_missing_extra(
    hidden: list[str], command: str, extra: str, tmp_path: Path
) -> None:
    args = command.format(out=tmp_path / "out").split()
    run = run_without(hidden, CLI, args)
    output = run.stdout + run.stderr
    assert run.returncode not in (0, 1), output[-3000:]  # 1 is Python's for a traceback
    assert "Traceback" not in output, output[-3000:]
    assert _pip(extra) in " ".join(output.split()), output[-3000:]  # rich wraps lines
    assert "episode 1/" not in output, output[-3000:]  # refused before playing, not after
    # nothing it started outlives it (bench --ray once left a `ray start` head running):
    # what it started inherited this test's PYTEST_CURRENT_TEST
    left = marked("PYTEST_CURRENT_TEST", os.environ["PYTEST_CURRENT_TEST"])
    assert not left, f"processes outlived `agentgym {command}`: {left}"


@pytest.mark.parametrize(
    ("hidden", "code", "extra"),
    [pytest.param(h, c, e, id=i) for i, h, c, e in CALLS],
)
def test_the_library_names_the_missing_extra(hidden: list[str], code: str, extra: str) -> None:
    body = "\n".join("    " + line for line in code.splitlines())
    run = run_without(hidden, CAUGHT.format(body=body))
    assert run.returncode == 3, run.stderr[-3000:]
    assert _pip(extra) in run.stdout, run.stdout


def test_every_extra_of_the_table_has_a_case() -> None:
    table = extras.OPTIONAL_MODULES
    assert {m for _, hidden, _, _ in [*COMMANDS, *CALLS] for m in hidden} - {"packaging"} <= set(
        table
    )
    assert {extra for *_, extra in [*COMMANDS, *CALLS]} >= {e for _, e in table.values()}


def test_the_table_names_extras_that_install_the_module() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for module, (package, extra) in extras.OPTIONAL_MODULES.items():
        listed = {re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0] for spec in declared[extra]}
        assert package in listed, (module, package, extra)


def test_missing_extra_reads_only_a_missing_optional_top_level_module() -> None:
    missing = extras.missing_extra
    error = missing(ModuleNotFoundError("No module named 'torch'", name="torch"), "it")
    assert isinstance(error, extras.MissingExtraError) and _pip("train") in str(error)
    assert missing(ModuleNotFoundError("x", name="torch._C"), "it") is None  # a broken torch
    assert missing(ModuleNotFoundError("x", name="nosuchmodule"), "it") is None
    assert missing(ImportError("cannot import name 'x'", name="trl"), "it") is None
