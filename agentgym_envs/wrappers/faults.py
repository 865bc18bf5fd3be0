"""Fault injection for any agentgym env: seeded, labelled infrastructure faults.

The faults themselves are the core's (``agentgym_envs.core.faults``): the wrapper sets
the env's fault config (:meth:`AgentEnv.configure_faults`) and reports, per step, what
the episode has met so far, so an evaluator can compute recovery (success among valid
episodes that met at least one fault).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.faults import FaultConfig, FaultKind
from agentgym_envs.wrappers.base import AgentWrapper

ALL_KINDS: tuple[str, ...] = tuple(k.value for k in FaultKind)


class FaultInjection(AgentWrapper):
    """Inject infrastructure faults into the wrapped env's tool calls.

    Each tool call meets a fault with probability ``rate``; its kind is drawn uniformly
    from ``kinds`` (see ``core.faults`` for what each does: ``timeout``,
    ``rate_limit``, ``empty_result``, ``transient_error``, ``invalid_argument``,
    ``permission_denied``, ``state_conflict``, ``tool_unavailable``). Faults draw from
    their own RNG, seeded from the episode seed, and snapshots restore it.

    Info:
        ``info["tool_calls"][i]["fault"]`` labels each faulted call (the core does);
        ``info["faults"] = {"injected": n, "kinds": [...]}`` counts the faults met so
        far this episode, in order (``injected`` equals ``info["cost"]["faults"]``).

    Args:
        env: an agentgym env (its own fault config is replaced).
        rate: the probability that a tool call meets a fault, in [0, 1].
        kinds: the kinds drawn from; every kind by default.
        timeout_ms: the virtual time a timeout costs.

    Raises:
        ConfigError: a rate outside [0, 1], an unknown kind (with the closest match).
    """

    key = "faults"

    def __init__(
        self,
        env: gym.Env[str, str],
        rate: float = 0.1,
        kinds: Sequence[str] = ALL_KINDS,
        timeout_ms: float = 30_000.0,
    ) -> None:
        super().__init__(env, rate=rate, kinds=list(kinds), timeout_ms=timeout_ms)
        if isinstance(kinds, str):
            raise ConfigError(f"kinds must be a list of fault kinds, got the string {kinds!r}")
        config = FaultConfig.coerce({"rate": rate, "kinds": kinds, "timeout_ms": timeout_ms})
        assert config is not None  # a mapping always gives a config
        self.config = config
        self.agent_env.configure_faults(self.config)
        self._met: list[str] = []

    @property
    def tag(self) -> str:
        kinds = ",".join(k.value for k in self.config.kinds)
        return f"faults:{self.config.rate:g}:{kinds}"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        # another holder of the env may have changed its faults since: ours apply
        if self.agent_env.faults != self.config:
            self.agent_env.configure_faults(self.config)
        obs, info = self.env.reset(seed=seed, options=options)
        self._start_episode(info)
        self._met = []
        info["faults"] = self._report()
        self._tag(info)
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._met.extend(c["fault"] for c in info.get("tool_calls", ()) if c.get("fault"))
        info["faults"] = self._report()
        self._tag(info)
        return obs, reward, terminated, truncated, info

    def wrapper_state(self) -> Any:
        return tuple(self._met)

    def restore_wrapper_state(self, state: Any) -> None:
        self._met = list(state)

    def _report(self) -> dict[str, Any]:
        return {"injected": len(self._met), "kinds": list(self._met)}
