"""Batched sampling with a KV cache that keeps each token's sampler log-probability.

Prompts of different lengths are left-padded; position ids come from the attention mask
so a padded row sees exactly the positions it would see alone. The recorded
log-probability is ``log softmax(logits / temperature)`` of the sampled token -- the same
quantity the trainer recomputes -- so on the same weights the importance ratio is 1.
With ``top_p < 1`` the tokens are drawn from the nucleus but the recorded value is still
that of the full tempered distribution (the usual convention; the ratio then measures
the policy, not the nucleus).

:class:`Sampler` implements :class:`~agentgym_envs.llm.generation.Generator`; its
decoding hook (a :class:`~agentgym_envs.llm.generation.TokenPicker`, such as
:class:`RowPicker` for per-row settings) replaces the token draw without touching the
decode loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from agentgym_envs.core.errors import ArgumentError
from agentgym_envs.llm import precision
from agentgym_envs.llm.engine import StaticEngine
from agentgym_envs.llm.generation import Sample, SamplingSettings, TokenPicker

__all__ = ["RowPicker", "Sample", "Sampler"]


class Sampler:
    """Generates continuations for a batch of prompts with a local causal LM.

    Implements :class:`~agentgym_envs.llm.generation.Generator`. Whoever updates the
    model's weights sets :attr:`weights_version` (the trainer: its policy version).

    Args:
        model: a causal LM (Hugging Face ``PreTrainedModel``).
        eos_ids: token ids that end a turn.
        pad_id: id used for left padding.
        temperature: 0 means greedy (log-probabilities then use temperature 1).
        top_p: nucleus sampling mass in (0, 1].
        seed: seed of the sampling generator (separate from env seeds).
        engine: a static-KV-cache engine over the same model (CUDA graphs on GPU); when
            None, the transformers forward with a dynamic cache is used.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        eos_ids: Sequence[int],
        pad_id: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        engine: StaticEngine | None = None,
    ) -> None:
        self._settings = SamplingSettings(temperature, top_p, seed)  # validates them
        self.model = model
        self.eos_ids = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.pad_id = pad_id
        self.temperature = temperature
        self.top_p = top_p
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.tokens_generated = 0
        self.weights_version = 0
        self.engine = engine
        # transformers renamed the cache argument (past_key_values -> cache) in 5.x
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def settings(self) -> SamplingSettings:
        """Temperature, nucleus mass and seed of the sampler's own draw."""
        return self._settings

    def get_state(self) -> torch.Tensor:
        """The random stream's state (for checkpoints)."""
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        """Restore the random stream from :meth:`get_state`."""
        self.generator.set_state(state)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
        *,
        picker: TokenPicker | None = None,
    ) -> list[Sample]:
        """Sample a continuation of each prompt, at most ``max_new[i]`` tokens each.

        Args:
            prompts: Token ids of each prompt.
            max_new: The token limit of each continuation.
            rows: ``rows[i]`` is the engine cache row of prompt ``i`` (the env slot, so
                the slot's earlier turns stay cached); default: batches of rows
                ``0, 1, ...``.
            picker: Chooses each next token instead of the sampler's own draw (its
                temperature, ``top_p`` and generator); called once per decode step on
                the logits of every row of the batch.
        """
        if len(prompts) != len(max_new) or (rows is not None and len(rows) != len(prompts)):
            raise ArgumentError(
                "expected one max_new (and one row, if rows are given) per prompt, got "
                f"{len(prompts)} prompts, {len(max_new)} max_new and "
                f"{'no' if rows is None else len(rows)} rows"
            )
        if not prompts:
            return []
        with precision.compute(self.device):
            pick = picker if picker is not None else self._pick
            if self.engine is None:
                return self._sample(*self._hf_start(prompts), max_new, pick)
            if rows is not None:
                return self._static(prompts, max_new, list(rows), pick)
            size = self.engine.max_batch
            out: list[Sample] = []
            for start in range(0, len(prompts), size):
                part = prompts[start : start + size]
                chunk = max_new[start : start + size]
                out += self._static(part, chunk, list(range(len(part))), pick)
            return out

    def _hf_start(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Any]:
        """Prefill with the transformers forward: left padding, positions from the mask."""
        device = self.device
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attn[row, width - len(prompt) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, W)
        # logits of the last position only: the prompt's other logits are never used
        out = self.model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        state = {"cache": _cache_of(out), "attn": attn, "pos": positions[:, -1:] + 1}

        def step(token: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
            ones = torch.ones((batch, 1), dtype=attn.dtype, device=device)
            state["attn"] = torch.cat([state["attn"], ones], 1)
            out = self.model(
                input_ids=token[:, None],
                attention_mask=state["attn"],
                position_ids=state["pos"],
                use_cache=True,
                **{self._cache_arg: state["cache"]},
            )
            state["cache"] = _cache_of(out)
            state["pos"] = state["pos"] + 1
            logits: torch.Tensor = out.logits[:, -1].float()
            return logits

        return out.logits[:, -1].float(), step

    def _static(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: list[int],
        pick: TokenPicker,
    ) -> list[Sample]:
        """Generate with the static-cache engine: only uncached prompt tokens are computed,
        then every decode step runs all cache rows (idle ones at the scratch slot)."""
        engine = self.engine
        assert engine is not None
        index = torch.tensor(rows, device=self.device)
        logits = engine.extend(dict(zip(rows, prompts, strict=True)))[index]
        pos = torch.tensor([len(p) for p in prompts], device=self.device)
        full_ids = torch.zeros(engine.max_batch, dtype=torch.long, device=self.device)
        full_pos = torch.full_like(full_ids, engine.scratch)

        def step(token: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
            full_ids[index] = token
            full_pos[index] = torch.where(done, torch.full_like(pos, engine.scratch), pos)
            logits = engine.decode(full_ids, full_pos)[index]
            pos.add_(1)
            return logits

        samples = self._sample(logits, step, max_new, pick)
        for row, sample in zip(rows, samples, strict=True):
            engine.commit(row, sample.ids[:-1])  # the last token was never fed back
        return samples

    def _sample(
        self, logits: torch.Tensor, step: Any, max_new: Sequence[int], pick: TokenPicker
    ) -> list[Sample]:
        """The decode loop shared by both backends."""
        batch = logits.shape[0]
        limits = torch.tensor(list(max_new), device=self.device)
        eos = self.eos_ids.to(self.device)
        done = limits <= 0
        tokens: list[torch.Tensor] = []
        logps: list[torch.Tensor] = []
        alive: list[torch.Tensor] = []
        for i in range(int(limits.max().item())):
            # 1. sample one token per row and keep its tempered log-probability
            token, logp = pick(logits, i)
            tokens.append(token)
            logps.append(logp)
            alive.append(~done)
            done = done | torch.isin(token, eos) | (limits <= i + 1)
            if bool(done.all()):
                break
            # 2. advance every row (finished rows decode padding, ignored later)
            token = torch.where(done, torch.full_like(token, self.pad_id), token)
            logits = step(token, done)
        return self._collect(tokens, logps, alive, batch)

    def _pick(self, logits: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The default draw: tempered nucleus sampling from the sampler's generator."""
        temperature = self.temperature or 1.0
        logprobs = torch.log_softmax(logits / temperature, dim=-1)  # (B, V)
        if self.temperature == 0:
            token = logprobs.argmax(-1)
        else:
            probs = logprobs.exp()
            if self.top_p < 1.0:
                probs = _nucleus(probs, self.top_p)
            # inverse-CDF draw: one uniform per row (multinomial's exponential draws over
            # the whole vocabulary cost more than the tiny model's forward pass)
            cdf = probs.cumsum(-1)  # (B, V)
            u = torch.rand((probs.shape[0], 1), generator=self.generator, device=probs.device)
            token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
            token = token.clamp(max=probs.shape[-1] - 1)
        return token, logprobs.gather(1, token[:, None]).squeeze(1)

    def _collect(
        self,
        tokens: list[torch.Tensor],
        logps: list[torch.Tensor],
        alive: list[torch.Tensor],
        batch: int,
    ) -> list[Sample]:
        if not tokens:
            return [Sample([], [], False) for _ in range(batch)]
        tok = torch.stack(tokens, 1).cpu()  # (B, S)
        lp = torch.stack(logps, 1).cpu()
        live = torch.stack(alive, 1).cpu()
        eos = self.eos_ids
        samples = []
        for row in range(batch):
            keep = live[row]
            ids = tok[row][keep].tolist()
            self.tokens_generated += len(ids)
            ended = bool(ids) and bool(torch.isin(torch.tensor(ids[-1]), eos))
            samples.append(Sample(ids, lp[row][keep].tolist(), ended))
        return samples


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set of tokens whose mass reaches ``top_p``."""
    sorted_p, order = probs.sort(-1, descending=True)
    outside = sorted_p.cumsum(-1) - sorted_p > top_p  # the top token is always kept
    sorted_p = sorted_p.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


class RowPicker:
    """A :class:`~agentgym_envs.llm.generation.TokenPicker` with per-row settings.

    Each row has its own temperature, nucleus mass and random stream (seeded by its
    settings' ``seed``, one uniform per step drawn up front), so a row's sample depends
    on its own seed only, never on which other rows share the batch.

    Args:
        settings: One entry per row of the batch.
        steps: The most tokens any row generates.
        device: Where the sampler's logits live.
    """

    def __init__(
        self, settings: Sequence[SamplingSettings], steps: int, device: torch.device | str
    ) -> None:
        rows = len(settings)
        self._temps = torch.tensor([s.temperature for s in settings], device=device)
        self._top_p = torch.tensor([s.top_p for s in settings], device=device)
        uniforms = torch.empty((rows, max(1, steps)))
        for row, setting in enumerate(settings):
            generator = torch.Generator().manual_seed(setting.seed)
            uniforms[row] = torch.rand(uniforms.shape[1], generator=generator)
        self._uniforms = uniforms.to(device)  # (B, S)

    def __call__(self, logits: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy rows take the argmax; the others draw from their nucleus with their own
        uniform of this step. Log-probabilities are of the full tempered distribution."""
        greedy = self._temps <= 0  # (B,)
        scale = torch.where(greedy, torch.ones_like(self._temps), self._temps)
        logprobs = torch.log_softmax(logits / scale[:, None], dim=-1)  # (B, V)
        token = logprobs.argmax(-1)
        if not bool(greedy.all()):
            probs = logprobs.exp()
            sorted_p, order = probs.sort(-1, descending=True)
            outside = sorted_p.cumsum(-1) - sorted_p > self._top_p[:, None]  # top 1 kept
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(outside, 0))
            cdf = probs.cumsum(-1)  # (B, V)
            u = self._uniforms[:, min(step, self._uniforms.shape[1] - 1)]  # (B,)
            drawn = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
            token = torch.where(greedy, token, drawn.clamp(max=probs.shape[-1] - 1))
        return token, logprobs.gather(1, token[:, None]).squeeze(1)
