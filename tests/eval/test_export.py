"""Exports (SFT, preference pairs, Hugging Face datasets) and the `agentgym traj` command."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets
import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.export import (
    export_episodes,
    export_hf,
    export_preferences,
    export_sft,
    preference_rows,
)
from agentgym_envs.store import StoredEpisode, TrajectoryStore
from agentgym_envs.wrappers.recording import RecordingWrapper
from tests.eval.test_store import episode

TASKS = 2


def record(store: TrajectoryStore, policy: str, task_id: str, seed: int) -> None:
    """One Sokoban episode of ``task_id``: the oracle, ``noop`` (blank actions) or
    ``noop-bad`` (an unknown tool every turn)."""
    env = RecordingWrapper(gym.make("agentgym/Sokoban-v0", max_steps=6), store, policy=policy)
    env.reset(seed=seed, options={"task_id": task_id})
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    fixed = {"noop": "", "noop-bad": "wait()"}
    while not any(env.step(oracle.act() if policy == "oracle" else fixed[policy])[2:4]):
        pass
    env.close()


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with oracle successes and noop failures of the same easy Sokoban tasks."""
    path = tmp_path_factory.mktemp("store") / "t.sqlite"
    env = gym.make("agentgym/Sokoban-v0")
    short = [t.id for t in env.unwrapped.task_set.pool("test", "easy") if len(t.solution) <= 6]  # type: ignore[attr-defined]
    env.close()
    with TrajectoryStore(path) as store:
        for task_id in short[:TASKS]:
            record(store, "oracle", task_id, seed=0)
            for seed in (1, 2):  # noop twice: same actions, same states -> stored once
                record(store, "noop", task_id, seed)
            record(store, "noop-bad", task_id, seed=3)
        store.add(episode(0, outcome="env_error", valid=False, policy="broken"))
        store.add(episode(1, outcome="success", valid=False, policy="broken"))
    return path


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_exports_successful_valid_episodes_as_chats(played: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    with TrajectoryStore(played) as store:
        n = export_sft(store, out)
        wins = store.query(success=True, valid=True)
    rows = jsonl(out)
    assert n == len(rows) == len(wins) == TASKS
    for row, (episode_id, ep) in zip(rows, wins, strict=True):
        assert row["episode_id"] == episode_id and row["task_id"] == ep.task_id
        assert all(set(m) == {"role", "content"} for m in row["messages"])
        assert [m["content"] for m in row["messages"] if m["role"] == "assistant"] == ep.actions
        assert row["messages"][0]["role"] == "system"
    loaded = datasets.load_dataset("json", data_files=str(out), split="train")
    assert loaded.num_rows == TASKS
    assert loaded[0]["messages"] == rows[0]["messages"]
    with TrajectoryStore(played) as store, pytest.raises(ConfigError, match="successful"):
        export_sft(store, out, success=False)


def test_preference_pairs_match_successes_and_failures_of_a_task(
    played: Path, tmp_path: Path
) -> None:
    out = tmp_path / "pref.jsonl"
    with TrajectoryStore(played) as store:
        n = export_preferences(store, out)
        by_id = dict(store.query())
    rows = jsonl(out)
    # per task: 1 oracle success, 1 noop failure (deduplicated), 1 noop-bad failure
    assert n == len(rows) == 2 * TASKS
    for row in rows:
        chosen, rejected = by_id[row["chosen_id"]], by_id[row["rejected_id"]]
        assert chosen.success and not rejected.success and rejected.valid
        assert chosen.task_id == rejected.task_id == row["task_id"]
        # the noop's first action differs from the oracle's: the prompt is the shared head
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
        assert row["prompt"] + row["chosen"] == [
            {"role": m["role"], "content": m["content"]} for m in chosen.messages
        ]
        assert row["rejected_return"] < row["chosen_return"]
    assert len({(r["chosen_id"], r["rejected_id"]) for r in rows}) == len(rows)
    with TrajectoryStore(played) as store:
        export_preferences(store, tmp_path / "again.jsonl")
        assert (tmp_path / "again.jsonl").read_text() == out.read_text()  # deterministic
        assert len(preference_rows(store, policy="oracle")) == 0  # no failures to pair


def test_the_prompt_runs_to_the_first_differing_turn(tmp_path: Path) -> None:
    def chat_of(actions: list[str], observations: list[str], **changes: Any) -> StoredEpisode:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "task"},
        ]
        for a, o in zip(actions, observations, strict=True):
            messages += [{"role": "assistant", "content": a}, {"role": "user", "content": o}]
        hashes = ["|".join(observations)]  # world states differ where observations do
        ep = episode(0, messages=messages, actions=actions, canonical_actions=actions)
        return replace(ep, **{"task_id": "t", "state_hashes": hashes, **changes})

    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        store.add(chat_of(["a", "b", "c"], ["1", "2", "3"]))
        store.add(chat_of(["a", "b", "x"], ["1", "2", "9"], outcome="failure"))
        # same action, different answer (a stochastic env): the prompt ends before "a"
        store.add(chat_of(["a", "b"], ["7", "8"], outcome="timeout", task_id="u"))
        store.add(chat_of(["a", "b"], ["1", "2"], task_id="u"))
        rows = {r["task_id"]: r for r in preference_rows(store)}
    t, u = rows["t"], rows["u"]
    assert [m["content"] for m in t["prompt"]] == ["rules", "task", "a", "1", "b", "2"]
    assert [m["content"] for m in t["chosen"]] == ["c", "3"]
    assert [m["content"] for m in t["rejected"]] == ["x", "9"]
    assert [m["content"] for m in u["prompt"]] == ["rules", "task"]
    assert [m["content"] for m in u["rejected"]] == ["a", "7", "b", "8"]


def test_hf_datasets_load_back(played: Path, tmp_path: Path) -> None:
    with TrajectoryStore(played) as store:
        total = store.count()
        sft = export_hf(store, tmp_path / "sft", kind="sft")
        prefs = export_hf(store, tmp_path / "prefs", kind="preferences")
        eps = export_hf(store, tmp_path / "eps", kind="episodes", policy="noop")
        everything = export_hf(store, tmp_path / "all", kind="episodes")
        noop = store.query(policy="noop")
    assert datasets.load_from_disk(str(tmp_path / "sft")).num_rows == sft.num_rows == TASKS
    loaded = datasets.load_from_disk(str(tmp_path / "prefs"))
    assert loaded.num_rows == prefs.num_rows == 2 * TASKS
    assert {"prompt", "chosen", "rejected"} <= set(loaded.column_names)
    back = datasets.load_from_disk(str(tmp_path / "eps"))
    assert back.num_rows == eps.num_rows == len(noop) == TASKS
    assert datasets.load_from_disk(str(tmp_path / "all")).num_rows == everything.num_rows == total
    first = back[0]
    assert first["episode_id"] == noop[0][0] and first["outcome"] == "timeout"
    assert json.loads(first["messages"]) == noop[0][1].messages
    with TrajectoryStore(played) as store, pytest.raises(ConfigError, match="kind must be"):
        export_hf(store, tmp_path / "x", kind="tokens")  # type: ignore[arg-type]


def test_a_missing_datasets_package_names_the_extra(
    played: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now fails
    with (
        TrajectoryStore(played) as store,
        pytest.raises(ConfigError, match=r"agentgym-envs\[eval\]"),
    ):
        export_hf(store, tmp_path / "x")


def test_episode_jsonl_and_unknown_filters(played: Path, tmp_path: Path) -> None:
    with TrajectoryStore(played) as store:
        n = export_episodes(store, tmp_path / "e.jsonl", valid=False)
        with pytest.raises(ConfigError, match="unknown export filters"):
            export_sft(store, tmp_path / "x.jsonl", colour="red")
    rows = jsonl(tmp_path / "e.jsonl")
    assert n == len(rows) == 2 and {r["policy"] for r in rows} == {"broken"}
    ep = StoredEpisode.from_json({k: v for k, v in rows[0].items() if k != "episode_id"})
    assert not ep.valid


# -- the CLI -------------------------------------------------------------------------------


def test_traj_ls_lists_and_filters(played: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traj", "ls", str(played), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    with TrajectoryStore(played) as store:
        assert [r["id"] for r in rows] == [i for i, _ in store.query()]
    assert main(["traj", "ls", str(played), "--policy", "oracle", "--json"]) == 0
    oracle = json.loads(capsys.readouterr().out)
    assert len(oracle) == TASKS and all(r["outcome"] == "success" for r in oracle)
    assert main(["traj", "ls", str(played), "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert f"2 of {len(rows)} distinct episodes" in out  # the newest two: the broken ones
    assert "identical episodes (same env, task, actions and states) are stored once" in out
    assert "broken" in out and "oracle" not in out and "noop" not in out
    assert main(["traj", "ls", str(played.parent / "missing.sqlite")]) == 2
    assert "no trajectory store" in capsys.readouterr().out


def test_traj_show_renders_text_and_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.sqlite"
    hostile = "<script>alert(1)</script> [bold]not markup[/bold]"
    ep = episode(0)
    ep.messages[2]["content"] = hostile
    with TrajectoryStore(path) as store:
        row_id = store.add(ep)
    page = tmp_path / "ep.html"
    assert main(["traj", "show", str(path), str(row_id), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "[bold]not markup[/bold]" in out and "step 1" in out and "obs 2" in out
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "obs 2 é ✓" in text
    assert "http" not in text  # self-contained: no external stylesheet or script
    assert main(["traj", "show", str(path), "999"]) == 2
    assert "no episode 999" in capsys.readouterr().out


def test_traj_export_writes_every_format(
    played: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["traj", "export", str(played)]
    assert main([*base, "--format", "sft", "--out", str(tmp_path / "s.jsonl")]) == 0
    assert len(jsonl(tmp_path / "s.jsonl")) == TASKS
    assert main([*base, "--format", "preferences", "--out", str(tmp_path / "p.jsonl")]) == 0
    assert len(jsonl(tmp_path / "p.jsonl")) == 2 * TASKS
    out = tmp_path / "e.jsonl"
    assert main([*base, "--format", "episodes-jsonl", "--out", str(out), "--policy", "noop"]) == 0
    assert {r["policy"] for r in jsonl(out)} == {"noop"}
    hf = tmp_path / "hf"
    assert main([*base, "--format", "hf", "--kind", "preferences", "--out", str(hf)]) == 0
    assert datasets.load_from_disk(str(hf)).num_rows == 2 * TASKS
    assert f"wrote {2 * TASKS} preferences rows" in capsys.readouterr().out


_ESCAPES = (
    "\x1b[2J\x1b[H",  # clear the screen, cursor home
    "\x1b]0;pwned title\x07",  # set the window title
    "\x1b]8;;https://evil.example\x1b\\click me\x1b]8;;\x1b\\",  # an OSC 8 hyperlink
    "\x9b31m",  # a C1 CSI
    "\x08\x7f\r",  # backspace, delete, carriage return
)


def test_traj_show_and_ls_print_no_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stored text (the agent's actions above all) reaches the terminal with every
    control character but newline and tab shown as a visible escape, and rich markup
    shown as written: an action cannot clear the screen, retitle the window or plant a
    hyperlink."""
    path = tmp_path / "t.sqlite"
    hostile = "".join(_ESCAPES) + " [link=https://evil.example]x[/link] [bold]b[/bold]"
    ep = episode(0, policy="p\x1b[2J[red]r[/red]", task_id="t\x1b]0;x\x07")
    ep.messages[2]["content"] = hostile
    ep.messages[2]["tool_calls"][0]["arguments"] = {"direction": hostile}
    ep.messages[3]["content"] = "obs\x1b[31m red\ud800"
    with TrajectoryStore(path) as store:
        row_id = store.add(ep)
    assert main(["traj", "show", str(path), str(row_id)]) == 0
    out = capsys.readouterr().out
    assert main(["traj", "ls", str(path)]) == 0
    listed = capsys.readouterr().out
    for text in (out, listed):
        bad = sorted({hex(ord(c)) for c in text if ord(c) < 32 and c not in "\n\t"})
        bad += sorted({hex(ord(c)) for c in text if 0x7F <= ord(c) < 0xA0})
        assert not bad, bad
        assert "[red]r[/red]" in text or "[red]r[/red]" in text.replace("\n", "")
    assert "\\x1b[2J" in out and "\\x1b]0;pwned title\\x07" in out and "\\x9b31m" in out
    assert "[link=https://evil.example]x[/link]" in out and "[bold]b[/bold]" in out
    assert "obs\\x1b[31m red\ufffd" in out
