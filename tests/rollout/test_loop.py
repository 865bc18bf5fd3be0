"""The one turn loop (``rollout/loop.py``) with a plain actor: what it fixes whatever
the actor is (jobs to free slots, one act call per round over every lane, unstepped
episodes the actor ended, emits, stop)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_envs.core.episode import EpisodeFold
from agentgym_envs.distributed.results import SlotResult
from agentgym_envs.rollout import LocalEnvSlots, Note
from agentgym_envs.rollout.loop import Lane, fill, play_rounds
from tests.rollout.envs import Breaking


@dataclass
class Ep:
    seed: int
    fold: EpisodeFold = field(default_factory=EpisodeFold)
    actions: list[str] = field(default_factory=list)


class Counting:
    """Acts ``"a<n>"``; fails (ends without a step) the episodes of seed 3; notes the seed."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[int, int]]] = []  # per act call: (lane, slot)
        self.notes: list[Note] = []
        self.lanes: list[Lane[Ep]] = []

    def start(self, lane: Lane[Ep], slot: int, job: Any) -> Ep:
        ep = Ep(job)
        result = lane.slots.reset(slot, job, None)
        if result.crashed:
            ep.fold.crash(result.error)
        else:
            ep.fold.reset(result.info)
        return ep

    def act(self, turns: Sequence[tuple[Lane[Ep], int, Ep]]) -> list[str]:
        self.calls.append([(self.lanes.index(lane), slot) for lane, slot, _ in turns])
        for _, _, ep in turns:
            if ep.seed == 3:
                ep.fold.crash("the actor failed")
        return [f"a{len(ep.actions)}" for _, _, ep in turns]

    def note(self, lane: Lane[Ep], slot: int, episode: Ep) -> Note:
        self.notes.append({"seed": episode.seed})
        return self.notes[-1]

    def observe(self, episode: Ep, action: str, result: SlotResult) -> bool:
        episode.actions.append(action)
        if result.crashed:
            episode.fold.crash(result.error)
        else:
            episode.fold.step(result.reward, result.terminated, result.truncated, result.info)
        return not episode.fold.done


def test_two_lanes_play_in_rounds_with_one_act_call_each() -> None:
    actor = Counting()
    done: list[tuple[int, int, Ep]] = []  # (lane, key, episode)
    jobs = [[0, 1, 2, 3, 0], [0, 0]]  # seed 1 crashes at reset, 2 at its step, 3 in act
    lanes = []
    for n, (size, seeds) in enumerate(zip((2, 1), jobs, strict=True)):
        feed = iter(enumerate(seeds))
        lanes.append(
            Lane(
                LocalEnvSlots(Breaking, size, strict=False),
                lambda _slot, feed=feed: next(feed, None),
                lambda key, ep, n=n: done.append((n, key, ep)),
            )
        )
    actor.lanes = lanes

    def current() -> list[Lane[Ep]]:
        for lane in lanes:
            fill(lane, actor)
        return lanes

    play_rounds(current, actor)
    by_job = {(lane, key): ep for lane, key, ep in done}
    assert sorted(by_job) == [(0, k) for k in range(5)] + [(1, 0), (1, 1)]
    outcome = {k: ep.fold.summary().outcome.value for k, ep in by_job.items()}
    assert outcome[0, 1] == outcome[0, 2] == outcome[0, 3] == "env_error"
    assert {outcome[0, 0], outcome[0, 4], outcome[1, 0], outcome[1, 1]} == {
        "timeout"
    }  # a plain env
    assert by_job[0, 1].actions == [] and by_job[0, 3].actions == []  # never stepped
    assert by_job[0, 2].actions == ["a0"]  # stepped once, and the env broke
    # every round acts once for every live episode of both lanes, lane by lane
    assert actor.calls[0] == [(0, 0), (0, 1), (1, 0)]
    assert all(call == sorted(call) for call in actor.calls)
    assert len(actor.notes) == sum(len(ep.actions) for ep in by_job.values())
    for lane in lanes:
        assert not lane.live
        lane.slots.close()


def test_stop_ends_the_loop_after_a_round_with_episodes_still_live() -> None:
    actor = Counting()
    emitted: list[int] = []
    feed = iter(enumerate([0, 0, 0]))
    lane: Lane[Ep] = Lane(
        LocalEnvSlots(Breaking, 2, strict=False),
        lambda _slot: next(feed, None),
        lambda key, _ep: emitted.append(key),
    )
    actor.lanes = [lane]

    def current() -> list[Lane[Ep]]:
        fill(lane, actor)
        return [lane]

    play_rounds(current, actor, stop=lambda: True)
    # Breaking ends each episode in one step: the round's two episodes ended, the third
    # job was never started
    assert sorted(emitted) == [0, 1] and len(actor.calls) == 1 and not lane.live
    lane.slots.close()
