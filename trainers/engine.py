"""A static-KV-cache decoder for Llama-family policies, with CUDA graphs on GPU.

Rollouts are generation-bound, and a generic ``generate`` spends most of each decode
step in Python and kernel launches. This engine runs the policy's own weights (the
same tensors the optimizer updates, so it never goes stale) through a fixed-shape
decode step:

* one preallocated K/V buffer per layer, ``(B, kv_heads, max_len, head_dim)``;
* each row writes its new K/V at its own position, and attends to positions ``<=`` it;
* on CUDA the decode step is captured once per (batch bucket, length bucket) as a CUDA
  graph and replayed, so a step costs one launch.

Prompts are right-padded: every row starts at position 0, so positions are plain
indices and no row ever sees another row's padding. It supports ``LlamaForCausalLM``
and models with the same block (no attention/MLP biases, SiLU MLP); :func:`supports`
says which, and the sampler falls back to the transformers forward otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

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
            trainer's autocast, see :mod:`trainers.precision`), else the weights' dtype.
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
            raise ValueError(f"StaticEngine does not support {type(lm).__name__}")
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
        self._graphs: dict[
            tuple[int, int], tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]
        ] = {}

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
    ) -> torch.Tensor:
        """One decoder layer on ``h`` (B, T, H); ``write(cache, new)`` stores K/V."""
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
        out = F.scaled_dot_product_attention(
            q,
            self.k[i][:batch, :, :keys],
            self.v[i][:batch, :, :keys],
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

    # -- prefill and decode ------------------------------------------------------------------

    @torch.no_grad()
    def prefill(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Fill the cache with right-padded prompts; logits of each prompt's last token."""
        batch, width = len(prompts), max(len(p) for p in prompts)
        if batch > self.max_batch or width > self.max_len:
            raise ValueError(f"batch {batch} x length {width} exceeds the engine's cache")
        ids = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = torch.tensor(list(prompt))
        ids = ids.to(self.device)
        h = self.lm.model.embed_tokens(ids)
        cos, sin = self.cos[:width][None, None], self.sin[:width][None, None]
        causal = torch.ones((width, width), dtype=torch.bool, device=self.device).tril()

        def write(cache: torch.Tensor, new: torch.Tensor) -> None:
            cache[:batch, :, :width] = new

        for i in range(len(self.layers)):
            h = self._block(i, h, cos, sin, write, width, causal)
        lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        last = h[torch.arange(batch, device=self.device), lengths - 1]  # (B, H)
        return self._logits(last)

    def _decode(self, ids: torch.Tensor, positions: torch.Tensor, keys: int) -> torch.Tensor:
        """One token per row at ``positions`` (B,); attends to cache positions ``<=`` it."""
        batch = ids.shape[0]
        h = self.lm.model.embed_tokens(ids[:, None])  # (B, 1, H)
        cos = self.cos[positions][:, None, None]  # (B, 1, 1, D)
        sin = self.sin[positions][:, None, None]
        span = torch.arange(keys, device=self.device)
        mask = (span[None, :] <= positions[:, None])[:, None, None]  # (B, 1, 1, K)
        rows = torch.arange(batch, device=self.device)

        def write(cache: torch.Tensor, new: torch.Tensor) -> None:
            cache[rows, :, positions] = new[:, :, 0]

        for i in range(len(self.layers)):
            h = self._block(i, h, cos, sin, write, keys, mask)
        return self._logits(h[:, 0])

    @torch.no_grad()
    def decode(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (B, V) after appending ``ids`` (B,) at ``positions`` (B,)."""
        batch = ids.shape[0]
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} is past the cache ({self.max_len})")
        keys = _bucket(int(positions.max()) + 1, 128, self.max_len)
        if not self.cuda_graphs:
            return self._decode(ids, positions, keys)
        rows = _bucket(batch, 8, self.max_batch)
        graph = self._graphs.get((rows, keys))
        if graph is None:
            graph = self._graphs[(rows, keys)] = self._capture(rows, keys)
        g, static_ids, static_pos, static_out = graph
        static_ids.zero_()
        static_pos.fill_(self.scratch)  # padding rows write to the scratch slot only
        static_ids[:batch] = ids
        static_pos[:batch] = positions
        g.replay()
        return static_out[:batch].clone()

    def _capture(
        self, rows: int, keys: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        # warm-up and capture run real writes: aim them at the scratch slot, so capturing
        # in the middle of a generation leaves the live cache untouched
        static_ids = torch.zeros(rows, dtype=torch.long, device=self.device)
        static_pos = torch.full((rows,), self.scratch, dtype=torch.long, device=self.device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up kernels and allocator outside the graph
                self._decode(static_ids, static_pos, keys)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self._decode(static_ids, static_pos, keys)
        return graph, static_ids, static_pos, static_out
