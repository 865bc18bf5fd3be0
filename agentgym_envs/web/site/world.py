"""The shop world: its SQLite schema and its seeded, byte-for-byte deterministic generation.

:func:`build_world` draws everything from one ``random.Random(seed)`` and returns the
serialized database, so the same seed always gives identical bytes. :func:`open_world`
turns those bytes into a fresh in-memory connection for one tenant of the site.

Tables:
    products: id, name, category, brand, description, rating (0-5, one decimal),
        created_at.
    variants: id, product_id, color, size, price_cents, stock (0 means out of stock).
    customer: exactly one row, the logged-in shopper: id, name, email, deleted_at
        (set when the shopper deletes the account, else NULL).
    addresses: id, name (the recipient), line1, city, zip, country, is_default (0/1).
    payment_methods: id, kind ('card', 'gift_card' or 'paypal'), label, last4 (cards
        only), balance_cents (gift cards only, else NULL).
    orders: id, status ('pending', 'shipped', 'delivered' or 'cancelled'), address_id,
        payment_id, created_at, total_cents.
    order_items: id, order_id, variant_id, qty, price_cents (unit price when ordered).
    cart_items: variant_id (primary key), qty.
    reviews: id, product_id, author, rating (1-5), title, body, created_at. The
        customer's own reviews have ``author`` equal to the customer's name.
    clock: one row, ``now``: the site's injected clock. Every timestamp the site writes
        is read from it, and :func:`advance_clock` moves it on after each write.
    _changes: (tbl, pk) of every business-table row inserted, updated (with a changed
        value) or deleted since the world was built; empty in a fresh world.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timedelta

from agentgym_envs.core.errors import ConfigError, StateError
from agentgym_envs.web.site import vocab

SCHEMA = """
CREATE TABLE products (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,
    brand TEXT NOT NULL, description TEXT NOT NULL,
    rating REAL NOT NULL CHECK (rating BETWEEN 0 AND 5), created_at TEXT NOT NULL);
CREATE TABLE variants (
    id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id),
    color TEXT NOT NULL, size TEXT NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents > 0),
    stock INTEGER NOT NULL CHECK (stock >= 0));
CREATE TABLE customer (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, deleted_at TEXT);
CREATE TABLE addresses (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, line1 TEXT NOT NULL, city TEXT NOT NULL,
    zip TEXT NOT NULL, country TEXT NOT NULL,
    is_default INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)));
CREATE TABLE payment_methods (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('card', 'gift_card', 'paypal')),
    label TEXT NOT NULL, last4 TEXT, balance_cents INTEGER CHECK (balance_cents >= 0));
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'delivered', 'cancelled')),
    address_id INTEGER NOT NULL REFERENCES addresses(id),
    payment_id INTEGER NOT NULL REFERENCES payment_methods(id),
    created_at TEXT NOT NULL, total_cents INTEGER NOT NULL CHECK (total_cents >= 0));
CREATE TABLE order_items (
    id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
    variant_id INTEGER NOT NULL REFERENCES variants(id),
    qty INTEGER NOT NULL CHECK (qty > 0), price_cents INTEGER NOT NULL);
CREATE TABLE cart_items (
    variant_id INTEGER PRIMARY KEY REFERENCES variants(id),
    qty INTEGER NOT NULL CHECK (qty > 0));
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id),
    author TEXT NOT NULL, rating INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 5),
    title TEXT NOT NULL, body TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE clock (now TEXT NOT NULL);
CREATE TABLE _changes (tbl TEXT NOT NULL, pk NOT NULL, PRIMARY KEY (tbl, pk)) WITHOUT ROWID;
CREATE INDEX variants_by_product ON variants(product_id);
CREATE INDEX reviews_by_product ON reviews(product_id);
CREATE INDEX items_by_order ON order_items(order_id);
"""

#: Business tables whose row changes are recorded in ``_changes`` (not ``clock``).
TRACKED_TABLES = (
    "products", "variants", "customer", "addresses", "payment_methods", "orders",
    "order_items", "cart_items", "reviews",
)  # fmt: skip
MAX_PRODUCTS = len(vocab.CATEGORIES) * 10 * len(vocab.VERSIONS) * 4  # distinct names
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
EPOCH = datetime(2024, 1, 1)


def build_world(seed: int, *, n_products: int = 120) -> bytes:
    """Build the shop world for ``seed`` and return the serialized SQLite database.

    Args:
        seed: Any integer; the same seed always gives byte-identical output.
        n_products: Catalogue size, spread evenly over the six categories.

    Raises:
        ConfigError: ``n_products`` is outside ``1..MAX_PRODUCTS``.
    """
    if not isinstance(n_products, int) or not 1 <= n_products <= MAX_PRODUCTS:
        raise ConfigError(
            f"n_products must be an int in 1..{MAX_PRODUCTS} (the number of distinct "
            f"product names the vocabulary allows), got {n_products!r}"
        )
    rng = random.Random(seed)
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    now = EPOCH + timedelta(seconds=rng.randrange(365 * 86400))
    conn.execute("INSERT INTO clock VALUES (?)", (now.strftime(TIME_FORMAT),))
    _add_catalog(conn, rng, now, n_products)
    name = _add_customer(conn, rng)
    _add_orders(conn, rng, now)
    _add_reviews(conn, rng, now, name)
    install_change_log(conn)
    conn.commit()
    data = conn.serialize()
    conn.close()
    return data


def open_world(data: bytes) -> sqlite3.Connection:
    """Deserialize ``data`` (from :func:`build_world` or a snapshot) into a new connection.

    The connection is in-memory, usable from any thread (callers serialize access) and
    returns :class:`sqlite3.Row` rows.

    Raises:
        StateError: ``data`` is not a shop world database.
    """
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        conn.deserialize(data)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    except (sqlite3.DatabaseError, TypeError, ValueError) as exc:
        conn.close()
        raise StateError(
            f"expected the bytes of a shop world (build_world or snapshot_tenant), but "
            f"SQLite could not read them: {exc}"
        ) from exc
    missing = sorted({*TRACKED_TABLES, "clock", "_changes"} - tables)
    if missing:
        conn.close()
        raise StateError(
            f"expected a shop world database, but it lacks the tables {missing}; "
            "build one with build_world(seed)"
        )
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def current_time(conn: sqlite3.Connection) -> str:
    """The site's clock, an ISO timestamp like ``2024-05-17T09:32:11``."""
    row = conn.execute("SELECT now FROM clock").fetchone()
    return str(row[0])


def advance_clock(conn: sqlite3.Connection, seconds: int = 60) -> str:
    """Move the site's clock on by ``seconds`` (inside the caller's transaction).

    Returns:
        The new time, in the same ISO format.
    """
    if seconds < 0:
        raise ConfigError(f"the clock only moves forward; got seconds={seconds}")
    then = datetime.strptime(current_time(conn), TIME_FORMAT) + timedelta(seconds=seconds)
    stamp = then.strftime(TIME_FORMAT)
    conn.execute("UPDATE clock SET now = ?", (stamp,))
    return stamp


def install_change_log(conn: sqlite3.Connection) -> None:
    """Create the triggers that record touched rows of :data:`TRACKED_TABLES` in ``_changes``.

    An UPDATE is recorded only when some column really changes, so a no-op write (a
    "Make default" on the default address) leaves no trace. The triggers test for an
    existing row instead of using ``INSERT OR IGNORE``: inside a trigger, the outer
    statement's conflict policy (an upsert's, say) overrides ``OR IGNORE``.
    """
    for table in TRACKED_TABLES:
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        pk = next(row[1] for row in info if row[5] == 1)
        changed = " OR ".join(f"OLD.{row[1]} IS NOT NEW.{row[1]}" for row in info)
        for event, ref, when in (
            ("INSERT", "NEW", ""),
            ("UPDATE", "NEW", f" WHEN {changed}"),
            ("DELETE", "OLD", ""),
        ):
            conn.execute(
                f"CREATE TRIGGER _track_{table}_{event.lower()} AFTER {event} ON {table}"
                f"{when} BEGIN INSERT INTO _changes SELECT '{table}', {ref}.{pk} WHERE NOT "
                f"EXISTS (SELECT 1 FROM _changes WHERE tbl = '{table}' AND pk = {ref}.{pk});"
                " END"
            )


def _stamp(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


def _add_catalog(conn: sqlite3.Connection, rng: random.Random, now: datetime, n: int) -> None:
    """Products spread evenly over the categories, then 1-6 variants each."""
    per_category = [n // len(vocab.CATEGORIES)] * len(vocab.CATEGORIES)
    for i in range(n % len(vocab.CATEGORIES)):
        per_category[i] += 1
    drafts: list[tuple[vocab.CategorySpec, str, str]] = []
    for spec, count in zip(vocab.CATEGORIES, per_category, strict=True):
        combos = [
            (m, v, k) for m in range(len(spec.models)) for v in vocab.VERSIONS for k in spec.kinds
        ]
        for m, version, kind in rng.sample(combos, count):
            brand = spec.brands[m % len(spec.brands)]  # a model line belongs to one brand
            drafts.append((spec, f"{spec.models[m]}{version} {kind}", brand))
    rng.shuffle(drafts)
    for pid, (spec, name, brand) in enumerate(drafts, start=1):
        f1, f2 = rng.sample(spec.features, 2)
        opener = rng.choice(vocab.DESCRIPTION_OPENERS)
        closer = rng.choice(vocab.DESCRIPTION_CLOSERS)
        text = f"{opener} {closer}".strip().format(name=name, brand=brand, f1=f1, f2=f2)
        created = now - timedelta(days=rng.randrange(30, 720), seconds=rng.randrange(86400))
        conn.execute(
            "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
            (pid, name, spec.name, brand, text, round(rng.uniform(2.5, 5.0), 1), _stamp(created)),
        )
        _add_variants(conn, rng, pid, spec)


def _add_variants(
    conn: sqlite3.Connection, rng: random.Random, pid: int, spec: vocab.CategorySpec
) -> None:
    combos = [(c, s) for c in range(len(spec.colors)) for s in range(len(spec.sizes))]
    chosen = sorted(rng.sample(combos, min(rng.randint(1, 6), len(combos))))
    base = rng.randint(*spec.price_range) * 100 - 1  # prices end in .99
    for color, size in chosen:
        price = base + rng.choice((0, 0, 0, 500, 1000))
        stock = 0 if rng.random() < 0.2 else rng.randint(1, 30)
        conn.execute(
            "INSERT INTO variants (product_id, color, size, price_cents, stock) "
            "VALUES (?, ?, ?, ?, ?)",
            (pid, spec.colors[color], spec.sizes[size], price, stock),
        )


def _add_customer(conn: sqlite3.Connection, rng: random.Random) -> str:
    """The shopper, 2-3 addresses (one default) and 3-4 payment methods (one gift card)."""
    name = rng.choice(vocab.CUSTOMER_NAMES)
    email = name.lower().replace(" ", ".") + "@example.com"
    conn.execute("INSERT INTO customer (id, name, email) VALUES (1, ?, ?)", (name, email))
    n_addresses = rng.randint(2, 3)
    default = rng.randrange(n_addresses)
    for i, (city, zip_code, country) in enumerate(rng.sample(vocab.CITIES, n_addresses)):
        line1 = f"{rng.randint(1, 240)} {rng.choice(vocab.STREETS)}"
        conn.execute(
            "INSERT INTO addresses (name, line1, city, zip, country, is_default) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (name, line1, city, zip_code, country, int(i == default)),
        )
    brands = rng.sample(vocab.CARD_BRANDS, rng.randint(1, 2))
    for brand in brands:
        last4 = f"{rng.randrange(10000):04d}"
        conn.execute(
            "INSERT INTO payment_methods (kind, label, last4) VALUES ('card', ?, ?)",
            (f"{brand} ending in {last4}", last4),
        )
    conn.execute(
        "INSERT INTO payment_methods (kind, label, balance_cents) VALUES ('gift_card', ?, ?)",
        ("Gift card", rng.randint(10, 60) * 100),
    )
    conn.execute(
        "INSERT INTO payment_methods (kind, label) VALUES ('paypal', ?)", (f"PayPal ({email})",)
    )
    return name


# Age in days of a past order, by status: pending and shipped orders are recent.
ORDER_AGES = {"pending": (0, 2), "shipped": (2, 6), "delivered": (10, 300), "cancelled": (5, 300)}


def _add_orders(conn: sqlite3.Connection, rng: random.Random, now: datetime) -> None:
    """4-10 past orders, at least one delivered and one pending, oldest first."""
    count = rng.randint(4, 10)
    extra = rng.choices(
        ("pending", "shipped", "delivered", "cancelled"), weights=(2, 3, 6, 2), k=count - 2
    )
    statuses = ["delivered", "pending", *extra]
    dated = sorted(
        (now - timedelta(days=rng.uniform(*ORDER_AGES[s])), s) for s in statuses
    )  # a float age makes ties between orders impossible in practice
    addresses = [r[0] for r in conn.execute("SELECT id FROM addresses ORDER BY id")]
    # Past orders were paid by card or PayPal: the gift card's balance is still unspent.
    payments = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM payment_methods WHERE kind != 'gift_card' ORDER BY id"
        )
    ]
    variants = conn.execute("SELECT id, price_cents FROM variants ORDER BY id").fetchall()
    for moment, status in dated:
        lines = rng.sample(variants, min(rng.randint(1, 3), len(variants)))
        qtys = [rng.choice((1, 1, 1, 2)) for _ in lines]
        total = sum(price * q for (_, price), q in zip(lines, qtys, strict=True))
        cur = conn.execute(
            "INSERT INTO orders (status, address_id, payment_id, created_at, total_cents) "
            "VALUES (?, ?, ?, ?, ?)",
            (status, rng.choice(addresses), rng.choice(payments), _stamp(moment), total),
        )
        for (vid, price), qty in zip(lines, qtys, strict=True):
            conn.execute(
                "INSERT INTO order_items (order_id, variant_id, qty, price_cents) "
                "VALUES (?, ?, ?, ?)",
                (cur.lastrowid, vid, qty, price),
            )


def _add_reviews(conn: sqlite3.Connection, rng: random.Random, now: datetime, me: str) -> None:
    """0-4 reviews by other shoppers per product, and one by the customer when possible."""
    products = conn.execute("SELECT id, rating, created_at FROM products ORDER BY id").fetchall()
    rows: list[tuple[str, int, str, int, str, str]] = []
    for pid, rating, created in products:
        start = datetime.strptime(created, TIME_FORMAT)
        span = int((now - start).total_seconds())
        for author in rng.sample(vocab.REVIEWER_NAMES, rng.choice((0, 0, 1, 1, 2, 3, 4))):
            stars = min(5, max(1, round(rng.gauss(rating, 0.8))))
            title, body = rng.choice(vocab.REVIEW_TEXTS[stars])
            when = _stamp(start + timedelta(seconds=rng.randrange(1, span)))
            rows.append((when, pid, author, stars, title, body))
    # The customer reviewed the first delivered product, but only when a second one is
    # left unreviewed, so every world has a product the customer may still review.
    delivered = conn.execute(
        "SELECT DISTINCT v.product_id, o.created_at FROM orders o "
        "JOIN order_items i ON i.order_id = o.id JOIN variants v ON v.id = i.variant_id "
        "WHERE o.status = 'delivered' ORDER BY o.id, i.id"
    ).fetchall()
    if len({pid for pid, _ in delivered}) >= 2:
        pid, ordered = delivered[0]
        stars = rng.randint(3, 5)
        title, body = rng.choice(vocab.REVIEW_TEXTS[stars])
        when = _stamp(datetime.strptime(ordered, TIME_FORMAT) + timedelta(days=7))
        rows.append((when, pid, me, stars, title, body))
    for when, pid, author, stars, title, body in sorted(rows):
        conn.execute(
            "INSERT INTO reviews (product_id, author, rating, title, body, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (pid, author, stars, title, body, when),
        )
