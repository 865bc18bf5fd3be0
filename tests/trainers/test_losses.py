"""PPO-family losses checked by hand, plus the two trainer invariants: zero gradient on
non-agent tokens, and a loss that does not depend on the micro-batch split."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agentgym_trainers.algorithms import (
    STAT_KEYS,
    LossConfig,
    entropy_from_logits,
    kl_k3,
    masked_token_sum,
    policy_loss,
    step_loss,
    value_loss,
)


def ratio_logprobs(*ratios: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs with grad, old_logprobs) whose exp-difference is ``ratios``."""
    old = torch.full((1, len(ratios)), -1.0)
    logp = (old + torch.log(torch.tensor([ratios]))).requires_grad_()
    return logp, old


def test_ratio_one_is_plain_policy_gradient() -> None:
    logp, old = ratio_logprobs(1.0, 1.0, 1.0)
    adv = torch.tensor([[2.0, -1.0, 0.0]])
    loss, clipped = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28)
    assert not clipped.any()
    torch.testing.assert_close(loss, -adv)
    loss.sum().backward()
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, -adv)  # d(-A * ratio)/dlogp = -A * ratio


def test_clipping_by_hand() -> None:
    logp, old = ratio_logprobs(1.5, 0.5, 0.5)
    adv = torch.tensor([[2.0, 2.0, -1.0]])
    loss, clipped = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28)
    # token 0: A>0, ratio 1.5 > 1.28: max(-3, -2*1.28 = -2.56) -> clipped, -2.56
    # token 1: A>0, ratio 0.5: max(-1, -2*0.8 = -1.6) -> unclipped, -1
    # token 2: A<0, ratio 0.5: max(0.5, 0.8) -> clipped, 0.8
    torch.testing.assert_close(loss, torch.tensor([[-2.56, -1.0, 0.8]]))
    assert clipped.tolist() == [[True, False, True]]
    loss.sum().backward()
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.0, 0.0]]))


def test_asymmetric_bounds() -> None:
    logp, old = ratio_logprobs(1.25, 0.79)
    adv = torch.tensor([[1.0, -1.0]])
    _, clipped = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28)
    # 1.25 < 1.28 is inside the higher upper bound; 0.79 < 0.8 is below the lower one
    assert clipped.tolist() == [[False, True]]
    _, clipped = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.2)
    assert clipped.tolist() == [[True, True]]


def test_dual_clip_caps_negative_advantage_loss() -> None:
    logp, old = ratio_logprobs(10.0, 10.0)
    adv = torch.tensor([[-1.0, 1.0]])
    loss, _ = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(loss, torch.tensor([[10.0, -1.28]]))
    loss, _ = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    # A<0: min(max(10, 1.28), 3 * 1) = 3; A>0 untouched
    torch.testing.assert_close(loss, torch.tensor([[3.0, -1.28]]))
    loss.sum().backward()
    assert logp.grad is not None and logp.grad[0, 0].item() == 0.0


def test_is_weights_multiply_the_loss() -> None:
    logp, old = ratio_logprobs(1.0, 1.0)
    adv = torch.tensor([[1.0, 1.0]])
    w = torch.tensor([[0.5, 2.0]], requires_grad=True)
    loss, _ = policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.2, is_weights=w)
    torch.testing.assert_close(loss, torch.tensor([[-0.5, -2.0]]))
    loss.sum().backward()
    assert w.grad is None  # detached


def test_kl_k3_by_hand() -> None:
    logp = torch.tensor([0.0, -1.0, -2.0])
    ref = torch.tensor([0.5, -1.0, -3.0])
    # d = ref - logp = 0.5, 0, -1 -> exp(d) - d - 1
    want = torch.tensor([math.exp(0.5) - 1.5, 0.0, math.exp(-1.0) + 1 - 1])
    torch.testing.assert_close(kl_k3(logp, ref), want)
    assert kl_k3(logp, logp).tolist() == [0.0, 0.0, 0.0]


@given(st.lists(st.tuples(st.floats(-20, 0), st.floats(-20, 0)), min_size=1, max_size=20))
def test_kl_k3_is_never_negative(pairs: list[tuple[float, float]]) -> None:
    logp, ref = torch.tensor(pairs).T
    assert (kl_k3(logp, ref) >= 0).all()


def test_entropy_from_logits() -> None:
    torch.testing.assert_close(
        entropy_from_logits(torch.zeros(2, 4)), torch.full((2,), math.log(4))
    )
    logits = torch.tensor([[0.0, 0.0, -math.inf]], requires_grad=True)
    ent = entropy_from_logits(logits)
    torch.testing.assert_close(ent, torch.tensor([math.log(2)]))
    ent.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_value_loss_by_hand() -> None:
    v = torch.tensor([1.0, 1.0, 1.0])
    old = torch.tensor([0.5, 0.5, 0.9])
    ret = torch.tensor([2.0, 0.0, 2.0])
    # token 0: v moved 0.5 > 0.2 -> clipped value 0.7; max((1-2)^2 = 1, (0.7-2)^2 = 1.69)
    # token 1: clipped value 0.7; max((1-0)^2 = 1, 0.7^2 = 0.49) = 1
    # token 2: within the clip range: (1-2)^2 = 1
    torch.testing.assert_close(value_loss(v, old, ret, 0.2), torch.tensor([0.845, 0.5, 0.5]))
    torch.testing.assert_close(value_loss(v, old, ret, None), torch.tensor([0.5, 0.5, 0.5]))


def test_masked_token_sum_ignores_nan_outside_mask() -> None:
    x = torch.tensor([[1.0, math.nan, 2.0]])
    assert masked_token_sum(x, torch.tensor([[1.0, 0.0, 1.0]])).item() == 3.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("clip_low", 1.0),
        ("clip_low", -0.1),
        ("clip_high", -0.1),
        ("dual_clip", 1.0),
        ("kl_coef", -1.0),
        ("entropy_coef", -1.0),
        ("vf_coef", -1.0),
        ("vf_clip", 0.0),
        ("clip_high", math.nan),
    ],
)
def test_loss_config_validates(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        LossConfig(**{field: value})


# ---------------------------------------------------------------- step_loss

CFG = LossConfig(clip_low=0.2, clip_high=0.28, dual_clip=3.0, kl_coef=0.1, entropy_coef=0.01)


def test_step_loss_gradient_is_exactly_zero_on_masked_tokens() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0]], dtype=torch.bool)
    logp = torch.tensor(
        [[-1.0, -1.2, math.nan, math.inf], [-math.inf, -1.05, -1.15, math.nan]], requires_grad=True
    )
    values = torch.tensor(
        [[0.1, 0.2, math.nan, 0.0], [math.inf, 0.3, 0.4, 0.0]], requires_grad=True
    )
    entropy = torch.tensor(
        [[1.0, 1.0, math.nan, 1.0], [math.nan, 1.0, 1.0, 1.0]], requires_grad=True
    )
    nan_outside = torch.where(mask, torch.tensor(-1.1), torch.tensor(math.nan))
    loss, stats = step_loss(
        logprobs=logp,
        old_logprobs=nan_outside,
        advantages=torch.where(mask, torch.tensor(0.5), torch.tensor(math.inf)),
        mask=mask,
        n_tokens=4,
        config=CFG,
        ref_logprobs=nan_outside,
        entropy=entropy,
        values=values,
        old_values=torch.where(mask, torch.tensor(0.25), torch.tensor(math.nan)),
        returns=torch.where(mask, torch.tensor(1.0), torch.tensor(math.nan)),
        is_weights=torch.where(mask, torch.tensor(1.0), torch.tensor(math.nan)),
    )
    assert torch.isfinite(loss)
    loss.backward()
    for x in (logp, values, entropy):
        assert x.grad is not None
        assert (x.grad[~mask] == 0).all()
        assert torch.isfinite(x.grad).all()
        assert (x.grad[mask] != 0).all()  # nothing is clipped: real gradient
    assert set(stats) == set(STAT_KEYS)
    assert stats["tokens"].item() == 4.0
    assert all(torch.isfinite(v) and not v.requires_grad for v in stats.values())


def test_step_loss_stats_are_masked_sums() -> None:
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    logp, old = ratio_logprobs(1.0, 1.5, 1.0)
    adv = torch.tensor([[1.0, 1.0, 5.0]])
    loss, stats = step_loss(
        logprobs=logp, old_logprobs=old, advantages=adv, mask=mask, n_tokens=10.0, config=CFG
    )
    # pg: -1 (ratio 1) + -1.28 (ratio 1.5 clipped); the masked token is ignored
    torch.testing.assert_close(stats["pg_loss"], torch.tensor(-2.28))
    torch.testing.assert_close(loss, torch.tensor(-0.228))
    assert stats["clipped"].item() == 1.0
    torch.testing.assert_close(stats["ratio"], torch.tensor(2.5))
    assert stats["kl"].item() == 0.0 and stats["vf_loss"].item() == 0.0


def test_step_loss_needs_value_targets() -> None:
    v = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="returns"):
        step_loss(
            logprobs=v, old_logprobs=v, advantages=v, mask=v, n_tokens=1, config=CFG, values=v
        )
    with pytest.raises(ValueError, match="n_tokens"):
        step_loss(logprobs=v, old_logprobs=v, advantages=v, mask=v, n_tokens=0, config=CFG)


class TinyPolicy(torch.nn.Module):
    """Embedding -> linear logits plus a value head: shared parameters, so micro-batch
    gradients really are sums over batches."""

    def __init__(self, vocab: int = 11, dim: int = 6) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.value = torch.nn.Linear(dim, 1)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.emb(tokens)  # (B, T, D)
        logits = self.head(h)  # (B, T, V)
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)  # (B, T)
        return logp, entropy_from_logits(logits), self.value(h).squeeze(-1)


@pytest.mark.parametrize("n_micro", [1, 2, 4])
def test_micro_batch_split_does_not_change_the_gradient(n_micro: int) -> None:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = TinyPolicy().double()
    batch, steps = 4, 7
    tokens = torch.randint(0, 11, (batch, steps), generator=gen)
    mask = torch.rand(batch, steps, generator=gen, dtype=torch.float64) > 0.3
    with torch.no_grad():
        old_logp, _, old_values = model(tokens)
        old_logp = old_logp + 0.3 * torch.randn(batch, steps, generator=gen, dtype=torch.float64)
    data = {
        "old_logprobs": old_logp,
        "advantages": torch.randn(batch, steps, generator=gen, dtype=torch.float64),
        "mask": mask,
        "ref_logprobs": old_logp - 0.1,
        "old_values": old_values,
        "returns": torch.randn(batch, steps, generator=gen, dtype=torch.float64),
        "is_weights": torch.rand(batch, steps, generator=gen, dtype=torch.float64) + 0.5,
    }
    n_tokens = float(mask.sum())

    def grads(chunks: int) -> list[torch.Tensor]:
        model.zero_grad()
        size = batch // chunks
        for i in range(chunks):
            sl = slice(i * size, (i + 1) * size)
            logp, ent, values = model(tokens[sl])
            loss, _ = step_loss(
                logprobs=logp,
                entropy=ent,
                values=values,
                n_tokens=n_tokens,
                config=CFG,
                **{k: v[sl] for k, v in data.items()},
            )
            loss.backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    full, split = grads(1), grads(n_micro)
    assert len(full) == len(split) == 5
    for a, b in zip(full, split, strict=True):
        assert torch.allclose(a, b, rtol=1e-6)
