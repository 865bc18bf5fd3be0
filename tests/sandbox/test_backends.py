"""Execution backends: bubblewrap (real bwrap) and docker (a real engine) through the same
tests, local, and make_backend. Docker-only behaviour is in test_docker.py."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.repofix.env import choose_backend
from agentgym_envs.sandbox import backends
from agentgym_envs.sandbox.backends import (
    SANDBOX_WORKSPACE,
    Backend,
    BackendUnavailable,
    BubblewrapBackend,
    DockerBackend,
    ExecResult,
    Isolation,
    Limits,
    LocalBackend,
    available_backends,
    make_backend,
)
from tests.sandbox.support import ISOLATING, make_isolating, needs_bwrap

PY = sys.executable
sandbox = pytest.mark.sandbox


@pytest.fixture(scope="module")
def bwrap() -> BubblewrapBackend:
    return BubblewrapBackend()


@pytest.fixture(scope="module", params=ISOLATING)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_isolating(request.param)
    yield made
    made.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def py(backend: Backend, code: str, ws: Path, **kwargs: object) -> ExecResult:
    return backend.run([backend.python, "-c", code], workspace=ws, timeout_s=30, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- bubblewrap and docker


@sandbox
class TestIsolating:
    """The same behaviour from every isolating backend."""

    def test_python_prints_and_exit_codes(self, backend: Backend, ws: Path) -> None:
        r = py(backend, "import sys; print('hi'); print('oops', file=sys.stderr); sys.exit(3)", ws)
        assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "oops\n", 3)
        assert not r.timed_out and not r.truncated and r.killed is None
        assert backend.run(["true"], workspace=ws, timeout_s=10).exit_code == 0

    def test_signal_exit_code_is_128_plus_signal(self, backend: Backend, ws: Path) -> None:
        r = backend.run(["/bin/sh", "-c", "kill -TERM $$"], workspace=ws, timeout_s=10)
        assert r.exit_code == 128 + 15

    def test_stdin(self, backend: Backend, ws: Path) -> None:
        r = backend.run(["cat"], workspace=ws, timeout_s=10, stdin="line 1\nline 2\n")
        assert r.stdout == "line 1\nline 2\n"
        big = "x" * 300_000  # larger than a pipe buffer and than an environment variable
        r = py(backend, "import sys; print(len(sys.stdin.read()))", ws, stdin=big)
        assert r.stdout.strip() == "300000", r.stderr
        assert backend.run(["cat"], workspace=ws, timeout_s=10).stdout == ""  # no stdin: empty

    def test_env_is_minimal_plus_caller(
        self, backend: Backend, ws: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("AGENTGYM_HOST_SECRET", "leak")
        code = "import json, os; print(json.dumps(dict(os.environ)))"
        r = py(backend, code, ws, env={"MY_VAR": "42", "PYTHONHASHSEED": "7"}, stdin="input")
        env = json.loads(r.stdout)
        assert env["MY_VAR"] == "42" and env["PYTHONHASHSEED"] == "7"
        assert env["HOME"] == "/tmp" and env["LANG"] == "C.UTF-8"
        assert env["PYTHONDONTWRITEBYTECODE"] == "1"
        assert not [k for k in env if k.startswith("AGENTGYM")], env

    def test_cwd_is_the_workspace_and_writes_persist(self, backend: Backend, ws: Path) -> None:
        (ws / "given.txt").write_text("from host")
        code = "import os; print(os.getcwd()); print(open('given.txt').read())"
        code += "; open('made.txt', 'w').write('inside')"
        r = py(backend, code, ws)
        assert r.stdout.splitlines() == [SANDBOX_WORKSPACE, "from host"], r.stderr
        assert (ws / "made.txt").read_text() == "inside"
        assert (ws / "made.txt").stat().st_uid == ws.stat().st_uid  # the owner's file

    def test_no_capabilities_and_no_new_privileges(self, backend: Backend, ws: Path) -> None:
        r = backend.run(["cat", "/proc/self/status"], workspace=ws, timeout_s=10)
        status = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
        for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
            assert int(status[key], 16) == 0, (key, status[key])
        assert status["NoNewPrivs"].strip() == "1"

    def test_tmp_is_private(self, backend: Backend, ws: Path) -> None:
        marker = Path("/tmp") / f"agentgym-host-marker-{os.getpid()}"
        inner = Path("/tmp") / f"agentgym-inner-{os.getpid()}"
        marker.write_text("host")
        try:
            code = f"import os; print(os.path.exists({str(marker)!r}), os.listdir('/tmp'))"
            code += f"; open({str(inner)!r}, 'w').write('x')"
            r = py(backend, code, ws)
            # only mount points of the interpreter's own binds may show (bubblewrap binds
            # a checkout or virtualenv under /tmp read-only at its path)
            python_dirs = {
                Path(p).parts[2]
                for p in (sys.prefix, sys.base_prefix, os.path.realpath(sys.executable))
                if Path(p).is_relative_to("/tmp")
            }
            exists, listing = r.stdout.split(" ", 1)
            assert exists == "False" and r.exit_code == 0, r.stderr
            assert set(ast.literal_eval(listing)) <= python_dirs
            assert not inner.exists()
        finally:
            marker.unlink()

    @pytest.mark.parametrize(
        "target", ["/usr/agentgym-x", "/etc/agentgym-x", "HOME", "/agentgym-x"]
    )
    def test_host_filesystem_is_read_only(self, backend: Backend, ws: Path, target: str) -> None:
        path = str(Path.home() / "agentgym-x") if target == "HOME" else target
        r = backend.run(["/bin/sh", "-c", f"echo x > {path}"], workspace=ws, timeout_s=10)
        assert r.exit_code != 0 and r.stderr  # "Read-only file system" or "nonexistent"
        assert not Path(path).exists()

    def test_workspace_parent_is_not_visible(self, backend: Backend, ws: Path) -> None:
        (ws.parent / "sibling.txt").write_text("secret")
        code = "import os; print(sorted(os.listdir('..')))"
        code += f"; print(os.path.exists({str(ws.parent)!r}))"
        r = py(backend, code, ws)
        assert "sibling.txt" not in r.stdout
        assert r.stdout.splitlines()[1] == "False"

    def test_ro_binds_are_visible_read_only(
        self, backend: Backend, ws: Path, tmp_path: Path
    ) -> None:
        hidden = tmp_path / "hidden"
        hidden.mkdir()
        (hidden / "test_hidden.py").write_text("def test_ok(): pass\n")
        cmd = "cat /agentgym/hidden/test_hidden.py && echo x > /agentgym/hidden/new"
        r = backend.run(
            ["/bin/sh", "-c", cmd],
            workspace=ws,
            timeout_s=10,
            ro_binds={hidden: "/agentgym/hidden"},
        )
        assert "def test_ok" in r.stdout
        assert r.exit_code != 0 and "Read-only file system" in r.stderr
        assert sorted(p.name for p in hidden.iterdir()) == ["test_hidden.py"]

    def test_rw_binds_are_writable(self, backend: Backend, ws: Path, tmp_path: Path) -> None:
        results = tmp_path / "results"
        results.mkdir(mode=0o700)  # as the verifier's: the owner's alone
        cmd = "echo '{}' > /agentgym/results/results.json"
        r = backend.run(
            ["/bin/sh", "-c", cmd],
            workspace=ws,
            timeout_s=10,
            rw_binds={results: "/agentgym/results"},
        )
        assert r.exit_code == 0 and (results / "results.json").read_text() == "{}\n", r.stderr

    def test_pytest_runs_with_the_sandbox_python(self, backend: Backend, ws: Path) -> None:
        (ws / "test_sample.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        argv = [backend.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        r = backend.run(argv, workspace=ws, timeout_s=60)
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "1 passed" in r.stdout

    def test_timeout_kills_and_reports(self, backend: Backend, ws: Path) -> None:
        r = backend.run(["/bin/sh", "-c", "echo started; sleep 60"], workspace=ws, timeout_s=1)
        assert r.timed_out and r.killed == "timeout"
        assert r.exit_code == 128 + 9 and r.stdout == "started\n"
        assert backend.run(["echo", "after"], workspace=ws, timeout_s=10).stdout == "after\n"

    def test_output_is_truncated(self, backend: Backend, ws: Path) -> None:
        code = "import sys; sys.stdout.write('a' * 200_000); sys.stderr.write('b' * 10)"
        r = py(backend, code, ws, limits=Limits(output_bytes=1000))
        assert r.truncated and r.stdout == "a" * 1000 and r.stderr == "b" * 10
        assert r.exit_code == 0 and r.killed is None

    def test_cpu_limit(self, backend: Backend, ws: Path) -> None:
        r = py(backend, "while True: pass", ws, limits=Limits(cpu_s=1))
        assert r.killed == "cpu" and not r.timed_out

    def test_describe(self, backend: Backend) -> None:
        info = backend.describe()
        assert info["name"] == backend.name and info["isolation"] == "strong"
        text = " ".join(info["protections"])
        network = "loopback only" if backend.name == "bubblewrap" else "no network"
        for needle in ("read-only", "private /tmp", network, "only writable", "rlimits"):
            assert needle in text

    def test_eight_concurrent_runs_are_independent(self, backend: Backend, tmp_path: Path) -> None:
        folders = [tmp_path / f"w{i}" for i in range(8)]
        for i, folder in enumerate(folders):
            folder.mkdir()
            (folder / "id.txt").write_text(str(i))
        # each run writes the same /tmp path and sleeps: private /tmp keeps them apart
        # (docker: more workspaces than its pool of 4 warm containers, all busy at once)
        code = "import os, time; open('/tmp/me', 'w').write(open('id.txt').read())"
        code += "; time.sleep(0.5); print(open('/tmp/me').read(), os.listdir('.'))"

        def one(folder: Path) -> ExecResult:
            return backend.run([backend.python, "-c", code], workspace=folder, timeout_s=60)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(one, folders))
        for i, r in enumerate(results):
            assert r.exit_code == 0, r.stderr
            assert r.stdout == f"{i} ['id.txt']\n"


@sandbox
@needs_bwrap
class TestBubblewrap:
    def test_runs_as_unprivileged_user(self, bwrap: BubblewrapBackend, ws: Path) -> None:
        if "runs as uid 65534 in a user namespace" not in bwrap.describe()["protections"]:
            pytest.skip("this host does not allow a uid mapping in the user namespace")
        assert py(bwrap, "import os; print(os.getuid(), os.getgid())", ws).stdout == "65534 65534\n"

    def test_pytest_runs_with_the_library_python(self, bwrap: BubblewrapBackend, ws: Path) -> None:
        # the runtime is also mounted at sys.prefix, so sys.executable works inside
        (ws / "test_sample.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        r = bwrap.run(
            [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], workspace=ws, timeout_s=60
        )
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "1 passed" in r.stdout


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigError, match="cpu_s must be a positive int"):
        Limits(cpu_s=0)
    with pytest.raises(ConfigError):
        Limits(memory_mb=True)


# ---------------------------------------------------------------- local


@pytest.fixture
def local() -> LocalBackend:
    return LocalBackend(unsafe=True)


def test_local_runs_in_the_directory_itself(local: LocalBackend, ws: Path) -> None:
    r = py(local, "import os; print(os.getcwd()); open('f', 'w').write('x')", ws)
    assert r.stdout == f"{ws.resolve()}\n" and (ws / "f").read_text() == "x"
    assert local.isolation is Isolation.NONE and local.describe()["isolation"] == "none"


def test_local_stdin_env_timeout_and_truncation(local: LocalBackend, ws: Path) -> None:
    assert local.run(["cat"], workspace=ws, timeout_s=10, stdin="abc").stdout == "abc"
    assert py(local, "import os; print(os.environ['X'])", ws, env={"X": "1"}).stdout == "1\n"
    r = local.run(["sleep", "30"], workspace=ws, timeout_s=0.5)
    assert r.timed_out and r.killed == "timeout"
    r = py(local, "print('z' * 5000)", ws, limits=Limits(output_bytes=100))
    assert r.truncated and r.stdout == "z" * 100


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie waits for its new parent to reap it


def test_local_kills_background_children(local: LocalBackend, ws: Path) -> None:
    r = local.run(["/bin/sh", "-c", "sleep 30 & echo $!"], workspace=ws, timeout_s=10)
    pid = int(r.stdout)
    for _ in range(200):
        if not _alive(pid):
            break
        time.sleep(0.02)
    assert not _alive(pid)


def test_local_rejects_binds(local: LocalBackend, ws: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot mount"):
        local.run(["true"], workspace=ws, timeout_s=5, ro_binds={tmp_path: "/x"})


def test_run_validates_arguments(local: LocalBackend, ws: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="non-empty list of strings"):
        local.run("echo hi", workspace=ws, timeout_s=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="existing folder"):
        local.run(["true"], workspace=tmp_path / "missing", timeout_s=5)
    with pytest.raises(ConfigError, match="timeout_s"):
        local.run(["true"], workspace=ws, timeout_s=0)
    with pytest.raises(ConfigError, match="absolute path"):
        local.run(["true"], workspace=ws, timeout_s=5, rw_binds={tmp_path: "relative/dir"})
    with pytest.raises(ConfigError, match="does not exist"):
        local.run(["true"], workspace=ws, timeout_s=5, ro_binds={tmp_path / "nope": "/x"})


# ---------------------------------------------------------------- make_backend


def test_unknown_backend_suggests_the_closest_name() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'bubblewrap'") as err:
        make_backend("bubblewarp")
    assert isinstance(err.value, ValueError) and isinstance(err.value, AgentGymError)


def test_local_requires_unsafe() -> None:
    with pytest.raises(ConfigError, match="unsafe=True"):
        make_backend("local")
    assert isinstance(make_backend("local", unsafe=True), LocalBackend)


def test_auto_without_any_backend_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "bubblewrap_status", lambda: (False, "bwrap not on PATH"))
    monkeypatch.setattr(backends, "docker_status", lambda: (False, "no engine"))
    with pytest.raises(BackendUnavailable) as err:
        make_backend("auto")
    message = str(err.value)
    assert "apt-get install -y bubblewrap" in message and "start a Docker engine" in message
    assert "backend='local', unsafe=True" in message and "bwrap not on PATH" in message
    assert isinstance(err.value, RuntimeError) and isinstance(err.value, AgentGymError)
    with pytest.raises(BackendUnavailable):  # never local automatically, even if asked
        make_backend("auto", unsafe=True)
    assert available_backends() == ["local"]


@sandbox
@needs_bwrap
def test_auto_picks_bubblewrap() -> None:
    backend = make_backend()
    assert isinstance(backend, BubblewrapBackend) and backend.isolation is Isolation.STRONG
    assert isinstance(make_backend("bwrap"), BubblewrapBackend)
    assert available_backends()[0] == "bubblewrap" and available_backends()[-1] == "local"


def test_docker_unavailable_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "docker_status", lambda: (False, "no engine"))
    with pytest.raises(BackendUnavailable, match="start a Docker engine"):
        DockerBackend()


# ---------------------------------------------------------------- recommended fixes

_BACKEND_KWARGS = re.compile(r"backend=(['\"])(\w+)\1(, unsafe=True)?")
README = Path(__file__).resolve().parents[2] / "README.md"


def _recommended_backend_fixes(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every backend choice that RepoFix's error messages or the README recommend."""
    messages = [README.read_text(encoding="utf-8")]
    with monkeypatch.context() as m:
        m.setattr(backends, "bubblewrap_status", lambda: (False, "bwrap not on PATH"))
        m.setattr(backends, "docker_status", lambda: (False, "no engine"))
        for make in (
            lambda: make_backend("auto"),
            lambda: make_backend("local"),
            LocalBackend,
            DockerBackend,
            lambda: gym.make("agentgym/RepoFix-v1"),
            lambda: gym.make("agentgym/RepoFix-v1", backend="local"),
            lambda: gym.make("agentgym/RepoFix-v1", backend="bwrap", unsafe=True),
        ):
            with pytest.raises(AgentGymError) as err:
                make()
            messages.append(str(err.value))
    found = {m.group(0) for text in messages for m in _BACKEND_KWARGS.finditer(text)}
    found |= {
        "LocalBackend(unsafe=True)" for text in messages if "LocalBackend(unsafe=True)" in text
    }
    return found


def test_every_recommended_backend_fix_works(monkeypatch: pytest.MonkeyPatch) -> None:
    # the README and LocalBackend's own error once recommended gym.make(...,
    # backend="local", unsafe=True), which raised TypeError: run every recommendation
    fixes = _recommended_backend_fixes(monkeypatch)
    assert "backend='local', unsafe=True" in fixes and 'backend="local", unsafe=True' in fixes
    assert "LocalBackend(unsafe=True)" in fixes and 'backend="docker"' in fixes
    for fix in sorted(fixes):
        local = fix.startswith("LocalBackend")
        call = ast.parse(fix if local else f"f({fix})", mode="eval").body
        assert isinstance(call, ast.Call)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        if local:
            kwargs = {"backend": LocalBackend(**kwargs)}
        try:
            env = gym.make("agentgym/RepoFix-v1", **kwargs)
        except BackendUnavailable:  # docker or bubblewrap where none runs: the named fix
            assert kwargs["backend"] in ("docker", "bubblewrap"), fix
            continue
        try:
            env.reset(seed=0)
            obs, _, _, _, info = env.step("run(cmd=\"python -c 'print(6 * 7)'\")")
            assert not info["error"] and "42" in obs, (fix, obs)
        finally:
            env.close()


def test_unsafe_is_only_for_the_local_backend() -> None:
    for backend in ("auto", "bubblewrap", "docker"):
        with pytest.raises(ConfigError, match="unsafe=True only applies to the local backend"):
            choose_backend(backend, True)
    with pytest.raises(ConfigError, match="unsafe must be True or False"):
        choose_backend("local", "yes")  # type: ignore[arg-type]
    local = LocalBackend(unsafe=True)
    assert choose_backend(local, True) is local and choose_backend(local, False) is local
    assert isinstance(choose_backend("local", True), LocalBackend)


def test_a_cgroup_that_cannot_be_made_is_a_sandbox_error(tmp_path: Path) -> None:
    """Where cgroup folders cannot be created (inside a container), the run gets the
    SandboxError that names cgroups=False, not an AttributeError from the cleanup."""
    from agentgym_envs.sandbox._process import SandboxError, _CgroupRoot, _RunCgroups

    missing = _CgroupRoot("pids", tmp_path / "no" / "such" / "cgroup")
    with pytest.raises(SandboxError, match="cgroups=False"):
        _RunCgroups([missing], Limits())
