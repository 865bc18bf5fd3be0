"""``agentgym bench --ray``'s measuring functions on the session's cluster, with tiny
settings: they replay the same episodes everywhere and count them right (the timings
themselves are never asserted)."""

from __future__ import annotations

from agentgym_envs.distributed.cluster import LocalCluster
from agentgym_envs.eval.bench_ray import in_process, on_pool, overhead, record

SOKOBAN = "agentgym/Sokoban-v0"


def test_the_pool_replays_the_in_process_episodes(ray_cluster: LocalCluster) -> None:
    played = record(SOKOBAN, 3)
    assert len(played) == 3 and all(actions for _, _, actions in played)
    base = in_process(SOKOBAN, played)
    pooled = on_pool(SOKOBAN, played, actors=2, cpus=0.1)
    assert base.steps == pooled.steps == sum(len(a) for _, _, a in played)
    assert base.success == pooled.success == 1.0
    assert pooled.actors == 2 and pooled.steps_per_s > 0 and pooled.wall_s > 0


def test_the_overhead_figure_compares_the_same_steps(ray_cluster: LocalCluster) -> None:
    o = overhead(SOKOBAN, episodes=2)
    assert o.steps > 0 and o.direct_us_median > 0 and o.pool_us_median > 0
    assert o.ping_us_median > 0
