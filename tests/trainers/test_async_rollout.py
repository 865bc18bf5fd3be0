"""Asynchronous rollouts on the tiny random Llama: per-turn weight versions, per-token lag
masking, truncated importance weights, the synchronous limit (max_lag 0), finished
groups training past a long episode, worker crashes and hangs, generation-server
failures as env errors, and the async-vs-sync comparison of the learning recipe.

Interleavings are forced with events and scripted episodes, never with sleeps: a push
from inside an env step lands between two turns; a gate holds an episode open until the
test opens it."""

from __future__ import annotations

import copy
import json
import math
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from agentgym_envs.cli import main
from agentgym_envs.core.info import Outcome
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Generator
from agentgym_envs.llm.http_generator import HttpGenerator
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner, Trajectory
from agentgym_envs.store import TrajectoryStore
from agentgym_trainers.async_rollout import (
    PolicyWeights,
    RolloutTimeoutError,
    RolloutWorkerError,
    ThreadRolloutWorker,
    snapshot,
)
from agentgym_trainers.batch import TrainSeq, sequences
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.learn import algo_result, markdown, paired_difference, result_key
from agentgym_trainers.trainer import Trainer, env_seed

BANDIT = "agentgym-train/DigitFraction-v0"
BANDIT_KWARGS: dict[str, Any] = {"charset": "vowels", "prompt_words": 6}


def config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    base: dict[str, Any] = dict(
        env=BANDIT,
        env_kwargs=BANDIT_KWARGS,
        model="tiny",
        device="cpu",
        steps=2,
        tasks_per_step=2,
        group_size=2,
        n_envs=4,
        max_new_tokens=6,
        max_context=256,
        lr=1e-2,
        micro_batch_size=8,
        run_dir=str(tmp_path / "run"),
        rollout="async",
        async_timeout_s=120.0,  # a regression fails here instead of hanging the suite
    )
    base.update(overrides)
    return TrainConfig.from_flat(**base)


def bandit() -> gym.Env[str, str]:
    return gym.make(BANDIT, **BANDIT_KWARGS)


class HeldOpen(gym.Wrapper[str, str, str, str]):
    """Keeps chosen episodes of the one-step bandit going (reward 0, outcome continue):
    for ``turns`` steps, or until ``gate`` is set. ``on_step(turn)`` runs at every step,
    in the thread that plays the env."""

    held_turns = 0  # steps held open, over all instances

    def __init__(
        self,
        env: gym.Env[str, str],
        *,
        seeds: set[int] | None = None,
        turns: int = 0,
        gate: threading.Event | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(env)
        self.seeds, self.turns, self.gate, self.on_step = seeds, turns, gate, on_step
        self.held, self.turn = False, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.held = self.seeds is None or seed in self.seeds
        self.turn = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> Any:
        self.turn += 1
        if self.on_step is not None:
            self.on_step(self.turn)
        if self.held and self._hold():
            HeldOpen.held_turns += 1
            return "go on", 0.0, False, False, {"outcome": Outcome.CONTINUE}
        return self.env.step(action)

    def _hold(self) -> bool:
        if self.gate is not None:  # a short wait per turn only throttles the held episode
            return not self.gate.wait(0.005)
        return self.turn < self.turns


# -- per-turn versions -------------------------------------------------------------------------


def straddling_group(tmp_path: Path) -> tuple[Trainer, list[Trajectory], torch.nn.Module]:
    """One group of two 3-turn episodes played by a rollout worker; new weights (version
    1, perturbed) are pushed from inside the first env step: between turns 1 and 2."""
    pending: list[PolicyWeights] = []
    holder: dict[str, ThreadRolloutWorker] = {}

    def push_once(turn: int) -> None:
        if turn == 1 and pending:
            holder["worker"].push(pending.pop())

    trainer = Trainer(
        config(tmp_path, rollout="sync"),
        make_env=lambda: HeldOpen(bandit(), turns=3, on_step=push_once),
    )
    new = copy.deepcopy(trainer.lm)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.05)
    pending.append(snapshot(new, 1))
    worker = holder["worker"] = trainer.thread_worker()
    worker.submit([RolloutJob(trainer.tasks[0], 7, 0)] * 2)
    worker.start()
    try:
        (group,) = worker.take(1, timeout_s=120)
    finally:
        worker.close()
    return trainer, group.trajectories, new


def agent_positions(seq: TrainSeq) -> list[int]:
    return [t for t, m in enumerate(seq.mask) if m]


def test_every_turn_records_the_weights_that_sampled_it(tmp_path: Path, tokenizer: Any) -> None:
    """A push between two turns: the episode straddles versions 0 and 1, and each turn's
    sampler log-probabilities are those of the weights its version names (so the
    worker's KV cache did not keep the old weights' keys either)."""
    trainer, trajs, new = straddling_group(tmp_path)
    try:
        assert [t.turn_versions for t in trajs] == [[0, 1, 1], [0, 1, 1]]
        assert all(t.policy_version == 0 and t.episode.valid for t in trajs)
        assert trajs[0].record()["turn_versions"] == [0, 1, 1]
        seqs = sequences(trajs, 1.0, [[1.0] * 3] * 2)
        old = trainer.evaluate(seqs, values=False)
        fresh = trainer.evaluate(seqs, values=False, model=new)
        moved = 0
        for i, s in enumerate(seqs):
            assert s.version == 0 and set(s.token_versions) == {0, 1}
            for t in agent_positions(s):
                want = (old if s.token_versions[t] == 0 else fresh)[i][t]
                assert s.sampler_logprobs[t] == pytest.approx(want, abs=1e-4)
                moved += abs(old[i][t] - fresh[i][t]) > 1e-3
        assert moved > 0  # the two weight versions give different log-probabilities
    finally:
        trainer.close()


def test_tokens_past_max_lag_are_masked_and_get_no_gradient(tmp_path: Path, tokenizer: Any) -> None:
    """Learner at version 2, max_lag 1: the turn sampled by version 0 is stale (lag 2),
    the turns of version 1 train. The gradient reaching the positions that predict a
    stale token is exactly 0; a sequence with no fresh token is dropped whole."""
    trainer, trajs, _ = straddling_group(tmp_path)
    try:
        seqs = sequences(trajs, 1.0, [[1.0] * 3] * 2)
        for s in seqs:
            s.advantages = [float(m) for m in s.mask]
        trainer.version = 2
        captured: list[torch.Tensor] = []

        def keep(module: Any, args: Any, output: Any) -> None:
            output.last_hidden_state.retain_grad()
            captured.append(output.last_hidden_state)

        handle = trainer.lm.get_decoder().register_forward_hook(keep)  # type: ignore[no-untyped-call]
        try:
            stats = trainer.optimizer_step(seqs, None)
        finally:
            handle.remove()
        (hidden,) = captured  # one micro-batch: both sequences
        assert hidden.grad is not None
        fresh_tokens = 0
        for row, s in enumerate(seqs):
            for t in agent_positions(s):
                grad = float(hidden.grad[row, t - 1].abs().sum())
                if s.token_versions[t] == 0:
                    assert grad == 0.0
                else:
                    assert grad > 0.0
                    fresh_tokens += 1
        assert stats["train_tokens"] == fresh_tokens > 0
        assert stats["stale_dropped"] == 0.0
        trainer.version = 3  # now every token lags at least 2
        stats = trainer.optimizer_step(seqs, None)
        assert stats["stale_dropped"] == 2.0 and stats["train_tokens"] == 0.0
    finally:
        trainer.close()


def test_truncated_is_weights_are_the_clipped_ratio_to_the_sampler(
    tmp_path: Path, tokenizer: Any
) -> None:
    """Sampler log-probabilities set to the learner's minus log r per token: the weights
    the loss uses average to the hand-computed mean of min(r, tis_cap)."""
    trainer = Trainer(config(tmp_path, rollout="sync", tis_cap=2.0))
    try:
        jobs = [RolloutJob(trainer.tasks[0], 3, 0)] * 2 + [RolloutJob(trainer.tasks[1], 4, 1)] * 2
        trajs, _ = trainer.runner.collect(jobs, trainer.version)
        seqs = sequences(trajs, 1.0, [[1.0]] * 4)
        learner = trainer.evaluate(seqs, values=False)
        ratios = [0.5, 1.5, 3.0, 1.0]
        expected: list[float] = []
        for i, s in enumerate(seqs):
            s.advantages = [float(m) for m in s.mask]
            for t in agent_positions(s):
                r = ratios[len(expected) % len(ratios)]
                s.sampler_logprobs[t] = learner[i][t] - math.log(r)
                expected.append(min(r, 2.0))
        assert len(expected) >= 3 and 2.0 in expected  # the cap is exercised
        stats = trainer.optimizer_step(seqs, None)
        assert stats["is_weight"] == pytest.approx(sum(expected) / len(expected), rel=1e-4)
    finally:
        trainer.close()


# -- whole runs ----------------------------------------------------------------------------


def test_async_with_max_lag_0_is_the_synchronous_run(tmp_path: Path, tokenizer: Any) -> None:
    """With max_lag 0 the worker waits for every update: the same samples, the same
    updates, the same weights as the synchronous trainer; no lag, nothing dropped."""
    runs = []
    for mode in ("sync", "async"):
        trainer = Trainer(config(tmp_path / mode, rollout=mode, max_lag=0))
        try:
            rows = [trainer.rl_step() for _ in range(3)]
            runs.append((rows, [p.detach().clone() for p in trainer.params]))
        finally:
            trainer.close()
    (sync_rows, sync_params), (rows, params) = runs
    assert all(torch.equal(a, b) for a, b in zip(sync_params, params, strict=True))
    assert [r["reward"] for r in rows] == [r["reward"] for r in sync_rows]
    assert [r["updates"] for r in rows] == [1.0, 1.0, 1.0]
    assert all(r["lag_max"] == 0.0 and r["stale_token_frac"] == 0.0 for r in rows)
    assert all(r["straddle_rate"] == 0.0 for r in rows)


def test_finished_groups_train_while_a_long_episode_plays(tmp_path: Path, tokenizer: Any) -> None:
    """Group A (generation step 0) is held open by a gate; the learner trains the
    one-turn groups B and C behind it, then A once the gate opens. A's turns span the
    pushes, and the ones sampled two versions ago are masked."""
    gate = threading.Event()
    HeldOpen.held_turns = 0
    held = {env_seed(0, 0, 0)}  # the env seed of generation step 0's group
    cfg = config(
        tmp_path, tasks_per_step=1, max_lag=1, context_policy="drop", max_context=512, steps=4
    )
    trainer = Trainer(cfg, make_env=lambda: HeldOpen(bandit(), seeds=held, gate=gate))
    try:
        first, second = trainer.rl_step(), trainer.rl_step()
        assert HeldOpen.held_turns > 0  # A is still playing
        assert first["turns"] == second["turns"] == 1.0 and first["episodes"] == 2.0
        gate.set()
        later = [trainer.rl_step(), trainer.rl_step()]
        (long,) = [m for m in later if m["turns"] > 1]
        assert long["straddle_rate"] == 1.0
        assert long["lag_max"] >= 2.0
        assert 0.0 < long["stale_token_frac"] < 1.0
    finally:
        gate.set()
        trainer.close()


def test_agentgym_train_rollout_async_writes_lag_metrics(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "lake"
    code = main(
        [
            "train", "--env", "agentgym/FrozenLake-v0", "--model", "tiny", "--device", "cpu",
            "--steps", "3", "--tasks-per-step", "2", "--group-size", "2", "--n-envs", "4",
            "--max-new-tokens", "8", "--max-context", "1024", "--env-kwargs", '{"max_steps": 4}',
            "--rollout", "async", "--max-lag", "1", "--run-dir", str(run), "--quiet",
        ]
    )  # fmt: skip
    assert code == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "reward" in r]
    assert [r["step"] for r in rl] == [1, 2, 3]
    keys = {"lag_mean", "lag_max", "stale_token_frac", "straddle_rate", "policy_lag"}
    keys |= {"time_learner_wait_s", "time_worker_wait_s"}
    assert all(keys <= set(r) for r in rl)
    assert all(r["time_learner_wait_s"] >= 0 and r["time_worker_wait_s"] >= 0 for r in rl)
    assert not [t for t in threading.enumerate() if t.name == "rollout-worker"]


# -- failures ------------------------------------------------------------------------------


class Crashing(gym.Wrapper[str, str, str, str]):
    def step(self, action: str) -> Any:
        raise RuntimeError("sandbox died")


def test_a_crashing_worker_surfaces_in_the_learner(tmp_path: Path, tokenizer: Any) -> None:
    """The worker's env crashes and no new env can be made (the sandbox backend is gone):
    the worker thread dies, and the learner raises at once (not after the timeout)."""
    made = {"n": 0}

    def make() -> gym.Env[str, str]:
        made["n"] += 1
        if made["n"] > 8:  # the trainer's 4 envs and the worker's 4
            raise RuntimeError("cannot start a new sandbox")
        return Crashing(bandit())

    trainer = Trainer(config(tmp_path, async_timeout_s=600.0), make_env=make)
    try:
        with pytest.raises(RolloutWorkerError, match="cannot start a new sandbox") as info:
            trainer.rl_step()
        assert isinstance(info.value.__cause__, RuntimeError)
    finally:
        trainer.close()


def test_a_hung_worker_is_a_timeout_not_a_silent_hang(tmp_path: Path, tokenizer: Any) -> None:
    gate = threading.Event()

    class Hanging(gym.Wrapper[str, str, str, str]):
        def step(self, action: str) -> Any:
            gate.wait()  # a tool call that never answers
            return self.env.step(action)

    trainer = Trainer(config(tmp_path, async_timeout_s=0.5), make_env=lambda: Hanging(bandit()))
    try:
        with pytest.raises(RolloutTimeoutError, match="async-timeout-s"):
            trainer.rl_step()
    finally:
        gate.set()
        trainer.close()


def dead_url() -> str:
    """An http URL where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class ServerPolicy:
    """Samples through a generation server (the weights are the server's to load)."""

    def __init__(self, url: str) -> None:
        self.http = HttpGenerator(url, "tiny", retries=0, timeout_s=5.0)

    @property
    def generator(self) -> Generator:
        return self.http

    def load(self, weights: PolicyWeights) -> None:
        self.http.weights_version = weights.version


def test_generation_server_failures_are_env_errors_in_the_worker(
    tmp_path: Path, tokenizer: Any
) -> None:
    trainer = Trainer(config(tmp_path))
    policy = ServerPolicy(dead_url())
    try:
        trainer.rollouts = trainer.async_rollouts(ThreadRolloutWorker(trainer.make_runner, policy))
        metrics = trainer.rl_step()
        assert metrics["env_error_rate"] == 1.0 and metrics["episodes"] == 4.0
        assert metrics["updates"] == 0.0 and trainer.version == 0
        with TrajectoryStore(trainer.run_dir / "trajectories.sqlite") as store:
            episodes = [ep for _, ep in store.query()]
        assert episodes and all(ep.outcome == "env_error" and not ep.valid for ep in episodes)
        assert all("GenerationServerError" in ep.extra["error"] for ep in episodes)
    finally:
        trainer.close()
        policy.http.close()


def test_sync_rollouts_turn_generation_server_failures_into_env_errors(
    tokenizer: Any, tiny_model: Any
) -> None:
    """The synchronous runner behind a server that is down: every episode of the call is
    env_error (never a policy failure, never a crash of the run), and the envs stay
    usable for the next call."""
    chat = ChatFormat(tokenizer)
    with HttpGenerator(dead_url(), "tiny", retries=0, timeout_s=5.0) as down:
        runner = RolloutRunner(bandit, chat, down, n_envs=2, max_new_tokens=6, max_context=256)
        try:
            trajs, _ = runner.collect([RolloutJob(None, s, s) for s in range(3)], 0)
            for t in trajs:
                assert t.episode.outcome is Outcome.ENV_ERROR and not t.episode.valid
                assert t.episode.error.startswith("GenerationServerError: cannot reach")
            runner.sampler = Sampler(tiny_model, eos_ids=[chat.eos_id], pad_id=chat.pad_id)
            trajs, _ = runner.collect([RolloutJob(None, s, s) for s in range(3)], 0)
            assert all(t.episode.valid and t.turn_versions == [0] for t in trajs)
        finally:
            runner.close()


# -- the async-vs-sync comparison ------------------------------------------------------------


def _phase(per_task: dict[str, list[int]]) -> dict[str, Any]:
    n = sum(len(v) for v in per_task.values())
    wins = sum(sum(v) for v in per_task.values())
    return {"valid_episodes": n, "success": wins / n, "split": "test", "per_task": per_task}


def test_async_results_sit_next_to_sync_ones_with_a_paired_comparison() -> None:
    assert result_key("grpo") == "grpo"
    assert result_key("grpo", "async", 1) == "grpo-async"
    assert result_key("grpo", "async", 2) == "grpo-async-lag2"
    sync = {str(t): [1, 0] for t in range(10)}
    better = {str(t): [1, 1] for t in range(10)}
    diff, low, high = paired_difference(sync, better)
    assert diff == pytest.approx(0.5) and low == pytest.approx(0.5) == high  # every task +0.5
    diff, low, high = paired_difference(sync, sync)
    assert diff == low == high == 0.0

    def summary(after: dict[str, list[int]], rl_seconds: float) -> dict[str, Any]:
        start = _phase({str(t): [0, 0] for t in range(10)})
        return {
            "eval_initial": start,
            "eval_before": start,
            "eval_after": _phase(after),
            "steps": 10,
            "rl_seconds": rl_seconds,
        }

    algos = {"grpo": algo_result(summary(sync, 100.0), 1.0)}
    algos["grpo-async"] = {**algo_result(summary(better, 50.0), 1.0), "rollout": {"max_lag": 1}}
    assert algos["grpo-async"]["steps_per_hour"] == 720.0
    report = {
        "recipe": "demo",
        "algos": algos,
        "after_rl": algos["grpo"]["after_rl"],
        "config": {"train": {}},
    }
    text = markdown(report)
    assert "| grpo-async | 1 | 720 | 360 | 2.00x | +0.500 [+0.500, +0.500] | - |" in text
