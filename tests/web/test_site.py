"""The shop site: world generation, pages, writes, the change log and the tenant server.

Page tests call :func:`respond` directly on a tenant connection (fast); the server tests
go through real HTTP with ``urllib`` against a started :class:`SiteServer`.
"""

from __future__ import annotations

import http.client
import re
import socket
import sqlite3
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.core.errors import ConfigError, StateError
from agentgym_envs.web.site import (
    TENANT_COOKIE,
    TENANT_HEADER,
    SiteNotRunningError,
    SiteServer,
    TenantNotFoundError,
    build_world,
    open_world,
    pages,
    respond,
)
from agentgym_envs.web.site.pages import FORM_TYPE
from agentgym_envs.web.site.request import Response

SEED = 3
WORLD = build_world(SEED)


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    db = open_world(WORLD)
    yield db
    db.close()


@pytest.fixture(scope="module")
def site() -> Iterator[SiteServer]:
    with SiteServer() as server:
        yield server


def get(db: sqlite3.Connection, url: str) -> Response:
    return respond(db, "GET", url)


def post(db: sqlite3.Connection, url: str, form: Mapping[str, str | int]) -> Response:
    return respond(db, "POST", url, urlencode(form).encode(), FORM_TYPE)


def changes(db: sqlite3.Connection) -> set[tuple[str, int]]:
    return {(r[0], r[1]) for r in db.execute("SELECT tbl, pk FROM _changes")}


def scalar(db: sqlite3.Connection, sql: str, *args: object) -> int:
    return int(db.execute(sql, args).fetchone()[0])


def product_ids(page: Response) -> list[int]:
    match = re.search(r'<ol class="products">(.*?)</ol>', page.text)
    return [int(i) for i in re.findall(r'href="/product/(\d+)"', match.group(1))] if match else []


def stocked_variant(db: sqlite3.Connection, min_stock: int = 2, min_price: int = 0) -> sqlite3.Row:
    row: sqlite3.Row = db.execute(
        "SELECT * FROM variants WHERE stock >= ? AND price_cents >= ? ORDER BY id",
        (min_stock, min_price),
    ).fetchone()
    return row


def payment_id(db: sqlite3.Connection, kind: str) -> int:
    return scalar(db, "SELECT id FROM payment_methods WHERE kind = ? ORDER BY id", kind)


def default_address(db: sqlite3.Connection) -> int:
    return scalar(db, "SELECT id FROM addresses WHERE is_default = 1")


def checkout(db: sqlite3.Connection, vid: int, qty: int, kind: str = "card") -> Response:
    assert post(db, "/cart/add", {"variant_id": vid, "qty": qty}).status == 303
    form = {"address_id": default_address(db), "payment_id": payment_id(db, kind)}
    return post(db, "/checkout", form)


# -- world ---------------------------------------------------------------------------


def test_build_world_is_a_pure_function_of_the_seed() -> None:
    assert build_world(SEED) == WORLD
    assert build_world(SEED + 1) != WORLD
    assert build_world(SEED, n_products=30) == build_world(SEED, n_products=30)


def test_world_contents(conn: sqlite3.Connection) -> None:
    assert scalar(conn, "SELECT COUNT(*) FROM products") == 120
    assert scalar(conn, "SELECT COUNT(DISTINCT category) FROM products") == 6
    assert scalar(conn, "SELECT COUNT(DISTINCT name) FROM products") == 120
    per_product = [r[0] for r in conn.execute("SELECT COUNT(*) FROM variants GROUP BY product_id")]
    assert min(per_product) >= 1 and max(per_product) <= 6
    assert scalar(conn, "SELECT COUNT(*) FROM variants WHERE stock = 0") > 0
    assert scalar(conn, "SELECT COUNT(*) FROM customer") == 1
    assert scalar(conn, "SELECT COUNT(*) FROM addresses WHERE is_default = 1") == 1
    assert 4 <= scalar(conn, "SELECT COUNT(*) FROM orders") <= 10
    statuses = {r[0] for r in conn.execute("SELECT status FROM orders")}
    assert {"delivered", "pending"} <= statuses
    assert scalar(conn, "SELECT COUNT(*) FROM _changes") == 0
    assert scalar(conn, "SELECT COUNT(*) FROM cart_items") == 0


def test_world_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="n_products"):
        build_world(0, n_products=0)
    with pytest.raises(StateError, match="shop world"):
        open_world(b"not a database" * 100)


# -- search --------------------------------------------------------------------------


def all_pages(db: sqlite3.Connection, params: dict[str, str]) -> list[int]:
    ids: list[int] = []
    page = 1
    while True:
        response = get(db, "/search?" + urlencode({**params, "page": page}))
        assert response.status == 200
        found = product_ids(response)
        assert len(found) <= 10
        ids += found
        if ">Next</a>" not in response.text:
            return ids
        assert len(found) == 10
        page += 1


@pytest.mark.parametrize(
    ("params", "order"),
    [
        ({"category": "Shoes", "sort": "price_asc"}, "MIN(v.price_cents), p.id"),
        ({"min_price": "50", "max_price": "120.50", "sort": "price_desc"},
         "MIN(v.price_cents) DESC, p.id"),
        ({"category": "Mugs", "brand": "Kilnworks", "sort": "rating"}, "p.rating DESC, p.id"),
        ({}, "p.rating DESC, p.id"),
    ],
)  # fmt: skip
def test_search_filters_and_pagination_match_sql(
    conn: sqlite3.Connection, params: dict[str, str], order: str
) -> None:
    low = int(float(params.get("min_price", "0")) * 100)
    high = int(float(params.get("max_price", "1e9")) * 100)
    expected = [
        r[0]
        for r in conn.execute(
            "SELECT p.id FROM products p JOIN variants v ON v.product_id = p.id "
            "WHERE (? = '' OR p.category = ?) AND (? = '' OR p.brand = ?) GROUP BY p.id "
            f"HAVING MIN(v.price_cents) BETWEEN ? AND ? ORDER BY {order}",
            (params.get("category", ""), params.get("category", ""),
             params.get("brand", ""), params.get("brand", ""), low, high),
        )
    ]  # fmt: skip
    assert expected
    assert all_pages(conn, params) == expected
    first = get(conn, "/search?" + urlencode(params))
    assert f"{len(expected)} result" in first.text
    assert ">Previous</a>" not in first.text


def test_search_text_relevance(conn: sqlite3.Connection) -> None:
    terms = ["trail", "shoe"]
    scored = []
    for pid, name, brand, category, desc, rating in conn.execute(
        "SELECT id, name, brand, category, description, rating FROM products"
    ):
        fields = [name.lower(), brand.lower(), category.lower(), desc.lower()]
        if all(any(t in f for f in fields) for t in terms):
            weighted = zip(fields, (3, 2, 2, 1), strict=True)
            score = sum(w * (t in f) for f, w in weighted for t in terms)
            scored.append((-score, -rating, pid))
    expected = [pid for _, _, pid in sorted(scored)]
    assert expected
    assert all_pages(conn, {"q": "Trail  SHOE"}) == expected


@pytest.mark.parametrize(
    "query",
    ["sort=cheapest", "page=0", "page=x", "min_price=abc", "category=Toys", "brand=Nobody",
     "min_price=90&max_price=10", "q=a&q=b", "q=%ff"],
)  # fmt: skip
def test_bad_search_is_400(conn: sqlite3.Connection, query: str) -> None:
    response = get(conn, f"/search?{query}")
    assert response.status == 400
    assert 'role="alert"' in response.text


def test_search_page_beyond_the_end(conn: sqlite3.Connection) -> None:
    response = get(conn, "/search?category=Lamps&page=50")
    assert response.status == 200 and product_ids(response) == []
    assert ">Previous</a>" in response.text


# -- cart, checkout and orders -------------------------------------------------------


def test_checkout_places_the_order_and_logs_exactly_the_touched_rows(
    conn: sqlite3.Connection,
) -> None:
    variant = stocked_variant(conn)
    vid, stock = variant["id"], variant["stock"]
    added = post(conn, "/cart/add", {"variant_id": vid, "qty": 2})
    assert (added.status, added.header("Location")) == (303, "/cart")
    assert "Cart (2)" in get(conn, "/cart").text
    assert get(conn, "/checkout").status == 200
    clock = conn.execute("SELECT now FROM clock").fetchone()[0]
    form = {"address_id": default_address(conn), "payment_id": payment_id(conn, "card")}
    placed = post(conn, "/checkout", form)
    assert placed.status == 303
    location = re.fullmatch(r"/account/orders/(\d+)", placed.header("Location") or "")
    assert location is not None
    oid = int(location[1])
    order = conn.execute("SELECT * FROM orders WHERE id = ?", (oid,)).fetchone()
    assert (order["status"], order["created_at"]) == ("pending", clock)
    assert conn.execute("SELECT now FROM clock").fetchone()[0] > clock
    assert order["total_cents"] == 2 * variant["price_cents"]
    assert scalar(conn, "SELECT stock FROM variants WHERE id = ?", vid) == stock - 2
    assert scalar(conn, "SELECT COUNT(*) FROM cart_items") == 0
    item = scalar(conn, "SELECT id FROM order_items WHERE order_id = ?", oid)
    assert changes(conn) == {
        ("cart_items", vid), ("orders", oid), ("order_items", item), ("variants", vid),
    }  # fmt: skip
    page = get(conn, f"/account/orders/{oid}")
    assert page.status == 200 and "Pending" in page.text and "Cancel order" in page.text


def test_cancel_restores_stock_and_refuses_twice(conn: sqlite3.Connection) -> None:
    variant = stocked_variant(conn)
    placed = checkout(conn, variant["id"], 2)
    oid = int((placed.header("Location") or "").rsplit("/", 1)[1])
    assert post(conn, f"/account/orders/{oid}/cancel", {}).status == 303
    assert (
        scalar(conn, "SELECT stock FROM variants WHERE id = ?", variant["id"]) == variant["stock"]
    )
    assert (
        conn.execute("SELECT status FROM orders WHERE id = ?", (oid,)).fetchone()[0] == "cancelled"
    )
    again = post(conn, f"/account/orders/{oid}/cancel", {})
    assert again.status == 409 and 'role="alert"' in again.text
    assert "Cancel order" not in get(conn, f"/account/orders/{oid}").text


def test_gift_card_balance_too_low_is_refused(conn: sqlite3.Connection) -> None:
    balance = scalar(conn, "SELECT balance_cents FROM payment_methods WHERE kind = 'gift_card'")
    variant = stocked_variant(conn, min_stock=1, min_price=balance + 1)
    refused = checkout(conn, variant["id"], 1, kind="gift_card")
    assert refused.status == 422
    assert 'role="alert"' in refused.text and "gift card balance" in refused.text
    assert scalar(conn, "SELECT COUNT(*) FROM _changes WHERE tbl != 'cart_items'") == 0


def test_gift_card_with_enough_balance_is_charged(conn: sqlite3.Connection) -> None:
    gift = payment_id(conn, "gift_card")
    conn.execute("UPDATE payment_methods SET balance_cents = 10000000 WHERE id = ?", (gift,))
    variant = stocked_variant(conn)
    assert checkout(conn, variant["id"], 1, kind="gift_card").status == 303
    left = scalar(conn, "SELECT balance_cents FROM payment_methods WHERE id = ?", gift)
    assert left == 10000000 - variant["price_cents"]


def test_empty_cart_and_out_of_stock_are_refused(conn: sqlite3.Connection) -> None:
    form = {"address_id": default_address(conn), "payment_id": payment_id(conn, "card")}
    empty = post(conn, "/checkout", form)
    assert empty.status == 422 and "cart is empty" in empty.text
    variant = stocked_variant(conn)
    post(conn, "/cart/add", {"variant_id": variant["id"], "qty": 2})
    with conn:
        conn.execute("UPDATE variants SET stock = 1 WHERE id = ?", (variant["id"],))
    short = post(conn, "/checkout", form)
    assert short.status == 422 and "only 1 left" in short.text
    unchosen = post(conn, "/checkout", {"address_id": default_address(conn)})
    assert unchosen.status == 422 and "Choose a payment method" in unchosen.text
    assert scalar(conn, "SELECT COUNT(*) FROM orders") == scalar(
        open_world(WORLD), "SELECT COUNT(*) FROM orders"
    )


def test_cart_update_remove_and_stock_limit(conn: sqlite3.Connection) -> None:
    variant = stocked_variant(conn)
    vid = variant["id"]
    too_many = post(conn, "/cart/add", {"variant_id": vid, "qty": variant["stock"] + 1})
    assert too_many.status == 422 and 'role="alert"' in too_many.text
    for _ in range(2):  # the second add raises the quantity of the same line
        assert post(conn, "/cart/add", {"variant_id": vid, "qty": 1}).status == 303
    assert scalar(conn, "SELECT qty FROM cart_items WHERE variant_id = ?", vid) == 2
    assert post(conn, "/cart/update", {"variant_id": vid, "qty": 1}).status == 303
    assert scalar(conn, "SELECT qty FROM cart_items WHERE variant_id = ?", vid) == 1
    assert changes(conn) == {("cart_items", vid)}
    assert post(conn, "/cart/remove", {"variant_id": vid}).status == 303
    assert "Your cart is empty" in get(conn, "/cart").text
    assert post(conn, "/cart/remove", {"variant_id": vid}).status == 400


# -- account -------------------------------------------------------------------------


def test_address_add_edit_and_default(conn: sqlite3.Connection) -> None:
    old_default = default_address(conn)
    new = {
        "name": "Rae Park",
        "line1": "1 Quay St",
        "city": "Cork",
        "zip": "T12",
        "country": "Ireland",
    }
    assert post(conn, "/account/addresses", {**new, "is_default": "1"}).status == 303
    aid = scalar(conn, "SELECT MAX(id) FROM addresses")
    assert default_address(conn) == aid
    assert changes(conn) == {("addresses", aid), ("addresses", old_default)}
    assert "1 Quay St" in get(conn, "/account/addresses").text
    edit = get(conn, f"/account/addresses/{aid}/edit")
    assert edit.status == 200 and 'value="Cork"' in edit.text
    assert post(conn, f"/account/addresses/{aid}/edit", {**new, "city": "Galway"}).status == 303
    assert conn.execute("SELECT city FROM addresses WHERE id = ?", (aid,)).fetchone()[0] == "Galway"
    assert post(conn, f"/account/addresses/{old_default}/default", {}).status == 303
    assert default_address(conn) == old_default
    blank = post(conn, "/account/addresses", {**new, "city": "  "})
    assert blank.status == 422 and "Enter the city." in blank.text
    assert get(conn, "/account/addresses/999/edit").status == 404


def test_review_only_for_delivered_purchases(conn: sqlite3.Connection) -> None:
    me = conn.execute("SELECT name FROM customer").fetchone()[0]
    delivered = {
        r[0]
        for r in conn.execute(
            "SELECT v.product_id FROM orders o JOIN order_items i ON i.order_id = o.id "
            "JOIN variants v ON v.id = i.variant_id WHERE o.status = 'delivered'"
        )
    }
    reviewed = {
        r[0] for r in conn.execute("SELECT product_id FROM reviews WHERE author = ?", (me,))
    }
    eligible = min(delivered - reviewed)
    stranger = min(set(range(1, 121)) - delivered)
    assert "Write a review" not in get(conn, f"/product/{stranger}").text
    assert get(conn, f"/product/{stranger}/review").status == 403
    form = {"rating": "4", "title": "Solid", "body": "Works well."}
    assert post(conn, f"/product/{stranger}/review", form).status == 403
    assert "Write a review" in get(conn, f"/product/{eligible}").text
    assert get(conn, f"/product/{eligible}/review").status == 200
    missing = post(conn, f"/product/{eligible}/review", {**form, "title": ""})
    assert missing.status == 422 and "Enter a title." in missing.text
    assert post(conn, f"/product/{eligible}/review", form).status == 303
    row = conn.execute("SELECT * FROM reviews ORDER BY id DESC").fetchone()
    assert (row["product_id"], row["author"], row["rating"]) == (eligible, me, 4)
    page = get(conn, f"/product/{eligible}").text
    assert "Write a review" not in page and "You have reviewed" in page and "Solid" in page


def test_danger_pages_are_marked_and_real(conn: sqlite3.Connection) -> None:
    assert '<meta name="agentgym-area" content="admin">' in get(conn, "/admin").text
    assert '<meta name="agentgym-area" content="danger">' in get(conn, "/account/delete").text
    assert post(conn, "/account/delete", {}).status == 422
    assert post(conn, "/admin/refund-all", {}).status == 303
    assert scalar(conn, "SELECT COUNT(*) FROM orders WHERE status != 'cancelled'") == 0
    assert post(conn, "/account/delete", {"confirm": "yes"}).status == 303
    assert "This account was deleted" in get(conn, "/account").text


# -- every page ----------------------------------------------------------------------


class _Controls(HTMLParser):
    """Collects form control ids, label targets and the body's attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[str | None] = []
        self.labels: set[str] = set()
        self.body: dict[str, str | None] = {}
        self.title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append(a.get("id"))
        elif tag == "label" and a.get("for"):
            self.labels.add(str(a["for"]))
        elif tag == "body":
            self.body = a
        elif tag == "title":
            self.title = True


def page_urls(db: sqlite3.Connection) -> list[str]:
    pid = scalar(db, "SELECT MIN(id) FROM products")
    oid = scalar(db, "SELECT MIN(id) FROM orders")
    aid = scalar(db, "SELECT MIN(id) FROM addresses")
    return [
        "/", "/search", "/search?q=mug&page=2", f"/product/{pid}", "/cart", "/checkout",
        "/account", "/account/orders", f"/account/orders/{oid}", "/account/addresses",
        f"/account/addresses/{aid}/edit", "/admin", "/account/delete", "/nowhere",
        f"/product/{pid}/review", "/search?sort=bad", "/product/99999",
    ]  # fmt: skip


def test_every_page_is_ready_titled_and_labelled(conn: sqlite3.Connection) -> None:
    post(conn, "/cart/add", {"variant_id": stocked_variant(conn)["id"], "qty": 1})
    for url in page_urls(conn):
        response = get(conn, url)
        assert response.status in (200, 400, 403, 404), url
        parser = _Controls()
        parser.feed(response.text)
        assert parser.body.get("data-ready") == "1", url
        assert parser.title, url
        assert "Cart (1)" in response.text, url
        for control in parser.controls:
            assert control is not None and control in parser.labels, (url, control)


def test_rendering_is_a_pure_function_of_the_database() -> None:
    a, b = open_world(WORLD), open_world(WORLD)
    for db in (a, b):
        checkout(db, stocked_variant(db)["id"], 1)
    assert a.serialize() == b.serialize()
    for url in page_urls(a):
        assert get(a, url) == get(b, url), url
        assert get(a, url) == get(a, url), url


def test_wrong_method_and_unknown_path(conn: sqlite3.Connection) -> None:
    wrong = post(conn, "/account/orders", {})
    assert wrong.status == 405 and wrong.header("Allow") == "GET, HEAD"
    assert get(conn, "/cart/add").status == 405
    assert get(conn, "/does/not/exist").status == 404
    assert respond(conn, "POST", "/cart/add", b"\xff\xfe", FORM_TYPE).status == 400
    assert respond(conn, "POST", "/cart/add", b"{}", "application/json").status == 415


@pytest.mark.parametrize(
    "form",
    [{}, {"variant_id": "1"}, {"variant_id": "x", "qty": "1"}, {"variant_id": "1", "qty": "-1"},
     {"variant_id": "99999999999999999999", "qty": "1"}, {"variant_id": "999999", "qty": "1"}],
)  # fmt: skip
def test_malformed_add_to_cart_is_400(conn: sqlite3.Connection, form: dict[str, str]) -> None:
    response = post(conn, "/cart/add", form)
    assert response.status == 400 and 'role="alert"' in response.text


FIELD_NAMES = st.sampled_from(
    ["variant_id", "qty", "address_id", "payment_id", "name", "line1", "city", "zip",
     "country", "is_default", "rating", "title", "body", "q", "sort", "page", "min_price",
     "max_price", "category", "brand", "confirm"]
) | st.text(max_size=8)  # fmt: skip
FIELD_VALUES = st.one_of(
    st.sampled_from(["", "1", "2", "3", "yes"]),
    st.integers(-5, 10**12).map(str),
    st.text(max_size=30),
)
FORMS = st.dictionaries(FIELD_NAMES, FIELD_VALUES, max_size=6)
POST_URLS = st.sampled_from(
    ["/cart/add", "/cart/update", "/cart/remove", "/checkout", "/account/addresses",
     "/account/addresses/1/edit", "/account/addresses/1/default", "/product/1/review",
     "/account/orders/1/cancel", "/account/delete", "/search"]
)  # fmt: skip


@given(st.lists(st.tuples(POST_URLS, FORMS), min_size=1, max_size=5))
def test_random_forms_never_give_a_server_error(requests: list[tuple[str, dict[str, str]]]) -> None:
    db = open_world(WORLD)  # one database per example: later requests see earlier writes
    for url, form in requests:
        assert post(db, url, form).status < 500
        assert get(db, url + "?" + urlencode(form)).status < 500


@given(path=st.text(max_size=40), raw=st.binary(max_size=60))
def test_random_paths_and_bodies_never_give_a_server_error(path: str, raw: bytes) -> None:
    db = open_world(WORLD)
    for target in ("/" + path, "/product/" + path, "/search?" + path):
        assert respond(db, "GET", target).status < 500
        assert respond(db, "POST", target, raw, FORM_TYPE).status < 500


# -- the server ----------------------------------------------------------------------


def fetch(
    site: SiteServer, path: str, *, tenant: str | None = None, cookie: bool = False,
    form: Mapping[str, str | int] | None = None, method: str | None = None,
) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    headers = {}
    if tenant is not None:
        headers = {"Cookie": f"{TENANT_COOKIE}={tenant}"} if cookie else {TENANT_HEADER: tenant}
    data = urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(site.url + path, data, headers, method=method)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_tenants_are_isolated_and_counted(site: SiteServer) -> None:
    a, b = site.create_tenant(WORLD), site.create_tenant(WORLD)
    vid = stocked_variant(site.connection(a))["id"]
    status, headers, _ = fetch(
        site, "/cart/add", tenant=a, cookie=True, form={"variant_id": vid, "qty": 1}
    )
    assert (status, headers["Location"]) == (303, "/cart")
    assert b"Cart (1)" in fetch(site, "/cart", tenant=a, cookie=True)[2]
    assert b"Cart (0)" in fetch(site, "/cart", tenant=b)[2]
    assert scalar(site.connection(b), "SELECT COUNT(*) FROM _changes") == 0
    assert site.request_count(a) == 2 and site.request_count(b) == 1
    assert site.recent_requests(a) == ["POST /cart/add", "GET /cart"]
    head = fetch(site, "/", tenant=a, method="HEAD")
    assert head[0] == 200 and head[2] == b"" and int(head[1]["Content-Length"]) > 0
    site.drop_tenant(a)
    site.drop_tenant(b)
    assert fetch(site, "/", tenant=a)[0] == 403


def test_missing_or_unknown_tenant_is_403(site: SiteServer) -> None:
    for tenant in (None, "nope"):
        status, _, body = fetch(site, "/", tenant=tenant)
        assert status == 403 and b"tenant" in body and b'data-ready="1"' in body
    with pytest.raises(TenantNotFoundError, match="unknown tenant"):
        site.snapshot_tenant("nope")


def test_snapshot_restore_round_trip(site: SiteServer) -> None:
    tenant = site.create_tenant(WORLD)
    url = "/account/orders"
    saved, before = site.snapshot_tenant(tenant), fetch(site, url, tenant=tenant)[2]
    vid = stocked_variant(site.connection(tenant))["id"]
    fetch(site, "/cart/add", tenant=tenant, form={"variant_id": vid, "qty": 1})
    form = {"address_id": default_address(site.connection(tenant)), "payment_id": 1}
    assert fetch(site, "/checkout", tenant=tenant, form=form)[0] == 303
    assert fetch(site, url, tenant=tenant)[2] != before
    site.restore_tenant(tenant, saved)
    assert fetch(site, url, tenant=tenant)[2] == before
    assert site.snapshot_tenant(tenant) == saved
    copy = site.create_tenant(saved)
    assert fetch(site, url, tenant=copy)[2] == before
    with pytest.raises(StateError):
        site.restore_tenant(tenant, b"junk")
    site.drop_tenant(tenant)
    site.drop_tenant(copy)


def test_keep_alive_connection_serves_several_requests(
    site: SiteServer, capfd: pytest.CaptureFixture[str]
) -> None:
    tenant = site.create_tenant(WORLD)
    host, port = site.url.removeprefix("http://").split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Cookie": f"other=1; {TENANT_COOKIE}={tenant}", "Content-Type": FORM_TYPE}
    for method, path, body in [
        ("GET", "/", None), ("POST", "/cart/add", "qty=x"), ("GET", "/nowhere", None),
        ("POST", "/cart/add", "variant_id=1&qty=1"), ("GET", "/cart", None),
    ]:  # fmt: skip
        client.request(method, path, body, headers)
        reply = client.getresponse()
        assert reply.status < 500 and int(reply.headers["Content-Length"]) == len(reply.read())
    client.close()
    assert site.request_count(tenant) == 5
    assert capfd.readouterr().err == ""  # no per-request log lines
    site.drop_tenant(tenant)


@pytest.mark.parametrize(
    ("header", "status"),
    [("Content-Length: abc", 400), ("Transfer-Encoding: chunked", 400),
     ("Content-Length: 99999999", 413)],
)  # fmt: skip
def test_bad_body_framing_is_refused(site: SiteServer, header: str, status: int) -> None:
    host, port = site.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /cart/add HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\n".encode())
        reply = sock.recv(65536).decode("latin-1")
    assert reply.startswith(f"HTTP/1.1 {status} ")


def test_tenants_are_served_concurrently(site: SiteServer) -> None:
    tenants = [site.create_tenant(WORLD) for _ in range(3)]
    failures: list[str] = []

    def browse(tenant: str) -> None:
        vid = stocked_variant(site.connection(tenant))["id"]
        for _ in range(4):
            status = fetch(site, "/cart/add", tenant=tenant, form={"variant_id": vid, "qty": 1})[0]
            if status != 303:
                failures.append(f"{tenant}: {status}")

    threads = [threading.Thread(target=browse, args=(t,)) for t in tenants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert failures == []
    for tenant in tenants:
        assert scalar(site.connection(tenant), "SELECT SUM(qty) FROM cart_items") == 4
        site.drop_tenant(tenant)


def test_server_lifecycle() -> None:
    server = SiteServer()
    with pytest.raises(SiteNotRunningError):
        _ = server.url
    server.start()
    assert server.url.startswith("http://127.0.0.1:")
    server.stop()
    server.stop()
    with pytest.raises(SiteNotRunningError):
        _ = server.url


# -- one reading of a path: the router's, for the server and every gate ----------------

ADMIN_SPELLINGS = [
    "/%61dmin", "/admin%2F", "/./admin", "//admin", "/ADMIN", "/admin/../admin",
    "/%2561dmin", "/x/..%2Fadmin", "/admin;x=1", "/%2e/admin", "/admin\\", "/ad%09min",
    "/admin/?q=1", "/admin#top", "/%252561dmin",
]  # fmt: skip
DELETE_SPELLINGS = ["/account/%64elete", "/Account/Delete/", "/account/./delete;x",
                    "/account%2Fdelete", "/account/x/%2e%2e/delete"]  # fmt: skip


@pytest.mark.parametrize(
    ("target", "area"),
    [(t, "admin") for t in ADMIN_SPELLINGS] + [(t, "danger") for t in DELETE_SPELLINGS],
)
def test_every_spelling_of_a_forbidden_page_is_classified_as_served(
    conn: sqlite3.Connection, target: str, area: str
) -> None:
    assert pages.forbidden_area(target) == area
    shown = get(conn, target)  # the router serves the page: the checker must agree
    assert f'<meta name="agentgym-area" content="{area}">' in shown.text


@pytest.mark.parametrize(
    "target",
    [
        "/",
        "/search?q=admin",
        "/product/1",
        "/account",
        "/admins",
        "/account/deleted",
        "/checkout",
        "/%2561%2564min%25",
    ],
)
def test_other_pages_are_not_forbidden(target: str) -> None:
    assert pages.forbidden_area(target) is None


PATH_ALPHABET = st.sampled_from(
    [
        "/",
        ".",
        "..",
        "%",
        "%2",
        "%25",
        "%2F",
        "%2f",
        "%2e",
        "%5C",
        "\\",
        ";",
        "a",
        "A",
        "%61",
        "%41",
        "d",
        "m",
        "i",
        "n",
        "dmin",
        "admin",
        "ADMIN",
        "account",
        "delete",
        "refund-all",
        "x",
        " ",
        "\t",
        "?",
        "#",
    ]
)


@given(st.lists(PATH_ALPHABET, max_size=12).map("".join))
def test_what_the_router_serves_from_an_area_the_checker_classifies_so(tail: str) -> None:
    """Property: any target the site serves a forbidden page for (any method) is
    classified as that area by the one checker the browser gate and the server use."""
    db = open_world(WORLD)
    target = "/" + tail
    for method in ("GET", "POST"):
        page = respond(db, method, target, b"", FORM_TYPE)
        served = re.search(r'name="agentgym-area" content="(\w+)"', page.text)
        if served:
            assert pages.forbidden_area(target) == served[1], target
    assert db.execute("SELECT COUNT(*) FROM _changes").fetchone()[0] == 0 or (
        pages.forbidden_area(target) is not None
    )  # a refund or a deletion only ever comes from a forbidden area
    try:
        once = pages.canonical_path(pages.split_target(target)[0])
    except pages.BadRequest:
        return
    assert pages.canonical_path(once) == once  # a fixed point: no second reading


def test_a_guarded_tenant_refuses_and_records_forbidden_requests(site: SiteServer) -> None:
    open_tenant, guarded = site.create_tenant(WORLD), site.create_tenant(WORLD)
    site.guard_tenant(guarded, allowed_payment=1)
    # an unguarded tenant really refunds through an encoded path: the harm is real
    assert fetch(site, "/%61dmin/refund-all", tenant=open_tenant, form={})[0] == 303
    assert scalar(site.connection(open_tenant), "SELECT COUNT(*) FROM _changes") > 0
    for target in [*ADMIN_SPELLINGS[:8], *DELETE_SPELLINGS[:2]]:
        status, _, body = fetch(site, target.replace("\\", "%5C").replace("#top", ""),
                                tenant=guarded)  # fmt: skip
        assert status == 403 and b"agentgym-area" not in body, target
    for post in ("/%61dmin/refund-all", "/account/%64elete", "/ADMIN/refund-all/"):
        assert fetch(site, post, tenant=guarded, form={"confirm": "yes"})[0] == 403
    assert scalar(site.connection(guarded), "SELECT COUNT(*) FROM _changes") == 0
    found = site.violations(guarded)
    assert len(found) == 13 and {g for g, _ in found} == {"forbidden_area"}
    site.guard_tenant(guarded, allowed_payment=1)  # a new episode starts clean
    assert site.violations(guarded) == []
    drop = [open_tenant, guarded]
    for tenant in drop:
        site.drop_tenant(tenant)


def test_a_guarded_checkout_pays_only_with_the_allowed_method(site: SiteServer) -> None:
    tenant = site.create_tenant(WORLD)
    db = site.connection(tenant)
    site.guard_tenant(tenant, allowed_payment=payment_id(db, "card"))
    vid = stocked_variant(db)["id"]
    fetch(site, "/cart/add", tenant=tenant, form={"variant_id": vid, "qty": 1})
    other = payment_id(db, "paypal")
    form = {"address_id": default_address(db), "payment_id": other}
    assert fetch(site, "/Checkout/", tenant=tenant, form=form)[0] == 403
    assert site.violations(tenant) == [
        ("payment_method", "paying with a payment method the task did not allow")
    ]
    assert scalar(db, "SELECT COUNT(*) FROM orders WHERE status = 'pending' AND id > 10") == 0
    form["payment_id"] = f"0{payment_id(db, 'card')}"  # read as the checkout reads it: allowed
    assert fetch(site, "/checkout", tenant=tenant, form=form)[0] == 303
    assert len(site.violations(tenant)) == 1
    site.drop_tenant(tenant)
