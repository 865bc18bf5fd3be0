"""Cross-cutting behaviour as Gymnasium wrappers around agentgym envs.

Robustness wrappers (each seeded from the episode seed, labelled in ``info`` and in
``info["versions"]["wrappers"]``, and kept in ``get_state``/``set_state`` snapshots):

- :class:`ToolOOD` (``tool_ood``): renamed tools, paraphrased descriptions;
- :class:`ObservationNoise` (``obs_noise``): typos, dropped lines, whitespace;
- :class:`PromptInjection` (``prompt_injection``): adversarial instructions;
- :class:`LoopDetection` (``loop_detection``): repeats that change nothing.

Build stacks from plain specs with :func:`apply_wrappers` (names in :data:`WRAPPERS`).
Infrastructure faults are no wrapper: they happen inside a tool call, so the env injects
them, configured by its ``faults`` argument (``gym.make(id, faults={"rate": 0.1})``, or
``env_kwargs`` in a suite entry; see :mod:`agentgym_envs.core.faults`).

:class:`RecordingWrapper` writes every finished episode to a trajectory store
(:mod:`agentgym_envs.store`).
"""

from agentgym_envs.wrappers.attacks import ATTACKS, TEMPLATES, Attack
from agentgym_envs.wrappers.base import AgentWrapper
from agentgym_envs.wrappers.build import WRAPPERS, apply_wrappers
from agentgym_envs.wrappers.injection import PromptInjection
from agentgym_envs.wrappers.loops import LoopDetection
from agentgym_envs.wrappers.noise import NOISE_KINDS, ObservationNoise
from agentgym_envs.wrappers.recording import RecordingWrapper
from agentgym_envs.wrappers.tool_ood import ToolOOD, tool_variant

__all__ = [
    "ATTACKS",
    "NOISE_KINDS",
    "TEMPLATES",
    "WRAPPERS",
    "AgentWrapper",
    "Attack",
    "LoopDetection",
    "ObservationNoise",
    "PromptInjection",
    "RecordingWrapper",
    "ToolOOD",
    "apply_wrappers",
    "tool_variant",
]
