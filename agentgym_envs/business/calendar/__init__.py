"""Calendar: a corporate calendar assistant across time zones (:class:`CalendarEnv`).

Import this package by its full name (``agentgym_envs.business.calendar``). Its
directory name would shadow the standard library's ``calendar`` if
``agentgym_envs/business`` itself landed on ``sys.path`` (running one of its files as a
script), so run business modules with ``python -m``, never as scripts; none of its
modules is named after a standard-library module (the clock is ``clock``, not ``time``).
"""

from agentgym_envs.business.calendar.env import CalendarEnv

__all__ = ["CalendarEnv"]
