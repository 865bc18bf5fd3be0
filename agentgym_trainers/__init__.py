"""The reference trainer: GRPO, RLOO, REINFORCE, PPO and oracle SFT for Hugging Face
causal LMs on agentgym envs.

Modules, in the order a step runs them: the library's turn loop
(:mod:`agentgym_envs.rollout.episodes`: token-in/token-out episodes, context budget;
generation comes from :mod:`agentgym_envs.llm`),
:mod:`agentgym_trainers.algorithms` (advantages, losses, off-policy filters: pure functions),
:mod:`agentgym_trainers.batch` (padding and the agent-token forward pass),
:mod:`agentgym_trainers.trainer` (one RL step) and :mod:`agentgym_trainers.run` (a whole run:
SFT warm start, evaluation, checkpoints). :mod:`agentgym_trainers.config` is the one
configuration dataclass the ``agentgym train`` command is generated from.
"""
