"""Train on any agentgym env with TRL's ``GRPOTrainer`` (``pip install "agentgym-envs[trl]"``).

Two ways, matching the trainer's two interfaces (see ``docs/integrations.md``):

* **native tool calls** -- ``environment_factory=environment_class(env_id)``: a class
  with one method per tool in ``info["tools"]``, typed and documented so that TRL's
  schema extraction sees the env's tool specs (:mod:`.tool_methods`). TRL renders the
  tools with the model's chat template, parses the model's tool calls and calls the
  methods; each call is one env step. ``get_reward`` is the env's own reward.
* **text actions, token in / token out** -- ``rollout_func=TextRollout(env_id)`` with
  ``reward_funcs=env_reward``: the model writes actions as text (any form the env's
  parser accepts) and the rollout returns ``prompt_ids``, ``completion_ids``,
  ``logprobs`` and ``env_mask`` (:mod:`.text_rollout`).

:func:`task_dataset` builds the matching ``datasets.Dataset`` of task rows from a split.
This module imports neither TRL nor torch at import time.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import gymnasium as gym

from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.integrations.extras import require
from agentgym_envs.integrations.text_rollout import EpisodeStart, TextEpisode, play_text_episodes
from agentgym_envs.integrations.tool_methods import tool_method
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Sample, TokenPicker

log = logging.getLogger(__name__)

Mode = Literal["environment_factory", "rollout_func"]
TASK_KEY_PREFIX = "agentgym-task:"
"""A ``rollout_func`` dataset's prompt: this prefix, then the task row as JSON."""
_RESERVED = frozenset(
    {"reset", "get_reward", "close", "env", "info", "outcome", "done", "reward_components"}
)
_RESET_OPTIONS = ("task_id", "split", "difficulty", "task_seed", "verifier_seed")


class AgentGymEnvironment:
    """An agentgym env as a TRL ``environment_factory`` environment (build the class
    with :func:`environment_class`; this base has no tools).

    Every public *function* of the class is a tool to TRL, so the only public methods
    are the tools, ``reset`` and ``get_reward``; ``close`` is a property that returns
    the closing function.
    """

    env_id: ClassVar[str] = ""
    make_kwargs: ClassVar[Mapping[str, Any]] = {}
    tool_specs: ClassVar[tuple[Mapping[str, Any], ...]] = ()
    system_prompt: ClassVar[str] = ""
    """The env's rules for the system message, without the text tool list and call
    forms (the chat template lists the tools natively)."""

    def __init__(self) -> None:
        self._env: gym.Env[Any, Any] = gym.make(self.env_id, **dict(self.make_kwargs))
        self._episode: TextEpisode | None = None
        self._info: Mapping[str, Any] = {}

    def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        options: Mapping[str, Any] | str | None = None,
        **row: Any,
    ) -> str:
        """Start an episode from a dataset row and return its first observation.

        Args:
            task_id: The task to play (else one is drawn from the split).
            seed: The env seed.
            options: More ``reset`` options, as a mapping or a JSON object string.
            **row: The row's other columns: ``split``, ``difficulty``, ``task_seed`` and
                ``verifier_seed`` become reset options; the rest (``prompt`` ...) is
                for reward functions and ignored here.

        Raises:
            ConfigError: The options are invalid, or the task's tools differ from
                the class's (build one class per tool set).
        """
        opts = dict(json.loads(options) if isinstance(options, str) else (options or {}))
        opts.update({k: row[k] for k in _RESET_OPTIONS if row.get(k) is not None})
        if task_id is not None:
            opts["task_id"] = task_id
        self._episode = TextEpisode(prompt_ids=[])
        try:
            obs, info = self._env.reset(seed=None if seed is None else int(seed), options=opts)
        except AgentGymError:
            raise
        except Exception as exc:  # an env crash is an env error: masked, never raised
            log.exception("env reset failed; the episode is an env error (masked)")
            self._episode.outcome, self._episode.valid, self._episode.done = (
                "env_error",
                False,
                True,
            )
            return f"The environment failed to start ({type(exc).__name__}); nothing to do."
        names = [t["function"]["name"] for t in info.get("tools") or ()]
        expected = [t["function"]["name"] for t in self.tool_specs]
        if sorted(names) != sorted(expected):
            raise ConfigError(
                f"{type(self).__name__} was built with tools {expected}, but this task has "
                f"{names}; build one environment_class per tool set (per split or variant)"
            )
        self._info = info
        return str(obs)

    def get_reward(self) -> float | None:
        """The env's reward for the episode: the sum of its step rewards (each the sum of
        its reward components); None for an env error, which TRL then masks."""
        episode = self._episode
        if episode is None or not episode.valid:
            return None
        return episode.reward

    @property
    def reward_components(self) -> dict[str, float]:
        """The episode's reward components, summed over its steps."""
        return dict(self._episode.reward_components) if self._episode else {}

    @property
    def outcome(self) -> str:
        """The episode's outcome (``continue`` while it runs)."""
        return self._episode.outcome if self._episode else "continue"

    @property
    def done(self) -> bool:
        """Whether the episode ended."""
        return bool(self._episode and self._episode.done)

    @property
    def info(self) -> Mapping[str, Any]:
        """The last ``info`` the env returned."""
        return self._info

    @property
    def env(self) -> gym.Env[Any, Any]:
        """The wrapped Gymnasium env."""
        return self._env

    @property
    def close(self) -> Callable[[], None]:
        """The function that closes the env (a property, or TRL would make it a tool)."""
        return self._env.close

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        episode = self._episode
        if episode is None:
            return "No episode is running: reset() must be called before any tool."
        if episode.done:
            return (
                f"The episode is over (outcome: {episode.outcome}); {name} was not run. "
                "No further actions are taken."
            )
        action = json.dumps({"name": name, "arguments": arguments}, default=str)
        try:
            obs, reward, terminated, truncated, info = self._env.step(action)
        except Exception as exc:  # the env broke: an env error, never a raised tool call
            log.exception("env step failed; the episode is an env error (masked)")
            episode.outcome, episode.valid, episode.done = "env_error", False, True
            return f"The environment failed ({type(exc).__name__}); the episode is over."
        episode.turns += 1
        episode.pay(reward, info)
        episode.done = bool(terminated or truncated)
        self._info = info
        return str(obs)


def _call(self: AgentGymEnvironment, name: str, arguments: dict[str, Any]) -> str:
    return self._call_tool(name, arguments)


def environment_class(env_id: str, **make_kwargs: Any) -> type[AgentGymEnvironment]:
    """A TRL ``environment_factory`` class for ``env_id``: one method per tool.

    The tools and rules are read from one probe episode (``reset(seed=0)`` with the
    ``split`` or ``difficulty`` given here, if any); every instance builds its own env
    with ``gym.make(env_id, **make_kwargs)``.

    Args:
        env_id: A registered env id, e.g. ``"agentgym/FrozenLake-v0"``.
        **make_kwargs: Passed to ``gym.make``.

    Raises:
        ConfigError: A tool cannot be a Python method (name, types) or clashes with
            ``reset``/``get_reward``/a property of the class.
    """
    env = gym.make(env_id, **make_kwargs)
    try:
        probe: dict[str, Any] = {
            k: make_kwargs[k] for k in ("split", "difficulty") if k in make_kwargs
        }
        _, info = env.reset(seed=0, options=probe or None)
    finally:
        env.close()
    specs = tuple(info.get("tools") or ())
    namespace: dict[str, Any] = {
        "env_id": env_id,
        "make_kwargs": dict(make_kwargs),
        "tool_specs": specs,
        "system_prompt": _rules(str(info.get("system") or "")),
        "__module__": __name__,
    }
    for spec in specs:
        method = tool_method(spec, _call)
        if method.__name__ in _RESERVED or method.__name__ in namespace:
            raise ConfigError(
                f"tool {method.__name__!r} of {env_id} clashes with {sorted(_RESERVED)}; "
                "rename it with the tool-renaming wrapper"
            )
        namespace[method.__name__] = method
    parts = re.split(r"[^0-9A-Za-z]+", env_id.rpartition("/")[2])
    name = "".join(p[:1].upper() + p[1:] for p in parts)  # FrozenLake-v0 -> FrozenLakeV0
    cls = type(name, (AgentGymEnvironment,), namespace)
    cls.__doc__ = f"{env_id} as a TRL environment: tools {[s['function']['name'] for s in specs]}."
    return cls


def _rules(system: str) -> str:
    """The rules part of an env's system prompt: what precedes its text tool list."""
    if system.startswith("Tools:\n"):
        return ""
    rules, found, _ = system.partition("\n\nTools:\n")
    if not found:
        log.warning("the env's system prompt has no 'Tools:' list; it is used whole")
    return rules


def task_dataset(
    env_id: str,
    split: str = "train",
    *,
    mode: Mode = "environment_factory",
    difficulty: str | None = None,
    seeds: Iterable[int] = (0,),
    limit: int | None = None,
    **make_kwargs: Any,
) -> Any:
    """A ``datasets.Dataset`` of task rows for ``GRPOTrainer``.

    One row per task of the split (in the task set's order, the first ``limit``) and
    env seed, with columns ``task_id``, ``seed``, ``split``, ``difficulty`` and
    ``prompt``:

    * ``mode="environment_factory"``: ``prompt`` is the system message with the env's
      rules and an empty user message that ``reset`` fills with the first observation;
    * ``mode="rollout_func"``: ``prompt`` is the row as a key
      (:data:`TASK_KEY_PREFIX` + JSON) that :class:`TextRollout` plays.

    Raises:
        TaskNotFoundError: The split or difficulty does not exist.
        ConfigError: An unknown mode.
        MissingExtraError: ``datasets`` is not installed.
    """
    if mode not in ("environment_factory", "rollout_func"):
        raise ConfigError(f"mode must be 'environment_factory' or 'rollout_func', got {mode!r}")
    datasets = require("datasets", "datasets", "trl", "task_dataset")
    env = gym.make(env_id, **make_kwargs)
    try:
        pool = env.unwrapped.task_set.pool(split, difficulty)  # type: ignore[attr-defined]
        rules = ""
        if mode == "environment_factory":
            _, info = env.reset(seed=0, options={"task_id": pool[0].id})
            rules = _rules(str(info.get("system") or ""))
    finally:
        env.close()
    rows: dict[str, list[Any]] = {k: [] for k in ("prompt", "task_id", "seed", "split")}
    rows["difficulty"] = []
    for task in pool[:limit]:
        for seed in seeds:
            row = {"task_id": task.id, "seed": int(seed), "split": task.split}
            if mode == "rollout_func":
                prompt: Any = TASK_KEY_PREFIX + json.dumps({"env_id": env_id, **row})
            else:
                system = [{"role": "system", "content": rules}] if rules else []
                prompt = [*system, {"role": "user", "content": ""}]
            for key, value in {**row, "prompt": prompt, "difficulty": task.difficulty}.items():
                rows[key].append(value)
    return datasets.Dataset.from_dict(rows)


class TextRollout:
    """A TRL ``rollout_func`` that plays text-action episodes token in, token out.

    Pass it with ``reward_funcs=env_reward`` and a dataset from
    ``task_dataset(env_id, mode="rollout_func")``. Each prompt (already repeated
    ``num_generations`` times by TRL's sampler) is played once with the trainer's model,
    temperature and ``top_p``; ``max_completion_length`` bounds sampled plus env tokens.
    It returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (1 =
    sampled) and, for reward functions, ``env_reward`` (None for an env error, which
    TRL masks) and ``env_outcome``.

    Args:
        env_id: A registered env id.
        max_turn_tokens: Sampled tokens per turn, at most.
        max_turns: Turns per episode, at most (None: the env's budgets and the tokens).
        system_prompt: Start with the env's system prompt (rules, tools, call forms).
        picker: A decoding hook that picks each token instead of the sampler's draw
            (constrained decoding, for example); it must report each token's
            log-probability under the tempered distribution.
        **make_kwargs: Passed to ``gym.make``.
    """

    def __init__(
        self,
        env_id: str,
        *,
        max_turn_tokens: int = 256,
        max_turns: int | None = None,
        system_prompt: bool = True,
        picker: TokenPicker | None = None,
        **make_kwargs: Any,
    ) -> None:
        if max_turn_tokens < 1:
            raise ConfigError(f"max_turn_tokens must be >= 1, got {max_turn_tokens}")
        self.env_id = env_id
        self.make_kwargs = make_kwargs
        self.max_turn_tokens = max_turn_tokens
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.picker = picker
        self.episodes: list[TextEpisode] = []
        """The episodes of the last call, in prompt order."""
        self._envs: list[gym.Env[Any, Any]] = []
        self._chat: tuple[Any, ChatFormat] | None = None
        self._calls = 0

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from agentgym_envs.llm.sampler import Sampler  # torch: the train extra

        starts = [self._start_of(prompt) for prompt in prompts]
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        if self._chat is None or self._chat[0] is not tokenizer:
            self._chat = (tokenizer, ChatFormat(tokenizer))
        chat = self._chat[1]
        while len(self._envs) < len(starts):
            self._envs.append(gym.make(self.env_id, **self.make_kwargs))
        model = trainer.accelerator.unwrap_model(trainer.model)
        self._calls += 1
        sampler = Sampler(
            model,
            eos_ids=list(getattr(trainer, "eos_token_ids", None) or [chat.eos_id]),
            pad_id=chat.pad_id,
            temperature=float(trainer.temperature),
            top_p=float(trainer.top_p),
            seed=int(trainer.args.seed) * 1_000_003 + self._calls,
        )
        training = model.training
        model.eval()  # no dropout, and a KV cache even under gradient checkpointing
        try:
            self.episodes = play_text_episodes(
                self._envs,
                starts,
                chat,
                sampler if self.picker is None else _Picked(sampler, self.picker),
                max_completion_tokens=int(trainer.max_completion_length),
                max_turn_tokens=self.max_turn_tokens,
                max_turns=self.max_turns,
                system_prompt=self.system_prompt,
            )
        finally:
            model.train(training)
        eps = self.episodes
        return {
            "prompt_ids": [ep.prompt_ids for ep in eps],
            "completion_ids": [ep.completion_ids for ep in eps],
            "logprobs": [ep.logprobs for ep in eps],
            "env_mask": [ep.env_mask for ep in eps],
            "env_reward": [ep.reward if ep.valid else None for ep in eps],
            "env_outcome": [ep.outcome for ep in eps],
        }

    def close(self) -> None:
        """Close the envs (idempotent)."""
        for env in self._envs:
            env.close()
        self._envs = []

    def _start_of(self, prompt: Any) -> EpisodeStart:
        if not isinstance(prompt, str) or not prompt.startswith(TASK_KEY_PREFIX):
            raise ConfigError(
                f"TextRollout expected prompts made by task_dataset(..., mode='rollout_func'),"
                f" got {str(prompt)[:80]!r}; build the dataset with that mode"
            )
        row = json.loads(prompt[len(TASK_KEY_PREFIX) :])
        if row.get("env_id") != self.env_id:
            raise ConfigError(
                f"this TextRollout plays {self.env_id}, but the dataset's rows are for "
                f"{row.get('env_id')}; build the dataset with the same env id"
            )
        return EpisodeStart(seed=row.get("seed"), options={"task_id": row["task_id"]})


class _Picked:
    """A sampler whose every draw goes through a decoding hook."""

    def __init__(self, sampler: Any, picker: TokenPicker) -> None:
        self.sampler, self.picker = sampler, picker

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        samples: list[Sample] = self.sampler.generate(prompts, max_new, rows, picker=self.picker)
        return samples

    def __getattr__(self, name: str) -> Any:  # settings, weights_version, tokens_generated
        return getattr(self.sampler, name)


def env_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """TRL reward function: the env's reward of each :class:`TextRollout` episode.

    Raises:
        ConfigError: The rollouts did not come from a :class:`TextRollout`.
    """
    rewards = kwargs.get("env_reward")
    if rewards is None:
        raise ConfigError(
            "env_reward reads the rewards that TextRollout returns; pass "
            "rollout_func=TextRollout(env_id) to GRPOTrainer (with environment_factory, "
            "the environment's get_reward is used and no reward function is needed)"
        )
    return list(rewards)


def use_tool_calling_template(tokenizer: Any) -> Any:
    """Give a ChatML tokenizer whose chat template cannot render tool calls (SmolLM2's)
    TRL's Qwen2.5 ChatML template, which can and whose tool calls TRL parses; a
    template that already supports tool calling is left alone. Returns the tokenizer.

    Raises:
        ConfigError: The tokenizer is not ChatML.
        MissingExtraError: TRL is not installed.
    """
    templates = require("trl.chat_template_utils", "trl", "trl", "use_tool_calling_template")
    if templates.supports_tool_calling(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ConfigError(
            "expected a ChatML tokenizer (<|im_start|>, <|im_end|>) to give it a tool-calling "
            "template; set tokenizer.chat_template to your model's tool-calling template"
        )
    tokenizer.chat_template = templates.qwen2_5_chat_template
    return tokenizer
