"""A local Hugging Face model as a batched policy (and the engine behind ``agentgym serve``).

:class:`LocalLM` loads a model spec as :func:`agentgym_envs.llm.models.load_model` resolves it
(``"smollm2"``, ``"tiny"``, a model folder or a ``.gguf`` file), renders chats with the
tokenizer's template and generates for a batch of prompts at once (left padding, KV
cache). Each row has its own temperature, nucleus and random stream, so a row's sample
depends on its own seed only, not on which other rows share the batch. (Greedy and
sampled rows alike can still differ in the last bits of their logits between batch
compositions, since padded batched matmuls round differently; an argmax tie broken that
way is the only way batching changes an action.)

:class:`HFPolicy` keeps a chat per env slot (:mod:`agentgym_envs.policies.chat`) and
generates one action per slot per ``act`` call.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from agentgym_envs.core.errors import ArgumentError, ClosedError, ConfigError
from agentgym_envs.llm import ChatTemplate, Message, SamplingSettings
from agentgym_envs.llm.models import load_model, resolve_device, weights_fingerprint
from agentgym_envs.llm.sampler import RowPicker, Sampler
from agentgym_envs.policies.chat import ChatHistories, Conversation, derive_seed
from agentgym_envs.serving.prefix_cache import PrefixCacheGenerator

logger = logging.getLogger(__name__)

_TORCH_THREADS = torch.get_num_threads()
"""torch's own thread count, read before any LocalLM changed it: the most ``auto`` uses."""


@dataclass(frozen=True)
class GenOptions:
    """Sampling settings of one row: ``temperature`` 0 is greedy."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    """One generated reply."""

    text: str
    tokens_in: int
    tokens_out: int
    finish: str  # "stop" (end of turn or a stop string) or "length"


class LocalLM:
    """A loaded causal LM with its tokenizer, generating for batches of chats.

    Thread-safe: concurrent ``generate`` calls run one after the other.

    Args:
        model: a model spec (``"smollm2"``, ``"tiny"``, a model folder, a ``.gguf`` path).
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...
        dtype: parameter dtype; default float32 on CPU, bfloat16 on CUDA.
        threads: CPU threads for generation, or ``"auto"``: before each batch, as many
            as the cores other processes leave free (from the load average), at least 1
            and at most torch's default. torch's threads wait for each other by spinning,
            so two threads on two cores that another job also wants ran 5 times slower
            than one (see :func:`cpu_threads`). The same prompts gave the same greedy
            tokens at 1 and 2 threads (matrix products split rows and columns across
            threads, not sums); a reduction over threads could still round differently.

    Raises:
        ConfigError: unknown spec, missing SmolLM2 package, no chat template, or bad
            ``threads``.
    """

    def __init__(
        self,
        model: str = "smollm2",
        *,
        device: str = "auto",
        dtype: torch.dtype | None = None,
        kv_reuse: bool | None = None,
        threads: int | str = "auto",
    ) -> None:
        if threads != "auto" and not (isinstance(threads, int) and threads >= 1):
            raise ConfigError(f"threads must be 'auto' or an int >= 1, got {threads!r}")
        self.threads = threads
        self.model_spec = model
        self.device = str(resolve_device(device))
        self.model, self.tokenizer = load_model(model, device=self.device, dtype=dtype)
        self.model.train(False)  # eval mode (Module.eval is untyped for mypy)
        template = getattr(self.tokenizer, "chat_template", None)
        if not template:
            raise ConfigError(
                f"the tokenizer of {model!r} has no chat template; use an instruct/chat "
                "model (for example 'smollm2') or add chat_template to tokenizer_config.json"
            )
        self.template_tools = "tools" in str(template)
        """Whether the chat template renders ``tools`` (SmolLM2's does not: there the
        tool list in the system prompt is all the model sees)."""
        self.template = ChatTemplate(self.tokenizer)
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.fingerprint = weights_fingerprint(model)
        self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        eos = {int(self.tokenizer.eos_token_id)}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        eos |= {int(i) for i in ([configured] if isinstance(configured, int) else configured or [])}
        self._sampler = Sampler(self.model, eos_ids=sorted(eos), pad_id=self.pad_id)
        self._eos = eos
        # on a CPU, re-reading each slot's whole history every turn dominates: keep each
        # slot's KV cache and feed only the new tokens (rows then decode one at a time)
        self.kv_reuse = not self.device.startswith("cuda") if kv_reuse is None else kv_reuse
        self._prefix = PrefixCacheGenerator(self.model, torch.device(self.device))
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Free the weights (and the CUDA cache); later ``generate`` calls raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._prefix.clear()
            self.model = self._sampler.model = self._prefix.model = None  # type: ignore[assignment]
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()

    def _set_threads(self) -> None:
        if not self.device.startswith("cpu"):
            return
        if isinstance(self.threads, int):
            wanted = self.threads
        else:
            try:
                load = os.getloadavg()[0]
            except (AttributeError, OSError):  # no load average here (Windows): all threads
                load = 0.0
            if hasattr(os, "sched_getaffinity"):
                cpus = len(os.sched_getaffinity(0))
            else:  # macOS
                cpus = os.cpu_count() or 1
            current = torch.get_num_threads()
            wanted = cpu_threads(load, cpus, current, _TORCH_THREADS)
        if wanted != torch.get_num_threads():
            torch.set_num_threads(wanted)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()) -> str:
        """The prompt text of a chat, ending with the assistant generation prompt (for
        display: :meth:`prompt_ids` gives the ids)."""
        tools = list(tools) if tools and self.template_tools else []
        return self.template.render_text(messages, True, tools)

    def prompt_ids(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        """Token ids of a chat's prompt, ending with the assistant generation prompt. The
        template's markers are control tokens; message text (observations, tool results,
        user text) is encoded as plain text, so it can never forge a turn."""
        tools = list(tools) if tools and self.template_tools else []
        return self.template.render_ids(messages, True, tools)

    def count(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()) -> int:
        """Prompt length of a chat in tokens."""
        return len(self.prompt_ids(messages, tools))

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        options: Sequence[GenOptions],
        keys: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Generate one reply per prompt.

        Without ``keys`` (or with ``kv_reuse`` off) all rows run in one batched decode
        loop. With ``keys`` (one conversation key per row, e.g. the env slot) and
        ``kv_reuse`` on, each row reuses the KV cache of its key's previous prompt and
        reply, and only the new tokens are read (see :mod:`.prefix_cache`).
        """
        if len(prompts) != len(options):
            raise ArgumentError(
                f"expected one GenOptions per prompt, got {len(prompts)} prompts but "
                f"{len(options)} options"
            )
        if not prompts:
            return []
        with self._lock:
            if self._closed:
                raise ClosedError(
                    f"the model {self.model_spec!r} was closed; load it again to generate"
                )
            self._set_threads()
            if keys is not None and self.kv_reuse:
                outs = self._prefix.generate_batch(
                    list(keys),
                    prompts,
                    [o.max_new_tokens for o in options],
                    self._eos,
                    [_picker(o) for o in options],
                )
                rows = [(ids, bool(ids) and ids[-1] in self._eos) for ids in outs]
            else:
                picker = RowPicker(
                    [SamplingSettings(o.temperature, o.top_p, o.seed) for o in options],
                    steps=max(o.max_new_tokens for o in options),
                    device=self._sampler.device,
                )
                limits = [o.max_new_tokens for o in options]
                samples = self._sampler.generate(prompts, limits, picker=picker)
                rows = [(list(s.ids), bool(s.ended)) for s in samples]
        out = []
        for prompt, option, (ids, ended) in zip(prompts, options, rows, strict=True):
            text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
            finish = "stop" if ended else "length"
            cuts = [text.index(s) for s in option.stop if s and s in text]
            if cuts:
                text, finish = text[: min(cuts)], "stop"
            out.append(Generation(text, len(prompt), len(ids), finish))
        return out


def cpu_threads(load: float, cpus: int, current: int, maximum: int) -> int:
    """Threads for the next batch on a CPU: the cores that other processes leave free.

    ``load`` is the 1-minute load average, to which this process adds about ``current``
    while it generates; the rest is other work (another job, the envs' own browsers and
    sandboxes). The answer is at least 1 and at most ``maximum``.
    """
    others = max(0.0, load - current)
    return max(1, min(maximum, round(cpus - others)))


def _picker(option: GenOptions) -> Callable[[torch.Tensor, int], int]:
    """Greedy, or nucleus sampling from the row's own generator (seeded by
    ``option.seed``, so rows never share randomness)."""
    generator = torch.Generator().manual_seed(option.seed)

    def pick(logits: torch.Tensor, step: int) -> int:
        if option.temperature <= 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / option.temperature, dim=-1)  # (V,)
        sorted_p, order = probs.sort(descending=True)
        sorted_p = sorted_p.masked_fill(sorted_p.cumsum(0) - sorted_p > option.top_p, 0.0)
        drawn = torch.multinomial(sorted_p.cpu(), 1, generator=generator)
        return int(order[int(drawn)])

    return pick


class HFPolicy:
    """A local transformers model playing every env slot, one batched generate per step.

    The chat of a slot is: the env's system prompt, a one-shot example exchange (see
    :mod:`agentgym_envs.policies.chat`), the task, then assistant actions and env
    observations. Prompts longer than ``max_context - max_new_tokens`` lose their oldest
    turns (system prompt and task stay).

    Args:
        model: a model spec: ``"smollm2"`` (default), a model folder or a ``.gguf`` file.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` ...
        temperature: 0 (default) is greedy decoding, deterministic.
        top_p: nucleus mass for temperature > 0.
        max_new_tokens: the longest action in tokens (tool calls are short).
        seed: with temperature > 0, each action is sampled with the seed derived from
            (seed, the slot's episode seed, turn), so it does not depend on the batch.
        max_context: the context budget in tokens (default: the model's maximum).
        one_shot: add the one-shot example exchange (small models need it).
        trim_to: when the history outgrows ``max_context``, drop old turns down to this
            share of it, and keep them dropped while it fits: each trim makes the KV
            cache read
            the kept turns again, so trimming a little on every turn costs a full re-read
            per turn (see :class:`~.chat.ChatHistories`).
        dtype: parameter dtype (default float32 on CPU, bfloat16 on CUDA).
        kv_reuse: keep each slot's KV cache between turns and decode rows one at a time
            (default: on for CPU, where re-reading histories dominates; off on CUDA,
            where one batched decode is faster).
        lm: an already loaded :class:`LocalLM` to share (then ``model``/``device``/
            ``dtype``/``threads`` are ignored).
        threads: CPU threads for generation, or ``"auto"`` (see :class:`LocalLM`).
    """

    def __init__(
        self,
        model: str = "smollm2",
        *,
        device: str = "auto",
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        seed: int = 0,
        max_context: int | None = None,
        one_shot: bool = True,
        dtype: torch.dtype | None = None,
        kv_reuse: bool | None = None,
        lm: LocalLM | None = None,
        trim_to: float = 0.5,
        threads: int | str = "auto",
    ) -> None:
        if temperature < 0 or not 0 < top_p <= 1 or max_new_tokens < 1:
            raise ConfigError(
                "expected temperature >= 0, 0 < top_p <= 1 and max_new_tokens >= 1, got "
                f"temperature={temperature}, top_p={top_p}, max_new_tokens={max_new_tokens}"
            )
        self._chats = ChatHistories(one_shot=one_shot, trim_to=trim_to)  # checks trim_to
        self._owns_lm = lm is None
        self.lm = (
            lm
            if lm is not None
            else LocalLM(model, device=device, dtype=dtype, kv_reuse=kv_reuse, threads=threads)
        )
        self.max_context = max_context if max_context is not None else self.lm.context_length
        if self.max_context <= max_new_tokens:
            raise ConfigError(
                f"max_context ({self.max_context}) must exceed max_new_tokens "
                f"({max_new_tokens}); raise max_context or lower max_new_tokens"
            )
        spec_name = self.lm.model_spec
        short = spec_name if spec_name in ("smollm2", "tiny") else Path(spec_name).name
        self.name = f"hf:{short}"
        self.options = GenOptions(max_new_tokens, temperature, top_p, seed)
        self.spec: dict[str, Any] = {
            "kind": "hf",
            "model": spec_name,
            "weights": self.lm.fingerprint,
            "dtype": self.lm.dtype,
            "device": self.lm.device,
            "temperature": temperature,
            "top_p": top_p,
            "max_new_tokens": max_new_tokens,
            "seed": seed,
            "max_context": self.max_context,
            "one_shot": one_shot,
            "trim_to": trim_to,
            "template_tools": self.lm.template_tools,
            "kv_reuse": self.lm.kv_reuse,
        }
        self.last_usage: list[dict[str, float]] = []

    def reset(self, indices: Sequence[int]) -> None:
        """Start fresh chats for these slots."""
        self._chats.reset(indices)

    def conversation(self, slot: int) -> Conversation:
        """The chat history of a slot (KeyError if it has none)."""
        return self._chats[slot]

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        """Generate one action per observation, all slots in one batch."""
        chosen = list(slots) if slots is not None else list(range(len(observations)))
        budget = self.max_context - self.options.max_new_tokens
        prompts: list[list[int]] = []
        options: list[GenOptions] = []
        for slot, obs, info in zip(chosen, observations, infos, strict=True):
            conv = self._chats.observe(slot, obs, info)
            tools = conv.tools

            def count(messages: list[Message], tools: Sequence[Any] = tools) -> int:
                return self.lm.count(messages, tools)

            messages, fits = self._chats.fit(slot, count, budget)
            ids = self.lm.prompt_ids(messages, tools)
            if not fits:  # even system + task + newest turn are too long: keep the end
                logger.warning("slot %d: prompt of %d tokens cut to %d", slot, len(ids), budget)
                ids = ids[-budget:]
            prompts.append(ids)
            seed = derive_seed(self.options.seed, conv.episode_seed, len(conv.turns))
            options.append(replace(self.options, seed=seed))
        started = time.perf_counter()
        generations = self.lm.generate(prompts, options, keys=chosen)
        latency_ms = (time.perf_counter() - started) * 1000.0
        actions = [g.text.strip() for g in generations]
        for slot, action in zip(chosen, actions, strict=True):
            self._chats.record(slot, action)
        self.last_usage = [
            {
                "tokens_in": float(g.tokens_in),
                "tokens_out": float(g.tokens_out),
                "latency_ms": latency_ms,
                "retries": 0.0,
                "failed": 0.0,
            }
            for g in generations
        ]
        return actions

    def close(self) -> None:
        """Forget all chats and free the model unless it was passed in (idempotent)."""
        self._chats = ChatHistories(one_shot=self._chats.one_shot, trim_to=self._chats.trim_to)
        self.last_usage = []
        if self._owns_lm:
            self.lm.close()
