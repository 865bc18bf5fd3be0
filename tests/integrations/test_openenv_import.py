"""What importing the OpenEnv adapter costs: the client and the server never load
upstream's Gradio web UI (seconds of imports that neither uses), and gradio stays
importable afterwards for whoever does want it."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("gradio", reason="the web UI's cost exists only where gradio is installed")

CHECK = """
import sys
from agentgym_envs.integrations.openenv import OpenEnvGymEnv, serve
loaded = [m for m in sys.modules if m.partition(".")[0] == "gradio"]
print("gradio modules:", len(loaded))
import gradio  # still importable: the adapter hid it only while openenv.core loaded
import openenv.core.env_server.web_interface  # and so is upstream's web UI, on demand
"""


def test_importing_the_client_does_not_import_gradio() -> None:
    run = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "gradio modules: 0" in run.stdout, run.stdout
