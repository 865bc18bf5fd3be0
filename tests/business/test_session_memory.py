"""A session's memory: every episode reads one shared world until it writes (issue 31).

A server holds thousands of Retail or Calendar sessions; each used to hold its own copy of
the SQLite world (Retail's is 0.7 MiB, Calendar's 1.3 MiB) from its first reset. These
tests bound what a session that only reads costs in SQLite's heap, in bytes, and check
that copy on write keeps sessions isolated.
"""

from __future__ import annotations

import ctypes
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentgym_envs.business.base import BusinessEnv
from agentgym_envs.business.calendar import CalendarEnv
from agentgym_envs.business.db import EpisodeDB, pristine, world_bytes
from agentgym_envs.business.retail import RetailEnv
from agentgym_envs.core import Outcome, Task

ENVS = [RetailEnv, CalendarEnv]
SESSIONS = 24
# SQLite heap per extra session that has reset and read: a copy of the world was
# 700-1,400 KiB; a read-only session now holds no connection of its own at all.
HEAP_PER_SESSION = 16 * 1024


def _sqlite_memory_used() -> Callable[[], int]:
    """``sqlite3_memory_used`` of the SQLite library the ``sqlite3`` module runs on."""
    import _sqlite3

    try:
        fn: Any = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    except (OSError, AttributeError):
        pytest.skip("this build of _sqlite3 does not export sqlite3_memory_used")
    fn.restype, fn.argtypes = ctypes.c_int64, []
    return lambda: int(fn())


def world_of(env: BusinessEnv) -> bytes:
    """The pristine world of the env's current task (the bytes every episode shares)."""
    spec = env.task.spec
    tables = env.tables + env.ignored_tables
    return world_bytes(type(env).world_builder, tables, spec["world_seed"], spec["world_size"])


def writing_task(env_cls: type[BusinessEnv]) -> Task:
    """A test task whose gold solution changes rows."""
    tasks = env_cls(split="test").task_set.pool("test", None)
    return next(t for t in tasks if t.spec["expected"]["rows"])


def play_oracle(env: BusinessEnv) -> None:
    oracle = env.oracle()
    while env.outcome is Outcome.CONTINUE:
        env.step(oracle.act())


@pytest.mark.parametrize("env_cls", ENVS, ids=lambda c: c.__name__)
def test_sessions_that_only_read_hold_no_copy_of_the_world(env_cls: type[BusinessEnv]) -> None:
    used = _sqlite_memory_used()
    warm = env_cls()
    warm.reset(seed=0)  # worlds, catalogs and tasks are built once per process
    warm.step(warm.example_action)
    before = used()
    envs = [env_cls() for _ in range(SESSIONS)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.step(env.example_action)
    per_session = (used() - before) / SESSIONS
    assert per_session < HEAP_PER_SESSION, (
        f"{env_cls.__name__}: {per_session:,.0f} bytes of SQLite heap per extra session, "
        f"expected under {HEAP_PER_SESSION:,} (one shared world until a session writes)"
    )
    for env in envs:
        assert env.db.shared and env.db.dump() is world_of(env)
    for env in (warm, *envs):
        env.close()


@pytest.mark.parametrize("env_cls", ENVS, ids=lambda c: c.__name__)
def test_one_sessions_writes_are_never_seen_by_another(env_cls: type[BusinessEnv]) -> None:
    task = writing_task(env_cls)
    writer, reader = (env_cls(tasks=[task], split=task.split) for _ in range(2))
    writer.reset(seed=0)
    reader.reset(seed=0)
    snap = writer.get_state()
    play_oracle(writer)
    assert writer.outcome is Outcome.SUCCESS
    changed = writer.db.changes(ignore=writer.ignored_tables)
    assert changed and not writer.db.shared
    assert reader.db.shared and reader.db.changes() == {}
    assert reader.db.dump() is world_of(reader) != writer.db.dump()
    for table, rows in changed.items():
        for pk, row in rows.items():
            before = pristine(
                type(reader).world_builder,
                reader.tables + reader.ignored_tables,
                task.spec["world_seed"],
                task.spec["world_size"],
            ).execute(f"SELECT * FROM [{table}] WHERE id = ?", (pk,))
            want = before.fetchone()
            got = reader.db.one(f"SELECT * FROM [{table}] WHERE id = ?", (pk,))
            assert got == (None if want is None else dict(want)) != row
    # the world of a snapshot taken before any write is the shared one again
    writer.set_state(snap)
    assert writer.db.shared and writer.db.dump() is world_of(writer)
    play_oracle(writer)
    assert writer.outcome is Outcome.SUCCESS
    assert writer.db.changes(ignore=writer.ignored_tables) == changed
    writer.reset(seed=0)  # a reset hands the private copy back
    assert writer.db.shared and writer.db.changes() == {}
    for env in (writer, reader):
        env.close()


def test_reads_of_the_shared_world_from_many_threads_agree() -> None:
    args = (RetailEnv.world_builder, RetailEnv.tables + RetailEnv.ignored_tables, 0, 300)
    emails = [r[0] for r in pristine(*args).execute("SELECT email FROM users ORDER BY id")]
    want = [r[0] for r in pristine(*args).execute("SELECT id FROM users ORDER BY id")]
    failures: list[str] = []

    def read() -> None:
        db = EpisodeDB()
        db.load(world_bytes(*args), pristine(*args))
        for _ in range(3):
            got = [db.one("SELECT id FROM users WHERE email = ?", (e,)) for e in emails]
            if [g and g["id"] for g in got] != want:
                failures.append("a read saw another answer")
        db.close()

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_a_closed_episode_db_refuses_reads_and_writes() -> None:
    args = (RetailEnv.world_builder, RetailEnv.tables + RetailEnv.ignored_tables, 0, 300)
    db = EpisodeDB()
    db.load(world_bytes(*args), pristine(*args))
    db.close()
    db.close()
    for use in (lambda: db.one("SELECT 1"), lambda: db.write("DELETE FROM users"), db.dump):
        with pytest.raises(sqlite3.ProgrammingError):
            use()
