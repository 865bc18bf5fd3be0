"""The serving benchmark's view of a server's whole process tree (issue 31): a real parent
with a real child that holds a known amount of memory, and a grandchild that burned CPU
and was reaped, all read from ``/proc`` as the benchmark reads a server's; and an orphan
that only the server's cgroup still counts, as a sandbox in a pid namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from agentgym_envs.integrations.openenv_load import (
    CpuCgroup,
    descendants,
    proc_figures,
    tree_figures,
)

HELD_MIB = 200
BURN_S = 0.5

_ROOT = textwrap.dedent(
    f"""
    import subprocess, sys
    # a command that ran in a child and exited: its parent reaped it, as a sandbox's is
    burn = "import time\\nend = time.process_time() + {BURN_S}\\n"
    burn += "while time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    # a child that holds {HELD_MIB} MiB, every page written, until our stdin closes
    hold = "import sys\\nheld = b'x' * ({HELD_MIB} * 2**20)\\n"
    hold += "print('ready', flush=True)\\nsys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    print(holder.pid, flush=True)
    holder.wait()
    """
)


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[str]]:
    root = subprocess.Popen(
        [sys.executable, "-c", _ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    yield root
    if root.stdin is not None:
        root.stdin.close()  # the holder reads our stdin (inherited): it ends, then the root
    root.wait(timeout=60)


def test_the_tree_counts_a_childs_memory_and_a_reaped_childs_cpu(
    tree: subprocess.Popen[str],
) -> None:
    assert tree.stdout is not None
    holder = int(tree.stdout.readline())
    server, whole = proc_figures(tree.pid), tree_figures(tree.pid)
    assert server is not None and whole is not None
    assert descendants(tree.pid) == [holder]
    assert whole.processes == 2
    held = HELD_MIB * 2**20
    assert server.rss < held  # the server alone misses its child's memory ...
    assert whole.rss - server.rss >= held  # ... its tree holds it (and the child's Python)
    assert whole.pss is not None and held <= whole.pss <= whole.rss
    # the burner's CPU is in the root's cutime: in the tree's, not in the root's own
    assert whole.cpu_s >= BURN_S - 0.05
    assert server.cpu_s < whole.cpu_s - (BURN_S - 0.1)
    cheap = tree_figures(tree.pid, pss=False)  # what the benchmark samples every second
    assert cheap is not None and cheap.pss is None and cheap.processes == 2


def test_a_process_that_is_gone_has_no_tree(tree: subprocess.Popen[str]) -> None:
    assert tree.stdout is not None and tree.stdin is not None
    tree.stdout.readline()
    tree.stdin.close()
    tree.wait(timeout=60)
    assert tree_figures(tree.pid) is None and proc_figures(tree.pid) is None


_ORPHAN = textwrap.dedent(
    f"""
    import os, sys, time
    sys.stdin.readline()  # in the cgroup now
    done_r, done_w = os.pipe()
    if os.fork() == 0:  # the middle: starts the burner and ends at once
        if os.fork() == 0:  # the burner: an orphan, reaped by the host's init, never by us
            end = time.process_time() + {BURN_S}
            while time.process_time() < end:
                pass
            os._exit(0)
        os._exit(0)
    os.close(done_w)
    os.wait()
    os.read(done_r, 1)  # end of file: the burner has ended
    print("done", flush=True)
    sys.stdin.read()
    """
)


def test_the_cgroup_counts_the_cpu_of_a_child_reaped_outside_the_tree() -> None:
    cgroup = CpuCgroup.create(f"agentgym-test-{os.getpid()}")
    if cgroup is None:
        pytest.skip("no writable cgroup v1 cpuacct hierarchy here (root on cgroup v1)")
    root = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert root.stdin is not None and root.stdout is not None
    try:
        cgroup.add(root.pid)
        root.stdin.write("go\n")
        root.stdin.flush()
        assert root.stdout.readline().strip() == "done"
        whole = tree_figures(root.pid, cgroup=cgroup)
        assert whole is not None and whole.processes == 1
        # /proc lost the orphan with its parent; its cgroup did not
        assert whole.cpu_s < BURN_S / 2
        assert whole.cgroup_cpu_s is not None and whole.cgroup_cpu_s >= BURN_S - 0.05
    finally:
        root.stdin.close()
        root.wait(timeout=60)
        cgroup.remove()
    assert not cgroup.path.exists() and cgroup.cpu_s() is None
