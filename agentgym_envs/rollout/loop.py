"""The one turn loop: every rollout in the library plays its episodes here.

A round of the loop asks an :class:`Actor` for the action of every live episode at once
(one batch for an LLM), steps each lane's slots with them (all of a lane's steps sent
before any result is read, so a Ray env pool steps them in parallel), and hands each
result back to the actor. A *lane* is one set of env slots with its own job feed: the
reference trainer and the adapters play one lane
(:class:`~agentgym_envs.rollout.episodes.RolloutRunner`, whose actor samples tokens), the
evaluator one lane per suite entry played side by side
(:func:`~agentgym_envs.eval.evaluate.run_entries`, whose actor is a text policy).

What the loop fixes, whatever the actor:

* a free slot takes jobs from its lane's feed until one episode is live (an episode that
  ends at its reset, an env crash, is emitted at once);
* the actor acts for every live episode of every lane in one call; an episode the actor
  ended there (a generation server that failed: an ``env_error``) is emitted unstepped;
* the actor reads each step's result; an episode that ended goes to its lane's ``emit``
  and frees its slot for the next job in the next round;
* ``stop()`` is asked after every round: true ends the loop, dropping the episodes that
  still run (their caller closes the slots).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from agentgym_envs.core.episode import EpisodeFold
from agentgym_envs.distributed.results import SlotResult
from agentgym_envs.rollout.slots import EnvSlots, Note


class Playing(Protocol):
    """An episode as the loop sees it: its record, whose ``done`` ends it."""

    @property
    def fold(self) -> EpisodeFold: ...


E = TypeVar("E", bound=Playing)

Feed = Callable[[int], "tuple[int, Any] | None"]
"""The next job for the free slot it is given, with its key (None: no job now)."""


@dataclass(eq=False)
class Lane(Generic[E]):
    """One set of env slots and the jobs played on them.

    Attributes:
        slots: where the envs live.
        feed: the next ``(key, job)`` for a free slot, or None.
        emit: receives each finished episode with its job's key.
        live: the live episodes, by slot: ``(key, episode)``.
    """

    slots: EnvSlots
    feed: Feed
    emit: Callable[[int, E], None]
    live: dict[int, tuple[int, E]] = field(default_factory=dict)


class Actor(Protocol[E]):
    """What plays the episodes of the loop: starts them, acts, reads the env's answers."""

    def start(self, lane: Lane[E], slot: int, job: Any) -> E:
        """The episode of ``job`` in ``lane``'s ``slot`` (reset there; its fold is done
        when it ended at the reset)."""
        ...

    def act(self, turns: Sequence[tuple[Lane[E], int, E]]) -> list[str]:
        """The action of each live episode, in order. An episode whose fold is done
        afterwards (the actor failed for it) is emitted without a step."""
        ...

    def note(self, lane: Lane[E], slot: int, episode: E) -> Note:
        """What the env's recorder adds to this step's record (None: nothing)."""
        ...

    def observe(self, episode: E, action: str, result: SlotResult) -> bool:
        """Read the env's answer to ``action``; False when the episode ended."""
        ...


def fill(lane: Lane[E], actor: Actor[E]) -> None:
    """Give each free slot of ``lane`` a live episode while its feed has jobs."""
    for slot in range(len(lane.slots)):
        while slot not in lane.live and (item := lane.feed(slot)) is not None:
            key, job = item
            episode = actor.start(lane, slot, job)
            if episode.fold.done:
                lane.emit(key, episode)
            else:
                lane.live[slot] = (key, episode)


def play_rounds(
    lanes: Callable[[], Sequence[Lane[E]]],
    actor: Actor[E],
    *,
    stop: Callable[[], bool] | None = None,
    on_env_s: Callable[[float], None] | None = None,
) -> None:
    """Play rounds until no lane has a live episode.

    Args:
        lanes: called before each round: the lanes to play, their free slots filled
            (:func:`fill`); a caller that opens and closes lanes does it here.
        actor: starts, acts for and observes the episodes.
        stop: asked after each round; true ends the loop with episodes still running.
        on_env_s: receives the seconds each lane's ``step_many`` took.
    """
    while True:
        current = lanes()
        turns = [(lane, slot, lane.live[slot][1]) for lane in current for slot in sorted(lane.live)]
        if not turns:
            return
        actions = actor.act(turns)
        stepped: dict[int, list[tuple[int, str]]] = {id(lane): [] for lane in current}
        for (lane, slot, episode), action in zip(turns, actions, strict=True):
            if episode.fold.done:  # the actor failed for it
                key, _ = lane.live.pop(slot)
                lane.emit(key, episode)
            else:
                stepped[id(lane)].append((slot, action))
        for lane in current:
            _step(lane, stepped[id(lane)], actor, on_env_s)
        if stop is not None and stop():
            return


def _step(
    lane: Lane[E],
    actions: list[tuple[int, str]],
    actor: Actor[E],
    on_env_s: Callable[[float], None] | None,
) -> None:
    if not actions:
        return
    notes = [actor.note(lane, slot, lane.live[slot][1]) for slot, _ in actions]
    start = time.perf_counter()
    try:
        if any(note is not None for note in notes):
            results = lane.slots.step_many(actions, notes)
        else:
            results = lane.slots.step_many(actions)
    finally:
        if on_env_s is not None:
            on_env_s(time.perf_counter() - start)
    for (slot, action), result in zip(actions, results, strict=True):
        key, episode = lane.live[slot]
        if not actor.observe(episode, action, result):
            del lane.live[slot]
            lane.emit(key, episode)


__all__ = ["Actor", "Feed", "Lane", "Playing", "fill", "play_rounds"]
