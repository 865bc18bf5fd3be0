"""Episode snapshots (``get_state``/``set_state``) and world fingerprints."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EnvState:
    """Everything needed to continue an episode from a point: plain, picklable data.

    Restoring a snapshot and replaying the same actions gives identical observations,
    rewards and infos, so runs can branch from any step (counterfactual rollouts).

    Attributes:
        env: the env's registered name (``Sokoban``); set_state refuses other envs' states.
        version: the env version that produced it.
        task_id: the task of the episode.
        world: the family's world state (plain data, owned by the snapshot).
        episode: the base env's episode bookkeeping (step, outcome, ledger, rewards,
            milestones, RNG, history, clock, visit counts).
    """

    env: str
    version: str
    task_id: str
    world: Any
    episode: dict[str, Any]


def fingerprint(key: Any) -> str:
    """A stable hex fingerprint of plain data built from tuples, ints, floats and strs.

    The key must not contain sets or dicts whose order varies: use sorted tuples.
    """
    return hashlib.blake2b(repr(key).encode(), digest_size=12).hexdigest()
