"""The agentgym command, run in-process and as a real subprocess."""

import argparse
import json
import re
import subprocess
import sys

import pytest

from agentgym_envs.cli import main


def test_list_json(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    sokoban = next(r for r in rows if r["id"] == "agentgym/Sokoban-v0")
    assert sokoban["family"] == "games" and sokoban["tools"] == ["move"]
    assert sokoban["tasks"] == {"train": 600, "test": 150, "ood": 150}


def test_run_reports_success_with_ci(capsys) -> None:
    code = main(["run", "Sokoban", "--policy", "oracle", "noop", "--episodes", "6", "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    oracle, noop = (p["summary"] for p in payload)
    assert oracle["success_rate"] == 1.0 and oracle["success_ci"][0] > 0.5
    assert noop["success_rate"] == 0.0 and noop["cost_per_success"] is None
    assert oracle["episodes"] == 6 and oracle["mean_steps"] > 0


def test_run_table(capsys) -> None:
    assert main(["run", "Sokoban", "--episodes", "3", "--difficulty", "easy"]) == 0
    out = capsys.readouterr().out
    assert "Sokoban-v0" in out and "oracle" in out and "1.00" in out


def test_check_one_env(capsys) -> None:
    assert main(["check", "Sokoban"]) == 0
    out = capsys.readouterr().out
    assert out.count("pass") == 6 and "FAIL" not in out


def test_bench_json(capsys) -> None:
    assert main(["bench", "Sokoban", "--seconds", "0.2", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["steps"] > 0 and result["steps_per_s"] > 0 and result["reset_ms_median"] > 0


def test_errors_name_the_fix(capsys) -> None:
    assert main(["run", "Sokobon", "--episodes", "1"]) == 2
    assert "Did you mean" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "Sokoban", "--policy", "genius"])


def test_tasks_build_writes_validated_tasks(tmp_path, capsys) -> None:
    assert main(["tasks", "build", "Sokoban", "--out", str(tmp_path), "--count", "2"]) == 0
    lines = (tmp_path / "games" / "sokoban.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["format"] == "agentgym-tasks/1"
    assert len(lines) == 1 + 2 * 3 * 3  # 2 per split and difficulty


def test_play_in_a_real_terminal_session() -> None:
    script = 'move(direction="up")\n:undo\nmove(direction="up")\n:hint\nnonsense\n:quit\n'
    out = subprocess.run(
        [sys.executable, "-m", "agentgym_envs.cli", "play", "Sokoban", "--seed", "3"],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "Boxes on targets" in out and "error: parse_error" in out
    assert 'move(direction="' in out  # the hint
    # :undo takes the undone step's reward out of the return: the step again pays the same
    rewards = [line.strip() for line in out.splitlines() if "(return " in line]
    assert "step undone (return +0.000)" in rewards[1], rewards
    assert rewards[0].endswith(rewards[2]) and "return -0.00" in rewards[2], rewards


def test_version(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentgym {version('agentgym-envs')}"


def _help_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_train_help_shows_each_default_once(capsys) -> None:
    text = _help_of(["train"], capsys)
    assert "(default: grpo)" in text and "(default: all)" in text
    assert not re.search(r"\(default: [^()]*\)\.? \(default:", text), text


@pytest.mark.parametrize("command", ["play", "run", "eval"])
def test_every_option_has_help_text(command) -> None:
    from agentgym_envs.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        action.dest
        for action in sub.choices[command]._actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert missing == []


def test_train_is_added_through_its_entry_point(capsys) -> None:
    from importlib.metadata import entry_points

    from agentgym_envs.cli import SUBCOMMAND_GROUP, build_parser

    points = {p.name: p.value for p in entry_points(group=SUBCOMMAND_GROUP)}
    assert points.get("train") == "agentgym_trainers.cli:add_parser"
    args = build_parser().parse_args(["train", "--model", "tiny", "--steps", "1"])
    assert args.func.__module__ == "agentgym_trainers.cli" and args.model == "tiny"


def test_train_without_the_trainer_says_how_to_install_it(capsys, monkeypatch) -> None:
    import importlib.metadata

    from agentgym_envs.cli import TRAIN_INSTALL

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert main(["train", "--model", "tiny"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "agentgym train` is unavailable" in out and TRAIN_INSTALL in out


def test_train_without_torch_says_how_to_install_it(capsys, monkeypatch) -> None:
    from agentgym_envs.cli import TRAIN_INSTALL

    # an import of a module set to None in sys.modules fails as if it were not installed
    monkeypatch.setitem(sys.modules, "transformers.utils", None)
    assert main(["train", "--model", "tiny", "--steps", "1"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "'transformers.utils' is not installed" in out and TRAIN_INSTALL in out


def test_eval_help_says_each_default_once_and_never_none() -> None:
    """``--trials`` read ``(default: the suite's) (default: None)`` (issue 27)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "agentgym_envs.cli", "eval", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "--trials" in out and "(default: the suite's)" in out
    assert "(default: None)" not in out
    flat = " ".join(out.split())  # argparse wraps lines
    assert "(default: the suite's) (default:" not in flat
    assert "(default: 8)" in out  # real defaults are still told
