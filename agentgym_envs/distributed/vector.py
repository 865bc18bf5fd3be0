"""The Ray env pool as a Gymnasium vector env.

:class:`RayVectorEnv` behaves like ``gymnasium.vector.SyncVectorEnv`` over the same
env (same seeds, same actions: same observations, rewards, flags and infos) but steps
its sub-envs in parallel on Ray actors. A sub-env whose actor dies or hangs reports a
truncated step with ``info["outcome"] == "env_error"`` and ``episode_valid`` False, and
is reset on its restarted actor by the next autoreset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.distributed.pool import RayEnvPool, SlotResult


class RayVectorEnv(VectorEnv):
    """``num_envs`` copies of an env on Ray actors, as a Gymnasium vector env.

    Args:
        env_id: a registered env id.
        num_envs: sub-envs.
        env_kwargs: keyword arguments of ``gym.make``.
        autoreset_mode: ``next_step`` (Gymnasium's default; the only one supported).
        **pool_options: passed to :class:`~agentgym_envs.distributed.pool.RayEnvPool`
            (``envs_per_actor``, ``resources``, ``step_timeout_s``, ``address`` ...).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        **pool_options: Any,
    ) -> None:
        mode = AutoresetMode(autoreset_mode)
        if mode is not AutoresetMode.NEXT_STEP:
            raise ConfigError(
                f"RayVectorEnv supports autoreset_mode 'next_step', got {mode.value!r}; "
                "reset sub-envs yourself with reset(options={'reset_mask': ...}) instead"
            )
        self.pool = RayEnvPool(env_id, num_envs, env_kwargs, **pool_options)
        self.num_envs = num_envs
        self.autoreset_mode = mode
        self.metadata = {"autoreset_mode": mode}
        self.render_mode = None
        obs_space, act_space = self.pool.spaces()
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(act_space, num_envs)
        self._env_obs: list[Any] = [""] * num_envs
        self._obs: Any = create_empty_array(obs_space, n=num_envs, fn=np.zeros)
        self._rewards = np.zeros((num_envs,), dtype=np.float64)
        self._terminations = np.zeros((num_envs,), dtype=np.bool_)
        self._truncations = np.zeros((num_envs,), dtype=np.bool_)
        self._autoreset = np.zeros((num_envs,), dtype=np.bool_)

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env (or those of ``options["reset_mask"]``) in parallel.

        ``seed`` is None, an int (sub-env ``i`` gets ``seed + i``) or one per sub-env.
        """
        n = self.num_envs
        seeds: list[int | None]
        if seed is None:
            seeds = [None] * n
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(n)]
        else:
            seeds = list(seed)
        if len(seeds) != n:
            raise ConfigError(f"give one seed per sub-env ({n}), got {len(seeds)}")
        options = dict(options) if options is not None else None
        mask = np.ones((n,), dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options.pop("reset_mask"), dtype=np.bool_)
            if mask.shape != (n,) or not mask.any():
                raise ConfigError(f"reset_mask must be {n} booleans with one True at least")
        self._terminations[mask] = False
        self._truncations[mask] = False
        self._autoreset[mask] = False
        chosen = [i for i in range(n) if mask[i]]
        results = self.pool.reset_many([(i, seeds[i], options) for i in chosen])
        infos: dict[str, Any] = {}
        for r in results:
            self._env_obs[r.slot] = r.obs
            self._autoreset[r.slot] = r.crashed  # try again at the next step
            infos = self._add_info(infos, r.info, r.slot)
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        return self._obs, infos

    def step(
        self, actions: Any
    ) -> tuple[
        Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any]
    ]:
        """Step every sub-env in parallel; those that ended at the last step reset instead
        (next-step autoreset: reward 0, flags False, the reset's observation and info)."""
        acts = list(iterate(self.action_space, actions))
        reset_now = [i for i in range(self.num_envs) if self._autoreset[i]]
        stepping = [(i, str(acts[i])) for i in range(self.num_envs) if i not in reset_now]
        for i in reset_now:
            self.pool.submit_reset(i)
        for i, action in stepping:
            self.pool.submit_step(i, action)
        got = {r.slot: r for r in self._gather(self.num_envs)}
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            r = got[i]
            if i in reset_now:
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
                self._autoreset[i] = r.crashed
            else:
                self._rewards[i], self._terminations[i], self._truncations[i] = (
                    r.reward,
                    r.terminated,
                    r.truncated,
                )
            self._env_obs[i] = r.obs
            infos = self._add_info(infos, r.info, i)
        self._autoreset |= np.logical_or(self._terminations, self._truncations)
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        return (
            self._obs,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )

    def _gather(self, count: int) -> list[SlotResult]:
        out: list[SlotResult] = []
        while len(out) < count:
            out += self.pool.wait()
        return out

    def close_extras(self, **kwargs: Any) -> None:
        """Close the pool: envs, actors, and Ray if the pool joined it."""
        self.pool.close()
