"""The OpenEnv server's serving path (issue 31), against the real openenv-core: step messages
carry what changed and the clients put the whole ``info`` back; sessions share the env's
read-only state yet own their worlds; cheap envs run on the event loop, heavy ones in a
bounded set of threads that answers "at capacity" when full."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.extras import jsonable, require

# first: without openenv-core, collection fails here with the pip command (never a skip)
require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_openenv_serving.py")

from openenv.core import GenericEnvClient  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

from agentgym_envs.integrations.openenv import (  # noqa: E402
    OpenEnvGymEnv,
    OpenEnvServer,
    SessionEnvironment,
    preload,
    runs_inline,
    serve,
)
from agentgym_envs.registration import family, find  # noqa: E402

RETAIL = "agentgym/Retail-v1"
RETAIL_TASK = {"split": "test", "difficulty": "easy"}  # seed 7: its oracle writes rows


@pytest.fixture(scope="module")
def retail() -> Iterator[OpenEnvServer]:
    with serve(RETAIL, port=0, max_sessions=4) as server:
        yield server


def _ws(server: OpenEnvServer) -> Any:
    return ws_connect(server.url.replace("http://", "ws://", 1) + "/ws", open_timeout=60)


def _ask(ws: Any, message: dict[str, Any]) -> tuple[dict[str, Any], int]:
    ws.send(json.dumps(message))
    raw = ws.recv(timeout=60)
    return json.loads(raw), len(raw.encode())


def _new_sessions(server: OpenEnvServer, before: set[int]) -> list[SessionEnvironment]:
    return [e for e in server.environments() if id(e) not in before and e.env is not None]


@pytest.mark.parametrize(
    ("env_id", "seed", "options"),
    [("agentgym/Sokoban-v0", 3, {"split": "test"}), (RETAIL, 7, RETAIL_TASK)],
)
def test_the_reassembled_info_of_an_episode_is_the_local_envs(
    env_id: str, seed: int, options: dict[str, Any]
) -> None:
    with serve(env_id, port=0, max_sessions=2) as server:
        remote = OpenEnvGymEnv(server.url)
        twin = gym.make(env_id)
        try:
            _, info = remote.reset(seed=seed, options=options)
            _, expected = twin.reset(seed=seed, options=options)
            assert info == jsonable(expected) and list(info) == list(expected)
            oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
            for _ in range(200):
                action = oracle.act()
                *_, info = remote.step(action)
                *_, terminated, truncated, expected = twin.step(action)
                assert info == jsonable(expected) and list(info) == list(expected)
                assert info["outcome"] is expected["outcome"]
                info["tools"].clear()  # the caller's copy: the next step's info is whole again
                if terminated or truncated:
                    break
            assert expected["outcome"] == "success"
        finally:
            remote.close()
            twin.close()


def test_step_messages_leave_out_the_episodes_constants(retail: OpenEnvServer) -> None:
    with _ws(retail) as ws:
        reset, reset_bytes = _ask(
            ws, {"type": "reset", "data": {"seed": 7, "options": RETAIL_TASK}}
        )
        first = reset["data"]["observation"]
        assert first["info"]["tools"] and first["info"]["system"] and first["info_unchanged"] == []
        call = {"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}}
        step, step_bytes = _ask(ws, {"type": "step", "data": {"text": json.dumps(call)}})
        obs = step["data"]["observation"]
        assert "tools" not in obs["info"] and "system" not in obs["info"]
        assert {"tools", "versions", "seeds", "task"} <= set(obs["info_unchanged"])
        assert obs["info"]["tool_calls"][0]["name"] == "find_user_id_by_email"
        assert step_bytes < len(json.dumps(first["info"]["tools"]))  # less than the schemas
        # on request: the state answer carries the latest whole info
        state, _ = _ask(ws, {"type": "state"})
        assert state["data"]["info"]["tools"] == first["info"]["tools"]
        assert state["data"]["info"]["tool_calls"] == obs["info"]["tool_calls"]
        assert state["data"]["step_count"] == 1 and reset_bytes > step_bytes


def test_openenvs_own_client_plays_retail_with_the_step_keys_each_step(
    retail: OpenEnvServer,
) -> None:
    twin = gym.make(RETAIL)
    twin.reset(seed=7, options=RETAIL_TASK)
    oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
    with GenericEnvClient(base_url=retail.url).sync() as client:
        client.reset(seed=7, options=RETAIL_TASK)
        for _ in range(100):
            action = oracle.act()
            *_, terminated, truncated, expected = twin.step(action)
            info = client.step({"text": action}).observation["info"]
            for key in ("outcome", "tool_calls", "error", "reward_components", "new_milestones"):
                assert info[key] == jsonable(expected[key]), key
            if terminated or truncated:
                break
    assert info["outcome"] == "success"
    twin.close()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_sessions_share_the_read_only_state_yet_own_their_worlds(retail: OpenEnvServer) -> None:
    from agentgym_envs.core.tasks import Task

    before = {id(e) for e in retail.environments()}
    with GenericEnvClient(base_url=retail.url).sync() as a, _ws(retail) as b:
        a.reset(seed=7, options=RETAIL_TASK)
        (sa,) = _new_sessions(retail, before)
        _ask(b, {"type": "reset", "data": {"seed": 7, "options": RETAIL_TASK}})
        (sb,) = _new_sessions(retail, before | {id(sa)})
        ea, eb = sa.env.unwrapped, sb.env.unwrapped  # type: ignore[union-attr]
        # shared: the task set, the pristine world, the serialised tool schemas
        assert ea.task_set is eb.task_set and ea.db._base is eb.db._base
        assert sa._wire._sent["tools"] is sb._wire._sent["tools"]
        # owned: each session's world
        assert ea is not eb and ea.db.conn is not eb.db.conn
        tasks = json.dumps([t.to_json() for t in ea.task_set.tasks], sort_keys=True)
        pristine = _digest(ea.db._base.serialize())
        # one session plays its task to the end (its oracle writes rows) ...
        twin = gym.make(RETAIL)
        twin.reset(seed=7, options=RETAIL_TASK)
        oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
        for _ in range(100):
            action = oracle.act()
            result = a.step({"text": action})
            twin.step(action)
            if result.done:
                break
        twin.close()
        assert result.observation["info"]["outcome"] == "success"
        written = ea.db.changes()
        assert written and eb.db.changes() == {}  # a's rows changed in a's world only
        # ... then tries what a hostile policy would: SQL in arguments, writes unasked
        for call in (
            {"name": "get_order_details", "arguments": {"order_id": "#W1'; DELETE FROM orders;--"}},
            {"name": "cancel_pending_order", "arguments": {"order_id": "#W4648313", "reason": "x"}},
            "x" * 5000,
        ):
            text = call if isinstance(call, str) else json.dumps(call)
            a.reset(seed=7, options=RETAIL_TASK)
            a.step({"text": text})
        # the other session's world, the pristine world and the task set are as they were
        assert eb.db.changes() == {}
        assert _digest(ea.db._base.serialize()) == pristine
        assert json.dumps([t.to_json() for t in eb.task_set.tasks], sort_keys=True) == tasks
        assert all(isinstance(t, Task) for t in eb.task_set.tasks)


def test_cheap_envs_run_on_the_loop_and_heavy_ones_in_a_thread_each() -> None:
    assert runs_inline(find("Sokoban")) and runs_inline(find(RETAIL))
    assert not runs_inline(find("WebShop")) and not runs_inline(find("RepoFix"))
    assert not runs_inline(find("Sokoban"), "thread") and runs_inline(find("WebShop"), "loop")
    with pytest.raises(ConfigError, match=r"executor .* must be one of auto, loop, thread"):
        runs_inline(find("Sokoban"), "fast")

    def session_threads() -> int:
        return sum(t.name.startswith("ThreadPoolExecutor") for t in threading.enumerate())

    for executor, grows in (("loop", False), ("thread", True)):
        with serve("Sokoban", port=0, max_sessions=8, executor=executor) as server:
            assert server.inline is (executor == "loop")
            start = session_threads()
            clients = [GenericEnvClient(base_url=server.url).sync() for _ in range(6)]
            try:
                for seed, client in enumerate(clients):
                    assert "Boxes on targets" in client.reset(seed=seed).observation["text"]
                    assert client.step({"text": 'move(direction="up")'}).done is False
                assert (session_threads() - start >= 6) is grows
            finally:
                for client in clients:
                    client.close()


def test_a_full_server_answers_at_capacity_and_takes_the_next_session() -> None:
    """A heavy env's server (a thread per session, here Sokoban served that way: the same
    mechanism WebShop and RepoFix get) refuses a session past --max-sessions, clearly."""
    with serve("Sokoban", port=0, max_sessions=1, executor="thread") as server:
        first = GenericEnvClient(base_url=server.url).sync()
        first.reset(seed=0)
        with _ws(server) as ws:  # refused on opening: the answer may come before we ask
            with contextlib.suppress(ConnectionClosed):
                ws.send(json.dumps({"type": "reset", "data": {}}))
            answer = json.loads(ws.recv(timeout=60))
        assert answer["type"] == "error" and answer["data"]["code"] == "CAPACITY_REACHED"
        message = answer["data"]["message"]
        assert "at capacity" in message and "1 of 1 sessions" in message
        assert "--max-sessions" in message
        first.close()
        with GenericEnvClient(base_url=server.url).sync() as second:  # the slot came back
            assert "Boxes on targets" in second.reset(seed=1).observation["text"]


def test_preload_is_only_for_envs_on_the_loop(capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym_envs.cli import main

    assert preload("FrozenLake") == ["train", "test", "ood"]  # a reset of each split
    with pytest.raises(ConfigError, match=r"--preload .* thread per session"):
        serve("Sokoban", port=0, executor="thread", preload_state=True)
    args = ["openenv", "serve", "Sokoban", "--port", "0", "--preload", "--executor", "thread"]
    assert main(args) == 2
    assert "drop --preload" in " ".join(capsys.readouterr().out.split())


_PRELOAD = textwrap.dedent(
    """
    import json, threading
    from openenv.core import GenericEnvClient
    from agentgym_envs.business.db import world_bytes
    from agentgym_envs.core.tasks import load_task_set
    from agentgym_envs.integrations.openenv import serve

    assert world_bytes.cache_info().currsize == 0 and load_task_set.cache_info().currsize == 0
    with serve("agentgym/Retail-v1", port=0, max_sessions=16) as server:
        seen = []

        def play(seed):
            with GenericEnvClient(base_url=server.url).sync() as client:
                seen.append(client.reset(seed=seed).observation["info"]["task"]["id"])

        threads = [threading.Thread(target=play, args=(s,)) for s in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    worlds, tasks = world_bytes.cache_info(), load_task_set.cache_info()
    print(json.dumps([len(seen), worlds.misses, worlds.currsize, tasks.misses, tasks.currsize]))
    """
)


def test_a_fresh_server_builds_the_shared_state_once_for_concurrent_first_resets() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PRELOAD], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    played, world_misses, worlds, task_misses, task_sets = json.loads(out.splitlines()[-1])
    assert played == 12
    assert world_misses == worlds >= 1  # every world was built once, never twice
    assert task_misses == task_sets >= 1  # each task set loaded once


_BACKGROUND = textwrap.dedent(
    """
    import time
    from agentgym_envs.business.db import world_bytes
    from agentgym_envs.integrations.openenv import serve

    with serve("agentgym/Retail-v1", port=0) as server:  # no client ever connects
        for _ in range(1200):
            if world_bytes.cache_info().currsize:
                break
            time.sleep(0.1)
        print(world_bytes.cache_info().currsize)
    """
)


def test_a_fresh_server_builds_the_shared_state_before_any_session() -> None:
    """Built as the server starts, in a worker thread: the first sessions' handshakes are
    never stalled by a build on the event loop."""
    out = subprocess.run(
        [sys.executable, "-c", _BACKGROUND], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    assert int(out.splitlines()[-1]) >= 1


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def test_workers_share_the_port_and_one_session_limit() -> None:
    cli = [sys.executable, "-m", "agentgym_envs.cli", "openenv", "serve", "Sokoban"]
    args = ["--port", "0", "--workers", "2", "--max-sessions", "3", "--preload"]
    proc = subprocess.Popen(
        [*cli, *args], stdout=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"}
    )
    workers: list[int] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "at most 3, 2 worker processes" in line, line
        url = line.split(" at ")[1].split()[0]
        workers = _children(proc.pid)
        assert len(workers) == 2
        clients = [GenericEnvClient(base_url=url).sync() for _ in range(3)]
        for seed, client in enumerate(clients):
            assert "Boxes on targets" in client.reset(seed=seed).observation["text"]
        # however the kernel spread the three, a fourth is refused by whichever worker
        with ws_connect(url.replace("http://", "ws://", 1) + "/ws", open_timeout=60) as ws:
            answer = json.loads(ws.recv(timeout=60))
        assert answer["data"]["code"] == "CAPACITY_REACHED", answer
        assert "at capacity" in answer["data"]["message"]
        clients[0].close()
        with GenericEnvClient(base_url=url).sync() as client:  # the slot came back
            assert client.reset(seed=9).done is False
        for client in clients[1:]:
            client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    finally:
        for pid in workers if proc.poll() is None else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_workers_refuse_http_mcp_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym_envs.cli import main

    args = ["openenv", "serve", "Sokoban", "--port", "0", "--workers", "2"]
    assert main([*args, "--max-sessions", "4", "--max-mcp-sessions", "1"]) == 2
    assert "--max-mcp-sessions needs --workers 1" in " ".join(capsys.readouterr().out.split())
    assert main(["openenv", "serve", "Sokoban", "--workers", "0"]) == 2
    assert "--workers must be >= 1" in " ".join(capsys.readouterr().out.split())


def test_an_env_that_calls_a_model_endpoint_gets_a_thread_never_the_loop() -> None:
    """An LLM user's step waits on its endpoint: on the event loop one such step would
    stop every session (a review measured another session's `state` waiting 3.7 s)."""
    remote = {"user": "llm", "user_model": "m", "user_base_url": "http://127.0.0.1:9/v1"}
    assert runs_inline(find(RETAIL)) and not runs_inline(find(RETAIL), "auto", remote)
    assert not runs_inline(find(RETAIL), "thread", remote)
    with pytest.raises(ConfigError, match="--executor thread"):
        runs_inline(find(RETAIL), "loop", remote)
    # the family declares which arguments name an endpoint: not a name's spelling
    assert (
        find(RETAIL).family == "business" and "user_base_url" in family("business").endpoint_kwargs
    )
    assert runs_inline(find("Sokoban"), "loop", {"image_base_url": "http://x"})


def test_json_nested_past_the_parsers_depth_is_an_invalid_json_answer(
    retail: OpenEnvServer,
) -> None:
    """A message nested thousands deep is the client's mistake: an INVALID_JSON answer,
    and the session plays on (it used to end the session with a logged traceback)."""
    with _ws(retail) as ws:
        ws.send('{"a":' * 5000)
        answer = json.loads(ws.recv(timeout=60))
        assert answer["type"] == "error" and answer["data"]["code"] == "INVALID_JSON"
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
