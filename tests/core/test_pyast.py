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


# text CPython warns about while compiling it: an int touching a keyword
# (SyntaxWarning) and an invalid string escape (DeprecationWarning on 3.11)
_WARNING_TEXTS = ("move(direction=1if 1 else 2)", 'move(direction="\\d")')


@pytest.mark.parametrize("text", _WARNING_TEXTS)
def test_policy_text_raises_no_warning(text: str) -> None:
    """An action CPython warns about writes nothing to the process's stderr: a policy
    that sends it every step cannot fill the trainer's log."""
    import warnings

    from agentgym_envs.policies import chat
    from agentgym_envs.sandbox import workspace

    parser = ActionParser(SokobanEnv.toolset, accepts_messages=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning recorded, none deduplicated
        parser.parse(text)
        chat._call_from_python(text, {"move": ["direction"]})
        workspace.code_of(f"x = {text}\n")
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("text", _WARNING_TEXTS)
def test_policy_text_parses_the_same_under_warnings_as_errors(text: str) -> None:
    """Under ``-W error`` the warning would be a SyntaxError: the same text (an action,
    a file the policy wrote) must not read one way in one process and another way in
    the next."""
    import warnings

    from agentgym_envs.policies import chat
    from agentgym_envs.sandbox import workspace

    parser = ActionParser(SokobanEnv.toolset, accepts_messages=False)

    def read() -> tuple[Any, ...]:
        return (
            parser.parse(text),
            chat._call_from_python(text, {"move": ["direction"]}),
            workspace.code_of(f"x = {text}\n"),
        )

    plain = read()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strict = read()
    assert strict == plain
    assert plain[2] is not None  # the file is Python: its code is compared, not dropped
