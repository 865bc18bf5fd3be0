"""Sokoban layouts, dead-square analysis, an A* push solver and reverse-play generation.

Cells are flat indices ``row * width + col``. Rooms are written in the env's own
notation: ``#`` wall, ``.`` floor, ``T`` target, ``B`` box, ``*`` box on target,
``@`` player, ``+`` player on target.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from functools import cache, partial

import numpy as np

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.games.grid import bfs_path, deltas, distances, reachable

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#.TB*@+"
# a search state: (the smallest cell the player can reach, the box cells)
_Key = tuple[int, frozenset[int]]
# how a state was reached: (previous state, player cell before the push, direction);
# None for the start
_Parent = tuple[_Key, int, str] | None


@dataclass(frozen=True)
class Layout:
    """The static part of a room: size, walls, targets and dead squares."""

    width: int
    height: int
    floor: frozenset[int]
    targets: frozenset[int]
    dead: frozenset[int]
    base: tuple[str, ...]  # one char per cell: walls, floor and targets only
    target_distance: tuple[int, ...]  # per cell: pushes to the nearest target, or -1

    def passable(self, cell: int, boxes: frozenset[int] | set[int]) -> bool:
        return cell in self.floor and cell not in boxes


@cache
def parse_room(rows: tuple[str, ...]) -> tuple[Layout, int, frozenset[int]]:
    """Parse a room; returns (layout, player cell, box cells). Cached per room."""
    height, width = len(rows), len(rows[0])
    floor, targets, boxes = set(), set(), set()
    player = -1
    base = []
    for r, row in enumerate(rows):
        if len(row) != width:
            raise ConfigError(
                f"every row of a room must have {width} cells (the first row's), got {len(row)} "
                f"in row {r}; pad the rows of the room to one width"
            )
        for c, ch in enumerate(row):
            cell = r * width + c
            if ch != WALL:
                floor.add(cell)
            if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.add(cell)
            if ch in (BOX, BOX_ON_TARGET):
                boxes.add(cell)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                player = cell
            base.append(WALL if ch == WALL else TARGET if cell in targets else FLOOR)
    if player < 0 or len(boxes) != len(targets) or not boxes:
        raise ConfigError(
            "a room needs one player (@ or +) and as many boxes (B or *) as targets (T, * or +), "
            f"at least one; got {'a' if player >= 0 else 'no'} player, {len(boxes)} boxes and "
            f"{len(targets)} targets: fix the room's text"
        )
    live = _live_squares(frozenset(floor), frozenset(targets), width)
    dist = _push_distances(frozenset(floor), frozenset(targets), width, height)
    layout = Layout(
        width,
        height,
        frozenset(floor),
        frozenset(targets),
        frozenset(floor) - live,
        tuple(base),
        dist,
    )
    return layout, player, frozenset(boxes)


def _live_squares(floor: frozenset[int], targets: frozenset[int], width: int) -> frozenset[int]:
    """Cells from which a lone box can still be pushed onto some target (reverse pulls)."""
    live = set(targets)
    stack = list(targets)
    offsets = tuple(deltas(width).values())
    while stack:
        box = stack.pop()
        for d in offsets:
            to, player_to = box + d, box + 2 * d
            if to in floor and player_to in floor and to not in live:
                live.add(to)
                stack.append(to)
    return frozenset(live)


def _push_distances(
    floor: frozenset[int], targets: frozenset[int], width: int, height: int
) -> tuple[int, ...]:
    dist = distances(targets, lambda c: c in floor, width)
    return tuple(dist.get(c, -1) for c in range(width * height))


def render_rows(layout: Layout, player: int, boxes: frozenset[int] | set[int]) -> list[str]:
    """The room as rows of characters."""
    cells = list(layout.base)
    for b in boxes:
        cells[b] = BOX_ON_TARGET if b in layout.targets else BOX
    cells[player] = PLAYER_ON_TARGET if player in layout.targets else PLAYER
    w = layout.width
    return ["".join(cells[i : i + w]) for i in range(0, len(cells), w)]


def solve(
    layout: Layout, player: int, boxes: frozenset[int], max_states: int = 300_000
) -> list[str] | None:
    """Find a move sequence that puts every box on a target (A* over pushes), or None."""
    if boxes <= layout.targets:
        return []
    width = layout.width
    steps = deltas(width)
    tie = itertools.count()
    start_region = reachable(player, lambda c: layout.passable(c, boxes), width)
    start_key = (min(start_region), boxes)
    # parent: state key -> (previous key, player cell before the push, direction)
    parent: dict[_Key, _Parent]
    parent = {start_key: None}
    frontier = [(_heuristic(layout, boxes), next(tie), 0, start_key, start_region)]
    while frontier and len(parent) <= max_states:
        _, _, cost, key, region = heapq.heappop(frontier)
        _, current = key
        for box in current:
            for name, d in steps.items():
                behind, to = box - d, box + d
                if behind not in region or to not in layout.floor or to in current:
                    continue
                if to in layout.dead:
                    continue
                moved = (current - {box}) | {to}
                new_region = reachable(box, partial(layout.passable, boxes=moved), width)
                new_key = (min(new_region), moved)
                if new_key in parent:
                    continue
                parent[new_key] = (key, behind, name)
                if moved <= layout.targets:
                    return _moves(layout, player, boxes, _pushes(parent, new_key))
                heapq.heappush(
                    frontier,
                    (
                        cost + 1 + _heuristic(layout, moved),
                        next(tie),
                        cost + 1,
                        new_key,
                        new_region,
                    ),
                )
    return None


def _heuristic(layout: Layout, boxes: frozenset[int]) -> int:
    return sum(layout.target_distance[b] for b in boxes if b not in layout.targets)


def _pushes(parent: dict[_Key, _Parent], key: _Key) -> list[tuple[int, str]]:
    out = []
    while (entry := parent[key]) is not None:
        key, behind, name = entry
        out.append((behind, name))
    return out[::-1]


def _moves(
    layout: Layout, player: int, boxes: frozenset[int], pushes: list[tuple[int, str]]
) -> list[str]:
    """Expand pushes into single moves by walking the player to each push position."""
    steps = deltas(layout.width)
    current = set(boxes)
    moves: list[str] = []
    for behind, name in pushes:
        walk = bfs_path(player, behind, lambda c: layout.passable(c, current), layout.width)
        assert walk is not None, "push position unreachable during solution replay"
        moves.extend(walk)
        box = behind + steps[name]
        current.remove(box)
        current.add(box + steps[name])
        player = box
        moves.append(name)
    return moves


def generate_room(
    rng: np.random.Generator, height: int, width: int, n_boxes: int, pull_steps: int
) -> tuple[str, ...] | None:
    """Carve a room, put boxes on targets, then play backwards (pulls) to scatter them.

    Any room made this way is solvable: replaying the pulls forward as pushes solves it.
    Returns the rows, or None if this draw made no usable room.
    """
    interior = [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    floor: set[int] = set()
    r, c = interior[int(rng.integers(len(interior)))]
    moves = ((-1, 0), (1, 0), (0, -1), (0, 1))
    direction = moves[int(rng.integers(4))]
    for _ in range(len(interior) * 3):
        floor.add(r * width + c)
        if rng.random() < 0.35:
            direction = moves[int(rng.integers(4))]
        nr, nc = r + direction[0], c + direction[1]
        if 1 <= nr < height - 1 and 1 <= nc < width - 1:
            r, c = nr, nc
    if len(floor) < 2 * n_boxes + 4:
        return None
    cells = sorted(floor)
    picks = rng.choice(len(cells), size=n_boxes, replace=False)
    targets = frozenset(cells[int(i)] for i in picks)
    best: tuple[float, int, frozenset[int]] | None = None
    for _ in range(4):  # several backward plays from the solved state; keep the hardest
        start = cells[int(rng.integers(len(cells)))]
        if start in targets:
            continue
        found = _reverse_play(rng, floor, targets, start, width, pull_steps)
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    if best is None:
        return None
    _, player, final_boxes = best
    rows = []
    for rr in range(height):
        row = []
        for cc in range(width):
            cell = rr * width + cc
            if cell not in floor:
                row.append(WALL)
            elif cell == player:
                row.append(PLAYER_ON_TARGET if cell in targets else PLAYER)
            elif cell in final_boxes:
                row.append(BOX_ON_TARGET if cell in targets else BOX)
            else:
                row.append(TARGET if cell in targets else FLOOR)
        rows.append("".join(row))
    return tuple(rows)


def _reverse_play(
    rng: np.random.Generator,
    floor: set[int],
    targets: frozenset[int],
    player: int,
    width: int,
    pull_steps: int,
) -> tuple[float, int, frozenset[int]] | None:
    """Walk backwards from the solved state, pulling boxes; return the best-scored state."""
    boxes = set(targets)
    offsets = tuple(deltas(width).values())
    best: tuple[float, int, frozenset[int]] | None = None
    pulls = 0
    for _ in range(pull_steps):
        d = offsets[int(rng.integers(4))]
        to = player + d
        if to not in floor or to in boxes:
            continue
        behind = player - d
        if behind in boxes and rng.random() < 0.8:
            boxes.remove(behind)
            boxes.add(player)
            pulls += 1
        player = to
        if not boxes <= targets:
            score = sum(_manhattan(b, targets, width) for b in boxes) + 0.1 * pulls
            if best is None or score > best[0]:
                best = (score, player, frozenset(boxes))
    return best


def _manhattan(cell: int, targets: frozenset[int], width: int) -> int:
    r, c = divmod(cell, width)
    return min(abs(r - tr) + abs(c - tc) for tr, tc in (divmod(t, width) for t in targets))
