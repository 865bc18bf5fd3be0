"""A pool of env slots hosted by Ray actors across the nodes of a Ray cluster.

Slot ``i`` is env ``i % envs_per_actor`` of actor ``i // envs_per_actor``. Every call
carries plain data (action text, seeds and options in; observation, reward, flags and
the info dict out, as :class:`SlotResult`). Calls are asynchronous underneath:
:meth:`RayEnvPool.submit_step` sends one and returns at once, :meth:`RayEnvPool.wait`
gives back whatever finished; :meth:`RayEnvPool.step_many` and the single-slot
:meth:`RayEnvPool.step` are built on them.

Faults end episodes, never the run. An actor that dies (killed, OOM, a segfault) or a
call that runs past ``step_timeout_s`` (the actor is then killed) turns every episode
the actor hosted into an ``env_error``: the calls in flight come back as crashed
results (``outcome == ENV_ERROR``, ``episode_valid`` False, ``truncated`` True for a
step), and a slot whose episode was lost answers its next step the same way. The actor
is restarted at once; the next ``reset`` of each slot plays on the new one. An exception
raised by the env itself ends only that slot's episode (a ConfigError comes back as a
``config_error`` result, which the trainer's slots raise: a mistake, not a crash). Once
a result said a slot's episode crashed, the slot refuses further steps
(``episode_ended``) until it is reset: the env inside may still be live, but the
episode was reported over.

Backpressure: at most ``max_in_flight`` calls are outstanding; a submit beyond that
waits for one to finish (its result is kept for the next :meth:`RayEnvPool.wait`).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_envs.core.errors import ArgumentError, ConfigError
from agentgym_envs.distributed.host import EnvFactory, EnvHost, make_registered
from agentgym_envs.distributed.resources import (
    ActorResources,
    check_env_id,
    default_resources,
    unmet,
)
from agentgym_envs.distributed.results import (
    ActorLost,
    Call,
    CrashCode,
    SlotResult,
    crashed_result,
)
from agentgym_envs.distributed.session import connect, require_ray

logger = logging.getLogger(__name__)


@dataclass
class _Actor:
    count: int  # envs hosted
    handle: Any = None
    generation: int = 0  # bumped at every restart
    restarts: int = 0


@dataclass
class _Slot:
    actor: int
    local: int
    generation: int = 0  # the actor generation the slot's episode lives on
    ended: str = ""  # why a crashed result ended the slot's episode ("" while it lives)


@dataclass
class _Flight:
    ref: Any
    call: Call
    actor: int
    generation: int
    deadline: float


@dataclass
class _Control:
    """A control call (snapshot, oracle, ...) sent and not yet awaited."""

    ref: Any
    slot: int
    method: str
    actor: int
    generation: int
    deadline: float


class RayEnvPool:
    """``n`` env slots on Ray actors, ``envs_per_actor`` to an actor.

    Args:
        env_id: a registered env id (or name); used to build the envs unless
            ``factory`` is given, and to pick the family's default resources.
        n: env slots.
        env_kwargs: keyword arguments of ``gym.make``.
        envs_per_actor: envs hosted by one actor (each on its own thread there).
        resources: what one actor asks for (default: the family's, see
            :mod:`~agentgym_envs.distributed.resources`).
        factory: builds one env in the actor instead of ``gym.make(env_id, ...)``
            (picklable: a module-level function or a ``functools.partial`` of one).
        step_timeout_s: a call slower than this kills its actor (``env_error``).
        max_in_flight: outstanding calls at most (default: ``n``, one per slot).
        address: the cluster to join when this process is not connected yet
            (``host:port``; default: start a local Ray).
        start_timeout_s: how long the actors may take to be placed and built.

    Raises:
        ConfigError: a bad count or timeout, ray missing, resources no node offers, or
            envs that fail to build in the actors (each message names the fix).
        EnvNotFoundError: ``env_id`` is not registered.
    """

    def __init__(
        self,
        env_id: str | None = None,
        n: int = 1,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        envs_per_actor: int = 1,
        resources: ActorResources | None = None,
        factory: EnvFactory | None = None,
        step_timeout_s: float = 300.0,
        max_in_flight: int | None = None,
        address: str | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        _check_counts(n, envs_per_actor, step_timeout_s, max_in_flight)
        if factory is None:
            if not env_id:
                raise ConfigError(
                    "a pool needs an env: pass env_id='agentgym/Sokoban-v0' (or a factory=)"
                )
            factory = functools.partial(
                make_registered, check_env_id(env_id), dict(env_kwargs or {})
            )
        elif env_kwargs:
            raise ConfigError("env_kwargs go with env_id; a factory= builds its envs itself")
        if resources is None:
            if env_id:
                resources = default_resources(env_id, envs_per_actor)
            else:
                resources = ActorResources(num_cpus=0.5 * envs_per_actor)
        self.env_id = env_id or ""
        self.resources = resources
        self.envs_per_actor = envs_per_actor
        self.step_timeout_s = step_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_in_flight = max_in_flight or n
        self._factory = factory
        self._ray = require_ray()
        self._owns_ray = connect(address)
        self._closed = False
        self._busy: dict[int, _Flight] = {}
        self._by_ref: dict[Any, int] = {}
        self._ready: list[SlotResult] = []
        self._actors: list[_Actor] = []
        try:
            problem = unmet(resources.demand(), self._ray.nodes())
            if problem:
                raise ConfigError(
                    f"{problem}; pass smaller resources=ActorResources(...), fewer "
                    "envs_per_actor, or start nodes that offer them "
                    "(ray start --num-cpus=... --resources='{...}')"
                )
            self._cls = self._ray.remote(EnvHost)
            actors = math.ceil(n / envs_per_actor)
            per = [min(envs_per_actor, n - a * envs_per_actor) for a in range(actors)]
            self._actors = [_Actor(count) for count in per]
            self._slots = [_Slot(i // envs_per_actor, i % envs_per_actor) for i in range(n)]
            for a in range(len(self._actors)):
                self._start(a)
            self._await_start(start_timeout_s)
        except BaseException:
            self.close()
            raise

    # -- sizes and places ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def num_actors(self) -> int:
        return len(self._actors)

    @property
    def in_flight(self) -> int:
        """Calls sent and not yet finished."""
        return len(self._busy)

    @property
    def restarts(self) -> int:
        """Actor restarts so far (after deaths and hangs)."""
        return sum(a.restarts for a in self._actors)

    def actor_index(self, i: int) -> int:
        """The actor that hosts slot ``i``."""
        return self._slot(i).actor

    def handle(self, i: int) -> Any:
        """The Ray actor handle hosting slot ``i`` (for ``ray.kill`` in fault tests)."""
        return self._actors[self._slot(i).actor].handle

    def where(self, i: int) -> dict[str, Any]:
        """Node id, node IP, pid and assigned resources of slot ``i``'s actor."""
        result: dict[str, Any] = self._control(i, "where", env=False)
        return result

    def child_pids(self, i: int) -> list[int]:
        """Processes below slot ``i``'s actor (browsers, sandboxes)."""
        result: list[int] = self._control(i, "child_pids", env=False)
        return result

    def spaces(self) -> tuple[Any, Any]:
        """The observation and action spaces of the envs."""
        result: tuple[Any, Any] = self._control(0, "spaces", env=False)
        return result

    # -- asynchronous calls ------------------------------------------------------------

    def submit_reset(
        self, i: int, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        """Send ``reset`` to slot ``i``; its result comes back through :meth:`wait`."""
        self._submit(i, Call.RESET, seed, dict(options) if options is not None else None)

    def submit_step(self, i: int, action: str, note: Mapping[str, Any] | None = None) -> None:
        """Send ``step(action)`` to slot ``i``; its result comes back through :meth:`wait`.

        ``note`` goes to the env's recording wrapper, if it has one (the evaluator's).
        A slot whose episode is lost or ended answers with a crashed result instead.
        """
        self._submit(i, Call.STEP, str(action), dict(note) if note else None)

    def wait(self, timeout: float | None = None) -> list[SlotResult]:
        """Results of finished calls: at least one unless ``timeout`` (seconds) passes or
        nothing is outstanding. Calls past their deadline come back crashed."""
        if self._ready:
            out, self._ready = self._ready, []
            return out
        if not self._busy:
            return []
        return self._collect(timeout)

    # -- blocking calls ------------------------------------------------------------------

    def reset(
        self, i: int, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> SlotResult:
        """Reset slot ``i`` and wait for it."""
        self.submit_reset(i, seed, options)
        return self._gather([i])[i]

    def step(self, i: int, action: str, note: Mapping[str, Any] | None = None) -> SlotResult:
        """Step slot ``i`` and wait for it."""
        self.submit_step(i, action, note)
        return self._gather([i])[i]

    def step_many(
        self,
        actions: Sequence[tuple[int, str]],
        notes: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[SlotResult]:
        """Step several slots at once (across actors in parallel); results in order."""
        for k, (i, action) in enumerate(actions):
            self.submit_step(i, action, notes[k] if notes else None)
        got = self._gather([i for i, _ in actions])
        return [got[i] for i, _ in actions]

    def reset_many(
        self, resets: Sequence[tuple[int, int | None, Mapping[str, Any] | None]]
    ) -> list[SlotResult]:
        """Reset several slots at once, ``(slot, seed, options)`` each; results in order."""
        for i, seed, options in resets:
            self.submit_reset(i, seed, options)
        got = self._gather([i for i, _, _ in resets])
        return [got[i] for i, _, _ in resets]

    # -- snapshots and scripted policies -------------------------------------------------

    def get_state(self, i: int) -> Any:
        """The snapshot of slot ``i``'s episode (an ``EnvState``: plain data).

        Raises:
            ActorLost: the slot's actor was restarted since its reset.
        """
        return self._control(i, "get_state", episode=True)

    def get_state_many(self, slots: Sequence[int]) -> list[Any]:
        """The snapshots of several slots' episodes, taken on their actors in parallel;
        in order, each the snapshot or the exception :meth:`get_state` would have raised
        for that slot (returned, so a lost actor costs only its own slots' snapshots)."""
        started: list[Any] = []
        for i in slots:
            try:
                started.append(self._start_control(i, "get_state", episode=True))
            except Exception as exc:
                started.append(exc)
        out: list[Any] = []
        for call in started:
            try:
                out.append(call if isinstance(call, Exception) else self._await_control(call))
            except Exception as exc:
                out.append(exc)
        return out

    def set_state(self, i: int, state: Any) -> None:
        """Restore a snapshot (from any slot, any actor, any node) into slot ``i``."""
        self._control(i, "set_state", state)
        slot = self._slot(i)
        slot.generation, slot.ended = self._actors[slot.actor].generation, ""

    def oracle_act(self, i: int) -> str:
        """The next action of slot ``i``'s scripted solver (lives in the actor)."""
        result: str = self._control(i, "oracle_act", episode=True)
        return result

    def noop_action(self, i: int) -> str:
        """Slot ``i``'s do-nothing action."""
        result: str = self._control(i, "noop_action")
        return result

    # -- shutdown --------------------------------------------------------------------------

    def close(self, timeout_s: float = 60.0) -> None:
        """Close every env (browsers, sandboxes), end every actor process, and leave
        Ray if the pool joined it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        handles = [a.handle for a in self._actors if a.handle is not None]
        try:
            if not ray.is_initialized():  # Ray already shut down: its actors went with it
                return
            closing = [h.close.remote() for h in handles]
            ray.wait(closing, num_returns=len(closing), timeout=timeout_s)
            # a graceful exit runs the actor's atexit handlers; a kill follows for stragglers
            ending = [h.__ray_terminate__.remote() for h in handles]
            ray.wait(ending, num_returns=len(ending), timeout=10.0)
            for h in handles:
                ray.kill(h, no_restart=True)
        finally:
            for a in self._actors:
                a.handle = None
            if self._owns_ray:
                ray.shutdown()

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _slot(self, i: int) -> _Slot:
        if self._closed:
            raise ConfigError("the pool is closed; make a new RayEnvPool")
        if not 0 <= i < len(self._slots):
            raise ArgumentError(f"slot must be in [0, {len(self._slots)}), got {i}")
        return self._slots[i]

    def _check_free(self, i: int) -> None:
        if i in self._busy or any(r.slot == i for r in self._ready):
            raise ArgumentError(
                f"slot {i} already has a call in flight or an uncollected result; "
                "collect it with wait() before sending it another"
            )

    def _start(self, a: int) -> None:
        actor = self._actors[a]
        options = self.resources.ray_options()
        concurrency = actor.count + 1 if actor.count > 1 else 1
        actor.handle = self._cls.options(
            **options, max_restarts=0, max_task_retries=0, max_concurrency=concurrency
        ).remote(self._factory, actor.count)

    def _await_start(self, timeout_s: float) -> None:
        ray = self._ray
        pings = [a.handle.ping.remote() for a in self._actors]
        done, _ = ray.wait(pings, num_returns=len(pings), timeout=timeout_s)
        if len(done) < len(pings):
            raise ConfigError(
                f"{len(pings) - len(done)} of {len(pings)} env actors did not start in "
                f"{timeout_s:g} s: the cluster is busy or short of {self.resources.demand()}; "
                "raise start_timeout_s, free the cluster or ask for fewer resources"
            )
        try:
            ray.get(pings)
        except ray.exceptions.RayError as exc:
            raise ConfigError(
                f"the env actors failed to build their envs: {_describe(exc)}; check that "
                "the env builds in-process with the same id and kwargs (gym.make)"
            ) from None

    def _submit(self, i: int, call: Call, *args: Any) -> None:
        slot = self._slot(i)
        self._check_free(i)
        while len(self._busy) >= self.max_in_flight:  # backpressure
            self._ready.extend(self._collect(None))
        # checked after the wait: an actor may have been restarted (or a result ended
        # the episode) while this call waited for room
        actor = self._actors[slot.actor]
        if call is Call.RESET:
            slot.generation, slot.ended = actor.generation, ""
        elif slot.generation != actor.generation:
            message = (
                f"slot {i}'s actor was restarted after a crash; its episode is lost "
                "(reset the slot to play on)"
            )
            self._ready.append(crashed_result(i, Call.STEP, CrashCode.EPISODE_LOST, message))
            return
        elif slot.ended:
            message = (
                f"slot {i}'s episode already ended ({slot.ended}); reset the slot before "
                "stepping it again"
            )
            self._ready.append(crashed_result(i, Call.STEP, CrashCode.EPISODE_ENDED, message))
            return
        ref = getattr(actor.handle, call.value).remote(slot.local, *args)
        deadline = time.monotonic() + self.step_timeout_s
        self._busy[i] = _Flight(ref, call, slot.actor, actor.generation, deadline)
        self._by_ref[ref] = i

    def _gather(self, slots: Sequence[int]) -> dict[int, SlotResult]:
        wanted = set(slots)
        got: dict[int, SlotResult] = {}
        keep = []
        for r in self._ready:
            if r.slot in wanted and r.slot not in got:
                got[r.slot] = r
            else:
                keep.append(r)
        self._ready = keep
        while len(got) < len(wanted):
            for r in self._collect(None):
                if r.slot in wanted and r.slot not in got:
                    got[r.slot] = r
                else:
                    self._ready.append(r)
        return got

    def _collect(self, timeout: float | None) -> list[SlotResult]:
        ray = self._ray
        end = None if timeout is None else time.monotonic() + timeout
        while self._busy:
            now = time.monotonic()
            wait_s = min(f.deadline for f in self._busy.values()) - now
            if end is not None:
                wait_s = min(wait_s, end - now)
            refs = [f.ref for f in self._busy.values()]
            done, _ = ray.wait(refs, num_returns=1, timeout=max(wait_s, 0.0))
            if done:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                return [self._finish(ref) for ref in done]
            now = time.monotonic()
            expired = [i for i, f in self._busy.items() if f.deadline <= now]
            if expired:
                return self._expire(expired)
            if end is not None and now >= end:
                return []
        return []

    def _finish(self, ref: Any) -> SlotResult:
        ray = self._ray
        i = self._by_ref.pop(ref)
        flight = self._busy.pop(i)
        try:
            value = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the env raised; the actor lives
            message = f"env {flight.call.value} failed on its actor: {_describe(exc)}"
            logger.warning("slot %d: %s", i, message)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ConfigError):
                # the env refused its settings: a trainer stops the run on it (every
                # episode would fail the same way) rather than mask every episode
                return self._crashed(i, flight.call, CrashCode.CONFIG_ERROR, str(cause))
            return self._crashed(i, flight.call, CrashCode.ENV_EXCEPTION, message)
        except ray.exceptions.RayError as exc:
            self._restart(flight.actor, flight.generation, _describe(exc))
            message = f"the actor hosting slot {i} died during {flight.call.value}"
            return self._crashed(i, flight.call, CrashCode.ACTOR_DIED, message)
        if flight.call is Call.RESET:
            obs, info = value
            return SlotResult(i, Call.RESET, obs, info=info)
        obs, reward, terminated, truncated, info, episodes = value
        return SlotResult(
            i, Call.STEP, obs, reward, terminated, truncated, info, episodes=tuple(episodes)
        )

    def _crashed(self, i: int, call: Call, code: CrashCode, message: str) -> SlotResult:
        """A crashed result for slot ``i``, whose episode it ends."""
        self._slots[i].ended = f"{code.value}: {message}"
        return crashed_result(i, call, code, message)

    def _expire(self, expired: Sequence[int]) -> list[SlotResult]:
        """Kill (and restart) the actors of calls past their deadline; every call in
        flight on those actors comes back crashed."""
        out = []
        hung = {(self._busy[i].actor, self._busy[i].generation): i for i in expired}
        for (a, generation), i in hung.items():
            why = f"slot {i}'s call ran past step_timeout_s={self.step_timeout_s:g}"
            self._restart(a, generation, why)
            for j, flight in list(self._busy.items()):
                if (flight.actor, flight.generation) != (a, generation):
                    continue
                del self._busy[j]
                self._by_ref.pop(flight.ref, None)
                code = CrashCode.STEP_TIMEOUT if j == i else CrashCode.ACTOR_DIED
                message = f"{why}; its actor was killed and restarted"
                out.append(self._crashed(j, flight.call, code, message))
        return out

    def _restart(self, a: int, generation: int, why: str) -> None:
        """Replace actor ``a`` unless that already happened for this generation."""
        actor = self._actors[a]
        if actor.generation != generation:
            return
        logger.warning("env actor %d lost (%s); restarting it", a, why)
        if actor.handle is not None:
            self._ray.kill(actor.handle, no_restart=True)
        actor.generation += 1
        actor.restarts += 1
        self._start(a)
        # wait for the new actor to be placed and to build its envs, so that its start
        # never counts against the step timeout of the next call on it
        ready, _ = self._ray.wait(
            [actor.handle.ping.remote()], timeout=self.start_timeout_s, fetch_local=False
        )
        if not ready:
            logger.warning(
                "env actor %d did not start again within start_timeout_s=%g; its next calls "
                "may end as env errors",
                a,
                self.start_timeout_s,
            )
        from agentgym_envs.core.scratch import reap_stale

        reap_stale()  # a killed actor on this node ran no cleanup

    def _control(
        self, i: int, method: str, *args: Any, env: bool = True, episode: bool = False
    ) -> Any:
        """A blocking call that is not a reset or step: with slot ``i``'s env index as
        first argument when ``env``, and only while its episode lives when ``episode``."""
        return self._await_control(self._start_control(i, method, *args, env=env, episode=episode))

    def _start_control(
        self, i: int, method: str, *args: Any, env: bool = True, episode: bool = False
    ) -> _Control:
        """Send the call of :meth:`_control` without waiting for it."""
        slot = self._slot(i)
        if env:
            self._check_free(i)
        actor = self._actors[slot.actor]
        generation = actor.generation
        if episode and slot.generation != generation:
            raise ActorLost(f"slot {i}'s actor was restarted; its episode is lost (reset it)")
        fn = getattr(actor.handle, method)
        ref = fn.remote(slot.local, *args) if env else fn.remote(*args)
        deadline = time.monotonic() + self.step_timeout_s
        return _Control(ref, i, method, slot.actor, generation, deadline)

    def _await_control(self, call: _Control) -> Any:
        """The result of a call from :meth:`_start_control` (its errors as :meth:`_control`'s)."""
        ray = self._ray
        i, method = call.slot, call.method
        done, _ = ray.wait([call.ref], timeout=max(call.deadline - time.monotonic(), 0.0))
        if not done:
            why = f"{method} on slot {i} ran past step_timeout_s={self.step_timeout_s:g}"
            self._ready.extend(self._orphans(call.actor, call.generation, why))
            self._restart(call.actor, call.generation, why)
            raise ActorLost(f"{why}; its actor was killed and restarted")
        try:
            return ray.get(call.ref)
        except ray.exceptions.RayTaskError:
            raise  # the env's own exception (a RayTaskError is also an instance of it)
        except ray.exceptions.RayError as exc:
            why = f"the actor hosting slot {i} died during {method}"
            self._ready.extend(self._orphans(call.actor, call.generation, why))
            self._restart(call.actor, call.generation, _describe(exc))
            raise ActorLost(why) from None

    def _orphans(self, a: int, generation: int, why: str) -> list[SlotResult]:
        """Crashed results for the calls in flight on an actor about to be replaced."""
        out = []
        for j, flight in list(self._busy.items()):
            if (flight.actor, flight.generation) == (a, generation):
                del self._busy[j]
                self._by_ref.pop(flight.ref, None)
                out.append(self._crashed(j, flight.call, CrashCode.ACTOR_DIED, why))
        return out


def _check_counts(
    n: int, envs_per_actor: int, step_timeout_s: float, max_in_flight: int | None
) -> None:
    if n < 1 or envs_per_actor < 1:
        raise ConfigError(
            f"a pool needs n >= 1 slots and envs_per_actor >= 1, got n={n} and "
            f"envs_per_actor={envs_per_actor}; e.g. RayEnvPool(env_id, n=8, envs_per_actor=4)"
        )
    if not step_timeout_s > 0:
        raise ConfigError(f"step_timeout_s must be > 0 seconds, got {step_timeout_s}")
    if max_in_flight is not None and max_in_flight < 1:
        raise ConfigError(
            f"max_in_flight must be >= 1 (or None: one per slot), got {max_in_flight}"
        )


def _describe(exc: BaseException) -> str:
    """One line about a Ray error: the env's own exception where Ray carries it."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.split(":")[0].endswith(("Error", "Exception"))]
    return (errors or lines or [type(exc).__name__])[-1]


__all__ = [
    "ActorLost",
    "Call",
    "CrashCode",
    "RayEnvPool",
    "SlotResult",
    "connect",
    "crashed_result",
    "require_ray",
]
