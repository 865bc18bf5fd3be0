"""The Calendar READ tools (a tool group) and the argument schemas of every Calendar tool.

The tools query the episode's database through
:mod:`~agentgym_envs.business.calendar.logic`. Errors the agent caused are tool results,
never exceptions: ``not_found`` (an unknown id) and ``invalid_argument`` (a date that
does not exist). A lookup that finds the caller authenticates them; every other user a
lookup finds is a colleague and never switches the authenticated user.
"""

from __future__ import annotations

import re

from agentgym_envs.business.calendar import logic
from agentgym_envs.business.calendar.clock import clock, iso, offset_text, parse_date
from agentgym_envs.business.toolsets import ToolGroup, json_result
from agentgym_envs.core import ToolResult, tool

ID_PATTERN = re.compile(r"\b(?:user_[a-z]+_[a-z]+_\d{4}|evt_\d{6}|room_[a-z]+_\d{1,2})\b")
_ID = {"type": "string", "minLength": 1, "maxLength": 80}
USER_ID = {**_ID, "description": "a user id, e.g. user_mei_chen_0042"}
EVENT_ID = {**_ID, "description": "an event id, e.g. evt_123456"}
ROOM_ID = {**_ID, "description": "a room id, e.g. room_berlin_3"}
DATE = {
    "type": "string",
    "pattern": r"^\d{4}-\d{2}-\d{2}$",
    "description": "a calendar date, YYYY-MM-DD",
    "examples": ["2025-06-12"],
}
TIME = {
    "type": "string",
    "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:00Z$",
    "description": "a UTC time, e.g. 2025-06-12T14:00:00Z",
    "examples": ["2025-06-12T14:00:00Z"],
}
MAX_MINUTES = 8 * 60


class CalendarReadTools(ToolGroup):
    """The Calendar READ tools: finding users (the first found is the caller), their
    profiles and calendars, common free slots, rooms and their bookings."""

    # -- finding users ------------------------------------------------------------------

    @tool(
        "Find a user's id by their email address. The first user found is the one you "
        "are talking to (authentication).",
        parameters={"email": {"type": "string", "minLength": 3, "maxLength": 120}},
    )
    def find_user_id_by_email(self, email: str) -> ToolResult:
        row = self.db.one("SELECT id FROM users WHERE email = ?", (email.strip().lower(),))
        if row is None:
            return ToolResult.failure("not_found", f"No user has the email {email!r}.")
        return self._found(row["id"])

    @tool(
        "Find a user's id by first and last name. The first user found is the one you "
        "are talking to (authentication).",
        parameters={
            "first_name": {"type": "string", "minLength": 1, "maxLength": 60},
            "last_name": {"type": "string", "minLength": 1, "maxLength": 60},
        },
    )
    def find_user_id_by_name(self, first_name: str, last_name: str) -> ToolResult:
        row = self.db.one(
            "SELECT id FROM users WHERE lower(first_name) = ? AND lower(last_name) = ?",
            (first_name.strip().lower(), last_name.strip().lower()),
        )
        if row is None:
            return ToolResult.failure("not_found", f"No user is named {first_name} {last_name}.")
        return self._found(row["id"])

    def _found(self, user_id: str) -> ToolResult:
        self.env.authenticate(user_id)  # only the caller authenticates; others are colleagues
        return json_result({"user_id": user_id})

    @tool(
        "A user's profile: name, email, office, time zone with its UTC offset, and "
        "working hours (local time, Monday to Friday).",
        parameters={"user_id": USER_ID},
    )
    def get_user_details(self, user_id: str) -> ToolResult:
        user = logic.user_row(self.db, user_id)
        if user is None:
            return not_found("user", user_id)
        return json_result(
            {
                "user_id": user_id,
                "name": f"{user['first_name']} {user['last_name']}",
                "email": user["email"],
                "office": user["office"],
                "time_zone": user["time_zone"],
                "utc_offset": offset_text(user["utc_offset"]),
                "working_hours": logic.hours_text(user),
                "working_days": "Monday-Friday",
            }
        )

    # -- reading calendars --------------------------------------------------------------

    @tool(
        "A user's events on a date (a day in that user's own time zone): times in UTC, "
        "the organizer, the user's RSVP status and the booked room.",
        parameters={"user_id": USER_ID, "date": DATE},
    )
    def list_events(self, user_id: str, date: str) -> ToolResult:
        user = logic.user_row(self.db, user_id)
        if user is None:
            return not_found("user", user_id)
        day = _day(date)
        if day is None:
            return _bad_date(date)
        lo, hi = logic.local_day_range(user["utc_offset"], day)
        events = logic.events_on_day(self.db, user_id, lo, hi)
        return json_result(
            {"user_id": user_id, "date": date, "time_zone": user["time_zone"], "events": events}
        )

    @tool(
        "An event's title, organizer, UTC times, status, attendees with their RSVP status, "
        "and booked room.",
        parameters={"event_id": EVENT_ID},
    )
    def get_event_details(self, event_id: str) -> ToolResult:
        event = logic.event_row(self.db, event_id)
        if event is None:
            return not_found("event", event_id)
        people = [
            {**a, "name": self._name(a["user_id"])} for a in logic.attendees_of(self.db, event_id)
        ]
        return json_result(
            {
                "event_id": event_id,
                "title": event["title"],
                "organizer_id": event["organizer_id"],
                "start": event["start"],
                "end": event["end"],
                "status": event["status"],
                "attendees": people,
                "room_id": logic.room_of(self.db, event_id),
            }
        )

    @tool(
        "Common free slots of some users on a date (a day in the authenticated user's time "
        "zone): slots inside everyone's working hours and outside their accepted events, "
        "on the half hour, in UTC and in the authenticated user's local time.",
        parameters={
            "user_ids": {"type": "array", "items": USER_ID, "minItems": 1, "maxItems": 12},
            "date": DATE,
            "duration_minutes": {"type": "integer", "minimum": 15, "maximum": MAX_MINUTES},
        },
    )
    def get_free_slots(self, user_ids: list[str], date: str, duration_minutes: int) -> ToolResult:
        asker = logic.user_row(self.db, self.env.auth_user or "")
        users = [logic.user_row(self.db, uid) for uid in user_ids]
        missing = [uid for uid, u in zip(user_ids, users, strict=True) if u is None]
        if missing or asker is None:
            return ToolResult.failure("not_found", f"No users with the ids {missing}.")
        day = _day(date)
        if day is None:
            return _bad_date(date)
        off, minutes = asker["utc_offset"], int(duration_minutes)
        lo, hi = logic.local_day_range(off, day)
        starts = logic.free_slots(self.db, [u for u in users if u], lo, hi, minutes)
        slots = [
            {
                "start": iso(t),
                "end": iso(t + minutes),
                "local_start": clock(t + off),
                "local_end": clock(t + minutes + off),
            }
            for t in starts
        ]
        return json_result(
            {
                "date": date,
                "time_zone": asker["time_zone"],
                "duration_minutes": minutes,
                "slots": slots,
            }
        )

    @tool(
        "Meeting rooms that seat at least min_capacity people: id, name, location (the office), "
        "capacity.",
        parameters={"min_capacity": {"type": "integer", "minimum": 1, "maximum": 100}},
    )
    def list_rooms(self, min_capacity: int) -> ToolResult:
        rooms = self.db.all(
            "SELECT id AS room_id, name, location, capacity FROM rooms WHERE capacity >= ? "
            "ORDER BY location, capacity, id",
            (int(min_capacity),),
        )
        return json_result({"rooms": rooms})

    @tool(
        "When a room is booked on a date (a day in the room's own time zone), in UTC.",
        parameters={"room_id": ROOM_ID, "date": DATE},
    )
    def get_room_availability(self, room_id: str, date: str) -> ToolResult:
        room = logic.room_row(self.db, room_id)
        if room is None:
            return not_found("room", room_id)
        day = _day(date)
        if day is None:
            return _bad_date(date)
        lo, hi = logic.local_day_range(room["utc_offset"], day)
        booked = [
            {"start": b["start"], "end": b["end"]}
            for b in logic.room_busy(self.db, room_id, lo, hi)
        ]
        return json_result(
            {
                "room_id": room_id,
                "name": room["name"],
                "location": room["location"],
                "capacity": room["capacity"],
                "time_zone": room["time_zone"],
                "date": date,
                "booked": booked,
            }
        )

    # -- helpers ------------------------------------------------------------------------

    def _name(self, user_id: str) -> str:
        user = logic.user_row(self.db, user_id)
        return "" if user is None else f"{user['first_name']} {user['last_name']}"


def not_found(kind: str, key: str) -> ToolResult:
    """The answer to an id that names no record."""
    return ToolResult.failure("not_found", f"No {kind} with the id {key!r}.")


def _day(date: str) -> int | None:
    try:
        return parse_date(date)
    except ValueError:
        return None


def _bad_date(date: str) -> ToolResult:
    return ToolResult.failure("invalid_argument", f"{date!r} is not a real date (YYYY-MM-DD).")
