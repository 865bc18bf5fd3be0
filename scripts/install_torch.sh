#!/usr/bin/env bash
# Install torch into a Python environment, the build that fits this machine (the Makefile's
# torch step; pip's torch for Linux is the CUDA build, several GB, useless without a GPU).
#
#   scripts/install_torch.sh [--dry-run] PYTHON
#
# Environment (the Makefile passes its variables of the same names):
#   TORCH_SPEC   which torch (default: torch>=2.4; the Makefile pins a version)
#   TORCH_INDEX  where it comes from. "auto" (the default): torch's CPU wheel index when no
#                NVIDIA GPU answers (nvidia-smi absent or failing), else pip's default index.
#                A URL: that index (e.g. https://download.pytorch.org/whl/cu124). Empty:
#                pip's default index (PyPI, or the mirror pip is configured with).
# The CPU index also serves torch's dependencies. If the install from it fails (a network
# that reaches only PyPI or a mirror), torch comes from pip's default index, with a note.
# --dry-run prints the pip command instead of running it.
set -euo pipefail

CPU_INDEX=https://download.pytorch.org/whl/cpu
dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
    dry_run=1
    shift
fi
python=${1:?usage: scripts/install_torch.sh [--dry-run] PYTHON}
spec=${TORCH_SPEC:-torch>=2.4}
index=${TORCH_INDEX-auto}  # unset: auto; set and empty: pip's default index

pip_install() {
    if [ "$dry_run" = 1 ]; then
        echo "would run: $python -m pip install --quiet $*"
    else
        "$python" -m pip install --quiet "$@"
    fi
}

if [ "$index" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "install_torch: an NVIDIA GPU answers: $spec from pip's default index"
        index=
    else
        echo "install_torch: no NVIDIA GPU (nvidia-smi absent or failing): $spec, CPU build, from $CPU_INDEX"
        index=$CPU_INDEX
    fi
fi

if [ -z "$index" ]; then
    pip_install "$spec"
elif ! pip_install --retries 1 --index-url "$index" "$spec"; then
    echo "install_torch: could not install $spec from $index; installing it from pip's" \
        "default index instead (on Linux that is the CUDA build unless TORCH_SPEC names a" \
        "CPU build or pip's index serves one)" >&2
    pip_install "$spec"
fi
