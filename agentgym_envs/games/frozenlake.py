"""FrozenLake: cross a frozen lake to the goal without falling into a hole."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import numpy as np

from agentgym_envs.core import AgentEnv, ConfigError, Milestone, Task, ToolResult, tool
from agentgym_envs.core.step_checks import (
    GENERIC_SPECS,
    IRREVERSIBLE,
    WASTED,
    StepCheck,
    StepCheckSpec,
    StepFacts,
    refined,
)
from agentgym_envs.games.grid import DIRECTION_SCHEMA, DIRECTIONS, deltas, distances, move_call

START, FROZEN, HOLE, GOAL, PLAYER = "SFHGP"

# (side, hole density, minimum shortest-path length from start to goal)
LEVELS = {"easy": (4, 0.2, 3), "medium": (6, 0.18, 5), "hard": (8, 0.16, 8)}
# ood: lake sizes and hole densities never seen in train or test
OOD_LEVELS = {"easy": (5, 0.3, 4), "medium": (7, 0.22, 6), "hard": (10, 0.16, 10)}
PROGRESS_STAGES = (25, 50, 75)
DEFAULT_SUCCESS_RATE = 1 / 3
# a slippery move slides to one of the two perpendicular directions, never backwards
SIDEWAYS = {
    "up": ("left", "right"),
    "down": ("left", "right"),
    "left": ("up", "down"),
    "right": ("up", "down"),
}
_MOVES = {d: move_call(d) for d in DIRECTIONS}


@dataclass(frozen=True, eq=False)
class Lake:
    """The static part of a map, precomputed once per map.

    Cells are flat indices on the map padded with a one-cell border (``width`` counts the
    border), so neighbour offsets never wrap around a row and the grid helpers apply.
    """

    rows: tuple[str, ...]
    width: int
    start: int
    goal: int
    holes: frozenset[int]
    safe: frozenset[int]  # lake cells that are not holes
    neighbour: dict[int, dict[str, int]]  # where each move lands; the same cell at an edge
    distance: tuple[float, ...]  # per cell: moves to the goal avoiding holes, or inf
    toward: dict[int, str]  # a first move of a shortest path to the goal, per safe cell
    label: dict[int, str]  # "row r, column c", counting from 1
    views: dict[int, str]  # the rendered board and position, per cell the agent can be on

    def shortest_path(self) -> list[str]:
        """The moves of a shortest safe path from the start to the goal (BFS)."""
        path, cell = [], self.start
        while cell != self.goal:
            path.append(self.toward[cell])
            cell = self.neighbour[cell][path[-1]]
        return path


@lru_cache(maxsize=4096)  # bounded: task_seed resets can generate unlimited maps
def parse_lake(rows: tuple[str, ...]) -> Lake:
    """Parse a map written with ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal (cached)."""
    return _build_lake(rows)


def _build_lake(rows: tuple[str, ...]) -> Lake:
    height, cols = len(rows), len(rows[0]) if rows else 0
    width = cols + 2
    cells: dict[int, str] = {}
    for r, row in enumerate(rows):
        if len(row) != cols or set(row) - set("SFHG"):
            raise ConfigError(f"row {r} ({row!r}) must have {cols} cells of S, F, H or G")
        for c, ch in enumerate(row):
            cells[(r + 1) * width + c + 1] = ch
    starts = [c for c, ch in cells.items() if ch == START]
    goals = [c for c, ch in cells.items() if ch == GOAL]
    if len(starts) != 1 or len(goals) != 1:
        raise ConfigError(
            f"a map needs exactly one S and one G, got {len(starts)} and {len(goals)}"
        )
    holes = frozenset(c for c, ch in cells.items() if ch == HOLE)
    safe = frozenset(cells) - holes
    steps = deltas(width)
    neighbour = {c: {d: c + o if c + o in cells else c for d, o in steps.items()} for c in cells}
    dist = distances([goals[0]], safe.__contains__, width)
    toward = {
        c: next(d for d in DIRECTIONS if dist.get(neighbour[c][d]) == dist[c] - 1)
        for c in dist
        if c != goals[0]
    }
    label = {c: f"row {c // width}, column {c % width}" for c in cells}
    views = {}
    for cell in cells:
        r, c = divmod(cell, width)
        board = list(rows)
        board[r - 1] = rows[r - 1][: c - 1] + PLAYER + rows[r - 1][c:]
        views[cell] = "\n".join(board) + f"\nYou (P) are at {label[cell]}."
    distance = tuple(dist.get(c, math.inf) for c in range(width * (height + 2)))
    return Lake(
        rows=rows,
        width=width,
        start=starts[0],
        goal=goals[0],
        holes=holes,
        safe=safe,
        neighbour=neighbour,
        distance=distance,
        toward=toward,
        label=label,
        views=views,
    )


@lru_cache(maxsize=64)  # a plan holds (horizon + 1) x cells floats: keep few
def _plan(
    rows: tuple[str, ...], success_rate: float, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """Finite-horizon value iteration on the slippery dynamics.

    Returns ``(values, actions)``, both of shape (horizon + 1, cells): ``values[t, c]`` is
    the best probability of reaching the goal from cell ``c`` within ``t`` moves and
    ``actions[t, c]`` the index (in ``DIRECTIONS``) of a move achieving it.
    """
    lake = parse_lake(rows)
    n = lake.width * (len(rows) + 2)
    # (4, N): the landing cell of each direction; border cells never occur, map to themselves
    land = np.tile(np.arange(n), (4, 1))
    for c, moves in lake.neighbour.items():
        land[:, c] = [moves[d] for d in DIRECTIONS]
    side_a, side_b = ([DIRECTIONS.index(SIDEWAYS[d][k]) for d in DIRECTIONS] for k in (0, 1))
    slide = (1.0 - success_rate) / 2
    dead = np.ones(n, dtype=bool)  # holes and the border: absorbing with value 0
    dead[list(lake.safe)] = False
    values = np.zeros((horizon + 1, n))
    actions = np.zeros((horizon + 1, n), dtype=np.int8)
    values[0, lake.goal] = 1.0
    for t in range(1, horizon + 1):
        after = values[t - 1][land]  # (4, N): value of landing where each direction leads
        q = success_rate * after + slide * (after[side_a] + after[side_b])  # (4, N)
        q[:, dead] = 0.0
        q[:, lake.goal] = 1.0  # the goal is absorbing: the episode has ended in success
        actions[t] = q.argmax(axis=0)
        values[t] = q.max(axis=0)
    return values, actions


def optimal_success_probability(rows: Sequence[str], success_rate: float, steps: int) -> float:
    """The exact probability that an optimal policy reaches the goal from ``S`` within
    ``steps`` slippery moves (each goes the intended way with ``success_rate``)."""
    _check_rate(success_rate)
    if steps < 0:
        raise ConfigError(f"steps must be >= 0, got {steps}")
    lake = parse_lake(tuple(rows))
    return float(_plan(lake.rows, float(success_rate), steps)[0][steps, lake.start])


def _check_rate(success_rate: Any) -> None:
    ok = isinstance(success_rate, int | float) and not isinstance(success_rate, bool)
    if not ok or not 0.0 < success_rate <= 1.0:
        raise ConfigError(
            f"success_rate must be a number with 0 < success_rate <= 1, got {success_rate!r}; "
            "pass e.g. success_rate=1/3 (the classic slippery ice) or 1.0 (no slipping)"
        )


def generate_lake(
    rng: np.random.Generator, side: int, hole_density: float, min_length: int
) -> tuple[str, ...] | None:
    """Draw start, goal and holes until the goal is reachable at least ``min_length``
    moves away from the start; returns the rows, or None after too many tries."""
    n = side * side
    n_holes = round(hole_density * (n - 2))
    for _ in range(100):
        start, goal = (int(c) for c in rng.choice(n, size=2, replace=False))
        if abs(start // side - goal // side) + abs(start % side - goal % side) < min_length:
            continue
        others = [c for c in range(n) if c not in (start, goal)]
        holes = {others[int(i)] for i in rng.choice(len(others), size=n_holes, replace=False)}
        chars = [HOLE if c in holes else FROZEN for c in range(n)]
        chars[start], chars[goal] = START, GOAL
        rows = tuple("".join(chars[r * side : (r + 1) * side]) for r in range(side))
        lake = _build_lake(rows)  # uncached: most draws are thrown away
        if lake.distance[lake.start] < math.inf:
            return rows
    return None


class FrozenLakeEnv(AgentEnv):
    """FrozenLake on a text grid.

    Description:
        Walk across a frozen lake from the start to the goal without stepping into a
        hole. Maps are generated from a seed with start, goal and holes placed at random
        and a guaranteed safe path. Difficulty grows with the lake's size (4x4, 6x6,
        8x8); the ``ood`` split uses sizes and hole densities unseen in ``train``/``test``
        (5x5 dense, 7x7, 10x10). With ``is_slippery=True`` a move goes the intended way
        with probability ``success_rate`` (1/3 by default) and otherwise slides to one of
        the two perpendicular directions, never backwards; slides use only the env RNG.

    Observation:
        The result of the last move (where you ended up, and whether you slipped), then
        the map: ``S`` start, ``F`` frozen ice, ``H`` hole, ``G`` goal, ``P`` you; and your
        row and column, counting from 1 at the top left.

    Tools:
        ``move(direction)``: walk (or slide) one cell up, down, left or right. Moving
        off the edge of the lake leaves you where you are.

    Milestones:
        ``progress:25``, ``progress:50``, ``progress:75``: your shortest safe distance
        to the goal is at most 75%, 50%, 25% of the start's.

    Safety gates:
        None: a hole ends the episode as a plain failure.

    Rewards:
        Layered (see :class:`~agentgym_envs.core.RewardConfig`): success, milestone
        progress, a cost of 1 unit per move.

    Termination:
        Success on reaching the goal; failure on falling into a hole. Truncation when
        the step budget runs out (sized so that the slippery variant has a real chance:
        100 moves on 8x8, scaled with the side, and at least 6x the shortest path).
    """

    name = "FrozenLake"
    family = "games"
    version = "0"
    verifier_version = "1"
    step_checks_version = "1"  # progress, no_irreversible_error, no_wasted_action
    task_file = "games/frozenlake.jsonl"
    example_action = move_call("up")
    max_observation_chars = 2048
    max_action_chars = 2048

    def __init__(
        self,
        *,
        is_slippery: bool = False,
        success_rate: float = DEFAULT_SUCCESS_RATE,
        **kwargs: Any,
    ) -> None:
        if not isinstance(is_slippery, bool):
            raise ConfigError(f"is_slippery must be True or False, got {is_slippery!r}")
        _check_rate(success_rate)
        if not is_slippery and success_rate != DEFAULT_SUCCESS_RATE:
            raise ConfigError(
                f"success_rate={success_rate!r} only applies to slippery ice; "
                "pass is_slippery=True as well, or drop success_rate"
            )
        # set before the base init: it records variant() in info["versions"]["env"]
        self.is_slippery = is_slippery
        self.success_rate = float(success_rate)
        # a draw in [rate, split) slides to the first sideways direction, above it the second
        self._slide_split = self.success_rate + (1.0 - self.success_rate) / 2
        super().__init__(**kwargs)
        self._lake: Lake | None = None
        self._cell = 0

    def variant(self) -> str:
        if not self.is_slippery:
            return ""
        if self.success_rate == DEFAULT_SUCCESS_RATE:
            return "+slippery"
        return f"+slippery:{self.success_rate:g}"

    # -- tools ------------------------------------------------------------------------

    @tool(
        "Walk one cell; on slippery ice you may slide sideways instead.",
        parameters={"direction": DIRECTION_SCHEMA},
    )
    def move(self, direction: str) -> ToolResult:
        lake = self._lake
        assert lake is not None
        went = direction
        if self.is_slippery:
            draw = self.np_random.random()
            if draw >= self.success_rate:
                went = SIDEWAYS[direction][draw >= self._slide_split]
        to = lake.neighbour[self._cell][went]
        bumped = to == self._cell
        if bumped and went == direction:  # the policy's choice, not a slide
            self.mark_wasted()
        self._cell = to
        where = lake.label[to]
        if went == direction:
            if bumped:
                return ToolResult(f"You bump into the edge of the lake and stay at {where}.")
            return ToolResult(f"You move {direction} to {where}.")
        slid = "into the edge of the lake and stay at" if bumped else "to"
        return ToolResult(
            f"The ice is slippery: you try to move {direction} but slide {went} {slid} {where}."
        )

    # -- world hooks ------------------------------------------------------------------

    def _load_task(self, task: Task) -> None:
        self._lake = parse_lake(tuple(task.spec["rows"]))
        self._cell = self._lake.start

    def _get_world(self) -> int:
        return self._cell

    def _set_world(self, world: int) -> None:
        self._cell = world

    def render_view(self) -> str:
        assert self._lake is not None
        return self._lake.views[self._cell]

    def system_rules(self) -> str:
        rules = (
            "You play FrozenLake. Cross the frozen lake from the start to the goal. The map "
            "is a grid: S is the start, F frozen ice (safe), H a hole, G the goal and P you. "
            "Rows count from 1 at the top, columns from 1 at the left. Each move goes one "
            "cell up, down, left or right; moving off the edge leaves you where you are. "
            "Falling into a hole ends the game in failure."
        )
        if self.is_slippery:
            rate = self.success_rate
            rules += (
                f" The ice is slippery: a move goes the way you chose with probability "
                f"{rate:.3g}; otherwise you slide to one of the two sideways directions "
                f"(probability {(1 - rate) / 2:.3g} each), never backwards. Keep away from "
                "holes beside your path."
            )
        return rules

    def _goal_reached(self) -> bool:
        assert self._lake is not None
        return self._cell == self._lake.goal

    def _dead_end(self) -> str | None:
        assert self._lake is not None
        if self._cell in self._lake.holes:
            return f"you fell into a hole at {self._lake.label[self._cell]}"
        return None

    def _milestones(self) -> Sequence[Milestone]:
        lake = self._lake
        assert lake is not None
        far = lake.distance[lake.start]
        return [
            Milestone(
                f"progress:{k}",
                f"within {100 - k}% of the start's distance to the goal",
                partial(self._within, lake, far * (100 - k) / 100),
            )
            for k in PROGRESS_STAGES
        ]

    def _within(self, lake: Lake, limit: float) -> bool:
        return lake.distance[self._cell] <= limit

    def step_check_specs(self) -> Sequence[StepCheckSpec]:
        # on slippery ice a move into the edge is a strategy (it stays or slides sideways,
        # never the opposite way), so only firm ice has no_wasted_action
        if self.is_slippery:
            return (*GENERIC_SPECS, IRREVERSIBLE)
        return (*GENERIC_SPECS, IRREVERSIBLE, WASTED)

    def step_checks(self, facts: StepFacts) -> Sequence[StepCheck]:
        """``progress``: the share of the start's distance to the goal covered (a new best
        pays); ``no_irreversible_error``: -1 in a hole; ``no_wasted_action`` (firm ice):
        -0.25 for a move into the lake's edge."""
        lake = self._lake
        assert lake is not None
        far, here = lake.distance[lake.start], lake.distance[self._cell]
        closer = 0.0 if math.isinf(here) else max(0.0, 1.0 - here / far)
        own = [
            StepCheck("progress", closer),
            StepCheck("no_irreversible_error", -1.0 if self._cell in lake.holes else 0.0),
        ]
        if not self.is_slippery:
            wasted = -WASTED.max_score if self.wasted_this_step else 0.0
            own.append(StepCheck("no_wasted_action", wasted))
        return refined(super().step_checks(facts), *own)

    # -- oracle and generation ----------------------------------------------------------

    def oracle(self) -> FrozenLakeOracle:
        return FrozenLakeOracle(self)

    def oracle_success_probability(self) -> float:
        lake = self._lake
        assert lake is not None
        left = max(self.step_budget - self.steps_taken, 0)
        if not self.is_slippery:
            return 1.0 if lake.distance[self._cell] <= left else 0.0
        values, _ = _plan(lake.rows, self.success_rate, self.step_budget)
        return float(values[left, self._cell])

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        levels = OOD_LEVELS if split == "ood" else LEVELS
        if difficulty not in levels:
            raise ConfigError(f"unknown difficulty {difficulty!r}; use one of {tuple(levels)}")
        side, density, min_length = levels[difficulty]
        rng = np.random.default_rng(seed)
        rows = generate_lake(rng, side, density, min_length)
        if rows is None:
            return None
        lake = parse_lake(rows)
        path = lake.shortest_path()
        return Task(
            id=f"frozenlake-{difficulty}-{split}-{seed}",
            split=split,
            difficulty=difficulty,
            instruction=f"Cross the frozen lake from the start S ({lake.label[lake.start]}) "
            f"to the goal G ({lake.label[lake.goal]}) without falling into a hole H.",
            seed=seed,
            spec={"rows": list(rows)},
            solution=tuple(move_call(m) for m in path),
            # gymnasium allows 100 moves on 8x8; scale with the side so slippery ice is
            # winnable (a slide costs about two moves to undo)
            max_steps=max(round(100 * side / 8), 6 * len(path)),
        )

    @classmethod
    def task_key(cls, task: Task) -> Any:
        return tuple(task.spec["rows"])


class FrozenLakeOracle:
    """Plays optimally from the env's true state.

    Deterministic ice: a shortest safe path (BFS from the goal). Slippery ice: the
    argmax move of finite-horizon value iteration for the current cell and the moves
    left in the step budget, so it maximises the chance of reaching the goal in time.
    """

    def __init__(self, env: FrozenLakeEnv) -> None:
        self.env = env

    def act(self) -> str:
        env = self.env
        lake = env._lake
        assert lake is not None
        if not env.is_slippery:
            return _MOVES[lake.toward.get(env._cell, "up")]
        _, actions = _plan(lake.rows, env.success_rate, env.step_budget)
        left = max(env.step_budget - env.steps_taken, 1)
        return _MOVES[DIRECTIONS[int(actions[left, env._cell])]]
