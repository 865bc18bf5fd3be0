"""The Calendar WRITE tools (a tool group; all idempotent).

A write checks only that its records exist and are in a state that allows it
(``not_found``, ``invalid_state``, ``invalid_argument``); the policy is the gates'
job. Each change goes through :mod:`~agentgym_envs.business.calendar.logic`, as the
task generator's does.
"""

from __future__ import annotations

from agentgym_envs.business.calendar import logic
from agentgym_envs.business.calendar.clock import NOW, iso, parse_iso
from agentgym_envs.business.calendar.reads import (
    EVENT_ID,
    MAX_MINUTES,
    ROOM_ID,
    TIME,
    USER_ID,
    not_found,
)
from agentgym_envs.business.toolsets import ToolGroup, json_result
from agentgym_envs.core import ToolKind, ToolResult, tool


class CalendarWriteTools(ToolGroup):
    """The Calendar WRITE tools: create, move and cancel events, invite, RSVP, and book
    or release rooms."""

    @tool(
        "Create an event organized by organizer_id and invite attendee_ids (the organizer "
        "attends and accepts; invitees start as needs_action).",
        parameters={
            "organizer_id": USER_ID,
            "title": {"type": "string", "minLength": 1, "maxLength": 120},
            "start": TIME,
            "end": TIME,
            "attendee_ids": {"type": "array", "items": USER_ID, "maxItems": 20},
        },
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def create_event(
        self, organizer_id: str, title: str, start: str, end: str, attendee_ids: list[str]
    ) -> ToolResult:
        for uid in (organizer_id, *attendee_ids):
            if logic.user_row(self.db, uid) is None:
                return not_found("user", uid)
        problem = _check_times(start, end)
        if problem is not None:
            return problem
        event_id = logic.create_event(self.db, organizer_id, title, start, end, attendee_ids)
        return self._event_result(event_id, "created")

    @tool(
        "Move an event to a new start and end (UTC).",
        parameters={"event_id": EVENT_ID, "new_start": TIME, "new_end": TIME},
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def move_event(self, event_id: str, new_start: str, new_end: str) -> ToolResult:
        problem = self._changeable(event_id) or _check_times(new_start, new_end)
        if problem is not None:
            return problem
        logic.move_event(self.db, event_id, new_start, new_end)
        return self._event_result(event_id, "moved")

    @tool(
        "Cancel an event.",
        parameters={"event_id": EVENT_ID},
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def cancel_event(self, event_id: str) -> ToolResult:
        problem = self._changeable(event_id)
        if problem is not None:
            return problem
        logic.cancel_event(self.db, event_id)
        return self._event_result(event_id, "cancelled")

    @tool(
        "Invite a user to an event (their RSVP starts as needs_action).",
        parameters={"event_id": EVENT_ID, "user_id": USER_ID},
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def invite_attendee(self, event_id: str, user_id: str) -> ToolResult:
        problem = self._changeable(event_id)
        if problem is not None:
            return problem
        if logic.user_row(self.db, user_id) is None:
            return not_found("user", user_id)
        if logic.status_of(self.db, event_id, user_id) is not None:
            return ToolResult.failure("invalid_state", f"{user_id} is already invited.")
        logic.add_attendee(self.db, event_id, user_id, "needs_action")
        return self._event_result(event_id, "invited")

    @tool(
        "Answer an invitation for a user: accepted, declined or tentative.",
        parameters={
            "event_id": EVENT_ID,
            "user_id": USER_ID,
            "status": {"type": "string", "enum": ["accepted", "declined", "tentative"]},
        },
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def rsvp(self, event_id: str, user_id: str, status: str) -> ToolResult:
        problem = self._changeable(event_id)
        if problem is not None:
            return problem
        event = logic.event_row(self.db, event_id)
        assert event is not None
        if logic.status_of(self.db, event_id, user_id) is None:
            return ToolResult.failure("invalid_state", f"{user_id} is not invited to {event_id}.")
        if event["organizer_id"] == user_id:
            return ToolResult.failure(
                "invalid_state", f"{user_id} organizes {event_id} and always attends it."
            )
        logic.set_rsvp(self.db, event_id, user_id, status)
        return json_result({"event_id": event_id, "user_id": user_id, "status": status})

    @tool(
        "Book a meeting room for an event (one room per event).",
        parameters={"event_id": EVENT_ID, "room_id": ROOM_ID},
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def book_room(self, event_id: str, room_id: str) -> ToolResult:
        problem = self._changeable(event_id)
        if problem is not None:
            return problem
        if logic.room_row(self.db, room_id) is None:
            return not_found("room", room_id)
        held = logic.room_of(self.db, event_id)
        if held is not None:
            return ToolResult.failure(
                "invalid_state", f"{event_id} already has room {held}; release it first."
            )
        logic.book_room(self.db, event_id, room_id)
        return self._event_result(event_id, "room booked")

    @tool(
        "Release the room booked for an event.",
        parameters={"event_id": EVENT_ID, "room_id": ROOM_ID},
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def release_room(self, event_id: str, room_id: str) -> ToolResult:
        problem = self._changeable(event_id)
        if problem is not None:
            return problem
        if logic.room_of(self.db, event_id) != room_id:
            return ToolResult.failure("not_found", f"Room {room_id} is not booked for {event_id}.")
        logic.release_room(self.db, event_id)
        return self._event_result(event_id, "room released")

    # -- helpers ------------------------------------------------------------------------

    def _changeable(self, event_id: str) -> ToolResult | None:
        event = logic.event_row(self.db, event_id)
        if event is None:
            return not_found("event", event_id)
        if event["status"] == "cancelled":
            return ToolResult.failure("invalid_state", f"{event_id} is cancelled.")
        if parse_iso(event["start"]) < NOW:
            return ToolResult.failure("invalid_state", f"{event_id} has already started.")
        return None

    def _event_result(self, event_id: str, done: str) -> ToolResult:
        event = logic.event_row(self.db, event_id)
        assert event is not None
        return json_result(
            {
                "result": done,
                "event_id": event_id,
                "title": event["title"],
                "start": event["start"],
                "end": event["end"],
                "attendees": logic.attendees_of(self.db, event_id),
                "room_id": logic.room_of(self.db, event_id),
            }
        )


def _check_times(start: str, end: str) -> ToolResult | None:
    try:
        lo, hi = parse_iso(start), parse_iso(end)
    except ValueError as exc:
        return ToolResult.failure("invalid_argument", str(exc))
    if not 0 < hi - lo <= MAX_MINUTES:
        return ToolResult.failure(
            "invalid_argument", f"the end must be after the start, by at most {MAX_MINUTES} min"
        )
    if lo < NOW:
        return ToolResult.failure("invalid_state", f"{start} is in the past (now is {iso(NOW)}).")
    return None
