"""What a built-in env family declares for the shared layers: one :class:`Family` record.

Each family package (``agentgym_envs/games``, ``business``, ``repofix``, ``web``) defines
``FAMILY = Family(...)`` in its ``__init__``, and :mod:`agentgym_envs.registration` holds
the records. The shared layers (the Ray pool's resources, ``agentgym bench``, the red
team, the prompt-injection wrapper, the tests' marks, the env actor's shutdown) iterate
the records and never name a family. References to family code are ``"module:attr"``
strings, imported by :func:`resolve` only when a shared layer needs them, so a record
costs nothing to import: ``import agentgym_envs`` loads no torch, Playwright or docker.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentgym_envs.core.errors import ConfigError

_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class FamilyCost:
    """What an env family costs in one Ray env actor: a fixed part plus a part per env.

    Attributes:
        cpus_per_env: CPU share per hosted env (the text games are pure Python and
            mostly wait on the policy; a sandbox runs a process per tool call).
        memory_mib_base: the actor process itself (and the shared browser for web).
        memory_mib_per_env: each live episode.
    """

    cpus_per_env: float
    memory_mib_base: int
    memory_mib_per_env: int

    def __post_init__(self) -> None:
        if self.cpus_per_env < 0 or self.memory_mib_base < 0 or self.memory_mib_per_env < 0:
            raise ConfigError(
                f"a family's cost must be >= 0, got {self}; e.g. "
                "FamilyCost(cpus_per_env=0.5, memory_mib_base=200, memory_mib_per_env=50)"
            )


@dataclass(frozen=True)
class Family:
    """One built-in env family, as the shared layers see it.

    Attributes:
        name: the family's name, as its envs' ``EnvEntry.family`` spells it.
        package: the package that holds the family's code (``agentgym_envs.games``).
        cost: what one Ray env actor of the family asks for
            (:func:`agentgym_envs.distributed.resources.default_resources`).
        bench: ``"module:function"`` measuring one env its own way for ``agentgym
            bench``, ``f(entry) -> result`` (a dataclass with ``to_json()``); ``""``: the
            generic step loop (:func:`agentgym_envs.eval.bench.bench_env`).
        bench_table: ``"module:function"`` printing a ``bench`` result,
            ``f(result, console)``; set exactly when ``bench`` is.
        bench_machinery: its envs are cheap, pure-Python oracle episodes: ``agentgym
            bench --eval`` plays them by default, and the benchmarks of the shared
            machinery (the trajectory store, the Ray pool's per-step overhead) play the
            first of them.
        bench_ray: env names that ``agentgym bench --ray`` scales over 1, 2 and 4
            actors by default.
        redteam: ``"module:function"`` returning the family's hostile policies, a list
            of :class:`agentgym_envs.redteam.Attack` (``agentgym redteam --family
            <name>``); ``""``: none.
        injection: env name (``env.name``) -> ``"module:function"`` of its
            prompt-injection attack, an
            :data:`~agentgym_envs.wrappers.attacks.AttackFactory`; envs not named get a
            generic call of one of their tools.
        test_marks: the pytest marks every per-env test of the family carries (declared
            in ``pyproject.toml``), e.g. ``("browser",)``.
        actor_close: ``"module:function"`` an env actor calls, with no argument, after
            closing its envs (to stop what its envs share, such as a browser); ``""``:
            nothing. It must import nothing heavy.
        endpoint_kwargs: constructor arguments that, when given, make the env's steps
            wait on a model endpoint (the business envs' ``user_base_url``, an LLM user):
            a server never runs such an env's sessions on its event loop.
    """

    name: str
    package: str
    cost: FamilyCost
    bench: str = ""
    bench_table: str = ""
    bench_machinery: bool = False
    bench_ray: tuple[str, ...] = ()
    redteam: str = ""
    injection: Mapping[str, str] = field(default_factory=dict)
    test_marks: tuple[str, ...] = ()
    actor_close: str = ""
    endpoint_kwargs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or not self.package:
            raise ConfigError(
                f"a Family needs a name and a package, got name={self.name!r}, "
                f"package={self.package!r}; e.g. Family('games', 'agentgym_envs.games', cost)"
            )
        if bool(self.bench) != bool(self.bench_table):
            raise ConfigError(
                f"family {self.name!r} sets bench={self.bench!r} but "
                f"bench_table={self.bench_table!r}; give both (the measure and its table) "
                "or neither"
            )
        for what, ref in self.references().items():
            if not _REF.match(ref):
                raise ConfigError(
                    f"family {self.name!r}: {what} must be 'module:attribute', got {ref!r}"
                )
        object.__setattr__(self, "injection", MappingProxyType(dict(self.injection)))

    def references(self) -> dict[str, str]:
        """Every ``"module:attr"`` the record names, by field (``injection[Retail]``)."""
        refs = {
            "bench": self.bench,
            "bench_table": self.bench_table,
            "redteam": self.redteam,
            "actor_close": self.actor_close,
        }
        refs.update({f"injection[{env}]": ref for env, ref in self.injection.items()})
        return {what: ref for what, ref in refs.items() if ref}


def resolve(ref: str) -> Any:
    """Import ``"module:attr"`` and return the attribute.

    Raises:
        ConfigError: ``ref`` is not of that form, or names nothing.
    """
    module, _, attr = ref.partition(":")
    if not _REF.match(ref):
        raise ConfigError(f"expected 'module:attribute', got {ref!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except AttributeError:
        raise ConfigError(f"{ref!r}: module {module!r} has no attribute {attr!r}") from None


__all__ = ["Family", "FamilyCost", "resolve"]
