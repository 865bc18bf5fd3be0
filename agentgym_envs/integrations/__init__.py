"""Adapters for external trainers and protocols (optional extras; see docs/integrations.md).

* :mod:`~agentgym_envs.integrations.trl`: TRL's ``GRPOTrainer`` -- an
  ``environment_factory`` class per env and a token-in/token-out ``rollout_func``
  (extra ``trl``).
* :mod:`~agentgym_envs.integrations.openenv`: serve any env as an OpenEnv environment
  server (``agentgym openenv serve``), and ``OpenEnvGymEnv``, a Gymnasium client of one
  (extra ``openenv``).
* :mod:`~agentgym_envs.integrations.skyrl`: ``AgentGymTextEnv``, a SkyRL-Gym
  ``BaseTextEnv`` around any env (extra ``skyrl``).
* :mod:`~agentgym_envs.integrations.verl`: ``AgentGymAgentLoop``, a verl agent loop
  (registered as ``agentgym``) that plays any env token in, token out (extra ``verl``, in a
  venv of its own: verl pins an older transformers).

Shared pieces: :mod:`~agentgym_envs.integrations.tool_methods` (typed Python methods from
tool specs) and :mod:`~agentgym_envs.integrations.text_rollout` (multi-turn text episodes
played token in, token out with any generator). Nothing here is imported by
``import agentgym_envs``.
"""
