"""The asynchronous rollout worker on a Ray actor (``--rollout async --rollout-worker ray``).

:class:`RayRolloutWorker` is the learner's handle; it implements
:class:`~agentgym_trainers.async_rollout.RolloutWorker` (start, submit, push, take,
stats, close) by calling a :class:`RolloutActor` on the cluster. The actor holds what
the in-process worker holds, built from the run's config: its own copy of the policy
(``--model`` loaded on CPU, then the learner's current weights), a sampler with the
learner's settings and random stream, and a rollout runner with ``--n-envs`` env slots
(in the actor's process, or ``--env-backend ray``: on a Ray env pool of its own). It
plays with a :class:`~agentgym_trainers.async_rollout.ThreadRolloutWorker` inside the
actor, so the schedule is the in-process one: finished groups in submission order,
weights loaded before a generation call (never mid-turn), every turn recording the
version that sampled it.

1. ``push(weights)``: the learner's state dict goes to the object store once
   (``ray.put``) and the call returns when the actor holds it; the actor's rollout
   thread keeps playing meanwhile and loads it before its next generation call;
2. ``submit`` and ``push`` return once the actor has them, so jobs handed out after a
   push are sampled with the pushed weights or newer (the bounded-lag schedule);
3. only plain data crosses the boundary: :class:`RolloutJob` in, ``PolicyWeights`` in,
   :class:`~agentgym_trainers.async_rollout.FinishedGroup` (trajectories with
   per-turn versions and sampler log-probabilities) out.

Faults, as with the thread worker: an env crash or a failing generation call ends its
episode as ``env_error`` inside the actor; a crash of the worker itself (the actor's
rollout thread, or the actor process: killed, out of memory, its node lost) is raised
in the learner as :class:`~agentgym_trainers.async_rollout.RolloutWorkerError` at its
next call. The episodes the dead actor was playing are lost with it; the run stops
(continue from a checkpoint with ``--resume``). :meth:`RayRolloutWorker.close` closes
the actor's envs (and its env pool) and ends the actor; it is idempotent.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from agentgym_envs.core.errors import ClosedError, ConfigError
from agentgym_envs.distributed.resources import ActorResources, unmet
from agentgym_envs.distributed.session import INSTALL_HINT, connect, require_ray
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Generator
from agentgym_envs.llm.models import load_model
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner, RolloutStats
from agentgym_trainers.async_rollout import (
    FinishedGroup,
    LocalPolicy,
    PolicyWeights,
    RolloutTimeoutError,
    RolloutWorkerError,
    ThreadRolloutWorker,
)
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.env_slots import make_trainer_env, pool_slots, trainer_env_kwargs
from agentgym_trainers.rollout_setup import rollout_engine, rollout_runner, rollout_sampler

log = logging.getLogger(__name__)

EnvMaker = Callable[[], gym.Env[Any, Any]]


# -- in the actor ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ActorSpec:
    """What a rollout actor is built from (plain data, pickled into the actor; the
    learner's is ``Trainer.actor_spec``).

    Attributes:
        config: the run's config (model spec, sampling, rollout and env settings).
        sampler_state: the learner's sampling random stream (``Sampler.get_state``) to
            continue, or None to seed a new one as the learner does.
        make_env: builds one env (picklable); None: ``gym.make(config.data.env, ...)``.
        rank: the learner process's rank (the sampler's seed, as the learner's).
        threads: torch intra-op threads of the actor.
    """

    config: TrainConfig
    sampler_state: torch.Tensor | None = None
    make_env: EnvMaker | None = None
    rank: int = 0
    threads: int = 1


@dataclass(frozen=True)
class _Raised:
    """An error of the actor's worker, sent back as data and raised in the learner."""

    kind: str
    message: str


_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (RolloutWorkerError, RolloutTimeoutError, ClosedError)
}


def actor_runner(
    cfg: TrainConfig, chat: ChatFormat, make_env: EnvMaker, generator: Generator
) -> RolloutRunner:
    """A rollout runner with the learner's settings: ``n_envs`` env slots in the actor,
    or on a Ray env pool of its own (the actor is connected: the pool joins its cluster)."""
    r = cfg.rollout
    slots = None
    if r.env_backend == "ray":
        slots = pool_slots(
            cfg.data.env, r.n_envs, make_env=make_env, envs_per_actor=r.envs_per_actor
        )
    return rollout_runner(cfg, chat, make_env, generator, slots)


class RolloutActor:
    """The body of the rollout actor: a :class:`ThreadRolloutWorker` over a CPU copy of
    the policy. A plain class; :class:`RayRolloutWorker` makes it a Ray actor class, so
    importing this module imports no ray.

    Args:
        spec: what to build.
        weights: the learner's weights when the worker starts.
    """

    def __init__(self, spec: ActorSpec, weights: PolicyWeights) -> None:
        cfg = spec.config
        torch.set_num_threads(spec.threads)
        lm, tokenizer = load_model(
            cfg.policy.model, device="cpu", dtype=torch.float32, seed=cfg.data.seed
        )
        with torch.no_grad():
            lm.load_state_dict(weights.state)
        lm.eval().requires_grad_(False)
        chat = ChatFormat(tokenizer)
        # the learner's settings; the copy's engine captures no CUDA graphs
        sampler = rollout_sampler(cfg, lm, chat, spec.rank, rollout_engine(cfg, lm, False))
        if spec.sampler_state is not None:
            sampler.set_state(spec.sampler_state)
        sampler.weights_version = weights.version
        make_env = spec.make_env or functools.partial(
            make_trainer_env, cfg.data.env, trainer_env_kwargs(cfg.data)
        )
        self.worker = ThreadRolloutWorker(
            functools.partial(actor_runner, cfg, chat, make_env),
            LocalPolicy(sampler),
            threads=spec.threads,
        )

    def ping(self) -> dict[str, Any]:
        """Where the actor runs: its pid and node IP."""
        ray = require_ray()
        return {"pid": os.getpid(), "node_ip": ray.util.get_node_ip_address()}

    def start(self) -> None:
        self.worker.start()

    def submit(self, jobs: list[RolloutJob]) -> None:
        self.worker.submit(jobs)

    def push(self, weights: PolicyWeights) -> None:
        self.worker.push(weights)

    def take(self, n: int, timeout_s: float) -> list[FinishedGroup] | _Raised:
        try:
            return self.worker.take(n, timeout_s)
        except (RolloutWorkerError, RolloutTimeoutError, ClosedError) as exc:
            return _Raised(type(exc).__name__, str(exc))

    def stats(self) -> tuple[RolloutStats, float]:
        return self.worker.stats()

    def close(self) -> None:
        self.worker.close()


# -- the learner's handle --------------------------------------------------------------------


class RayRolloutWorker:
    """A :class:`~agentgym_trainers.async_rollout.RolloutWorker` on a Ray actor (see the
    module docstring). The actor is created and awaited here; :meth:`start` starts its
    play.

    Args:
        spec: what the actor builds (config, sampler state, env factory).
        weights: the learner's weights when the worker starts (``.cpu()``-ed here).
        resources: what the actor asks Ray for (default: 1 CPU; its torch threads are
            the whole CPUs asked for).
        address: the cluster to join if this process is not connected yet (default:
            ``$RAY_ADDRESS``, else a new local Ray, which :meth:`close` shuts down).
        start_timeout_s: how long the actor may take to be placed and build its model.
        call_timeout_s: how long a call other than :meth:`take` may take (``push``
            includes the weights' transfer).

    Raises:
        ConfigError: ray is missing, no node can host the actor, or the actor failed to
            build (a model spec that does not load on its node, a bad env).
    """

    def __init__(
        self,
        spec: ActorSpec,
        weights: PolicyWeights,
        *,
        resources: ActorResources | None = None,
        address: str | None = None,
        start_timeout_s: float = 300.0,
        call_timeout_s: float = 300.0,
    ) -> None:
        try:
            self._ray = require_ray()
        except ConfigError:
            raise ConfigError(
                f"--rollout-worker ray needs ray, which is not installed; install it with "
                f"{INSTALL_HINT}, or use --rollout-worker thread"
            ) from None
        self.resources = resources or ActorResources(num_cpus=1.0)
        self.call_timeout_s = call_timeout_s
        self.where: dict[str, Any] = {}
        """The actor's pid and node IP."""
        self._closed = False
        self._actor: Any = None
        self._pushed = weights.version
        self._owns_ray = connect(address)
        try:
            problem = unmet(self.resources.demand(), self._ray.nodes())
            if problem:
                raise ConfigError(
                    f"the Ray rollout worker cannot be placed: {problem}; pass smaller "
                    "resources=ActorResources(...) or add a node that offers them"
                )
            threads = max(1, int(self.resources.num_cpus))
            spec = ActorSpec(spec.config, spec.sampler_state, spec.make_env, spec.rank, threads)
            cls = self._ray.remote(RolloutActor)
            # threaded: take() waits in one thread while push/submit/stats use others
            self._actor = cls.options(
                **self.resources.ray_options(),
                max_restarts=0,
                max_task_retries=0,
                max_concurrency=4,
            ).remote(spec, self._ray.put(_on_cpu(weights)))
            self.where = self._await_start(start_timeout_s, spec.config)
        except BaseException:
            self.close()
            raise

    @property
    def actor(self) -> Any:
        """The Ray actor handle (None once closed)."""
        return self._actor

    def start(self) -> None:
        self._call("start")

    def submit(self, jobs: Sequence[RolloutJob]) -> None:
        self._call("submit", list(jobs))

    def push(self, weights: PolicyWeights) -> None:
        """Send ``weights`` (once, through the object store) unless a newer version was
        pushed; returns when the actor holds them."""
        if weights.version <= self._pushed:
            return
        ref = self._ray.put(_on_cpu(weights))
        self._call("push", ref)  # the actor's argument is the stored object, not a copy
        self._pushed = weights.version

    def take(self, n: int, timeout_s: float) -> list[FinishedGroup]:
        """Raises:
        RolloutWorkerError: the worker crashed or its actor died, or fewer than ``n``
            groups were submitted.
        RolloutTimeoutError: no ``n`` finished groups within ``timeout_s``.
        ClosedError: the worker was closed."""
        # the actor waits timeout_s itself; the margin covers the round trip
        out = self._call("take", n, timeout_s, timeout_s=timeout_s + 60.0)
        if isinstance(out, _Raised):
            raise _ERRORS.get(out.kind, RolloutWorkerError)(out.message)
        groups: list[FinishedGroup] = out
        return groups

    def stats(self) -> tuple[RolloutStats, float]:
        stats: tuple[RolloutStats, float] = self._call("stats")
        return stats

    def close(self, timeout_s: float = 30.0) -> None:
        """Close the actor's envs (and env pool), end the actor, and leave Ray if this
        worker joined it. Idempotent; a dead actor is only forgotten."""
        if self._closed:
            return
        self._closed = True
        ray, actor, self._actor = self._ray, self._actor, None
        try:
            if actor is not None and ray.is_initialized():
                try:
                    ray.get(actor.close.remote(), timeout=timeout_s)
                except ray.exceptions.RayError as exc:  # dead or stuck: the kill follows
                    log.warning("the Ray rollout worker did not close cleanly: %s", exc)
                ray.kill(actor, no_restart=True)
        finally:
            if self._owns_ray:
                ray.shutdown()

    # -- internals ---------------------------------------------------------------------------

    def _await_start(self, timeout_s: float, cfg: TrainConfig) -> dict[str, Any]:
        ray = self._ray
        try:
            where: dict[str, Any] = ray.get(self._actor.ping.remote(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"the Ray rollout worker did not start in {timeout_s:g} s: the cluster is "
                f"busy or short of {self.resources.demand()}; free the cluster or raise "
                "start_timeout_s"
            ) from None
        except ray.exceptions.RayError as exc:
            raise ConfigError(
                f"the Ray rollout worker failed to start: {_gist(exc)}; check that "
                f"--model {cfg.policy.model!r} loads on the actor's node (the same path or "
                "cache there) and that the env builds with the same id and kwargs"
            ) from None
        return where

    def _call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        if self._closed:
            raise ClosedError("this rollout worker was closed; make a new one")
        ray = self._ray
        timeout = self.call_timeout_s if timeout_s is None else timeout_s
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise RolloutTimeoutError(
                f"the Ray rollout worker did not answer {method}() within {timeout:g} s "
                "(its node may be overloaded or unreachable)"
            ) from None
        except ray.exceptions.RayActorError as exc:
            raise RolloutWorkerError(
                f"the Ray rollout worker's actor died ({_gist(exc)}); the episodes it "
                "was playing are lost. If it ran out of memory, give it a node with more "
                "(it holds a copy of the model and one pushed state dict); continue the run "
                "from its last checkpoint with --resume"
            ) from exc
        except ray.exceptions.RayTaskError as exc:
            raise RolloutWorkerError(
                f"the Ray rollout worker failed in {method}(): {_gist(exc)}"
            ) from exc


def _on_cpu(weights: PolicyWeights) -> PolicyWeights:
    """The weights with every tensor in host memory (a CUDA tensor does not travel to a
    CPU actor)."""
    if all(t.device.type == "cpu" for t in weights.state.values()):
        return weights
    return PolicyWeights(weights.version, {k: t.cpu() for k, t in weights.state.items()})


def _gist(exc: BaseException) -> str:
    """The exception's type and the last line of its message (Ray's errors end with
    the cause: the remote exception, or why the actor died)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}".strip()


__all__ = [
    "ActorSpec",
    "RayRolloutWorker",
    "RolloutActor",
    "actor_runner",
]
