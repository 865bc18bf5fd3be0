"""Attacks on the servers: ``agentgym openenv serve`` (the env server) and ``agentgym
serve`` (the generation server), each started by the attack on ``127.0.0.1`` with its
default settings, attacked over real HTTP and WebSocket, and stopped.

* ``servers/openenv-lockout``: three ``POST /mcp openenv/session/create`` against
  ``--max-sessions 3`` (sessions that no connection holds); contained when a WebSocket
  client still gets a session.
* ``servers/serve-huge-body``: a chat body announced at 15 MB, and a 4 MB one under the
  body cap whose text cannot fit the context; contained when the first is refused (413)
  without being read and the second is refused without being tokenised.
* ``servers/serve-csrf``: ``POST /v1/load_weights`` from loopback shaped as a browser
  would send it for a hostile page (``Origin: http://evil.example``, ``text/plain``;
  then a DNS-rebinding ``Host``); contained when neither reaches the weights.
* ``servers/serve-unfair``: a request for 16 choices, then a 4-token request; contained
  when the small one is answered first.

A server attack is no episode: :func:`~.core.run_attack` plays an empty one in the env
the lock-out server serves, and the attack itself runs as the ``breach`` check, which
returns why it got through, or None.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from agentgym_envs.integrations.extras import require
from agentgym_envs.redteam.core import Attack, AttackTrace, scripted

__all__ = ["attacks"]

ENV = "agentgym/FrozenLake-v0"
TIMEOUT_S = 120.0
"""The bound on any one answer the attacks wait for (a watchdog, not a speed target)."""
_EVIL = "http://evil.example"


# --------------------------------------------------------------------------- helpers


def _post(
    url: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _ws_refusal(base_url: str) -> str | None:
    """Open a WebSocket session and ask its state: the server's refusal, or None."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(base_url.replace("http://", "ws://", 1) + "/ws", open_timeout=TIMEOUT_S) as ws:
        with contextlib.suppress(ConnectionClosed):  # a refused session may be closed already
            ws.send(json.dumps({"type": "state"}))
        try:
            answer = json.loads(ws.recv(timeout=TIMEOUT_S))
        except ConnectionClosed as exc:
            return f"the connection was closed without an answer ({exc})"
        with contextlib.suppress(ConnectionClosed):
            ws.send(json.dumps({"type": "close"}))
    if answer.get("type") == "error":
        return str(answer.get("data", {}).get("message"))
    return None


@contextlib.contextmanager
def _generation_server(**kwargs: Any) -> Iterator[Any]:
    """``agentgym serve`` with the tiny random model on loopback, its defaults otherwise."""
    require("torch", "torch", "train", "the red-team attacks on agentgym serve")
    from agentgym_envs.serving.server import start_server

    server, _ = start_server("tiny", device="cpu", model_id="tiny", **kwargs)
    try:
        yield server
    finally:
        server.close()


def _url(server: Any, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1{path}"


def _chat(content: str, **extra: Any) -> bytes:
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(body).encode()


def _answering(attack: Callable[[], str | None]) -> Callable[[AttackTrace], str | None]:
    """The breach check: the attack's finding, or that the server stopped answering."""

    def breach(trace: AttackTrace) -> str | None:
        try:
            return attack()
        except OSError as exc:  # refused, reset, timed out: the server went down
            return f"the server stopped answering: {type(exc).__name__}: {exc}"

    return breach


# --------------------------------------------------------------------------- attacks


def openenv_lockout() -> str | None:
    """Take every slot with HTTP MCP sessions; a WebSocket client must still play."""
    require("openenv.core", "openenv-core", "openenv", "the red-team attack on OpenEnv")
    from agentgym_envs.integrations.openenv import serve

    with serve("FrozenLake", port=0, max_sessions=3) as server:
        create = {"jsonrpc": "2.0", "method": "openenv/session/create", "params": {}}
        taken = 0
        for i in range(3):
            _, answer = _post(f"{server.url}/mcp", json.dumps({**create, "id": i}).encode())
            taken += "result" in answer
        refusal = _ws_refusal(server.url)
        if refusal is not None:
            return f"{taken} HTTP MCP sessions locked WebSocket clients out: {refusal}"
    return None


def serve_huge_body() -> str | None:
    """A 15 MB body must be refused unread; text that cannot fit, untokenised."""
    with _generation_server() as server:
        server.socket_timeout_s = 5.0  # a server that awaits the body answers 408 soon
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 15000000\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", server.server_address[1]), TIMEOUT_S) as s:
            s.sendall(head.encode())
            status = s.recv(64).decode(errors="replace").split("\r\n")[0]
        if " 413 " not in f"{status} ":
            return f"a body announced at 15 MB was not refused before it was read: {status!r}"
        tokenised: list[int] = []
        prompt_ids = server.lm.prompt_ids

        def counted(*args: Any, **kwargs: Any) -> Any:
            tokenised.append(1)
            return prompt_ids(*args, **kwargs)

        server.lm.prompt_ids = counted
        code, answer = _post(_url(server, "/chat/completions"), _chat("word " * 800_000))
        error = answer.get("error") or {}
        if tokenised or code != 400 or error.get("code") != "context_length_exceeded":
            return (
                f"4 MB of text that cannot fit the context was tokenised {len(tokenised)} "
                f"time(s), answered {code}: {str(answer)[:200]}"
            )
    return None


def serve_csrf() -> str | None:
    """Browser-shaped loopback POSTs to /v1/load_weights must never load weights."""
    with _generation_server() as server:
        loads: list[str] = []

        def load_weights(path: str) -> int:  # what would have loaded, recorded instead
            loads.append(path)
            return int(server.weights_version)

        server.load_weights = load_weights
        port = server.server_address[1]
        shapes = {
            "cross-site text/plain": {"Origin": _EVIL, "Content-Type": "text/plain"},
            "DNS rebinding": {"Host": f"evil.example:{port}", "Origin": f"{_EVIL}:{port}"},
        }
        body = json.dumps({"path": "/tmp/attacker-weights"}).encode()
        for shape, headers in shapes.items():
            code, answer = _post(_url(server, "/load_weights"), body, headers)
            if loads or code not in (403, 415):
                return f"a {shape} POST /v1/load_weights was processed ({code}): {answer}"
    return None


def serve_unfair() -> str | None:
    """A 4-token request sent behind one for 16 choices must be answered first."""
    with _generation_server() as server:
        done: list[str] = []
        big = _chat("Tell me everything.", n=16, max_tokens=16, temperature=1.0, seed=1)
        small = _chat("Hi.", max_tokens=4, temperature=0)

        def ask(name: str, body: bytes) -> None:
            code, _ = _post(_url(server, "/chat/completions"), body)
            done.append(name if code == 200 else f"{name} failed ({code})")

        threads = {
            n: threading.Thread(target=ask, args=(n, b))
            for n, b in (("big", big), ("small", small))
        }
        with server.batcher.hold():  # both requests queue up, the big one first
            threads["big"].start()
            _wait(lambda: server.batcher.pending >= 16)
            threads["small"].start()
            _wait(lambda: server.batcher.pending >= 17)
        for thread in threads.values():
            thread.join(timeout=TIMEOUT_S)
        if done != ["small", "big"]:
            return f"answered in the order {done}: the 4-token request waited for all 16 rows"
    return None


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the attack's requests never reached the batcher")
        time.sleep(0.02)


def attacks() -> list[Attack]:
    found = [
        ("openenv-lockout", "session_lockout", openenv_lockout),
        ("serve-huge-body", "resource_exhaustion", serve_huge_body),
        ("serve-csrf", "cross_site_request", serve_csrf),
        ("serve-unfair", "unfair_scheduling", serve_unfair),
    ]
    return [
        Attack(
            name=f"servers/{name}",
            family="servers",
            hole=hole,
            env_id=ENV,
            script=scripted(),  # no episode: the attack is the breach check
            breach=_answering(attack),
        )
        for name, hole, attack in found
    ]
