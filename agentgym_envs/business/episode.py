"""Plain data of a business episode: the world snapshot and the grading verdict."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from agentgym_envs.core.errors import ArgumentError


class GradeState(Enum):
    """Where the grading of a business episode stands."""

    PENDING = "pending"  # the conversation goes on: not graded yet
    SUCCESS = "success"
    FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The grade of a business episode: its state, and why it failed (FAILURE only).

    Attributes:
        state: pending, success or failure.
        reason: for a failure, what went wrong (the user left unserved, a database
            that differs from the goal ...); empty otherwise.
    """

    state: GradeState
    reason: str = ""

    def __post_init__(self) -> None:
        if (self.state is GradeState.FAILURE) != bool(self.reason):
            raise ArgumentError(
                f"a Verdict has a reason exactly when it is a failure; got state "
                f"{self.state.value} with reason {self.reason!r}. Use Verdict.failure(reason) "
                "for a failure and PENDING / SUCCESS otherwise."
            )

    @classmethod
    def failure(cls, reason: str) -> Verdict:
        """A failed episode, with why."""
        return cls(GradeState.FAILURE, reason)


PENDING = Verdict(GradeState.PENDING)
SUCCESS = Verdict(GradeState.SUCCESS)


@dataclass(frozen=True, slots=True)
class BusinessWorld:
    """Everything of a business episode's world that a snapshot restores (plain data).

    Attributes:
        database: the episode's SQLite database, serialised.
        auth_user: the authenticated user id, or None.
        seen_ids: ids in anything the agent was shown, sorted.
        fetched_ids: ids that READ tools returned, sorted.
        confirmed_writes: keys of the writes the user confirmed, sorted.
        writes: keys of the confirmed writes applied, in order.
        chain: the digest of every applied write, in order (stands for the database).
        transferred: whether the agent transferred the user to a human.
        verdict: the grade so far (PENDING until the conversation ends).
        trial: the trial number that seeds the simulated user's wording.
        user_state: the simulated user's progress (``UserState.as_tuple``).
        reads: ``"tool id"`` for each record a READ tool showed after authentication,
            sorted.
        asked_writes: writes applied when the current request was asked.
        voice: the LLM user's counters, cassette position and fault
            (``VoiceState.as_tuple``); None with the template user.
    """

    database: bytes
    auth_user: str | None
    seen_ids: tuple[str, ...]
    fetched_ids: tuple[str, ...]
    confirmed_writes: tuple[str, ...]
    writes: tuple[str, ...]
    chain: str
    transferred: bool
    verdict: Verdict
    trial: int
    user_state: tuple[int, int, bool, bool, bool, str]
    reads: tuple[str, ...]
    asked_writes: int
    voice: tuple[Any, ...] | None = None
