"""The trajectory store: round trips, dedup, filters, concurrency and crash safety."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core.episode import Truncation
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.bench_store import bench_store
from agentgym_envs.store import (
    SCHEMA_VERSION,
    EpisodeNotFoundError,
    StoredEpisode,
    TrajectoryStore,
)


def episode(i: int = 0, **changes: Any) -> StoredEpisode:
    """A small synthetic episode whose actions (and so dedup key) depend on ``i``."""
    actions = [f"move(direction={d!r})" for d in ("left", "up", f"down{i}")]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": f"task {i}"},
    ]
    for k, a in enumerate(actions):
        call = {"name": "move", "arguments": {"direction": a}, "call_id": f"call_{k}_0"}
        messages += [
            {"role": "assistant", "content": a, "tool_calls": [call]},
            {"role": "user", "content": f"obs {k} é ✓"},
        ]
    ep = StoredEpisode(
        env_id="agentgym/Sokoban-v0",
        task_id=f"task-{i % 3}",
        split="test",
        difficulty="easy",
        policy="oracle",
        policy_version="",
        versions={"env": "Sokoban-v0", "tools": "abc"},
        seeds={"env": i, "task": 7, "verifier": i},
        messages=messages,
        actions=actions,
        canonical_actions=[a.replace("(", " ") for a in actions],
        state_hashes=[f"h{i}-{k}" for k in range(4)],
        rewards=[0.1, 0.2, 0.5],
        reward_components={"success": 0.5, "milestone": 0.3},
        outcome="success",
        valid=True,
        milestones=["box:1"],
        cost={"tool_calls": 3, "per_tool": {"move": 3.0}},
        started_at=1000.0 + i,
        ended_at=1001.5 + i,
        priority=0.25,
        run_id="run-a",
        extra={"trial": i},
    )
    return replace(ep, **changes)


def test_an_episode_round_trips_with_every_field(tmp_path: Path) -> None:
    ep = episode(1)
    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        row_id = store.add(ep)
        assert row_id is not None
        got = store.get(row_id)
    assert got == ep and got.to_json() == ep.to_json()
    assert got.success and got.steps == 3 and got.episode_return == pytest.approx(0.8)
    assert StoredEpisode.from_json(json.loads(json.dumps(ep.to_json()))) == ep


def test_duplicates_are_stored_once(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        first = store.add(episode(1))
        # same env, task, canonical actions and state hashes: a duplicate, whatever else
        assert store.add(episode(1, policy="other", run_id="b", extra={"x": 1})) is None
        assert store.count() == 1
        # another world trajectory (same actions, different states) is not a duplicate
        other = store.add(episode(1, state_hashes=["x"] * 4))
        assert other is not None and other != first
        ids = store.add_many([episode(2), episode(2), episode(1), episode(3)])
        assert ids[1] is None and ids[2] is None
        assert ids[0] is not None and ids[3] is not None and store.count() == 4
    assert episode(1).dedup_key() == episode(1, policy="x").dedup_key()
    assert episode(1).dedup_key() != episode(1, task_id="other").dedup_key()


def test_query_and_count_filter_by_every_field(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        store.add_many(
            [
                episode(0),
                episode(1, outcome="timeout", policy="random"),
                episode(2, outcome="env_error", valid=False, run_id="run-b"),
                episode(3, env_id="agentgym/FrozenLake-v0"),
                episode(4, outcome="failure", policy="random"),
            ]
        )
        assert store.count() == 5
        assert store.count(success=True) == 2 and store.count(success=False) == 3
        assert store.count(valid=False) == 1 and store.count(run_id="run-b") == 1
        assert store.count(policy="random", outcome="failure") == 1
        assert [ep.task_id for _, ep in store.query(task_id="task-0")] == ["task-0", "task-0"]
        assert [ep.env_id for _, ep in store.query(env_id="agentgym/FrozenLake-v0")] == [
            "agentgym/FrozenLake-v0"
        ]
        ids = [i for i, _ in store.query()]
        assert ids == sorted(ids)
        assert [i for i, _ in store.query(limit=2)] == ids[:2]
        assert [i for i, _ in store.query(limit=2, newest_first=True)] == ids[::-1][:2]
        assert [i for i, _ in store.iter_episodes(batch=2)] == ids
        assert [i for i, _ in store.iter_episodes(policy="random", batch=1)] == [ids[1], ids[4]]


def test_missing_ids_and_closed_stores_raise_clear_errors(tmp_path: Path) -> None:
    store = TrajectoryStore(tmp_path / "t.sqlite")
    with pytest.raises(EpisodeNotFoundError, match="agentgym traj ls"):
        store.get(42)
    with pytest.raises(KeyError):
        store.get(42)
    store.close()
    store.close()  # idempotent
    with pytest.raises(ConfigError, match="closed"):
        store.count()
    with pytest.raises(ConfigError, match="unknown StoredEpisode fields"):
        StoredEpisode.from_json({**episode().to_json(), "colour": "red"})


def test_wal_mode_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with TrajectoryStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="upgrade agentgym-envs"):
        TrajectoryStore(path)


# the tables of a schema-1 store, as agentgym-envs wrote them before the truncation field
_SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE episodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, dedup_key TEXT NOT NULL UNIQUE,
    env_id TEXT NOT NULL, task_id TEXT NOT NULL, split TEXT NOT NULL,
    difficulty TEXT NOT NULL, policy TEXT NOT NULL, policy_version TEXT NOT NULL,
    run_id TEXT NOT NULL, outcome TEXT NOT NULL, priority REAL NOT NULL,
    started_at REAL NOT NULL, ended_at REAL NOT NULL,
    success INTEGER NOT NULL, valid INTEGER NOT NULL, steps INTEGER NOT NULL,
    "return" REAL NOT NULL, versions TEXT NOT NULL, seeds TEXT NOT NULL,
    messages TEXT NOT NULL, actions TEXT NOT NULL, canonical_actions TEXT NOT NULL,
    state_hashes TEXT NOT NULL, rewards TEXT NOT NULL, reward_components TEXT NOT NULL,
    milestones TEXT NOT NULL, cost TEXT NOT NULL, extra TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');
"""


def test_a_schema_1_store_still_loads_and_its_outcomes_read_typed(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_1)
    row = "?, 'agentgym/Sokoban-v0', 't', 'train', 'easy', 'hf:m', '3', 'r', ?, 0.0, 1.0, 2.0"
    blobs = ", '{}', '{}', '[]', '[\"a\"]', '[\"a\"]', '[]', '[0.5]', '{}', '[]', '{}', '{}'"
    for key, outcome in (("k1", "context_limit"), ("k2", "success"), ("k3", "continue")):
        db.execute(
            f"INSERT INTO episodes VALUES (NULL, {row}, 0, 1, 1, 0.5{blobs})", (key, outcome)
        )
    db.commit()
    db.close()
    with TrajectoryStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        eps = [ep for _, ep in store.query()]
        assert [(ep.outcome, ep.truncation) for ep in eps] == [
            (Outcome.TIMEOUT, Truncation.CONTEXT_LIMIT),
            (Outcome.SUCCESS, Truncation.NONE),
            (Outcome.TIMEOUT, Truncation.WRAPPER),  # a wrapper's cut, recorded as "continue"
        ]
        assert eps[1].success and eps[0].rewards == [0.5] and eps[0].actions == ["a"]
        new = store.add(episode(1, outcome="timeout", truncation="budget"))
        assert new is not None and store.get(new).truncation is Truncation.BUDGET
    with TrajectoryStore(path) as again:  # migrated once; opening again changes nothing
        assert again.count() == 4 and again.schema_version() == SCHEMA_VERSION


def test_a_stored_episode_folds_back_into_a_summary() -> None:
    ep = episode(2)
    summary = ep.summary
    assert summary.outcome is Outcome.SUCCESS and summary.success
    assert summary.rewards == (0.1, 0.2, 0.5) and summary.steps == 3 and summary.tool_calls == 3
    again = StoredEpisode.from_summary(
        summary,
        env_id=ep.env_id,
        policy=ep.policy,
        messages=ep.messages,
        actions=ep.actions,
        canonical_actions=ep.canonical_actions,
        state_hashes=ep.state_hashes,
        priority=ep.priority,
        run_id=ep.run_id,
        extra=ep.extra,
    )
    assert again.to_json() == ep.to_json()


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are not the episodes you are looking for" * 100)
    with pytest.raises(ConfigError, match="is not a trajectory store"):
        TrajectoryStore(path)


def test_threads_share_one_store(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        errors: list[BaseException] = []

        def write(base: int) -> None:
            try:
                for i in range(25):
                    store.add(episode(base + i))
            except BaseException as exc:  # reported below; a thread cannot raise into pytest
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(100 * t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and store.count() == 100


_WRITER = textwrap.dedent(
    """
    import sys
    from dataclasses import replace
    from tests.eval.test_store import episode
    from agentgym_envs.store import TrajectoryStore

    store = TrajectoryStore(sys.argv[1])
    base = int(sys.argv[2])
    i = 0
    while True:
        if i % 5 == 4:  # some batches too, so a kill may land inside a transaction
            ids = store.add_many([episode(base + i + k) for k in range(3)])
            i += 3
        else:
            ids = [store.add(episode(base + i))]
            i += 1
        print(" ".join(str(x) for x in ids), flush=True)
    """
)


def _writer(path: Path, base: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(base)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_kill_9_loses_no_committed_episode(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    # two processes write to the same file at once; both are killed mid-run
    procs = [_writer(path, 0), _writer(path, 1_000_000)]
    committed: list[int] = []
    for proc in procs:
        assert proc.stdout is not None
        lines = 0
        while lines < 60:
            line = proc.stdout.readline()
            assert line, "the writer process died before it was killed"
            committed += [int(x) for x in line.split()]
            lines += 1
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
    for proc in procs:
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert proc.stdout is not None
        # lines printed before the kill that we had not read yet are committed too
        committed += [int(x) for line in proc.stdout.read().splitlines() for x in line.split()]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with TrajectoryStore(path) as store:
        assert store.count() >= len(committed) >= 120
        for row_id in committed:
            ep = store.get(row_id)
            assert ep.env_id == "agentgym/Sokoban-v0" and len(ep.messages) == 8


def test_bench_store_reports_its_measures() -> None:
    result = bench_store(episodes=20, wrapper_episodes=2)
    assert result["episodes"] == 20
    assert result["wrapper_steps"] > 2  # two Sokoban episodes played to the end
    for key in ("add_ms_mean", "add_many_ms_per_episode", "bytes_per_episode"):
        assert result[key] > 0
    assert result["bytes_per_episode"] > 1000  # 20-step episodes with their messages


def test_the_store_writes_whatever_text_a_step_returned(tmp_path: Path) -> None:
    """Lone surrogates (invalid Unicode, e.g. from a policy's JSON ``\\ud800``), values
    JSON has no form for and keys that are no strings are stored, never raised on: the
    text's surrogates read back as U+FFFD, other values as their ``str``."""
    lone = "One moment \ud800"
    ep = episode(0, actions=[lone, "x\udcff"], canonical_actions=[lone], policy="p\ud800")
    ep.messages[2] = {"role": "assistant", "content": lone, "tool_calls": [
        {"name": "respond", "arguments": {"message": lone, "\udc80": b"\x00", "s": {1}}}
    ]}  # fmt: skip
    ep.extra = {"note": lone, (1, 2): 1j}
    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        assert ep.dedup_key()
        row_id = store.add(ep)
        assert row_id is not None and store.add_many([episode(5, actions=[lone])])[0]
        got = store.get(row_id)
    assert got.actions == ["One moment \ufffd", "x\ufffd"] and got.policy == "p\ufffd"
    call = got.messages[2]["tool_calls"][0]
    assert call["arguments"] == {"message": "One moment \ufffd", "\ufffd": "b'\\x00'", "s": "{1}"}
    assert got.extra == {"note": "One moment \ufffd", "(1, 2)": "1j"}
    json.dumps(got.to_json(), ensure_ascii=False).encode()


def test_the_llm_users_counters_are_stored_and_read_back(tmp_path: Path) -> None:
    from agentgym_envs.core.episode import UserLLMCounters

    counters = UserLLMCounters(replies=4, first_draw_pass=3, fallbacks=1, cassette_mode="replay")
    summary = replace(episode(5).summary, user_llm=counters)
    stored = StoredEpisode.from_summary(
        summary, env_id="agentgym/Retail-v1", policy="oracle", messages=[], actions=["a"],
        extra={"trial": 1},
    )  # fmt: skip
    with TrajectoryStore(tmp_path / "t.sqlite") as store:
        back = store.get(store.add(stored) or -1)
        old = store.get(store.add(episode(6)) or -1)  # no LLM user: nothing in extra
    assert back.extra == {"trial": 1, "user_llm": asdict(counters)}
    assert back.summary.user_llm == counters and old.summary.user_llm is None
