"""A local web shop for browser envs: a seeded SQLite world served as plain HTML forms.

:func:`build_world` makes a deterministic world from a seed, :class:`SiteServer` serves
one world per tenant over HTTP, and graders read each tenant's database (its
``_changes`` table lists every row an episode touched). The URL map is in
:mod:`agentgym_envs.web.site.pages`, the schema in :mod:`agentgym_envs.web.site.world`.
"""

from agentgym_envs.web.site.pages import handle, respond
from agentgym_envs.web.site.request import Response
from agentgym_envs.web.site.server import (
    TENANT_COOKIE,
    TENANT_HEADER,
    SiteNotRunningError,
    SiteServer,
    TenantNotFoundError,
)
from agentgym_envs.web.site.world import (
    TRACKED_TABLES,
    advance_clock,
    build_world,
    current_time,
    open_world,
)

__all__ = [
    "TENANT_COOKIE",
    "TENANT_HEADER",
    "TRACKED_TABLES",
    "Response",
    "SiteNotRunningError",
    "SiteServer",
    "TenantNotFoundError",
    "advance_clock",
    "build_world",
    "current_time",
    "handle",
    "open_world",
    "respond",
]
