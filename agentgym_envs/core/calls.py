"""Running one parsed tool call: gates, staged effects, idempotent replays, injected
faults, retries.

The env's step loop hands each call to :class:`CallRunner`, which decides what happened
to it and classifies failures: a gate verdict is the policy's doing, a backend crash
or a fault that outlasts the retry budget is the environment's (``ENV_ERROR``). A
staged tool (``@tool(staged=True)``, see ``core.staging``) runs on a scratch copy
first; its effects are checked by the effect gates before the handler commits them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from agentgym_envs.core.errors import TransientToolError
from agentgym_envs.core.faults import REFUSED_KINDS, FaultConfig, FaultKind
from agentgym_envs.core.gates import GateMode, SafetyGate
from agentgym_envs.core.info import (
    ErrorCode,
    ErrorInfo,
    Outcome,
    SafetyInfo,
    ToolCallInfo,
    ToolStatus,
)
from agentgym_envs.core.staging import EffectsGate, StagedEffects
from agentgym_envs.core.tools import IDEMPOTENCY_KEY, Tool, ToolCall, ToolKind, ToolResult

if TYPE_CHECKING:
    from agentgym_envs.core.env import AgentEnv

logger = logging.getLogger(__name__)
_E = TypeVar("_E", bound="AgentEnv")  # the env a call runs on; its gates read that type
_FAULT_STREAM = 0xFA17  # the fault RNG's own stream, beside the env's RNG
_SIMPLE = (str, int, float, bool, type(None))


@dataclass(slots=True)
class CallRecord:
    """What happened to one call."""

    status: ToolStatus
    result: ToolResult | None
    outcome: Outcome = Outcome.CONTINUE
    cost: float = 0.0
    latency_ms: float = 0.0
    safety: SafetyInfo = field(default_factory=lambda: SafetyInfo())
    fault: str = ""
    failure: str = ""  # why the env failed (ENV_ERROR only)
    executed: bool = False  # the handler ran (not refused, not replayed)
    committed: ToolResult | None = None  # what the handler returned when a fault hid it


@dataclass(slots=True)
class Turn:
    """What executing one action produced (the step loop's execute phase)."""

    calls: list[ToolCallInfo] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    error: ErrorInfo = field(default_factory=lambda: ErrorInfo())
    safety: SafetyInfo = field(default_factory=lambda: SafetyInfo())
    outcome: Outcome = Outcome.CONTINUE
    cost: float = 0.0
    errors: int = 0  # policy errors (parse, unknown tool, bad arguments, blocked)


def fresh_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of parsed arguments that callers may mutate (parses are cached)."""
    if all(type(v) in _SIMPLE for v in arguments.values()):
        return dict(arguments)
    result: dict[str, Any] = json.loads(json.dumps(arguments))
    return result


class CallRunner:
    """Executes calls for one env.

    Args:
        timing: ``"virtual"`` charges each tool its nominal duration; ``"wall"`` measures.
        retries: backend retries after a ``TransientToolError`` or an injected transient
            fault, before the episode ends with ``ENV_ERROR``.
        faults: what faults to inject, or None.
    """

    def __init__(
        self, timing: Literal["virtual", "wall"], retries: int, faults: FaultConfig | None
    ) -> None:
        self.timing = timing
        self.retries = retries
        self.faults = faults if faults is not None and faults.rate > 0 else None
        self._rng: np.random.Generator | None = None
        self._replays: dict[str, tuple[str, dict[str, Any], ToolResult]] = {}

    def start_episode(self, seed: int) -> None:
        """Forget idempotency keys; reseed the fault RNG from the episode seed."""
        self._replays = {}
        if self.faults is not None:
            self._rng = np.random.default_rng([seed, _FAULT_STREAM])

    def get_state(self) -> dict[str, Any]:
        return {
            "replays": dict(self._replays),
            "rng": None if self._rng is None else self._rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._replays = dict(state["replays"])
        if state["rng"] is not None:
            if self._rng is None:
                self._rng = np.random.default_rng()
            self._rng.bit_generator.state = state["rng"]

    def run(
        self,
        env: _E,
        spec: Tool,
        call: ToolCall,
        gates: Sequence[SafetyGate[_E]],
        effect_gates: Sequence[EffectsGate[_E]] = (),
    ) -> CallRecord:
        """Gate, then execute ``call`` on ``env`` (whose method ``spec.handler`` runs it).

        A staged tool is first run by ``env.stage_call(call)``; ``effect_gates`` check
        the staged effects, and the handler commits them (``handler(staged, **args)``).
        Effects that are not committed are discarded before this returns.
        """
        args = dict(call.arguments)
        key = str(args.pop(IDEMPOTENCY_KEY, "") or "") if spec.idempotent else ""
        if key and key in self._replays:  # the call was allowed and applied already
            return self._replay(spec, call.name, args, key)
        for gate in gates:
            verdict = gate.check(env, call)
            if verdict is not None:
                return _gated(call, verdict.gate, verdict.mode, verdict.reason)
        if not spec.staged:
            return self._run_checked(env, spec, call, args, key, None)
        staged, stage_ms = self._stage(env, call)
        if isinstance(staged, CallRecord):
            return staged
        try:
            for effects_gate in effect_gates:
                verdict = effects_gate.check(env, call, staged)
                if verdict is not None:
                    return _gated(call, verdict.gate, verdict.mode, verdict.reason)
            record = self._run_checked(env, spec, call, args, key, staged)
            if self.timing == "wall" and record.executed:
                record.latency_ms += stage_ms  # the call ran while it was staged
            return record
        finally:
            staged.discard()  # a no-op once the handler committed it

    # -- internals ---------------------------------------------------------------------

    def _run_checked(
        self,
        env: Any,
        spec: Tool,
        call: ToolCall,
        args: dict[str, Any],
        key: str,
        staged: StagedEffects | None,
    ) -> CallRecord:
        """Faults, then the handler (for a staged tool: the commit), then its result."""
        fault, after = self._draw_fault(spec)
        if fault in REFUSED_KINDS or (fault is FaultKind.TIMEOUT and not after):
            return self._faulted(spec, fault, call)
        if fault is FaultKind.TRANSIENT and self._transient_outlasts_retries():
            return CallRecord(ToolStatus.ENV_ERROR, None, Outcome.ENV_ERROR, fault=fault.value,
                              failure=f"tool {call.name}: injected transient fault outlasted "
                              f"{self.retries} retries")  # fmt: skip
        record = self._execute(env, spec, call.name, args, staged)
        if record.result is not None and record.result.violation is not None:
            name, reason = record.result.violation  # caught while it ran: a hard stop
            stopped = _gated(call, name, GateMode.STOP, reason)
            stopped.executed, stopped.cost, stopped.latency_ms = True, spec.cost, record.latency_ms
            return stopped
        if record.result is not None and key:
            self._replays[key] = (call.name, args, record.result)
        if record.outcome is Outcome.ENV_ERROR or fault is None:
            return record
        record.fault = fault.value
        if fault is FaultKind.TIMEOUT:  # it ran (a write committed), but the answer is lost
            timed_out = self._faulted(spec, fault, call)
            timed_out.executed = True
            timed_out.committed = record.result
            return timed_out
        if fault is FaultKind.EMPTY_RESULT:
            record.result = ToolResult("(no results)", data=[])
        return record

    def _attempt(self, name: str, run: Callable[[], Any]) -> tuple[Any, Exception | None, float]:
        """``run()`` with retries after a ``TransientToolError``: (what it returned or
        None, the last exception or None, the last attempt's wall time in ms)."""
        result: Any = None
        last: Exception | None = None
        start = time.perf_counter()
        for attempt in range(self.retries + 1):
            start = time.perf_counter()
            try:
                result = run()
                last = None
                break
            except TransientToolError as exc:
                logger.warning("tool %s failed (attempt %d): %s", name, attempt, exc)
                last = exc
            except Exception as exc:
                logger.exception("tool %s crashed", name)
                last = exc
                break
        return result, last, (time.perf_counter() - start) * 1000.0

    def _stage(self, env: Any, call: ToolCall) -> tuple[StagedEffects | CallRecord, float]:
        """Run a staged tool's call on a scratch copy (``env.stage_call``): its effects,
        or the ``ENV_ERROR`` record of a stage that failed; and the time it took."""
        staged, last, elapsed = self._attempt(call.name, lambda: env.stage_call(call))
        if isinstance(staged, StagedEffects):
            return staged, elapsed
        why = (
            f"{type(last).__name__}: {last}"
            if last is not None
            else f"stage_call returned {type(staged).__name__}, not StagedEffects"
        )
        failure = f"tool {call.name} failed while staged: {why}"
        return CallRecord(ToolStatus.ENV_ERROR, None, Outcome.ENV_ERROR, failure=failure), elapsed

    def _execute(
        self,
        env: Any,
        spec: Tool,
        name: str,
        args: dict[str, Any],
        staged: StagedEffects | None = None,
    ) -> CallRecord:
        handler = getattr(env, spec.handler)
        run = (lambda: handler(**args)) if staged is None else (lambda: handler(staged, **args))
        result, last, elapsed = self._attempt(name, run)
        if not isinstance(result, ToolResult):
            why = (
                f"{type(last).__name__}: {last}"
                if last is not None
                else f"the handler returned {type(result).__name__}, not a ToolResult"
            )
            return CallRecord(ToolStatus.ENV_ERROR, None, Outcome.ENV_ERROR,
                              failure=f"tool {name} failed: {why}")  # fmt: skip
        status = ToolStatus.OK if result.error_code is None else ToolStatus.ERROR
        latency = spec.duration_ms if self.timing == "virtual" else elapsed
        return CallRecord(status, result, cost=spec.cost, latency_ms=latency, executed=True)

    def _replay(self, spec: Tool, name: str, args: dict[str, Any], key: str) -> CallRecord:
        first_name, first_args, first = self._replays[key]
        if (first_name, first_args) != (name, args):
            result = ToolResult.failure(
                "idempotency_conflict",
                f"idempotency key {key!r} was already used for a different call "
                f"({first_name} {json.dumps(first_args, sort_keys=True)}); use a new key",
            )
            return CallRecord(ToolStatus.ERROR, result, cost=spec.cost)
        replayed = ToolResult(first.text, first.error_code, first.data)
        status = ToolStatus.OK if first.error_code is None else ToolStatus.ERROR
        return CallRecord(status, replayed, cost=spec.cost, latency_ms=spec.duration_ms)

    def _draw_fault(self, spec: Tool) -> tuple[FaultKind | None, bool]:
        if self.faults is None or self._rng is None or not spec.faultable:
            return None, False
        if self._rng.random() >= self.faults.rate:
            return None, False
        kinds = [
            k for k in self.faults.kinds
            if k is not FaultKind.EMPTY_RESULT or spec.kind is ToolKind.READ
        ]  # fmt: skip
        if not kinds:
            return None, False
        kind = kinds[int(self._rng.integers(len(kinds)))]
        return kind, bool(self._rng.random() < 0.5)

    def _transient_outlasts_retries(self) -> bool:
        assert self.faults is not None and self._rng is not None
        return all(self._rng.random() < self.faults.rate for _ in range(self.retries))

    def _faulted(self, spec: Tool, fault: FaultKind, call: ToolCall) -> CallRecord:
        assert self.faults is not None
        if fault in _REFUSALS:
            code, template = _REFUSALS[fault]
            # name the tool as the agent sees it (renamed under tool OOD), and an argument
            arg = next((f"argument '{k}'" for k in call.arguments if k != IDEMPOTENCY_KEY), "")
            text = template.format(tool=spec.name, arg=arg or "the request")
            result = ToolResult.failure(code, text)
            latency = spec.duration_ms
        else:
            result = ToolResult.failure(
                "timeout",
                f"The call timed out after {self.faults.timeout_ms / 1000:g} s; it may or may "
                "not have taken effect.",
            )
            latency = self.faults.timeout_ms
        return CallRecord(ToolStatus.ERROR, result, cost=spec.cost, latency_ms=latency,
                          fault=fault.value)  # fmt: skip


# refused faults: (error code, message); each says that nothing was applied and how to
# get past it, as a real backend's error would
_REFUSALS: dict[FaultKind, tuple[str, str]] = {
    FaultKind.RATE_LIMIT: ("rate_limited", "The service is rate limited right now; try again."),
    FaultKind.INVALID_ARGUMENT: (
        "request_rejected",
        "Request rejected (HTTP 422): the {tool} service could not validate {arg}. "
        "Nothing was applied. Check the arguments and send the call again.",
    ),
    FaultKind.PERMISSION_DENIED: (
        "permission_denied",
        "Permission denied (HTTP 403): the session token for {tool} expired and has been "
        "refreshed. Nothing was applied; retry the call.",
    ),
    FaultKind.STATE_CONFLICT: (
        "conflict",
        "Conflict (HTTP 409): the record changed while {tool} was processing it (version "
        "mismatch). Nothing was applied; read the record again and retry.",
    ),
    FaultKind.TOOL_UNAVAILABLE: (
        "unavailable",
        "Service unavailable (HTTP 503): {tool} is down for maintenance. Nothing was "
        "applied; try again in a moment.",
    ),
}


def _gated(call: ToolCall, gate: str, mode: GateMode, reason: str) -> CallRecord:
    stop = mode is GateMode.STOP
    safety: SafetyInfo = {
        "gate": gate,
        "action": f"{call.name}({json.dumps(dict(call.arguments), sort_keys=True, default=repr)})",
        "verdict": "stopped" if stop else "blocked",
        "reason": reason,
    }
    if stop:
        text = f"Stopped by safety gate {gate}: {reason}"
        return CallRecord(ToolStatus.STOPPED, ToolResult(text), Outcome.SAFETY_STOP, safety=safety)
    refusal = ToolResult.failure(ErrorCode.BLOCKED, f"Blocked by safety gate {gate}: {reason}")
    return CallRecord(ToolStatus.BLOCKED, refusal, safety=safety)
