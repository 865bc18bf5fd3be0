"""The table of registered envs. Importing :mod:`agentgym_envs` registers every one.

Entry points are strings, so registering imports no env module: ``gym.make`` imports
the family it needs, when it needs it.

Each built-in family declares what the shared layers need of it (Ray resources, its
benchmark, its attacks, its test marks ...) in one record,
:class:`~agentgym_envs.core.family.Family`, ``FAMILY`` in its package:
:data:`FAMILY_RECORDS` names them and :func:`families` imports them on first use. A new
built-in family adds its package, its entries to :data:`ENVS` and its record to
:data:`FAMILY_RECORDS` (docs/add_an_env.md).

Third-party packages add envs through the ``agentgym_envs.envs`` entry-point group
(:data:`ENTRY_POINT_GROUP`; docs/add_an_env.md): each entry point names an
:class:`EnvEntry` (or a list of them). A broken plugin is skipped with a
:class:`~agentgym_envs.core.errors.PluginWarning` that names it and the fix; the other
envs keep working, and asking for one of its envs raises an error that says why.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import (
    EnvNotFoundError,
    PluginError,
    PluginWarning,
    did_you_mean,
)
from agentgym_envs.core.family import Family, resolve

NAMESPACE = "agentgym"
ENTRY_POINT_GROUP = "agentgym_envs.envs"
"""The entry-point group through which third-party packages register envs."""


@dataclass(frozen=True)
class EnvEntry:
    """One registered env: ``agentgym/<name>-v<version>``."""

    name: str
    version: str
    entry_point: str
    family: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def id(self) -> str:
        return f"{NAMESPACE}/{self.name}-v{self.version}"


ENVS: tuple[EnvEntry, ...] = (
    EnvEntry(
        "Sokoban",
        "0",
        "agentgym_envs.games.sokoban:SokobanEnv",
        "games",
        description="push boxes onto targets in generated rooms",
    ),
    EnvEntry(
        "FrozenLake",
        "0",
        "agentgym_envs.games.frozenlake:FrozenLakeEnv",
        "games",
        description="cross a frozen lake to the goal without falling into a hole",
    ),
    EnvEntry(
        "FrozenLakeSlippery",
        "0",
        "agentgym_envs.games.frozenlake:FrozenLakeEnv",
        "games",
        kwargs={"is_slippery": True},
        description="FrozenLake where the ice makes you slide sideways at random",
    ),
    EnvEntry(
        "Dungeon",
        "0",
        "agentgym_envs.games.dungeon:DungeonEnv",
        "games",
        description="a partially observable text adventure with keys, doors and traps",
    ),
    EnvEntry(
        "Retail",
        "1",
        "agentgym_envs.business.retail:RetailEnv",
        "business",
        description="retail customer service on SQLite with a simulated user and a policy",
    ),
    EnvEntry(
        "Calendar",
        "2",
        "agentgym_envs.business.calendar:CalendarEnv",
        "business",
        description="calendar assistant across time zones: meetings, rooms, RSVPs under a policy",
    ),
    EnvEntry(
        "RepoFix",
        "1",
        "agentgym_envs.repofix.env:RepoFixEnv",
        "sandbox",
        description="fix injected bugs in a Python repository in a sandbox; hidden tests grade",
    ),
    EnvEntry(
        "RepoFixReal",
        "0",
        "agentgym_envs.repofix.real:RepoFixRealEnv",
        "sandbox",
        description="fix injected bugs in real open-source Python projects; their tests grade",
    ),
    EnvEntry(
        "WebShop",
        "2",
        "agentgym_envs.web.webshop:WebShopEnv",
        "web",
        description="shop on a local website in headless Chromium; the shop's database grades",
    ),
)


FAMILY_RECORDS: tuple[str, ...] = (
    "agentgym_envs.games:FAMILY",
    "agentgym_envs.business:FAMILY",
    "agentgym_envs.repofix:FAMILY",
    "agentgym_envs.web:FAMILY",
)
"""The record of each built-in family, as ``"package:FAMILY"``, in the order of :data:`ENVS`."""


@functools.cache
def families() -> tuple[Family, ...]:
    """The built-in families' records (:data:`FAMILY_RECORDS`), imported on first call so
    that ``import agentgym_envs`` loads no family package."""
    records = tuple(resolve(ref) for ref in FAMILY_RECORDS)
    wrong = [
        ref for ref, f in zip(FAMILY_RECORDS, records, strict=True) if not isinstance(f, Family)
    ]
    assert not wrong, f"not Family records: {wrong}"
    return records


def family(name: str) -> Family | None:
    """The record of the built-in family ``name`` (an ``EnvEntry.family``), or None for a
    family no record declares (a plugin's)."""
    return next((f for f in families() if f.name == name), None)


def register_all() -> None:
    """Register every env of :data:`ENVS`, then every plugin's, with Gymnasium (idempotent)."""
    for entry in ENVS:
        _register(entry)
    if _PLUGINS is None:
        load_plugins()


def _register(entry: EnvEntry) -> None:
    if entry.id in gym.registry:
        return
    gym.register(
        id=entry.id,
        entry_point=entry.entry_point,
        kwargs=dict(entry.kwargs),
        disable_env_checker=False,
        order_enforce=True,
        additional_wrappers=(ResetRecovery.wrapper_spec(),),
    )


class ResetRecovery(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Keeps an env usable after its first ``reset`` raised (say, a typo in an option).

    ``gym.make`` wraps every env in Gymnasium's ``PassiveEnvChecker``, which marks its
    one-time reset check as done *before* the env's ``reset`` runs: when that first
    reset raises, the checker keeps no reset data, and every later ``step`` fails with
    ``TypeError: cannot unpack non-iterable NoneType object``. ``gym.make`` adds this
    wrapper outermost to every agentgym env; until a reset succeeds, a reset that
    raises re-arms the checkers below it, so the next reset is checked (and recorded)
    as the first. It changes nothing else and costs nothing after the first success.
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._reset_once = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env; a failure before any success re-arms the reset checks."""
        if self._reset_once:
            return self.env.reset(seed=seed, options=options)
        try:
            result = self.env.reset(seed=seed, options=options)
        except BaseException:
            for checker in _checkers(self.env):
                checker.checked_reset = False
            raise
        self._reset_once = True
        return result


def _checkers(env: gym.Env[Any, Any]) -> list[gym.wrappers.PassiveEnvChecker[Any, Any]]:
    """The Gymnasium passive env checkers down the wrapper chain of ``env``."""
    found = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.PassiveEnvChecker):
            found.append(env)
        env = env.env
    return found


def find(env_id: str) -> EnvEntry:
    """The entry for an id (``agentgym/Sokoban-v0``) or a bare name (``Sokoban``), built-in
    or from a plugin.

    Raises:
        EnvNotFoundError: naming the closest registered id, and any plugin that failed
            to load (its env may be the one asked for).
    """
    entries = all_entries()
    for entry in entries:
        if env_id in (entry.id, entry.name, f"{entry.name}-v{entry.version}"):
            return entry
    ids = [e.id for e in entries]
    hint = did_you_mean(env_id, ids + [e.name for e in entries])
    errors = [p.error for p in plugins() if p.error]
    broken = f" Plugins that failed to load: {' '.join(errors)}" if errors else ""
    raise EnvNotFoundError(
        f"no env {env_id!r} is registered.{hint} Registered: {', '.join(ids)} "
        f"(`agentgym list` shows them).{broken}"
    )


# -- third-party envs (entry points) ----------------------------------------------------


@dataclass(frozen=True)
class Plugin:
    """One entry point of :data:`ENTRY_POINT_GROUP` and what loading it gave.

    Attributes:
        name: the entry point's name.
        value: what it points at, ``module:attribute``.
        distribution: the installed distribution that declares it.
        entries: the envs it registered (empty if it failed).
        error: why it was skipped, with the fix, or None.
    """

    name: str
    value: str
    distribution: str
    entries: tuple[EnvEntry, ...] = ()
    error: str | None = None

    @property
    def label(self) -> str:
        return f"plugin {self.name!r} ({self.value}, from distribution {self.distribution!r})"


_PLUGINS: tuple[Plugin, ...] | None = None


def load_plugins() -> tuple[Plugin, ...]:
    """Load and register the envs of every installed plugin (once per process).

    A plugin that cannot be imported, points at something other than ``EnvEntry``
    objects, or reuses a registered id is skipped: a :class:`PluginWarning` names it and
    the fix, and :attr:`Plugin.error` keeps the message.
    """
    global _PLUGINS
    if _PLUGINS is not None:
        return _PLUGINS
    _PLUGINS = ()  # a plugin that imports agentgym_envs while loading must not recurse
    from importlib.metadata import entry_points

    taken = {e.id: "agentgym-envs" for e in ENVS}
    loaded = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        plugin = _load_plugin(ep, taken)
        if plugin.error:
            warnings.warn(plugin.error, PluginWarning, stacklevel=2)
        loaded.append(plugin)
    _PLUGINS = tuple(loaded)
    return _PLUGINS


def plugins() -> tuple[Plugin, ...]:
    """The plugins found at import, loaded or skipped."""
    return load_plugins()


def all_entries() -> tuple[EnvEntry, ...]:
    """The built-in envs of :data:`ENVS`, then those of the plugins that loaded."""
    return ENVS + tuple(e for p in plugins() for e in p.entries)


def plugin_of(entry: EnvEntry) -> Plugin | None:
    """The plugin that registered ``entry``, or None for a built-in env."""
    return next((p for p in plugins() if entry in p.entries), None)


def env_class(entry: EnvEntry) -> Any:
    """Import the env class of ``entry``.

    Raises:
        PluginError: a plugin's ``entry_point`` cannot be imported (naming the plugin).
    """
    from gymnasium.envs.registration import load_env_creator

    try:
        return load_env_creator(entry.entry_point)
    except Exception as exc:  # a plugin's module may raise anything on import
        plugin = plugin_of(entry)
        if plugin is None:
            raise
        raise PluginError(
            f"{entry.id} comes from {plugin.label}, and its entry_point "
            f"{entry.entry_point!r} cannot be imported ({type(exc).__name__}: {exc}). Fix: "
            "point EnvEntry.entry_point at 'module:Class' of an importable module, or fix "
            f"the import error, then reinstall {plugin.distribution!r}"
        ) from exc


def _load_plugin(ep: Any, taken: dict[str, str]) -> Plugin:
    dist = ep.dist.name if ep.dist is not None else "unknown"
    plugin = Plugin(ep.name, ep.value, dist)

    def skipped(problem: str, fix: str) -> Plugin:
        uninstall = f"; `pip uninstall {dist}` removes the plugin" if ep.dist else ""
        message = (
            f"{plugin.label} was skipped: {problem}. Fix: {fix}. The other envs are "
            f"unaffected{uninstall}."
        )
        return Plugin(ep.name, ep.value, dist, error=message)

    try:
        obj = ep.load()
    except Exception as exc:  # a plugin's module may raise anything on import
        return skipped(
            f"importing it raised {type(exc).__name__}: {exc}",
            "fix that error in the plugin (or the entry point's 'module:attribute') and "
            "reinstall it",
        )
    entries = tuple(obj) if isinstance(obj, list | tuple) else (obj,)
    wrong = [type(e).__name__ for e in entries if not isinstance(e, EnvEntry)]
    if wrong or not entries:
        return skipped(
            f"it points at {wrong or 'an empty list'}, expected an EnvEntry or a list of them",
            "point the entry point at `EnvEntry(name, version, 'module:Class', family)` "
            "objects from agentgym_envs.registration (docs/add_an_env.md)",
        )
    ours: dict[str, str] = {}
    for entry in entries:
        owner = taken.get(entry.id) or ours.get(entry.id)
        if owner is not None:
            return skipped(
                f"env id {entry.id!r} is already registered by {owner}",
                "give the env another EnvEntry name (and the class the same name)",
            )
        if not _valid_id(entry):
            return skipped(
                f"{entry.id!r} is not a valid env id",
                "use a name of letters, digits and '_', and a version of digits ('0')",
            )
        ours[entry.id] = plugin.label
    taken.update(ours)
    for entry in entries:
        _register(entry)
    return Plugin(ep.name, ep.value, dist, entries=entries)


def _valid_id(entry: EnvEntry) -> bool:
    """Whether Gymnasium reads ``entry.id`` back as (namespace, name, version)."""
    from gymnasium.envs.registration import parse_env_id

    if not entry.version.isdigit():
        return False
    try:
        return parse_env_id(entry.id) == (NAMESPACE, entry.name, int(entry.version))
    except gym.error.Error:  # a malformed id
        return False
