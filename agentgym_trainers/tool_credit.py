"""Layered credit for a tool step (``--tool-credit c``): the wrong part of a turn, not the
whole turn, loses credit.

A group (or branch) advantage gives every token of a turn the same credit. When the env
can tell which part of an action was wrong, that part's tokens can be told apart from
the rest of the turn:

1. the parser's verdict on each step says which part of the action it blames and where
   that part is in the action text (``info["error"]``'s ``part`` and ``span``, kept per
   turn as ``TurnFacts.blame``; :class:`~agentgym_envs.core.spans.Blame`): an unknown
   tool blames the tool name; an invalid value that argument's value; an argument that
   should not be there (undeclared, given twice, an extra positional one) that argument,
   its name and value; missing arguments, or arguments that are no object, the call's
   arguments; a parse error or too many calls the whole action. A valid call, a message
   to the user, and the errors of tool handlers and safety gates blame nothing;
2. the blamed characters become tokens of the turn's sampled ids: each token's
   characters are found by decoding the ids token by token (tokens that end inside a
   character share it with the next), and every token that overlaps the blamed span is
   blamed. A blamed whole action is every sampled token of the turn, its end-of-turn
   token included;
3. each blamed token's advantage is lowered by ``c``, as the algorithm's last step:
   after the group advantages, the branch credit, the KL charge and whitening (PPO:
   after GAE, as an advantage, not a reward that GAE would spread over earlier tokens).
   Every other token, a correctly chosen tool name in the same turn included, keeps
   exactly the advantage it would have without the option.

It only ever subtracts, and only on tokens of a part the env verifiably rejected, so a
policy cannot earn credit from it (applied before whitening, a penalty would shift the
batch's mean and so raise every other token); where a part cannot be found in the tokens (text that
does not decode back to the action, a part the parser could not locate) nothing changes.
A turn's blame applies to every kept sequence that trains that turn's tokens after the
same context: the original's segments and, with ``--branch``, a branch's sequence at its
branched turn.

Metrics (summed over processes): ``tool_credit_turns`` (blamed turns credited),
``tool_credit_tokens`` (tokens lowered), ``tool_credit_unplaced`` (blamed turns whose
part matched no token).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from agentgym_envs.core.info import ErrorPart
from agentgym_envs.core.spans import Blame, Span
from agentgym_trainers import distributed as dist

if TYPE_CHECKING:
    from agentgym_envs.rollout.episodes import Segment, Trajectory
    from agentgym_trainers.batch import TrainSeq
    from agentgym_trainers.config import TrainConfig

log = logging.getLogger(__name__)

Decode = Callable[[Sequence[int]], str]
"""Token ids to text, special tokens kept (``ChatFormat.decode``)."""


MAX_RUN = 16
"""Tokens a run may hold (a character is at most 4 byte tokens): past that the ids no
longer give back the action, and the search ends there."""


def blamed_tokens(decode: Decode, ids: Sequence[int], action: str, span: Span) -> range | None:
    """The indices of ``ids`` (one turn's sampled tokens, whose text is ``action``
    followed by nothing or an end-of-turn token) whose characters overlap ``span`` of
    ``action``; None when none does or the ids do not decode to ``action``.

    Each token's characters are found as if by decoding ``ids`` prefix by prefix: a
    prefix whose text is a prefix of ``action`` ends a run of tokens at that character;
    a prefix that is not (its last token ends inside a multi-byte character) joins the
    next run. Decoding stops at the first run past the span.

    The prefixes are never decoded whole (that would decode the turn's tokens a number
    of times that grows with its square): a prefix's text past the last run's start is
    what decoding from the run before adds to that run's own text (decoding from an
    earlier token keeps a tokenizer's start-of-text rules, such as a dropped leading
    space, off the new text), so each token is decoded a few times. The two ends of
    the answer are checked against whole decodes; if they disagree nothing is placed.
    """
    start, end = span
    if not 0 <= start < end <= len(action):
        return None
    first = last = -1
    first_chars = last_chars = 0  # the characters before token ``first``, up to ``last``
    run_start, run_chars = 0, 0  # the current run's first token and first character
    context = 0  # where windows start: the start of the run before the current one
    head = ""  # decode(ids[context:run_start])
    for i in range(1, len(ids) + 1):
        if i - run_start > MAX_RUN:
            break  # the ids stopped giving back the action
        window = decode(ids[context:i])
        if not window.startswith(head):
            continue  # the new token changed the text before it: no boundary here
        new = window[len(head) :]  # the text of ids[run_start:i] after what came before
        if action.startswith(new, run_chars):
            chars = run_chars + len(new)
        elif new.startswith(action[run_chars:]):
            chars = len(action)  # past the action's text (its end-of-turn token)
        else:
            continue  # inside a character: the run goes on
        if run_chars < end and chars > start:
            if first < 0:
                first, first_chars = run_start, run_chars
            last, last_chars = i - 1, chars
        if chars >= end:
            break
        context, head = run_start, decode(ids[run_start:i])
        run_start, run_chars = i, chars
    if first < 0:
        return None
    if not _decodes_to(decode, ids[:first], action, first_chars) or not _decodes_to(
        decode, ids[: last + 1], action, last_chars
    ):
        return None  # a tokenizer whose windows decode unlike the whole: never misplace
    return range(first, last + 1)


def _decodes_to(decode: Decode, ids: Sequence[int], action: str, chars: int) -> bool:
    """Whether ``ids`` decode whole to the first ``chars`` characters of ``action``
    (all of them: its text, then possibly an end-of-turn token's)."""
    if not ids:
        return chars == 0
    text = decode(ids)
    return text.startswith(action) if chars == len(action) else text == action[:chars]


def tool_credit(
    trajs: Sequence[Trajectory],
    seqs: Sequence[TrainSeq],
    cfg: TrainConfig,
    decode: Decode,
    device: torch.device,
) -> dict[str, float]:
    """Step 3 of the module docstring on the kept sequences ``seqs`` (their final
    ``advantages`` set; changed in place); returns the metrics (none when
    ``tool_credit`` is 0). Every process joins the metrics' sum when it is on."""
    penalty = cfg.advantage.tool_credit
    if penalty <= 0:
        return {}
    by_traj: dict[int, list[TrainSeq]] = {}
    for s in seqs:
        by_traj.setdefault(s.traj, []).append(s)
    turns = tokens = unplaced = 0
    for i, group in by_traj.items():
        places: dict[tuple[int, int], range | None] = {}  # (id of segment, turn) -> tokens
        done: set[tuple[int, int]] = set()  # (id of sequence, first token of the turn)
        for traj, seg, k, blame in _blamed_turns(trajs[i]):
            first, last = seg.turn_span(k)
            for s in group:
                if (id(s), first) in done or not _trains(s, seg, first, last):
                    continue
                done.add((id(s), first))
                key = (id(seg), k)
                if key not in places:
                    places[key] = _place(decode, traj, seg, k, blame)
                where = places[key]
                if where is None:
                    unplaced += 1
                    continue
                turns += 1
                for t in where:
                    s.advantages[first + t] -= penalty * s.mask[first + t]
                    tokens += s.mask[first + t]
    if unplaced:
        log.debug("tool credit: %d blamed turns matched no token", unplaced)
    total = dist.all_sum([float(turns), float(tokens), float(unplaced)], device)
    return {
        "tool_credit_turns": total[0],
        "tool_credit_tokens": total[1],
        "tool_credit_unplaced": total[2],
    }


def _blamed_turns(traj: Trajectory) -> list[tuple[Trajectory, Segment, int, Blame]]:
    """``(trajectory, segment, k, blame)`` for every blamed turn ``segment.turns[k]`` of
    ``traj`` and of its branches."""
    out = []
    for member in (traj, *(b for bs in traj.branches.values() for b in bs)):
        facts = member.turn_facts
        for seg in member.segments:
            for k, turn in enumerate(seg.turns):
                blame = facts[turn].blame if turn < len(facts) else None
                if blame is not None:
                    out.append((member, seg, k, blame))
    return out


def _trains(s: TrainSeq, seg: Segment, first: int, last: int) -> bool:
    """Whether ``s`` trains the tokens ``first..last`` of ``seg`` after the same context."""
    return (
        last < len(s.ids)
        and all(s.mask[first : last + 1])
        and s.ids[: last + 1] == seg.ids[: last + 1]
    )


def _place(decode: Decode, traj: Trajectory, seg: Segment, k: int, blame: Blame) -> range | None:
    """The blamed tokens of turn ``seg.turns[k]``, relative to its first token."""
    first, last = seg.turn_span(k)
    if blame.part is ErrorPart.ACTION:
        return range(last + 1 - first)
    turn = seg.turns[k]
    if blame.span is None or turn >= len(traj.actions):
        return None
    return blamed_tokens(decode, seg.ids[first : last + 1], traj.actions[turn], blame.span)


__all__ = ["Decode", "blamed_tokens", "tool_credit"]
