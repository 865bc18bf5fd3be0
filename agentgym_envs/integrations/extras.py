"""Optional libraries of the integrations: a clear error, with the install command, where
one is missing; and the conversion of ``info`` to JSON that crosses a process boundary."""

from __future__ import annotations

import dataclasses
import enum
import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from agentgym_envs.core.errors import AgentGymError


class MissingExtraError(AgentGymError, ImportError):
    """An integration needs a library that is not installed (an optional extra)."""


def install_hint(extra: str) -> str:
    """The exact commands that install ``extra``, brackets quoted for the shell."""
    return (
        f"pip install 'agentgym-envs[{extra}]' (from a source checkout: "
        f"pip install -e '.[{extra}]', or `make install`, which installs the extras the tests use)"
    )


def require(module: str, package: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` that says how to install it.

    Args:
        module: the module to import, e.g. ``"openenv.core"``.
        package: its distribution on PyPI, e.g. ``"openenv-core"``.
        extra: our optional extra that installs it, e.g. ``"openenv"``.
        what: the feature that needs it, for the message.

    Returns:
        The imported module.

    Raises:
        MissingExtraError: the module cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{what} needs the {package} package (import {module!r} failed: {exc}); "
            f"fix: {install_hint(extra)}"
        ) from exc


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: enums become their values, mappings dicts with string
    keys, tuples and sets lists, numpy scalars Python numbers, dataclasses dicts; anything
    else that JSON cannot hold becomes its ``str``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(value)
