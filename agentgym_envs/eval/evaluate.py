"""Evaluate policies on a suite: play every job, record every episode, build the report.

For each policy and suite entry the evaluator opens ``batch`` env slots
(:mod:`agentgym_envs.rollout`: in this process, one worker process each, or on Ray
actors), hands jobs (task, trial, reset seed) to free slots
and steps all live episodes in lockstep, so an LLM policy generates for the whole batch
at once. An env that raises, or a worker process that dies, ends only its episode, as
``env_error``; such episodes leave every success denominator and are counted apart.

The report (plain data, see :func:`build_report`) embeds the suite's spec, the policies,
the configuration and every episode's seeds and versions, so :func:`replay.replay` can re-run
the same episodes from the report alone.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from agentgym_envs.core.episode import EpisodeFold, EpisodeStateError
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import Task
from agentgym_envs.distributed.results import SlotResult
from agentgym_envs.eval.breakdown import breakdowns, tasks_of
from agentgym_envs.eval.journal import EpisodeJournal, EpisodeResult
from agentgym_envs.eval.metrics import episode_metrics
from agentgym_envs.eval.suite import Job, Suite, SuiteEntry
from agentgym_envs.policies.base import LLM_PREFIXES
from agentgym_envs.rollout import EnvSlots, Note, SlotIsolation, make_slots
from agentgym_envs.rollout.loop import Lane, fill, play_rounds

if TYPE_CHECKING:
    from agentgym_envs.store import TrajectoryStore

logger = logging.getLogger(__name__)

REPORT_SCHEMA = "agentgym-eval/1"


@dataclass(frozen=True)
class EvalConfig:
    """How to run an evaluation (everything but the suite and the policies).

    Attributes:
        batch: env slots per policy and entry, stepped in lockstep.
        max_slots: env slots open at once per policy: the entries of a suite play side
            by side while their slots fit (one entry at a time with ``max_slots`` equal
            to ``batch``), so an LLM policy generates for all of them in one batch.
        isolation: :class:`SlotIsolation` (or its value): ``inline`` (envs in this
            process; exceptions become env errors), ``process`` (one worker process per
            slot; crashes and hangs too) or ``ray`` (slots on Ray actors across a
            cluster, stepped in parallel; dead or hung actors too).
        store: the trajectory store (SQLite) that records every episode, or None.
        run_id: groups this run's episodes in the store (default: a timestamp).
        policy_options: options for LLM policies (temperature, max_new_tokens, device ...).
        step_timeout_s: with process or ray isolation, a step slower than this kills
            the worker (the actor).
        envs_per_actor: with ray isolation, env slots hosted by one actor.
        ray_address: with ray isolation, the cluster to join (``host:port``; default:
            the one this process is connected to, else a local Ray).
    """

    batch: int = 8
    max_slots: int = 16
    isolation: SlotIsolation = SlotIsolation.INLINE
    store: str | None = None
    run_id: str = ""
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    step_timeout_s: float = 300.0
    envs_per_actor: int = 1
    ray_address: str = ""

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ConfigError(f"batch must be >= 1, got {self.batch}")
        if self.max_slots < 1:
            raise ConfigError(
                f"max_slots must be >= 1, got {self.max_slots}; it caps the env slots open "
                "at once (--max-slots 1 plays one episode at a time)"
            )
        if self.envs_per_actor < 1:
            raise ConfigError(
                f"envs_per_actor must be >= 1, got {self.envs_per_actor}; e.g. --envs-per-actor 4"
            )
        object.__setattr__(self, "isolation", SlotIsolation.parse(self.isolation))

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "isolation": self.isolation.value,
            "policy_options": dict(self.policy_options),
        }


# -- building env slots --------------------------------------------------------------


def build_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    wrappers: Sequence[Any],
    store: str | None,
    policy: str,
    policy_version: str,
    run_id: str,
    outbox: bool = False,
) -> gym.Env[Any, Any]:
    """One evaluation env: ``gym.make``, the entry's wrappers, then the recorder.

    The recorder writes into the store at path ``store``, or with ``outbox`` (on a Ray
    actor) into an :class:`~agentgym_envs.distributed.host.EpisodeOutbox` whose
    episodes the driver writes into the run's store: the actor opens no store.
    """
    import agentgym_envs  # noqa: F401  (registers the envs in a fresh worker process)

    env: gym.Env[Any, Any] = gym.make(env_id, **dict(env_kwargs))
    if wrappers:
        from agentgym_envs.wrappers import apply_wrappers

        env = apply_wrappers(env, list(wrappers))
    if store:
        from agentgym_envs.distributed.host import EpisodeOutbox
        from agentgym_envs.wrappers.recording import RecordingWrapper

        env = RecordingWrapper(
            env,
            cast("TrajectoryStore", EpisodeOutbox()) if outbox else _open_store(store),
            policy=policy,
            policy_version=policy_version,
            run_id=run_id,
        )
    return env


_STORES: dict[str, Any] = {}  # one open store per path and process, shared by the slots


def _open_store(path: str) -> Any:
    from agentgym_envs.store import TrajectoryStore

    if path not in _STORES:
        _STORES[path] = TrajectoryStore(path)
    return _STORES[path]


def _close_stores() -> None:
    while _STORES:
        _STORES.popitem()[1].close()


# -- policies --------------------------------------------------------------------------


class _Policies:
    """Builds policies by spec; LLM policies load once and serve every entry."""

    def __init__(self, seed: int, options: Mapping[str, Any]) -> None:
        self.seed = seed
        self.options = dict(options)
        self._llms: dict[str, Any] = {}

    def get(self, spec: str, envs: Sequence[Any]) -> Any:
        from agentgym_envs.policies.base import make_policy

        if spec.startswith(LLM_PREFIXES):
            if spec not in self._llms:
                self._llms[spec] = make_policy(spec, envs, seed=self.seed, **self.options)
            return self._llms[spec]
        return make_policy(spec, envs, seed=self.seed)

    def describe(self, spec: str) -> dict[str, Any]:
        policy = self._llms.get(spec)
        detail = dict(getattr(policy, "spec", {}) or {}) if policy is not None else {}
        return {"id": spec, "spec": detail or {"name": spec}}

    def close(self) -> None:
        for policy in self._llms.values():
            close = getattr(policy, "close", None)
            if close is not None:
                close()
        self._llms.clear()


# -- entries played together ---------------------------------------------------------


@dataclass
class _Live:
    """One episode of a text policy: its job, record and what the policy reads next."""

    job: Job
    fold: EpisodeFold
    owner: _Lane
    obs: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EntryPlay:
    """The jobs of one suite entry to play in :func:`run_entries`, and what came of them.

    Attributes:
        entry: the suite entry.
        jobs: the jobs to play (a job with an empty ``task_id`` lets the env draw the
            task from its seed).
        on_episode: called with each finished episode and the entry's seconds so far.
        results: the finished episodes, in job order (filled as they finish).
        wall_s: seconds from the opening of the entry's env slots to its last finished
            episode (entries of one run overlap).
    """

    entry: SuiteEntry
    jobs: Sequence[Job]
    on_episode: Callable[[EpisodeResult, float], None] | None = None
    results: list[EpisodeResult] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass(eq=False)
class _Lane:
    """One entry's open env slots within :func:`run_entries`: a lane of the turn loop
    (:mod:`agentgym_envs.rollout.loop`) with the entry's policy and results."""

    play: EntryPlay
    slots: EnvSlots
    policy: Any
    ids: list[int]  # the policy's slot number of each env slot
    label: str
    opened: float
    pending: deque[tuple[int, Job]]
    done: list[tuple[int, EpisodeResult]] = field(default_factory=list)
    lane: Lane[_Live] = field(init=False)

    def __post_init__(self) -> None:
        self.lane = Lane(self.slots, self.feed, self.finish)

    def feed(self, slot: int) -> tuple[int, Job] | None:
        return self.pending.popleft() if self.pending else None

    def finish(self, index: int, live: _Live) -> None:
        ep = live.fold.summary()
        job, entry = live.job, self.play.entry
        result = EpisodeResult(
            self.label,
            entry.name,
            entry.env_id,
            job.task_id or ep.task_id,
            job.trial,
            job.seed,
            ep,
            drawn=not job.task_id,
        )
        self.done.append((index, result))
        self.done.sort(key=lambda pair: pair[0])
        self.play.results[:] = [r for _, r in self.done]
        self.play.wall_s = time.perf_counter() - self.opened
        if self.play.on_episode is not None:
            self.play.on_episode(result, self.play.wall_s)

    @property
    def drained(self) -> bool:
        return not self.lane.live and not self.pending


class _TextActor:
    """The evaluator's actor in the turn loop: text policies, one ``act`` call per policy
    instance for every live episode it plays (an LLM policy shared by every entry
    generates for all of them at once)."""

    def __init__(self) -> None:
        self.owners: dict[int, _Lane] = {}  # by id of the loop's lane

    def start(self, lane: Lane[_Live], slot: int, job: Job) -> _Live:
        owner = self.owners[id(lane)]
        live = _Live(job, EpisodeFold(), owner)
        result = lane.slots.reset(slot, job.seed, _reset_options(owner.play.entry, job))
        if result.crashed:
            live.fold.crash(result.error)
            return live
        live.obs, live.info = result.obs, result.info
        try:
            live.fold.reset(live.info)
        except EpisodeStateError as exc:  # the env's info breaks the record: its fault
            live.fold.crash(f"{type(exc).__name__}: {exc}")
            return live
        owner.policy.reset([owner.ids[slot]])
        return live

    def act(self, turns: Sequence[tuple[Lane[_Live], int, _Live]]) -> list[str]:
        groups: dict[int, list[int]] = {}  # policy -> the turns it acts for
        for i, (_, _, live) in enumerate(turns):
            groups.setdefault(id(live.owner.policy), []).append(i)
        actions = [""] * len(turns)
        for members in groups.values():
            policy = turns[members[0]][2].owner.policy
            lives = [turns[i][2] for i in members]
            got = policy.act(
                [live.obs for live in lives],
                [live.info for live in lives],
                [live.owner.ids[turns[i][1]] for i, live in zip(members, lives, strict=True)],
            )
            usage = list(getattr(policy, "last_usage", None) or [])
            for k, (i, live, action) in enumerate(zip(members, lives, got, strict=True)):
                if k < len(usage):
                    u = usage[k]
                    live.fold.usage(
                        u.get("tokens_in", 0), u.get("tokens_out", 0), u.get("failed", 0)
                    )
                actions[i] = action
        return actions

    def note(self, lane: Lane[_Live], slot: int, live: _Live) -> Note:
        return {
            "trial": live.job.trial,
            "entry": live.owner.play.entry.name,
            "tokens_in": live.fold.tokens_in,
            "tokens_out": live.fold.tokens_out,
        }

    def observe(self, live: _Live, action: str, result: SlotResult) -> bool:
        if result.crashed:
            live.fold.crash(result.error)
            return False
        try:
            live.fold.step(result.reward, result.terminated, result.truncated, result.info)
        except EpisodeStateError as exc:  # the env's info breaks the record: its fault
            live.fold.crash(f"{type(exc).__name__}: {exc}")
            return False
        live.obs, live.info = result.obs, result.info
        return not live.fold.done


def _lane_size(play: EntryPlay, config: EvalConfig) -> int:
    return max(1, min(config.batch, config.max_slots, len(play.jobs)))


def run_entries(
    plays: Sequence[EntryPlay],
    policy_spec: str,
    policies: _Policies,
    config: EvalConfig,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Play the jobs of several suite entries with one policy, the entries side by side.

    Each entry gets ``min(batch, max_slots, jobs)`` env slots, a lane of the turn loop
    (:func:`~agentgym_envs.rollout.loop.play_rounds`). Entries open in order while their
    slots together stay within ``config.max_slots`` (always at least one entry), and
    each round asks the policy for the actions of every open entry's live episodes at
    once: an LLM policy (one model serving every entry) generates for all of them in one
    batch. Scripted policies get one instance per entry, since they read the entry's
    envs. When an entry's jobs are all finished its slots close and the next entry
    opens. Results go to each :class:`EntryPlay`'s ``results`` as episodes finish, so a
    caller interrupted part way keeps those that did.

    When ``stop()`` turns true (checked after each round), no episode or entry starts
    any more and the episodes still running are dropped (the recorder stores no
    unfinished episode).
    """
    queue = deque(plays)
    lanes: list[_Lane] = []
    free_ids: list[int] = []  # the shared policy's slot numbers of closed entries
    next_id = 0
    shared = policy_spec.startswith(LLM_PREFIXES)
    actor = _TextActor()

    def stopped() -> bool:
        return stop is not None and stop()

    def open_lane(play: EntryPlay) -> _Lane:
        nonlocal next_id
        entry = play.entry
        on_ray = config.isolation is SlotIsolation.RAY  # the driver writes what actors record
        factory = functools.partial(
            build_env,
            entry.env_id,
            dict(entry.env_kwargs),
            list(entry.wrappers),
            config.store,
            policy_spec,
            "",
            config.run_id,
            on_ray,
        )
        slots = make_slots(
            factory,
            _lane_size(play, config),
            config.isolation,
            config.step_timeout_s,
            strict=False,  # an env's mistake ends its episodes, not the suite
            env_id=entry.env_id,
            envs_per_actor=config.envs_per_actor,
            ray_address=config.ray_address,
            store=_open_store(config.store) if on_ray and config.store else None,
        )
        try:
            policy = policies.get(policy_spec, list(slots.envs))
        except BaseException:
            slots.close()
            raise
        if shared:
            free_ids.sort()
            ids = [free_ids.pop(0) if free_ids else next_id + i for i in range(len(slots))]
            next_id = max(next_id, max(ids) + 1)
        else:
            ids = list(range(len(slots)))
        label = policy_spec or str(getattr(policy, "name", ""))
        lane = _Lane(
            play, slots, policy, ids, label, time.perf_counter(), deque(enumerate(play.jobs))
        )
        lanes.append(lane)
        actor.owners[id(lane.lane)] = lane
        fill(lane.lane, actor)
        return lane

    def close_drained() -> None:
        for lane in [lane for lane in lanes if lane.drained]:
            lanes.remove(lane)
            del actor.owners[id(lane.lane)]
            lane.slots.close()
            if shared:
                free_ids.extend(lane.ids)

    def current() -> list[Lane[_Live]]:
        """The open entries' lanes, free slots given their next jobs; entries that
        finished closed and the next ones opened while there is room."""
        if not stopped():
            for lane in lanes:
                fill(lane.lane, actor)
        close_drained()
        while queue and not stopped():
            used = sum(len(lane.slots) for lane in lanes)
            while (
                queue
                and not stopped()
                and (not lanes or used + _lane_size(queue[0], config) <= config.max_slots)
            ):
                used += len(open_lane(queue.popleft()).slots)
            close_drained()  # every job ended at its reset
            if lanes:
                break
        return [lane.lane for lane in lanes]

    try:
        play_rounds(current, actor, stop=stop)
    finally:
        for lane in lanes:
            lane.slots.close()
            if shared:
                free_ids.extend(lane.ids)
        lanes.clear()


def run_entry(
    entry: SuiteEntry,
    jobs: Sequence[Job],
    policy_spec: str,
    policies: _Policies,
    config: EvalConfig,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[EpisodeResult]:
    """Play ``jobs`` of one suite entry with one policy (:func:`run_entries` of one
    entry); the finished episodes in job order."""
    callback = None if on_episode is None else (lambda result, _s: on_episode(result))
    play = EntryPlay(entry, jobs, callback)
    run_entries([play], policy_spec, policies, config, stop)
    return play.results


def _reset_options(entry: SuiteEntry, job: Job) -> dict[str, Any]:
    if job.task_id:
        return {"task_id": job.task_id}
    options: dict[str, Any] = {"split": entry.split} if entry.split else {}
    if len(entry.difficulty) == 1:
        options["difficulty"] = entry.difficulty[0]
    elif entry.difficulty:
        raise ConfigError(
            f"a job without a task id draws from one difficulty, got {list(entry.difficulty)} "
            f"in entry {entry.name!r}; name one difficulty or give the job a task id"
        )
    return options


# -- whole suites ----------------------------------------------------------------------


class EvalInterrupted(KeyboardInterrupt):
    """An evaluation stopped by a ``KeyboardInterrupt`` (Ctrl-C). It is still one, so a
    caller that does not know this class stops as before.

    Attributes:
        report: the report of the episodes that finished (``report["partial"]``).
    """

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("evaluation interrupted")
        self.report = report


def evaluate(
    suite: Suite,
    policies: Sequence[str],
    config: EvalConfig | None = None,
    *,
    entries: Sequence[str] | None = None,
    jobs: Mapping[tuple[str, str], Sequence[Job]] | None = None,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    journal: EpisodeJournal | None = None,
    stop: Callable[[], bool] | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """Evaluate each policy on each suite entry and return the report.

    Args:
        suite: the suite (:func:`~agentgym_envs.eval.suite.load_suite`).
        policies: policy specs: ``oracle``, ``random``, ``noop``, ``hf:<model>``,
            ``openai:<base_url>#<model>``.
        config: batch, isolation, store and LLM options.
        entries: only these entry names (default: all).
        jobs: the exact jobs per (policy, entry), for replays (default: the suite's).
        on_episode: called with each finished episode (progress bars).
        journal: the episodes finished so far (a resumed run: their jobs are not played
            again, and they are in the report), where each new one is recorded too
            (default: a new one in memory).
        stop: checked after each lockstep step; once it returns True, the episodes still
            running are dropped and the report covers those that finished.
        started: unix time the run began (a resumed run's first start; default: now).

    Returns:
        The report; ``report["partial"]`` (``episodes_done``, ``episodes_total``) when
        some jobs did not finish.

    Raises:
        EvalInterrupted: a ``KeyboardInterrupt``; its ``report`` covers the finished
            episodes.
    """
    if not policies:
        raise ConfigError("name at least one policy, e.g. --policy oracle random hf:smollm2")
    policies = list(dict.fromkeys(policies))  # a policy or entry named twice plays once
    entries = list(dict.fromkeys(entries)) if entries else entries
    config = config or EvalConfig()
    if not config.run_id:
        config = EvalConfig(**{**asdict(config), "run_id": time.strftime("eval-%Y%m%dT%H%M%S")})
    chosen = [suite.entry(n) for n in entries] if entries else list(suite.entries)
    plan = [(spec, entry, _jobs(suite, spec, entry, jobs)) for spec in policies for entry in chosen]
    journal = EpisodeJournal() if journal is None else journal
    built = _Policies(suite.seed, config.policy_options)
    started = time.time() if started is None else started
    interrupted: KeyboardInterrupt | None = None
    try:
        try:
            for spec in policies:
                if stop is not None and stop():
                    break
                mine = [(entry, entry_jobs) for s, entry, entry_jobs in plan if s == spec]
                _play_policy(spec, mine, built, config, journal, on_episode, stop)
        except KeyboardInterrupt as exc:
            interrupted = exc
        described = [built.describe(spec) for spec in policies]
    finally:
        built.close()
        _close_stores()
    results = [
        (spec, entry, journal.results(spec, entry_jobs), journal.wall_s(spec, entry.name))
        for spec, entry, entry_jobs in plan
    ]
    total = sum(len(entry_jobs) for _, _, entry_jobs in plan)
    report = build_report(
        suite,
        described,
        config,
        [r for r in results if r[2]],
        started,
        total=total,
        policy_wall_s={spec: journal.policy_wall_s(spec) for spec in policies},
    )
    if interrupted is not None:
        raise EvalInterrupted(report) from interrupted
    return report


def _jobs(
    suite: Suite, spec: str, entry: SuiteEntry, jobs: Mapping[tuple[str, str], Sequence[Job]] | None
) -> list[Job]:
    given = (jobs or {}).get((spec, entry.name))
    return list(entry.jobs(suite.seed, suite.trials) if given is None else given)


def _play_policy(
    spec: str,
    entries: Sequence[tuple[SuiteEntry, Sequence[Job]]],
    built: _Policies,
    config: EvalConfig,
    journal: EpisodeJournal,
    on_episode: Callable[[EpisodeResult], None] | None,
    stop: Callable[[], bool] | None,
) -> None:
    """Play the jobs of ``entries`` that ``journal`` does not hold, side by side; record
    each episode with its entry's and its policy's wall time so far (earlier runs'
    included)."""
    policy_before, t0 = journal.policy_wall_s(spec), time.perf_counter()

    def policy_clock() -> float:
        return policy_before + time.perf_counter() - t0

    plays: list[EntryPlay] = []
    before: dict[str, float] = {}  # each entry's seconds in earlier runs
    for entry, jobs in entries:
        todo = [job for job in jobs if not journal.has(spec, job)]
        if todo:
            before[entry.name] = journal.wall_s(spec, entry.name)
            record = _recorder(journal, before[entry.name], policy_clock, on_episode)
            plays.append(EntryPlay(entry, todo, record))
    if not plays:
        return
    try:
        run_entries(plays, spec, built, config, stop)
    finally:
        journal.set_policy_wall_s(spec, policy_clock())
        for play in plays:
            if play.wall_s:
                journal.set_wall_s(spec, play.entry.name, before[play.entry.name] + play.wall_s)


def _recorder(
    journal: EpisodeJournal,
    before: float,
    policy_clock: Callable[[], float],
    on_episode: Callable[[EpisodeResult], None] | None,
) -> Callable[[EpisodeResult, float], None]:
    def record(result: EpisodeResult, seconds: float) -> None:
        journal.add(result, before + seconds, policy_clock())
        if on_episode is not None:
            on_episode(result)

    return record


def build_report(
    suite: Suite,
    policies: Sequence[Mapping[str, Any]],
    config: EvalConfig,
    results: Sequence[tuple[str, SuiteEntry, list[EpisodeResult], float]],
    started: float,
    *,
    total: int | None = None,
    policy_wall_s: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The report: suite, config, policies, per-entry and overall metrics, episodes;
    with ``total`` (the jobs of the run) and fewer episodes, ``partial`` says how many
    of them finished. A policy's overall wall time is ``policy_wall_s[policy]`` where
    given (its entries played side by side), else the sum of its entries'. Rows add
    success by difficulty and project (:mod:`~agentgym_envs.eval.breakdown`)."""
    from agentgym_envs import __version__

    rows = []
    by_policy: dict[str, list[EpisodeResult]] = {}
    wall: dict[str, float] = {}
    tasks: dict[str, Mapping[str, Task] | None] = {}  # by entry: its task set, once
    for spec, entry, eps, wall_s in results:
        valid = next((e for e in eps if e.episode.valid), eps[0] if eps else None)
        rows.append(
            {
                "policy": spec,
                "entry": entry.name,
                "env_id": entry.env_id,
                "split": entry.split,
                "difficulty": list(entry.difficulty),
                "wrappers": list(entry.wrappers),
                "versions": dict(valid.episode.versions) if valid else {},
                "metrics": result_metrics(eps, wall_s),
                **breakdowns(eps, tasks_of(tasks, entry)),
            }
        )
        by_policy.setdefault(spec, []).extend(eps)
        wall[spec] = wall.get(spec, 0.0) + wall_s
    episodes = [e.to_json() for _, _, eps, _ in results for e in eps]
    report = {
        "schema": REPORT_SCHEMA,
        "suite": {
            "name": suite.name,
            "version": suite.version,
            "path": suite.path,
            "spec": suite.spec(),
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "agentgym_version": __version__,
        "config": config.to_json(),
        "policies": [dict(p) for p in policies],
        "results": rows,
        "overall": {
            p: result_metrics(eps, (policy_wall_s or {}).get(p) or wall[p])
            for p, eps in by_policy.items()
        },
        "episodes": episodes,
    }
    if total is not None and len(episodes) < total:
        report["partial"] = {"episodes_done": len(episodes), "episodes_total": total}
    return report


def result_metrics(results: Sequence[EpisodeResult], wall_s: float = 0.0) -> dict[str, Any]:
    """:func:`~agentgym_envs.eval.metrics.episode_metrics` of evaluated episodes, with
    tasks keyed by (entry, task id)."""
    return episode_metrics(
        [r.episode for r in results], wall_s, task_keys=[(r.entry, r.task_id) for r in results]
    )


__all__ = [
    "EpisodeResult",
    "EvalConfig",
    "EvalInterrupted",
    "SlotIsolation",
    "evaluate",
    "result_metrics",
]
