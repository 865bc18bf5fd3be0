"""Attacks on the env and generation servers: each is contained by the servers' defaults,
and each reports "got through" when the defence it probes is turned off."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.redteam import Attack, attacks_for, run_attack

ATTACKS = attacks_for("servers")
README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_documented_command_contains_every_server_attack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``agentgym redteam --family servers`` exactly as the README gives it."""
    from agentgym_envs.cli import main

    (line,) = [
        line.split("#")[0].split()
        for line in README.read_text().splitlines()
        if line.startswith("agentgym redteam --family servers")
    ]
    assert main(line[1:]) == 0
    out = capsys.readouterr().out
    for attack in ATTACKS:
        assert f"contained {attack.name}:" in out, out
    assert re.search(r"servers\s*│\s*4\s*│\s*4\s*│\s*0\s*│", out), out
    assert main(["redteam", "--family", "servers", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(a.name in listed for a in ATTACKS)


def _attack(name: str) -> Attack:
    return next(a for a in ATTACKS if a.name == f"servers/{name}")


class _FirstComeFirstServed:
    """The batcher's old queue: one row after another in arrival order."""

    def __init__(self) -> None:
        self._rows: deque[Any] = deque()
        self._ready = threading.Condition()
        self._stopped = False

    def put(self, client: Hashable, rows: Sequence[Any]) -> None:
        with self._ready:
            self._rows.extend(rows)
            self._ready.notify()

    def stop(self) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify_all()

    def get(self, timeout: float | None = None) -> Any:
        from agentgym_envs.serving.work_queue import QueueStopped

        with self._ready:
            if not self._rows and not self._stopped:
                self._ready.wait(timeout)
            if self._rows:
                return self._rows.popleft()
            if self._stopped:
                raise QueueStopped
            return None


def _undefended(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    from agentgym_envs.integrations import openenv_sessions
    from agentgym_envs.serving import engine as serve_engine
    from agentgym_envs.serving import http_app as serve_http

    def length_only(headers: Any, bound: str, allowed: Any, cap: int) -> int:
        return int(headers.get("Content-Length") or 0)

    if name == "openenv-lockout":
        monkeypatch.setattr(openenv_sessions.AgentGymEnvServer, "_admit", lambda self, c: None)
    elif name in ("serve-huge-body", "serve-csrf"):
        monkeypatch.setattr(serve_http, "check_post", length_only)
    else:
        monkeypatch.setattr(serve_engine, "FairQueue", _FirstComeFirstServed)


@pytest.mark.parametrize(
    ("name", "finding"),
    [
        ("openenv-lockout", "HTTP MCP sessions locked WebSocket clients out"),
        ("serve-huge-body", "was not refused before it was read"),
        ("serve-csrf", "cross-site text/plain POST /v1/load_weights was processed"),
        ("serve-unfair", "waited for all 16 rows"),
    ],
)
def test_attack_gets_through_when_its_defence_is_off(
    monkeypatch: pytest.MonkeyPatch, name: str, finding: str
) -> None:
    _undefended(monkeypatch, name)
    result = run_attack(_attack(name))
    assert not result.contained and finding in result.reason, result.reason


def test_the_huge_body_attack_also_catches_tokenising_text_that_cannot_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentgym_envs.serving import http_app as serve_http

    monkeypatch.setattr(serve_http, "_check_chars", lambda server, chars, param: None)
    result = run_attack(_attack("serve-huge-body"))
    assert not result.contained and "was tokenised 1 time(s)" in result.reason, result.reason
