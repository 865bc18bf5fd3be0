"""The Retail task generator: compose requests into a user goal and its gold conversation.

Difficulty:
    easy: one request (a write or a question), the user knows their email.
    medium: two requests, or one with a complication (the user forgot their email, so
        the agent must find them by name and zip code; or the variant the user wants is
        out of stock and the user then names a fallback).
    hard: two or three requests with complications (forgotten email, fallback, an order
        named by a product instead of its id) and one forbidden request to refuse,
        never first (a blanket refusal must not pass).

Splits: train and test share world seed 0 and differ by task seed. ``ood`` uses world
seed 1, intent pairs that never occur together in train/test (``HELD_OUT``), swaps of
two items at once (train/test swap one), and renames and re-describes 2-4 tools.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from agentgym_envs.business.base import gold_changes
from agentgym_envs.business.retail.catalog import catalog
from agentgym_envs.business.retail.intents import (
    Part,
    RetailTaskDraft,
    Step,
    cancel,
    modify_address,
    modify_payment,
    question,
    return_items,
)
from agentgym_envs.business.retail.refusals import (
    refuse_cancel_shipped,
    refuse_modify_twice,
    refuse_other_order,
    refuse_refund_card,
)
from agentgym_envs.business.retail.swaps import exchange, modify_items
from agentgym_envs.core.tasks import Task

INSTRUCTION = "Help the user with their requests, following the Retail policy."
PERSONAS = ("polite", "terse", "chatty")
DEFAULT_USERS = 300
# Intent pairs that occur together only in ood tasks (train/test tasks never hold both).
HELD_OUT = (
    frozenset({"cancel", "exchange"}),
    frozenset({"modify_address", "return"}),
    frozenset({"modify_items", "modify_payment"}),
    frozenset({"question", "exchange"}),
)
Builder = Callable[[RetailTaskDraft], Part | None]
WRITES: dict[str, Builder] = {
    "cancel": cancel,
    "modify_address": modify_address,
    "modify_payment": modify_payment,
    "modify_items": modify_items,
    "return": return_items,
    "exchange": exchange,
}
QUESTIONS: dict[str, Builder] = {"question": question}
REFUSALS: dict[str, Builder] = {
    "refuse_refund_card": refuse_refund_card,
    "refuse_cancel_shipped": refuse_cancel_shipped,
    "refuse_other_order": refuse_other_order,
    "refuse_modify_twice": refuse_modify_twice,
}
SWAPS = ("modify_items", "exchange")
# the intents that may name their order by a product (RetailTaskDraft.ref)
BY_PRODUCT = ("cancel", "modify_address", "modify_payment", "question")
BUILDERS = {**WRITES, **QUESTIONS, **REFUSALS}
# ood tool names and paraphrased descriptions (canonical name -> (alias, description))
ALIASES = {
    "find_user_id_by_email": (
        "lookup_customer_by_email",
        "Look up a customer's id by email address; the customer found is authenticated.",
    ),
    "find_user_id_by_name_zip": (
        "lookup_customer_by_name_and_zip",
        "Look up a customer's id by first name, last name and postal code; the customer "
        "found is authenticated.",
    ),
    "get_user_details": (
        "fetch_customer_profile",
        "Fetch a customer's profile: name, email, address, saved payment methods, order ids.",
    ),
    "list_user_orders": ("list_customer_orders", "List every order of a customer and its state."),
    "get_order_details": (
        "fetch_order",
        "Fetch one order: its state, shipping address, line items and payment history.",
    ),
    "get_product_details": (
        "fetch_product",
        "Fetch a product with all of its variants, their prices and whether each is in stock.",
    ),
    "cancel_pending_order": (
        "void_pending_order",
        "Void an order that is still pending; each payment goes back to the method that made it.",
    ),
    "modify_pending_order_address": (
        "update_shipping_address",
        "Set a new delivery address on an order that is still pending.",
    ),
    "modify_pending_order_items": (
        "swap_pending_order_items",
        "Swap line items of a still-pending order for other variants of the same products "
        "(one swap per order); the price gap is charged or refunded on the given method.",
    ),
    "modify_pending_order_payment": (
        "change_order_payment_method",
        "Move the payment of a pending order to another of the customer's payment methods; "
        "the previous method gets its money back.",
    ),
    "return_delivered_order_items": (
        "request_item_return",
        "Start a return of line items of a delivered order and refund their price to the "
        "given payment method.",
    ),
    "exchange_delivered_order_items": (
        "request_item_exchange",
        "Start an exchange of delivered line items for other variants of the same products; "
        "the price gap is charged or refunded on the given method.",
    ),
}


def generate(
    cls: Any, seed: int, difficulty: str, split: str, world_size: int | None = None
) -> Task | None:
    """One Retail task, or None when the draw finds no user that fits its plan.

    Args:
        cls: the env class (its ``gold_changes`` replay computes the expected rows).
        seed: the task seed; everything is drawn from ``default_rng(seed)``.
        difficulty: ``easy``, ``medium`` or ``hard``.
        split: ``train``, ``test`` or ``ood``.
        world_size: users in the world (300 by default).
    """
    rng = np.random.default_rng(seed)
    world_seed = 1 if split == "ood" else 0
    size = world_size or DEFAULT_USERS
    cat = catalog(world_seed, size)
    plan, forgot, lines = _plan(rng, difficulty, split)
    persona = PERSONAS[int(rng.integers(len(PERSONAS)))]
    for _ in range(30):
        user = cat.users[cat.user_ids[int(rng.integers(len(cat.user_ids)))]]
        ctx = RetailTaskDraft(cat, rng, user, persona, lines=lines)
        parts = _build(ctx, plan)
        if parts is not None:
            break
    else:
        return None
    steps = _auth_steps(user, forgot)
    for part in parts:
        steps += part.steps
    names: dict[str, str] = {}
    described: dict[str, str] = {}
    if split == "ood":
        names, described = _renames(rng, steps)
    solution = render(steps, names)
    known = {
        "email": user["email"],
        "first_name": user["first_name"],
        "last_name": user["last_name"],
        "zip": user["zip"],
    }
    unknown = {"email": known.pop("email")} if forgot else {}
    spec: dict[str, Any] = {
        "world_seed": world_seed,
        "world_size": size,
        "user_id": user["id"],
        "targets": sorted({t for p in parts for t in p.targets}),
        "user": {
            "name": f"{user['first_name']} {user['last_name']}",
            "known": known,
            "unknown": unknown,
            "requests": [p.request for p in parts],
            "persona": persona,
        },
        "expected": {"digest": "", "rows": {}, "transfer": False},
    }
    if names:
        spec["tool_names"], spec["tool_descriptions"] = names, described
    task_id = f"retail-{difficulty}-{split}-{seed}"
    max_steps = 2 * len(solution) + 10
    draft = Task(task_id, split, difficulty, INSTRUCTION, seed, spec, solution, max_steps)
    env = cls(tasks=[draft], split=split, world_size=size)
    try:
        expected = gold_changes(env, draft, solution)
    finally:
        env.close()
    spec["expected"] = {**expected, "transfer": False}
    return replace(draft, spec=spec)


def _plan(
    rng: np.random.Generator, difficulty: str, split: str
) -> tuple[list[tuple[str, bool, bool]], bool, int]:
    """The requests (intent, fallback, by_product), whether the email is forgotten, and
    how many items a swap replaces."""
    ood = split == "ood"
    asks = (*WRITES, *QUESTIONS)
    if difficulty == "easy":
        if ood:  # a single request holds no pair: ood easy swaps two items at once
            return [(str(rng.choice(SWAPS)), False, False)], False, 2
        return [(str(rng.choice(asks)), False, False)], False, 1
    while True:
        if ood:
            intents = sorted(HELD_OUT[int(rng.integers(len(HELD_OUT)))])  # sets: fix an order
            rng.shuffle(intents)
        elif difficulty == "medium" and rng.random() < 0.5:
            intents = [str(rng.choice(asks))]
        else:
            intents = [
                str(a)
                for a in rng.choice(
                    asks, size=2 if difficulty == "medium" else int(rng.integers(1, 3))
                )
            ]
        if ood or not any(pair <= set(intents) for pair in HELD_OUT):
            break
    lines = 2 if ood and rng.random() < 0.5 else 1
    if difficulty == "medium":
        forgot = ood and rng.random() < 0.3
        if len(intents) == 1:  # one request: it carries a complication
            if intents[0] in SWAPS and rng.random() < 0.6:
                return [(intents[0], True, False)], False, 1
            forgot = True
        return [(i, False, False) for i in intents], forgot, lines
    # hard: complications and one refusal, never first
    forgot = bool(rng.random() < 0.5)
    plan = [
        (i, i in SWAPS and rng.random() < 0.6, i in BY_PRODUCT and rng.random() < 0.5)
        for i in intents
    ]
    if any(fb for _, fb, _ in plan):
        lines = 1
    if not any(fb for _, fb, _ in plan):  # naming an order by a product may not apply
        forgot = True
    refusal = str(rng.choice(list(REFUSALS)))
    plan.insert(int(rng.integers(1, len(plan) + 1)), (refusal, False, False))
    return plan, forgot, lines


def _build(ctx: RetailTaskDraft, plan: Sequence[tuple[str, bool, bool]]) -> list[Part] | None:
    parts = []
    for intent, fallback, by_product in plan:
        ctx.fallback, ctx.by_product = fallback, by_product
        part = BUILDERS[intent](ctx)
        if part is None:
            return None
        parts.append(part)
    return parts


def _auth_steps(user: Mapping[str, Any], forgot: bool) -> list[Step]:
    steps: list[Step] = [
        (
            "say",
            "I can help with that. First, could you please tell me the email address on your "
            "account?",
            {},
        )
    ]
    if forgot:
        steps += [
            (
                "say",
                "No problem. Could you please tell me your first name, last name and zip code "
                "instead?",
                {},
            ),
            (
                "call",
                "find_user_id_by_name_zip",
                {
                    "first_name": user["first_name"],
                    "last_name": user["last_name"],
                    "zip": user["zip"],
                },
            ),
        ]
    else:
        steps.append(("call", "find_user_id_by_email", {"email": user["email"]}))
    steps.append(("call", "get_user_details", {"user_id": user["id"]}))
    return steps


def _renames(
    rng: np.random.Generator, steps: Sequence[Step]
) -> tuple[dict[str, str], dict[str, str]]:
    """Rename 2-4 tools, at least two of them tools the gold conversation calls."""
    used = sorted({name for kind, name, _ in steps if kind != "say"})
    rest = sorted(set(ALIASES) - set(used))
    k = int(rng.integers(2, 5))
    chosen = [str(t) for t in rng.choice(used, size=min(len(used), max(2, k - 1)), replace=False)]
    if len(chosen) < k:
        chosen += [str(t) for t in rng.choice(rest, size=k - len(chosen), replace=False)]
    return {t: ALIASES[t][0] for t in chosen}, {t: ALIASES[t][1] for t in chosen}


def render(steps: Sequence[Step], names: Mapping[str, str]) -> tuple[str, ...]:
    """The gold action texts: calls with keyword arguments, writes with idempotency keys."""
    out = []
    writes = 0
    for kind, name, args in steps:
        if kind == "say":
            out.append(f"respond(message={json.dumps(name)})")
            continue
        call_args = dict(args)
        if kind == "write":
            writes += 1
            call_args["idempotency_key"] = f"w{writes}"
        text = ", ".join(f"{k}={json.dumps(v)}" for k, v in call_args.items())
        out.append(f"{names.get(name, name)}({text})")
    return tuple(out)
