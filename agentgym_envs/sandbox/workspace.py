"""Episode workspaces: an immutable template per task, a fresh copy per episode on tmpfs,
and the workspace diff that snapshots, verification and branching are built on.

A task's template is built once per process: the fixture repository (its hidden tests
left out), the injected bugs written in, and a fresh git repository with a single commit,
so the agent finds no history that leaks the fix. An episode copies the template
(a few small files: about a millisecond on tmpfs) and works on the copy.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import tempfile
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from agentgym_envs.core import pyast
from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.core.scratch import owned_dir, reap_stale, remove_tree

# files an edit must never touch: tests, pytest configuration and interpreter hooks
PROTECTED_NAMES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
     "setup.cfg", "pyproject.toml", "sitecustomize.py", "usercustomize.py"}
)  # fmt: skip
PROTECTED_DIRS = ("tests",)
SKIP = frozenset({".git", "__pycache__", ".pytest_cache"})
SYMLINK = "symlink -> "  # how read_tree records a symlink (never followed)
SPECIAL = "<special file>"  # fifos, sockets, devices: recorded, never read or applied
MAX_TEMPLATES = 64  # templates kept per manager (least recently used dropped)
# What a workspace may hold (every entry counts: files, folders, links, .git). A command
# that leaves more is refused before anything is copied, read or kept; the fixture
# repositories hold well under 1 MiB and 200 entries.
MAX_BYTES = 16 * 2**20
MAX_ENTRIES = 2000
MAX_PATH_CHARS = 512  # a relative path, far below PATH_MAX however deep the tree
Changes = dict[str, str | None]  # relative path -> new content (None: deleted)
# RepoFix's ``search``, run in the sandbox under a timeout (a catastrophic pattern costs a
# timeout there, never the env process): walks like read_tree, reads JSON {pattern,
# prefix, max, bytes} on stdin, prints JSON {hits, total} or {error}: at most ``bytes``
# of hits as encoded, so the output is never cut (non-ASCII text escapes to 6-12 bytes).
SEARCH_SCRIPT = r"""
import json, os, re, stat, sys
args = json.loads(sys.stdin.read())
try:
    regex = re.compile(args["pattern"])
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    raise SystemExit(0)
prefix, hits, total, size = args["prefix"], [], 0, 0
skip = {".git", "__pycache__", ".pytest_cache"}
def scan(relative):
    global total, size
    try:
        text = open(relative, encoding="utf-8", errors="replace").read()
    except OSError:
        return
    for n, line in enumerate(text.splitlines(), 1):
        if regex.search(line):
            total += 1
            hit = f"{relative}:{n}: {line.strip()[:200]}"
            hit = hit.encode("utf-8", "replace").decode("utf-8")  # names' lone surrogates
            cost = len(json.dumps(hit)) + 2  # as printed: escapes, quotes and separator
            if not hits and cost > args["bytes"]:  # the first hit always shows, cut short
                hit = hit[: max(args["bytes"] // 12 - 2, 0)]
                cost = len(json.dumps(hit)) + 2
            if len(hits) < args["max"] and size + cost <= args["bytes"]:
                hits.append(hit)
                size += cost
if os.path.isfile(prefix) and not os.path.islink(prefix):
    scan(prefix)
for dirpath, dirnames, filenames in os.walk(prefix if prefix != "." else "."):
    dirnames[:] = sorted(d for d in dirnames if d not in skip)
    for name in sorted(filenames):
        path = os.path.normpath(os.path.join(dirpath, name))
        if not name.endswith(".pyc") and stat.S_ISREG(os.lstat(path).st_mode):
            scan(path)
print(json.dumps({"hits": hits, "total": total}))
"""


def shm_root() -> Path:
    """Where workspaces live: ``$AGENTGYM_WORKDIR``, else /dev/shm (tmpfs), else the temp dir."""
    explicit = os.environ.get("AGENTGYM_WORKDIR")
    if explicit:
        return Path(explicit)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


class WorkspaceError(AgentGymError, RuntimeError):
    """A workspace that is over its budget or cannot be copied (the agent made it so: the
    tools report it as an error observation)."""


def over_budget(
    root: Path, max_bytes: int = MAX_BYTES, max_entries: int = MAX_ENTRIES
) -> str | None:
    """Why the tree under ``root`` is over its budget, or None. Only ``lstat`` is used,
    and the walk stops at the first excess, so a huge tree costs no more than the budget."""
    total, count = 0, 0
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, relative) if relative else root))
        except OSError as exc:
            return f"{relative or '.'} cannot be listed ({exc.strerror or exc})"
        for entry in entries:
            count += 1
            path = f"{relative}/{entry.name}" if relative else entry.name
            if count > max_entries:
                return f"it holds more than {max_entries} files and folders"
            if len(path) > MAX_PATH_CHARS:
                return f"a path is longer than {MAX_PATH_CHARS} characters ({path[:60]}...)"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                return f"{path} cannot be read ({exc.strerror or exc})"
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
            elif stat.S_ISREG(info.st_mode):
                total += max(info.st_size, info.st_blocks * 512)
                if total > max_bytes:
                    return f"its files hold more than {max_bytes // 2**20} MiB"
    return None


def _skip_special(folder: str, names: list[str]) -> set[str]:
    """copytree's ignore: fifos, sockets and devices are never copied (opening a fifo
    blocks; a socket cannot be read)."""
    skipped = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            skipped.add(name)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)
    return skipped


def copy_tree(source: Path, target: Path) -> None:
    """Copy a workspace (links as links, special files left out, within the budget).

    Raises:
        WorkspaceError: ``source`` is over budget or a file cannot be copied (``target``
            is removed then).
    """
    why = over_budget(source)
    if why is not None:
        raise WorkspaceError(f"the workspace is over its budget: {why}")
    try:
        shutil.copytree(source, target, symlinks=True, ignore=_skip_special)
    except (shutil.Error, OSError, RecursionError) as exc:
        remove_tree(target)
        raise WorkspaceError(f"the workspace cannot be copied: {str(exc)[:300]}") from exc


def is_protected(relative: str, text: str | None = None) -> bool:
    """Tests, conftest files, pytest configuration, sitecustomize and .pth files; with
    ``text``, also any TOML/INI file whose parsed content configures pytest."""
    parts = Path(relative).parts
    name = parts[-1] if parts else ""
    return (
        bool(parts and parts[0] in PROTECTED_DIRS)
        or name in PROTECTED_NAMES
        or name.endswith(".pth")
        or (text is not None and configures_pytest(name, text))
    )


def configures_pytest(name: str, text: str) -> bool:
    """Whether ``text`` holds pytest settings, judged by parsing it as pytest would (so
    quoted or spaced table names such as ``[ tool . "pytest" . ini_options ]`` count)."""
    import configparser
    import tomllib

    if name.endswith(".toml"):
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, UnicodeError):
            return False
        tool = data.get("tool")
        return "pytest" in data or (isinstance(tool, dict) and "pytest" in tool)
    if name.endswith((".ini", ".cfg")):
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            parser.read_string(text)
        except configparser.Error:
            return False
        return any(s.strip() in ("pytest", "tool:pytest") for s in parser.sections())
    return False


def read_tree(root: Path) -> dict[str, str]:
    """Every text file under ``root`` (relative path -> content), git metadata left out.

    Raises:
        WorkspaceError: the tree is over budget (nothing is read then).
    """
    why = over_budget(root)
    if why is not None:
        raise WorkspaceError(f"the workspace is over its budget: {why}")
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        # a symlink to a folder is listed in dirnames and never walked into
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP and d not in links)
        for name in sorted([*filenames, *links]):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            relative = os.path.relpath(path, root)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                out[relative] = SYMLINK + os.readlink(path)
            elif not stat.S_ISREG(mode):
                out[relative] = SPECIAL
            else:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    out[relative] = fh.read()
    return out


def diff_trees(before: Mapping[str, str], after: Mapping[str, str]) -> Changes:
    changes: Changes = {}
    for path, text in after.items():
        if before.get(path) != text:
            changes[path] = text
    for path in before:
        if path not in after:
            changes[path] = None
    return dict(sorted(changes.items()))


def apply_changes(root: Path, changes: Mapping[str, str | None], *, skip_protected: bool) -> None:
    """Write ``changes`` under ``root``: never outside it, never through a symlink, never a
    special file; symlinks are recreated as links (``read_tree``'s record of them)."""
    base = root.resolve()
    for relative, text in changes.items():
        if (skip_protected and is_protected(relative, text)) or text == SPECIAL:
            continue
        parent = resolve_inside(root, os.path.dirname(relative) or ".")
        if parent is None:
            continue
        path = parent / os.path.basename(relative)
        if not path.parent.resolve().is_relative_to(base):
            continue
        if path.is_symlink() or (text is None and path.is_file()):
            path.unlink()
        elif path.is_dir() and text is not None:
            shutil.rmtree(path)
        if text is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith(SYMLINK):
            os.symlink(text[len(SYMLINK) :], path)
        else:
            path.write_text(text)


def _git(root: Path, *args: str) -> None:
    env = {
        "GIT_AUTHOR_NAME": "agentgym", "GIT_AUTHOR_EMAIL": "agentgym@localhost",
        "GIT_COMMITTER_NAME": "agentgym", "GIT_COMMITTER_EMAIL": "agentgym@localhost",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
        "HOME": str(root), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }  # fmt: skip
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


class WorkspaceManager:
    """Templates per task and one live workspace per episode, under a private folder.

    Args:
        root: parent folder (default :func:`shm_root`).
    """

    def __init__(self, root: Path | None = None) -> None:
        base = root or shm_root()
        base.mkdir(parents=True, exist_ok=True)
        # named after this process: a killed env's folder is reaped by the next one
        reap_stale()
        self.dir = owned_dir("repofix", base)
        # an env that is never closed still frees its tmpfs when collected or at exit
        self._cleanup = weakref.finalize(self, remove_tree, self.dir)
        self.templates: OrderedDict[str, tuple[Path, dict[str, str]]] = OrderedDict()
        self.live: Path | None = None
        self._count = 0

    def template(
        self,
        key: str,
        repo: Path,
        files: Mapping[str, str],
        ignore: Callable[[str, list[str]], Iterable[str]] | None = None,
    ) -> tuple[Path, dict[str, str]]:
        """The immutable template for ``key`` (built once): ``repo`` without its hidden
        tests (what ``ignore``, a ``copytree`` filter, leaves out; default: folders named
        ``hidden`` and caches), ``files`` written over it, committed as a fresh
        repository."""
        found = self.templates.get(key)
        if found is not None:
            self.templates.move_to_end(key)
            return found
        while len(self.templates) >= MAX_TEMPLATES:
            _, (old, _) = self.templates.popitem(last=False)
            remove_tree(old)
        self._count += 1
        target = self.dir / "templates" / f"t{self._count}"
        default = shutil.ignore_patterns("hidden", "__pycache__", ".pytest_cache")
        shutil.copytree(repo, target, ignore=ignore or default)
        for relative, text in files.items():
            (target / relative).write_text(text)
        if shutil.which("git") is None:
            raise ConfigError("RepoFix needs git (apt-get install -y git)")
        _git(target, "init", "-q", "-b", "main")
        _git(target, "add", "-A")
        _git(target, "commit", "-q", "-m", "Initial commit")
        found = self.templates[key] = (target, read_tree(target))
        return found

    def fresh(self, template: Path) -> Path:
        """A new live workspace copied from ``template`` (the previous one is removed)."""
        self.discard()
        self._count += 1
        self.live = self.dir / "episodes" / f"e{self._count}"
        shutil.copytree(template, self.live, symlinks=True)
        return self.live

    def scratch_copy(self, source: Path) -> Path:
        """A throwaway copy of ``source`` (verification and staged commands run there).

        Raises:
            WorkspaceError: ``source`` is over budget or cannot be copied.
        """
        self._count += 1
        target = self.dir / "scratch" / f"s{self._count}"
        copy_tree(source, target)
        return target

    def promote(self, scratch: Path) -> Path:
        """Make ``scratch`` the live workspace (a staged command's effects are accepted)."""
        self.discard()
        self._count += 1
        self.live = self.dir / "episodes" / f"e{self._count}"
        self.live.parent.mkdir(parents=True, exist_ok=True)
        scratch.rename(self.live)
        return self.live

    def discard(self) -> None:
        if self.live is not None:
            remove_tree(self.live)
            self.live = None

    def close(self) -> None:
        self._cleanup()
        self.live = None
        self.templates.clear()


def resolve_inside(root: Path, relative: str) -> Path | None:
    """``root/relative`` if it stays inside ``root`` once symlinks resolve, else None."""
    if not relative or relative.startswith(("/", "~")) or "\x00" in relative:
        return None
    try:
        candidate = (root / relative).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    base = root.resolve()
    return candidate if candidate == base or candidate.is_relative_to(base) else None


def landing_paths(root: Path, relative: str) -> list[str]:
    """Where a write to ``root/relative`` lands, as paths relative to ``root``: the path
    itself, then the file it resolves to through symlinks (of the file or of a folder on
    the way, the file existing or not), then the other names of that file (hard links).
    A path that resolves outside ``root`` adds nothing (the workspace gate refuses it)."""
    paths = [relative]
    target = resolve_inside(root, relative)
    if target is None:
        return paths
    base = root.resolve()
    resolved = os.path.relpath(target, base)
    if resolved not in paths:
        paths.append(resolved)
    try:
        info = target.stat()
    except OSError:  # a new file has no other name
        return paths
    if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
        return paths
    for dirpath, dirnames, filenames in os.walk(base):  # never into linked folders
        dirnames[:] = [d for d in dirnames if d not in SKIP]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                other = os.lstat(path)
            except OSError:
                continue
            name_of = os.path.relpath(path, base)
            same = (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino)
            if same and name_of not in paths:
                paths.append(name_of)
    return paths


def search_output(stdout: str) -> tuple[list[str], int] | str | None:
    """The search script's output: (hits, total), a regex error message, or None when it
    is not what the script prints (cut short, or garbled by the sandboxed run)."""
    try:
        found = json.loads(stdout)
    except ValueError:
        return None
    if isinstance(found, dict) and isinstance(found.get("error"), str):
        return str(found["error"])
    if not isinstance(found, dict):
        return None
    hits, total = found.get("hits"), found.get("total")
    if not isinstance(hits, list) or not all(isinstance(h, str) for h in hits):
        return None
    if not isinstance(total, int) or isinstance(total, bool):
        return None
    return hits, total


# CPython's ast module is not safe to use from several threads at once (see
# agentgym_envs.core.pyast): every parse, unparse or dump of the sandbox package takes
# the process-wide lock that the action parser takes too.
AST_LOCK = pyast.AST_LOCK


def code_of(source: str | None) -> str | None:
    """The code of a Python source, normalised: its syntax tree without docstrings or
    other bare constants, dumped; None for a deleted file or a syntax error."""
    if source is None:
        return None
    with AST_LOCK:
        return _normalised_dump(source)


def _normalised_dump(source: str) -> str | None:
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [
                s
                for s in body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            ]
            setattr(node, "body", kept or [ast.Pass()])  # noqa: B010  (body varies by node type)
    return ast.dump(tree)
