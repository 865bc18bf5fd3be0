"""Tool OOD: deterministic renames and paraphrases that the whole env follows."""

from __future__ import annotations

import keyword
import re

import numpy as np
import pytest

from agentgym_envs.business.retail import RetailEnv
from agentgym_envs.core import ConfigError, ErrorCode, Outcome
from agentgym_envs.wrappers import ToolOOD, tool_variant
from agentgym_envs.wrappers.tool_ood import new_names, paraphrase_text
from tests.core.counter_env import CounterEnv
from tests.wrappers.support import ORACLE_SAMPLE, make, play


def test_variant_is_a_pure_function_of_the_seed() -> None:
    a = tool_variant(RetailEnv.toolset, 3)
    assert a == tool_variant(RetailEnv.toolset, 3)
    assert a != tool_variant(RetailEnv.toolset, 4)


@pytest.mark.parametrize("seed", range(25))
def test_names_are_fresh_distinct_identifiers(seed: int) -> None:
    canonical = list(RetailEnv.toolset)
    names = new_names(canonical, np.random.default_rng(seed))
    assert set(names) == set(canonical)
    new = list(names.values())
    assert len(set(new)) == len(new)  # no collisions
    assert not set(new) & set(canonical)  # never an existing name
    for name in new:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and not keyword.iskeyword(name)


def test_names_without_synonyms_still_change_and_never_collide() -> None:
    names = new_names(["to", "to_tool", "zzz", "zzz_tool"], np.random.default_rng(0))
    assert len(set(names.values())) == 4
    assert not set(names.values()) & {"to", "to_tool", "zzz", "zzz_tool"}


def test_paraphrase_always_differs() -> None:
    rng = np.random.default_rng(0)
    for text in ("Xyzzy.", "Get an order.", "Walk one cell."):
        assert paraphrase_text(text, rng) != text


def test_prompt_tools_example_and_parser_follow_the_variant() -> None:
    env = make("Retail", ["tool_ood"])
    wrapper = env
    assert isinstance(wrapper, ToolOOD)
    _obs, info = env.reset(seed=0)
    renamed = wrapper.names
    shown = [t["function"]["name"] for t in info["tools"]]
    assert shown == [renamed[c] for c in RetailEnv.toolset]
    system = info["system"]
    for canonical, new in renamed.items():
        assert f"- {new}(" in system and f"- {canonical}(" not in system
    assert "respond(" not in system and f"{renamed['respond']}(message=...)" in system
    example = system.rsplit("Example: ", 1)[1]
    assert example.startswith(renamed["find_user_id_by_email"] + "(")
    described = {t["function"]["name"]: t["function"]["description"] for t in info["tools"]}
    original = RetailEnv.toolset["get_order_details"].description
    assert described[renamed["get_order_details"]] != original
    # the canonical name is now unknown; the new one parses and is recorded canonically
    info = env.step('get_order_details(order_id="#W0000000")')[4]
    assert info["error"]["code"] == ErrorCode.UNKNOWN_TOOL
    info = env.step(f'{renamed["respond"]}(message="Hello")')[4]
    assert info["error"] == {} and info["tool_calls"][0]["name"] == "respond"
    assert info["versions"]["wrappers"] == "tool_ood:0:rename,paraphrase"
    assert info["tool_ood"] == {"seed": 0, "renamed": 14, "paraphrased": 14}


def test_paraphrase_only_keeps_names() -> None:
    env = make("Sokoban", [{"tool_ood": {"rename": False, "seed": 2}}])
    info = env.reset(seed=0)[1]
    fn = info["tools"][0]["function"]
    assert (
        fn["name"] == "move"
        and fn["description"] != "Walk one cell; pushes a box if one is in the way."
    )
    assert info["versions"]["wrappers"] == "tool_ood:2:paraphrase"


@pytest.mark.parametrize("name", ["Sokoban", "Retail", "Calendar", "Dungeon", "FrozenLake"])
def test_oracle_succeeds_with_renamed_tools(name: str) -> None:
    env = make(name, ["tool_ood"])
    for seed in ORACLE_SAMPLE[name]:
        steps, info = play(env, seed)
        assert info["outcome"] is Outcome.SUCCESS, (name, seed)
        assert all(not i["error"] for _, _, i in steps[1:])  # every action parsed


@pytest.mark.parametrize("name", ["Retail", "Calendar"])
def test_oracle_succeeds_on_ood_tasks_that_rename_tools_themselves(name: str) -> None:
    env = make(name, [{"tool_ood": {"seed": 5}}], split="ood")
    for seed in range(3):
        _, info = play(env, seed)
        task = env.unwrapped.task  # type: ignore[attr-defined]
        assert task.spec.get("tool_names")  # the task renames some tools on its own
        assert info["outcome"] is Outcome.SUCCESS, seed


def test_oracle_finds_its_place_after_a_snapshot_restore() -> None:
    env = make("Retail", ["tool_ood"])
    env.reset(seed=1)
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    for _ in range(5):
        env.step(oracle.act())
    snap = env.get_state()  # type: ignore[attr-defined]
    fresh = make("Retail", ["tool_ood"])
    fresh.reset(seed=9)
    fresh.set_state(snap)  # type: ignore[attr-defined]
    oracle = fresh.unwrapped.oracle()  # type: ignore[attr-defined]
    info: dict = {}
    for _ in range(200):
        *_, terminated, truncated, info = fresh.step(oracle.act())
        if terminated or truncated:
            break
    assert info["outcome"] is Outcome.SUCCESS


def test_localize_action_leaves_accepted_and_unparsable_actions_alone() -> None:
    env = make("Sokoban", ["tool_ood"])
    env.reset(seed=0)
    inner = env.unwrapped
    new = env.names["move"]  # type: ignore[attr-defined]
    assert inner.localize_action('move(direction="up")') == (
        f'{{"name": "{new}", "arguments": {{"direction": "up"}}}}'
    )
    assert inner.localize_action(f'{new}(direction="up")') == f'{new}(direction="up")'
    assert inner.localize_action("gibberish(") == "gibberish("


def test_the_variant_is_the_same_in_a_fresh_env() -> None:
    a, b = (
        make("Dungeon", [{"tool_ood": {"seed": 7}}]),
        make("Dungeon", [{"tool_ood": {"seed": 7}}]),
    )
    assert a.reset(seed=1) == b.reset(seed=1)
    c = make("Dungeon", [{"tool_ood": {"seed": 8}}])
    assert a.reset(seed=1)[1]["tools"] != c.reset(seed=1)[1]["tools"]


def test_bad_config_and_bad_variants_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="changes nothing"):
        make("Sokoban", [{"tool_ood": {"rename": False, "paraphrase": False}}])
    with pytest.raises(ConfigError, match="non-negative int"):
        make("Sokoban", [{"tool_ood": {"seed": -1}}])
    env = CounterEnv()
    with pytest.raises(ConfigError, match="identifier"):
        env.set_tool_variant({"add": "not a name"})
    with pytest.raises(ConfigError, match="duplicate"):
        env.set_tool_variant({"add": "peek"})
    with pytest.raises(ConfigError, match="unknown tools"):
        env.set_tool_variant({"nope": "x"})
    env.set_tool_variant({"add": "plus"})
    assert env.tool_variant == ({"add": "plus"}, {})
    env.set_tool_variant()
    assert env.tool_variant is None
