"""Envs on Ray actors across a cluster (the ``dist`` extra: pip install 'agentgym-envs[dist]').

Importing this package imports no ray: the pool connects when it is built.

* :class:`RayEnvPool`: env slots on actors, several envs per actor, plain data in and
  out, asynchronous calls (``submit_step``/``wait``), snapshots that move between
  actors, faults as ``env_error`` episodes.
* :class:`RayVectorEnv`: the pool as a Gymnasium vector env.
* :class:`ActorResources` and :data:`FAMILY_COSTS`: what an actor asks the scheduler for.
* :class:`LocalCluster`: a real multi-node cluster on this machine (tests, trying it).
"""

from agentgym_envs.distributed.cluster import LocalCluster, NodeSpec
from agentgym_envs.distributed.pool import RayEnvPool
from agentgym_envs.distributed.resources import FAMILY_COSTS, ActorResources, FamilyCost
from agentgym_envs.distributed.results import ActorLost, Call, CrashCode, SlotResult
from agentgym_envs.distributed.vector import RayVectorEnv

__all__ = [
    "FAMILY_COSTS",
    "ActorLost",
    "ActorResources",
    "Call",
    "CrashCode",
    "FamilyCost",
    "LocalCluster",
    "NodeSpec",
    "RayEnvPool",
    "RayVectorEnv",
    "SlotResult",
]
