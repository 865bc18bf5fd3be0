"""Every ast.parse of the package holds the one process-wide lock (CPython gh-106905)."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from agentgym_envs.core import pyast
from agentgym_envs.core.actions import ActionParser
from agentgym_envs.games.sokoban import SokobanEnv


def _held() -> bool:
    """Whether this thread holds the lock (an RLock: acquiring it non-blocking from
    another thread would fail, from this one it succeeds and is released again)."""
    return pyast.AST_LOCK._is_owned()  # type: ignore[attr-defined]


def test_action_parser_and_sandbox_parse_under_one_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym_envs.policies import chat
    from agentgym_envs.sandbox import workspace

    assert workspace.AST_LOCK is pyast.AST_LOCK
    seen: list[bool] = []
    real = ast.parse

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(_held())
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", spy)
    parser = ActionParser(SokobanEnv.toolset, accepts_messages=False)
    parser.parse('move(direction="up")')
    chat._call_from_python('move(direction="up")', {"move": ["direction"]})
    workspace.code_of("x = 1\n")
    assert seen and all(seen), seen
