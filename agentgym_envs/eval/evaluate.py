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
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.metrics import episode_metrics
from agentgym_envs.eval.suite import Job, Suite, SuiteEntry, suite_from_spec
from agentgym_envs.eval.workers import EnvCrashed, InlineSlot, ProcessSlot, make_slots

logger = logging.getLogger(__name__)

REPORT_SCHEMA = "agentgym-eval/1"
LLM_PREFIXES = ("hf:", "openai:")


@dataclass
class EpisodeResult:
    """One evaluated episode, as plain data."""

    policy: str
    entry: str
    env_id: str
    task_id: str
    trial: int
    seed: int
    outcome: str = "env_error"
    valid: bool = False
    steps: int = 0
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    milestones: list[str] = field(default_factory=list)
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    llm_failures: int = 0
    cost: float = 0.0
    faults: int = 0
    violations: int = 0
    attack: dict[str, Any] = field(default_factory=dict)
    loops: int = 0
    wall_ms: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)
    error: str = ""
    episode_id: int | None = None

    @property
    def success(self) -> bool:
        return self.valid and self.outcome == "success"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "success": self.success}


@dataclass(frozen=True)
class EvalConfig:
    """How to run an evaluation (everything but the suite and the policies).

    Attributes:
        batch: env slots per policy and entry, stepped in lockstep.
        isolation: ``inline`` (envs in this process; exceptions become env errors) or
            ``process`` (one worker process per slot; crashes and hangs too).
        store: the trajectory store (SQLite) that records every episode, or None.
        run_id: groups this run's episodes in the store (default: a timestamp).
        policy_options: options for LLM policies (temperature, max_new_tokens, device ...).
        step_timeout_s: with process isolation, a step slower than this kills the worker.
    """

    batch: int = 8
    isolation: str = "inline"
    store: str | None = None
    run_id: str = ""
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    step_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ConfigError(f"batch must be >= 1, got {self.batch}")
        if self.isolation not in ("inline", "process"):
            raise ConfigError(f"isolation must be 'inline' or 'process', got {self.isolation!r}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "policy_options": dict(self.policy_options)}


# -- building env slots --------------------------------------------------------------


def build_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    wrappers: Sequence[Any],
    store: str | None,
    policy: str,
    policy_version: str,
    run_id: str,
) -> gym.Env[Any, Any]:
    """One evaluation env: ``gym.make``, the entry's wrappers, then the recorder."""
    import agentgym_envs  # noqa: F401  (registers the envs in a fresh worker process)

    env: gym.Env[Any, Any] = gym.make(env_id, **dict(env_kwargs))
    if wrappers:
        from agentgym_envs.wrappers import apply_wrappers

        env = apply_wrappers(env, list(wrappers))
    if store:
        from agentgym_envs.wrappers.recording import RecordingWrapper

        env = RecordingWrapper(
            env,
            _open_store(store),
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
    job: Job
    obs: str
    info: dict[str, Any]
    result: EpisodeResult
    started: float


def run_entry(
    entry: SuiteEntry,
    jobs: Sequence[Job],
    policy_spec: str,
    policies: _Policies,
    config: EvalConfig,
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Play ``jobs`` of one suite entry with one policy; results in job order."""
    env_id = entry.env_id
    factory = functools.partial(
        build_env,
        env_id,
        dict(entry.env_kwargs),
        list(entry.wrappers),
        config.store,
        policy_spec,
        "",
        config.run_id,
    )
    slots = make_slots(
        factory, max(1, min(config.batch, len(jobs))), config.isolation, config.step_timeout_s
    )
    pending: deque[Job] = deque(jobs)
    active: dict[int, _Live] = {}
    done: list[EpisodeResult] = []

    def finish(live: _Live, slot: int) -> None:
        live.result.wall_ms = (time.perf_counter() - live.started) * 1000.0
        done.append(live.result)
        del active[slot]
        if on_episode is not None:
            on_episode(live.result)

    def start(slot: int) -> None:
        while pending:
            job = pending.popleft()
            result = EpisodeResult(
                policy_spec, entry.name, env_id, job.task_id, job.trial, job.seed
            )
            live = _Live(job, "", {}, result, time.perf_counter())
            try:
                live.obs, live.info = slots[slot].reset(job.seed, {"task_id": job.task_id})
            except EnvCrashed as exc:
                result.error = str(exc)
                active[slot] = live
                finish(live, slot)
                continue
            _absorb(result, live.info, reset=True)
            active[slot] = live
            policy.reset([slot])
            return

    try:
        envs = [s.env if isinstance(s, InlineSlot) else s for s in slots]
        policy = policies.get(policy_spec, envs)
        for slot in range(len(slots)):
            start(slot)
        while active:
            order = sorted(active)
            actions = policy.act(
                [active[s].obs for s in order], [active[s].info for s in order], order
            )
            usage = list(getattr(policy, "last_usage", None) or [])
            for i, (slot, action) in enumerate(zip(order, actions, strict=True)):
                live = active[slot]
                res = live.result
                if i < len(usage):
                    res.tokens_in += int(usage[i].get("tokens_in", 0))
                    res.tokens_out += int(usage[i].get("tokens_out", 0))
                    res.llm_failures += int(usage[i].get("failed", 0))
                note = {
                    "trial": live.job.trial,
                    "entry": entry.name,
                    "tokens_in": res.tokens_in,
                    "tokens_out": res.tokens_out,
                }
                try:
                    obs, reward, terminated, truncated, info = slots[slot].step(action, note)
                except EnvCrashed as exc:
                    res.outcome, res.valid, res.error = "env_error", False, str(exc)
                    finish(live, slot)
                    start(slot)
                    continue
                res.reward += reward
                _absorb(res, info, reset=False)
                if terminated or truncated:
                    if res.outcome == "continue":  # a TimeLimit-style wrapper cut it
                        res.outcome = "timeout"
                    finish(live, slot)
                    start(slot)
                else:
                    live.obs, live.info = obs, info
    finally:
        for s in slots:
            s.close()
    order_of = {(j.task_id, j.trial): i for i, j in enumerate(jobs)}
    done.sort(key=lambda r: order_of[(r.task_id, r.trial)])
    return done


def _absorb(res: EpisodeResult, info: Mapping[str, Any], *, reset: bool) -> None:
    """Fold one step's info into the episode result (cheap: this runs every step)."""
    res.versions = dict(info.get("versions") or res.versions)
    res.seeds = dict(info.get("seeds") or res.seeds)
    if reset:
        res.outcome, res.valid = "continue", True
        return
    outcome = info.get("outcome", "continue")
    res.outcome = str(getattr(outcome, "value", outcome))
    res.valid = bool(info.get("episode_valid", True)) and res.outcome != "env_error"
    res.steps = int(info.get("step", res.steps + 1))
    for name, value in (info.get("reward_components") or {}).items():
        res.reward_components[name] = res.reward_components.get(name, 0.0) + float(value)
    res.milestones = list(info.get("milestones") or res.milestones)
    res.tool_calls += len(info.get("tool_calls") or ())
    cost = info.get("cost") or {}
    res.cost = float(cost.get("total", res.cost))
    res.faults = int(cost.get("faults", res.faults))
    if info.get("safety"):
        res.violations += 1
    if info.get("injection"):
        res.attack = dict(info["injection"])
    loop = info.get("loop")
    if loop:
        res.loops = int(loop.get("repeats", res.loops))
    if res.outcome == "env_error":
        res.error = str((info.get("env_error") or {}).get("message", ""))


# -- whole suites ----------------------------------------------------------------------


def evaluate(
    suite: Suite,
    policies: Sequence[str],
    config: EvalConfig | None = None,
    *,
    entries: Sequence[str] | None = None,
    jobs: Mapping[tuple[str, str], Sequence[Job]] | None = None,
    on_episode: Callable[[EpisodeResult], None] | None = None,
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
    """
    if not policies:
        raise ConfigError("name at least one policy, e.g. --policy oracle random hf:smollm2")
    config = config or EvalConfig()
    if not config.run_id:
        config = EvalConfig(**{**asdict(config), "run_id": time.strftime("eval-%Y%m%dT%H%M%S")})
    chosen = [suite.entry(n) for n in entries] if entries else list(suite.entries)
    built = _Policies(suite.seed, config.policy_options)
    started = time.time()
    results: list[tuple[str, SuiteEntry, list[EpisodeResult], float]] = []
    try:
        for spec in policies:
            for entry in chosen:
                entry_jobs = (jobs or {}).get((spec, entry.name))
                if entry_jobs is None:
                    entry_jobs = entry.jobs(suite.seed, suite.trials)
                t0 = time.perf_counter()
                eps = run_entry(entry, entry_jobs, spec, built, config, on_episode)
                results.append((spec, entry, eps, time.perf_counter() - t0))
        described = [built.describe(spec) for spec in policies]
    finally:
        built.close()
        _close_stores()
    return build_report(suite, described, config, results, started)


def build_report(
    suite: Suite,
    policies: Sequence[Mapping[str, Any]],
    config: EvalConfig,
    results: Sequence[tuple[str, SuiteEntry, list[EpisodeResult], float]],
    started: float,
) -> dict[str, Any]:
    """The report: suite, config, policies, per-entry and overall metrics, episodes."""
    from agentgym_envs import __version__

    rows = []
    by_policy: dict[str, list[EpisodeResult]] = {}
    wall: dict[str, float] = {}
    for spec, entry, eps, wall_s in results:
        valid = next((e for e in eps if e.valid), eps[0] if eps else None)
        rows.append(
            {
                "policy": spec,
                "entry": entry.name,
                "env_id": entry.env_id,
                "split": entry.split,
                "difficulty": list(entry.difficulty),
                "wrappers": list(entry.wrappers),
                "versions": dict(valid.versions) if valid else {},
                "metrics": episode_metrics(eps, wall_s),
            }
        )
        by_policy.setdefault(spec, []).extend(eps)
        wall[spec] = wall.get(spec, 0.0) + wall_s
    return {
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
        "overall": {p: episode_metrics(eps, wall[p]) for p, eps in by_policy.items()},
        "episodes": [e.to_json() for _, _, eps, _ in results for e in eps],
    }


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
        isolation=old["isolation"],
        store=None,
        policy_options=old.get("policy_options") or {},
        step_timeout_s=old["step_timeout_s"],
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


__all__ = ["EpisodeResult", "EvalConfig", "ProcessSlot", "evaluate", "replay"]
