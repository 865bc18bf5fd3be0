"""The shared core every env family is built on. It never imports a family or the trainer."""

from agentgym_envs.core.actions import ActionParser, ParsedAction
from agentgym_envs.core.env import AgentEnv, Oracle
from agentgym_envs.core.errors import (
    AgentGymError,
    ArgumentError,
    CallContextError,
    ClosedError,
    ConfigError,
    EnvNotFoundError,
    HookNotImplementedError,
    PluginError,
    ResetNeeded,
    SchemaError,
    StateError,
    TaskNotFoundError,
    TransientToolError,
)
from agentgym_envs.core.gates import GateMode, GateVerdict, SafetyGate
from agentgym_envs.core.info import ErrorCode, Outcome, StepInfo, ToolStatus
from agentgym_envs.core.ledger import CostLedger
from agentgym_envs.core.native import ToolMode
from agentgym_envs.core.rewards import COMPONENTS, RewardConfig, RewardTally, step_reward
from agentgym_envs.core.spaces import PRINTABLE_CHARSET, TextSpace, sanitize
from agentgym_envs.core.staging import EffectsGate, StagedEffects
from agentgym_envs.core.state import EnvState, fingerprint
from agentgym_envs.core.tasks import DIFFICULTIES, SPLITS, Task, TaskSet, load_task_set
from agentgym_envs.core.tools import Tool, ToolCall, ToolKind, ToolResult, ToolSet, tool
from agentgym_envs.core.verifiers import Invariant, Milestone, MilestoneTracker, verify

__all__ = [
    "COMPONENTS",
    "DIFFICULTIES",
    "PRINTABLE_CHARSET",
    "SPLITS",
    "ActionParser",
    "AgentEnv",
    "AgentGymError",
    "ArgumentError",
    "CallContextError",
    "ClosedError",
    "ConfigError",
    "CostLedger",
    "EffectsGate",
    "EnvNotFoundError",
    "EnvState",
    "ErrorCode",
    "GateMode",
    "GateVerdict",
    "HookNotImplementedError",
    "Invariant",
    "Milestone",
    "MilestoneTracker",
    "Oracle",
    "Outcome",
    "ParsedAction",
    "PluginError",
    "ResetNeeded",
    "RewardConfig",
    "RewardTally",
    "SafetyGate",
    "SchemaError",
    "StagedEffects",
    "StateError",
    "StepInfo",
    "Task",
    "TaskNotFoundError",
    "TaskSet",
    "TextSpace",
    "Tool",
    "ToolCall",
    "ToolKind",
    "ToolMode",
    "ToolResult",
    "ToolSet",
    "ToolStatus",
    "TransientToolError",
    "fingerprint",
    "load_task_set",
    "sanitize",
    "step_reward",
    "tool",
    "verify",
]
