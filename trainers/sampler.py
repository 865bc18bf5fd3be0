"""Batched sampling with a KV cache that keeps each token's sampler log-probability.

Prompts of different lengths are left-padded; position ids come from the attention mask
so a padded row sees exactly the positions it would see alone. The recorded
log-probability is ``log softmax(logits / temperature)`` of the sampled token -- the same
quantity the trainer recomputes -- so on the same weights the importance ratio is 1.
With ``top_p < 1`` the tokens are drawn from the nucleus but the recorded value is still
that of the full tempered distribution (the usual convention; the ratio then measures
the policy, not the nucleus).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym_envs.core.errors import ConfigError
from trainers import precision
from trainers.engine import StaticEngine


@dataclass
class Sample:
    """One generated continuation."""

    ids: list[int]
    logprobs: list[float]
    ended: bool  # ended with an end-of-turn token (else hit its token limit)


class Sampler:
    """Generates continuations for a batch of prompts.

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
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {top_p}")
        self.model = model
        self.eos_ids = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.pad_id = pad_id
        self.temperature = temperature
        self.top_p = top_p
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.tokens_generated = 0
        self.engine = engine
        # transformers renamed the cache argument (past_key_values -> cache) in 5.x
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def get_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        rows: Sequence[int] | None = None,
    ) -> list[Sample]:
        """Sample a continuation of each prompt, at most ``max_new[i]`` tokens each.

        ``rows[i]`` is the engine cache row of prompt ``i`` (the env slot, so the slot's
        earlier turns stay cached); default: batches of rows ``0, 1, ...``.
        """
        if len(prompts) != len(max_new) or (rows is not None and len(rows) != len(prompts)):
            raise ValueError("one max_new (and one row, if given) per prompt")
        if not prompts:
            return []
        with precision.compute(self.device):
            if self.engine is None:
                return self._sample(*self._hf_start(prompts), max_new)
            if rows is not None:
                return self._static(prompts, max_new, list(rows))
            size = self.engine.max_batch
            out: list[Sample] = []
            for start in range(0, len(prompts), size):
                part = prompts[start : start + size]
                out += self._static(part, max_new[start : start + size], list(range(len(part))))
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
        self, prompts: Sequence[Sequence[int]], max_new: Sequence[int], rows: list[int]
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

        samples = self._sample(logits, step, max_new)
        for row, sample in zip(rows, samples, strict=True):
            engine.commit(row, sample.ids[:-1])  # the last token was never fed back
        return samples

    def _sample(self, logits: torch.Tensor, step: Any, max_new: Sequence[int]) -> list[Sample]:
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
            token, logp = self._pick(logits)
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

    def _pick(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
