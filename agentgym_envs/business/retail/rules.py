"""The Retail policy: its domain rules, the gates that enforce them, and order helpers.

Order states are checked by the tools themselves (the error ``invalid_state``); the
rules below are enforced by gates before a write runs, so a broken rule stops the
episode (or blocks the call with ``rule_mode="block"``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_envs.business.policy import Rule, RuleGate
from agentgym_envs.core.tools import ToolCall

ITEMS_MODIFIED_ONCE = Rule(
    "items-modified-once",
    "one item modification per order",
    "The items of a pending order can be modified only once: when an order shows "
    "items_modified = true, refuse any further item modification.",
)
REFUND_DESTINATION = Rule(
    "refund-destination",
    "refunds to the original payment method or a gift card",
    "Money refunded to the user (a return, or a price difference in the user's favour on "
    "an exchange or item modification) goes only to a payment method the order was paid "
    "with or to one of the user's existing gift cards.",
)
SAME_PRODUCT = Rule(
    "same-product",
    "exchanges keep the product",
    "An exchange or item modification replaces an item only with another variant of the "
    "same product (for example another color or size), never with a different product.",
)
OWN_PAYMENT_METHOD = Rule(
    "own-payment-method",
    "the user's own payment methods",
    "Every payment method used for a charge or a refund must belong to the authenticated user.",
)

ITEM_TOOLS = ("modify_pending_order_items", "exchange_delivered_order_items")


def order_row(db: Any, order_id: Any) -> dict[str, Any] | None:
    """The order's row with its JSON columns decoded, or None."""
    if not isinstance(order_id, str):
        return None
    row: dict[str, Any] | None = db.one("SELECT * FROM orders WHERE id = ?", (order_id,))
    if row is None:
        return None
    row["items"] = [tuple(line) for line in json.loads(row["items"])]
    row["payments"] = [tuple(entry) for entry in json.loads(row["payments"])]
    return row


def paid_with(order: Mapping[str, Any]) -> list[str]:
    """The payment methods an order was paid with, in order of first payment."""
    out: list[str] = []
    for kind, method, _ in order["payments"]:
        if kind == "payment" and method not in out:
            out.append(method)
    return out


def net_paid(order: Mapping[str, Any]) -> dict[str, float]:
    """What each payment method has paid, net of refunds (only the positive balances)."""
    net: dict[str, float] = {}
    for kind, method, amount in order["payments"]:
        net[method] = net.get(method, 0.0) + (amount if kind == "payment" else -amount)
    return {m: round(v, 2) for m, v in net.items() if round(v, 2) > 0}


def item_prices(db: Any, item_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Catalog rows (id, product_id, price, available, options) of the given item ids."""
    if not item_ids:
        return {}
    marks = ",".join("?" * len(item_ids))
    rows = db.all(f"SELECT * FROM items WHERE id IN ({marks})", tuple(item_ids))
    return {r["id"]: r for r in rows}


def price_difference(
    order: Mapping[str, Any], item_ids: Sequence[str], new_prices: Sequence[float]
) -> float | None:
    """New items' prices minus the replaced lines' prices (None: the ids do not fit)."""
    paid: dict[str, float] = dict(order["items"])
    if len(item_ids) != len(new_prices) or any(i not in paid for i in item_ids):
        return None
    return round(sum(new_prices) - sum(paid[i] for i in item_ids), 2)


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


class ItemsModifiedOnceGate(RuleGate):
    """Refuses a second item modification of a pending order."""

    rule = ITEMS_MODIFIED_ONCE

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if call.name != "modify_pending_order_items":
            return None
        order_id = call.arguments.get("order_id")
        row = env.db.one("SELECT items_modified FROM orders WHERE id = ?", (str(order_id),))
        if row is not None and row["items_modified"]:
            return f"the items of order {order_id} were already modified once"
        return None


class SameProductGate(RuleGate):
    """Refuses replacing an item with a variant of another product."""

    rule = SAME_PRODUCT

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if call.name not in ITEM_TOOLS:
            return None
        old = _str_list(call.arguments.get("item_ids"))
        new = _str_list(call.arguments.get("new_item_ids"))
        rows = item_prices(env.db, [*old, *new])
        for a, b in zip(old, new, strict=False):
            if a in rows and b in rows and rows[a]["product_id"] != rows[b]["product_id"]:
                return f"item {b} is not a variant of the same product as item {a}"
        return None


class RefundDestinationGate(RuleGate):
    """Refuses a refund to a method that neither paid the order nor is the user's gift card."""

    rule = REFUND_DESTINATION

    def broken(self, env: Any, call: ToolCall) -> str | None:
        tool = call.name
        if tool != "return_delivered_order_items" and tool not in ITEM_TOOLS:
            return None
        method = call.arguments.get("payment_method_id")
        order = order_row(env.db, call.arguments.get("order_id"))
        if order is None or not isinstance(method, str):
            return None
        if tool in ITEM_TOOLS:  # a refund only when the new items cost less
            old = _str_list(call.arguments.get("item_ids"))
            new_ids = _str_list(call.arguments.get("new_item_ids"))
            rows = item_prices(env.db, new_ids)
            if any(i not in rows for i in new_ids):
                return None  # the tool reports the unknown ids
            delta = price_difference(order, old, [rows[i]["price"] for i in new_ids])
            if delta is None or delta >= 0:
                return None
        if method in paid_with(order):
            return None
        gift = env.db.one(
            "SELECT user_id FROM payment_methods WHERE id = ? AND source = 'gift_card'",
            (method,),
        )
        if gift is not None and gift["user_id"] == order["user_id"]:
            return None
        return (
            f"a refund for order {order['id']} may not go to {method}: it is neither a "
            "payment method of the order nor one of the user's gift cards"
        )


class OwnPaymentMethodGate(RuleGate):
    """Refuses a payment method of another user."""

    rule = OWN_PAYMENT_METHOD

    def broken(self, env: Any, call: ToolCall) -> str | None:
        method = call.arguments.get("payment_method_id")
        if not isinstance(method, str):
            return None
        row = env.db.one("SELECT user_id FROM payment_methods WHERE id = ?", (method,))
        if row is not None and row["user_id"] != env.auth_user:
            return f"payment method {method} does not belong to user {env.auth_user}"
        return None


DOMAIN_RULES = (ITEMS_MODIFIED_ONCE, SAME_PRODUCT, REFUND_DESTINATION, OWN_PAYMENT_METHOD)
DOMAIN_GATES: tuple[type[RuleGate], ...] = (
    OwnPaymentMethodGate,
    ItemsModifiedOnceGate,
    SameProductGate,
    RefundDestinationGate,
)
