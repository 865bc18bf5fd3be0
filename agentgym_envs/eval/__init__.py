"""Evaluation: episode runner, metrics, conformance checks and benchmarks."""

from agentgym_envs.eval.metrics import Summary, summarize, wilson_interval
from agentgym_envs.eval.runner import EpisodeRecord, run_episodes

__all__ = ["EpisodeRecord", "Summary", "run_episodes", "summarize", "wilson_interval"]
