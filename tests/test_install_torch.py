"""scripts/install_torch.sh, the Makefile's torch step: torch's CPU build unless an NVIDIA GPU
answers, the default index when the CPU index cannot be reached (with a note), and the
overrides the README documents. The machine is faked: ``PATH`` holds only a fake
``nvidia-smi`` (or nothing), and ``python`` is a script that logs its pip command."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_torch.sh"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _install(
    tmp_path: Path,
    *,
    gpu: str | None,
    index_reachable: bool = True,
    environ: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the script; ``gpu`` is None (no nvidia-smi), "ok" or "broken" (a driver that
    fails). Returns the run and the pip commands the fake python received."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu is not None:
        code = 0 if gpu == "ok" else 9
        _executable(bin_dir / "nvidia-smi", f"#!/bin/sh\necho 'GPU 0: NVIDIA H100'\nexit {code}\n")
    log = tmp_path / "pip.log"
    fail = "" if index_reachable else 'case "$*" in *--index-url*) exit 1;; esac\n'
    python = _executable(tmp_path / "python", f'#!/bin/sh\necho "$*" >> {log}\n{fail}exit 0\n')
    env = {"PATH": str(bin_dir), **(environ or {})}
    run = subprocess.run(
        ["/bin/bash", str(SCRIPT), *args, str(python)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return run, calls


def test_without_a_gpu_torch_comes_from_the_cpu_index(tmp_path: Path) -> None:
    run, calls = _install(tmp_path, gpu=None)
    assert run.returncode == 0, run.stderr
    assert len(calls) == 1 and f"--index-url {CPU_INDEX}" in calls[0]
    assert calls[0].endswith("torch>=2.4")
    assert "no NVIDIA GPU" in run.stdout


def test_a_broken_nvidia_smi_counts_as_no_gpu(tmp_path: Path) -> None:
    _, calls = _install(tmp_path, gpu="broken")
    assert f"--index-url {CPU_INDEX}" in calls[0]


def test_with_a_gpu_torch_comes_from_the_default_index(tmp_path: Path) -> None:
    run, calls = _install(tmp_path, gpu="ok")
    assert run.returncode == 0, run.stderr
    assert len(calls) == 1 and "--index-url" not in calls[0]


def test_an_unreachable_cpu_index_falls_back_to_the_default_index_with_a_note(
    tmp_path: Path,
) -> None:
    run, calls = _install(tmp_path, gpu=None, index_reachable=False)
    assert run.returncode == 0, run.stderr
    assert len(calls) == 2 and "--index-url" in calls[0] and "--index-url" not in calls[1]
    assert CPU_INDEX in run.stderr and "default index" in run.stderr


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        ({"TORCH_INDEX": ""}, None),  # empty: pip's default index, even without a GPU
        ({"TORCH_INDEX": "https://download.pytorch.org/whl/cu124"}, "whl/cu124"),
        ({"TORCH_SPEC": "torch==2.6.0"}, CPU_INDEX),
    ],
)
def test_the_overrides(tmp_path: Path, environ: dict[str, str], want: str | None) -> None:
    run, calls = _install(tmp_path, gpu=None, environ=environ)
    assert run.returncode == 0, run.stderr
    assert ("--index-url" in calls[0]) == (want is not None)
    if want is not None:
        assert want in calls[0]
    assert calls[0].endswith(environ.get("TORCH_SPEC", "torch>=2.4"))


def test_dry_run_prints_the_command_and_installs_nothing(tmp_path: Path) -> None:
    run, calls = _install(tmp_path, gpu=None, args=("--dry-run",))
    assert run.returncode == 0, run.stderr
    assert calls == []
    assert f"--index-url {CPU_INDEX}" in run.stdout and "torch>=2.4" in run.stdout


def test_make_installs_torch_through_the_script_and_pins_nothing_of_one_machine() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/install_torch.sh" in makefile
    # a version pin, never a fact about one machine's disk
    assert re.search(r"TORCH_SPEC \?= torch==\d", makefile)
    for text in (makefile, (ROOT / "README.md").read_text()):
        assert "local disk" not in text
    dry = subprocess.run(
        ["make", "-n", "-B", "install", "VENV=/nonexistent-venv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    assert dry.returncode == 0, dry.stderr
    assert "scripts/install_torch.sh /nonexistent-venv/bin/python" in dry.stdout
