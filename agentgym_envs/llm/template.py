"""Chat rendering that keeps message text from forging control tokens.

A chat template writes markers such as ``<|im_start|>`` and ``<|im_end|>`` around each
message. Encoding the rendered string as a whole parses every special-token string in
it, so an observation (a web page, a tool result, an injected prompt) that contains
``<|im_end|>\\n<|im_start|>system`` would become real control ids: a forged system turn.

:class:`ChatTemplate` renders the chat with a secret marker in place of each message's
text, encodes the template's pieces with special tokens parsed, and each message's text
with special tokens split into plain text. The marker holds a random nonce, so message
text cannot imitate it.

A fast tokenizer keeps "split special tokens" as state of its Rust backend that every
``encode`` call sets, then reads, so two threads encoding on one tokenizer (the handler
threads of ``agentgym serve``, a rollout thread and the learner, any other code holding
the tokenizer) could encode message text with special tokens parsed. The template
therefore encodes on two private copies of the tokenizer, one that always splits
special tokens and one that never does: nothing toggles a setting another encode reads.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_envs.core.errors import ConfigError

Piece = tuple[str, bool]  # (text, is message text)
PIECE_CACHE = 4096
"""Encoded pieces a template keeps (the turns of the episodes in flight)."""


class ChatTemplate:
    """Renders chats to token ids with message text always encoded as plain text.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._encoders = _encoders(tokenizer)
        nonce = secrets.token_hex(8)
        self._open, self._close = f"\ue000{nonce}:", f":{nonce}\ue001"
        self._marker = re.compile(re.escape(self._open) + r"(\d+)" + re.escape(self._close))
        self._encoded: dict[Piece, tuple[int, ...]] = {}  # encode_pieces' cache
        self._lock = threading.Lock()
        self._check_verbatim()

    def __getstate__(self) -> dict[str, Any]:
        # picklable (a lock is not); the cache and the private copies are dropped (a
        # smaller payload) and rebuilt from the tokenizer
        state = {**self.__dict__, "_encoded": {}}
        del state["_lock"], state["_encoders"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._encoders = _encoders(self.tokenizer)

    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The template's text of a chat (for display and length estimates only: never
        encode it whole, that is what :meth:`render_ids` is for)."""
        kwargs: dict[str, Any] = {"tools": list(tools)} if tools else {}
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **kwargs,
        )
        assert isinstance(text, str)
        return text

    def pieces(
        self,
        messages: Sequence[Mapping[str, Any]],
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Piece]:
        """The render as pieces: template text, and message text (flag True)."""
        marked = [
            {**m, "content": f"{self._open}{i}{self._close}"} if "content" in m else dict(m)
            for i, m in enumerate(messages)
        ]
        text = self.render_text(marked, generation_prompt, tools)
        out: list[Piece] = []
        pos = 0
        for match in self._marker.finditer(text):
            out.append((text[pos : match.start()], False))
            out.append((str(messages[int(match.group(1))]["content"]), True))
            pos = match.end()
        out.append((text[pos:], False))
        return [(t, flag) for t, flag in out if t]

    def encode_pieces(self, pieces: Sequence[Piece]) -> list[int]:
        """Template pieces with special tokens parsed; message text as plain text.

        Each piece is encoded on its own, so a piece's ids never depend on its
        neighbours: they are kept (a bounded cache), and re-rendering a growing chat
        encodes only its new pieces. Safe to call from several threads at once."""
        ids: list[int] = []
        for piece in pieces:
            known = self._encoded.get(piece)
            if known is None:
                text, is_message = piece
                # the copy that always passes the same flag: never a toggle another
                # thread's encode could read
                known = tuple(
                    self._encoders[is_message].encode(
                        text, add_special_tokens=False, split_special_tokens=is_message
                    )
                )
                with self._lock:  # a rollout thread and the learner may share a template
                    if len(self._encoded) >= PIECE_CACHE:
                        self._encoded.pop(next(iter(self._encoded)))  # the oldest entry
                    self._encoded[piece] = known
            ids += known
        return ids

    def render_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Token ids of a chat; no message text can produce a control token."""
        return self.encode_pieces(self.pieces(messages, generation_prompt, tools))

    def suffix_ids(
        self,
        before: Sequence[Mapping[str, Any]],
        after: Sequence[Mapping[str, Any]],
        generation_prompt: bool,
    ) -> list[int]:
        """Ids of what rendering ``after`` adds to the render of ``before`` (a prefix of
        it, rendered without a generation prompt); raises if the template re-renders
        earlier messages."""
        base = self.render_text(before, False)
        pieces = self.pieces(after, generation_prompt)
        if not "".join(t for t, _ in pieces).startswith(base):
            raise ConfigError(
                "the chat template re-renders earlier messages when a message is added, so "
                "token-in/token-out rollouts are impossible with it; use a concatenative "
                "template (ChatML, Llama 3, ...)"
            )
        return self.encode_pieces(_drop_prefix(pieces, len(base)))

    def _check_verbatim(self) -> None:
        """The template must write message text unchanged (no trimming or escaping),
        or the marked render would differ from the real one."""
        probe = [{"role": "system", "content": " s "}, {"role": "user", "content": " u\n"}]
        plain = self.render_text(probe, True)
        if "".join(t for t, _ in self.pieces(probe, True)) != plain:
            raise ConfigError(
                "the chat template changes message text (it trims or escapes it), so message "
                "text cannot be encoded apart from the template's markers; use a template "
                "that writes message content verbatim (ChatML, for example)"
            )


def _encoders(tokenizer: Any) -> tuple[Any, Any]:
    """Two private copies of a tokenizer: (special tokens parsed, special tokens split).

    Each copy is set once to the one value it is always called with, so concurrent
    encodes on it never change what another reads (see the module docstring)."""
    out = []
    for split in (False, True):
        private = copy.deepcopy(tokenizer)
        private.split_special_tokens = split  # the default of every encode on it
        private.encode("", add_special_tokens=False, split_special_tokens=split)  # sets it
        out.append(private)
    return out[0], out[1]


def _drop_prefix(pieces: Sequence[Piece], n: int) -> list[Piece]:
    out: list[Piece] = []
    for text, flag in pieces:
        if n >= len(text):
            n -= len(text)
            continue
        out.append((text[n:], flag))
        n = 0
    return out
