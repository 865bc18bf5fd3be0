"""``response_format`` for ``agentgym serve``: a request's JSON schema compiled, with
llguidance, into a grammar over the model's own tokenizer (:class:`Grammars`), and the
per-row constraint that keeps a reply inside it (:class:`SchemaConstraint`).

The schema is compiled, and its first mask computed, on the request's own thread; each
row of the shared batch only copies that matcher, so a costly schema costs its own
request, never the batch.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_envs.core.errors import SchemaError

JSON_STYLE: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How a schema-constrained reply is spaced (llguidance's JSON compile options)."""
GRAMMAR_CACHE = 64  # compiled schemas a server keeps
MAX_SCHEMA_CHARS = 15_000  # of a response_format schema's JSON (OpenAI's own limit's order)


class SchemaConstraint:
    """Constrains one row to one JSON value that fits a JSON schema (a request's
    ``response_format``).

    llguidance's matcher, built over the model's own tokenizer, says after every token
    which tokens keep the text a prefix of some value that fits; once the value is
    complete only an end-of-turn token is allowed. The JSON is compact (``", "`` and
    ``": "`` separators, no other whitespace), so a small model cannot spend its tokens on
    blank lines. Log-probabilities stay those of the unconstrained distribution.

    Args:
        matcher: a fresh llguidance matcher of the schema's grammar (a copy of the one
            :meth:`Grammars.compile` built when the request came in).
        size: the width of the model's logits.
        eos: end-of-turn ids.
    """

    def __init__(self, matcher: Any, size: int, eos: Sequence[int]) -> None:
        self._matcher = matcher
        self._size, self._eos = size, sorted(eos)

    @property
    def error(self) -> str:
        """Why the reply left the grammar ("" while it has not): a grammar the matcher
        could not follow (a recursion past its limits), found only while decoding."""
        return str(self._matcher.get_error()) if self._matcher.is_error() else ""

    def rule(self) -> tuple[Any, list[int]]:
        """``(allowed ids, banned ids)`` for the next token (see :class:`ServePicker`)."""
        import numpy as np
        import torch

        matcher = self._matcher
        if matcher.is_stopped() or matcher.is_error():
            return self._eos, []  # complete, or failed (the reply says so: RowResult.failed)
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), np.uint8), bitorder="little")
        return torch.from_numpy(np.flatnonzero(bits[: self._size])), []

    def advance(self, token: int) -> None:
        """Account for the token the row sampled (an end-of-turn token once the value is
        complete; a cancelled row's end token leaves the matcher, which nobody reads)."""
        if not (self._matcher.is_stopped() or self._matcher.is_error()):
            self._matcher.consume_token(token)


class Grammars:
    """The ``response_format`` schemas compiled for one model, cached (thread-safe).

    Args:
        tokenizer: the model's (fast) tokenizer.
        vocab_size: the width of the model's logits.
        eos: end-of-turn ids.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, eos: Sequence[int]) -> None:
        self._hf, self.vocab_size, self.eos = tokenizer, vocab_size, sorted(eos)
        self._tokenizer: Any = None
        self._grammars: dict[str, str] = {}  # schema JSON -> grammar
        self._matchers: dict[str, Any] = {}  # grammar -> its compiled, unused matcher
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer as llguidance reads it (built on first use: about a
        second).

        Raises:
            SchemaError: llguidance is not installed, or the tokenizer is not a fast one.
        """
        with self._lock:
            if self._tokenizer is None:
                try:
                    import llguidance.hf
                except ImportError:
                    raise SchemaError(
                        "response_format needs llguidance; install it with "
                        "`pip install 'agentgym-envs[train]'` (or `pip install llguidance`)"
                    ) from None
                try:
                    self._tokenizer = llguidance.hf.from_tokenizer(
                        self._hf, n_vocab=self.vocab_size, eos_token=self.eos
                    )
                except ValueError as exc:
                    raise SchemaError(
                        f"response_format is not available for this model: {exc}"
                    ) from None
            return self._tokenizer

    def compile(self, schema: Mapping[str, Any]) -> str:
        """The grammar of compact JSON fitting ``schema``, checked and compiled into a
        matcher that rows copy (:meth:`constraint`). Cached per schema.

        Raises:
            SchemaError: the schema is too large, is not one llguidance can compile or
                start, or llguidance is missing (see :attr:`tokenizer`).
        """
        text = json.dumps(schema)  # its order is the order the reply writes the keys in
        if len(text) > MAX_SCHEMA_CHARS:
            raise SchemaError(
                f"the schema is {len(text)} characters of JSON; at most {MAX_SCHEMA_CHARS} "
                "are served"
            )
        tokenizer = self.tokenizer  # first: it says how to install llguidance
        import llguidance

        with self._lock:
            known = self._grammars.get(text)
        if known is not None:
            return known
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_STYLE)
        except ValueError as exc:
            raise SchemaError(f"the schema is not valid: {exc}") from None
        problem = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if problem:
            raise SchemaError(f"the schema cannot be served: {problem}")
        proto = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        proto.compute_bitmask()  # a grammar that cannot even start fails here
        if proto.is_error():
            raise SchemaError(f"the schema cannot be served: {proto.get_error()}")
        with self._lock:
            if len(self._grammars) >= GRAMMAR_CACHE:
                oldest = next(iter(self._grammars))
                self._matchers.pop(self._grammars.pop(oldest), None)
            self._grammars[text] = grammar
            self._matchers[grammar] = proto
        return grammar

    def matcher(self, grammar: str) -> Any:
        """A fresh matcher of ``grammar``: a copy of the compiled one (built again only
        if the cache dropped it since the request came in)."""
        import llguidance

        with self._lock:
            proto = self._matchers.get(grammar)
        if proto is None:
            return llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        return proto.deep_copy()

    def constraint(self, grammar: str) -> SchemaConstraint:
        """One row's constraint to ``grammar``."""
        return SchemaConstraint(self.matcher(grammar), self.vocab_size, self.eos)
