"""agentgym-envs: Gymnasium environments for online, multi-turn RL of LLM agents.

Importing the package registers every env under the ``agentgym/`` namespace::

    import gymnasium as gym
    import agentgym_envs  # noqa: F401

    env = gym.make("agentgym/Sokoban-v0")
    obs, info = env.reset(seed=0)
"""

from agentgym_envs.registration import ENVS, register_all

__version__ = "0.1.0"
__all__ = ["ENVS", "__version__", "register_all"]

register_all()
