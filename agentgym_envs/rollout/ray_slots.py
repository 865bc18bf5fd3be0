"""Env slots on a Ray env pool (see :mod:`agentgym_envs.rollout.slots`).

One generation call's steps go to the actors at once; an actor that dies or hangs ends
its episodes as ``env_error`` and the pool restarts it. An evaluator's actors open no
trajectory store: their envs record into an
:class:`~agentgym_envs.distributed.host.EpisodeOutbox`, each finished episode comes back
with the step that ended it, and the slots write it into the run's store here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.distributed.results import (
    ActorLost,
    Call,
    CrashCode,
    SlotResult,
    crashed_result,
)
from agentgym_envs.rollout.slots import (
    EnvCrashed,
    Note,
    RemoteEnv,
    Script,
    config_checked,
    oracle_script,
)

if TYPE_CHECKING:
    from agentgym_envs.distributed.pool import RayEnvPool

log = logging.getLogger(__name__)


class RayEnvSlots:
    """The slots of a Ray env pool (which this object closes).

    Args:
        pool: the pool; its length is the number of slots.
        strict: a ConfigError the env raised in its actor is raised here (the
            trainer's slots); not strict, it ends only its episode (the evaluator's).
        store: the run's open trajectory store, where the episodes the actors recorded
            are written (None: nothing is recorded).
    """

    def __init__(self, pool: RayEnvPool, *, strict: bool = True, store: Any = None) -> None:
        self.pool = pool
        self.strict = strict
        self.store = store
        self.envs = [RemoteEnv(functools.partial(self._control, i)) for i in range(len(pool))]
        """Each slot's stand-in for scripted policies (``oracle()``, ``noop_action``)."""

    def __len__(self) -> int:
        return len(self.pool)

    def reset(self, i: int, seed: int | None, options: Mapping[str, Any] | None) -> SlotResult:
        return config_checked(self.pool.reset(i, seed, options), self.strict)

    def step_many(
        self, actions: Sequence[tuple[int, str]], notes: Sequence[Note] | None = None
    ) -> list[SlotResult]:
        results = self.pool.step_many(actions, notes)
        for result in results:
            if result.episodes and self.store is not None:
                self.store.add_many(result.episodes)
        return [config_checked(r, self.strict) for r in results]

    def script(self, i: int, script: Script) -> Callable[[], str]:
        """Raises:
        ConfigError: ``script`` is not :func:`~agentgym_envs.rollout.slots.oracle_script`
            (only the oracle runs in the actor next to its env)."""
        if script is not oracle_script:
            raise ConfigError(
                f"a Ray env pool runs only the oracle as a scripted policy, got {script!r}; "
                "pass agentgym_envs.rollout.oracle_script, or use --env-backend local "
                "for scripts that need the env object"
            )
        return functools.partial(self._oracle_act, i)

    def get_states(self, slots: Sequence[int]) -> list[Any]:
        """Taken on the actors in parallel, so a turn's snapshots cost one round trip."""
        out = []
        for i, state in zip(slots, self.pool.get_state_many(slots), strict=True):
            # ActorLost, or the env's own exception from its actor: no branch from here
            if isinstance(state, Exception):
                log.warning("env snapshot failed (slot %d): %r", i, state)
                state = None
            out.append(state)
        return out

    def set_state(self, i: int, state: Any) -> SlotResult:
        try:
            self.pool.set_state(i, state)
        except ActorLost as exc:
            return crashed_result(i, Call.RESET, CrashCode.EPISODE_LOST, str(exc))
        except Exception as exc:  # the env's own exception, raised in its actor
            # a ConfigError raised in the actor (Ray's error is an instance of it)
            if self.strict and isinstance(exc, ConfigError):
                raise
            message = f"{type(exc).__name__}: {exc}"
            return crashed_result(i, Call.RESET, CrashCode.ENV_EXCEPTION, message)
        return SlotResult(i, Call.RESET)

    def close(self) -> None:
        self.pool.close()

    def _control(self, i: int, cmd: str) -> Any:
        """``oracle_act`` or ``noop_action`` on slot ``i``'s actor.

        Raises:
            EnvCrashed: the call failed.
        """
        try:
            return getattr(self.pool, cmd)(i)
        except Exception as exc:
            raise EnvCrashed(f"env {cmd} failed on its Ray actor: {exc}") from exc

    def _oracle_act(self, i: int) -> str:
        try:
            return self.pool.oracle_act(i)
        except ActorLost as exc:
            # the episode is gone with its actor: the step that follows comes back
            # crashed (episode_lost), which ends the episode as an env_error
            log.warning("slot %d: the oracle's actor was lost (%s)", i, exc)
            return ""


__all__ = ["RayEnvSlots"]
