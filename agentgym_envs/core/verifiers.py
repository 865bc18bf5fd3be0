"""Milestones, goal and invariant verifiers: predicates that only read world state.

Milestones are predicates on the world (not on action text). Each pays once per episode,
even if the state is left and re-entered. Goal verifiers decide success; invariant
verifiers catch collateral damage (a change the task does not allow means failure,
even when the goal holds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome


@dataclass(frozen=True, slots=True)
class Milestone:
    """A sub-goal predicate.

    Attributes:
        id: a stage name shared across tasks of one env (``boxes_placed:1``), so stage
            rates aggregate over tasks.
        description: what reaching it means.
        check: reads the world; True once the milestone is reached.
        weight: relative share of the reward's ``milestone_total``.
    """

    id: str
    description: str
    check: Callable[[], bool]
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Invariant:
    """A predicate that must hold for the whole episode (no collateral damage)."""

    id: str
    description: str
    holds: Callable[[], bool]


class MilestoneTracker:
    """Tracks which milestones of the current task are reached, paying each once."""

    __slots__ = ("_all", "_pending", "_total_weight", "reached")

    def __init__(self, milestones: Sequence[Milestone]) -> None:
        ids = [m.id for m in milestones]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"milestone ids must be unique, got {ids}")
        if any(m.weight <= 0 for m in milestones):
            raise ConfigError("milestone weights must be > 0")
        self._all = tuple(milestones)
        self._pending = list(milestones)
        self._total_weight = sum(m.weight for m in milestones) or 1.0
        self.reached: list[str] = []

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self._all)

    @property
    def progress(self) -> float:
        """The share (0..1) of the milestone weight reached so far."""
        done = set(self.reached)
        return sum(m.weight for m in self._all if m.id in done) / self._total_weight

    def update(self) -> tuple[list[str], float]:
        """Check pending milestones; return the newly reached ids and their weight share."""
        if not self._pending:
            return [], 0.0
        new: list[str] = []
        share = 0.0
        still: list[Milestone] = []
        for m in self._pending:
            if m.check():
                new.append(m.id)
                share += m.weight / self._total_weight
            else:
                still.append(m)
        if new:
            self._pending = still
            self.reached.extend(new)
        return new, share

    def restore(self, reached: Iterable[str]) -> None:
        """Set the reached milestones (from a snapshot)."""
        done = list(reached)
        unknown = set(done) - {m.id for m in self._all}
        if unknown:
            raise ConfigError(f"snapshot names milestones {sorted(unknown)} this task lacks")
        self.reached = done
        self._pending = [m for m in self._all if m.id not in set(done)]


def verify(
    goal: Callable[[], bool],
    invariants: Sequence[Invariant],
    dead_end: Callable[[], str | None],
) -> tuple[Outcome, str | None]:
    """Decide the outcome from world state.

    Order: a broken invariant is a failure (even with the goal met); then the goal; then
    a dead end (the goal can no longer be reached) is a failure; else continue.

    Returns:
        The outcome and, for failures, a short reason.
    """
    for inv in invariants:
        if not inv.holds():
            return Outcome.FAILURE, f"invariant broken: {inv.id} ({inv.description})"
    if goal():
        return Outcome.SUCCESS, None
    reason = dead_end()
    if reason is not None:
        return Outcome.FAILURE, reason
    return Outcome.CONTINUE, None
