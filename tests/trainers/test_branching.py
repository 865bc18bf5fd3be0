"""Branch rollouts (``--branch``): a branch restored from a checkpoint continues the
original exactly, identical branches carry no advantage, and on an env where one turn
decides, the credit lands on that turn; where branch points are chosen; the config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.episode import EpisodeSummary
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.spaces import TextSpace
from agentgym_envs.distributed.cluster import LocalCluster
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.engine import StaticEngine
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout import EnvSlots
from agentgym_envs.rollout.episodes import (
    RolloutJob,
    RolloutRunner,
    Segment,
    Trajectory,
    TurnFacts,
)
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.branching import (
    branch_turns,
    first_error_turn,
    locate,
    return_from,
    write_tools,
)
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.env_slots import pool_slots
from agentgym_trainers.trainer import Trainer

LAKE = "agentgym/FrozenLake-v0"


def lake_runner(
    tokenizer: Any, model: Any, temperature: float, slots: EnvSlots | None = None
) -> RolloutRunner:
    chat = ChatFormat(tokenizer)
    sampler = Sampler(
        model, eos_ids=[chat.eos_id], pad_id=chat.pad_id, temperature=temperature, seed=0
    )
    return RolloutRunner(
        lambda: gym.make(LAKE, max_steps=4),
        chat,
        sampler,
        n_envs=2,
        max_new_tokens=12,
        max_context=2048,
        slots=slots,
    )


def prompt_ids(traj: Trajectory, turn: int) -> list[int]:
    """The token ids the policy saw before sampling ``turn``."""
    j, k = locate(traj, turn)
    seg = traj.segments[j]
    return seg.ids[: seg.turn_span(k)[0]]


# -- 1. a branch starts where the original was --------------------------------------------


def test_a_branch_sees_the_original_observation_and_token_history(
    tokenizer: Any, tiny_model: Any
) -> None:
    """Sampled branches from turn 1 of one episode, on both slots (one of them last
    played another episode, on another map): the same observations, actions, rewards and
    prompt tokens up to the turn as the original."""
    r = lake_runner(tokenizer, tiny_model, temperature=1.0)
    try:
        trajs, _ = r.collect([RolloutJob(None, 3, 0), RolloutJob(None, 8, 1)], 0, checkpoints=True)
        original = trajs[0]
        assert len(original.actions) >= 2, "the test needs a second turn"
        assert len(original.checkpoints) == len(original.actions)
        ckpt = original.checkpoints[1]
        assert ckpt is not None and ckpt.turn == 1
        # a checkpoint keeps no sampled turn (one per turn would add up over a run)
        assert all(c is None or c.episode.sample is None for c in original.checkpoints)
        branches, _ = r.collect([ckpt, ckpt], 0)
        for b in branches:
            assert b.episode.valid and len(b.actions) >= 2
            assert b.observations[:2] == original.observations[:2]
            assert b.actions[:1] == original.actions[:1]
            assert b.episode.rewards[:1] == original.episode.rewards[:1]
            assert prompt_ids(b, 1) == prompt_ids(original, 1)
            assert b.turn_versions[:1] == original.turn_versions[:1]
            assert not b.checkpoints  # branches are not branched again
    finally:
        r.close()


def test_a_greedy_branch_replays_the_original_exactly(tokenizer: Any, tiny_model: Any) -> None:
    """Greedy sampling: a branch from any turn, restored into a slot that last played
    another episode, makes the same moves, so the restored env answers with the same
    observations and rewards to the end (it would not, had its snapshot not been
    restored), and its tokens are the original's."""
    assert_greedy_branches_replay(lake_runner(tokenizer, tiny_model, temperature=0.0))


def test_greedy_branches_on_a_ray_pool_replay_the_original(
    ray_cluster: LocalCluster, tokenizer: Any, tiny_model: Any
) -> None:
    """The same on a Ray env pool: snapshots taken from the actors and restored into
    them (the pool's get_state/set_state)."""
    slots = pool_slots(LAKE, 2, env_kwargs={"max_steps": 4})
    assert_greedy_branches_replay(lake_runner(tokenizer, tiny_model, 0.0, slots=slots))


def assert_greedy_branches_replay(r: RolloutRunner) -> None:
    try:
        trajs, _ = r.collect([RolloutJob(None, 3, 0), RolloutJob(None, 8, 1)], 0, checkpoints=True)
        original, other = trajs
        assert original.observations[0] != other.observations[0], "two different maps"
        jobs = [c for c in original.checkpoints if c is not None]
        assert len(jobs) == len(original.actions) >= 2
        branches, _ = r.collect(jobs, 0)
        for b in branches:
            assert b.actions == original.actions
            assert b.observations == original.observations
            assert b.episode.rewards == original.episode.rewards
            assert b.episode.outcome is original.episode.outcome
            assert [s.ids for s in b.segments] == [s.ids for s in original.segments]
    finally:
        r.close()


def test_a_branch_plays_where_its_original_cached_its_prefix(
    tokenizer: Any, tiny_model: Any
) -> None:
    """The static engine keeps one cache row per env slot. Branches listed in the
    opposite order of their originals' slots still go to those slots, so their first
    generation call recomputes nothing of the prompt but its last token (a branch in the
    other slot would share only the chat head with that row)."""
    chat = ChatFormat(tokenizer)
    engine = StaticEngine(tiny_model, max_batch=2, max_len=2048, cuda_graphs=False)
    sampler = Sampler(tiny_model, eos_ids=[chat.eos_id], pad_id=chat.pad_id, seed=0, engine=engine)
    r = RolloutRunner(
        lambda: gym.make(LAKE, max_steps=4), chat, sampler, n_envs=2, max_new_tokens=12,
        max_context=2048,
    )  # fmt: skip
    reused: list[int] = []
    extend = engine.extend

    def counted(prompts: Any) -> Any:
        before = engine.reused_tokens
        logits = extend(prompts)
        reused.append(engine.reused_tokens - before)
        return logits

    try:
        trajs, _ = r.collect([RolloutJob(None, 3, 0), RolloutJob(None, 8, 1)], 0, checkpoints=True)
        ckpts = [t.checkpoints[1] for t in reversed(trajs)]
        assert all(c is not None for c in ckpts) and [c.slot for c in ckpts] == [1, 0]
        engine.extend = counted  # type: ignore[method-assign]
        r.collect(ckpts, 0)
        assert reused[0] == sum(c.prompt - 1 for c in ckpts)
    finally:
        r.close()


# -- trainer fixtures ------------------------------------------------------------------------


def make_config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    base: dict[str, Any] = dict(
        env=LAKE,
        env_kwargs={"max_steps": 3},
        model="tiny",
        device="cpu",
        steps=1,
        tasks_per_step=2,
        group_size=2,
        n_envs=8,
        max_new_tokens=8,
        max_context=1024,
        adv_scale="none",
        branch="every",
        branch_k=3,
        branch_max_turns=3,
        run_dir=str(tmp_path / "run"),
    )
    base.update(overrides)
    return TrainConfig.from_flat(**base)


def branched_batch(trainer: Trainer) -> tuple[list[Trajectory], list[TrainSeq], dict[str, float]]:
    """One step's rollouts with their branches, and the sequences the algorithm keeps
    (the originals' first, in order, then the branches')."""
    trajs, _ = trainer.runner.collect(trainer.jobs(), trainer.version, checkpoints=True)
    assert trainer.brancher is not None
    trainer.brancher.branch(trajs, trainer.version, trainer.step)
    seqs, stats = trainer.advantages(trajs)
    return trajs, seqs, stats


# -- 2. identical branches carry no advantage ----------------------------------------------


def test_identical_branches_get_zero_advantage(tmp_path: Path, tokenizer: Any) -> None:
    """Greedy sampling on a deterministic env: every branch replays its original, so
    every branch point's returns are equal and every advantage is exactly 0; each branch
    adds one sequence, its prefix the original's tokens, only its branched turn trained."""
    trainer = Trainer(make_config(tmp_path, temperature=0.0))
    try:
        trajs, seqs, stats = branched_batch(trainer)
        n_original = sum(len(t.segments) for t in trajs)
        branch_seqs = seqs[n_original:]
        points = [(t, turn) for t in trajs for turn in t.branches]
        assert points and all(t.context["branch"]["turns"] == sorted(t.branches) for t in trajs)
        assert len(branch_seqs) == len(points) * 2
        for t, turn in points:
            for b in t.branches[turn]:
                assert b.actions == t.actions and b.episode.rewards == t.episode.rewards
        for s in branch_seqs:
            original = seqs[[x.traj for x in seqs[:n_original]].index(s.traj)]
            assert s.ids == original.ids[: len(s.ids)]
            trained = [i for i, m in enumerate(s.mask) if m]
            assert trained == list(range(trained[0], len(s.ids)))  # one action, at the end
        assert all(a == 0.0 for s in seqs for a in s.advantages)
        assert stats["branch_zero_variance_rate"] == 1.0
    finally:
        trainer.close()


# -- 3. the credit lands on the turn that decides --------------------------------------------


class SecondTurnEnv(gym.Env[str, str]):
    """Three turns; only the ``DECIDES``-th reply (the second) decides the episode:
    success (reward 1 at the end) when it has an even number of characters. Snapshots:
    ``get_state``/``set_state``."""

    metadata = {"render_modes": []}
    task_ids = ("second-turn",)
    DECIDES = 2

    def __init__(self) -> None:
        self.observation_space = TextSpace(max_length=256)
        self.action_space = TextSpace(max_length=4096)
        self._turn, self._even = 0, False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._turn, self._even = 0, False
        return "Turn 1 of 3: reply.", {"outcome": Outcome.CONTINUE, "system": "Reply."}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._turn += 1
        if self._turn == self.DECIDES:
            self._even = len(action) % 2 == 0
        done = self._turn == 3
        outcome = Outcome.CONTINUE
        if done:
            outcome = Outcome.SUCCESS if self._even else Outcome.FAILURE
        reward = float(self._even) if done else 0.0
        obs = f"Turn {self._turn + 1} of 3: reply." if not done else "Done."
        return obs, reward, done, False, {"outcome": outcome}

    def get_state(self) -> tuple[int, bool]:
        return self._turn, self._even

    def set_state(self, state: tuple[int, bool]) -> None:
        self._turn, self._even = state


def deciding_turn_trainer(tmp_path: Path, env: type[SecondTurnEnv]) -> Trainer:
    """A trainer on ``env`` branching at every turn with K=4 (two groups of two)."""
    cfg = make_config(
        tmp_path, env="second-turn", env_kwargs={}, branch_k=4, tasks_per_step=2, group_size=2
    )
    return Trainer(cfg, make_env=env)


def test_only_the_deciding_turn_gets_credit(tmp_path: Path, tokenizer: Any) -> None:
    """Branches from every turn of SecondTurnEnv (sampled, K=4): after the deciding turn
    all K returns agree (advantage exactly 0); at the deciding turn each action's
    advantage is its own success minus the point's mean success. A branch's sequence
    carries advantage on its branched turn's tokens only. (Before the deciding turn a
    return is a Monte-Carlo sample of a decision still to come: 0 only in expectation.)"""
    trainer = deciding_turn_trainer(tmp_path, SecondTurnEnv)
    try:
        trajs, seqs, _ = branched_batch(trainer)
        n_original = sum(len(t.segments) for t in trajs)
        by_key: dict[tuple[int, int], list[float]] = {}
        offset = n_original
        for i, t in enumerate(trajs):
            assert t.context["branch"] == {"rule": "every", "turns": [0, 1, 2]}
            original = seqs[[s.traj for s in seqs[:n_original]].index(i)]
            for turn in (0, 1, 2):
                members = [t, *t.branches[turn]]
                first, last = original_span(t, turn)
                advs = [original.advantages[first]]
                assert set(original.advantages[first : last + 1]) == {advs[0]}
                for b in t.branches[turn]:
                    s = seqs[offset]
                    offset += 1
                    trained = [a for a, m in zip(s.advantages, s.mask, strict=True) if m]
                    assert all(a == 0.0 for a, m in zip(s.advantages, s.mask, strict=True) if not m)
                    assert len(set(trained)) == 1 and len(s.ids) == prompt_len(b, turn) + len(
                        trained
                    )
                    advs.append(trained[0])
                success = [float(m.episode.success) for m in members]
                mean = sum(success) / len(success)
                if turn == 2:
                    assert advs == [0.0] * 4
                    # the outcome was fixed by turn 1: every branch shares it
                    assert len(set(success)) == 1
                else:
                    assert advs == pytest.approx([x - mean for x in success], abs=1e-6)
                by_key[i, turn] = advs
        assert offset == len(seqs)
        # the deciding turn's samples differ at some point: the credit there is not 0
        assert any(any(a != 0.0 for a in by_key[i, 1]) for i in range(len(trajs)))
        # the deciding action's parity is its episode's success
        for t in trajs:
            for b in t.branches[1]:
                assert b.episode.success == (len(b.actions[1]) % 2 == 0)
    finally:
        trainer.close()


class FirstTurnEnv(SecondTurnEnv):
    """The same, decided by the first reply."""

    DECIDES = 1


def test_when_the_first_turn_decides_no_other_token_gets_credit(
    tmp_path: Path, tokenizer: Any
) -> None:
    """Branches from every turn of FirstTurnEnv (sampled, K=4): every trained token of
    every sequence, original or branch, has advantage exactly 0 unless it is a token of
    the first reply, and some first reply's tokens have non-zero credit."""
    trainer = deciding_turn_trainer(tmp_path, FirstTurnEnv)
    try:
        trajs, seqs, _ = branched_batch(trainer)
        n_original = sum(len(t.segments) for t in trajs)
        assert all(t.context["branch"]["turns"] == [0, 1, 2] for t in trajs)
        first_turn: list[float] = []
        for k, s in enumerate(seqs):
            traj = trajs[s.traj]
            if k < n_original:  # an original: its first reply is turn 0 of its one segment
                assert len(traj.segments) == 1
                first, last = original_span(traj, 0)
            else:  # a branch: its one trained action ends it; from turn 0 if its prompt
                trained = [i for i, m in enumerate(s.mask) if m]  # is the first prompt
                first, last = trained[0], trained[-1]
                if first != prompt_len(traj, 0):
                    first, last = len(s.ids), -1  # branched later: nothing may be credited
            credited = [i for i, a in enumerate(s.advantages) if a != 0.0]
            assert all(first <= i <= last for i in credited), (k, credited, first, last)
            first_turn += s.advantages[first : last + 1]
        assert any(a != 0.0 for a in first_turn)
    finally:
        trainer.close()


def original_span(traj: Trajectory, turn: int) -> tuple[int, int]:
    j, k = locate(traj, turn)
    return traj.segments[j].turn_span(k)


def prompt_len(traj: Trajectory, turn: int) -> int:
    return len(prompt_ids(traj, turn))


def test_rl_step_logs_what_branching_costs(tmp_path: Path, tokenizer: Any) -> None:
    trainer = Trainer(
        make_config(tmp_path, env="second-turn", env_kwargs={}, branch_max_turns=1),
        make_env=SecondTurnEnv,
    )
    try:
        metrics = trainer.rl_step()
    finally:
        trainer.close()
    # 4 episodes, one point each, 2 branches per point, each playing 1-3 turns
    assert metrics["branch_points"] == 4.0
    assert 8.0 <= metrics["branch_env_steps"] <= 24.0
    assert metrics["branch_tokens"] > 0 and metrics["branch_cost"] > 0
    assert metrics["generated_tokens"] > metrics["branch_tokens"]


# -- where to branch ---------------------------------------------------------------------------


def hand_trajectory(
    facts: list[TurnFacts], logprobs: list[float] | None = None, outcome: str = "failure"
) -> Trajectory:
    """A trajectory of ``len(facts)`` one-token actions (log-probabilities ``logprobs``),
    each after one template token, with a checkpoint before every turn."""
    n = len(facts)
    lp = logprobs or [-1.0] * n
    seg = Segment(
        ids=[7] * (2 * n),
        mask=[0, 1] * n,
        logprobs=[x for v in lp for x in (0.0, v)],
        turn_ends=[2 * k + 1 for k in range(n)],
        turns=list(range(n)),
    )
    traj = Trajectory(job=RolloutJob("t", 0, 0), policy_version=0, segments=[seg])
    traj.actions = ["a"] * n
    traj.turn_facts = facts
    # only a checkpoint's presence counts for the choice
    traj.checkpoints = [object()] * n  # type: ignore[list-item]
    traj.episode = EpisodeSummary(outcome=Outcome(outcome), rewards=(0.0,) * n, steps=n)
    return traj


def fact(tools: tuple[str, ...] = (), error: bool = False, milestones: int = 0) -> TurnFacts:
    return TurnFacts(tools=tools, error=error, milestones=milestones)


def test_branch_rules_choose_their_turns() -> None:
    rng = np.random.default_rng(0)
    facts = [
        fact(("get_order",), milestones=1),
        fact(("refund",), milestones=1),
        fact(error=True, milestones=1),
        fact(("refund",), error=True, milestones=2),
        fact(),
    ]
    traj = hand_trajectory(facts, logprobs=[-0.1, -3.0, -0.2, -2.0, -0.3])
    assert branch_turns(traj, "tool", 5, rng) == [0, 1, 3]
    assert branch_turns(traj, "write", 5, rng, frozenset({"refund"})) == [1, 3]
    assert branch_turns(traj, "first_error", 5, rng) == [2]
    assert branch_turns(traj, "entropy", 2, rng) == [1, 3]
    assert branch_turns(traj, "every", 9, rng) == [0, 1, 2, 3, 4]
    drawn = branch_turns(traj, "every", 2, rng)
    assert len(drawn) == 2 and drawn == sorted(set(drawn)) and set(drawn) <= set(range(5))
    # no checkpoint, no branch; an invalid episode is never branched
    traj.checkpoints[1] = None
    assert branch_turns(traj, "write", 5, rng, frozenset({"refund"})) == [3]
    traj.episode = EpisodeSummary(outcome=Outcome.ENV_ERROR, valid=False)
    assert branch_turns(traj, "every", 5, rng) == []
    with pytest.raises(ConfigError, match="--branch must be"):
        branch_turns(traj, "often", 1, rng)


def test_first_error_falls_back_to_where_progress_stalled() -> None:
    stalled = hand_trajectory(
        [fact(milestones=1), fact(milestones=2), fact(milestones=2), fact(milestones=2)]
    )
    assert first_error_turn(stalled) == 2
    nothing = hand_trajectory([fact(), fact()])
    assert first_error_turn(nothing) == 0
    solved = hand_trajectory([fact(milestones=1), fact(milestones=2)], outcome="success")
    assert first_error_turn(solved) is None
    to_the_end = hand_trajectory([fact(), fact(milestones=1)])
    assert first_error_turn(to_the_end) is None  # progress until the last turn


def test_return_from_a_turn_is_discounted_like_the_return() -> None:
    traj = hand_trajectory([fact()] * 3)
    traj.episode = EpisodeSummary(outcome=Outcome.SUCCESS, rewards=(1.0, 2.0, 4.0), steps=3)
    traj.durations_s = [0.0, 0.0, 0.0]
    assert return_from(traj, 0, 1.0, 0.0) == 7.0
    assert return_from(traj, 1, 0.5, 0.0) == 2.0 + 0.5 * 4.0
    assert return_from(traj, 3, 0.5, 0.0) == 0.0


def test_write_tools_are_read_from_the_tool_specs() -> None:
    env = gym.make("agentgym/Retail-v1")
    try:
        writes = write_tools(env)
        toolset = env.unwrapped.toolset  # type: ignore[attr-defined]
        kinds = {t.canonical: t.kind.value for t in toolset.values()}
    finally:
        env.close()
    assert writes and all(kinds[name] == "write" for name in writes)
    assert {n for n, k in kinds.items() if k == "write"} == writes
    lake = gym.make(LAKE)
    try:
        with pytest.raises(ConfigError, match="declares no WRITE tool"):
            write_tools(lake)
    finally:
        lake.close()


# -- config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algo": "ppo"}, "ppo credits turns with its critic"),
        ({"algo": "sft", "sft_steps": 1}, "runs no RL steps"),
        ({"rollout": "async"}, "--rollout sync"),
        ({"branch_k": 1}, "--branch-k >= 2"),
        ({"branch_max_turns": 0}, "--branch-max-turns >= 1"),
    ],
)
def test_bad_branch_configs_name_the_fix(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_config(tmp_path, **overrides)


def test_branch_config_is_valid_for_the_group_algorithms_and_reinforce(tmp_path: Path) -> None:
    for algo in ("grpo", "rloo", "reinforce"):
        assert make_config(tmp_path, algo=algo).advantage.branch == "every"
    assert make_config(tmp_path, algo="ppo", branch="none").advantage.branch == "none"


def test_an_env_without_snapshots_is_a_config_error(tmp_path: Path, tokenizer: Any) -> None:
    class NoSnapshots(SecondTurnEnv):
        get_state = None  # type: ignore[assignment]

    with pytest.raises(ConfigError, match="no snapshot API"):
        Trainer(make_config(tmp_path, env="no-snapshots", env_kwargs={}), make_env=NoSnapshots)
