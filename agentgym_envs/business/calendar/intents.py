"""The requests of Calendar tasks: one builder per intent.

A builder picks the records its request is about on the task's working copy of the
world (which already holds the changes of the task's earlier requests), so a task's
requests stay consistent with each other. It first chooses everything and returns None
if the world offers no fitting records; only then does it append the gold actions to
the context and apply its write through :mod:`~.logic`, exactly as the tool will.

Every gold conversation follows the simulated user's protocol: a proposal names a verb
of the write and every mention and ends with "Shall I proceed?"; a done message says
"has been"; a first choice that is taken is reported with "is not available"; a
refusal says "I'm sorry, I can't" and cites the rule id.
"""

from __future__ import annotations

from agentgym_envs.business.calendar import logic
from agentgym_envs.business.calendar.clock import date_text, day_label, iso
from agentgym_envs.business.calendar.draft import (
    CITY,
    PROCEED,
    SLOT_FALLBACK,
    TARGET_DAYS,
    CalendarTaskDraft,
    RequestSpec,
    Row,
    my_event,
    name,
    new_title,
    person,
    pick_slot,
    taken_message,
    write_request,
)

# -- writes -----------------------------------------------------------------------------


def schedule(ctx: CalendarTaskDraft, variant: str) -> RequestSpec | None:
    """Create a meeting with one or two colleagues (earliest slot, a local time, or a
    local time that is taken with the earliest slot as the fallback)."""
    day, duration = ctx.pick(TARGET_DAYS), ctx.pick([30, 30, 45, 60])
    wanted = 1 + int(ctx.rng.random() < 0.4)
    lo, hi = logic.local_day_range(ctx.off, day)
    chosen: list[Row] = []
    for user in ctx.colleagues()[:40]:
        if logic.free_slots(ctx.db, [ctx.me, *chosen, user], lo, hi, duration):
            chosen.append(user)
            if len(chosen) == wanted:
                break
    slot = (
        pick_slot(ctx, [ctx.me, *chosen], day, duration, variant) if len(chosen) == wanted else None
    )
    if slot is None:
        return None
    first, start = slot
    end, title = start + duration, new_title(ctx, day)
    people = " and ".join(person(u) for u in chosen)
    when = f"on {day_label(day)}"
    if variant == "earliest":
        say = [
            f'Please set up a {duration}-minute meeting called "{title}" with {people} {when} '
            "(my time), at the earliest time that works for all of us.",
            f'I need a {duration}-minute meeting "{title}" with {people} {when}. Please '
            "take the earliest slot when everyone is free.",
        ]
    else:
        at = ctx.local(first if first is not None else start)
        say = [
            f'Please schedule a {duration}-minute meeting called "{title}" with {people} '
            f"{when} at {at} my time.",
            f'Could you book "{title}" with {people} {when}, {at} my time, for {duration} minutes?',
        ]
    ids = sorted(u["id"] for u in chosen)
    for user in chosen:
        ctx.lookup(user)
    ctx.call("get_free_slots", user_ids=[ctx.uid, *ids], date=date_text(day),
             duration_minutes=duration)  # fmt: skip
    if first is not None:
        taken_message(ctx, first, start, duration, day)
    names = " and ".join(name(u) for u in chosen)
    ctx.say(
        f'I will schedule "{title}" on {date_text(day)} from {ctx.local(start)} to '
        f"{ctx.local(end)} your time ({iso(start)} to {iso(end)}) with {names}. {PROCEED}"
    )
    args = {"organizer_id": ctx.uid, "title": title, "attendee_ids": ids}
    write = ctx.write("create_event", **args, start=iso(start), end=iso(end))
    fallback, mentions = None, [title, iso(start)]
    if first is not None:
        fallback = {"say": SLOT_FALLBACK, "write": write, "mentions": mentions}
        asked = {**args, "start": iso(first), "end": iso(first + duration)}
        write, mentions = {"tool": "create_event", "args": asked}, [title, iso(first)]
    event_id = logic.create_event(ctx.db, ctx.uid, title, iso(start), iso(end), ids)
    ctx.touched.add(event_id)
    ctx.say(
        f'"{title}" has been scheduled as {event_id} from {iso(start)} to {iso(end)} '
        f"({ctx.local(start)}-{ctx.local(end)} your time)."
    )
    verbs = ["schedule", "create", "set up"]
    return write_request("schedule", say, verbs, write, mentions, fallback)


def reschedule(ctx: CalendarTaskDraft, variant: str) -> RequestSpec | None:
    """Move a meeting the user organizes to another day (earliest common slot, a local
    time, or a taken local time with the earliest slot as the fallback)."""

    def fits(ev: Row) -> bool:
        if ev["organizer_id"] != ctx.uid or ev["room_id"]:
            return False
        people = logic.attendees_of(ctx.db, ev["id"])
        return len(people) >= 2 and all(p["status"] != "declined" for p in people)

    event = my_event(ctx, fits)
    if event is None:
        return None
    ids = [a["user_id"] for a in logic.attendees_of(ctx.db, event["id"])]
    users = [logic.user_row(ctx.db, uid) for uid in ids]
    duration = event["e"] - event["s"]
    slot, day = None, 0
    for day in [d for d in ctx.shuffled(TARGET_DAYS) if d != event["day"]][:6]:
        slot = pick_slot(ctx, users, day, duration, variant)  # type: ignore[arg-type]
        if slot is not None:
            break
    if slot is None:
        return None
    first, start = slot
    end, eid, title = start + duration, event["id"], event["title"]
    old, new = day_label(event["day"]), day_label(day)
    if variant == "earliest":
        say = [
            f'Please move my meeting "{title}" on {old} to {new}, at the earliest time that '
            "works for all attendees.",
            f'Could you reschedule "{title}" ({old}) to {new}? The earliest time when all '
            "attendees are free is best.",
        ]
    else:
        at = ctx.local(first if first is not None else start)
        say = [
            f'Please move my meeting "{title}" on {old} to {new} at {at} my time.',
            f'Could you reschedule "{title}" from {old} to {new}, {at} my time?',
        ]
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.call("get_event_details", event_id=eid)
    ctx.call("get_free_slots", user_ids=ids, date=date_text(day), duration_minutes=duration)
    fallback, mentions = None, [eid, iso(start)]
    if first is not None:
        taken_message(ctx, first, start, duration, day)
    ctx.say(
        f'I will move "{title}" ({eid}) to {date_text(day)}, {ctx.local(start)}-'
        f"{ctx.local(end)} your time ({iso(start)} to {iso(end)}). {PROCEED}"
    )
    write = ctx.write("move_event", event_id=eid, new_start=iso(start), new_end=iso(end))
    if first is not None:
        fallback = {"say": SLOT_FALLBACK, "write": write, "mentions": mentions}
        asked = {"event_id": eid, "new_start": iso(first), "new_end": iso(first + duration)}
        write, mentions = {"tool": "move_event", "args": asked}, [eid, iso(first)]
    logic.move_event(ctx.db, eid, iso(start), iso(end))
    ctx.say(f'"{title}" ({eid}) has been moved to {iso(start)} ({ctx.local(start)} your time).')
    return write_request("reschedule", say, ["move", "reschedule"], write, mentions, fallback)


def cancel(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Cancel a meeting the user organizes."""
    event = my_event(ctx, lambda ev: ev["organizer_id"] == ctx.uid)
    if event is None:
        return None
    eid, title, when = event["id"], event["title"], day_label(event["day"])
    say = [
        f'Please cancel my meeting "{title}" on {when}.',
        f'I need to cancel "{title}" on {when}; I organize it.',
    ]
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(
        f'I will cancel "{title}" ({eid}) on {date_text(event["day"])}, '
        f"{ctx.local(event['s'])} your time. {PROCEED}"
    )
    write = ctx.write("cancel_event", event_id=eid)
    logic.cancel_event(ctx.db, eid)
    ctx.say(f'"{title}" ({eid}) has been cancelled.')
    return write_request("cancel", say, ["cancel"], write, [eid])


def rsvp(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Answer an invitation: accept (only if it overlaps nothing accepted), decline or
    tentative."""

    def fits(ev: Row) -> bool:
        return ev["organizer_id"] != ctx.uid and ev["my_status"] in ("needs_action", "tentative")

    event = my_event(ctx, fits)
    if event is None:
        return None
    eid, title, when = event["id"], event["title"], day_label(event["day"])
    options = ["declined"] + (["tentative"] if event["my_status"] != "tentative" else [])
    if logic.overlap_problem(ctx.db, [ctx.uid], event["s"], event["e"], eid) is None:
        options += ["accepted", "accepted"]
    status = ctx.pick(options)
    ask = {
        "accepted": "Please accept it for me.",
        "declined": "Please decline it for me.",
        "tentative": "Please mark me as tentative.",
    }[status]
    say = [f'I was invited to "{title}" on {when}. {ask}', f'About "{title}" on {when}: {ask}']
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(f'I will set your RSVP for "{title}" ({eid}) to {status}. {PROCEED}')
    write = ctx.write("rsvp", event_id=eid, user_id=ctx.uid, status=status)
    logic.set_rsvp(ctx.db, eid, ctx.uid, status)
    ctx.say(f'Your RSVP for "{title}" has been set to {status}.')
    return write_request("rsvp", say, ["rsvp"], write, [eid, status])


def book_room(ctx: CalendarTaskDraft, variant: str) -> RequestSpec | None:
    """Book a room of the user's office that seats everyone (``fallback``: the room
    the user names is taken, and they name a second one)."""
    rooms: dict[str, list[Row]] = {}

    def fits(ev: Row) -> bool:
        if ev["organizer_id"] != ctx.uid or ev["room_id"]:
            return False
        people = len(logic.attendees_of(ctx.db, ev["id"]))
        found = ctx.db.all(
            "SELECT * FROM rooms WHERE location = ? AND capacity >= ? ORDER BY id",
            (ctx.me["office"], people),
        )
        free = [r for r in found if not logic.room_busy(ctx.db, r["id"], ev["s"], ev["e"])]
        taken = [r for r in found if r not in free]
        rooms.update(free=free, taken=taken)
        return bool(free) and (variant != "fallback" or bool(taken))

    event = my_event(ctx, fits)
    if event is None:
        return None
    eid, title, day = event["id"], event["title"], event["day"]
    room = ctx.pick(rooms["free"])
    first = ctx.pick(rooms["taken"]) if variant == "fallback" else room
    people = len(logic.attendees_of(ctx.db, eid))
    city = CITY[ctx.me["office"]]
    say = [
        f'Please book the room "{first["name"]}" in our {city} office for my meeting '
        f'"{title}" on {day_label(day)}.',
        f'Could you reserve "{first["name"]}" ({city}) for "{title}" on {day_label(day)}?',
    ]
    ctx.targets += [eid, room["id"]]
    ctx.call("list_events", user_id=ctx.uid, date=date_text(day))
    ctx.call("get_event_details", event_id=eid)
    ctx.call("list_rooms", min_capacity=people)
    ctx.call("get_room_availability", room_id=first["id"], date=date_text(day))
    fallback = None
    if variant == "fallback":
        clash = logic.room_busy(ctx.db, first["id"], event["s"], event["e"])[0]
        ctx.say(
            f"Unfortunately {first['name']} ({first['id']}) is not available at that time: "
            f"it is booked from {clash['start']} to {clash['end']}."
        )
        ctx.call("get_room_availability", room_id=room["id"], date=date_text(day))
    ctx.say(
        f'I will book {room["name"]} ({room["id"]}) for "{title}" ({eid}), '
        f"{ctx.local(event['s'])}-{ctx.local(event['e'])} your time. {PROCEED}"
    )
    write = ctx.write("book_room", event_id=eid, room_id=room["id"])
    if variant == "fallback":
        again = [f'Then please book "{room["name"]}" instead.']
        fallback = {"say": again, "write": write, "mentions": [eid, room["id"]]}
        write = {"tool": "book_room", "args": {"event_id": eid, "room_id": first["id"]}}
    logic.book_room(ctx.db, eid, room["id"])
    ctx.say(f'{room["name"]} ({room["id"]}) has been booked for "{title}".')
    verbs = ["book", "reserve"]
    return write_request("book_room", say, verbs, write, [eid, first["id"]], fallback)


def release_room(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Release the room booked for a meeting the user organizes."""
    event = my_event(ctx, lambda ev: ev["organizer_id"] == ctx.uid and bool(ev["room_id"]))
    if event is None:
        return None
    eid, title, room, when = event["id"], event["title"], event["room_id"], day_label(event["day"])
    say = [
        f'We no longer need the room for my meeting "{title}" on {when}. Please release it.',
        f'Please free up the room booked for "{title}" on {when}; we will meet online.',
    ]
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(f'I will release the room {room} from "{title}" ({eid}). {PROCEED}')
    write = ctx.write("release_room", event_id=eid, room_id=room)
    logic.release_room(ctx.db, eid)
    ctx.say(f'The room {room} has been released from "{title}".')
    return write_request("release_room", say, ["release"], write, [eid, room])


def invite(ctx: CalendarTaskDraft, variant: str = "") -> RequestSpec | None:
    """Invite a colleague who works at that time, is free and fits in the room."""
    guest: list[Row] = []

    def fits(ev: Row) -> bool:
        if ev["organizer_id"] != ctx.uid:
            return False
        count = len(logic.attendees_of(ctx.db, ev["id"]))
        if ev["room_id"] and logic.capacity_problem(ctx.db, ev["room_id"], count + 1):
            return False
        for user in ctx.colleagues()[:60]:
            if (
                logic.status_of(ctx.db, ev["id"], user["id"]) is None
                and logic.within_hours(user, ev["s"], ev["e"])
                and not logic.busy(ctx.db, user["id"], ev["s"], ev["e"])
            ):
                guest.append(user)
                return True
        return False

    event = my_event(ctx, fits)
    if event is None:
        return None
    user, eid, title, when = guest[-1], event["id"], event["title"], day_label(event["day"])
    say = [
        f'Please add {person(user)} to my meeting "{title}" on {when}.',
        f'Could you invite {person(user)} to "{title}" on {when}?',
    ]
    ctx.lookup(user)
    ctx.targets.append(eid)
    ctx.call("list_events", user_id=ctx.uid, date=date_text(event["day"]))
    ctx.say(f'I will invite {name(user)} ({user["id"]}) to "{title}" ({eid}). {PROCEED}')
    write = ctx.write("invite_attendee", event_id=eid, user_id=user["id"])
    logic.add_attendee(ctx.db, eid, user["id"], "needs_action")
    ctx.say(f'{name(user)} has been invited to "{title}".')
    return write_request("invite", say, ["invite"], write, [eid, user["id"]])
