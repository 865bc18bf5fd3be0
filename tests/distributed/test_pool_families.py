"""The Ray pool with the heavy families on the two-node cluster: a WebShop episode (a
real Chromium in the actor) and a RepoFix episode (real bubblewrap) equal the
in-process run, and neither a clean close nor a killed actor leaves a browser, a
sandbox process or a workspace behind."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.info import Outcome
from agentgym_envs.core.scratch import default_roots
from agentgym_envs.distributed import ActorResources, CrashCode, RayEnvPool
from agentgym_envs.distributed.cluster import LocalCluster
from agentgym_envs.distributed.procs import alive
from tests.distributed.kills import kill
from tests.sandbox.support import needs_bwrap
from tests.web.support import needs_browser

HALF = ActorResources(num_cpus=0.5)


def gone(pids: list[int], within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def scratch_of(pid: int) -> list[Path]:
    """The agentgym scratch folders (workspaces, verification dirs) owned by ``pid``."""
    return [
        p
        for root in default_roots()
        for p in root.glob(f"agentgym-*-{pid}-*")
        if p.is_dir() and p.name.split("-")[2] == str(pid)
    ]


def in_process(env_id: str, seed: int, options: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The oracle's episode in this process: (action, obs, reward, terminated, truncated)."""
    env = gym.make(env_id)
    env.reset(seed=seed, options=options)
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    steps = []
    done = False
    while not done:
        action = oracle.act()
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append((action, obs, reward, terminated, truncated))
        done = terminated or truncated
    env.close()
    return steps


def check_episode(pool: RayEnvPool, slot: int, want: list[tuple[Any, ...]], seed: int,
                  options: dict[str, Any]) -> None:  # fmt: skip
    assert not pool.reset(slot, seed=seed, options=options).crashed
    for action, obs, reward, terminated, truncated in want:
        got = pool.step(slot, action)
        assert (got.obs, got.reward, got.terminated, got.truncated) == (
            obs,
            reward,
            terminated,
            truncated,
        )
    assert got.info["outcome"] == Outcome.SUCCESS


def kill_and_check(pool: RayEnvPool, slot: int, children: list[int]) -> None:
    """Kill the slot's actor: its step is an env_error, its processes go with it."""

    actor_pid = pool.where(slot)["pid"]
    kill(pool.handle(slot))
    r = pool.step(slot, "noop")
    assert r.code is CrashCode.ACTOR_DIED and r.info["episode_valid"] is False
    assert gone([actor_pid, *children]), "a killed actor left processes behind"


@pytest.mark.slow
@pytest.mark.browser
@needs_browser
def test_webshop_on_ray_equals_in_process_and_leaves_no_browser(
    ray_cluster: LocalCluster,
) -> None:
    options = {"split": "test"}
    want = in_process("agentgym/WebShop-v2", 3, options)
    pool = RayEnvPool("WebShop", 2, envs_per_actor=2, resources=HALF, step_timeout_s=120)
    try:
        check_episode(pool, 0, want, 3, options)
        browsers = pool.child_pids(0)
        assert browsers, "the actor runs no browser"
        actor = pool.where(0)["pid"]
        kill_and_check(pool, 0, browsers)
        # the restarted actor plays on; a clean close then leaves nothing either
        check_episode(pool, 1, want, 3, options)
        browsers, actor = pool.child_pids(1), pool.where(1)["pid"]
        assert browsers
    finally:
        pool.close()
    assert gone([actor, *browsers]), "close left the actor or its browser running"


@pytest.mark.slow
@pytest.mark.sandbox
@needs_bwrap
def test_repofix_on_ray_equals_in_process_and_leaves_no_sandbox(
    ray_cluster: LocalCluster,
) -> None:
    options = {"split": "test"}
    want = in_process("agentgym/RepoFix-v1", 1, options)
    pool = RayEnvPool("RepoFix", 2, resources=HALF, step_timeout_s=120)
    try:
        check_episode(pool, 0, want, 1, options)
        # a killed actor's workspace is reaped when its successor starts on the node
        assert not pool.reset(1, seed=1, options=options).crashed
        doomed = pool.where(1)["pid"]
        assert scratch_of(doomed), "the live episode has no workspace"
        kill_and_check(pool, 1, pool.child_pids(1))
        assert not pool.reset(1, seed=1, options=options).crashed
        assert not scratch_of(doomed)
        actors = [pool.where(i)["pid"] for i in range(2)]
    finally:
        pool.close()
    assert gone(actors)
    assert not [p for pid in actors for p in scratch_of(pid)], "close left workspaces"
