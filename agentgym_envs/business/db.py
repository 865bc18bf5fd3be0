"""SQLite worlds: generated once per (domain, seed, size), restored per episode in memory.

A world is built with sqlite-utils into an in-memory database, change-tracking
triggers are installed, and the database is serialised to bytes and cached. ``reset``
deserialises those bytes into the episode's own connection (a memory copy, about a
tenth of a millisecond per megabyte), never regenerating.

Every tracked table has an ``id`` primary key. Triggers record each touched row in
``_changes``; :meth:`EpisodeDB.changes` compares those rows with the pristine world, so
grading sees exactly which rows differ, whatever tool or path changed them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import sqlite_utils

from agentgym_envs.core.errors import ConfigError

Builder = Callable[[sqlite_utils.Database, np.random.Generator, int], None]
Changes = dict[str, dict[str, Any]]  # table -> id -> row dict (None when deleted)
CHANGE_LOG = "_changes"


def install_change_log(conn: sqlite3.Connection, tables: Sequence[str]) -> None:
    """Create ``_changes`` and the triggers that fill it for ``tables``."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CHANGE_LOG} "
        "(tbl TEXT NOT NULL, pk NOT NULL, PRIMARY KEY (tbl, pk)) WITHOUT ROWID"
    )
    for table in tables:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info([{table}])")]
        if "id" not in cols:
            raise ConfigError(f"tracked table {table!r} needs an 'id' primary key column")
        for event, ref in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            conn.execute(
                f"CREATE TRIGGER IF NOT EXISTS _track_{table}_{event.lower()} AFTER {event} "
                f"ON [{table}] BEGIN INSERT OR IGNORE INTO {CHANGE_LOG} VALUES "
                f"('{table}', {ref}.id); END"
            )


@cache
def world_bytes(builder: Builder, tables: tuple[str, ...], seed: int, size: int) -> bytes:
    """Build (once per process) and serialise the world ``builder`` makes from ``seed``."""
    conn = sqlite3.connect(":memory:")
    builder(sqlite_utils.Database(conn), np.random.default_rng(seed), size)
    install_change_log(conn, tables)
    conn.commit()
    data = conn.serialize()
    conn.close()
    return data


@cache
def pristine(builder: Builder, tables: tuple[str, ...], seed: int, size: int) -> sqlite3.Connection:
    """A read-only connection to the untouched world (shared; used to diff episodes)."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.deserialize(world_bytes(builder, tables, seed, size))
    conn.execute("PRAGMA query_only = ON")
    conn.row_factory = sqlite3.Row
    return conn


class EpisodeDB:
    """The episode's own in-memory database."""

    def __init__(self) -> None:
        self.conn = self._connect()
        self._base: sqlite3.Connection | None = None

    @staticmethod
    def _connect() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    def load(self, data: bytes, base: sqlite3.Connection) -> None:
        """Replace the whole database with ``data``; ``base`` is the pristine world."""
        if self._base is not None and base is not self._base:
            # Another world (say the ood one) has the same schema cookie but other root
            # pages, so statements the connection cached for the old world would read the
            # wrong b-trees; a fresh connection has no cached statements.
            self.conn.close()
            self.conn = self._connect()
        self.conn.deserialize(data)
        self._base = base

    def dump(self) -> bytes:
        """The whole database as bytes (a snapshot)."""
        return self.conn.serialize()

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else dict(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(sql, params).fetchall()]

    def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement that changes data; returns the rows it touched."""
        return self.conn.execute(sql, params).rowcount

    def changes(self, ignore: Iterable[str] = ()) -> Changes:
        """Rows that differ from the pristine world: table -> id -> row (None if deleted)."""
        assert self._base is not None, "load() a world first"
        skip = set(ignore)
        out: Changes = {}
        for tbl, pk in self.conn.execute(f"SELECT tbl, pk FROM {CHANGE_LOG} ORDER BY tbl, pk"):
            if tbl in skip:
                continue
            now = self.one(f"SELECT * FROM [{tbl}] WHERE id = ?", (pk,))
            before = self._base.execute(f"SELECT * FROM [{tbl}] WHERE id = ?", (pk,)).fetchone()
            if now != (None if before is None else dict(before)):
                out.setdefault(tbl, {})[str(pk)] = now
        return out

    def close(self) -> None:
        self.conn.close()


def changes_digest(changes: Mapping[str, Mapping[str, Any]]) -> str:
    """A stable fingerprint of a changes map (rows sorted by table and key)."""
    canonical = json.dumps(changes, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
