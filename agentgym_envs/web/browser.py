"""Headless Chromium for the web envs: one browser per process, driven by Playwright's
async API on an event loop in a thread of its own, one context per env.

Envs hand the loop coroutines with :meth:`BrowserDriver.call` and wait for the result,
so ``env.step`` works from any thread, including code that runs its own asyncio loop,
and the episodes of several envs (one per thread) interleave on the one browser: while
one waits for a page, another's action runs. The browser is restarted after
``restart_every`` contexts or when its memory passes ``max_rss_mb``; ``close`` (and
interpreter exit) stop it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

from agentgym_envs.core.errors import AgentGymError, CallContextError, ConfigError

logger = logging.getLogger(__name__)
T = TypeVar("T")

CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)
_FIX = (
    "install Debian's chromium (apt-get install -y chromium) and Playwright "
    "(pip install 'agentgym-envs[web]'), or set AGENTGYM_CHROMIUM to a Chromium binary"
)


class BrowserUnavailable(AgentGymError, RuntimeError):
    """Chromium or Playwright is missing or cannot start here."""


class BrowserCrashed(AgentGymError, RuntimeError):
    """The browser or its driver died while running an action (an environment failure)."""


def chromium_path() -> str:
    """``$AGENTGYM_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    explicit = os.environ.get("AGENTGYM_CHROMIUM")
    if explicit:
        if not Path(explicit).is_file():
            raise ConfigError(f"AGENTGYM_CHROMIUM={explicit!r} is not a file; {_FIX}")
        return explicit
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailable(f"no Chromium found on PATH; {_FIX}")


def browser_status() -> tuple[bool, str]:
    """Whether Playwright and a Chromium binary are installed (without starting them)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False, f"Playwright is not installed; {_FIX}"
    try:
        return True, chromium_path()
    except (BrowserUnavailable, ConfigError) as exc:
        return False, str(exc)


class BrowserDriver:
    """A Chromium browser on an event loop in a driver thread.

    Args:
        restart_every: contexts (episodes) after which the browser is restarted.
        max_rss_mb: restart when the browser's processes use more memory than this.
    """

    def __init__(self, *, restart_every: int = 200, max_rss_mb: int = 1500) -> None:
        ok, detail = browser_status()
        if not ok:
            raise BrowserUnavailable(detail)
        self.executable = detail
        self.restart_every = restart_every
        self.max_rss_mb = max_rss_mb
        self._playwright: Any = None
        self._browser: Any = None
        self._contexts = 0  # made by the current browser
        self._live: dict[Any, int] = {}  # browser -> open contexts
        self._owner: dict[int, Any] = {}  # id(context) -> its browser
        self._closed = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="agentgym-browser", daemon=True
        )
        self._thread.start()
        self._lock = asyncio.Lock()
        self.call(self._launch)

    def call(
        self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, timeout: float = 60.0
    ) -> T:
        """Run the coroutine ``fn(*args)`` on the driver's loop; its result or its error."""
        if self._closed:
            raise BrowserCrashed("the browser driver is closed")
        if threading.current_thread() is self._thread:
            raise CallContextError(
                "BrowserDriver.call was called from the driver thread, which it would wait on "
                "(a deadlock); expected a call from another thread: await the coroutine instead"
            )
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            fn(*args), self.loop
        )
        try:
            return future.result(timeout=timeout)
        except FutureTimeout as exc:
            future.cancel()
            raise BrowserCrashed(f"the browser did not answer within {timeout:.0f} s") from exc

    async def _launch(self) -> None:
        from playwright.async_api import async_playwright

        if self._playwright is None:
            self._playwright = await async_playwright().start()
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.executable, args=list(CHROMIUM_FLAGS), headless=True
            )
        except Exception as exc:
            raise BrowserUnavailable(f"Chromium did not start ({exc}); {_FIX}") from exc
        self._live[self._browser] = 0
        self._contexts = 0

    async def new_context(self, options: dict[str, Any]) -> Any:
        """A fresh browser context. When the browser is due for a restart (contexts made,
        memory), new contexts go to a new browser and the old one closes once its last
        context does, so no live episode loses its page. A coroutine: run it on the loop
        (``call``) or await it there; hand the context back with :meth:`release`."""
        async with self._lock:
            if self._browser is None or not self._browser.is_connected() or self._due():
                old = self._browser
                await self._launch()
                if old is not None:
                    await self._retire(old)
            self._contexts += 1
            self._live[self._browser] += 1
            context = await self._browser.new_context(**options)
            self._owner[id(context)] = self._browser
            return context

    async def release(self, context: Any) -> None:
        """Close a context from :meth:`new_context` (and a retired browser it was the
        last context of)."""
        browser = self._owner.pop(id(context), None)
        with contextlib.suppress(Exception):  # its browser may be gone already
            await context.close()
        if browser is not None and browser in self._live:
            self._live[browser] -= 1
            if browser is not self._browser and self._live[browser] <= 0:
                await self._retire(browser)

    async def _retire(self, browser: Any) -> None:
        if self._live.get(browser, 0) > 0 and browser.is_connected():
            return  # closed by release() when its last context goes
        self._live.pop(browser, None)
        with contextlib.suppress(Exception):
            await browser.close()

    def _due(self) -> bool:
        return self._contexts >= self.restart_every or self.rss_mb() > self.max_rss_mb

    def rss_mb(self) -> float:
        """Proportional memory (PSS) of the browser's processes: shared pages are counted
        once across processes, unlike RSS."""
        total = 0
        for pid in browser_pids():
            try:
                with open(f"/proc/{pid}/smaps_rollup") as fh:
                    for line in fh:
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) * 1024
                            break
            except OSError:
                continue
        return total / 2**20

    def restart(self) -> None:
        """Throw the current browser away and start a new one (after a crash)."""
        self.call(self._restart)

    async def _restart(self) -> None:
        async with self._lock:
            old = self._browser
            self._live.pop(old, None)
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.close()
            await self._launch()

    async def _shutdown(self) -> None:
        for browser in [*self._live, self._browser]:
            if browser is not None:
                with contextlib.suppress(Exception):
                    await browser.close()
        self._live.clear()
        self._browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
        self._playwright = None

    def close(self) -> None:
        """Stop the browser, Playwright and the driver thread. Idempotent."""
        if self._closed:
            return
        try:
            self.call(self._shutdown, timeout=30)
        except Exception:
            logger.debug("browser shutdown", exc_info=True)
        self._closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)


def browser_pids() -> list[int]:
    """Chromium processes that are children of this process (for leak checks)."""
    me = os.getpid()
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents[int(entry)], names[int(entry)] = ppid, name
    out = []
    for pid, name in names.items():
        if "chrom" not in name.lower() and "headless" not in name.lower():
            continue
        ancestor, hops = parents.get(pid, 0), 0
        while ancestor not in (0, 1, me) and hops < 10:
            ancestor, hops = parents.get(ancestor, 0), hops + 1
        if ancestor == me:
            out.append(pid)
    return sorted(out)


_SHARED: BrowserDriver | None = None
_SHARED_LOCK = threading.Lock()


def shared_driver() -> BrowserDriver:
    """The process's browser (started on first use, stopped at exit); it is rotated
    every ``$AGENTGYM_BROWSER_RESTART_EVERY`` contexts (200)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED._closed:
            every = os.environ.get("AGENTGYM_BROWSER_RESTART_EVERY", "200")
            if not every.isdigit() or int(every) < 1:
                raise ConfigError(
                    f"AGENTGYM_BROWSER_RESTART_EVERY must be a positive int, got {every!r}"
                )
            _SHARED = BrowserDriver(restart_every=int(every))
            atexit.register(_SHARED.close)
        return _SHARED
