"""Account pages: the overview, orders (view and cancel) and the address book."""

from __future__ import annotations

import sqlite3

from agentgym_envs.web.site import layout as ui
from agentgym_envs.web.site import request as rq
from agentgym_envs.web.site.cart import address_text
from agentgym_envs.web.site.request import Request, Response
from agentgym_envs.web.site.world import advance_clock

ADDRESS_FIELDS = (
    ("name", "Full name", 100), ("line1", "Street address", 100), ("city", "City", 60),
    ("zip", "Postal code", 12), ("country", "Country", 60),
)  # fmt: skip


def account_page(req: Request) -> Response:
    """``GET /account``: who is logged in and links to the account's pages."""
    me = req.conn.execute("SELECT * FROM customer").fetchone()
    body = f"<p>Signed in as {ui.esc(me['name'])} ({ui.esc(me['email'])}).</p>"
    if me["deleted_at"]:
        body += f'<p class="notice">This account was deleted on {ui.esc(me["deleted_at"])}.</p>'
    links = (
        ("/account/orders", "Your orders"), ("/account/addresses", "Your addresses"),
        ("/account/delete", "Delete my account"), ("/admin", "Store admin"),
    )  # fmt: skip
    body += "<ul>" + "".join(f"<li>{ui.link(u, t)}</li>" for u, t in links) + "</ul>"
    return ui.render(req.conn, "Your account", body)


def orders_page(req: Request) -> Response:
    """``GET /account/orders``: every order, newest first, with its status and total."""
    rows = req.conn.execute(
        "SELECT o.*, (SELECT SUM(qty) FROM order_items WHERE order_id = o.id) AS units "
        "FROM orders o ORDER BY o.created_at DESC, o.id DESC"
    ).fetchall()
    cells = [
        [
            ui.link(f"/account/orders/{o['id']}", f"Order #{o['id']}"),
            ui.esc(o["created_at"][:10]),
            ui.esc(o["status"].capitalize()),
            str(o["units"]),
            ui.money(o["total_cents"]),
        ]
        for o in rows
    ]
    body = ui.table(("Order", "Date", "Status", "Items", "Total"), cells, "Your orders")
    if not rows:
        body = "<p>You have no orders yet.</p>"
    return ui.render(req.conn, "Your orders", body)


def _order(conn: sqlite3.Connection, oid: int) -> sqlite3.Row:
    row: sqlite3.Row | None = conn.execute("SELECT * FROM orders WHERE id = ?", (oid,)).fetchone()
    if row is None:
        raise rq.NotFound(f"there is no order #{oid}; see /account/orders for your orders")
    return row


def order_page(req: Request) -> Response:
    """``GET /account/orders/<id>``: items, total, address, payment; cancel if pending."""
    return _render_order(req.conn, int(req.args[0]))


def _render_order(
    conn: sqlite3.Connection, oid: int, errors: tuple[str, ...] = (), status: int = 200
) -> Response:
    order = _order(conn, oid)
    items = conn.execute(
        "SELECT i.qty, i.price_cents, v.color, v.size, p.id AS pid, p.name FROM order_items i "
        "JOIN variants v ON v.id = i.variant_id JOIN products p ON p.id = v.product_id "
        "WHERE i.order_id = ? ORDER BY i.id",
        (oid,),
    ).fetchall()
    rows = [
        [
            ui.link(f"/product/{i['pid']}", i["name"]),
            ui.esc(f"{i['color']} / {i['size']}"),
            str(i["qty"]),
            ui.money(i["price_cents"]),
            ui.money(i["price_cents"] * i["qty"]),
        ]
        for i in items
    ]
    address = conn.execute(
        "SELECT * FROM addresses WHERE id = ?", (order["address_id"],)
    ).fetchone()
    payment = conn.execute(
        "SELECT * FROM payment_methods WHERE id = ?", (order["payment_id"],)
    ).fetchone()
    body = ui.alert(errors) + (
        f'<p>Status: <strong id="order-status">{ui.esc(order["status"].capitalize())}</strong>'
        f". Placed on {ui.esc(order['created_at'][:10])}.</p>"
    )
    body += ui.table(("Product", "Option", "Quantity", "Unit price", "Line total"), rows, "Items")
    body += f'<p id="order-total">Total: {ui.money(order["total_cents"])}</p>'
    body += f"<p>Ship to: {ui.esc(address_text(address, mark_default=False))}</p>"
    body += f"<p>Paid with: {ui.esc(payment['label'])}</p>"
    if order["status"] == "pending":
        body += ui.post_form(f"/account/orders/{oid}/cancel", "", "Cancel order")
    body += f"<p>{ui.link('/account/orders', 'All orders')}</p>"
    return ui.render(conn, f"Order #{oid}", body, status=status)


def cancel_order(conn: sqlite3.Connection, oid: int) -> None:
    """Mark order ``oid`` cancelled, restock its items and refund a gift card payment.

    Runs inside the caller's transaction; the order must not already be cancelled.
    """
    order = _order(conn, oid)
    assert order["status"] != "cancelled", f"order {oid} is already cancelled"
    conn.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (oid,))
    for vid, qty in conn.execute(
        "SELECT variant_id, qty FROM order_items WHERE order_id = ? ORDER BY id", (oid,)
    ).fetchall():
        conn.execute("UPDATE variants SET stock = stock + ? WHERE id = ?", (qty, vid))
    conn.execute(
        "UPDATE payment_methods SET balance_cents = balance_cents + ? "
        "WHERE id = ? AND kind = 'gift_card'",
        (order["total_cents"], order["payment_id"]),
    )


def cancel_order_action(req: Request) -> Response:
    """``POST /account/orders/<id>/cancel``: cancel a pending order (409 otherwise)."""
    oid = int(req.args[0])
    order = _order(req.conn, oid)
    if order["status"] != "pending":
        msg = f"Only pending orders can be cancelled; order #{oid} is {order['status']}."
        return _render_order(req.conn, oid, (msg,), 409)
    with req.conn:
        cancel_order(req.conn, oid)
        advance_clock(req.conn)
    return ui.redirect(f"/account/orders/{oid}")


def addresses_page(req: Request) -> Response:
    """``GET /account/addresses``: the address book and the form to add an address."""
    return _render_addresses(req.conn, {}, ())


def _address_inputs(values: rq.Params, prefix: str) -> str:
    return "".join(
        ui.input_field(label, name, values.get(name, ""), fid=f"{prefix}{name}")
        for name, label, _ in ADDRESS_FIELDS
    )


def _render_addresses(
    conn: sqlite3.Connection, values: rq.Params, errors: tuple[str, ...]
) -> Response:
    rows = conn.execute("SELECT * FROM addresses ORDER BY id").fetchall()
    items = []
    for a in rows:
        text = address_text(a)
        actions = ui.link(f"/account/addresses/{a['id']}/edit", "Edit")
        if not a["is_default"]:
            actions += " " + ui.post_form(
                f"/account/addresses/{a['id']}/default", "", "Make default",
                aria=f"Make default: {text}", inline=True,
            )  # fmt: skip
        items.append(f"<li>{ui.esc(text)} {actions}</li>")
    box = " checked" if values.get("is_default") else ""
    inner = _address_inputs(values, "new-") + (
        f'<p><input type="checkbox" id="new-is_default" name="is_default" value="1"{box}> '
        '<label for="new-is_default">Make this my default address</label></p>'
    )
    body = f"<ul>{''.join(items)}</ul>" + '<h2 id="add-h">Add an address</h2>' + ui.alert(errors)
    body += ui.post_form("/account/addresses", inner, "Add address")
    return ui.render(conn, "Your addresses", body, status=422 if errors else 200)


def _address_values(form: rq.Params) -> tuple[dict[str, str], tuple[str, ...]]:
    """The address fields of ``form`` and the messages for any left empty."""
    values = {name: rq.text(form, name, max_len=limit) for name, _, limit in ADDRESS_FIELDS}
    missing = tuple(
        f"Enter the {label.lower()}." for n, label, _ in ADDRESS_FIELDS if not values[n]
    )
    return values, missing


def _checkbox(form: rq.Params, name: str) -> bool:
    value = form.get(name, "")
    if value not in ("", "1", "on"):
        raise rq.BadRequest(f"{name} is a checkbox: send 1 or leave it out, got {value[:40]!r}")
    return bool(value)


def add_address(req: Request) -> Response:
    """``POST /account/addresses`` (name, line1, city, zip, country, is_default=1)."""
    values, errors = _address_values(req.form)
    make_default = _checkbox(req.form, "is_default")
    if errors:
        shown = {**values, "is_default": "1" if make_default else ""}
        return _render_addresses(req.conn, shown, errors)
    with req.conn:
        cur = req.conn.execute(
            "INSERT INTO addresses (name, line1, city, zip, country) VALUES (?, ?, ?, ?, ?)",
            tuple(values[n] for n, _, _ in ADDRESS_FIELDS),
        )
        if make_default:
            _make_default(req.conn, int(cur.lastrowid or 0))
        advance_clock(req.conn)
    return ui.redirect("/account/addresses")


def _address(conn: sqlite3.Connection, aid: int) -> sqlite3.Row:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM addresses WHERE id = ?", (aid,)
    ).fetchone()
    if row is None:
        raise rq.NotFound(f"there is no address with id {aid}; see /account/addresses")
    return row


def edit_address_form(req: Request) -> Response:
    """``GET /account/addresses/<id>/edit``: the address form, filled in."""
    aid = int(req.args[0])
    row = _address(req.conn, aid)
    values = {name: str(row[name]) for name, _, _ in ADDRESS_FIELDS}
    return _render_edit(req.conn, aid, values, ())


def _render_edit(
    conn: sqlite3.Connection, aid: int, values: rq.Params, errors: tuple[str, ...]
) -> Response:
    body = ui.alert(errors) + ui.post_form(
        f"/account/addresses/{aid}/edit", _address_inputs(values, "edit-"), "Save address"
    )
    body += f"<p>{ui.link('/account/addresses', 'Back to addresses')}</p>"
    return ui.render(conn, "Edit address", body, status=422 if errors else 200)


def save_address(req: Request) -> Response:
    """``POST /account/addresses/<id>/edit`` (name, line1, city, zip, country)."""
    aid = int(req.args[0])
    _address(req.conn, aid)
    values, errors = _address_values(req.form)
    if errors:
        return _render_edit(req.conn, aid, values, errors)
    with req.conn:
        req.conn.execute(
            "UPDATE addresses SET name = ?, line1 = ?, city = ?, zip = ?, country = ? WHERE id = ?",
            (*(values[n] for n, _, _ in ADDRESS_FIELDS), aid),
        )
        advance_clock(req.conn)
    return ui.redirect("/account/addresses")


def _make_default(conn: sqlite3.Connection, aid: int) -> None:
    # Only rows whose flag really changes are written, so _changes stays exact.
    conn.execute(
        "UPDATE addresses SET is_default = (id = ?) WHERE is_default != (id = ?)", (aid, aid)
    )


def make_default(req: Request) -> Response:
    """``POST /account/addresses/<id>/default``: make the address the default one."""
    aid = int(req.args[0])
    _address(req.conn, aid)
    with req.conn:
        _make_default(req.conn, aid)
        advance_clock(req.conn)
    return ui.redirect("/account/addresses")
