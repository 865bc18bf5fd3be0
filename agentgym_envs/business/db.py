"""SQLite worlds: generated once per (domain, seed, size), shared until an episode writes.

A world is built with sqlite-utils into an in-memory database, change-tracking
triggers are installed, and the database is serialised to bytes and cached, with one
read-only connection to it (:func:`pristine`) per process. An episode reads that shared
connection until its first write: only then does it deserialise the world into a
connection of its own (a memory copy, about a tenth of a millisecond per megabyte),
never regenerating. A session that only reads costs no copy of the world (Retail's is
0.7 MiB), and a reset hands a private copy back, so a server holding thousands of
sessions keeps one world per (seed, size), not one per session.

Every tracked table has an ``id`` primary key. Triggers record each touched row in
``_changes``; :meth:`EpisodeDB.changes` compares those rows with the pristine world, so
grading sees exactly which rows differ, whatever tool or path changed them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
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


# Every read of a shared pristine connection holds this lock: sessions on other threads
# read the same connection, and a statement is stepped and fetched as one unit.
_SHARED_READS = threading.Lock()
_PRISTINE_BYTES: dict[sqlite3.Connection, bytes] = {}  # pristine connection -> its world


@cache
def pristine(builder: Builder, tables: tuple[str, ...], seed: int, size: int) -> sqlite3.Connection:
    """A read-only connection to the untouched world (shared by every episode of the
    process: they read it until they write, and diff against it)."""
    data = world_bytes(builder, tables, seed, size)
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.deserialize(data)
    conn.execute("PRAGMA query_only = ON")
    conn.row_factory = sqlite3.Row
    _PRISTINE_BYTES[conn] = data
    return conn


def _read_shared(
    conn: sqlite3.Connection, sql: str, params: Sequence[Any], many: bool
) -> list[Any]:
    """Rows of a read on a shared pristine connection (every row, or at most one)."""
    with _SHARED_READS:  # stepped and fetched whole, so no other thread interleaves
        cur = conn.execute(sql, params)
        rows = cur.fetchall() if many else cur.fetchmany(1)
        cur.close()
    return rows


class EpisodeDB:
    """The episode's database: the shared pristine world until its first write, then a
    private in-memory copy (copy on first write).

    Reads of an untouched world go to the shared read-only connection; :meth:`write`
    (and :attr:`conn`) first give the episode its own copy, so one episode's writes are
    never visible to another.
    """

    def __init__(self) -> None:
        self._own: sqlite3.Connection | None = None  # the private copy, once written
        self._base: sqlite3.Connection | None = None
        self._data: bytes | None = None  # what the database holds until the next write
        self._closed = False

    @staticmethod
    def _connect() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    def load(self, data: bytes, base: sqlite3.Connection) -> None:
        """Replace the whole database with ``data``; ``base`` is the pristine world.

        ``data`` equal to the pristine world (a reset, a snapshot taken before any write)
        is read from ``base`` and costs no copy; other data gets a private copy at once.
        """
        if self._own is not None:
            # a fresh connection per copy: another world (say the ood one) has the same
            # schema cookie but other root pages, so statements cached for the old world
            # would read the wrong b-trees
            self._own.close()
            self._own = None
        self._base, self._closed = base, False
        shared = _PRISTINE_BYTES.get(base)
        if shared is not None and (data is shared or data == shared):
            self._data = shared
        else:
            self._data = data
            self._materialise()

    def _materialise(self) -> sqlite3.Connection:
        """The episode's private copy of the world (made on first use)."""
        if self._own is None:
            self._check_open()
            assert self._data is not None  # loaded and open: the world it holds
            own = self._connect()
            own.deserialize(self._data)
            self._own, self._data = own, None
        return self._own

    @property
    def conn(self) -> sqlite3.Connection:
        """The episode's own connection (writable; taking it makes the private copy)."""
        return self._materialise()

    @property
    def shared(self) -> bool:
        """Whether the episode still reads the shared pristine world (has not written)."""
        return self._own is None and not self._closed

    def _check_open(self) -> sqlite3.Connection:
        """The pristine world, once loaded and while open."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if self._base is None:
            raise sqlite3.ProgrammingError("load() a world before reading the database")
        return self._base

    def _rows(self, sql: str, params: Sequence[Any], many: bool) -> list[Any]:
        if self._own is not None:
            cur = self._own.execute(sql, params)
            return cur.fetchall() if many else cur.fetchmany(1)
        return _read_shared(self._check_open(), sql, params, many)

    def dump(self) -> bytes:
        """The whole database as bytes (a snapshot; the shared world's own bytes while the
        episode has not written)."""
        if self._own is not None:
            return self._own.serialize()
        self._check_open()
        assert self._data is not None
        return self._data

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params, many=False)
        return dict(rows[0]) if rows else None

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows(sql, params, many=True)]

    def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement that changes data; returns the rows it touched."""
        return self._materialise().execute(sql, params).rowcount

    def changes(self, ignore: Iterable[str] = ()) -> Changes:
        """Rows that differ from the pristine world: table -> id -> row (None if deleted)."""
        base = self._check_open()
        if self._own is None:  # never written: the shared world's change log is empty
            return {}
        skip = set(ignore)
        out: Changes = {}
        for tbl, pk in self._own.execute(f"SELECT tbl, pk FROM {CHANGE_LOG} ORDER BY tbl, pk"):
            if tbl in skip:
                continue
            now = self.one(f"SELECT * FROM [{tbl}] WHERE id = ?", (pk,))
            before = _read_shared(base, f"SELECT * FROM [{tbl}] WHERE id = ?", (pk,), False)
            if now != (dict(before[0]) if before else None):
                out.setdefault(tbl, {})[str(pk)] = now
        return out

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
        self._data, self._closed = None, True


def changes_digest(changes: Mapping[str, Mapping[str, Any]]) -> str:
    """A stable fingerprint of a changes map (rows sorted by table and key)."""
    canonical = json.dumps(changes, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
