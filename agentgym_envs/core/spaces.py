"""Text spaces for observations and actions, and the sanitizer that keeps text inside them.

Every env uses :class:`TextSpace`, a ``gymnasium.spaces.Text`` with a printable charset
(ASCII, Latin, general punctuation, arrows, box drawing) plus newline and tab. Text that
an env did not write itself (the agent's action echoed back, page text, file contents)
passes through :func:`sanitize`, which escapes any other character as a ``\\u`` code
(``\\u4e2d``) and cuts the text to the space's ``max_length`` with a visible marker, so
observations always lie in their space.
"""

from __future__ import annotations

import multiprocessing as mp
import re
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, cast, overload

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

# Unicode blocks whose printable characters are part of the charset.
_BLOCKS = (
    (0x20, 0x7E),  # ASCII
    (0xA0, 0x24F),  # Latin-1 supplement, Latin extended A and B
    (0x2010, 0x205E),  # general punctuation (dashes, quotes, bullets, ellipsis)
    (0x20A0, 0x20C0),  # currency symbols
    (0x2190, 0x21FF),  # arrows
    (0x2500, 0x25FF),  # box drawing, block elements, geometric shapes
)

PRINTABLE_CHARSET: str = "\n\t" + "".join(
    ch for lo, hi in _BLOCKS for i in range(lo, hi + 1) if (ch := chr(i)).isprintable()
)
"""Every character an observation may contain."""

# the exact complement of the charset: the blocks hold a few non-printable characters
# (soft hyphen, line/paragraph separators, invisible operators) that must be escaped too
_DISALLOWED = re.compile("[^" + "".join(re.escape(ch) for ch in PRINTABLE_CHARSET) + "]")
_DISALLOWED_ASCII = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
TRUNCATION_MARKER = "\n...[truncated]"


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def sanitize(text: str, max_length: int) -> str:
    """Return ``text`` with characters outside the charset escaped and its length capped.

    Args:
        text: any string.
        max_length: the space's maximum length; longer text is cut and ends with
            ``TRUNCATION_MARKER``.

    Returns:
        A non-empty string that :class:`TextSpace` with this ``max_length`` contains.
    """
    if text.isascii():
        if _DISALLOWED_ASCII.search(text):
            text = _DISALLOWED.sub(_escape, text)
    else:
        text = _DISALLOWED.sub(_escape, text)
    if len(text) > max_length:
        keep = max(0, max_length - len(TRUNCATION_MARKER))
        text = (text[:keep] + TRUNCATION_MARKER)[:max_length]
    return text or " "


_PROTO = Text(1, charset=frozenset(PRINTABLE_CHARSET))
_SHARED_TABLES = {
    name: getattr(_PROTO, name) for name in ("_char_set", "_char_list", "_char_index", "_char_str")
}


class TextSpace(Text):
    """A ``Text`` space over :data:`PRINTABLE_CHARSET`.

    It also fixes ``AsyncVectorEnv(shared_memory=True)`` for text: Gymnasium reads a
    ``Text`` shared-memory buffer once into a tuple of strings, so later observations
    came back stale. Here the read returns a live view that re-reads the buffer.
    """

    def __init__(
        self, max_length: int, *, min_length: int = 1, seed: int | np.random.Generator | None = None
    ) -> None:
        # Text builds its charset tables (a dict of ~1000 numpy ints) per instance; they
        # never change, so every TextSpace shares one copy (about 150 KiB and 0.5 ms saved
        # per space): Text builds tables for a one-character set, __setattr__ swaps them
        super().__init__(max_length, min_length=min_length, charset=" ", seed=seed)

    def __setattr__(self, name: str, value: Any) -> None:
        shared = _SHARED_TABLES.get(name)
        super().__setattr__(name, value if shared is None else shared)

    def __repr__(self) -> str:
        return f"TextSpace(min_length={self.min_length}, max_length={self.max_length})"


class SharedTextBatch(Sequence[str]):
    """A live, read-only view of a batch of texts in a shared-memory buffer.

    ``deepcopy`` (which ``AsyncVectorEnv`` applies before returning observations)
    produces a plain tuple of strings, so users never hold the live view by accident.
    """

    def __init__(self, space: TextSpace, buffer: Any, n: int) -> None:
        self._space = space
        self._buffer = buffer
        self._n = n

    def _codes(self) -> np.ndarray:
        raw = np.frombuffer(self._buffer.get_obj(), dtype=np.int32)
        return raw.reshape((self._n, self._space.max_length))

    def _decode(self, row: np.ndarray) -> str:
        chars = self._space.character_list
        limit = len(chars)
        return "".join(chars[v] for v in row.tolist() if v < limit)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        rows = self._codes()
        if isinstance(index, slice):
            return tuple(self._decode(r) for r in rows[index])
        return self._decode(rows[index])

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return iter(self[:])

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return self[:]

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


@create_shared_memory.register(TextSpace)
def _create_text_memory(space: TextSpace, n: int = 1, ctx: ModuleType = mp) -> Any:
    return cast(Any, ctx).Array(np.dtype(np.int32).char, n * space.max_length)


@read_from_shared_memory.register(TextSpace)
def _read_text_memory(space: TextSpace, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(space, shared_memory, n)


@write_to_shared_memory.register(TextSpace)
def _write_text_memory(space: TextSpace, index: int, value: str, shared_memory: Any) -> None:
    size = space.max_length
    dest = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    row = np.full(size, len(space.character_list), dtype=np.int32)
    codes = [space.character_index(c) for c in value[:size]]
    row[: len(codes)] = codes
    dest[index * size : (index + 1) * size] = row
