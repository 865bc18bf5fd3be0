"""The language-model layer shared by policies, ``agentgym serve`` and the trainer.

For now it holds the one safe way to turn a chat into token ids
(:class:`~agentgym_envs.llm.template.ChatTemplate`): the template's own markers are
parsed as control tokens, every message's text never is.
"""

from agentgym_envs.llm.template import ChatTemplate

__all__ = ["ChatTemplate"]
