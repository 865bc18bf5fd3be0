#!/usr/bin/env bash
# The reference trainer's GPU proof (issue 4), run on one H200 by the device tool after
# scripts/gpu_prepare.sh (see it for the two calls). Writes, into $OUT (or docs/results/gpu):
#   bench.json        generation tok/s (batch 64, 256; static engine and transformers),
#                     training tok/s and MFU, a GRPO step on the TRL workload (256 x
#                     ~100 prompt + 128 completion tokens) and on FrozenLake, time split
#   proof.json        GRPO on FrozenLake from SmolLM2-135M-Instruct: success on the test
#                     split before SFT, after the SFT warm start, after GRPO, and the command
#   proof_metrics.jsonl, proof_curves.png, log.txt
# Knobs (environment): TRAIN_SECONDS (GRPO time budget, default 420), SFT_STEPS (60),
# SFT_LR (5e-5), LR (2e-6), EVAL_EPISODES (150), SKIP_BENCH=1, SMOKE=1 (tiny model on
# CPU: rehearses this script). Easy FrozenLake maps need at most 6 moves (oracle), so
# episodes are capped at 16 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results/gpu}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if [ -z "${AGENTGYM_SMOLLM2_GGUF:-}" ] && [ -d /tmp/gg ]; then
  cp .gpu/gguf.part_a[b-z] /tmp/gg/ 2>/dev/null || true
  cat /tmp/gg/gguf.part_* >/tmp/gg/SmolLM2-135M-Instruct.Q4_1.gguf
  export AGENTGYM_SMOLLM2_GGUF=/tmp/gg/SmolLM2-135M-Instruct.Q4_1.gguf
fi
export AGENTGYM_CACHE=${AGENTGYM_CACHE:-/tmp/agentgym-cache}

if [ "${SMOKE:-0}" = 1 ]; then
  MODEL=tiny; DEVICE=cpu
  BENCH=(--gen-batches 8 --prompt-len 20 --new-tokens 16 --train-batch 2 --train-seq 64
         --train-steps 1 --bandit-sequences 16 --bandit-prompt-words 6 --micro-batch-size 8
         --loop-tasks 1 --step-repeats 1)
  TRAIN=(--steps 2 --tasks-per-step 2 --group-size 4 --n-envs 8 --sft-steps 2 --sft-episodes 4
         --eval-episodes 4 --max-context 1024)
else
  MODEL=smollm2; DEVICE=cuda
  BENCH=()
  TRAIN=(--steps 1000 --time-budget-s "${TRAIN_SECONDS:-420}" --tasks-per-step 32
         --group-size 8 --n-envs 256 --sft-steps "${SFT_STEPS:-60}" --sft-episodes 512
         --eval-episodes "${EVAL_EPISODES:-150}" --max-context 2048 --micro-batch-size 32)
fi

rm -rf /tmp/agentgym-runs/proof
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers",
transformers.__version__, "cuda", torch.cuda.is_available() and torch.cuda.get_device_name())'

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$PY" -m trainers.bench --model "$MODEL" --device "$DEVICE" --run-dir /tmp/agentgym-runs \
    --out "$OUT/bench.json" "${BENCH[@]}"
fi

CMD=("$PY" -m agentgym_envs.cli train --env agentgym/FrozenLake-v0
     --env-kwargs '{"difficulty": "easy", "max_steps": 16}' --difficulty easy --algo grpo
     --model "$MODEL" --device "$DEVICE" --lr "${LR:-2e-6}" --sft-lr "${SFT_LR:-5e-5}"
     --max-new-tokens 24 --temperature 1.0
     --kl-coef 0.0 --eval-split test --eval-temperature 0 --run-dir /tmp/agentgym-runs/proof
     "${TRAIN[@]}")
echo "command: ${CMD[*]}"
"${CMD[@]}"
cp /tmp/agentgym-runs/proof/metrics.jsonl "$OUT/proof_metrics.jsonl"
cp /tmp/agentgym-runs/proof/curves.png "$OUT/proof_curves.png"
"$PY" - "$OUT/proof.json" "${CMD[*]}" <<'PY'
import json, sys
summary = json.load(open("/tmp/agentgym-runs/proof/summary.json"))
keep = ("eval_initial", "eval_before", "eval_after", "steps", "rl_seconds", "train_seconds",
        "stopped_by_time_budget", "sft_loss", "world_size")
result = {k: summary[k] for k in keep if k in summary}
result["command"] = sys.argv[2]
before, after = summary["eval_before"]["success"], summary["eval_after"]["success"]
result["grpo_gain_points"] = round(100 * (after - before), 1)
json.dump(result, open(sys.argv[1], "w"), indent=2)
print(json.dumps(result, indent=2))
PY
