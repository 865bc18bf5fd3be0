"""Seeded, labelled infrastructure faults injected into tool calls.

Faults model the backend, not the policy: a timeout, a rate limit, an empty result or a
transient error. Each faulted call is labelled in ``info["tool_calls"][i]["fault"]`` so
evaluation can measure recovery. Faults draw from their own RNG (seeded from the
episode seed), so turning them on does not change any other randomness of the episode,
and snapshots restore it.

They are configured in one place, the env's ``faults`` argument
(``gym.make("agentgym/Retail-v1", faults={"rate": 0.1})``; a trainer's or a suite
entry's ``env_kwargs``), never by a wrapper: a fault happens inside a tool call, between
the gate and the handler, where only the env's call runner can put it.

- ``timeout``: the agent gets ``timeout``; half the time the call had already taken
  effect (a WRITE committed before the answer was lost), so a blind retry can apply a
  write twice unless it reuses its idempotency key.
- ``rate_limit``: refused before running; the agent gets ``rate_limited``.
- ``empty_result``: a READ tool silently answers with nothing (flaky search).
- ``transient_error``: the env retries the backend (``tool_retries``); every attempt
  fails again with probability ``rate``, and a fault that outlasts the retry budget
  ends the episode with ``ENV_ERROR`` (never a policy failure).

Four more kinds are refused before the tool runs, each with the error a real backend
gives and that a retry (or a re-read, then a retry) gets past. They are opt-in: the
default ``kinds`` are the four above, so existing configs draw exactly as before.

- ``invalid_argument``: the backend's validator spuriously rejects an argument
  (error code ``request_rejected``).
- ``permission_denied``: the session's credentials expired and are refreshed
  (``permission_denied``).
- ``state_conflict``: a concurrent update changed the record, an optimistic lock
  (``conflict``).
- ``tool_unavailable``: the tool's service is down for a moment (``unavailable``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from agentgym_envs.core.errors import ConfigError, did_you_mean


class FaultKind(StrEnum):
    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    EMPTY_RESULT = "empty_result"
    TRANSIENT = "transient_error"
    INVALID_ARGUMENT = "invalid_argument"
    PERMISSION_DENIED = "permission_denied"
    STATE_CONFLICT = "state_conflict"
    TOOL_UNAVAILABLE = "tool_unavailable"


# the kinds a FaultConfig draws from unless told otherwise (oracles and tests rely on it)
DEFAULT_KINDS: tuple[FaultKind, ...] = (
    FaultKind.TIMEOUT,
    FaultKind.RATE_LIMIT,
    FaultKind.EMPTY_RESULT,
    FaultKind.TRANSIENT,
)
# kinds refused before the tool runs: nothing changes, the agent gets an error to retry
REFUSED_KINDS: frozenset[FaultKind] = frozenset(
    {
        FaultKind.RATE_LIMIT,
        FaultKind.INVALID_ARGUMENT,
        FaultKind.PERMISSION_DENIED,
        FaultKind.STATE_CONFLICT,
        FaultKind.TOOL_UNAVAILABLE,
    }
)


@dataclass(frozen=True)
class FaultConfig:
    """Which faults to inject and how often.

    Attributes:
        rate: probability that a tool call meets a fault (0 disables injection).
        kinds: the kinds drawn from, uniformly (``empty_result`` only hits READ tools);
            ``DEFAULT_KINDS`` (timeout, rate_limit, empty_result, transient_error) unless
            given.
        timeout_ms: virtual time a timeout costs.
    """

    rate: float = 0.0
    kinds: tuple[FaultKind, ...] = DEFAULT_KINDS
    timeout_ms: float = 30_000.0

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, int | float) and 0.0 <= self.rate <= 1.0):
            raise ConfigError(f"faults rate must be a number in [0, 1], got {self.rate!r}")
        kinds = []
        for kind in self.kinds:
            try:
                kinds.append(FaultKind(kind))
            except ValueError:
                names = [k.value for k in FaultKind]
                raise ConfigError(
                    f"unknown fault kind {kind!r}.{did_you_mean(str(kind), names)} Kinds: {names}"
                ) from None
        if not kinds:
            raise ConfigError("faults kinds must name at least one kind")
        if not math.isfinite(self.timeout_ms) or self.timeout_ms < 0:
            raise ConfigError(f"faults timeout_ms must be >= 0, got {self.timeout_ms!r}")
        object.__setattr__(self, "kinds", tuple(kinds))

    @classmethod
    def coerce(cls, value: FaultConfig | Mapping[str, Any] | None) -> FaultConfig | None:
        """Accept a FaultConfig, a dict of its fields (handy in ``gym.make``) or None."""
        if value is None or isinstance(value, FaultConfig):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"faults must be a FaultConfig or a dict like {{'rate': 0.1}}, got {value!r}"
            )
        allowed = [f.name for f in fields(cls)]
        for key in value:
            if key not in allowed:
                raise ConfigError(
                    f"unknown faults option {key!r}.{did_you_mean(key, allowed)} Options: {allowed}"
                )
        args = dict(value)
        if "kinds" in args:
            if isinstance(args["kinds"], str):
                raise ConfigError(
                    f"faults kinds must be a list of fault kinds, got the string "
                    f"{args['kinds']!r}; write {{'kinds': [{args['kinds']!r}]}}"
                )
            args["kinds"] = tuple(args["kinds"])
        return cls(**args)

    @property
    def tag(self) -> str:
        """A short label for ``info["versions"]["env"]``."""
        return f"+faults:{self.rate:g}:{','.join(k.value for k in self.kinds)}"
