"""Asynchronous rollouts with bounded policy lag (``agentgym train --rollout async``).

A rollout worker plays episodes with a copy of the policy's weights (version ``v``) while
the learner trains version ``v + 1``; after each update the learner pushes its new
weights to the worker (a broadcast), which loads them at its next turn boundary. So:

1. every *turn* records the weights version that sampled it
   (``Trajectory.turn_versions``): an episode can straddle a push;
2. the learner consumes *finished groups*: a group (the ``group_size`` episodes of one
   task and env seed that GRPO/RLOO compare) is queued when its last episode ends, and
   the learner takes the first ``tasks_per_step`` finished groups. A group with a long
   episode waits; the others train;
3. bounded lag: the jobs of generation step ``j`` are handed to the worker only after
   the learner pushed the weights of its step ``j - 1 - max_lag``, and the worker loads
   pushed weights before sampling a job handed to it after them. With ``max_lag = 0``
   this is exactly the synchronous schedule (the worker waits for each update);
4. the learner masks, per token, the samples more than ``max_lag`` versions behind its
   own (:func:`fresh_tokens`: a stale turn of a straddling episode is dropped, its
   fresher turns train; the stale tokens stay in the sequence as context, with no
   gradient), and weights the rest by truncated importance sampling against the
   sampler's log-probabilities (the trainer's ``truncated_is_weights``);
5. failures: an env that raises and a generation server that fails
   (:class:`~agentgym_envs.llm.http_generator.GenerationServerError`) end their
   episodes as ``env_error`` (masked, never a negative reward); a crash of the worker
   itself (its thread, or the Ray actor's process) is raised in the learner as
   :class:`RolloutWorkerError`, and a worker that delivers nothing for
   ``async_timeout_s`` as :class:`RolloutTimeoutError`.

The seam: the learner talks to a :class:`RolloutWorker` (submit jobs, push weights,
take finished groups) and pushes plain data (:class:`PolicyWeights`); its side,
:class:`AsyncRollouts`, reads from the learner only what :class:`Learner` names (the
jobs of a step, the version, the weights). Two workers ship (``--rollout-worker``,
``Trainer.rollout_worker``):

* ``thread``: the in-process :class:`ThreadRolloutWorker` plays with a
  :class:`SamplingPolicy` (a copy of the learner's model on its device) in a
  background thread; a push hands it the new state dict;
* ``ray``: :class:`~agentgym_trainers.ray_rollout.RayRolloutWorker` runs the same
  thread worker inside a Ray actor, with a CPU copy of the policy built from the run's
  config; a push puts the state dict in Ray's object store once and returns when the
  actor holds it.

Either way the weights are loaded between generation calls, never mid-turn. A worker
that samples from an external generation server
(:class:`~agentgym_envs.llm.http_generator.HttpGenerator`) is its
:class:`SamplingPolicy`'s ``load`` to write: this module pushes weights to the worker,
not to a server (``agentgym serve`` loads a saved folder with ``load_weights``; a vLLM
or SGLang server must be reloaded by the user, see docs/generation.md).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from agentgym_envs.core.errors import AgentGymError, ClosedError
from agentgym_envs.llm.generation import Generator
from agentgym_envs.rollout.episodes import (
    RolloutJob,
    RolloutRunner,
    RolloutStats,
    Trajectory,
    token_versions,
)
from agentgym_trainers.algorithms.offpolicy import lag_keep_mask
from agentgym_trainers.batch import TrainSeq

if TYPE_CHECKING:
    from agentgym_envs.llm.sampler import Sampler

log = logging.getLogger(__name__)


class RolloutWorkerError(AgentGymError, RuntimeError):
    """The rollout worker crashed (outside an env or a generation call, which end their
    episodes as ``env_error``); the cause is chained."""


class RolloutTimeoutError(AgentGymError, TimeoutError):
    """The rollout worker delivered no finished group in time."""


@dataclass(frozen=True)
class PolicyWeights:
    """The learner's weights after an update: what is broadcast to rollout workers.

    Attributes:
        version: the policy version (updates applied so far).
        state: a detached copy of the model's ``state_dict`` (``.cpu()`` it before
            sending it to another process).
    """

    version: int
    state: dict[str, torch.Tensor]


def snapshot(model: torch.nn.Module, version: int) -> PolicyWeights:
    """A copy of ``model``'s weights as ``version`` (the learner keeps training its own)."""
    with torch.no_grad():
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return PolicyWeights(version, state)


class SamplingPolicy(Protocol):
    """What a rollout worker samples with: a generator and a way to load new weights."""

    @property
    def generator(self) -> Generator:
        """Samples the worker's turns; its ``weights_version`` is the loaded version."""
        ...

    def load(self, weights: PolicyWeights) -> None:
        """Sample with ``weights`` from now on."""
        ...


class LocalPolicy:
    """A copy of the learner's model and a :class:`~agentgym_envs.llm.sampler.Sampler`
    over it (same settings and engine kind as the learner's)."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    @property
    def generator(self) -> Generator:
        return self.sampler

    def load(self, weights: PolicyWeights) -> None:
        # copied in place: a static engine sees the parameters change and drops its cache
        with torch.no_grad():
            self.sampler.model.load_state_dict(weights.state)
        self.sampler.weights_version = weights.version


# -- groups ----------------------------------------------------------------------------------


@dataclass
class FinishedGroup:
    """All episodes of one group, in the order their jobs were submitted."""

    group: int
    first_key: int
    trajectories: list[Trajectory]


class GroupAssembler:
    """Collects finished episodes by group; a group is complete when all its jobs are."""

    def __init__(self) -> None:
        self._group_of: dict[int, int] = {}
        self._members: dict[int, dict[int, Trajectory | None]] = {}

    def expect(self, key: int, job: RolloutJob) -> None:
        """Job ``key`` belongs to ``job.group``."""
        self._group_of[key] = job.group
        self._members.setdefault(job.group, {})[key] = None

    def finish(self, key: int, traj: Trajectory) -> FinishedGroup | None:
        """Record job ``key``'s trajectory; the group when this completed it."""
        group = self._group_of.pop(key)
        members = self._members[group]
        members[key] = traj
        if any(t is None for t in members.values()):
            return None
        del self._members[group]
        keys = sorted(members)
        return FinishedGroup(group, keys[0], [t for k in keys if (t := members[k]) is not None])

    @property
    def open(self) -> int:
        """Groups with an episode still to finish."""
        return len(self._members)


# -- the worker ------------------------------------------------------------------------------


class RolloutWorker(Protocol):
    """Plays rollout jobs while the learner trains (see the module docstring)."""

    def start(self) -> None:
        """Start playing (jobs submitted before or after)."""
        ...

    def submit(self, jobs: Sequence[RolloutJob]) -> None:
        """Queue jobs; a group's jobs must come in one call."""
        ...

    def push(self, weights: PolicyWeights) -> None:
        """New weights, loaded before the next generation call (the newest push wins)."""
        ...

    def take(self, n: int, timeout_s: float) -> list[FinishedGroup]:
        """The ``n`` oldest finished groups, waiting for them at most ``timeout_s``."""
        ...

    def stats(self) -> tuple[RolloutStats, float]:
        """Cumulative generation/env time and tokens, and the seconds spent idle waiting
        for jobs (which the learner hands out after its weight pushes)."""
        ...

    def close(self) -> None:
        """Stop and release envs (idempotent)."""
        ...


class _Stopped(Exception):
    """Unwinds the worker thread when it is closed."""


class ThreadRolloutWorker:
    """A :class:`RolloutWorker` in a background thread of this process.

    Args:
        make_runner: builds the rollout runner (its envs) around a generator; called in
            the worker thread, so thread-bound envs (a Playwright browser) live there.
        policy: the weights the worker samples with.
        threads: torch intra-op threads of the worker thread (default: the caller's).
    """

    def __init__(
        self,
        make_runner: Callable[[Generator], RolloutRunner],
        policy: SamplingPolicy,
        *,
        threads: int | None = None,
    ) -> None:
        self.policy = policy
        self._make_runner = make_runner
        self._threads = threads or torch.get_num_threads()
        self._cond = threading.Condition()
        self._jobs: deque[tuple[int, RolloutJob]] = deque()
        self._ready: deque[FinishedGroup] = deque()
        self._groups = GroupAssembler()
        self._weights: PolicyWeights | None = None
        self._error: BaseException | None = None
        self._stop = False
        self._keys = 0
        self._stats = RolloutStats()  # written by the worker thread only
        self._wait_s = 0.0
        self._thread = threading.Thread(target=self._run, name="rollout-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, jobs: Sequence[RolloutJob]) -> None:
        with self._cond:
            for job in jobs:
                self._jobs.append((self._keys, job))
                self._groups.expect(self._keys, job)
                self._keys += 1
            self._cond.notify_all()

    def push(self, weights: PolicyWeights) -> None:
        with self._cond:
            if self._weights is None or weights.version > self._weights.version:
                self._weights = weights

    def take(self, n: int, timeout_s: float) -> list[FinishedGroup]:
        """Raises:
        RolloutWorkerError: the worker crashed, or fewer than ``n`` groups were submitted.
        RolloutTimeoutError: no ``n`` finished groups within ``timeout_s``.
        ClosedError: the worker was closed."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                self._check(n)
                if len(self._ready) >= n:
                    return [self._ready.popleft() for _ in range(n)]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RolloutTimeoutError(
                        f"the rollout worker finished {len(self._ready)} of the {n} groups "
                        f"the learner needs within {timeout_s:g} s ({self._groups.open} groups "
                        "still playing); an env or generation call may hang. Raise "
                        "--async-timeout-s if episodes are legitimately this slow"
                    )
                self._cond.wait(left)

    def _check(self, n: int) -> None:
        if self._error is not None:
            raise RolloutWorkerError(
                f"the rollout worker crashed: {type(self._error).__name__}: {self._error}"
            ) from self._error
        if self._stop:
            raise ClosedError("this rollout worker was closed; make a new one")
        if len(self._ready) + self._groups.open < n:
            raise RolloutWorkerError(
                f"the learner asked for {n} groups but only {len(self._ready)} are finished "
                f"and {self._groups.open} playing; submit their jobs first"
            )

    def stats(self) -> tuple[RolloutStats, float]:
        s = self._stats
        return RolloutStats(s.generation_s, s.env_s, s.generated_tokens), self._wait_s

    def close(self, timeout_s: float = 30.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # stuck in an env or a remote call
                log.warning("the rollout worker did not stop within %g s", timeout_s)

    # -- the worker thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            torch.set_num_threads(self._threads)
            runner = self._make_runner(self.policy.generator)
            try:
                while self._wait_for_jobs():
                    runner.play(self._feed, self._emit, self._stats, before_generate=self._load)
            finally:
                runner.close()
        except _Stopped:
            pass
        except BaseException as exc:  # raised in the learner by take()
            log.exception("the rollout worker crashed")
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _wait_for_jobs(self) -> bool:
        start = time.perf_counter()
        with self._cond:
            while not self._jobs and not self._stop:
                self._cond.wait()
            self._wait_s += time.perf_counter() - start
            return not self._stop

    def _feed(self, slot: int) -> tuple[int, RolloutJob] | None:
        del slot  # new episodes only: any free slot plays the oldest job
        with self._cond:
            if self._stop:
                raise _Stopped
            return self._jobs.popleft() if self._jobs else None

    def _load(self) -> None:
        """Before each generation call: the newest pushed weights, if newer."""
        with self._cond:
            if self._stop:
                raise _Stopped
            weights, self._weights = self._weights, None
        if weights is not None and weights.version > self.policy.generator.weights_version:
            self.policy.load(weights)

    def _emit(self, key: int, traj: Trajectory) -> None:
        with self._cond:
            group = self._groups.finish(key, traj)
            if group is not None:
                self._ready.append(group)
                self._cond.notify_all()


# -- the learner's side ----------------------------------------------------------------------


def fresh_tokens(
    seqs: Sequence[TrainSeq], version: int, max_lag: int
) -> tuple[list[tuple[int, TrainSeq]], int]:
    """The sequences to train on with their agent tokens more than ``max_lag`` versions
    behind ``version`` masked out, each with its index in ``seqs``; and how many
    sequences were dropped because none of their tokens was fresh.

    A sequence whose tokens all come from one version (``token_versions`` empty) is kept
    or dropped whole and passed on unchanged; a straddling one is copied with the stale
    tokens' mask set to 0 (they stay as context, with no gradient)."""
    kept: list[tuple[int, TrainSeq]] = []
    dropped = 0
    for i, s in enumerate(seqs):
        if not s.token_versions:
            fresh = bool(lag_keep_mask(torch.tensor([s.version]), version, max_lag)[0])
            kept += [(i, s)] if fresh else []
            dropped += not fresh
            continue
        keep = lag_keep_mask(torch.tensor(s.token_versions), version, max_lag).tolist()
        mask = [m if k else 0 for m, k in zip(s.mask, keep, strict=True)]
        if not any(mask):
            dropped += 1
        else:
            kept.append((i, s if mask == s.mask else dataclasses.replace(s, mask=mask)))
    return kept, dropped


def lag_metrics(trajs: Sequence[Trajectory], version: int, max_lag: int) -> dict[str, float]:
    """Over the agent tokens of the valid episodes: mean and largest policy lag behind
    ``version``, the share past ``max_lag`` (masked from the loss), and the share of
    episodes whose turns were sampled by more than one version."""
    lags: list[int] = []
    valid = straddling = 0
    for t in trajs:
        if not t.episode.valid:
            continue
        valid += 1
        straddling += len(set(t.turn_versions)) > 1
        for seg in t.segments:
            versions = token_versions(t, seg)
            lags += [version - v for v, m in zip(versions, seg.mask, strict=True) if m]
    n = max(len(lags), 1)
    return {
        "lag_mean": sum(lags) / n,
        "lag_max": float(max(lags, default=0)),
        "stale_token_frac": sum(lag > max_lag for lag in lags) / n,
        "straddle_rate": straddling / max(valid, 1),
    }


class Learner(Protocol):
    """What the asynchronous rollouts read from the learner (the trainer is one): the
    jobs of a generation step, the policy's version, and its weights."""

    @property
    def version(self) -> int:
        """The policy version (updates applied so far)."""
        ...

    def jobs(self, step: int) -> list[RolloutJob]:
        """This process's jobs of generation step ``step`` (group ids from 0 up; every
        process draws the same tasks)."""
        ...

    def weights(self) -> PolicyWeights:
        """A copy of the current weights, as :attr:`version`."""
        ...


class AsyncRollouts:
    """The learner's side: hands the worker jobs, takes finished groups, pushes weights.

    Created when RL starts (after the SFT warm start); the worker starts at once with
    ``max_lag + 1`` steps of jobs.

    Args:
        learner: where jobs, the version and the weights come from.
        worker: the rollout worker; closed here if starting it fails.
        first_step: the generation step whose jobs go out first (the learner's step).
        tasks_per_step: groups the learner trains on per step (per process).
        world: processes handing out jobs (a step's group ids are unique over them).
        max_lag: the bounded lag (see the module docstring).
        timeout_s: how long :meth:`next_batch` waits for the worker.
    """

    def __init__(
        self,
        learner: Learner,
        worker: RolloutWorker,
        *,
        first_step: int,
        tasks_per_step: int,
        world: int = 1,
        max_lag: int,
        timeout_s: float,
    ) -> None:
        self.learner = learner
        self.worker = worker
        self.tasks_per_step = tasks_per_step
        self.width = tasks_per_step * world  # group ids per generation step
        self.max_lag = max_lag
        self.timeout_s = timeout_s
        self.next_step = first_step  # the generation step whose jobs go out next
        self._seen, self._seen_wait = RolloutStats(), 0.0
        try:
            self.worker.start()
            for _ in range(self.max_lag + 1):
                self.submit()
        except BaseException:  # the learner never holds this worker: close it here
            self.worker.close()
            raise

    def submit(self) -> None:
        """Hand out the jobs of the next generation step (group ids unique per run)."""
        jobs = self.learner.jobs(self.next_step)
        offset = self.next_step * self.width
        self.worker.submit([dataclasses.replace(j, group=offset + j.group) for j in jobs])
        self.next_step += 1

    def next_batch(self) -> tuple[list[Trajectory], RolloutStats, dict[str, float]]:
        """The oldest ``tasks_per_step`` finished groups (in submission order), the
        worker's generation/env time and tokens since the last batch, and the batch's
        lag and waiting metrics."""
        start = time.perf_counter()
        groups = self.worker.take(self.tasks_per_step, self.timeout_s)
        waited = time.perf_counter() - start
        groups.sort(key=lambda g: g.first_key)
        trajs = [t for g in groups for t in g.trajectories]
        stats, wait_s = self.worker.stats()
        seen = self._seen
        delta = RolloutStats(
            stats.generation_s - seen.generation_s,
            stats.env_s - seen.env_s,
            stats.generated_tokens - seen.generated_tokens,
        )
        metrics = lag_metrics(trajs, self.learner.version, self.max_lag)
        metrics["time_learner_wait_s"] = waited
        metrics["time_worker_wait_s"] = wait_s - self._seen_wait
        self._seen, self._seen_wait = stats, wait_s
        return trajs, delta, metrics

    def after_update(self, updated: bool) -> None:
        """After the learner's step: push its new weights (if it updated), then release
        the next generation step's jobs (in this order: see the module docstring)."""
        if updated:
            self.worker.push(self.learner.weights())
        self.submit()

    def close(self) -> None:
        self.worker.close()


__all__ = [
    "AsyncRollouts",
    "FinishedGroup",
    "GroupAssembler",
    "Learner",
    "LocalPolicy",
    "PolicyWeights",
    "RolloutTimeoutError",
    "RolloutWorker",
    "RolloutWorkerError",
    "SamplingPolicy",
    "ThreadRolloutWorker",
    "fresh_tokens",
    "lag_metrics",
    "snapshot",
]
