"""Importing ray (only when a pool is built) and joining a cluster."""

from __future__ import annotations

import os
from typing import Any

from agentgym_envs.core.errors import ConfigError

INSTALL_HINT = "pip install 'agentgym-envs[dist]'"


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        ConfigError: ray is not installed (naming the extra that installs it).
    """
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"the Ray env pool needs ray, which is not installed ({exc}); install it with "
            f"{INSTALL_HINT}, or use isolation 'inline' or 'process'"
        ) from None
    return ray


def connect(address: str | None = None) -> bool:
    """Join the Ray cluster at ``address`` (default: ``$RAY_ADDRESS``, else a new local
    Ray) unless this process is already connected. Returns True when this call
    connected (the caller shuts Ray down when done)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    host = address.rsplit(":", 1)[0]
    if host.startswith("127.") and host != "127.0.0.1":
        # a cluster on loopback aliases (LocalCluster): the driver's node has that IP too
        kwargs["_node_ip_address"] = host
    ray.init(address=address, **kwargs)
    return True


__all__ = ["INSTALL_HINT", "connect", "require_ray"]
