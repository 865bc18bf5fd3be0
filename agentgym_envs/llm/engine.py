"""A static-KV-cache decoder for Llama-family policies, with CUDA graphs on GPU.

Rollouts are generation-bound, and a generic ``generate`` spends most of each decode
step in Python and kernel launches. This engine runs the policy's own weights (the
same tensors the optimizer updates, so it never goes stale) through a fixed-shape
decode step:

* one preallocated K/V buffer per layer, ``(rows, kv_heads, max_len + 1, head_dim)``;
  a row belongs to one env slot, so an episode's previous turns stay cached and each
  turn computes only its new tokens (the cache is dropped when the weights change);
* each row writes its new K/V at its own positions and attends to positions ``<=`` its
  own; rows with nothing to do write to a scratch slot that no real token attends to;
* on CUDA the decode step over all rows is captured once per length bucket as a CUDA
  graph and replayed, so a step costs one launch.

Every row starts at position 0, so positions are plain indices and no row ever sees
another row's padding. It supports ``LlamaForCausalLM``
and models with the same block (no attention/MLP biases, SiLU MLP); :func:`supports`
says which, and the sampler falls back to the transformers forward otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from agentgym_envs.core.errors import ArgumentError, ConfigError

SUPPORTED = ("llama",)


def supports(lm: Any) -> bool:
    """True when :class:`StaticEngine` computes exactly what ``lm`` computes."""
    cfg = lm.config
    return (
        getattr(cfg, "model_type", None) in SUPPORTED
        and not getattr(cfg, "attention_bias", False)
        and not getattr(cfg, "mlp_bias", False)
        and getattr(cfg, "hidden_act", "silu") == "silu"
        and getattr(cfg, "pretraining_tp", 1) == 1
    )


def _bucket(n: int, minimum: int, maximum: int) -> int:
    size = minimum
    while size < n:
        size *= 2
    return min(size, maximum)


class StaticEngine:
    """Prefill and fixed-shape decode steps over a static KV cache.

    Args:
        lm: a Llama-family causal LM (see :func:`supports`).
        max_batch: rows the cache holds.
        max_len: positions a row may use (prompt plus generated tokens); the cache has
            one more, a scratch slot for padding rows and graph capture.
        cuda_graphs: capture decode steps as CUDA graphs (CUDA only).
        compute_dtype: dtype of attention and of the KV cache; default bf16 on CUDA (the
            trainer's autocast, see :mod:`agentgym_envs.llm.precision`), else the weights' dtype.
    """

    def __init__(
        self,
        lm: Any,
        *,
        max_batch: int,
        max_len: int,
        cuda_graphs: bool = True,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        if not supports(lm):
            raise ConfigError(
                f"StaticEngine supports plain Llama models (model_type {SUPPORTED}, no biases, "
                f"silu, pretraining_tp 1), got {type(lm).__name__}; generate with this model "
                "without the static engine"
            )
        cfg = lm.config
        self.lm = lm
        self.layers = lm.model.layers
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.eps = float(cfg.rms_norm_eps)
        self.max_batch, self.max_len = max_batch, max_len
        self.scratch = max_len  # one extra cache slot that no real token uses
        weight = lm.get_output_embeddings().weight
        self.device = weight.device
        default = torch.bfloat16 if self.device.type == "cuda" else weight.dtype
        self.dtype = compute_dtype or default
        shape = (max_batch, self.kv_heads, max_len + 1, self.head_dim)
        self.k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.v = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        # RoPE table, computed by the model's own rotary module (any rope scaling)
        positions = torch.arange(max_len + 1, device=self.device)[None]
        probe = torch.zeros(1, dtype=torch.float32, device=self.device)
        cos, sin = lm.model.rotary_emb(probe, positions)  # float32 tables
        self.cos, self.sin = cos[0], sin[0]  # (L, D)
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        self._graphs: dict[int, tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._watched = [
            lm.get_output_embeddings().weight,
            lm.model.embed_tokens.weight,
            self.layers[0].self_attn.q_proj.weight,
            self.layers[-1].mlp.down_proj.weight,
        ]
        self.reused_tokens = 0
        self.reset()

    # -- building blocks ---------------------------------------------------------------------

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x.to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _block(
        self,
        i: int,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        write: Any,
        keys: int,
        mask: torch.Tensor,
        rows: torch.Tensor | None,
    ) -> torch.Tensor:
        """One decoder layer on ``h`` (B, T, H); ``write(cache, new)`` stores K/V; ``rows``
        are the cache rows of ``h``'s rows (None: rows ``0..B-1``)."""
        layer = self.layers[i]
        att = layer.self_attn
        batch, steps, _ = h.shape
        x = self._norm(h, layer.input_layernorm.weight)
        q = F.linear(x, att.q_proj.weight).view(batch, steps, self.heads, self.head_dim)
        k = F.linear(x, att.k_proj.weight).view(batch, steps, self.kv_heads, self.head_dim)
        v = F.linear(x, att.v_proj.weight).view(batch, steps, self.kv_heads, self.head_dim)
        q = self._rotate(q.transpose(1, 2), cos, sin).to(self.dtype)  # (B, nh, T, D)
        k = self._rotate(k.transpose(1, 2), cos, sin).to(self.dtype)  # (B, nkv, T, D)
        write(self.k[i], k)
        write(self.v[i], v.transpose(1, 2).to(self.dtype))
        if rows is None:
            k_rows, v_rows = self.k[i][:batch, :, :keys], self.v[i][:batch, :, :keys]
        else:
            k_rows = self.k[i][:, :, :keys].index_select(0, rows)
            v_rows = self.v[i][:, :, :keys].index_select(0, rows)
        out = F.scaled_dot_product_attention(
            q,
            k_rows,
            v_rows,
            attn_mask=mask,
            enable_gqa=self.kv_heads != self.heads,
        )  # (B, nh, T, D)
        out = out.transpose(1, 2).reshape(batch, steps, self.heads * self.head_dim)
        out = (
            out.to(att.o_proj.weight.dtype)
            if not torch.is_autocast_enabled(out.device.type)
            else out
        )
        h = h + F.linear(out, att.o_proj.weight)
        mlp = layer.mlp
        x = self._norm(h, layer.post_attention_layernorm.weight)
        return h + F.linear(
            F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight),
            mlp.down_proj.weight,
        )

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        h = self._norm(h, self.lm.model.norm.weight)
        return F.linear(h, self.lm.get_output_embeddings().weight).float()

    # -- extend (prefill) and decode ----------------------------------------------------------

    def _forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        keys: int,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states of ``ids`` (R, W) placed at ``positions`` (R, W) of cache rows
        ``rows`` (R,) (None: every cache row, R = max_batch); each query attends to its
        row's positions ``<=`` its own. Rows and padding that should not touch the cache
        sit at the scratch position."""
        h = self.lm.model.embed_tokens(ids)  # (R, W, H)
        cos = self.cos[positions][:, None]  # (R, 1, W, D)
        sin = self.sin[positions][:, None]
        span = torch.arange(keys, device=self.device)
        mask = (span[None, None, :] <= positions[:, :, None])[:, None]  # (R, 1, W, K)
        where = rows if rows is not None else torch.arange(ids.shape[0], device=self.device)
        column = where[:, None]  # (R, 1)

        def write(cache: torch.Tensor, new: torch.Tensor) -> None:
            cache[column, :, positions] = new.transpose(1, 2)  # (R, W, kv, D)

        for i in range(len(self.layers)):
            h = self._block(i, h, cos, sin, write, keys, mask, rows)
        out: torch.Tensor = h
        return out

    def _weights_version(self) -> tuple[int, ...]:
        # in-place updates (optimizer steps, load_state_dict) bump these counters
        return tuple(int(p._version) for p in self._watched)

    def reset(self) -> None:
        """Forget every cached prefix (needed only after weights are replaced out of place)."""
        self.cached: list[list[int]] = [[] for _ in range(self.max_batch)]
        self._version = self._weights_version()

    @torch.no_grad()
    def extend(self, prompts: dict[int, Sequence[int]]) -> torch.Tensor:
        """Bring rows' caches up to ``prompts`` (row -> full token ids) and return every
        row's logits after its prompt, (R, V) (rows not given: unspecified).

        A row whose cache already holds a prefix of its prompt (the previous turns of the
        same episode, under the same weights) computes only the new tokens, so a
        multi-turn rollout costs its length once rather than once per turn.
        """
        if self._weights_version() != self._version:
            self.reset()
        starts: dict[int, int] = {}
        for row, prompt in prompts.items():
            if not 0 <= row < self.max_batch or not 0 < len(prompt) <= self.max_len:
                raise ArgumentError(
                    f"expected rows in [0, {self.max_batch}) and prompt lengths in "
                    f"[1, {self.max_len}], got row {row} with length {len(prompt)}; make the "
                    "engine with a larger max_batch or max_len"
                )
            cached = self.cached[row]
            n = 0
            limit = min(len(cached), len(prompt) - 1)  # recompute at least the last token
            while n < limit and cached[n] == prompt[n]:
                n += 1
            starts[row] = n
        # only the given rows are computed (a row with nothing to extend costs nothing)
        order = sorted(prompts)
        width = max(len(prompts[r]) - starts[r] for r in order)
        ids = torch.zeros((len(order), width), dtype=torch.long)
        positions = torch.full((len(order), width), self.scratch, dtype=torch.long)
        last = torch.zeros(len(order), dtype=torch.long)
        for j, row in enumerate(order):
            prompt = prompts[row]
            new = list(prompt[starts[row] :])
            ids[j, : len(new)] = torch.tensor(new)
            positions[j, : len(new)] = torch.arange(starts[row], len(prompt))
            last[j] = len(new) - 1
            self.cached[row] = list(prompt)
        self.reused_tokens += sum(starts.values())
        keys = _bucket(max(len(p) for p in prompts.values()), 128, self.max_len)
        rows = torch.tensor(order, device=self.device)
        h = self._forward(ids.to(self.device), positions.to(self.device), keys, rows)
        picked = self._logits(h[torch.arange(len(order), device=self.device), last.to(self.device)])
        out = torch.zeros(
            (self.max_batch, picked.shape[-1]), dtype=picked.dtype, device=self.device
        )
        out[rows] = picked
        return out

    def commit(self, row: int, ids: Sequence[int]) -> None:
        """Record tokens that decode steps wrote into ``row`` after its prompt."""
        self.cached[row].extend(ids)

    def _decode(self, ids: torch.Tensor, positions: torch.Tensor, keys: int) -> torch.Tensor:
        return self._logits(self._forward(ids[:, None], positions[:, None], keys)[:, 0])

    @torch.no_grad()
    def decode(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (R, V) after writing ``ids`` (R,) at ``positions`` (R,); rows that are not
        decoding pass the scratch position."""
        real = positions[positions != self.scratch]
        top = int(real.max()) if real.numel() else 0
        if top >= self.max_len:
            raise ArgumentError(
                f"expected positions below the cache length {self.max_len}, got {top}; "
                "make the engine with a larger max_len"
            )
        keys = _bucket(top + 1, 128, self.max_len)
        if not self.cuda_graphs:
            # without a captured graph, idle rows (finished episodes, rows done with
            # their turn) are skipped rather than computed at the scratch slot
            live = (positions != self.scratch).nonzero().flatten()
            if live.numel() == positions.numel():
                return self._decode(ids, positions, keys)
            vocab = self.lm.get_output_embeddings().weight.shape[0]
            out = torch.zeros((positions.numel(), vocab), dtype=torch.float32, device=self.device)
            if live.numel():
                h = self._forward(ids[live][:, None], positions[live][:, None], keys, live)
                out[live] = self._logits(h[:, 0])
            return out
        graph = self._graphs.get(keys)
        if graph is None:
            graph = self._graphs[keys] = self._capture(keys)
        g, static_ids, static_pos, static_out = graph
        static_ids.copy_(ids)
        static_pos.copy_(positions)
        g.replay()
        return static_out.clone()

    def _capture(self, keys: int) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        # warm-up and capture run real writes: aim them at the scratch slot, so capturing
        # in the middle of a generation leaves the live cache untouched
        rows = self.max_batch
        static_ids = torch.zeros(rows, dtype=torch.long, device=self.device)
        static_pos = torch.full((rows,), self.scratch, dtype=torch.long, device=self.device)
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up kernels and allocator outside the graph
                self._decode(static_ids, static_pos, keys)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self._decode(static_ids, static_pos, keys)
        return graph, static_ids, static_pos, static_out
