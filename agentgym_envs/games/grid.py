"""Grid helpers shared by the grid games: cells as flat indices, moves, flood fill."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

DIRECTIONS = ("up", "down", "left", "right")
DIRECTION_SCHEMA = {
    "type": "string",
    "enum": list(DIRECTIONS),
    "description": "where to move: up, down, left or right",
}


def deltas(width: int) -> dict[str, int]:
    """Flat-index offsets of the four moves on a grid ``width`` cells wide."""
    return {"up": -width, "down": width, "left": -1, "right": 1}


def bfs_path(
    start: int, goal: int, passable: Callable[[int], bool], width: int
) -> list[str] | None:
    """Shortest list of moves from ``start`` to ``goal`` over passable cells, or None."""
    if start == goal:
        return []
    steps = deltas(width)
    parent: dict[int, tuple[int, str]] = {start: (start, "")}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for name, d in steps.items():
            nxt = cell + d
            if nxt in parent or not passable(nxt):
                continue
            parent[nxt] = (cell, name)
            if nxt == goal:
                path = []
                while nxt != start:
                    nxt, move = parent[nxt]
                    path.append(move)
                return path[::-1]
            queue.append(nxt)
    return None


def reachable(start: int, passable: Callable[[int], bool], width: int) -> set[int]:
    """Every cell reachable from ``start`` over passable cells (``start`` included)."""
    seen = {start}
    stack = [start]
    offsets = tuple(deltas(width).values())
    while stack:
        cell = stack.pop()
        for d in offsets:
            nxt = cell + d
            if nxt not in seen and passable(nxt):
                seen.add(nxt)
                stack.append(nxt)
    return seen


def distances(
    sources: Iterable[int], passable: Callable[[int], bool], width: int
) -> dict[int, int]:
    """BFS distance from the nearest source to every reachable cell."""
    dist = {s: 0 for s in sources}
    queue = deque(dist)
    offsets = tuple(deltas(width).values())
    while queue:
        cell = queue.popleft()
        for d in offsets:
            nxt = cell + d
            if nxt not in dist and passable(nxt):
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


def move_call(direction: str) -> str:
    """The action text of one move, as oracles write it."""
    return f'move(direction="{direction}")'
