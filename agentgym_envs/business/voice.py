"""The LLM voice of the simulated user: the agenda decides, the model only words it.

The agenda (:class:`~agentgym_envs.business.user.SimulatedUser`) decides every reply as
a list of :class:`Said` parts (a field told, a field forgotten, a yes, a no, a request
stated, thanks ...) and renders it from its templates. With the LLM voice on, the model
rewrites that rendered reply in a persona drawn from the task (:func:`persona_for`), and
the rewrite is **checked before it is said** (:meth:`FactReader.check`):

- the facts of the rewrite, read by the same typed extraction that reads agent answers
  (ids, times, numbers, statuses, titles, people, proposal slots, the domain's own
  vocabularies, tokens with digits, the user's own field values), must be exactly the
  facts of the template reply: no value the agenda did not release, every value it did;
- a forgotten field's value is never in it, in any spacing;
- it confirms exactly when the agenda confirmed, says no where the agenda said no,
  says a field is forgotten where the agenda did, and says goodbye only where the
  agenda ended the conversation;
- it carries no role markers or tool-call syntax.

A rejected rewrite is drawn again (with the reason) up to ``draws`` times; then the
template reply is said (a *fallback*, counted), or, with ``fallback="none"``, the
episode ends with ``ENV_ERROR``. The voice never sees the agent's text, only the reply
the agenda decided, so nothing the agent writes can steer what the voice says (and a
recording of voiced replies serves every agent that reaches the same decisions).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from agentgym_envs.business.answers import AnswerKind, AnswerReader, normalise
from agentgym_envs.business.reading import (
    Reading,
    ReadingError,
    parse_reading,
    reader_messages,
    reading_schema,
    spans_in,
)
from agentgym_envs.business.user_model import CassetteMiss, UserModel, UserSimulatorError

if TYPE_CHECKING:
    from agentgym_envs.business.user import UserGoal

logger = logging.getLogger(__name__)


class Act(StrEnum):
    """What one part of a decided reply does."""

    SAY = "say"  # states a request (the opening, the next one, a fallback, a restatement)
    TELL = "tell"  # tells a field's value
    FORGOT = "forgot"  # says a field is forgotten
    YES = "yes"  # confirms the proposal
    NO = "no"  # corrects a proposal or declines a change
    THANKS = "thanks"  # the last request is met: the conversation ends
    LEAVE = "leave"  # a wrong answer: the user leaves
    STATIC = "static"  # not voiced (the user already left)


@dataclass(frozen=True)
class Said:
    """One part of a decided reply: what it does and its template wording."""

    act: Act
    text: str


@dataclass
class VoiceState:
    """The LLM user's counters and fault in one episode (plain data; in every snapshot).

    ``calls`` is the cassette position: the model calls this episode made so far.
    """

    calls: int = 0
    replies: int = 0  # replies the voice worded (or tried to)
    first_draw: int = 0  # of those, passed the check on the first draw
    redraws: int = 0  # draws after a rejected one
    fallbacks: int = 0  # every draw rejected: the template reply was said
    failures: int = 0  # the user failed (ENV_ERROR)
    reads: int = 0  # messages the LLM reader read
    read_fallbacks: int = 0  # every reading rejected: the keyword reading alone was used
    disagreements: int = 0  # readings that differed from the keyword reader's
    fault: str = ""  # why the user failed ("" while it did not)
    last_turn: int = -1  # the user turn ``last_*`` describe
    last_rejections: tuple[str, ...] = ()
    last_fallback: bool = False
    last_disagreement: tuple[tuple[str, Any], ...] = ()
    # replay mode without an entry for a call (the template reply or the keyword
    # reading stood in; never a failure: the agent's moves decide where an episode goes)
    replay_misses: int = 0

    def as_tuple(self) -> tuple[Any, ...]:
        return astuple(self)

    def report(self, mode: str) -> dict[str, Any]:
        """The ``info["user_llm"]`` view (plain data the caller owns)."""
        return {
            "voice": {
                "replies": self.replies,
                "first_draw_pass": self.first_draw,
                "redraws": self.redraws,
                "fallbacks": self.fallbacks,
                "failures": self.failures,
            },
            "reader": {
                "reads": self.reads,
                "fallbacks": self.read_fallbacks,
                "disagreements": self.disagreements,
            },
            "cassette": {"mode": mode, "position": self.calls, "misses": self.replay_misses},
            "fault": self.fault,
            "last": {
                "turn": self.last_turn,
                "rejections": list(self.last_rejections),
                "fallback": self.last_fallback,
                "disagreement": {k: list(v) for k, v in self.last_disagreement},
            },
        }


@dataclass(frozen=True)
class Persona:
    """How the user writes (wording only; drawn from the task)."""

    patience: str
    verbosity: str
    style: str

    def describe(self) -> str:
        return f"{self.patience}; {self.verbosity}; {self.style}"


_PATIENCE = ("patient and friendly", "a little impatient, wants it sorted quickly")
_VERBOSITY = {
    "terse": "writes very briefly",
    "polite": "writes politely in full sentences",
    "chatty": "writes chattily, with a friendly extra phrase but never an extra fact",
}
_STYLES = ("formal wording", "casual wording", "plain, simple wording")


def persona_for(goal: UserGoal, task_seed: int) -> Persona:
    """The persona of a task's user: the same for every trial of the task."""
    rng = np.random.default_rng([task_seed, 0x5E1F])
    patience = _PATIENCE[int(rng.integers(len(_PATIENCE)))]
    style = _STYLES[int(rng.integers(len(_STYLES)))]
    return Persona(patience, _VERBOSITY.get(goal.persona, _VERBOSITY["polite"]), style)


# tokens that mix letters and digits (500ml, 13-inch, i7): not numbers, still facts
_DIGIT_TOKEN = re.compile(r"(?<![\w@.#-])(?=[\w-]*\d)(?=[\w-]*[a-z])[\w-]+")
_ROLE = re.compile(
    r"(?im)^\s*(?:user|assistant|system|agent|customer)\s*:|<\s*/?\s*tool_call"
    r"|\b[a-z_]\w*\s*\(\s*[a-z_]\w*\s*=|\{\s*\"(?:name|arguments|tool)\"\s*:"
)
_AFFIRM = re.compile(
    r"\b(?:yes|yeah|yep|yup|i confirm|confirmed|go ahead|please proceed|proceed|please do"
    r"|do it|do that|sounds good|that's correct|that is correct|that's right|that is right"
    r"|correct|agreed|i agree|approved?|fine by me|works for me)\b"
)  # not "sure", "ok": politeness in a reply that tells a value (a bare "ok" says too little)
_NEGATOR = re.compile(r"(?:\bno|\bnot|n't|\bnever|\bdon't|\bdo not)\W+(?:\w+\W+){0,2}$")
_NEGATE = re.compile(r"\b(?:no|not|nope|wrong|incorrect|don't|do not|isn't|never)\b|n't\b")
_NOT_A_NO = re.compile(r"\bno (?:problem|worries|doubt)\b")  # says yes, not no
_FORGETS = re.compile(
    r"\b(?:remember|recall|forgot|forget|forgotten|don't know|do not know|no idea|not sure)\b"
)
_FAREWELL = re.compile(
    r"\b(?:bye|goodbye|farewell|that's all|that is all|that's everything|cheers|take care"
    r"|see you|see ya|have a (?:good|nice|great|lovely) (?:day|one|evening))\b"
)
_UNITS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen",
)  # fmt: skip
_TENS = {"twenty": 2, "thirty": 3, "forty": 4, "fifty": 5, "sixty": 6, "seventy": 7,
         "eighty": 8, "ninety": 9}  # fmt: skip
_NUMBER_WORD = re.compile(
    rf"\b(?:({'|'.join(_TENS)})(?:[\s-]+({'|'.join(_UNITS[1:10])}))?|({'|'.join(_UNITS)}))\b"
)


def _digits(text: str) -> str:
    """``text`` with number words as digits ("two zero six seven", "twenty sixty-seven"
    -> 2067 once compacted), so a forgotten value spelled out is still found."""

    def value(m: re.Match[str]) -> str:
        if m.group(3):
            return str(_UNITS.index(m.group(3)))
        return str(_TENS[m.group(1)] * 10 + (_UNITS.index(m.group(2)) if m.group(2) else 0))

    return _NUMBER_WORD.sub(value, text)


_CLOSING = re.compile(
    r"\b(?:thanks?|thank you|bye|goodbye|that's all|that is all|that's everything|all set)\b"
)


def _compact(text: str) -> str:
    return re.sub(r"[\W_]+", "", normalise(text))


def _pieces(value: str) -> set[str]:
    """What of a forgotten value may never be said, in any spacing: the whole value,
    an email's local part, and each run of 4+ digits or token with digits."""
    norm = normalise(value)
    out = {_compact(norm), _compact(norm.split("@", 1)[0])}
    out.update(t for t in re.findall(r"[a-z0-9]+", norm) if re.search(r"\d", t))
    out.update(re.findall(r"\d+", norm))
    return {p for p in out if len(p) >= 4}


def affirms(text: str) -> bool:
    """Whether ``text`` says yes (a cue not negated in the two words before it)."""
    norm = normalise(text)
    return any(not _NEGATOR.search(norm[: m.start()]) for m in _AFFIRM.finditer(norm))


class FactReader:
    """The facts of a user reply, read with the extraction that reads agent answers.

    Args:
        reader: the domain's answer reader (its ids, answer kinds and proposal slots).
        goal: the user's goal: its field values are facts too; its forgotten ones are
            never to be said.
        kinds: the domain's own vocabularies (products, options, offices ...).
        verbs: the domain's write verbs: a rewrite names the same ones as the template
            (checked, not listed in the prompt).
    """

    def __init__(
        self,
        reader: AnswerReader,
        goal: UserGoal,
        kinds: Sequence[AnswerKind] = (),
        verbs: Sequence[str] = (),
    ) -> None:
        self.reader = reader
        self.kinds = tuple(kinds)
        alternation = "|".join(re.escape(normalise(v)) for v in sorted(verbs, key=len)[::-1])
        self._verbs = re.compile(rf"(?<!\w)(?:{alternation})(?!\w)") if verbs else None
        values = [*goal.known.values(), *goal.unknown.values()]
        values += [v for r in goal.requests for v in r.slots.values()]
        self.fields = sorted({normalise(str(v)) for v in values if len(normalise(str(v))) >= 2})
        self.forgotten = sorted({p for v in goal.unknown.values() for p in _pieces(str(v))})

    def facts(self, text: str) -> set[str]:
        """Every fact in ``text``, as ``kind:value``."""
        norm = normalise(text)
        out = {f"id:{i}" for i in self.reader.ids.findall(text)}
        stripped = re.sub(self.reader.ids.pattern, " ", norm, flags=re.IGNORECASE)
        for kind in (*self.reader.kinds, *self.kinds):
            out.update(f"{kind.name}:{c}" for c in kind.find(stripped))
        for kind in self.reader.slots:
            out.update(f"{kind.name}:{c}" for c in kind.find(norm))
        out.update(f"token:{t}" for t in _DIGIT_TOKEN.findall(stripped))
        for value in self.fields:
            if re.search(rf"(?<!\w){re.escape(value)}(?!\w)", norm):
                out.add(f"field:{value}")
        return out

    def keep(self, template: str) -> list[str]:
        """The facts of ``template`` as written there (for the voice's prompt)."""
        spans: list[str] = list(dict.fromkeys(self.reader.ids.findall(template)))
        for fact in sorted(self.facts(template)):
            kind, _, value = fact.partition(":")
            if kind == "id":
                continue
            found = re.search(re.escape(value), template, re.IGNORECASE)
            span = found.group(0) if found else value
            if not any(span.lower() in s.lower() for s in spans):
                spans.append(span)
        return spans

    def check(self, parts: Sequence[Said], template: str, voiced: str) -> str | None:
        """Why ``voiced`` may not stand for the decided reply ``parts`` (rendered as
        ``template``), or None when it carries exactly its content."""
        if not voiced.strip():
            return "the rewrite is empty"
        if len(voiced) > max(400, 3 * len(template)):
            return f"the rewrite is too long ({len(voiced)} characters)"
        if _ROLE.search(voiced):
            return "the rewrite holds a role label or tool-call syntax"
        said, compact = _compact(template), _compact(voiced)
        spelled = _compact(_digits(normalise(voiced)))
        if any((v in compact or v in spelled) and v not in said for v in self.forgotten):
            return "the rewrite says the value of a field the user has forgotten"
        want, got = self.facts(template), self.facts(voiced)
        if want - got:
            return f"the rewrite drops {sorted(want - got)}"
        if got - want:
            return f"the rewrite adds {sorted(got - want)}"
        if self._verbs is not None:
            named = [set(self._verbs.findall(normalise(t))) for t in (template, voiced)]
            if named[0] != named[1]:
                return f"the rewrite names the actions {sorted(named[1])}, not {sorted(named[0])}"
        acts = {p.act for p in parts}
        if Act.YES in acts and not affirms(voiced):
            return "the rewrite drops the confirmation (say yes)"
        if Act.YES not in acts and affirms(voiced) and not affirms(template):
            return "the rewrite agrees to something the user did not confirm"
        if acts & {Act.NO, Act.LEAVE}:
            plain = _NOT_A_NO.sub(" ", normalise(voiced))
            if not _NEGATE.search(plain):
                return "the rewrite drops the no"
            if affirms(plain) and not affirms(template):
                return "the rewrite agrees where the user says no"
        if Act.FORGOT in acts and not _FORGETS.search(normalise(voiced)):
            return "the rewrite drops that the user does not remember a field"
        if Act.THANKS in acts and not _CLOSING.search(normalise(voiced)):
            return "the rewrite drops the thanks that ends the conversation"
        ends = bool(acts & {Act.THANKS, Act.LEAVE})
        bye = _FAREWELL.search(normalise(voiced)) and not _FAREWELL.search(normalise(template))
        if bye and not ends:
            return "the rewrite says goodbye while the conversation goes on"
        return None


_EXAMPLE = (
    "Draft: I'd like to cancel order #W1234567, I ordered it by mistake. My zip is 90210.\n"
    "Keep: #W1234567; 90210",
    "Hi! Could you cancel my order #W1234567? I ordered it by mistake. Zip is 90210.",
)


def voice_messages(persona: Persona, template: str, keep: Sequence[str]) -> list[dict[str, str]]:
    """The voice's prompt: the persona, the rules, one example and the decided reply
    (never the agent's text)."""
    system = (
        "You rewrite a customer's chat message in the customer's own words. The "
        f"customer is {persona.describe()}. Keep every id, number, name, product and "
        "option exactly as written; add nothing the draft does not say; agree to "
        "something only if the draft does. Answer with the rewritten message only, "
        "on one line."
    )
    must = "; ".join(keep) if keep else "(nothing)"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": _EXAMPLE[0]},
        {"role": "assistant", "content": _EXAMPLE[1]},
        {"role": "user", "content": f"Draft: {template}\nKeep: {must}"},
    ]


def clean(text: str) -> str:
    """A model's reply as the user's message: its first line, without a label or
    surrounding quotes."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = re.sub(r"^(?:rewrite|rewritten|customer|message|draft)\s*:\s*", "", text, flags=re.I)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


def call_seed(*parts: int | str) -> int:
    """A 31-bit sampling seed from (task seed, trial, turn, role, draw)."""
    raw = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") % (2**31 - 1)


class EpisodeVoice:
    """The LLM voice (and reader) of one episode's user.

    Args:
        model: the user's model (endpoint and cassette), shared by the env's episodes.
        persona: how this user writes.
        facts: the fact reader that checks each rewrite.
        seed: (task seed, trial), as the templates' RNG.
        reader: whether the model also reads agent messages (``llm``) or not.
    """

    def __init__(
        self,
        model: UserModel,
        persona: Persona,
        facts: FactReader,
        seed: tuple[int, int],
        reader: str = "keyword",
    ) -> None:
        self.model, self.persona, self.facts = model, persona, facts
        self.seed, self.reader = seed, reader
        self.state = VoiceState()

    def say(self, parts: Sequence[Said], turn: int) -> str:
        """The decided reply ``parts``, voiced and checked, or the template reply.

        Raises:
            UserSimulatorError: the model failed, or every draw was rejected and
                ``fallback`` is ``none`` (recorded in :attr:`state` first).
        """
        template = " ".join(p.text for p in parts)
        state = self.state
        if state.last_turn != turn:
            state.last_turn, state.last_disagreement = turn, ()
        state.last_rejections, state.last_fallback = (), False
        if not parts or all(p.act is Act.STATIC for p in parts):
            return template
        state.replies += 1
        messages = voice_messages(self.persona, template, self.facts.keep(template))
        rejections: list[str] = []
        for draw in range(self.model.config.draws):
            try:
                text = clean(self._call("voice", messages, turn, draw))
            except CassetteMiss as exc:
                logger.warning("%s; the template reply is said", exc)
                state.replay_misses += 1
                state.fallbacks += 1
                state.last_fallback = True
                return template
            why = self.facts.check(parts, template, text)
            if why is None:
                state.first_draw += draw == 0
                state.last_rejections = tuple(rejections)
                return text
            rejections.append(why)
            state.redraws += draw + 1 < self.model.config.draws
            messages = [
                *messages[:4],
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"Rejected: {why}. Rewrite the draft again."},
            ]
        state.last_rejections = tuple(rejections)
        if self.model.config.fallback == "template":
            state.fallbacks += 1
            state.last_fallback = True
            return template
        raise self._fail(f"every voiced draft of the user's reply was rejected: {rejections}")

    def read(
        self, message: str, keyword: Reading, slots: Sequence[str], verbs: Sequence[str], turn: int
    ) -> Reading:
        """The keyword reading widened by the model's (see :mod:`.reading`)."""
        if self.reader != "llm":
            return keyword
        state = self.state
        state.reads += 1
        state.last_turn, state.last_disagreement = turn, ()
        base = reader_messages(message, slots, verbs)
        messages = base
        # a span of the reading can only be one the typed extraction found in the text
        spans = spans_in(message, (*keyword.values, *keyword.answer))
        schema = reading_schema(slots, verbs, spans)
        for draw in range(self.model.config.draws):
            try:  # the reader only widens the keyword reading: its failure is never the
                # user's (the agent's own text decides its prompt: a length past the
                # model's context, a path the recording did not take)
                raw = self.model.complete(
                    "reader", messages, call_seed(*self.seed, turn, "reader", draw), schema
                )
            except UserSimulatorError as exc:
                logger.warning("the LLM reader failed (%s); the keyword reading stands", exc)
                state.replay_misses += isinstance(exc, CassetteMiss)
                state.read_fallbacks += 1
                return keyword
            finally:
                state.calls += 1
            try:
                reading = parse_reading(raw, message, slots, verbs)
            except ReadingError as exc:
                messages = [
                    *base,
                    {"role": "assistant", "content": raw[:2000]},
                    {"role": "user", "content": f"Invalid: {exc}. Answer with the JSON only."},
                ]
                continue
            differences = keyword.differences(reading)
            if differences:
                logger.info(
                    "the LLM reader and the keyword reader disagree on %r: %s",
                    message[:200],
                    differences,
                )
                state.disagreements += 1
                state.last_disagreement = tuple(
                    (k, tuple(tuple(x) if isinstance(x, list) else x for x in v))
                    for k, v in sorted(differences.items())
                )
            return keyword.merged(reading, slots)
        state.read_fallbacks += 1
        return keyword

    def _call(self, role: str, messages: list[dict[str, str]], turn: int, draw: int) -> str:
        seed = call_seed(*self.seed, turn, role, draw)
        self.state.calls += 1
        try:
            return self.model.complete(role, messages, seed)
        except CassetteMiss:
            raise  # not a failure: the caller says the template reply
        except UserSimulatorError as exc:
            raise self._fail(str(exc)) from None

    def _fail(self, why: str) -> UserSimulatorError:
        self.state.failures += 1
        self.state.fault = why
        return UserSimulatorError(why)

    def get_state(self) -> tuple[Any, ...]:
        return self.state.as_tuple()

    def set_state(self, state: Sequence[Any]) -> None:
        values = list(state)
        values[11] = tuple(values[11])
        values[13] = tuple((k, v) for k, v in values[13])
        self.state = VoiceState(*values)
