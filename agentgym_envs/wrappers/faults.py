"""Fault injection for any agentgym env: seeded, labelled infrastructure faults.

The faults themselves are the core's (``agentgym_envs.core.faults``), and their config
lives in one place, the env's call runner. The wrapper installs its config there once,
when it is made (:meth:`AgentEnv.configure_faults`, the same place the env's ``faults``
constructor argument fills), and never again: each reset reseeds the fault RNG once, in
the env. Per step it reports what the episode has met so far, so an evaluator can
compute recovery (success among valid episodes that met at least one fault).
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
        env: an agentgym env made without faults of its own (or with these very ones).
        rate: the probability that a tool call meets a fault, in [0, 1].
        kinds: the kinds drawn from; every kind by default.
        timeout_ms: the virtual time a timeout costs.

    Raises:
        ConfigError: a rate outside [0, 1], an unknown kind (with the closest match), or an
            env that already injects other faults (configure them in one place).
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
        present = self.agent_env.faults
        if present is not None and present != config:
            raise ConfigError(
                f"the env already injects faults ({present.tag[1:]}, from its faults= "
                f"argument or configure_faults) and FaultInjection asks for {config.tag[1:]}; "
                "faults are configured in one place: drop the env's faults= or this wrapper"
            )
        self._requested = config
        self.agent_env.configure_faults(config)
        self._met: list[str] = []

    @property
    def config(self) -> FaultConfig:
        """The fault config in force: the env's (this wrapper installed it there)."""
        return self.agent_env.faults or self._requested

    @property
    def tag(self) -> str:
        config = self.config
        return f"faults:{config.rate:g}:{','.join(k.value for k in config.kinds)}"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
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
