"""Dungeon worlds: the static world, its rules and text, and a BFS solver.

A world is a set of rooms on a grid joined by exits (north, south, east, west); some
exits are doors, and a locked door opens with the key of its colour. Rooms fall into
zones: zone 0 holds the start, zone z lies behind locked door z-1, and the key of door
z-1 lies in zone z-1 (behind the door before it), so keys are chained and the goal
object waits behind the last door. Generation (:mod:`dungeon_gen`) builds every world
that way, so each is solvable; the solver confirms it.

The dynamic state is five ints, ``(room, held, unlocked, opened, status)``: the current
room, bitmasks of held items, unlocked doors and opened containers, and whether the
adventurer is still fine (``ALIVE``), fell into a pit or used a cursed item.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

DIRECTIONS = ("north", "south", "east", "west")
PIT = "down"
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
PIT_TEXT = "a dark pit; nothing that falls in comes back"

KEY, GOAL, THING, CURSED, CONTAINER = "key", "goal", "thing", "cursed", "container"
ALIVE, FELL, CURSE_USED = 0, 1, 2

State = tuple[int, int, int, int, int]  # (room, held, unlocked, opened, status)
Step = tuple[str, State]  # an action text and the state it leads to


@dataclass(frozen=True, slots=True)
class Item:
    """An item: ``container`` is the item index holding it (or -1); ``door`` is the door
    a key opens (-1 for decoy keys and non-keys)."""

    name: str
    kind: str
    room: int
    container: int
    door: int

    @property
    def label(self) -> str:
        text = f"{'an' if self.name[0] in 'aeiou' else 'a'} {self.name}"
        if self.kind == CURSED:
            text += " (using it turns every treasure in the dungeon to dust)"
        return text


@dataclass(frozen=True)
class World:
    """The static part of a dungeon, parsed once per task."""

    names: tuple[str, ...]
    texts: tuple[str, ...]
    exits: tuple[dict[str, tuple[int, int, str]], ...]  # per room: dir -> (to, door, look)
    doors: tuple[str, ...]  # colour per door
    items: tuple[Item, ...]
    room_items: tuple[tuple[int, ...], ...]  # per room: indices of items found there
    pits: frozenset[int]
    start: int
    lookup: dict[str, int]  # normalised item name -> index
    key_mask: int  # bits of the keys that open a door
    door_key: tuple[int, ...]  # per door: the item index of its key
    goal: int
    goal_room: int
    # room views by state: agents revisit the same few states, and a view is pure text
    views: dict[State, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def initial(self) -> State:
        return (self.start, 0, 0, 0, ALIVE)


@lru_cache(maxsize=4096)
def normalize(name: str) -> str:
    """Item names match case-insensitively, ignoring a leading article and end dots."""
    words = name.lower().strip().rstrip(".!").split()
    if words and words[0] in ("the", "a", "an", "some"):
        words = words[1:]
    return " ".join(words)


def parse_world(spec: Mapping[str, Any]) -> World:
    """Build the static world from a task spec (see :func:`generate_spec` for its layout)."""
    n = len(spec["rooms"])
    exits: list[dict[str, tuple[int, int, str]]] = [{} for _ in range(n)]
    for a, direction, b, door, look in spec["exits"]:
        exits[a][direction] = (b, door, look)
        exits[b][OPPOSITE[direction]] = (a, door, look)
    items = tuple(Item(*row) for row in spec["items"])
    ordered = tuple({d: ex[d] for d in DIRECTIONS if d in ex} for ex in exits)
    door_key = [-1] * len(spec["doors"])
    for i, item in enumerate(items):
        if item.kind == KEY and item.door >= 0:
            door_key[item.door] = i
    goal = next(i for i, item in enumerate(items) if item.kind == GOAL)
    return World(
        names=tuple(r[0] for r in spec["rooms"]),
        texts=tuple(r[1] for r in spec["rooms"]),
        exits=ordered,
        doors=tuple(spec["doors"]),
        items=items,
        room_items=tuple(tuple(i for i, it in enumerate(items) if it.room == r) for r in range(n)),
        pits=frozenset(spec["pits"]),
        start=int(spec["start"]),
        lookup={normalize(it.name): i for i, it in enumerate(items)},
        key_mask=sum(1 << i for i in door_key),
        door_key=tuple(door_key),
        goal=goal,
        goal_room=items[goal].room,
    )


# parsed static worlds by task id; the spec is kept to tell apart tasks sharing an id
_WORLDS: dict[str, tuple[Mapping[str, Any], World]] = {}


def world_for(task_id: str, spec: Mapping[str, Any]) -> World:
    """The static world of a task, parsed once per process (reset stays cheap)."""
    hit = _WORLDS.get(task_id)
    if hit is not None and (hit[0] is spec or hit[0] == spec):
        return hit[1]
    if len(_WORLDS) >= 4096:
        _WORLDS.clear()
    world = parse_world(spec)
    _WORLDS[task_id] = (spec, world)
    return world


# -- what the agent sees -------------------------------------------------------------


def visible_items(world: World, state: State) -> list[int]:
    """Items lying in the current room in plain sight (not held, not in a closed box)."""
    room, held, _, opened, status = state
    out = []
    for i in world.room_items[room]:
        item = world.items[i]
        if held >> i & 1 or (item.container >= 0 and not opened >> item.container & 1):
            continue
        if item.kind == GOAL and status == CURSE_USED:
            continue  # turned to dust
        out.append(i)
    return out


def exit_text(world: World, door: int, look: str, unlocked: int) -> str:
    if door < 0:
        return look
    state = "an open" if unlocked >> door & 1 else "a locked"
    return f"{state} {world.doors[door]} door"


def describe_room(world: World, state: State) -> str:
    """The full view of the current room: name, description, items and exits."""
    view = world.views.get(state)
    if view is None:
        if len(world.views) >= 1024:
            world.views.clear()
        view = world.views[state] = _describe(world, state)
    return view


def _describe(world: World, state: State) -> str:
    room, _, unlocked, opened, _ = state
    labels = []
    for i in visible_items(world, state):
        item = world.items[i]
        label = item.label
        if item.kind == CONTAINER:
            label += " (open)" if opened >> i & 1 else " (closed)"
        labels.append(label)
    lines = [
        f"== {world.names[room]} ==",
        world.texts[room],
        "Items here: " + (", ".join(labels) if labels else "none") + ".",
        "Exits:",
    ]
    for direction, (_, door, look) in world.exits[room].items():
        lines.append(f"- {direction}: {exit_text(world, door, look, unlocked)}")
    if room in world.pits:
        lines.append(f"- {PIT}: {PIT_TEXT}")
    return "\n".join(lines)


def unlock(world: World, state: State, key: int, target: str | None) -> tuple[int, str, str | None]:
    """Apply ``use(key, target)``: (new unlocked mask, message, failure code or None).

    ``target`` names a door by direction (``north``) or colour (``red door``); without
    it the key goes to the one locked door here that it fits.
    """
    room, _, unlocked, _, _ = state
    exits = world.exits[room]
    locked = {
        d: door for d, (_, door, _) in exits.items() if door >= 0 and not unlocked >> door & 1
    }
    name, fits = world.items[key].name, world.items[key].door
    wanted = normalize(target or "").removesuffix("door").strip()
    if not wanted:
        if not locked:
            return unlocked, "There is no locked door here.", "no_target"
        direction = next((d for d, door in locked.items() if door == fits), "")
        if not direction:
            return unlocked, f"The {name} fits none of the locked doors here.", "wrong_key"
    elif wanted in exits:
        direction = wanted
    else:
        direction = next(
            (d for d, (_, door, _) in exits.items() if door >= 0 and world.doors[door] == wanted),
            "",
        )
        if not direction:
            if wanted in (*DIRECTIONS, PIT):
                return unlocked, f"There is no door {wanted} from here.", "no_exit"
            return unlocked, f"There is no {target} here; name a door's direction.", "no_target"
    door = exits[direction][1]
    if door < 0:
        return unlocked, f"The way {direction} has no door to unlock.", "no_target"
    if direction not in locked:
        return unlocked, f"The {world.doors[door]} door is already open.", "not_locked"
    if door != fits:
        return unlocked, f"The {name} does not fit the {world.doors[door]} door.", "wrong_key"
    text = f"You unlock the {world.doors[door]} door to the {direction} with the {name}."
    return unlocked | 1 << door, text, None


def go_call(direction: str) -> str:
    return f'go(direction="{direction}")'


def take_call(name: str) -> str:
    return f'take(item="{name}")'


def use_call(name: str, target: str | None = None) -> str:
    return f'use(item="{name}")' if target is None else f'use(item="{name}", target="{target}")'


# -- solver --------------------------------------------------------------------------


def _successors(world: World, state: State) -> list[Step]:
    """Useful safe moves: never a pit, a cursed item, a decoy key or a distractor."""
    room, held, unlocked, opened, status = state
    out: list[Step] = []
    for direction, (to, door, _) in world.exits[room].items():
        if door < 0 or unlocked >> door & 1:
            out.append((go_call(direction), (to, held, unlocked, opened, status)))
        elif held >> world.door_key[door] & 1:
            key = world.items[world.door_key[door]].name
            out.append(
                (use_call(key, direction), (room, held, unlocked | 1 << door, opened, status))
            )
    for i in visible_items(world, state):
        item = world.items[i]
        if item.kind == CONTAINER and not opened >> i & 1:
            out.append((use_call(item.name), (room, held, unlocked, opened | 1 << i, status)))
        elif item.kind == GOAL or (item.kind == KEY and item.door >= 0):
            out.append((take_call(item.name), (room, held | 1 << i, unlocked, opened, status)))
    return out


def solve(world: World, state: State) -> list[Step] | None:
    """A shortest safe plan to hold the goal object from ``state`` (BFS), or None."""
    if state[4] != ALIVE:
        return None
    goal_bit = 1 << world.goal
    if state[1] & goal_bit:
        return []
    parent: dict[State, tuple[State, str] | None] = {state: None}
    queue = deque([state])
    while queue:
        current = queue.popleft()
        for action, nxt in _successors(world, current):
            if nxt in parent:
                continue
            parent[nxt] = (current, action)
            if nxt[1] & goal_bit:
                plan: list[Step] = []
                node = nxt
                while (entry := parent[node]) is not None:
                    plan.append((entry[1], node))
                    node = entry[0]
                return plan[::-1]
            queue.append(nxt)
    return None
