"""RepoFix leaves nothing behind: scratch folders of killed envs and evaluator workers are
reaped, close() frees everything; and a genuine reproduction still earns its milestone."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401 - registers the envs
from agentgym_envs.core import scratch
from agentgym_envs.distributed.results import CrashCode
from agentgym_envs.repofix.env import RepoFixEnv
from agentgym_envs.rollout import ProcessEnvSlots
from tests.sandbox.support import needs_bwrap

TASK = "repofix-intervals-easy-test-1000001"


def owned_by(pid: int) -> list[Path]:
    return [p for root in scratch.default_roots() for p in root.glob(f"agentgym-*-{pid}-*")]


# -- the owner rule, without a sandbox -------------------------------------------------------


def test_reap_removes_folders_of_dead_or_replaced_owners_only(tmp_path: Path) -> None:
    mine = scratch.owned_dir("unit", tmp_path)
    pid, token = os.getpid(), scratch.start_token(os.getpid())
    ns = mine.name.split("-")[4]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [
        tmp_path / f"agentgym-unit-{dead.pid}-1-{ns}-x",  # the owner exited
        tmp_path / f"agentgym-unit-{pid}-{int(token) + 1}-{ns}-y",  # the pid was reused
    ]
    kept = [
        mine,
        tmp_path / f"agentgym-unit-{dead.pid}-1-{int(ns, 16) + 1:x}-z",  # another namespace
        tmp_path / "agentgym-unit-notmine",  # not an owned name
    ]
    for folder in [*stale, *kept[1:]]:
        (folder / "sub").mkdir(parents=True)
    assert sorted(scratch.reap_stale([tmp_path])) == sorted(stale)
    assert all(not p.exists() for p in stale) and all(p.exists() for p in kept)


def test_remove_tree_handles_paths_past_path_max(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    try:  # 30 levels of 200-character names: 6000 characters, past PATH_MAX
        for _ in range(30):
            os.mkdir("d" * 200, dir_fd=fd)
            new = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
    finally:
        os.close(fd)
    scratch.remove_tree(deep)
    assert not deep.exists()


# -- RepoFix in the sandbox ---------------------------------------------------------------------

_CHILD = """
import json, sys, time
from agentgym_envs.repofix.env import RepoFixEnv
env = RepoFixEnv()
env.reset(seed=0, options={"task_id": sys.argv[1]})
env.step(json.dumps({"name": "run", "arguments": {"cmd": "head -c 1M /dev/zero > blob"}}))
print(json.dumps([str(env.spaces.dir), str(env.runner.dir)]), flush=True)
time.sleep(600)
"""


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_a_killed_envs_folders_are_reaped_by_the_next_env() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, TASK], stdout=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
        folders = [Path(p) for p in json.loads(line)]
        assert all(p.is_dir() for p in folders) and set(folders) <= set(owned_by(child.pid))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert all(p.exists() for p in folders)  # SIGKILL ran no cleanup
    env = RepoFixEnv()  # the next env reaps them
    try:
        assert not any(p.exists() for p in folders), folders
        assert owned_by(child.pid) == []
    finally:
        env.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_the_evaluators_worker_kill_leaves_nothing() -> None:
    factory = functools.partial(gym.make, "agentgym/RepoFix-v1")
    slots = ProcessEnvSlots(factory, 1, step_timeout_s=60, strict=False)
    try:
        assert not slots.reset(0, 0, {"task_id": TASK}).crashed
        worker = slots.workers[0]
        pid = worker._proc.pid
        run = json.dumps({"name": "run", "arguments": {"cmd": "head -c 1M /dev/zero > b"}})
        assert not slots.step_many([(0, run)])[0].crashed
        assert len(owned_by(pid)) >= 2  # its workspace folder and its verification folder
        worker._timeout = 0.5  # the next command outlasts the step timeout: the worker is killed
        sleep = json.dumps({"name": "run", "arguments": {"cmd": "sleep 20"}})
        [result] = slots.step_many([(0, sleep)])
        assert result.code is CrashCode.STEP_TIMEOUT and "did not answer" in result.error
        assert owned_by(pid) == []
    finally:
        slots.close()


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_close_frees_every_folder() -> None:
    env = RepoFixEnv()
    env.reset(seed=0, options={"task_id": TASK})
    env.step(json.dumps({"name": "run", "arguments": {"cmd": "head -c 1M /dev/zero > b"}}))
    env.step("submit()")
    folders = owned_by(os.getpid())
    held = [env.spaces.dir, env.runner.dir]
    assert set(held) <= set(folders)
    env.close()
    env.close()
    assert not any(p.exists() for p in held)


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.timeout(180)
def test_a_genuine_reproduction_by_command_still_counts() -> None:
    env = RepoFixEnv()
    try:
        # an easy task whose bug report is a failing visible test
        env.reset(seed=0, options={"task_id": "repofix-toktext-easy-test-1000008"})
        cmd = "python -m pytest -q -x tests"  # the visible tests fail on the bug only
        *_, info = env.step(json.dumps({"name": "run", "arguments": {"cmd": cmd}}))
        assert "reproduced_failure" in info["new_milestones"]
    finally:
        env.close()
