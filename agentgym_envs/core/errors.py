"""Exceptions for programmer and configuration mistakes.

An agent's bad action is never an exception: it becomes an error observation and
``info["error"]``. The classes here are for code that calls the library wrongly.
Each message says what was expected, what was got, and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AgentGymError(Exception):
    """Base class of every error raised by agentgym-envs."""


class ConfigError(AgentGymError, ValueError):
    """A constructor argument, option or config value is invalid."""


class TaskNotFoundError(AgentGymError, KeyError):
    """A task id, split or difficulty does not exist in the task set."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class EnvNotFoundError(AgentGymError, KeyError):
    """An environment id is not registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class StateError(AgentGymError, ValueError):
    """A snapshot does not belong to this environment or is malformed."""


class ResetNeeded(AgentGymError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class SchemaError(AgentGymError, ValueError):
    """A tool's JSON schema uses a form the validator does not support."""


class HookNotImplementedError(AgentGymError, NotImplementedError):
    """An optional env hook (``oracle``, ``generate_task``) that an operation needs is
    not defined by the env class."""


class PluginError(ConfigError):
    """A third-party env package (an ``agentgym_envs.envs`` entry point) is broken."""


class PluginWarning(UserWarning):
    """A broken third-party env package was skipped; the other envs still work."""


class TransientToolError(AgentGymError, RuntimeError):
    """A tool backend failed in a way that a retry may fix (browser hiccup, busy sandbox).

    Tool handlers raise it; the env retries the call up to its retry budget and then
    ends the episode with ``Outcome.ENV_ERROR`` (never a policy failure).
    """


class ArgumentError(AgentGymError, ValueError):
    """A function was called with an argument out of its range, in the wrong form, or
    not fitting the others (two sequences of different lengths); not a config value
    (that is :class:`ConfigError`)."""


class ClosedError(AgentGymError, RuntimeError):
    """An object with resources (a policy, a model, a generation server) was used after
    ``close()``; make a new one."""


class CallContextError(AgentGymError, RuntimeError):
    """A method was called from where it cannot work, such as from the thread it would
    wait on (a deadlock)."""


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """Return the candidate nearest to ``name``, or None if nothing is close.

    A candidate is close when difflib finds it similar (ratio >= 0.5) or it differs from
    ``name`` only in case. Of the close ones, the one fewest edits away (insertions,
    deletions, substitutions, swaps of neighbours; case ignored) wins, the most similar
    on a tie: difflib's own pick alone can be far (``frozenlake-easy-test-1000047`` for
    ``frozenlake-easy-test-1000071`` where ``frozenlake-easy-test-1000001`` is one edit
    away), since many ids share most of their characters.
    """
    pool = list(dict.fromkeys(candidates))
    lowered = name.lower()
    same_case = [c for c in pool if c.lower() == lowered]
    similar = difflib.get_close_matches(name, pool, n=max(1, len(pool)), cutoff=0.5)
    best, best_edits = None, len(lowered) + max((len(c) for c in pool), default=0) + 1
    for candidate in same_case + similar:  # most similar first: it wins ties
        edits = _edits(lowered, candidate.lower(), best_edits - 1)
        if edits < best_edits:
            best, best_edits = candidate, edits
    return best


def _edits(a: str, b: str, limit: int) -> int:
    """The optimal-string-alignment distance between ``a`` and ``b`` (a swap of
    neighbours is one edit), or ``limit + 1`` once it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, row = row, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], before[j - 2] + 1)
        if min(row) > limit:
            return limit + 1
        before = prev
    return row[-1]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ' Did you mean X?' suffix for an error message, or '' if nothing is close."""
    match = closest(name, candidates)
    return f" Did you mean {match!r}?" if match else ""
