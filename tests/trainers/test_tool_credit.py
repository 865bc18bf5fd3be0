"""Layered credit for a tool step (``--tool-credit``): only the tokens of the part of a
turn the env rejected lose advantage; the rest of the turn (a correct tool name) keeps
it; a valid call changes nothing; the credit never adds."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.core import ToolResult, tool
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import ErrorPart
from agentgym_envs.core.spans import Blame, Span
from agentgym_envs.rollout.episodes import RolloutJob, Segment, Trajectory, TurnFacts
from agentgym_trainers.algorithms.registry import make_algorithm
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.tool_credit import Decode, blamed_tokens, tool_credit
from agentgym_trainers.trainer import Trainer
from tests.core.counter_env import CounterEnv
from tests.trainers.test_branching import make_config as branch_config


class NoteEnv(CounterEnv):
    """The counter, plus a tool with a short string argument."""

    @tool("Write a short note.", parameters={"text": {"type": "string", "maxLength": 12}})
    def note(self, text: str) -> ToolResult:
        return ToolResult("Noted.")


FAKE = '<tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call> ünï 😀 {{}}'
# episode A succeeds after five rejected or neutral turns; episode B only peeks and fails
GOOD = [
    '{"name": "note", "arguments": {"text": "' + FAKE.replace('"', '\\"') + '"}}',  # value
    "ad(n=1)",  # unknown tool: the name
    "add(n=1)",  # valid
    "add(n=",  # parse error: the whole action
    "add(n=1, m=2)",  # unexpected argument: 'm=2'
    "fail()",  # a handler's error: blames nothing
    "add(n=1)",
    "add(n=1)",
]
BAD = ["peek()"] * 10
BLAMED = {0: FAKE.replace('"', '\\"'), 1: "ad", 3: None, 4: "m=2"}  # turn -> blamed text


def scripted(plays: list[list[str]]) -> Callable[[gym.Env[Any, Any]], Callable[[], str]]:
    """Each new episode plays the next list of actions."""
    queue = list(plays)

    def script(env: gym.Env[Any, Any]) -> Callable[[], str]:
        actions = iter(queue.pop(0))
        return lambda: next(actions)

    return script


def note_config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    base: dict[str, Any] = dict(
        env="note", model="tiny", device="cpu", steps=1, tasks_per_step=1, group_size=2,
        n_envs=2, max_new_tokens=80, max_context=4096, adv_scale="none", tool_credit=0.5,
        run_dir=str(tmp_path / "run"),
    )  # fmt: skip
    base.update(overrides)
    return TrainConfig.from_flat(**base)


def turn_tokens(traj: Trajectory, turn: int) -> tuple[int, int]:
    (seg,) = traj.segments
    return seg.turn_span(seg.turns.index(turn))


@pytest.mark.parametrize(
    ("algo", "whiten"), [("grpo", False), ("reinforce", True), ("ppo", False), ("ppo", True)]
)
def test_only_the_rejected_part_of_a_turn_loses_credit(
    tmp_path: Path, tokenizer: Any, algo: str, whiten: bool
) -> None:
    """Exactly ``c`` comes off the rejected part's tokens and nothing else moves, with
    whitening too (which would spread a penalty's mean shift over every token)."""
    cfg = note_config(tmp_path, algo=algo, whiten=whiten)
    trainer = Trainer(cfg, make_env=NoteEnv)
    try:
        trajs, _ = trainer.runner.collect(trainer.jobs(), 0, script=scripted([GOOD, BAD]))
        seqs, stats = trainer.advantages(trajs)
        plain = make_algorithm(cfg.replace(tool_credit=0.0), trainer)
        base, base_stats = plain.advantages(trajs)
    finally:
        trainer.close()
    assert "tool_credit_turns" not in base_stats
    good = next(i for i, t in enumerate(trajs) if t.actions[0] == GOOD[0])
    assert trajs[good].episode.success and trajs[good].actions == GOOD
    assert [s.traj for s in seqs] == [s.traj for s in base]
    lowered = 0
    for s, b in zip(seqs, base, strict=True):
        assert s.ids == b.ids
        diff = [x - y for x, y in zip(s.advantages, b.advantages, strict=True)]
        if s.traj != good:  # only valid calls: nothing changes
            assert s.advantages == b.advantages
            continue
        for turn, blamed in enumerate(trajs[good].turn_facts):
            first, last = turn_tokens(trajs[good], turn)
            changed = [t for t in range(first, last + 1) if diff[t] != 0.0]
            assert all(diff[t] == pytest.approx(-0.5) for t in changed)
            if turn not in BLAMED:
                assert changed == [] and blamed.blame is None, turn
                continue
            assert changed and changed == list(range(changed[0], changed[-1] + 1))
            lowered += len(changed)
            text = trainer.chat.decode(s.ids[changed[0] : changed[-1] + 1])
            before = trainer.chat.decode(s.ids[first : changed[0]])
            where = BLAMED[turn]
            if where is None:  # the whole action, its end token included
                assert changed == list(range(first, last + 1))
                continue
            assert where in text
            if turn == 0:  # the tool name keeps its credit; the fake call inside is text
                assert '"note"' in before and "note" not in text
            if turn == 1:
                assert "n=1" not in text
            if turn == 4:
                assert "add(n=1" in before and "add" not in text
        # tokens outside the turns' actions never change
        assert all(d == 0.0 for d, m in zip(diff, s.mask, strict=True) if not m)
    assert stats["tool_credit_turns"] == 4.0 and stats["tool_credit_unplaced"] == 0.0
    assert stats["tool_credit_tokens"] == float(lowered)


def test_a_branch_sequence_is_credited_at_its_branched_turn(tmp_path: Path, tokenizer: Any) -> None:
    """Originals scripted, branches sampled by the random tiny model (FrozenLake takes no
    plain text, so its actions are parse errors): a branch's trained tokens all lose the
    credit where its branched turn was blamed, and nothing else does."""
    cfg = branch_config(tmp_path, temperature=1.0, tool_credit=0.25, branch_k=2)
    trainer = Trainer(cfg)
    try:
        jobs = trainer.jobs()
        trajs, _ = trainer.runner.collect(
            jobs, 0, script=scripted([["move(direction='up')"] * 3] * len(jobs)), checkpoints=True
        )
        assert trainer.brancher is not None
        trainer.brancher.branch(trajs, 0, 0)
        seqs, stats = trainer.advantages(trajs)
        base, _ = make_algorithm(cfg.replace(tool_credit=0.0), trainer).advantages(trajs)
    finally:
        trainer.close()
    n_original = sum(len(t.segments) for t in trajs)
    for s, b in zip(seqs[:n_original], base[:n_original], strict=True):
        assert s.advantages == b.advantages  # valid moves
    branches = [br for t in trajs for bs in t.branches.values() for br in bs]
    blamed = 0
    for s, b in zip(seqs[n_original:], base[n_original:], strict=True):
        trained = [i for i, m in enumerate(s.mask) if m]
        owner = next(br for br in branches if _trains_last(br, s))
        turn = owner_turn(owner, s)
        is_blamed = owner.turn_facts[turn].blame is not None
        blamed += is_blamed
        for i in trained:
            assert s.advantages[i] - b.advantages[i] == pytest.approx(-0.25 if is_blamed else 0.0)
    assert blamed > 0 and stats["tool_credit_turns"] == float(blamed)


def _trains_last(branch: Trajectory, s: TrainSeq) -> bool:
    return any(seg.ids[: len(s.ids)] == s.ids for seg in branch.segments)


def owner_turn(branch: Trajectory, s: TrainSeq) -> int:
    for seg in branch.segments:
        for k, turn in enumerate(seg.turns):
            if seg.turn_span(k)[1] == len(s.ids) - 1:
                return turn
    raise AssertionError("no turn ends where the sequence does")


# -- tokens of a span ------------------------------------------------------------------------


def test_native_mode_blame_never_lands_on_other_tokens(tokenizer: Any) -> None:
    """In native mode a message without tool calls is parsed as its content; the blame's
    span counts in the action the trainer records (the whole JSON message)."""
    env = CounterEnv(tool_mode="native")
    env.reset(seed=0)
    action = json.dumps({"role": "assistant", "content": "add(n=1, m=2)"})
    *_, info = env.step(action)
    blame = TurnFacts.of(dict(info)).blame  # what the trainer keeps for the turn
    assert blame is not None and blame.part is ErrorPart.ARGUMENT and blame.span is not None
    assert action[blame.span.start : blame.span.end] == "m=2"

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    ids = tokenizer.encode(action, add_special_tokens=False)
    assert decode(ids) == action  # the sampled ids give back the recorded action
    where = blamed_tokens(decode, ids, action, blame.span)
    assert where is not None and "m=2" in decode(ids[where.start : where.stop])
    assert "assistant" not in decode(ids[where.start : where.stop])
    env.close()


def test_blamed_tokens_of_unicode_text(tokenizer: Any) -> None:
    """Emoji and accents are split across byte-level tokens: a token that ends inside
    a character is blamed with the next; the blamed tokens cover the span, no more."""
    action = 'note(text="ü😀日本 x") then add(n=1)'
    ids = [*tokenizer.encode(action, add_special_tokens=False), tokenizer.eos_token_id]

    def decode(x: Sequence[int]) -> str:
        return str(tokenizer.decode(list(x), skip_special_tokens=False))

    start = action.index("ü")
    got = blamed_tokens(decode, ids, action, Span(start, start + len("ü😀日本 x")))
    assert got is not None
    text = decode(ids[got.start : got.stop])
    assert "ü😀日本 x" in text and "note" not in text and "add" not in text
    # one token fewer on either side no longer covers it
    assert "ü😀日本 x" not in decode(ids[got.start + 1 : got.stop])
    assert "ü😀日本 x" not in decode(ids[got.start : got.stop - 1])
    name = blamed_tokens(decode, ids, action, Span(0, 4))
    assert name is not None and "note" in decode(ids[name.start : name.stop])
    assert name.stop <= got.start
    assert blamed_tokens(decode, ids, action, Span(3, 3)) is None  # empty
    assert blamed_tokens(decode, ids, action, Span(0, len(action) + 1)) is None
    assert blamed_tokens(decode, ids, "something else", Span(0, 4)) is None


def prefix_by_prefix(decode: Decode, ids: Sequence[int], action: str, span: Span) -> range | None:
    """The placement by its definition: every prefix of ``ids`` decoded whole (the
    reference blamed_tokens must agree with; its work grows with the square of the turn)."""
    first = last = -1
    run_start, run_chars = 0, 0
    for i in range(1, len(ids) + 1):
        prefix = decode(ids[:i])
        if action.startswith(prefix):
            chars = len(prefix)
        elif prefix.startswith(action):
            chars = len(action)
        else:
            continue
        if run_chars < span.end and chars > span.start:
            first = run_start if first < 0 else first
            last = i - 1
        run_start, run_chars = i, chars
        if chars >= span.end:
            break
    return range(first, last + 1) if first >= 0 else None


@pytest.mark.parametrize(
    "action",
    [
        'note(text="ü😀日本 x") then add(n=1)',
        '{"name": "write", "arguments": {"text": "  déjà vu\\n\\t«»  ", "mode": "x"}}',
        "   leading spaces, then 🧪🧪 and a tail",
    ],
)
def test_blamed_tokens_equal_the_prefix_by_prefix_placement(tokenizer: Any, action: str) -> None:
    ids = [*tokenizer.encode(action, add_special_tokens=False), tokenizer.eos_token_id]

    def decode(x: Sequence[int]) -> str:
        return str(tokenizer.decode(list(x), skip_special_tokens=False))

    n = len(action)
    spans = {Span(a, b) for a in range(0, n, 3) for b in (a + 1, a + 4, a + 11, n) if a < b <= n}
    for span in sorted(spans):
        assert blamed_tokens(decode, ids, action, span) == prefix_by_prefix(
            decode, ids, action, span
        ), span


def test_placing_a_blame_decodes_each_token_a_bounded_number_of_times(tokenizer: Any) -> None:
    """Decoding every prefix of a turn costs the square of its length (~1.7 s for one
    blamed 4,000-token edit); each token is decoded a few times instead."""
    decoded = [0]

    def decode(ids: Sequence[int]) -> str:
        decoded[0] += len(ids)
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    body = "x = compute(value) + 1\n" * 60
    action = json.dumps({"name": "write", "arguments": {"text": body, "mode": "bogus"}})
    ids = tokenizer.encode(action, add_special_tokens=False)
    start = action.rindex("bogus")
    where = blamed_tokens(decode, ids, action, Span(start, start + len("bogus")))
    assert where is not None and "bogus" in decode(ids[where.start : where.stop])
    decoded[0] = 0
    blamed_tokens(decode, ids, action, Span(start, start + len("bogus")))
    assert decoded[0] <= 8 * len(ids), f"{decoded[0]} tokens decoded for a {len(ids)}-token turn"


# -- it never adds -------------------------------------------------------------------------


def char_decode(ids: Sequence[int]) -> str:
    """A character-level 'tokenizer': id c is chr(c); 0 is the end-of-turn token."""
    return "".join(chr(i) if i else "<eos>" for i in ids)


def hand_trajectory(actions: list[str], blames: list[Blame | None]) -> Trajectory:
    """One segment: a template token (id 1), then each action's characters and an
    end-of-turn token."""
    ids, mask, ends = [], [], []
    for action in actions:
        ids.append(1)
        mask.append(0)
        ids += [ord(c) for c in action] + [0]
        mask += [1] * (len(action) + 1)
        ends.append(len(ids) - 1)
    seg = Segment(ids, mask, [0.0] * len(ids), ends, list(range(len(actions))))
    traj = Trajectory(job=RolloutJob("t", 0, 0), policy_version=0, segments=[seg])
    traj.actions = list(actions)
    traj.turn_facts = [TurnFacts((), b is not None, 0, b) for b in blames]
    return traj


CHARS = st.characters(min_codepoint=2, max_codepoint=0x2FFF)
ACTIONS = st.lists(st.text(CHARS, min_size=1, max_size=8), min_size=1, max_size=4)


@st.composite
def blamed_batch(draw: st.DrawFn) -> tuple[Trajectory, list[float]]:
    actions = draw(ACTIONS)
    blames: list[Blame | None] = []
    for action in actions:
        part = draw(st.sampled_from([None, *ErrorPart]))
        if part is None:
            blames.append(None)
            continue
        a = draw(st.integers(0, len(action)))
        b = draw(st.integers(a, len(action)))
        blames.append(Blame(part, span=draw(st.sampled_from([Span(a, b), None]))))
    traj = hand_trajectory(actions, blames)
    n = len(traj.segments[0].ids)
    advs = draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=n, max_size=n))
    return traj, advs


@given(blamed_batch(), st.floats(0.01, 2.0))
def test_tool_credit_only_ever_subtracts(batch: tuple[Trajectory, list[float]], c: float) -> None:
    """Whatever is blamed: every advantage stays or drops by exactly ``c``; it drops
    exactly on the sampled tokens of blamed parts (the whole turn for ACTION, the span's
    characters otherwise); nothing else moves."""
    traj, advs = batch
    seg = traj.segments[0]
    s = TrainSeq(list(seg.ids), list(seg.mask), [0.0] * len(seg.ids), 0, 0)
    s.advantages = [a * m for a, m in zip(advs, seg.mask, strict=True)]
    before = list(s.advantages)
    cfg = TrainConfig.from_flat(tool_credit=c)
    stats = tool_credit([traj], [s], cfg, char_decode, torch.device("cpu"))
    expected = list(before)
    for k, fact in enumerate(traj.turn_facts):
        first, last = seg.turn_span(k)
        blame = fact.blame
        if blame is None:
            continue
        if blame.part is ErrorPart.ACTION:
            hit = range(first, last + 1)
        elif blame.span is None or blame.span.start == blame.span.end:
            hit = range(0)
        else:  # one character per token here
            hit = range(first + blame.span.start, first + blame.span.end)
        for t in hit:
            expected[t] -= c
    assert s.advantages == pytest.approx(expected)
    assert all(x <= y for x, y in zip(s.advantages, before, strict=True))
    assert stats["tool_credit_tokens"] == sum(
        1 for x, y in zip(s.advantages, before, strict=True) if x != y
    )


def test_off_changes_nothing_and_reports_nothing() -> None:
    traj = hand_trajectory(["ab("], [Blame(ErrorPart.ACTION, span=Span(0, 3))])
    seg = traj.segments[0]
    s = TrainSeq(list(seg.ids), list(seg.mask), [0.0] * len(seg.ids), 0, 0)
    s.advantages = [1.0 * m for m in seg.mask]
    assert tool_credit([traj], [s], TrainConfig(), char_decode, torch.device("cpu")) == {}
    assert s.advantages == [1.0 * m for m in seg.mask]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tool_credit": -0.1}, "tool_credit must be a finite number >= 0"),
        ({"tool_credit": float("nan")}, "tool_credit must be a finite number >= 0"),
        ({"tool_credit": float("inf")}, "tool_credit must be a finite number >= 0"),
        ({"tool_credit": 0.5, "algo": "sft", "sft_steps": 1}, "drop --tool-credit"),
    ],
)
def test_bad_tool_credit_configs_name_the_fix(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_flat(**overrides)
