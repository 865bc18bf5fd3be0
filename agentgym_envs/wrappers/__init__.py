"""Cross-cutting behaviour as Gymnasium wrappers around agentgym envs.

Robustness wrappers (each seeded from the episode seed, labelled in ``info`` and in
``info["versions"]["wrappers"]``, and kept in ``get_state``/``set_state`` snapshots):

- :class:`FaultInjection` (``faults``): infrastructure faults in tool calls;
- :class:`ToolOOD` (``tool_ood``): renamed tools, paraphrased descriptions;
- :class:`ObservationNoise` (``obs_noise``): typos, dropped lines, whitespace;
- :class:`PromptInjection` (``prompt_injection``): adversarial instructions;
- :class:`LoopDetection` (``loop_detection``): repeats that change nothing.

Build stacks from plain specs with :func:`apply_wrappers` (names in :data:`WRAPPERS`).

:class:`RecordingWrapper` writes every finished episode to a trajectory store; it is
imported on first use (it needs :mod:`agentgym_envs.eval`, which imports this package).
"""

from typing import Any

from agentgym_envs.wrappers.attacks import ATTACKS, TEMPLATES, Attack
from agentgym_envs.wrappers.base import AgentWrapper
from agentgym_envs.wrappers.build import WRAPPERS, apply_wrappers
from agentgym_envs.wrappers.faults import FaultInjection
from agentgym_envs.wrappers.injection import PromptInjection
from agentgym_envs.wrappers.loops import LoopDetection
from agentgym_envs.wrappers.noise import NOISE_KINDS, ObservationNoise
from agentgym_envs.wrappers.tool_ood import ToolOOD, tool_variant


def __getattr__(name: str) -> Any:
    if name == "RecordingWrapper":  # lazily: see the module docstring
        from agentgym_envs.wrappers.recording import RecordingWrapper

        return RecordingWrapper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ATTACKS",
    "NOISE_KINDS",
    "TEMPLATES",
    "WRAPPERS",
    "AgentWrapper",
    "Attack",
    "FaultInjection",
    "LoopDetection",
    "ObservationNoise",
    "PromptInjection",
    "RecordingWrapper",
    "ToolOOD",
    "apply_wrappers",
    "tool_variant",
]
