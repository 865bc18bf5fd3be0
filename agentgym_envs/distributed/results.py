"""What the pool answers: plain-data results of resets and steps, and how they crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.core.info import Outcome


class Call(StrEnum):
    """The kind of call a :class:`SlotResult` answers."""

    RESET = "reset"
    STEP = "step"


class CrashCode(StrEnum):
    """Why a call came back crashed (``info["env_error"]["code"]``)."""

    ACTOR_DIED = "actor_died"  # the actor process died (killed, OOM, os._exit)
    STEP_TIMEOUT = "step_timeout"  # a call ran past step_timeout_s: the actor was killed
    ENV_EXCEPTION = "env_exception"  # the env raised; its actor lives on
    CONFIG_ERROR = "config_error"  # the env raised a ConfigError: a mistake, not a crash
    EPISODE_LOST = "episode_lost"  # the slot's actor was restarted since the slot's reset
    EPISODE_ENDED = "episode_ended"  # stepped after a crashed result ended the episode


@dataclass(frozen=True)
class SlotResult:
    """The answer to one reset or step of one slot (plain data).

    A crashed result (``code`` set) has ``info = {"outcome": Outcome.ENV_ERROR,
    "episode_valid": False, "env_error": {"code", "message"}}``; a crashed step has
    ``truncated`` True, so a consumer that folds steps sees an ended, invalid episode;
    the slot refuses further steps (``episode_ended``) until it is reset.
    """

    slot: int
    call: Call
    obs: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    code: CrashCode | None = None
    episodes: tuple[Any, ...] = ()
    """Episodes a step finished, recorded in the actor into an
    :class:`~agentgym_envs.distributed.host.EpisodeOutbox` (``StoredEpisode``: plain
    data) for the caller to write into its store."""

    @property
    def crashed(self) -> bool:
        """True when the env or its actor broke: the episode is an ``env_error``."""
        return self.code is not None

    def step_tuple(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """``(obs, reward, terminated, truncated, info)`` as ``env.step`` returns it."""
        return self.obs, self.reward, self.terminated, self.truncated, self.info


def crashed_result(slot: int, call: Call, code: CrashCode, message: str) -> SlotResult:
    """A crashed :class:`SlotResult` (see there)."""
    info = {
        "outcome": Outcome.ENV_ERROR,
        "episode_valid": False,
        "env_error": {"code": code.value, "message": message},
    }
    return SlotResult(slot, call, truncated=call is Call.STEP, info=info, error=message, code=code)


class ActorLost(AgentGymError, RuntimeError):
    """A control call (``get_state``, ``oracle_act`` ...) found the slot's episode gone:
    its actor died or hung and was restarted. Reset the slot (or ``set_state`` it)."""


__all__ = ["ActorLost", "Call", "CrashCode", "SlotResult", "crashed_result"]
