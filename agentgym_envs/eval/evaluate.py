"""Evaluate policies on a suite: play every job, record every episode, build the report.

For each policy and suite entry the evaluator opens ``batch`` env slots (in this
process, or one worker process each), hands jobs (task, trial, reset seed) to free slots
and steps all live episodes in lockstep, so an LLM policy generates for the whole batch
at once. An env that raises, or a worker process that dies, ends only its episode, as
``env_error``; such episodes leave every success denominator and are counted apart.

The report (plain data, see :func:`build_report`) embeds the suite's spec, the policies,
the configuration and every episode's seeds and versions, so :func:`replay` can re-run
the same episodes from the report alone.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from agentgym_envs.core.episode import EpisodeFold
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.journal import EpisodeJournal, EpisodeResult
from agentgym_envs.eval.metrics import episode_metrics
from agentgym_envs.eval.suite import Job, Suite, SuiteEntry, suite_from_spec
from agentgym_envs.eval.workers import (
    EnvCrashed,
    InlineSlot,
    ProcessSlot,
    SlotIsolation,
    make_slots,
    step_slots,
)
from agentgym_envs.policies.base import LLM_PREFIXES

if TYPE_CHECKING:
    from agentgym_envs.eval.store import TrajectoryStore

logger = logging.getLogger(__name__)

REPORT_SCHEMA = "agentgym-eval/1"


@dataclass(frozen=True)
class EvalConfig:
    """How to run an evaluation (everything but the suite and the policies).

    Attributes:
        batch: env slots per policy and entry, stepped in lockstep.
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
    from agentgym_envs.eval.store import TrajectoryStore

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


# -- one entry ---------------------------------------------------------------------------


@dataclass
class _Live:
    index: int  # of the job
    job: Job
    fold: EpisodeFold
    obs: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def run_entry(
    entry: SuiteEntry,
    jobs: Sequence[Job],
    policy_spec: str,
    policies: _Policies,
    config: EvalConfig,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[EpisodeResult]:
    """Play ``jobs`` of one suite entry with one policy; results in job order.

    A job with an empty ``task_id`` resets with the entry's split and difficulty and
    lets the env draw the task from the seed (``agentgym run``). When ``stop()`` turns
    true (checked after each lockstep step), the episodes still running are dropped
    (the recorder stores no unfinished episode) and the finished ones returned.
    """
    env_id = entry.env_id
    on_ray = config.isolation is SlotIsolation.RAY  # the driver writes what actors record
    factory = functools.partial(
        build_env,
        env_id,
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
        max(1, min(config.batch, len(jobs))),
        config.isolation,
        config.step_timeout_s,
        env_id=env_id,
        envs_per_actor=config.envs_per_actor,
        ray_address=config.ray_address,
        store=_open_store(config.store) if on_ray and config.store else None,
    )
    pending: deque[tuple[int, Job]] = deque(enumerate(jobs))
    active: dict[int, _Live] = {}
    done: list[tuple[int, EpisodeResult]] = []
    label = policy_spec

    def finish(live: _Live) -> None:
        ep = live.fold.summary()
        job = live.job
        result = EpisodeResult(
            label, entry.name, env_id, job.task_id or ep.task_id, job.trial, job.seed, ep
        )
        done.append((live.index, result))
        if on_episode is not None:
            on_episode(result)

    def start(slot: int) -> None:
        while pending:
            index, job = pending.popleft()
            live = _Live(index, job, EpisodeFold())
            try:
                live.obs, live.info = slots[slot].reset(job.seed, _reset_options(entry, job))
            except EnvCrashed as exc:
                live.fold.crash(str(exc))
                finish(live)
                continue
            live.fold.reset(live.info)
            active[slot] = live
            policy.reset([slot])
            return

    try:
        envs = [s.env if isinstance(s, InlineSlot) else s for s in slots]
        policy = policies.get(policy_spec, envs)
        label = policy_spec or str(getattr(policy, "name", ""))
        for slot in range(len(slots)):
            start(slot)
        while active:
            order = sorted(active)
            actions = policy.act(
                [active[s].obs for s in order], [active[s].info for s in order], order
            )
            usage = list(getattr(policy, "last_usage", None) or [])
            notes = []
            for i, slot in enumerate(order):
                live = active[slot]
                fold = live.fold
                if i < len(usage):
                    u = usage[i]
                    fold.usage(u.get("tokens_in", 0), u.get("tokens_out", 0), u.get("failed", 0))
                notes.append(
                    {
                        "trial": live.job.trial,
                        "entry": entry.name,
                        "tokens_in": fold.tokens_in,
                        "tokens_out": fold.tokens_out,
                    }
                )
            # every slot's step goes out before any result is read (in parallel on Ray)
            results = step_slots([slots[s] for s in order], actions, notes)
            for slot, result in zip(order, results, strict=True):
                live = active[slot]
                fold = live.fold
                if isinstance(result, EnvCrashed):
                    fold.crash(str(result))
                else:
                    obs, reward, terminated, truncated, info = result
                    fold.step(reward, terminated, truncated, info)
                    live.obs, live.info = obs, info
                if fold.done:
                    del active[slot]
                    finish(live)
                    if stop is None or not stop():
                        start(slot)
            if stop is not None and stop():
                break
    finally:
        for s in slots:
            s.close()
    done.sort(key=lambda pair: pair[0])
    return [result for _, result in done]


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
            for spec, entry, entry_jobs in plan:
                if stop is not None and stop():
                    break
                _play_entry(entry, entry_jobs, spec, built, config, journal, on_episode, stop)
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
        suite, described, config, [r for r in results if r[2]], started, total=total
    )
    if interrupted is not None:
        raise EvalInterrupted(report) from interrupted
    return report


def _jobs(
    suite: Suite, spec: str, entry: SuiteEntry, jobs: Mapping[tuple[str, str], Sequence[Job]] | None
) -> list[Job]:
    given = (jobs or {}).get((spec, entry.name))
    return list(entry.jobs(suite.seed, suite.trials) if given is None else given)


def _play_entry(
    entry: SuiteEntry,
    jobs: Sequence[Job],
    spec: str,
    built: _Policies,
    config: EvalConfig,
    journal: EpisodeJournal,
    on_episode: Callable[[EpisodeResult], None] | None,
    stop: Callable[[], bool] | None,
) -> None:
    """Play the jobs of ``entry`` that ``journal`` does not hold; record each episode
    with the entry's wall time so far (earlier runs' included)."""
    todo = [job for job in jobs if not journal.has(spec, job)]
    if not todo:
        return
    before, t0 = journal.wall_s(spec, entry.name), time.perf_counter()

    def record(result: EpisodeResult) -> None:
        journal.add(result, before + time.perf_counter() - t0)
        if on_episode is not None:
            on_episode(result)

    try:
        run_entry(entry, todo, spec, built, config, record, stop)
    finally:
        journal.set_wall_s(spec, entry.name, before + time.perf_counter() - t0)


def build_report(
    suite: Suite,
    policies: Sequence[Mapping[str, Any]],
    config: EvalConfig,
    results: Sequence[tuple[str, SuiteEntry, list[EpisodeResult], float]],
    started: float,
    *,
    total: int | None = None,
) -> dict[str, Any]:
    """The report: suite, config, policies, per-entry and overall metrics, episodes;
    with ``total`` (the jobs of the run) and fewer episodes, ``partial`` says how many
    of them finished."""
    from agentgym_envs import __version__

    rows = []
    by_policy: dict[str, list[EpisodeResult]] = {}
    wall: dict[str, float] = {}
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
        "overall": {p: result_metrics(eps, wall[p]) for p, eps in by_policy.items()},
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


# -- replay ------------------------------------------------------------------------------

COMPARED = (
    "task_id",
    "seed",
    "outcome",
    "valid",
    "steps",
    "reward",
    "milestones",
    "tool_calls",
    "reward_components",
)


def replay(
    report: Mapping[str, Any], config: EvalConfig | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Re-run exactly the episodes of ``report``; return the new report and the
    differences (empty when every episode came out the same)."""
    if report.get("schema") != REPORT_SCHEMA:
        raise ConfigError(
            f"not an agentgym eval report (schema {report.get('schema')!r}, "
            f"expected {REPORT_SCHEMA!r}); pass the report.json that `agentgym eval` wrote"
        )
    suite = suite_from_spec(report["suite"]["spec"])
    old = dict(report["config"])
    config = config or EvalConfig(
        batch=old["batch"],
        isolation=SlotIsolation.parse(old["isolation"]),
        store=None,
        policy_options=old.get("policy_options") or {},
        step_timeout_s=old["step_timeout_s"],
        envs_per_actor=old.get("envs_per_actor", 1),
        ray_address=old.get("ray_address", ""),
    )
    jobs: dict[tuple[str, str], list[Job]] = {}
    for ep in report["episodes"]:
        job = Job(ep["entry"], ep["task_id"], ep["trial"], ep["seed"])
        jobs.setdefault((ep["policy"], ep["entry"]), []).append(job)
    policies = [p["id"] for p in report["policies"]]
    entries = list(dict.fromkeys(ep["entry"] for ep in report["episodes"]))
    new = evaluate(suite, policies, config, entries=entries, jobs=jobs)
    return new, compare_episodes(report["episodes"], new["episodes"])


def compare_episodes(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Human-readable differences between two runs of the same jobs."""

    def key(e: Mapping[str, Any]) -> tuple[Any, ...]:
        return (e["policy"], e["entry"], e["task_id"], e["trial"])

    before, after = {key(e): e for e in old}, {key(e): e for e in new}
    diffs = [f"{k}: missing in the replay" for k in before if k not in after]
    for k, e in before.items():
        if k in after:
            for name in COMPARED:
                if e.get(name) != after[k].get(name):
                    diffs.append(f"{k}: {name} {e.get(name)!r} -> {after[k].get(name)!r}")
    return diffs


def load_report(path: str | Path) -> dict[str, Any]:
    import json

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"report {p} does not exist; pass the report.json of an earlier run")
    data: dict[str, Any] = json.loads(p.read_text())
    return data


__all__ = [
    "EpisodeResult",
    "EvalConfig",
    "EvalInterrupted",
    "ProcessSlot",
    "SlotIsolation",
    "evaluate",
    "replay",
    "result_metrics",
]
