"""The nested TrainConfig: flat names in and out, the generated command line, old JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.config import (
    DataConfig,
    SFTConfig,
    TrainConfig,
    add_arguments,
    flat_docs,
    flat_fields,
    parse,
)

# the flat keys of summary.json and checkpoints before the config was grouped
OLD_KEYS = [
    "env",
    "env_kwargs",
    "split",
    "difficulty",
    "eval_split",
    "eval_greedy_too",  # added with the CPU learning proof
    "algo",
    "model",
    "device",
    "steps",
    "time_budget_s",
    "tasks_per_step",
    "group_size",
    "n_envs",
    "max_new_tokens",
    "max_context",
    "context_policy",
    "system_prompt",
    "generation",
    "temperature",
    "top_p",
    "rollout",  # added with asynchronous rollouts
    "async_timeout_s",
    "lr",
    "lr_schedule",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "epochs",
    "minibatches",
    "micro_batch_size",
    "adv_scale",
    "whiten",
    "gamma",
    "lam",
    "time_discount",
    "clip_low",
    "clip_high",
    "dual_clip",
    "kl_coef",
    "kl_estimator",
    "kl_in_reward",
    "loss_agg",
    "target_kl",
    "entropy_coef",
    "vf_coef",
    "vf_lr",
    "value_detach",
    "vf_clip",
    "max_lag",
    "tis_cap",
    "baseline_decay",
    "curriculum_alpha",
    "curriculum_floor",
    "sft_steps",
    "sft_episodes",
    "sft_lr",
    "eval_episodes",
    "eval_temperature",
    "seed",
    "sampling_seed",
    "run_dir",
    "checkpoint_every",
    "keep_checkpoints",
    "resume",
    "log_to",  # added with the TensorBoard / W&B trackers
    "env_backend",  # added with the Ray env pool backend
    "ray_address",
    "envs_per_actor",
    "rollout_worker",  # added with the Ray rollout worker
    "branch",  # added with branch rollouts
    "branch_k",
    "branch_max_turns",
    "val_tasks",  # added with the validation slice of the learning recipes
    "tool_credit",  # added with layered credit for tool steps
    "train_pool",  # added with generated training pools
    "sft_stop_loss",  # added with the SFT early stop by loss
    "sft_stop_window",
    "sft_stop_success",  # added with the SFT early stop by train-split success
    "sft_check_every",
    "sft_check_episodes",
]


def test_to_json_keeps_the_old_flat_keys_and_from_flat_reads_them_back() -> None:
    cfg = TrainConfig.from_flat(
        algo="ppo", env_kwargs={"max_steps": 4}, sft_steps=3, eval_split="ood", lr=3e-4,
        vf_clip=None, resume=True, difficulty="easy", seed=7,
    )  # fmt: skip
    flat = cfg.to_json()
    assert sorted(flat) == sorted(OLD_KEYS)
    assert (flat["sft_steps"], flat["eval_split"], flat["lr"]) == (3, "ood", 3e-4)
    # a summary.json written before (plain JSON) builds the same config
    again = TrainConfig.from_flat(**json.loads(json.dumps(flat)))
    assert again == cfg and again.to_json() == flat
    assert (cfg.sft.steps, cfg.eval.split, cfg.optim.lr, cfg.data.seed) == (3, "ood", 3e-4, 7)
    assert cfg.objective.vf_clip is None and cfg.run.resume


def test_every_group_is_frozen_and_replace_takes_flat_names() -> None:
    cfg = TrainConfig()
    for f in dataclasses.fields(cfg):
        group = getattr(cfg, f.name)
        if dataclasses.is_dataclass(group):
            assert group.__dataclass_params__.frozen  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.optim.lr = 1.0  # type: ignore[misc]
    changed = cfg.replace(micro_batch_size=2, sft_lr=0.5)
    assert (changed.optim.micro_batch_size, changed.sft.lr) == (2, 0.5)
    assert cfg.optim.micro_batch_size == 4  # the original is untouched


def test_unknown_flat_name_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'sft_steps'"):
        TrainConfig.from_flat(sft_step=3)


def test_a_group_must_be_its_dataclass() -> None:
    with pytest.raises(ConfigError, match="from_flat"):
        TrainConfig(data={"env": "x"})  # type: ignore[arg-type]
    assert TrainConfig(data=DataConfig(env="x"), sft=SFTConfig(steps=1)).to_json()["env"] == "x"


def test_validation_still_spans_groups() -> None:
    with pytest.raises(ConfigError, match="needs --sft-steps >= 1"):
        TrainConfig.from_flat(algo="sft", steps=0)
    assert TrainConfig.from_flat(algo="sft", steps=0, sft_steps=1).run.steps == 0
    with pytest.raises(ConfigError, match="kl_in_reward needs --kl-coef"):
        TrainConfig.from_flat(kl_in_reward=True)
    with pytest.raises(ConfigError, match="baseline_decay"):
        TrainConfig.from_flat(baseline_decay=1.0)


def test_the_command_line_stays_flat() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {a.dest: a for a in parser._actions if a.dest != "help"}
    assert sorted(flags) == sorted(OLD_KEYS)
    docs, defaults = flat_docs(), TrainConfig().to_json()
    for name, action in flags.items():
        assert action.option_strings == ["--" + name.replace("_", "-")]
        assert action.help is not None and action.help.startswith(docs[name])
        assert action.default == defaults[name]
    assert set(flat_fields()) == set(OLD_KEYS)
    cfg = parse(["--sft-steps", "2", "--eval-episodes", "5", "--model", "tiny", "--resume"])
    assert (cfg.sft.steps, cfg.eval.episodes, cfg.policy.model, cfg.run.resume) == (
        2, 5, "tiny", True,
    )  # fmt: skip


def test_train_help_describes_the_command() -> None:
    """The description of ``agentgym train --help`` (TrainConfig's docstring) says what
    the command does, not that ``--help`` lists the options it is printed above."""
    from agentgym_envs.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    description = sub.choices["train"].description or ""
    assert "--help" not in description
    for word in ("GRPO", "PPO", "SFT", "episodes", "run_dir"):
        assert word in description, word
