"""The Ray env pool on a real two-node cluster (see conftest.py): placement, equality
with the in-process run, faults (killed, exiting and hung actors), backpressure,
snapshots across nodes, the vector env, and a clean shutdown."""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.errors import ArgumentError, ConfigError, EnvNotFoundError
from agentgym_envs.core.info import Outcome
from agentgym_envs.distributed import ActorLost, ActorResources, Call, CrashCode, RayEnvPool
from agentgym_envs.distributed.cluster import LocalCluster
from agentgym_envs.distributed.procs import alive, marked, terminate
from agentgym_envs.eval.evaluate import EvalConfig, evaluate
from agentgym_envs.eval.replay import compare_episodes
from agentgym_envs.eval.suite import suite_from_spec
from tests.distributed import sleepy
from tests.distributed.kills import kill
from tests.eval import crashy

SOKOBAN = "agentgym/Sokoban-v0"
SMALL = ActorResources(num_cpus=0.1)  # many actors fit on the 1-CPU test nodes
ON_NODE2 = ActorResources(num_cpus=0.1, custom={"node2": 0.1})


def on_head(cluster: LocalCluster) -> ActorResources:
    return ActorResources(num_cpus=0.1, custom={f"node:{cluster.head_ip}": 0.01})


@pytest.fixture
def pool(ray_cluster: LocalCluster) -> Iterator[RayEnvPool]:
    """Four Sokoban slots on two actors (two envs each)."""
    with RayEnvPool(SOKOBAN, 4, envs_per_actor=2, resources=SMALL, step_timeout_s=60) as p:
        yield p


def gone(pids: list[int], within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


# -- configuration errors (no cluster needed) --------------------------------------------


def test_importing_the_package_imports_no_ray() -> None:
    code = "import sys, agentgym_envs, agentgym_envs.distributed; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_missing_ray_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'agentgym-envs\[dist\]'"):
        RayEnvPool(SOKOBAN, 2)
    with pytest.raises(ConfigError, match=r"agentgym-envs\[dist\]"):
        evaluate(
            suite_from_spec({"name": "s", "entries": [{"env": "Sokoban", "tasks": 1}]}),
            ["oracle"],
            EvalConfig(batch=1, isolation="ray"),
        )


def test_bad_pool_configs_name_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"n >= 1.*envs_per_actor=4"):
        RayEnvPool(SOKOBAN, 0)
    with pytest.raises(ConfigError, match="envs_per_actor >= 1"):
        RayEnvPool(SOKOBAN, 2, envs_per_actor=0)
    with pytest.raises(ConfigError, match="step_timeout_s"):
        RayEnvPool(SOKOBAN, 2, step_timeout_s=0)
    with pytest.raises(EnvNotFoundError, match="Did you mean 'Sokoban'"):
        RayEnvPool("Sokobam", 2)
    with pytest.raises(ConfigError, match="must be >= 0"):
        ActorResources(num_cpus=-1)
    with pytest.raises(ConfigError, match="node2"):
        ActorResources(custom={"node2": 0})
    with pytest.raises(ConfigError, match="envs_per_actor"):
        EvalConfig(isolation="ray", envs_per_actor=0)
    with pytest.raises(ConfigError, match="'inline' or 'process' or 'ray'"):
        EvalConfig(isolation="threads")  # type: ignore[arg-type]


def test_family_defaults_are_data_and_overridable() -> None:
    from agentgym_envs.distributed.resources import FAMILY_COSTS, default_resources

    web = default_resources("WebShop", 4)
    assert web.num_cpus == 4 * FAMILY_COSTS["web"].cpus_per_env
    assert web.memory_mib == FAMILY_COSTS["web"].memory_mib_base + 4 * 160
    assert web.ray_options()["memory"] == web.memory_mib * 2**20
    games = default_resources("Sokoban", 2).ray_options()
    assert "memory" in games and games["num_cpus"] == 0.5
    assert default_resources("CartPole-v1", 1).num_cpus > 0  # outside agentgym: a default


def test_an_actor_hands_back_its_episodes_for_the_drivers_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EnvHost (the actor's body, no Ray needed) records into an outbox, opens no store,
    and the episode it returns makes the same row as the in-process recorder's."""
    from agentgym_envs.distributed.host import EnvHost
    from agentgym_envs.eval.evaluate import _close_stores, build_env
    from agentgym_envs.store import TrajectoryStore

    monkeypatch.chdir(tmp_path)
    job: tuple[Any, ...] = (SOKOBAN, {}, [], "actor-store.sqlite", "oracle", "", "run-1")
    host = EnvHost(functools.partial(build_env, *job, True), 1)
    inline = build_env(*job[:3], str(tmp_path / "inline.sqlite"), *job[4:])
    try:
        host.reset(0, 3, {"difficulty": "easy"})
        inline.reset(seed=3, options={"difficulty": "easy"})
        oracle, handed = inline.unwrapped.oracle(), []  # type: ignore[attr-defined]
        for _ in range(200):
            action = oracle.act()
            assert host.oracle_act(0) == action
            *_, terminated, truncated, _, episodes = host.step(0, action, {"trial": 0})
            inline.get_wrapper_attr("note")(trial=0)  # in process, with the same note
            inline.step(action)
            handed += episodes
            if terminated or truncated:
                break
        assert len(handed) == 1 and handed[0].outcome == Outcome.SUCCESS
        assert not (tmp_path / "actor-store.sqlite").exists()  # the actor opened no store
        with TrajectoryStore(tmp_path / "driver.sqlite") as driver:
            driver.add_many(handed)
            got = driver.get(1)
        _close_stores()
        with TrajectoryStore(tmp_path / "inline.sqlite") as store:
            expected = store.get(1)
        for when in ("started_at", "ended_at"):
            setattr(got, when, 0.0)
            setattr(expected, when, 0.0)
        assert got == expected
    finally:
        host.close()
        inline.close()
        _close_stores()


# -- on the two-node cluster ---------------------------------------------------------------


def test_resources_no_node_offers_are_refused_with_the_fix(ray_cluster: LocalCluster) -> None:
    with pytest.raises(ConfigError, match=r"no node offers.*ray start --num-cpus"):
        RayEnvPool(SOKOBAN, 1, resources=ActorResources(num_cpus=0.1, custom={"gpu_box": 1}))
    with pytest.raises(ConfigError, match="CPU=8"):
        RayEnvPool(SOKOBAN, 1, resources=ActorResources(num_cpus=8))


def test_actors_are_placed_by_resources_across_the_two_nodes(ray_cluster: LocalCluster) -> None:
    import ray

    assert sum(n["Alive"] for n in ray.nodes()) == 2
    with (
        RayEnvPool(SOKOBAN, 2, resources=ON_NODE2) as second,
        RayEnvPool(SOKOBAN, 1, resources=on_head(ray_cluster)) as head,
    ):
        for i in range(2):
            where = second.where(i)
            assert where["node_ip"] == "127.0.0.3"
            assert where["resources"]["node2"] == pytest.approx(0.1)
        assert head.where(0)["node_ip"] == ray_cluster.head_ip
        assert head.where(0)["node_id"] != second.where(0)["node_id"]
        # the envs really run there: a reset and a step come back as plain data
        r = second.reset(1, seed=3)
        assert r.call is Call.RESET and not r.crashed and "Push" in r.obs
        s = second.step(1, 'move(direction="up")')
        assert s.info["outcome"] == Outcome.CONTINUE and isinstance(s.reward, float)


def test_eval_on_ray_equals_the_in_process_run(ray_cluster: LocalCluster) -> None:
    spec = {
        "name": "ray-equal",
        "trials": 1,
        "seed": 5,
        "entries": [
            {"name": "sokoban", "env": "Sokoban", "difficulty": "easy", "tasks": 3},
            {"name": "retail", "env": "Retail", "difficulty": "easy", "tasks": 2},
        ],
    }
    suite = suite_from_spec(spec)
    inline = evaluate(suite, ["oracle"], EvalConfig(batch=2))
    remote = evaluate(suite, ["oracle"], EvalConfig(batch=2, isolation="ray", envs_per_actor=2))
    assert len(remote["episodes"]) == 5
    assert all(e["success"] for e in remote["episodes"])
    assert compare_episodes(inline["episodes"], remote["episodes"]) == []
    assert [e["reward_components"] for e in remote["episodes"]] == [
        e["reward_components"] for e in inline["episodes"]
    ]
    assert remote["config"]["isolation"] == "ray"


def test_an_exiting_actor_costs_only_its_episodes_in_eval(ray_cluster: LocalCluster) -> None:
    spec: dict[str, Any] = {
        "name": "crash",
        "trials": 2,
        "entries": [{"name": "c", "env": crashy.SUITE_ENV, "tasks": 3}],
    }
    doomed = suite_from_spec(spec).entries[0].task_ids(0)[0]
    spec["entries"][0]["env_kwargs"] = {"crash": "exit", "crash_tasks": [doomed]}
    report = evaluate(suite_from_spec(spec), ["oracle"], EvalConfig(batch=2, isolation="ray"))
    eps = report["episodes"]
    assert len(eps) == 6
    broken = [e for e in eps if e["task_id"] == doomed]
    assert broken and all(
        e["outcome"] == "env_error" and not e["valid"] and "died" in e["error"] for e in broken
    )
    assert all(e["success"] for e in eps if e["task_id"] != doomed)
    m = report["overall"]["oracle"]
    assert m["success_rate"] == 1.0 and m["env_errors"] == 2 and m["valid"] == 4


def test_env_exceptions_and_a_killed_actor_end_episodes_as_env_errors(pool: RayEnvPool) -> None:
    # an exception of the env itself ends only that episode; the actor lives on
    r = pool.step(0, 'move(direction="up")')  # never reset: the env raises ResetNeeded
    assert r.code is CrashCode.ENV_EXCEPTION and "ResetNeeded" in r.error
    assert r.info["outcome"] == Outcome.ENV_ERROR and pool.restarts == 0
    # a killed actor ends every episode it hosted, and is restarted
    for r in pool.reset_many([(i, i, None) for i in range(4)]):
        assert not r.crashed
    first = pool.where(0)["pid"]
    kill(pool.handle(0))  # slots 0 and 1 live on actor 0
    results = pool.step_many([(0, 'move(direction="up")'), (2, 'move(direction="up")')])
    dead, fine = results
    assert dead.code is CrashCode.ACTOR_DIED and dead.truncated and not dead.terminated
    assert dead.info["outcome"] == Outcome.ENV_ERROR and dead.info["episode_valid"] is False
    assert not fine.crashed and fine.info["outcome"] == Outcome.CONTINUE
    assert pool.restarts == 1
    # slot 1 was not stepping when its actor died: its episode is lost all the same
    lost = pool.step(1, 'move(direction="up")')
    assert lost.code is CrashCode.EPISODE_LOST and lost.info["outcome"] == Outcome.ENV_ERROR
    # the run goes on: both slots reset on the new actor, in another process
    assert not pool.reset(0, seed=0).crashed and not pool.reset(1, seed=1).crashed
    assert not pool.step(0, 'move(direction="up")').crashed
    assert pool.where(0)["pid"] != first
    assert not pool.step(3, 'move(direction="up")').crashed  # the other actor never noticed


def test_snapshots_of_many_slots_and_a_killed_actor_costs_only_its_own(
    pool: RayEnvPool,
) -> None:
    """``get_state_many`` sends every slot's snapshot call before waiting for any (the
    rollout runner's checkpoint before each turn); each entry is what ``get_state`` gives,
    and a killed actor's slots get its exception, not the others'."""
    for r in pool.reset_many([(i, 10 + i, None) for i in range(4)]):
        assert not r.crashed
    pool.step_many([(i, 'move(direction="up")') for i in range(4)])
    alone = [pool.get_state(i) for i in range(4)]
    assert pool.get_state_many([3, 0, 2, 1]) == [alone[3], alone[0], alone[2], alone[1]]
    kill(pool.handle(2))  # slots 2 and 3 live on actor 1
    lost = pool.get_state_many([0, 2, 1, 3])
    assert lost[0] == alone[0] and lost[2] == alone[1]
    assert all(isinstance(x, ActorLost) for x in (lost[1], lost[3])), lost
    assert pool.restarts == 1  # one actor, restarted once for both of its slots


def test_an_actor_that_exits_mid_step_and_one_that_hangs(ray_cluster: LocalCluster) -> None:
    with RayEnvPool(sleepy.ENV_ID, 3, resources=SMALL, step_timeout_s=2.0) as p:
        p.reset_many([(i, i, None) for i in range(3)])
        died = p.step(0, "die")  # os._exit inside the env
        assert died.code is CrashCode.ACTOR_DIED and died.info["episode_valid"] is False
        start = time.monotonic()
        hung, ok = p.step_many([(1, "hang"), (2, 'move(direction="up")')])
        assert hung.code is CrashCode.STEP_TIMEOUT and "step_timeout_s=2" in hung.error
        assert hung.truncated and hung.info["outcome"] == Outcome.ENV_ERROR
        assert not ok.crashed
        assert time.monotonic() - start < 60  # ended by the timeout, not the sleep
        assert p.restarts == 2
        for i in (0, 1):  # both slots play on after their actors' restarts
            assert not p.reset(i, seed=9).crashed
            assert not p.step(i, 'move(direction="left")').crashed


def test_a_restarted_actor_slower_to_build_than_the_step_timeout(
    ray_cluster: LocalCluster,
) -> None:
    """Building the replacement actor's env takes longer than step_timeout_s: its start
    is not counted against the next call, which plays normally."""
    with RayEnvPool(sleepy.ENV_ID, 1, {"build_s": 2.5}, resources=SMALL, step_timeout_s=2.0) as p:
        p.reset(0, seed=1)
        assert p.step(0, "die").code is CrashCode.ACTOR_DIED
        assert p.restarts == 1
        assert not p.reset(0, seed=2).crashed
        assert not p.step(0, 'move(direction="left")').crashed


def test_backpressure_bounds_the_calls_in_flight(ray_cluster: LocalCluster) -> None:
    with RayEnvPool(SOKOBAN, 3, envs_per_actor=3, resources=SMALL, max_in_flight=1) as p:
        seen = []
        for i in range(3):
            p.submit_reset(i, seed=i)
            seen.append(p.in_flight)
        assert max(seen) == 1
        results = []
        while len(results) < 3:
            results += p.wait()
        assert sorted(r.slot for r in results) == [0, 1, 2]
        assert not any(r.crashed for r in results)
        with pytest.raises(ArgumentError, match="already has a call in flight"):
            p.submit_step(0, "x")
            p.submit_step(0, "y")
        p.wait()


def test_a_snapshot_moves_to_an_actor_on_the_other_node(ray_cluster: LocalCluster) -> None:
    env = gym.make("agentgym/Retail-v1")
    obs, _ = env.reset(seed=4, options={"difficulty": "easy"})
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    with (
        RayEnvPool("Retail", 1, resources=on_head(ray_cluster)) as here,
        RayEnvPool("Retail", 1, resources=ON_NODE2) as there,
    ):
        assert here.where(0)["node_id"] != there.where(0)["node_id"]
        assert here.reset(0, seed=4, options={"difficulty": "easy"}).obs == obs
        for _ in range(2):
            action = oracle.act()
            expected = env.step(action)
            assert here.step(0, action).obs == expected[0]
        there.set_state(0, here.get_state(0))  # branch the episode onto node2
        action = oracle.act()
        want = env.step(action)
        a, b = here.step(0, action), there.step(0, action)
        for got in (a, b):
            assert (got.obs, got.reward, got.terminated, got.truncated) == want[:4]
            assert got.info["milestones"] == want[4]["milestones"]
            assert got.info["reward_components"] == want[4]["reward_components"]
    env.close()


def test_the_vector_env_equals_gymnasiums_sync_vector_env(ray_cluster: LocalCluster) -> None:
    from agentgym_envs.distributed.vector import RayVectorEnv

    kwargs = {"max_steps": 3}  # episodes end inside the test: autoresets happen
    sync = gym.vector.SyncVectorEnv([lambda: gym.make(SOKOBAN, **kwargs) for _ in range(3)])
    ray_env = RayVectorEnv(SOKOBAN, 3, kwargs, envs_per_actor=3, resources=SMALL)
    try:
        got = [ray_env.reset(seed=11), sync.reset(seed=11)]
        assert list(got[0][0]) == list(got[1][0])
        moves = ["up", "left", "down", "right", "up"]
        ended = False
        for t in range(len(moves)):
            actions = tuple(f'move(direction="{moves[(t + k) % 5]}")' for k in range(3))
            (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) = (
                ray_env.step(actions),
                sync.step(actions),
            )
            assert list(o1) == list(o2)
            np.testing.assert_array_equal(r1, r2)
            np.testing.assert_array_equal(te1, te2)
            np.testing.assert_array_equal(tr1, tr2)
            assert list(i1["outcome"]) == list(i2["outcome"])
            ended = ended or bool(te2.any() or tr2.any())
        assert ended  # the step budget ended episodes, and the next steps autoreset them
    finally:
        ray_env.close()
        sync.close()


def test_close_leaves_no_actor_process(ray_cluster: LocalCluster) -> None:
    p = RayEnvPool(SOKOBAN, 4, envs_per_actor=2, resources=SMALL)
    pids = [p.where(i)["pid"] for i in (0, 2)]
    assert all(alive(pid) for pid in pids) and len(set(pids)) == 2
    p.close()
    p.close()  # idempotent
    assert gone(pids)
    with pytest.raises(ConfigError, match="closed"):
        p.reset(0)


@pytest.mark.slow  # ~20 s: a whole local Ray starts and stops in a child process
def test_a_pool_starts_and_stops_its_own_local_ray() -> None:
    """Without a connected Ray, the pool starts a local one (``ray.init``) and shuts it
    down at close; run in a child process so this session's cluster is not involved."""
    code = (
        "import ray\n"
        "from agentgym_envs.distributed import RayEnvPool, ActorResources\n"
        "p = RayEnvPool('Sokoban', 1, resources=ActorResources(num_cpus=0.5))\n"
        "r = p.reset(0, seed=2)\n"
        "s = p.step(0, 'move(direction=\"up\")')\n"
        "print(ray.is_initialized(), r.crashed, s.crashed)\n"
        "p.close()\n"
        "print(ray.is_initialized())\n"
    )
    temp = tempfile.mkdtemp(prefix="agr-", dir="/tmp")  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(OMP_NUM_THREADS="1", RAY_TMPDIR=temp, AGENTGYM_TEST_LOCAL_RAY=temp)
    # a new local Ray turns token auth on and writes ~/.ray/auth_token unless it finds one
    Path(temp, "auth_token").write_text(secrets.token_hex(32))
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=f"{temp}/auth_token")
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.split() == ["True", "False", "False", "False"]
        # ray.shutdown() ended the local Ray it started: nothing of it is left running
        assert gone(marked("AGENTGYM_TEST_LOCAL_RAY", temp, also_path=temp))
    finally:
        terminate(marked("AGENTGYM_TEST_LOCAL_RAY", temp, also_path=temp))
        shutil.rmtree(temp, ignore_errors=True)


def _cwd() -> str:
    return os.getcwd()


def test_agentgym_eval_backend_ray_records_every_episode(
    ray_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver writes every episode into the run's store, whatever the actors' node
    and working directory (a relative --out used to be opened inside each actor)."""
    import ray

    from agentgym_envs.cli import main
    from agentgym_envs.store import TrajectoryStore

    actor_cwd = Path(ray.get(ray.remote(_cwd).remote()))  # where Ray workers run
    driver = tmp_path / "driver"
    driver.mkdir()
    assert actor_cwd.resolve() != driver.resolve()  # a relative path differs there
    stray = actor_cwd / "run-ray-records" / "trajectories.sqlite"
    assert not stray.exists()
    monkeypatch.chdir(driver)
    suite = driver / "mini.yaml"
    suite.write_text('{"name": "mini", "trials": 1, "entries": [{"name": "sokoban", '
                     '"env": "Sokoban", "difficulty": "easy", "tasks": 3}]}')  # fmt: skip
    code = main(["eval", "--suite", str(suite), "--policy", "oracle", "--backend", "ray",
                 "--envs-per-actor", "2", "--batch", "2", "--out", "run-ray-records"])  # fmt: skip
    assert code == 0
    out = driver / "run-ray-records"
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["isolation"] == "ray" and report["config"]["envs_per_actor"] == 2
    assert [e["success"] for e in report["episodes"]] == [True] * 3
    assert not stray.exists(), "an actor opened the store relative to its own directory"
    with TrajectoryStore(out / "trajectories.sqlite") as store:
        assert store.count(policy="oracle", success=True) == 3


def test_an_ended_episode_refuses_steps_until_reset(ray_cluster: LocalCluster) -> None:
    with RayEnvPool(sleepy.ENV_ID, 1, resources=SMALL, step_timeout_s=60) as p:
        assert not p.reset(0, seed=1).crashed
        failed = p.step(0, "raise")  # the env raised: the result says the episode ended
        assert failed.code is CrashCode.ENV_EXCEPTION and failed.truncated
        after = p.step(0, 'move(direction="up")')  # the env would still play on
        assert after.code is CrashCode.EPISODE_ENDED and "reset the slot" in after.error
        assert after.info["outcome"] == Outcome.ENV_ERROR and p.restarts == 0
        assert not p.reset(0, seed=1).crashed
        assert not p.step(0, 'move(direction="up")').crashed


def test_a_step_waiting_for_room_sees_its_actor_restart(ray_cluster: LocalCluster) -> None:
    """The actor restarts while the step waits for room: it reports the lost episode
    instead of stepping the fresh, never reset env."""
    with RayEnvPool(
        sleepy.ENV_ID, 2, resources=SMALL, envs_per_actor=2, max_in_flight=1, step_timeout_s=2.0
    ) as p:
        p.reset_many([(0, 0, None), (1, 1, None)])
        p.submit_step(0, "hang")
        p.submit_step(1, 'move(direction="up")')  # waits until slot 0's call expires
        results = {r.slot: r for r in p.wait() + p.wait()}
        assert results[0].code is CrashCode.STEP_TIMEOUT
        assert results[1].code is CrashCode.EPISODE_LOST, results[1].error
        assert p.restarts == 1 and p.in_flight == 0
