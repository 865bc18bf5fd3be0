"""The sandbox sees no task data and no grader part it could replace.

Fast checks run the real bubblewrap sandbox of this (editable) install and real Docker
containers (CI runs an engine), including from an image that has agentgym-envs installed
and checked out; the wheel check builds and installs a wheel (slow).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgym_envs.sandbox import backends, runtime
from agentgym_envs.sandbox._process import _Call
from agentgym_envs.sandbox.backends import (
    DEFAULT_LIMITS,
    Backend,
    DockerBackend,
)
from agentgym_envs.sandbox.docker_image import docker_module
from agentgym_envs.sandbox.workspace import configures_pytest, is_protected
from tests.sandbox.support import ISOLATING, make_isolating, needs_bwrap, needs_docker

ROOT = Path(__file__).resolve().parents[2]
# Walks the sandbox's filesystem (names everywhere; contents of python-ish files outside
# /usr/share) and prints every trace of task data as JSON.
HUNT = """
import json, os, sys
needles = [b'"fail_to_pass"', b'repofix-intervals-easy', b'def test_bounds_must_not_be_reversed']
found = []
for root in ['/'] + [p for p in sys.path if p]:
    for folder, dirs, files in os.walk(root):
        if folder in ('/proc', '/sys', '/dev', '/usr/share', '/workspace'):
            dirs[:] = []
            continue
        for name in dirs + files:
            if name in ('_data', 'repofix.jsonl', 'agentgym_envs', 'test_interval_core.py'):
                found.append(os.path.join(folder, name))
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(('.py', '.json', '.jsonl')) or not os.path.isfile(path):
                continue
            if os.path.getsize(path) < 4_000_000:
                data = open(path, 'rb').read()
                found += [path for n in needles if n in data]
print(json.dumps(sorted(set(found))))
"""


def _hunt(backend: Backend, ws: Path) -> list[str]:
    r = backend.run(["python", "-c", HUNT], workspace=ws, timeout_s=120)
    assert r.exit_code == 0, r.stderr
    return list(json.loads(r.stdout))


@pytest.fixture(scope="module", params=ISOLATING)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_isolating(request.param)
    yield made
    made.close()


@pytest.mark.sandbox
def test_editable_install_shows_no_task_data(backend: Backend, tmp_path: Path) -> None:
    assert _hunt(backend, tmp_path) == []


@pytest.mark.sandbox
def test_sandbox_python_has_pytest_and_nothing_else(backend: Backend, tmp_path: Path) -> None:
    code = "import pytest, sys; import importlib.util as u; print(u.find_spec('gymnasium'))"
    r = backend.run(["python", "-c", code], workspace=tmp_path, timeout_s=60)
    assert (r.exit_code, r.stdout.strip()) == (0, "None"), r.stderr


# Walks the sandbox's filesystem for Python code that is neither the standard library,
# nor the runtime's, nor the workspace's: a package (a folder with __init__.py), a module,
# a wheel, egg or zip. Other software vendors copies of Python projects (a cloud SDK's
# third_party/inflection, pip's _vendor/distro): a pinned project's correct code in reach
# is a RepoFixReal fix to copy.
FOREIGN = """
import json, os, sys
own = {os.path.realpath(p) for p in (sys.prefix, '/agentgym', *sys.argv[1:])}
found = []
for folder, dirs, files in os.walk('/'):
    real = os.path.realpath(folder)
    if folder in ('/proc', '/sys', '/dev', '/tmp', '/workspace') or real in own:
        dirs[:] = []
        continue
    if 'os.py' in files and '__future__.py' in files:  # a standard library (any Python's)
        for inner in ('site-packages', 'dist-packages', os.path.join('ensurepip', '_bundled')):
            path = os.path.join(folder, inner)
            if os.path.isdir(path):
                found += [os.path.join(path, n) for n in os.listdir(path)]
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(folder, name)
        code = name.endswith(('.py', '.whl', '.egg', '.pyz')) or name == '__init__.py'
        if (code or (name.endswith('.zip') and 'python' in folder)) and os.path.exists(path):
            found.append(path)
print(json.dumps(sorted(found)[:50]))
"""


@pytest.mark.sandbox
def test_the_sandbox_sees_no_python_code_but_the_stdlib_the_runtime_and_the_workspace(
    backend: Backend, tmp_path: Path
) -> None:
    """Bubblewrap mounts an allowlist of the host: nothing else is there. A Docker image
    is the user's (Debian's own gdb helpers and tools are Python), so there the places
    projects from the package index live must be empty: package folders, pip's wheels,
    vendored copies."""
    # the runtime is also mounted where this process's environment is (runtime.in_venv)
    r = backend.run(["python", "-c", FOREIGN, sys.prefix], workspace=tmp_path, timeout_s=120)
    assert r.exit_code == 0, r.stderr
    found = json.loads(r.stdout)
    if isinstance(backend, DockerBackend):
        places = re.compile(r"(site|dist)-packages|python-wheels|_bundled|_vendor|third_party")
        found = [f for f in found if places.search(f)]
    assert found == []


# An image that holds task data the way real ones would: agentgym-envs pip-installed in a
# virtual environment and in the interpreter's site-packages, and a source checkout.
LEAKY_DOCKERFILE = """FROM {base}
COPY data /opt/venv/lib/python3.11/site-packages/agentgym_envs/_data
COPY data /usr/local/lib/python3.11/site-packages/agentgym_envs/_data
COPY data /srv/checkout/agentgym_envs/_data
COPY data/fixtures /srv/checkout/fixtures
"""


@pytest.mark.sandbox
@pytest.mark.docker
@needs_docker
def test_docker_image_with_agentgym_installed_shows_no_task_data(tmp_path: Path) -> None:
    base = DockerBackend()
    data = tmp_path / "ctx" / "data"
    (data / "tasks" / "sandbox").mkdir(parents=True)
    (data / "tasks" / "sandbox" / "repofix.jsonl").write_text(
        '{"id": "repofix-intervals-easy-test-1", "fail_to_pass": ["t"]}\n'
    )
    hidden = data / "fixtures" / "repos" / "intervals" / "tests" / "hidden"
    hidden.mkdir(parents=True)
    (hidden / "test_interval_core.py").write_text("def test_bounds_must_not_be_reversed(): ...\n")
    (tmp_path / "ctx" / "Dockerfile").write_text(LEAKY_DOCKERFILE.format(base=base._image_id))
    tag = f"agentgym-test-leaky:{os.getpid()}"
    client = docker_module().from_env()
    client.images.build(path=str(tmp_path / "ctx"), tag=tag, rm=True, forcerm=True)
    try:
        leaky = DockerBackend(image=tag)
        try:
            found = {f"{p}/lib/python3.11/site-packages" for p in ("/opt/venv", "/usr/local")}
            assert set(leaky._covered) == {*found, "/srv/checkout"}
            ws = tmp_path / "ws"
            ws.mkdir()
            assert _hunt(leaky, ws) == []
        finally:
            leaky.close()
    finally:
        client.images.remove(tag, force=True)
        client.close()
        base.close()


def test_bubblewrap_mounts_neither_the_environment_nor_task_data() -> None:
    args = backends._python_args()
    sources = [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]
    prefix = os.path.realpath(sys.prefix)
    for source in sources:
        real = os.path.realpath(source)
        assert real != prefix and not real.startswith(prefix + "/"), source
        for data in runtime.data_locations():
            assert not (real + "/").startswith(data + "/"), (source, data)
    covered = [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    stdlib_site = os.path.join(runtime.interpreter_paths()[-1], "site-packages")
    if os.path.isdir(stdlib_site):
        assert os.path.realpath(stdlib_site) in covered


def test_docker_mounts_only_the_runtime_and_the_workspace(tmp_path: Path) -> None:
    docker = DockerBackend.__new__(DockerBackend)  # no engine needed for the mount plan
    docker.image_python = f"/usr/local/bin/python{runtime.VERSION}"
    docker._covered = ("/srv/checkout",)  # what the image probe found
    hidden, stdin = tmp_path / "hidden", tmp_path / "stdin"
    hidden.mkdir()
    stdin.mkdir()
    call = _Call(("true",), str(tmp_path), 10.0, DEFAULT_LIMITS, {}, (
        (False, str(hidden), "/workspace/tests/hidden"),), None)  # fmt: skip
    volumes, tmpfs = docker.mounts(call, stdin)
    assert {v["bind"]: v["mode"] for v in volumes.values()} == {
        runtime.SANDBOX_PREFIX: "ro",
        "/workspace": "rw",
        "/workspace/tests/hidden": "ro",
        "/agentgym/stdin": "ro",
    }
    for source in volumes:
        for data in [os.path.realpath(sys.prefix), *runtime.data_locations()]:
            assert not (os.path.realpath(source) + "/").startswith(data + "/"), source
    assert f"/usr/local/lib/python{runtime.VERSION}/site-packages" in tmpfs
    assert tmpfs["/srv/checkout"].startswith("ro")
    runtime_dir = Path(next(s for s, v in volumes.items() if v["bind"] == runtime.SANDBOX_PREFIX))
    assert not list(runtime_dir.rglob("*.jsonl")) and not list(runtime_dir.rglob("_data"))


@pytest.mark.parametrize(
    ("name", "text", "protected"),
    [
        (".pytest.ini", "", True),
        ("pytest.toml", "", True),
        ("sub/.pytest.toml", "", True),
        ("cfg/a.toml", '[tool."pytest".ini_options]\naddopts = "-x"\n', True),
        ("cfg/a.toml", "[ tool . pytest . ini_options ]\nx = 1\n", True),
        ("cfg/a.toml", '[tool."py\\u0074est"]\nx = 1\n', True),
        ("cfg/a.toml", "[tool.black]\nline-length = 9\n", False),
        ("cfg/a.toml", "not toml [", False),
        ("cfg/x.cfg", "[ tool:pytest ]\naddopts = -x\n", True),
        ("cfg/x.ini", "[pytest]\n", True),
        ("cfg/x.ini", "[other]\n", False),
        ("pkg/module.py", "[pytest]\n", False),
    ],
)
def test_pytest_config_is_found_by_parsing(name: str, text: str, protected: bool) -> None:
    assert is_protected(name, text) is protected
    if text:
        assert configures_pytest(Path(name).name, text) is protected


@pytest.mark.slow
@pytest.mark.sandbox
@needs_bwrap
def test_wheel_install_shows_no_task_data(tmp_path: Path) -> None:
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True, timeout=600,
    )  # fmt: skip
    site = tmp_path / "site"
    with zipfile.ZipFile(next(out.glob("*.whl"))) as wheel:
        wheel.extractall(site)
    assert (site / "agentgym_envs" / "_data" / "tasks" / "sandbox" / "repofix.jsonl").is_file()
    ws = tmp_path / "ws"
    ws.mkdir()
    code = (
        "import json, sys; from pathlib import Path; import agentgym_envs as a; "
        "from agentgym_envs.sandbox.backends import BubblewrapBackend; "
        f"sys.path.append({str(ROOT)!r}); "
        "from tests.sandbox.test_isolation import _hunt; "
        f"assert a.__file__.startswith({str(site)!r}), a.__file__; "
        f"print(json.dumps(_hunt(BubblewrapBackend(), Path({str(ws)!r}))))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
