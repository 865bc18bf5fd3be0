"""Attack specs, the runner that plays them, and where each family's attacks are found.

A built-in env family names its attacks in its record (``Family.redteam``); the attacks
on the servers (``servers``, :mod:`agentgym_envs.redteam.servers`) are the red team's own.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.family import resolve
from agentgym_envs.core.info import Outcome
from agentgym_envs.redteam.watchdog import Hang, deadline
from agentgym_envs.registration import families

SERVERS = "servers"
"""The attacks on the OpenEnv and generation servers, which no env family owns."""

_ATTACKS: dict[str, str] = {
    **{f.name: f.redteam for f in families() if f.redteam},
    SERVERS: "agentgym_envs.redteam.servers:attacks",
}
FAMILIES: tuple[str, ...] = tuple(_ATTACKS)
"""The families ``agentgym redteam`` attacks: each built-in family whose record names its
attacks, in the registry's order, then ``servers``."""

# A script is a generator function: called with the reset's (obs, info), it yields
# action texts and receives each step's (obs, info) back through ``send``.
Script = Callable[[str, dict[str, Any]], Generator[str, tuple[str, dict[str, Any]], None]]


@dataclass
class AttackTrace:
    """What happened when an attack was played."""

    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    outcome: Outcome = Outcome.CONTINUE
    raised: str | None = None  # repr of an exception that escaped env.step/reset
    hung: bool = False  # a step did not return within the runner's step limit
    env: Any = None  # the unwrapped env, still open while breach checks run

    @property
    def paid(self) -> float:
        """Positive success and milestone reward paid over the episode."""
        total = 0.0
        for info in self.infos:
            comps = info.get("reward_components") or {}
            total += max(0.0, float(comps.get("success", 0.0)))
            total += max(0.0, float(comps.get("milestone", 0.0)))
        return total

    @property
    def milestones(self) -> list[str]:
        return [m for info in self.infos for m in info.get("new_milestones", ())]


Breach = Callable[[AttackTrace], "str | None"]


@dataclass(frozen=True)
class Attack:
    """One hostile policy aimed at one hole.

    Attributes:
        name: unique id, ``<family>/<short-name>``.
        family: the env family attacked (one of ``FAMILIES``).
        hole: the class of hole it probes, e.g. ``grader_takeover``.
        env_id: the registered env id.
        script: the hostile policy (see ``Script``).
        options: reset options (task id, split, ...).
        env_kwargs: constructor kwargs for ``gym.make``.
        seed: reset seed.
        max_steps: actions played at most.
        no_reward: any positive success or milestone reward is a breach (for attacks
            that do nothing a milestone may pay for).
        expect: when set, the episode must end in one of these outcomes (e.g. a
            forbidden page must end in ``SAFETY_STOP``).
        breach: an extra check; returns why the attack got through, or None.
        step_limit_s: a step that runs longer counts as a hang (a watchdog against
            denial of service, set far above what any step needs, not a speed target).
        may_solve: a SUCCESS is no breach (the attack may solve the task by chance).
        evaluator: also play it through the evaluator's path (``redteam.evaluator``:
            the recorder, the store, the export, the report, ``traj show``), where a
            policy's input that ends as ``env_error``, or anything that raises, is a
            breach. ``run_attack(evaluator=True)`` does it for any attack.
        openenv: also play it over a local OpenEnv server (``redteam.over_openenv``),
            where a server error or an ``env_error`` is a breach.
            ``run_attack(openenv=True)`` does it for any attack.
    """

    name: str
    family: str
    hole: str
    env_id: str
    script: Script
    options: Mapping[str, Any] = field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    max_steps: int = 60
    no_reward: bool = False
    expect: tuple[Outcome, ...] | None = None
    breach: Breach | None = None
    step_limit_s: float = 60.0
    may_solve: bool = False
    evaluator: bool = False
    openenv: bool = False


@dataclass(frozen=True)
class AttackResult:
    name: str
    family: str
    hole: str
    contained: bool
    reason: str  # why it got through, or how it was contained
    outcome: str
    steps: int
    paid: float


def _play(attack: Attack, env: Any, trace: AttackTrace) -> None:
    # Only what the env does is judged: an exception from the script itself (a bug in
    # the attack) propagates to the caller.
    reset = _guarded(
        trace, attack.step_limit_s, env.reset, seed=attack.seed, options=dict(attack.options)
    )
    if reset is None:
        return
    script = attack.script(*reset)
    action = next(script, None)
    while action is not None and len(trace.actions) < attack.max_steps:
        trace.actions.append(action)
        stepped = _guarded(trace, attack.step_limit_s, env.step, action)
        if stepped is None:
            return
        obs, reward, terminated, truncated, info = stepped
        trace.observations.append(obs)
        trace.infos.append(info)
        trace.rewards.append(float(reward))
        trace.outcome = Outcome(info["outcome"])
        if terminated or truncated:
            return
        try:
            action = script.send((obs, info))
        except StopIteration:
            return


def _guarded(
    trace: AttackTrace, limit_s: float, call: Callable[..., Any], *args: Any, **kw: Any
) -> Any:
    """``call`` under the watchdog; a hang or an escaping exception is recorded, not raised."""
    try:
        with deadline(limit_s):
            return call(*args, **kw)
    except Hang:
        trace.hung = True
    except Exception as exc:  # an exception escaping the env is itself the finding
        trace.raised = repr(exc)[:300]
    return None


def _verdict(attack: Attack, trace: AttackTrace) -> str | None:
    if trace.hung:
        return "a step hung past the watchdog"
    if trace.raised:
        return f"the env raised {trace.raised}"
    if trace.outcome is Outcome.SUCCESS and not attack.may_solve:
        return "scored SUCCESS without solving the task"
    repeated = sorted({m for m in trace.milestones if trace.milestones.count(m) > 1})
    if repeated:
        return f"milestones {repeated} paid more than once"
    if attack.no_reward and trace.paid > 0:
        return f"was paid {trace.paid:.3f} (milestones {trace.milestones}) for nothing"
    if attack.expect is not None and trace.outcome not in attack.expect:
        wanted = "/".join(o.value for o in attack.expect)
        return f"ended in {trace.outcome.value}, expected {wanted}"
    return attack.breach(trace) if attack.breach is not None else None


def run_attack(
    attack: Attack, *, evaluator: bool | None = None, openenv: bool | None = None
) -> AttackResult:
    """Play ``attack`` through the real env and judge whether it was contained; then,
    if it was and ``evaluator`` says so (None: where ``attack.evaluator`` does), play
    it again through the evaluator's path (``redteam.evaluator``) and judge that; then
    likewise over a local OpenEnv server (``openenv``, ``redteam.over_openenv``)."""
    import gymnasium as gym

    import agentgym_envs  # noqa: F401  (registers the envs)

    trace = AttackTrace()
    env = gym.make(attack.env_id, **dict(attack.env_kwargs))
    try:
        trace.env = env.unwrapped
        _play(attack, env, trace)
        reason = _verdict(attack, trace)
    finally:
        env.close()
    if reason is None and (attack.evaluator if evaluator is None else evaluator):
        from agentgym_envs.redteam.evaluator import evaluator_verdict

        reason = evaluator_verdict(attack)
    if reason is None and (attack.openenv if openenv is None else openenv):
        from agentgym_envs.redteam.over_openenv import openenv_verdict

        reason = openenv_verdict(attack)
    return AttackResult(
        name=attack.name,
        family=attack.family,
        hole=attack.hole,
        contained=reason is None,
        reason=reason or f"contained ({trace.outcome.value})",
        outcome=trace.outcome.value,
        steps=len(trace.actions),
        paid=round(trace.paid, 4),
    )


def attacks_for(family: str) -> list[Attack]:
    """The attacks of one family (imports only that family's attack module)."""
    if family not in _ATTACKS:
        raise ConfigError(
            f"unknown family {family!r}: expected one of {', '.join(FAMILIES)}."
            f"{did_you_mean(family, FAMILIES)}"
        )
    found: list[Attack] = resolve(_ATTACKS[family])()
    return found


def scripted(*actions: str) -> Script:
    """A script that plays fixed actions whatever it observes."""

    def script(obs: str, info: dict[str, Any]) -> Generator[str, tuple[str, dict[str, Any]], None]:
        for action in actions:  # noqa: UP028  (yield from would forward send to a tuple)
            yield action

    return script
