"""Policies: the batched ``Policy`` protocol, scripted baselines and LLM policies.

``HFPolicy`` (a local transformers model) and ``OpenAIPolicy`` (an OpenAI-compatible
endpoint) are imported lazily, so ``import agentgym_envs.policies`` never loads torch.
"""

from typing import TYPE_CHECKING, Any

from agentgym_envs.policies.base import Policy, make_policy
from agentgym_envs.policies.reference import (
    NoopPolicy,
    OraclePolicy,
    RandomPolicy,
    ScriptedPolicy,
)

if TYPE_CHECKING:
    from agentgym_envs.policies.hf import HFPolicy
    from agentgym_envs.policies.openai_compat import OpenAIPolicy

_LAZY = {
    "HFPolicy": "agentgym_envs.policies.hf",
    "OpenAIPolicy": "agentgym_envs.policies.openai_compat",
}

__all__ = [
    "HFPolicy",
    "NoopPolicy",
    "OpenAIPolicy",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "ScriptedPolicy",
    "make_policy",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
