"""The typed outcome and the ``info`` dictionary every env returns.

``Outcome`` and ``ToolStatus`` are ``StrEnum``s: they compare equal to their string
values, so ``info`` stays JSON-serialisable while code can use the enum members.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NotRequired, TypedDict, TypeGuard


class Outcome(StrEnum):
    """How an episode stands after a step.

    ``ENV_ERROR`` means the environment broke (a crashed browser or sandbox, a tool
    backend down) after its retry budget. Such episodes are invalid for training and
    are never scored as a policy failure.
    """

    CONTINUE = "continue"
    SUCCESS = "success"
    FAILURE = "failure"
    TIMEOUT = "timeout"
    SAFETY_STOP = "safety_stop"
    ENV_ERROR = "env_error"

    @property
    def terminal(self) -> bool:
        """True for every outcome except ``CONTINUE``."""
        return self is not Outcome.CONTINUE


# what the observation says when an episode ends (``{reason}``: why)
OUTCOME_TEXT = {
    Outcome.SUCCESS: "Task complete.",
    Outcome.FAILURE: "Episode over: {reason}.",
    Outcome.TIMEOUT: "Episode over: {reason}.",
    Outcome.SAFETY_STOP: "Episode stopped for safety.",
    Outcome.ENV_ERROR: "The environment failed ({reason}); this is not the agent's fault.",
}


class ToolStatus(StrEnum):
    """What happened to one parsed tool call."""

    OK = "ok"
    ERROR = "error"  # the call ran and reported a failure (e.g. no such item)
    BLOCKED = "blocked"  # a safety gate refused it; nothing changed
    STOPPED = "stopped"  # a safety gate refused it and ended the episode
    SKIPPED = "skipped"  # not run because an earlier call in the same action ended the episode
    ENV_ERROR = "env_error"  # the backend failed after its retries


class ErrorCode(StrEnum):
    """Codes of policy-side errors (``info["error"]["code"]``) shared by every env.

    Families add their own codes (``no_such_bid``, ``timeout`` ...) as plain strings.
    """

    PARSE_ERROR = "parse_error"
    UNKNOWN_TOOL = "unknown_tool"
    BAD_ARGUMENTS = "bad_arguments"
    BLOCKED = "blocked"
    TOO_MANY_CALLS = "too_many_calls"
    INVALID_ACTION = "invalid_action"


class ErrorPart(StrEnum):
    """Which part of the action a parser error blames (``info["error"]["part"]``), so a
    trainer can credit that part's tokens alone (``core.spans``)."""

    ACTION = "action"
    """The whole action: it could not be parsed, or it held too many calls."""
    NAME = "name"
    """A call's tool name: no such tool."""
    ARGUMENTS = "arguments"
    """A call's arguments as a whole: one is missing, or they are not an object."""
    ARGUMENT = "argument"
    """One argument, its name and value: it should not be there (undeclared, given
    twice, an extra positional one)."""
    VALUE = "value"
    """One argument's value: the schema rejects it, or it is not a literal."""


class ErrorInfo(TypedDict, total=False):
    """``{code, message}``, or empty (falsy) when there is no error.

    Empty rather than None because Gymnasium's vector envs merge infos key by key and
    break when one env reports None and another a dict for the same key.

    A parser error also says which part of the action it blames: ``part`` (an
    :class:`ErrorPart` value), ``call`` (the index of the blamed call among the action's
    calls; not for ``action``), ``argument`` (the argument's name, a positional one's
    parameter; for ``argument`` and ``value``) and ``span``, ``[start, end)``: the
    characters of that part in the action text (in ``tool_mode="native"`` an assistant
    message without tool calls is read as its content, and the span is mapped back into
    the message through its JSON escapes). ``span`` is absent when the part could not be
    located. Errors of tool handlers and gates blame no part.
    """

    code: str
    message: str
    part: str
    call: int
    argument: str
    span: list[int]


class ToolCallInfo(TypedDict):
    name: str
    arguments: dict[str, Any]
    call_id: str
    status: ToolStatus
    latency_ms: float
    fault: str  # "" or the injected fault's kind (see core.faults)
    id_replaced: NotRequired[bool]  # native mode: the model's call id was unsafe (core.native)


class SafetyInfo(TypedDict, total=False):
    """``{gate, action, verdict, reason}``, or empty (falsy) when no gate fired."""

    gate: str
    action: str
    verdict: str  # "blocked" or "stopped"
    reason: str


class CostInfo(TypedDict):
    tool_calls: int
    per_tool: dict[str, float]
    total: float
    errors: int  # policy errors: parse, unknown tool, bad arguments, blocked by a gate
    faults: int  # injected infrastructure faults met
    env_time_ms: float
    chars_in: int
    chars_out: int
    tokens_in: int
    tokens_out: int


class VersionsInfo(TypedDict):
    env: str
    tools: str
    reward: str
    verifier: str
    task_set: str


class SeedsInfo(TypedDict):
    env: int
    task: int
    verifier: int


class TaskInfo(TypedDict):
    id: str
    split: str
    difficulty: str
    instruction: str


class StepInfo(TypedDict, total=False):
    """The ``info`` dictionary. Every key is present on every step; ``system`` only at reset.

    Values keep one type per key (``error`` and ``safety`` are empty dicts, not None, when
    nothing happened) so that ``gym.make_vec`` can batch infos. Envs may add
    family-specific keys (``env_error`` when the outcome is ``ENV_ERROR``). ``messages``
    is there in ``tool_mode="native"`` only (``core.native``).
    """

    outcome: Outcome
    system: str
    tools: list[dict[str, Any]]
    tool_calls: list[ToolCallInfo]
    error: ErrorInfo
    milestones: list[str]
    new_milestones: list[str]
    reward_components: dict[str, float]
    cost: CostInfo
    safety: SafetyInfo
    versions: VersionsInfo
    seeds: SeedsInfo
    task: TaskInfo
    episode_valid: bool
    step: int
    state_visits: int
    env_error: ErrorInfo
    messages: list[dict[str, Any]]  # native tool mode: the observation by speaker
    step_checks: dict[str, float]  # local_weight > 0: each check's local score (core.step_checks)


STANDARD_KEYS = frozenset(StepInfo.__annotations__)  # ``extra_info`` may not shadow these


def family_keys_only(extra: Mapping[str, Any]) -> TypeGuard[StepInfo]:
    """True when ``extra`` shadows no standard ``info`` key. Every ``StepInfo`` key is
    optional and a TypedDict value may carry more keys, so such a mapping is a valid
    ``StepInfo`` holding family-specific keys only; merging it changes no standard key."""
    return STANDARD_KEYS.isdisjoint(extra)
