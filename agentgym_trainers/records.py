"""Trajectories as episodes of the trajectory store (``agentgym traj`` reads them)."""

from __future__ import annotations

from typing import Any

from agentgym_envs.rollout.episodes import Trajectory
from agentgym_envs.store import StoredEpisode
from agentgym_trainers.config import TrainConfig

# the record fields a stored episode holds in its own fields; the rest go to ``extra``
_KEPT = {"task_id", "seeds", "policy_version", "versions", "rewards", "reward_components"}
_KEPT |= {"outcome", "truncation", "valid", "actions", "system", "observations"}
_KEPT |= {"milestones", "cost", "started_at"}


def stored_episode(
    traj: Trajectory, cfg: TrainConfig, step: int, run_id: str, now: float
) -> StoredEpisode:
    """A trajectory as a stored episode: its episode summary, the chat as text (system
    prompt, then observation and action turns), dedup key (task, actions) since the
    rollout keeps no state hashes; the record's other fields (token counts, context
    policy ...) go to ``extra``. The end time is the time of recording (the end of the
    RL step)."""
    rec = traj.record()
    actions = [str(a) for a in traj.actions]
    messages: list[dict[str, Any]] = [{"role": "system", "content": traj.system}]
    for i, obs in enumerate(traj.observations):
        if i > 0 and i - 1 < len(actions):
            messages.append({"role": "assistant", "content": actions[i - 1]})
        messages.append({"role": "user", "content": obs})
    stored = StoredEpisode.from_summary(
        traj.episode,
        env_id=cfg.data.env,
        policy=f"hf:{cfg.policy.model}",
        policy_version=str(traj.policy_version),
        split=cfg.data.split,
        difficulty=cfg.data.difficulty or "",
        messages=messages
        if traj.observations
        else [{"role": "assistant", "content": a} for a in actions],
        actions=actions,
        canonical_actions=actions,
        state_hashes=[],
        run_id=run_id,
        extra={"step": step, "algo": cfg.algo, **{k: v for k, v in rec.items() if k not in _KEPT}},
    )
    stored.task_id = str(traj.job.task_id or traj.episode.task_id)
    stored.seeds = {k: int(v) for k, v in rec["seeds"].items() if v is not None}
    stored.started_at = traj.episode.started_at or now
    stored.ended_at = now
    return stored
