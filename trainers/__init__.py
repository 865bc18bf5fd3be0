"""The reference trainer (GRPO, RLOO, REINFORCE, PPO) for agentgym envs.

Only the package exists so far; the trainer itself is tracked in its own issue and is
not part of this release.
"""
