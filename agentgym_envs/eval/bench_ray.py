"""The Ray env pool's throughput and overhead (``agentgym bench --ray``; measured, never
asserted in tests).

For the envs the family records name (``Family.bench_ray``: RepoFix and WebShop): env
steps/s of the same oracle episodes played by a pool of 1, 2 and 4 actors (one env each,
all slots stepping at once), against one env in this process playing them one after the
other (the in-process run). The episodes' actions are recorded once in this process and
replayed, so policy time is excluded on both sides; resets are included (a rollout pays
them). For a text game (the first of :func:`~agentgym_envs.eval.bench.machinery_envs`):
the time a blocking ``pool.step`` adds over a direct ``env.step`` with the same actions.

The cluster is a one-node :class:`~agentgym_envs.distributed.cluster.LocalCluster`
on this machine, started and ended by the benchmark.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.distributed.cluster import LocalCluster, NodeSpec
from agentgym_envs.distributed.pool import RayEnvPool
from agentgym_envs.distributed.resources import ActorResources, default_resources
from agentgym_envs.distributed.results import Call
from agentgym_envs.eval.bench import machinery_envs
from agentgym_envs.integrations.extras import require
from agentgym_envs.registration import families, find

Episode = tuple[int, dict[str, Any], list[str]]  # seed, reset options, actions


def default_envs() -> tuple[str, ...]:
    """The env names ``agentgym bench --ray`` scales when none are named: every family
    record's ``bench_ray``, in the registry's order."""
    return tuple(name for f in families() for name in f.bench_ray)


@dataclass
class ScaleRow:
    env_id: str
    actors: int  # 0: the in-process run
    episodes: int
    steps: int
    wall_s: float
    steps_per_s: float
    ratio: float  # steps/s over the in-process run's
    success: float
    cpus_per_actor: float


@dataclass
class OverheadResult:
    env_id: str
    steps: int
    direct_us_median: float  # env.step in this process
    pool_us_median: float  # pool.step (one actor): request, env.step, reply
    overhead_us_median: float
    overhead_us_mean: float
    ping_us_median: float  # an empty actor call, for scale


@dataclass
class RayBench:
    machine: str
    cpus: int
    rows: list[ScaleRow] = field(default_factory=list)
    overhead: OverheadResult | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def record(env_id: str, episodes: int, split: str = "test") -> list[Episode]:
    """The oracle's actions for ``episodes`` tasks of ``split``, played in this process."""
    env = gym.make(env_id)
    inner: Any = env.unwrapped
    tasks = list(inner.task_set.pool(split))
    step = max(1, len(tasks) // episodes)
    out = []
    for task in tasks[::step][:episodes]:
        options = {"task_id": task.id, "split": task.split}
        env.reset(seed=0, options=options)
        oracle, actions, done = inner.oracle(), [], False
        while not done:
            actions.append(oracle.act())
            done = any(env.step(actions[-1])[2:4])
        out.append((0, options, actions))
    env.close()
    return out


def in_process(env_id: str, episodes: Sequence[Episode]) -> ScaleRow:
    """Replay the episodes on one env in this process, one after the other."""
    env = gym.make(env_id)
    env.reset(seed=episodes[0][0], options=episodes[0][1])  # warm (browser start)
    steps = wins = 0
    start = time.perf_counter()
    for seed, options, actions in episodes:
        env.reset(seed=seed, options=options)
        for action in actions:
            info = env.step(action)[4]
            steps += 1
        wins += info["outcome"] == "success"
    wall = time.perf_counter() - start
    env.close()
    return ScaleRow(
        env_id, 0, len(episodes), steps, wall, steps / wall, 1.0, wins / len(episodes), 0
    )


def on_pool(env_id: str, episodes: Sequence[Episode], actors: int, cpus: float) -> ScaleRow:
    """Replay the episodes on ``actors`` actors, every slot busy until the queue is empty."""
    resources = ActorResources(num_cpus=cpus, memory_mib=default_resources(env_id, 1).memory_mib)
    with RayEnvPool(env_id, actors, resources=resources, step_timeout_s=300) as pool:
        pool.reset_many([(i, *episodes[0][:2]) for i in range(actors)])  # warm every actor
        queue = list(episodes)
        playing: dict[int, tuple[list[str], int]] = {}  # slot -> (actions, next index)
        steps = wins = 0
        start = time.perf_counter()
        for i in range(min(actors, len(queue))):
            seed, options, actions = queue.pop(0)
            playing[i] = (actions, 0)
            pool.submit_reset(i, seed, options)
        while playing:
            for r in pool.wait():
                actions, k = playing[r.slot]
                if r.call is Call.STEP:
                    steps += 1
                if k < len(actions) and not r.crashed:
                    playing[r.slot] = (actions, k + 1)
                    pool.submit_step(r.slot, actions[k])
                    continue
                wins += r.info.get("outcome") == "success"
                del playing[r.slot]
                if queue:
                    seed, options, actions = queue.pop(0)
                    playing[r.slot] = (actions, 0)
                    pool.submit_reset(r.slot, seed, options)
        wall = time.perf_counter() - start
    return ScaleRow(
        env_id, actors, len(episodes), steps, wall, steps / wall, 0.0, wins / len(episodes), cpus
    )


def overhead(env_id: str | None = None, episodes: int = 40) -> OverheadResult:
    """Per-step time of ``pool.step`` (one actor) against ``env.step``, same actions, on
    ``env_id`` (None: the first of :func:`~agentgym_envs.eval.bench.machinery_envs`)."""
    env_id = machinery_envs()[0].id if env_id is None else env_id
    played = record(env_id, episodes, split="train")
    env = gym.make(env_id)
    direct = []
    for seed, options, actions in played:
        env.reset(seed=seed, options=options)
        for action in actions:
            t0 = time.perf_counter()
            env.step(action)
            direct.append(time.perf_counter() - t0)
    env.close()
    remote = []
    with RayEnvPool(env_id, 1, resources=ActorResources(num_cpus=0.5)) as pool:
        pings = []
        for _ in range(200):
            t0 = time.perf_counter()
            pool.where(0)
            pings.append(time.perf_counter() - t0)
        for seed, options, actions in played:
            pool.reset(0, seed, options)
            for action in actions:
                t0 = time.perf_counter()
                pool.step(0, action)
                remote.append(time.perf_counter() - t0)
    us = 1e6
    return OverheadResult(
        env_id=env_id,
        steps=len(direct),
        direct_us_median=statistics.median(direct) * us,
        pool_us_median=statistics.median(remote) * us,
        overhead_us_median=(statistics.median(remote) - statistics.median(direct)) * us,
        overhead_us_mean=(statistics.fmean(remote) - statistics.fmean(direct)) * us,
        ping_us_median=statistics.median(pings) * us,
    )


def bench_ray(
    envs: Sequence[str] | None = None,
    actors: Sequence[int] = (1, 2, 4),
    episodes: int = 8,
) -> RayBench:
    """Start a one-node cluster with this machine's CPUs, run every figure on ``envs``
    (names or ids; None: :func:`default_envs`), end it."""
    # before any `ray start`: the cluster's processes would outlive a driver that
    # cannot import Ray (its disconnect imports it too)
    require("ray", "ray", "dist", "agentgym bench --ray")
    cpus = os.cpu_count() or 1
    result = RayBench(machine=f"{platform.machine()} {platform.processor()}".strip(), cpus=cpus)
    cluster = LocalCluster([NodeSpec(num_cpus=cpus, object_store_mib=200)])
    try:
        cluster.start()
        cluster.connect()
        result.overhead = overhead()
        for name in default_envs() if envs is None else envs:
            env_id = find(name).id
            played = record(env_id, episodes)
            base = in_process(env_id, played)
            result.rows.append(base)
            for n in actors:
                # every actor must fit at once: share the CPUs out when they are few
                cpus_each = min(default_resources(env_id, 1).num_cpus, cpus / n)
                row = on_pool(env_id, played, n, round(cpus_each, 3))
                row.ratio = row.steps_per_s / base.steps_per_s
                result.rows.append(row)
    finally:
        try:
            cluster.disconnect()
        finally:
            cluster.stop()  # whatever leaving it raised
    return result


def print_ray_bench(result: RayBench, console: Any) -> None:
    """The tables of :func:`bench_ray` (rich)."""
    from rich.table import Table

    table = Table(title=f"Ray env pool: env steps/s ({result.cpus} CPUs, one node)")
    for col in ("env", "actors", "episodes", "steps", "wall s", "steps/s", "x in-process",
                "success", "CPUs/actor"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in result.rows:
        table.add_row(
            r.env_id,
            str(r.actors) if r.actors else "in-process",
            str(r.episodes),
            str(r.steps),
            f"{r.wall_s:.2f}",
            f"{r.steps_per_s:.2f}",
            f"{r.ratio:.2f}",
            f"{r.success:.2f}",
            f"{r.cpus_per_actor:g}" if r.actors else "-",
        )
    console.print(table)
    o = result.overhead
    if o is not None:
        console.print(
            f"{o.env_id}: pool.step {o.pool_us_median:.0f} us vs env.step "
            f"{o.direct_us_median:.0f} us (medians over {o.steps} steps): overhead "
            f"{o.overhead_us_median / 1000:.3f} ms/step median, "
            f"{o.overhead_us_mean / 1000:.3f} ms mean; an empty actor call takes "
            f"{o.ping_us_median:.0f} us"
        )
