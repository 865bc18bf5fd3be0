"""The source archives of RepoFixReal's pinned projects: found on the package index pip
is set up for, downloaded once as files (nothing of them is built or run), checked against
the pinned sha256, kept in the cache and unpacked read-only (:func:`source`). The cache's
folders are published whole or not at all (:func:`_publish`).
"""

from __future__ import annotations

import hashlib
import html.parser
import http.client
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ConfigError

if TYPE_CHECKING:
    from agentgym_envs.repofix.real_projects import Project

PINNED = "sandbox/real_projects.jsonl"  # under the tasks root
DOWNLOAD_TIMEOUT_S = 300.0


def cache_dir() -> Path:
    from agentgym_envs.llm.models import cache_root

    return cache_root() / "real-projects"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(p: Project) -> Path:
    """The project's source archive in the cache, downloaded first if missing.

    The archive is found on the package index pip uses (``$PIP_INDEX_URL``, pip's
    ``global.index-url``, else PyPI) through its simple API, and downloaded as a file:
    nothing of it is built or run. Its hash must be the pinned one.

    Raises:
        ConfigError: the index has no such archive, the download failed, or the hash
            differs from the pinned one.
    """
    folder = cache_dir() / "archives"
    if folder.is_dir():
        for cached in sorted(folder.iterdir()):
            if _names_project(cached.name, p) and sha256_of(cached) == p.sha256:
                return cached
    folder.mkdir(parents=True, exist_ok=True)
    name, url = _archive_url(p)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=folder) as tmp:
        part = Path(tmp) / name
        try:
            with (
                urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response,
                part.open("wb") as handle,
            ):
                shutil.copyfileobj(response, handle)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise ConfigError(
                f"downloading {_redact(url)} failed ({_redact(str(exc))}); check the network"
            ) from None
        digest = sha256_of(part)
        if digest != p.sha256:
            raise ConfigError(
                f"the source archive of {p.key} ({_redact(url)}) has sha256 {digest}, but "
                f"{PINNED} pins {p.sha256}: the index serves a different file. It is not "
                "used; check the index, or pin the new hash after reviewing the archive"
            )
        final = folder / name
        os.replace(part, final)
    return final


SDIST_SUFFIXES = (".tar.gz", ".zip")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names_project(filename: str, p: Project) -> bool:
    """Whether ``filename`` is the source archive of ``p`` (``name-version.tar.gz``)."""
    stem = next((filename[: -len(s)] for s in SDIST_SUFFIXES if filename.endswith(s)), None)
    if stem is None or "-" not in stem:
        return False
    name, _, version = stem.rpartition("-")
    return _normal(name) == _normal(p.name) and version == p.version


def index_url() -> str:
    """The package index pip is set up for (``$PIP_INDEX_URL``, pip's
    ``global.index-url``), else PyPI's simple API."""
    explicit = os.environ.get("PIP_INDEX_URL", "").strip()
    if explicit:
        return explicit.rstrip("/")
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        configured = run.stdout.strip() if run.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        configured = ""
    return (configured or "https://pypi.org/simple").rstrip("/")


def _redact(text: str) -> str:
    """``text`` with any password or token in a URL's user part replaced."""
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", text)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def _archive_url(p: Project) -> tuple[str, str]:
    """(file name, URL) of the project's source archive on the index."""
    page = f"{index_url()}/{_normal(p.name)}/"
    read = page + "index.html" if page.startswith("file:") else page  # a local index folder
    try:
        with urllib.request.urlopen(read, timeout=DOWNLOAD_TIMEOUT_S) as response:
            text = response.read().decode("utf-8", "replace")
            page = response.geturl().removesuffix("index.html")  # after any redirect
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise ConfigError(
            f"reading the index page {_redact(page)} failed ({_redact(str(exc))}); check the "
            "network, or the index in $PIP_INDEX_URL or pip's global.index-url"
        ) from None
    parser = _Links()
    parser.feed(text)
    found = []
    for href in parser.links:
        url = urllib.parse.urljoin(page, href)
        parts = urllib.parse.urlsplit(url)
        name = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
        if _names_project(name, p):
            found.append((parts.fragment == f"sha256={p.sha256}", name, url.split("#", 1)[0]))
    if found:  # the file whose listed hash is the pinned one first (a .tar.gz and a .zip)
        _, name, url = max(found, key=lambda f: f[0])
        return name, url
    raise ConfigError(
        f"the index {_redact(page)} lists no source archive of {p.key} (.tar.gz or .zip); "
        "check the name and version on its line of the pinned list"
    )


def _extract(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into the empty folder ``dest``; its single top folder.

    Refuses members that would land outside ``dest`` (absolute paths, ``..``, links)."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _safe_member(info.filename, archive)
            zf.extractall(dest)
    else:
        with tarfile.open(archive) as tf:
            members = []
            for member in tf.getmembers():
                _safe_member(member.name, archive)
                if member.issym() or member.islnk():
                    continue  # no links: a project's code and tests are plain files
                if member.isfile() or member.isdir():
                    members.append(member)
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: one more guard
                tf.extractall(dest, members=members, filter="data")
            else:  # pragma: no cover - older 3.11 patch releases
                tf.extractall(dest, members=members)
    tops = [d for d in dest.iterdir() if d.is_dir()]
    if len(tops) != 1:
        raise ConfigError(f"{archive.name} does not hold one top folder: {[d.name for d in tops]}")
    return tops[0]


def _safe_member(name: str, archive: Path) -> None:
    parts = Path(name).parts
    if name.startswith(("/", "\\")) or ".." in parts:
        raise ConfigError(f"{archive.name} holds a member outside its folder: {name!r}")


def source(p: Project) -> Path:
    """The project's unpacked archive (read-only, in the cache)."""
    final = cache_dir() / "sources" / p.cache_key
    if (final / ".complete").is_file():
        return final / "tree"
    archive = fetch(p)
    final.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{p.key}-", dir=final.parent))
    try:
        top = _extract(archive, build / "unpack")
        top.rename(build / "tree")
        _read_only(build / "tree")
        (build / ".complete").write_text(p.sha256 + "\n")
        _publish(build, final, ".complete")
    finally:
        _remove(build)
    return final / "tree"


def _remove(path: Path) -> None:
    """Delete a folder, read-only parts too (unpacked sources are made read-only)."""

    def writable(func: Any, target: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(target), 0o755)
        if os.path.isdir(target) and not os.path.islink(target):
            os.chmod(target, 0o755)
        func(target)

    if not path.exists():
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=writable)
    else:
        shutil.rmtree(path, onerror=writable)


def _publish(build: Path, final: Path, marker: str) -> None:
    """Move the finished ``build`` to ``final``. An incomplete ``final`` (no ``marker``:
    a run killed part way) is replaced; a complete one that another process published
    first is kept and ``build`` dropped, so a reader never sees a folder change."""
    if final.exists() and not (final / marker).exists():
        _remove(final)
    try:
        build.rename(final)
    except OSError:
        if not (final / marker).exists():
            raise ConfigError(
                f"could not put {final.name} into the cache at {final.parent}; delete "
                f"that folder (chmod -R u+w it first) and run again"
            ) from None
        _remove(build)


def _read_only(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)
