"""Shared markers and backends for the sandbox tests.

Without bubblewrap these tests skip with the reason, except where
``AGENTGYM_REQUIRE_SANDBOX=1`` (CI sets it): there a missing sandbox fails them loudly.
The Docker variants skip unless an engine answers and has the sandbox image
(``$AGENTGYM_DOCKER_IMAGE``, else ``python:3.X-slim``), except where
``AGENTGYM_REQUIRE_DOCKER=1`` (CI sets it, with the image it builds): there they fail.
"""

from __future__ import annotations

import functools
import io
import os
import tarfile

import pytest

from agentgym_envs.sandbox import backends
from agentgym_envs.sandbox.backends import Backend, BubblewrapBackend, DockerBackend
from agentgym_envs.sandbox.docker_image import DEFAULT_DOCKER_IMAGE, DOCKER_IMAGE_ENV

REQUIRED = os.environ.get("AGENTGYM_REQUIRE_SANDBOX") == "1"
needs_bwrap = pytest.mark.skipif(
    not REQUIRED and not backends.bubblewrap_available(),
    reason=f"bubblewrap does not work here: {backends.bubblewrap_status()[1]}",
)

DOCKER_REQUIRED = os.environ.get("AGENTGYM_REQUIRE_DOCKER") == "1"


@functools.cache
def docker_image_status() -> tuple[bool, str]:
    """Whether an engine answers and holds the sandbox image (never pulls it)."""
    ok, why = backends.docker_status()
    if not ok:
        return ok, why
    image = os.environ.get(DOCKER_IMAGE_ENV) or DEFAULT_DOCKER_IMAGE
    client = backends.docker_module().from_env()
    try:
        client.images.get(image)
    except Exception as exc:  # ImageNotFound, or the engine went away
        return (
            False,
            f"the engine has no image {image!r} ({type(exc).__name__}); set {DOCKER_IMAGE_ENV}",
        )
    finally:
        client.close()
    return True, "works"


needs_docker = pytest.mark.skipif(
    not DOCKER_REQUIRED and not docker_image_status()[0],
    reason=f"no Docker sandbox here: {docker_image_status()[1]}",
)

#: the isolating backends, for ``@pytest.fixture(params=ISOLATING)``
ISOLATING = [
    pytest.param("bubblewrap", marks=needs_bwrap, id="bwrap"),
    pytest.param("docker", marks=[needs_docker, pytest.mark.docker], id="docker"),
]

#: the same, with the docker variant marked slow (for tests over ~15 s)
ISOLATING_SLOW_DOCKER = [
    ISOLATING[0],
    pytest.param("docker", marks=[needs_docker, pytest.mark.docker, pytest.mark.slow], id="docker"),
]


def make_isolating(name: str) -> Backend:
    """A fresh isolating backend by name (``ISOLATING``'s ids)."""
    return BubblewrapBackend() if name == "bubblewrap" else DockerBackend()


def sdist(files: dict[str, str]) -> bytes:
    """A gzipped tar holding ``files`` (archive path -> text): a source archive to serve."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
