"""Train on any agentgym env with verl (``pip install verl``; see ``docs/integrations.md``).

:class:`AgentGymAgentLoop` is a verl agent loop, registered in verl's agent-loop registry
as ``"agentgym"``: for one dataset row it plays one multi-turn episode of an agentgym env
with verl's token-in/token-out server interface (``server_manager.generate(request_id,
prompt_ids=..., sampling_params=...)`` returning a ``TokenOutput`` of sampled ids and
their log-probabilities) and returns verl's ``AgentLoopOutput``:

* ``prompt_ids``: the env's system prompt and first observation, rendered with the
  tokenizer's chat template (env text encoded with special tokens split, so an
  observation cannot forge a turn);
* ``response_ids``: every turn's sampled ids exactly as sampled, then the template's end
  of turn and the next observation; never re-tokenized;
* ``response_mask``: 1 on sampled ids, 0 on env and template ids;
* ``response_logprobs``: the server's log-probability of each sampled id, 0 elsewhere
  (None when the server returns none: ``rollout.calculate_log_probs=False``);
* ``reward_score``: the env's own reward (the sum of its step rewards), so verl needs no
  reward function;
* ``num_turns``: chat messages in verl's count (the first user message, each assistant
  turn, each observation); ``extra_fields["agent_turns"]`` counts the agent's turns.

An env error (``info["episode_valid"]`` False, or an env that raises) is masked as the
suite's trainer masks it: ``response_mask`` is all 0 and ``reward_score`` 0, so the
episode never reaches the loss; ``extra_fields["episode_valid"]`` says so.

The episode is played by :func:`~agentgym_envs.integrations.text_rollout.play_text_episodes`
in a worker thread (env steps block); each turn's generation is awaited on verl's event
loop. Each dataset row names its env and task in ``extra_info`` (:func:`task_rows`
builds such rows).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.extras import MissingExtraError, install_hint
from agentgym_envs.integrations.text_rollout import EpisodeStart, TextEpisode, play_text_episodes
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Sample, SamplingSettings

try:
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError as exc:
    raise MissingExtraError(
        f"the verl agent loop needs the verl package (import failed: {exc}); fix: "
        f"{install_hint('verl')}; verl pins transformers<5.11, so give it a venv of its "
        "own (`make test-verl` builds .venv-verl)"
    ) from exc

AGENT_NAME = "agentgym"
"""The agent loop's name in verl's registry (a dataset row's ``agent_name``)."""
_RESET_OPTIONS = ("task_id", "split", "difficulty", "task_seed", "verifier_seed")


class _EnvPool:
    """Idle envs per (env id, make kwargs), reused across episodes: verl builds a new
    agent loop object for every sample, and making an env can be slow (a browser, a
    sandbox)."""

    def __init__(self) -> None:
        self._idle: dict[str, list[gym.Env[Any, Any]]] = {}
        self._lock = threading.Lock()

    def acquire(self, env_id: str, make_kwargs: Mapping[str, Any]) -> tuple[str, gym.Env[Any, Any]]:
        key = f"{env_id}|{sorted(make_kwargs.items())!r}"
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if idle:
                return key, idle.pop()
        return key, gym.make(env_id, **dict(make_kwargs))

    def release(self, key: str, env: gym.Env[Any, Any]) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(env)

    def close(self) -> None:
        """Close every idle env (idempotent)."""
        with self._lock:
            envs = [env for idle in self._idle.values() for env in idle]
            self._idle.clear()
        for env in envs:
            env.close()


ENV_POOL = _EnvPool()
"""The envs of this process's agent loops (``ENV_POOL.close()`` closes the idle ones)."""


class ServerGenerator:
    """A :class:`~agentgym_envs.llm.generation.Generator` over verl's token-in/token-out
    server call, for a worker thread: each ``generate`` awaits the server on ``loop``.

    Args:
        server: verl's ``server_manager`` (``LLMServerClient`` or anything with its
            ``generate`` coroutine).
        loop: the event loop the server's coroutines run on (not the calling thread's).
        sampling_params: verl's sampling parameters; ``max_tokens`` is set per turn.
        eos_ids: ids that end a turn.
        request_id: one id for the whole episode (sticky routing to one server, so its
            prefix cache holds the earlier turns).
    """

    def __init__(
        self,
        server: Any,
        loop: asyncio.AbstractEventLoop,
        sampling_params: Mapping[str, Any],
        eos_ids: Sequence[int],
        request_id: str,
    ) -> None:
        self.server, self.loop, self.request_id = server, loop, request_id
        self.sampling_params = dict(sampling_params)
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.all_logprobs = True
        """False once the server returned a sample without log-probabilities."""
        self.tokens_generated = 0
        self.weights_version = 0
        temperature = float(self.sampling_params.get("temperature") or 0.0)
        top_p = float(self.sampling_params.get("top_p") or 1.0)
        self._settings = SamplingSettings(temperature, top_p if 0.0 < top_p <= 1.0 else 1.0)

    @property
    def settings(self) -> SamplingSettings:
        return self._settings

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        return [self._one(list(p), int(n)) for p, n in zip(prompts, max_new, strict=True)]

    def _one(self, prompt: list[int], max_new: int) -> Sample:
        params = {**self.sampling_params, "max_tokens": max_new}
        call = self.server.generate(self.request_id, prompt_ids=prompt, sampling_params=params)
        out = asyncio.run_coroutine_threadsafe(call, self.loop).result()
        ids = [int(i) for i in out.token_ids][:max_new]
        if out.log_probs is None or len(out.log_probs) < len(ids):
            self.all_logprobs = False
            logprobs = [0.0] * len(ids)
        else:
            logprobs = [float(x) for x in out.log_probs[: len(ids)]]
        self.tokens_generated += len(ids)
        return Sample(ids, logprobs, ended=bool(ids) and ids[-1] in self.eos_ids)


class AgentGymAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """verl agent loop that plays one agentgym episode per dataset row (see the module
    docstring for what it returns).

    The row's ``extra_info`` holds ``env_id`` (else the loop's ``env_id``), ``seed``
    and the reset options ``task_id``, ``split``, ``difficulty``, ``task_seed`` and
    ``verifier_seed``. ``rollout.response_length`` bounds sampled plus env tokens.

    Args:
        env_id: The env of rows that name none.
        max_turn_tokens: Sampled tokens per turn, at most.
        max_turns: Agent turns per episode, at most (None: the env's budgets and the
            token budget).
        system_prompt: Start with the env's system prompt (rules, tools, call forms).
        make_kwargs: Passed to ``gym.make``.
        *args: verl's agent loop arguments (config, server manager, tokenizer ...).
        **kwargs: verl's agent loop keyword arguments.
    """

    def __init__(
        self,
        *args: Any,
        env_id: str | None = None,
        max_turn_tokens: int = 256,
        max_turns: int | None = None,
        system_prompt: bool = True,
        make_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if max_turn_tokens < 1:
            raise ConfigError(f"max_turn_tokens must be >= 1, got {max_turn_tokens}")
        self.env_id = env_id
        self.max_turn_tokens = int(max_turn_tokens)
        self.max_turns = None if max_turns is None else int(max_turns)
        self.system_prompt = bool(system_prompt)
        self.make_kwargs = dict(make_kwargs or {})

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        """Play the row's episode; returns verl's ``AgentLoopOutput``.

        Raises:
            ConfigError: The row names no env, or the prompt does not fit
                ``rollout.prompt_length``.
        """
        env_id, start = self._start_of(kwargs.get("extra_info"))
        loop = asyncio.get_running_loop()
        request_id = uuid.uuid4().hex

        def play() -> tuple[TextEpisode, bool]:
            chat = _thread_chat(self.tokenizer)
            eos = [chat.eos_id, *_generation_eos(self.tokenizer)]
            generator = ServerGenerator(self.server_manager, loop, sampling_params, eos, request_id)
            key, env = ENV_POOL.acquire(env_id, self.make_kwargs)
            try:
                (episode,) = play_text_episodes(
                    [env],
                    [start],
                    chat,
                    generator,
                    max_completion_tokens=int(self.rollout_config.response_length),
                    max_turn_tokens=self.max_turn_tokens,
                    max_turns=self.max_turns,
                    system_prompt=self.system_prompt,
                )
            finally:
                ENV_POOL.release(key, env)
            return episode, generator.all_logprobs

        episode, with_logprobs = await loop.run_in_executor(None, play)
        return self._output(episode, with_logprobs)

    def _start_of(self, extra_info: Any) -> tuple[str, EpisodeStart]:
        info = dict(extra_info) if isinstance(extra_info, Mapping) else {}
        env_id = info.get("env_id") or self.env_id
        if not env_id:
            raise ConfigError(
                "the agentgym agent loop needs an env id: expected extra_info['env_id'] in "
                f"the dataset row or env_id in the agent loop config, got extra_info={info}; "
                "build the rows with agentgym_envs.integrations.verl.task_rows"
            )
        seed = info.get("seed")
        options = {k: info[k] for k in _RESET_OPTIONS if info.get(k) is not None}
        return str(env_id), EpisodeStart(None if seed is None else int(seed), options)

    def _output(self, ep: TextEpisode, with_logprobs: bool) -> Any:
        limit = int(self.rollout_config.prompt_length)
        if len(ep.prompt_ids) > limit:
            raise ConfigError(
                f"the env's first prompt has {len(ep.prompt_ids)} tokens, more than "
                f"rollout.prompt_length={limit}; raise data.max_prompt_length (or pass "
                "system_prompt: false in the agent loop config)"
            )
        mask = ep.env_mask if ep.valid else [0] * len(ep.env_mask)
        observations = max(ep.turns - 1, 0) if ep.turns else 0
        return AgentLoopOutput(
            prompt_ids=ep.prompt_ids,
            response_ids=ep.completion_ids,
            response_mask=mask,
            response_logprobs=ep.logprobs if with_logprobs else None,
            reward_score=ep.reward if ep.valid else 0.0,
            num_turns=1 + ep.turns + observations,
            metrics=AgentLoopMetrics(),
            extra_fields={
                "turn_scores": [],
                "tool_rewards": [],
                "agent_turns": ep.turns,
                "episode_valid": ep.valid,
                "env_outcome": ep.outcome,
                "env_reward_components": dict(ep.reward_components),
            },
        )


register(AGENT_NAME)(AgentGymAgentLoop)


_THREAD = threading.local()


def _thread_chat(tokenizer: Any) -> ChatFormat:
    """This thread's chat format over its own copy of ``tokenizer``: verl shares one
    tokenizer between all agent loops, and a Rust (fast) tokenizer used from two threads
    at once fails with ``RuntimeError: Already borrowed``."""
    chats: dict[int, tuple[Any, ChatFormat]] = _THREAD.__dict__.setdefault("chats", {})
    kept = chats.get(id(tokenizer))
    if kept is None or kept[0] is not tokenizer:
        kept = (tokenizer, ChatFormat(copy.deepcopy(tokenizer)))
        chats[id(tokenizer)] = kept
    return kept[1]


def _generation_eos(tokenizer: Any) -> list[int]:
    """Extra end ids a server may stop on: the tokenizer's own eos (besides the chat
    format's), as ints."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return [int(eos)] if isinstance(eos, int) else []


def task_rows(
    env_id: str,
    split: str = "train",
    *,
    difficulty: str | None = None,
    seeds: Iterable[int] = (0,),
    limit: int | None = None,
    **make_kwargs: Any,
) -> list[dict[str, Any]]:
    """verl dataset rows (``RLHFDataset`` columns) for the tasks of a split.

    One row per task (the first ``limit``, in the task set's order) and env seed:
    ``data_source`` (the env id), ``agent_name`` (``"agentgym"``), ``prompt`` (the
    task's instruction as a user message; verl only uses it to filter over-long rows,
    the agent loop renders the env's own prompt), ``reward_model`` (unused: the env pays
    the reward) and ``extra_info`` (``env_id``, ``task_id``, ``seed``, ``split``,
    ``index``). Save them with ``pandas.DataFrame(rows).to_parquet(path)``.

    Raises:
        TaskNotFoundError: The split or difficulty does not exist.
    """
    env = gym.make(env_id, **make_kwargs)
    try:
        pool = env.unwrapped.task_set.pool(split, difficulty)  # type: ignore[attr-defined]
    finally:
        env.close()
    rows: list[dict[str, Any]] = []
    for task in pool[:limit]:
        for seed in seeds:
            rows.append(
                {
                    "data_source": env_id,
                    "agent_name": AGENT_NAME,
                    "prompt": [{"role": "user", "content": str(task.instruction)}],
                    "reward_model": {"style": "env", "ground_truth": ""},
                    "extra_info": {
                        "env_id": env_id,
                        "task_id": task.id,
                        "seed": int(seed),
                        "split": task.split,
                        "index": len(rows),
                    },
                }
            )
    return rows
