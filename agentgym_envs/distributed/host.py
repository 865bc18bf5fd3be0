"""The body of an env actor: a few envs in one Ray worker process.

:class:`EnvHost` is a plain class; the pool turns it into a Ray actor class with
``ray.remote`` when it starts, so importing this module imports no ray. Every method
takes and returns plain data (action text, seeds, options; observation, reward, flags,
the info dict, an :class:`~agentgym_envs.core.state.EnvState`), never a live handle.

With more than one env per actor, each env lives on a thread of its own (it is built,
stepped and closed there), so the envs of one actor step concurrently and no env is
touched by two threads: sqlite connections and browser contexts stay where they were
made.

Recording: an actor opens no trajectory store (a path would resolve on the actor's node
and in its working directory). An env whose recording wrapper writes into an
:class:`EpisodeOutbox` hands each finished episode back with the step that ended it,
and the caller writes it into its own store.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import gymnasium as gym

from agentgym_envs.store import StoredEpisode
from agentgym_envs.wrappers.recording import RecordingWrapper

logger = logging.getLogger(__name__)

EnvFactory = Callable[[], gym.Env[Any, Any]]
T = TypeVar("T")


class EpisodeOutbox:
    """Stands in for a trajectory store inside an actor: a recording wrapper adds its
    finished episodes (``StoredEpisode``: plain data) and :meth:`drain` hands them over,
    so the caller writes them into its own store (same rows as an in-process run)."""

    def __init__(self) -> None:
        self._episodes: list[StoredEpisode] = []

    def add(self, episode: StoredEpisode) -> None:
        """Keep a finished episode (its row id is the caller's to learn: None here)."""
        self._episodes.append(episode)

    def drain(self) -> list[StoredEpisode]:
        """The episodes kept since the last drain, oldest first."""
        out, self._episodes = self._episodes, []
        return out


def make_registered(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
    """``gym.make(env_id, **env_kwargs)`` after registering the agentgym envs (the
    default factory of a pool; module-level so Ray can pickle it)."""
    import agentgym_envs  # noqa: F401  (registers the envs in a fresh worker process)

    return gym.make(env_id, **env_kwargs)


class EnvHost:
    """``count`` envs built by ``factory`` in this process, addressed by index.

    Args:
        factory: builds one env (picklable: a module-level function or a
            ``functools.partial`` of one).
        count: envs hosted by this actor.
    """

    def __init__(self, factory: EnvFactory, count: int) -> None:
        from agentgym_envs.core.scratch import reap_stale

        # a predecessor killed on this node ran no cleanup: remove its scratch folders
        reap_stale()
        self._threads = [
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"env{k}")
            for k in range(count if count > 1 else 0)
        ]
        self._envs: list[gym.Env[Any, Any]] = [self._on(k, factory) for k in range(count)]
        self._oracles: list[Any] = [None] * count
        self._was_reset = [False] * count

    def _on(self, k: int, fn: Callable[[], T]) -> T:
        """Run ``fn`` on env ``k``'s thread (in place with a single env)."""
        if not self._threads:
            return fn()
        return self._threads[k].submit(fn).result()

    # -- where this actor runs (placement checks, leftover checks) -----------------------

    def where(self) -> dict[str, Any]:
        """The node id, node IP, pid and the resources Ray assigned to this actor."""
        import ray

        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "pid": os.getpid(),
            "resources": dict(context.get_assigned_resources()),  # type: ignore[no-untyped-call]
        }

    def child_pids(self) -> list[int]:
        """Processes started below this actor (browsers, sandboxes), for leftover checks."""
        from agentgym_envs.distributed.procs import descendants

        return descendants(os.getpid())

    # -- env calls --------------------------------------------------------------------

    def spaces(self) -> tuple[Any, Any]:
        """The observation and action spaces of the hosted envs."""
        env = self._envs[0]
        return env.observation_space, env.action_space

    def reset(self, k: int, seed: int | None, options: dict[str, Any] | None) -> Any:
        """``reset`` of env ``k``: ``(obs, info)``."""
        self._oracles[k] = None
        result = self._on(k, lambda: self._envs[k].reset(seed=seed, options=options))
        self._was_reset[k] = True
        return result

    def step(self, k: int, action: str, note: dict[str, Any] | None = None) -> Any:
        """``step`` of env ``k``: ``(obs, reward, terminated, truncated, info, episodes)``;
        ``note`` goes to the env's recording wrapper (the evaluator's trial and token
        counts) and ``episodes`` are those its :class:`EpisodeOutbox` kept (the one this
        step finished, if any)."""

        def run() -> Any:
            env = self._envs[k]
            recorder = _recorder(env)
            if note and recorder is not None:
                recorder.note(**note)
            obs, reward, terminated, truncated, info = env.step(action)
            outbox = None if recorder is None else recorder.store
            episodes = outbox.drain() if isinstance(outbox, EpisodeOutbox) else []
            return obs, float(reward), bool(terminated), bool(truncated), info, episodes

        return self._on(k, run)

    def get_state(self, k: int) -> Any:
        """The snapshot of env ``k``'s episode (plain, picklable data)."""
        return self._on(k, lambda: self._envs[k].unwrapped.get_state())  # type: ignore[attr-defined]

    def set_state(self, k: int, state: Any) -> None:
        """Restore a snapshot (taken here or on any other actor) into env ``k``.

        An env that was never reset is reset once first: Gymnasium's wrappers refuse a
        step before a reset, and the snapshot then replaces the whole episode anyway.
        """
        self._oracles[k] = None

        def run() -> None:
            env = self._envs[k]
            if not self._was_reset[k]:
                env.reset(seed=0)
                self._was_reset[k] = True
            env.unwrapped.set_state(state)  # type: ignore[attr-defined]

        self._on(k, run)

    def oracle_act(self, k: int) -> str:
        """The next action of env ``k``'s scripted solver (made at the first call of an
        episode, as the evaluator's oracle policy does)."""

        def run() -> str:
            if self._oracles[k] is None:
                self._oracles[k] = self._envs[k].unwrapped.oracle()  # type: ignore[attr-defined]
            return str(self._oracles[k].act())

        return self._on(k, run)

    def noop_action(self, k: int) -> str:
        """Env ``k``'s do-nothing action."""
        return str(self._envs[k].unwrapped.noop_action)  # type: ignore[attr-defined]

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        """Close every env (browsers, sandboxes), then what the process's envs share
        (each family record's ``actor_close``, e.g. a browser)."""
        from agentgym_envs.core.family import resolve
        from agentgym_envs.registration import families

        for k, env in enumerate(self._envs):
            try:
                self._on(k, env.close)
            except Exception:  # one broken env must not keep the others open
                logger.exception("closing env %d failed", k)
        for thread in self._threads:
            thread.shutdown(wait=True)
        for family in families():
            if family.actor_close:
                resolve(family.actor_close)()


def _recorder(env: gym.Env[Any, Any]) -> RecordingWrapper | None:
    """The RecordingWrapper in ``env``'s wrapper chain, if any."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecordingWrapper):
            return env
        env = env.env
    return None
