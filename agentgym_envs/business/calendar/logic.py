"""Calendar queries and changes shared by the tools, the rule gates and the task generator.

Keeping one implementation of "who is busy when", "what is free" and "how a write
changes the tables" means the gold conversations the generator writes, the gates that
judge an agent and the tools that serve it can never disagree.

Functions take the episode database (anything with ``one``/``all``/``write``, such as
:class:`~agentgym_envs.business.db.EpisodeDB`). Times are minutes since
``world.EPOCH``; the tables hold UTC ISO strings.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentgym_envs.business.calendar.clock import DAY, NOW, clock, iso, parse_iso, work_window

Row = dict[str, Any]
Interval = tuple[int, int]
STATUSES = ("accepted", "declined", "tentative", "needs_action")
parse = parse_iso  # stored times are always well formed


class Database(Protocol):
    def one(self, sql: str, params: Any = ()) -> Row | None: ...
    def all(self, sql: str, params: Any = ()) -> list[Row]: ...
    def write(self, sql: str, params: Any = ()) -> int: ...


# -- lookups ---------------------------------------------------------------------------


def user_row(db: Database, user_id: str) -> Row | None:
    return db.one("SELECT * FROM users WHERE id = ?", (user_id,))


def event_row(db: Database, event_id: str) -> Row | None:
    return db.one("SELECT * FROM events WHERE id = ?", (event_id,))


def room_row(db: Database, room_id: str) -> Row | None:
    return db.one("SELECT * FROM rooms WHERE id = ?", (room_id,))


def _number(key: str) -> int:
    """The number ending an id (``evt_123456`` -> 123456); -1 for a malformed id, which
    then matches no row."""
    tail = key.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() and len(tail) <= 7 else -1


def attendee_id(event_id: str, user_id: str) -> int:
    """An attendee row's id: it encodes the event and the user, so it does not depend
    on the order in which rows were written."""
    return _number(event_id) * 10_000 + _number(user_id)


def attendees_of(db: Database, event_id: str) -> list[Row]:
    """An event's attendee rows (a primary-key range: see ``attendee_id``)."""
    base = _number(event_id) * 10_000
    return db.all(
        "SELECT user_id, status FROM attendees WHERE id BETWEEN ? AND ? ORDER BY id",
        (base, base + 9_999),
    )


def attending(db: Database, event: Row) -> list[str]:
    """The users an event's time must suit: every attendee who has not declined."""
    return [a["user_id"] for a in attendees_of(db, event["id"]) if a["status"] != "declined"]


def status_of(db: Database, event_id: str, user_id: str) -> str | None:
    row = db.one("SELECT status FROM attendees WHERE id = ?", (attendee_id(event_id, user_id),))
    return None if row is None else str(row["status"])


def room_of(db: Database, event_id: str) -> str | None:
    row = db.one("SELECT room_id FROM room_bookings WHERE id = ?", (event_id,))
    return None if row is None else str(row["room_id"])


def local_day_range(offset: int, day: int) -> Interval:
    """A local calendar day (offset in minutes) as a UTC interval."""
    return day * DAY - offset, (day + 1) * DAY - offset


def local_day(offset: int, minute: int) -> int:
    """The local day index of a UTC minute."""
    return (minute + offset) // DAY


def events_on_day(db: Database, user_id: str, lo: int, hi: int) -> list[Row]:
    """The confirmed events a user is invited to that overlap [lo, hi)."""
    return db.all(
        "SELECT e.id AS event_id, e.title, e.start, e.end, e.organizer_id, "
        "a.status AS my_status, b.room_id FROM attendees a "
        "JOIN events e ON e.id = a.event_id LEFT JOIN room_bookings b ON b.id = e.id "
        "WHERE a.user_id = ? AND e.status = 'confirmed' AND e.start < ? AND e.end > ? "
        "ORDER BY e.start, e.id",
        (user_id, iso(hi), iso(lo)),
    )


def busy(db: Database, user_id: str, lo: int, hi: int, exclude: str = "") -> list[Row]:
    """A user's accepted, confirmed events overlapping [lo, hi), except ``exclude``."""
    return db.all(
        "SELECT e.id, e.title, e.start, e.end FROM attendees a JOIN events e "
        "ON e.id = a.event_id WHERE a.user_id = ? AND a.status = 'accepted' "
        "AND e.status = 'confirmed' AND e.start < ? AND e.end > ? AND e.id != ? "
        "ORDER BY e.start, e.id",
        (user_id, iso(hi), iso(lo), exclude),
    )


def room_busy(db: Database, room_id: str, lo: int, hi: int, exclude: str = "") -> list[Row]:
    """A room's confirmed bookings overlapping [lo, hi), except event ``exclude``."""
    return db.all(
        "SELECT e.id, e.start, e.end FROM room_bookings b JOIN events e ON e.id = b.event_id "
        "WHERE b.room_id = ? AND e.status = 'confirmed' AND e.start < ? AND e.end > ? "
        "AND e.id != ? ORDER BY e.start",
        (room_id, iso(hi), iso(lo), exclude),
    )


# -- working hours and free time --------------------------------------------------------


def within_hours(user: Row, start: int, end: int) -> bool:
    """Whether [start, end) lies inside one of the user's local working days."""
    window = work_window(user, local_day(user["utc_offset"], start))
    return window is not None and window[0] <= start and end <= window[1]


def hours_text(user: Row) -> str:
    return f"{clock(user['work_start'])}-{clock(user['work_end'])}"


def _working(user: Row, lo: int, hi: int) -> list[Interval]:
    first, last = local_day(user["utc_offset"], lo), local_day(user["utc_offset"], hi)
    out = []
    for day in range(first, last + 1):
        w = work_window(user, day)
        if w is not None and max(lo, w[0]) < min(hi, w[1]):
            out.append((max(lo, w[0]), min(hi, w[1])))
    return out


def _intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out = []
    for s1, e1 in a:
        for s2, e2 in b:
            if max(s1, s2) < min(e1, e2):
                out.append((max(s1, s2), min(e1, e2)))
    return sorted(out)


def _subtract(free: list[Interval], taken: list[Interval]) -> list[Interval]:
    for ts, te in taken:
        nxt = []
        for s, e in free:
            if te <= s or ts >= e:
                nxt.append((s, e))
                continue
            if s < ts:
                nxt.append((s, ts))
            if te < e:
                nxt.append((te, e))
        free = nxt
    return free


def free_slots(
    db: Database, users: list[Row], lo: int, hi: int, duration: int, *, hours_only: bool = False
) -> list[int]:
    """Start minutes (on the half hour, not before NOW) of every ``duration``-minute slot
    in [lo, hi) inside every user's working hours and outside their accepted events
    (``hours_only``: ignoring their events)."""
    free = [(max(lo, NOW), hi)]
    for user in users:
        free = _intersect(free, _working(user, lo, hi))
        if not hours_only:
            rows = busy(db, user["id"], lo, hi)
            free = _subtract(free, [(parse(r["start"]), parse(r["end"])) for r in rows])
    starts = []
    for s, e in free:
        t = -(-s // 30) * 30
        while t + duration <= e:
            starts.append(t)
            t += 30
    return starts


# -- rule checks: why a change would break a rule, or None ------------------------------


def hours_problem(db: Database, user_ids: list[str], start: int, end: int) -> str | None:
    for uid in user_ids:
        user = user_row(db, uid)
        if user is not None and not within_hours(user, start, end):
            off = user["utc_offset"]
            return (
                f"{iso(start)}-{iso(end)} is {clock(start + off)}-{clock(end + off)} for "
                f"{uid} ({user['time_zone']}), outside their working hours "
                f"({hours_text(user)}, Monday to Friday)"
            )
    return None


def overlap_problem(
    db: Database, user_ids: list[str], start: int, end: int, exclude: str = ""
) -> str | None:
    for uid in user_ids:
        clash = busy(db, uid, start, end, exclude)
        if clash:
            other = clash[0]
            return (
                f"{uid} has already accepted {other['id']} ({other['start']}-{other['end']}), "
                f"which overlaps {iso(start)}-{iso(end)}"
            )
    return None


def room_problem(db: Database, room_id: str, start: int, end: int, exclude: str = "") -> str | None:
    clash = room_busy(db, room_id, start, end, exclude)
    if clash:
        return (
            f"room {room_id} is booked for {clash[0]['id']} ({clash[0]['start']}-"
            f"{clash[0]['end']}), which overlaps {iso(start)}-{iso(end)}"
        )
    return None


def capacity_problem(db: Database, room_id: str, people: int) -> str | None:
    room = room_row(db, room_id)
    if room is not None and people > room["capacity"]:
        return f"room {room_id} holds {room['capacity']} people, the event has {people} attendees"
    return None


# -- changes (the tools and the generator apply writes through these) -------------------


def next_event_id(db: Database) -> str:
    row = db.one("SELECT MAX(id) AS top FROM events")
    return f"evt_{_number(row['top']) + 1:06d}" if row and row["top"] else "evt_100000"


def create_event(
    db: Database, organizer: str, title: str, start: str, end: str, invitees: list[str]
) -> str:
    event_id = next_event_id(db)
    db.write(
        "INSERT INTO events (id, title, organizer_id, start, end, status) "
        "VALUES (?, ?, ?, ?, ?, 'confirmed')",
        (event_id, title, organizer, start, end),
    )
    add_attendee(db, event_id, organizer, "accepted")
    for uid in sorted(set(invitees) - {organizer}):
        add_attendee(db, event_id, uid, "needs_action")
    return event_id


def add_attendee(db: Database, event_id: str, user_id: str, status: str) -> None:
    db.write(
        "INSERT INTO attendees (id, event_id, user_id, status) VALUES (?, ?, ?, ?)",
        (attendee_id(event_id, user_id), event_id, user_id, status),
    )


def move_event(db: Database, event_id: str, start: str, end: str) -> None:
    db.write("UPDATE events SET start = ?, end = ? WHERE id = ?", (start, end, event_id))


def cancel_event(db: Database, event_id: str) -> None:
    db.write("UPDATE events SET status = 'cancelled' WHERE id = ?", (event_id,))


def set_rsvp(db: Database, event_id: str, user_id: str, status: str) -> None:
    db.write(
        "UPDATE attendees SET status = ? WHERE id = ?", (status, attendee_id(event_id, user_id))
    )


def book_room(db: Database, event_id: str, room_id: str) -> None:
    db.write(
        "INSERT INTO room_bookings (id, event_id, room_id) VALUES (?, ?, ?)",
        (event_id, event_id, room_id),
    )


def release_room(db: Database, event_id: str) -> None:
    db.write("DELETE FROM room_bookings WHERE id = ?", (event_id,))
