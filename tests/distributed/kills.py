"""Killing a Ray actor in a test, and knowing that it is dead."""

from __future__ import annotations

import time
from typing import Any


def dead(handle: Any, within_s: float = 60.0) -> bool:
    """The actor answers no more calls (a call sent just after ``ray.kill`` may still
    reach it: the kill travels through the cluster's control plane)."""
    import ray

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(handle.ping.remote(), timeout=within_s)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.05)
    return False


def kill(handle: Any) -> None:
    """``ray.kill`` the actor and wait until it answers no more calls, so that what the
    test sends next meets a dead actor, never one the kill has not reached yet."""
    import ray

    ray.kill(handle)
    assert dead(handle), "the killed actor still answers after 60 s"
