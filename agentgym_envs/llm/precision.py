"""Mixed precision: fp32 master weights everywhere, bf16 compute on CUDA.

Pure-bf16 weights would silently drop small updates (an lr of 1e-6 is far below bf16's
resolution for weights of magnitude 1e-2), so the trainer keeps fp32 parameters and runs
forward passes -- training, reference and rollout sampling alike -- under bf16 autocast
on GPU. On CPU everything is fp32, which is what makes the 1e-5 sampler/trainer
agreement test exact there.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def compute(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA (no weight-cast cache, so CUDA-graph capture is safe)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()
