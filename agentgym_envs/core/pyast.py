"""One lock around CPython's :mod:`ast` for every thread of the process.

CPython 3.11 keeps the recursion depth of its C-to-Python syntax tree conversion in
module state shared by all threads; a garbage collection during one thread's
``ast.parse`` can switch to another thread's parse, and one of them then fails with
``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905). Envs are
stepped in threads (vector envs, the evaluator, the trainer's rollouts), and the action
parser and the RepoFix sandbox both parse Python: every ``ast.parse`` of this package
holds :data:`AST_LOCK` (re-entrant, so a locked helper may call another).
"""

from __future__ import annotations

import threading

AST_LOCK = threading.RLock()


__all__ = ["AST_LOCK"]
