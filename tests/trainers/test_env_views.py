"""The trainer reaches what an env offers beyond the Gymnasium API only through the typed
views of agentgym_envs.core.views (``env_view``), never ``getattr`` on the env."""

from __future__ import annotations

import ast
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.views import ORACLE, SPLIT_IDS, TASK_IDS, TASK_SET, TOOLSET, env_view
from agentgym_trainers.branching import write_tools
from agentgym_trainers.envs import register
from agentgym_trainers.trainer import task_ids
from tests.core.test_views import PlainEnv

TRAINER = Path(__file__).resolve().parents[2] / "agentgym_trainers"
# the members of the views: what the trainer once read with getattr(env, name, None)
MEMBERS = {
    "task_set",
    "split_ids",
    "task_ids",
    "toolset",
    "oracle",
    "generate_task",
    "task_key",
    "validate_task",
}


class ListedEnv(PlainEnv):
    """Lists its task ids (every split's) and nothing else."""

    task_ids = ("a", "b")


class BareEnv(ListedEnv):
    task_ids = ()


def test_the_fixture_lists_ids_per_split() -> None:
    register()
    env = gym.make("agentgym-train/DigitFraction-v0", num_tasks=3)
    try:
        assert env_view(env, TASK_SET) is None and env_view(env, TOOLSET) is None
        assert None not in (env_view(env, TASK_IDS), env_view(env, ORACLE))
        splits = env_view(env, SPLIT_IDS)
        assert splits is not None and splits.split_ids["test"][0] == "digits-test-0000"
        assert task_ids(env, "test", None) == [f"digits-test-000{i}" for i in range(3)]
        with pytest.raises(ConfigError, match="no split 'ood'; choose one of"):
            task_ids(env, "ood", None)
    finally:
        env.close()


def test_task_ids_come_from_the_first_view_an_env_has() -> None:
    lake = gym.make("agentgym/FrozenLake-v0")
    try:
        ids = task_ids(lake, "train", "easy")
        assert ids == [t.id for t in lake.unwrapped.task_set.pool("train", "easy")]  # type: ignore[attr-defined]
    finally:
        lake.close()
    assert task_ids(ListedEnv(), "test", None) == ["a", "b"]
    with pytest.raises(ValueError, match="BareEnv exposes no task ids"):
        task_ids(BareEnv(), "train", None)


def test_write_tools_need_the_toolset_view() -> None:
    with pytest.raises(ConfigError, match="ListedEnv declares no WRITE tool"):
        write_tools(ListedEnv())


def env_getattrs(source: str, where: str) -> list[str]:
    """Each ``getattr``/``hasattr`` call in ``source`` that names a view member."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in MEMBERS
        ):
            found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_trainer_reads_no_env_member_with_getattr() -> None:
    old = 'def f(env):\n    return getattr(env.unwrapped, "toolset", None)\n'
    assert env_getattrs(old, "old") == ["old:2 getattr(env.unwrapped, 'toolset', None)"]
    offenders = [
        hit
        for path in sorted(TRAINER.rglob("*.py"))
        for hit in env_getattrs(path.read_text(), str(path.relative_to(TRAINER.parent)))
    ]
    assert not offenders, (
        "read env members through agentgym_envs.core.views.env_view, not getattr:\n"
        + "\n".join(offenders)
    )
