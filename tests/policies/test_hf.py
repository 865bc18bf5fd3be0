"""HFPolicy with a tiny random model on real envs, chat histories, make_policy, SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import gymnasium as gym
import pytest
import torch

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.policies import make_policy
from agentgym_envs.policies.chat import ONE_SHOT_PREFIX, ChatHistories, example_action
from agentgym_envs.policies.hf import HFPolicy
from agentgym_envs.registration import find

CHEAP_ENVS = ("Sokoban", "FrozenLake", "FrozenLakeSlippery", "Dungeon", "Retail", "Calendar")


def _play(policy: Any, steps: int, seeds: tuple[int, ...] = (0, 1, 2)) -> list[list[str]]:
    """Play ``steps`` lockstep steps of Sokoban on one slot per seed; the actions per step."""
    envs = [gym.make("agentgym/Sokoban-v0") for _ in seeds]
    pairs = [env.reset(seed=seed) for env, seed in zip(envs, seeds, strict=True)]
    policy.reset(list(range(len(envs))))
    history = []
    for _ in range(steps):
        actions = policy.act([p[0] for p in pairs], [p[1] for p in pairs])
        history.append(actions)
        pairs = [env.step(a)[::4] for env, a in zip(envs, actions, strict=True)]
    for env in envs:
        env.close()
    return history


# --------------------------------------------------------------------------- HFPolicy


def test_plays_batched_deterministic_with_usage(tiny_folder: str) -> None:
    policy = HFPolicy(tiny_folder, device="cpu", max_new_tokens=12)
    first = _play(policy, 3)
    usage = policy.last_usage
    assert len(usage) == 3
    for row in usage:
        assert set(row) == {"tokens_in", "tokens_out", "latency_ms", "retries", "failed"}
        assert 0 < row["tokens_out"] <= 12 and row["tokens_in"] > 100
        assert row["failed"] == 0
    assert any(a for step in first for a in step), "the tiny model should write some text"
    # greedy decoding: a fresh policy over the same episodes writes the same actions
    again = HFPolicy(tiny_folder, device="cpu", max_new_tokens=12)
    assert _play(again, 3) == first
    # and the history grows: step 3's prompt holds steps 1 and 2
    conv = policy.conversation(0)
    assert len(conv.turns) == 3 and conv.turns[0].observation is not None
    assert policy.spec["weights"].startswith("sha256:")
    assert policy.name == f"hf:{tiny_folder.rsplit('/', 1)[-1]}"


@pytest.mark.parametrize("kv_reuse", [False, True])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_actions_do_not_depend_on_the_batch(
    tiny_folder: str, temperature: float, kv_reuse: bool
) -> None:
    # batched decoding (kv_reuse off) and per-slot cached decoding (on) both give each
    # slot the actions it would get alone (a fresh policy: with kv_reuse a slot's cache
    # holds its own history only, never another episode's)
    def policy() -> HFPolicy:
        return HFPolicy(
            tiny_folder,
            device="cpu",
            max_new_tokens=10,
            temperature=temperature,
            kv_reuse=kv_reuse,
        )

    together = _play(policy(), 2, seeds=(4, 5, 6))
    alone = [_play(policy(), 2, seeds=(seed,)) for seed in (4, 5, 6)]
    for step in range(2):
        assert together[step] == [alone[i][step][0] for i in range(3)]


def test_kv_reuse_reads_only_new_tokens_and_matches_a_fresh_read(tiny_folder: str) -> None:
    cached = HFPolicy(tiny_folder, device="cpu", max_new_tokens=6, kv_reuse=True)
    fresh = HFPolicy(tiny_folder, device="cpu", max_new_tokens=6, kv_reuse=False)
    assert _play(cached, 3, seeds=(1, 2)) == _play(fresh, 3, seeds=(1, 2))
    prefix = cached.lm._prefix
    # turns 2 and 3 re-read only what the env added: most prompt tokens came from caches
    assert prefix.reused_tokens > prefix.fed_tokens > 0


def test_rows_of_very_different_lengths_decode_in_separate_groups() -> None:
    from agentgym_envs.serving.prefix_cache import length_groups

    # a game beside a web page: padded together, the game would read the page's length
    assert length_groups([600, 8000, 650, 7000, 3000]) == [[0, 2], [4], [3, 1]]
    assert length_groups([100, 400, 500]) == [[0, 1, 2]]  # short rows: padding is cheap
    assert length_groups([]) == []
    groups = length_groups([5, 900, 1400, 1300, 2100, 40])
    assert sorted(i for g in groups for i in g) == list(range(6))  # every row, once


def test_sampling_follows_the_seed(tiny_folder: str) -> None:
    def sample(seed: int, temperature: float = 1.0) -> list[list[str]]:
        policy = HFPolicy(
            tiny_folder, device="cpu", max_new_tokens=6, temperature=temperature, seed=seed
        )
        return _play(policy, 1)

    first = sample(1)
    assert sample(1) == first
    assert sample(2) != first
    assert sample(1, temperature=0.0) != first


def test_long_histories_are_trimmed(tiny_folder: str) -> None:
    policy = HFPolicy(tiny_folder, device="cpu", max_new_tokens=8, max_context=560)
    budget = 560 - 8
    _play(policy, 6, seeds=(0,))
    conv = policy.conversation(0)
    assert conv.dropped > 0, "6 steps of Sokoban should overflow 560 tokens"
    assert policy.last_usage[0]["tokens_in"] <= budget
    messages = conv.messages(conv.dropped)
    # system prompt, one-shot exchange and task are kept; the newest observation too
    assert messages[0]["role"] == "system" and messages[0]["content"] == conv.system
    assert messages[1]["content"].startswith(ONE_SHOT_PREFIX)
    assert messages[3]["content"] == conv.task
    assert messages[-2]["content"] == conv.turns[-2].observation
    assert messages[-1]["content"] == conv.turns[-1].action  # sent after the prompt
    # an untrimmed policy sees a longer prompt at the same step
    wide = HFPolicy(tiny_folder, device="cpu", max_new_tokens=8)
    _play(wide, 6, seeds=(0,))
    assert wide.last_usage[0]["tokens_in"] > budget


def test_a_trim_is_kept_until_it_is_outgrown_so_cached_prompts_stay_valid() -> None:
    """Past the budget, turns go until the prompt fills ``trim_to`` of it; the next
    turns keep that cut (each prompt extends the last) until the budget is hit again."""
    chats = ChatHistories(one_shot=False)  # trim_to 0.5

    def count(messages: list[dict[str, Any]]) -> int:
        return sum(len(m["content"]) for m in messages)

    budget = 1 + 4 + 10 * 6  # system, task and 10 turns of 6 characters
    chats.observe(0, "task", _reset_info())
    prompts, drops = [], []
    for i in range(30):
        chats.record(0, f"a{i}")
        chats.observe(0, f"obs{i}", {})
        messages, fits = chats.fit(0, count, budget)
        assert fits and count(messages) <= budget and messages[-1]["content"] == f"obs{i}"
        prompts.append(messages)
        drops.append(chats[0].dropped)
    assert drops[:10] == [0] * 10  # everything fits
    trims = [i for i in range(1, 30) if drops[i] != drops[i - 1]]
    for i in trims:  # a trim brings the prompt down to half the budget
        assert count(prompts[i]) <= budget // 2 < count(prompts[i - 1]) + 6
    # between two trims each prompt is the one before plus a turn: a cache keeps serving
    for i in set(range(11, 30)) - set(trims):
        assert prompts[i][: len(prompts[i - 1])] == prompts[i - 1]
    assert len(trims) == 4, drops  # 20 turns past the budget, 5 turns between trims
    minimal = ChatHistories(one_shot=False, trim_to=1.0)
    minimal.observe(0, "task", _reset_info())
    moved = 0
    for i in range(30):
        minimal.record(0, f"a{i}")
        minimal.observe(0, f"obs{i}", {})
        before = minimal[0].dropped
        minimal.fit(0, count, budget)
        moved += minimal[0].dropped != before
    assert moved == 20  # trimming as little as fits shifts the prompt on every turn


def test_a_trim_keeps_older_turns_when_the_fixed_part_fills_the_share() -> None:
    """System prompt and task alone fill more than half the budget: the trim leaves the
    older turns half the room that is left, rather than keeping only the newest turn."""
    chats = ChatHistories(one_shot=False)

    def count(messages: list[dict[str, Any]]) -> int:
        return sum(len(m["content"]) for m in messages)

    chats.observe(0, "t" * 600, _reset_info("s" * 100))
    budget, kept = 1000, []
    for i in range(12):
        chats.record(0, f"a{i:02d}")
        chats.observe(0, f"obs{i:02d}" + "." * 44, {})  # 3 + 50 characters a turn
        messages, fits = chats.fit(0, count, budget)
        assert fits and count(messages) <= budget
        kept.append(len(chats[0].turns) - chats[0].dropped)
    # fixed part 753, room 247: a trim keeps the older turns within 123, two of them
    assert min(kept[5:]) >= 3 and max(kept) <= 5, kept


def test_trimming_to_half_the_budget_reads_fewer_prompt_tokens(tiny_folder: str) -> None:
    fed = {}
    for trim_to in (0.5, 1.0):
        policy = HFPolicy(
            tiny_folder, device="cpu", max_new_tokens=8, max_context=1000, trim_to=trim_to
        )
        _play(policy, 14, seeds=(0,))
        assert policy.conversation(0).dropped > 0 and policy.spec["trim_to"] == trim_to
        fed[trim_to] = policy.lm._prefix.fed_tokens
    assert fed[0.5] < 0.7 * fed[1.0], fed


def test_cpu_threads_follow_the_cores_other_work_leaves_free(tiny_folder: str) -> None:
    from agentgym_envs.policies.hf import cpu_threads

    assert cpu_threads(load=2.0, cpus=2, current=2, maximum=2) == 2  # only this process
    assert cpu_threads(load=4.1, cpus=2, current=2, maximum=2) == 1  # a 2-core job beside
    assert cpu_threads(load=3.0, cpus=2, current=1, maximum=2) == 1  # ... still there
    assert cpu_threads(load=1.2, cpus=2, current=1, maximum=2) == 2  # ... gone
    assert cpu_threads(load=30.0, cpus=16, current=8, maximum=8) == 1  # never below 1
    assert cpu_threads(load=0.0, cpus=16, current=4, maximum=8) == 8  # never above torch's
    fixed = HFPolicy(tiny_folder, device="cpu", max_new_tokens=2, threads=1)
    before = torch.get_num_threads()
    try:
        _play(fixed, 1, seeds=(0,))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_bad_settings_raise(tiny_folder: str) -> None:
    with pytest.raises(ConfigError, match="threads must be 'auto' or an int >= 1"):
        HFPolicy(tiny_folder, device="cpu", threads=0)
    with pytest.raises(ConfigError, match="trim_to must be a share"):
        HFPolicy(tiny_folder, device="cpu", trim_to=0)
    with pytest.raises(ConfigError, match="max_context"):
        HFPolicy(tiny_folder, device="cpu", max_new_tokens=64, max_context=64)
    with pytest.raises(ConfigError, match="temperature"):
        HFPolicy(tiny_folder, device="cpu", temperature=-1)
    with pytest.raises(ConfigError, match="Did you mean 'smollm2'"):
        HFPolicy("smolm2", device="cpu")


# --------------------------------------------------------------------------- chat histories


def _reset_info(system: str = "S", seed: int = 7) -> dict[str, Any]:
    return {"system": system, "tools": [], "seeds": {"env": seed}}


def test_histories_fit_keeps_head_and_newest_turn() -> None:
    chats = ChatHistories(one_shot=False, trim_to=1.0)  # drop as few turns as fit
    chats.observe(0, "task", _reset_info())
    for i in range(10):
        chats.record(0, f"a{i}")
        chats.observe(0, f"obs{i}", {})

    def count(messages: list[dict[str, Any]]) -> int:
        return sum(len(m["content"]) for m in messages)

    full, fits = chats.fit(0, count, None)
    assert fits and len(full) == 2 + 20
    messages, fits = chats.fit(0, count, 1 + 4 + 4 * (2 + 4))  # system, task, 4 turns
    assert fits and chats[0].dropped == 6
    assert [m["content"] for m in messages[:2]] == ["S", "task"]
    assert messages[2]["content"] == "a6" and messages[-1]["content"] == "obs9"
    messages, fits = chats.fit(0, count, 3)  # not even the head fits
    assert not fits and messages[-1]["content"] == "obs9" and messages[1]["content"] == "task"


def test_histories_one_shot_new_episodes_and_native_turns() -> None:
    tools = [{"type": "function", "function": {"name": "go", "parameters": {}}}]
    chats = ChatHistories(one_shot=True, native=True)
    info = {"system": 'Rules\nExample: go(direction="up")', "tools": tools, "seeds": {"env": 3}}
    conv = chats.observe(1, "the task", info)
    assert conv.episode_seed == 3
    assert conv.example == json.dumps({"name": "go", "arguments": {"direction": "up"}})
    call = {"id": "c1", "type": "function", "function": {"name": "go", "arguments": "{}"}}
    chats.record(1, '{"name": "go", "arguments": {}}', [call])
    chats.observe(1, "moved", {"tools": tools})
    roles = [m["role"] for m in chats.messages(1)]
    assert roles == ["system", "user", "assistant", "user", "assistant", "tool"]
    assert chats.messages(1)[-1] == {"role": "tool", "tool_call_id": "c1", "content": "moved"}
    # a reset info (it has "system") starts a new episode even without reset()
    conv = chats.observe(1, "next task", info)
    assert conv.turns == [] and conv.task == "next task"


@pytest.mark.parametrize("name", CHEAP_ENVS)
def test_one_shot_example_is_a_valid_action(name: str) -> None:
    env = gym.make(find(name).id)
    _, info = env.reset(seed=0)
    example = example_action(info["system"], info["tools"])
    assert example is not None
    parsed = env.unwrapped.parser.parse(example)
    assert parsed.error_code is None and parsed.calls
    # without an Example: line the first tool is called with placeholder arguments
    fallback = example_action("no example here", info["tools"])
    assert (
        fallback is not None
        and json.loads(fallback)["name"] == info["tools"][0]["function"]["name"]
    )
    env.close()


# --------------------------------------------------------------------------- make_policy


def test_make_policy_specs(tiny_folder: str) -> None:
    envs = [gym.make("agentgym/Sokoban-v0")]
    policy = make_policy(f"hf:{tiny_folder}", envs, seed=3, device="cpu", max_new_tokens=5)
    assert isinstance(policy, HFPolicy) and policy.spec["seed"] == 3
    assert policy.spec["max_new_tokens"] == 5
    remote = make_policy(
        "openai:http://127.0.0.1:9/v1#m1", envs, tool_mode="text", max_new_tokens=7
    )
    assert remote.name == "openai:m1" and remote.spec["base_url"] == "http://127.0.0.1:9/v1"
    assert remote.spec["max_tokens"] == 7  # the same limit under either name
    remote.close()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="openai:<base_url>#<model>"):
        make_policy("openai:http://127.0.0.1:9/v1", envs)
    with pytest.raises(ConfigError, match=r"no option 'tool_mod'\. Did you mean 'tool_mode'"):
        make_policy("openai:http://127.0.0.1:9/v1#m1", envs, tool_mod="text")
    with pytest.raises(ConfigError, match="takes no options"):
        make_policy("oracle", envs, temperature=0.5)
    with pytest.raises(ConfigError) as info:
        make_policy("rando", envs)
    assert "Did you mean 'random'" in str(info.value) and "hf:<model>" in str(info.value)


def test_importing_policies_does_not_load_torch() -> None:
    code = (
        "import sys, agentgym_envs, agentgym_envs.policies, agentgym_envs.serving.server\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from agentgym_envs.policies import OpenAIPolicy\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- real SmolLM2


def test_smollm2_writes_parseable_tool_calls(smollm2: Any) -> None:
    policy = HFPolicy(lm=smollm2, max_new_tokens=48)
    assert policy.spec["template_tools"] is False  # SmolLM2's template ignores tools
    envs = [gym.make("agentgym/Sokoban-v0") for _ in range(2)]
    pairs = [env.reset(seed=seed) for seed, env in enumerate(envs)]
    actions = policy.act([p[0] for p in pairs], [p[1] for p in pairs])
    for env, action in zip(envs, actions, strict=True):
        parsed = env.unwrapped.parser.parse(action)
        assert parsed.error_code is None and parsed.calls, action
        assert env.step(action)[4]["error"] == {}
        env.close()


# --------------------------------------------------------------------------- in the evaluator


def test_the_evaluator_batches_every_entry_for_one_llm_policy(
    tiny_folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries play side by side within ``max_slots``: the model generates for all of
    their live episodes in one ``act``; ``max_slots`` equal to ``batch`` plays one entry
    at a time, as before."""
    from agentgym_envs.eval.evaluate import EvalConfig, evaluate
    from agentgym_envs.eval.suite import suite_from_spec

    suite = suite_from_spec(
        {
            "name": "three-games",
            "trials": 1,
            "entries": [
                {"name": n, "env": n, "split": "test", "difficulty": "easy", "tasks": 2,
                 "env_kwargs": {"max_steps": 3}}
                for n in ("Sokoban", "FrozenLake", "Dungeon")
            ],
        }
    )  # fmt: skip
    rows: list[list[str]] = []
    act = HFPolicy.act

    def spy(self: HFPolicy, observations: Any, infos: Any, slots: Any = None) -> list[str]:
        actions = act(self, observations, infos, slots)
        rows.append([self.conversation(s).system.split("\n")[0] for s in slots or ()])
        return actions

    monkeypatch.setattr(HFPolicy, "act", spy)
    widths = {}
    for max_slots in (16, 4, 2):
        rows.clear()
        config = EvalConfig(batch=2, max_slots=max_slots, policy_options={"max_new_tokens": 4})
        report = evaluate(suite, [f"hf:{tiny_folder}"], config)
        assert len(report["episodes"]) == 6 and "partial" not in report
        widths[max_slots] = (max(map(len, rows)), max(len(set(r)) for r in rows))
        entries = report["results"]
        overall = report["overall"][f"hf:{tiny_folder}"]["wall_s"]
        # entries overlap: the policy's time is its run's, not the sum of its entries'
        assert all(0 < r["metrics"]["wall_s"] <= overall for r in entries)
    # (rows per act, distinct envs per act)
    assert widths == {16: (6, 3), 4: (4, 2), 2: (2, 1)}, widths
