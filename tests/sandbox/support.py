"""Shared markers for the sandbox tests.

Without bubblewrap these tests skip with the reason, except where
``AGENTGYM_REQUIRE_SANDBOX=1`` (CI sets it): there a missing sandbox fails them loudly.
"""

from __future__ import annotations

import os

import pytest

from agentgym_envs.sandbox import backends

REQUIRED = os.environ.get("AGENTGYM_REQUIRE_SANDBOX") == "1"
needs_bwrap = pytest.mark.skipif(
    not REQUIRED and not backends.bubblewrap_available(),
    reason=f"bubblewrap does not work here: {backends.bubblewrap_status()[1]}",
)
