"""The Retail READ tools (a tool group): lookups that authenticate the user, record views.

An unknown id is the tool error ``not_found`` (an observation, never an exception).
"""

from __future__ import annotations

import json
from typing import Any

from agentgym_envs.business.db import EpisodeDB
from agentgym_envs.business.retail.rules import order_row
from agentgym_envs.business.toolsets import ToolGroup, json_result
from agentgym_envs.core.tools import ToolResult, tool

ORDER_ID = {"type": "string", "maxLength": 40, "description": "the order id, like '#W1234567'"}
USER_ID = {"type": "string", "maxLength": 80, "description": "the user id, like 'ana_lopez_1234'"}
METHOD_ID = {
    "type": "string",
    "maxLength": 60,
    "description": "a payment method id of the user, like 'credit_card_1234567' or "
    "'gift_card_1234567'",
}
ITEM_IDS = {
    "type": "array",
    "items": {"type": "string", "maxLength": 20},
    "minItems": 1,
    "maxItems": 10,
}
TEXT = {"type": "string", "maxLength": 120}
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")


class RetailReadTools(ToolGroup):
    """The Retail READ tools: finding the user (which authenticates them) and views of
    profiles, orders and products."""

    @tool(
        "Find the user id from an email address; this authenticates the user.",
        parameters={"email": {"type": "string", "maxLength": 200}},
    )
    def find_user_id_by_email(self, email: str) -> ToolResult:
        row = self.db.one("SELECT id FROM users WHERE email = ?", (email.strip().lower(),))
        if row is None:
            return ToolResult.failure("not_found", f"No user has the email {email!r}.")
        self.env.authenticate(row["id"])
        return ToolResult(row["id"])

    @tool(
        "Find the user id from first name, last name and zip code; this authenticates the user.",
        parameters={"first_name": TEXT, "last_name": TEXT, "zip": TEXT},
    )
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> ToolResult:
        row = self.db.one(
            "SELECT id FROM users WHERE zip = ? AND lower(first_name) = ? AND lower(last_name) = ?",
            (zip.strip(), first_name.strip().lower(), last_name.strip().lower()),
        )
        if row is None:
            return ToolResult.failure(
                "not_found", f"No user named {first_name} {last_name} with zip code {zip}."
            )
        self.env.authenticate(row["id"])
        return ToolResult(row["id"])

    @tool(
        "Get a user's profile: name, email, address, payment methods and order ids.",
        parameters={"user_id": USER_ID},
    )
    def get_user_details(self, user_id: str) -> ToolResult:
        user = self.db.one("SELECT * FROM users WHERE id = ?", (user_id,))
        if user is None:
            return ToolResult.failure("not_found", f"No user with id {user_id!r}.")
        methods = self.db.all(
            "SELECT id, source, brand, last_four, balance FROM payment_methods "
            "WHERE user_id = ? ORDER BY id",
            (user_id,),
        )
        orders = self.db.all("SELECT id FROM orders WHERE user_id = ? ORDER BY id", (user_id,))
        return json_result(
            {
                "user_id": user_id,
                "name": {"first_name": user["first_name"], "last_name": user["last_name"]},
                "email": user["email"],
                "address": {k: user[k] for k in ADDRESS_FIELDS},
                "payment_methods": [{k: v for k, v in m.items() if v is not None} for m in methods],
                "orders": [o["id"] for o in orders],
            }
        )

    @tool("List a user's orders with their status.", parameters={"user_id": USER_ID})
    def list_user_orders(self, user_id: str) -> ToolResult:
        if self.db.one("SELECT id FROM users WHERE id = ?", (user_id,)) is None:
            return ToolResult.failure("not_found", f"No user with id {user_id!r}.")
        rows = self.db.all(
            "SELECT id, status FROM orders WHERE user_id = ? ORDER BY id", (user_id,)
        )
        return json_result([{"order_id": r["id"], "status": r["status"]} for r in rows])

    @tool(
        "Get an order: status, shipping address, items (item id, product, options, price) "
        "and payment history.",
        parameters={"order_id": ORDER_ID},
    )
    def get_order_details(self, order_id: str) -> ToolResult:
        view = order_view(self.db, order_id)
        if view is None:
            return ToolResult.failure("not_found", f"No order with id {order_id!r}.")
        return json_result(view)

    @tool(
        "Get a product: its name and every variant (item id, options, price, availability).",
        parameters={"product_id": {"type": "string", "maxLength": 20}},
    )
    def get_product_details(self, product_id: str) -> ToolResult:
        product = self.db.one("SELECT name FROM products WHERE id = ?", (product_id,))
        if product is None:
            return ToolResult.failure("not_found", f"No product with id {product_id!r}.")
        variants = self.db.all(
            "SELECT id, options, price, available FROM items WHERE product_id = ? ORDER BY id",
            (product_id,),
        )
        return json_result(
            {
                "product_id": product_id,
                "name": product["name"],
                "variants": [
                    {
                        "item_id": v["id"],
                        "options": json.loads(v["options"]),
                        "price": v["price"],
                        "available": bool(v["available"]),
                    }
                    for v in variants
                ],
            }
        )


def order_view(db: EpisodeDB, order_id: str) -> dict[str, Any] | None:
    """The order as the agent sees it (items joined with the catalog)."""
    order = order_row(db, order_id)
    if order is None:
        return None
    ids = [i for i, _ in order["items"]]
    marks = ",".join("?" * len(ids))
    catalog = {
        r["id"]: r
        for r in db.all(
            "SELECT i.id, i.product_id, i.options, p.name FROM items i "
            f"JOIN products p ON p.id = i.product_id WHERE i.id IN ({marks})",
            tuple(ids),
        )
    }
    view: dict[str, Any] = {
        "order_id": order_id,
        "user_id": order["user_id"],
        "status": order["status"],
        "address": {k: order[k] for k in ADDRESS_FIELDS},
        "items": [
            {
                "item_id": i,
                "product_id": catalog[i]["product_id"],
                "name": catalog[i]["name"],
                "options": json.loads(catalog[i]["options"]),
                "price": price,
            }
            for i, price in order["items"]
        ],
        "payment_history": [
            {"transaction_type": k, "payment_method_id": m, "amount": a}
            for k, m, a in order["payments"]
        ],
        "items_modified": bool(order["items_modified"]),
    }
    for key in ("cancel_reason", "return_items", "exchange_items"):
        if order[key] is not None:
            view[key] = order[key] if key == "cancel_reason" else json.loads(order[key])
    return view
