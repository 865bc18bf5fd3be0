"""The Calendar world: offices, employees, meetings, rooms and bookings in SQLite.

Time is fixed per world. ``NOW`` is a reference instant (Monday 2025-06-09 06:00 UTC),
never the wall clock, and meetings span three work weeks around it. Every office sits
in an IANA zone whose UTC offset is a whole or half hour; the offsets are computed with
:mod:`zoneinfo` at ``NOW`` and checked to hold for the whole period (June has no DST
transition in any of these zones), then stored with each user and room. Everything
after world building uses the stored offsets, so results never depend on the host's
time-zone database.

Times are handled by :mod:`~agentgym_envs.business.calendar.clock`.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import sqlite_utils

from agentgym_envs.business.calendar.clock import (
    DAY,
    EPOCH,
    FIRST_DAY,
    LAST_DAY,
    NOW,
    iso,
    work_window,
)
from agentgym_envs.core.errors import ConfigError

ROOM_CAPACITIES = (4, 6, 10, 16)
Row = dict[str, Any]

# (office key, label, IANA zone, share of employees, room names)
OFFICES = (
    ("seattle", "Seattle", "America/Los_Angeles", 3, ("Rainier", "Puget", "Olympic", "Cascade")),
    ("chicago", "Chicago", "America/Chicago", 2, ("Wrigley", "Navy Pier", "Loop", "Lakeshore")),
    ("boston", "Boston", "America/New_York", 3, ("Fenway", "Beacon", "Harbor", "Charles")),
    ("london", "London", "Europe/London", 3, ("Thames", "Soho", "Camden", "Hyde")),
    ("berlin", "Berlin", "Europe/Berlin", 3, ("Spree", "Tiergarten", "Kreuzberg", "Mitte")),
    ("nairobi", "Nairobi", "Africa/Nairobi", 1, ("Kilimanjaro", "Rift", "Savanna", "Karura")),
    ("dubai", "Dubai", "Asia/Dubai", 1, ("Marina", "Creek", "Oasis", "Dune")),
    ("bangalore", "Bangalore", "Asia/Kolkata", 2, ("Lalbagh", "Cubbon", "Nandi", "Kaveri")),
    ("singapore", "Singapore", "Asia/Singapore", 2, ("Sentosa", "Raffles", "Merlion", "Orchard")),
    ("tokyo", "Tokyo", "Asia/Tokyo", 2, ("Sakura", "Fuji", "Shibuya", "Ginza")),
    ("adelaide", "Adelaide", "Australia/Adelaide", 1, ("Torrens", "Glenelg", "Barossa", "Hindley")),
    ("sydney", "Sydney", "Australia/Sydney", 2, ("Bondi", "Manly", "Opera", "Harbour Bridge")),
)

FIRST_NAMES = (  # noqa: SIM905 (a list of names reads best as text)
    "mei ana omar lena kenji priya lucas sofia david amara noah yuki elena ravi chloe "
    "mateo hana ivan zara leo nora arjun emma hugo aisha felix ines tariq maya oscar "
    "leila jonas sara diego fatima ethan lina samir grace tomas nadia adam keiko paulo "
    "ruth kofi vera aiden dara marco julia rohan alma victor ingrid wei"
).split()
LAST_NAMES = (  # noqa: SIM905
    "chen garcia haddad fischer tanaka sharma silva rossi cohen okafor nguyen sato "
    "petrova patel martin kim mueller novak diaz andersen kowalski singh ahmed lopez "
    "yamamoto larsen moreau costa ibrahim schmidt wang johansson reyes okoye brennan "
    "ferrari dubois nakamura gupta weber alvarez mensah hansen murphy kaur lindqvist "
    "park sorensen bianchi keller mwangi ortiz suzuki varga hoffmann nilsson"
).split()
TOPICS = (
    "Payments",
    "Search",
    "Mobile",
    "Billing",
    "Onboarding",
    "Data platform",
    "Security",
    "Pricing",
    "Support",
    "Infra",
    "Growth",
    "Design system",
    "Analytics",
    "Hiring",
    "Roadmap",
    "Partner API",
    "Checkout",
    "Localization",
    "Compliance",
    "Marketing",
)
KINDS = (
    "sync",
    "design review",
    "planning",
    "retro",
    "kickoff",
    "demo",
    "deep dive",
    "budget review",
    "interview debrief",
    "office hours",
    "status update",
    "workshop",
)


@cache
def zone_offsets() -> dict[str, int]:
    """Each office zone's UTC offset in minutes, fixed for the whole world period.

    Raises:
        ConfigError: the time-zone database is missing, or an offset is not a whole or
            half hour, or it changes during the period (a DST transition).
    """
    out: dict[str, int] = {}
    for _, _, zone, _, _ in OFFICES:
        try:
            tz = ZoneInfo(zone)
        except ZoneInfoNotFoundError:
            raise ConfigError(
                f"time zone {zone!r} is not in this system's time-zone database; "
                "install it with `pip install tzdata`"
            ) from None
        offsets = set()
        for minute in (NOW, (FIRST_DAY - 1) * DAY, (LAST_DAY + 2) * DAY):
            delta = (EPOCH + timedelta(minutes=minute)).astimezone(tz).utcoffset()
            assert delta is not None
            offsets.add(int(delta.total_seconds()) // 60)
        if len(offsets) != 1 or next(iter(offsets)) % 30:
            raise ConfigError(
                f"{zone} has offsets {sorted(offsets)} min during the world period; "
                "office zones need one whole- or half-hour offset"
            )
        out[zone] = offsets.pop()
    return out


def build_world(db: sqlite_utils.Database, rng: np.random.Generator, size: int) -> None:
    """Create and fill the calendar tables deterministically from ``rng``.

    Args:
        db: an empty database.
        rng: the world's random generator.
        size: the number of users (10 to 9999).
    """
    if not 10 <= size <= 9999:
        raise ConfigError(f"Calendar world size must be 10..9999 users, got {size}")
    users = _make_users(rng, size)
    rooms = _make_rooms()
    events, attendees, bookings = _make_events(rng, users, rooms)
    _create_tables(db)
    db.table("users").insert_all(users)
    db.table("rooms").insert_all(rooms)
    db.table("events").insert_all(events)
    db.table("attendees").insert_all(attendees)
    db.table("room_bookings").insert_all(bookings)
    # the columns the tools filter on
    db.table("users").create_index(["email"], unique=True)
    db.table("attendees").create_index(["user_id"])
    db.table("room_bookings").create_index(["room_id"])
    # no index on attendees.event_id: an attendee's id is event number * 10000 + user
    # number, so an event's attendees are a range of the primary key (a smaller world)
    db.conn.execute("VACUUM")  # keep the serialised world compact


def _create_tables(db: sqlite_utils.Database) -> None:
    db.table("users").create(
        {
            "id": str,
            "first_name": str,
            "last_name": str,
            "email": str,
            "office": str,
            "time_zone": str,
            "utc_offset": int,
            "work_start": int,
            "work_end": int,
        },
        pk="id",
    )
    db.table("rooms").create(
        {
            "id": str,
            "name": str,
            "location": str,
            "time_zone": str,
            "utc_offset": int,
            "capacity": int,
        },
        pk="id",
    )
    db.table("events").create(
        {"id": str, "title": str, "organizer_id": str, "start": str, "end": str, "status": str},
        pk="id",
    )
    attendee = {"id": int, "event_id": str, "user_id": str, "status": str}
    db.table("attendees").create(attendee, pk="id")
    # an event holds at most one room, so a booking's id is its event's id
    db.table("room_bookings").create({"id": str, "event_id": str, "room_id": str}, pk="id")


def _make_users(rng: np.random.Generator, size: int) -> list[Row]:
    offsets = zone_offsets()
    shares = np.array([o[3] for o in OFFICES], dtype=float)
    offices = rng.choice(len(OFFICES), size=size, p=shares / shares.sum())
    pairs = rng.permutation(len(FIRST_NAMES) * len(LAST_NAMES))[:size]
    if len(pairs) < size:
        raise ConfigError(f"only {len(pairs)} unique names for {size} users")
    starts = rng.choice([480, 510, 540, 570, 600], size=size, p=[0.2, 0.2, 0.3, 0.15, 0.15])
    lengths = rng.choice([480, 510, 540], size=size, p=[0.5, 0.25, 0.25])
    users = []
    for i in range(size):
        first = FIRST_NAMES[int(pairs[i]) // len(LAST_NAMES)]
        last = LAST_NAMES[int(pairs[i]) % len(LAST_NAMES)]
        key, _, zone, _, _ = OFFICES[int(offices[i])]
        users.append(
            {
                "id": f"user_{first}_{last}_{i:04d}",
                "first_name": first.title(),
                "last_name": last.title(),
                "email": f"{first}.{last}@acme.example",
                "office": key,
                "time_zone": zone,
                "utc_offset": offsets[zone],
                "work_start": int(starts[i]),
                "work_end": int(starts[i] + lengths[i]),
            }
        )
    return users


def _make_rooms() -> list[Row]:
    offsets = zone_offsets()
    return [
        {
            "id": f"room_{key}_{n + 1}",
            "name": name,
            "location": key,
            "time_zone": zone,
            "utc_offset": offsets[zone],
            "capacity": ROOM_CAPACITIES[n],
        }
        for key, _, zone, _, names in OFFICES
        for n, name in enumerate(names)
    ]


def _overlap(window: tuple[int, int], user: Row) -> tuple[int, int] | None:
    """Where ``user``'s working hours meet ``window`` (at most one local day can)."""
    lo, hi = window
    for day in range((lo + 720) // DAY - 1, (hi + 720) // DAY + 2):
        w = work_window(user, day)
        if w is not None and max(lo, w[0]) < min(hi, w[1]):
            return max(lo, w[0]), min(hi, w[1])
    return None


def _free(busy: list[tuple[int, int]], start: int, end: int) -> bool:
    return all(e <= start or s >= end for s, e in busy)


def _make_events(
    rng: np.random.Generator, users: list[Row], rooms: list[Row]
) -> tuple[list[Row], list[Row], list[Row]]:
    """Meetings among colleagues whose working hours overlap; no one's accepted
    meetings overlap, and no room is booked twice at once."""
    size = len(users)
    by_office: dict[str, list[int]] = {}
    for i, u in enumerate(users):
        by_office.setdefault(str(u["office"]), []).append(i)
    busy: list[list[tuple[int, int]]] = [[] for _ in users]
    room_busy: dict[str, list[tuple[int, int]]] = {str(r["id"]): [] for r in rooms}
    workdays = [d for d in range(FIRST_DAY, LAST_DAY + 1) if (d + 6) % 7 < 5]
    attempts = size * 8
    numbers = rng.choice(800_000, size=attempts, replace=False) + 100_000
    events: list[Row] = []
    attendees: list[Row] = []
    bookings: list[Row] = []
    for attempt in range(attempts):
        org = int(rng.integers(size))
        window = work_window(users[org], workdays[int(rng.integers(len(workdays)))])
        assert window is not None
        duration = int(rng.choice([30, 30, 30, 45, 60, 60, 90]))
        wanted = int(rng.choice([1, 1, 2, 2, 2, 3, 3, 4, 5, 7]))
        local = by_office[str(users[org]["office"])]
        chosen: list[int] = []
        common = window
        for _ in range(wanted * 3):
            if len(chosen) == wanted:
                break
            pool = local if rng.random() < 0.6 else range(size)
            v = int(pool[int(rng.integers(len(pool)))])
            if v == org or v in chosen:
                continue
            meet = _overlap(common, users[v])
            if meet is not None and meet[1] - meet[0] >= duration:
                chosen.append(v)
                common = meet
        if not chosen:
            continue
        first = -(-common[0] // 30) * 30
        starts = [
            t for t in range(first, common[1] - duration + 1, 30)
            if _free(busy[org], t, t + duration)
        ]  # fmt: skip
        if not starts:
            continue
        start = starts[int(rng.integers(len(starts)))]
        end = start + duration
        number = int(numbers[attempt])
        event_id = f"evt_{number:06d}"
        topic, kind = TOPICS[int(rng.integers(len(TOPICS)))], KINDS[int(rng.integers(len(KINDS)))]
        events.append(
            {
                "id": event_id,
                "title": f"{topic} {kind}",
                "organizer_id": users[org]["id"],
                "start": iso(start),
                "end": iso(end),
                "status": "confirmed",
            }
        )
        busy[org].append((start, end))
        people = [(org, "accepted")]
        for v in chosen:
            if _free(busy[v], start, end):
                status = str(rng.choice(_FREE_STATUSES, p=_FREE_P))
            else:  # never accepted over another accepted meeting
                status = str(rng.choice(_BUSY_STATUSES, p=_BUSY_P))
            if status == "accepted":
                busy[v].append((start, end))
            people.append((v, status))
        attendees.extend(
            {"id": number * 10_000 + v, "event_id": event_id, "user_id": users[v]["id"],
             "status": status}
            for v, status in people
        )  # fmt: skip
        if len(people) >= 3 and rng.random() < 0.5:
            for room in rooms:
                rid = str(room["id"])
                if (
                    room["location"] == users[org]["office"]
                    and int(room["capacity"]) >= len(people)
                    and _free(room_busy[rid], start, end)
                ):
                    room_busy[rid].append((start, end))
                    bookings.append({"id": event_id, "event_id": event_id,
                                     "room_id": rid})  # fmt: skip
                    break
    return events, attendees, bookings


_FREE_STATUSES = ("accepted", "tentative", "declined", "needs_action")
_FREE_P = (0.65, 0.1, 0.1, 0.15)
_BUSY_STATUSES = ("tentative", "declined", "needs_action")
_BUSY_P = (0.3, 0.3, 0.4)
