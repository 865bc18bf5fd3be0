"""The trainer's policy network: a causal LM plus an optional value head, in one pass.

Loading models (specs, the SmolLM2 conversion cache, the tiny test model) lives in
:mod:`agentgym_envs.llm.models`, shared with policies and ``agentgym serve``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm.models import default_dtype

VALUE_HEAD_FILE = "value_head.pt"


class ValueHead(torch.nn.Module):
    """A linear map from the LM's last hidden state to a scalar value.

    Weight and bias start at zero so every value is 0 before training: the critic starts
    neutral instead of injecting random advantages into the first updates.
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Map hidden states (..., H) to values (...)."""
        hidden = hidden.to(self.linear.weight.dtype)
        return self.linear(hidden).squeeze(-1)  # type: ignore[no-any-return]


class PolicyModel(torch.nn.Module):
    """A causal LM plus an optional value head, evaluated in one pass.

    The LM's decoder runs once; its hidden states feed both the output embedding (logits)
    and the value head, so the critic costs no second forward pass.

    Args:
        lm: A causal LM whose logits are its output embedding applied to the decoder's
            last hidden state (Llama, Qwen, Mistral, ... ; not models that scale or cap
            logits afterwards).
        value_head: Whether to add a (float32, zero-initialised) value head.

    Raises:
        ConfigError: The LM post-processes its logits, so this shortcut would be wrong.
    """

    def __init__(self, lm: PreTrainedModel, value_head: bool = False) -> None:
        super().__init__()
        for attr in ("final_logit_softcapping", "logit_scale"):
            if getattr(lm.config, attr, None) not in (None, 1.0):
                raise ConfigError(
                    f"PolicyModel computes logits as output_embeddings(hidden) but "
                    f"{type(lm).__name__} sets config.{attr}={getattr(lm.config, attr)!r}. "
                    "Use a model without logit post-processing, or set it to None."
                )
        self.lm = lm
        self.value_head: ValueHead | None = None
        if value_head:
            device = lm.get_output_embeddings().weight.device
            self.value_head = ValueHead(int(lm.config.hidden_size)).to(device)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return ``(logits (B, T, V) float32, values (B, T) float32 or None)``.

        Args:
            input_ids: Token ids, (B, T).
            attention_mask: 1 for real tokens, 0 for padding, (B, T).
            position_ids: Positions of the tokens, (B, T); with left padding they
                start at 0 on each row's first real token.
        """
        decoder = self.lm.get_decoder()
        out = decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        )
        hidden = out.last_hidden_state  # (B, T, H)
        head = self.lm.get_output_embeddings()
        logits = head(hidden).float()  # (B, T, V)
        values = None
        if self.value_head is not None:
            values = self.value_head(hidden).float()  # (B, T)
        return logits, values

    def save(self, folder: str | Path, tokenizer: PreTrainedTokenizerBase | None = None) -> None:
        """Write the LM (``save_pretrained``), the value head and optionally the tokenizer.

        With the tokenizer saved too, the folder is a valid spec for
        :func:`agentgym_envs.llm.models.load_model`.
        """
        folder = Path(folder)
        self.lm.save_pretrained(str(folder))
        if self.value_head is not None:
            torch.save(self.value_head.state_dict(), folder / VALUE_HEAD_FILE)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(folder))

    @classmethod
    def load(
        cls,
        folder: str | Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> PolicyModel:
        """Load a folder written by :meth:`save`; it has a value head if one was saved.

        Args:
            folder: The folder.
            device: Where to put the model.
            dtype: LM parameter dtype; default float32 on CPU and bfloat16 on CUDA. The
                value head is always float32.
        """
        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"Expected a folder written by PolicyModel.save (with config.json), got "
                f"{str(folder)!r}."
            )
        dtype = dtype if dtype is not None else default_dtype(device)
        lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        lm = lm.to(device)  # type: ignore[arg-type]
        head_file = folder / VALUE_HEAD_FILE
        policy = cls(lm, value_head=head_file.is_file())
        if policy.value_head is not None:
            state: dict[str, Any] = torch.load(head_file, map_location=device, weights_only=True)
            policy.value_head.load_state_dict(state)
        return policy
