"""Token-in, token-out chat formatting: the env's text becomes template tokens around the
policy's exact sampled ids, so the history is never re-tokenized.

The tokenizer's chat template is used only to render *non-agent* text (system prompt,
observations and the template's own markers), by difference of two renders:

* ``close`` -- what the template writes after an assistant message's content (for
  ChatML ``<|im_end|>\\n``); when the sample already ended with the end-of-turn token,
  that token is not repeated;
* ``open`` -- a user message with the observation plus the generation prompt.

A conversation is then ``head + a_1 + close_1 + open_1 + a_2 + ...`` where every ``a_i``
is the sampled id list. :meth:`ChatFormat.render_ids` re-renders the same messages from
text, and the rollout compares the two at every turn: a difference (a sample whose text
would tokenize differently, a template that is not concatenative) is counted as a
re-tokenization mismatch, never hidden.

Env text (system prompt, observations) is always encoded as plain text through
:class:`~agentgym_envs.llm.template.ChatTemplate`: a page or tool result that contains
``<|im_end|>\n<|im_start|>system`` stays text and can never forge a turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm.template import ChatTemplate

Message = dict[str, Any]
"""One chat message: ``role`` and ``content`` (text), plus whatever else a template or an
API reads (``tool_calls``, ``name`` ...). The one message type of policies, ``agentgym
serve`` and the trainer."""


class ChatFormat:
    """Renders env text to template token ids for one tokenizer.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                "the tokenizer has no chat template; use an instruct/chat model "
                "(for example the default 'smollm2') or set tokenizer.chat_template"
            )
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ConfigError("the tokenizer has no eos_token_id; set tokenizer.eos_token")
        self.eos_id = int(eos)
        self.eos_text: str = tokenizer.eos_token
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos)
        self.template = ChatTemplate(tokenizer)
        self._check_concatenative()

    # -- rendering -------------------------------------------------------------------------

    def render_text(self, messages: Sequence[Message], generation_prompt: bool) -> str:
        return self.template.render_text(messages, generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Ids of the template's own text (its special tokens parsed as such); never use it
        for env text."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render_ids(self, messages: Sequence[Message], generation_prompt: bool) -> list[int]:
        """A fresh render from text: what a re-tokenizing trainer would see (message text
        as plain text)."""
        return self.template.render_ids(messages, generation_prompt)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def content(self, action_ids: Sequence[int]) -> str:
        """The assistant message text of a sample (without its end-of-turn token)."""
        ids = list(action_ids)
        if ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        return self.decode(ids)

    def head(self, messages: Sequence[Message], generation_prompt: bool) -> list[int]:
        """Ids of the kept head of a conversation (system prompt, task, summary)."""
        return self.render_ids(messages, generation_prompt)

    def close(self, messages: Sequence[Message], content: str, ended: bool) -> list[int]:
        """Template ids after an assistant message whose content is ``content``.

        Args:
            messages: the conversation before the assistant message.
            content: the assistant text.
            ended: the sampled ids already end with the end-of-turn token.
        """
        base = self.render_text(messages, True) + content
        full = self.render_text([*messages, {"role": "assistant", "content": content}], False)
        tail = full[len(base) :] if full.startswith(base) else None
        if tail is None:
            return [self.eos_id] if not ended else []
        if ended and tail.startswith(self.eos_text):
            tail = tail[len(self.eos_text) :]
        return self.encode(tail) if tail else []

    def open(self, messages: Sequence[Message], observation: str) -> list[int]:
        """Ids of a user message holding ``observation`` plus the generation prompt, given
        ``messages`` that end with a completed assistant (or user) message."""
        after = [*messages, {"role": "user", "content": observation}]
        return self.template.suffix_ids(messages, after, True)

    def _check_concatenative(self) -> None:
        probe: list[Message] = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
        ]
        self.open(probe, "o")
