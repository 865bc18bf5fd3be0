"""The base of the robustness wrappers: version tags, episode seeds and snapshots.

Every wrapper in this package is a ``gymnasium.Wrapper`` around an agentgym env
(:class:`~agentgym_envs.core.env.AgentEnv`, possibly under other wrappers). It

- appends its tag to ``info["versions"]["wrappers"]`` (``tool_ood:1:rename+loop:3``),
  so results name exactly which perturbations they ran under;
- seeds its own randomness from the episode seed (``info["seeds"]["env"]``), so the
  same ``reset(seed=...)`` gives the same perturbations;
- keeps its per-episode state in snapshots: ``get_state()`` returns the wrapped env's
  :class:`~agentgym_envs.core.state.EnvState` with the wrapper's state pushed on
  ``episode["wrappers"]``, and ``set_state`` pops it and restores the rest inside.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Protocol, cast

import gymnasium as gym
import numpy as np

from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.errors import ConfigError, ResetNeeded, StateError
from agentgym_envs.core.state import EnvState

STACK_KEY = "wrappers"  # where wrapper states ride in EnvState.episode


class _Snapshots(Protocol):
    def get_state(self) -> EnvState: ...

    def set_state(self, state: EnvState) -> None: ...


class AgentWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Base class of the robustness wrappers (see the module docstring).

    Subclasses set ``key`` (their name in :data:`~agentgym_envs.wrappers.WRAPPERS`),
    implement :attr:`tag`, and override :meth:`wrapper_state` and
    :meth:`restore_wrapper_state` when they keep per-episode state. They pass their
    keyword arguments to ``super().__init__`` so that ``env.spec`` can rebuild them.

    Raises:
        ConfigError: the wrapped env is not an agentgym env.
    """

    key: ClassVar[str] = ""
    _stream: ClassVar[int] = 0  # a per-wrapper RNG stream, beside the env's own

    def __init__(self, env: gym.Env[str, str], **kwargs: Any) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, **kwargs)
        gym.Wrapper.__init__(self, env)
        inner = env.unwrapped
        if not isinstance(inner, AgentEnv):
            raise ConfigError(
                f"{type(self).__name__} wraps agentgym envs (AgentEnv), got "
                f"{type(inner).__name__}; make the env with gym.make('agentgym/<Name>-v0')"
            )
        self.agent_env: AgentEnv = inner
        self.episode_seed: int | None = None

    @property
    def tag(self) -> str:
        """This wrapper's entry in ``info["versions"]["wrappers"]``."""
        return self.key

    # -- per-episode state (override when the wrapper keeps any) -------------------------

    def wrapper_state(self) -> Any:
        """Plain data of this wrapper's episode state (owned by the caller)."""
        return None

    def restore_wrapper_state(self, state: Any) -> None:
        """Restore :meth:`wrapper_state` output."""

    # -- snapshots ---------------------------------------------------------------------

    def get_state(self) -> EnvState:
        """The wrapped env's snapshot with this wrapper's state pushed on top."""
        inner = _snapshots(self.env).get_state()
        stack = (*inner.episode.get(STACK_KEY, ()), (type(self).__name__, self.wrapper_state()))
        return replace(inner, episode={**inner.episode, STACK_KEY: stack})

    def set_state(self, state: EnvState) -> None:
        """Restore a snapshot taken by :meth:`get_state` of the same wrapper stack.

        Raises:
            StateError: the snapshot was taken without this wrapper (or under others).
        """
        if not isinstance(state, EnvState):
            raise StateError(f"set_state expects an EnvState, got {type(state).__name__}")
        stack = tuple(state.episode.get(STACK_KEY, ()))
        name = type(self).__name__
        if not stack or stack[-1][0] != name:
            got = stack[-1][0] if stack else "no wrapper"
            raise StateError(
                f"this snapshot's outermost wrapper is {got}, not {name}; restore a snapshot "
                "taken with get_state() of the same wrapper stack"
            )
        _snapshots(self.env).set_state(
            replace(state, episode={**state.episode, STACK_KEY: stack[:-1]})
        )
        self.restore_wrapper_state(stack[-1][1])

    # -- helpers for subclasses ----------------------------------------------------------

    def _start_episode(self, info: dict[str, Any]) -> None:
        """Record the episode seed (the env reports it even when reset drew it)."""
        self.episode_seed = int(info["seeds"]["env"])

    def _rng(self, *salt: int) -> np.random.Generator:
        """A generator seeded from the episode seed, this wrapper's stream and ``salt``."""
        if self.episode_seed is None:
            raise ResetNeeded(f"call reset() before step() ({type(self).__name__})")
        return np.random.default_rng([self.episode_seed, self._stream, *salt])

    def _tag(self, info: dict[str, Any]) -> None:
        """Append this wrapper's tag to ``info["versions"]["wrappers"]``."""
        versions = info.get("versions")
        if isinstance(versions, dict):
            before = versions.get("wrappers")
            versions["wrappers"] = f"{before}+{self.tag}" if before else self.tag


def _snapshots(env: gym.Env[Any, Any]) -> _Snapshots:
    """The closest env down the chain that takes snapshots (skipping Gymnasium's own
    wrappers, such as ``OrderEnforcing``, which do not forward them)."""
    current = env
    while isinstance(current, gym.Wrapper) and not callable(
        getattr(type(current), "get_state", None)
    ):
        current = current.env
    return cast(_Snapshots, current)


def rng_state(rng: np.random.Generator | None) -> dict[str, Any] | None:
    """A generator's state as plain data (None for no generator)."""
    return None if rng is None else dict(rng.bit_generator.state)


def restored_rng(state: dict[str, Any] | None) -> np.random.Generator | None:
    """A generator in the state :func:`rng_state` captured."""
    if state is None:
        return None
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng
