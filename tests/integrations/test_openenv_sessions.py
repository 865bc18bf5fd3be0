"""Session admission and expiry of the OpenEnv server, against the real openenv-core
client on loopback: HTTP MCP sessions (held by no connection) cannot take the slots of
WebSocket clients, unused and idle sessions expire by default, a per-client cap holds,
and ``OpenEnvGymEnv`` opens a new session when its old one expired.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from agentgym_envs.integrations.extras import require

# first: without openenv-core, collection fails here with the pip command (never a skip)
require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_openenv_sessions.py")

from openenv.core import GenericEnvClient  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

from agentgym_envs.core.errors import ConfigError  # noqa: E402
from agentgym_envs.integrations.openenv import (  # noqa: E402
    OpenEnvGymEnv,
    SessionLimits,
    serve,
)

_CLI = [sys.executable, "-m", "agentgym_envs.cli", "openenv", "serve"]
_CREATE = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``predicate`` until it holds (a generous deadline, never a timing claim)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _mcp(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/mcp",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _refusal(url: str) -> str | None:
    """Open a WebSocket session and ask its state: the server's refusal, or None when it
    gave the session (closed again at once)."""
    ws_url = url.replace("http://", "ws://", 1) + "/ws"
    with ws_connect(ws_url, open_timeout=30) as ws:
        with contextlib.suppress(ConnectionClosed):  # a refused session may be closed already
            ws.send(json.dumps({"type": "state"}))
        answer = json.loads(ws.recv(timeout=30))  # a refusal is sent before the close
        with contextlib.suppress(ConnectionClosed):
            ws.send(json.dumps({"type": "close"}))
    if answer["type"] == "error":
        return str(answer["data"]["message"])
    assert answer["type"] == "state", answer
    return None


def _plays(url: str) -> bool:
    """Whether a fresh WebSocket client gets a session."""
    return _refusal(url) is None


def test_http_mcp_sessions_cannot_lock_websocket_clients_out() -> None:
    """The issue's attack on the CLI's defaults: three fire-and-forget session/create
    POSTs against --max-sessions 3; a WebSocket client must still get a session."""
    proc = subprocess.Popen(
        [*_CLI, "FrozenLake", "--port", "0", "--max-sessions", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "300"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        answers = [_mcp(url, {**_CREATE, "id": i}) for i in range(3)]
        assert all("error" in a for a in answers), answers
        assert "--max-mcp-sessions" in answers[0]["error"]["message"]
        assert _plays(url), "a WebSocket client was locked out by HTTP MCP sessions"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_allowed_mcp_sessions_are_capped_below_max_sessions_and_expire_unused() -> None:
    with serve(
        "FrozenLake", port=0, max_sessions=3, max_mcp_sessions=1, unused_timeout_s=0.5
    ) as server:
        first = _mcp(server.url, _CREATE)
        assert "session_id" in first["result"], first
        (mcp_env,) = server.environments()
        second = _mcp(server.url, {**_CREATE, "id": 2})
        assert "--max-mcp-sessions 1" in second["error"]["message"], second
        assert _plays(server.url), "WebSocket clients lost their slots"
        assert _wait_for(lambda: mcp_env.closed), "an unused MCP session never expired"
        assert "session_id" in _mcp(server.url, {**_CREATE, "id": 3})["result"]


def test_a_websocket_session_that_never_plays_frees_its_slot() -> None:
    with serve("FrozenLake", port=0, max_sessions=1, unused_timeout_s=0.5) as server:
        squatter = GenericEnvClient(base_url=server.url).sync()
        squatter.connect()  # a session, and never a reset
        try:
            assert _wait_for(lambda: _plays(server.url)), "the unused session kept its slot"
            with pytest.raises(RuntimeError, match="session expired: no reset or step"):
                squatter.reset(seed=0)
        finally:
            squatter.close()


def test_an_idle_session_expires_but_a_playing_one_does_not() -> None:
    with serve("FrozenLake", port=0, idle_timeout_s=1.0, unused_timeout_s=None) as server:
        idle = GenericEnvClient(base_url=server.url).sync()
        with idle:
            idle.reset(seed=0)
            (idle_env,) = server.environments()
            with GenericEnvClient(base_url=server.url).sync() as busy:
                busy.reset(seed=1)
                deadline = time.monotonic() + 30
                while not idle_env.closed and time.monotonic() < deadline:
                    busy.reset(seed=1)  # a reset is play: it keeps this session alive
                    time.sleep(0.2)
                assert idle_env.closed, "the idle session never expired"
                busy.step({"text": 'move(direction="sideways")'})  # still open
            with pytest.raises(RuntimeError, match="session expired: no reset or step for 1 s"):
                idle.step({"text": 'move(direction="left")'})


def test_one_client_address_is_capped_by_max_sessions_per_client() -> None:
    with serve("FrozenLake", port=0, max_sessions=3, max_sessions_per_client=2) as server:
        a = GenericEnvClient(base_url=server.url).sync()
        b = GenericEnvClient(base_url=server.url).sync()
        with a, b:
            a.reset(seed=0)
            b.reset(seed=0)
            refusal = _refusal(server.url)
            assert refusal is not None and "--max-sessions-per-client 2" in refusal
            assert "127.0.0.1" in refusal
        assert _wait_for(lambda: _plays(server.url)), "closing sessions did not free the cap"


def test_gymnasium_client_opens_a_new_session_when_its_session_expired() -> None:
    with serve("FrozenLake", port=0, unused_timeout_s=0.5) as server:
        remote = OpenEnvGymEnv(server.url)  # connects and asks the state: no episode yet
        try:
            (first,) = server.environments()
            assert _wait_for(lambda: first.closed)
            obs, info = remote.reset(seed=0)  # a fresh session on the same server
            assert "S" in obs and info["outcome"].value == "continue"
            remote.step('move(direction="sideways")')
            assert len(server.environments()) == 2
        finally:
            remote.close()


def test_defaults_expire_sessions_and_refuse_mcp_sessions() -> None:
    limits = SessionLimits()
    assert limits.unused_timeout_s == 60.0 and limits.idle_timeout_s == 900.0
    assert limits.max_mcp_sessions == 0 and limits.max_sessions_per_client is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_sessions": 0}, r"max_sessions \(--max-sessions\) must be >= 1"),
        ({"max_sessions": 2, "max_mcp_sessions": 2}, "must be >= 0 and below max_sessions"),
        ({"unused_timeout_s": 0.0}, "unused_timeout_s must be > 0"),
        ({"idle_timeout_s": -1.0}, "idle_timeout_s must be > 0"),
        ({"max_sessions_per_client": 0}, "max_sessions_per_client .* must be >= 1"),
    ],
)
def test_bad_limits_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SessionLimits(**kwargs)


def test_cli_refuses_bad_limits_and_takes_never(capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym_envs.cli import build_parser, main

    args = ["openenv", "serve", "FrozenLake", "--port", "0"]
    assert main([*args, "--max-sessions", "2", "--max-mcp-sessions", "2"]) == 2
    assert "must be >= 0 and below max_sessions" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--idle-timeout", "soon"])
    assert "--idle-timeout" in capsys.readouterr().err
    parsed = build_parser().parse_args([*args, "--idle-timeout", "never"])
    assert parsed.idle_timeout is None and parsed.unused_timeout == 60.0
    legacy = build_parser().parse_args([*args, "--session-timeout", "30"])
    assert legacy.idle_timeout == 30.0  # the old name of --idle-timeout
