"""Run Python in a subprocess as if some installed modules were missing: every
``sys.meta_path`` finder is wrapped so that it does not find them, the way a venv without
them behaves, so a test can play a user who skipped an optional extra without building
that venv."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Sequence

from tests.plugin_support import ROOT

BLOCKER = """
import sys

class _Without:
    # wraps each finder: the blocked modules are not found, as in a venv without them
    # (``import`` raises ModuleNotFoundError, ``importlib.util.find_spec`` gives None)
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)

sys.meta_path[:] = [_Without(finder) for finder in sys.meta_path]
"""


def run_without(
    modules: Iterable[str], code: str, args: Sequence[str] = (), timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (with ``args`` as ``sys.argv[1:]``) in a fresh Python where none of the
    top-level ``modules`` can be imported."""
    script = f"BLOCKED = {sorted(set(modules))!r}\n{BLOCKER}\n{code}"
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=environ,
    )


CLI = "import sys\nfrom agentgym_envs.cli import main\nsys.exit(main(sys.argv[1:]))"
"""``agentgym`` itself, for :func:`run_without`: the arguments are the command line."""
