"""Task sets: lookups with suggestions, disjoint splits, stored files match their generator."""

import pytest
from gymnasium.envs.registration import load_env_creator

from agentgym_envs.core import SPLITS, TaskNotFoundError, load_task_set
from agentgym_envs.registration import ENVS

CLASSES = {e.entry_point: load_env_creator(e.entry_point) for e in ENVS}


@pytest.mark.parametrize("cls", CLASSES.values(), ids=lambda c: c.name)
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
    for split, counts in tasks.counts().items():
        assert split in SPLITS and min(counts.values()) >= 50


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
