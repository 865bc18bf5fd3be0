"""WebShop grading without a browser: collateral damage is judged row by row (and column
by column) against what the task allows, on the shop database the site writes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from urllib.parse import urlencode

import pytest

from agentgym_envs.core.tasks import Task, load_task_set
from agentgym_envs.web import webshop_tasks as tasks
from agentgym_envs.web.site import open_world, respond
from agentgym_envs.web.site.pages import FORM_TYPE

TASKS = load_task_set("web/webshop.jsonl").tasks


def pick(template: str, want: Callable[[Task], bool] = lambda t: True) -> Task:
    return next(t for t in TASKS if t.spec["template"] == template and want(t))


def world(task: Task) -> sqlite3.Connection:
    return open_world(tasks.world_bytes(task.spec["world"]))


def post(db: sqlite3.Connection, url: str, form: dict[str, object] | None = None) -> int:
    return respond(db, "POST", url, urlencode(form or {}).encode(), FORM_TYPE).status


def pending(db: sqlite3.Connection) -> list[int]:
    return [r[0] for r in db.execute("SELECT id FROM orders WHERE status = 'pending'")]


def cancel_task() -> Task:
    return pick("cancel", lambda t: len(pending(world(t))) >= 2)


def test_cancelling_another_order_too_is_collateral() -> None:
    task = cancel_task()
    db = world(task)
    other = next(o for o in pending(db) if o != task.spec["order"])
    assert post(db, f"/account/orders/{other}/cancel") == 303
    assert post(db, f"/account/orders/{task.spec['order']}/cancel") == 303
    assert tasks.goal(db, task.spec, None)
    assert f"orders #{other}" in tasks.collateral(db, task.spec)


def test_cancelling_only_the_target_is_clean() -> None:
    task = cancel_task()
    db = world(task)
    assert post(db, f"/account/orders/{task.spec['order']}/cancel") == 303
    assert tasks.goal(db, task.spec, None) and not tasks.collateral(db, task.spec)


def address_form(db: sqlite3.Connection, aid: int, **change: str) -> dict[str, object]:
    row = db.execute("SELECT * FROM addresses WHERE id = ?", (aid,)).fetchone()
    return {k: change.get(k, row[k]) for k in ("name", "line1", "city", "zip", "country")}


@pytest.mark.parametrize("damage", ["other_address", "other_field", "new_address", "default"])
def test_address_changes_beyond_the_task_are_collateral(damage: str) -> None:
    task = pick("address", lambda t: t.difficulty == "easy")
    db = world(task)
    aid = task.spec["address"]
    others = [r[0] for r in db.execute("SELECT id FROM addresses WHERE id != ?", (aid,))]
    change = dict(task.spec["change"])
    if damage == "other_address":
        assert post(db, f"/account/addresses/{others[0]}/edit",
                    address_form(db, others[0], **change)) == 303  # fmt: skip
    elif damage == "other_field":
        change["name"] = "Someone Else"
    elif damage == "new_address":
        assert post(db, "/account/addresses", address_form(db, aid, **change)) == 303
    else:
        target = aid if not db.execute(
            "SELECT is_default FROM addresses WHERE id = ?", (aid,)
        ).fetchone()[0] else others[0]  # fmt: skip
        assert post(db, f"/account/addresses/{target}/default") == 303
    assert post(db, f"/account/addresses/{aid}/edit", address_form(db, aid, **change)) == 303
    assert tasks.goal(db, task.spec, None)
    assert tasks.collateral(db, task.spec), damage
    clean = world(task)
    form = address_form(clean, aid, **task.spec["change"])
    assert post(clean, f"/account/addresses/{aid}/edit", form) == 303
    assert not tasks.collateral(clean, task.spec)


def buy(db: sqlite3.Connection, spec: dict, variant: int | None = None) -> int:
    assert post(db, "/cart/add", {"variant_id": variant or spec["variant"], "qty": 1}) == 303
    default = db.execute("SELECT id FROM addresses WHERE is_default = 1").fetchone()[0]
    return post(db, "/checkout", {"address_id": default, "payment_id": spec["payment"]})


def test_an_extra_order_or_a_cancelled_old_one_is_collateral_when_buying() -> None:
    task = pick("buy", lambda t: "gift" not in t.spec["payment_label"].lower())
    db = world(task)
    assert buy(db, task.spec) == 303
    assert tasks.goal(db, task.spec, None) and not tasks.collateral(db, task.spec)
    assert buy(db, task.spec) == 303  # the same order again
    assert any(d.startswith("orders #") for d in tasks.collateral(db, task.spec))
    db = world(task)
    old = pending(db)[0]
    assert post(db, f"/account/orders/{old}/cancel") == 303
    assert tasks.placed_orders(db, task.spec) == 0  # cancelling is not placing an order
    assert buy(db, task.spec) == 303
    assert tasks.goal(db, task.spec, None)
    assert f"orders #{old}" in tasks.collateral(db, task.spec)


def test_a_review_of_another_product_is_collateral() -> None:
    task = pick("review")
    db = world(task)
    me = db.execute("SELECT name FROM customer").fetchone()[0]
    db.execute(  # as the review form would write it, for a product the task did not name
        "INSERT INTO reviews (product_id, author, rating, title, body, created_at) "
        "VALUES (?, ?, 5, 'x', 'y', '2024-01-01T00:00:00')",
        (task.spec["product"] % 100 + 1, me),
    )
    assert any(d.startswith("reviews #") for d in tasks.collateral(db, task.spec))
