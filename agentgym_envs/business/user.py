"""A deterministic, agenda-based simulated user (an LLM may word it, never decide).

The user has a goal: fields it knows, fields it has forgotten, and an ordered list of
requests. It reads each agent message for what it asks (slots, recognised by keyword
and synonym), for a proposal to confirm, for news that the first choice is unavailable,
and for the news that a request is done; it answers only that.

- Slot-level disclosure: a known field is told only when asked; a forgotten one gets
  "I don't remember" and its value is never said.
- It says yes only to a proposal that names the expected write (a verb of it), every
  value the write needs (ids, items, ...) and no other value of those slots (one order,
  one payment method, ...); any other proposal is corrected.
- It counts an answer only if the message gives exactly the expected values of their
  kind (every candidate time, number, status ... is extracted; see
  :mod:`~agentgym_envs.business.answers`), and a refusal only if the message is one
  (it cannot, asks no confirmation, and names what the request was about); the env then
  checks the world side (the answer's record, or the record that justifies the
  refusal, was read after authentication).
- The first message that gives a candidate of the asked kind is the answer: a wrong one
  (or one whose record was never read) fails the request, the user says so and leaves.
  So is a request the env fails (:meth:`SimulatedUser.fail`, e.g. a blocked write).
- It ends the conversation once its last request is met, or correctly refused.

Wording comes from paraphrase templates drawn with an RNG seeded from (task, trial,
turn), so repeated trials of one task vary in wording but never in meaning: pass^k
measures the agent, not the simulator.

Optionally (``user="llm"`` on the env) a language model words each decided reply in a
persona, checked against the decided content before it is said, and reads the agent's
messages besides the keywords (:mod:`~agentgym_envs.business.voice`,
:mod:`~agentgym_envs.business.reading`); every decision above stays the agenda's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from agentgym_envs.business.answers import PROPOSAL_CUES, REFUSAL_CUES, AnswerReader, normalise
from agentgym_envs.business.reading import Reading
from agentgym_envs.business.voice import Act, EpisodeVoice, Said
from agentgym_envs.core.errors import ConfigError, did_you_mean

QUESTION_CUES = (
    "?",
    "please provide",
    "please tell",
    "please share",
    "could you",
    "can you",
    "what is",
    "what's",
    "which",
    "may i have",
    "let me know",
)
CONFIRM_CUES = (
    "confirm",
    "proceed",
    "shall i",
    "should i",
    "go ahead",
    "do you want",
    "would you like",
    "is that correct",
    "is this correct",
    "ok to",
    "okay to",
    "yes or no",
    "(yes/no)",
)
UNAVAILABLE_CUES = (
    "out of stock",
    "unavailable",
    "not available",
    "no longer available",
    "not possible",
    "is taken",
    "is booked",
    "is full",
)
DONE_CUES = (
    "done",
    "complete",
    "completed",
    "has been",
    "have been",
    "successfully",
    "processed",
    "is now",
    "are now",
    "all set",
)

_YES = (
    "Yes, please go ahead.",
    "Yes, that's right. Please do it.",
    "Yes, I confirm.",
    "Correct, go ahead.",
)
_TELL = ("My {slot} is {value}.", "It's {value}.", "Sure, my {slot} is {value}.", "{value}")
_FORGOT = (
    "I'm sorry, I don't remember my {slot}.",
    "I don't remember my {slot}, unfortunately.",
    "I can't recall my {slot}.",
)
_WRONG = ("No, that's not what I want.", "No, that's not right.", "Hmm, no, that's wrong.")
_NO_CHANGE = ("Please don't change anything for that.", "No, I don't want any changes there.")
_THANKS = (
    "Thank you, that's all I needed.",
    "Great, thanks for your help. Bye!",
    "Perfect, that's everything. Goodbye.",
)
_WRONG_ANSWER = (
    "That's not right. I'll look it up myself, goodbye.",
    "Hmm, that's wrong. Never mind, I'll sort it out another way.",
)
_NEXT = ("Thanks. One more thing:", "Great. Also,", "Thank you. There's something else:")


class RequestKind(StrEnum):
    """What a request asks of the agent (its value is the task data's ``kind``)."""

    WRITE = "write"  # a change the agent must make
    QUESTION = "question"  # facts the agent must tell
    REFUSE = "refuse"  # something the policy forbids: the agent must decline
    TRANSFER = "transfer"  # only a human can help

    @classmethod
    def parse(cls, value: str) -> RequestKind:
        """The kind named ``value``.

        Raises:
            ConfigError: ``value`` names no kind.
        """
        try:
            return cls(value)
        except ValueError:
            names = [k.value for k in cls]
            raise ConfigError(
                f"request kind must be one of {names}, got {value!r}."
                f"{did_you_mean(str(value), names)}"
            ) from None


@dataclass(frozen=True)
class Request:
    """One thing the user wants, as plain data in the task spec.

    Attributes:
        kind: what the request asks of the agent (see :class:`RequestKind`).
        intent: a short label (``cancel_order``), for stats.
        say: paraphrases of how the user states the request (one is drawn).
        slots: fields of this request the user can tell when asked.
        verbs: words that name the write in a proposal (``cancel``).
        write: the expected write ``{"tool": ..., "args": {...}}`` (kind ``write``).
        mentions: strings a proposal must contain to be confirmed.
        answer: strings the agent's message must contain (kind ``question``).
        fallback: for kind ``write``: ``{"say": [...], "write": ..., "mentions": [...]}``,
            what the user accepts once told its first choice is unavailable.
    """

    kind: RequestKind
    intent: str
    say: tuple[str, ...]
    slots: Mapping[str, str] = field(default_factory=dict)
    verbs: tuple[str, ...] = ()
    write: Mapping[str, Any] | None = None
    mentions: tuple[str, ...] = ()
    answer: tuple[str, ...] = ()
    fallback: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request:
        return cls(
            kind=RequestKind.parse(data["kind"]),
            intent=data["intent"],
            say=tuple(data["say"]),
            slots=dict(data.get("slots", {})),
            verbs=tuple(data.get("verbs", ())),
            write=data.get("write"),
            mentions=tuple(data.get("mentions", ())),
            answer=tuple(data.get("answer", ())),
            fallback=data.get("fallback"),
        )


@dataclass(frozen=True)
class UserGoal:
    """The user's side of a task.

    Attributes:
        name: how the user is called.
        known: fields the user can tell when asked (name, email, zip, ...).
        unknown: fields the user has forgotten, with their true values (kept only so
            tests can prove they are never said).
        requests: in order.
        persona: ``polite``, ``terse`` or ``chatty`` (wording only).
    """

    name: str
    known: Mapping[str, str]
    unknown: Mapping[str, str]
    requests: tuple[Request, ...]
    persona: str = "polite"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UserGoal:
        return cls(
            name=data["name"],
            known=dict(data["known"]),
            unknown=dict(data.get("unknown", {})),
            requests=tuple(Request.from_json(r) for r in data["requests"]),
            persona=data.get("persona", "polite"),
        )


@dataclass
class UserState:
    """The user's progress through its goal (plain data; part of every snapshot)."""

    turn: int = 0
    index: int = 0
    fallback: bool = False
    confirmed: bool = False
    done: bool = False
    failed: str = ""  # why the current request failed ("" while none did)

    def as_tuple(self) -> tuple[int, int, bool, bool, bool, str]:
        return (self.turn, self.index, self.fallback, self.confirmed, self.done, self.failed)


@dataclass(frozen=True)
class Reply:
    """What the user says back, and what it agreed to."""

    text: str
    confirmed_write: Mapping[str, Any] | None = None
    ended: bool = False


class SimulatedUser:
    """The simulated user of one episode.

    Args:
        goal: the user's goal from the task.
        synonyms: slot -> words that ask for it (``{"zip": ["zip", "postal code"]}``).
        write_verbs: every write verb of the domain (to notice unwanted proposals).
        seed: (task seed, trial): the wording RNG is seeded from these and the turn.
        reader: how answers and refusals are judged (the domain's answer kinds and id
            pattern); by default local times and numbers.
        voice: the LLM voice (and reader) of this episode
            (:class:`~agentgym_envs.business.voice.EpisodeVoice`); None: templates and
            the keyword reader only.
    """

    def __init__(
        self,
        goal: UserGoal,
        synonyms: Mapping[str, Sequence[str]],
        write_verbs: Sequence[str],
        seed: tuple[int, int],
        reader: AnswerReader | None = None,
        voice: EpisodeVoice | None = None,
    ) -> None:
        self.goal = goal
        self.reader = reader or AnswerReader()
        self.synonyms = {k: tuple(v) for k, v in synonyms.items()}
        self.write_verbs = tuple(write_verbs)
        own = (v for r in goal.requests for v in r.verbs)
        self.verbs = tuple(dict.fromkeys((*self.write_verbs, *own)))
        self.seed = seed
        self.voice = voice
        self.state = UserState()

    @property
    def request(self) -> Request | None:
        """The request the user is on, or None once the conversation is over."""
        if self.state.done or self.state.index >= len(self.goal.requests):
            return None
        return self.goal.requests[self.state.index]

    def expected_write(self) -> tuple[Mapping[str, Any] | None, tuple[str, ...]]:
        """The write the user wants now and the strings a proposal must name."""
        req = self.request
        if req is None or req.kind is not RequestKind.WRITE:
            return None, ()
        if self.state.fallback and req.fallback is not None:
            return req.fallback["write"], tuple(req.fallback.get("mentions", ()))
        return req.write, req.mentions

    def opening(self) -> str:
        """The user's first message."""
        rng = self._rng()
        first = self.goal.requests[0]
        return self._say([Said(Act.SAY, _pick(rng, first.say))])

    def read(self, message: str) -> Reading:
        """The keyword reader: what ``message`` asks, proposes and says, by cue and
        synonym (see :class:`~agentgym_envs.business.reading.Reading`)."""
        text, norm = message.lower(), normalise(message)
        asks: tuple[str, ...] = ()
        if _has(text, QUESTION_CUES):
            asks = tuple(
                slot
                for slot, words in self.synonyms.items()
                if any(_word_in(w, text) for w in words)
            )
        stripped = re.sub(self.reader.ids.pattern, " ", norm, flags=re.IGNORECASE)
        return Reading(
            asks=asks,
            proposing=_has(text, CONFIRM_CUES),
            verbs=tuple(v for v in self.verbs if v in text),
            unavailable=_has(text, UNAVAILABLE_CUES),
            done=_has(text, DONE_CUES),
            refusing=_has(norm, REFUSAL_CUES) and not _has(norm, PROPOSAL_CUES),
            values=tuple(dict.fromkeys(c for k in self.reader.slots for c in k.find(norm))),
            answer=tuple(dict.fromkeys(c for k in self.reader.kinds for c in k.find(stripped))),
        )

    def reply(
        self,
        message: str,
        satisfied: Callable[[Request], bool],
        context: Callable[[Mapping[str, Any]], Sequence[str]] | None = None,
    ) -> Reply:
        """Answer an agent message.

        Args:
            message: what the agent said.
            satisfied: whether the env's state already meets a request: a ``write``
                or ``transfer`` is done, a ``question``'s record was read after
                authentication, no write was made while a ``refuse`` was asked (the
                user cannot see the database itself).
            context: for a write, the values its record holds now that a proposal may
                also name (the payment method being replaced), besides the write's own.
        """
        self.state.turn += 1
        rng = self._rng()
        text = message.lower()
        req = self.request
        if req is None:
            return Reply("(The user has already left the conversation.)", ended=True)
        reading = self.read(message)
        if self.voice is not None:  # the model's reading widens the keywords' (.reading)
            names = tuple(self.synonyms)
            reading = self.voice.read(message, reading, names, self.verbs, self.state.turn)
        parts = self._answer_slots(reading, rng)
        confirmed: Mapping[str, Any] | None = None
        names_any = any(v in reading.verbs for v in self.write_verbs)
        if req.kind is RequestKind.WRITE and not self.state.confirmed and reading.proposing:
            confirmed = self._judge_proposal(text, req, rng, parts, context, reading)
        elif req.kind is not RequestKind.WRITE and reading.proposing and names_any:
            parts.append(Said(Act.NO, f"{_pick(rng, _NO_CHANGE)} {_pick(rng, req.say)}"))
        if (
            req.kind is RequestKind.WRITE
            and req.fallback is not None
            and not self.state.fallback
            and reading.unavailable
        ):
            self.state.fallback = True
            self.state.confirmed = False
            parts.append(Said(Act.SAY, _pick(rng, tuple(req.fallback["say"]))))
        elif confirmed is None:
            met = self._met(req, message, satisfied, reading)
            if met:
                parts.append(self._advance(rng))
            elif met is not None:
                self.fail(f"wrong answer to request {self.state.index} ({req.intent})")
                parts.append(Said(Act.LEAVE, _pick(rng, _WRONG_ANSWER)))
        if not parts:
            parts.append(Said(Act.SAY, _pick(rng, req.say)))
        return Reply(self._say(parts), confirmed_write=confirmed, ended=self.state.done)

    def end(self) -> None:
        """The conversation ends without the user (a transfer to a human)."""
        self.state.done = True

    def fail(self, why: str) -> None:
        """The current request failed: the user leaves unserved (the episode fails)."""
        if not self.state.done:
            self.state.failed = why
            self.state.done = True

    # -- internals ---------------------------------------------------------------------

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng([*self.seed, self.state.turn])

    def _say(self, parts: Sequence[Said]) -> str:
        """The decided reply in words: the templates', or the voice's once checked."""
        if self.voice is None:
            return " ".join(p.text for p in parts)
        return self.voice.say(parts, self.state.turn)

    def _answer_slots(self, reading: Reading, rng: np.random.Generator) -> list[Said]:
        req = self.request
        assert req is not None
        known = {**self.goal.known, **req.slots}
        parts = []
        for slot in self.synonyms:
            if slot not in reading.asks:
                continue
            if slot in known:
                label = slot.replace("_", " ")
                told = _pick(rng, _TELL).format(slot=label, value=known[slot])
                parts.append(Said(Act.TELL, told))
            elif slot in self.goal.unknown:
                forgot = _pick(rng, _FORGOT).format(slot=slot.replace("_", " "))
                parts.append(Said(Act.FORGOT, forgot))
        return parts

    def _judge_proposal(
        self,
        text: str,
        req: Request,
        rng: np.random.Generator,
        parts: list[Said],
        context: Callable[[Mapping[str, Any]], Sequence[str]] | None,
        reading: Reading,
    ) -> Mapping[str, Any] | None:
        write, mentions = self.expected_write()
        names_write = any(v in reading.verbs for v in req.verbs) if req.verbs else True
        values = [] if write is None else _values(write["args"])
        if write is not None and context is not None:
            values += context(write)
        if write is not None and names_write and self.reader.proposes(text, mentions, values):
            self.state.confirmed = True
            parts.append(Said(Act.YES, _pick(rng, _YES)))
            return write
        if any(v in reading.verbs for v in self.write_verbs) or names_write:
            parts.append(Said(Act.NO, f"{_pick(rng, _WRONG)} {_pick(rng, req.say)}"))
        return None

    def _met(
        self,
        req: Request,
        message: str,
        satisfied: Callable[[Request], bool],
        reading: Reading,
    ) -> bool | None:
        """True: the request is met; False: the message was its answer and a wrong one
        (final); None: not met yet."""
        if req.kind is RequestKind.QUESTION:
            if not self.reader.attempts(message, req.answer):
                return None
            return self.reader.answers(message, req.answer) and satisfied(req)
        if req.kind is RequestKind.REFUSE:
            refuses = reading.refusing and self.reader.names_subject(message, req.say)
            return (refuses and satisfied(req)) or None
        told = req.kind is RequestKind.TRANSFER or reading.done
        return (satisfied(req) and told) or None

    def _advance(self, rng: np.random.Generator) -> Said:
        self.state.index += 1
        self.state.fallback = False
        self.state.confirmed = False
        if self.state.index >= len(self.goal.requests):
            self.state.done = True
            return Said(Act.THANKS, _pick(rng, _THANKS))
        nxt = self.goal.requests[self.state.index]
        return Said(Act.SAY, f"{_pick(rng, _NEXT)} {_pick(rng, nxt.say)}")

    def get_state(self) -> tuple[int, int, bool, bool, bool, str]:
        return self.state.as_tuple()

    def set_state(self, state: Sequence[Any]) -> None:
        self.state = UserState(*state)


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _has(text: str, cues: Sequence[str]) -> bool:
    return any(cue in text for cue in cues)


_WORD_CACHE: dict[str, re.Pattern[str]] = {}


def _word_in(word: str, text: str) -> bool:
    """``word`` occurs in ``text`` as whole words (``zip`` is not found in ``zipper``)."""
    pattern = _WORD_CACHE.get(word)
    if pattern is None:
        pattern = _WORD_CACHE[word] = re.compile(rf"\b{re.escape(word.lower())}\b")
    return pattern.search(text) is not None


def _values(value: Any) -> list[str]:
    """Every scalar of a write's arguments, as text."""
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _values(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _values(v)]
    return [str(value)]


def write_key(write: Mapping[str, Any]) -> str:
    """A normal form of a write (tool and arguments; list arguments sorted)."""
    args = {k: sorted(v, key=str) if isinstance(v, list) else v for k, v in write["args"].items()}
    return f"{write['tool']} {json.dumps(args, sort_keys=True, default=str)}"
