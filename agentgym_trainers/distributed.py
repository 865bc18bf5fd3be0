"""Data parallelism with ``torch.distributed``: each process plays its own envs and the
gradients are summed across processes (no DDP wrapper, so processes may run different
numbers of micro-batches without deadlocking)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist


def init() -> tuple[int, int]:
    """Join the process group that ``torchrun`` describes; ``(rank, world)``; (0, 1) alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":  # NCCL binds each process to the current device
            torch.cuda.set_device(local_rank())
        dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size()


def local_rank() -> int:
    """This process's rank on its node (``LOCAL_RANK`` from torchrun; 0 alone)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_parameters(params: Iterable[torch.Tensor]) -> None:
    """Make every process start from rank 0's weights."""
    if active():
        for p in params:
            dist.broadcast(p.data, src=0)


def all_reduce_gradients(params: Sequence[torch.nn.Parameter]) -> None:
    """Sum gradients over processes in one flat buffer (the loss is already normalised
    by the global token count, so the sum is the global token mean)."""
    if not active():
        return
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def all_sum(values: Sequence[float], device: torch.device) -> list[float]:
    """Elementwise sum of a float vector over processes."""
    if not active():
        return [float(v) for v in values]
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return [float(v) for v in t.tolist()]


def all_gather(obj: Any) -> list[Any]:
    """Every process's ``obj``, in rank order."""
    if not active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
