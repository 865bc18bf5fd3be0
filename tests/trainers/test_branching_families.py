"""Branch rollouts on every env family (issue 18): a checkpoint restored through the
public snapshot API (``env.unwrapped.get_state``/``set_state``) into another env slot
plays on as the original would have, on a game (Sokoban), the business simulators with
their simulated user (Retail, Calendar), the code sandbox (RepoFix: real bubblewrap) and
the web shop (WebShop: real Chromium).

The originals are the oracle's episodes (short, and they succeed). Each checkpoint is
played on

1. with the original's own actions: the branch must be the original from its turn on
   (observations, rewards, milestones, outcome, tokens);
2. with other actions (a probe that reads what the original's continuation need not:
   the simulated user's next answer, the browser's back button and focus): the branch
   must be the episode that plays the original's actions up to the turn, then the
   probe, from a reset.

Each restore lands in an env that last played another episode (another task, the
original to its end, or an earlier branch), so whatever the snapshot missed shows up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.info import Outcome
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout import Script, oracle_script
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner, Trajectory, TurnCheckpoint
from tests.sandbox.support import needs_bwrap
from tests.web.support import needs_browser


@dataclass(frozen=True)
class Family:
    """One env of a family: the original's task, another one, and a probe."""

    env_id: str
    task: str
    other: str | None
    """The task the second slot plays while the original is played (None: that slot is
    first restored into from a fresh env, where episodes are expensive)."""
    max_steps: int
    probe: tuple[str, ...] = ()
    """Actions played from a checkpoint instead of the original's (test 2)."""
    probe_turns: tuple[int, ...] | None = None
    """The checkpoints probed (None: every one)."""


SOKOBAN = Family(
    "agentgym/Sokoban-v0",
    "sokoban-easy-train-3",
    "sokoban-easy-train-7",
    max_steps=8,
    probe=('move(direction="left")', 'move(direction="down")'),
)
# a message the simulated user answers (from their state and the turn), off the gold script
RETAIL = Family(
    "agentgym/Retail-v1",
    "retail-easy-train-0",
    "retail-easy-train-1",
    max_steps=10,
    probe=("Sorry, could you say that again?",),
)
CALENDAR = Family(
    "agentgym/Calendar-v2",
    "calendar-easy-train-0",
    "calendar-easy-train-1",
    max_steps=10,
    probe=("Sorry, could you say that again?",),
)
REPOFIX = Family("agentgym/RepoFix-v1", "repofix-intervals-easy-train-1", None, max_steps=4)
WEBSHOP = Family(
    "agentgym/WebShop-v2",
    "webshop-address-easy-train-1",  # open the edit form, fill the city, save
    None,
    max_steps=6,
    # after the fill: Backspace edits the focused field (its value, the caret), then
    # the browser's back button walks the tab's history (two pages, then the blank one)
    probe=('press(key="Backspace")', "back()", "back()"),
    probe_turns=(2,),
)
WEBSHOP_BUY = Family(  # product page, option, cart, checkout, payment, order
    "agentgym/WebShop-v2",
    "webshop-buy-easy-train-2",
    "webshop-address-easy-train-1",
    max_steps=8,
    # Tab from the element the oracle used last (the option it chose, the payment it
    # checked), Enter where that lands, then back twice
    probe=('press(key="Tab")', 'press(key="Enter")', "back()", "back()"),
)

SANDBOX = [pytest.mark.sandbox, needs_bwrap]
WEB = [pytest.mark.browser, needs_browser]
FAMILIES = [
    pytest.param(SOKOBAN, id="Sokoban"),
    pytest.param(RETAIL, id="Retail"),
    pytest.param(CALENDAR, id="Calendar"),
    # every episode ends in the hidden tests (bubblewrap): seconds each, ~20 s a case
    pytest.param(REPOFIX, marks=[*SANDBOX, pytest.mark.slow], id="RepoFix"),
    pytest.param(WEBSHOP, marks=WEB, id="WebShop"),
    pytest.param(WEBSHOP_BUY, marks=[*WEB, pytest.mark.slow], id="WebShop-buy"),
]
PROBED = [p for p in FAMILIES if isinstance(f := p.values[0], Family) and f.probe]


def runner_for(family: Family, tokenizer: Any, model: Any) -> RolloutRunner:
    """Two slots of the family's env (the policy is scripted: the model samples nothing)."""
    chat = ChatFormat(tokenizer)
    sampler = Sampler(model, eos_ids=[chat.eos_id], pad_id=chat.pad_id, temperature=0.0, seed=0)
    return RolloutRunner(
        lambda: gym.make(family.env_id, max_steps=family.max_steps),
        chat,
        sampler,
        n_envs=2,
        max_new_tokens=512,
        max_context=8192,
    )


def played(actions: Sequence[str], turn: int = 0, probe: Sequence[str] = ()) -> Script:
    """A scripted policy that plays, from wherever its env's episode stands (its step
    count), ``actions`` up to ``turn``, then ``probe`` (if any), then ``actions`` on;
    the env's no-op past their end."""
    moves = [*actions[:turn], *probe, *actions[turn:]] if probe else list(actions)

    def script(env: gym.Env[Any, Any]) -> Callable[[], str]:
        inner: Any = env.unwrapped
        noop = str(getattr(inner, "noop_action", ""))
        return lambda: moves[inner.steps_taken] if inner.steps_taken < len(moves) else noop

    return script


def originals(r: RolloutRunner, family: Family) -> tuple[Trajectory, list[TurnCheckpoint]]:
    """The oracle's episode of ``family.task`` (slot 0; the other task on slot 1) with a
    checkpoint before each of its turns."""
    jobs = [RolloutJob(family.task, 0, 0)]
    if family.other is not None:
        jobs.append(RolloutJob(family.other, 1, 1))
    trajs, _ = r.collect(jobs, 0, oracle_script, checkpoints=True)
    original = trajs[0]
    assert original.episode.outcome is Outcome.SUCCESS, original.episode.error
    assert len(original.actions) >= 2, "the test needs a turn after the first"
    ckpts = [c for c in original.checkpoints if c is not None]
    assert len(ckpts) == len(original.checkpoints) == len(original.actions)
    assert [c.turn for c in ckpts] == list(range(len(ckpts)))
    return original, ckpts


def assert_same_episode(want: Trajectory, got: Trajectory, where: str) -> None:
    """``got`` is ``want``: actions, observations, rewards, milestones, outcome, tokens."""
    assert got.episode.valid, (where, got.episode.error)
    assert got.actions == want.actions, where
    assert got.observations == want.observations, where
    assert got.episode.rewards == want.episode.rewards, where
    assert got.episode.reward_components == want.episode.reward_components, where
    assert got.episode.milestones == want.episode.milestones, where
    assert got.episode.outcome is want.episode.outcome, where
    assert got.episode.truncation is want.episode.truncation, where
    assert got.turn_facts == want.turn_facts, where
    assert [s.ids for s in got.segments] == [s.ids for s in want.segments], where
    assert [s.mask for s in got.segments] == [s.mask for s in want.segments], where
    assert not got.checkpoints, where  # branches are not branched again


@pytest.mark.parametrize("family", FAMILIES)
def test_a_branch_with_the_original_actions_is_the_original(
    family: Family, tokenizer: Any, tiny_model: Any
) -> None:
    """The oracle's episode, branched from every turn and played on with its own
    actions: the same episode from that turn on, to its success. (Turn 1's checkpoint
    is restored into the slot that played the other task, or none.)"""
    r = runner_for(family, tokenizer, tiny_model)
    try:
        original, ckpts = originals(r, family)
        branches, _ = r.collect(ckpts, 0, played(original.actions))
        for ckpt, branch in zip(ckpts, branches, strict=True):
            assert_same_episode(original, branch, f"branch from turn {ckpt.turn}")
    finally:
        r.close()


@pytest.mark.parametrize("family", PROBED)
def test_a_branch_that_probes_sees_the_state_a_replay_reaches(
    family: Family, tokenizer: Any, tiny_model: Any
) -> None:
    """From every turn ``t`` of the oracle's episode, the probe, then the rest of the
    oracle's actions: played from the checkpoint, it is the episode that plays the
    oracle's first ``t`` actions from a reset, then the same. The checkpoint is restored
    into slot 0, which last played this task further (the original to its end, then
    the last probe): an env that keeps its own leftovers (a browser tab's history) where
    a restore must replace them."""
    r = runner_for(family, tokenizer, tiny_model)
    try:
        original, ckpts = originals(r, family)
        turns = family.probe_turns
        for ckpt in [c for c in ckpts if turns is None or c.turn in turns]:
            script = played(original.actions, ckpt.turn, family.probe)
            (branch, replay), _ = r.collect([ckpt, RolloutJob(family.task, 0, 0)], 0, script)
            assert replay.actions[: ckpt.turn] == original.actions[: ckpt.turn]
            assert_same_episode(replay, branch, f"probe from turn {ckpt.turn}")
    finally:
        r.close()
