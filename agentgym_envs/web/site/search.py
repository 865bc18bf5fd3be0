"""Catalogue search: filters, ordering and pagination as one SQL query.

A product's price is its cheapest variant's price (the "from" price the site shows),
and both the price filters and the price orderings use it. Every word of the query
must occur (case-insensitively, as a substring) in the product's name, brand,
category or description. Relevance weighs where the words occur: name 3, brand 2,
category 2, description 1. Every ordering ends with the product id, so pages never
overlap or skip a product.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

SORTS = ("relevance", "price_asc", "price_desc", "rating")
SORT_LABELS = {
    "relevance": "Relevance",
    "price_asc": "Price: low to high",
    "price_desc": "Price: high to low",
    "rating": "Customer rating",
}
PAGE_SIZE = 10
MAX_TERMS = 8
_ORDER = {
    "relevance": "score DESC, rating DESC, id",
    "price_asc": "price, id",
    "price_desc": "price DESC, id",
    "rating": "rating DESC, id",
}
_FIELD_WEIGHTS = (("name", 3), ("brand", 2), ("category", 2), ("description", 1))


@dataclass(frozen=True)
class SearchQuery:
    """A validated search: prices in cents, ``category``/``brand`` empty for any."""

    q: str = ""
    category: str = ""
    brand: str = ""
    min_price: int | None = None
    max_price: int | None = None
    sort: str = "relevance"
    page: int = 1

    @property
    def terms(self) -> list[str]:
        """The lower-cased query words (at most :data:`MAX_TERMS`)."""
        return self.q.lower().split()[:MAX_TERMS]


@dataclass(frozen=True)
class ProductHit:
    """One product in a result list."""

    id: int
    name: str
    brand: str
    category: str
    rating: float
    price_cents: int  # the cheapest variant
    stock: int  # summed over variants


@dataclass(frozen=True)
class SearchResult:
    """One page of results and the total number of matches."""

    total: int
    hits: tuple[ProductHit, ...]
    page: int

    @property
    def pages(self) -> int:
        """The number of pages (at least 1, even for no matches)."""
        return max(1, math.ceil(self.total / PAGE_SIZE))


def search_products(conn: sqlite3.Connection, query: SearchQuery) -> SearchResult:
    """Run ``query`` and return its page of results."""
    where: list[str] = []
    args: list[object] = []
    score_parts: list[str] = []
    score_args: list[object] = []
    for term in query.terms:
        where.append(
            "(" + " OR ".join(f"instr(lower({f}), ?) > 0" for f, _ in _FIELD_WEIGHTS) + ")"
        )
        args += [term] * len(_FIELD_WEIGHTS)
        score_parts += [f"{w} * (instr(lower({f}), ?) > 0)" for f, w in _FIELD_WEIGHTS]
        score_args += [term] * len(_FIELD_WEIGHTS)
    for column, value in (("category", query.category), ("brand", query.brand)):
        if value:
            where.append(f"{column} = ?")
            args.append(value)
    if query.min_price is not None:
        where.append("price >= ?")
        args.append(query.min_price)
    if query.max_price is not None:
        where.append("price <= ?")
        args.append(query.max_price)
    condition = " AND ".join(where) or "1"
    score = " + ".join(score_parts) or "0"
    base = (
        "WITH priced AS (SELECT p.id, p.name, p.brand, p.category, p.description, "
        "p.rating, MIN(v.price_cents) AS price, SUM(v.stock) AS stock FROM products p "
        "JOIN variants v ON v.product_id = p.id GROUP BY p.id) "
    )
    total = conn.execute(f"{base}SELECT COUNT(*) FROM priced WHERE {condition}", args).fetchone()[0]
    rows = conn.execute(
        f"{base}SELECT id, name, brand, category, rating, price, stock, {score} AS score "
        f"FROM priced WHERE {condition} ORDER BY {_ORDER[query.sort]} LIMIT ? OFFSET ?",
        [*score_args, *args, PAGE_SIZE, (query.page - 1) * PAGE_SIZE],
    ).fetchall()
    hits = tuple(
        ProductHit(r[0], r[1], r[2], r[3], float(r[4]), int(r[5]), int(r[6])) for r in rows
    )
    return SearchResult(total=int(total), hits=hits, page=query.page)


def categories(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """Every category with its product count, alphabetically."""
    rows = conn.execute(
        "SELECT category, COUNT(*) FROM products GROUP BY category ORDER BY category"
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def brands(conn: sqlite3.Connection, category: str = "") -> list[str]:
    """Every brand (of ``category`` when given), alphabetically."""
    sql = "SELECT DISTINCT brand FROM products"
    rows = (
        conn.execute(f"{sql} WHERE category = ? ORDER BY brand", (category,))
        if category
        else conn.execute(f"{sql} ORDER BY brand")
    )
    return [str(r[0]) for r in rows]
