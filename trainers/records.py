"""Trajectories as episodes of the trajectory store (``agentgym traj`` reads them)."""

from __future__ import annotations

from typing import Any

from agentgym_envs.eval.store import StoredEpisode
from trainers.config import TrainConfig


def stored_episode(
    rec: dict[str, Any], cfg: TrainConfig, step: int, run_id: str, now: float
) -> StoredEpisode:
    """A trajectory record as a stored episode: the chat as text (system prompt, then
    observation and action turns), dedup key (task, actions) since the rollout keeps no
    state hashes; the record's other fields (token counts, context policy ...) go to
    ``extra``. The end time is the time of recording (the end of the RL step)."""
    kept = {"task_id", "seeds", "policy_version", "versions", "rewards", "reward_components"}
    kept |= {"outcome", "valid", "actions", "system", "observations", "milestones", "cost"}
    kept |= {"started_at"}
    actions = [str(a) for a in rec["actions"]]
    messages: list[dict[str, Any]] = [{"role": "system", "content": rec["system"]}]
    observations = list(rec["observations"])
    for i, obs in enumerate(observations):
        if i > 0 and i - 1 < len(actions):
            messages.append({"role": "assistant", "content": actions[i - 1]})
        messages.append({"role": "user", "content": obs})
    return StoredEpisode(
        env_id=cfg.env,
        task_id=str(rec["task_id"] or ""),
        split=cfg.split,
        difficulty=cfg.difficulty or "",
        policy=f"hf:{cfg.model}",
        policy_version=str(rec["policy_version"]),
        versions={k: str(v) for k, v in rec["versions"].items()},
        seeds={k: int(v) for k, v in rec["seeds"].items() if v is not None},
        messages=messages
        if observations
        else [{"role": "assistant", "content": a} for a in actions],
        actions=actions,
        canonical_actions=actions,
        state_hashes=[],
        rewards=[float(r) for r in rec["rewards"]],
        reward_components={k: float(v) for k, v in rec["reward_components"].items()},
        outcome=str(rec["outcome"]),
        valid=bool(rec["valid"]),
        milestones=list(rec["milestones"]),
        cost=dict(rec["cost"]),
        started_at=float(rec["started_at"]) or now,
        ended_at=now,
        run_id=run_id,
        extra={"step": step, "algo": cfg.algo, **{k: v for k, v in rec.items() if k not in kept}},
    )
