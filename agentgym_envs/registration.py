"""The table of registered envs. Importing :mod:`agentgym_envs` registers every one.

Entry points are strings, so registering imports no env module: ``gym.make`` imports
the family it needs, when it needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import EnvNotFoundError, did_you_mean

NAMESPACE = "agentgym"


@dataclass(frozen=True)
class EnvEntry:
    """One registered env: ``agentgym/<name>-v<version>``."""

    name: str
    version: str
    entry_point: str
    family: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def id(self) -> str:
        return f"{NAMESPACE}/{self.name}-v{self.version}"


ENVS: tuple[EnvEntry, ...] = (
    EnvEntry(
        "Sokoban",
        "0",
        "agentgym_envs.games.sokoban:SokobanEnv",
        "games",
        description="push boxes onto targets in generated rooms",
    ),
    EnvEntry(
        "FrozenLake",
        "0",
        "agentgym_envs.games.frozenlake:FrozenLakeEnv",
        "games",
        description="cross a frozen lake to the goal without falling into a hole",
    ),
    EnvEntry(
        "FrozenLakeSlippery",
        "0",
        "agentgym_envs.games.frozenlake:FrozenLakeEnv",
        "games",
        kwargs={"is_slippery": True},
        description="FrozenLake where the ice makes you slide sideways at random",
    ),
    EnvEntry(
        "Dungeon",
        "0",
        "agentgym_envs.games.dungeon:DungeonEnv",
        "games",
        description="a partially observable text adventure with keys, doors and traps",
    ),
    EnvEntry(
        "Retail",
        "1",
        "agentgym_envs.business.retail:RetailEnv",
        "business",
        description="retail customer service on SQLite with a simulated user and a policy",
    ),
    EnvEntry(
        "Calendar",
        "1",
        "agentgym_envs.business.calendar_env:CalendarEnv",
        "business",
        description="calendar assistant across time zones: meetings, rooms, RSVPs under a policy",
    ),
    EnvEntry(
        "RepoFix",
        "1",
        "agentgym_envs.sandbox.repofix:RepoFixEnv",
        "sandbox",
        description="fix injected bugs in a Python repository in a sandbox; hidden tests grade",
    ),
    EnvEntry(
        "WebShop",
        "1",
        "agentgym_envs.web.webshop:WebShopEnv",
        "web",
        description="shop on a local website in headless Chromium; the shop's database grades",
    ),
)


def register_all() -> None:
    """Register every env of :data:`ENVS` with Gymnasium (idempotent)."""
    for entry in ENVS:
        if entry.id in gym.registry:
            continue
        gym.register(
            id=entry.id,
            entry_point=entry.entry_point,
            kwargs=dict(entry.kwargs),
            disable_env_checker=False,
            order_enforce=True,
        )


def find(env_id: str) -> EnvEntry:
    """The entry for an id (``agentgym/Sokoban-v0``) or a bare name (``Sokoban``).

    Raises:
        EnvNotFoundError: naming the closest registered id.
    """
    for entry in ENVS:
        if env_id in (entry.id, entry.name, f"{entry.name}-v{entry.version}"):
            return entry
    ids = [e.id for e in ENVS]
    hint = did_you_mean(env_id, ids + [e.name for e in ENVS])
    raise EnvNotFoundError(
        f"no env {env_id!r} is registered.{hint} Registered: {', '.join(ids)} "
        "(`agentgym list` shows them)"
    )
