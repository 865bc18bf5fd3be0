"""The Docker engine and the image that :class:`~agentgym_envs.sandbox.backends.DockerBackend`
runs: whether an engine answers, the image (pulled if missing, else an error naming how to
build one without a registry), and what the image holds (its Python, and every folder
with an ``agentgym_envs`` package, which the containers cover)."""

from __future__ import annotations

import functools
import importlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.sandbox.runtime import VERSION

#: the environment variable that names the image DockerBackend runs by default
DOCKER_IMAGE_ENV = "AGENTGYM_DOCKER_IMAGE"
DEFAULT_DOCKER_IMAGE = f"python:{VERSION}-slim"
#: where images usually keep this Python (tried in this order)
IMAGE_PYTHONS = (f"/usr/local/bin/python{VERSION}", f"/usr/bin/python{VERSION}")
LOCAL_BASE = (
    "build a Debian base image from Debian's packages (debootstrap --variant=minbase "
    "--include=python3 bookworm ROOT && tar -C ROOT -c . | docker import - "
    "agentgym-base:bookworm; see the README's Docker section)"
)
_IMAGE_FIX = (
    f"`docker pull {{image}}` where a registry answers; without one, {LOCAL_BASE}, and "
    f"choose it with {DOCKER_IMAGE_ENV}=agentgym-base:bookworm or DockerBackend(image=...)"
)
# Runs once per image, as root with no network: the first interpreter of "$@" that
# exists, and every folder holding an agentgym_envs package (an install or a checkout,
# so task data).
_FIND_PYTHON = (
    'for p in "$@"; do if [ -x "$p" ]; then exec "$p" -I -S -c "$0" "$p"; fi; done; exit 97'
)
_PROBE = """
import json, os, sys
found = []
for folder, dirs, _ in os.walk('/'):
    if folder in ('/proc', '/sys', '/dev'):
        dirs[:] = []
    elif 'agentgym_envs' in dirs:
        found.append(folder)
        dirs.remove('agentgym_envs')
print(json.dumps({'python': sys.argv[1], 'data': found}))
"""
_probes: dict[tuple[str, tuple[str, ...]], ImageFacts] = {}
_probe_lock = threading.Lock()


class ImageUnavailable(AgentGymError, RuntimeError):
    """The image is not on the engine and cannot be pulled."""


@dataclass(frozen=True)
class ImageFacts:
    """What an image holds.

    Attributes:
        python: Its interpreter of this Python's minor version.
        data: Its folders holding an ``agentgym_envs`` package (to cover).
    """

    python: str
    data: tuple[str, ...]


def docker_module() -> Any:
    """The docker SDK (optional dependency: agentgym-envs[sandbox])."""
    return importlib.import_module("docker")


@functools.cache
def docker_status() -> tuple[bool, str]:
    """Whether a Docker engine answers (probed once, cached), and why not."""
    try:
        client = docker_module().from_env(timeout=3)
        client.ping()
        client.close()
    except ImportError:
        return False, "the docker SDK is not installed (pip install 'agentgym-envs[sandbox]')"
    except Exception as exc:  # the SDK raises many kinds; each means no usable engine
        return False, f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return True, "an engine answers"


def image_id(client: Any, image: str) -> str:
    """The id of ``image`` on the engine, pulled first if the engine lacks it.

    Raises:
        ImageUnavailable: Not there, and pulling it failed; the message names the fix.
    """
    try:
        return str(client.images.get(image).id)
    except docker_module().errors.ImageNotFound:
        pass
    try:
        return str(client.images.pull(image).id)
    except Exception as exc:  # no registry, unknown name, no credentials: no image either way
        raise ImageUnavailable(
            f"the Docker image {image!r} is not on this engine and pulling it failed "
            f"({type(exc).__name__}: {exc}). Fix: {_IMAGE_FIX.format(image=image)}."
        ) from exc


def probe_image(client: Any, image: str, ident: str, pythons: tuple[str, ...]) -> ImageFacts:
    """The interpreter of image ``ident`` (the first of ``pythons`` it has) and its
    folders holding agentgym packages; probed once per image and kept for the process.

    Raises:
        ConfigError: The image has none of ``pythons``, or agentgym_envs at its root.
    """
    key = (ident, pythons)
    with _probe_lock:
        if key in _probes:
            return _probes[key]
    try:
        out = client.containers.run(
            ident, ["-c", _FIND_PYTHON, _PROBE, *pythons], entrypoint=["/bin/sh"],
            network_mode="none", read_only=True, user="0:0", remove=True,
        )  # fmt: skip
    except docker_module().errors.ContainerError as exc:
        raise ConfigError(
            f"the Docker image {image!r} has no Python {VERSION} at {list(pythons)} (exit "
            f"status {exc.exit_status}); the sandbox runs this host's pytest with the "
            f"image's interpreter, so it needs Python {VERSION}. Fix: pass image_python= "
            f"(its path in the image) or choose an image with it: {DEFAULT_DOCKER_IMAGE}, "
            f"or {LOCAL_BASE}."
        ) from exc
    found = json.loads(out)
    facts = ImageFacts(str(found["python"]), tuple(sorted(found["data"])))
    if "/" in facts.data:
        raise ConfigError(
            f"the Docker image {image!r} holds agentgym_envs (task data) at its root '/', "
            "which no mount can cover; choose an image without it (a plain Python image)."
        )
    with _probe_lock:
        _probes[key] = facts
    return facts
