"""``agentgym bench --serve``: the load benchmark against the real servers (ours, served by
``agentgym openenv serve``, and openenv-core's echo env under its ``create_app`` and
uvicorn) at two sessions, and its configuration errors. Figures are checked for sanity
only; a speed is never asserted."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError, EnvNotFoundError
from agentgym_envs.integrations.extras import require

require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_serve_bench.py")

from agentgym_envs.console import ProgressLog  # noqa: E402
from agentgym_envs.integrations.openenv_bench import (  # noqa: E402
    SERVERS,
    ServeBenchConfig,
    Server,
    TrialKind,
    bench_serve,
    capacity,
    parse_sessions,
    run_trial,
)
from agentgym_envs.integrations.openenv_load import (  # noqa: E402
    LoadPlan,
    ServerProcess,
    agentgym_argv,
    free_port,
    play,
)

SESSIONS, STEPS = 2, 3


def test_two_sessions_against_both_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, log = tmp_path / "sokoban.json", tmp_path / "bench.log"
    argv = ["bench", "--serve", "Sokoban", "--sessions", str(SESSIONS), "--steps", str(STEPS),
            "--repeats", "1", "--seed", "3", "--connect-concurrency", "1",
            "--out", str(out), "--log", str(log)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "openenv-echo" in printed and "agentgym/Sokoban-v0" in printed
    result = json.loads(out.read_text())
    assert result["command"] == "agentgym " + " ".join(argv)
    assert result["env_id"] == "agentgym/Sokoban-v0" and result["action"].startswith("move(")
    trials = result["trials"]
    assert sorted((t["server"], t["kind"]) for t in trials) == sorted(
        (s, k) for s in SERVERS for k in ("cold", "warm")
    )
    for t in trials:
        assert t["errors"] == {} and t["server_exit"] is None, t
        assert t["held"] == SESSIONS and t["sessions"] == SESSIONS
        assert t["reset_p50_ms"] > 0 and t["reset_p99_ms"] >= t["reset_p50_ms"]
        assert t["rss_before_mib"] > 10 and t["rss_peak_mib"] >= t["rss_open_mib"] > 10
        assert t["reset_message_bytes"] > 0 and t["open_wall_s"] > 0
        if t["kind"] == "cold":
            assert t["steps"] == 0 and t["steps_per_s"] is None
            continue
        assert t["steps"] == SESSIONS * STEPS
        assert t["steps_per_s"] > 0 and 0 < t["step_p50_ms"] <= t["step_p99_ms"]
        assert t["step_message_bytes"] > 0 and t["action_message_bytes"] > 0
        assert t["server_cpu_ms_per_step"] >= 0 and t["client_cpu_ms_per_step"] > 0
        # the whole tree: the server at least (these servers start no children)
        assert t["tree_processes_open"] >= 1 and t["tree_cpu_ms_per_step"] >= 0
        assert t["tree_rss_peak_mib"] >= t["tree_rss_open_mib"] > 10
        assert 0 < t["tree_pss_open_mib"] <= t["tree_rss_open_mib"]
        assert t["tree_peak_per_session_mib"] >= t["tree_rss_per_session_mib"]
    warm = {t["server"]: t for t in trials if t["kind"] == "warm"}
    # each server answered in its own protocol: ours sends the env's info, echo its message
    assert warm["agentgym"]["step_message_bytes"] > warm["openenv-echo"]["step_message_bytes"]
    summary = {(r["sessions"], r["server"]): r for r in result["summary"]}
    ours = summary[(SESSIONS, "agentgym")]
    assert ours["held_min"] == ours["cold_held_min"] == SESSIONS
    assert ours["steps_per_s"]["min"] == ours["steps_per_s"]["max"] > 0
    assert "steps_per_s" in ours["vs_echo"]
    assert ours["capacity"] == capacity(ours)
    table = out.with_suffix(".md").read_text()
    assert result["command"] in table and "| 2 | openenv-echo | 2 / 2 | 0 |" in table
    assert "tree CPU ms/step" in table and "server CPU ms/step" in table
    lines = log.read_text().splitlines()
    assert lines[0].startswith(result["command"]) and lines[-1].startswith("[4/4] ")


@pytest.mark.parametrize(
    ("options", "fix"),
    [
        (["--sessions", "0"], "--sessions"),
        (["--sessions", "2,x"], "--sessions"),
        (["--steps", "0"], "--steps"),
        (["--repeats", "0"], "--repeats"),
        (["--serve-args", "--max-sessions 9"], "--max-sessions"),
    ],
)
def test_bad_options_are_config_errors(options: list[str], fix: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "r.json"
    assert main(["bench", "--serve", "Sokoban", *options, "--out", str(out)]) == 2
    said = capsys.readouterr().out
    assert "error:" in said and fix in said
    assert not out.exists()  # nothing ran


def test_an_unknown_env_or_none_is_named_before_any_server_starts(tmp_path: Path) -> None:
    log = ProgressLog(tmp_path / "log", echo=False)
    with pytest.raises(EnvNotFoundError, match="Did you mean 'Sokoban'"):
        bench_serve(ServeBenchConfig(env="Sokobn", sessions=(2,)), log)
    assert main(["bench", "--serve", "--sessions", "2"]) == 2  # no env named
    with pytest.raises(ConfigError, match=re.escape("e.g. --sessions 64,256,2048")):
        parse_sessions("64,-1")
    assert parse_sessions("64, 256,2048") == (64, 256, 2048)
    with pytest.raises(ConfigError, match="open files"):
        bench_serve(ServeBenchConfig(env="Sokoban", sessions=(10**9,)), log)
    with pytest.raises(ConfigError, match="git archive"):
        ServeBenchConfig(env="Sokoban", server_src=str(tmp_path))


def test_sessions_the_server_refuses_are_counted_not_held(tmp_path: Path) -> None:
    # a real refusal: the server's own per-client cap lets one loopback session in
    cfg = ServeBenchConfig(env="Sokoban", serve_args=("--max-sessions-per-client", "1"))
    log = ProgressLog(tmp_path / "log", echo=False)
    cold, env = (Server.AGENTGYM, TrialKind.COLD), "agentgym/Sokoban-v0"
    trial = run_trial(*cold, 2, 0, cfg, env, "", tmp_path / "x", log)
    assert trial.held == 1 and trial.sessions == 2
    ((kind, count),) = trial.errors.items()
    assert count == 1 and kind.startswith("server error"), trial.errors
    assert "--max-sessions-per-client" in trial.error_examples[kind]
    assert trial.server_exit is None  # the server stayed up; the benchmark stopped it


def test_capacity_is_what_one_core_and_one_gib_hold() -> None:
    row: dict[str, Any] = {
        "tree_cpu_ms_per_step": {"median": 50.0, "min": 40.0, "max": 60.0},
        "tree_peak_per_session_mib": {"median": 128.0, "min": 100.0, "max": 130.0},
        "tree_pss_per_session_mib": {"median": 64.0, "min": 64.0, "max": 64.0},
    }
    assert capacity(row) == {
        "steps_per_s_per_core": 20.0,
        "sessions_per_gib_rss": 8.0,
        "sessions_per_gib_pss": 16.0,
    }
    row["tree_cpu_ms_per_step"] = {"median": 0.0, "min": 0.0, "max": 0.0}  # under a tick
    row["tree_pss_per_session_mib"] = None  # a member's PSS was unreadable
    assert capacity(row) == {"sessions_per_gib_rss": 8.0}


def test_a_session_past_max_sessions_is_refused_and_the_held_ones_play_on(
    tmp_path: Path,
) -> None:
    """Past ``--max-sessions`` one client is told the server is at capacity and what to
    do, while the sessions it holds go on stepping. Admission comes before the env is
    made, so the behaviour is the env's no more than its executor's: Sokoban in a thread
    per session stands here for WebShop and RepoFix, which are served that way
    (docs/results/serve/heavy.md checks them too)."""
    port = free_port()
    argv = agentgym_argv("Sokoban", port, 2, ("--executor", "thread"))
    server = ServerProcess("agentgym", argv, port, tmp_path)
    step = json.dumps({"type": "step", "data": {"text": 'move(direction="up")'}})
    plan = LoadPlan(server.url, 3, STEPS, 0, step, 10.0, 60.0, connecting=1)
    try:
        server.wait_healthy(180)
        r = asyncio.run(play(plan, server.proc.pid, "past capacity", ProgressLog(None, echo=False)))
    finally:
        assert server.stop() is None  # it was up all along
    assert r.held == 2 and r.steps == 2 * STEPS  # the held ones stepped after the refusal
    assert dict(r.errors) == {"server error CAPACITY_REACHED": 1}
    said = r.examples["server error CAPACITY_REACHED"]
    assert "at capacity" in said and "--max-sessions" in said and "Retry" in said, said
