"""Whole runs: the CLI, checkpoints and resume, SFT warm start, data parallel with gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.store import TrajectoryStore
from agentgym_trainers.config import TrainConfig, field_docs, flat_docs, parse
from agentgym_trainers.envs import DigitFractionEnv, register
from agentgym_trainers.provenance import cpu_model, platform_info, replay_platform
from agentgym_trainers.run import train

BANDIT_ARGS = [
    "--env", "agentgym-train/DigitFraction-v0",
    "--env-kwargs", '{"charset": "vowels", "prompt_words": 6}',
    "--model", "tiny", "--device", "cpu",
    "--group-size", "4", "--tasks-per-step", "2", "--n-envs", "8",
    "--max-new-tokens", "6", "--max-context", "256", "--lr", "1e-2",
]  # fmt: skip


def test_every_config_field_is_a_documented_flag() -> None:
    docs = field_docs(TrainConfig)
    assert set(docs) == set(TrainConfig.__dataclass_fields__)
    flat = flat_docs(TrainConfig)
    assert set(flat) == set(TrainConfig().to_json())
    assert all(len(text) > 10 for text in flat.values())
    cfg = parse(
        ["--algo", "ppo", "--dual-clip", "3", "--whiten", "--env-kwargs", '{"max_steps": 4}']
    )
    got = (cfg.algo, cfg.objective.dual_clip, cfg.advantage.whiten, cfg.data.env_kwargs)
    assert got == ("ppo", 3.0, True, {"max_steps": 4})
    assert parse(["--vf-clip", "none"]).objective.vf_clip is None


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        (["--algo", "grpo", "--group-size", "1"], "--group-size >= 2"),
        (["--max-new-tokens", "4096", "--max-context", "2048"], "smaller than max_context"),
        (["--algo", "sft"], "--sft-steps >= 1"),
    ],
)
def test_bad_configuration_names_the_fix(args: list[str], fix: str) -> None:
    with pytest.raises(ConfigError, match=fix):
        parse(args)


def test_unknown_model_fails_before_training(capsys: Any, tmp_path: Path) -> None:
    code = main(["train", *BANDIT_ARGS, "--model", "smolm2", "--run-dir", str(tmp_path)])
    assert code == 2
    assert "smollm2" in capsys.readouterr().out


def test_agentgym_train_runs_end_to_end_on_frozenlake(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "lake"
    code = main(
        [
            "train", "--env", "agentgym/FrozenLake-v0", "--model", "tiny", "--device", "cpu",
            "--steps", "2", "--tasks-per-step", "2", "--group-size", "2", "--n-envs", "4",
            "--max-new-tokens", "8", "--max-context", "1024", "--env-kwargs", '{"max_steps": 4}',
            "--sft-steps", "2", "--sft-episodes", "4", "--eval-episodes", "4",
            "--run-dir", str(run),
        ]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "eval_before" in out and "eval_after" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and len(summary["sft_loss"]) == 2
    # where it ran, so a replay elsewhere knows why its episodes may differ
    assert summary["platform"] == platform_info("cpu")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in metrics if "reward" in m]
    assert [m["step"] for m in rl] == [1, 2]
    with TrajectoryStore(run / "trajectories.sqlite") as store:
        episodes = [ep for _, ep in store.query()]
    # episodes with the same task and actions are stored once (the store's dedup key)
    assert 0 < len(episodes) <= 2 * 2 * 2
    assert len({(ep.task_id, tuple(ep.actions)) for ep in episodes}) == len(episodes)
    assert {ep.extra["step"] for ep in episodes} <= {0, 1}
    for ep in episodes:
        assert ep.env_id == "agentgym/FrozenLake-v0" and ep.task_id and ep.seeds["env"] >= 0
        assert ep.versions["task_set"] and ep.policy_version and ep.reward_components
        assert ep.outcome and {"context", "retok_mismatches", "group"} <= set(ep.extra)
        # the chat as text: system prompt, first observation, then action/observation turns
        assert [m["role"] for m in ep.messages[:2]] == ["system", "user"]
        assert "Tools" in ep.messages[0]["content"]
        assistant = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        assert assistant == ep.actions
        assert len(ep.messages) == 2 + 2 * len(ep.actions)
    assert (run / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_sft_warm_start_lowers_the_imitation_loss(tmp_path: Path, tokenizer: Any) -> None:
    cfg = TrainConfig.from_flat(
        env="agentgym/FrozenLake-v0", model="tiny", device="cpu", algo="sft", sft_steps=8,
        sft_episodes=8, sft_lr=1e-2, max_new_tokens=32, max_context=2048, n_envs=8,
        run_dir=str(tmp_path / "sft"),
    )  # fmt: skip
    summary = train(cfg)
    losses = summary["sft_loss"]
    assert losses[-1] < losses[0] * 0.8, losses


def test_resume_continues_exactly_where_the_run_stopped(tmp_path: Path, tokenizer: Any) -> None:
    def config(run: Path, steps: int, resume: bool) -> TrainConfig:
        return parse([*BANDIT_ARGS, "--run-dir", str(run), "--steps", str(steps),
                      "--resume", str(resume), "--checkpoint-every", "1"])  # fmt: skip

    straight = train(config(tmp_path / "a", 3, False))
    train(config(tmp_path / "b", 2, False))
    resumed = train(config(tmp_path / "b", 3, True))
    assert resumed["resumed_from"].endswith("step_000002")
    assert resumed["replica_checksums"] == pytest.approx(straight["replica_checksums"], rel=1e-9)
    a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert a[-1]["reward"] == pytest.approx(b[-1]["reward"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_data_parallel_with_two_gloo_processes(tmp_path: Path, tokenizer: Any) -> None:
    run = tmp_path / "ddp"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        "-m", "agentgym_envs.cli", "train", *BANDIT_ARGS, "--steps", "2", "--run-dir", str(run),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2
    first, second = summary["replica_checksums"]
    assert first == second
    groups = []
    for name in ("trajectories.sqlite", "trajectories.rank1.sqlite"):
        with TrajectoryStore(run / name) as store:
            groups.append({ep.extra["group"] for _, ep in store.query()})
    assert groups[0] and groups[1] and not groups[0] & groups[1]  # each rank plays its share


def test_bandit_fixture_follows_the_env_contract() -> None:
    register()
    env = gym.make("agentgym-train/DigitFraction-v0")
    check_env(env.unwrapped)
    a = env.reset(seed=3)
    b = env.reset(seed=3)
    assert a[0] == b[0]
    inner = env.unwrapped
    assert isinstance(inner, DigitFractionEnv)
    state = inner.get_state()
    obs1 = env.step("12ab")
    inner.set_state(state)
    obs2 = env.step("12ab")
    assert obs1[:3] == obs2[:3] and obs1[1] == pytest.approx(0.5) and obs1[2]
    oracle = inner.oracle()
    env.reset(seed=4)
    assert env.step(oracle.act())[4]["outcome"] == "success"
    env.reset(seed=5)
    assert env.step("")[1] == 0.0  # doing nothing earns nothing


def test_platform_names_the_cpu_and_what_a_replay_must_share(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU 9000\n")
    assert cpu_model(cpuinfo) == "Example CPU 9000"
    info = platform_info("cpu")
    assert info["packages"]["torch"] and info["cpu_capability"] and info["torch_threads"] >= 1
    # a Python patch release changes no arithmetic; a package or CPU kernel path does
    assert replay_platform(info | {"python": "3.11.99"}) == replay_platform(info)
    assert replay_platform(info | {"cpu_capability": "AVX2"}) != replay_platform(info)
