"""A wrapper that writes every finished episode to a trajectory store
(:class:`~agentgym_envs.store.TrajectoryStore`).

Per step it only appends (the action, the observation, the step's tool calls and state
hash) and feeds the step to an :class:`~agentgym_envs.core.episode.EpisodeFold`; the
episode is encoded and inserted once, when a step returns ``terminated`` or
``truncated``, and committed before that step returns. An episode cut short by
``reset`` or ``close`` is not written; one cut by a wrapper (a ``TimeLimit``) is, as
``timeout``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

import gymnasium as gym

from agentgym_envs.core.episode import EpisodeFold
from agentgym_envs.core.unicode import valid_text
from agentgym_envs.store import EpisodeSink, StoredEpisode

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    """The episode being played (plain appends only)."""

    fold: EpisodeFold
    messages: list[dict[str, Any]]
    state_hashes: list[str]
    actions: list[str] = field(default_factory=list)


class RecordingWrapper(gym.Wrapper[str, str, str, str]):
    """Record each episode of ``env`` into ``store`` as it finishes.

    Messages are built as: system (reset ``info["system"]``, where the env gives one),
    user (the reset observation), then per step an assistant message (the action text,
    with ``tool_calls`` from that step's info) and a user message (the observation). In
    native tool mode (``tool_mode="native"``) that user message also carries
    ``native_messages``, the step's ``info["messages"]``: one ``tool`` message per call,
    under the model's call id, and the user's replies apart; the native SFT export
    (:func:`agentgym_envs.eval.export.sft_rows`) renders turns of several calls from it.

    Args:
        env: the env to record (an agentgym env, or any text env; state hashes and
            canonical actions come from ``env.unwrapped`` where it has them).
        store: where episodes go (a ``TrajectoryStore``, or anything with its ``add``);
            the caller owns it (the wrapper never closes it).
        policy: the policy id stored with each episode.
        policy_version: a checkpoint or model fingerprint.
        run_id: groups the episodes of one run.
        priority: the priority stored with each episode (may be changed between
            episodes through the attribute).

    Attributes:
        last_episode_id: the row id of the last episode written; None when none was
            written yet or the last one was a duplicate.
        last_episode: the last finished episode (written or a duplicate).
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        store: EpisodeSink,
        *,
        policy: str = "",
        policy_version: str = "",
        run_id: str = "",
        priority: float = 0.0,
    ) -> None:
        super().__init__(env)
        self.store = store
        self.policy = policy
        self.policy_version = policy_version
        self.run_id = run_id
        self.priority = priority
        self.last_episode_id: int | None = None
        self.last_episode: StoredEpisode | None = None
        self._extra: dict[str, Any] = {}
        self._pending: _Pending | None = None
        self._warned = False

    def note(self, **extra: Any) -> None:
        """Merge ``extra`` into the ``extra`` of the episode in progress (between
        episodes: of the next one). Values must be JSON-able."""
        self._extra.update(extra)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if self._pending is not None:
            logger.debug("episode abandoned by reset before it ended; not recorded")
        fold = EpisodeFold()
        obs, info = self.env.reset(seed=seed, options=options)
        fold.reset(info)
        messages: list[dict[str, Any]] = []
        system = info.get("system")
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": obs})
        self._pending = _Pending(
            fold=fold,
            messages=messages,
            state_hashes=[self._state_hash()],
        )
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ep = self._pending
        if ep is None:
            if not self._warned:
                logger.warning(
                    "RecordingWrapper: step() without a reset() through it; not recorded"
                )
                self._warned = True
            return obs, reward, terminated, truncated, info
        # the text the env read: valid Unicode, as the store writes it (core.unicode)
        text = valid_text(action) if isinstance(action, str) else _as_text(action)
        ep.actions.append(text)
        ep.messages.append(
            {"role": "assistant", "content": text, "tool_calls": list(info.get("tool_calls", ()))}
        )
        observation: dict[str, Any] = {"role": "user", "content": obs}
        native = info.get("messages")
        if native is not None:  # tool_mode="native": the observation split by speaker
            observation["native_messages"] = [dict(m) for m in native]
        ep.messages.append(observation)
        ep.fold.step(reward, terminated, truncated, info)
        ep.state_hashes.append(self._state_hash())
        if ep.fold.done:
            self._pending = None
            self._write(ep)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        if self._pending is not None:
            logger.debug("episode abandoned by close before it ended; not recorded")
            self._pending = None
        super().close()

    # -- internals ---------------------------------------------------------------------

    def _state_hash(self) -> str:
        state_hash = getattr(self.env.unwrapped, "state_hash", None)
        return str(state_hash()) if callable(state_hash) else ""

    def _env_id(self) -> str:
        spec = self.env.spec
        if spec is not None:
            return spec.id
        inner = self.env.unwrapped
        return str(getattr(inner, "name", "") or type(inner).__name__)

    def _write(self, ep: _Pending) -> None:
        history = getattr(self.env.unwrapped, "action_history", None)
        canonical = list(history) if history is not None else list(ep.actions)
        episode = StoredEpisode.from_summary(
            ep.fold.summary(),
            env_id=self._env_id(),
            policy=self.policy,
            policy_version=self.policy_version,
            messages=ep.messages,
            actions=ep.actions,
            canonical_actions=canonical,
            state_hashes=ep.state_hashes,
            priority=self.priority,
            run_id=self.run_id,
            extra=self._extra,
        )
        self._extra = {}
        self.last_episode = episode
        self.last_episode_id = self.store.add(episode)


def _as_text(action: Any) -> str:
    """The text of a non-str action (the env decodes bytes the same way)."""
    if isinstance(action, bytes | bytearray):
        return bytes(action).decode("utf-8", errors="replace")
    return ""
