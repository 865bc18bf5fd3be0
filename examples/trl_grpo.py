"""Train a model on an agentgym env with TRL's GRPOTrainer (guide: docs/integrations.md).

    pip install -e ".[trl]"            # TRL, datasets, torch and transformers
    python examples/trl_grpo.py --model smollm2 --env agentgym/FrozenLake-v0
    python examples/trl_grpo.py --model smollm2 --env agentgym/Retail-v1 --mode rollout_func

``--mode environment_factory`` (the default) exposes the env's tools as native tool
calls; ``--mode rollout_func`` lets the model write actions as text, token in / token out.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from trl import GRPOConfig, GRPOTrainer

from agentgym_envs.integrations.trl import (
    TextRollout,
    env_reward,
    environment_class,
    task_dataset,
    use_tool_calling_template,
)
from agentgym_envs.llm.models import load_model


def device_settings() -> dict[str, Any]:
    """TRL assumes a GPU with bf16; this picks what the machine has: the CPU in float32
    when there is no CUDA device, bf16 only on a GPU that supports it."""
    import torch

    if torch.cuda.is_available():
        return {"bf16": torch.cuda.is_bf16_supported()}
    return {"use_cpu": True, "bf16": False}


def build_trainer(
    model: str,
    env_id: str = "agentgym/FrozenLake-v0",
    mode: str = "environment_factory",
    output_dir: str = "runs/trl-grpo",
    tasks: int = 64,
    **config: Any,
) -> GRPOTrainer:
    """A GRPOTrainer on ``tasks`` train tasks of ``env_id``.

    Args:
        model: A model folder, or an agentgym model spec (``smollm2``, ``tiny``), saved
            to a folder first (TRL loads models from folders or the Hub).
        env_id: The env to train on.
        mode: ``environment_factory`` (native tool calls) or ``rollout_func`` (text).
        output_dir: Where TRL writes checkpoints and logs.
        tasks: How many train tasks the dataset holds.
        **config: More ``GRPOConfig`` fields (they override the defaults below and the
            device that ``device_settings`` picks).
    """
    if not (Path(model) / "config.json").exists():  # an agentgym spec: save it for TRL
        hf_model, tokenizer = load_model(model)
        model = tempfile.mkdtemp(prefix="agentgym-trl-")
        hf_model.save_pretrained(model)
        use_tool_calling_template(tokenizer).save_pretrained(model)
    settings: dict[str, Any] = {
        "output_dir": output_dir,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 256,
        "learning_rate": 1e-6,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        **device_settings(),
        **config,
    }
    if mode == "environment_factory":
        return GRPOTrainer(
            model=model,
            args=GRPOConfig(**settings),
            train_dataset=task_dataset(env_id, "train", limit=tasks),
            environment_factory=environment_class(env_id),  # reward: the env's get_reward
        )
    if mode == "rollout_func":
        return GRPOTrainer(
            model=model,
            reward_funcs=env_reward,
            args=GRPOConfig(**settings),
            train_dataset=task_dataset(env_id, "train", mode="rollout_func", limit=tasks),
            rollout_func=TextRollout(env_id, max_turn_tokens=64),
        )
    raise ValueError(f"mode must be 'environment_factory' or 'rollout_func', got {mode!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="model folder or agentgym spec")
    parser.add_argument("--env", default="agentgym/FrozenLake-v0", help="env id")
    parser.add_argument(
        "--mode", default="environment_factory", choices=["environment_factory", "rollout_func"]
    )
    parser.add_argument("--max-steps", type=int, default=100, help="GRPO steps")
    args = parser.parse_args()
    trainer = build_trainer(args.model, args.env, args.mode, max_steps=args.max_steps)
    trainer.train()


if __name__ == "__main__":
    main()
