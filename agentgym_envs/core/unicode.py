"""Text from a policy made valid Unicode: one rule, applied where the text comes in.

A Python ``str`` can hold lone surrogates (code points U+D800 to U+DFFF): JSON's
``"\\ud800"`` escape decodes to one, so does Python's ``"\\ud800"`` literal, and a policy
may send one in its action directly. No UTF-8 text can hold them, so every encoder the
text meets later (SQLite, a JSON response, a file, the terminal) raises on them.

**The rule: each surrogate code point becomes U+FFFD** (the REPLACEMENT CHARACTER), one
for one, so lengths and offsets (the parser's blame spans) are kept. Two surrogates that
would make a UTF-16 pair are replaced as well: a ``str`` holds code points, and a pair
of surrogate code points is no more valid than one (JSON's ``"\\ud83d\\ude00"`` escape
decodes to the one character U+1F600 and is not affected).

Where it applies: the env's action text and every string the parser decodes from it
(arguments and their keys, tool names, a native message's content and call ids;
``core.actions.read_action``). The trajectory store, ``info`` as JSON and the terminal
apply it again, so what they are given never makes them raise.

A tool's string arguments get one more replacement (:func:`valid_argument`): a NUL
(U+0000, JSON's ``\u0000``) becomes U+FFFD too. It is valid Unicode, but no path,
command line or C string can hold it, so the tool would raise on it (the sandbox's
``run`` did: an env error).
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
"""What each surrogate code point becomes."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_OR_NUL = re.compile("[\x00\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD (same length)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def valid_argument(text: str) -> str:
    """A tool argument's string: :func:`valid_text`, and each NUL also U+FFFD."""
    if text.isascii() and "\x00" not in text:
        return text
    return _SURROGATE_OR_NUL.sub(REPLACEMENT, text)
