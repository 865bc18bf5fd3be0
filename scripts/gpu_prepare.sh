#!/usr/bin/env bash
# Prepare, here (with PyPI), what scripts/gpu_proof.sh needs on the offline H200, and
# check that each of its three device calls fits what one call may carry (64 MiB: the
# working tree plus the carried paths).
#   .gpu/gguf.part_aa .. _ac   SmolLM2-135M-Instruct GGUF in parts of at most 32 MiB
#   .gpu/gguf.sha256           the whole file's checksum, checked after joining
#   .whl/*.whl                 packages the GPU image lacks (Python 3.12 wheels)
# Both folders are git-ignored. The plan (each call starts the next within the ~30 s the
# machine stays warm; runs/ is ignored, so no training run travels):
#   call 1  carry [".gpu/gguf.part_aa", ".whl"]     command: bash scripts/gpu_proof.sh stage
#   call 2  carry [".gpu/gguf.part_ab"]             command: bash scripts/gpu_proof.sh stage
#   call 3  carry [".gpu/gguf.part_ac", ".gpu/gguf.sha256"]  timeout_s 540
#                                                    command: bash scripts/gpu_proof.sh run
# Rehearse the whole plan on the CPU with: SMOKE=1 bash scripts/gpu_proof.sh rehearse
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
LIMIT=$((64 * 1024 * 1024))
PART=$((32 * 1024 * 1024))
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p .gpu .whl
gguf=$("$PY" -c 'from agentgym_envs.llm.models import smollm2_gguf; print(smollm2_gguf())')
rm -f .gpu/gguf.part_*
split -b "$PART" "$gguf" .gpu/gguf.part_
(cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") | awk '{print $1}' >.gpu/gguf.sha256
parts=$(ls .gpu/gguf.part_* | wc -l)
[ "$parts" -le 3 ] || { echo "the GGUF needs $parts parts; the plan has 3 calls" >&2; exit 1; }
rm -f .whl/*.whl
# not in the GPU image (see the device tool's KINDS.md): the env suite's own dependencies
for spec in gymnasium==1.4.0 farama-notifications==0.0.6 sqlite-utils==4.2.1 \
            sqlite-fts4==1.0.3 click-default-group==1.2.4 click==8.5.1 tzdata==2026.6 gguf==0.19.0; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "$spec"
done
# what travels: tracked and untracked-not-ignored files (shared/ is outside the checkout)
tree=$(git ls-files -co --exclude-standard -z | du --files0-from=- -cb | tail -1 | cut -f1)
check() {  # call name, carried paths...
  local name=$1; shift
  local carried; carried=$(du -cb "$@" | tail -1 | cut -f1)
  local total=$((tree + carried))
  awk -v n="$name" -v t="$tree" -v c="$carried" 'BEGIN { m = 1048576;
    printf "%-6s tree %5.1f MiB + carried %5.1f MiB = %5.1f MiB (limit 64)\n", n, t/m, c/m, (t+c)/m }'
  [ "$total" -le "$LIMIT" ] || { echo "$name carries too much" >&2; exit 1; }
}
check call1 .gpu/gguf.part_aa .whl
check call2 .gpu/gguf.part_ab
if [ -f .gpu/gguf.part_ac ]; then check call3 .gpu/gguf.part_ac .gpu/gguf.sha256; fi
