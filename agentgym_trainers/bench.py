"""Trainer benchmarks: generation and training throughput, MFU, and where a training
step's time goes. Printed and written as JSON; never asserted in tests.

* ``generation``: tokens/s of rollout sampling at given batch sizes, for the static
  engine and the transformers forward, from prompts of ``prompt_len`` tokens.
* ``training``: fwd + bwd + AdamW tokens/s on ``batch x seq_len`` sequences whose
  tokens all get gradient, and model FLOP utilisation (6N + attention FLOPs per token
  over the device's peak).
* ``grpo_step``: a whole GRPO step on the single-turn digit-fraction bandit (the
  workload TRL's GRPOTrainer is usually timed on: 256 sequences of about 100 prompt
  + 128 completion tokens), with its split into generation, env and training time.
* ``loop``: the same split for a multi-turn text game.

Run: ``python -m agentgym_trainers.bench --model smollm2 --out bench.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agentgym_envs.llm import precision
from agentgym_envs.llm.engine import StaticEngine, supports
from agentgym_envs.llm.models import load_model
from agentgym_envs.llm.sampler import Sampler
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.trainer import Trainer

log = logging.getLogger(__name__)

# dense bf16 tensor-core peak, FLOP/s (vendor figures, no sparsity)
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_generation(
    lm: Any, batches: Sequence[int], prompt_len: int, new_tokens: int, engine_kind: str
) -> list[dict[str, Any]]:
    device = next(lm.parameters()).device
    out = []
    for batch in batches:
        engine = None
        if engine_kind == "static":
            engine = StaticEngine(lm, max_batch=batch, max_len=prompt_len + new_tokens + 1)
        sampler = Sampler(lm, eos_ids=[-1], pad_id=0, seed=0, engine=engine)  # never stops early
        prompts = [[(7 * i + j) % 1000 + 10 for j in range(prompt_len)] for i in range(batch)]
        sampler.generate(prompts, [min(new_tokens, 8)] * batch)  # warm-up (graph capture)
        _sync(device)
        start = time.perf_counter()
        samples = sampler.generate(prompts, [new_tokens] * batch)
        _sync(device)
        seconds = time.perf_counter() - start
        tokens = sum(len(s.ids) for s in samples)
        out.append(
            {
                "engine": engine_kind,
                "batch": batch,
                "prompt_len": prompt_len,
                "new_tokens": new_tokens,
                "tokens_per_s": tokens / seconds,
                "seconds": seconds,
            }
        )
        log.info("generation %s batch %d: %.0f tok/s", engine_kind, batch, tokens / seconds)
        del engine, sampler
    return out


def bench_training(lm: Any, batch: int, seq_len: int, steps: int) -> dict[str, Any]:
    device = next(lm.parameters()).device
    cfg = lm.config
    lm.train()
    params = [p for p in lm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    ids = torch.randint(10, 1000, (batch, seq_len), device=device)
    n_params = sum(p.numel() for p in params)

    def one() -> None:
        with precision.compute(device):
            logits = lm(input_ids=ids, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    one()  # warm-up
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        one()
    _sync(device)
    seconds = time.perf_counter() - start
    tokens_per_s = batch * seq_len * steps / seconds
    # forward+backward FLOPs per token: 6N for the weights, 12 L H T for attention scores
    attn = 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len
    flops = (6 * n_params + attn) * tokens_per_s
    peak = peak_flops(device)
    lm.eval()
    return {
        "batch": batch,
        "seq_len": seq_len,
        "tokens_per_s": tokens_per_s,
        "tflops": flops / 1e12,
        "mfu": flops / peak if peak else None,
        "params": n_params,
        "dtype": str(next(lm.parameters()).dtype),
    }


def bench_step(config: TrainConfig, steps: int) -> dict[str, Any]:
    """Whole RL steps; the first one (warm-up, graph capture) is left out."""
    trainer = Trainer(config)
    try:
        trainer.rl_step()
        rows = [trainer.rl_step() for _ in range(steps)]
    finally:
        trainer.close()
    keys = (
        "time_step_s", "time_generation_s", "time_env_s", "time_train_s", "generated_tokens",
        "gen_tokens_per_s", "train_tokens_per_s", "frac_generation", "frac_env", "frac_train",
    )  # fmt: skip
    result: dict[str, Any] = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    result["sequences"] = config.rollout.tasks_per_step * config.rollout.group_size
    result["env"] = config.data.env
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    lm, _ = load_model(args.model, device=device, dtype=torch.float32)  # as the trainer
    lm.eval()
    result: dict[str, Any] = {
        "model": args.model,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
    }
    engines = ["static", "hf"] if supports(lm) else ["hf"]
    result["generation"] = [
        row
        for kind in engines
        for row in bench_generation(lm, args.gen_batches, args.prompt_len, args.new_tokens, kind)
    ]
    result["training"] = bench_training(lm, args.train_batch, args.train_seq, args.train_steps)
    del lm
    common = dict(
        model=args.model, device=str(device), run_dir=str(Path(args.run_dir) / "bench"), lr=1e-6
    )
    bandit = TrainConfig.from_flat(
        env="agentgym-train/DigitFraction-v0",
        env_kwargs={"prompt_words": args.bandit_prompt_words},
        tasks_per_step=args.bandit_sequences // 8, group_size=8, n_envs=args.bandit_sequences,
        max_new_tokens=args.new_tokens, max_context=512, micro_batch_size=args.micro_batch_size,
        **common,
    )  # fmt: skip
    result["grpo_step"] = bench_step(bandit, args.step_repeats)
    game = TrainConfig.from_flat(
        env=args.loop_env, tasks_per_step=args.loop_tasks, group_size=8,
        n_envs=args.loop_tasks * 8, max_new_tokens=48, max_context=2048,
        micro_batch_size=args.micro_batch_size, **common,
    )  # fmt: skip
    result["loop"] = bench_step(game, args.step_repeats)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agentgym_trainers.bench", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", default="smollm2")
    p.add_argument("--device", default="auto")
    p.add_argument("--gen-batches", type=int, nargs="+", default=[64, 256])
    p.add_argument("--prompt-len", type=int, default=100)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--train-seq", type=int, default=1024)
    p.add_argument("--train-steps", type=int, default=5)
    p.add_argument("--bandit-sequences", type=int, default=256)
    p.add_argument("--bandit-prompt-words", type=int, default=60)
    p.add_argument("--micro-batch-size", type=int, default=64)
    p.add_argument("--loop-env", default="agentgym/FrozenLake-v0")
    p.add_argument("--loop-tasks", type=int, default=16)
    p.add_argument("--step-repeats", type=int, default=2)
    p.add_argument("--run-dir", default="runs")
    p.add_argument("--out", help="write the JSON here")
    args = p.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
