"""Calendar time: a fixed clock, and conversions between minutes, ISO strings and days.

Times inside the code are integer minutes since ``EPOCH`` (2025-06-01 00:00 UTC, a
Sunday) and days are day indexes since ``EPOCH``; the database and the tools use UTC ISO
strings (``2025-06-12T14:00:00Z``), which sort chronologically as text. ``NOW`` is the
world's fixed "now", never the wall clock.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from agentgym_envs.core.errors import ArgumentError

EPOCH = datetime(2025, 6, 1, tzinfo=UTC)
NOW = 8 * 1440 + 6 * 60  # Monday 2025-06-09 06:00 UTC, in minutes since EPOCH
FIRST_DAY, LAST_DAY = 8, 26  # the local days with meetings: Mon June 9 .. Fri June 27
DAY = 1440
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):00Z$")
DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def work_window(user: Any, day: int) -> tuple[int, int] | None:
    """A user's working hours on their local ``day`` as UTC minutes, None on weekends."""
    if (day + 6) % 7 >= 5:  # EPOCH (day 0) is a Sunday
        return None
    base = day * DAY - int(user["utc_offset"])
    return base + int(user["work_start"]), base + int(user["work_end"])


def iso(minute: int) -> str:
    """Minutes since EPOCH as a UTC ISO string, ``2025-06-12T14:00:00Z``."""
    return (EPOCH + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:00Z")


def parse_iso(text: str) -> int:
    """A UTC ISO string (``2025-06-12T14:00:00Z``) as minutes since EPOCH.

    Raises:
        ValueError: not in that exact form, or not a real date and time.
    """
    m = ISO.match(text)
    if m is None:
        raise ArgumentError(f"expected a UTC time like 2025-06-12T14:00:00Z, got {text!r}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    moment = datetime(y, mo, d, h, mi, tzinfo=UTC)
    return int((moment - EPOCH).total_seconds()) // 60


def parse_date(text: str) -> int:
    """A date ``YYYY-MM-DD`` as a day index since EPOCH.

    Raises:
        ValueError: not in that form, or not a real date.
    """
    m = DATE.match(text)
    if m is None:
        raise ArgumentError(f"expected a date like 2025-06-12, got {text!r}")
    moment = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
    return (moment - EPOCH).days


def date_text(day: int) -> str:
    """A day index as ``YYYY-MM-DD``."""
    return (EPOCH + timedelta(days=day)).strftime("%Y-%m-%d")


def day_label(day: int) -> str:
    """A day index as ``Thursday 2025-06-12``."""
    return f"{WEEKDAYS[(day + 6) % 7]} {date_text(day)}"


def clock(minute: int) -> str:
    """The time of day of a minute count, ``HH:MM``."""
    return f"{minute % DAY // 60:02d}:{minute % 60:02d}"


def offset_text(offset: int) -> str:
    """A UTC offset in minutes as ``+05:30``."""
    sign = "-" if offset < 0 else "+"
    return f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
