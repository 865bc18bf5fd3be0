"""Token in, token out: batched multi-turn episodes with exact token bookkeeping, for
every user of the library that samples tokens (the reference trainer, the TRL and verl
adapters). The runner is the token actor of the one turn loop
(:mod:`agentgym_envs.rollout.loop`).

Each env slot (:mod:`agentgym_envs.rollout`) plays one episode at a time; all slots that
wait for an action are sampled in one batch by a
:class:`~agentgym_envs.llm.generation.Generator`. A trajectory is one or more *segments*
(token sequences a trainer sees): the sampled ids get mask 1 and keep their sampler
log-probabilities; system prompt, observations and template markers get mask 0
(:mod:`agentgym_envs.rollout.turns` builds the chat around the sampled ids; they are
never re-tokenized). When the next turn would not fit in ``max_context`` (or in the
episode's ``max_completion`` tokens after its prompt), the context policy decides:

* ``truncate`` -- the episode ends there (outcome ``timeout``, truncation
  ``context_limit``: a cut episode, which a critic bootstraps from);
* ``drop`` -- a new segment starts with the system prompt and task, then as many of the
  most recent turns as fit (their tokens copied, not re-tokenized, and masked: they were
  trained in the segment that produced them);
* ``summary`` -- as ``drop``, plus a short structured note listing the removed actions.

The system prompt and the task (the first observation) are always kept. ``max_turns``
cuts an episode after that many turns the same way (truncation ``budget``).

Every turn records the weights version of the generator that sampled it
(``Trajectory.turn_versions``): with asynchronous rollouts new weights may arrive between
two turns of one episode. A generation server that fails
(:class:`~agentgym_envs.llm.http_generator.GenerationServerError`) ends the episodes of
that generation call as ``env_error``, like an env crash: never a policy failure.

After each generation call every live slot steps at once, so a Ray env pool steps them
in parallel on its actors.

Branch rollouts (``agentgym_trainers.branching``) ask :meth:`RolloutRunner.collect`
for ``checkpoints``: before each turn it keeps a :class:`TurnCheckpoint` (the env's
snapshot and the policy's context), and a checkpoint given to ``collect`` as a job is
played on from there.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym

from agentgym_envs.core.episode import EpisodeFold, Truncation
from agentgym_envs.distributed.results import SlotResult
from agentgym_envs.llm.chat import ChatFormat, Message
from agentgym_envs.llm.generation import Generator, Sample
from agentgym_envs.llm.http_generator import GenerationServerError
from agentgym_envs.rollout import EnvSlots, LocalEnvSlots, Note, Script
from agentgym_envs.rollout.loop import Lane, fill, play_rounds
from agentgym_envs.rollout.trajectory import (
    RolloutJob,
    Segment,
    Trajectory,
    TurnFacts,
    records,
    token_versions,
)
from agentgym_envs.rollout.turns import answer_ids, head_messages, system_of

log = logging.getLogger(__name__)

ContextPolicy = Literal["truncate", "drop", "summary"]
CONTEXT_POLICIES = ("truncate", "drop", "summary")


@dataclass(frozen=True)
class _TokenTurn:
    action: list[int]
    content: str
    close: list[int]
    open: list[int]
    observation: str


@dataclass
class _Episode:
    traj: Trajectory
    fold: EpisodeFold
    system: str
    task_obs: str
    turns: list[_TokenTurn] = field(default_factory=list)
    first_turn: int = 0  # first turn kept in the current segment's history
    messages: list[Message] = field(default_factory=list)
    segment: Segment = field(default_factory=lambda: Segment([], [], []))
    env_time_ms: float = 0.0
    script: Callable[[], str] | None = None
    # lengths of the fresh render and of the segment after the last check
    fresh_len: int = 0
    checked_len: int = 0
    # keep a TurnCheckpoint before each turn (collect(checkpoints=True), not a branch)
    keep_checkpoints: bool = False
    # tokens the current segment may hold (max_context, or less under max_completion)
    limit: int = 0
    # the sample of the turn being played (its action is stepped before it is observed)
    sample: Sample | None = None

    def fork(self, prompt: int | None) -> _Episode:
        """A copy that shares nothing mutable with this episode (turn objects and finished
        segments, which never change, are shared). ``prompt``: the copy's segment is this
        one's first ``prompt`` tokens; None: it is this very segment, whose first tokens
        never change (a checkpoint's cheap copy, cut when it is played on)."""
        seg = self.segment
        if prompt is not None:
            n = sum(1 for end in seg.turn_ends if end < prompt)
            seg = Segment(
                seg.ids[:prompt],
                seg.mask[:prompt],
                seg.logprobs[:prompt],
                seg.turn_ends[:n],
                seg.turns[:n],
            )
        t = self.traj
        traj = dataclasses.replace(
            t,
            segments=list(t.segments),
            actions=list(t.actions),
            durations_s=list(t.durations_s),
            context=dict(t.context),
            observations=list(t.observations),
            tail_ids=[],
            turn_versions=list(t.turn_versions),
            turn_facts=list(t.turn_facts),
            checkpoints=[],
            branches={},
        )
        return dataclasses.replace(
            self,
            traj=traj,
            fold=copy.deepcopy(self.fold),
            turns=list(self.turns),
            messages=list(self.messages),
            segment=seg,
            keep_checkpoints=False,
            sample=None,  # the turn before the copy is played, not kept with it
        )


@dataclass(frozen=True)
class TurnCheckpoint:
    """An episode just before one of its turns: the env's snapshot and the policy's
    context there. Given to :meth:`RolloutRunner.collect` as a job, the episode is played
    on from it (a branch rollout); the new trajectory starts with the original's first
    ``turn`` turns (their tokens, rewards and versions), and its own ``turn`` follows."""

    turn: int
    """The turn about to be played (the number of actions before it)."""
    env_state: Any
    """The env's snapshot then (``env.unwrapped.get_state()``)."""
    episode: _Episode
    """The rollout's bookkeeping then (see :meth:`_Episode.fork`)."""
    prompt: int
    """The tokens of the segment the turn is sampled after."""
    slot: int | None = None
    """The env slot that played the original. The generator's cache row of that slot
    still holds the original's tokens after its episode, so :meth:`RolloutRunner.collect`
    plays a branch there when it can: its prompt is then a cached prefix, not recomputed."""


@dataclass
class RolloutStats:
    generation_s: float = 0.0
    env_s: float = 0.0
    generated_tokens: int = 0


class RolloutRunner:
    """Plays jobs on a pool of envs with one batched sampler.

    Args:
        make_env: builds one env (called ``n_envs`` times, and again after an env crash);
            unused when ``slots`` is given.
        chat: the tokenizer's chat format.
        sampler: the batched generator (its weights are the current policy).
        n_envs: env slots played in parallel.
        max_new_tokens: sampled tokens per turn at most.
        max_context: tokens per segment at most (None: ``max_completion`` alone bounds
            an episode).
        context_policy: what to do when the next turn would not fit (see module doc).
        max_completion: tokens after an episode's prompt (sampled plus env tokens), at
            most (None: only ``max_context`` bounds them); ``truncate`` only.
        max_turns: turns per episode, at most (None: the env's own budgets); an
            episode still running after them is cut (truncation ``turn_limit``).
        min_turn_tokens: a turn is not started with room for fewer sampled tokens than
            this (nor than ``max_new_tokens``): the episode is cut instead.
        cache_rows: pass each slot's index to the generator as its cache row (a prefix
            cache keeps each slot's tokens there); False: no rows (a generator whose
            rows mean something else).
        system_prompt: start each sequence with the env's system prompt (``info["system"]``);
            without it the chat has no system message (a chat template may still write
            its own default one, as SmolLM2's does).
        slots: where the envs live (default: ``n_envs`` envs of ``make_env`` in this
            process; :func:`~agentgym_trainers.env_slots.pool_slots` puts them on a
            Ray env pool). The runner closes them.

    Raises:
        ValueError: an unknown context policy, ``slots`` of another size than
            ``n_envs``, or ``max_completion`` with a policy other than ``truncate``.
    """

    def __init__(
        self,
        make_env: Callable[[], gym.Env[Any, Any]],
        chat: ChatFormat,
        sampler: Generator,
        *,
        n_envs: int,
        max_new_tokens: int,
        max_context: int | None,
        context_policy: ContextPolicy = "summary",
        system_prompt: bool = True,
        slots: EnvSlots | None = None,
        max_completion: int | None = None,
        max_turns: int | None = None,
        min_turn_tokens: int = 16,
        cache_rows: bool = True,
    ) -> None:
        self.system_prompt = system_prompt
        if context_policy not in CONTEXT_POLICIES:
            raise ValueError(f"context_policy must be one of {CONTEXT_POLICIES}")
        if max_context is None and max_completion is None:
            raise ValueError("bound the tokens: give max_context, max_completion or both")
        if max_completion is not None and context_policy != "truncate":
            raise ValueError(
                "max_completion bounds an episode's one segment: use context_policy "
                f"'truncate' with it, not {context_policy!r}"
            )
        if slots is not None and len(slots) != n_envs:
            raise ValueError(f"slots has {len(slots)} envs, expected n_envs={n_envs}")
        self.make_env = make_env
        self.chat = chat
        self.sampler = sampler
        self.slots: EnvSlots = slots if slots is not None else LocalEnvSlots(make_env, n_envs)
        self.max_new_tokens = max_new_tokens
        self.max_context = max_context
        self.context_policy = context_policy
        self.min_turn_tokens = min(min_turn_tokens, max_new_tokens)
        self.max_completion = max_completion
        self.max_turns = max_turns
        self.cache_rows = cache_rows

    @property
    def envs(self) -> list[gym.Env[Any, Any]]:
        """The in-process envs, slot by slot.

        Raises:
            TypeError: the slots are not in this process (a Ray env pool).
        """
        if not isinstance(self.slots, LocalEnvSlots):
            raise TypeError(
                f"this runner's envs live on {type(self.slots).__name__}, not in this "
                "process; use runner.slots (or --env-backend local)"
            )
        return self.slots.envs

    def close(self) -> None:
        self.slots.close()

    def collect(
        self,
        jobs: Sequence[RolloutJob | TurnCheckpoint],
        policy_version: int,
        script: Script | None = None,
        *,
        checkpoints: bool = False,
        on_episode: Callable[[Trajectory], None] | None = None,
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Play every job to its end; trajectories come back in job order.

        Args:
            jobs: the episodes to play: new ones, or ones played on from a checkpoint
                (its env snapshot is restored into a free slot).
            policy_version: recorded on every trajectory and every turn.
            script: instead of sampling, act with a scripted policy (the SFT warm start
                uses the oracle): called with each new episode's env, it returns the
                function that gives the next action text. Its tokens get mask 1 and
                log-probability 0.
            checkpoints: keep a :class:`TurnCheckpoint` before every turn of the new
                episodes (``Trajectory.checkpoints``): one env snapshot per turn.
            on_episode: called with each trajectory as its episode ends (progress).
        """
        stats = RolloutStats()
        results: dict[int, Trajectory] = {}

        def emit(index: int, trajectory: Trajectory) -> None:
            results[index] = trajectory
            if on_episode is not None:
                on_episode(trajectory)

        self.play(
            _SlotQueue(jobs, len(self.slots)).take,
            emit,
            stats,
            policy_version=policy_version,
            script=script,
            checkpoints=checkpoints,
        )
        return [results[i] for i in range(len(jobs))], stats

    def play(
        self,
        feed: Callable[[int], tuple[int, RolloutJob | TurnCheckpoint] | None],
        emit: Callable[[int, Trajectory], None],
        stats: RolloutStats,
        *,
        policy_version: int | None = None,
        script: Script | None = None,
        before_generate: Callable[[], None] | None = None,
        checkpoints: bool = False,
    ) -> None:
        """Play jobs until ``feed`` has none left and every episode has ended.

        The streaming form of :meth:`collect`, for a rollout worker that is handed jobs
        while it plays: each free env slot takes a ``(key, job)`` pair from
        ``feed(slot)`` (None: no job now) before every generation call, and each
        trajectory goes to ``emit(key, trajectory)`` as soon as it ends.

        Args:
            feed: the next job for the free slot it is given, with its key, or None.
            emit: receives each finished trajectory with its job's key.
            stats: time and tokens are added to it.
            policy_version: the version recorded on every turn (default: the
                generator's ``weights_version`` after the call that sampled it).
            script: act with a scripted policy (see :meth:`collect`).
            before_generate: called before each generation call, after free slots
                took their jobs (an asynchronous worker loads new weights here, so a
                job is never sampled with weights older than those pushed before it).
            checkpoints: keep checkpoints of the new episodes (see :meth:`collect`).
        """
        actor = _Sampling(self, stats, policy_version, script, before_generate, checkpoints)
        lane: Lane[_Episode] = Lane(self.slots, feed, lambda key, ep: emit(key, self._finish(ep)))

        def lanes() -> list[Lane[_Episode]]:
            fill(lane, actor)
            return [lane]

        def env_time(seconds: float) -> None:
            stats.env_s += seconds

        play_rounds(lanes, actor, on_env_s=env_time)

    def _generate(
        self, turns: list[tuple[int, _Episode]], stats: RolloutStats, scripted: bool
    ) -> list[Sample] | None:
        """One sample per ``(slot, episode)``; None when the generation server failed
        (every episode of the call is then ended as ``env_error``)."""
        prompts = [ep.segment.ids for _, ep in turns]
        budgets = [self._room(ep) for _, ep in turns]
        start = time.perf_counter()
        try:
            if not scripted:
                rows = [slot for slot, _ in turns] if self.cache_rows else None
                samples = self.sampler.generate(prompts, budgets, rows=rows)
            else:
                samples = [self._scripted(ep, n) for (_, ep), n in zip(turns, budgets, strict=True)]
        except GenerationServerError as exc:
            log.warning("generation failed for %d episodes: %s", len(turns), exc)
            for _, ep in turns:
                ep.fold.crash(f"{type(exc).__name__}: {exc}")
            return None
        finally:
            stats.generation_s += time.perf_counter() - start
        stats.generated_tokens += sum(len(x.ids) for x in samples)
        return samples

    # -- one episode -----------------------------------------------------------------------

    def _start(self, slot: int, job: RolloutJob, version: int, stats: RolloutStats) -> _Episode:
        traj = Trajectory(job=job, policy_version=version)
        traj.context = {"policy": self.context_policy, "dropped_turns": 0, "truncated": False}
        fold = EpisodeFold()
        start = time.perf_counter()
        options = job.reset_options()
        try:
            result = self.slots.reset(slot, job.env_seed, options)
        finally:
            stats.env_s += time.perf_counter() - start
        if result.crashed:  # an env crash is an env error, never a policy failure
            fold.crash(result.error)
            return _Episode(traj=traj, fold=fold, system="", task_obs="")
        obs, info = result.obs, result.info
        fold.reset(info)
        system = system_of(info, self.system_prompt)
        episode = _Episode(traj=traj, fold=fold, system=system, task_obs=obs)
        traj.system, traj.observations = system, [obs]
        episode.env_time_ms = float((info.get("cost") or {}).get("env_time_ms", 0.0))
        episode.messages = self._head(episode, summary=None)
        episode.segment = Segment(self.chat.render_ids(episode.messages, True), [], [])
        episode.segment.mask = [0] * len(episode.segment.ids)
        episode.segment.logprobs = [0.0] * len(episode.segment.ids)
        episode.fresh_len = episode.checked_len = len(episode.segment.ids)
        limits = [self.max_context] if self.max_context is not None else []
        if self.max_completion is not None:
            limits.append(len(episode.segment.ids) + self.max_completion)
        episode.limit = min(limits)
        if self._room(episode) < self.min_turn_tokens:
            self._truncate(episode)
        return episode

    def _resume(self, slot: int, ckpt: TurnCheckpoint, stats: RolloutStats) -> _Episode:
        """An episode played on from ``ckpt``: its snapshot restored into ``slot``, and a
        copy of its bookkeeping with the segment cut to the checkpoint's prompt."""
        episode = ckpt.episode.fork(ckpt.prompt)
        start = time.perf_counter()
        try:
            result = self.slots.set_state(slot, ckpt.env_state)
        finally:
            stats.env_s += time.perf_counter() - start
        if result.crashed:  # an env error, as a crash in reset
            episode.fold.crash(result.error)
        return episode

    def _checkpoint(self, turns: list[tuple[int, _Episode]], stats: RolloutStats) -> None:
        """Keep the checkpoint before the next turn of each ``(slot, episode)`` (None
        where the env's snapshot could not be taken: that turn is not branched from)."""
        if not turns:
            return
        start = time.perf_counter()
        try:
            states = self.slots.get_states([slot for slot, _ in turns])
        finally:
            stats.env_s += time.perf_counter() - start
        for (slot, ep), state in zip(turns, states, strict=True):
            turn = len(ep.traj.actions)
            assert len(ep.traj.checkpoints) == turn, "one checkpoint per turn"
            ckpt = None
            if state is not None:
                ckpt = TurnCheckpoint(turn, state, ep.fork(None), len(ep.segment.ids), slot)
            ep.traj.checkpoints.append(ckpt)

    def _act(self, ep: _Episode, sample: Sample, version: int) -> str:
        """Append a sample (drawn by weights ``version``); returns its action text."""
        seg, traj = ep.segment, ep.traj
        traj.turn_versions.append(version)
        ep.fold.usage(tokens_in=len(seg.ids), tokens_out=len(sample.ids))
        seg.extend(sample.ids, sample.logprobs)
        seg.turn_ends.append(len(seg.ids) - 1)
        seg.turns.append(len(traj.actions))
        content = self.chat.content(sample.ids)
        traj.actions.append(content)
        return content

    def _observe(self, ep: _Episode, sample: Sample, content: str, result: SlotResult) -> bool:
        """Append the env's answer to the action ``content`` (``sample``'s text). False
        when the episode ended."""
        seg, traj = ep.segment, ep.traj
        if result.crashed:
            ep.fold.crash(result.error)
            return False
        obs, reward, terminated, truncated, info = result.step_tuple()
        env_ms = float((info.get("cost") or {}).get("env_time_ms", ep.env_time_ms))
        traj.durations_s.append(max(env_ms - ep.env_time_ms, 0.0) / 1000.0)
        ep.env_time_ms = env_ms
        ep.fold.step(reward, terminated, truncated, info)
        traj.turn_facts.append(TurnFacts.of(info))
        traj.observations.append(obs)
        if ep.fold.done:
            if ep.fold.summary().cut:
                close, opened = answer_ids(self.chat, list(ep.messages), content, sample.ended, obs)
                traj.tail_ids = close + opened
            return False
        # observation tokens: the template's close of the assistant turn, then a user turn
        close, opened = answer_ids(self.chat, ep.messages, content, sample.ended, obs)
        ep.turns.append(_TokenTurn(sample.ids, content, close, opened, obs))
        seg.extend(close + opened)
        # this turn's ids against the fresh render's part for the same turn
        fresh = self.chat.render_ids(ep.messages, True)
        if fresh[ep.fresh_len :] != seg.ids[ep.checked_len :]:
            traj.retok_mismatches += 1
        ep.fresh_len, ep.checked_len = len(fresh), len(seg.ids)
        if self.max_turns is not None and len(traj.actions) >= self.max_turns:
            ep.fold.cut(Truncation.TURN_LIMIT)  # the observation is the bootstrap tail
            return False
        # when the next turn does not fit: rebuild (drop/summary); if that fails or the
        # policy is truncate, continue with a shorter turn while one fits, else end here
        full = self._room(ep) < self.max_new_tokens
        stuck = full and (self.context_policy == "truncate" or not self._rebuild(ep))
        if stuck and self._room(ep) < self.min_turn_tokens:
            self._truncate(ep)
            return False
        return True

    def _scripted(self, ep: _Episode, budget: int) -> Sample:
        assert ep.script is not None
        ids = [*self.chat.encode(ep.script()), self.chat.eos_id][:budget]
        return Sample(ids, [0.0] * len(ids), ids[-1] == self.chat.eos_id)

    def _room(self, ep: _Episode) -> int:
        return min(self.max_new_tokens, ep.limit - len(ep.segment.ids))

    def _head(self, ep: _Episode, summary: str | None) -> list[Message]:
        return head_messages(ep.system, ep.task_obs, summary)

    def _rebuild(self, ep: _Episode) -> bool:
        """Start a new segment: the head plus the most recent turns that fit in half of the
        history budget (so several turns fit before the next rebuild), or failing that,
        as many as fit at all."""
        assert self.max_context is not None, "only truncate runs without max_context"
        for half in (True, False):
            for keep_from in range(ep.first_turn + 1, len(ep.turns) + 1):
                ids, messages = self._history(ep, keep_from)
                limit = self.max_context - self.max_new_tokens
                if half:
                    head = len(ids) - sum(
                        len(t.action + t.close + t.open) for t in ep.turns[keep_from:]
                    )
                    limit -= max(limit - head, 0) // 2
                if len(ids) <= limit:
                    ep.traj.segments.append(_trimmed(ep.segment))
                    ep.segment = Segment(ids, [0] * len(ids), [0.0] * len(ids))
                    ep.messages = messages
                    ep.first_turn = keep_from
                    ep.traj.context["dropped_turns"] = keep_from
                    # copied turns were checked when they were sampled
                    ep.fresh_len = len(self.chat.render_ids(messages, True))
                    ep.checked_len = len(ids)
                    return True
        return False

    def _history(self, ep: _Episode, keep_from: int) -> tuple[list[int], list[Message]]:
        """Ids and messages of a segment keeping turns ``keep_from + 1...``: the head, the
        (optional) summary of the dropped turns, the last dropped observation, then the
        kept turns' own ids."""
        dropped = ep.turns[:keep_from]  # turns 1..keep_from; turn k's observation is turns[k-1]
        summary = self._summary(dropped) if self.context_policy == "summary" else None
        messages = self._head(ep, summary)
        ids = self.chat.render_ids(messages, False) + dropped[-1].open
        messages.append({"role": "user", "content": dropped[-1].observation})
        for turn in ep.turns[keep_from:]:
            ids += turn.action + turn.close + turn.open
            messages.append({"role": "assistant", "content": turn.content})
            messages.append({"role": "user", "content": turn.observation})
        return ids, messages

    @staticmethod
    def _summary(turns: Sequence[_TokenTurn]) -> str:
        shown = turns[-8:]
        first = len(turns) - len(shown) + 1
        lines = [f"[context] turns 1-{len(turns)} were removed to fit the context window."]
        lines.append("Actions taken in them (most recent last):")
        for i, turn in enumerate(shown, start=first):
            action = " ".join(turn.content.split())
            lines.append(f"{i}. {action[:80]}")
        return "\n".join(lines)

    def _truncate(self, ep: _Episode) -> None:
        ep.segment.ids = ep.segment.ids[: ep.limit]
        ep.segment.mask = ep.segment.mask[: ep.limit]
        ep.segment.logprobs = ep.segment.logprobs[: ep.limit]
        ep.fold.cut(Truncation.CONTEXT_LIMIT)
        ep.traj.context["truncated"] = True

    def _finish(self, ep: _Episode) -> Trajectory:
        seg = ep.segment
        ep.traj.episode = ep.fold.summary()
        if ep.traj.turn_versions:
            ep.traj.policy_version = ep.traj.turn_versions[0]
        cut_here = (Truncation.CONTEXT_LIMIT, Truncation.TURN_LIMIT)
        if ep.traj.episode.truncation in cut_here and seg.turn_ends:
            ep.traj.tail_ids = seg.ids[seg.turn_ends[-1] + 1 :]
        if ep.segment.agent_tokens:
            ep.traj.segments.append(_trimmed(ep.segment))
        ep.traj.context["segments"] = len(ep.traj.segments)
        return ep.traj


class _Sampling:
    """The runner's actor for one :meth:`RolloutRunner.play`: it samples every live
    episode's next turn in one generator call (or asks the scripted policy)."""

    def __init__(
        self,
        runner: RolloutRunner,
        stats: RolloutStats,
        policy_version: int | None,
        script: Script | None,
        before_generate: Callable[[], None] | None,
        checkpoints: bool,
    ) -> None:
        self.runner = runner
        self.stats = stats
        self.policy_version = policy_version
        self.script = script
        self.before_generate = before_generate
        self.checkpoints = checkpoints

    def start(self, lane: Lane[_Episode], slot: int, job: Any) -> _Episode:
        runner = self.runner
        if isinstance(job, TurnCheckpoint):
            episode = runner._resume(slot, job, self.stats)
        else:
            first = self.policy_version
            if first is None:
                first = runner.sampler.weights_version
            episode = runner._start(slot, job, first, self.stats)
            episode.keep_checkpoints = self.checkpoints
        if self.script is not None and not episode.fold.done:
            episode.script = lane.slots.script(slot, self.script)
        return episode

    def act(self, turns: Sequence[tuple[Lane[_Episode], int, _Episode]]) -> list[str]:
        runner = self.runner
        pairs = [(slot, ep) for _, slot, ep in turns]
        runner._checkpoint([(s, ep) for s, ep in pairs if ep.keep_checkpoints], self.stats)
        if self.before_generate is not None:
            self.before_generate()
        samples = runner._generate(pairs, self.stats, self.script is not None)
        if samples is None:  # the generation server failed: env errors, not policy ones
            return [""] * len(pairs)
        # read after the call: a server reports the weights that answered it
        version = self.policy_version
        if version is None:
            version = runner.sampler.weights_version
        actions = []
        for (_, ep), sample in zip(pairs, samples, strict=True):
            ep.sample = sample
            actions.append(runner._act(ep, sample, version))
        return actions

    def note(self, lane: Lane[_Episode], slot: int, episode: _Episode) -> Note:
        return None

    def observe(self, episode: _Episode, action: str, result: SlotResult) -> bool:
        assert episode.sample is not None, "observed before it acted"
        return self.runner._observe(episode, episode.sample, action, result)


class _SlotQueue:
    """The jobs of one :meth:`RolloutRunner.collect`, handed out in order, except that a
    slot takes first the branches whose original it played (``TurnCheckpoint.slot``), so
    they extend the prefix its cache row holds. A slot with none of those takes the next
    job that names no slot, else steals the last branch of the slot with the most waiting
    (that slot keeps the rest, which still find their prefix in its row)."""

    def __init__(self, jobs: Sequence[RolloutJob | TurnCheckpoint], n_slots: int) -> None:
        self.free: deque[tuple[int, RolloutJob | TurnCheckpoint]] = deque()
        self.own: list[deque[tuple[int, RolloutJob | TurnCheckpoint]]] = [
            deque() for _ in range(n_slots)
        ]
        for item in enumerate(jobs):
            slot = item[1].slot if isinstance(item[1], TurnCheckpoint) else None
            if slot is not None and 0 <= slot < n_slots:
                self.own[slot].append(item)
            else:
                self.free.append(item)

    def take(self, slot: int) -> tuple[int, RolloutJob | TurnCheckpoint] | None:
        if self.own[slot]:
            return self.own[slot].popleft()
        if self.free:
            return self.free.popleft()
        longest = max(self.own, key=len)
        return longest.pop() if longest else None


def _trimmed(seg: Segment) -> Segment:
    """The segment without the tokens after its last agent token: they only condition
    turns that live in a later segment (or none), so training on them is wasted work."""
    end = seg.turn_ends[-1] + 1 if seg.turn_ends else len(seg.ids)
    seg.ids, seg.mask, seg.logprobs = seg.ids[:end], seg.mask[:end], seg.logprobs[:end]
    return seg


__all__ = [
    "CONTEXT_POLICIES",
    "RolloutJob",
    "RolloutRunner",
    "RolloutStats",
    "Segment",
    "Trajectory",
    "TurnCheckpoint",
    "TurnFacts",
    "records",
    "token_versions",
]
