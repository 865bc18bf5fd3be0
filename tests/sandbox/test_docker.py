"""The Docker backend on a real engine: what only it does (images, its container pool,
engine failures) and RepoFix played and graded in its containers. The behaviour it
shares with bubblewrap is tested on both in test_backends.py, test_hostile.py,
test_isolation.py and test_grading_guard.py."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import Outcome
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.sandbox.backends import (
    BackendUnavailable,
    DockerBackend,
    ExecResult,
    SandboxError,
    make_backend,
)
from agentgym_envs.sandbox.docker_image import DOCKER_IMAGE_ENV, IMAGE_PYTHONS, docker_module
from tests.sandbox.support import needs_docker

pytestmark = [pytest.mark.sandbox, pytest.mark.docker, needs_docker, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def docker() -> Iterator[DockerBackend]:
    backend = DockerBackend()
    yield backend
    backend.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir(mode=0o755)
    return folder


def test_runs_as_the_workspace_owner_who_can_write_there(docker: DockerBackend, ws: Path) -> None:
    # a root-owned workspace (RepoFix's, when the host runs as root) once ran as uid
    # 65534, which could write neither the workspace nor the verifier's results folder
    r = docker.run(["/bin/sh", "-c", "id -u; echo x > made.txt"], workspace=ws, timeout_s=60)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"{ws.stat().st_uid}\n" and (ws / "made.txt").read_text() == "x\n"


def test_reuses_the_container_of_a_workspace(docker: DockerBackend, ws: Path) -> None:
    first = docker.run(["cat", "/proc/1/cmdline"], workspace=ws, timeout_s=60)
    docker.run(["/bin/sh", "-c", "echo kept > /tmp/mark"], workspace=ws, timeout_s=60)
    assert docker.run(["cat", "/tmp/mark"], workspace=ws, timeout_s=60).stdout == "kept\n"
    assert first.exit_code == 0 and len(docker._pool) >= 1


def test_a_container_removed_behind_its_back_is_replaced(docker: DockerBackend, ws: Path) -> None:
    docker.run(["true"], workspace=ws, timeout_s=60)
    for container in list(docker._pool.values()):
        container.remove(force=True)  # e.g. `docker container prune` or a crashed engine
    r = docker.run(["echo", "again"], workspace=ws, timeout_s=60)
    assert (r.exit_code, r.stdout) == (0, "again\n"), r.stderr


def test_a_busy_container_is_never_evicted(ws: Path, tmp_path: Path) -> None:
    # a pool of one: starting a second workspace's container must not kill the first run
    backend = DockerBackend(pool_size=1)
    other = tmp_path / "other"
    other.mkdir()
    slow: list[ExecResult] = []
    try:
        backend.run(["true"], workspace=ws, timeout_s=60)  # the first container is warm
        thread = threading.Thread(
            target=lambda: slow.append(
                backend.run(["/bin/sh", "-c", "sleep 2; echo done"], workspace=ws, timeout_s=60)
            )
        )
        thread.start()
        time.sleep(0.5)
        assert backend.run(["echo", "hi"], workspace=other, timeout_s=60).stdout == "hi\n"
        thread.join()
        assert (slow[0].exit_code, slow[0].stdout) == (0, "done\n"), slow[0].stderr
    finally:
        backend.close()
    assert backend._pool == {} and backend._stdin == {}


def test_an_engine_that_stops_answering_is_a_sandbox_error(ws: Path, tmp_path: Path) -> None:
    backend = DockerBackend()
    backend._client = docker_module().DockerClient(
        base_url=f"unix://{tmp_path / 'no-engine.sock'}", version="1.41", timeout=3
    )
    with pytest.raises(SandboxError, match="the Docker engine failed"):
        backend.run(["true"], workspace=ws, timeout_s=10)


def test_a_missing_image_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendUnavailable) as err:
        DockerBackend(image="agentgym-missing-image:never")
    message = str(err.value)
    for needle in ("agentgym-missing-image:never", "debootstrap", DOCKER_IMAGE_ENV, "docker pull"):
        assert needle in message
    monkeypatch.setenv(DOCKER_IMAGE_ENV, "agentgym-missing-image:never")
    with pytest.raises(BackendUnavailable, match="agentgym-missing-image:never"):
        make_backend("docker")  # the variable chooses the default image


def test_an_image_without_this_python_is_a_config_error(docker: DockerBackend) -> None:
    with pytest.raises(ConfigError, match="image_python=") as err:
        DockerBackend(image=docker.image, image_python="/nowhere/python3")
    assert "/nowhere/python3" in str(err.value) and isinstance(err.value, ValueError)


def test_the_image_python_is_found_and_runs_the_runtime(docker: DockerBackend, ws: Path) -> None:
    assert docker.image_python in IMAGE_PYTHONS  # probed in the image, not assumed
    code = "import sys, pytest; print(tuple(sys.version_info[:2]), sys.executable)"
    r = docker.run([docker.python, "-c", code], workspace=ws, timeout_s=60)
    assert r.stdout == f"{tuple(sys.version_info[:2])} {docker.python}\n", r.stderr


# -- RepoFix in docker ----------------------------------------------------------------


@pytest.fixture
def repofix() -> Iterator[gym.Env]:
    env = gym.make("agentgym/RepoFix-v1", backend="docker")
    yield env
    env.close()


def test_repofix_gold_fix_is_graded_success_in_docker(repofix: gym.Env) -> None:
    _, info = repofix.reset(seed=0)
    assert info["sandbox"]["name"] == "docker"
    obs, _, _, _, info = repofix.step("run(cmd=\"echo hi > notes.txt && python -c 'print(6*7)'\")")
    assert not info["error"] and "42" in obs, obs
    task = repofix.unwrapped.task
    for action in task.solution:
        obs, reward, terminated, _, info = repofix.step(action)
    assert terminated and info["outcome"] is Outcome.SUCCESS, obs
    assert reward > 0.9


def test_repofix_wrong_fix_fails_in_docker(repofix: gym.Env) -> None:
    repofix.reset(seed=0)
    obs, _, terminated, _, info = repofix.step("submit()")
    assert terminated and info["outcome"] is Outcome.FAILURE, obs


# Which of the names in argv some file or folder in the container has (all but the kernel's
# folders); run in the agent's own container.
FIND = """
import json, os, sys
wanted, found = set(sys.argv[1:]), set()
for folder, dirs, files in os.walk('/'):
    if folder in ('/proc', '/sys', '/dev'):
        dirs[:] = []
    found.update(wanted.intersection(dirs + files))
print(json.dumps(sorted(found)))
"""


def test_no_hidden_test_or_task_file_is_in_the_agents_container(repofix: gym.Env) -> None:
    repofix.reset(seed=0)
    env = repofix.unwrapped
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "repos"
    hidden = {p.name for p in fixtures.glob("*/tests/hidden/*.py")}
    visible = {p.name for p in (env.workspace / "tests").rglob("*.py")}
    assert len(hidden) >= 4 and visible and not hidden & visible
    names = [*hidden, *visible, "repofix.jsonl", "agentgym_envs", "_data", "pytest"]
    argv = ["python", "-c", FIND, *names]
    r = env.backend.run(argv, workspace=env.workspace, timeout_s=120, limits=env.limits)
    assert r.exit_code == 0, r.stderr
    # it sees the workspace's tests and the runtime's pytest: nothing hidden, no task data
    assert set(json.loads(r.stdout)) == {*visible, "pytest"}
