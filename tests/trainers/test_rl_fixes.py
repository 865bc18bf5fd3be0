"""Regressions of the trainer review: the KL reference after SFT, a fresh RL optimizer with
its schedule, policy lag counted in rollout versions, whitening that keeps zero-signal
groups at zero, and SFT/RL metrics on their own step axes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym_trainers.algorithms import whiten_with
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.run import sft, train
from agentgym_trainers.trainer import Trainer, lr_factor
from tests.trainers.test_trainer import make_config, rollout


def sft_config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    """The bandit with an SFT warm start on its oracle (replies made of vowels)."""
    base: dict[str, Any] = dict(sft_steps=6, sft_episodes=8, sft_lr=1e-2, steps=1)
    base.update(overrides)
    return make_config(tmp_path, **base)


def test_kl_reference_is_the_sft_warmed_policy(tmp_path: Path, tokenizer: Any) -> None:
    # before the fix the reference was copied before SFT: KL 0.019 at the first RL step
    train(sft_config(tmp_path, kl_coef=0.1))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first_rl = next(r for r in rows if r["phase"] == "rl")
    assert first_rl["kl"] == pytest.approx(0.0, abs=1e-6)
    assert [r["step"] for r in rows if r["phase"] == "sft"] == list(range(6))


def test_resume_keeps_the_kl_reference(tmp_path: Path, tokenizer: Any) -> None:
    cfg = sft_config(tmp_path, kl_coef=0.1, steps=2, checkpoint_every=1, lr=1e-1)
    train(cfg)
    trainer = Trainer(cfg)
    try:
        from agentgym_trainers.run import latest_checkpoint, load_checkpoint

        folder = latest_checkpoint(Path(cfg.run.run_dir))
        assert folder is not None
        load_checkpoint(trainer, folder)
        saved = torch.load(folder / "trainer_state.pt", weights_only=False)["reference"]
        assert trainer.ref is not None
        for name, tensor in trainer.ref.state_dict().items():
            assert torch.equal(tensor, saved[name])
        # and it is not the weights the run resumes with (those moved during RL)
        assert any(
            not torch.equal(a, b)
            for a, b in zip(trainer.ref.parameters(), trainer.lm.parameters(), strict=True)
        )
    finally:
        trainer.close()


def test_sft_stops_when_its_recent_mean_loss_reaches_stop_loss(
    tmp_path: Path, tokenizer: Any
) -> None:
    """--sft-stop-loss ends SFT at the first step whose last --sft-stop-window losses
    average at most the threshold; a threshold never reached runs every step; train()
    records how many ran."""
    trainer = Trainer(sft_config(tmp_path))
    try:
        assert len(sft(trainer, steps=6, episodes=8, lr=1e-2, stop_loss=1e-9)) == 6
        stopped = sft(trainer, steps=6, episodes=8, lr=1e-2, stop_loss=1e9, stop_window=2)
        assert len(stopped) == 2  # the first step with a full window
    finally:
        trainer.close()
    summary = train(sft_config(tmp_path / "b", sft_stop_loss=1e9, sft_stop_window=3))
    assert summary["sft_steps_done"] == 3 == len(summary["sft_loss"])
    rows = [
        json.loads(x) for x in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows if r["phase"] == "sft"] == [0, 1, 2]


def test_sft_stops_when_its_train_split_success_reaches_stop_success(
    tmp_path: Path, tokenizer: Any
) -> None:
    """--sft-stop-success checks the policy's sampled success on train-split episodes
    every --sft-check-every steps (never after the last step) and ends SFT at the first
    check that reaches it; the checks are in the summary and the metrics."""
    cfg = dict(sft_check_every=1, sft_check_episodes=8, eval_episodes=0, sft_lr=1e-3)
    summary = train(sft_config(tmp_path / "a", sft_stop_success=1.0, **cfg))
    checks, done = summary["sft_checks"], summary["sft_steps_done"]
    assert [c[0] for c in checks] == list(range(1, len(checks) + 1))
    assert all(c[1] < 1.0 for c in checks[:-1])  # it went on after each check below
    if checks[-1][1] >= 1.0:  # it stopped at the check that reached it
        assert done == checks[-1][0] < 6
    else:
        assert done == 6 and len(checks) == 5
    assert checks[0][1] < 1.0 <= checks[-1][1], f"the bandit learns within 6 steps: {checks}"
    rows = [
        json.loads(x) for x in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [[r["step"] + 1, r["sft_check_success"]] for r in rows if "sft_check_success" in r] == (
        checks
    )
    plain = train(sft_config(tmp_path / "b", **cfg))  # stop_success 0: never checked
    assert "sft_checks" not in plain and plain["sft_steps_done"] == 6


def test_sft_stop_settings_name_the_fix(tmp_path: Path) -> None:
    from agentgym_envs.core.errors import ConfigError

    with pytest.raises(ConfigError, match="sft_stop_loss must be a finite number >= 0"):
        sft_config(tmp_path, sft_stop_loss=-0.1)
    with pytest.raises(ConfigError, match="sft_stop_loss"):
        sft_config(tmp_path, sft_stop_loss=float("nan"))
    with pytest.raises(ConfigError, match="sft_stop_window must be >= 1"):
        sft_config(tmp_path, sft_stop_window=0)
    with pytest.raises(ConfigError, match=r"sft_stop_success must be a success rate in \[0, 1\]"):
        sft_config(tmp_path, sft_stop_success=1.5)
    with pytest.raises(ConfigError, match="sft_check_every and sft_check_episodes must be >= 1"):
        sft_config(tmp_path, sft_check_every=0)


def test_rl_starts_with_a_fresh_optimizer_and_its_warmup(tmp_path: Path, tokenizer: Any) -> None:
    trainer = Trainer(sft_config(tmp_path, warmup_steps=4, lr_schedule="cosine", steps=8))
    assert trainer.cfg.optim.lr == 1e-3
    try:
        sft(trainer, steps=3, episodes=4, lr=1e-2)
        # SFT's moments and step count would damp RL's smaller gradients
        assert trainer.optimizer.state_dict()["state"] == {}
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 4)
        metrics = trainer.rl_step()
        assert metrics["lr"] == pytest.approx(1e-3 / 4)  # the lr the first update used
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2e-3 / 4)
    finally:
        trainer.close()


def test_lr_schedules() -> None:
    assert [lr_factor(k, 2, 10, "constant") for k in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert lr_factor(6, 2, 10, "linear") == pytest.approx(0.5)
    assert lr_factor(6, 2, 10, "cosine") == pytest.approx(0.5)
    assert lr_factor(10, 2, 10, "cosine") == pytest.approx(0.0)
    assert lr_factor(0, 0, 10, "linear") == 1.0


def test_epochs_and_minibatches_of_one_batch_are_never_stale(
    tmp_path: Path, tokenizer: Any
) -> None:
    # before: with max_lag=1, --epochs 2 --minibatches 2 trained 2 of its 4 updates
    trainer = Trainer(make_config(tmp_path, epochs=2, minibatches=2, max_lag=0, algo="ppo"))
    try:
        metrics = trainer.rl_step()
        assert metrics["updates"] == 4 and metrics["stale_dropped"] == 0
        assert metrics["policy_lag"] == 0.0 and trainer.version == 1
    finally:
        trainer.close()


def test_a_batch_with_nothing_to_train_is_no_update(tmp_path: Path, tokenizer: Any) -> None:
    trainer = Trainer(make_config(tmp_path))
    try:
        trainer.advantages = lambda trajs: ([], {})  # type: ignore[method-assign]
        metrics = trainer.rl_step()
        assert metrics["updates"] == 0 and trainer.version == 0
        assert "pg_loss" not in metrics and "grad_norm" not in metrics
    finally:
        trainer.close()


def test_whitening_keeps_zero_signal_groups_at_zero(tmp_path: Path, tokenizer: Any) -> None:
    trainer = Trainer(make_config(tmp_path, whiten=True))
    try:
        trajs = rollout(trainer, n=8, group_size=4)
        for i, t in enumerate(trajs):  # group 0 all succeed (no signal), group 1 mixed
            t.episode = replace(t.episode, rewards=(1.0,) if i < 4 else (float(i % 2),))
        seqs, _ = trainer.advantages(trajs)
        by_group = {g: [s for s in seqs if trajs[s.traj].job.group == g] for g in (0, 1)}
        assert all(a == 0.0 for s in by_group[0] for a in s.advantages)
        mixed = [a for s in by_group[1] for a, m in zip(s.advantages, s.mask, strict=True) if m]
        assert mixed and all(a != 0.0 for a in mixed)
    finally:
        trainer.close()


def test_whiten_with_global_statistics() -> None:
    x = torch.tensor([0.0, 2.0, -2.0, 5.0])
    mask = torch.tensor([True, True, True, False])
    n, total, squares = 3.0, 0.0, 8.0  # over the masked entries
    scaled = whiten_with(x, mask, n, total, squares, shift_mean=False)
    assert scaled[0] == 0.0 and scaled[3] == 0.0
    assert float(scaled[1]) == pytest.approx(2.0 / (8.0 / 3.0) ** 0.5)
    # statistics from "another process" change the scale, not the zeros
    wider = whiten_with(x, mask, 6.0, 0.0, 32.0, shift_mean=False)
    assert wider[0] == 0.0 and float(wider[1]) < float(scaled[1])
    shifted = whiten_with(x, mask, 3.0, 3.0, 11.0)
    assert float(shifted[0]) == pytest.approx(-1.0 / (11.0 / 3.0 - 1.0) ** 0.5)


def test_bandit_held_out_split_differs_from_train(tmp_path: Path, tokenizer: Any) -> None:
    from agentgym_trainers.trainer import task_ids

    trainer = Trainer(make_config(tmp_path))
    try:
        env = trainer.runner.envs[0]
        train_ids, test_ids = task_ids(env, "train", None), task_ids(env, "test", None)
        assert train_ids and test_ids and not set(train_ids) & set(test_ids)
        _, info = env.reset(seed=0, options={"task_id": test_ids[0]})
        assert info["task"]["split"] == "test"
    finally:
        trainer.close()


def test_each_process_takes_the_gpu_of_its_local_rank(monkeypatch: Any) -> None:
    from agentgym_envs.llm.models import resolve_device
    from agentgym_trainers import distributed

    made_current: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    monkeypatch.setenv("LOCAL_RANK", "1")
    # rank 3 of a two-node job is local rank 1: cuda:1, and it is made current
    assert resolve_device("auto", distributed.local_rank()) == torch.device("cuda", 1)
    assert made_current == [torch.device("cuda", 1)]
    from agentgym_envs.core.errors import ConfigError

    with pytest.raises(ConfigError, match="nproc_per_node 2"):
        resolve_device("cuda", 2)


# -- truncation, critic, KL and loss aggregation ----------------------------------------------


def test_gae_bootstraps_a_cut_episode_from_the_critic() -> None:
    from agentgym_trainers.algorithms import gae

    r = torch.tensor([[0.0, 1.0]])
    v = torch.tensor([[0.5, 0.25]])
    m = torch.tensor([[True, True]])
    terminal, _ = gae(r, v, m, gamma=0.9, lam=1.0)
    cut, _ = gae(r, v, m, gamma=0.9, lam=1.0, bootstrap=torch.tensor([2.0]))
    # last token: delta = r + gamma * V_boot - V; the first token inherits it discounted
    assert float(terminal[0, 1]) == pytest.approx(1.0 - 0.25)
    assert float(cut[0, 1]) == pytest.approx(1.0 + 0.9 * 2.0 - 0.25)
    assert float(cut[0, 0] - terminal[0, 0]) == pytest.approx(0.9 * 0.9 * 2.0)


def test_time_limit_cut_episodes_bootstrap_in_ppo(tmp_path: Path, tokenizer: Any) -> None:
    cfg = make_config(
        tmp_path,
        algo="ppo",
        env="agentgym/FrozenLake-v0",
        env_kwargs={"max_steps": 1},  # every episode is cut after one move
        max_new_tokens=8,
        max_context=1024,
        value_detach=True,
    )
    trainer = Trainer(cfg)
    try:
        assert trainer.value_head is not None
        torch.nn.init.constant_(trainer.value_head.linear.bias, 0.5)  # a critic with an opinion
        trajs = rollout(trainer, n=4, group_size=2)
        cut = [t for t in trajs if t.episode.cut]
        assert cut and all(t.tail_ids for t in cut)
        seqs, stats = trainer.advantages(trajs)
        assert stats["bootstrapped_episodes"] == len(cut)
        assert "explained_variance" in stats
        for s in seqs:
            if trajs[s.traj].episode.cut:
                last = max(t for t, mk in enumerate(s.mask) if mk)
                assert s.returns[last] == pytest.approx(s.rewards[last] + 0.5, abs=1e-4)
    finally:
        trainer.close()


def test_critic_has_its_own_rate_and_can_leave_the_trunk_alone(
    tmp_path: Path, tokenizer: Any
) -> None:
    trainer = Trainer(make_config(tmp_path, algo="ppo", value_detach=True, vf_coef=1.0))
    try:
        groups = trainer.optimizer.param_groups
        assert [g["lr"] for g in groups] == [pytest.approx(1e-3), pytest.approx(1e-2)]
        trajs = rollout(trainer, n=8, group_size=4)
        seqs, _ = trainer.advantages(trajs)
        for s in seqs:  # no policy signal: only the value loss has gradient
            s.advantages = [0.0] * len(s.ids)
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.accumulate([(s, None) for s in seqs])
        trunk = [p.grad for p in trainer.lm.parameters() if p.grad is not None]
        assert all(float(g.abs().max()) == 0.0 for g in trunk)
        assert any(float(p.grad.abs().max()) > 0 for p in trainer.value_head.parameters())
    finally:
        trainer.close()


def test_kl_estimators() -> None:
    from agentgym_trainers.algorithms import kl_estimate

    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    d = logp - ref
    assert torch.allclose(kl_estimate(logp, ref, "k1"), d)
    assert torch.allclose(kl_estimate(logp, ref, "k2"), 0.5 * d * d)
    assert torch.allclose(kl_estimate(logp, ref, "k3"), torch.exp(-d) + d - 1)


def test_kl_in_reward_moves_the_penalty_out_of_the_loss(tmp_path: Path, tokenizer: Any) -> None:
    trainer = Trainer(make_config(tmp_path, kl_coef=0.5, kl_in_reward=True, lr=1e-1))
    try:
        trainer.rl_step()  # the policy moves away from the reference
        trajs = rollout(trainer, n=8, group_size=4)
        seqs, stats = trainer.advantages(trajs)
        assert stats["kl_penalty"] != 0.0
        metrics = trainer.update(seqs)
        assert metrics["kl"] == 0.0  # no KL term in the loss
    finally:
        trainer.close()


@pytest.mark.parametrize("mode", ["seq-mean", "constant"])
def test_loss_aggregation_modes_do_not_depend_on_micro_batches(
    tmp_path: Path, tokenizer: Any, mode: str
) -> None:
    def gradient(micro: int) -> list[torch.Tensor]:
        trainer = Trainer(
            make_config(tmp_path / f"{mode}{micro}", loss_agg=mode, micro_batch_size=micro)
        )
        try:
            torch.manual_seed(0)
            trajs = rollout(trainer, n=8, group_size=4)
            seqs, _ = trainer.advantages(trajs)
            trainer.optimizer.zero_grad(set_to_none=True)
            trainer.accumulate([(s, None) for s in seqs])
            return [p.grad.clone() for p in trainer.params if p.grad is not None]
        finally:
            trainer.close()

    one, four = gradient(1), gradient(4)
    for a, b in zip(one, four, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_target_kl_stops_the_remaining_updates(tmp_path: Path, tokenizer: Any) -> None:
    trainer = Trainer(make_config(tmp_path, epochs=4, lr=5e-1, target_kl=1e-9))
    try:
        metrics = trainer.rl_step()
        assert metrics["early_stopped"] == 1.0 and 1 <= metrics["updates"] < 4
        assert metrics["approx_kl"] >= 0.0
    finally:
        trainer.close()


def test_only_the_newest_checkpoints_are_kept(tmp_path: Path, tokenizer: Any) -> None:
    train(make_config(tmp_path, steps=4, checkpoint_every=1, keep_checkpoints=2))
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["step_000003", "step_000004"]
