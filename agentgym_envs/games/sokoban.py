"""Sokoban: push every box onto a target in a procedurally generated room."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from agentgym_envs.core import AgentEnv, Milestone, Task, ToolResult, tool
from agentgym_envs.core.step_checks import (
    GENERIC_SPECS,
    IRREVERSIBLE,
    WASTED,
    StepCheck,
    StepCheckSpec,
    StepFacts,
    refined,
)
from agentgym_envs.games import sokoban_search as search
from agentgym_envs.games.grid import DIRECTION_SCHEMA, deltas, move_call

# (height, width, boxes, reverse-play steps, minimum solution length)
LEVELS = {
    "easy": (6, 6, 1, 120, 3),
    "medium": (7, 7, 2, 200, 8),
    "hard": (8, 8, 3, 300, 14),
}
# ood: room shapes and sizes never seen in train or test
OOD_LEVELS = {
    "easy": (5, 9, 1, 120, 3),
    "medium": (9, 6, 2, 200, 8),
    "hard": (9, 9, 3, 320, 14),
}


class SokobanEnv(AgentEnv):
    """Sokoban on a text board.

    Description:
        A warehouse keeper pushes boxes onto targets. Rooms are generated from a seed by
        reverse play (boxes start on targets and are pulled away), so every room is
        solvable. Difficulty grows with room size and box count; the ``ood`` split uses
        room shapes unseen in ``train``/``test``.

    Observation:
        The result of the last move, then the board: ``#`` wall, ``.`` floor,
        ``T`` target, ``B`` box, ``*`` box on a target, ``@`` you, ``+`` you on a target;
        and the count of boxes on targets.

    Tools:
        ``move(direction)``: walk one cell up, down, left or right, pushing a box
        in front of you if the cell behind it is free.

    Milestones:
        ``boxes_placed:k`` when k boxes are on targets at once (one per box).

    Safety gates:
        None: every move is reversible or at worst a dead end.

    Rewards:
        Layered (see :class:`~agentgym_envs.core.RewardConfig`): success, milestone
        progress, a cost of 1 unit per move.

    Termination:
        Success when every box is on a target. Failure when a box is pushed into a
        dead square (it can never reach a target) and ``end_on_deadlock`` is true.
        Truncation when the step budget (about 3x the oracle's solution) runs out.
    """

    name = "Sokoban"
    family = "games"
    version = "0"
    verifier_version = "1"
    step_checks_version = "1"  # progress, no_irreversible_error, no_wasted_action
    task_file = "games/sokoban.jsonl"
    example_action = move_call("up")
    max_observation_chars = 2048
    max_action_chars = 2048

    def __init__(self, *, end_on_deadlock: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end_on_deadlock = end_on_deadlock
        self._layout: search.Layout | None = None
        self._deltas: dict[str, int] = {}
        self._player = 0
        self._boxes: set[int] = set()
        self._start_boxes: tuple[int, ...] = ()

    # -- tools ------------------------------------------------------------------------

    @tool(
        "Walk one cell; pushes a box if one is in the way.",
        parameters={"direction": DIRECTION_SCHEMA},
    )
    def move(self, direction: str) -> ToolResult:
        layout = self._layout
        assert layout is not None
        d = self._deltas[direction]
        to = self._player + d
        if to not in layout.floor:
            self.mark_wasted()
            return ToolResult(f"You bump into a wall moving {direction}.")
        if to in self._boxes:
            beyond = to + d
            if beyond not in layout.floor or beyond in self._boxes:
                self.mark_wasted()
                return ToolResult(f"The box {direction} of you does not move.")
            self._boxes.remove(to)
            self._boxes.add(beyond)
            self._player = to
            placed = " It is on a target." if beyond in layout.targets else ""
            return ToolResult(f"You push a box {direction}.{placed}")
        self._player = to
        return ToolResult(f"You move {direction}.")

    # -- world hooks ------------------------------------------------------------------

    def _load_task(self, task: Task) -> None:
        layout, player, boxes = search.parse_room(tuple(task.spec["rows"]))
        self._layout = layout
        self._deltas = deltas(layout.width)
        self._player = player
        self._boxes = set(boxes)
        self._start_boxes = tuple(boxes)  # the progress step check measures from here

    def _get_world(self) -> tuple[int, tuple[int, ...]]:
        return (self._player, tuple(sorted(self._boxes)))

    def _set_world(self, world: tuple[int, tuple[int, ...]]) -> None:
        self._player, boxes = world
        self._boxes = set(boxes)

    def render_view(self) -> str:
        assert self._layout is not None
        rows = search.render_rows(self._layout, self._player, self._boxes)
        placed = len(self._boxes & self._layout.targets)
        return "\n".join(rows) + f"\nBoxes on targets: {placed}/{len(self._boxes)}"

    def system_rules(self) -> str:
        return (
            "You play Sokoban. Push every box (B) onto a target (T). You are @ (+ when on a "
            "target); # is a wall, . is floor, * is a box on a target. You can push one box "
            "at a time by walking into it, never pull. A box pushed into a corner that is "
            "not a target is stuck for good."
        )

    def _goal_reached(self) -> bool:
        assert self._layout is not None
        return self._boxes <= self._layout.targets

    def _dead_end(self) -> str | None:
        assert self._layout is not None
        if self.end_on_deadlock and not self._boxes.isdisjoint(self._layout.dead):
            return "a box is stuck where it can never reach a target"
        return None

    def _milestones(self) -> Sequence[Milestone]:
        assert self._layout is not None
        targets = self._layout.targets
        return [
            Milestone(
                f"boxes_placed:{k}",
                f"{k} box(es) on targets at once",
                partial(self._boxes_placed, targets, k),
            )
            for k in range(1, len(targets) + 1)
        ]

    def _boxes_placed(self, targets: frozenset[int], k: int) -> bool:
        return len(self._boxes & targets) >= k

    def step_check_specs(self) -> Sequence[StepCheckSpec]:
        return (*GENERIC_SPECS, IRREVERSIBLE, WASTED)

    def step_checks(self, facts: StepFacts) -> Sequence[StepCheck]:
        """``progress``: the share of the boxes' initial push distance to targets covered
        (a new best pays); ``no_irreversible_error``: -1 once a box is on a dead square;
        ``no_wasted_action``: -0.25 for a move into a wall or a box that cannot move."""
        layout = self._layout
        assert layout is not None
        far = sum(layout.target_distance[b] for b in self._start_boxes) or 1
        dist = [layout.target_distance[b] for b in self._boxes]
        dead = min(dist) < 0 or not self._boxes.isdisjoint(layout.dead)
        closer = 0.0 if dead else max(0.0, 1.0 - sum(dist) / far)
        return refined(
            super().step_checks(facts),
            StepCheck("progress", closer),
            StepCheck("no_irreversible_error", -1.0 if dead else 0.0),
            StepCheck("no_wasted_action", self._wasted_score()),
        )

    def _wasted_score(self) -> float:
        return -WASTED.max_score if self.wasted_this_step else 0.0

    # -- oracle and generation ----------------------------------------------------------

    def oracle(self) -> SokobanOracle:
        return SokobanOracle(self)

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        height, width, n_boxes, pulls, min_len = (OOD_LEVELS if split == "ood" else LEVELS)[
            difficulty
        ]
        rng = np.random.default_rng(seed)
        rows = search.generate_room(rng, height, width, n_boxes, pulls)
        if rows is None:
            return None
        layout, player, boxes = search.parse_room(rows)
        solution = search.solve(layout, player, boxes)
        if solution is None or len(solution) < min_len:
            return None
        return Task(
            id=f"sokoban-{difficulty}-{split}-{seed}",
            split=split,
            difficulty=difficulty,
            instruction="Push the box onto the target."
            if n_boxes == 1
            else f"Push all {n_boxes} boxes onto the targets.",
            seed=seed,
            spec={"rows": list(rows)},
            solution=tuple(move_call(m) for m in solution),
            max_steps=min(300, 3 * len(solution) + 10),
        )

    @classmethod
    def task_key(cls, task: Task) -> Any:
        return tuple(task.spec["rows"])


class SokobanOracle:
    """Plans with the A* push solver from the true state; replans if the state drifts."""

    def __init__(self, env: SokobanEnv) -> None:
        self.env = env
        self._plan: list[str] = []
        self._expect: tuple[int, tuple[int, ...]] | None = None

    def act(self) -> str:
        env = self.env
        world = env._get_world()
        if not self._plan or world != self._expect:
            assert env._layout is not None
            plan = search.solve(env._layout, env._player, frozenset(env._boxes))
            self._plan = list(plan or ["up"])
            self._expect = world
        move = self._plan.pop(0)
        self._expect = self._predict(move)
        return move_call(move)

    def _predict(self, move: str) -> tuple[int, tuple[int, ...]]:
        env = self.env
        assert env._layout is not None and self._expect is not None
        player, boxes = self._expect
        d = env._deltas[move]
        to = player + d
        moved = set(boxes)
        if to in moved:
            moved.remove(to)
            moved.add(to + d)
        return (to, tuple(sorted(moved)))
