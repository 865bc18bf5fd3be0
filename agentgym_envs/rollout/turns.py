"""The token-in/token-out turn: how an episode's chat grows around sampled ids.

An episode's chat is its head (the env's system prompt, if kept, then the task, the
first observation) followed by turns. A turn is the sampled ids exactly as sampled, then
the env's answer as template tokens: the template's close of the assistant turn and a
user turn holding the observation, with the generation prompt
(:meth:`~agentgym_envs.llm.chat.ChatFormat.close` and
:meth:`~agentgym_envs.llm.chat.ChatFormat.open`). Sampled ids are never re-tokenized.
The turn loop (:mod:`agentgym_envs.rollout.episodes`) builds every chat with these
functions, for the reference trainer and the adapters alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentgym_envs.llm.chat import ChatFormat, Message


def system_of(info: Mapping[str, Any], keep: bool) -> str:
    """The env's system prompt from a reset's ``info`` ("" when not ``keep`` or none)."""
    return str(info.get("system") or "") if keep else ""


def head_messages(system: str, task: str, summary: str | None = None) -> list[Message]:
    """The head of an episode's chat: the system prompt (when not empty), the task, and
    a note on removed turns (``summary``, when given)."""
    head: list[Message] = [{"role": "system", "content": system}] if system else []
    head.append({"role": "user", "content": task})
    if summary is not None:
        head.append({"role": "user", "content": summary})
    return head


def answer_ids(
    chat: ChatFormat, messages: list[Message], content: str, ended: bool, observation: str
) -> tuple[list[int], list[int]]:
    """The env's answer to an action, as template ids: ``(close, open)``.

    ``close`` ends the assistant turn whose text is ``content`` (``ended``: its sampled
    ids already end with the end-of-turn token); ``open`` is a user turn holding
    ``observation`` plus the generation prompt. ``messages`` (the chat before the
    action) gets the assistant and the user message appended.
    """
    close = chat.close(messages, content, ended)
    messages.append({"role": "assistant", "content": content})
    opened = chat.open(messages, observation)
    messages.append({"role": "user", "content": observation})
    return close, opened


__all__ = ["answer_ids", "head_messages", "system_of"]
