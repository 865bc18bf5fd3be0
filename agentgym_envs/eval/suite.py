"""Evaluation suites: which envs, splits, difficulties, tasks, trials and wrappers.

A suite is data, a YAML file under ``tasks/suites/`` (or any path)::

    name: smoke
    description: a few tasks of every family, minutes on a CPU
    trials: 2            # trials per task (pass@k / pass^k need several)
    seed: 0              # picks the tasks and seeds the episodes
    entries:
      - name: sokoban-easy
        env: Sokoban
        split: test
        difficulty: easy          # a level, a list of levels, or left out for all
        tasks: 4                  # distinct tasks, drawn from the split by the seed
        env_kwargs: {max_steps: 20}
        wrappers: [loop_detection, {obs_noise: {rate: 0.05}}]

The episodes of a suite are a pure function of the file: the tasks an entry plays are
the first ``tasks`` of its pool ordered by a hash of (seed, entry, task id), and trial
``t`` of a task resets with a seed hashed from the same values plus ``t``. Two policies
evaluated on one suite face the same episodes, and ``agentgym eval --replay`` can
re-run them from the report alone (the report embeds the suite's spec).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.tasks import load_task_set, tasks_root
from agentgym_envs.registration import find

SUITE_KEYS = ("name", "description", "trials", "seed", "entries")
ENTRY_KEYS = ("name", "env", "split", "difficulty", "tasks", "trials", "env_kwargs", "wrappers")


@dataclass(frozen=True)
class Job:
    """One episode to play: a task, its trial number and its reset seed."""

    entry: str
    task_id: str
    trial: int
    seed: int


@dataclass(frozen=True)
class SuiteEntry:
    """One env configuration of a suite."""

    name: str
    env: str
    split: str = "test"
    difficulty: tuple[str, ...] = ()
    tasks: int = 10
    trials: int | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: tuple[Any, ...] = ()

    @property
    def env_id(self) -> str:
        """The id for ``gym.make``: a registered agentgym env, or ``module:Id`` for an
        agentgym env that another package registers when ``module`` is imported."""
        return self.env if ":" in self.env else find(self.env).id

    def task_ids(self, seed: int) -> list[str]:
        """The entry's tasks: its pool ordered by a seeded hash, the first ``tasks``."""
        cls = env_class(self.env)
        task_set = load_task_set(cls.task_file)
        levels = self.difficulty or (None,)
        pool = [t.id for level in levels for t in task_set.pool(self.split, level)]
        pool.sort(key=lambda tid: _digest(seed, self.name, tid))
        if len(pool) < self.tasks:
            raise ConfigError(
                f"suite entry {self.name!r} asks for {self.tasks} tasks but {self.env} has only "
                f"{len(pool)} in split {self.split!r} {list(self.difficulty) or ''}; lower `tasks`"
            )
        return pool[: self.tasks]

    def jobs(self, seed: int, trials: int) -> list[Job]:
        """Every episode of the entry, task by task and trial by trial."""
        n = self.trials or trials
        return [
            Job(self.name, tid, t, int(_digest(seed, self.name, tid, t)[:8], 16))
            for tid in self.task_ids(seed)
            for t in range(n)
        ]


@dataclass(frozen=True)
class Suite:
    """A named list of entries with default trials and a seed."""

    name: str
    entries: tuple[SuiteEntry, ...]
    trials: int = 1
    seed: int = 0
    description: str = ""
    path: str = ""

    def spec(self) -> dict[str, Any]:
        """Plain data that rebuilds the suite (:func:`suite_from_spec`)."""
        entries = []
        for e in self.entries:
            d = asdict(e)
            d["difficulty"] = list(e.difficulty)
            d["wrappers"] = list(e.wrappers)
            d["env_kwargs"] = dict(e.env_kwargs)
            entries.append(d)
        return {
            "name": self.name,
            "description": self.description,
            "trials": self.trials,
            "seed": self.seed,
            "entries": entries,
        }

    @property
    def version(self) -> str:
        """A content hash of the spec: it changes whenever the episodes would."""
        blob = json.dumps(self.spec(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def entry(self, name: str) -> SuiteEntry:
        for e in self.entries:
            if e.name == name:
                return e
        names = [e.name for e in self.entries]
        raise ConfigError(f"suite {self.name!r} has no entry {name!r}.{did_you_mean(name, names)}")

    def with_trials(self, trials: int) -> Suite:
        """The same suite with every entry at ``trials`` trials per task."""
        if trials < 1:
            raise ConfigError(f"trials must be >= 1, got {trials}")
        entries = tuple(SuiteEntry(**{**_entry_fields(e), "trials": None}) for e in self.entries)
        return Suite(self.name, entries, trials, self.seed, self.description, self.path)


def env_class(env: str) -> Any:
    """The env class behind a suite entry's ``env``."""
    import importlib

    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    if ":" not in env:
        return load_env_creator(find(env).entry_point)
    module, env_id = env.split(":", 1)
    try:
        importlib.import_module(module)
        entry_point = gym.spec(env_id).entry_point
    except (ImportError, gym.error.Error) as exc:
        raise ConfigError(
            f"cannot load env {env!r} ({exc}); use a registered agentgym env name "
            "(`agentgym list`) or 'module:Id' where importing module registers Id"
        ) from None
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def _entry_fields(e: SuiteEntry) -> dict[str, Any]:
    return {k: getattr(e, k) for k in ENTRY_KEYS}


def _digest(*parts: Any) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def suites_dir() -> Path:
    return tasks_root() / "suites"


def available_suites() -> list[str]:
    folder = suites_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_suite(name_or_path: str | Path) -> Suite:
    """Load a shipped suite by name (``smoke``) or a YAML file by path.

    Raises:
        ConfigError: unknown suite (with the closest name), bad YAML, or a bad field.
    """
    try:
        import yaml
    except ImportError:  # pragma: no cover - the eval extra is part of every install recipe
        raise ConfigError(
            "suites are YAML: install the eval extra, pip install 'agentgym-envs[eval]'"
        ) from None
    path = Path(name_or_path)
    if not path.suffix:
        path = suites_dir() / f"{name_or_path}.yaml"
        if not path.is_file():
            known = available_suites()
            raise ConfigError(
                f"unknown suite {str(name_or_path)!r}.{did_you_mean(str(name_or_path), known)} "
                f"Shipped suites: {known}; or pass a path to a .yaml file"
            )
    if not path.is_file():
        raise ConfigError(f"suite file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"suite file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"suite file {path} must hold a mapping with 'name' and 'entries'")
    suite = suite_from_spec(data)
    return Suite(suite.name, suite.entries, suite.trials, suite.seed, suite.description, str(path))


def suite_from_spec(data: Mapping[str, Any]) -> Suite:
    """Build a suite from plain data (a parsed YAML file or a report's ``suite.spec``)."""
    _check_keys(data, SUITE_KEYS, "suite")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("a suite needs a non-empty string 'name'")
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, Sequence) or not raw_entries:
        raise ConfigError(f"suite {name!r} needs a non-empty list 'entries'")
    entries = tuple(_entry(name, i, e) for i, e in enumerate(raw_entries))
    names = [e.name for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"suite {name!r} has duplicate entry names {dupes}; rename them")
    trials = _positive(data.get("trials", 1), f"suite {name!r} trials")
    seed = data.get("seed", 0)
    if not isinstance(seed, int):
        raise ConfigError(f"suite {name!r} seed must be an int, got {seed!r}")
    return Suite(name, entries, trials, seed, str(data.get("description", "")))


def _entry(suite: str, index: int, data: Any) -> SuiteEntry:
    where = f"suite {suite!r} entry {index}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping with at least 'env'")
    _check_keys(data, ENTRY_KEYS, where)
    if "env" not in data:
        raise ConfigError(f"{where} needs 'env' (an env name or id, e.g. Sokoban)")
    env = str(data["env"])
    short = env_class(env).name  # raises with the closest registered name
    split = str(data.get("split", "test"))
    if split not in ("train", "test", "ood"):
        raise ConfigError(f"{where}: split must be train, test or ood, got {split!r}")
    difficulty = data.get("difficulty") or ()
    levels = (difficulty,) if isinstance(difficulty, str) else tuple(map(str, difficulty))
    wrappers = data.get("wrappers") or ()
    if isinstance(wrappers, str | Mapping):
        wrappers = (wrappers,)
    env_kwargs = data.get("env_kwargs") or {}
    if not isinstance(env_kwargs, Mapping):
        raise ConfigError(f"{where}: env_kwargs must be a mapping, got {env_kwargs!r}")
    trials = data.get("trials")
    return SuiteEntry(
        name=str(data.get("name") or f"{short.lower()}-{split}"),
        env=env,
        split=split,
        difficulty=levels,
        tasks=_positive(data.get("tasks", 10), f"{where} tasks"),
        trials=None if trials is None else _positive(trials, f"{where} trials"),
        env_kwargs=dict(env_kwargs),
        wrappers=tuple(wrappers),
    )


def _check_keys(data: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key {key!r}.{did_you_mean(str(key), allowed)} "
                f"Allowed: {list(allowed)}"
            )


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{what} must be a positive int, got {value!r}")
    return value
