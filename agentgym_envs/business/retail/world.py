"""The Retail world: schema and deterministic generation of users, products and orders.

Everything is drawn from the ``rng`` the world builder gets, so a (seed, size) pair
always gives the same database byte for byte. The schema keeps the world small (about
1 MB for 300 users), because every concurrent episode holds its own copy: an order's
items and payment history are compact JSON columns rather than tables of their own.

Tables (graded unless noted):
    users: id (``ana_lopez_1234``), first_name, last_name, email, address fields.
    payment_methods: id (``credit_card_1234567``, ``paypal_...``, ``gift_card_...``),
        user_id, source, brand, last_four, balance (gift cards only).
    products: id (10 digits), name.
    items: id (10 digits, one variant of a product), product_id, options (JSON object),
        price, available (1 in stock, 0 out of stock).
    orders: id (``#W1234567``), user_id, status, shipping address fields, items (JSON
        ``[[item_id, price], ...]``), payments (JSON ``[[kind, payment_method_id,
        amount], ...]`` with kind ``payment`` or ``refund``), items_modified,
        cancel_reason, return_items, exchange_items.
    audit_log: one row per write (tracked, not graded).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import sqlite_utils

STATUSES = ("pending", "processed", "delivered", "cancelled")
STATUS_CUMULATIVE = (0.3, 0.45, 0.87, 1.0)  # weights 0.3, 0.15, 0.42, 0.13
CANCEL_REASONS = ("no longer needed", "ordered by mistake")

FIRST_NAMES = (
    "ana", "ben", "carla", "david", "elena", "farid", "grace", "hugo", "ines", "jamal",
    "kira", "liam", "maya", "noah", "olga", "pedro", "quinn", "rosa", "sami", "tara",
    "umar", "vera", "wei", "xena", "yusuf", "zoe", "aria", "bruno", "chloe", "dario",
    "emma", "felix", "gina", "hiro", "ivy", "jonas", "lena", "marco", "nina", "oscar",
)  # fmt: skip
LAST_NAMES = (
    "lopez", "smith", "nguyen", "garcia", "kim", "patel", "muller", "rossi", "silva",
    "cohen", "khan", "ito", "novak", "jones", "brown", "martin", "dubois", "santos",
    "wright", "walker", "young", "hall", "allen", "king", "scott", "green", "baker",
    "adams", "nelson", "hill", "moore", "clark", "lewis", "lee", "perez", "turner",
)  # fmt: skip
STREETS = (
    "Maple Street", "Oak Avenue", "Cedar Lane", "Pine Road", "Elm Drive", "Birch Way",
    "Lake View", "Hill Street", "Park Avenue", "River Road", "Sunset Boulevard",
    "Main Street", "Church Lane", "Mill Road", "Spring Street", "Forest Drive",
)  # fmt: skip
CITIES = (
    ("Austin", "TX", 787), ("Denver", "CO", 802), ("Seattle", "WA", 981),
    ("Boston", "MA", 21), ("Chicago", "IL", 606), ("Phoenix", "AZ", 850),
    ("Portland", "OR", 972), ("Atlanta", "GA", 303), ("Miami", "FL", 331),
    ("Columbus", "OH", 432), ("Nashville", "TN", 372), ("San Diego", "CA", 921),
)  # fmt: skip
CARD_BRANDS = ("visa", "mastercard", "amex", "discover")

# name, base price, option dimensions (values never contain commas)
CATALOG: tuple[tuple[str, float, dict[str, tuple[str, ...]]], ...] = (
    ("T-Shirt", 25.0, {"color": ("black", "white", "blue", "red"), "size": ("S", "M", "L", "XL")}),
    ("Running Shoes", 95.0, {"color": ("black", "white", "grey"), "size": ("8", "9", "10", "11")}),
    (
        "Water Bottle",
        18.0,
        {"capacity": ("500ml", "750ml", "1000ml"), "color": ("green", "blue", "black")},
    ),
    (
        "Desk Lamp",
        42.0,
        {"color": ("black", "white", "silver"), "power source": ("battery", "USB", "AC adapter")},
    ),
    ("Backpack", 70.0, {"color": ("black", "navy", "olive"), "capacity": ("20L", "30L", "40L")}),
    (
        "Wireless Earbuds",
        120.0,
        {"color": ("black", "white", "blue"), "battery life": ("6 hours", "8 hours")},
    ),
    (
        "Office Chair",
        240.0,
        {"material": ("mesh", "leather", "fabric"), "color": ("black", "grey")},
    ),
    (
        "Laptop",
        980.0,
        {
            "screen size": ("13-inch", "15-inch"),
            "processor": ("i5", "i7", "i9"),
            "storage": ("256GB", "512GB"),
        },
    ),
    (
        "Coffee Maker",
        85.0,
        {"capacity": ("4 cups", "8 cups", "12 cups"), "color": ("black", "stainless steel")},
    ),
    ("Yoga Mat", 30.0, {"thickness": ("4mm", "6mm", "8mm"), "color": ("purple", "green", "blue")}),
    (
        "Smart Watch",
        260.0,
        {"color": ("black", "silver", "gold"), "band": ("leather", "silicone", "metal")},
    ),
    ("Bluetooth Speaker", 65.0, {"color": ("black", "red", "blue"), "waterproof": ("yes", "no")}),
    ("Hiking Boots", 150.0, {"size": ("8", "9", "10", "11"), "material": ("leather", "synthetic")}),
    (
        "Mechanical Keyboard",
        110.0,
        {"switch type": ("linear", "tactile", "clicky"), "backlight": ("none", "white", "RGB")},
    ),
    (
        "Sunglasses",
        55.0,
        {"frame color": ("black", "brown", "gold"), "lens": ("polarized", "standard")},
    ),
    ("Rain Jacket", 130.0, {"size": ("S", "M", "L", "XL"), "color": ("yellow", "navy", "black")}),
    (
        "Headphones",
        180.0,
        {
            "type": ("over-ear", "on-ear"),
            "connectivity": ("wired", "wireless"),
            "color": ("black", "white"),
        },
    ),
    (
        "Tea Kettle",
        40.0,
        {"material": ("glass", "stainless steel", "ceramic"), "capacity": ("1L", "1.5L")},
    ),
    (
        "Skateboard",
        90.0,
        {"deck length": ("28 inch", "31 inch", "34 inch"), "design": ("plain", "graphic")},
    ),
    ("Digital Camera", 620.0, {"resolution": ("20MP", "24MP", "30MP"), "zoom": ("3x", "5x")}),
    (
        "Gaming Mouse",
        60.0,
        {
            "sensor": ("optical", "laser"),
            "color": ("black", "white"),
            "weight": ("light", "standard"),
        },
    ),
    (
        "Air Purifier",
        210.0,
        {"room size": ("small", "medium", "large"), "filter": ("HEPA", "carbon")},
    ),
    ("Cycling Helmet", 75.0, {"size": ("S", "M", "L"), "color": ("red", "white", "black")}),
    (
        "Electric Toothbrush",
        65.0,
        {"color": ("white", "pink", "black"), "battery type": ("rechargeable", "AA")},
    ),
    (
        "Wall Clock",
        35.0,
        {"style": ("modern", "vintage", "minimal"), "diameter": ("10 inch", "12 inch")},
    ),
    (
        "Tent",
        190.0,
        {"capacity": ("2-person", "4-person", "6-person"), "season": ("3-season", "4-season")},
    ),
)


def build_world(db: sqlite_utils.Database, rng: np.random.Generator, size: int) -> None:
    """Create and fill the Retail tables for ``size`` users, deterministically from ``rng``."""
    # per-row draws use a stdlib generator seeded from ``rng``: numpy's scalar draws cost
    # microseconds each, and the world is built on the first reset of every process
    draw = random.Random(int(rng.integers(2**63)))
    _create_tables(db)
    variants = _products(db, draw)
    ids = _UniqueIds(draw)
    users, methods, orders = [], [], []
    names_seen: set[tuple[str, str, str]] = set()
    for _ in range(size):
        user = _user(draw, ids, names_seen)
        users.append(user)
        own = list(_payment_methods(draw, ids, user["id"]))
        methods += own
        n_orders = draw.randint(3, 10)  # about 6.5 orders a user
        orders += [_order(draw, ids, user, own, variants) for _ in range(n_orders)]
    db.table("users").insert_all(users)
    db.table("payment_methods").insert_all(methods)
    # the largest table goes in with one executemany (sqlite-utils inspects every value)
    columns = list(orders[0])
    db.conn.executemany(
        f"INSERT INTO orders ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [tuple(o.values()) for o in orders],
    )
    db.table("audit_log").insert({"id": 0, "tool": "world", "order_id": "", "args": "{}"})
    # the columns the tools filter on
    db.table("users").create_index(["email"])
    db.table("users").create_index(["zip", "last_name", "first_name"])
    db.table("payment_methods").create_index(["user_id"])
    db.table("items").create_index(["product_id"])
    db.table("orders").create_index(["user_id"])
    db.conn.commit()  # executemany opened a transaction; VACUUM needs none
    db.conn.execute("VACUUM")


def _create_tables(db: sqlite_utils.Database) -> None:
    address = {"address1": str, "address2": str, "city": str, "state": str, "country": str}
    db.table("users").create(
        {"id": str, "first_name": str, "last_name": str, "email": str, **address, "zip": str},
        pk="id",
    )
    db.table("payment_methods").create(
        {
            "id": str,
            "user_id": str,
            "source": str,
            "brand": str,
            "last_four": str,
            "balance": float,
        },
        pk="id",
    )
    db.table("products").create({"id": str, "name": str}, pk="id")
    db.table("items").create(
        {"id": str, "product_id": str, "options": str, "price": float, "available": int},
        pk="id",
    )
    db.table("orders").create(
        {
            "id": str,
            "user_id": str,
            "status": str,
            **address,
            "zip": str,
            "items": str,
            "payments": str,
            "items_modified": int,
            "cancel_reason": str,
            "return_items": str,
            "exchange_items": str,
        },
        pk="id",
    )
    db.table("audit_log").create({"id": int, "tool": str, "order_id": str, "args": str}, pk="id")


class _UniqueIds:
    """Draws ids that never repeat within one world."""

    def __init__(self, draw: random.Random) -> None:
        self.draw_int = draw.randrange
        self.used: set[str] = set()

    def draw(self, template: str, low: int, high: int) -> str:
        while True:
            value = template.format(self.draw_int(low, high))
            if value not in self.used:
                self.used.add(value)
                return value


def _products(db: sqlite_utils.Database, draw: random.Random) -> list[list[dict[str, Any]]]:
    """Insert the catalog; returns the item rows of each product, in catalog order."""
    ids = _UniqueIds(draw)
    products, items = [], []
    variants: list[list[dict[str, Any]]] = []
    for name, base, dims in CATALOG:
        product_id = ids.draw("{}", 10**9, 10**10)
        products.append({"id": product_id, "name": name})
        combos = _combinations(dims)
        keep = draw.randint(min(4, len(combos)), min(10, len(combos)))
        chosen = sorted(draw.sample(range(len(combos)), keep))
        in_stock = [draw.random() < 0.75 for _ in range(keep)]
        for j in draw.sample(range(keep), 2):  # two variants always left in stock
            in_stock[j] = True
        variants.append([])
        for j, combo_index in enumerate(chosen):
            item = {
                "id": ids.draw("{}", 10**9, 10**10),
                "product_id": product_id,
                "options": json.dumps(combos[combo_index]),
                "price": round(base * draw.uniform(0.85, 1.2), 2),
                "available": int(in_stock[j]),
            }
            items.append(item)
            variants[-1].append(item)
    db.table("products").insert_all(products)
    db.table("items").insert_all(items)
    return variants


def _combinations(dims: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
    combos: list[dict[str, str]] = [{}]
    for key, values in dims.items():
        combos = [{**c, key: v} for c in combos for v in values]
    return combos


def _user(
    draw: random.Random, ids: _UniqueIds, names_seen: set[tuple[str, str, str]]
) -> dict[str, Any]:
    while True:
        first, last = draw.choice(FIRST_NAMES), draw.choice(LAST_NAMES)
        city, state, zip3 = draw.choice(CITIES)
        zip_code = f"{zip3 * 100 + draw.randrange(100):05d}"
        if (first, last, zip_code) not in names_seen:  # name + zip finds one user
            names_seen.add((first, last, zip_code))
            break
    user_id = ids.draw(f"{first}_{last}_{{}}", 1000, 10000)
    return {
        "id": user_id,
        "first_name": first.capitalize(),
        "last_name": last.capitalize(),
        "email": f"{first}.{last}{user_id[-4:]}@example.com",
        **_address(draw, city, state),
        "zip": zip_code,
    }


def _address(draw: random.Random, city: str, state: str) -> dict[str, str]:
    unit = draw.choice(("", "Apt {}", "Suite {}"))
    return {
        "address1": f"{draw.randint(1, 999)} {draw.choice(STREETS)}",
        "address2": unit.format(draw.randint(1, 899)),
        "city": city,
        "state": state,
        "country": "USA",
    }


def _payment_methods(
    draw: random.Random, ids: _UniqueIds, user_id: str
) -> Iterator[dict[str, Any]]:
    brands = draw.sample(CARD_BRANDS, draw.randint(0, 2))
    paypal = draw.random() < 0.45
    gift = draw.random() < 0.45
    if not brands and not paypal and not gift:
        brands = draw.sample(CARD_BRANDS, 1)
    for brand in brands:
        yield {
            "id": ids.draw("credit_card_{}", 10**6, 10**7),
            "user_id": user_id,
            "source": "credit_card",
            "brand": brand,
            "last_four": f"{draw.randrange(10000):04d}",
            "balance": None,
        }
    if paypal:
        yield {
            "id": ids.draw("paypal_{}", 10**6, 10**7),
            "user_id": user_id,
            "source": "paypal",
            "brand": None,
            "last_four": None,
            "balance": None,
        }
    if gift:
        yield {
            "id": ids.draw("gift_card_{}", 10**6, 10**7),
            "user_id": user_id,
            "source": "gift_card",
            "brand": None,
            "last_four": None,
            "balance": round(draw.uniform(0, 400), 2),
        }


def _order(
    draw: random.Random,
    ids: _UniqueIds,
    user: dict[str, Any],
    methods: list[dict[str, Any]],
    variants: list[list[dict[str, Any]]],
) -> dict[str, Any]:
    # written for speed (about 2,000 orders on the first reset of a process): random()
    # rather than randrange, and the two JSON columns formatted directly
    status = draw.choices(STATUSES, cum_weights=STATUS_CUMULATIVE)[0]
    # one item per product, so a product name names one line of the order
    lines = [o[int(draw.random() * len(o))] for o in draw.sample(variants, draw.randint(1, 4))]
    total = round(sum(item["price"] for item in lines), 2)
    method = methods[int(draw.random() * len(methods))]["id"]
    payments = f'[["payment", "{method}", {total!r}]'
    reason = None
    if status == "cancelled":
        payments += f', ["refund", "{method}", {total!r}]'
        reason = CANCEL_REASONS[int(draw.random() * len(CANCEL_REASONS))]
    return {
        "id": ids.draw("#W{}", 10**6, 10**7),
        "user_id": user["id"],
        "status": status,
        "address1": user["address1"],
        "address2": user["address2"],
        "city": user["city"],
        "state": user["state"],
        "country": user["country"],
        "zip": user["zip"],
        "items": "[" + ", ".join(f'["{i["id"]}", {i["price"]!r}]' for i in lines) + "]",
        "payments": payments + "]",
        # some pending orders already had their items modified once (policy: only once)
        "items_modified": int(status == "pending" and draw.random() < 0.2),
        "cancel_reason": reason,
        "return_items": None,
        "exchange_items": None,
    }
