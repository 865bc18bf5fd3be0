"""The rollout layer: env slots that play episodes wherever the envs live, and the turn loop.

* :mod:`~agentgym_envs.rollout.slots`: the :class:`EnvSlots` protocol (reset a slot,
  step several at once, snapshots, scripted policies), :data:`Script` and
  :func:`oracle_script`, :func:`snapshot_api`, :class:`EnvCrashed`;
* :mod:`~agentgym_envs.rollout.local`: :class:`LocalEnvSlots`, envs in this process;
* :mod:`~agentgym_envs.rollout.process`: :class:`ProcessEnvSlots`, one worker process
  per slot;
* :mod:`~agentgym_envs.rollout.ray_slots`: :class:`RayEnvSlots`, the slots of a Ray env
  pool (imports no ray until a pool is built);
* :mod:`~agentgym_envs.rollout.factory`: :class:`SlotIsolation` and :func:`make_slots`;
* :mod:`~agentgym_envs.rollout.turns`: how an episode's chat grows around sampled ids;
* :mod:`~agentgym_envs.rollout.trajectory`: what a rollout produces (``Trajectory``, its
  segments, ``RolloutJob``);
* :mod:`~agentgym_envs.rollout.loop`: ``play_rounds``, the one turn loop (lanes of slots,
  an actor that acts for every live episode at once);
* :mod:`~agentgym_envs.rollout.episodes`: ``RolloutRunner``, its token-in, token-out
  actor (the reference trainer's, and the TRL and verl adapters' through
  :func:`~agentgym_envs.integrations.text_rollout.play_text_episodes`).

The evaluator (:mod:`agentgym_envs.eval.evaluate`) plays its text policies on the same
slots and loop.
"""

from agentgym_envs.rollout.factory import SlotIsolation, make_slots
from agentgym_envs.rollout.local import LocalEnvSlots
from agentgym_envs.rollout.process import ProcessEnvSlots, ProcessWorker
from agentgym_envs.rollout.ray_slots import RayEnvSlots
from agentgym_envs.rollout.slots import (
    EnvCrashed,
    EnvFactory,
    EnvSlots,
    Note,
    Script,
    oracle_script,
    snapshot_api,
)

__all__ = [
    "EnvCrashed",
    "EnvFactory",
    "EnvSlots",
    "LocalEnvSlots",
    "Note",
    "ProcessEnvSlots",
    "ProcessWorker",
    "RayEnvSlots",
    "Script",
    "SlotIsolation",
    "make_slots",
    "oracle_script",
    "snapshot_api",
]
