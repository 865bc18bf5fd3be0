"""What the Calendar request builders share: the task context and record pickers.

The context holds the task's working copy of the world (changed by each gold write, so
later requests see earlier ones), the user, and the gold actions written so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym_envs.business.calendar import logic
from agentgym_envs.business.calendar.clock import NOW, clock, date_text, iso
from agentgym_envs.business.calendar.world import KINDS, OFFICES, TOPICS

Row = dict[str, Any]
RequestSpec = dict[str, Any]  # a request as the task stores it (user.Request reads it)
TARGET_DAYS = tuple(d for d in range(9, 27) if (d + 6) % 7 < 5)  # Tue June 10 .. Fri June 27
CITY = {key: label for key, label, *_ in OFFICES}
PROCEED = "Shall I proceed?"


@dataclass
class CalendarTaskDraft:
    """What a task's builders share: the world copy, the user and the gold so far."""

    db: Any
    rng: np.random.Generator
    me: Row
    actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    known: set[str] = field(default_factory=set)
    writes: int = 0

    @property
    def uid(self) -> str:
        return str(self.me["id"])

    @property
    def off(self) -> int:
        return int(self.me["utc_offset"])

    def call(self, tool: str, **args: Any) -> None:
        self.actions.append((tool, args))

    def say(self, message: str) -> None:
        self.actions.append(("respond", {"message": message}))

    def write(self, tool: str, **args: Any) -> dict[str, Any]:
        """Append a gold write (with an idempotency key) and return the user's view."""
        self.writes += 1
        self.actions.append((tool, {**args, "idempotency_key": f"{tool}-{self.writes}"}))
        return {"tool": tool, "args": args}

    def lookup(self, user: Row) -> None:
        if user["id"] not in self.known:
            self.call("find_user_id_by_email", email=user["email"])
            self.known.add(user["id"])
            self.targets.append(user["id"])

    def local(self, minute: int) -> str:
        return clock(minute + self.off)

    def pick(self, items: Sequence[Any]) -> Any:
        return items[int(self.rng.integers(len(items)))]

    def shuffled(self, items: Sequence[Any]) -> list[Any]:
        return [items[int(i)] for i in self.rng.permutation(len(items))]

    def colleagues(self) -> list[Row]:
        rows = self.db.all("SELECT * FROM users WHERE id != ? ORDER BY id", (self.uid,))
        return self.shuffled(rows)


def write_request(
    intent: str,
    say: list[str],
    verbs: list[str],
    write: dict[str, Any],
    mentions: list[str],
    fallback: dict[str, Any] | None = None,
) -> RequestSpec:
    request = {
        "kind": "write",
        "intent": intent,
        "say": say,
        "verbs": verbs,
        "write": write,
        "mentions": mentions,
    }
    if fallback is not None:
        request["fallback"] = fallback
    return request


def name(user: Row) -> str:
    return f"{user['first_name']} {user['last_name']}"


def person(user: Row) -> str:
    return f"{name(user)} ({user['email']})"


def my_event(ctx: CalendarTaskDraft, fits: Callable[[Row], bool]) -> Row | None:
    """A random future event of the user on a target day that ``fits``, untouched by
    this task, whose title is unique in the user's list for that day."""
    rows = ctx.db.all(
        "SELECT e.id, e.title, e.start, e.end, e.organizer_id, a.status AS my_status, "
        "b.room_id FROM attendees a JOIN events e ON e.id = a.event_id "
        "LEFT JOIN room_bookings b ON b.id = e.id WHERE a.user_id = ? "
        "AND e.status = 'confirmed' AND e.start > ? ORDER BY e.start, e.id",
        (ctx.uid, iso(NOW)),
    )
    for row in ctx.shuffled(rows):
        start, end = logic.parse(row["start"]), logic.parse(row["end"])
        day = logic.local_day(ctx.off, start)
        if row["id"] in ctx.touched or day not in TARGET_DAYS:
            continue
        event = {**row, "s": start, "e": end, "day": day}
        if fits(event) and unique_title(ctx, event):
            ctx.touched.add(row["id"])
            return event
    return None


def unique_title(ctx: CalendarTaskDraft, event: Row) -> bool:
    listed = logic.events_on_day(ctx.db, ctx.uid, *logic.local_day_range(ctx.off, event["day"]))
    return bool(sum(r["title"] == event["title"] for r in listed) == 1)


def new_title(ctx: CalendarTaskDraft, day: int) -> str:
    listed = logic.events_on_day(ctx.db, ctx.uid, *logic.local_day_range(ctx.off, day))
    taken = {r["title"] for r in listed}
    while True:
        title = f"{ctx.pick(TOPICS)} {ctx.pick(KINDS)}"
        if title not in taken:
            return title


def pick_slot(
    ctx: CalendarTaskDraft, users: list[Row], day: int, duration: int, variant: str
) -> tuple[int | None, int] | None:
    """(the user's first choice if it is taken, the slot to book) on ``day``, or None."""
    lo, hi = logic.local_day_range(ctx.off, day)
    free = logic.free_slots(ctx.db, users, lo, hi, duration)
    if not free:
        return None
    if variant == "earliest":
        return None, free[0]
    if variant == "at_time":
        return None, ctx.pick(free)
    hours = logic.free_slots(ctx.db, users, lo, hi, duration, hours_only=True)
    taken = [t for t in hours if t not in set(free)]
    return (ctx.pick(taken), free[0]) if taken else None


def taken_message(ctx: CalendarTaskDraft, first: int, start: int, duration: int, day: int) -> None:
    ctx.say(
        f"Unfortunately {ctx.local(first)} your time ({iso(first)}) is not available: not "
        f"everyone is free then. The earliest time that works for everyone on "
        f"{date_text(day)} is {ctx.local(start)}-{ctx.local(start + duration)} your time "
        f"({iso(start)} to {iso(start + duration)})."
    )


SLOT_FALLBACK = [
    "Then please take the earliest time that day when everyone is free.",
    "In that case, the earliest slot that works for everyone that day is fine.",
]
