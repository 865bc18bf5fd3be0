"""The trainer on the tiny random Llama: masking, sampler/trainer agreement, micro-batch
invariance, off-policy filters, env-error masking and learning on a bandit."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym_envs.core.info import Outcome
from agentgym_envs.rollout.episodes import RolloutJob
from agentgym_trainers.batch import TrainSeq, agent_forward, collate, micro_batches
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.envs import CHARSETS
from agentgym_trainers.trainer import Trainer

BANDIT = "agentgym-train/DigitFraction-v0"


def make_config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    base: dict[str, Any] = dict(
        env=BANDIT,
        env_kwargs={"charset": "vowels", "prompt_words": 6},
        model="tiny",
        device="cpu",
        steps=2,
        tasks_per_step=2,
        group_size=4,
        n_envs=8,
        max_new_tokens=8,
        max_context=256,
        lr=1e-3,
        run_dir=str(tmp_path / "run"),
    )
    base.update(overrides)
    return TrainConfig.from_flat(**base)


@pytest.fixture
def bandit_trainer(tmp_path: Path, tokenizer: Any) -> Trainer:
    trainer = Trainer(make_config(tmp_path))
    yield trainer
    trainer.close()


@pytest.fixture(params=["static", "hf"])
def lake_trainer(tmp_path: Path, tokenizer: Any, request: Any) -> Trainer:
    cfg = make_config(
        tmp_path,
        generation=request.param,
        env="agentgym/FrozenLake-v0",
        env_kwargs={"max_steps": 3},
        max_new_tokens=12,
        max_context=1024,
        micro_batch_size=1,
    )
    trainer = Trainer(cfg)
    yield trainer
    trainer.close()


def rollout(trainer: Trainer, n: int = 4, group_size: int = 2) -> list[Any]:
    jobs = [
        RolloutJob(trainer.tasks[i // group_size], 100 + i // group_size, i // group_size)
        for i in range(n)
    ]
    trajs, _ = trainer.runner.collect(jobs, trainer.version)
    return trajs


def grads(trainer: Trainer) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in trainer.params]


# -- masking --------------------------------------------------------------------------------


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_gradient_is_exactly_zero_on_non_agent_tokens(bandit_trainer: Trainer, data: Any) -> None:
    """Random interleavings of agent and non-agent tokens (env, template, padding): the
    gradient reaching the last hidden state is exactly 0 wherever the next token is not an
    agent token."""
    trainer = bandit_trainer
    rows = data.draw(st.integers(1, 3))
    seqs = []
    for r in range(rows):
        n = data.draw(st.integers(3, 24))
        mask = [0, *data.draw(st.lists(st.integers(0, 1), min_size=n - 1, max_size=n - 1))]
        ids = data.draw(st.lists(st.integers(3, 4000), min_size=n, max_size=n))
        seqs.append(TrainSeq(ids, mask, [0.0] * n, traj=r, version=0, advantages=[1.0] * n))
    if not any(m for s in seqs for m in s.mask[1:]):
        seqs[0].mask[-1] = 1
    batch = collate(seqs, trainer.chat.pad_id, torch.device("cpu"))
    captured: dict[str, torch.Tensor] = {}
    decoder = trainer.lm.get_decoder()

    def keep(module: Any, args: Any, output: Any) -> None:
        output.last_hidden_state.retain_grad()
        captured["hidden"] = output.last_hidden_state

    handle = decoder.register_forward_hook(keep)
    try:
        out = agent_forward(trainer.lm, None, batch, 1.0, entropy_grad=True)
        (out.logprobs.sum() + out.entropy.sum()).backward()
    finally:
        handle.remove()
        trainer.optimizer.zero_grad(set_to_none=True)
    grad = captured["hidden"].grad  # (B, T, H)
    predicts_agent = torch.zeros(batch.mask.shape, dtype=torch.bool)
    predicts_agent[:, :-1] = batch.mask[:, 1:]
    assert torch.count_nonzero(grad[~predicts_agent]) == 0
    assert torch.count_nonzero(grad[predicts_agent].abs().sum(-1)) == int(predicts_agent.sum())


def test_rollout_masks_only_sampled_tokens(lake_trainer: Trainer) -> None:
    trajs = rollout(lake_trainer, n=2, group_size=1)
    env = lake_trainer.runner.envs[0]
    for traj in trajs:
        seg = traj.segments[0]
        agent = [t for t, m in enumerate(seg.mask) if m]
        # one sample per turn, each ending at its recorded last token
        assert len(seg.turn_ends) == len(traj.actions) and seg.turn_ends[-1] == agent[-1]
        assert all(seg.logprobs[t] < 0 for t in agent)
        assert all(seg.logprobs[t] == 0.0 for t, m in enumerate(seg.mask) if not m)
        # everything before the first sample is the system prompt and the task
        obs, info = env.reset(seed=traj.job.env_seed, options={"task_id": traj.job.task_id})
        head = lake_trainer.chat.render_ids(
            [{"role": "system", "content": info["system"]}, {"role": "user", "content": obs}],
            True,
        )
        assert seg.ids[: agent[0]] == head


# -- sampler and trainer agree ----------------------------------------------------------------


def test_trainer_logprobs_equal_sampler_logprobs(lake_trainer: Trainer) -> None:
    """Multi-turn episodes: the trainer's recomputed log-probabilities equal the sampler's
    (KV cache, left padding) within 1e-5, so the ratio is 1 and nothing is clipped."""
    trainer = lake_trainer
    trajs = rollout(trainer, n=4)
    assert any(len(t.actions) > 1 for t in trajs)
    seqs, _ = trainer.advantages(trajs)
    recomputed = trainer.evaluate(seqs, values=False)
    diffs = [
        abs(recomputed[i][t] - s.sampler_logprobs[t])
        for i, s in enumerate(seqs)
        for t, m in enumerate(s.mask)
        if m
    ]
    assert diffs and max(diffs) < 1e-5
    trainer.cfg = dataclasses.replace(trainer.cfg)
    stats = trainer.optimizer_step(seqs, recomputed)
    assert stats["clip_frac"] == 0.0
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-5)
    assert stats["is_weight"] == pytest.approx(1.0, abs=1e-5)


# -- micro-batch invariance -------------------------------------------------------------------


def test_loss_and_gradient_do_not_depend_on_micro_batch_size(lake_trainer: Trainer) -> None:
    trainer = lake_trainer
    trajs = rollout(trainer, n=4)
    seqs, _ = trainer.advantages(trajs)
    for s in seqs:  # non-trivial advantages of both signs
        s.advantages = [(1.0 if s.traj % 2 else -0.5) * m for m in s.mask]
    pairs = [(s, None) for s in seqs]
    results = []
    for size in (1, 2, 4):
        trainer.cfg = trainer.cfg.replace(micro_batch_size=size)
        trainer.optimizer.zero_grad(set_to_none=True)
        sums, _ = trainer.accumulate(pairs)
        results.append((sums["pg_loss"], grads(trainer)))
    for loss, g in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-5, abs=1e-7)
        for a, b in zip(g, results[0][1], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_micro_batches_group_similar_lengths_and_keep_every_sequence() -> None:
    """A right-padded micro-batch computes up to its longest sequence: cut after a sort
    by length, the micro-batches pad fewer positions than arrival order, and every
    sequence is in exactly one of them."""
    lengths = [5, 50, 6, 48, 7, 52, 4, 49, 30]
    seqs = [TrainSeq(ids=[1] * n, mask=[1] * n, sampler_logprobs=[0.0] * n, traj=0, version=0)
            for n in lengths]  # fmt: skip
    picked = micro_batches(seqs, 2)
    assert sorted(i for chunk in picked for i in chunk) == list(range(len(seqs)))
    assert all(len(chunk) <= 2 for chunk in picked)

    def padded(chunks: list[list[int]]) -> int:
        return sum(max(lengths[i] for i in c) * len(c) - sum(lengths[i] for i in c) for c in chunks)

    arrival = [list(range(i, min(i + 2, len(seqs)))) for i in range(0, len(seqs), 2)]
    assert padded(picked) < padded(arrival) // 5
    assert [lengths[i] for c in picked for i in c] == sorted(lengths)


# -- what never reaches the loss ---------------------------------------------------------------


class CrashingEnv(gym.Wrapper[str, str, str, str]):
    """Crashes on the step of odd env seeds (a tool/sandbox crash)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.crash = bool(seed is not None and seed % 2)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> Any:
        if self.crash:
            raise RuntimeError("sandbox died")
        return self.env.step(action)


def test_env_error_episodes_never_reach_the_loss(tmp_path: Path, tokenizer: Any) -> None:
    def make() -> gym.Env[str, str]:
        return CrashingEnv(gym.make(BANDIT, charset="vowels", prompt_words=6))

    trainer = Trainer(make_config(tmp_path), make_env=make)
    try:
        jobs = [RolloutJob(trainer.tasks[0], 1, 0)] * 3 + [RolloutJob(trainer.tasks[1], 2, 1)] * 3
        jobs += [RolloutJob(trainer.tasks[2], 2, 2), RolloutJob(trainer.tasks[2], 3, 2)]
        trajs, _ = trainer.runner.collect(jobs, 0)
        assert [t.episode.valid for t in trajs] == [False] * 3 + [True] * 3 + [True, False]
        assert all(
            t.episode.outcome is Outcome.ENV_ERROR and "sandbox died" in t.episode.error
            for t in trajs
            if not t.episode.valid
        )
        seqs, stats = trainer.advantages(trajs)
        # group 0: all invalid; group 2: one valid member left, so the group is dropped
        assert {s.traj for s in seqs} == {3, 4, 5}
        assert stats["kept_episode_rate"] == pytest.approx(3 / 8)
    finally:
        trainer.close()


def test_stale_samples_past_max_lag_are_dropped(bandit_trainer: Trainer) -> None:
    trainer = bandit_trainer
    trajs = rollout(trainer, n=8, group_size=4)
    seqs, _ = trainer.advantages(trajs)
    trainer.version = 5
    for i, s in enumerate(seqs):
        s.version = 5 if i % 2 else 3  # lag 0 or 2, max_lag is 1
    fresh_tokens = sum(s.agent_tokens for i, s in enumerate(seqs) if i % 2)
    stats = trainer.optimizer_step(seqs, None)
    assert stats["stale_dropped"] == len(seqs) // 2
    assert stats["train_tokens"] == fresh_tokens
    assert trainer.version == 5  # an optimizer step is not a new rollout version


# -- learning ---------------------------------------------------------------------------------


def expected_bandit_reward(trainer: Trainer, prompt: list[int]) -> float:
    """Exact expected reward of a one-token reply: sum_v p(v) r(v)."""
    count = CHARSETS["vowels"]
    with torch.no_grad():
        logits = trainer.lm(torch.tensor([prompt])).logits[0, -1].float()
    probs = torch.softmax(logits, -1)
    reward = torch.zeros_like(probs)
    for v in range(probs.shape[0]):
        text = trainer.tokenizer.decode([v])
        chars = [c for c in text if not c.isspace()]
        if chars and v != trainer.chat.eos_id:
            reward[v] = sum(bool(count(c)) for c in chars) / len(chars)
    return float((probs * reward).sum())


def test_grpo_raises_the_reward_of_a_bandit_and_changes_parameters(
    tmp_path: Path, tokenizer: Any
) -> None:
    cfg = make_config(
        tmp_path,
        max_new_tokens=1,
        group_size=8,
        tasks_per_step=4,
        n_envs=32,
        lr=1e-1,
        curriculum_alpha=0.0,
    )
    trainer = Trainer(cfg)
    try:
        env = trainer.runner.envs[0]
        obs, info = env.reset(seed=0, options={"task_id": trainer.tasks[0]})
        messages = [{"role": "system", "content": info["system"]}, {"role": "user", "content": obs}]
        prompt = trainer.chat.render_ids(messages, True)
        before = expected_bandit_reward(trainer, prompt)
        params = [p.detach().clone() for p in trainer.params]
        for _ in range(4):
            metrics = trainer.rl_step()
        after = expected_bandit_reward(trainer, prompt)
        assert any(not torch.equal(a, b) for a, b in zip(params, trainer.params, strict=True))
        # measured: 0.355 -> 0.456 (exact expectations, no sampling noise)
        assert after > before + 0.05, (before, after)
        assert metrics["zero_variance_group_rate"] < 1.0
        assert trainer.version == 4
    finally:
        trainer.close()


def test_all_algorithms_take_steps(tmp_path: Path, tokenizer: Any) -> None:
    for algo in ("grpo", "rloo", "reinforce", "ppo"):
        cfg = make_config(
            tmp_path / algo,
            algo=algo,
            kl_coef=0.05,
            entropy_coef=0.01,
            minibatches=2,
            whiten=algo == "ppo",
        )
        trainer = Trainer(cfg)
        try:
            metrics = trainer.rl_step()
        finally:
            trainer.close()
        # synchronous rollouts: both minibatches train on the version that sampled them
        assert metrics["policy_lag"] == 0.0 and metrics["stale_dropped"] == 0
        assert metrics["updates"] == 2 and trainer.version == 1
        assert metrics["grad_norm"] > 0
        assert metrics["train_tokens"] > 0
        for key in (
            "reward",
            "success",
            "kl",
            "entropy",
            "clip_frac",
            "env_error_rate",
            "gen_tokens_per_s",
            "frac_generation",
            "frac_env",
            "frac_train",
            "retok_mismatches",
            "reward/vowels",
        ):
            assert key in metrics, key
        if algo == "ppo":
            assert metrics["vf_loss"] > 0


def test_val_tasks_are_held_out_of_training_and_form_the_val_split(
    tmp_path: Path, tokenizer: Any
) -> None:
    from agentgym_trainers.run import oracle_trajectories

    full = Trainer(make_config(tmp_path / "full", env="agentgym/FrozenLake-v0", env_kwargs={}))
    try:
        every = full.split_tasks("train")
    finally:
        full.close()
    cfg = make_config(
        tmp_path / "held",
        env="agentgym/FrozenLake-v0",
        env_kwargs={"max_steps": 8},
        val_tasks=5,
        eval_split="val",
        max_context=1024,
    )
    trainer = Trainer(cfg)
    try:
        val = trainer.split_tasks("val")
        assert val == every[-5:]
        assert trainer.tasks == every[:-5]
        assert set(trainer.curriculum.task_ids).isdisjoint(val)
        assert trainer.split_tasks("test") and set(trainer.split_tasks("test")).isdisjoint(val)
        # the SFT demonstrations and every RL step draw from the kept tasks only
        played = {t.job.task_id for t in oracle_trajectories(trainer, 40)}
        drawn = {job.task_id for step in range(20) for job in trainer.jobs(step)}
        assert played and drawn and (played | drawn).isdisjoint(val)
    finally:
        trainer.close()


def test_train_pool_grows_training_tasks_only_and_keeps_val_and_test_out(
    tmp_path: Path, tokenizer: Any
) -> None:
    import gymnasium as gym

    from agentgym_envs.games.frozenlake import FrozenLakeEnv
    from agentgym_trainers.run import oracle_trajectories

    shipped = gym.make("agentgym/FrozenLake-v0").unwrapped.task_set
    ship_train = [t.id for t in shipped.pool("train", "easy")]
    cfg = make_config(
        tmp_path,
        env="agentgym/FrozenLake-v0",
        env_kwargs={"max_steps": 8},
        difficulty="easy",
        train_pool=260,
        val_tasks=5,
        eval_split="val",
        max_context=1024,
    )
    trainer = Trainer(cfg)
    try:
        val = trainer.split_tasks("val")
        test = trainer.split_tasks("test")
        # val is the last shipped train tasks, test is exactly the shipped test split
        assert val == ship_train[-5:]
        assert test == [t.id for t in shipped.pool("test", "easy")]
        assert len(trainer.tasks) == 255 and trainer.tasks[: len(ship_train) - 5] == ship_train[:-5]
        grown = trainer.tasks[len(ship_train) - 5 :]
        assert len(grown) == 260 - len(ship_train)
        # no grown task repeats the initial state of a held-out (or any shipped) task
        env = trainer.runner.slots.envs[0].unwrapped
        keys = {FrozenLakeEnv.task_key(t) for t in shipped.tasks}
        assert not {FrozenLakeEnv.task_key(env.task_set.get(i)) for i in grown} & keys
        # the trainer's envs play the grown tasks (SFT takes tasks in order, so 200
        # demonstrations reach past the 195 kept shipped ones), and the oracle solves them
        played = oracle_trajectories(trainer, 200)
        assert {t.job.task_id for t in played} & set(grown)
        assert all(t.episode.success for t in played)
        assert env.task_set.version != shipped.version  # info["versions"] tells them apart
        drawn = {job.task_id for step in range(30) for job in trainer.jobs(step)}
        assert drawn & set(grown) and drawn.isdisjoint(val)
    finally:
        trainer.close()


def test_train_pool_config_errors_name_the_fix(tmp_path: Path, tokenizer: Any) -> None:
    from agentgym_envs.core.errors import ConfigError

    with pytest.raises(ConfigError, match="train_pool must be >= 0"):
        make_config(tmp_path, train_pool=-1)
    with pytest.raises(ConfigError, match="set --difficulty"):
        Trainer(make_config(tmp_path, env="agentgym/FrozenLake-v0", env_kwargs={}, train_pool=300))


def test_val_tasks_config_errors_name_the_fix(tmp_path: Path, tokenizer: Any) -> None:
    from agentgym_envs.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--val-tasks"):
        make_config(tmp_path, eval_split="val", eval_episodes=4)
    with pytest.raises(ConfigError, match="val_tasks must be >= 0"):
        make_config(tmp_path, val_tasks=-1)
    with pytest.raises(ConfigError, match="use fewer"):
        Trainer(
            make_config(tmp_path, env="agentgym/FrozenLake-v0", env_kwargs={}, val_tasks=10_000)
        )
