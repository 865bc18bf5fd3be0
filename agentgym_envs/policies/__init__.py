"""Reference policies: the batched ``Policy`` protocol, random, oracle and do-nothing."""

from agentgym_envs.policies.base import Policy, make_policy
from agentgym_envs.policies.reference import (
    NoopPolicy,
    OraclePolicy,
    RandomPolicy,
    ScriptedPolicy,
)

__all__ = [
    "NoopPolicy",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "ScriptedPolicy",
    "make_policy",
]
