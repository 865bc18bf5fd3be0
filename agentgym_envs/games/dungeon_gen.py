"""Dungeon generation: word lists, difficulty levels and the seeded world builder.

``TRAIN_WORDS`` serves the train and test splits; ``OOD_WORDS`` is a disjoint, held-out
vocabulary for the ood split, so an agent cannot succeed there by remembering names.
Worlds are built so that they are solvable (see :mod:`dungeon_world` for the zones and
the chained keys); the env confirms each one with the solver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym_envs.games.dungeon_world import CONTAINER, CURSED, DIRECTIONS, GOAL, KEY, THING

STEPS = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}


@dataclass(frozen=True)
class Vocabulary:
    """Names a dungeon is dressed in. Each list is long enough for the largest level."""

    adjectives: tuple[str, ...]
    rooms: tuple[str, ...]
    details: tuple[str, ...]
    colours: tuple[str, ...]
    goals: tuple[str, ...]
    things: tuple[str, ...]
    cursed: tuple[str, ...]
    containers: tuple[str, ...]
    passages: tuple[str, ...]


TRAIN_WORDS = Vocabulary(
    adjectives=(
        "Dusty",
        "Damp",
        "Cold",
        "Silent",
        "Crumbling",
        "Narrow",
        "Vaulted",
        "Smoky",
        "Mossy",
        "Gloomy",
        "Drafty",
        "Cramped",
        "Echoing",
        "Musty",
        "Sunken",
        "Faded",
    ),
    rooms=(
        "Armory",
        "Chapel",
        "Library",
        "Kitchen",
        "Guardroom",
        "Cellar",
        "Gallery",
        "Crypt",
        "Study",
        "Barracks",
        "Larder",
        "Forge",
        "Pantry",
        "Vault",
        "Hall",
        "Workshop",
    ),
    details=(
        "Cobwebs hang from the low ceiling.",
        "Water drips somewhere in the dark.",
        "Old torches sputter in their brackets.",
        "The floor is littered with broken pottery.",
        "A faded tapestry covers one wall.",
        "Rats scurry away from your light.",
        "Scratches on the walls count forgotten days.",
        "A cold draft stirs the dust.",
        "Bones lie heaped in a corner.",
        "The air smells of smoke and rust.",
        "Moss grows between the flagstones.",
        "An empty fireplace gapes at you.",
        "Rotten shelves sag against the walls.",
        "Your footsteps echo off the stone.",
        "A toppled table blocks half the room.",
        "Chains dangle from iron rings in the wall.",
    ),
    colours=("red", "blue", "green", "yellow", "white", "black"),
    goals=(
        "golden chalice",
        "jeweled crown",
        "silver scepter",
        "ancient amulet",
        "ruby ring",
        "royal seal",
    ),
    things=(
        "rusty lantern",
        "torn map",
        "wooden spoon",
        "cracked mirror",
        "old boot",
        "coil of rope",
        "tin cup",
        "broken sword",
        "candle stub",
        "iron nail",
    ),
    cursed=("cursed idol", "cursed dagger"),
    containers=("wooden crate", "leather satchel", "rusty locker", "stone box"),
    passages=(
        "an archway",
        "a narrow passage",
        "an open doorway",
        "a low tunnel",
        "a short corridor",
    ),
)

OOD_WORDS = Vocabulary(
    adjectives=(
        "Frozen",
        "Gilded",
        "Hollow",
        "Flooded",
        "Ruined",
        "Shadowed",
        "Ancient",
        "Whispering",
        "Scorched",
        "Forgotten",
        "Painted",
        "Twisted",
        "Lofty",
        "Sealed",
        "Broken",
        "Bleak",
    ),
    rooms=(
        "Observatory",
        "Aviary",
        "Conservatory",
        "Scriptorium",
        "Ossuary",
        "Cistern",
        "Refectory",
        "Treasury",
        "Kennel",
        "Solar",
        "Belfry",
        "Granary",
        "Menagerie",
        "Antechamber",
        "Bathhouse",
        "Lantern Room",
    ),
    details=(
        "Frost glitters on the walls.",
        "Faded star charts cover the ceiling.",
        "Shallow water covers the floor.",
        "Empty birdcages hang from chains.",
        "Soot blackens the stones.",
        "A cracked bell lies on its side.",
        "Strange murals show a forgotten king.",
        "Dry leaves rustle though there is no wind.",
        "The walls are carved with tiny skulls.",
        "A broken fountain stands in the middle.",
        "Glass shards crunch under your feet.",
        "A faint chanting seems to come from the walls.",
        "Ropes dangle from a hole high above.",
        "The smell of old incense lingers.",
        "Withered vines cling to the pillars.",
        "A rusted telescope points at the ceiling.",
    ),
    colours=("copper", "silver", "amber", "violet", "crimson", "bronze", "jade"),
    goals=(
        "crystal skull",
        "emerald orb",
        "ivory horn",
        "obsidian mask",
        "sapphire tiara",
        "pearl necklace",
    ),
    things=(
        "brass compass",
        "feather quill",
        "clay pipe",
        "glass bead",
        "bone dice",
        "wax seal",
        "pewter plate",
        "silk scarf",
        "wooden flute",
        "chalk stick",
    ),
    cursed=("cursed figurine", "cursed bell"),
    containers=("oak chest", "iron strongbox", "wicker basket", "clay urn", "stone coffer"),
    passages=(
        "a crawlspace",
        "a rope bridge",
        "a vaulted arch",
        "a crooked hallway",
        "a gap in the wall",
    ),
)


# -- generation ----------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """Generation parameters of one difficulty (inclusive ranges)."""

    rooms: tuple[int, int]
    doors: int
    things: tuple[int, int]
    decoys: tuple[int, int]  # keys of colours no door has
    pits: int
    cursed: int
    hidden_keys: float = 0.0  # chance a key lies in a closed container
    loops: float = 0.25  # chance of an extra exit between neighbouring rooms of a zone


LEVELS = {
    "easy": Level((3, 4), 1, (1, 2), (0, 1), 1, 0),
    "medium": Level((5, 7), 2, (2, 3), (1, 1), 1, 1),
    "hard": Level((8, 12), 3, (3, 5), (1, 2), 2, 1),
}
# ood: compositions never seen in train/test. Each level has one more chained door and
# more rooms than its train counterpart, keys may be hidden in containers (opened with
# use(item=...), a mechanic absent from train), and every name (rooms, descriptions,
# colours, goals, distractors, cursed items, passages) comes from a held-out vocabulary.
OOD_LEVELS = {
    "easy": Level((4, 5), 2, (1, 2), (0, 1), 1, 1, 0.5),
    "medium": Level((7, 9), 3, (2, 4), (1, 2), 2, 1, 0.5),
    "hard": Level((11, 14), 4, (4, 6), (2, 2), 3, 1, 0.5),
}


def _pick(rng: np.random.Generator, options: tuple[str, ...] | list[Any], k: int) -> list[Any]:
    return [options[int(i)] for i in rng.choice(len(options), size=k, replace=False)]


def _span(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


def _layout(rng: np.random.Generator, level: Level) -> tuple[list[int], list[list[Any]]] | None:
    """Rooms on a grid, grown as a tree zone by zone: (zone per room, exits)."""
    n = max(_span(rng, level.rooms), level.doors + 1)
    extra = rng.multinomial(n - level.doors - 1, [1 / (level.doors + 1)] * (level.doors + 1))
    cells: dict[tuple[int, int], int] = {(0, 0): 0}
    where = [(0, 0)]
    zone = [0]
    exits: list[list[Any]] = []
    for z in range(level.doors + 1):
        for j in range(1 + int(extra[z])):
            if z == 0 and j == 0:
                continue
            parents = [r for r in range(len(zone)) if zone[r] == (z if j else z - 1)]
            free = [(p, d) for p in parents for d in DIRECTIONS if _near(where[p], d) not in cells]
            if not free:
                return None
            p, d = free[int(rng.integers(len(free)))]
            cell = _near(where[p], d)
            cells[cell] = len(where)
            exits.append([p, d, len(where), z - 1 if j == 0 else -1, ""])
            where.append(cell)
            zone.append(z)
    linked = {(e[0], e[2]) for e in exits} | {(e[2], e[0]) for e in exits}
    for a, cell in enumerate(where):
        for d in ("east", "south"):  # each neighbouring pair once
            b = cells.get(_near(cell, d))
            same_zone = b is not None and zone[a] == zone[b] and (a, b) not in linked
            if same_zone and rng.random() < level.loops:
                exits.append([a, d, b, -1, ""])
    return zone, exits


def _near(cell: tuple[int, int], direction: str) -> tuple[int, int]:
    dx, dy = STEPS[direction]
    return (cell[0] + dx, cell[1] + dy)


def generate_spec(
    rng: np.random.Generator, level: Level, words: Vocabulary
) -> dict[str, Any] | None:
    """Draw one dungeon as a task spec, or None if the draw is rejected.

    Spec layout: ``start``; ``rooms``: [name, text]; ``exits``: [room, direction, room,
    door or -1, look]; ``doors``: colours; ``items``: [name, kind, room, container or -1,
    door or -1]; ``pits``: rooms with a deadly pit going down.
    """
    laid = _layout(rng, level)
    if laid is None:
        return None
    zone, exits = laid
    n = len(zone)
    for e in exits:
        if e[3] < 0:
            e[4] = words.passages[int(rng.integers(len(words.passages)))]
    names = [
        f"{a} {b}"
        for a, b in zip(_pick(rng, words.adjectives, n), _pick(rng, words.rooms, n), strict=True)
    ]
    texts = _pick(rng, words.details, n)
    decoys = _span(rng, level.decoys)
    colours = _pick(rng, words.colours, level.doors + decoys)
    in_zone = [[r for r in range(n) if zone[r] == z] for z in range(level.doors + 1)]

    def anywhere() -> int:
        return int(rng.integers(n))

    items: list[list[Any]] = []
    boxes = iter(_pick(rng, words.containers, level.doors) if level.hidden_keys else [])
    hidden = [rng.random() < level.hidden_keys for _ in range(level.doors)]
    if level.hidden_keys and not any(hidden):
        hidden[int(rng.integers(level.doors))] = True
    for door in range(level.doors):
        room = int(rng.choice(in_zone[door]))
        box = -1
        if hidden[door]:
            box = len(items)
            items.append([next(boxes), CONTAINER, room, -1, -1])
        items.append([f"{colours[door]} key", KEY, room, box, door])
    items.append(
        [
            words.goals[int(rng.integers(len(words.goals)))],
            GOAL,
            int(rng.choice(in_zone[level.doors])),
            -1,
            -1,
        ]
    )
    for colour in colours[level.doors :]:
        items.append([f"{colour} key", KEY, anywhere(), -1, -1])
    for name in _pick(rng, words.things, _span(rng, level.things)):
        items.append([name, THING, anywhere(), -1, -1])
    for name in _pick(rng, words.cursed, level.cursed):
        items.append([name, CURSED, anywhere(), -1, -1])
    pits = sorted(int(r) for r in rng.choice(n, size=min(level.pits, n), replace=False))
    return {
        "start": 0,
        "rooms": [[a, b] for a, b in zip(names, texts, strict=True)],
        "exits": exits,
        "doors": colours[: level.doors],
        "items": items,
        "pits": pits,
    }


def words_for(split: str) -> Vocabulary:
    return OOD_WORDS if split == "ood" else TRAIN_WORDS
