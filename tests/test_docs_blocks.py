"""Every code block of README.md and docs/*.md runs here, as written, or says why not.

A block is run by its language: ``python`` in a fresh interpreter, ``bash`` with this venv's
``agentgym`` and ``python`` first on ``PATH`` (both in an empty folder, with a timeout);
``toml`` and ``yaml`` are parsed; ``text`` is prose. An HTML comment right before a block
changes that:

* ``<!-- not run: REASON -->``: never run (an install, a GPU, a cluster, a placeholder);
* ``<!-- slow: REASON -->``: run only with ``-m slow`` or ``AGENTGYM_SLOW=1``;
* ``<!-- tested by PATH -->``: run by that test module (which must exist);
* ``<!-- continues -->``: a python block that goes on from the python block before it,
  run together with it (and the blocks it continues);
* ``<!-- with server: COMMAND -->``: COMMAND (an ``agentgym`` server on port 8000) is
  started first and stopped after. The port becomes a free one, in the command and in the
  block alike, so a busy port 8000 on this machine cannot fail the test.

Marks stack, one comment a line (``slow`` over ``with server``, say).

docs/add_an_env.md is tested block by block in tests/test_add_an_env.py.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs whose task ids the docs name)
from agentgym_envs.registration import all_entries

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TESTED_ELSEWHERE = {"docs/add_an_env.md": "tests/test_add_an_env.py"}
"""Docs whose every block another test module runs or quotes (it checks all of them)."""
MARKS = ("not run", "slow", "tested by", "continues", "with server")
LANGUAGES = ("python", "bash", "toml", "yaml", "text")
TIMEOUT_S = 240
BIN = str(Path(sys.executable).parent)


@dataclass(frozen=True)
class Block:
    """One fenced code block and the marks right before it."""

    doc: str  # relative to the repository root
    line: int  # of the opening fence
    lang: str
    text: str
    marks: dict[str, str]  # mark (one of MARKS, or "?" for an unknown one) -> its detail

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def has(self, *marks: str) -> bool:
        return any(m in self.marks for m in marks)


def _marks(before: str) -> dict[str, str]:
    """The HTML comments that end ``before`` (the text up to a fence, one comment a line),
    as mark -> detail (the reason, path or command after the mark's colon)."""
    found: dict[str, str] = {}
    for line in reversed(before.rstrip("\n").split("\n")):
        line = line.strip()
        if not (line.startswith("<!--") and line.endswith("-->")):
            break
        comment = line[4:-3].strip()
        mark = next((m for m in MARKS if comment.startswith(m)), "?")
        found[mark] = comment[len(mark) :].lstrip(": ").strip() if mark != "?" else comment
    return found


def doc_blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        doc = str(path.relative_to(ROOT))
        for match in re.finditer(r"^```(\w*)\n(.*?)^```[ \t]*$", text, flags=re.S | re.M):
            marks = _marks(text[: match.start()])
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(doc, line, match.group(1), match.group(2), marks))
    return found


BLOCKS = doc_blocks()


def _runs_here(block: Block) -> bool:
    return block.doc not in TESTED_ELSEWHERE and not block.has("not run", "tested by")


def python_chains() -> list[list[Block]]:
    """Python blocks to run, each with the blocks it continues in front of it."""
    chains: list[list[Block]] = []
    last: dict[str, list[Block]] = {}  # doc -> the chain of its latest python block
    for block in BLOCKS:
        if block.lang != "python":
            continue
        if block.has("continues"):
            chain = [*last[block.doc], block]
            if last[block.doc] in chains:  # run the whole chain once, as its longest
                chains.remove(last[block.doc])
        else:
            chain = [block]
        last[block.doc] = chain
        if all(_runs_here(b) for b in chain):
            chains.append(chain)
    return chains


def _param(blocks: list[Block]) -> object:
    marks = [pytest.mark.slow] if any(b.has("slow") for b in blocks) else []
    return pytest.param(blocks, id=blocks[-1].id if len(blocks) == 1 else blocks[0].id, marks=marks)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _environ() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


class _Server:
    """A ``with server:`` command, running until the block is done."""

    def __init__(self, command: str, port: int, cwd: Path) -> None:
        self.port = port
        self.log = cwd / "server.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                shlex.split(command.replace("8000", str(port))),
                cwd=cwd,
                env=_environ(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited: {self.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        pytest.fail(f"the server did not listen in {timeout_s} s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- every block says what happens to it ---------------------------------------------------


def test_the_docs_have_blocks_and_every_block_is_accounted_for() -> None:
    assert {b.doc for b in BLOCKS} >= {"README.md", "docs/integrations.md"}
    problems = []
    for block in BLOCKS:
        if block.lang not in LANGUAGES:
            problems.append(f"{block.id}: language {block.lang!r}; use one of {LANGUAGES}")
        if "?" in block.marks:
            problems.append(f"{block.id}: unknown mark <!-- {block.marks['?']} -->; use {MARKS}")
        for mark, detail in block.marks.items():
            if mark in ("not run", "slow", "tested by", "with server") and not detail:
                problems.append(f"{block.id}: <!-- {mark}: ... --> needs its reason")
        tested_by = block.marks.get("tested by")
        if tested_by and not (ROOT / tested_by.split()[0]).exists():
            problems.append(f"{block.id}: tested by {tested_by}, which does not exist")
        if block.has("continues", "with server") and block.lang != "python":
            problems.append(
                f"{block.id}: <!-- continues --> and <!-- with server: --> are for python"
            )
    for doc, module in TESTED_ELSEWHERE.items():
        assert (ROOT / module).exists() and doc in (ROOT / module).read_text()
    assert not problems, "\n".join(problems)


def test_the_task_ids_the_docs_name_exist() -> None:
    """A task id in the docs (``reset(task_id=...)``) is one a user can reset to."""
    pattern = r"\b([a-z]+)-(?:easy|medium|hard)-(?:train|test|ood)-\d+\b"
    named = {m.group(0) for p in DOCS for m in re.finditer(pattern, p.read_text())}
    families = {e.name.lower(): e.id for e in all_entries()}
    for task_id in sorted(named):
        env = gym.make(families[task_id.split("-")[0]])
        try:
            _, info = env.reset(seed=0, options={"task_id": task_id})
        finally:
            env.close()
        assert info["task"]["id"] == task_id


# -- running them ------------------------------------------------------------------------


@pytest.mark.parametrize("chain", [_param(c) for c in python_chains()])
def test_python_block(chain: list[Block], tmp_path: Path) -> None:
    code = "\n\n".join(b.text for b in chain)
    server_marks = [b.marks["with server"] for b in chain if b.has("with server")]
    server = None
    if server_marks:
        port = _free_port()
        server = _Server(server_marks[0], port, tmp_path)
        code = code.replace("8000", str(port))
    try:
        if server is not None:
            server.wait_ready()
        run = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=_environ(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        if server is not None:
            server.stop()
    assert run.returncode == 0, f"{chain[-1].id} failed:\n{run.stderr[-4000:]}"


@pytest.mark.parametrize(
    "blocks", [_param([b]) for b in BLOCKS if b.lang == "bash" and _runs_here(b)]
)
def test_bash_block(blocks: list[Block], tmp_path: Path) -> None:
    [block] = blocks
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=tmp_path,
        env=_environ(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, f"{block.id} failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, id=b.id) for b in BLOCKS if b.lang in ("toml", "yaml") and _runs_here(b)],
)
def test_config_block_parses(block: Block) -> None:
    if block.lang == "toml":
        tomllib.loads(block.text)
    else:
        import yaml

        assert yaml.safe_load(block.text) is not None
