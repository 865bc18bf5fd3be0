"""The OpenEnv adapter against the real openenv-core: a server on loopback played with
openenv-core's own client (``GenericEnvClient``), episode by episode against a local twin
of the same env (same seed and options), plus the Gymnasium client and the CLI.

openenv-core is a test dependency (the ``openenv`` extra, installed by ``make install``):
without it this module fails to import with the install command, it is never skipped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.core.info import Outcome
from agentgym_envs.integrations.extras import MissingExtraError, require

# first: without openenv-core, collection fails here with the pip command (never a skip)
require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_openenv.py")

from openenv.core import GenericEnvClient  # noqa: E402

from agentgym_envs.integrations.openenv import (  # noqa: E402
    OpenEnvGymEnv,
    OpenEnvServer,
    RemoteEnvError,
    SessionEnvironment,
    serve,
)


@pytest.fixture(scope="module")
def sokoban() -> Iterator[OpenEnvServer]:
    with serve("Sokoban", port=0, max_sessions=4) as server:
        yield server


@pytest.fixture(scope="module")
def retail() -> Iterator[OpenEnvServer]:
    with serve("agentgym/Retail-v1", port=0, max_sessions=2) as server:
        yield server


def _twin(env_id: str, seed: int, options: dict[str, Any]) -> tuple[gym.Env[str, str], str]:
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed, options=options)
    return env, obs


def _session_env(server: OpenEnvServer, before: set[int]) -> SessionEnvironment:
    """The one env the server made since ``before`` (ids of the envs it had)."""
    new = [e for e in server.environments() if id(e) not in before]
    assert len(new) == 1, f"expected one new session env, got {len(new)}"
    return new[0]


def _wait_for(predicate: Any, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_reset_step_state_round_trip_matches_the_local_env(sokoban: OpenEnvServer) -> None:
    twin, twin_obs = _twin("agentgym/Sokoban-v0", 3, {"split": "test"})
    oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
    with GenericEnvClient(base_url=sokoban.url).sync() as client:
        first = client.reset(seed=3, options={"split": "test"})
        assert first.observation["text"] == twin_obs and first.done is False
        assert first.observation["info"]["tools"][0]["function"]["name"] == "move"
        state = client.state()
        assert state["env_id"] == "agentgym/Sokoban-v0" and state["step_count"] == 0
        total, steps = 0.0, 0
        while steps < 200:
            steps += 1
            action = oracle.act()
            obs, reward, terminated, truncated, info = twin.step(action)
            result = client.step({"text": action})
            total += reward
            assert result.observation["text"] == obs
            assert result.reward == pytest.approx(reward)
            assert result.done == (terminated or truncated)
            assert result.observation["terminated"] == terminated
            assert result.observation["info"]["reward_components"] == pytest.approx(
                info["reward_components"]
            )
            if result.done:
                break
        state = client.state()
    assert info["outcome"] is Outcome.SUCCESS and result.observation["info"]["outcome"] == "success"
    assert state["step_count"] == steps and state["done"] is True
    assert state["outcome"] == "success" and state["total_reward"] == pytest.approx(total)
    assert state["task_id"] == first.observation["info"]["task"]["id"]
    twin.close()


def test_two_concurrent_sessions_are_isolated(sokoban: OpenEnvServer) -> None:
    before = {id(e) for e in sokoban.environments()}
    a = GenericEnvClient(base_url=sokoban.url).sync()
    b = GenericEnvClient(base_url=sokoban.url).sync()
    twins = []
    with a, b:
        for client, seed in ((a, 1), (b, 2)):
            result = client.reset(seed=seed, options={"split": "train", "difficulty": "easy"})
            twin, obs = _twin("agentgym/Sokoban-v0", seed, {"split": "train", "difficulty": "easy"})
            assert result.observation["text"] == obs
            twins.append(twin)
        envs = [e for e in sokoban.environments() if id(e) not in before]
        assert len(envs) == 2 and envs[0].env is not envs[1].env  # one env per session
        # interleaved turns: each session moves only its own world
        moves = ["up", "left", "down", "right", "up", "up"]
        for i, direction in enumerate(moves):
            client, twin = (a, twins[0]) if i % 2 == 0 else (b, twins[1])
            action = f'move(direction="{direction}")'
            obs, reward, *_ = twin.step(action)
            result = client.step({"text": action})
            assert result.observation["text"] == obs and result.reward == pytest.approx(reward)
        assert a.state()["step_count"] == 3 and b.state()["step_count"] == 3
        assert a.state()["task_id"] != b.state()["task_id"]
        # a new episode in one session (on the other's task: a top-level option is merged
        # into options) leaves the other's episode alone
        a.reset(seed=5, task_id=b.state()["task_id"])
        assert a.state()["task_id"] == b.state()["task_id"]
        assert a.state()["step_count"] == 0 and b.state()["step_count"] == 3
    assert _wait_for(lambda: all(e.closed for e in envs))  # closing a session closes its env
    for twin in twins:
        twin.close()


def test_an_idle_session_is_closed_after_the_timeout() -> None:
    with (
        serve("Sokoban", port=0, idle_timeout_s=1.0) as server,
        GenericEnvClient(base_url=server.url).sync() as client,
    ):
        client.reset(seed=0)
        (env,) = server.environments()
        assert _wait_for(lambda: env.closed, timeout_s=30)
        with pytest.raises(RuntimeError, match="session expired: no reset or step for 1 s"):
            client.step({"text": 'move(direction="up")'})


_KILLED_CLIENT = textwrap.dedent(
    """
    import sys, time
    from openenv.core import GenericEnvClient
    client = GenericEnvClient(base_url=sys.argv[1]).sync()
    client.connect()
    client.reset(seed=0)
    client.step({"text": 'move(direction="up")'})
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_sessions_env_is_closed(sokoban: OpenEnvServer) -> None:
    before = {id(e) for e in sokoban.environments()}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CLIENT, sokoban.url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        env = _session_env(sokoban, before)
        assert env.env is not None and not env.closed and env.state.step_count == 1
        proc.send_signal(signal.SIGKILL)  # no close message: the connection just drops
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert _wait_for(lambda: env.closed), "the killed session's env was not closed"
    assert env.env.unwrapped._closed  # type: ignore[attr-defined]  # the Gymnasium env itself


def test_gymnasium_client_plays_retail_like_the_local_env(retail: OpenEnvServer) -> None:
    before = {id(e) for e in retail.environments()}
    remote = OpenEnvGymEnv(retail.url)
    assert isinstance(remote, gym.Env) and remote.env_id == "agentgym/Retail-v1"
    twin = gym.make("agentgym/Retail-v1")
    assert remote.observation_space.max_length == twin.observation_space.max_length
    options = {"split": "test", "difficulty": "easy"}
    obs, info = remote.reset(seed=7, options=options)
    twin_obs, twin_info = twin.reset(seed=7, options=options)
    assert obs == twin_obs and info["system"] == twin_info["system"]
    assert info["task"] == twin_info["task"] and info["outcome"] is Outcome.CONTINUE
    oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
    for _ in range(100):
        action = oracle.act()
        step = remote.step(action)
        expected = twin.step(action)
        assert step[0] == expected[0]
        assert step[1] == pytest.approx(expected[1])
        assert step[2:4] == expected[2:4]
        assert step[4]["outcome"] is expected[4]["outcome"]
        assert remote.observation_space.contains(step[0])
        if step[2] or step[3]:
            break
    assert step[4]["outcome"] is Outcome.SUCCESS
    env = _session_env(retail, before)
    remote.close()
    remote.close()  # idempotent
    assert _wait_for(lambda: env.closed)
    twin.close()


def test_gymnasium_client_reports_server_errors(sokoban: OpenEnvServer) -> None:
    remote = OpenEnvGymEnv(sokoban.url)
    try:
        with pytest.raises(RemoteEnvError, match="split"):
            remote.reset(seed=0, options={"split": "tset"})  # the env's own message
        with pytest.raises(RemoteEnvError, match="reset"):
            remote.step('move(direction="up")')  # no episode yet
        obs, _ = remote.reset(seed=0)
        assert "Boxes on targets" in obs
    finally:
        remote.close()
    with pytest.raises(Exception, match="closed"):
        remote.step("x")


def test_http_routes_describe_the_env(sokoban: OpenEnvServer) -> None:
    def get(path: str) -> Any:
        with urllib.request.urlopen(sokoban.url + path, timeout=30) as response:
            return json.loads(response.read())

    assert get("/health")["status"] == "healthy"
    assert get("/metadata")["name"] == "agentgym/Sokoban-v0"
    schema = get("/schema")
    assert "text" in schema["action"]["properties"]
    assert {"text", "terminated", "truncated", "info"} <= set(schema["observation"]["properties"])
    assert get("/state")["step_count"] == 0  # HTTP is stateless: a fresh env per request


def test_cli_serves_an_env_until_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym_envs.cli", "openenv", "serve", "Sokoban", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "300"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Serving agentgym/Sokoban-v0 over OpenEnv at http://127.0.0.1:")
        url = line.split(" at ")[1].split()[0]
        with GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(seed=1)
            assert "Boxes on targets" in result.observation["text"]
            assert client.step({"text": 'move(direction="up")'}).done is False
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_cli_rejects_bad_env_kwargs(capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym_envs.cli import main

    assert main(["openenv", "serve", "Sokoban", "--env-kwargs", "{max_steps: 3}"]) == 2
    assert "--env-kwargs must be a JSON object" in capsys.readouterr().out


def test_a_missing_library_names_the_install_command() -> None:
    with pytest.raises(MissingExtraError) as caught:
        require("no_such_module_xyz", "openenv-core", "openenv", "the OpenEnv adapter")
    assert isinstance(caught.value, ImportError)
    assert "pip install 'agentgym-envs[openenv]'" in str(caught.value)


def _docs_block(heading: str) -> str:
    """The first Python block under ``heading`` in docs/integrations.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    section = text[text.index(heading) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```\n", start)]


def test_the_docs_trl_example_plays_the_remote_env(
    sokoban: OpenEnvServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TRL example's environment class, driven as GRPOTrainer drives it: schema
    extraction of its tool methods, ``reset(**row)``, tool calls, ``get_reward()``."""
    from transformers.utils import get_json_schema

    monkeypatch.setenv("AGENTGYM_OPENENV_URL", sokoban.url)
    namespace: dict[str, Any] = {}
    exec(compile(_docs_block("### TRL on a remote env"), "integrations.md", "exec"), namespace)
    cls, dataset = namespace["RemoteSokoban"], namespace["dataset"]
    schema = get_json_schema(cls.move)["function"]
    assert schema["name"] == "move" and schema["parameters"]["required"] == ["direction"]
    row = dataset[3]
    twin, twin_obs = _twin("agentgym/Sokoban-v0", row["seed"], {"split": row["split"]})
    env = cls()
    try:
        assert env.reset(**row) == twin_obs
        oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
        total = 0.0
        while not env.done:
            action = oracle.act()  # move(direction="..."): the model's tool call, as TRL parses it
            direction = re.fullmatch(r'move\(direction="(\w+)"\)', action).group(1)  # type: ignore[union-attr]
            obs, reward, *_ = twin.step(action)
            assert env.move(direction=direction) == obs
            total += reward
        assert env.get_reward() == pytest.approx(total) and total > 0.5  # the env's return
        assert env.move("up").startswith("The episode is over")
    finally:
        env.env.close()
        twin.close()


def test_serve_without_openenv_core_names_the_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentgym_envs.cli import main

    # a module set to None in sys.modules fails to import as if it were not installed
    monkeypatch.setitem(sys.modules, "openenv.core", None)
    monkeypatch.delitem(sys.modules, "agentgym_envs.integrations.openenv")
    assert main(["openenv", "serve", "Sokoban", "--port", "0"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "needs the openenv-core package" in out
    assert "pip install 'agentgym-envs[openenv]'" in out  # brackets kept, not eaten as markup
