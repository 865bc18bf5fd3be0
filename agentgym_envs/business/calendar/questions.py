"""The Calendar requests that change nothing: questions and requests to refuse.

A question lists in ``answer`` the exact strings the agent's reply must contain (a
title and a local ``HH:MM`` time). A refusal is a request the policy forbids; the gold
reply says "I'm sorry, I can't", explains why from what the tools showed, and cites the
rule id. Builders follow the protocol of :mod:`~.intents`.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.business.calendar import logic
from agentgym_envs.business.calendar.clock import NOW, WEEKDAYS, clock, date_text, day_label, iso
from agentgym_envs.business.calendar.draft import (
    TARGET_DAYS,
    CalendarTaskDraft,
    RequestSpec,
    Row,
    my_event,
    name,
    person,
)
from agentgym_envs.business.calendar.world import KINDS, TOPICS


def _question(intent: str, say: list[str], answer: list[str]) -> RequestSpec:
    return {"kind": "question", "intent": intent, "say": say, "answer": answer}


def _refusal(intent: str, say: list[str]) -> RequestSpec:
    return {"kind": "refuse", "intent": intent, "say": say}


# -- questions --------------------------------------------------------------------------


def question_next(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """When is my next accepted meeting, in my time?"""
    rows = ctx.db.all(
        "SELECT e.id, e.title, e.start FROM attendees a JOIN events e ON e.id = a.event_id "
        "WHERE a.user_id = ? AND a.status = 'accepted' AND e.status = 'confirmed' "
        "AND e.start >= ? ORDER BY e.start LIMIT 1",
        (ctx.uid, iso(NOW)),
    )
    if not rows or rows[0]["start"] == iso(NOW):
        return None  # a meeting starting right now makes "next" ambiguous
    event = rows[0]
    start = logic.parse(event["start"])
    today, day = logic.local_day(ctx.off, NOW), logic.local_day(ctx.off, start)
    if day - today > 3:
        return None
    ctx.touched.add(event["id"])
    ctx.targets.append(event["id"])
    for d in range(today, day + 1):
        ctx.call("list_events", user_id=ctx.uid, date=date_text(d))
    local = ctx.local(start)
    ctx.say(
        f'Your next accepted meeting is "{event["title"]}" ({event["id"]}) on '
        f"{day_label(day)} at {local} your time ({event['start']})."
    )
    say = [
        "When is my next meeting that I have accepted? Please tell me the time in my time zone.",
        "What is the next meeting I have accepted, and when does it start in my local time?",
    ]
    return _question("question_next", say, [event["title"], local])


def question_time(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """What time does a meeting start in my time zone? (a time-zone conversion)"""
    event = my_event(ctx, lambda ev: ev["my_status"] != "declined")
    if event is None:
        return None
    title, local = event["title"], ctx.local(event["s"])
    when = day_label(event["day"])
    ctx.targets.append(event["id"])
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(f'"{title}" ({event["id"]}) starts at {local} your time ({event["start"]}).')
    say = [
        f'What time does "{title}" on {when} start in my time zone?',
        f'I see "{title}" on {when} in UTC. When does it start in my local time?',
    ]
    return _question("question_time", say, [local])


# -- refusals ---------------------------------------------------------------------------


def refuse_hours(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """A meeting at a time inside the user's working hours but outside a colleague's."""
    day, duration = ctx.pick(TARGET_DAYS), ctx.pick([30, 60])
    lo, hi = logic.local_day_range(ctx.off, day)
    mine = logic.free_slots(ctx.db, [ctx.me], lo, hi, duration, hours_only=True)
    for user in ctx.colleagues()[:60]:
        bad = [t for t in mine if not logic.within_hours(user, t, t + duration)]
        if bad:
            break
    else:
        return None
    start, title = ctx.pick(bad), f"{ctx.pick(TOPICS)} {ctx.pick(KINDS)}"
    theirs = start + user["utc_offset"]
    ctx.lookup(user)
    ctx.call("get_user_details", user_id=user["id"])
    ctx.say(
        f"I'm sorry, I can't schedule that: {ctx.local(start)}-{ctx.local(start + duration)} "
        f"your time is {clock(theirs)}-{clock(theirs + duration)} on "
        f"{WEEKDAYS[(theirs // 1440 + 6) % 7]} for {name(user)} "
        f"({user['time_zone']}), outside their working hours ({logic.hours_text(user)}, "
        "Monday to Friday). Our policy (working-hours) allows meetings only inside every "
        "attendee's working hours."
    )
    say = [
        f'Please schedule a {duration}-minute meeting "{title}" with {person(user)} on '
        f"{day_label(day)} at {ctx.local(start)} my time.",
        f'Book "{title}" with {person(user)} on {day_label(day)}, {ctx.local(start)} my '
        f"time, for {duration} minutes.",
    ]
    return _refusal("refuse_hours", say)


def refuse_capacity(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Book a room of the user's office that is too small for the meeting."""
    small: list[Row] = []

    def fits(ev: Row) -> bool:
        if ev["organizer_id"] != ctx.uid or ev["room_id"]:
            return False
        people = len(logic.attendees_of(ctx.db, ev["id"]))
        small[:] = ctx.db.all(
            "SELECT * FROM rooms WHERE location = ? AND capacity < ? ORDER BY id",
            (ctx.me["office"], people),
        )
        return bool(small)

    event = my_event(ctx, fits)
    if event is None:
        return None
    room, eid, title = ctx.pick(small), event["id"], event["title"]
    people = len(logic.attendees_of(ctx.db, eid))
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.call("get_event_details", event_id=eid)
    ctx.call("list_rooms", min_capacity=1)
    ctx.say(
        f"I'm sorry, I can't book {room['name']} ({room['id']}) for \"{title}\": it seats "
        f"{room['capacity']} people but the meeting has {people} attendees. Our policy "
        "(room-capacity) requires the room to hold every attendee."
    )
    say = [
        f'Please book the room "{room["name"]}" for my meeting "{title}" on '
        f"{day_label(event['day'])}.",
        f'I would like "{room["name"]}" for "{title}" on {day_label(event["day"])}.',
    ]
    return _refusal("refuse_capacity", say)


def refuse_not_organizer(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Move or cancel a meeting the user attends but does not organize."""
    event = my_event(
        ctx, lambda ev: ev["organizer_id"] != ctx.uid and ev["my_status"] != "declined"
    )
    if event is None:
        return None
    eid, title, when = event["id"], event["title"], day_label(event["day"])
    verb = ctx.pick(["cancel", "move"])
    if verb == "cancel":
        say = [f'Please cancel the meeting "{title}" on {when}.',
               f'I want "{title}" on {when} cancelled.']  # fmt: skip
    else:
        day = ctx.pick([d for d in TARGET_DAYS if d != event["day"]])
        at = clock(ctx.pick([540, 600, 660, 840, 900]))
        say = [
            f'Please move "{title}" on {when} to {day_label(day)} at {at} my time.',
            f'Could you push "{title}" ({when}) to {day_label(day)}, {at} my time?',
        ]
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(
        f"I'm sorry, I can't {verb} \"{title}\" ({eid}): it is organized by "
        f"{event['organizer_id']}, and our policy (organizer-only) lets only the organizer "
        "change an event."
    )
    return _refusal("refuse_not_organizer", say)


def refuse_rsvp_other(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Answer an invitation on behalf of a colleague."""
    other: list[Any] = []

    def fits(ev: Row) -> bool:
        if ev["my_status"] == "declined":
            return False
        other[:] = [
            a["user_id"]
            for a in logic.attendees_of(ctx.db, ev["id"])
            if a["status"] == "needs_action" and a["user_id"] not in (ctx.uid, ev["organizer_id"])
        ]
        return bool(other)

    event = my_event(ctx, fits)
    if event is None:
        return None
    user = logic.user_row(ctx.db, ctx.pick(other))
    assert user is not None
    title, when = event["title"], day_label(event["day"])
    ctx.say(
        f"I'm sorry, I can't answer invitations for {name(user)}: our policy (rsvp-self) "
        "lets each person RSVP only for themselves."
    )
    say = [
        f'Please also accept "{title}" on {when} on behalf of my colleague {name(user)}.',
        f'{name(user)} is busy; please accept "{title}" on {when} for them.',
    ]
    return _refusal("refuse_rsvp_other", say)


def refuse_double_booking(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Accept an invitation that overlaps a meeting the user already accepted."""
    clash: list[Row] = []

    def fits(ev: Row) -> bool:
        if ev["organizer_id"] == ctx.uid or ev["my_status"] not in ("needs_action", "tentative"):
            return False
        clash[:] = logic.busy(ctx.db, ctx.uid, ev["s"], ev["e"], ev["id"])
        return bool(clash)

    event = my_event(ctx, fits)
    if event is None:
        return None
    eid, title, when, other = event["id"], event["title"], day_label(event["day"]), clash[0]
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(
        f'I\'m sorry, I can\'t accept "{title}" ({eid}): it overlaps "{other["title"]}" '
        f"({other['id']}), which you have already accepted. Our policy (no-double-booking) "
        "does not allow overlapping accepted meetings."
    )
    say = [
        f'Please accept the invitation to "{title}" on {when} for me.',
        f'I would like to attend "{title}" on {when}; please accept it.',
    ]
    return _refusal("refuse_double_booking", say)
