"""WebShop tasks: seeded templates over the shop's database, their goal predicates,
milestones and scripted oracle plans.

A task names a world seed (the shop's database) and a template with its parameters. The
goal and the milestones are SQL predicates over the episode's database (plus the answer
and the pages visited); success also needs no change outside what the template allows.
``train`` and ``test`` use the templates buy, address, cancel and fact on worlds 1-8
(cancel on worlds 1-40);
``ood`` uses templates never seen in training (compare, review) on world 9.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import Task
from agentgym_envs.web.site import build_world, open_world

TRAIN_WORLDS = (1, 2, 3, 4, 5, 6, 7, 8)
# a world has one to three pending orders: cancel tasks draw from more worlds, so the
# test split gets cancel tasks that train does not hold
CANCEL_WORLDS = tuple(range(1, 41))
OOD_WORLDS = (9,)


class Template(StrEnum):
    """What a task asks for. A task's ``spec["template"]`` holds the value (plain data);
    :func:`template_of` reads it back as a member."""

    BUY = "buy"  # order one product option, paid with a named method
    ADDRESS = "address"  # change fields of one address
    CANCEL = "cancel"  # cancel one pending order
    FACT = "fact"  # answer a question about one product
    COMPARE = "compare"  # answer a question comparing products (ood)
    REVIEW = "review"  # write a review of a product (ood)


TRAIN_TEMPLATES = (Template.BUY, Template.ADDRESS, Template.CANCEL, Template.FACT)
OOD_TEMPLATES = (Template.COMPARE, Template.REVIEW)
ANSWERED = frozenset({Template.FACT, Template.COMPARE})  # the goal is the agent's answer
TASK_COUNTS = {"train": 50, "test": 50, "ood": 50}  # per difficulty: 450 tasks
# The rows a task may change, per table: None (any row), or primary key -> the columns
# that may differ from the world's (None: any, as for a row the task inserts). Every
# other changed row, and every other changed column of an allowed row, is collateral.
Rows = dict[Any, frozenset[str] | None] | None
CITIES = ("Lisbon", "Oslo", "Kyoto", "Austin", "Nairobi", "Hobart", "Quebec", "Valparaiso")


@cache
def world_bytes(seed: int) -> bytes:
    """The shop database of a world seed (built once per process)."""
    return build_world(seed)


@cache
def _world(seed: int) -> sqlite3.Connection:
    return open_world(world_bytes(seed))


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def _rows(conn: sqlite3.Connection, sql: str, *args: Any) -> list[sqlite3.Row]:
    return conn.execute(sql, args).fetchall()


def template_of(spec: Mapping[str, Any]) -> Template:
    """A task spec's template. Raises ConfigError for an unknown one."""
    try:
        return Template(spec["template"])
    except (KeyError, ValueError):
        raise ConfigError(
            f"WebShop task spec has template {spec.get('template')!r}; expected one of "
            f"{[t.value for t in Template]}. Rebuild the task file with `agentgym tasks build`"
        ) from None


# -- generation --------------------------------------------------------------------------


def generate(seed: int, difficulty: str, split: str) -> Task | None:
    """One task from a seed, or None when the draw has no unambiguous answer."""
    if difficulty not in ("easy", "medium", "hard"):
        raise ConfigError(f"unknown difficulty {difficulty!r}; use easy, medium or hard")
    rng = random.Random(seed)
    templates = OOD_TEMPLATES if split == "ood" else TRAIN_TEMPLATES
    template = rng.choice(templates)
    worlds = CANCEL_WORLDS if template is Template.CANCEL else TRAIN_WORLDS
    world = rng.choice(OOD_WORLDS if split == "ood" else worlds)
    made = _GENERATORS[template](_world(world), rng, difficulty)
    if made is None:
        return None
    instruction, params = made
    spec = {"world": world, "template": template.value, **params}
    steps = {"easy": 20, "medium": 30, "hard": 40}[difficulty]
    return Task(
        id=f"webshop-{template.value}-{difficulty}-{split}-{seed}",
        split=split,
        difficulty=difficulty,
        instruction=instruction,
        seed=seed,
        spec=spec,
        solution=(),  # the oracle drives the live page (bids depend on it)
        max_steps=steps,
    )


def _product(conn: sqlite3.Connection, pid: int) -> sqlite3.Row:
    row: sqlite3.Row = conn.execute("SELECT * FROM products WHERE id = ?", (pid,)).fetchone()
    return row


def _gen_buy(conn: sqlite3.Connection, rng: random.Random, difficulty: str) -> Any:
    variants = _rows(
        conn,
        "SELECT v.*, p.name, p.category, p.brand, p.rating FROM variants v "
        "JOIN products p ON p.id = v.product_id WHERE v.stock > 0 ORDER BY v.id",
    )
    v = rng.choice(variants)
    payments = _rows(conn, "SELECT * FROM payment_methods ORDER BY id")
    usable = [
        p for p in payments if p["kind"] != "gift_card" or p["balance_cents"] >= v["price_cents"]
    ]
    pay = rng.choice(usable)
    option = f"{v['color']} / {v['size']}"
    if difficulty == "easy":
        what = f"the {v['name']} in {option}"
    else:
        same = [
            w
            for w in variants
            if w["category"] == v["category"]
            and w["color"] == v["color"]
            and w["price_cents"] <= v["price_cents"]
            and ((difficulty == "medium" and w["brand"] == v["brand"]) or difficulty == "hard")
            and (difficulty == "medium" or w["size"] == v["size"])
            and (difficulty == "medium" or w["rating"] >= v["rating"])
        ]
        if len(same) != 1:
            return None  # the constraints must pick exactly this variant
        bound = money(v["price_cents"])
        if difficulty == "medium":
            what = (
                f"a {v['color']} item from {v['brand']}'s {v['category']} costing at most {bound}"
            )
        else:
            what = (
                f"a {v['color']} {v['category'][:-1].lower()} in size {v['size']} costing at "
                f"most {bound} and rated at least {v['rating']:.1f}"
            )
    instruction = (
        f"Buy {what} (quantity 1), shipped to your default address and paid with "
        f"{pay['label']}. Place the order."
    )
    return instruction, {
        "product": v["product_id"],
        "variant": v["id"],
        "option": option,
        "payment": pay["id"],
        "payment_label": pay["label"],
    }


def _gen_address(conn: sqlite3.Connection, rng: random.Random, difficulty: str) -> Any:
    address = rng.choice(_rows(conn, "SELECT * FROM addresses ORDER BY id"))
    city = rng.choice([c for c in CITIES if c != address["city"]])
    zip_code = f"{rng.randrange(10000, 99999)}"
    if difficulty == "easy":
        change = {"city": city}
        text = f"change the city of your address '{address['line1']}' to {city}"
    elif difficulty == "medium":
        change = {"city": city, "zip": zip_code}
        text = (
            f"change the city of your address '{address['line1']}' to {city} and its postal "
            f"code to {zip_code}"
        )
    else:
        line1 = f"{rng.randrange(2, 999)} {rng.choice(('Harbor', 'Cedar', 'Mill', 'Summit'))} Road"
        change = {"line1": line1, "city": city, "zip": zip_code}
        text = (
            f"update your address '{address['line1']}': the street becomes {line1}, the city "
            f"{city} and the postal code {zip_code}"
        )
    return f"Please {text}. Change nothing else.", {"address": address["id"], "change": change}


def _gen_cancel(conn: sqlite3.Connection, rng: random.Random, difficulty: str) -> Any:
    pending = _rows(conn, "SELECT * FROM orders WHERE status = 'pending' ORDER BY id")
    order = rng.choice(pending)
    items = _rows(
        conn,
        "SELECT p.name FROM order_items i JOIN variants v ON v.id = i.variant_id "
        "JOIN products p ON p.id = v.product_id WHERE i.order_id = ? ORDER BY i.id",
        order["id"],
    )
    if difficulty == "easy":
        text = f"Cancel your order #{order['id']}."
    else:
        names = [r["name"] for r in items]
        others = _rows(
            conn,
            "SELECT DISTINCT o.id FROM orders o JOIN order_items i ON i.order_id = o.id "
            "JOIN variants v ON v.id = i.variant_id JOIN products p ON p.id = v.product_id "
            "WHERE o.status = 'pending' AND p.name = ?",
            names[0],
        )
        if len(others) != 1:
            return None
        text = f"Cancel your pending order that contains the {names[0]}."
        if difficulty == "hard":
            text += " Do not cancel any other order."
    return text, {"order": order["id"]}


def _gen_fact(conn: sqlite3.Connection, rng: random.Random, difficulty: str) -> Any:
    product = rng.choice(_rows(conn, "SELECT * FROM products ORDER BY id"))
    variants = _rows(conn, "SELECT * FROM variants WHERE product_id = ? ORDER BY id", product["id"])
    if difficulty == "easy":
        count = conn.execute(
            "SELECT COUNT(*) FROM reviews WHERE product_id = ?", (product["id"],)
        ).fetchone()[0]
        question, answer = f"How many reviews does the {product['name']} have?", str(count)
    elif difficulty == "medium":
        v = rng.choice(variants)
        question = f"What does the {product['name']} cost in {v['color']} / {v['size']}?"
        answer = money(v["price_cents"])
    else:
        stocked = [v for v in variants if v["stock"] > 0]
        if not stocked:
            return None
        cheapest = min(v["price_cents"] for v in stocked)
        question = (
            f"What is the lowest price of any in-stock option of the {product['name']}? "
            "Answer with the price."
        )
        answer = money(cheapest)
    return f"{question} Reply with answer(text).", {"product": product["id"], "answer": answer}


def _gen_compare(conn: sqlite3.Connection, rng: random.Random, difficulty: str) -> Any:
    category = rng.choice([r[0] for r in _rows(conn, "SELECT DISTINCT category FROM products")])
    pool = _rows(conn, "SELECT * FROM products WHERE category = ? ORDER BY id", category)
    a, b = rng.sample(list(pool), 2)
    if a["rating"] == b["rating"]:
        return None
    if difficulty == "easy":
        question, answer = "has the higher rating", max(a, b, key=lambda r: r["rating"])["name"]
    else:
        prices = {}
        for p in (a, b):
            prices[p["id"]] = conn.execute(
                "SELECT MIN(price_cents) FROM variants WHERE product_id = ?", (p["id"],)
            ).fetchone()[0]
        if prices[a["id"]] == prices[b["id"]]:
            return None
        question = "has the lower starting price (its cheapest option)"
        answer = min(a, b, key=lambda r: prices[r["id"]])["name"]
        if difficulty == "hard":
            question = "is cheaper at its cheapest option (in stock or not)"
    text = f"Which of these {question}: the {a['name']} or the {b['name']}? Answer with its name."
    return text, {"products": [a["id"], b["id"]], "answer": answer}


def _gen_review(conn: sqlite3.Connection, rng: random.Random, difficulty: str) -> Any:
    me = conn.execute("SELECT name FROM customer").fetchone()[0]
    bought = _rows(
        conn,
        "SELECT DISTINCT p.id, p.name FROM orders o JOIN order_items i ON i.order_id = o.id "
        "JOIN variants v ON v.id = i.variant_id JOIN products p ON p.id = v.product_id "
        "WHERE o.status = 'delivered' AND p.id NOT IN "
        "(SELECT product_id FROM reviews WHERE author = ?) ORDER BY p.id",
        me,
    )
    if not bought:
        return None
    product = rng.choice(bought)
    rating = rng.randint(1, 5)
    title = rng.choice(("Solid choice", "Not what I hoped", "Great value", "Would buy again"))
    body = rng.choice(("It arrived quickly.", "Works as described.", "The fit is a bit off."))
    text = f"Write a {rating}-star review titled '{title}' for the {product['name']} you received"
    text += " (any short text)." if difficulty == "easy" else f", with the text '{body}'."
    exact = difficulty != "easy"
    params = {"product": product["id"], "rating": rating, "title": title, "body": body}
    return text, {**params, "exact_body": exact}


_GENERATORS: dict[Template, Callable[[sqlite3.Connection, random.Random, str], Any]] = {
    Template.BUY: _gen_buy,
    Template.ADDRESS: _gen_address,
    Template.CANCEL: _gen_cancel,
    Template.FACT: _gen_fact,
    Template.COMPARE: _gen_compare,
    Template.REVIEW: _gen_review,
}


# -- grading -------------------------------------------------------------------------------


def changed_tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT DISTINCT tbl FROM _changes")}


def _pk(table: str) -> str:
    return "variant_id" if table == "cart_items" else "id"


def allowed_rows(conn: sqlite3.Connection, spec: Mapping[str, Any]) -> dict[str, Rows]:
    """The rows (and columns) the task may change; tables it does not name, none.

    address: the one address, only the fields the task names. cancel: the target
    order's status, its items' stock and its payment's gift card balance. buy: one new
    order (the first placed) with its items, their stock and its payment's balance, and
    the cart. review: new reviews of the product. fact, compare: the cart.
    """
    t = template_of(spec)
    world = _world(spec["world"])
    stock, balance = frozenset({"stock"}), frozenset({"balance_cents"})
    if t is Template.ADDRESS:
        return {"addresses": {spec["address"]: frozenset(spec["change"])}}
    if t is Template.CANCEL:
        order = world.execute("SELECT * FROM orders WHERE id = ?", (spec["order"],)).fetchone()
        items = _rows(world, "SELECT variant_id FROM order_items WHERE order_id = ?", order["id"])
        return {
            "orders": {order["id"]: frozenset({"status"})},
            "variants": {i["variant_id"]: stock for i in items},
            "payment_methods": {order["payment_id"]: balance},
        }
    if t is Template.BUY:
        rows: dict[str, Rows] = {"cart_items": None, "orders": {}, "order_items": {},
                                 "variants": {}, "payment_methods": {}}  # fmt: skip
        for oid in placed(conn, spec)[:1]:  # a second order is collateral
            order = _row(conn, "orders", oid)
            items = _rows(conn, "SELECT * FROM order_items WHERE order_id = ?", oid)
            rows["orders"] = {oid: None}
            rows["order_items"] = {i["id"]: None for i in items}
            rows["variants"] = {i["variant_id"]: stock for i in items}
            rows["payment_methods"] = {order["payment_id"]: balance} if order else {}
        return rows
    if t is Template.REVIEW:
        mine = _rows(conn, "SELECT id FROM reviews WHERE product_id = ?", spec["product"])
        return {"reviews": {r["id"]: None for r in mine if not _row(world, "reviews", r["id"])}}
    return {"cart_items": None}


def _changed(conn: sqlite3.Connection, table: str) -> list[Any]:
    return [
        r[0] for r in conn.execute("SELECT pk FROM _changes WHERE tbl = ? ORDER BY pk", (table,))
    ]


def _row(conn: sqlite3.Connection, table: str, pk: Any) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        f"SELECT * FROM {table} WHERE {_pk(table)} = ?", (pk,)
    ).fetchone()
    return row


def _differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    return {k for k in a if a[k] != b.get(k)}


def collateral(conn: sqlite3.Connection, spec: Mapping[str, Any]) -> set[str]:
    """What was changed that the task does not allow: a table name for a table it may
    not touch at all, ``table #pk`` for a row (or a column of one) it may not change."""
    allowed = allowed_rows(conn, spec)
    world = _world(spec["world"])
    damage: set[str] = set()
    for table, pk in conn.execute("SELECT tbl, pk FROM _changes ORDER BY tbl, pk").fetchall():
        if table not in allowed:
            damage.add(table)
            continue
        rows = allowed[table]
        if rows is None:
            continue
        if pk not in rows:
            damage.add(f"{table} #{pk}")
            continue
        columns = rows[pk]
        if columns is None:
            continue
        now, then = _row(conn, table, pk), _row(world, table, pk)
        if now is None or then is None or _differ(dict(now), dict(then)) - columns:
            damage.add(f"{table} #{pk}")
    return damage


def normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9.$]+", " ", text.lower()).strip().rstrip(".")


def answer_matches(given: str, expected: str) -> bool:
    a, b = normalise(given), normalise(expected)
    if a == b or a.lstrip("$") == b.lstrip("$"):
        return True
    return re.fullmatch(r"(the )?" + re.escape(b), a) is not None


def goal(conn: sqlite3.Connection, spec: Mapping[str, Any], answer: str | None) -> bool:
    """Whether the task's goal predicate holds (collateral damage checked separately)."""
    template = template_of(spec)
    if template in ANSWERED:
        return answer is not None and answer_matches(answer, spec["answer"])
    if template is Template.BUY:
        return bool(_new_orders(conn, spec))
    if template is Template.ADDRESS:
        row = conn.execute("SELECT * FROM addresses WHERE id = ?", (spec["address"],)).fetchone()
        return row is not None and all(row[k] == v for k, v in spec["change"].items())
    if template is Template.CANCEL:
        status = conn.execute("SELECT status FROM orders WHERE id = ?", (spec["order"],)).fetchone()
        return status is not None and status[0] == "cancelled"
    me = conn.execute("SELECT name FROM customer").fetchone()[0]
    rows = _rows(
        conn,
        "SELECT * FROM reviews WHERE product_id = ? AND author = ? AND rating = ? AND title = ?",
        spec["product"],
        me,
        spec["rating"],
        spec["title"],
    )
    return any(not spec["exact_body"] or r["body"].strip() == spec["body"] for r in rows)


def _new_orders(conn: sqlite3.Connection, spec: Mapping[str, Any]) -> list[int]:
    """Orders placed in the episode with exactly the right line, payment and address."""
    default = conn.execute("SELECT id FROM addresses WHERE is_default = 1").fetchone()
    out = []
    for oid in placed(conn, spec):
        row = _row(conn, "orders", oid)
        if row is None or row["status"] != "pending":
            continue
        items = _rows(conn, "SELECT variant_id, qty FROM order_items WHERE order_id = ?", row["id"])
        right = [(i["variant_id"], i["qty"]) for i in items] == [(spec["variant"], 1)]
        if (
            right
            and row["payment_id"] == spec["payment"]
            and default
            and row["address_id"] == default[0]
        ):
            out.append(row["id"])
    return out


def placed(conn: sqlite3.Connection, spec: Mapping[str, Any]) -> list[int]:
    """The ids of the orders placed in the episode (rows the world did not hold; an old
    order cancelled is not one), oldest first."""
    world = _world(spec["world"])
    return [pk for pk in _changed(conn, "orders") if _row(world, "orders", pk) is None]


def placed_orders(conn: sqlite3.Connection, spec: Mapping[str, Any]) -> int:
    """How many orders were placed in the episode."""
    return len(placed(conn, spec))


# What a buy task's instruction asks of the item, per difficulty (``_gen_buy``): easy
# names the product and option, medium a colour, brand, category and price bound, hard a
# colour, category, size, price bound and least rating; every one asks for quantity 1.
BUY_ATTRIBUTES = {
    "easy": ("product", "color", "size", "qty"),
    "medium": ("color", "brand", "category", "price", "qty"),
    "hard": ("color", "category", "size", "price", "rating", "qty"),
}
_ITEM = "v.color, v.size, v.price_cents, p.id AS product, p.brand, p.category, p.rating"
_CART_SQL = (
    f"SELECT c.qty, {_ITEM} FROM cart_items c JOIN variants v ON v.id = c.variant_id "
    "JOIN products p ON p.id = v.product_id"
)
_TARGET_SQL = (
    f"SELECT {_ITEM} FROM variants v JOIN products p ON p.id = v.product_id WHERE v.id = ?"
)


def cart_match(conn: sqlite3.Connection, spec: Mapping[str, Any], difficulty: str) -> float:
    """For a buy task: the share of the goal's attributes (``BUY_ATTRIBUTES``) that the
    best line of the cart matches, read from the episode's database (0 with an empty
    cart or for another template). The target variant is the only one matching them all
    (the generator keeps only such tasks), so 1 means exactly the goal's line."""
    if template_of(spec) is not Template.BUY:
        return 0.0
    target = _world(spec["world"]).execute(_TARGET_SQL, (spec["variant"],)).fetchone()
    wanted = BUY_ATTRIBUTES[difficulty]
    best = 0.0
    for line in conn.execute(_CART_SQL).fetchall():
        met = {
            "product": line["product"] == target["product"],
            "color": line["color"] == target["color"],
            "size": line["size"] == target["size"],
            "brand": line["brand"] == target["brand"],
            "category": line["category"] == target["category"],
            "price": line["price_cents"] <= target["price_cents"],
            "rating": line["rating"] >= target["rating"],
            "qty": line["qty"] == 1,
        }
        best = max(best, sum(met[a] for a in wanted) / len(wanted))
    return best


def _seen(prefix: str) -> Callable[[sqlite3.Connection, tuple[str, ...]], bool]:
    """A predicate: some page visited in the episode starts with ``prefix``."""

    def holds(conn: sqlite3.Connection, visited: tuple[str, ...]) -> bool:
        return any(v.startswith(prefix) for v in visited)

    return holds


@dataclass(frozen=True)
class Check:
    """A milestone predicate: (database, visited paths) -> bool."""

    id: str
    description: str
    holds: Callable[[sqlite3.Connection, tuple[str, ...]], bool]


def milestones(spec: Mapping[str, Any]) -> list[Check]:
    """The template's milestones: pages that had to be seen, rows that had to change."""
    t = template_of(spec)
    if t is Template.BUY:
        variant = spec["variant"]
        return [
            Check(
                "viewed_product", "opened the product's page", _seen(f"/product/{spec['product']}")
            ),
            Check(
                "cart_correct",
                "the right option is in the cart (or ordered)",
                lambda c, v: bool(
                    c.execute(
                        "SELECT 1 FROM cart_items WHERE variant_id = ?", (variant,)
                    ).fetchone()
                    or _new_orders(c, spec)
                ),
            ),
            Check("order_placed", "an order was placed", lambda c, v: placed_orders(c, spec) > 0),
        ]
    if t is Template.ADDRESS:
        return [
            Check("opened_addresses", "opened the address book", _seen("/account/addresses")),
            Check(
                "address_set", "the address holds the new values", lambda c, v: goal(c, spec, None)
            ),
        ]
    if t is Template.CANCEL:
        return [
            Check(
                "viewed_order", "opened the order's page", _seen(f"/account/orders/{spec['order']}")
            ),
            Check("order_cancelled", "the order is cancelled", lambda c, v: goal(c, spec, None)),
        ]
    if t is Template.REVIEW:
        return [
            Check(
                "viewed_product", "opened the product's page", _seen(f"/product/{spec['product']}")
            ),
            Check(
                "review_form", "opened the review form", _seen(f"/product/{spec['product']}/review")
            ),
        ]
    products = spec["products"] if t is Template.COMPARE else [spec["product"]]
    return [
        Check(f"viewed_product_{i + 1}", f"opened product {p}'s page", _seen(f"/product/{p}"))
        for i, p in enumerate(products)
    ]


# -- oracle plans ---------------------------------------------------------------------------


def plan(spec: Mapping[str, Any], find: Callable[[str, str], int]) -> Iterator[str]:
    """The oracle's actions; ``find(role, name)`` looks a bid up on the current page when
    the next action is asked for (after the previous one ran)."""
    t = template_of(spec)
    if t is Template.BUY:
        yield f'goto(path="/product/{spec["product"]}")'
        yield f'select(bid={find("combobox", "Option")}, option="{spec["option"]}")'
        yield f"click(bid={find('button', 'Add to cart')})"
        yield 'goto(path="/checkout")'
        yield f"check(bid={find('radio', spec['payment_label'])})"
        yield f"click(bid={find('button', 'Place order')})"
    elif t is Template.ADDRESS:
        yield f'goto(path="/account/addresses/{spec["address"]}/edit")'
        labels = {"line1": "Street address", "city": "City", "zip": "Postal code"}
        for field, value in spec["change"].items():
            yield f'fill(bid={find("textbox", labels[field])}, text="{value}")'
        yield f"click(bid={find('button', 'Save address')})"
    elif t is Template.CANCEL:
        yield f'goto(path="/account/orders/{spec["order"]}")'
        yield f"click(bid={find('button', 'Cancel order')})"
    elif t is Template.REVIEW:
        yield f'goto(path="/product/{spec["product"]}/review")'
        yield f'select(bid={find("combobox", "Rating")}, option="{spec["rating"]}")'
        yield f'fill(bid={find("textbox", "Title")}, text="{spec["title"]}")'
        yield f'fill(bid={find("textbox", "Review")}, text="{spec["body"]}")'
        yield f"click(bid={find('button', 'Submit review')})"
    else:
        for pid in spec["products"] if t is Template.COMPARE else [spec["product"]]:
            yield f'goto(path="/product/{pid}")'
        yield f'answer(text="{spec["answer"]}")'
