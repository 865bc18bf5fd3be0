"""One episode as plain data, and the one fold that builds it from step infos.

Every consumer of finished episodes (``agentgym run``, ``agentgym eval``, the recording
wrapper and the reference trainer) feeds the ``info`` dicts of one episode to an
:class:`EpisodeFold` and reads an :class:`EpisodeSummary` back, so the rules for an
episode's outcome, validity, return and costs live here only.

Example::

    fold = EpisodeFold()
    obs, info = env.reset(seed=0)
    fold.reset(info)
    while not fold.done:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        fold.step(reward, terminated, truncated, info)
    summary = fold.summary()
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, SupportsFloat

from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.core.info import Outcome


class Truncation(StrEnum):
    """Why an episode was cut short rather than ended by the task (``Outcome.TIMEOUT``).

    A cut episode did not reach a terminal state: a critic may bootstrap from its last
    observation.
    """

    NONE = "none"  # not cut: the task ended it (success, failure, safety stop) or it broke
    BUDGET = "budget"  # the env's own step, error or cost budget ran out
    WRAPPER = "wrapper"  # a wrapper (Gymnasium's TimeLimit ...) cut it while the env went on
    CONTEXT_LIMIT = "context_limit"  # the policy's next turn did not fit its context window
    TURN_LIMIT = "turn_limit"  # the rollout's turn limit (``max_turns``) cut it


class EpisodeStateError(AgentGymError, RuntimeError):
    """An :class:`EpisodeFold` was fed out of order (a step after the episode ended)."""


@dataclass(frozen=True)
class UserLLMCounters:
    """The LLM user's counters at the end of an episode (``info["user_llm"]`` of the
    Retail and Calendar envs with ``user="llm"``), flattened.

    Attributes:
        replies: replies the voice worded (or tried to).
        first_draw_pass: of those, replies whose first draw passed the check.
        redraws: draws after a rejected one.
        fallbacks: replies said from the template (every draw rejected, or a replay
            without the call in its cassette).
        failures: user-side failures (each ends the episode as ``ENV_ERROR``).
        reads: agent messages the LLM reader read.
        read_fallbacks: readings rejected or missed (the keyword reading stood).
        disagreements: readings that differed from the keyword reader's.
        cassette_mode: ``off``, ``record`` or ``replay``.
        cassette_position: the model calls of the episode.
        cassette_misses: replayed calls the cassette did not hold.
        fault: why the user failed (``""`` while it did not).
    """

    replies: int = 0
    first_draw_pass: int = 0
    redraws: int = 0
    fallbacks: int = 0
    failures: int = 0
    reads: int = 0
    read_fallbacks: int = 0
    disagreements: int = 0
    cassette_mode: str = ""
    cassette_position: int = 0
    cassette_misses: int = 0
    fault: str = ""

    @classmethod
    def from_info(cls, report: Mapping[str, Any]) -> UserLLMCounters:
        """Read ``info["user_llm"]`` (its ``voice``, ``reader`` and ``cassette`` parts).

        Raises:
            EpisodeStateError: ``report`` lacks one of those counters.
        """
        try:
            voice, reader, cassette = report["voice"], report["reader"], report["cassette"]
            return cls(
                replies=int(voice["replies"]),
                first_draw_pass=int(voice["first_draw_pass"]),
                redraws=int(voice["redraws"]),
                fallbacks=int(voice["fallbacks"]),
                failures=int(voice["failures"]),
                reads=int(reader["reads"]),
                read_fallbacks=int(reader["fallbacks"]),
                disagreements=int(reader["disagreements"]),
                cassette_mode=str(cassette["mode"]),
                cassette_position=int(cassette["position"]),
                cassette_misses=int(cassette["misses"]),
                fault=str(report.get("fault", "")),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise EpisodeStateError(
                f"info['user_llm'] must be the LLM user's report (voice, reader and cassette "
                f"counters, as agentgym_envs.business.voice.VoiceState.report writes it); "
                f"reading it failed on {exc!r}: an env outside agentgym should rename the key"
            ) from None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UserLLMCounters:
        """Rebuild the counters from :func:`dataclasses.asdict` output (unknown keys are
        an error)."""
        return cls(**_known_fields(cls, data))


def _known_fields(cls: type, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data``, checked to name only fields of the dataclass ``cls``.

    Raises:
        EpisodeStateError: ``data`` has a key that is no field of ``cls``.
    """
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise EpisodeStateError(
            f"unknown {cls.__name__} fields {unknown}; expected a subset of {sorted(names)}"
        )
    return data


def _outcome(value: Any) -> Outcome:
    try:
        return Outcome(str(getattr(value, "value", value)))
    except ValueError:
        known = ", ".join(o.value for o in Outcome)
        raise EpisodeStateError(
            f"info['outcome'] must be one of {known}, got {value!r}; an env outside agentgym "
            "should leave the key out or use agentgym_envs.core.info.Outcome"
        ) from None


@dataclass(frozen=True)
class EpisodeSummary:
    """How one episode went, as plain, JSON-able data (token-level data is not here).

    Attributes:
        task_id: ``info["task"]["id"]`` (``""`` for envs without tasks).
        split: the task's split.
        difficulty: the task's difficulty.
        outcome: the final :class:`Outcome` (``CONTINUE`` only for an unfinished episode).
        truncation: why the episode was cut (``NONE`` unless the outcome is ``TIMEOUT``).
        valid: False where the episode must be masked from training and left out of
            every rate's denominator (an env error).
        steps: the steps taken.
        rewards: each step's reward.
        reward_components: each reward component summed over the steps.
        milestones: the milestones reached, in order.
        tool_calls: parsed tool calls over all steps.
        cost: the last cost ledger (``info["cost"]``).
        violations: steps on which a safety gate fired.
        attack: the injection wrapper's report of a planted attack (``info["injection"]``).
        loops: repeats the loop detector counted (``info["loop"]["repeats"]``).
        tokens_in: prompt tokens the policy read (where the policy reports usage).
        tokens_out: tokens the policy generated.
        llm_failures: policy calls that failed (a server error, a timeout).
        versions: ``info["versions"]``.
        seeds: ``info["seeds"]``.
        error: what broke, for an env error (``""`` otherwise).
        user_llm: the LLM user's last counters (``info["user_llm"]``); None where the
            env has no LLM user.
        started_at: unix time the fold began (just before the reset).
        ended_at: unix time the episode ended (or the summary was taken, if it has not).
    """

    task_id: str = ""
    split: str = ""
    difficulty: str = ""
    outcome: Outcome = Outcome.CONTINUE
    truncation: Truncation = Truncation.NONE
    valid: bool = True
    steps: int = 0
    rewards: tuple[float, ...] = ()
    reward_components: Mapping[str, float] = field(default_factory=dict)
    milestones: tuple[str, ...] = ()
    tool_calls: int = 0
    cost: Mapping[str, Any] = field(default_factory=dict)
    violations: int = 0
    attack: Mapping[str, Any] = field(default_factory=dict)
    loops: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    llm_failures: int = 0
    versions: Mapping[str, str] = field(default_factory=dict)
    seeds: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0
    user_llm: UserLLMCounters | None = None

    def __post_init__(self) -> None:  # accept the stored string and dict forms
        if isinstance(self.user_llm, Mapping):
            object.__setattr__(self, "user_llm", UserLLMCounters.from_json(self.user_llm))
        object.__setattr__(self, "outcome", _outcome(self.outcome))
        object.__setattr__(self, "truncation", Truncation(self.truncation))
        object.__setattr__(self, "rewards", tuple(float(r) for r in self.rewards))
        object.__setattr__(self, "milestones", tuple(self.milestones))

    @property
    def success(self) -> bool:
        """A valid episode that ended in ``SUCCESS``."""
        return self.valid and self.outcome is Outcome.SUCCESS

    @property
    def reward(self) -> float:
        """The undiscounted return (the sum of the step rewards)."""
        return float(sum(self.rewards))

    @property
    def cut(self) -> bool:
        """A valid episode cut short (a budget, wrapper or context limit): not terminal."""
        return self.valid and self.truncation is not Truncation.NONE

    @property
    def cost_total(self) -> float:
        """The ledger's total cost (0 where the env keeps no ledger)."""
        return float(self.cost.get("total", 0.0))

    @property
    def faults(self) -> int:
        """Injected infrastructure faults met (``cost["faults"]``)."""
        return int(self.cost.get("faults", 0))

    @property
    def errors(self) -> int:
        """Policy errors: parse, unknown tool, bad arguments, blocked (``cost["errors"]``)."""
        return int(self.cost.get("errors", 0))

    @property
    def wall_ms(self) -> float:
        """Wall time from the reset to the end, in milliseconds."""
        return max(self.ended_at - self.started_at, 0.0) * 1000.0

    def to_json(self) -> dict[str, Any]:
        """The fields as plain JSON data (what :meth:`from_json` reads back)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["outcome"], out["truncation"] = self.outcome.value, self.truncation.value
        for name in ("rewards", "milestones"):
            out[name] = list(out[name])
        for name in ("reward_components", "cost", "attack", "versions", "seeds"):
            out[name] = dict(out[name])
        out["user_llm"] = None if self.user_llm is None else asdict(self.user_llm)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpisodeSummary:
        """Rebuild a summary from :meth:`to_json` output (unknown keys are an error;
        missing ones, as in records from before a field, take its default)."""
        return cls(**_known_fields(cls, data))


class EpisodeFold:
    """Folds one episode, step by step, into an :class:`EpisodeSummary`.

    Feed it the reset ``info`` (:meth:`reset`), then each step's result (:meth:`step`);
    an episode that breaks outside the env's own reporting ends with :meth:`crash`, and
    one the caller cuts (a context window) with :meth:`cut`. Each call is a few dict
    updates: it is cheap enough for every step of every episode.

    Rules:
        * the outcome is the last ``info["outcome"]``; an episode that ends
          (``terminated`` or ``truncated``) while the env still says ``CONTINUE`` was cut
          by a wrapper: ``TIMEOUT`` with truncation ``WRAPPER``; an env's own
          ``TIMEOUT`` is truncation ``BUDGET``;
        * the LLM user's counters are the last ``info["user_llm"]`` (they only grow);
        * the episode is valid unless ``info["episode_valid"]`` is False or the outcome
          is ``ENV_ERROR``;
        * rewards and reward components add up; milestones, cost, versions, seeds and the
          task are the last ones reported.

    Args:
        started_at: the unix start time (default: now).
    """

    def __init__(self, started_at: float | None = None) -> None:
        self._started_at = time.time() if started_at is None else started_at
        self._ended_at: float | None = None
        self._task: Mapping[str, Any] = {}
        self._outcome = Outcome.CONTINUE
        self._truncation = Truncation.NONE
        self._valid = True
        self._steps = 0
        self._rewards: list[float] = []
        self._components: dict[str, float] = {}
        self._milestones: list[str] = []
        self._tool_calls = 0
        self._cost: dict[str, Any] = {}
        self._violations = 0
        self._attack: dict[str, Any] = {}
        self._loops = 0
        self._tokens_in = self._tokens_out = self._llm_failures = 0
        self._versions: dict[str, str] = {}
        self._seeds: dict[str, Any] = {}
        self._error = ""
        self._user_llm: UserLLMCounters | None = None

    @property
    def done(self) -> bool:
        """True once the episode ended (a final step, a crash or a cut)."""
        return self._ended_at is not None

    @property
    def outcome(self) -> Outcome:
        """The outcome so far."""
        return self._outcome

    @property
    def steps(self) -> int:
        """The steps folded so far."""
        return self._steps

    @property
    def tokens_in(self) -> int:
        """Prompt tokens reported through :meth:`usage` so far."""
        return self._tokens_in

    @property
    def tokens_out(self) -> int:
        """Generated tokens reported through :meth:`usage` so far."""
        return self._tokens_out

    def reset(self, info: Mapping[str, Any]) -> None:
        """Take the reset ``info``: the task, versions, seeds and the starting ledger."""
        self._absorb_context(info)

    def step(
        self,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
        info: Mapping[str, Any],
    ) -> None:
        """Fold one step's result.

        Raises:
            EpisodeStateError: the episode already ended, or ``info["outcome"]`` is not an
                :class:`Outcome` value.
        """
        self._check_live("step")
        self._absorb_context(info)
        self._steps += 1
        self._rewards.append(float(reward))
        for name, value in (info.get("reward_components") or {}).items():
            self._components[name] = self._components.get(name, 0.0) + float(value)
        self._outcome = _outcome(info.get("outcome", Outcome.CONTINUE))
        self._valid = bool(info.get("episode_valid", True)) and self._outcome != Outcome.ENV_ERROR
        self._milestones = list(info.get("milestones") or self._milestones)
        self._tool_calls += len(info.get("tool_calls") or ())
        if info.get("safety"):
            self._violations += 1
        if info.get("injection"):
            self._attack = dict(info["injection"])
        loop = info.get("loop")
        if loop:
            self._loops = int(loop.get("repeats", self._loops))
        if self._outcome is Outcome.ENV_ERROR:
            self._error = str((info.get("env_error") or {}).get("message", ""))
        if terminated or truncated:
            if self._outcome is Outcome.CONTINUE:
                self._outcome, self._truncation = Outcome.TIMEOUT, Truncation.WRAPPER
            elif self._outcome is Outcome.TIMEOUT:
                self._truncation = Truncation.BUDGET
            self._ended_at = time.time()

    def usage(self, tokens_in: int = 0, tokens_out: int = 0, failed: int = 0) -> None:
        """Add what the policy reported for one of its calls (tokens, failures)."""
        self._tokens_in += int(tokens_in)
        self._tokens_out += int(tokens_out)
        self._llm_failures += int(failed)

    def crash(self, message: str) -> None:
        """End the episode as ``ENV_ERROR`` (invalid): the env or its process broke."""
        self._outcome, self._truncation, self._valid = Outcome.ENV_ERROR, Truncation.NONE, False
        self._error = message
        if self._ended_at is None:
            self._ended_at = time.time()

    def cut(self, reason: Truncation) -> None:
        """End a live episode as ``TIMEOUT`` because the caller stops it (``reason``).

        Raises:
            EpisodeStateError: the episode already ended, or ``reason`` is ``NONE``.
        """
        self._check_live("cut")
        if reason is Truncation.NONE:
            raise EpisodeStateError("cut() needs a truncation reason, got Truncation.NONE")
        self._outcome, self._truncation = Outcome.TIMEOUT, reason
        self._ended_at = time.time()

    def summary(self) -> EpisodeSummary:
        """The episode so far as a frozen :class:`EpisodeSummary` (the fold goes on)."""
        task = self._task
        return EpisodeSummary(
            task_id=str(task.get("id", "")),
            split=str(task.get("split", "")),
            difficulty=str(task.get("difficulty", "")),
            outcome=self._outcome,
            truncation=self._truncation,
            valid=self._valid,
            steps=self._steps,
            rewards=tuple(self._rewards),
            reward_components=dict(self._components),
            milestones=tuple(self._milestones),
            tool_calls=self._tool_calls,
            cost=dict(self._cost),
            violations=self._violations,
            attack=dict(self._attack),
            loops=self._loops,
            tokens_in=self._tokens_in,
            tokens_out=self._tokens_out,
            llm_failures=self._llm_failures,
            versions=dict(self._versions),
            seeds=dict(self._seeds),
            error=self._error,
            started_at=self._started_at,
            ended_at=time.time() if self._ended_at is None else self._ended_at,
            user_llm=self._user_llm,
        )

    def _absorb_context(self, info: Mapping[str, Any]) -> None:
        if info.get("task"):
            self._task = dict(info["task"])
        if info.get("versions"):
            self._versions = {k: str(v) for k, v in info["versions"].items()}
        if info.get("seeds"):
            self._seeds = dict(info["seeds"])
        if info.get("cost"):
            self._cost = dict(info["cost"])
        if info.get("user_llm"):
            self._user_llm = UserLLMCounters.from_info(info["user_llm"])

    def _check_live(self, call: str) -> None:
        if self._ended_at is not None:
            raise EpisodeStateError(
                f"{call}() after the episode ended ({self._outcome.value}); start a new "
                "EpisodeFold for each episode"
            )


__all__ = ["EpisodeFold", "EpisodeStateError", "EpisodeSummary", "Truncation", "UserLLMCounters"]
