"""Step checks: per-step local scores read from verifiable state (issue 18).

A step check is a named, bounded score that a verifier reads off the world after a
step: the action's schema was valid, no gate was hit, the state advanced, no
irreversible error happened. With ``RewardConfig.local_weight`` (λ) above 0 the base
step adds ``λ Σ r_local`` to the reward (a ``local`` component) and reports the scores
in ``info["step_checks"]``; at λ = 0 (the default) nothing is computed or reported.

Checks must not be farmable, so the core (not the env) decides what pays, by kind:

* ``PROGRESS``: the env reads a level in ``[0, max_score]`` (milestone share, closeness
  to the goal); only a rise above the episode's best pays, so oscillating or repeating
  an action never re-earns it, and an episode earns at most ``max_score``.
* ``SETBACK``: a level in ``[-max_score, 0]`` (an irreversible error); only a fall below
  the episode's worst is charged, once.
* ``PENALTY``: a per-step score in ``[-max_score, 0]`` (an invalid schema, a gate hit),
  charged each step it is reported, up to ``episode_cap`` per episode.

Nothing but progress pays a positive score, and each check's episode total is bounded,
so :meth:`~agentgym_envs.core.rewards.RewardConfig.check_local` can bound λ at reset
from the step budget and the checks' bounds, as it bounds milestones.

Versions: with λ > 0, ``info["versions"]["reward"]`` ends with ``+checks<N>`` where an
env reads checks of its own (``StepCheckHooks.step_checks_version``, bumped whenever
one of them changes); with λ = 0 the checks pay nothing and the version is unchanged.

The checks of each family and why some are left out are in the README (Rewards).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import ErrorCode, Outcome, ToolStatus
from agentgym_envs.core.rewards import RewardConfig, step_reward

if TYPE_CHECKING:
    from agentgym_envs.core.calls import Turn
    from agentgym_envs.core.env import AgentEnv

# policy errors that mean the action was not a well-formed call of a known tool
SCHEMA_ERRORS = frozenset(
    {
        ErrorCode.PARSE_ERROR,
        ErrorCode.UNKNOWN_TOOL,
        ErrorCode.BAD_ARGUMENTS,
        ErrorCode.TOO_MANY_CALLS,
    }
)


class CheckKind(StrEnum):
    """How the core turns a check's reading into a local score (module docstring)."""

    PROGRESS = "progress"
    SETBACK = "setback"
    PENALTY = "penalty"


@dataclass(frozen=True, slots=True)
class StepCheckSpec:
    """A step check an env declares.

    Attributes:
        name: the key in ``info["step_checks"]`` (``schema_valid``, ``progress``...).
        kind: how readings pay (:class:`CheckKind`).
        max_score: the largest magnitude of one reading (> 0).
        episode_cap: for ``PENALTY``: the most one episode can be charged; None means
            ``max_score`` per step of the budget.
    """

    name: str
    kind: CheckKind
    max_score: float = 1.0
    episode_cap: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_score) and self.max_score > 0):
            raise ConfigError(
                f"step check {self.name!r}: max_score must be > 0, got {self.max_score}"
            )
        cap = self.episode_cap
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            raise ConfigError(
                f"step check {self.name!r}: episode_cap must be > 0 or None, got {cap}"
            )

    def episode_bounds(self, max_steps: int) -> tuple[float, float]:
        """``(gain, loss)``: the most one episode of ``max_steps`` steps can earn and lose."""
        if self.kind is CheckKind.PROGRESS:
            return self.max_score, 0.0
        if self.kind is CheckKind.SETBACK:
            return 0.0, self.max_score
        per_steps = self.max_score * max_steps
        return 0.0, per_steps if self.episode_cap is None else min(self.episode_cap, per_steps)


@dataclass(frozen=True, slots=True)
class StepCheck:
    """One reading of a declared check after a step (its kind says how it pays)."""

    name: str
    score: float


@dataclass(frozen=True, slots=True)
class StepFacts:
    """What a step did, as plain data for :meth:`StepCheckHooks.step_checks`.

    Attributes:
        outcome: the outcome after verification.
        error_code: the policy error's code, or None.
        statuses: the status of each parsed call (empty for a message or a parse error).
        tools: the canonical names of the calls.
        new_milestones: milestone ids first reached this step.
    """

    outcome: Outcome
    error_code: str | None
    statuses: tuple[ToolStatus, ...]
    tools: tuple[str, ...]
    new_milestones: tuple[str, ...]


GENERIC_SPECS = (
    StepCheckSpec("schema_valid", CheckKind.PENALTY, 1.0, episode_cap=5.0),
    StepCheckSpec("no_violation", CheckKind.PENALTY, 1.0, episode_cap=5.0),
    StepCheckSpec("progress", CheckKind.PROGRESS, 1.0),
)


class StepCheckHooks:
    """The step-check hooks of :class:`~agentgym_envs.core.env.AgentEnv` (a mixin).

    The defaults serve every family: ``schema_valid`` (-1 for an unparsable call, an
    unknown tool or bad arguments), ``no_violation`` (-1 when a safety gate blocked or
    stopped a call) and ``progress`` (the reached share of the task's milestone weight).
    A family refines them (a finer ``progress``, a ``no_irreversible_error`` setback)
    by overriding both hooks and keeping the names it does not replace.
    """

    #: the version of the env's own checks, in ``versions["reward"]`` when λ > 0 (bump
    #: it when one changes); "" while the env reads the generic checks only
    step_checks_version: ClassVar[str] = ""
    #: the step whose call :meth:`mark_wasted` marked (-1: none; reset and set_state clear it)
    _wasted_step: int = -1
    _step: int  # the env's step counter (AgentEnv sets it)

    def reward_version(self) -> str:
        """``info["versions"]["reward"]``: the reward config's tag, then ``+checks<N>``
        when local scores are on and the env reads checks of its own."""
        config: RewardConfig = getattr(self, "reward_config")  # noqa: B009  (a mixin)
        own = config.local_weight and self.step_checks_version
        return config.version_tag + (f"+checks{self.step_checks_version}" if own else "")

    def mark_wasted(self) -> None:
        """Mark this step's call as wasted: the state refused it or it changed nothing (a
        family's ``no_wasted_action`` check reads :attr:`wasted_this_step`). Called from a
        tool handler, so a call an injected fault refused, which never ran, is never
        marked; a reset or a restored snapshot clears the mark."""
        self._wasted_step = self._step

    @property
    def wasted_this_step(self) -> bool:
        """Whether :meth:`mark_wasted` marked the call of the step being taken."""
        return self._wasted_step == self._step

    def step_check_specs(self) -> Sequence[StepCheckSpec]:
        """The checks this env reads for the current task (names unique)."""
        return GENERIC_SPECS

    def step_checks(self, facts: StepFacts) -> Sequence[StepCheck]:
        """Read every declared check from the state after a step (verifiers only read)."""
        schema = -1.0 if facts.error_code in SCHEMA_ERRORS else 0.0
        gated = {ToolStatus.BLOCKED, ToolStatus.STOPPED}.intersection(facts.statuses)
        tracker = getattr(self, "_tracker", None)
        progress = tracker.progress if tracker is not None else 0.0
        return (
            StepCheck("schema_valid", schema),
            StepCheck("no_violation", -1.0 if gated else 0.0),
            StepCheck("progress", progress),
        )


IRREVERSIBLE = StepCheckSpec("no_irreversible_error", CheckKind.SETBACK, 1.0)
# an action the state made pointless (a move into a wall): a quarter of a schema error,
# since it costs a step already; never a positive score, so it cannot be farmed
WASTED = StepCheckSpec("no_wasted_action", CheckKind.PENALTY, 0.25, episode_cap=1.0)


def refined(base: Sequence[StepCheck], *own: StepCheck) -> tuple[StepCheck, ...]:
    """``base`` readings with those named in ``own`` replaced, then the rest of ``own``."""
    names = {c.name for c in own}
    return (*(c for c in base if c.name not in names), *own)


def local_bounds(env: AgentEnv) -> tuple[float, float]:
    """``(gain, loss)``: the most the env's step checks can earn and lose in one episode
    of its step budget (before the ``local_weight`` factor)."""
    steps = env.step_budget
    bounds = [s.episode_bounds(steps) for s in _specs(env).values()]
    return sum(g for g, _ in bounds), sum(lo for _, lo in bounds)


def step_reward_bounds(env: AgentEnv) -> tuple[float, float]:
    """The smallest and largest reward one step of ``env`` can return, local scores included."""
    config = env.reward_config
    return config.step_bounds(*local_bounds(env)) if config.local_weight else config.step_bounds()


def check_budget(env: AgentEnv) -> None:
    """At reset: raise ConfigError when λ is too large for this env's checks and budget."""
    config = env.reward_config
    if config.local_weight:
        steps = env.step_budget
        specs = _specs(env)
        config.check_local(
            (s.episode_bounds(steps) for s in specs.values()),
            f"{env.name} with a step budget of {steps}",
        )


def settle_step(
    env: AgentEnv, turn: Turn, outcome: Outcome, share: float, new: Sequence[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """The step's reward components and its local scores (empty when λ = 0).

    Reads the env's step checks after verification, pays each by its kind against the
    episode's levels in the reward tally, then computes the reward (``step_reward``).
    """
    config, tally = env.reward_config, env._tally
    scores: dict[str, float] = {}
    if config.local_weight and outcome is not Outcome.ENV_ERROR:
        facts = StepFacts(
            outcome=outcome,
            error_code=turn.error.get("code"),
            statuses=tuple(c["status"] for c in turn.calls),
            tools=tuple(c["name"] for c in turn.calls),
            new_milestones=tuple(new),
        )
        scores = pay(_specs(env), env.step_checks(facts), tally.levels, env.step_budget)
    components = step_reward(
        config,
        tally,
        outcome=outcome,
        milestone_share=share,
        cost=turn.cost,
        errors=turn.errors,
        local=sum(scores.values()),
    )
    return components, scores


def pay(
    specs: Mapping[str, StepCheckSpec],
    readings: Sequence[StepCheck],
    levels: dict[str, float],
    max_steps: int,
) -> dict[str, float]:
    """Turn readings into this step's local scores and update ``levels`` in place.

    A pure function over plain data: ``levels`` holds, per check, the best progress,
    the worst setback or the penalty charged so far this episode.

    Raises:
        ConfigError: a reading of an undeclared check, twice in one step, or out of range.
    """
    scores = dict.fromkeys(specs, 0.0)
    seen: set[str] = set()
    for reading in readings:
        spec = specs.get(reading.name)
        if spec is None or reading.name in seen:
            raise ConfigError(
                f"step check {reading.name!r} was read {'twice' if spec else 'undeclared'}; "
                f"expected one reading of each of {sorted(specs)}: declare it in "
                "step_check_specs() and read it once"
            )
        seen.add(reading.name)
        low, high = (0.0, 1.0) if spec.kind is CheckKind.PROGRESS else (-1.0, 0.0)
        value = reading.score
        if not (math.isfinite(value) and low * spec.max_score <= value <= high * spec.max_score):
            raise ConfigError(
                f"step check {reading.name!r} ({spec.kind}) read {value}; expected a score in "
                f"[{low * spec.max_score}, {high * spec.max_score}]: clip it in step_checks()"
            )
        before = levels.get(reading.name, 0.0)
        if spec.kind is CheckKind.PROGRESS:
            after = max(before, value)
        elif spec.kind is CheckKind.SETBACK:
            after = min(before, value)
        else:
            after = max(before + value, -spec.episode_bounds(max_steps)[1])
        if after != before:
            levels[reading.name] = after
        scores[reading.name] = after - before
    return scores


def _specs(env: Any) -> dict[str, StepCheckSpec]:
    specs = list(env.step_check_specs())
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{env.name}: step check names must be unique, got {names}")
    return {s.name: s for s in specs}


__all__ = [
    "GENERIC_SPECS",
    "IRREVERSIBLE",
    "WASTED",
    "CheckKind",
    "StepCheck",
    "StepCheckHooks",
    "StepCheckSpec",
    "StepFacts",
    "check_budget",
    "local_bounds",
    "pay",
    "refined",
    "settle_step",
    "step_reward_bounds",
]
