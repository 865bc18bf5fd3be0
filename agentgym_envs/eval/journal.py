"""What an evaluation has finished so far, so that a stopped run can report and resume.

An :class:`EpisodeJournal` keeps every finished :class:`EpisodeResult` and, with a path,
appends each as one JSON line (``episodes.jsonl`` in the run's folder) as soon as the
episode ends, flushed, so a killed run keeps every finished line. A resumed run loads
the file and skips the jobs it holds. A line cut off by a kill is skipped with a warning:
its episode is simply played again.

The journal holds the evaluator's own summary of each episode (tokens, violations, env
errors ...), which the trajectory store does not: a store row is the episode's chat,
and an env error never reaches the store.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.episode import EpisodeSummary
from agentgym_envs.core.errors import ConfigError

if TYPE_CHECKING:
    from agentgym_envs.eval.suite import Job

logger = logging.getLogger(__name__)

JOURNAL_FILE = "episodes.jsonl"

JobKey = tuple[str, str, str, int, int]
"""(policy, entry, task id, trial, reset seed): one job of one policy (the task id is
``""`` for a job whose task the env draws from the seed)."""


@dataclass(frozen=True)
class EpisodeResult:
    """One evaluated episode: which job it was, and how it went.

    Attributes:
        policy: the policy spec (or, for a policy built by a factory, its name).
        entry: the suite entry.
        env_id: the env played.
        task_id: the task played.
        trial: the trial number of the task.
        seed: the reset seed.
        episode: the episode (outcome, return, costs, tokens ...).
        episode_id: the trajectory-store row, where one is known.
        drawn: the job named no task: the env drew ``task_id`` from the seed.
    """

    policy: str
    entry: str
    env_id: str
    task_id: str
    trial: int
    seed: int
    episode: EpisodeSummary
    episode_id: int | None = None
    drawn: bool = False

    @property
    def key(self) -> JobKey:
        """The journal's key of the job this episode played."""
        task = "" if self.drawn else self.task_id
        return (self.policy, self.entry, task, self.trial, self.seed)

    @property
    def success(self) -> bool:
        """A valid episode that ended in success."""
        return self.episode.success

    def to_json(self) -> dict[str, Any]:
        """One row of the report's ``episodes``."""
        ep = self.episode
        return {
            "policy": self.policy,
            "entry": self.entry,
            "env_id": self.env_id,
            "task_id": self.task_id,
            "trial": self.trial,
            "seed": self.seed,
            "outcome": ep.outcome.value,
            "truncation": ep.truncation.value,
            "valid": ep.valid,
            "steps": ep.steps,
            "reward": ep.reward,
            "reward_components": dict(ep.reward_components),
            "milestones": list(ep.milestones),
            "tool_calls": ep.tool_calls,
            "tokens_in": ep.tokens_in,
            "tokens_out": ep.tokens_out,
            "llm_failures": ep.llm_failures,
            "cost": ep.cost_total,
            "faults": ep.faults,
            "violations": ep.violations,
            "attack": dict(ep.attack),
            "loops": ep.loops,
            "wall_ms": ep.wall_ms,
            "versions": dict(ep.versions),
            "seeds": dict(ep.seeds),
            "error": ep.error,
            "episode_id": self.episode_id,
            "success": self.success,
        }


def job_key(policy: str, job: Job) -> JobKey:
    """The key of ``job`` played by ``policy`` (a drawn task has no id before its reset,
    so its job is told apart by its seed)."""
    return (policy, job.entry, job.task_id, job.trial, job.seed)


class EpisodeJournal:
    """The finished episodes of one evaluation, and the wall time of each entry and
    each policy (whose entries play side by side, so its time is not their sum).

    Args:
        path: the JSONL file to append to (None: kept in memory only).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._results: dict[JobKey, EpisodeResult] = {}
        self._wall: dict[tuple[str, str], float] = {}
        self._policy_wall: dict[str, float] = {}

    def __len__(self) -> int:
        return len({id(result) for result in self._results.values()})

    def has(self, policy: str, job: Job) -> bool:
        """Whether ``job`` played by ``policy`` has finished."""
        return job_key(policy, job) in self._results

    def results(self, policy: str, jobs: Sequence[Job]) -> list[EpisodeResult]:
        """The finished episodes among ``jobs`` of ``policy``, in job order."""
        found = (self._results.get(job_key(policy, job)) for job in jobs)
        return [r for r in found if r is not None]

    def wall_s(self, policy: str, entry: str) -> float:
        """Seconds spent on ``entry`` with ``policy`` up to its last finished episode, over
        every run that recorded into this journal."""
        return self._wall.get((policy, entry), 0.0)

    def set_wall_s(self, policy: str, entry: str, seconds: float) -> None:
        self._wall[(policy, entry)] = seconds

    def policy_wall_s(self, policy: str) -> float:
        """Seconds spent playing ``policy`` (all its entries) over every run that recorded
        into this journal."""
        return self._policy_wall.get(policy, 0.0)

    def set_policy_wall_s(self, policy: str, seconds: float) -> None:
        self._policy_wall[policy] = seconds

    def add(self, result: EpisodeResult, wall_s: float, policy_wall_s: float = 0.0) -> None:
        """Record a finished episode; ``wall_s``: its entry's time so far;
        ``policy_wall_s``: its policy's (default: its entry's)."""
        self._results[result.key] = result
        self._wall[(result.policy, result.entry)] = wall_s
        policy_wall_s = policy_wall_s or wall_s
        self._policy_wall[result.policy] = policy_wall_s
        if self.path is None:
            return
        line = {
            "policy": result.policy,
            "entry": result.entry,
            "env_id": result.env_id,
            "task_id": result.task_id,
            "trial": result.trial,
            "seed": result.seed,
            "episode_id": result.episode_id,
            "drawn": result.drawn,
            "entry_wall_s": wall_s,
            "policy_wall_s": policy_wall_s,
            "episode": result.episode.to_json(),
        }
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            handle.flush()

    @classmethod
    def load(cls, path: str | Path) -> EpisodeJournal:
        """The journal at ``path`` (empty if the file does not exist), appending to it."""
        journal = cls(path)
        if journal.path is not None and journal.path.exists():
            for row in _rows(journal.path):
                journal._restore(row)
            _end_line(journal.path)
        return journal

    def _restore(self, row: dict[str, Any]) -> None:
        try:
            result = EpisodeResult(
                policy=row["policy"],
                entry=row["entry"],
                env_id=row["env_id"],
                task_id=row["task_id"],
                trial=int(row["trial"]),
                seed=int(row["seed"]),
                episode=EpisodeSummary.from_json(row["episode"]),
                episode_id=row.get("episode_id"),
                drawn=bool(row.get("drawn", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"{self.path} holds a line that is not a finished episode ({exc}); it must "
                "be the episodes.jsonl that `agentgym eval` wrote. Start a new run with "
                "another --out"
            ) from exc
        self._results[result.key] = result
        if "drawn" not in row:  # from before the field: the job may have drawn its task
            legacy = (result.policy, result.entry, "", result.trial, result.seed)
            self._results.setdefault(legacy, result)
        wall = float(row.get("entry_wall_s", 0.0))
        entry = (result.policy, result.entry)
        self._wall[entry] = max(self._wall.get(entry, 0.0), wall)
        if "policy_wall_s" in row:
            policy_wall = float(row["policy_wall_s"] or 0.0)
            self._policy_wall[result.policy] = max(
                self._policy_wall.get(result.policy, 0.0), policy_wall
            )
        else:  # a journal from before entries played side by side: one after another
            self._policy_wall[result.policy] = sum(
                w for (policy, _), w in self._wall.items() if policy == result.policy
            )


def _end_line(path: Path) -> None:
    """End a line cut off by a kill, so the next one is not glued to it."""
    if path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) != b"\n":
            handle.write(b"\n")


def _rows(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # cut off by a kill: the episode is played again
                logger.warning("skipping unreadable line %d of %s", number, path)
                continue
            if isinstance(row, dict):
                yield row


__all__ = ["JOURNAL_FILE", "EpisodeJournal", "job_key"]
