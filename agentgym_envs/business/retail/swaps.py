"""Item swaps: modify the items of a pending order, or exchange delivered items.

Both replace items with other variants of the same products; the user names the
variant it wants by its options, and with a fallback complication its first choice is
out of stock. The payment method for the price difference follows the policy: a refund
goes only to an original payment method or a gift card, a charge to a gift card needs
its balance.
"""

from __future__ import annotations

from typing import Any

from agentgym_envs.business.retail.catalog import method_text, money
from agentgym_envs.business.retail.intents import (
    Part,
    RetailTaskDraft,
    Step,
    opts_of,
    propose,
    request_spec,
    take,
    write_spec,
)


def modify_items(ctx: RetailTaskDraft) -> Part | None:
    """Replace items of a pending order (not yet modified) with other variants."""
    return _swap(ctx, "modify_items")


def exchange(ctx: RetailTaskDraft) -> Part | None:
    """Exchange items of a delivered order for other variants."""
    return _swap(ctx, "exchange")


def _swap(ctx: RetailTaskDraft, family: str) -> Part | None:
    """Replace ``ctx.lines`` items of an order with other variants of their products."""
    modify = family == "modify_items"
    status = "pending" if modify else "delivered"
    for oid in ctx.orders(status, lambda o: not (modify and o["items_modified"])):
        plan = swap_plan(ctx, oid)
        if plan is None:
            continue
        old, new, _ = plan
        prices = dict(ctx.cat.orders[oid]["items"])
        delta = round(sum(ctx.cat.items[n]["price"] for n in new) - sum(prices[o] for o in old), 2)
        method = swap_method(ctx, oid, delta)
        if method is not None:
            ctx.charge(method, delta)
            return take(ctx, oid, _swap_part(ctx, family, oid, plan, method, delta))
    return None


def _swap_part(
    ctx: RetailTaskDraft,
    family: str,
    oid: str,
    plan: tuple[list[str], list[str], str | None],
    method: dict[str, Any],
    delta: float,
) -> Part:
    old, new, first = plan
    modify = family == "modify_items"
    tool = "modify_pending_order_items" if modify else "exchange_delivered_order_items"
    pm = method["id"]
    pm_text = "the original payment method" if pm in ctx.paid_with(oid) else method_text(method)
    asked = [first, *new[1:]] if first is not None else new  # the user's first choice
    change = " and ".join(
        f"the {ctx.name_of(o)} to the one with {opts_of(ctx, n)}"
        for o, n in zip(old, asked, strict=True)
    )
    verb = "change" if modify else "exchange"
    say = ctx.say(
        f"For order {oid}, I'd like to {verb} {change}. "
        f"Please use {pm_text} for any price difference.",
        f"Can you {verb} {change} in order {oid}? Use {pm_text} for the price difference.",
    )
    args = {"order_id": oid, "item_ids": old, "new_item_ids": asked, "payment_method_id": pm}
    write = write_spec(tool, args)
    request = request_spec(
        family,
        say,
        verbs=["modify", "change", "replace"] if modify else ["exchange"],
        write=write,
        mentions=[oid, *old, *asked, pm],
    )
    reads: list[Step] = [
        ("call", "get_product_details", {"product_id": ctx.cat.items[o]["product_id"]}) for o in old
    ]
    if first is not None:
        write = write_spec(tool, {**args, "new_item_ids": new})
        name, wanted = ctx.name_of(old[0]), opts_of(ctx, new[0])
        request["fallback"] = {
            "say": ctx.say(
                f"Oh, then I'll take the one with {wanted} instead.",
                f"In that case, the {name} with {wanted} is fine.",
            ),
            "write": write,
            "mentions": [oid, *old, *new, pm],
        }
        sold_out = f"I'm sorry, but the {name} with {opts_of(ctx, first)} (item {first})"
        reads.append(("say", f"{sold_out} is out of stock.", {}))
    swaps = "; ".join(
        f"item {o} ({ctx.name_of(o)}, {opts_of(ctx, o)}) to item {n} ({opts_of(ctx, n)})"
        for o, n in zip(old, new, strict=True)
    )
    cost = difference_text(delta, pm)
    if modify:
        proposal = f"I will modify order {oid}, changing {swaps}. {cost} Shall I proceed?"
        done = f"Order {oid} has been modified."
    else:
        proposal = f"I will exchange, in order {oid}, {swaps}. {cost} Shall I proceed?"
        done = f"The exchange for order {oid} has been requested."
    return Part(family, request, propose(oid, reads, proposal, write, done), [oid])


def swap_plan(ctx: RetailTaskDraft, oid: str) -> tuple[list[str], list[str], str | None] | None:
    """Old item ids, their new variants, and an out-of-stock first choice (fallback)."""
    options = []
    for item_id, _ in ctx.cat.orders[oid]["items"]:
        variants = ctx.cat.products[ctx.cat.items[item_id]["product_id"]]["variants"]
        stock = [v for v in variants if v != item_id and ctx.cat.items[v]["available"]]
        sold_out = [v for v in variants if v != item_id and not ctx.cat.items[v]["available"]]
        # a fallback needs a sold-out first choice (only one item is swapped then)
        if stock and (sold_out or not ctx.fallback):
            options.append((item_id, stock, sold_out))
    if len(options) < ctx.lines:
        return None
    chosen = [options[i] for i in sorted(ctx.rng.permutation(len(options))[: ctx.lines])]
    old = [c[0] for c in chosen]
    new = [ctx.pick(c[1]) for c in chosen]
    first = ctx.pick(chosen[0][2]) if ctx.fallback else None
    return old, new, first


def swap_method(ctx: RetailTaskDraft, oid: str, delta: float) -> dict[str, Any] | None:
    """A payment method the policy allows for this price difference (the original first)."""
    original = ctx.paid_with(oid)

    def allowed(m: dict[str, Any]) -> bool:
        gift = m["source"] == "gift_card"
        if delta < 0:
            return m["id"] in original or gift
        return ctx.affords(m, delta)

    choices = [m for m in ctx.user["methods"] if allowed(m)]
    if not choices:
        return None
    preferred = [m for m in choices if m["id"] in original]
    chosen: dict[str, Any] = (
        preferred[0] if preferred and ctx.rng.random() < 0.6 else ctx.pick(choices)
    )
    return chosen


def difference_text(delta: float, pm: str) -> str:
    """What happens to a price difference, for a proposal."""
    if delta > 0:
        return f"The price difference of {money(delta)} will be charged to {pm}."
    if delta < 0:
        return f"The price difference of {money(-delta)} will be refunded to {pm}."
    return f"There is no price difference (payment method {pm})."
