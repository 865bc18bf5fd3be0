"""The Python the sandbox runs: an interpreter, its standard library and pytest, nothing else.

The sandbox must never see the task data: the tasks (with their gold ``solution``) and
the fixture repositories (with their hidden tests) sit inside the installed package
(``site-packages/agentgym_envs/_data``, also for an editable install) or in the
repository checkout. So the sandbox never mounts the library's environment. It gets a
*runtime*: a tiny virtual environment built once per host (``pyvenv.cfg`` and copies
of pytest and the distributions it needs, plus the results plugin), whose ``python``
links to the base interpreter. Backends mount the runtime at :data:`SANDBOX_PREFIX`,
the interpreter and its standard library at their host paths, and cover every
third-party package folder (``site-packages``, ``dist-packages``) and every place that
holds task data with an empty read-only folder.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.metadata as metadata
import os
import shutil
import sys
import sysconfig
import tempfile
from importlib import resources
from pathlib import Path

from agentgym_envs.core.errors import ConfigError

SANDBOX_PREFIX = "/agentgym/python"  # where backends mount the runtime
SANDBOX_PYTHON = f"{SANDBOX_PREFIX}/bin/python"
PLUGIN = "agentgym_results"  # the results plugin's module name inside the runtime
PROBE = "agentgym_probe"  # the observed-calls harness (probe_harness.py) inside the runtime
# runtime module name -> the file of this package it is copied from
_OWN_MODULES = {PLUGIN: "results_plugin.py", PROBE: "probe_harness.py"}
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
_SYSTEM = ("/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/")


_INSTALL = (
    "install RepoFix's extra: pip install 'agentgym-envs[sandbox]' (from a source checkout: "
    "pip install -e '.[sandbox]')"
)


def _distributions(root: str = "pytest") -> list[metadata.Distribution]:
    """``root`` and every distribution it requires on this Python, in a stable order."""
    try:  # declared by the sandbox extra (pytest requires it too): PEP 508 markers
        from packaging.requirements import Requirement
    except ImportError as exc:
        raise ConfigError(f"the sandbox runtime needs 'packaging' ({exc}); {_INSTALL}") from exc

    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as exc:
            raise ConfigError(
                f"the sandbox runtime needs {name!r}, which is not installed; {_INSTALL}"
            ) from exc
        seen[key] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [seen[k] for k in sorted(seen)]


def _fill(target: Path, home: str, python: str) -> None:
    """Write a runtime into the empty folder ``target``."""
    site = target / "lib" / f"python{VERSION}" / "site-packages"
    site.mkdir(parents=True)
    (target / "bin").mkdir()
    for name in ("python", "python3", f"python{VERSION}"):
        os.symlink(python, target / "bin" / name)
    (target / "pyvenv.cfg").write_text(
        f"home = {home}\ninclude-system-site-packages = false\nversion = {VERSION}\n"
    )
    for dist in _distributions():
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if file.parts[0] == ".." or "__pycache__" in file.parts or not source.is_file():
                continue  # scripts in bin/, caches
            dest = site / file
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
    for module, own in _OWN_MODULES.items():
        shutil.copyfile(Path(__file__).with_name(own), site / f"{module}.py")
    for folder, _, files in os.walk(target):
        os.chmod(folder, 0o755)  # readable by the sandbox's unprivileged user
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):  # chmod follows links: never touch the interpreter
                os.chmod(path, 0o644)


@functools.cache
def runtime_dir(python: str | None = None) -> Path:
    """The runtime for the interpreter ``python`` (default: this process's base
    interpreter), built once per host in the temp folder and shared by processes.

    The folder's name hashes its inputs (interpreter, plugin source, package versions),
    so a changed plugin or pytest gets a new runtime; it is built under a private name
    and renamed into place, so a reader never sees half a runtime.
    """
    exe = python or os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    digest = hashlib.sha256(exe.encode())
    for source in _OWN_MODULES.values():
        digest.update(b"\0" + Path(__file__).with_name(source).read_bytes())
    for dist in _distributions():
        digest.update(f"{dist.metadata['Name']}=={dist.version}\0".encode())
    final = Path(tempfile.gettempdir()) / f"agentgym-runtime-{digest.hexdigest()[:16]}"
    if (final / "pyvenv.cfg").is_file():
        return final
    build = Path(tempfile.mkdtemp(prefix="agentgym-runtime-build-"))
    try:
        _fill(build, os.path.dirname(exe), exe)
        try:
            build.rename(final)
        except OSError:  # another process won the race: use its copy
            if not (final / "pyvenv.cfg").is_file():
                raise
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return final


def interpreter_paths() -> list[str]:
    """Host paths the base interpreter needs to start: its executable, ``libpython``
    and its standard library. The mounting backend hides the standard library's
    ``site-packages`` again (see :func:`hidden_paths`)."""
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    paths = [exe]
    libdir, ldlibrary = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    if libdir and ldlibrary:
        paths += sorted(glob.glob(os.path.join(libdir, ldlibrary) + "*"))
    paths.append(os.path.realpath(sysconfig.get_paths()["stdlib"]))
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def fixtures_root() -> Path:
    """``fixtures/repos`` inside the installed package, or in a source checkout."""
    packaged = Path(str(resources.files("agentgym_envs"))) / "_data" / "fixtures" / "repos"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "fixtures" / "repos"
    if checkout.is_dir():
        return checkout
    raise ConfigError(f"no fixture repositories at {packaged} or {checkout}; reinstall the package")


def data_locations() -> list[str]:
    """Every host folder that holds task data: the installed package (its ``_data``),
    the task and fixture roots in use, for a checkout its ``tasks``/``fixtures``, and
    agentgym's cache (the real projects' tests and recorded expectations)."""
    from agentgym_envs.core.tasks import tasks_root

    package = Path(__file__).resolve().parents[1]
    found = [package, package.parent / "tasks", package.parent / "fixtures"]
    for root in (tasks_root, fixtures_root):
        try:
            found.append(root())
        except ConfigError:
            continue
    from agentgym_envs.llm.models import cache_root

    found.append(cache_root())  # real projects' tests, baselines and recorded expectations
    for spec in (Path(p) / "agentgym_envs" for p in sys.path if p):
        found.append(spec)
    return sorted({os.path.realpath(p) for p in found if p.exists()})


def hidden_paths(mounted: list[str]) -> list[str]:
    """Folders under the ``mounted`` host paths the sandbox must see as empty: every
    third-party package folder (the runtime brings pytest), the wheels pip bundles (they
    vendor copies of other projects) and every place holding task data. Deepest last,
    so a backend can mount them in this order."""
    patterns = ("lib/python3*/site-packages", "lib/python3*/dist-packages",
                "lib/python3/dist-packages", "local/lib/python3*/site-packages",
                "local/lib/python3*/dist-packages", "site-packages", "dist-packages",
                "python3*/site-packages", "python3*/dist-packages",
                # wheels of pip that vendor other projects (six, distro, idna...): a copy
                # of a pinned project's correct code
                "lib/python3*/ensurepip/_bundled", "ensurepip/_bundled",
                "share/python-wheels")  # fmt: skip
    candidates: set[str] = set()
    for root in mounted:
        if os.path.isdir(root):
            for pattern in patterns:
                candidates.update(glob.glob(os.path.join(root, pattern)))
    candidates.update(data_locations())
    out = []
    for path in sorted(candidates):
        real = os.path.realpath(path)
        for root in mounted:
            top = os.path.realpath(root).rstrip("/") + "/"
            if os.path.isdir(real) and (real + "/").startswith(top):
                out.append(real)
                break
    return sorted(set(out), key=lambda p: (p.count("/"), p))


def in_venv() -> bool:
    """Whether this process runs from a virtual environment outside the system folders
    (then the runtime is also mounted at ``sys.prefix``, so ``sys.executable`` works in
    the sandbox)."""
    return sys.prefix != sys.base_prefix and not (sys.prefix + "/").startswith(_SYSTEM)
