"""The Calendar policy's own rules and the gates that enforce them at tool-call time.

Each gate reads the call's arguments and the episode database before the write runs.
A call whose arguments do not name real records passes the gates: the tool itself then
answers ``not_found`` or ``invalid_argument``, which is an observation, not a stop.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.business.calendar import logic
from agentgym_envs.business.calendar.clock import parse_iso
from agentgym_envs.business.policy import Rule, RuleGate
from agentgym_envs.business.rules import authenticate_rule
from agentgym_envs.core.tools import ToolCall

AUTHENTICATE = authenticate_rule("email, or first and last name")
"""Calendar's lookups: find_user_id_by_email and find_user_id_by_name (no zip code)."""
NO_DOUBLE_BOOKING = Rule(
    "no-double-booking",
    "no double booking",
    "An event's time must not overlap any accepted event of its attendees who have not "
    "declined it (the organizer included); a user may not accept an event that overlaps "
    "one they already accepted; a room may not hold two overlapping events.",
)
ROOM_CAPACITY = Rule(
    "room-capacity",
    "room capacity",
    "Book a room only if its capacity holds every attendee of the event (each attendee "
    "row counts, whatever their RSVP); inviting someone must not overfill a booked room.",
)
WORKING_HOURS = Rule(
    "working-hours",
    "working hours",
    "Create, move or invite people to a meeting only inside the working hours of every "
    "attendee who has not declined it, Monday to Friday in that attendee's own time zone.",
)
ORGANIZER_ONLY = Rule(
    "organizer-only",
    "organizer only",
    "Only an event's organizer may move or cancel it, invite attendees to it, or book or "
    "release its room.",
)
RSVP_SELF = Rule(
    "rsvp-self",
    "RSVP for yourself",
    "A user may accept, decline or tentatively accept an invitation only for themselves, "
    "never on behalf of a colleague.",
)
CALENDAR_RULES = (ORGANIZER_ONLY, RSVP_SELF, WORKING_HOURS, NO_DOUBLE_BOOKING, ROOM_CAPACITY)

_ORGANIZER_TOOLS = {
    "move_event": "move",
    "cancel_event": "cancel",
    "invite_attendee": "invite people to",
    "book_room": "book a room for",
    "release_room": "release the room of",
}


def _times(start: Any, end: Any) -> tuple[int, int] | None:
    try:
        return parse_iso(str(start)), parse_iso(str(end))
    except ValueError:
        return None


def _event(env: Any, call: ToolCall) -> dict[str, Any] | None:
    return logic.event_row(env.db, str(call.arguments.get("event_id", "")))


class OrganizerOnlyGate(RuleGate):
    rule = ORGANIZER_ONLY

    def broken(self, env: Any, call: ToolCall) -> str | None:
        verb = _ORGANIZER_TOOLS.get(call.name)
        event = _event(env, call) if verb else None
        if event is None or event["organizer_id"] == env.auth_user:
            return None
        return (
            f"{env.auth_user} may not {verb} {event['id']}: its organizer is "
            f"{event['organizer_id']}"
        )


class RsvpSelfGate(RuleGate):
    rule = RSVP_SELF

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if call.name != "rsvp" or call.arguments.get("user_id") == env.auth_user:
            return None
        return f"{env.auth_user} may not RSVP for {call.arguments.get('user_id')}"


class WorkingHoursGate(RuleGate):
    rule = WORKING_HOURS

    def broken(self, env: Any, call: ToolCall) -> str | None:
        args, db = call.arguments, env.db
        if call.name == "create_event":
            times = _times(args.get("start"), args.get("end"))
            people = [str(args.get("organizer_id")), *map(str, args.get("attendee_ids", ()))]
        elif call.name == "move_event":
            event = _event(env, call)
            times = _times(args.get("new_start"), args.get("new_end"))
            people = logic.attending(db, event) if event else []
        elif call.name == "invite_attendee":
            event = _event(env, call)
            times = _times(event["start"], event["end"]) if event else None
            people = [str(args.get("user_id"))]
        else:
            return None
        return None if times is None else logic.hours_problem(db, people, *times)


class NoDoubleBookingGate(RuleGate):
    rule = NO_DOUBLE_BOOKING

    def broken(self, env: Any, call: ToolCall) -> str | None:
        args, db = call.arguments, env.db
        if call.name == "create_event":
            times = _times(args.get("start"), args.get("end"))
            people = [str(args.get("organizer_id")), *map(str, args.get("attendee_ids", ()))]
            return None if times is None else logic.overlap_problem(db, people, *times)
        event = _event(env, call)
        if event is None:
            return None
        own = _times(event["start"], event["end"])
        assert own is not None
        if call.name == "move_event":
            times = _times(args.get("new_start"), args.get("new_end"))
            if times is None:
                return None
            room = logic.room_of(db, event["id"])
            clash = logic.overlap_problem(db, logic.attending(db, event), *times, event["id"])
            return clash or (room and logic.room_problem(db, room, *times, event["id"]))
        if call.name == "invite_attendee":
            return logic.overlap_problem(db, [str(args.get("user_id"))], *own, event["id"])
        if call.name == "rsvp" and args.get("status") == "accepted":
            return logic.overlap_problem(db, [str(args.get("user_id"))], *own, event["id"])
        if call.name == "book_room":
            return logic.room_problem(db, str(args.get("room_id")), *own, event["id"])
        return None


class RoomCapacityGate(RuleGate):
    rule = ROOM_CAPACITY

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if call.name not in ("book_room", "invite_attendee"):
            return None
        event = _event(env, call)
        if event is None:
            return None
        people = len(logic.attendees_of(env.db, event["id"]))
        if call.name == "book_room":
            return logic.capacity_problem(env.db, str(call.arguments.get("room_id")), people)
        room = logic.room_of(env.db, event["id"])
        new = logic.status_of(env.db, event["id"], str(call.arguments.get("user_id"))) is None
        return logic.capacity_problem(env.db, room, people + new) if room else None


CALENDAR_GATES: tuple[type[RuleGate], ...] = (
    OrganizerOnlyGate,
    RsvpSelfGate,
    WorkingHoursGate,
    NoDoubleBookingGate,
    RoomCapacityGate,
)
