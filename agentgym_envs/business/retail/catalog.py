"""A read-only, in-memory view of a Retail world for the task generator.

The generator draws users, orders and variants many thousands of times; reading the
world once into plain dicts (cached per world seed and size) keeps a task draw in the
tens of microseconds, and the database is never touched while tasks are composed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from agentgym_envs.business.db import EpisodeDB, pristine, world_bytes
from agentgym_envs.business.retail.world import build_world

WORLD_TABLES = ("users", "payment_methods", "products", "items", "orders", "audit_log")


@dataclass(frozen=True)
class Catalog:
    """Plain data of one world.

    Attributes:
        users: user id -> row, plus ``methods`` (payment method rows) and ``orders``
            (order ids, sorted).
        orders: order id -> row with ``items`` ([(item id, price)]) and ``payments``
            decoded.
        items: item id -> row with ``options`` decoded.
        products: product id -> {"name", "variants": [item ids]}.
        methods: payment method id -> row.
        user_ids: every user id, sorted (draws index into it).
    """

    users: dict[str, dict[str, Any]]
    orders: dict[str, dict[str, Any]]
    items: dict[str, dict[str, Any]]
    products: dict[str, dict[str, Any]]
    methods: dict[str, dict[str, Any]]
    user_ids: tuple[str, ...]


@cache
def catalog(world_seed: int, size: int) -> Catalog:
    """The world of (seed, size) as plain data (built once per process)."""
    db = EpisodeDB()
    args = (build_world, WORLD_TABLES, world_seed, size)
    db.load(world_bytes(*args), pristine(*args))
    users = {u["id"]: {**u, "methods": [], "orders": []} for u in db.all("SELECT * FROM users")}
    methods = {}
    for m in db.all("SELECT * FROM payment_methods ORDER BY id"):
        users[m["user_id"]]["methods"].append(m)
        methods[m["id"]] = m
    orders = {}
    for o in db.all("SELECT * FROM orders ORDER BY id"):
        o["items"] = [tuple(line) for line in json.loads(o["items"])]
        o["payments"] = [tuple(p) for p in json.loads(o["payments"])]
        orders[o["id"]] = o
        users[o["user_id"]]["orders"].append(o["id"])
    items = {}
    for i in db.all("SELECT * FROM items ORDER BY id"):
        i["options"] = json.loads(i["options"])
        items[i["id"]] = i
    products = {
        p["id"]: {"name": p["name"], "variants": []} for p in db.all("SELECT * FROM products")
    }
    for item_id, item in items.items():
        products[item["product_id"]]["variants"].append(item_id)
    db.close()
    return Catalog(users, orders, items, products, methods, tuple(sorted(users)))


def options_text(options: dict[str, str]) -> str:
    """``{"color": "blue", "size": "L"}`` -> ``color blue, size L``."""
    return ", ".join(f"{k} {v}" for k, v in options.items())


def method_text(method: dict[str, Any]) -> str:
    """How a user names a payment method: ``my visa card ending in 1234``."""
    if method["source"] == "credit_card":
        return f"my {method['brand']} card ending in {method['last_four']}"
    if method["source"] == "paypal":
        return "my PayPal account"
    return "my gift card"


def address_text(address: dict[str, str]) -> str:
    """One line: ``12 Oak Avenue, Apt 5, Austin, TX 78701, USA`` (no address2 if empty)."""
    parts = [address["address1"], address["address2"], address["city"]]
    line = ", ".join(p for p in parts if p)
    return f"{line}, {address['state']} {address['zip']}, {address['country']}"


def money(amount: float) -> str:
    """``$12.50``."""
    return f"${amount:.2f}"
