"""Build wrapper stacks from plain specs (evaluation suites in YAML use these).

A spec is a wrapper name (``"loop_detection"``) or a one-key mapping from a name to
its keyword arguments (``{"obs_noise": {"rate": 0.1}}``). Specs apply in order, so the
first is innermost.

Faults are no wrapper: the env injects them inside its tool calls, configured by its
``faults`` argument (``env_kwargs: {faults: {...}}`` in a suite entry).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.faults import FaultKind
from agentgym_envs.wrappers.injection import PromptInjection
from agentgym_envs.wrappers.loops import LoopDetection
from agentgym_envs.wrappers.noise import ObservationNoise
from agentgym_envs.wrappers.tool_ood import ToolOOD

WRAPPERS: dict[str, type[gym.Wrapper[Any, Any, Any, Any]]] = {
    "tool_ood": ToolOOD,
    "obs_noise": ObservationNoise,
    "prompt_injection": PromptInjection,
    "loop_detection": LoopDetection,
}
"""Wrapper classes by spec name. Each is built as ``cls(env, **kwargs)``."""


def apply_wrappers(
    env: gym.Env[Any, Any], specs: Sequence[str | Mapping[str, Mapping[str, Any] | None]]
) -> gym.Env[Any, Any]:
    """Wrap ``env`` with each spec in turn (the first spec is innermost).

    Args:
        env: the env to wrap (usually from ``gym.make``).
        specs: wrapper names or ``{name: {kwarg: value}}`` mappings.

    Returns:
        The wrapped env (``env`` itself for no specs).

    Raises:
        ConfigError: an unknown wrapper name or keyword argument (with the closest
            match), a malformed spec, or a value the wrapper rejects.
    """
    if isinstance(specs, str | Mapping):
        specs = [specs]
    for spec in specs:
        name, kwargs = _parse(spec)
        cls = WRAPPERS[name]
        _check_kwargs(name, cls, kwargs)
        env = cls(env, **kwargs)
    return env


def _parse(spec: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        name, kwargs = spec, {}
    elif isinstance(spec, Mapping) and len(spec) == 1:
        name, raw = next(iter(spec.items()))
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigError(
                f"wrapper {name!r}: its options must be a mapping of keyword arguments, "
                f"got {raw!r}; write {{{name!r}: {{'rate': 0.1}}}}"
            )
        kwargs = dict(raw or {})
    else:
        raise ConfigError(
            "a wrapper spec is a name or a one-key mapping {name: {kwargs}}, for example "
            f"'loop_detection' or {{'obs_noise': {{'rate': 0.1}}}}; got {spec!r}"
        )
    if name == "faults":
        # what the removed FaultInjection wrapper meant, defaults spelled out (the env's
        # own defaults differ: no faults, and only core.faults.DEFAULT_KINDS)
        same = {"rate": 0.1, "kinds": [k.value for k in FaultKind], **kwargs}
        raise ConfigError(
            "faults are not a wrapper: the env injects them, configured by its faults "
            f"argument; drop this spec and write env_kwargs: {{faults: {same}}} in the suite "
            f"entry, or gym.make(env_id, faults={same})"
        )
    if name not in WRAPPERS:
        known = sorted(WRAPPERS)
        raise ConfigError(
            f"unknown wrapper {name!r}.{did_you_mean(str(name), known)} Known wrappers: {known}"
        )
    return name, kwargs


def _check_kwargs(name: str, cls: type, kwargs: Mapping[str, Any]) -> None:
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return  # the wrapper takes any keyword and checks them itself
    allowed = [
        p
        for p, spec in params.items()
        if p != "env" and spec.kind is not inspect.Parameter.VAR_POSITIONAL
    ]
    for key in kwargs:
        if key not in allowed:
            raise ConfigError(
                f"wrapper {name!r} has no option {key!r}.{did_you_mean(str(key), allowed)} "
                f"Options: {allowed}"
            )
