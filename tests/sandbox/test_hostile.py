"""Hostile commands in each isolating backend (bubblewrap, docker): each is contained and
the host unaffected."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgym_envs.sandbox import backends
from agentgym_envs.sandbox.backends import Backend, ExecResult
from tests.sandbox.support import ISOLATING, make_isolating

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(20)]


@pytest.fixture(scope="module", params=ISOLATING)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_isolating(request.param)
    yield made
    made.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A workspace holding a small project with tests, like RepoFix's."""
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (ws / "tests" / "test_calc.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    return ws


def run_py(backend: Backend, code: str, ws: Path, timeout_s: float = 8, **kw: object) -> ExecResult:
    return backend.run([backend.python, "-c", code], workspace=ws, timeout_s=timeout_s, **kw)  # type: ignore[arg-type]


def test_deleting_the_tests_changes_only_the_workspace_copy(
    backend: Backend, repo: Path, tmp_path: Path
) -> None:
    hidden = tmp_path / "hidden"
    shutil.copytree(repo / "tests", hidden)
    cmd = "rm -rf /workspace/tests /agentgym/hidden/*; rm -rf /workspace/..; ls /agentgym/hidden"
    r = backend.run(
        ["/bin/sh", "-c", cmd], workspace=repo, timeout_s=8, ro_binds={hidden: "/agentgym/hidden"}
    )
    assert "test_calc.py" in r.stdout and "Read-only file system" in r.stderr
    assert not (repo / "tests").exists() and (repo / "calc.py").exists()
    assert (hidden / "test_calc.py").exists()


@pytest.mark.parametrize(
    "path",
    ["/etc/shadow", "/root/.bash_history", "/root/.ssh", str(REPO / "pyproject.toml"), "SECRET"],
)
def test_reading_outside_the_workspace_fails(
    backend: Backend, repo: Path, tmp_path: Path, path: str
) -> None:
    if path == "SECRET":  # a file next to the workspace, readable on the host
        path = str(tmp_path / "secret.txt")
        Path(path).write_text("the answer")
    code = f"print(open({path!r}).read())"
    r = run_py(backend, code, repo)
    if r.exit_code == 0:  # only a file of the image's own (docker: its /etc/shadow)
        host = Path(path).read_text() if os.access(path, os.R_OK) else ""
        assert backend.name == "docker" and path == "/etc/shadow", r.stdout
        assert r.stdout.strip() != host.strip()
    else:
        assert "No such file" in r.stderr or "Permission denied" in r.stderr, r.stderr
    listing = (
        "import json, os; print(json.dumps(os.listdir('/root') if os.path.isdir('/root') else []))"
    )
    r = run_py(backend, listing, repo)
    # only the interpreter's own folder, if any (docker: the image's own skeleton files)
    image = {".bashrc", ".profile"} if backend.name == "docker" else set()
    assert set(json.loads(r.stdout)) <= {".pyenv", *image}


def test_no_network(backend: Backend, repo: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    done = threading.Event()

    def serve() -> None:  # a host service the sandbox must not reach
        while not done.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = f"""
import socket
for address in [("1.1.1.1", 53), ("127.0.0.1", {port})]:
    try:
        socket.create_connection(address, timeout=2).close()
        print("CONNECTED", address)
    except OSError as exc:
        print("BLOCKED", address, exc)
"""
    try:
        r = run_py(backend, code, repo)
    finally:
        done.set()
        thread.join()
        server.close()
    assert "CONNECTED" not in r.stdout and r.stdout.count("BLOCKED") == 2, r.stdout
    assert accepted == []


@pytest.mark.parametrize(
    "bomb",
    [
        "import os\nwhile True: os.fork()",
        # a stubborn one that ignores failed forks: it only ends when the sandbox is killed
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ],
    ids=["plain", "stubborn"],
)
def test_fork_bomb_is_contained(backend: Backend, repo: Path, bomb: str) -> None:
    if not any("pids" in p for p in backend.describe()["protections"]):
        pytest.skip("no pids cgroup here: an uncapped fork bomb would also starve the host")
    start = time.monotonic()
    r = run_py(backend, bomb, repo, timeout_s=3)
    assert time.monotonic() - start < 3 + 5
    assert r.exit_code != 0
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still spawn
    assert run_py(backend, "print('after')", repo).stdout == "after\n"


def test_infinite_loop_is_killed(backend: Backend, repo: Path) -> None:
    start = time.monotonic()
    r = run_py(backend, "while True: pass", repo, timeout_s=1.5)
    assert r.timed_out and r.killed == "timeout" and r.exit_code == 128 + 9
    assert time.monotonic() - start < 1.5 + 5


def test_memory_hog_is_stopped(backend: Backend, repo: Path) -> None:
    r = run_py(backend, "x = bytearray(8 * 2**30)\nprint('allocated')", repo)
    assert "allocated" not in r.stdout
    assert r.killed == "memory" or "MemoryError" in r.stderr


def test_huge_output_is_truncated_without_buffering_it(backend: Backend, repo: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    code = "import sys\nblock = b'x' * 2**20\nfor _ in range(1024): sys.stdout.buffer.write(block)"
    r = run_py(backend, code, repo)
    assert r.truncated and len(r.stdout) == 64_000
    assert r.killed in ("output", None)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024


def test_huge_file_hits_the_file_size_limit(backend: Backend, repo: Path) -> None:
    code = "f = open('big.bin', 'wb')\nfor _ in range(1024): f.write(b'x' * 2**20)"
    r = run_py(backend, code, repo)
    assert r.exit_code != 0 and "File too large" in r.stderr
    assert (repo / "big.bin").stat().st_size <= 64 * 2**20


def test_host_processes_are_invisible(backend: Backend, repo: Path) -> None:
    code = f"import os\ntry:\n    os.kill({os.getpid()}, 9)  # the test process, on the host\n"
    code += "except ProcessLookupError:\n    print('no such process')"
    r = run_py(backend, code, repo)
    assert r.stdout == "no such process\n"
    r = run_py(
        backend, "import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))", repo
    )
    assert int(r.stdout) <= 3  # the sandbox's init, python (docker: and sleep), no host's


@pytest.fixture(autouse=True)
def _no_leftover_cgroups() -> Iterator[None]:
    yield
    for root in backends._cgroup_roots():
        leftovers = [p.name for p in root.path.glob(f"agentgym-{os.getpid()}-*")]
        assert leftovers == []
