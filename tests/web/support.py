"""Shared markers for the browser tests.

Without Chromium and Playwright these tests skip with the reason, except where
``AGENTGYM_REQUIRE_BROWSER=1`` (CI sets it): there a missing browser fails them loudly.
"""

from __future__ import annotations

import os

import pytest

from agentgym_envs.web.browser import browser_status

REQUIRED = os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1"
needs_browser = pytest.mark.skipif(
    not REQUIRED and not browser_status()[0], reason=f"no browser here: {browser_status()[1]}"
)
