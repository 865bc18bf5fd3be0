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
    """Return the candidate most similar to ``name``, or None if nothing is close."""
    pool = list(candidates)
    matches = difflib.get_close_matches(name, pool, n=1, cutoff=0.5)
    if matches:
        return matches[0]
    lowered = {c.lower(): c for c in pool}
    return lowered.get(name.lower())


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ' Did you mean X?' suffix for an error message, or '' if nothing is close."""
    match = closest(name, candidates)
    return f" Did you mean {match!r}?" if match else ""
