"""``agentgym bench --serve``: the load benchmark against the real servers (ours, served by
``agentgym openenv serve``, and openenv-core's echo env under its ``create_app`` and
uvicorn) at two sessions, and its configuration errors. Figures are checked for sanity
only; a speed is never asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError, EnvNotFoundError
from agentgym_envs.integrations.extras import require

require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_serve_bench.py")

from agentgym_envs.console import ProgressLog  # noqa: E402
from agentgym_envs.integrations.openenv_bench import (  # noqa: E402
    SERVERS,
    ServeBenchConfig,
    bench_serve,
    parse_sessions,
    run_trial,
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
    warm = {t["server"]: t for t in trials if t["kind"] == "warm"}
    # each server answered in its own protocol: ours sends the env's info, echo its message
    assert warm["agentgym"]["step_message_bytes"] > warm["openenv-echo"]["step_message_bytes"]
    summary = {(r["sessions"], r["server"]): r for r in result["summary"]}
    ours = summary[(SESSIONS, "agentgym")]
    assert ours["held_min"] == ours["cold_held_min"] == SESSIONS
    assert ours["steps_per_s"]["min"] == ours["steps_per_s"]["max"] > 0
    assert "steps_per_s" in ours["vs_echo"]
    table = out.with_suffix(".md").read_text()
    assert result["command"] in table and "| 2 | openenv-echo | 2 / 2 | 0 |" in table
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
    trial = run_trial("agentgym", "cold", 2, 0, cfg, "agentgym/Sokoban-v0", "", tmp_path / "x", log)
    assert trial.held == 1 and trial.sessions == 2
    ((kind, count),) = trial.errors.items()
    assert count == 1 and kind.startswith("server error"), trial.errors
    assert "--max-sessions-per-client" in trial.error_examples[kind]
    assert trial.server_exit is None  # the server stayed up; the benchmark stopped it
