"""Token-in/token-out rollouts: exact ids, fresh-render agreement, context budget."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch

import agentgym_envs  # noqa: F401
from agentgym_envs.core import RewardConfig
from agentgym_envs.core.episode import Truncation
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner
from tests.core.counter_env import CounterEnv


def oracle(env: gym.Env[Any, Any]) -> Any:
    return env.unwrapped.oracle().act


def runner(
    tokenizer: Any,
    model: Any,
    policy: str = "summary",
    env_kwargs: dict[str, Any] | None = None,
    **kw: Any,
) -> RolloutRunner:
    chat = ChatFormat(tokenizer)
    sampler = Sampler(model, eos_ids=[chat.eos_id], pad_id=chat.pad_id, seed=0)
    options = dict(n_envs=4, max_new_tokens=16, max_context=4096, context_policy=policy)
    options.update(kw)
    make_kwargs = env_kwargs or {}
    return RolloutRunner(
        lambda: gym.make("agentgym/FrozenLake-v0", **make_kwargs), chat, sampler, **options
    )


def test_oracle_episodes_tokenize_exactly_like_a_fresh_render(
    tokenizer: Any, tiny_model: Any
) -> None:
    """Canonical text: the spliced ids equal the template's fresh render at every turn."""
    r = runner(tokenizer, tiny_model, max_new_tokens=32)
    jobs = [RolloutJob(None, seed, seed) for seed in range(4)]
    trajs, _ = r.collect(jobs, 0, script=oracle)
    assert all(t.episode.success for t in trajs)
    assert sum(t.retok_mismatches for t in trajs) == 0
    for t in trajs:
        assert len(t.segments) == 1
        seg = t.segments[0]
        # the agent tokens are exactly the encoded actions plus the end-of-turn token
        agent = [i for i, m in zip(seg.ids, seg.mask, strict=True) if m]
        expected = [i for a in t.actions for i in [*r.chat.encode(a), r.chat.eos_id]]
        assert agent == expected
        assert len(seg.turn_ends) == len(t.actions)
        assert all(seg.mask[e] == 1 and seg.ids[e] == r.chat.eos_id for e in seg.turn_ends)
    r.close()


def test_sampled_ids_are_kept_even_when_their_text_retokenizes_differently(
    tokenizer: Any, tiny_model: Any
) -> None:
    # a random model rarely solves anything: a short step budget keeps the episodes short
    r = runner(tokenizer, tiny_model, env_kwargs={"max_steps": 6})
    trajs, stats = r.collect([RolloutJob(None, 1, 0), RolloutJob(None, 2, 1)], policy_version=7)
    assert stats.generated_tokens == sum(s.agent_tokens for t in trajs for s in t.segments)
    for t in trajs:
        assert t.policy_version == 7
        assert t.record()["versions"]["env"].startswith("FrozenLake")
        # a random model's samples rarely survive decode/encode: counted, never hidden
        assert 0 <= t.retok_mismatches <= len(t.actions)
    r.close()


@pytest.mark.parametrize("policy", ["drop", "summary"])
def test_context_budget_keeps_system_prompt_and_task(
    tokenizer: Any, tiny_model: Any, policy: str
) -> None:
    r = runner(tokenizer, tiny_model, policy=policy, max_context=900, max_new_tokens=24)
    trajs, _ = r.collect([RolloutJob(None, 3, 0)], 0, script=oracle)
    # a fresh run of the same episode without a budget, for its task text
    traj = trajs[0]
    assert traj.context["policy"] == policy
    assert traj.context["dropped_turns"] > 0 and len(traj.segments) > 1
    first = r.chat.decode(traj.segments[0].ids)
    task_start = first.index("<|im_start|>user")
    task = first[task_start : first.index("<|im_end|>", task_start)]
    for seg in traj.segments:
        text = r.chat.decode(seg.ids)
        assert len(seg.ids) <= 900
        assert text.startswith("<|im_start|>system") and task in text
        assert ("[context] turns 1-" in text) == (
            policy == "summary" and seg is not traj.segments[0]
        )
        assert seg.agent_tokens > 0
    assert traj.retok_mismatches == 0
    assert traj.episode.success
    r.close()


def test_truncate_policy_ends_the_episode_and_cuts_the_suffix(
    tokenizer: Any, tiny_model: Any
) -> None:
    r = runner(tokenizer, tiny_model, policy="truncate", max_context=800, max_new_tokens=24)
    trajs, _ = r.collect([RolloutJob(None, 3, 0)], 0)
    traj = trajs[0]
    ep = traj.episode
    assert ep.outcome is Outcome.TIMEOUT and ep.truncation is Truncation.CONTEXT_LIMIT
    assert not ep.success and ep.valid and ep.cut
    assert traj.record()["outcome"] == "timeout"
    assert traj.record()["truncation"] == "context_limit"
    assert traj.context["truncated"] is True
    assert all(len(s.ids) <= 800 for s in traj.segments)
    r.close()


def test_sampler_respects_limits_and_eos(tokenizer: Any, tiny_model: Any) -> None:
    chat = ChatFormat(tokenizer)
    sampler = Sampler(tiny_model, eos_ids=[chat.eos_id], pad_id=chat.pad_id, temperature=0.0)
    out = sampler.generate([[1, 2, 3], [5] * 9, [7]], [4, 0, 2])
    assert [len(s.ids) <= n for s, n in zip(out, [4, 0, 2], strict=True)] == [True] * 3
    assert out[1].ids == []
    again = sampler.generate([[1, 2, 3]], [4])
    assert again[0].ids == out[0].ids  # greedy does not depend on the batch's padding


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_static_engine_samples_exactly_what_the_transformers_forward_samples(
    tokenizer: Any, tiny_model: Any, temperature: float
) -> None:
    """Same seed, same prompts of different lengths: identical ids, log-probabilities
    within float noise (the engine runs the model's own weights)."""
    from agentgym_envs.llm.engine import StaticEngine

    chat = ChatFormat(tokenizer)
    prompts = [[1, 5, 6, 7, 8, 9, 10], [1, 44, 55], list(range(1, 40))]
    common = dict(eos_ids=[chat.eos_id], pad_id=chat.pad_id, temperature=temperature, seed=3)
    hf = Sampler(tiny_model, **common).generate(prompts, [20, 5, 30])
    engine = StaticEngine(tiny_model, max_batch=4, max_len=256)
    static = Sampler(tiny_model, engine=engine, **common).generate(prompts, [20, 5, 30])
    assert [a.ids for a in hf] == [b.ids for b in static]
    if temperature == 0.0:  # batches larger than the cache are split (same greedy result)
        small = StaticEngine(tiny_model, max_batch=2, max_len=256)
        split = Sampler(tiny_model, engine=small, **common).generate(prompts, [20, 5, 30])
        assert [a.ids for a in hf] == [b.ids for b in split]
    gaps = [
        abs(x - y)
        for a, b in zip(hf, static, strict=True)
        for x, y in zip(a.logprobs, b.logprobs, strict=True)
    ]
    assert max(gaps) < 1e-5
    # the engine reads the live weights: an in-place update changes its output
    with torch.no_grad():
        tiny_model.lm_head.weight.mul_(2.0)
    changed = Sampler(tiny_model, engine=engine, **common).generate(prompts, [20, 5, 30])
    assert [a.logprobs for a in changed] != [b.logprobs for b in static]


def test_static_engine_under_bf16_autocast_tracks_the_model(tiny_model: Any) -> None:
    """The GPU configuration (fp32 weights, bf16 compute and KV cache), run on CPU: the
    engine's log-probabilities stay within bf16 noise of the model's own forward."""
    from agentgym_envs.llm.engine import StaticEngine

    prompts = [[1, 5, 6, 7, 8, 9, 10], [1, 44, 55]]
    engine = StaticEngine(tiny_model, max_batch=2, max_len=64, compute_dtype=torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = torch.log_softmax(engine.extend(dict(enumerate(prompts))), -1)
        step = torch.log_softmax(engine.decode(torch.tensor([11, 12]), torch.tensor([7, 3])), -1)
        want, want_step = [], []
        for prompt, token in zip(prompts, [11, 12], strict=True):
            logits = tiny_model(torch.tensor([[*prompt, token]])).logits[0].float()
            want.append(torch.log_softmax(logits[-2], -1))
            want_step.append(torch.log_softmax(logits[-1], -1))
    assert engine.k[0].dtype == torch.bfloat16
    for mine, theirs in ((got, torch.stack(want)), (step, torch.stack(want_step))):
        assert (mine - theirs).abs().max() < 5e-2  # log-probabilities spread over ~1.4
        assert torch.corrcoef(torch.stack([mine.flatten(), theirs.flatten()]))[0, 1] > 0.99


def test_static_engine_reuses_an_episodes_cached_turns_only_while_valid(tiny_model: Any) -> None:
    from agentgym_envs.llm.engine import StaticEngine

    def fresh(prompt: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return tiny_model(torch.tensor([prompt])).logits[0, -1].float()

    engine = StaticEngine(tiny_model, max_batch=3, max_len=128)
    turn1 = [1, 5, 6, 7, 8]
    engine.extend({2: turn1})
    engine.decode(torch.tensor([0, 0, 9]), torch.tensor([engine.scratch, engine.scratch, 5]))
    engine.commit(2, [9])  # the sampled token 9 was fed back; 10 ended the turn unfed
    turn2 = [*turn1, 9, 10, 11, 12]  # + the turn's last token + the observation's tokens
    got = engine.extend({2: turn2, 0: [1, 3]})
    assert engine.reused_tokens == 6  # turn 1 and the fed sample, not recomputed
    torch.testing.assert_close(got[2], fresh(turn2), rtol=0, atol=1e-5)
    torch.testing.assert_close(got[0], fresh([1, 3]), rtol=0, atol=1e-5)
    # a new episode in the row reuses only the common prefix
    other = [1, 5, 99, 98]
    torch.testing.assert_close(engine.extend({2: other})[2], fresh(other), rtol=0, atol=1e-5)
    assert engine.reused_tokens == 6 + 2
    # an optimizer step (in place) makes every cached turn stale
    with torch.no_grad():
        tiny_model.model.embed_tokens.weight.add_(0.01)
    torch.testing.assert_close(engine.extend({2: other})[2], fresh(other), rtol=0, atol=1e-5)
    assert engine.reused_tokens == 6 + 2


def test_static_engine_skips_idle_rows_on_cpu_and_leaves_their_cache_alone(
    tiny_model: Any,
) -> None:
    """Without CUDA graphs only live rows are computed: a live row's logits equal the
    model's own forward, an idle row's logits are zeros and its cache is untouched."""
    from agentgym_envs.llm.engine import StaticEngine

    engine = StaticEngine(tiny_model, max_batch=4, max_len=64)
    prompts = {0: [1, 5, 6, 7], 2: [1, 44, 55, 66, 77], 3: [1, 9]}
    engine.extend(prompts)
    idle_k = [k[0].clone() for k in engine.k]
    ids = torch.tensor([11, 0, 12, 13])
    positions = torch.tensor([engine.scratch, engine.scratch, 5, 2])  # rows 0, 1 idle
    got = engine.decode(ids, positions)
    assert torch.count_nonzero(got[:2]) == 0
    for row, token in ((2, 12), (3, 13)):
        with torch.no_grad():
            want = tiny_model(torch.tensor([[*prompts[row], token]])).logits[0, -1].float()
        torch.testing.assert_close(got[row], want, rtol=0, atol=1e-5)
    for before, k in zip(idle_k, engine.k, strict=True):
        assert torch.equal(before, k[0])


def test_a_local_weight_too_large_for_the_env_fails_the_rollout(tokenizer: Any) -> None:
    """A ConfigError from the env (its settings cannot work) stops the rollout with its
    message; it is no env crash, which would mask every episode as an env_error."""
    too_large = RewardConfig(local_weight=0.5)  # CounterEnv's bound is 0.075
    with pytest.raises(ConfigError, match="local_weight"):
        CounterEnv(reward_config=too_large).reset(seed=0)  # the env itself says so
    r = RolloutRunner(
        lambda: CounterEnv(reward_config=too_large),
        ChatFormat(tokenizer),
        None,  # type: ignore[arg-type]  # scripted: no sampler is called
        n_envs=1,
        max_new_tokens=16,
        max_context=512,
    )
    try:
        with pytest.raises(ConfigError, match="local_weight"):
            r.collect([RolloutJob(None, 0, 0)], 0, script=lambda env: lambda: "add(n=1)")
    finally:
        r.close()
