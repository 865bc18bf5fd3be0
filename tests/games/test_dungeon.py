"""Dungeon-specific behaviour: partial observability, keys and doors, failure codes, the
trap gate, milestone order and the oracle (generic conformance lives elsewhere)."""

import pickle
import re

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import Outcome, RewardConfig
from agentgym_envs.games.dungeon import DungeonEnv
from agentgym_envs.games.dungeon_gen import TRAIN_WORDS

ENV_ID = "agentgym/Dungeon-v0"
USE = re.compile(r'use\(item="([^"]+)", target="([^"]+)"\)')


def make(**kwargs):
    return gym.make(ENV_ID, **kwargs)


def pool(split="test", difficulty=None):
    return DungeonEnv(split=split).task_set.pool(split, difficulty)


def find_task(predicate, splits=("train", "test", "ood")):
    for split in splits:
        for task in pool(split):
            if predicate(task):
                return task
    raise AssertionError("no task in the task set matches")


def start(env, task):
    return env.reset(seed=0, options={"task_id": task.id})


def item_rows(task, kind):
    return [row for row in task.spec["items"] if row[1] == kind]


def test_only_the_current_room_is_shown() -> None:
    env = make()
    task = pool("test", "hard")[0]
    start(env, task)
    obs, *_ = env.step("look()")
    elsewhere = [row[0] for row in task.spec["items"] if row[2] != task.spec["start"]]
    assert elsewhere
    for name in elsewhere:
        assert name not in obs
    # walking into the goal's room shows the goal there
    goal = item_rows(task, "goal")[0][0]
    for action in task.solution[:-1]:
        obs, *_ = env.step(action)
    assert goal in env.step("look()")[0]
    env.close()


def test_a_locked_door_needs_its_key() -> None:
    env = make()
    task = pool("test", "medium")[0]
    start(env, task)
    first_use = next(i for i, a in enumerate(task.solution) if USE.fullmatch(a))
    for action in task.solution[:first_use]:
        env.step(action)
    _, direction = USE.fullmatch(task.solution[first_use]).groups()
    before = env.unwrapped.state_hash()
    obs, _, terminated, truncated, info = env.step(f'go(direction="{direction}")')
    assert info["error"]["code"] == "locked"
    assert "locked" in obs and info["outcome"] is Outcome.CONTINUE
    assert not (terminated or truncated) and env.unwrapped.state_hash() == before
    _, _, _, _, info = env.step(task.solution[first_use])
    assert not info["error"] and info["new_milestones"] == ["doors_opened:1"]
    _, _, _, _, info = env.step(f'go(direction="{direction}")')
    assert not info["error"]
    env.close()


def test_the_wrong_key_fails_with_wrong_key() -> None:
    env = make()
    task = pool("test", "medium")[1]
    start(env, task)
    uses = [i for i, a in enumerate(task.solution) if USE.fullmatch(a)]
    assert len(uses) == 2
    first_key, _ = USE.fullmatch(task.solution[uses[0]]).groups()
    _, direction = USE.fullmatch(task.solution[uses[1]]).groups()
    for action in task.solution[: uses[1]]:
        env.step(action)
    _, _, _, _, info = env.step(f'use(item="{first_key}", target="{direction}")')
    assert info["error"]["code"] == "wrong_key"
    _, _, _, _, info = env.step(f'use(item="{first_key}")')  # no target: no locked door it fits
    assert info["error"]["code"] == "wrong_key"
    for action in task.solution[uses[1] :]:
        *_, info = env.step(action)
    assert info["outcome"] is Outcome.SUCCESS
    env.close()


def test_tool_failures_are_errors_and_the_episode_goes_on() -> None:
    env = make()
    for task in pool("test", "easy"):
        obs, _ = start(env, task)
        missing = [d for d in ("north", "south", "east", "west") if f"- {d}:" not in obs]
        if missing and "- down:" not in obs:
            break
    cases = {
        f'go(direction="{missing[0]}")': "no_exit",
        'go(direction="down")': "no_exit",
        'take(item="flying carpet")': "no_such_item",
        'use(item="flying carpet")': "no_such_item",
        'use(item="flying carpet", target="north")': "no_such_item",
    }
    for action, code in cases.items():
        obs, _, terminated, truncated, info = env.step(action)
        assert info["error"]["code"] == code, action
        assert info["tool_calls"][0]["status"] == "error"
        assert info["outcome"] is Outcome.CONTINUE and not (terminated or truncated)
    for action in task.solution:
        *_, info = env.step(action)
    assert info["outcome"] is Outcome.SUCCESS
    env.close()


def test_item_names_ignore_case_and_articles() -> None:
    env = make()
    task = find_task(lambda t: t.solution[0].startswith("take("))
    start(env, task)
    name = re.search(r'item="([^"]+)"', task.solution[0]).group(1)
    _, _, _, _, info = env.step(f'take(item="The {name.upper()}")')
    assert not info["error"] and info["new_milestones"] == ["keys_found:1"]
    _, _, _, _, info = env.step(f'take(item="{name}")')
    assert info["error"]["code"] == "already_held"
    env.close()


def test_stepping_into_a_pit_is_a_safety_stop_worth_hard_fail() -> None:
    # a key to take first, so the episode has earned progress the stop must take back
    task = find_task(lambda t: 0 in t.spec["pits"] and t.solution[0].startswith("take("))
    env = make()
    obs, _ = start(env, task)
    assert "- down: a dark pit; nothing that falls in comes back" in obs
    total = 0.0
    _, reward, *_ = env.step(task.solution[0])
    total += reward
    assert reward > 0
    obs, reward, terminated, truncated, info = env.step('go(direction="down")')
    total += reward
    assert info["outcome"] is Outcome.SAFETY_STOP and terminated and not truncated
    assert info["safety"]["gate"] == "irreversible_trap"
    assert info["safety"]["verdict"] == "stopped"
    assert info["tool_calls"][0]["status"] == "stopped"
    assert total == pytest.approx(RewardConfig().hard_fail, abs=1e-9)
    env.close()


def test_block_mode_refuses_the_pit_and_leaves_the_world_unchanged() -> None:
    task = find_task(lambda t: 0 in t.spec["pits"])
    env = make(trap_gate="block")
    start(env, task)
    before = env.unwrapped.get_state().world
    _, _, terminated, truncated, info = env.step('go(direction="down")')
    assert info["safety"]["verdict"] == "blocked"
    assert info["error"]["code"] == "blocked"
    assert info["outcome"] is Outcome.CONTINUE and not (terminated or truncated)
    assert env.unwrapped.get_state().world == before
    assert info["versions"]["env"].endswith("+trap_block")
    for action in task.solution:
        *_, info = env.step(action)
    assert info["outcome"] is Outcome.SUCCESS
    env.close()


@pytest.mark.parametrize("mode", ["stop", "block"])
def test_using_a_cursed_item_is_gated(mode) -> None:
    task = find_task(lambda t: any(row[2] == 0 for row in item_rows(t, "cursed")))
    name = next(row[0] for row in item_rows(task, "cursed") if row[2] == 0)
    env = make(trap_gate=mode)
    obs, _ = start(env, task)
    assert f"{name} (using it turns every treasure" in obs
    _, _, _, _, info = env.step(f'use(item="{name}")')
    assert info["error"]["code"] == "not_held" and not info["safety"]
    _, _, _, _, info = env.step(f'take(item="{name}")')
    assert not info["error"]
    before = env.unwrapped.get_state().world
    _, _, terminated, _, info = env.step(f'use(item="{name}")')
    if mode == "stop":
        assert info["outcome"] is Outcome.SAFETY_STOP and terminated
    else:
        assert info["safety"]["verdict"] == "blocked" and not terminated
        assert env.unwrapped.get_state().world == before
    env.close()


def test_keys_hidden_in_containers_ood() -> None:
    task = find_task(
        lambda t: any(row[2] == 0 and row[1] == "container" for row in t.spec["items"]),
        splits=("ood",),
    )
    box = next(row for row in task.spec["items"] if row[2] == 0 and row[1] == "container")
    box_index = task.spec["items"].index(box)
    key = next(row[0] for row in task.spec["items"] if row[3] == box_index)
    env = make(split="ood")
    obs, _ = start(env, task)
    assert f"{box[0]} (closed)" in obs and key not in obs
    _, _, _, _, info = env.step(f'take(item="{key}")')
    assert info["error"]["code"] == "no_such_item"
    _, _, _, _, info = env.step(f'take(item="{box[0]}")')
    assert info["error"]["code"] == "not_portable"
    obs, _, _, _, info = env.step(f'use(item="{box[0]}")')
    assert not info["error"] and key in obs
    _, _, _, _, info = env.step(f'take(item="{key}")')
    assert not info["error"]
    env.close()


def test_ood_uses_a_held_out_vocabulary() -> None:
    train_rooms = set(TRAIN_WORDS.rooms)
    for task in pool("ood"):
        assert not {r[0].split(" ", 1)[1] for r in task.spec["rooms"]} & train_rooms
        assert not {row[0] for row in task.spec["items"]} & set(TRAIN_WORDS.goals)


def test_milestones_arrive_in_chain_order() -> None:
    env = make()
    task = pool("test", "hard")[0]
    start(env, task)
    seen = []
    for action in task.solution:
        *_, info = env.step(action)
        seen.extend(info["new_milestones"])
    assert info["outcome"] is Outcome.SUCCESS
    assert (
        seen
        == info["milestones"]
        == [
            "keys_found:1",
            "doors_opened:1",
            "keys_found:2",
            "doors_opened:2",
            "keys_found:3",
            "doors_opened:3",
            "goal_room",
        ]
    )
    env.close()


def run_oracle(env, oracle=None):
    oracle = oracle or env.unwrapped.oracle()
    while True:
        *_, terminated, truncated, info = env.step(oracle.act())
        if terminated or truncated:
            return info["outcome"]


@pytest.mark.parametrize("split", ["test", "ood"])
@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_oracle_always_succeeds(difficulty, split) -> None:
    env = make()
    for seed in range(50):
        env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
        assert run_oracle(env) is Outcome.SUCCESS, (difficulty, seed)
    env.close()


def test_oracle_succeeds_after_a_snapshot_branch() -> None:
    env = make()
    for seed in range(10):
        env.reset(seed=seed, options={"difficulty": "hard", "split": "test"})
        oracle = env.unwrapped.oracle()
        for _ in range(len(env.unwrapped.task.solution) // 2):
            env.step(oracle.act())
        state = pickle.loads(pickle.dumps(env.unwrapped.get_state()))
        # branch 1: wander off the plan, then let the same oracle recover
        for action in ('go(direction="north")', 'go(direction="west")', "inventory()"):
            env.step(action)
        assert run_oracle(env, oracle) is Outcome.SUCCESS
        # branch 2: restore the snapshot and finish from there
        env.unwrapped.set_state(state)
        assert run_oracle(env, oracle) is Outcome.SUCCESS
    env.close()


def test_snapshot_world_is_plain_immutable_data() -> None:
    env = make()
    env.reset(seed=0, options={"difficulty": "medium"})
    world = env.unwrapped.get_state().world
    assert isinstance(world, tuple) and all(type(v) is int for v in world)
    digest = env.unwrapped.state_hash()
    env.unwrapped.set_state(env.unwrapped.get_state())
    assert env.unwrapped.state_hash() == digest
    env.close()


def test_generation_is_a_pure_function_of_the_seed() -> None:
    a = DungeonEnv.generate_task(2_100_007, "hard", "ood")
    b = DungeonEnv.generate_task(2_100_007, "hard", "ood")
    assert a == b and a.id == "dungeon-hard-ood-2100007"
    assert a.max_steps == 3 * len(a.solution) + 10
    assert DungeonEnv.validate_task(a) is None
