"""Optional libraries of the integrations: a clear error, with the install command, where
one is missing; and the conversion of ``info`` to JSON that crosses a process boundary."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.core.unicode import valid_text


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


OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "torch": ("torch", "train"),
    "transformers": ("transformers", "train"),
    "gguf": ("gguf", "train"),
    "accelerate": ("accelerate", "train"),
    "yaml": ("pyyaml", "eval"),
    "matplotlib": ("matplotlib", "eval"),
    "datasets": ("datasets", "eval"),
    "playwright": ("playwright", "web"),
    "docker": ("docker", "sandbox"),
    "pytest": ("pytest", "sandbox"),
    "ray": ("ray", "dist"),
    # openenv-core brings pydantic, fastapi and uvicorn, which only the OpenEnv adapter uses
    "openenv": ("openenv-core", "openenv"),
    "pydantic": ("openenv-core", "openenv"),
    "fastapi": ("openenv-core", "openenv"),
    "uvicorn": ("openenv-core", "openenv"),
    "orjson": ("orjson", "openenv"),
    "skyrl_gym": ("skyrl-gym", "skyrl"),
    "trl": ("trl", "trl"),
    "verl": ("verl", "verl"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}
"""Top-level module -> (its distribution on PyPI, the extra of pyproject.toml that installs
it), for every third-party module that only an optional feature imports."""


def missing_extra(exc: ImportError, what: str) -> MissingExtraError | None:
    """The :class:`MissingExtraError` that ``exc`` stands for, or None.

    It stands for one when it says that a top-level module of :data:`OPTIONAL_MODULES` is
    not installed. Anything else (a broken install that lacks a submodule, a name missing
    from an installed module, a module no extra provides) is None: a bug to show as it is.

    Args:
        exc: the error of a failed import.
        what: the feature that needs the module, for the message.
    """
    name = exc.name or ""
    if not isinstance(exc, ModuleNotFoundError) or name not in OPTIONAL_MODULES:
        return None
    package, extra = OPTIONAL_MODULES[name]
    return MissingExtraError(
        f"{what} needs the {package} package (import {name!r} failed: {exc}); "
        f"fix: {install_hint(extra)}"
    )


@contextlib.contextmanager
def optional_imports(what: str) -> Iterator[None]:
    """Run the block; a module of an extra that it fails to import (see
    :func:`missing_extra`) raises :class:`MissingExtraError` instead, with the install
    command. Other errors pass unchanged.

    Args:
        what: the feature the block serves, for the message.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, what)
        if missing is None:
            raise
        raise missing from exc


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: enums become their values, mappings dicts with string
    keys, tuples and sets lists, numpy scalars Python numbers, dataclasses dicts; anything
    else that JSON cannot hold becomes its ``str``. Every string, keys included, is valid
    Unicode (``core.unicode``: a lone surrogate becomes U+FFFD), so UTF-8 can encode it."""
    if isinstance(value, str):
        return valid_text(value.value if isinstance(value, enum.Enum) else value)
    if value is None or isinstance(value, bool | int | float):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {valid_text(str(k)): jsonable(v) for k, v in value.items()}
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
    return valid_text(str(value))
