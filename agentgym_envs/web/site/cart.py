"""The cart and checkout: change quantities, remove lines, place the order."""

from __future__ import annotations

import sqlite3

from agentgym_envs.web.site import layout as ui
from agentgym_envs.web.site import request as rq
from agentgym_envs.web.site.request import Request, Response
from agentgym_envs.web.site.shop import MAX_QTY
from agentgym_envs.web.site.world import advance_clock, current_time

_LINES_SQL = (
    "SELECT c.variant_id, c.qty, v.color, v.size, v.price_cents, v.stock, p.id AS pid, "
    "p.name FROM cart_items c JOIN variants v ON v.id = c.variant_id "
    "JOIN products p ON p.id = v.product_id ORDER BY c.variant_id"
)


def _lines(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(_LINES_SQL).fetchall()


def _what(line: sqlite3.Row) -> str:
    return f"{line['name']} ({line['color']} / {line['size']})"


def cart_page(req: Request) -> Response:
    """``GET /cart``: the cart's lines with quantity and remove forms, and the subtotal."""
    return _render_cart(req.conn)


def _render_cart(conn: sqlite3.Connection, errors: tuple[str, ...] = ()) -> Response:
    lines = _lines(conn)
    status = 422 if errors else 200
    if not lines:
        body = ui.alert(errors) + "<p>Your cart is empty.</p>"
        body += f"<p>{ui.link('/search', 'Find products')}</p>"
        return ui.render(conn, "Cart", body, status=status)
    rows = []
    for line in lines:
        vid, what = line["variant_id"], _what(line)
        qty = ui.hidden("variant_id", vid) + ui.input_field(
            f"Quantity of {what}", "qty", line["qty"], kind="number", fid=f"qty-{vid}",
            attrs=' min="0" max="99"',
        )  # fmt: skip
        warn = ""
        if line["qty"] > line["stock"]:
            warn = f" (only {line['stock']} in stock)"
        rows.append(
            [
                ui.link(f"/product/{line['pid']}", line["name"]) + ui.esc(warn),
                ui.esc(f"{line['color']} / {line['size']}"),
                ui.money(line["price_cents"]),
                ui.post_form("/cart/update", qty, "Update", aria=f"Update quantity of {what}"),
                ui.money(line["price_cents"] * line["qty"]),
                ui.post_form(
                    "/cart/remove", ui.hidden("variant_id", vid), "Remove", aria=f"Remove {what}"
                ),
            ]
        )
    subtotal = sum(line["price_cents"] * line["qty"] for line in lines)
    body = ui.alert(errors) + ui.table(
        ("Product", "Option", "Unit price", "Quantity", "Line total", ""), rows, "Your cart"
    )
    body += f'<p id="subtotal">Subtotal: {ui.money(subtotal)}</p>'
    body += f"<p>{ui.link('/checkout', 'Checkout')}</p>"
    return ui.render(conn, "Cart", body, status=status)


def _cart_line(conn: sqlite3.Connection, vid: int) -> sqlite3.Row:
    line: sqlite3.Row | None = conn.execute(
        f"SELECT * FROM ({_LINES_SQL}) WHERE variant_id = ?", (vid,)
    ).fetchone()
    if line is None:
        raise rq.BadRequest(f"variant_id {vid} is not in your cart; see /cart for its lines")
    return line


def update_cart(req: Request) -> Response:
    """``POST /cart/update`` (variant_id, qty): set a line's quantity; 0 removes it."""
    vid = rq.integer(req.form, "variant_id", lo=1, hi=999_999_999)
    qty = rq.integer(req.form, "qty", lo=0, hi=MAX_QTY)
    line = _cart_line(req.conn, vid)
    if qty > line["stock"]:
        left = f"only {line['stock']} left" if line["stock"] else "it is out of stock"
        return _render_cart(req.conn, (f"Cannot order {qty} of {_what(line)}: {left}.",))
    with req.conn:
        if qty == 0:
            req.conn.execute("DELETE FROM cart_items WHERE variant_id = ?", (vid,))
        else:
            req.conn.execute("UPDATE cart_items SET qty = ? WHERE variant_id = ?", (qty, vid))
        advance_clock(req.conn)
    return ui.redirect("/cart")


def remove_from_cart(req: Request) -> Response:
    """``POST /cart/remove`` (variant_id): drop the line from the cart."""
    vid = rq.integer(req.form, "variant_id", lo=1, hi=999_999_999)
    _cart_line(req.conn, vid)
    with req.conn:
        req.conn.execute("DELETE FROM cart_items WHERE variant_id = ?", (vid,))
        advance_clock(req.conn)
    return ui.redirect("/cart")


def checkout_page(req: Request) -> Response:
    """``GET /checkout``: the order summary, address and payment choices."""
    return _render_checkout(req.conn, None, None, ())


def _render_checkout(
    conn: sqlite3.Connection, address: int | None, payment: int | None, errors: tuple[str, ...]
) -> Response:
    lines = _lines(conn)
    status = 422 if errors else 200
    if not lines:
        errors = errors or ("Your cart is empty; add products before checking out.",)
        body = ui.alert(errors) + f"<p>{ui.link('/search', 'Find products')}</p>"
        return ui.render(conn, "Checkout", body, status=status)
    rows = [
        [ui.esc(_what(line)), str(line["qty"]), ui.money(line["price_cents"] * line["qty"])]
        for line in lines
    ]
    total = sum(line["price_cents"] * line["qty"] for line in lines)
    addresses = conn.execute("SELECT * FROM addresses ORDER BY id").fetchall()
    if address is None:
        address = next((int(a["id"]) for a in addresses if a["is_default"]), None)
    payments = conn.execute("SELECT * FROM payment_methods ORDER BY id").fetchall()
    body = ui.alert(errors) + ui.table(("Item", "Quantity", "Price"), rows, "Order summary")
    body += f'<p id="order-total">Order total: {ui.money(total)}</p>'
    inner = ui.radio_group(
        "Shipping address", "address_id",
        [(str(a["id"]), address_text(a)) for a in addresses], str(address or ""),
    ) + ui.radio_group(
        "Payment method", "payment_id",
        [(str(p["id"]), payment_text(p)) for p in payments], str(payment or ""),
    )  # fmt: skip
    body += ui.post_form("/checkout", inner, "Place order")
    body += f"<p>{ui.link('/account/addresses', 'Manage addresses')}</p>"
    return ui.render(conn, "Checkout", body, status=status)


def address_text(row: sqlite3.Row, *, mark_default: bool = True) -> str:
    """An address on one line, marked "(default)" when it is the default one."""
    text = f"{row['name']}, {row['line1']}, {row['city']} {row['zip']}, {row['country']}"
    return text + (" (default)" if mark_default and row["is_default"] else "")


def payment_text(row: sqlite3.Row) -> str:
    """A payment method's label, with the balance of a gift card."""
    if row["kind"] == "gift_card":
        return f"{row['label']} (balance {ui.money(row['balance_cents'])})"
    return str(row["label"])


def place_order(req: Request) -> Response:
    """``POST /checkout`` (address_id, payment_id): place the order from the cart.

    Refused with an alert (status 422) when no address or payment is chosen, the cart is
    empty, a line exceeds the stock left, or a gift card's balance is below the total.
    On success the stock is decremented, a gift card is charged, the cart is emptied and
    the browser goes to ``/account/orders/<id>``.
    """
    conn = req.conn
    address = rq.optional_id(req.form, "address_id")
    payment = rq.optional_id(req.form, "payment_id")
    if address is not None and not _exists(conn, "addresses", address):
        raise rq.BadRequest(f"there is no address with address_id {address}")
    method = None
    if payment is not None:
        method = conn.execute("SELECT * FROM payment_methods WHERE id = ?", (payment,)).fetchone()
        if method is None:
            raise rq.BadRequest(f"there is no payment method with payment_id {payment}")
    lines = _lines(conn)
    total = sum(line["price_cents"] * line["qty"] for line in lines)
    errors = []
    if address is None:
        errors.append("Choose a shipping address.")
    if method is None:
        errors.append("Choose a payment method.")
    for line in lines:
        if line["qty"] > line["stock"]:
            left = f"only {line['stock']} left" if line["stock"] else "it is out of stock"
            errors.append(f"{_what(line)}: {left}; change the quantity in your cart.")
    if method is not None and method["kind"] == "gift_card" and method["balance_cents"] < total:
        errors.append(
            f"The gift card balance {ui.money(method['balance_cents'])} is less than the "
            f"order total {ui.money(total)}; choose another payment method."
        )
    if not lines:
        errors = ["Your cart is empty; add products before checking out."]
    if errors:
        return _render_checkout(conn, address, payment, tuple(errors))
    assert method is not None and address is not None  # no errors: both were chosen
    with conn:
        cur = conn.execute(
            "INSERT INTO orders (status, address_id, payment_id, created_at, total_cents) "
            "VALUES ('pending', ?, ?, ?, ?)",
            (address, payment, current_time(conn), total),
        )
        for line in lines:
            conn.execute(
                "INSERT INTO order_items (order_id, variant_id, qty, price_cents) "
                "VALUES (?, ?, ?, ?)",
                (cur.lastrowid, line["variant_id"], line["qty"], line["price_cents"]),
            )
            conn.execute(
                "UPDATE variants SET stock = stock - ? WHERE id = ?",
                (line["qty"], line["variant_id"]),
            )
        if method["kind"] == "gift_card":
            conn.execute(
                "UPDATE payment_methods SET balance_cents = balance_cents - ? WHERE id = ?",
                (total, payment),
            )
        conn.execute("DELETE FROM cart_items")
        advance_clock(conn)
    return ui.redirect(f"/account/orders/{cur.lastrowid}")


def _exists(conn: sqlite3.Connection, table: str, pk: int) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (pk,)).fetchone() is not None
