#!/usr/bin/env bash
# The reference trainer's GPU proof on one H200, in the three device calls planned by
# scripts/gpu_prepare.sh (run that here first). Modes:
#   stage     keep the carried GGUF part(s) in /tmp/gg and install .whl (calls 1 and 2)
#   run       join the parts, check the sha256, then benchmark and prove (call 3, < 9 min)
#   rehearse  stage + run in one go (with SMOKE=1: the tiny model on the CPU, here)
# Everything lands in $OUT (or docs/results/gpu) as it is produced, so a timeout keeps
# what finished: log.txt (tee'd), bench.json (after the benchmark, ~2 min), and during
# training proof_metrics.jsonl (copied every 15 s), then proof.json and proof_curves.png.
#   bench.json   generation tok/s (batch 64, 256; static engine and transformers),
#                training tok/s and MFU, a GRPO step on the TRL workload (256 x ~100 prompt
#                + 128 completion tokens) and on FrozenLake, time split
#   proof.json   GRPO on FrozenLake from SmolLM2-135M-Instruct: success on the test split
#                before SFT, after the SFT warm start, after GRPO, and the command
# Budget of call 3 (under 9 minutes): bench ~2 min, eval 3 x EVAL_EPISODES (100) ~1.5 min,
# SFT (SFT_STEPS 60) ~0.5 min, GRPO TRAIN_SECONDS (240) 4 min, model loads ~0.5 min.
# Knobs (environment): TRAIN_SECONDS, SFT_STEPS, SFT_LR (5e-5), LR (2e-6), EVAL_EPISODES,
# SKIP_BENCH=1, SMOKE=1. Easy FrozenLake maps need at most 6 moves (oracle), so episodes
# are capped at 16 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
OUT=${OUT:-docs/results/gpu}
mkdir -p "$OUT" /tmp/gg
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
[ "${SMOKE:-0}" = 1 ] && PY=${PYTHON:-.venv/bin/python}

stage() {
  cp .gpu/gguf.part_a? /tmp/gg/ 2>/dev/null || true
  ls -l /tmp/gg
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
  fi
}

join_model() {
  [ -f .gpu/gguf.sha256 ] || { echo "no .gpu/gguf.sha256: carry it in call 3" >&2; exit 2; }
  cat /tmp/gg/gguf.part_a? >/tmp/gg/model.gguf
  got=$(sha256sum /tmp/gg/model.gguf | awk '{print $1}')
  want=$(cat .gpu/gguf.sha256)
  if [ "$got" != "$want" ]; then
    echo "GGUF checksum mismatch after joining ($(ls /tmp/gg)): $got != $want" >&2
    exit 3
  fi
  echo "GGUF joined, sha256 ok ($got)"
  export AGENTGYM_SMOLLM2_GGUF=/tmp/gg/model.gguf
}

run() {
  [ -d /tmp/site ] && export PYTHONPATH="$PYTHONPATH:/tmp/site"
  cp .gpu/gguf.part_a? /tmp/gg/ 2>/dev/null || true
  join_model
  export AGENTGYM_CACHE=${AGENTGYM_CACHE:-/tmp/agentgym-cache}
  if [ "${SMOKE:-0}" = 1 ]; then
    MODEL=tiny; DEVICE=cpu
    BENCH=(--gen-batches 8 --prompt-len 20 --new-tokens 16 --train-batch 2 --train-seq 64
           --train-steps 1 --bandit-sequences 16 --bandit-prompt-words 6 --micro-batch-size 8
           --loop-tasks 1 --step-repeats 1)
    TRAIN=(--steps 2 --tasks-per-step 2 --group-size 4 --n-envs 8 --sft-steps 2
           --sft-episodes 4 --eval-episodes 4 --max-context 1024)
  else
    MODEL=smollm2; DEVICE=cuda
    BENCH=(--step-repeats 1)
    TRAIN=(--steps 1000 --time-budget-s "${TRAIN_SECONDS:-240}" --tasks-per-step 32
           --group-size 8 --n-envs 256 --sft-steps "${SFT_STEPS:-60}" --sft-episodes 512
           --eval-episodes "${EVAL_EPISODES:-100}" --max-context 2048 --micro-batch-size 32)
  fi
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers",
transformers.__version__, "cuda", torch.cuda.is_available() and torch.cuda.get_device_name())'
  if [ "${SKIP_BENCH:-0}" != 1 ]; then
    "$PY" -m agentgym_trainers.bench --model "$MODEL" --device "$DEVICE" --run-dir /tmp/agentgym-runs \
      --out "$OUT/bench.json" "${BENCH[@]}"
  fi
  run_dir=/tmp/agentgym-runs/proof
  rm -rf "$run_dir"
  CMD=("$PY" -m agentgym_envs.cli train --env agentgym/FrozenLake-v0
       --env-kwargs '{"difficulty": "easy", "max_steps": 16}' --difficulty easy --algo grpo
       --model "$MODEL" --device "$DEVICE" --lr "${LR:-2e-6}" --sft-lr "${SFT_LR:-5e-5}"
       --max-new-tokens 24 --temperature 1.0 --keep-checkpoints 1
       --kl-coef 0.0 --eval-split test --eval-temperature 0 --run-dir "$run_dir"
       "${TRAIN[@]}")
  echo "command: ${CMD[*]}"
  # metrics reach $OUT while training runs, so a timeout still returns the curve so far
  (while sleep 15; do cp "$run_dir/metrics.jsonl" "$OUT/proof_metrics.jsonl" 2>/dev/null || true; done) &
  copier=$!
  trap 'kill $copier 2>/dev/null || true' EXIT
  "${CMD[@]}"
  kill "$copier" 2>/dev/null || true
  cp "$run_dir/metrics.jsonl" "$OUT/proof_metrics.jsonl"
  cp "$run_dir/curves.png" "$OUT/proof_curves.png"
  "$PY" - "$OUT/proof.json" "${CMD[*]}" "$run_dir/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[3]))
keep = ("eval_initial", "eval_before", "eval_after", "steps", "rl_seconds", "train_seconds",
        "stopped_by_time_budget", "sft_loss", "world_size")
result = {k: summary[k] for k in keep if k in summary}
result["command"] = sys.argv[2]
before, after = summary["eval_before"]["success"], summary["eval_after"]["success"]
result["grpo_gain_points"] = round(100 * (after - before), 1)
json.dump(result, open(sys.argv[1], "w"), indent=2)
print(json.dumps(result, indent=2))
PY
}

case "$MODE" in
  stage) stage ;;
  run) run ;;
  rehearse) rm -rf /tmp/gg/*; stage; run ;;
  *) echo "usage: $0 stage|run|rehearse" >&2; exit 2 ;;
esac
