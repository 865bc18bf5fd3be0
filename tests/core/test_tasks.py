"""Task sets: lookups with suggestions, disjoint splits, stored files match their generator."""

import pytest
from gymnasium.envs.registration import load_env_creator

from agentgym_envs.core import SPLITS, TaskNotFoundError, load_task_set
from agentgym_envs.registration import ENVS

CLASSES = {e.entry_point: load_env_creator(e.entry_point) for e in ENVS}


# RepoFixReal builds its tasks per project (build_tasks), not from a seed alone:
# tests/sandbox/test_repofix_real.py builds them again and compares
@pytest.mark.parametrize(
    "cls", [c for c in CLASSES.values() if not hasattr(c, "build_tasks")], ids=lambda c: c.name
)
def test_stored_tasks_are_what_the_generator_makes(cls) -> None:
    tasks = load_task_set(cls.task_file)
    for split in SPLITS:
        for difficulty in tasks.difficulties:
            for task in tasks.pool(split, difficulty)[:3]:
                assert cls.generate_task(task.seed, difficulty, split) == task


@pytest.mark.parametrize("cls", CLASSES.values(), ids=lambda c: c.name)
def test_splits_are_disjoint_and_complete(cls) -> None:
    tasks = load_task_set(cls.task_file)
    assert len(tasks.difficulties) >= 3
    keys = {split: {cls.task_key(t) for t in tasks.pool(split)} for split in SPLITS}
    assert not keys["train"] & keys["test"]
    assert not keys["train"] & keys["ood"]
    assert not keys["test"] & keys["ood"]
    # RepoFixReal's shipped set is a build of 730 tasks (docs/results/repofix_real):
    # every split and level holds some, its smallest (test, hard) a single task
    least = 1 if cls.name == "RepoFixReal" else 50
    for split, counts in tasks.counts().items():
        assert split in SPLITS and min(counts.values()) >= least, (split, counts)


def test_lookups_suggest_the_closest_name() -> None:
    tasks = load_task_set("games/sokoban.jsonl")
    some = tasks.pool("test")[0]
    assert tasks.get(some.id) is some
    with pytest.raises(TaskNotFoundError, match="Did you mean"):
        tasks.get(some.id + "x")
    with pytest.raises(TaskNotFoundError, match="Did you mean 'medium'"):
        tasks.pool("test", "meduim")
    with pytest.raises(TaskNotFoundError, match="Did you mean 'train'"):
        tasks.pool("trian")


def test_the_suggested_task_id_is_the_nearest() -> None:
    """Ids share most characters, so difflib's similarity alone suggested
    frozenlake-easy-test-1000047 for frozenlake-easy-test-1000071 (two edits away, where
    frozenlake-easy-test-1000001 is one)."""
    from agentgym_envs.core.errors import closest

    tasks = load_task_set("games/frozenlake.jsonl")
    ids = [t.id for t in tasks.tasks]
    assert {"frozenlake-easy-test-1000001", "frozenlake-easy-test-1000047"} <= set(ids)
    with pytest.raises(TaskNotFoundError, match="Did you mean") as raised:
        tasks.get("frozenlake-easy-test-1000071")
    suggested = str(raised.value).split("Did you mean '")[1].split("'")[0]
    # one digit off (1000001, 1000011, ... 1000041 all are), not 1000047
    assert suggested[:-2] == "frozenlake-easy-test-10000" and suggested[-1] == "1", suggested
    for typo, meant in [
        ("frozenlake-easy-tset-1000017", "frozenlake-easy-test-1000017"),  # swapped letters
        ("frozenlake-easy-test-100017", "frozenlake-easy-test-1000017"),  # a digit left out
        ("FrozenLake-Easy-Test-1000017", "frozenlake-easy-test-1000017"),  # case
        ("frozenlake-easy-trian-17", "frozenlake-easy-train-17"),
    ]:
        assert closest(typo, ids) == meant, typo
    near, far = "frozenlake-easy-test-1000001", "frozenlake-easy-test-1000047"
    assert closest("frozenlake-easy-test-1000071", [far, near]) == near
    assert closest("zzz", ids) is None and closest("x", []) is None


@pytest.mark.slow  # a minute of subprocesses; the stored-tasks test checks regeneration
def test_generators_do_not_depend_on_string_hashing() -> None:
    """Set iteration order changes with PYTHONHASHSEED; generators must not follow it."""
    import subprocess
    import sys

    code = (
        "import hashlib, json\n"
        "from gymnasium.envs.registration import load_env_creator\n"
        "from agentgym_envs.registration import ENVS\n"
        "out = []\n"
        "for e in {e.entry_point: e for e in ENVS}.values():\n"
        "    cls = load_env_creator(e.entry_point)\n"
        "    for split, base in (('train', 0), ('ood', 2000000)):\n"
        "        for d, off in (('easy', 0), ('hard', 200000)):\n"
        "            for s in range(base + off, base + off + 3):\n"
        "                t = cls.generate_task(s, d, split)\n"
        "                out.append(None if t is None else t.to_json())\n"
        "print(hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("0", "1")
    }
    assert len(digests) == 1


def _toy_generate(seed: int, difficulty: str, split: str):
    from agentgym_envs.core import Task

    if seed % 3 == 0:  # rejected draws
        return None
    key = seed % 7  # repeats: only the first of each key is kept
    return Task(f"toy-{split}-{difficulty}-{seed}", split, difficulty, "x", seed, {"k": key}, (), 5)


def test_parallel_generation_gives_the_same_task_set() -> None:
    from agentgym_envs.core.tasks import generate_tasks

    counts = {"train": 2, "test": 1, "ood": 1}
    key = lambda t: (t.split, t.difficulty, t.spec["k"])  # noqa: E731
    one = generate_tasks(_toy_generate, counts, ("easy", "hard"), key=key)
    two = generate_tasks(_toy_generate, counts, ("easy", "hard"), key=key, workers=2)
    assert one == two and len(one) == 8
    assert all(t.seed % 3 for t in one)


def test_grow_split_adds_validated_unique_tasks_and_keeps_every_shipped_task() -> None:
    import gymnasium as gym

    from agentgym_envs.core.tasks import grow_split
    from agentgym_envs.games.frozenlake import FrozenLakeEnv

    env = gym.make("agentgym/FrozenLake-v0")
    shipped = env.unwrapped.task_set
    env.close()
    own = shipped.pool("train", "easy")
    grown = grow_split(FrozenLakeEnv, shipped, "train", "easy", len(own) + 40)
    assert grown.tasks[: len(shipped.tasks)] == shipped.tasks  # held-out splits unchanged
    new = grown.tasks[len(shipped.tasks) :]
    assert len(new) == 40 and all(t.split == "train" and t.difficulty == "easy" for t in new)
    keys = [FrozenLakeEnv.task_key(t) for t in grown.tasks]
    assert len(set(keys)) == len(keys)  # no new task copies a test (or any) task
    assert min(t.seed for t in new) > max(t.seed for t in own)
    assert all(FrozenLakeEnv.validate_task(t) is None for t in new)
    again = grow_split(FrozenLakeEnv, shipped, "train", "easy", len(own) + 40)
    assert again.tasks == grown.tasks and again.version == grown.version != shipped.version
    assert grow_split(FrozenLakeEnv, shipped, "train", "easy", len(own)) is shipped


def test_grow_split_names_the_fix_when_it_cannot_grow() -> None:
    import gymnasium as gym

    from agentgym_envs.core.errors import ConfigError
    from agentgym_envs.core.tasks import grow_split
    from agentgym_envs.games.frozenlake import FrozenLakeEnv

    env = gym.make("agentgym/FrozenLake-v0")
    shipped = env.unwrapped.task_set
    env.close()
    with pytest.raises(ConfigError, match="difficulty"):
        grow_split(FrozenLakeEnv, shipped, "train", "trivial", 500)
    with pytest.raises(ConfigError, match="ask for fewer"):
        grow_split(FrozenLakeEnv, shipped, "train", "easy", 10**6, max_tries=0)


def test_a_missing_id_is_matched_within_its_own_split_first() -> None:
    tasks = load_task_set("games/sokoban.jsonl")
    assert tasks.get("sokoban-easy-train-3").split == "train"  # fewer edits away than any test id
    with pytest.raises(TaskNotFoundError) as raised:
        tasks.get("sokoban-easy-test-3")
    message = str(raised.value)
    suggested = tasks.get(message.split("Did you mean '")[1].split("'")[0])
    example = tasks.get(message.split("Ids look like '")[1].split("'")[0])
    for task in (suggested, example):
        assert (task.split, task.difficulty) == ("test", "easy"), message
    with pytest.raises(TaskNotFoundError, match="Ids look like 'sokoban-hard-ood-"):
        tasks.get("sokoban-hard-ood-x")
