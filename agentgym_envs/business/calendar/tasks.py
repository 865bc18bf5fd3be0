"""The Calendar task generator: plans by difficulty and split, the gold conversation,
tool renaming for ood, and the expected database changes.

- ``easy``: one plain request (authentication by email).
- ``medium``: two plain requests, or one with a complication: a forgotten email (the
  agent finds the user by name), a time given in the user's local time, a first choice
  (slot or room) that is taken so the user's fallback applies, or a time-zone question.
- ``hard``: two or three requests with at least one complication and one request the
  policy forbids, never first (so a blanket refusal or doing nothing cannot pass).

Splits: train and test share world 0 and differ by seed; ood uses world 1, intent
combinations that never occur in train or test (:data:`OOD_PAIRS` and the ``invite``
intent) and renames and re-describes 2-4 of the tools its gold conversation uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from agentgym_envs.business.base import gold_changes
from agentgym_envs.business.calendar import intents, questions
from agentgym_envs.business.calendar.draft import CalendarTaskDraft
from agentgym_envs.business.db import EpisodeDB, pristine, world_bytes
from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.tasks import DIFFICULTIES, SPLITS, Task

Step = tuple[str, str]  # (intent, variant)
Builder = Callable[[CalendarTaskDraft, str], "dict[str, Any] | None"]

BUILDERS: dict[str, Builder] = {
    "schedule": intents.schedule,
    "reschedule": intents.reschedule,
    "cancel": intents.cancel,
    "rsvp": intents.rsvp,
    "book_room": intents.book_room,
    "release_room": intents.release_room,
    "invite": intents.invite,
    "question_next": questions.question_next,
    "question_time": questions.question_time,
    "refuse_hours": questions.refuse_hours,
    "refuse_capacity": questions.refuse_capacity,
    "refuse_not_organizer": questions.refuse_not_organizer,
    "refuse_rsvp_other": questions.refuse_rsvp_other,
    "refuse_double_booking": questions.refuse_double_booking,
}
PLAIN: tuple[Step, ...] = (
    ("schedule", "earliest"),
    ("reschedule", "earliest"),
    ("cancel", ""),
    ("rsvp", ""),
    ("book_room", "plain"),
    ("release_room", ""),
    ("question_next", ""),
)
COMPLICATED: tuple[Step, ...] = (
    ("schedule", "at_time"),
    ("schedule", "fallback"),
    ("reschedule", "at_time"),
    ("reschedule", "fallback"),
    ("book_room", "fallback"),
    ("question_time", ""),
)
REFUSALS = (
    "refuse_hours",
    "refuse_capacity",
    "refuse_not_organizer",
    "refuse_rsvp_other",
    "refuse_double_booking",
)
# Held out of train and test: the invite intent, and these pairs of intents in one task.
OOD_ONLY: tuple[Step, ...] = (("invite", ""),)
OOD_PAIRS = tuple(
    frozenset(pair)
    for pair in (
        ("cancel", "book_room"),
        ("rsvp", "reschedule"),
        ("schedule", "release_room"),
        ("question_time", "rsvp"),
        ("reschedule", "refuse_rsvp_other"),
        ("book_room", "refuse_not_organizer"),
        ("question_next", "refuse_capacity"),
    )
)
INSTRUCTION = (
    "You are the calendar assistant of Acme Corp. Help the employee who contacts you "
    "with their calendar, following the policy."
)
RENAMES = {
    "find_user_id_by_email": ("lookup_user_by_email", "user_id_for_email"),
    "find_user_id_by_name": ("lookup_user_by_name", "user_id_for_name"),
    "get_user_details": ("get_profile", "describe_user"),
    "list_events": ("get_day_agenda", "events_on_date"),
    "get_event_details": ("show_event", "read_event"),
    "get_free_slots": ("find_common_free_time", "search_availability"),
    "list_rooms": ("search_rooms", "rooms_with_capacity"),
    "get_room_availability": ("room_schedule", "check_room"),
    "create_event": ("schedule_meeting", "add_calendar_event"),
    "move_event": ("reschedule_meeting", "shift_event"),
    "cancel_event": ("call_off_meeting", "delete_event"),
    "invite_attendee": ("add_guest", "extend_invitation"),
    "rsvp": ("answer_invitation", "set_attendance"),
    "book_room": ("reserve_room", "claim_room"),
    "release_room": ("free_room", "unbook_room"),
}
PARAPHRASES = {
    "find_user_id_by_email": "Look up the id of the employee with this email; the first "
    "one found is treated as the caller (authentication).",
    "find_user_id_by_name": "Look up an employee's id from their first and last name; the "
    "first one found is treated as the caller (authentication).",
    "get_user_details": "Show an employee's profile: office, IANA time zone, UTC offset and "
    "local working hours on weekdays.",
    "list_events": "Show the agenda of an employee for one day of their own local calendar "
    "(UTC times, organizer, their answer to the invitation, room).",
    "get_event_details": "Show everything about one meeting: title, organizer, UTC start "
    "and end, status, invitees with their answers, and its room.",
    "get_free_slots": "Search the half-hour slots of the given length when all the given "
    "employees are working and free, on a day of the caller's local calendar.",
    "list_rooms": "Show the meeting rooms with at least this many seats.",
    "get_room_availability": "Show a room's bookings (UTC) on a day of the room's local calendar.",
    "create_event": "Put a new meeting in the calendar, organized by organizer_id, and send "
    "invitations to attendee_ids.",
    "move_event": "Give an existing meeting a new UTC start and end.",
    "cancel_event": "Call off a meeting.",
    "invite_attendee": "Send an employee an invitation to an existing meeting.",
    "rsvp": "Record an employee's answer to an invitation (accepted, declined, tentative).",
    "book_room": "Reserve a meeting room for a meeting.",
    "release_room": "Give back the room reserved for a meeting.",
}


def is_ood(names: list[str]) -> bool:
    """Whether a task's intents form a combination held out of train and test."""
    held = {i for i, _ in OOD_ONLY}
    return bool(held & set(names)) or any(pair <= set(names) for pair in OOD_PAIRS)


def draw_plan(rng: np.random.Generator, difficulty: str, split: str) -> tuple[bool, list[Step]]:
    """(whether the user forgot their email, the requests in order) for a task."""
    ood = split == "ood"

    def pick(options: tuple[Any, ...]) -> Any:
        return options[int(rng.integers(len(options)))]

    for _ in range(500):
        # in ood, invite is the only held-out single intent; offer it to 40% of the
        # multi-request draws so the held-out pairs get their share
        with_invite = ood and (difficulty == "easy" or rng.random() < 0.4)
        plain = PLAIN + (OOD_ONLY if with_invite else ())
        forgot = False
        if difficulty == "easy":
            steps = [pick(plain)]
        elif difficulty == "medium":
            roll = rng.random()
            if roll < 0.45:
                steps = [pick(plain), pick(plain)]
            elif roll < 0.7:
                forgot, steps = True, [pick(plain)]
            else:
                steps = [pick(COMPLICATED)]
        else:
            steps = [pick(plain if rng.random() < 0.5 else COMPLICATED)
                     for _ in range(1 + int(rng.random() < 0.5))]  # fmt: skip
            complicated = any(s in COMPLICATED for s in steps)
            forgot = not complicated or rng.random() < 0.3
            steps.insert(int(rng.integers(1, len(steps) + 1)), (pick(REFUSALS), ""))
        names = [name for name, _ in steps]
        if len(set(names)) == len(names) and is_ood(names) == ood:
            return forgot, steps
    raise ConfigError(f"no {split}/{difficulty} plan found in 500 draws; widen the plans")


def generate(
    env_cls: Any, seed: int, difficulty: str, split: str, world_size: int | None = None
) -> Task | None:
    """One Calendar task from ``seed``, or None when the drawn plans find no records."""
    if difficulty not in DIFFICULTIES:
        raise ConfigError(
            f"unknown difficulty {difficulty!r} for Calendar; use one of {DIFFICULTIES}."
            f"{did_you_mean(difficulty, DIFFICULTIES)}"
        )
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; use one of {SPLITS}")
    rng = np.random.default_rng(seed)
    size = int(world_size or env_cls.world_sizes["default"])
    world = (env_cls.world_builder, env_cls.tables + env_cls.ignored_tables, int(split == "ood"))
    args = (*world, size)
    db = EpisodeDB()
    try:
        for _ in range(8):
            forgot, steps = draw_plan(rng, difficulty, split)
            db.load(world_bytes(*args), pristine(*args))  # the pristine world for each attempt
            users = db.all("SELECT * FROM users ORDER BY id")
            ctx = CalendarTaskDraft(db, rng, users[int(rng.integers(len(users)))])
            _authenticate(ctx, forgot)
            requests = []
            for intent, variant in steps:
                request = BUILDERS[intent](ctx, variant)
                if request is None:
                    break
                requests.append(request)
            else:
                return _finish(env_cls, ctx, seed, difficulty, split, size, forgot, requests)
        return None
    finally:
        db.close()


def _authenticate(ctx: CalendarTaskDraft, forgot: bool) -> None:
    ctx.say("I can help with that. Could you please tell me your email address?")
    if forgot:
        ctx.say("No problem. Could you tell me your first and last name?")
        me = ctx.me
        ctx.call("find_user_id_by_name", first_name=me["first_name"], last_name=me["last_name"])
    else:
        ctx.call("find_user_id_by_email", email=ctx.me["email"])
    ctx.call("get_user_details", user_id=ctx.uid)


def _finish(
    env_cls: Any,
    ctx: CalendarTaskDraft,
    seed: int,
    difficulty: str,
    split: str,
    size: int,
    forgot: bool,
    requests: list[dict[str, Any]],
) -> Task:
    names = _renames(ctx) if split == "ood" else {}
    solution = tuple(_render(tool, args, names) for tool, args in ctx.actions)
    me = ctx.me
    known = {"email": me["email"], "first_name": me["first_name"], "last_name": me["last_name"]}
    unknown = {"email": known.pop("email")} if forgot else {}
    personas = ("polite", "terse", "chatty")
    spec: dict[str, Any] = {
        "world_seed": int(split == "ood"),
        "world_size": size,
        "user_id": ctx.uid,
        "targets": list(dict.fromkeys(ctx.targets)),
        "user": {
            "name": f"{me['first_name']} {me['last_name']}",
            "known": known,
            "unknown": unknown,
            "requests": requests,
            "persona": personas[int(ctx.rng.integers(len(personas)))],
        },
        "expected": {"digest": "", "rows": {}, "transfer": False},
    }
    if names:
        spec["tool_names"] = names
        spec["tool_descriptions"] = {tool: PARAPHRASES[tool] for tool in names}
    draft = Task(
        id=f"calendar-{difficulty}-{split}-{seed}",
        split=split,
        difficulty=difficulty,
        instruction=INSTRUCTION,
        seed=seed,
        spec=spec,
        solution=solution,
        max_steps=2 * len(solution) + 10,
    )
    expected = gold_changes(env_cls(tasks=[draft], split=split), draft, solution)
    return replace(draft, spec={**spec, "expected": {**expected, "transfer": False}})


def _renames(ctx: CalendarTaskDraft) -> dict[str, str]:
    """Aliases for 2-4 tools, those the gold conversation uses first."""
    used = list(dict.fromkeys(tool for tool, _ in ctx.actions if tool in RENAMES))
    rest = [tool for tool in RENAMES if tool not in used]
    pool = ctx.shuffled(used) + ctx.shuffled(rest)
    count = 2 + int(ctx.rng.integers(3))
    return {tool: ctx.pick(RENAMES[tool]) for tool in sorted(pool[:count])}


def _render(tool: str, args: dict[str, Any], names: dict[str, str]) -> str:
    """An action text in function-call syntax (JSON literals are Python literals here)."""
    body = ", ".join(f"{key}={json.dumps(value)}" for key, value in args.items())
    return f"{names.get(tool, tool)}({body})"
