"""How the simulated user reads an answer or a refusal: typed candidates, not substrings.

An answer is judged by its *kind*: a local time, a number, a status word, a meeting
title. The user decodes the message (NFKC, case folding, invisible characters dropped),
takes out everything of another kind that looks alike (ids, UTC timestamps, dates), and
extracts *every* candidate of the answer's kind. The answer counts only if the
candidates are exactly the expected values, so a message that lists many candidates
(every number, every status, every time of the day) answers nothing.

The first message that gives candidates of the asked kind *is* the answer: the user
takes it as final (see :meth:`AnswerReader.attempts`), so answers cannot be guessed one
per message.

A refusal counts only if it is one: the message says it cannot do the thing, is not at
the same time a proposal to confirm, and names what the request was about (an id, a
quoted title, a time or a person the user named), so a refusal word sprayed into a
message about anything else refuses nothing.

A proposal names one value per slot: for every slot kind (an id type, a vocabulary) of
the values the write needs, the proposal's candidates of that kind must be exactly the
expected ones (:meth:`AnswerReader.proposes`), so "any of A, B, C" confirms nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cache

REFUSAL_CUES = (
    "cannot",
    "can't",
    "can not",
    "unable",
    "not able",
    "not allowed",
    "not permitted",
    "against our policy",
    "against the policy",
    "i'm sorry",
    "i am sorry",
)
# a proposal asks for a yes: a refusal never does
PROPOSAL_CUES = (
    "shall i",
    "should i",
    "go ahead",
    "do you want",
    "would you like",
    "is that correct",
    "is this correct",
    "yes or no",
    "(yes/no)",
)

# ISO timestamps and dates are not local times nor numbers: they go before extraction
_STAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:t\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:z|[+-]\d{2}:?\d{2})?)?"
)
_TIME = re.compile(r"(?<![\w:.])([01]?\d|2[0-3]):([0-5]\d)(?![\w:])")
_NUMBER = re.compile(r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)?(?![\w]|[.,]\d)")
_QUOTED = re.compile(r"\"([^\"]{2,80})\"")
_APOSTROPHES = str.maketrans(
    {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u201c": '"', "\u201d": '"'}
)


@cache
def _pattern(source: str) -> re.Pattern[str]:
    """A vocabulary's pattern, compiled on first use (not at import) and kept."""
    return re.compile(source)


def normalise(text: str) -> str:
    """The text as the user reads it: NFKC, invisible (format) characters dropped, curly
    quotes made straight, case folded, runs of whitespace made one space."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return " ".join(text.translate(_APOSTROPHES).casefold().split())


@dataclass(frozen=True)
class AnswerKind:
    """One kind of answer value.

    Attributes:
        name: ``time``, ``number``, ``status`` ...
        find: every candidate of the kind in a normalised text, each normalised.
        subject: its values can name what a request is about (a title, a person).
    """

    name: str
    find: Callable[[str], list[str]]
    subject: bool = False


def _times(text: str) -> list[str]:
    return [f"{int(h):02d}:{m}" for h, m in _TIME.findall(_STAMP.sub(" ", text))]


def _numbers(text: str) -> list[str]:
    text = _TIME.sub(" ", _STAMP.sub(" ", text))
    out = []
    for raw in _NUMBER.findall(text):
        try:
            value = Decimal(raw.replace(",", ""))
        except InvalidOperation:  # pragma: no cover (the pattern only finds numbers)
            continue
        out.append(format(value.normalize(), "f"))
    return out


TIME = AnswerKind("time", _times)
NUMBER = AnswerKind("number", _numbers)


def pattern_kind(name: str, source: str) -> AnswerKind:
    """A kind whose candidates are the matches of ``source`` in the normalised text (an
    id type: order ids, item ids, UTC timestamps ...)."""

    def find(text: str) -> list[str]:
        return _pattern(source).findall(text)

    return AnswerKind(name, find)


def vocabulary_kind(
    name: str,
    words: Iterable[str],
    aliases: Mapping[str, str] | None = None,
    *,
    subject: bool = False,
) -> AnswerKind:
    """A kind whose candidates are the words (or phrases) of a closed vocabulary, matched
    as whole words, longest first; ``aliases`` maps other spellings to a word."""
    table = {normalise(w): normalise(w) for w in words}
    table.update({normalise(k): normalise(v) for k, v in (aliases or {}).items()})
    alternation = "|".join(re.escape(w) for w in sorted(table, key=len, reverse=True))
    source = rf"(?<!\w)(?:{alternation})(?!\w)"

    def find(text: str) -> list[str]:
        return [table[m] for m in _pattern(source).findall(text)]

    return AnswerKind(name, find, subject)


def product_kind(
    name: str, firsts: Iterable[str], seconds: Iterable[str], *, subject: bool = False
) -> AnswerKind:
    """A vocabulary of every "first second" pair (``mei chen``, ``payments sync``),
    matched as two alternations (not one per pair: the pattern stays small)."""

    def alternation(words: Iterable[str]) -> str:
        return "|".join(re.escape(w) for w in sorted({normalise(w) for w in words}, key=len)[::-1])

    source = rf"(?<!\w)(?:{alternation(firsts)}) (?:{alternation(seconds)})(?!\w)"

    def find(text: str) -> list[str]:
        return _pattern(source).findall(text)

    return AnswerKind(name, find, subject)


@dataclass(frozen=True)
class AnswerReader:
    """Judges answers and refusals for one domain.

    Attributes:
        kinds: the answer kinds, most specific first (an expected value belongs to the
            first kind that finds exactly it).
        ids: the domain's id pattern: ids are taken out before extraction (an order id's
            digits are not a number) and name a request's subject.
        slots: the kinds a proposal's values belong to (each id type, closed
            vocabularies such as a cancel reason), matched in the normalised text.
    """

    kinds: Sequence[AnswerKind] = (TIME, NUMBER)
    ids: re.Pattern[str] = field(default_factory=lambda: re.compile(r"$^"))
    slots: Sequence[AnswerKind] = ()

    def kind_of(self, value: str) -> AnswerKind | None:
        norm = normalise(value)
        for kind in self.kinds:
            if kind.find(norm) == [self._expected(kind, norm)]:
                return kind
        return None

    def _expected(self, kind: AnswerKind, norm: str) -> str:
        found = kind.find(norm)
        return found[0] if len(found) == 1 else norm

    def _strip_ids(self, text: str) -> str:
        return re.sub(self.ids.pattern, " ", text, flags=re.IGNORECASE)

    def answers(self, message: str, expected: Sequence[str]) -> bool:
        """Whether ``message`` gives exactly the ``expected`` values: for each value's
        kind, the message's candidates of that kind are exactly the expected ones."""
        text = self._strip_ids(normalise(message))
        wanted: dict[str, set[str]] = {}
        kinds: dict[str, AnswerKind] = {}
        for value in expected:
            kind = self.kind_of(value)
            if kind is None:  # an untyped value: it must occur as whole words
                norm = normalise(value)
                if not re.search(rf"(?<!\w){re.escape(norm)}(?!\w)", text):
                    return False
                continue
            kinds[kind.name] = kind
            wanted.setdefault(kind.name, set()).add(self._expected(kind, normalise(value)))
        return all(set(kinds[k].find(text)) == v for k, v in wanted.items())

    def attempts(self, message: str, expected: Sequence[str]) -> bool:
        """Whether ``message`` gives any candidate of the kinds of the ``expected``
        values: then it is the answer, right or wrong (the user takes the first one)."""
        text = self._strip_ids(normalise(message))
        kinds = {k.name: k for v in expected if (k := self.kind_of(v)) is not None}
        return any(kind.find(text) for kind in kinds.values())

    def proposes(self, message: str, mentions: Sequence[str], values: Sequence[str] = ()) -> bool:
        """Whether ``message`` names every mention and, for each slot kind the mentions
        have values of, no candidate of that kind but the write's own ``values`` (its
        arguments: an end time, the item given back) and the mentions, so a proposal
        naming several orders, items, cards or times confirms nothing."""
        text = normalise(message)
        wanted = [normalise(m) for m in mentions]
        if not all(m in text for m in wanted):
            return False
        own = [*wanted, *(normalise(v) for v in values)]
        for kind in self.slots:
            if not {c for m in wanted for c in kind.find(m)}:
                continue
            allowed = {c for v in own for c in kind.find(v)}
            if not set(kind.find(text)) <= allowed:
                return False
        return True

    def subjects(self, say: Iterable[str]) -> set[str]:
        """What a request is about, as the user said it: ids, quoted names and titles,
        times, and the values of the kinds that name subjects (titles, people)."""
        out: set[str] = set()
        for line in say:
            norm = normalise(line)
            out.update(normalise(i) for i in self.ids.findall(line))
            out.update(q.strip() for q in _QUOTED.findall(norm))
            out.update(_times(norm))
            for kind in self.kinds:
                if kind.subject:
                    out.update(kind.find(norm))
        return {s for s in out if s}

    def refuses(self, message: str, say: Sequence[str]) -> bool:
        """Whether ``message`` is a refusal of the request stated as ``say``: it says it
        cannot, asks for no confirmation, and names the request's subject (when the
        request names one)."""
        text = normalise(message)
        if not any(cue in text for cue in REFUSAL_CUES):
            return False
        if any(cue in text for cue in PROPOSAL_CUES):
            return False
        return self.names_subject(message, say)

    def names_subject(self, message: str, say: Sequence[str]) -> bool:
        """Whether ``message`` names what the request stated as ``say`` is about (always
        true for a request that names nothing)."""
        text = normalise(message)
        subjects = self.subjects(say)
        return not subjects or any(
            re.search(rf"(?<!\w){re.escape(s)}(?!\w)", text) for s in subjects
        )
