"""Parsing Python text: one lock around CPython's :mod:`ast`, and no warnings from it.

CPython 3.11 keeps the recursion depth of its C-to-Python syntax tree conversion in
module state shared by all threads; a garbage collection during one thread's
``ast.parse`` can switch to another thread's parse, and one of them then fails with
``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905). Envs are
stepped in threads (vector envs, the evaluator, the trainer's rollouts), and the action
parser and the RepoFix sandbox both parse Python: every ``ast.parse`` of this package
holds :data:`AST_LOCK` (re-entrant, so a locked helper may call another).

The text parsed is mostly the policy's (actions, files it wrote). Compiling text such as
``f(x=1if y else 2)`` or ``"\\d"`` makes CPython warn (``SyntaxWarning``,
``DeprecationWarning``), and a warning goes to the process's stderr, or becomes an
exception under ``-W error``: what a policy writes would fill the trainer's log and
change how the same text parses from one process to the next. :func:`parse` compiles
under a file name of its own and keeps a filter first in :data:`warnings.filters` that
ignores every warning from that name, and only from it.
"""

from __future__ import annotations

import ast
import re
import threading
import warnings
from typing import Literal, overload

AST_LOCK = threading.RLock()

FILENAME = "<agentgym-parse>"
"""The file name :func:`parse` compiles under (and the module its warnings name)."""

_FILTER = ("ignore", None, Warning, re.compile(re.escape(FILENAME) + r"\Z"), 0)


@overload
def parse(source: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse(source: str, mode: Literal["eval"]) -> ast.Expression: ...
def parse(source: str, mode: Literal["exec", "eval"] = "exec") -> ast.Module | ast.Expression:
    """``ast.parse(source, mode=mode)`` under :data:`AST_LOCK`, without warnings.

    Raises:
        SyntaxError, ValueError: ``source`` is not Python (some 3.11 releases raise
            ValueError for null bytes).
    """
    with AST_LOCK:
        if warnings.filters[:1] != [_FILTER]:  # added, or moved back to the front
            warnings.filterwarnings("ignore", category=Warning, module=_FILTER[3].pattern)
        tree = ast.parse(source, filename=FILENAME, mode=mode)
    assert isinstance(tree, ast.Module | ast.Expression)
    return tree


__all__ = ["AST_LOCK", "FILENAME", "parse"]
