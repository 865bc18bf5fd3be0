"""Browser environments and the local web sites they drive.

:data:`FAMILY` is what the shared layers know of the family
(:class:`~agentgym_envs.core.family.Family`); importing this package imports no browser.
"""

import sys

from agentgym_envs.core.family import Family, FamilyCost


def close_shared_browser() -> None:
    """Stop this process's shared browser, if one was started (an env actor's close).

    Never imports the browser module: a process that made no web env has nothing to stop.
    """
    browser = sys.modules.get("agentgym_envs.web.browser")
    if browser is not None and browser._SHARED is not None:
        browser._SHARED.close()


FAMILY = Family(
    name="web",
    package=__name__,
    # a headless Chromium per actor (shared by its envs) plus a context per episode
    cost=FamilyCost(cpus_per_env=1.0, memory_mib_base=600, memory_mib_per_env=160),
    bench="agentgym_envs.web.bench:bench_webshop",
    bench_table="agentgym_envs.web.bench:print_bench",
    bench_ray=("WebShop",),
    redteam="agentgym_envs.redteam.web:attacks",
    injection={"WebShop": "agentgym_envs.web.injection:webshop"},
    test_marks=("browser",),
    actor_close="agentgym_envs.web:close_shared_browser",
)

__all__ = ["FAMILY", "close_shared_browser"]
