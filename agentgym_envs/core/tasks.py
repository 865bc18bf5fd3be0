"""Tasks as data: the task record, task-set files under ``tasks/`` and their loading.

A task set is a JSONL file: a header line, then one task per line. Each task carries
its id, split, difficulty, instruction, generation seed, an initial-state recipe
(``spec``, family-defined), the oracle's validated solution and a step budget. Its
version (``info["versions"]["task_set"]``) is the hash of the file's bytes, so a changed
task set can never pass for the old one.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError, TaskNotFoundError, did_you_mean

SPLITS = ("train", "test", "ood")
"""train: in-distribution; test: held-out seeds; ood: unseen compositions or perturbations."""

DIFFICULTIES = ("easy", "medium", "hard")
FORMAT = "agentgym-tasks/1"
DEFAULT_COUNTS = {"train": 200, "test": 50, "ood": 50}


@dataclass(frozen=True, slots=True)
class Task:
    """One task.

    Attributes:
        id: unique within the task set, e.g. ``sokoban-medium-test-0007``.
        split: ``train``, ``test`` or ``ood``.
        difficulty: a curriculum level (``easy``, ``medium``, ``hard``).
        instruction: what the agent is asked to do.
        seed: the generator seed that produced the task.
        spec: the initial-state recipe, family-defined plain data.
        solution: the oracle's action texts, validated to succeed.
        max_steps: the step budget of an episode.
    """

    id: str
    split: str
    difficulty: str
    instruction: str
    seed: int
    spec: Mapping[str, Any]
    solution: tuple[str, ...]
    max_steps: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "split": self.split,
            "difficulty": self.difficulty,
            "instruction": self.instruction,
            "seed": self.seed,
            "spec": self.spec,
            "solution": list(self.solution),
            "max_steps": self.max_steps,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        return cls(
            id=data["id"],
            split=data["split"],
            difficulty=data["difficulty"],
            instruction=data["instruction"],
            seed=int(data["seed"]),
            spec=data["spec"],
            solution=tuple(data["solution"]),
            max_steps=int(data["max_steps"]),
        )


@dataclass(frozen=True)
class TaskSet:
    """The tasks of one env, indexed by id and by (split, difficulty)."""

    name: str
    version: str
    header: Mapping[str, Any]
    tasks: tuple[Task, ...]
    _by_id: dict[str, Task] = field(init=False, repr=False)
    _pools: dict[tuple[str, str | None], tuple[Task, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_id = {t.id: t for t in self.tasks}
        if len(by_id) != len(self.tasks):
            raise ConfigError(f"task set {self.name!r} has duplicate task ids; rebuild it")
        object.__setattr__(self, "_by_id", by_id)
        object.__setattr__(self, "_pools", {})

    @classmethod
    def from_tasks(cls, name: str, tasks: Iterable[Task]) -> TaskSet:
        """A task set from task objects (its version hashes their content)."""
        items = tuple(tasks)
        if not items:
            raise ConfigError(f"{name}: tasks must not be empty")
        blob = json.dumps([t.to_json() for t in items], sort_keys=True).encode()
        version = hashlib.sha256(blob).hexdigest()[:12]
        return cls(name=name, version=version, header={"format": FORMAT, "env": name}, tasks=items)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(s for s in SPLITS if any(t.split == s for t in self.tasks))

    @property
    def difficulties(self) -> tuple[str, ...]:
        seen = dict.fromkeys(t.difficulty for t in self.tasks)
        return tuple(d for d in DIFFICULTIES if d in seen) + tuple(
            d for d in seen if d not in DIFFICULTIES
        )

    def get(self, task_id: str) -> Task:
        """The task with this id.

        Raises:
            TaskNotFoundError: with the closest id as a suggestion.
        """
        task = self._by_id.get(task_id)
        if task is None:
            like = self._like(task_id)
            hint = did_you_mean(task_id, [t.id for t in like]) or did_you_mean(task_id, self._by_id)
            raise TaskNotFoundError(
                f"no task {task_id!r} in task set {self.name!r}.{hint}"
                f" Ids look like {like[0].id!r}; `agentgym list` shows the counts."
            )
        return task

    def _like(self, task_id: str) -> tuple[Task, ...]:
        """The tasks of the split (and difficulty) that ``task_id`` names, or all of them:
        a wrong test id is matched with test ids first, since a train id a few characters
        off would have a user evaluate on a training task."""
        words = task_id.lower().split("-")
        for split in self.splits:
            if split in words:
                same = [t for t in self.tasks if t.split == split]
                return tuple([t for t in same if t.difficulty in words] or same)
        return self.tasks

    def pool(self, split: str, difficulty: str | None = None) -> tuple[Task, ...]:
        """Tasks of a split, optionally of one difficulty, in file order.

        Raises:
            TaskNotFoundError: the split or difficulty does not exist.
        """
        key = (split, difficulty)
        found = self._pools.get(key)
        if found is not None:
            return found
        if split not in SPLITS:
            raise TaskNotFoundError(
                f"unknown split {split!r}; use one of {SPLITS}.{did_you_mean(split, SPLITS)}"
            )
        if difficulty is not None and difficulty not in self.difficulties:
            raise TaskNotFoundError(
                f"unknown difficulty {difficulty!r} for {self.name}; use one of "
                f"{self.difficulties}.{did_you_mean(difficulty, self.difficulties)}"
            )
        found = tuple(
            t
            for t in self.tasks
            if t.split == split and (difficulty is None or t.difficulty == difficulty)
        )
        if not found:
            raise TaskNotFoundError(f"task set {self.name!r} has no {split}/{difficulty} tasks")
        self._pools[key] = found
        return found

    def counts(self) -> dict[str, dict[str, int]]:
        """Task counts by split, then difficulty."""
        out: dict[str, dict[str, int]] = {}
        for t in self.tasks:
            out.setdefault(t.split, {}).setdefault(t.difficulty, 0)
            out[t.split][t.difficulty] += 1
        return out


def tasks_root() -> Path:
    """Where task files live: inside the installed package, or ``tasks/`` in a checkout."""
    packaged = Path(str(resources.files("agentgym_envs"))) / "_data" / "tasks"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "tasks"
    if checkout.is_dir():
        return checkout
    raise ConfigError(
        f"no task files found at {packaged} or {checkout}; reinstall agentgym-envs "
        "(pip install agentgym-envs) or run from a source checkout"
    )


def task_path(relative_path: str, task_dir: str | Path | None = None) -> Path:
    """Where a task file lives: ``<task_dir>/<relative_path>`` for an env that keeps its
    tasks next to its own code (a third-party env), else under :func:`tasks_root`."""
    return Path(task_dir) / relative_path if task_dir is not None else tasks_root() / relative_path


@cache
def load_task_set(relative_path: str, task_dir: str | Path | None = None) -> TaskSet:
    """Load (once per process) the task set at ``tasks/<relative_path>``, or at
    ``<task_dir>/<relative_path>`` when ``task_dir`` is given (see :func:`task_path`)."""
    path = task_path(relative_path, task_dir)
    if not path.is_file():
        raise ConfigError(
            f"task file {path} is missing; build it with `agentgym tasks build` "
            "or reinstall the package"
        )
    raw = path.read_bytes()
    text = gzip.decompress(raw) if path.suffix == ".gz" else raw  # a large set is kept packed
    lines = text.decode().splitlines()
    header = json.loads(lines[0])
    if header.get("format") != FORMAT:
        raise ConfigError(f"{path}: expected format {FORMAT!r}, got {header.get('format')!r}")
    tasks = tuple(Task.from_json(json.loads(line)) for line in lines[1:] if line.strip())
    version = hashlib.sha256(raw).hexdigest()[:12]
    return TaskSet(name=str(header["env"]), version=version, header=header, tasks=tasks)


def write_task_set(
    path: Path, env_name: str, header: Mapping[str, Any], tasks: Iterable[Task]
) -> int:
    """Write a task-set file (gzip-packed where its name ends in ``.gz``, byte for byte the
    same for the same tasks); returns the number of tasks written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"format": FORMAT, "env": env_name, **header}, sort_keys=True)]
    rows.extend(json.dumps(t.to_json(), sort_keys=True, separators=(",", ":")) for t in tasks)
    data = ("\n".join(rows) + "\n").encode()
    packed = path.suffix == ".gz"
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0) if packed else data)
    return len(rows) - 1


SPLIT_SEED_BASE = {"train": 0, "test": 1_000_000, "ood": 2_000_000}


def task_seed(split: str, difficulty_index: int, index: int) -> int:
    """The generation seed of the ``index``-th task of a split and difficulty.

    Seed ranges of splits are disjoint, so test tasks are held out from train by seed.
    """
    return SPLIT_SEED_BASE[split] + difficulty_index * 100_000 + index


def generate_tasks(
    generate: Callable[[int, str, str], Task | None],
    counts: Mapping[str, int],
    difficulties: Sequence[str] = DIFFICULTIES,
    *,
    key: Callable[[Task], Any],
    max_tries: int = 50,
    workers: int = 1,
) -> list[Task]:
    """Generate a task set with ``counts[split]`` unique tasks per split and difficulty.

    ``generate(seed, difficulty, split)`` returns a validated task or None (rejected).
    Tasks whose ``key`` (their initial state) repeats one already generated, in any
    split, are skipped, so no test task is a copy of a train task. With ``workers > 1``
    candidates are generated in that many processes (``generate`` must pickle) and
    accepted in seed order, so the result is the same as with one worker.
    """
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    seen: set[Any] = set()
    out: list[Task] = []
    pool = (
        ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        if workers > 1
        else None
    )
    try:
        for split in SPLITS:
            for d_index, difficulty in enumerate(difficulties):
                made, misses = 0, 0
                limit = max_tries * max(1, counts[split])
                for task in _candidates(generate, split, d_index, difficulty, pool, workers):
                    if made >= counts[split]:
                        break
                    if task is None or key(task) in seen:
                        misses += 1
                        if misses > limit:
                            raise ConfigError(
                                f"could not generate {counts[split]} unique {split}/"
                                f"{difficulty} tasks (made {made}); widen the generator's "
                                "parameters"
                            )
                        continue
                    seen.add(key(task))
                    out.append(task)
                    made += 1
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return out


def _candidates(
    generate: Callable[[int, str, str], Task | None],
    split: str,
    d_index: int,
    difficulty: str,
    pool: ProcessPoolExecutor | None,
    workers: int,
) -> Iterator[Task | None]:
    """Candidates for seeds 0, 1, 2, ... of one split and difficulty, in seed order."""
    index = 0
    while True:
        if pool is None:
            yield generate(task_seed(split, d_index, index), difficulty, split)
            index += 1
            continue
        seeds = [task_seed(split, d_index, index + i) for i in range(workers * 4)]
        index += len(seeds)
        yield from pool.map(partial(_call, generate, difficulty, split), seeds)


def _call(
    generate: Callable[[int, str, str], Task | None], difficulty: str, split: str, seed: int
) -> Task | None:
    return generate(seed, difficulty, split)


def build_task_set(
    env_cls: Any, counts: Mapping[str, int] | None = None, *, workers: int = 1
) -> list[Task]:
    """Generate and validate the task set of an env class.

    ``env_cls`` provides ``generate_task(seed, difficulty, split)``,
    ``validate_task(task)`` and ``task_key(task)`` (see ``AgentEnv``). A generated task
    is kept only if it validates: its stored oracle solution succeeds, doing nothing
    fails and its initial state is not already solved.
    """

    wanted = counts or getattr(env_cls, "task_counts", DEFAULT_COUNTS)
    generate = partial(_generate_valid, env_cls)
    return generate_tasks(generate, wanted, key=env_cls.task_key, workers=workers)


def _generate_valid(env_cls: Any, seed: int, difficulty: str, split: str) -> Task | None:
    task: Task | None = env_cls.generate_task(seed, difficulty, split)
    if task is None:
        return None
    problem = env_cls.validate_task(task)
    if problem is not None:
        raise ConfigError(f"generated task {task.id} is invalid: {problem}")
    return task


def grow_split(
    env_cls: Any,
    task_set: TaskSet,
    split: str,
    difficulty: str,
    total: int,
    *,
    max_tries: int = 50,
) -> TaskSet:
    """``task_set`` with ``split``/``difficulty`` grown to ``total`` tasks.

    The set's own tasks stay first and unchanged (held-out splits are exactly as
    shipped); the new ones come from the env class's generator at the split's next seeds
    (after the largest seed the set uses there), each validated like a shipped task and
    none sharing an initial state (``task_key``) with any task of the set, in any split.
    The same arguments always give the same tasks.

    Raises:
        ConfigError: the split or difficulty is unknown, or the generator cannot make
            ``total`` unique tasks (the error says how many it made).
    """
    if split not in SPLITS or difficulty not in DIFFICULTIES:
        raise ConfigError(
            f"grow_split needs a split of {SPLITS} and a difficulty of {DIFFICULTIES}, "
            f"got {split!r}/{difficulty!r}"
        )
    own = [t for t in task_set.tasks if t.split == split and t.difficulty == difficulty]
    if total <= len(own):
        return task_set
    seen = {env_cls.task_key(t) for t in task_set.tasks}
    d_index = DIFFICULTIES.index(difficulty)
    base = task_seed(split, d_index, 0)
    index = max((t.seed - base + 1 for t in own), default=0)
    grown: list[Task] = []
    misses, limit = 0, max_tries * total
    while len(own) + len(grown) < total:
        task = _generate_valid(env_cls, task_seed(split, d_index, index), difficulty, split)
        index += 1
        if task is None or env_cls.task_key(task) in seen:
            misses += 1
            if misses > limit:
                raise ConfigError(
                    f"could not grow {split}/{difficulty} of {task_set.name} to {total} unique "
                    f"tasks (made {len(own) + len(grown)}); ask for fewer"
                )
            continue
        seen.add(env_cls.task_key(task))
        grown.append(task)
    grown_by = {"split": split, "difficulty": difficulty, "shipped": len(own), "to": total}
    header = {**task_set.header, "grown": grown_by}
    blob = json.dumps([t.to_json() for t in grown], sort_keys=True).encode()
    version = hashlib.sha256(task_set.version.encode() + blob).hexdigest()[:12]
    return TaskSet(
        name=task_set.name, version=version, header=header, tasks=(*task_set.tasks, *grown)
    )
