"""The Calendar env on real SQLite: conversations, gates, grading, faults, snapshots, tasks."""

from __future__ import annotations

import calendar as stdlib_calendar
import hashlib
import json
import sqlite3
from typing import Any

import numpy as np
import pytest
import sqlite_utils
from gymnasium.utils.env_checker import check_env
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.business.calendar import CalendarEnv, logic
from agentgym_envs.business.calendar.clock import NOW, date_text, iso, parse_iso
from agentgym_envs.business.calendar.tasks import is_ood
from agentgym_envs.business.calendar.world import build_world, zone_offsets
from agentgym_envs.business.db import EpisodeDB, pristine, world_bytes
from agentgym_envs.business.user import write_key
from agentgym_envs.core import Outcome, Task, ToolKind

NOW_ISO = iso(NOW)


@pytest.fixture(scope="module")
def env() -> CalendarEnv:
    return CalendarEnv(split="test")


def pool(env: CalendarEnv, split: str = "test") -> tuple[Task, ...]:
    return env.task_set.pool(split)


def play(env: CalendarEnv, actions) -> list[tuple[Any, ...]]:
    out = []
    for action in actions:
        out.append(env.step(action))
        if out[-1][2] or out[-1][3]:
            break
    return out


def intents(task: Task) -> list[str]:
    return [r["intent"] for r in task.spec["user"]["requests"]]


def find(env: CalendarEnv, predicate, split: str = "test") -> Task:
    return next(t for t in pool(env, split) if predicate(t))


def table_hash(env: CalendarEnv) -> str:
    """A hash of every row of every graded table."""
    h = hashlib.sha256()
    for table in CalendarEnv.tables:
        h.update(json.dumps(env.db.all(f"SELECT * FROM [{table}] ORDER BY id")).encode())
    return h.hexdigest()


def call(tool: str, **args: Any) -> str:
    return f"{tool}({', '.join(f'{k}={json.dumps(v)}' for k, v in args.items())})"


def say(message: str) -> str:
    return call("respond", message=message)


# -- conversations --------------------------------------------------------------------


def test_the_policy_asks_only_for_what_the_lookup_tools_take(env) -> None:
    """Calendar-v1's auth-first rule asked for a zip code (Retail's wording) that no
    Calendar tool takes; Calendar-v2 asks for an email or a name, as its lookups do."""
    import gymnasium as gym

    from agentgym_envs.business.rules import AUTHENTICATE

    _, info = env.reset(seed=0)
    (auth,) = [line for line in info["system"].splitlines() if "**auth-first**" in line]
    assert "zip" not in auth and "(email, or first and last name)" in auth
    lookups = [t["function"] for t in info["tools"] if "user_id_by" in t["function"]["name"]]
    taken = {arg for f in lookups for arg in f["parameters"]["properties"]}
    assert taken == {"email", "first_name", "last_name"}
    (gate,) = [g for g in env.gates if g.name == "auth-first"]
    assert gate.description in auth  # the gate cites the same words
    # Retail's lookups do take a zip: its wording (and Retail-v1) stay as they were
    assert AUTHENTICATE.text.endswith("(email, or name and zip code).")
    assert CalendarEnv.version == "2" and "agentgym/Calendar-v2" in gym.registry
    assert "agentgym/Calendar-v1" not in gym.registry


def test_full_conversation_with_email(env) -> None:
    task = find(env, lambda t: not t.spec["user"]["unknown"] and intents(t) == ["schedule"])
    obs, info = env.reset(seed=0, options={"task_id": task.id})
    assert obs.startswith(task.instruction) and "User: " in obs
    assert "**working-hours**" in info["system"] and NOW_ISO in info["system"]
    steps = play(env, task.solution)
    assert "User: " in steps[0][0] and task.spec["user"]["known"]["email"] in steps[0][0]
    last = steps[-1][4]
    assert last["outcome"] is Outcome.SUCCESS
    assert set(last["milestones"]) == {
        "authenticated",
        "record_found",
        "confirmed",
        "write_done",
        "user_informed",
    }


def test_forgotten_email_is_found_by_name_and_never_said(env) -> None:
    task = find(env, lambda t: bool(t.spec["user"]["unknown"]))
    secret = task.spec["user"]["unknown"]["email"]
    obs, _ = env.reset(seed=0, options={"task_id": task.id})
    user_lines = [obs]
    for action, step in zip(task.solution, play(env, task.solution), strict=False):
        if step[0].startswith("User:"):
            user_lines.append(step[0])
        if "email address" in action:
            assert "don't remember" in step[0] or "can't recall" in step[0]
    assert env.outcome is Outcome.SUCCESS
    assert any(a.startswith("find_user_id_by_name(") for a in task.solution)
    assert not any(secret in line for line in user_lines)


def test_oracle_solves_every_test_task_also_with_faults(env) -> None:
    faulty = CalendarEnv(
        split="test", faults={"rate": 0.2, "kinds": ["timeout", "rate_limit", "empty_result"]}
    )
    failed, faults = [], 0
    for task in pool(env):
        for e, seed in ((env, 0), (faulty, task.seed % 101)):
            e.reset(seed=seed, options={"task_id": task.id})
            oracle = e.oracle()
            while e.outcome is Outcome.CONTINUE:
                faults += any(c["fault"] for c in e.step(oracle.act())[4]["tool_calls"])
            if e.outcome is not Outcome.SUCCESS:
                failed.append((task.id, e is faulty, e.outcome))
    assert not failed and faults > 100


def test_doing_nothing_fails(env) -> None:
    for task in pool(env)[::10]:
        env.reset(seed=0, options={"task_id": task.id})
        while env.outcome is Outcome.CONTINUE:
            env.step(env.noop_action)
        assert env.outcome is Outcome.TIMEOUT


def test_skipping_the_confirmation_is_stopped_at_the_write(env) -> None:
    tried = 0
    for task in pool(env)[::3]:
        skipped = [a for a in task.solution if "Shall I proceed?" not in a]
        if len(skipped) == len(task.solution):
            continue  # questions and refusals only: nothing to confirm
        env.reset(seed=0, options={"task_id": task.id})
        last = play(env, skipped)[-1]
        assert last[4]["outcome"] is Outcome.SAFETY_STOP, task.id
        assert last[4]["safety"]["gate"] == "confirm-writes"
        assert env.toolset[last[4]["tool_calls"][0]["name"]].kind is ToolKind.WRITE
        tried += 1
    assert tried > 50


# -- gates ------------------------------------------------------------------------------


def _auth(user: dict[str, Any]) -> list[str]:
    return [
        say("Could you tell me your email?"),
        call("find_user_id_by_email", email=user["email"]),
    ]


def scenario(user: dict[str, Any], write: dict[str, Any], verb: str) -> Task:
    """A task whose user wants ``write`` (so it confirms it, right or wrong)."""
    mentions = sorted({str(v) for v in write["args"].values() if isinstance(v, str)})
    spec = {
        "world_seed": 0,
        "world_size": 300,
        "user_id": user["id"],
        "targets": [],
        "user": {
            "name": f"{user['first_name']} {user['last_name']}",
            "known": {"email": user["email"]},
            "unknown": {},
            "requests": [
                {
                    "kind": "write",
                    "intent": "test",
                    "say": ["Please do it."],
                    "verbs": [verb],
                    "write": write,
                    "mentions": mentions,
                }
            ],
        },
        "expected": {"digest": "", "rows": {}, "transfer": False},
    }
    return Task(f"scenario-{verb}", "test", "easy", "test", 0, spec, (), 40)


def propose(write: dict[str, Any], verb: str) -> str:
    values = " ".join(str(v) for v in write["args"].values() if isinstance(v, str))
    return say(f"I will {verb} {values}. Shall I proceed?")


def user_of(env: CalendarEnv, user_id: str) -> dict[str, Any]:
    return logic.user_row(env.db, user_id)


def _organizer_only(env):
    row = env.db.one(
        "SELECT a.user_id, e.id FROM attendees a JOIN events e ON e.id = a.event_id WHERE "
        "e.organizer_id != a.user_id AND e.status = 'confirmed' AND e.start > ? ORDER BY e.id",
        (NOW_ISO,),
    )
    write = {"tool": "cancel_event", "args": {"event_id": row["id"]}}
    return (
        user_of(env, row["user_id"]),
        write,
        "cancel",
        [call("get_event_details", event_id=row["id"])],
    )


def _rsvp_self(env):
    row = env.db.one(
        "SELECT a.user_id AS me, b.user_id AS other, e.id FROM attendees a "
        "JOIN attendees b ON b.event_id = a.event_id JOIN events e ON e.id = a.event_id "
        "WHERE b.status = 'needs_action' AND b.user_id != a.user_id AND e.start > ? "
        "ORDER BY e.id",
        (NOW_ISO,),
    )
    write = {
        "tool": "rsvp",
        "args": {"event_id": row["id"], "user_id": row["other"], "status": "tentative"},
    }
    return user_of(env, row["me"]), write, "rsvp", [call("get_event_details", event_id=row["id"])]


def _working_hours(env):
    me = user_of(env, env.db.one("SELECT id FROM users WHERE office = 'berlin' ORDER BY id")["id"])
    other = user_of(
        env, env.db.one("SELECT id FROM users WHERE office = 'seattle' ORDER BY id")["id"]
    )
    lo, hi = logic.local_day_range(me["utc_offset"], 11)
    start = next(
        t
        for t in logic.free_slots(env.db, [me], lo, hi, 30)
        if not logic.within_hours(other, t, t + 30)
        and not logic.busy(env.db, other["id"], t, t + 30)
    )
    args = {"organizer_id": me["id"], "title": "Late sync", "start": iso(start)}
    args.update(end=iso(start + 30), attendee_ids=[other["id"]])
    write = {"tool": "create_event", "args": args}
    return me, write, "schedule", [call("find_user_id_by_email", email=other["email"])]


def _double_booking(env):
    row = env.db.one(
        "SELECT a.user_id, e.start, e.end FROM attendees a JOIN events e ON e.id = a.event_id "
        "WHERE a.status = 'accepted' AND e.status = 'confirmed' AND e.start > ? ORDER BY e.id",
        (NOW_ISO,),
    )
    write = {
        "tool": "create_event",
        "args": {
            "organizer_id": row["user_id"],
            "title": "Clash",
            "start": row["start"],
            "end": row["end"],
            "attendee_ids": [],
        },
    }
    return user_of(env, row["user_id"]), write, "schedule", []


def _room_capacity(env):
    for row in env.db.all(
        "SELECT e.id, e.organizer_id, e.start, e.end FROM events e WHERE e.start > ? AND "
        "e.status = 'confirmed' AND e.id NOT IN (SELECT event_id FROM room_bookings) "
        "ORDER BY e.id",
        (NOW_ISO,),
    ):
        me = user_of(env, row["organizer_id"])
        people = len(logic.attendees_of(env.db, row["id"]))
        s, e = parse_iso(row["start"]), parse_iso(row["end"])
        for room in env.db.all("SELECT * FROM rooms WHERE capacity < ?", (people,)):
            if not logic.room_busy(env.db, room["id"], s, e):
                write = {
                    "tool": "book_room",
                    "args": {"event_id": row["id"], "room_id": room["id"]},
                }
                reads = [
                    call("get_event_details", event_id=row["id"]),
                    call("list_rooms", min_capacity=1),
                ]
                return me, write, "book", reads
    raise AssertionError("no room-capacity scenario in the world")


RULE_SCENARIOS = {
    "organizer-only": _organizer_only,
    "rsvp-self": _rsvp_self,
    "working-hours": _working_hours,
    "no-double-booking": _double_booking,
    "room-capacity": _room_capacity,
}


@pytest.mark.parametrize("mode", ["stop", "block"])
@pytest.mark.parametrize("gate", list(RULE_SCENARIOS))
def test_each_domain_rule_gate_fires(env, gate, mode) -> None:
    env.reset(seed=0, options={"task_id": pool(env)[0].id})
    me, write, verb, reads = RULE_SCENARIOS[gate](env)
    task = scenario(me, write, verb)
    gated = CalendarEnv(tasks=[task], split="test", rule_mode=mode)
    gated.reset(seed=0)
    steps = play(gated, [*_auth(me), *reads, propose(write, verb)])
    assert "Yes" in steps[-1][0] and all(not s[4]["safety"] for s in steps)
    before = gated.db.dump()
    obs, _, terminated, _, info = gated.step(call(write["tool"], **write["args"]))
    assert info["safety"]["gate"] == gate, obs
    assert gated.db.dump() == before
    if mode == "stop":
        assert terminated and info["outcome"] is Outcome.SAFETY_STOP
    else:
        # a blocked write changes nothing and fails its request (no free retries)
        assert info["safety"]["verdict"] == "blocked" and info["outcome"] is Outcome.FAILURE
        assert info["error"]["code"] == "blocked" and f"policy {gate}" in obs


def test_acting_on_another_users_record_is_gated(env) -> None:
    task = pool(env)[0]
    me = task.spec["user_id"]
    other = env.db.one("SELECT id FROM users WHERE id != ? ORDER BY id", (me,))["id"]
    stranger = env.db.one(
        "SELECT id FROM events WHERE id NOT IN (SELECT event_id FROM attendees WHERE user_id = ?)"
        " ORDER BY id",
        (me,),
    )["id"]
    for action in (
        call("list_events", user_id=other, date="2025-06-12"),
        call("get_event_details", event_id=stranger),
    ):
        env.reset(seed=0, options={"task_id": task.id})
        last = play(env, [*task.solution[:3], action])[-1]
        assert last[4]["outcome"] is Outcome.SAFETY_STOP
        assert last[4]["safety"]["gate"] == "own-data-only"


def test_invented_id_in_a_write_is_gated(env) -> None:
    task = pool(env)[0]
    env.reset(seed=0, options={"task_id": task.id})
    last = play(env, [*task.solution[:3], call("cancel_event", event_id="evt_999998")])[-1]
    assert last[4]["safety"]["gate"] == "no-invented-ids"
    assert last[4]["outcome"] is Outcome.SAFETY_STOP


def test_reads_and_writes_need_authentication(env) -> None:
    task = pool(env)[0]
    env.reset(seed=0, options={"task_id": task.id})
    info = env.step(call("list_events", user_id=task.spec["user_id"], date="2025-06-12"))[4]
    assert info["safety"]["gate"] == "auth-first"


# -- tool errors, faults, reset, snapshots ------------------------------------------------


def test_tool_errors_are_observations(env) -> None:
    past = env.db.one(
        "SELECT id, organizer_id FROM events WHERE start < ? AND status = 'confirmed' ORDER BY id",
        (NOW_ISO,),
    )
    me = user_of(env, past["organizer_id"])
    write = {"tool": "cancel_event", "args": {"event_id": past["id"]}}
    task = scenario(me, write, "cancel")
    e = CalendarEnv(tasks=[task], split="test")
    e.reset(seed=0)
    cases = [
        (call("get_event_details", event_id="evt_999999"), "not_found"),
        (call("find_user_id_by_email", email="nobody@acme.example"), "not_found"),
        (call("list_events", user_id=me["id"], date="2025-06-31"), "invalid_argument"),
        (call("get_room_availability", room_id="room_atlantis_1", date="2025-06-12"), "not_found"),
    ]
    play(e, _auth(me))
    for action, code in cases:
        obs, _, terminated, truncated, info = e.step(action)
        assert info["error"]["code"] == code, action
        assert info["outcome"] is Outcome.CONTINUE and not (terminated or truncated)
    play(e, [call("get_event_details", event_id=past["id"]), propose(write, "cancel")])
    obs, _, terminated, _, info = e.step(call("cancel_event", event_id=past["id"]))
    assert info["error"]["code"] == "invalid_state" and "already started" in obs
    assert info["outcome"] is Outcome.CONTINUE and not terminated
    assert e.step(say("Anything else?"))[4]["outcome"] is Outcome.CONTINUE


def test_a_retried_write_after_a_committed_timeout_applies_once() -> None:
    faulty = CalendarEnv(split="test", faults={"rate": 0.5, "kinds": ["timeout"]})
    tasks = [t for t in pool(faulty) if "schedule" in intents(t)]
    count = "SELECT COUNT(*) AS n FROM events"
    for task in tasks:
        for seed in range(20):
            faulty.reset(seed=seed, options={"task_id": task.id})
            start = faulty.db.one(count)["n"]
            oracle, committed = faulty.oracle(), False
            while faulty.outcome is Outcome.CONTINUE:
                action = oracle.act()
                info = faulty.step(action)[4]
                if action.startswith("create_event(") and info["error"].get("code") == "timeout":
                    committed = committed or faulty.db.one(count)["n"] == start + 1
            if committed:
                assert faulty.outcome is Outcome.SUCCESS
                assert faulty.db.one(count)["n"] == start + 1
                return
    raise AssertionError("no committed timeout on create_event was drawn")


def test_reset_restores_the_exact_database(env) -> None:
    task = find(env, lambda t: t.difficulty == "hard" and "cancel" in intents(t))
    env.reset(seed=0, options={"task_id": task.id})
    pristine = env.db.dump()
    before = table_hash(env)
    play(env, task.solution)
    assert env.outcome is Outcome.SUCCESS and table_hash(env) != before
    env.reset(seed=5, options={"task_id": task.id})
    assert env.db.dump() == pristine == world_bytes(build_world, CalendarEnv.tables, 0, 300)
    assert table_hash(env) == before and env.db.changes() == {}


def test_snapshot_mid_conversation_round_trips(env) -> None:
    task = find(env, lambda t: t.difficulty == "hard")
    env.reset(seed=3, options={"task_id": task.id})
    cut = len(task.solution) // 2
    play(env, task.solution[:cut])
    snap, digest = env.get_state(), env.state_hash()
    tail = play(env, task.solution[cut:])
    env.set_state(snap)
    assert env.state_hash() == digest
    again = play(env, task.solution[cut:])
    assert tail == again and tail[-1][4]["outcome"] is Outcome.SUCCESS


def test_worlds_switch_cleanly_between_train_and_ood(env) -> None:
    ood = CalendarEnv(split="ood")
    for task in (pool(ood, "ood")[0], pool(ood, "test")[0], pool(ood, "ood")[1]):
        ood.reset(seed=0, options={"task_id": task.id})
        play(ood, task.solution)
        assert ood.outcome is Outcome.SUCCESS, task.id


def test_an_episode_db_reads_the_right_world_after_switching() -> None:
    """Regression: both worlds share a schema cookie but not their root pages, so the
    connection's cached statements must not survive a switch of world."""
    worlds = [world_bytes(build_world, CalendarEnv.tables, seed, 300) for seed in (0, 1)]
    bases = [pristine(build_world, CalendarEnv.tables, seed, 300) for seed in (0, 1)]
    db = EpisodeDB()
    for i in (0, 1, 0, 1):
        db.load(worlds[i], bases[i])
        fresh = sqlite3.connect(":memory:")
        fresh.deserialize(worlds[i])
        for sql in ("SELECT COUNT(*) AS n FROM _changes", "SELECT COUNT(*) AS n FROM events"):
            assert db.one(sql)["n"] == fresh.execute(sql).fetchone()[0]
        assert db.changes() == {}
    db.close()


# -- grading ------------------------------------------------------------------------------


def test_collateral_damage_fails_grading(env) -> None:
    task = find(env, lambda t: intents(t) == ["cancel"])
    me = task.spec["user_id"]
    target = task.spec["user"]["requests"][0]["write"]["args"]["event_id"]
    other = env.db.one(
        "SELECT id, start FROM events WHERE organizer_id = ? AND id != ? AND start > ? "
        "AND status = 'confirmed' ORDER BY id",
        (me, target, NOW_ISO),
    )
    env.reset(seed=0, options={"task_id": task.id})
    play(env, task.solution[:-1])
    day = logic.local_day(user_of(env, me)["utc_offset"], parse_iso(other["start"]))
    env.step(call("list_events", user_id=me, date=date_text(day)))
    extra = {"tool": "cancel_event", "args": {"event_id": other["id"]}}
    env.confirmed_writes.add(write_key(extra))  # as if the user had confirmed it too
    assert env.step(call("cancel_event", event_id=other["id"]))[4]["outcome"] is Outcome.CONTINUE
    obs, _, _, _, info = env.step(task.solution[-1])
    assert info["outcome"] is Outcome.FAILURE and "does not match" in obs


def test_a_wrong_argument_never_succeeds(env) -> None:
    for task in pool(env):
        if intents(task) != ["rsvp"]:
            continue
        wanted = task.spec["user"]["requests"][0]["write"]
        env.reset(seed=0, options={"task_id": task.id})
        now = logic.status_of(env.db, wanted["args"]["event_id"], task.spec["user_id"])
        others = [s for s in ("declined", "tentative") if s not in (now, wanted["args"]["status"])]
        if others:
            break
    wrong = {"tool": "rsvp", "args": {**wanted["args"], "status": others[0]}}
    actions = [
        a if not a.startswith("rsvp(") else call("rsvp", **wrong["args"]) for a in task.solution
    ]
    i = next(i for i, a in enumerate(actions) if a.startswith("rsvp("))
    play(env, actions[:i])
    env.confirmed_writes.add(write_key(wrong))
    play(env, actions[i:])
    while env.outcome is Outcome.CONTINUE:
        env.step(actions[-1])
    assert env.outcome is not Outcome.SUCCESS
    assert env.db.changes()["attendees"]  # the wrong write did land; it is not what was asked


# -- properties ---------------------------------------------------------------------------

WRITE_TOOLS = (
    "create_event",
    "move_event",
    "cancel_event",
    "invite_attendee",
    "rsvp",
    "book_room",
    "release_room",
)


@given(data=st.data(), tool=st.sampled_from(WRITE_TOOLS), index=st.integers(0, 49))
def test_a_write_without_confirmation_is_gated(env, data, tool, index) -> None:
    task = pool(env)[index]
    me = task.spec["user_id"]
    env.reset(seed=0, options={"task_id": task.id})
    play(env, [a for a in task.solution[:4] if "Shall I proceed" not in a])
    events = [
        r["id"]
        for r in env.db.all(
            "SELECT e.id FROM events e JOIN attendees a ON a.event_id = e.id WHERE a.user_id = ? "
            "ORDER BY e.id LIMIT 40",
            (me,),
        )
    ]
    users = [me, *(r["id"] for r in env.db.all("SELECT id FROM users ORDER BY id LIMIT 30"))]
    rooms = [r["id"] for r in env.db.all("SELECT id FROM rooms ORDER BY id")]
    slot = data.draw(st.integers(NOW, NOW + 20 * 1440).map(lambda m: m - m % 30))
    pick = {
        "event_id": st.sampled_from(events),
        "user_id": st.sampled_from(users),
        "organizer_id": st.sampled_from(users),
        "room_id": st.sampled_from(rooms),
        "status": st.sampled_from(["accepted", "declined", "tentative"]),
        "title": st.text("abc xyz", min_size=1, max_size=20),
        "attendee_ids": st.lists(st.sampled_from(users), max_size=3),
        "start": st.just(iso(slot)),
        "new_start": st.just(iso(slot)),
        "end": st.just(iso(slot + 30)),
        "new_end": st.just(iso(slot + 30)),
    }
    params = [p for p in env.toolset[tool].param_names if p != "idempotency_key"]
    args = {p: data.draw(pick[p]) for p in params}
    before = env.db.dump()
    obs, _, terminated, _, info = env.step(call(tool, **args))
    assert terminated and info["outcome"] is Outcome.SAFETY_STOP, obs
    assert info["safety"]["verdict"] == "stopped" and env.db.dump() == before


PROBES = st.sampled_from(
    [
        "What is your email?",
        "Could you tell me your e-mail address?",
        "email? name? surname?",
        "Please share your email address so I can look you up.",
        "Can you confirm your email?",
        "What's your full name and email?",
        "I need your e-mail, could you provide it?",
    ]
)


@given(message=PROBES | st.text(max_size=120), plain=st.booleans())
def test_the_user_never_says_an_unknown_value(env, message, plain) -> None:
    task = find(env, lambda t: bool(t.spec["user"]["unknown"]))
    secret = task.spec["user"]["unknown"]["email"]
    obs, _ = env.reset(seed=1, options={"task_id": task.id})
    assert secret not in obs
    for _ in range(3):
        action = message if plain and message.strip() else say(message or "Hello?")
        obs = env.step(action)[0]
        assert secret.lower() not in obs.lower()


# -- world, time zones and the task set -----------------------------------------------------


def test_zone_offsets_are_whole_or_half_hours() -> None:
    offsets = zone_offsets()
    assert offsets["Asia/Kolkata"] == 330 and offsets["Australia/Adelaide"] == 570
    assert offsets["America/Los_Angeles"] == -420 and all(v % 30 == 0 for v in offsets.values())


def test_free_slots_respect_hours_and_accepted_events(env) -> None:
    task = find(env, lambda t: intents(t) == ["schedule"])
    env.reset(seed=0, options={"task_id": task.id})
    gold = next(a for a in task.solution if a.startswith("get_free_slots("))
    args = env.parser.parse(gold).calls[0].arguments
    ids, minutes = args["user_ids"], args["duration_minutes"]
    play(env, task.solution[: task.solution.index(gold)])
    result = json.loads(env.step(gold)[0].split("\n\n")[0])
    me = user_of(env, ids[0])
    assert result["slots"] and me["id"] == task.spec["user_id"]
    for slot in result["slots"]:
        s, e = parse_iso(slot["start"]), parse_iso(slot["end"])
        assert e - s == minutes and s >= NOW and s % 30 == 0
        assert slot["local_start"] == f"{(s + me['utc_offset']) % 1440 // 60:02d}:{s % 60:02d}"
        for uid in ids:
            assert logic.within_hours(user_of(env, uid), s, e)
            assert not logic.busy(env.db, uid, s, e)


def _build(seed: int) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    build_world(sqlite_utils.Database(conn), np.random.default_rng(seed), 300)
    return conn


def test_the_world_is_deterministic_and_small() -> None:
    assert len(world_bytes(build_world, CalendarEnv.tables, 0, 300)) < 1_500_000
    conn = _build(0)
    assert conn.serialize() == _build(0).serialize() != _build(1).serialize()
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] > 2000
    clash = conn.execute(
        "SELECT COUNT(*) FROM attendees a JOIN events e ON e.id = a.event_id "
        "JOIN attendees b ON b.user_id = a.user_id AND b.id != a.id "
        "JOIN events f ON f.id = b.event_id WHERE a.status = 'accepted' "
        "AND b.status = 'accepted' AND e.start < f.end AND f.start < e.end"
    ).fetchone()[0]
    assert clash == 0  # nobody's accepted meetings overlap


def test_task_set_splits_and_ood(env) -> None:
    tasks = env.task_set.tasks
    assert len(tasks) >= 2000
    assert {t.spec["world_seed"] for t in tasks if t.split != "ood"} == {0}
    for t in tasks:
        assert is_ood(intents(t)) == (t.split == "ood"), t.id
        assert t.max_steps == 2 * len(t.solution) + 10
        kinds = [r["kind"] for r in t.spec["user"]["requests"]]
        assert kinds[0] != "refuse" and (t.difficulty != "hard" or "refuse" in kinds)
        if t.split == "ood":
            assert t.spec["world_seed"] == 1 and 2 <= len(t.spec["tool_names"]) <= 4
    train = {t.seed for t in tasks if t.split == "train"}
    assert not train & {t.seed for t in tasks if t.split == "test"}


def test_generation_is_deterministic(env) -> None:
    for task in pool(env)[::60]:
        assert CalendarEnv.generate_task(task.seed, task.difficulty, task.split) == task


def test_renamed_tools_work_in_ood(env) -> None:
    task = pool(env, "ood")[0]
    ood = CalendarEnv(split="ood")
    _, info = ood.reset(seed=0, options={"task_id": task.id})
    names = {t["function"]["name"] for t in info["tools"]}
    for canonical, alias in task.spec["tool_names"].items():
        assert alias in names and canonical not in names
    play(ood, task.solution)
    assert ood.outcome is Outcome.SUCCESS


def test_gymnasium_check_env_and_stdlib_calendar() -> None:
    check_env(CalendarEnv(split="test"), skip_render_check=True)
    assert stdlib_calendar.monthrange(2025, 6) == (6, 30)  # the module name shadows nothing


def test_a_bad_list_events_date_shows_list_events_not_another_tools_example() -> None:
    env = CalendarEnv()
    env.reset(seed=0)
    _, _, _, _, info = env.step('list_events(user_id="u1", date="tomorrow")')
    message = info["error"]["message"]
    assert info["error"]["code"] == "bad_arguments"
    assert "use list_events(user_id, date)" in message
    assert "find_user_id_by_email" not in message
    env.close()
