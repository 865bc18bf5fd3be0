"""Per-slot KV-cache reuse: each turn of a conversation pays only for its new tokens.

A multi-turn episode re-sends its whole history every turn. Batched generation
recomputes that history for every row, which a GPU absorbs but a CPU does not: on two
cores SmolLM2-135M spends seconds per row re-reading a 500-token prompt to write 20
tokens. :class:`PrefixCacheGenerator` keeps, per env slot, the KV cache of the last
prompt plus reply; the next prompt of that slot shares its prefix (the history only
grows, and a new episode of the same env shares the system prompt), so the cache is
cropped to the common prefix and only the rest is fed. Rows are generated one at a
time (decoding is cheap at batch 1 on a CPU; re-reading prompts is not).

The ids are the prompt as rendered this turn (never re-tokenized from a cache); a
reply whose re-rendered tokens differ from the sampled ones just shortens the reused
prefix.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

_MIN_SHARED = 32  # copying another slot's cache pays off only for a real shared prefix
Picker = Callable[[torch.Tensor, int], int]  # (logits (V,), step) -> token id


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCacheGenerator:
    """Generates for one slot at a time, reusing the slot's cached prefix.

    Args:
        model: a transformers causal LM (``DynamicCache`` support).
        device: where the model lives.
        max_slots: caches kept (least recently used dropped first).
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, max_slots: int = 64) -> None:
        self.model = model
        self.device = device
        self.max_slots = max_slots
        self._slots: dict[int, tuple[list[int], Any]] = {}
        self.reused_tokens = 0  # prompt tokens served from a cache (a measure, for logs)
        self.fed_tokens = 0  # prompt tokens the model had to read
        self.shared_tokens = 0  # of the reused ones, copied from another slot's cache

    def forget(self, slot: int) -> None:
        self._slots.pop(slot, None)

    def clear(self) -> None:
        self._slots.clear()

    @torch.inference_mode()
    def generate(
        self, slot: int, ids: Sequence[int], max_new: int, eos_ids: set[int], pick: Picker
    ) -> list[int]:
        """Sample up to ``max_new`` tokens after ``ids`` (stops after an eos id)."""
        return self.generate_batch([slot], [ids], [max_new], eos_ids, [pick])[0]

    @torch.inference_mode()
    def generate_batch(
        self,
        slots: Sequence[int],
        prompts: Sequence[Sequence[int]],
        max_new: Sequence[int],
        eos_ids: set[int],
        picks: Sequence[Picker],
    ) -> list[list[int]]:
        """One reply per slot: each row reads only what its cache lacks, then rows of
        similar length decode together (one forward per token for the group: on a CPU a
        step costs about the same at batch 8 as at batch 1, since it is bound by reading
        the weights; but every row of a group is padded to its longest, and a 600-token
        game beside an 8,000-token web page would read and copy 13 times its own cache
        at every token, so :func:`length_groups` keeps such rows apart).

        The rows' caches have different lengths; the batch cache left-pads them with
        masked zeros and every row keeps its own position ids, so each row computes
        what it would alone.
        """
        with warnings.catch_warnings():
            # transformers 5.2x renames past_key_values to cache; older 5.x only know the
            # former, which still works
            warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
            prefilled = []
            for slot, ids in zip(slots, prompts, strict=True):
                prefilled.append(self._prefill(slot, ids))
                # visible at once, so the next rows can start from this prompt's prefix
                self._slots[slot] = (list(ids), prefilled[-1][0])
            caches = [c for c, _ in prefilled]
            outs: list[list[int]] = [[] for _ in caches]
            for group in length_groups([c.get_seq_length() for c in caches]):
                mine = [caches[i] for i in group]
                got = self._decode(
                    mine,
                    [prefilled[i][1] for i in group],
                    [max_new[i] for i in group],
                    eos_ids,
                    [picks[i] for i in group],
                )
                for i, cache, out in zip(group, mine, got, strict=True):
                    caches[i], outs[i] = cache, out
        for slot, ids, cache, out in zip(slots, prompts, caches, outs, strict=True):
            # the cache holds the prompt and every sampled token but the last
            self._slots[slot] = ([*ids, *out[:-1]], cache)
        while len(self._slots) > self.max_slots:
            self._slots.pop(next(iter(self._slots)))
        return outs

    def _prefill(self, slot: int, ids: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """The slot's cache extended to ``ids`` (cropped to the common prefix first) and
        the logits after the last prompt token."""
        from transformers import DynamicCache

        cached, cache = self._slots.pop(slot, ([], None))
        keep = min(common_prefix(cached, ids), len(ids) - 1)  # feed at least one token
        # a new episode shares its system prompt with every other slot of the same env:
        # start from the slot whose cache covers most of this prompt (copied, not shared)
        best, other = max(
            ((min(common_prefix(c, ids), len(ids) - 1), k) for k, (c, _) in self._slots.items()),
            default=(0, None),
        )
        if other is not None and best > keep + _MIN_SHARED:
            cache, keep = _copy_prefix(self._slots[other][1], best), best
            self.shared_tokens += best
        elif cache is None or keep <= 0:
            cache, keep = DynamicCache(), 0
        else:
            extra = cache.get_seq_length() - keep
            if extra > 0:  # transformers 5: a negative crop removes that many tokens
                cache.crop(-extra)
        self.reused_tokens += keep
        self.fed_tokens += len(ids) - keep
        feed = torch.tensor([list(ids[keep:])], device=self.device)  # (1, T)
        out = self.model(input_ids=feed, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return cache, out.logits[0, -1].float()  # (V,)

    def _decode(
        self,
        caches: list[Any],
        first: list[torch.Tensor],
        max_new: Sequence[int],
        eos_ids: set[int],
        picks: Sequence[Picker],
    ) -> list[list[int]]:
        """Decode all rows in lockstep; afterwards each row's cache is its own again."""
        from transformers import DynamicCache

        rows = len(caches)
        outs = [[picks[i](first[i], 0)] for i in range(rows)]
        live = [i for i in range(rows) if outs[i][-1] not in eos_ids and max_new[i] > 1]
        if not live:
            return outs
        lengths = [caches[i].get_seq_length() for i in live]
        width = max(lengths)
        layers = len(caches[live[0]].layers)
        batch: Any = DynamicCache()
        for layer in range(layers):
            keys = [caches[i].layers[layer].keys for i in live]  # each (1, H, L_i, D)
            values = [caches[i].layers[layer].values for i in live]
            batch.update(_left_pad(keys, width), _left_pad(values, width), layer)
        mask = torch.zeros((len(live), width), dtype=torch.long, device=self.device)  # (B, W)
        for row, length in enumerate(lengths):
            mask[row, width - length :] = 1
        fed = [0] * len(live)
        done = [False] * len(live)
        for step in range(1, max(max_new[i] for i in live)):
            tokens = torch.tensor([[outs[i][-1]] for i in live], device=self.device)  # (B, 1)
            positions = torch.tensor(
                [[lengths[r] + step - 1] for r in range(len(live))], device=self.device
            )
            mask = torch.cat(
                [mask, torch.ones((len(live), 1), dtype=mask.dtype, device=self.device)], dim=1
            )
            logits = (
                self.model(
                    input_ids=tokens,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=batch,
                    use_cache=True,
                    logits_to_keep=1,
                )
                .logits[:, -1]
                .float()
            )  # (B, V)
            for row, i in enumerate(live):
                if done[row]:
                    continue
                fed[row] += 1
                outs[i].append(picks[i](logits[row], step))
                done[row] = outs[i][-1] in eos_ids or len(outs[i]) >= max_new[i]
            if all(done):
                break
        # split the batch cache back into the rows' own caches (padding dropped)
        for row, i in enumerate(live):
            own: Any = DynamicCache()
            start, stop = width - lengths[row], width + fed[row]
            for layer in range(layers):
                k = batch.layers[layer].keys[row : row + 1, :, start:stop].clone()
                v = batch.layers[layer].values[row : row + 1, :, start:stop].clone()
                own.update(k, v, layer)
            caches[i] = own
        return outs


def length_groups(lengths: Sequence[int], slack: float = 1.5, floor: int = 512) -> list[list[int]]:
    """Indices of ``lengths`` in groups that decode together: sorted by length, a group
    takes rows while the longest stays within ``slack`` times its shortest (or
    ``floor`` tokens, below which padding costs little)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[i] <= max(lengths[groups[-1][0]] * slack, floor):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _copy_prefix(cache: Any, length: int) -> Any:
    """A new cache holding the first ``length`` positions of ``cache``."""
    from transformers import DynamicCache

    out: Any = DynamicCache()
    for i, layer in enumerate(cache.layers):
        out.update(layer.keys[:, :, :length].clone(), layer.values[:, :, :length].clone(), i)
    return out


def _left_pad(tensors: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Stack (1, H, L_i, D) tensors into (B, H, width, D), zeros on the left."""
    first = tensors[0]
    out = first.new_zeros((len(tensors), first.shape[1], width, first.shape[3]))
    for row, t in enumerate(tensors):
        out[row, :, width - t.shape[2] :] = t[0]
    return out
