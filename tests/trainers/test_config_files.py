"""Issue 29's configuration: traits declared once, one loss config, groups that check
themselves, the env checked at parse time, and recipes and train configs as files."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.rewards import RewardConfig
from agentgym_trainers import config as config_module
from agentgym_trainers.cli import add_parser, train_config
from agentgym_trainers.config import (
    ALGO_TRAITS,
    AdvantageConfig,
    LossConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    SFTConfig,
    TrainConfig,
    parse,
)
from agentgym_trainers.env_spec import EnvSpec
from agentgym_trainers.recipes import CONFIGS, RECIPES, find_recipe, load_recipe, train_settings

ROOT = Path(__file__).resolve().parents[2]


def test_learn_and_recipes_import_without_a_cycle() -> None:
    """recipes.py holds Recipe and ModelShape and never imports learn (which imports it)."""
    code = (
        "import sys; import agentgym_trainers.recipes; "
        "print('agentgym_trainers.learn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    source = (ROOT / "agentgym_trainers" / "learn.py").read_text()
    assert "from agentgym_trainers.recipes import RECIPES, Recipe, find_recipe" in source
    assert "class Recipe" not in source and "class ModelShape" not in source


def test_traits_are_declared_once_and_the_config_reads_them() -> None:
    assert not hasattr(config_module, "GROUP_ALGOS") and not hasattr(config_module, "BRANCH_ALGOS")
    # a new algorithm's traits change the config's checks without another edit
    ALGO_TRAITS["pairwise"] = dataclasses.replace(ALGO_TRAITS["grpo"], branch_credit=False)
    try:
        with pytest.raises(ConfigError, match="pairwise compares rollouts of a group"):
            TrainConfig.from_flat(algo="pairwise", group_size=1)
        with pytest.raises(ConfigError, match="--branch every works with grpo, rloo, reinforce"):
            TrainConfig.from_flat(algo="pairwise", branch="every")
    finally:
        del ALGO_TRAITS["pairwise"]


def test_an_algorithm_class_without_traits_fails_when_defined() -> None:
    from agentgym_trainers.algorithms.group import GRPO

    with pytest.raises(ConfigError, match="add it to ALGO_TRAITS"):
        type("Pairwise", (GRPO,), {"name": "pairwise"})


def test_the_loss_reads_the_objective_group_itself() -> None:
    from agentgym_trainers import algorithms

    assert algorithms.LossConfig is LossConfig
    assert TrainConfig().objective == LossConfig()
    with pytest.raises(ConfigError, match="kl_estimator"):
        TrainConfig.from_flat(kl_estimator="k4")
    assert not hasattr(config_module, "EvalConfig")  # agentgym_envs.eval has the one EvalConfig


@pytest.mark.parametrize(
    ("group", "values", "message"),
    [
        (RolloutConfig, {"group_size": 0}, "group_size must be >= 1"),
        (RolloutConfig, {"max_new_tokens": 64, "max_context": 64}, "smaller than max_context"),
        (RolloutConfig, {"rollout_worker": "ray"}, "add --rollout async"),
        (OptimConfig, {"tis_cap": 0.5}, "tis_cap >= 1"),
        (AdvantageConfig, {"gamma": 1.5}, "gamma and lam"),
        (AdvantageConfig, {"branch": "every", "branch_k": 1}, "--branch-k >= 2"),
        (LossConfig, {"kl_in_reward": True}, "kl_in_reward needs --kl-coef"),
        (LossConfig, {"dual_clip": 1.0}, "dual_clip"),
        (SFTConfig, {"stop_window": 0}, "sft_stop_window"),
        (RunConfig, {"log_to": "tensorbored"}, "tensorbored"),
    ],
)
def test_each_group_checks_its_own_fields(
    group: type, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        group(**values)  # no TrainConfig needed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "agentgym/FrozenLak-v0"], "Did you mean 'agentgym/FrozenLake-v0'"),
        (["--env-kwargs", '{"max_step": 3}'], "Did you mean 'max_steps'"),
        (["--env-kwargs", '{"reward_config": {"local_weigh": 0.1}}'], "'local_weight'"),
        (["--env-kwargs", '{"reward_config": {"success": "high"}}'], "must be a number"),
        (["--env-kwargs", '{"reward_config": {"milestone_total": 2}}'], "lower milestone_total"),
    ],
)
def test_a_bad_env_fails_when_the_command_line_is_parsed(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(argv)


def test_the_env_spec_is_typed() -> None:
    spec = parse(["--env-kwargs", '{"max_steps": 8, "reward_config": {"local_weight": 0.05}}'])
    got = spec.data.env_spec()
    assert got == EnvSpec(
        "agentgym/FrozenLake-v0", RewardConfig(local_weight=0.05), {"max_steps": 8}
    )
    assert spec.data.env_kwargs == {"max_steps": 8, "reward_config": {"local_weight": 0.05}}


def test_committed_recipes_are_the_shipped_files() -> None:
    assert {p.stem for p in CONFIGS.glob("*.toml")} == set(RECIPES) == {"frozenlake", "dungeon"}
    for name, recipe in RECIPES.items():
        assert recipe.name == name and recipe.why
        assert find_recipe(name) is recipe


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym")
    add_parser(parser.add_subparsers())
    return parser


def test_a_copied_recipe_runs_by_path_and_trains_by_config(tmp_path: Path) -> None:
    copy = tmp_path / "mine.toml"
    text = (CONFIGS / "frozenlake.toml").read_text()
    copy.write_text(
        text.replace('name = "frozenlake"', 'name = "mine"').replace("lr = 0.001", "lr = 0.002")
    )
    recipe = find_recipe(str(copy))
    assert (recipe.name, recipe.train["lr"]) == ("mine", 0.002)
    # agentgym train --config: the file's [train] over the defaults, given flags over both
    args = _train_parser().parse_args(["train", "--config", str(copy), "--steps", "3"])
    cfg = train_config(args)
    assert (cfg.run.steps, cfg.optim.lr, cfg.rollout.system_prompt) == (3, 0.002, False)
    assert cfg.data.env_kwargs == {"max_steps": 8} and cfg.policy.device == "cpu"
    # a flag equal to its default still wins over the file
    args = _train_parser().parse_args(["train", "--config", str(copy), "--lr", "1e-5"])
    assert train_config(args).optim.lr == 1e-5


def test_a_bad_recipe_file_names_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nalgo = ["grpo"]\n[train]\nsteps = 2\n')
    with pytest.raises(ConfigError, match="did you mean 'algos'"):
        load_recipe(bad)
    bad.write_text('name = "x"\n[train]\nsft_step = 2\n')
    with pytest.raises(ConfigError, match="did you mean 'sft_steps'"):
        load_recipe(bad)
    bad.write_text('name = "x"\n[train]\nenv = "agentgym/FrozenLak-v0"\n')
    with pytest.raises(ConfigError, match="Did you mean 'agentgym/FrozenLake-v0'"):
        find_recipe(str(bad))


def test_a_run_summary_is_a_train_config_file(tmp_path: Path) -> None:
    """An old run folder's summary.json (flat keys under "config") starts a new run."""
    flat = TrainConfig.from_flat(algo="ppo", lr=3e-4, sft_steps=2).to_json()
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"steps": 20, "config": flat}))
    assert train_settings(summary) == flat
    args = _train_parser().parse_args(["train", "--config", str(summary)])
    assert train_config(args) == TrainConfig.from_flat(**flat)
