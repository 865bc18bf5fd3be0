"""The Retail WRITE tools (a tool group): SQL that changes the episode's database.

Errors the agent caused are tool results, never exceptions: ``not_found`` (an unknown
id), ``invalid_state`` (the order's status does not allow the action), ``invalid_args``
(ids that do not fit the order), ``out_of_stock`` and ``insufficient_balance``. The
policy's rules are enforced before a write runs, by the gates of
:mod:`~agentgym_envs.business.retail.rules`. Every successful write also appends to
``audit_log``, which is tracked but not graded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentgym_envs.business.retail.reads import (
    ADDRESS_FIELDS,
    ITEM_IDS,
    METHOD_ID,
    ORDER_ID,
    TEXT,
    order_view,
)
from agentgym_envs.business.retail.rules import item_prices, net_paid, order_row
from agentgym_envs.business.retail.world import CANCEL_REASONS
from agentgym_envs.business.toolsets import ToolGroup, json_result
from agentgym_envs.core.tools import ToolKind, ToolResult, tool

WRITE_COST = 3.0


def _money(x: float) -> float:
    return round(x + 0.0, 2)


class RetailWriteTools(ToolGroup):
    """The Retail WRITE tools: cancel or modify pending orders, return or exchange
    delivered items (each idempotent with ``idempotency_key``)."""

    @tool(
        "Cancel a pending order; every payment is refunded to the method that paid it.",
        parameters={
            "order_id": ORDER_ID,
            "reason": {"type": "string", "enum": list(CANCEL_REASONS)},
        },
        kind=ToolKind.WRITE,
        cost=WRITE_COST,
        idempotent=True,
    )
    def cancel_pending_order(self, order_id: str, reason: str) -> ToolResult:
        order, error = self._order_in(order_id, "pending")
        if error is not None:
            return error
        paid = net_paid(order)
        for method, amount in paid.items():
            self._gift_card_add(method, amount)
        refunds: list[list[Any]] = [["refund", m, amount] for m, amount in paid.items()]
        self._save(order, status="cancelled", cancel_reason=reason, payments=refunds)
        return self._done("cancel_pending_order", order_id, {"reason": reason})

    @tool(
        "Change the shipping address of a pending order.",
        parameters={
            "order_id": ORDER_ID,
            "address1": TEXT,
            "address2": {**TEXT, "description": "apartment or suite; empty string if none"},
            "city": TEXT,
            "state": TEXT,
            "country": TEXT,
            "zip": TEXT,
        },
        kind=ToolKind.WRITE,
        cost=WRITE_COST,
        idempotent=True,
    )
    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> ToolResult:
        order, error = self._order_in(order_id, "pending")
        if error is not None:
            return error
        address = dict(zip_fields(address1, address2, city, state, country, zip))
        self._save(order, **address)  # type: ignore[arg-type]  # address fields only
        return self._done("modify_pending_order_address", order_id, address)

    @tool(
        "Replace items of a pending order with other variants of the same products (allowed "
        "once per order). The price difference is charged to, or refunded to, the payment "
        "method given.",
        parameters={
            "order_id": ORDER_ID,
            "item_ids": {**ITEM_IDS, "description": "item ids in the order to replace"},
            "new_item_ids": {**ITEM_IDS, "description": "the new item ids, in the same order"},
            "payment_method_id": METHOD_ID,
        },
        kind=ToolKind.WRITE,
        cost=WRITE_COST,
        idempotent=True,
    )
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> ToolResult:
        order, error = self._order_in(order_id, "pending")
        if error is not None:
            return error
        delta, error = self._swap(order, item_ids, new_item_ids, payment_method_id)
        if error is not None:
            return error
        swap = dict(zip(item_ids, new_item_ids, strict=True))
        prices = item_prices(self.db, new_item_ids)
        items = [
            [swap[i], prices[swap[i]]["price"]] if i in swap else [i, price]
            for i, price in order["items"]
        ]
        payments = self._settle(payment_method_id, delta)
        self._save(order, items=items, items_modified=1, payments=payments)
        args = {"item_ids": item_ids, "new_item_ids": new_item_ids, "pm": payment_method_id}
        return self._done("modify_pending_order_items", order_id, args)

    @tool(
        "Pay a pending order with another payment method of the user; the old one is refunded.",
        parameters={"order_id": ORDER_ID, "payment_method_id": METHOD_ID},
        kind=ToolKind.WRITE,
        cost=WRITE_COST,
        idempotent=True,
    )
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> ToolResult:
        order, error = self._order_in(order_id, "pending")
        if error is not None:
            return error
        if (error := self._method_missing(payment_method_id)) is not None:
            return error
        net = net_paid(order)
        if list(net) == [payment_method_id]:
            return ToolResult.failure(
                "invalid_args", f"Order {order_id} is already paid with {payment_method_id}."
            )
        total = _money(sum(net.values()))
        if (error := self._balance_short(payment_method_id, total)) is not None:
            return error
        entries: list[list[Any]] = [["refund", m, amount] for m, amount in net.items()]
        for _, method, amount in entries:
            self._gift_card_add(method, amount)
        entries.append(["payment", payment_method_id, total])
        self._gift_card_add(payment_method_id, -total)
        self._save(order, payments=entries)
        return self._done("modify_pending_order_payment", order_id, {"pm": payment_method_id})

    @tool(
        "Return items of a delivered order; their price is refunded to the payment method "
        "given (the original one or a gift card of the user).",
        parameters={
            "order_id": ORDER_ID,
            "item_ids": {**ITEM_IDS, "description": "item ids in the order to return"},
            "payment_method_id": METHOD_ID,
        },
        kind=ToolKind.WRITE,
        cost=WRITE_COST,
        idempotent=True,
    )
    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> ToolResult:
        order, error = self._order_in(order_id, "delivered")
        if error is not None:
            return error
        lines = dict(order["items"])
        if (error := self._lines_missing(order_id, lines, item_ids)) is not None:
            return error
        if (error := self._method_missing(payment_method_id)) is not None:
            return error
        refund = _money(sum(lines[i] for i in item_ids))
        self._gift_card_add(payment_method_id, refund)
        self._save(
            order,
            status="return requested",
            return_items=json.dumps(sorted(item_ids)),
            payments=[["refund", payment_method_id, refund]],
        )
        args = {"item_ids": item_ids, "pm": payment_method_id}
        return self._done("return_delivered_order_items", order_id, args)

    @tool(
        "Exchange items of a delivered order for other variants of the same products. The "
        "price difference is charged to, or refunded to, the payment method given.",
        parameters={
            "order_id": ORDER_ID,
            "item_ids": {**ITEM_IDS, "description": "item ids in the order to exchange"},
            "new_item_ids": {**ITEM_IDS, "description": "the new item ids, in the same order"},
            "payment_method_id": METHOD_ID,
        },
        kind=ToolKind.WRITE,
        cost=WRITE_COST,
        idempotent=True,
    )
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> ToolResult:
        order, error = self._order_in(order_id, "delivered")
        if error is not None:
            return error
        delta, error = self._swap(order, item_ids, new_item_ids, payment_method_id)
        if error is not None:
            return error
        pairs = sorted(zip(item_ids, new_item_ids, strict=True))
        self._save(
            order,
            status="exchange requested",
            exchange_items=json.dumps([list(p) for p in pairs]),
            payments=self._settle(payment_method_id, delta),
        )
        args = {"item_ids": item_ids, "new_item_ids": new_item_ids, "pm": payment_method_id}
        return self._done("exchange_delivered_order_items", order_id, args)

    # -- helpers ------------------------------------------------------------------------

    def _order_in(self, order_id: str, status: str) -> tuple[dict[str, Any], ToolResult | None]:
        order = order_row(self.db, order_id)
        if order is None:
            return {}, ToolResult.failure("not_found", f"No order with id {order_id!r}.")
        if order["status"] != status:
            return order, ToolResult.failure(
                "invalid_state",
                f"Order {order_id} is {order['status']}; this action needs a {status} order.",
            )
        return order, None

    def _lines_missing(
        self, order_id: str, lines: dict[str, float], item_ids: Sequence[str]
    ) -> ToolResult | None:
        if len(set(item_ids)) != len(item_ids):
            return ToolResult.failure("invalid_args", "item_ids must not repeat an item.")
        missing = [i for i in item_ids if i not in lines]
        if missing:
            return ToolResult.failure(
                "invalid_args", f"Items {missing} are not in order {order_id}."
            )
        return None

    def _method_missing(self, method_id: str) -> ToolResult | None:
        if self.db.one("SELECT id FROM payment_methods WHERE id = ?", (method_id,)) is None:
            return ToolResult.failure("not_found", f"No payment method {method_id!r}.")
        return None

    def _balance_short(self, method_id: str, amount: float) -> ToolResult | None:
        row = self.db.one(
            "SELECT balance FROM payment_methods WHERE id = ? AND source = 'gift_card'",
            (method_id,),
        )
        if row is not None and amount > 0 and row["balance"] < amount:
            return ToolResult.failure(
                "insufficient_balance",
                f"Gift card {method_id} has a balance of {row['balance']}, less than {amount}.",
            )
        return None

    def _swap(
        self, order: dict[str, Any], item_ids: list[str], new_ids: list[str], method: str
    ) -> tuple[float, ToolResult | None]:
        """Check an item replacement; returns the price difference (new minus old)."""
        lines = dict(order["items"])
        if (error := self._lines_missing(order["id"], lines, item_ids)) is not None:
            return 0.0, error
        if len(new_ids) != len(item_ids):
            return 0.0, ToolResult.failure(
                "invalid_args", "new_item_ids must have one new item per item in item_ids."
            )
        rows = item_prices(self.db, new_ids)
        unknown = [i for i in new_ids if i not in rows]
        if unknown:
            return 0.0, ToolResult.failure("not_found", f"No items with ids {unknown}.")
        same = [i for i, j in zip(item_ids, new_ids, strict=True) if i == j]
        if same:
            return 0.0, ToolResult.failure("invalid_args", f"Items {same} would not change.")
        sold_out = [i for i in new_ids if not rows[i]["available"]]
        if sold_out:
            return 0.0, ToolResult.failure("out_of_stock", f"Items {sold_out} are out of stock.")
        if (error := self._method_missing(method)) is not None:
            return 0.0, error
        delta = _money(sum(rows[i]["price"] for i in new_ids) - sum(lines[i] for i in item_ids))
        if (error := self._balance_short(method, delta)) is not None:
            return 0.0, error
        return delta, None

    def _settle(self, method: str, delta: float) -> list[list[Any]]:
        """Charge (delta > 0) or refund (delta < 0) a price difference."""
        if delta == 0:
            return []
        self._gift_card_add(method, -delta)
        return [["payment" if delta > 0 else "refund", method, abs(delta)]]

    def _gift_card_add(self, method_id: str, amount: float) -> None:
        self.db.write(
            "UPDATE payment_methods SET balance = round(balance + ?, 2) "
            "WHERE id = ? AND source = 'gift_card'",
            (amount, method_id),
        )

    def _save(
        self, order: dict[str, Any], payments: Sequence[list[Any]] = (), **fields: Any
    ) -> None:
        """Update the order's columns; ``payments`` are appended to its history."""
        if payments:
            fields["payments"] = json.dumps([*map(list, order["payments"]), *payments])
        if "items" in fields:
            fields["items"] = json.dumps(fields["items"])
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.db.write(f"UPDATE orders SET {sets} WHERE id = ?", (*fields.values(), order["id"]))

    def _done(self, tool_name: str, order_id: str, args: dict[str, Any]) -> ToolResult:
        self.db.write(
            "INSERT INTO audit_log (tool, order_id, args) VALUES (?, ?, ?)",
            (tool_name, order_id, json.dumps(args, sort_keys=True)),
        )
        return json_result(order_view(self.db, order_id))


def zip_fields(*values: str) -> list[tuple[str, str]]:
    """The address columns paired with their new values (stripped)."""
    return [(k, v.strip()) for k, v in zip(ADDRESS_FIELDS, values, strict=True)]
