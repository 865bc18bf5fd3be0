"""What the README tells users to import or call exists."""

import re
import subprocess
import sys
from pathlib import Path

from agentgym_envs.registration import ENTRY_POINT_GROUP

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_dotted_name_in_the_readme_resolves() -> None:
    # `from agentgym_envs.wrappers import RecordingWrapper`, as the README put it, failed
    names = set(re.findall(r"agentgym_envs(?:\.[A-Za-z_]\w*)+", README.read_text()))
    names -= {ENTRY_POINT_GROUP}  # the entry-point group, not a module
    assert "agentgym_envs.wrappers.RecordingWrapper" in names
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    module, _, attr = name.rpartition('.')\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        continue\n"
        "    except ImportError:\n"
        "        pass\n"
        "    exec(f'from {module} import {attr}')\n"  # the form a user writes
    )
    for name in sorted(names):  # one fresh interpreter each: import order hides cycles
        run = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True)
        assert run.returncode == 0, f"README names {name}: {run.stderr[-600:]}"
