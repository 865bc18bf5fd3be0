"""Where a training run ran: the facts an exact replay depends on.

A CPU run is deterministic on one platform (fixed seeds, one torch thread), but not
across platforms: another CPU can take other kernel paths (AVX2 or AVX-512, oneDNN's
and MKL's choices per vendor), whose float sums round differently in the last bit, and
hundreds of SFT and RL steps grow that bit into other samples. Every run records its
:func:`platform_info`; a replay is expected to give the same episodes only where
:func:`replay_platform` is the same (``tests/trainers/test_learn.py``).
"""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path
from typing import Any

# packages whose arithmetic or tokenization the runs go through
PACKAGES = ("torch", "transformers", "tokenizers", "numpy")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def platform_info(device: str = "cpu") -> dict[str, Any]:
    """Plain data describing the platform a run on ``device`` computes on."""
    import torch

    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in PACKAGES},
        "device": device,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def replay_platform(info: dict[str, Any]) -> dict[str, Any]:
    """The part of :func:`platform_info` an exact replay needs to be equal: everything
    but the Python patch level."""
    return {k: v for k, v in info.items() if k != "python"}


__all__ = ["PACKAGES", "cpu_model", "platform_info", "replay_platform"]
