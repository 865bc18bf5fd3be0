"""Evaluation: episode runner, metrics, conformance checks and benchmarks."""

from agentgym_envs.eval.metrics import episode_metrics, wilson_interval
from agentgym_envs.eval.runner import run_episodes

__all__ = ["episode_metrics", "run_episodes", "wilson_interval"]
