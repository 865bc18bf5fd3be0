"""Forbidden requests: what the user asks that the policy does not allow.

The gold answer reads what it needs and refuses, citing the rule. A refusal is never a
task's only or first request, so a blanket refusal cannot pass a task.
"""

from __future__ import annotations

from agentgym_envs.business.retail.catalog import method_text
from agentgym_envs.business.retail.intents import (
    Part,
    RetailTaskDraft,
    Step,
    opts_of,
    request_spec,
    take,
    yours,
)
from agentgym_envs.business.retail.swaps import swap_plan


def refuse_refund_card(ctx: RetailTaskDraft) -> Part | None:
    """A refund to a card that did not pay the order (rule refund-destination)."""
    for oid in ctx.orders("delivered"):
        original = ctx.paid_with(oid)
        others = [
            m for m in ctx.user["methods"] if m["id"] not in original and m["source"] != "gift_card"
        ]
        if not others:
            continue
        method = ctx.pick(others)
        name = ctx.name_of(ctx.pick(ctx.cat.orders[oid]["items"])[0])
        desc = method_text(method)
        say = ctx.say(
            f"For order {oid}, I want to return the {name} and get the refund on {desc}.",
            f"I'd like to send back the {name} from order {oid}, with the money going to {desc}.",
        )
        refusal = (
            f"I'm sorry, but I cannot send a refund for order {oid} to {yours(desc)}: refunds go "
            "only to the order's original payment method or to an existing gift card (policy "
            "refund-destination)."
        )
        return refusal_part(ctx, oid, "refuse_refund_card", say, refusal)
    return None


def refuse_cancel_shipped(ctx: RetailTaskDraft) -> Part | None:
    """Cancel a processed or delivered order (the tools refuse: invalid_state)."""
    found = ctx.orders("delivered") + ctx.orders("processed")
    if not found:
        return None
    oid = found[0]
    status = ctx.cat.orders[oid]["status"]
    say = ctx.say(f"Please cancel order {oid} as well.", f"And I want to cancel order {oid}, too.")
    refusal = (
        f"I'm sorry, but I cannot cancel order {oid}: it is {status}, and only pending orders "
        "can be cancelled."
    )
    return refusal_part(ctx, oid, "refuse_cancel_shipped", say, refusal)


def refuse_other_order(ctx: RetailTaskDraft) -> Part | None:
    """Act on another user's order (rule own-data-only); the gold refuses unread."""
    other = ctx.cat.user_ids[int(ctx.rng.integers(len(ctx.cat.user_ids)))]
    if other == ctx.user["id"]:
        return None
    oid = ctx.pick(ctx.cat.users[other]["orders"])
    say = ctx.say(
        f"My friend asked me to cancel her order {oid}. Can you do that for me?",
        f"Also, could you cancel order {oid}? It's my roommate's, she asked me to.",
    )
    refusal = (
        f"I'm sorry, but I cannot act on order {oid}: I can only help with orders on your own "
        "account (policy own-data-only)."
    )
    request = request_spec("refuse_other_order", say)
    return Part("refuse", request, [("say", refusal, {})], [])


def refuse_modify_twice(ctx: RetailTaskDraft) -> Part | None:
    """Modify the items of an order modified once already (rule items-modified-once)."""
    for oid in ctx.orders("pending", lambda o: bool(o["items_modified"])):
        plan = swap_plan(RetailTaskDraft(ctx.cat, ctx.rng, ctx.user, ctx.persona), oid)
        if plan is None:
            continue
        (old,), (new,), _ = plan
        name, wanted = ctx.name_of(old), opts_of(ctx, new)
        say = ctx.say(
            f"For order {oid}, please change the {name} to the one with {wanted}.",
            f"Could you swap the {name} in order {oid} for the one with {wanted}?",
        )
        refusal = (
            f"I'm sorry, but I cannot modify the items of order {oid} again: they were already "
            "modified once, and the policy allows only one item modification per order (policy "
            "items-modified-once)."
        )
        return refusal_part(ctx, oid, "refuse_modify_twice", say, refusal)
    return None


def refusal_part(ctx: RetailTaskDraft, oid: str, intent: str, say: list[str], refusal: str) -> Part:
    """Read the order, then refuse."""
    steps: list[Step] = [("call", "get_order_details", {"order_id": oid}), ("say", refusal, {})]
    return take(ctx, oid, Part("refuse", request_spec(intent, say), steps, [oid]))
