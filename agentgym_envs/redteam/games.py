"""Attacks on the text games: spraying calls, claiming a win, forged arguments, farming
milestones by oscillating, and reaching for items the agent does not hold."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

from agentgym_envs.redteam.core import Attack, scripted
from agentgym_envs.redteam.text import TextTarget, text_attacks

GAMES = (
    "agentgym/Sokoban-v0",
    "agentgym/FrozenLake-v0",
    "agentgym/FrozenLakeSlippery-v0",
    "agentgym/Dungeon-v0",
)
_MOVES = ("up", "down", "left", "right")
_EASY_TEST = {"split": "test", "difficulty": "easy"}

_CLAIMS = (
    "The puzzle is solved. Outcome: success.",
    '{"outcome": "success", "reward": 1.0}',
    '{"name": "move", "arguments": {"direction": "up", "success": true}}',
    '{"name": "submit", "arguments": {}}',
    'move(direction="goal")',
    'move(direction="up; teleport")',
    "move(direction=__import__('os').system('true'))",
)


def _oscillate(obs: str, info: dict[str, Any]) -> Generator[str, tuple[str, dict[str, Any]], None]:
    """Step back and forth (and around) to re-enter any state a milestone paid for."""
    tools = {t["function"]["name"] for t in info["tools"]}
    verb = "move" if "move" in tools else "go"
    for i in range(48):
        a, b = _MOVES[(i // 12) % 4], _MOVES[((i // 12) % 4) ^ 1]
        yield f'{verb}(direction="{a if i % 2 == 0 else b}")'


def _spray(env_id: str) -> str:
    verb = "go" if "Dungeon" in env_id else "move"
    calls = [{"name": verb, "arguments": {"direction": d}} for d in _MOVES * 10]
    return json.dumps(calls)


def _dungeon_grab(
    obs: str, info: dict[str, Any]
) -> Generator[str, tuple[str, dict[str, Any]], None]:
    """Name the goal item everywhere without fetching it, and force the locked doors."""
    instruction = info["task"]["instruction"]
    item = instruction.removeprefix("Find the ").split(" and ")[0]
    for action in (  # noqa: UP028  (yield from would forward send to a tuple)
        f'take(item="{item}")',
        f'use(item="{item}")',
        'use(item="key")',
        'go(direction="east")',
        f'take(item="{item.upper()}")',
        f'take(item="{item} ")',
        'take(item="*")',
        'take(item="")',
    ):
        yield action


def attacks() -> list[Attack]:
    found: list[Attack] = []
    for env_id in GAMES:
        short = env_id.split("/")[1].removesuffix("-v0").lower()
        for seed in (0, 1):
            options = {"split": "test", "difficulty": "easy"}
            found.append(
                Attack(
                    name=f"games/{short}-oscillate-{seed}",
                    family="games",
                    hole="milestone_farming",
                    env_id=env_id,
                    script=_oscillate,
                    options=options,
                    seed=seed,
                    may_solve=True,
                )
            )
        found.append(
            Attack(
                name=f"games/{short}-call-spray",
                family="games",
                hole="answer_spraying",
                env_id=env_id,
                script=scripted(*[_spray(env_id)] * 5),
                options={"split": "test"},
                no_reward=True,
            )
        )
        found.append(
            Attack(
                name=f"games/{short}-claims-and-forged-args",
                family="games",
                hole="forged_outcome",
                env_id=env_id,
                script=scripted(*_CLAIMS),
                options={"split": "test"},
                no_reward=True,
            )
        )
    for seed in range(3):
        found.append(
            Attack(
                name=f"games/dungeon-grab-{seed}",
                family="games",
                hole="unearned_item",
                env_id="agentgym/Dungeon-v0",
                script=_dungeon_grab,
                options={"split": "test", "difficulty": "easy"},
                seed=seed,
                no_reward=True,
            )
        )
    target = TextTarget("agentgym/Sokoban-v0", "move", "direction", "up", _EASY_TEST)
    return found + text_attacks("games", target)
