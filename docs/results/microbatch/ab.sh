#!/bin/bash
# The RL step's time before and after length-sorted micro-batches (commit 34374ec), on the
# same weights: 12 RL steps of the FrozenLake recipe from a FrozenLake policy after RL
# (make learn's seed 0 by default), no SFT and no evaluation, three times each, alternating.
# Run from the repository root on an otherwise idle machine:
#   bash docs/results/microbatch/ab.sh [CHECKPOINT] [OUT]
set -euo pipefail
CKPT=$(realpath "${1:-runs/learn/frozenlake/grpo/seed0/checkpoints/step_000220}")
OUT=$(realpath -m "${2:-runs/microbatch}")
PY="$PWD/.venv/bin/python"
mkdir -p "$OUT"
BEFORE="$OUT/before-src"
[ -d "$BEFORE" ] || git worktree add -f "$BEFORE" 34374ec~1 >/dev/null
trap 'git worktree remove --force "$BEFORE"' EXIT
for rep in 1 2 3; do
  for side in "before:$BEFORE" "after:$PWD"; do
    tag=${side%%:*}; code=${side#*:}
    rm -rf "$OUT/$tag$rep"
    (cd "$code" && OMP_NUM_THREADS=1 PYTHONPATH="$code" "$PY" -c \
      "import sys; from agentgym_envs.cli import main; sys.exit(main())" train \
      --config agentgym_trainers/configs/frozenlake.toml --model "$CKPT" --sft-steps 0 \
      --steps 12 --eval-episodes 0 --run-dir "$OUT/$tag$rep" > "$OUT/$tag$rep.log" 2>&1)
  done
done
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
table = {}
for tag in ("before", "after"):
    for rep in (1, 2, 3):
        rows = [json.loads(line) for line in (out / f"{tag}{rep}" / "metrics.jsonl").open()]
        rl = [r for r in rows if r.get("phase") == "rl"][1:]  # step 1 warms up
        table.setdefault(tag, []).append(
            {k: statistics.mean(r[k] for r in rl)
             for k in ("time_train_s", "time_generation_s", "time_step_s", "train_tokens")}
        )
print(json.dumps(table, indent=1))
for key in ("time_train_s", "time_step_s"):
    b = [r[key] for r in table["before"]]
    a = [r[key] for r in table["after"]]
    print(f"{key}: before {statistics.mean(b):.2f} ({min(b):.2f}-{max(b):.2f}), "
          f"after {statistics.mean(a):.2f} ({min(a):.2f}-{max(a):.2f}), "
          f"{statistics.mean(b) / statistics.mean(a):.2f}x")
PY
