"""The language-model layer shared by policies, ``agentgym serve`` and the trainer.

Light modules (no torch), importable from here:

* :mod:`~agentgym_envs.llm.template`: :class:`ChatTemplate`, the one safe way to turn a
  chat into token ids (the template's markers are control tokens, message text never is);
* :mod:`~agentgym_envs.llm.chat`: the :data:`Message` type and :class:`ChatFormat`, the
  token-in/token-out rendering of multi-turn episodes around sampled ids;
* :mod:`~agentgym_envs.llm.generation`: the generation interface (:class:`Generator`:
  prompt ids in, sampled ids and their log-probabilities out) and its hook
  (:class:`TokenPicker`);
* :mod:`~agentgym_envs.llm.http_generator`: :class:`HttpGenerator`, the generation
  interface over an OpenAI-compatible server that returns token ids and log-probs
  (vLLM, ``agentgym serve``), and its errors.

Modules that need torch and transformers (the ``train`` extra), imported by path:

* :mod:`~agentgym_envs.llm.models`: model specs and loading, the SmolLM2 conversion
  cache, the tiny test model, devices and dtypes;
* :mod:`~agentgym_envs.llm.sampler`: :class:`~agentgym_envs.llm.sampler.Sampler`, the
  local batched implementation of :class:`Generator`;
* :mod:`~agentgym_envs.llm.engine`: the static-KV-cache decoder the sampler can use;
* :mod:`~agentgym_envs.llm.precision`: bf16 autocast on CUDA.
"""

from agentgym_envs.llm.chat import ChatFormat, Message
from agentgym_envs.llm.generation import Generator, Sample, SamplingSettings, TokenPicker
from agentgym_envs.llm.http_generator import (
    GenerationRequestError,
    GenerationServerError,
    HttpGenerator,
)
from agentgym_envs.llm.template import ChatTemplate

__all__ = [
    "ChatFormat",
    "ChatTemplate",
    "GenerationRequestError",
    "GenerationServerError",
    "Generator",
    "HttpGenerator",
    "Message",
    "Sample",
    "SamplingSettings",
    "TokenPicker",
]
