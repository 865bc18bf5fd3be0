"""The base of the business simulators: a SQLite world, a policy, a simulated user.

A domain (the ``retail`` and ``calendar`` subpackages) is a small subclass of
:class:`BusinessEnv` that adds only what is its own: the world builder, its tool groups
(:mod:`~agentgym_envs.business.toolsets`: SQL against the episode's database), its rule
gates, the slot vocabulary of its user, and its task generator. This base provides the
conversation (``respond`` and plain text go to the simulated user), authentication, the
generic policy gates (:mod:`~agentgym_envs.business.rules`), grading by database state
(a typed :class:`~agentgym_envs.business.episode.Verdict`), snapshots (a frozen
:class:`~agentgym_envs.business.episode.BusinessWorld`) and the milestones.

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

Step checks (``core.step_checks``, ``local_weight > 0``): the generic ones only. "The
right tool for the state" (a write before authenticating, before the user confirmed it,
or with an id no read returned) is what the rule gates ``auth-first``,
``confirm-writes`` and ``no-invented-ids`` judge before the call: a blocked call reads
``no_violation`` -1, a stopped one settles the return at ``hard_fail``, so a check of its
own would charge the same call twice. A read before a write is not asked for on its own:
an answer or refusal counts only if its record was read (above), which the verdict and
the milestones already pay for.

The LLM user (``user="llm"``): a model words every reply the agenda decided, checked
before it is said (:mod:`~agentgym_envs.business.voice`), and optionally reads the
agent's messages (``user_reader="llm"``, :mod:`~agentgym_envs.business.reading`); its
calls can be recorded and replayed (:mod:`~agentgym_envs.business.user_model`). A
user-side failure ends the episode with ``ENV_ERROR`` (:meth:`BusinessEnv.env_failure`);
``info["user_llm"]`` carries its counters on every step.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from agentgym_envs.business.answers import AnswerKind, AnswerReader
from agentgym_envs.business.db import EpisodeDB, changes_digest, pristine, world_bytes
from agentgym_envs.business.episode import PENDING, SUCCESS, BusinessWorld, GradeState, Verdict
from agentgym_envs.business.oracle import GoldConversationOracle
from agentgym_envs.business.policy import Rule, RuleGate, policy_document
from agentgym_envs.business.rules import (
    AUTHENTICATE,
    GENERIC_GATES,
    GENERIC_RULES,
    AuthenticateFirstGate,
    ids_in,
)
from agentgym_envs.business.toolsets import ToolGroup, install_tool_groups, json_result
from agentgym_envs.business.user import (
    Request,
    RequestKind,
    SimulatedUser,
    UserGoal,
    write_key,
)
from agentgym_envs.business.user_model import UserModel, UserSimulatorError, user_config
from agentgym_envs.business.voice import EpisodeVoice, FactReader, persona_for
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import Task
from agentgym_envs.core.tools import IDEMPOTENCY_KEY, ToolCall, ToolKind, ToolResult, tool
from agentgym_envs.core.verifiers import Milestone

G = TypeVar("G", bound=ToolGroup)


class BusinessEnv(AgentEnv):
    """Base class of the SQLite business simulators (see the module docstring).

    A domain is a small subclass: it declares its world, policy and user vocabulary as
    class attributes, names the :class:`~agentgym_envs.business.toolsets.ToolGroup`
    classes its tools live in (``tool_groups``) and implements the few hooks below.
    """

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
    auth_rule: ClassVar[Rule] = AUTHENTICATE  # auth-first, naming what the lookups take
    domain_gates: ClassVar[tuple[type[RuleGate], ...]] = ()
    private_tools: ClassVar[frozenset[str]] = frozenset()
    slot_synonyms: ClassVar[Mapping[str, Sequence[str]]] = {}
    write_verbs: ClassVar[Sequence[str]] = ()
    id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"$^")
    answer_reader: ClassVar[AnswerReader] = AnswerReader()
    voice_kinds: ClassVar[tuple[AnswerKind, ...]] = ()  # more facts a voiced reply keeps
    tool_groups: ClassVar[tuple[type[ToolGroup], ...]] = ()  # the domain's tools

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # the groups' tools become methods of the class before the core collects them
        if "tool_groups" in vars(cls):
            install_tool_groups(cls, cls.tool_groups)
        super().__init_subclass__(**kwargs)

    def __init__(
        self,
        *,
        world_size: str | int = "default",
        rule_mode: str = "stop",
        user: str = "template",
        user_model: str | None = None,
        user_base_url: str | None = None,
        user_reader: str = "keyword",
        user_cassette: str | None = None,
        user_cassette_mode: str | None = None,
        user_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """See :class:`~agentgym_envs.core.env.AgentEnv` for the shared arguments.

        Args:
            world_size: users in the world: an int, or ``small``, ``default``, ``large``.
            rule_mode: ``stop`` (a rule violation ends the episode) or ``block``.
            user: ``template`` (the agenda speaks from its templates) or ``llm`` (a model
                words each decided reply; see :mod:`~agentgym_envs.business.voice`).
            user_model: with ``user="llm"``: the model name the endpoint serves.
            user_base_url: with ``user="llm"``: an OpenAI-compatible API root (e.g.
                ``http://127.0.0.1:8000/v1`` of ``agentgym serve``); not needed to replay.
            user_reader: ``keyword``, or ``llm`` (the model also reads agent messages).
            user_cassette: a cassette file of the user's model calls.
            user_cassette_mode: ``off``, ``record`` or ``replay``; default ``replay``
                with a cassette, ``off`` without.
            user_options: more settings of the LLM user: ``temperature``, ``top_p``,
                ``max_tokens``, ``draws``, ``fallback`` (``template`` or ``none``),
                ``timeout_s``, ``retries``, ``api_key_env``.
        """
        self._tool_groups: dict[type[ToolGroup], ToolGroup] = {}
        self.user_config = user_config(
            user,
            user_model,
            user_base_url,
            user_reader,
            user_cassette,
            user_cassette_mode,
            user_options,
        )
        self._user_model = UserModel(self.user_config) if self.user_config else None
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
        self.gates.extend(
            g(rule_mode, rule=self.auth_rule) if g is AuthenticateFirstGate else g(rule_mode)
            for g in (*GENERIC_GATES, *self.domain_gates)
        )
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
        self._verdict = PENDING
        self._trial = 0
        self.user: SimulatedUser | None = None
        self._voice: EpisodeVoice | None = None

    def tool_group(self, kind: type[G]) -> G:
        """This env's instance of the tool group ``kind`` (made on first use)."""
        group = self._tool_groups.get(kind)
        if group is None:
            group = self._tool_groups[kind] = kind(self)
        assert isinstance(group, kind)
        return group

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
        if self._voice is not None and self._voice.state.fault:
            return ToolResult("(The simulated user is unavailable.)")
        index = user.state.index
        try:
            reply = user.reply(text, self._satisfied, self.proposal_context)
        except UserSimulatorError:  # recorded in the voice state: env_failure ends it
            return ToolResult("(The simulated user is unavailable.)")
        if user.state.index != index:
            self._asked_writes = len(self._writes)
        if reply.confirmed_write is not None:
            self.confirmed_writes.add(write_key(reply.confirmed_write))
        return ToolResult(f"User: {reply.text}")

    def _satisfied(self, request: Request) -> bool:
        if request.kind is RequestKind.TRANSFER:
            return self._transferred
        if request.kind is RequestKind.REFUSE:  # nothing changed while asked, reason read
            return len(self._writes) == self._asked_writes and self._refusal_read(request)
        if request.kind is RequestKind.QUESTION:
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
                shown = {*ids_in(call.arguments, self.id_pattern)}
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
        return json_result(data)

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
        self._verdict = PENDING
        self._trial = int(self.np_random.integers(2**31 - 1))
        self.user = self._make_user(task)

    def _make_user(self, task: Task) -> SimulatedUser:
        """The simulated user of an episode of ``task`` (with its voice if configured)."""
        goal, seed = _goal(task), (task.seed, self._trial)
        self._voice = None
        if self._user_model is not None:
            facts = FactReader(self.answer_reader, goal, self.voice_kinds, self.write_verbs)
            self._voice = EpisodeVoice(
                self._user_model,
                persona_for(goal, task.seed),
                facts,
                seed,
                self._user_model.config.reader,
            )
        return SimulatedUser(
            goal, self.slot_synonyms, self.write_verbs, seed, self.answer_reader, self._voice
        )

    def reset_view(self) -> str:
        assert self.user is not None
        try:
            return f"User: {self.user.opening()}"
        except UserSimulatorError:  # the first step ends with ENV_ERROR (env_failure)
            return "User: (The simulated user is unavailable.)"

    def env_failure(self) -> str | None:
        """The simulated user's failure (its model down after retries, every draft
        rejected with no fallback), or None."""
        if self._voice is not None and self._voice.state.fault:
            return f"the simulated user failed: {self._voice.state.fault}"
        return None

    def extra_info(self) -> Mapping[str, Any]:
        """``user_llm`` with the LLM user: its counters (voice first-draw passes,
        fallbacks, failures; reader reads, fallbacks, disagreements), the cassette
        position and the last reply's rejections."""
        if self._voice is None or self.user_config is None:
            return {}
        return {"user_llm": self._voice.state.report(self.user_config.cassette_mode)}

    def variant(self) -> str:
        config = self.user_config
        if config is None:
            return ""
        return "+llm-user" + ("+llm-reader" if config.reader == "llm" else "")

    def render_view(self) -> str:
        return ""

    def system_rules(self) -> str:
        generic = (self.auth_rule if r is AUTHENTICATE else r for r in GENERIC_RULES)
        rules = (*generic, *self.domain_rules)
        return policy_document(self.policy_title, self.policy_intro, rules)

    def on_observation(self, text: str) -> None:
        self.seen_ids.update(self.id_pattern.findall(text))

    def _get_world(self) -> BusinessWorld:
        assert self.user is not None
        return BusinessWorld(
            database=self.db.dump(),
            auth_user=self.auth_user,
            seen_ids=tuple(sorted(self.seen_ids)),
            fetched_ids=tuple(sorted(self.fetched_ids)),
            confirmed_writes=tuple(sorted(self.confirmed_writes)),
            writes=self._writes,
            chain=self._chain,
            transferred=self._transferred,
            verdict=self._verdict,
            trial=self._trial,
            user_state=self.user.get_state(),
            reads=tuple(sorted(self.reads)),
            asked_writes=self._asked_writes,
            voice=None if self._voice is None else self._voice.get_state(),
        )

    def _set_world(self, world: BusinessWorld) -> None:
        assert self._task is not None
        self.db.load(world.database, self.db._base)  # type: ignore[arg-type]
        self.auth_user = world.auth_user
        self.seen_ids, self.fetched_ids = set(world.seen_ids), set(world.fetched_ids)
        self.confirmed_writes = set(world.confirmed_writes)
        self._writes, self._chain = world.writes, world.chain
        self._transferred, self._verdict = world.transferred, world.verdict
        self._trial = world.trial
        self.reads, self._asked_writes = set(world.reads), world.asked_writes
        self.user = self._make_user(self._task)
        self.user.set_state(world.user_state)
        if self._voice is not None and world.voice is not None:
            self._voice.set_state(world.voice)

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
        return self._grade().state is GradeState.SUCCESS

    def _dead_end(self) -> str | None:
        verdict = self._grade()
        return verdict.reason if verdict.state is GradeState.FAILURE else None

    def _grade(self) -> Verdict:
        """PENDING while the conversation goes on; then SUCCESS, or FAILURE and why."""
        user = self.user
        assert user is not None and self._task is not None
        if not user.state.done:
            return PENDING
        if self._verdict.state is GradeState.PENDING:
            self._verdict = self._verify(self._task)
        return self._verdict

    def _verify(self, task: Task) -> Verdict:
        assert self.user is not None
        if self.user.state.failed:
            return Verdict.failure(f"the user left unserved: {self.user.state.failed}")
        expected = task.spec["expected"]
        changes = self.db.changes(ignore=self.ignored_tables)
        if changes_digest(changes) != expected["digest"]:
            got = {t: sorted(rows) for t, rows in changes.items()}
            want = expected.get("rows", {})
            return Verdict.failure(
                f"the database does not match the goal (changed rows {got}, expected {want})"
            )
        if self._transferred != bool(expected.get("transfer", False)):
            wrong = "wrong" if self._transferred else "missing"
            return Verdict.failure(f"the transfer to a human was {wrong}")
        if self.user.state.index < len(self.user.goal.requests) and not self._transferred:
            return Verdict.failure("the user's requests were not all met")
        return SUCCESS

    def _milestones(self) -> Sequence[Milestone]:
        spec = self._task.spec if self._task else {}
        user_id, targets = spec.get("user_id"), frozenset(spec.get("targets", ()))
        # each write the user wants (or its fallback), as keys: a repeated write is one
        wanted = [
            {write_key(w) for w in (r["write"], (r.get("fallback") or {}).get("write")) if w}
            for r in spec["user"]["requests"]
            if r["kind"] == RequestKind.WRITE
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

    def oracle(self) -> GoldConversationOracle:
        return GoldConversationOracle(self)

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


def gold_changes(env: BusinessEnv, task: Task, actions: Sequence[str]) -> dict[str, Any]:
    """Replay ``actions`` on a fresh episode of ``task`` and return the expected-changes
    record a task stores: the digest of the changed rows and their ids per table."""
    env.reset(seed=0, options={"task_id": task.id})
    for action in actions:
        if any(env.step(action)[2:4]):  # a broken gold plan ends early; validation rejects it
            break
    changes = env.db.changes(ignore=env.ignored_tables)
    return {"digest": changes_digest(changes), "rows": {t: sorted(r) for t, r in changes.items()}}
