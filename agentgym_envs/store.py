"""The trajectory store: finished episodes in one SQLite file (WAL), deduplicated.

Each row is one :class:`StoredEpisode`: who played it (policy id and version), what it
ran on (env, tool, reward, verifier and task-set versions, seeds), everything that was
said (messages with the parsed tool calls, raw and canonical actions, state hashes) and
how it went (rewards, reward components, outcome, validity, milestones, cost). Episodes
are deduplicated by :meth:`StoredEpisode.dedup_key`.

Durability: every :meth:`TrajectoryStore.add` commits before it returns. In WAL mode
with ``synchronous=NORMAL`` (the default) a committed episode survives the writer being
killed (``kill -9``); pass ``synchronous="FULL"`` to also survive a power cut, at the
price of an fsync per commit.

Several threads may share one store object (a lock serialises its connection), and
several processes may write to the same file, each with its own ``TrajectoryStore``.

Writing is total over what a step can return: text is made valid Unicode
(``core.unicode``: a lone surrogate, which SQLite cannot encode, is stored as U+FFFD),
and a value JSON has no form for (bytes, a set, a key that is no string) is stored as
its ``str``. An episode is never lost to what its policy wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

from agentgym_envs.core.episode import EpisodeSummary, Truncation
from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.unicode import valid_text

# 2: the ``truncation`` column (version-1 files gain it, as "none", when opened)
SCHEMA_VERSION = 2
_JSON_FIELDS = (
    "versions",
    "seeds",
    "messages",
    "actions",
    "canonical_actions",
    "state_hashes",
    "rewards",
    "reward_components",
    "milestones",
    "cost",
    "extra",
)
_SCALAR_FIELDS = (
    "env_id",
    "task_id",
    "split",
    "difficulty",
    "policy",
    "policy_version",
    "run_id",
    "outcome",
    "truncation",
    "priority",
    "started_at",
    "ended_at",
)


def _quote(column: str) -> str:
    return f'"{column}"'  # an SQL identifier ("return" is a keyword)


_COLUMNS = ("dedup_key", *_SCALAR_FIELDS, "success", "valid", "steps", "return", *_JSON_FIELDS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_key TEXT NOT NULL UNIQUE,
    env_id TEXT NOT NULL, task_id TEXT NOT NULL, split TEXT NOT NULL,
    difficulty TEXT NOT NULL, policy TEXT NOT NULL, policy_version TEXT NOT NULL,
    run_id TEXT NOT NULL, outcome TEXT NOT NULL, truncation TEXT NOT NULL DEFAULT 'none',
    priority REAL NOT NULL,
    started_at REAL NOT NULL, ended_at REAL NOT NULL,
    success INTEGER NOT NULL, valid INTEGER NOT NULL, steps INTEGER NOT NULL,
    "return" REAL NOT NULL,
    {", ".join(f"{name} TEXT NOT NULL" for name in _JSON_FIELDS)}
);
CREATE INDEX IF NOT EXISTS episodes_env ON episodes (env_id);
CREATE INDEX IF NOT EXISTS episodes_task ON episodes (task_id);
CREATE INDEX IF NOT EXISTS episodes_policy ON episodes (policy);
CREATE INDEX IF NOT EXISTS episodes_run ON episodes (run_id);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');
"""
# outcomes written before the truncation field: a trainer's context limit, and episodes a
# wrapper cut while the env still said "continue"
_LEGACY_OUTCOMES = {
    "context_limit": (Outcome.TIMEOUT, Truncation.CONTEXT_LIMIT),
    "continue": (Outcome.TIMEOUT, Truncation.WRAPPER),
}
_INSERT = (
    f"INSERT OR IGNORE INTO episodes ({', '.join(_quote(c) for c in _COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_COLUMNS))})"
)
_READ = (*_SCALAR_FIELDS, "valid", *_JSON_FIELDS)
_SELECT = f"SELECT id, {', '.join(_quote(c) for c in _READ)} FROM episodes"


class EpisodeNotFoundError(AgentGymError, KeyError):
    """No episode has this id in the store."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


@dataclass
class StoredEpisode:
    """One finished episode as plain, JSON-able data.

    Attributes:
        env_id: the registered env id (``agentgym/Sokoban-v0``).
        task_id: the task played.
        split: the task's split.
        difficulty: the task's difficulty.
        policy: the policy id (``oracle``, ``hf:smollm2``).
        policy_version: a checkpoint or model fingerprint; ``""`` if none.
        versions: ``info["versions"]`` (plus ``wrappers`` where a wrapper adds it).
        seeds: ``info["seeds"]``.
        messages: the chat: ``{"role", "content"}``; assistant messages also carry
            ``tool_calls`` (that step's ``info["tool_calls"]``).
        actions: the raw action texts.
        canonical_actions: the env's canonical form of each action.
        state_hashes: the world fingerprint after reset and after each step (``""``
            where the env has none).
        rewards: the step rewards.
        reward_components: each reward component summed over the episode.
        outcome: the final :class:`Outcome` (strings are accepted; the legacy
            ``context_limit`` and ``continue`` read as ``TIMEOUT`` with their truncation).
        valid: False where the episode must be masked from training (env error).
        milestones: the milestones reached, in order.
        cost: the final cost ledger (``info["cost"]``).
        started_at: unix time of the reset.
        ended_at: unix time of the last step.
        priority: a replay or curation priority.
        run_id: groups the episodes of one evaluation or training run.
        extra: anything else (tokens, trial number, sampling settings).
        truncation: why a ``TIMEOUT`` episode was cut (:class:`Truncation`).
    """

    env_id: str
    task_id: str
    split: str
    difficulty: str
    policy: str
    policy_version: str
    versions: dict[str, str]
    seeds: dict[str, int]
    messages: list[dict[str, Any]]
    actions: list[str]
    canonical_actions: list[str]
    state_hashes: list[str]
    rewards: list[float]
    reward_components: dict[str, float]
    outcome: Outcome
    valid: bool
    milestones: list[str]
    cost: dict[str, Any]
    started_at: float
    ended_at: float
    priority: float = 0.0
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    truncation: Truncation = Truncation.NONE

    def __post_init__(self) -> None:
        legacy = _LEGACY_OUTCOMES.get(str(self.outcome))
        if legacy is not None:
            self.outcome, self.truncation = legacy
        self.outcome = Outcome(self.outcome)
        self.truncation = Truncation(self.truncation)

    @classmethod
    def from_summary(
        cls,
        summary: EpisodeSummary,
        *,
        env_id: str,
        policy: str,
        messages: list[dict[str, Any]],
        actions: list[str],
        canonical_actions: list[str] | None = None,
        state_hashes: list[str] | None = None,
        policy_version: str = "",
        split: str | None = None,
        difficulty: str | None = None,
        priority: float = 0.0,
        run_id: str = "",
        extra: dict[str, Any] | None = None,
    ) -> StoredEpisode:
        """The stored form of a folded episode plus what only a recorder knows (the
        chat, the actions, the state hashes); ``split``/``difficulty`` override the
        task's (a trainer's configured split). The LLM user's counters, where the
        episode had one, are kept in ``extra["user_llm"]``."""
        extra = dict(extra or {})
        if summary.user_llm is not None:
            extra["user_llm"] = asdict(summary.user_llm)
        return cls(
            env_id=env_id,
            task_id=summary.task_id,
            split=summary.split if split is None else split,
            difficulty=summary.difficulty if difficulty is None else difficulty,
            policy=policy,
            policy_version=policy_version,
            versions=dict(summary.versions),
            seeds={k: int(v) for k, v in summary.seeds.items() if v is not None},
            messages=messages,
            actions=actions,
            canonical_actions=list(actions) if canonical_actions is None else canonical_actions,
            state_hashes=state_hashes or [],
            rewards=list(summary.rewards),
            reward_components=dict(summary.reward_components),
            outcome=summary.outcome,
            valid=summary.valid,
            milestones=list(summary.milestones),
            cost=dict(summary.cost),
            started_at=summary.started_at,
            ended_at=summary.ended_at,
            priority=priority,
            run_id=run_id,
            extra=extra,
            truncation=summary.truncation,
        )

    @property
    def summary(self) -> EpisodeSummary:
        """The episode as an :class:`EpisodeSummary` (for the shared metrics)."""
        return EpisodeSummary(
            task_id=self.task_id,
            split=self.split,
            difficulty=self.difficulty,
            outcome=self.outcome,
            truncation=self.truncation,
            valid=self.valid,
            steps=self.steps,
            rewards=tuple(self.rewards),
            reward_components=dict(self.reward_components),
            milestones=tuple(self.milestones),
            tool_calls=sum(len(m.get("tool_calls") or ()) for m in self.messages),
            cost=dict(self.cost),
            versions=dict(self.versions),
            seeds=dict(self.seeds),
            started_at=self.started_at,
            ended_at=self.ended_at,
            user_llm=self.extra.get("user_llm"),  # None in episodes without an LLM user
        )

    @property
    def success(self) -> bool:
        """True when a valid episode ended in success."""
        return self.valid and self.outcome is Outcome.SUCCESS

    @property
    def steps(self) -> int:
        """The number of actions taken."""
        return len(self.actions)

    @property
    def episode_return(self) -> float:
        """The undiscounted return (sum of the step rewards)."""
        return float(sum(self.rewards))

    def dedup_key(self) -> str:
        """sha256 of (env_id, task_id, canonical actions, state hashes)."""
        key = [self.env_id, self.task_id, self.canonical_actions, self.state_hashes]
        return hashlib.sha256(_dumps(key).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The fields as a plain dict (what :meth:`from_json` reads back)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["outcome"], out["truncation"] = self.outcome.value, self.truncation.value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredEpisode:
        """Build an episode from :meth:`to_json` output (unknown keys are an error)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(
                f"unknown StoredEpisode fields {unknown}; expected a subset of {sorted(names)}"
            )
        return cls(**data)


class EpisodeSink(Protocol):
    """Where a recorder writes finished episodes: a :class:`TrajectoryStore`, or an
    actor's :class:`~agentgym_envs.distributed.host.EpisodeOutbox` that hands them over."""

    def add(self, ep: StoredEpisode, /) -> int | None:
        """Keep ``ep``; its row id, or None (a duplicate, or no row here)."""
        ...


class TrajectoryStore:
    """Episodes in a SQLite file (created with its tables if missing).

    Args:
        path: the database file.
        synchronous: SQLite's ``synchronous`` setting: ``NORMAL`` survives a killed
            process, ``FULL`` also a power cut (an fsync per commit).
        timeout_s: how long a writer waits for another process's lock.

    Raises:
        ConfigError: the file is not a trajectory store, or one from a newer version.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        timeout_s: float = 30.0,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ConfigError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        # autocommit mode: each statement commits, add_many opens its own transaction
        self._db: sqlite3.Connection | None = sqlite3.connect(
            self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            self._setup(synchronous, timeout_s)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise ConfigError(
                f"{self.path} is not a trajectory store ({exc}); pass a new file name or an "
                "existing store written by TrajectoryStore"
            ) from exc

    def _setup(self, synchronous: str, timeout_s: float) -> None:
        db = self._conn()
        db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous}")
        # one write transaction, so two processes creating the same store do not race
        try:
            db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        found = int(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
        if found == 1:
            self._migrate_1(db)
            found = SCHEMA_VERSION
        if found > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.path} has trajectory-store schema {found}, this agentgym-envs reads "
                f"up to {SCHEMA_VERSION}; upgrade agentgym-envs"
            )

    @staticmethod
    def _migrate_1(db: sqlite3.Connection) -> None:
        """Add the truncation column to a version-1 file (once, whichever process
        opens it first)."""
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in db.execute("PRAGMA table_info(episodes)")}
            if "truncation" not in columns:
                db.execute(
                    "ALTER TABLE episodes ADD COLUMN truncation TEXT NOT NULL DEFAULT 'none'"
                )
            db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    # -- writing -------------------------------------------------------------------------

    def add(self, ep: StoredEpisode) -> int | None:
        """Insert one episode and commit. Returns its row id, or None for a duplicate."""
        row = _row(ep)
        with self._lock:
            cur = self._conn().execute(_INSERT, row)
            return cur.lastrowid if cur.rowcount == 1 else None

    def add_many(self, eps: Iterable[StoredEpisode]) -> list[int | None]:
        """Insert episodes in one transaction; row ids in order (None for duplicates)."""
        rows = [_row(ep) for ep in eps]
        ids: list[int | None] = []
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    cur = db.execute(_INSERT, row)
                    ids.append(cur.lastrowid if cur.rowcount == 1 else None)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return ids

    # -- reading -------------------------------------------------------------------------

    def get(self, episode_id: int) -> StoredEpisode:
        """The episode with this row id.

        Raises:
            EpisodeNotFoundError: no such id.
        """
        with self._lock:
            row = self._conn().execute(f"{_SELECT} WHERE id = ?", (int(episode_id),)).fetchone()
        if row is None:
            raise EpisodeNotFoundError(
                f"no episode {episode_id} in {self.path}; list ids with `agentgym traj ls`"
            )
        return _episode(row)

    def query(
        self,
        *,
        env_id: str | None = None,
        task_id: str | None = None,
        policy: str | None = None,
        run_id: str | None = None,
        outcome: str | None = None,
        success: bool | None = None,
        valid: bool | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[tuple[int, StoredEpisode]]:
        """Episodes matching every filter given (None means any), by row id."""
        where, params = _where(env_id, task_id, policy, run_id, outcome, success, valid)
        order = "DESC" if newest_first else "ASC"
        sql = f"{_SELECT}{where} ORDER BY id {order}"
        if limit is not None:
            sql += f" LIMIT {max(int(limit), 0)}"
        with self._lock:
            rows = self._conn().execute(sql, params).fetchall()
        return [(int(r[0]), _episode(r)) for r in rows]

    def iter_episodes(
        self,
        *,
        env_id: str | None = None,
        task_id: str | None = None,
        policy: str | None = None,
        run_id: str | None = None,
        outcome: str | None = None,
        success: bool | None = None,
        valid: bool | None = None,
        batch: int = 256,
    ) -> Iterator[tuple[int, StoredEpisode]]:
        """Like :meth:`query` but streams in batches (for exports of large stores)."""
        where, params = _where(env_id, task_id, policy, run_id, outcome, success, valid)
        joiner = " AND" if where else " WHERE"
        last = 0
        while True:
            sql = f"{_SELECT}{where}{joiner} id > ? ORDER BY id LIMIT {int(batch)}"
            with self._lock:
                rows = self._conn().execute(sql, [*params, last]).fetchall()
            for r in rows:
                yield int(r[0]), _episode(r)
            if len(rows) < batch:
                return
            last = int(rows[-1][0])

    def count(
        self,
        *,
        env_id: str | None = None,
        task_id: str | None = None,
        policy: str | None = None,
        run_id: str | None = None,
        outcome: str | None = None,
        success: bool | None = None,
        valid: bool | None = None,
    ) -> int:
        """How many episodes match every filter given."""
        where, params = _where(env_id, task_id, policy, run_id, outcome, success, valid)
        with self._lock:
            row = self._conn().execute(f"SELECT COUNT(*) FROM episodes{where}", params).fetchone()
        return int(row[0])

    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        with self._lock:
            row = self._conn().execute("SELECT value FROM meta WHERE key='schema_version'")
            return int(row.fetchone()[0])

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self._lock:
            if self._db is not None and os.getpid() == self._pid:
                self._db.close()
            self._db = None

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise ConfigError(f"the trajectory store {self.path} is closed; open a new one")
        if os.getpid() != self._pid:  # SQLite connections must not cross fork()
            raise ConfigError(
                f"this TrajectoryStore was opened in process {self._pid}; open a new "
                f"TrajectoryStore({str(self.path)!r}) in each process"
            )
        return self._db


# -- rows <-> episodes -------------------------------------------------------------------


def _dumps(value: Any) -> str:
    """``value`` as compact JSON text, valid Unicode whatever it holds (never raises on
    what a step returns: see the module docstring)."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # a key JSON cannot hold (a tuple ...)
        from agentgym_envs.integrations.extras import jsonable

        text = json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False)
    return valid_text(text)  # ensure_ascii=False leaves a lone surrogate as it is


def _row(ep: StoredEpisode) -> list[Any]:
    values = (getattr(ep, name) for name in _SCALAR_FIELDS)
    scalars = [v.value if isinstance(v, StrEnum) else v for v in values]
    scalars = [valid_text(v) if isinstance(v, str) else v for v in scalars]
    derived = [int(ep.success), int(bool(ep.valid)), ep.steps, ep.episode_return]
    blobs = [_dumps(getattr(ep, name)) for name in _JSON_FIELDS]
    return [ep.dedup_key(), *scalars, *derived, *blobs]


def _episode(row: Sequence[Any]) -> StoredEpisode:
    values = dict(zip(_READ, row[1:], strict=True))
    for name in _JSON_FIELDS:
        values[name] = json.loads(values[name])
    values["valid"] = bool(values["valid"])
    return StoredEpisode(**values)


def _where(
    env_id: str | None,
    task_id: str | None,
    policy: str | None,
    run_id: str | None,
    outcome: str | None,
    success: bool | None,
    valid: bool | None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("env_id", env_id),
        ("task_id", task_id),
        ("policy", policy),
        ("run_id", run_id),
        ("outcome", None if outcome is None else str(outcome)),
        ("success", None if success is None else int(success)),
        ("valid", None if valid is None else int(valid)),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
