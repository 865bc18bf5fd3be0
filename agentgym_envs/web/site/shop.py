"""Shopping pages: home, search, product (with add to cart) and writing a review."""

from __future__ import annotations

import sqlite3
from enum import Enum

from agentgym_envs.web.site import layout as ui
from agentgym_envs.web.site import request as rq
from agentgym_envs.web.site.request import Request, Response
from agentgym_envs.web.site.search import (
    PAGE_SIZE,
    SORT_LABELS,
    SORTS,
    ProductHit,
    SearchQuery,
    brands,
    categories,
    search_products,
)
from agentgym_envs.web.site.world import advance_clock, current_time

FEATURED = 8
MAX_QTY = 99
RATING_WORDS = {5: "Excellent", 4: "Good", 3: "Average", 2: "Poor", 1: "Terrible"}


def home(req: Request) -> Response:
    """``GET /``: a search box, the categories and the best-rated products."""
    cats = "".join(
        f"<li>{ui.link(ui.href('/search', [('category', c)]), c)} ({n} products)</li>"
        for c, n in categories(req.conn)
    )
    rows = req.conn.execute(
        "SELECT id FROM products ORDER BY rating DESC, id LIMIT ?", (FEATURED,)
    ).fetchall()
    featured = [_hit(req.conn, int(r[0])) for r in rows]
    body = (
        _search_box()
        + f'<section aria-labelledby="cat-h"><h2 id="cat-h">Categories</h2><ul>{cats}</ul>'
        + '</section><section aria-labelledby="feat-h"><h2 id="feat-h">Featured products</h2>'
        + _hit_list(featured)
        + "</section>"
    )
    return ui.render(req.conn, ui.SHOP_NAME, body)


def _search_box() -> str:
    return (
        '<form method="get" action="/search" role="search">'
        + ui.input_field("Search products", "q", kind="search")
        + '<button type="submit">Search</button></form>'
    )


def _hit(conn: sqlite3.Connection, pid: int) -> ProductHit:
    row = conn.execute(
        "SELECT p.id, p.name, p.brand, p.category, p.rating, MIN(v.price_cents), "
        "SUM(v.stock) FROM products p JOIN variants v ON v.product_id = p.id "
        "WHERE p.id = ? GROUP BY p.id",
        (pid,),
    ).fetchone()
    return ProductHit(row[0], row[1], row[2], row[3], float(row[4]), int(row[5]), int(row[6]))


def _hit_list(hits: list[ProductHit] | tuple[ProductHit, ...]) -> str:
    items = []
    for h in hits:
        stock = "In stock" if h.stock > 0 else "Out of stock"
        items.append(
            f"<li>{ui.link(f'/product/{h.id}', h.name)}: {ui.esc(h.brand)}, "
            f"{ui.esc(h.category)}, rated {h.rating:.1f} out of 5, from "
            f"{ui.money(h.price_cents)}, {stock}</li>"
        )
    return f'<ol class="products">{"".join(items)}</ol>'


def parse_search(conn: sqlite3.Connection, params: rq.Params) -> SearchQuery:
    """Validate the search page's query string into a :class:`SearchQuery`.

    Raises:
        BadRequest: an unknown category, brand or sort order, a price that is not a
            dollar amount, a minimum above the maximum, or a page that is not >= 1.
    """
    cats = [c for c, _ in categories(conn)]
    query = SearchQuery(
        q=rq.text(params, "q", default=""),
        category=rq.choice(params, "category", cats, default=""),
        brand=rq.choice(params, "brand", brands(conn), default=""),
        min_price=rq.money(params, "min_price"),
        max_price=rq.money(params, "max_price"),
        sort=rq.choice(params, "sort", SORTS, default="relevance"),
        page=rq.integer(params, "page", lo=1, hi=100_000, default=1),
    )
    low, high = query.min_price, query.max_price
    if low is not None and high is not None and low > high:
        raise rq.BadRequest(
            f"min_price ({ui.money(low)}) is above max_price ({ui.money(high)}); "
            "swap them or clear one"
        )
    return query


def search_page(req: Request) -> Response:
    """``GET /search``: the filter form, the result count, one page of results and links
    to the previous and next pages."""
    query = parse_search(req.conn, req.query)
    result = search_products(req.conn, query)
    body = _search_form(req.conn, query)
    first = (query.page - 1) * PAGE_SIZE + 1
    last = first + len(result.hits) - 1
    noun = "result" if result.total == 1 else "results"
    body += f'<p id="result-count">{result.total} {noun}'
    if result.hits:
        body += f", showing {first}-{last}, page {query.page} of {result.pages}"
    body += "</p>"
    if result.hits:
        body += _hit_list(result.hits)
    elif result.total:
        body += f"<p>No results on page {query.page}; there are {result.pages} pages.</p>"
    else:
        body += "<p>No products match your search.</p>"
    links = []
    params = _query_params(query)
    if query.page > 1:
        target = min(query.page - 1, result.pages)
        links.append(ui.link(ui.href("/search", [*params, ("page", target)]), "Previous"))
    if query.page < result.pages:
        links.append(ui.link(ui.href("/search", [*params, ("page", query.page + 1)]), "Next"))
    if links:
        body += f'<nav aria-label="Pagination">{" ".join(links)}</nav>'
    return ui.render(req.conn, "Search", body)


def _query_params(query: SearchQuery) -> list[tuple[str, str | int]]:
    """The query string of ``query`` without its page (empty filters are left out)."""
    prices = [
        (name, "" if cents is None else f"{cents // 100}.{cents % 100:02d}")
        for name, cents in (("min_price", query.min_price), ("max_price", query.max_price))
    ]
    sort = "" if query.sort == "relevance" else query.sort
    return [
        ("q", query.q), ("category", query.category), ("brand", query.brand), *prices,
        ("sort", sort),
    ]  # fmt: skip


def _search_form(conn: sqlite3.Connection, query: SearchQuery) -> str:
    cats = [("", "All categories", False)] + [(c, c, False) for c, _ in categories(conn)]
    names = [("", "All brands", False)] + [(b, b, False) for b in brands(conn, query.category)]
    if query.brand and all(value != query.brand for value, _, _ in names):
        names.append((query.brand, query.brand, False))  # keep a brand from another category
    sorts = [(s, SORT_LABELS[s], False) for s in SORTS]
    prices = dict(_query_params(query))
    return (
        '<form method="get" action="/search" role="search">'
        + ui.input_field("Search products", "q", query.q, kind="search")
        + ui.select("Category", "category", cats, query.category)
        + ui.select("Brand", "brand", names, query.brand)
        + ui.input_field("Minimum price ($)", "min_price", prices["min_price"])
        + ui.input_field("Maximum price ($)", "max_price", prices["max_price"])
        + ui.select("Sort by", "sort", sorts, query.sort)
        + '<button type="submit">Search</button></form>'
    )


def _product(conn: sqlite3.Connection, pid: int) -> sqlite3.Row:
    row: sqlite3.Row | None = conn.execute("SELECT * FROM products WHERE id = ?", (pid,)).fetchone()
    if row is None:
        raise rq.NotFound(f"there is no product with id {pid}; find products with Search")
    return row


class ReviewStatus(Enum):
    """Whether the customer may review a product."""

    REVIEWED = "reviewed"  # the customer already did
    ELIGIBLE = "eligible"  # a delivered order holds the product
    NOT_PURCHASED = "not_purchased"  # no delivered order holds it


def review_status(conn: sqlite3.Connection, pid: int) -> ReviewStatus:
    """Whether the customer has reviewed product ``pid``, may review it, or may not."""
    mine = conn.execute(
        "SELECT 1 FROM reviews WHERE product_id = ? AND author = (SELECT name FROM customer)",
        (pid,),
    ).fetchone()
    if mine:
        return ReviewStatus.REVIEWED
    delivered = conn.execute(
        "SELECT 1 FROM orders o JOIN order_items i ON i.order_id = o.id "
        "JOIN variants v ON v.id = i.variant_id "
        "WHERE o.status = 'delivered' AND v.product_id = ? LIMIT 1",
        (pid,),
    ).fetchone()
    return ReviewStatus.ELIGIBLE if delivered else ReviewStatus.NOT_PURCHASED


def product_page(req: Request) -> Response:
    """``GET /product/<id>``: details, variants, the add-to-cart form and reviews."""
    return _render_product(req.conn, int(req.args[0]))


def _render_product(
    conn: sqlite3.Connection, pid: int, errors: tuple[str, ...] = (), status: int = 200,
    chosen: str = "", qty: str = "1",
) -> Response:  # fmt: skip
    product = _product(conn, pid)
    variants = conn.execute(
        "SELECT * FROM variants WHERE product_id = ? ORDER BY id", (pid,)
    ).fetchall()
    body = ui.alert(errors) + (
        f"<p>Brand: {ui.esc(product['brand'])}. Category: "
        f"{ui.link(ui.href('/search', [('category', product['category'])]), product['category'])}"
        f". Rated {product['rating']:.1f} out of 5.</p>"
        f"<p>{ui.esc(product['description'])}</p>"
    )
    options = []
    for v in variants:
        stock = f"{v['stock']} in stock" if v["stock"] else "out of stock"
        text = f"{v['color']} / {v['size']}, {ui.money(v['price_cents'])}, {stock}"
        options.append((str(v["id"]), text, v["stock"] == 0))
    in_stock = [value for value, _, disabled in options if not disabled]
    if in_stock:
        inner = ui.select("Option", "variant_id", options, chosen or in_stock[0])
        inner += ui.input_field("Quantity", "qty", qty, kind="number", attrs=' min="1" max="99"')
        body += ui.post_form("/cart/add", inner, "Add to cart")
    else:
        body += "<p><strong>This product is out of stock in every option.</strong></p>"
    body += _reviews(conn, pid)
    return ui.render(conn, str(product["name"]), body, status=status)


def _reviews(conn: sqlite3.Connection, pid: int) -> str:
    rows = conn.execute(
        "SELECT * FROM reviews WHERE product_id = ? ORDER BY created_at DESC, id DESC", (pid,)
    ).fetchall()
    parts = [
        f'<section id="reviews" aria-labelledby="rev-h"><h2 id="rev-h">Reviews ({len(rows)})</h2>'
    ]
    status = review_status(conn, pid)
    if status is ReviewStatus.ELIGIBLE:
        parts.append(f"<p>{ui.link(f'/product/{pid}/review', 'Write a review')}</p>")
    elif status is ReviewStatus.REVIEWED:
        parts.append("<p>You have reviewed this product.</p>")
    if not rows:
        parts.append("<p>No reviews yet.</p>")
    for r in rows:
        parts.append(
            f"<article><h3>{ui.esc(r['title'])}</h3><p>Rated {r['rating']} out of 5 by "
            f"{ui.esc(r['author'])} on {ui.esc(r['created_at'][:10])}</p>"
            f"<p>{ui.esc(r['body'])}</p></article>"
        )
    return "".join(parts) + "</section>"


def add_to_cart(req: Request) -> Response:
    """``POST /cart/add`` (variant_id, qty): add to the cart, then go to ``/cart``.

    A quantity beyond the stock left (counting what is already in the cart) re-renders
    the product page with an alert and status 422.
    """
    vid = rq.integer(req.form, "variant_id", lo=1, hi=999_999_999)
    qty = rq.integer(req.form, "qty", lo=1, hi=MAX_QTY)
    variant = req.conn.execute("SELECT * FROM variants WHERE id = ?", (vid,)).fetchone()
    if variant is None:
        raise rq.BadRequest(f"there is no product option with variant_id {vid}")
    row = req.conn.execute("SELECT qty FROM cart_items WHERE variant_id = ?", (vid,)).fetchone()
    have = int(row[0]) if row else 0
    if have + qty > variant["stock"]:
        what = f"{variant['color']} / {variant['size']}"
        msg = (
            f"{what} is out of stock."
            if variant["stock"] == 0
            else f"Only {variant['stock']} of {what} in stock and {have} already in your "
            f"cart; you can add at most {max(0, variant['stock'] - have)} more."
        )
        return _render_product(
            req.conn, int(variant["product_id"]), (msg,), 422, str(vid), str(qty)
        )
    with req.conn:
        req.conn.execute(
            "INSERT INTO cart_items (variant_id, qty) VALUES (?, ?) "
            "ON CONFLICT (variant_id) DO UPDATE SET qty = qty + excluded.qty",
            (vid, qty),
        )
        advance_clock(req.conn)
    return ui.redirect("/cart")


def review_form(req: Request) -> Response:
    """``GET /product/<id>/review``: the review form, for delivered purchases only."""
    pid = int(req.args[0])
    _check_may_review(req.conn, pid)
    return _render_review_form(req.conn, pid, {}, ())


def _check_may_review(conn: sqlite3.Connection, pid: int) -> None:
    name = _product(conn, pid)["name"]
    status = review_status(conn, pid)
    if status is ReviewStatus.NOT_PURCHASED:
        raise rq.Forbidden(
            f"You can review {name} only after an order containing it has been delivered."
        )
    if status is ReviewStatus.REVIEWED:
        raise rq.Conflict(f"You have already reviewed {name}.")


def _render_review_form(
    conn: sqlite3.Connection, pid: int, values: rq.Params, errors: tuple[str, ...]
) -> Response:
    name = str(_product(conn, pid)["name"])
    ratings = [("", "Choose a rating", False)] + [
        (str(n), f"{n} - {RATING_WORDS[n]}", False) for n in range(5, 0, -1)
    ]
    inner = (
        ui.select("Rating", "rating", ratings, values.get("rating", ""))
        + ui.input_field("Title", "title", values.get("title", ""))
        + ui.textarea("Review", "body", values.get("body", ""))
    )
    body = ui.alert(errors) + f"<p>Product: {ui.link(f'/product/{pid}', name)}</p>"
    body += ui.post_form(f"/product/{pid}/review", inner, "Submit review")
    return ui.render(conn, f"Review {name}", body, status=422 if errors else 200)


def submit_review(req: Request) -> Response:
    """``POST /product/<id>/review`` (rating, title, body): publish the customer's review."""
    pid = int(req.args[0])
    _check_may_review(req.conn, pid)
    title = rq.text(req.form, "title", max_len=100)
    text = rq.text(req.form, "body", max_len=2000)
    errors = []
    if not req.form.get("rating", "").strip():
        errors.append("Choose a rating from 1 to 5.")
    if not title:
        errors.append("Enter a title.")
    if not text:
        errors.append("Write the review text.")
    if errors:
        return _render_review_form(req.conn, pid, req.form, tuple(errors))
    stars = rq.integer(req.form, "rating", lo=1, hi=5)
    with req.conn:
        req.conn.execute(
            "INSERT INTO reviews (product_id, author, rating, title, body, created_at) "
            "VALUES (?, (SELECT name FROM customer), ?, ?, ?, ?)",
            (pid, stars, title, text, current_time(req.conn)),
        )
        advance_clock(req.conn)
    return ui.redirect(f"/product/{pid}#reviews")
