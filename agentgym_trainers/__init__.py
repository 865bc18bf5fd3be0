"""The reference trainer: GRPO, RLOO, REINFORCE, PPO and oracle SFT for Hugging Face
causal LMs on agentgym envs.

Modules, in the order a step runs them: :mod:`trainers.rollout` (token-in/token-out
episodes, context budget) with :mod:`trainers.sampler` and :mod:`trainers.engine`
(generation), :mod:`trainers.algorithms` (advantages, losses, off-policy filters: pure
functions), :mod:`trainers.batch` (padding and the agent-token forward pass),
:mod:`trainers.trainer` (one RL step) and :mod:`trainers.run` (a whole run: SFT warm
start, evaluation, checkpoints). :mod:`trainers.config` is the one configuration
dataclass the ``agentgym train`` command is generated from.
"""
