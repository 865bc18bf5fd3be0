"""The base of the business simulators: a SQLite world, a policy, a simulated user.

A domain (retail, calendar) subclasses :class:`BusinessEnv` and adds only what is its
own: the world builder, its tools (SQL against ``self.db``), its rule gates, the slot
vocabulary of its user, and its task generator. This base provides the conversation
(``respond`` and plain text go to the simulated user), authentication, the generic
policy gates, grading by database state and the milestones.

Grading: when the conversation ends (the user has what it wanted, or the agent
transferred to a human), the rows that differ from the pristine world must equal the
task's gold changes exactly (same rows, same content), so a missing write, a wrong
write and collateral damage all fail; and the user must have been told what it asked.

Authentication: only the caller's identity authenticates. A lookup that finds the
caller authenticates them; any other user a lookup finds (before or after) stays a
colleague or stranger, so their records stay someone else's (gate ``own-data-only``).

Answers: the user accepts an answer only if it gives exactly the expected values (see
:mod:`~agentgym_envs.business.answers`) *and* the record the answer comes from was read
in this episode, after authentication, by a tool that shows it (``reads``, part of every
snapshot; the domain names a question's records in :meth:`BusinessEnv.answer_sources`).
The first message that gives a candidate of the asked kind is the answer: a wrong one,
or one whose record was not read, fails the request (the user leaves, the episode
fails), so answers cannot be guessed one per message.

A refusal counts only if it is one, no write was made while the request was asked, and
the records that justify it (the order whose state forbids the change, the colleague's
working hours ...; :meth:`BusinessEnv.refusal_sources`) were read after authentication,
the same rule as for answers. A request forbidden on its face (acting on another
person's behalf) needs authentication only.

Blocked writes (``rule_mode="block"``): a write a gate blocks changes nothing, but it
fails the request it was made for, as a wrong answer does, so blocked writes are never
a free way to try candidates until one passes. A blocked read only shows the gate's
reason and the episode goes on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from agentgym_envs.business.answers import AnswerReader
from agentgym_envs.business.db import EpisodeDB, changes_digest, pristine, world_bytes
from agentgym_envs.business.policy import Rule, RuleGate, policy_document
from agentgym_envs.business.user import Request, SimulatedUser, UserGoal, write_key
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.faults import REFUSED_KINDS, FaultKind
from agentgym_envs.core.tasks import Task
from agentgym_envs.core.tools import IDEMPOTENCY_KEY, ToolCall, ToolKind, ToolResult, tool
from agentgym_envs.core.verifiers import Milestone

AUTHENTICATE = Rule(
    "auth-first",
    "authenticate first",
    "Before reading private data or changing anything, authenticate the user by finding "
    "their user id from what they tell you (email, or name and zip code).",
)
OWN_DATA = Rule(
    "own-data-only",
    "act for the authenticated user only",
    "Only read or change records that belong to the authenticated user.",
)
CONFIRM_WRITES = Rule(
    "confirm-writes",
    "explicit confirmation",
    "Before any change, list the action and its details to the user and get an explicit "
    "yes. Then perform exactly the action the user confirmed.",
)
NO_INVENTED_IDS = Rule(
    "no-invented-ids",
    "no invented ids",
    "Use only ids that you have seen in tool results or that the user told you.",
)
GENERIC_RULES = (AUTHENTICATE, OWN_DATA, CONFIRM_WRITES, NO_INVENTED_IDS)


class AuthenticateFirstGate(RuleGate):
    rule = AUTHENTICATE

    def broken(self, env: Any, call: ToolCall) -> str | None:
        spec = env.toolset.canonical(call.name)
        needs = call.name in env.private_tools or spec.kind is ToolKind.WRITE
        if needs and env.auth_user is None:
            return f"{call.name} needs an authenticated user and none is authenticated"
        return None


class OwnDataOnlyGate(RuleGate):
    rule = OWN_DATA

    def broken(self, env: Any, call: ToolCall) -> str | None:
        owner = env.record_owner(call)
        if owner is not None and env.auth_user is not None and owner != env.auth_user:
            return f"{call.name} touches a record of user {owner}, not of {env.auth_user}"
        return None


class ConfirmedWriteGate(RuleGate):
    rule = CONFIRM_WRITES

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if env.toolset.canonical(call.name).kind is not ToolKind.WRITE:
            return None
        args = {k: v for k, v in call.arguments.items() if k != IDEMPOTENCY_KEY}
        if write_key({"tool": call.name, "args": args}) in env.confirmed_writes:
            return None
        return f"the user has not confirmed {call.name} with these arguments"


class KnownIdsGate(RuleGate):
    rule = NO_INVENTED_IDS

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if env.toolset.canonical(call.name).kind is not ToolKind.WRITE:
            return None
        unseen = sorted(i for i in _ids_in(call.arguments, env.id_pattern) if i not in env.seen_ids)
        return f"{call.name} uses ids never seen in this conversation: {unseen}" if unseen else None


class BusinessEnv(AgentEnv):
    """Base class of the SQLite business simulators (see the module docstring)."""

    family = "business"
    accepts_messages = True
    noop_action = 'respond(message="OK.")'
    max_observation_chars = 12000
    max_action_chars = 4000
    task_counts = {"train": 500, "test": 100, "ood": 100}  # 2,100 tasks per domain

    # -- what a domain declares ---------------------------------------------------------
    world_builder: ClassVar[Any]  # a db.Builder, usually given as staticmethod(build_world)
    tables: ClassVar[tuple[str, ...]]  # tracked tables (each with an ``id`` primary key)
    ignored_tables: ClassVar[tuple[str, ...]] = ()  # tracked but not graded (audit log)
    world_sizes: ClassVar[Mapping[str, int]] = {"small": 60, "default": 300, "large": 1500}
    policy_title: ClassVar[str] = ""
    policy_intro: ClassVar[str] = ""
    domain_rules: ClassVar[tuple[Rule, ...]] = ()
    domain_gates: ClassVar[tuple[type[RuleGate], ...]] = ()
    private_tools: ClassVar[frozenset[str]] = frozenset()
    slot_synonyms: ClassVar[Mapping[str, Sequence[str]]] = {}
    write_verbs: ClassVar[Sequence[str]] = ()
    id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"$^")
    answer_reader: ClassVar[AnswerReader] = AnswerReader()

    def __init__(
        self, *, world_size: str | int = "default", rule_mode: str = "stop", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(world_size, str):
            if world_size not in self.world_sizes:
                raise ConfigError(
                    f"world_size must be an int or one of {list(self.world_sizes)}, "
                    f"got {world_size!r}"
                )
            world_size = self.world_sizes[world_size]
        if not isinstance(world_size, int) or world_size < 10:
            raise ConfigError(f"world_size must be at least 10 users, got {world_size!r}")
        self.world_size = world_size
        # most specific first: an invented id is reported as such, not as unconfirmed
        gate_types: tuple[type[RuleGate], ...] = (
            AuthenticateFirstGate,
            KnownIdsGate,
            OwnDataOnlyGate,
            ConfirmedWriteGate,
        )
        self.gates.extend(g(rule_mode) for g in (*gate_types, *self.domain_gates))
        self.db = EpisodeDB()
        self.auth_user: str | None = None
        self.seen_ids: set[str] = set()  # ids in anything the agent was shown
        self.fetched_ids: set[str] = set()  # ids that READ tools returned
        self.reads: set[str] = set()  # "tool id": records READ tools showed after auth
        self._asked_writes = 0  # writes applied when the current request was asked
        self.confirmed_writes: set[str] = set()
        self._writes: tuple[str, ...] = ()  # keys of confirmed writes applied, in order
        self._chain = ""  # digest of every applied write, in order (the world's key)
        self._transferred = False
        self._verdict: str | None = None  # None: not graded yet; "" success; else why not
        self._trial = 0
        self.user: SimulatedUser | None = None

    # -- hooks a domain implements --------------------------------------------------------

    def record_owner(self, call: ToolCall) -> str | None:
        """The user id owning the record ``call`` reads or changes (None: no user's)."""
        return None

    def answer_sources(self, request: Request) -> list[tuple[str, frozenset[str]]] | None:
        """The records a question's answer comes from, each with the READ tools that show
        it: the answer counts once one of them was read after authentication. None: the
        domain names no records (then authentication alone is required)."""
        return None

    def refusal_sources(
        self, request: Request
    ) -> list[tuple[tuple[str, ...], frozenset[str]]] | None:
        """The records that justify refusing ``request``: groups of record ids (the
        candidates for one record, e.g. events of the asked title), each with the READ
        tools that show what forbids it. The refusal counts once *every* group had one of
        its records read by one of its tools after authentication. None: forbidden on
        its face (authentication alone is required)."""
        return None

    def proposal_context(self, write: Mapping[str, Any]) -> list[str]:
        """Values the record a write changes holds now, which a proposal may name beside
        the write's own (the payment method being replaced); none by default."""
        return []

    def on_blocked(self, call: ToolCall) -> None:
        """A gate blocked ``call`` (``rule_mode="block"``): a blocked write fails the
        current request (the user is not served), so blocking is no free oracle."""
        if self.user is not None and self.toolset.canonical(call.name).kind is ToolKind.WRITE:
            self.user.fail(f"{call.name} was blocked by a safety gate")

    # -- conversation tools -------------------------------------------------------------

    @tool(
        "Send a message to the user (questions, proposals to confirm, answers). Plain text "
        "without a tool call is also sent to the user.",
        parameters={"message": {"type": "string", "minLength": 1, "maxLength": 3000}},
        cost=0.2,
        faultable=False,
    )
    def respond(self, message: str) -> ToolResult:
        return self.on_message(message)

    @tool(
        "Transfer the user to a human agent, with a summary of the issue. Only when the "
        "request cannot be handled within the policy and tools. This ends the conversation.",
        parameters={"summary": {"type": "string", "minLength": 1, "maxLength": 2000}},
        cost=1.0,
        faultable=False,
    )
    def transfer_to_human_agents(self, summary: str) -> ToolResult:
        assert self.user is not None
        self._transferred = True
        self.user.end()
        return ToolResult("Transfer successful. A human agent will take over.")

    def on_message(self, text: str) -> ToolResult:
        user = self.user
        assert user is not None
        index = user.state.index
        reply = user.reply(text, self._satisfied, self.proposal_context)
        if user.state.index != index:
            self._asked_writes = len(self._writes)
        if reply.confirmed_write is not None:
            self.confirmed_writes.add(write_key(reply.confirmed_write))
        return ToolResult(f"User: {reply.text}")

    def _satisfied(self, request: Request) -> bool:
        if request.kind == "transfer":
            return self._transferred
        if request.kind == "refuse":  # nothing changed while asked, the reason was read
            return len(self._writes) == self._asked_writes and self._refusal_read(request)
        if request.kind == "question":
            return self._answer_read(request)
        write, _ = self.user.expected_write() if self.user else (None, ())
        return write is not None and write_key(write) in self._writes

    def _answer_read(self, request: Request) -> bool:
        if self.auth_user is None:
            return False
        sources = self.answer_sources(request)
        if sources is None:
            return True
        return any(f"{t} {rid}" in self.reads for rid, tools in sources for t in tools)

    def _refusal_read(self, request: Request) -> bool:
        if self.auth_user is None:
            return False
        sources = self.refusal_sources(request) or []
        return all(
            any(f"{t} {rid}" in self.reads for rid in ids for t in tools) for ids, tools in sources
        )

    # -- helpers for domain tools -------------------------------------------------------

    def authenticate(self, user_id: str) -> None:
        """Authenticate ``user_id`` if it is the caller (called by the lookup tools).

        Only the caller's identity authenticates, once: a lookup of anyone else (a
        colleague, another customer) never switches the authenticated user, so their
        records stay someone else's for the ``own-data-only`` gate.
        """
        caller = self._task.spec.get("user_id") if self._task is not None else None
        if self.auth_user is None and (caller is None or user_id == caller):
            self.auth_user = user_id

    def after_call(self, call: ToolCall, result: ToolResult | None) -> None:
        """Track ids that tools returned, and record every successful WRITE (the database
        changes only through these)."""
        if result is None or not result.ok:
            return
        if self.toolset.canonical(call.name).kind is not ToolKind.WRITE:
            if call.name != "respond":
                self.fetched_ids.update(self.id_pattern.findall(result.text))
            if call.name != "respond" and self.auth_user is not None:
                shown = {*_ids_in(call.arguments, self.id_pattern)}
                shown.update(self.id_pattern.findall(result.text))
                self.reads.update(f"{call.name} {i}" for i in shown)
            return
        args = {k: v for k, v in call.arguments.items() if k != IDEMPOTENCY_KEY}
        key = write_key({"tool": call.name, "args": args})
        self._writes = (*self._writes, key)
        self._chain = hashlib.blake2b(f"{self._chain}|{key}".encode(), digest_size=8).hexdigest()

    @staticmethod
    def as_json(data: Any) -> ToolResult:
        """A tool result carrying ``data`` as compact JSON text."""
        return ToolResult(json.dumps(data, sort_keys=True, default=str), data=data)

    # -- world hooks --------------------------------------------------------------------

    def _load_task(self, task: Task) -> None:
        seed, size = int(task.spec["world_seed"]), int(task.spec["world_size"])
        tables = self.tables + self.ignored_tables
        args = (type(self).world_builder, tables, seed, size)
        self.db.load(world_bytes(*args), pristine(*args))
        self.auth_user = None
        self.seen_ids = set()
        self.fetched_ids = set()
        self.reads = set()
        self._asked_writes = 0
        self.confirmed_writes = set()
        self._writes = ()
        self._chain = ""
        self._transferred = False
        self._verdict = None
        self._trial = int(self.np_random.integers(2**31 - 1))
        self.user = SimulatedUser(
            _goal(task),
            self.slot_synonyms,
            self.write_verbs,
            (task.seed, self._trial),
            self.answer_reader,
        )

    def reset_view(self) -> str:
        assert self.user is not None
        return f"User: {self.user.opening()}"

    def render_view(self) -> str:
        return ""

    def system_rules(self) -> str:
        rules = (*GENERIC_RULES, *self.domain_rules)
        return policy_document(self.policy_title, self.policy_intro, rules)

    def on_observation(self, text: str) -> None:
        self.seen_ids.update(self.id_pattern.findall(text))

    def _get_world(self) -> tuple[Any, ...]:
        assert self.user is not None
        return (
            self.db.dump(),
            self.auth_user,
            tuple(sorted(self.seen_ids)),
            tuple(sorted(self.fetched_ids)),
            tuple(sorted(self.confirmed_writes)),
            self._writes,
            self._chain,
            self._transferred,
            self._verdict,
            self._trial,
            self.user.get_state(),
            tuple(sorted(self.reads)),
            self._asked_writes,
        )

    def _set_world(self, world: tuple[Any, ...]) -> None:
        data, self.auth_user, seen, fetched, confirmed, self._writes, self._chain = world[:7]
        self._transferred, self._verdict, self._trial, user_state = world[7:11]
        reads, self._asked_writes = world[11:]
        self.reads = set(reads)
        assert self._task is not None
        self.db.load(data, self.db._base)  # type: ignore[arg-type]
        self.seen_ids, self.fetched_ids = set(seen), set(fetched)
        self.confirmed_writes = set(confirmed)
        self.user = SimulatedUser(
            _goal(self._task),
            self.slot_synonyms,
            self.write_verbs,
            (self._task.seed, self._trial),
            self.answer_reader,
        )
        self.user.set_state(user_state)

    def _world_key(self) -> Any:
        assert self.user is not None
        # the database changes only through recorded writes, so their chain stands for it
        return (
            self._chain,
            self.auth_user,
            self._transferred,
            self.user.get_state(),
            tuple(sorted(self.confirmed_writes)),
        )

    def _goal_reached(self) -> bool:
        return self._grade() == ""

    def _dead_end(self) -> str | None:
        verdict = self._grade()
        return verdict or None

    def _grade(self) -> str | None:
        """None while the conversation goes on; then "" for success or why it failed."""
        user = self.user
        assert user is not None and self._task is not None
        if not user.state.done:
            return None
        if self._verdict is None:
            self._verdict = self._verify(self._task)
        return self._verdict

    def _verify(self, task: Task) -> str:
        assert self.user is not None
        if self.user.state.failed:
            return f"the user left unserved: {self.user.state.failed}"
        expected = task.spec["expected"]
        changes = self.db.changes(ignore=self.ignored_tables)
        if changes_digest(changes) != expected["digest"]:
            got = {t: sorted(rows) for t, rows in changes.items()}
            want = expected.get("rows", {})
            return f"the database does not match the goal (changed rows {got}, expected {want})"
        if self._transferred != bool(expected.get("transfer", False)):
            return "the transfer to a human was " + ("wrong" if self._transferred else "missing")
        assert self.user is not None
        if self.user.state.index < len(self.user.goal.requests) and not self._transferred:
            return "the user's requests were not all met"
        return ""

    def _milestones(self) -> Sequence[Milestone]:
        spec = self._task.spec if self._task else {}
        user_id, targets = spec.get("user_id"), frozenset(spec.get("targets", ()))
        # each write the user wants (or its fallback), as keys: a repeated write is one
        wanted = [
            {write_key(w) for w in (r["write"], (r.get("fallback") or {}).get("write")) if w}
            for r in spec["user"]["requests"]
            if r["kind"] == "write"
        ]
        writes = len(wanted)
        out = [
            Milestone(
                "authenticated",
                "the right user is authenticated",
                lambda: self.auth_user == user_id,
            )
        ]
        if targets:
            out.append(
                Milestone(
                    "record_found",
                    "the task's records were looked up (after authentication)",
                    lambda: targets <= {r.split(" ", 1)[1] for r in self.reads},
                )
            )
        if writes:
            out.append(
                Milestone(
                    "confirmed",
                    "the user confirmed a proposal",
                    lambda: bool(self.confirmed_writes),
                )
            )
            out.append(
                Milestone(
                    "write_done",
                    "every write the user wants is done (each counted once)",
                    lambda: all(keys & set(self._writes) for keys in wanted),
                )
            )
        out.append(
            Milestone(
                "user_informed",
                "the user's first request was met",
                lambda: self.user is not None and self.user.state.index >= 1,
            )
        )
        return out

    def _generate(self, seed: int, difficulty: str, split: str) -> Task | None:
        # tasks made on the fly (reset option task_seed) live in this env's world size;
        # domains implement generate_task(seed, difficulty, split, world_size=None)
        generate: Any = self.generate_task
        task: Task | None = generate(seed, difficulty, split, world_size=self.world_size)
        return task

    def oracle(self) -> PlanOracle:
        return PlanOracle(self)

    @classmethod
    def task_key(cls, task: Task) -> Any:
        spec = task.spec
        requests = [
            (r["kind"], r["intent"], json.dumps(r.get("write"), sort_keys=True))
            for r in spec["user"]["requests"]
        ]
        return (
            spec["world_seed"],
            spec["user_id"],
            json.dumps(requests),
            json.dumps(spec.get("tool_names", {}), sort_keys=True),
        )

    def _close(self) -> None:
        self.db.close()


class PlanOracle:
    """Follows the task's gold conversation, repeating a call the infrastructure failed
    (timeout, rate limit, empty result, or another refused fault; the same idempotency
    key makes a repeated write safe). After a snapshot restore it finds its place by
    matching the env's history."""

    _RETRY = ("timeout", "rate_limited")
    _REPEAT = frozenset(k.value for k in REFUSED_KINDS | {FaultKind.EMPTY_RESULT})

    def __init__(self, env: BusinessEnv) -> None:
        self.env = env
        self._plan = env.task.solution
        self._canon = [env.parser.parse(env.localize_action(a)).canonical for a in self._plan]
        self._index = self._position()

    def _position(self) -> int:
        i = 0
        for entry in self.env._history:
            if i < len(self._canon) and entry == self._canon[i]:
                i += 1
        return i

    def act(self) -> str:
        info = self.env.last_info
        if info is not None and self._index > 0 and info["step"] == self.env.steps_taken:
            calls = info["tool_calls"]
            faulted = any(c["fault"] in self._REPEAT for c in calls)
            if info["error"].get("code") in self._RETRY or faulted:
                return self._plan[self._index - 1]
        if self._index >= len(self._plan):
            return self.env.noop_action
        action = self._plan[self._index]
        self._index += 1
        return action


_GOALS: dict[str, tuple[Any, UserGoal]] = {}


def _goal(task: Task) -> UserGoal:
    """The parsed user goal of a task, parsed once per task (not per reset)."""
    spec = task.spec["user"]
    cached = _GOALS.get(task.id)
    if cached is None or cached[0] is not spec:  # same id, other spec: a custom task
        if len(_GOALS) >= 8192:
            _GOALS.clear()
        cached = _GOALS[task.id] = (spec, UserGoal.from_json(spec))
    return cached[1]


def _ids_in(value: Any, pattern: re.Pattern[str]) -> Iterator[str]:
    if isinstance(value, str):
        yield from pattern.findall(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _ids_in(v, pattern)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _ids_in(v, pattern)


def gold_changes(env: BusinessEnv, task: Task, actions: Sequence[str]) -> dict[str, Any]:
    """Replay ``actions`` on a fresh episode of ``task`` and return the expected-changes
    record a task stores: the digest of the changed rows and their ids per table."""
    env.reset(seed=0, options={"task_id": task.id})
    for action in actions:
        if any(env.step(action)[2:4]):  # a broken gold plan ends early; validation rejects it
            break
    changes = env.db.changes(ignore=env.ignored_tables)
    return {"digest": changes_digest(changes), "rows": {t: sorted(r) for t, r in changes.items()}}
