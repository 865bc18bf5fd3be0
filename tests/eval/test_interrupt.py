"""An interrupted `agentgym eval` writes the report of what finished, and `--resume`
finishes the run without playing a finished episode again (issue 27)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.cli import main
from agentgym_envs.store import TrajectoryStore
from tests.eval import slow

ROOT = Path(__file__).resolve().parents[2]
TASKS = 6
SUITE = {
    "name": "slow",
    "trials": 1,
    "seed": 0,
    "entries": [
        {
            "name": "sokoban",
            "env": slow.SUITE_ENV,
            "difficulty": "easy",
            "tasks": TASKS,
            "env_kwargs": {"delay_s": 0.25},
        }
    ],
}


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "slow.yaml"
    path.write_text(json.dumps(SUITE))  # JSON is YAML
    return path


def _eval(*args: str) -> subprocess.Popen[str]:
    """`agentgym eval` in a child process, stdout piped (not a terminal)."""
    cmd = [sys.executable, "-m", "agentgym_envs.cli", "eval", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _episode_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("episode ")]


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(_episode_lines(path.read_text())) >= n:
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"eval ended early ({proc.returncode}): {out[-2000:]} {err[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"fewer than {n} episodes in {path} after {timeout} s")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_eval_reports_what_finished_and_resumes(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    out = tmp_path / "run"
    args = ["--suite", str(_suite(tmp_path)), "--policy", "oracle", "--batch", "1"]
    proc = _eval(*args, "--out", str(out))
    _wait_for_lines(out / "progress.log", 2, proc, timeout=120)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr[-3000:]

    # the report of the finished episodes, marked partial, with the same files
    report = json.loads((out / "report.json").read_text())
    done = len(report["episodes"])
    assert 2 <= done < TASKS
    assert report["partial"]["episodes_done"] == done
    assert report["partial"]["episodes_total"] == TASKS
    assert report["overall"]["oracle"]["episodes"] == done
    assert f"{done} of {TASKS} episodes" in (out / "report.md").read_text()
    assert f"{done} of {TASKS} episodes" in (out / "report.html").read_text()
    assert f"{done} of {TASKS} episodes" in stdout and "--resume" in stdout
    # one plain progress line per finished episode, off a terminal and in the log
    lines = _episode_lines(stdout)
    assert len(lines) == done == len(_episode_lines((out / "progress.log").read_text()))
    assert all("sokoban" in x and slow.ENV_ID in x and "success" in x for x in lines)
    assert all(x.endswith(" s") for x in lines)
    # the store holds exactly the finished episodes: none half-written, none lost
    with TrajectoryStore(out / "trajectories.sqlite") as store:
        stored = {ep.task_id for _, ep in store.query()}
    assert stored == {e["task_id"] for e in report["episodes"]}
    if sig is signal.SIGTERM:
        return

    # --resume reads the recorded arguments and plays only what is left
    again = _eval("--out", str(out), "--resume")
    stdout, stderr = again.communicate(timeout=180)
    assert again.returncode == 0, stderr[-3000:]
    assert len(_episode_lines(stdout)) == TASKS - done  # nothing replayed
    final = json.loads((out / "report.json").read_text())
    assert "partial" not in final
    assert len(final["episodes"]) == TASKS
    assert final["overall"]["oracle"]["episodes"] == TASKS
    assert final["overall"]["oracle"]["success_rate"] == 1.0
    assert len({e["task_id"] for e in final["episodes"]}) == TASKS
    assert final["config"]["run_id"] == report["config"]["run_id"]
    with TrajectoryStore(out / "trajectories.sqlite") as store:
        assert store.count() == TASKS
        assert store.count(run_id=report["config"]["run_id"]) == TASKS
    assert len(_episode_lines((out / "progress.log").read_text())) == TASKS


def test_resume_with_other_arguments_names_the_fix(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "run"
    suite = _suite(tmp_path)
    spec = {**SUITE, "entries": [{**SUITE["entries"][0], "tasks": 1, "env_kwargs": {}}]}
    suite.write_text(json.dumps(spec))
    assert main(["eval", "--suite", str(suite), "--policy", "oracle", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", "--out", str(out), "--resume", "--policy", "random"]) == 2
    text = " ".join(capsys.readouterr().out.split())
    assert "--policy oracle" in text and "--policy random" in text
    assert "Leave --policy out" in text
    # nothing left to play: the report is rebuilt from the recorded episodes
    assert main(["eval", "--out", str(out), "--resume", "--policy", "oracle"]) == 0
    assert len(json.loads((out / "report.json").read_text())["episodes"]) == 1
    assert main(["eval", "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "run.json" in capsys.readouterr().out


def test_ctrl_c_to_the_process_group_costs_no_episode_of_a_worker(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the env workers too; they leave stopping to the
    evaluator, so the episodes in flight are dropped, not counted as env errors."""
    out = tmp_path / "run"
    suite = str(_suite(tmp_path))
    cmd = [sys.executable, "-m", "agentgym_envs.cli", "eval", "--suite", suite, "--policy",
           "oracle", "--batch", "2", "--isolation", "process", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    _wait_for_lines(out / "progress.log", 1, proc, timeout=120)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["partial"]["episodes_done"] == len(report["episodes"]) >= 1
    assert {e["outcome"] for e in report["episodes"]} == {"success"}
