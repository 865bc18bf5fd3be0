"""A curriculum over tasks: sample where the policy's outcomes are most uncertain.

Group-based policy gradients (GRPO, RLOO) learn nothing from a task whose episodes all
succeed or all fail: every advantage in the group is zero. The variance of a task's
success, ``p (1 - p)``, is largest at ``p = 0.5``, so the sampler favours such tasks and
keeps a floor weight on the rest so that no task is ever excluded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym_envs.core.errors import ConfigError, TaskNotFoundError, did_you_mean

logger = logging.getLogger(__name__)


class CurriculumSampler:
    """Sample task ids weighted by ``[p (1 - p)]^alpha``, p = running success rate.

    Each task's weight is its raw weight divided by the largest raw weight, but at least
    ``floor``: tasks that are always solved or always failed (``p`` in {0, 1}) keep weight
    ``floor``. With ``alpha = 0`` (or when every raw weight is 0) sampling is uniform.

    Args:
        task_ids: The tasks to sample from (unique, non-empty).
        alpha: Sharpness; 0 is uniform, larger values focus harder on ``p`` near 0.5.
        floor: Smallest relative weight of any task, in (0, 1].
        prior: Starting success rate of every task; 0.5 makes unseen tasks look
            maximally informative, so each is tried early.
        decay: Weight of the old rate in the update ``p <- decay p + (1 - decay) mean``.
        seed: Seed of the sampler's numpy Generator.

    Raises:
        ConfigError: An argument is out of range or ``task_ids`` is empty or repeats ids.
    """

    def __init__(
        self,
        task_ids: Sequence[str],
        *,
        alpha: float = 1.0,
        floor: float = 0.05,
        prior: float = 0.5,
        decay: float = 0.9,
        seed: int = 0,
    ) -> None:
        ids = list(task_ids)
        checks = [
            (len(ids) > 0, "task_ids must be non-empty", f"got {ids!r}"),
            (len(set(ids)) == len(ids), "task_ids must be unique", "got repeats"),
            (alpha >= 0, "alpha must be >= 0", f"got {alpha}"),
            (0 < floor <= 1, "floor must be in (0, 1]", f"got {floor}"),
            (0 <= prior <= 1, "prior must be in [0, 1]", f"got {prior}"),
            (0 <= decay < 1, "decay must be in [0, 1)", f"got {decay}"),
        ]
        for ok, expected, got in checks:
            if not ok:
                raise ConfigError(f"CurriculumSampler: {expected}, {got}. Fix the argument.")
        self.task_ids = ids
        self.alpha = float(alpha)
        self.floor = float(floor)
        self.prior = float(prior)
        self.decay = float(decay)
        self._index = {task_id: i for i, task_id in enumerate(ids)}
        self._p = np.full(len(ids), self.prior, dtype=np.float64)
        self._rng = np.random.default_rng(seed)

    def _lookup(self, task_id: str) -> int:
        try:
            return self._index[task_id]
        except KeyError:
            raise TaskNotFoundError(
                f"Task {task_id!r} is not in this curriculum's {len(self.task_ids)} tasks."
                f"{did_you_mean(task_id, self.task_ids)}"
            ) from None

    def update(self, task_id: str, successes: Sequence[bool]) -> None:
        """Fold one group of episode outcomes into the task's running success rate.

        Args:
            task_id: The task the episodes were played on.
            successes: One entry per finished episode (non-empty).

        Raises:
            TaskNotFoundError: The task is not in the curriculum.
            ConfigError: ``successes`` is empty.
        """
        i = self._lookup(task_id)
        if len(successes) == 0:
            raise ConfigError(
                f"update({task_id!r}, ...) expected at least one outcome, got none. "
                "Skip the update when a group has no finished episodes."
            )
        mean = float(np.mean(np.asarray(successes, dtype=np.float64)))
        self._p[i] = self.decay * self._p[i] + (1.0 - self.decay) * mean

    def rates(self) -> dict[str, float]:
        """Return the running success rate ``p`` of every task."""
        return {task_id: float(p) for task_id, p in zip(self.task_ids, self._p, strict=True)}

    def _weight_array(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        raw = (self._p * (1.0 - self._p)) ** self.alpha  # 0 ** 0 == 1: alpha 0 is uniform
        top = float(raw.max())
        if top <= 0.0:
            return np.ones_like(raw)
        return np.maximum(raw / top, self.floor)

    def weights(self) -> dict[str, float]:
        """Return each task's relative weight, in (0, 1], in task order."""
        return {
            task_id: float(w)
            for task_id, w in zip(self.task_ids, self._weight_array(), strict=True)
        }

    def sample(self, k: int) -> list[str]:
        """Draw ``k`` task ids in proportion to their weights.

        Draws are without replacement when ``k <= len(task_ids)`` (each task at most
        once per batch) and with replacement otherwise.

        Raises:
            ConfigError: ``k`` is negative.
        """
        if k < 0:
            raise ConfigError(f"sample(k) expected k >= 0, got {k}.")
        w = self._weight_array()
        n = len(self.task_ids)
        picks = self._rng.choice(n, size=k, replace=k > n, p=w / w.sum())
        return [self.task_ids[int(i)] for i in picks]

    def state_dict(self) -> dict[str, Any]:
        """Return the sampler's state as plain JSON-able data (rates and RNG state)."""
        return {
            "p": self.rates(),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`.

        Tasks absent from the saved state keep the prior; saved tasks that are no longer in
        the curriculum are ignored with a warning (a task set can grow between runs).

        Raises:
            ConfigError: The state is malformed or from a different RNG.
        """
        if not isinstance(state, dict) or not {"p", "rng"} <= state.keys():
            raise ConfigError(
                "Expected a dict from CurriculumSampler.state_dict() with keys 'p' and "
                f"'rng', got {type(state).__name__} {state!r:.200}."
            )
        bit_generator = self._rng.bit_generator
        saved_name = state["rng"].get("bit_generator") if isinstance(state["rng"], dict) else None
        if saved_name != type(bit_generator).__name__:
            raise ConfigError(
                f"Expected an RNG state of {type(bit_generator).__name__}, got {saved_name!r}."
            )
        unknown = sorted(set(state["p"]) - self._index.keys())
        if unknown:
            logger.warning(
                "Ignoring %d saved task rates not in the curriculum: %s", len(unknown), unknown
            )
        p = np.full(len(self.task_ids), self.prior, dtype=np.float64)
        for task_id, rate in state["p"].items():
            if task_id in self._index:
                p[self._index[task_id]] = float(rate)
        self._p = p
        bit_generator.state = state["rng"]
