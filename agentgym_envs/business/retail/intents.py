"""What a Retail user can ask for: one builder per intent.

A builder draws the records of its request from the catalog (an order in the right
state, a variant, a payment method) and returns a :class:`Part`: the user's request
(plain data for ``user.py``) and the gold steps that serve it, ready to be rendered into
action text. Each gold proposal names the write with one of the request's verbs and
every string in its ``mentions``; each refusal cites the rule that forbids the request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym_envs.business.retail.catalog import (
    Catalog,
    address_text,
    method_text,
    money,
    options_text,
)
from agentgym_envs.business.retail.world import CANCEL_REASONS, CITIES, STREETS

Step = tuple[str, str, dict[str, Any]]  # ("call" | "write", tool, args) or ("say", text, {})

CLOSERS = {
    "polite": ("", " Thank you so much!", " Thanks in advance."),
    "terse": ("", "", " Thanks."),
    "chatty": (
        " Sorry, I know I ramble, it has been a long week!",
        " My neighbour recommended your shop, by the way.",
        " Anyway, I hope you are having a nice day.",
    ),
}
WHY = {
    "no longer needed": "it is no longer needed",
    "ordered by mistake": "I ordered it by mistake",
}


@dataclass
class RetailTaskDraft:
    """What a builder draws from: the world, the RNG and the task's choices so far."""

    cat: Catalog
    rng: np.random.Generator
    user: dict[str, Any]
    persona: str
    used: set[str] = field(default_factory=set)  # orders already in this task
    fallback: bool = False  # ask first for a variant that is out of stock
    lines: int = 1  # items replaced at once by a swap
    by_product: bool = False  # name the order by a product instead of its id
    spent: dict[str, float] = field(default_factory=dict)  # gift card charges so far

    def affords(self, method: dict[str, Any], amount: float) -> bool:
        """Whether ``method`` can pay ``amount`` after this task's earlier charges."""
        if method["source"] != "gift_card" or amount <= 0:
            return True
        return bool(method["balance"] - self.spent.get(method["id"], 0.0) >= amount)

    def charge(self, method: dict[str, Any], amount: float) -> None:
        """Record a charge of the gold conversation (a later request sees less balance)."""
        if method["source"] == "gift_card" and amount > 0:
            self.spent[method["id"]] = self.spent.get(method["id"], 0.0) + amount

    def pick(self, options: Sequence[Any]) -> Any:
        """One of ``options``, drawn from the task's RNG."""
        return options[int(self.rng.integers(len(options)))]

    def orders(self, status: str, test: Callable[[dict[str, Any]], bool] = bool) -> list[str]:
        """The user's unused orders in ``status`` that pass ``test``, shuffled."""
        found = [
            o
            for o in self.user["orders"]
            if o not in self.used
            and self.cat.orders[o]["status"] == status
            and test(self.cat.orders[o])
        ]
        return [found[i] for i in self.rng.permutation(len(found))]

    def say(self, *cores: str) -> list[str]:
        """The paraphrases of a request, in the persona's voice."""
        closers = CLOSERS[self.persona]
        return [core + closers[(i + len(core)) % len(closers)] for i, core in enumerate(cores)]

    def ref(self, oid: str) -> str:
        """How the user names an order: its id, or (``by_product``) a product only it has."""
        if self.by_product:
            names = [self.name_of(i) for i, _ in self.cat.orders[oid]["items"]]
            elsewhere = {
                self.name_of(i)
                for o in self.user["orders"]
                if o != oid
                for i, _ in self.cat.orders[o]["items"]
            }
            unique = [n for n in names if n not in elsewhere]
            if unique:
                return f"my order with the {unique[0]}"
        return f"order {oid}"

    def name_of(self, item_id: str) -> str:
        """The product name of an item (``Backpack``)."""
        return str(self.cat.products[self.cat.items[item_id]["product_id"]]["name"])

    def paid_with(self, oid: str) -> list[str]:
        """The payment methods that paid an order (the original ones)."""
        return list(
            dict.fromkeys(m for k, m, _ in self.cat.orders[oid]["payments"] if k == "payment")
        )


@dataclass
class Part:
    """One request of a task and the gold steps that serve it."""

    family: str  # cancel, modify_items, question, refuse, ... (for held-out pairs)
    request: dict[str, Any]
    steps: list[Step]
    targets: list[str]


def yours(text: str) -> str:
    """The agent's wording of the user's ``my gift card``: ``your gift card``."""
    return text.replace("my ", "your ", 1)


def write_spec(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """An expected write as ``user.py`` reads it."""
    return {"tool": tool, "args": args}


def request_spec(intent: str, say: list[str], **extra: Any) -> dict[str, Any]:
    """A request as ``user.py`` reads it; its kind follows from the intent and a write."""
    kind = "question" if intent.startswith("question") else "refuse"
    kind = "write" if "write" in extra else kind
    return {"kind": kind, "intent": intent, "say": say, **extra}


def cancel(ctx: RetailTaskDraft) -> Part | None:
    """Cancel a pending order, for one of the two allowed reasons."""
    found = ctx.orders("pending")
    if not found:
        return None
    oid, reason = found[0], ctx.pick(CANCEL_REASONS)
    ref, why = ctx.ref(oid), WHY[reason]
    write = write_spec("cancel_pending_order", {"order_id": oid, "reason": reason})
    request = request_spec(
        "cancel",
        ctx.say(f"Please cancel {ref}, because {why}.", f"I want to cancel {ref}; {why}."),
        verbs=["cancel"],
        write=write,
        mentions=[oid, reason],
    )
    proposal = (
        f"Order {oid} is pending. I will cancel order {oid} with the reason '{reason}'; "
        "the payment will be refunded to the original payment method. Shall I proceed?"
    )
    steps = propose(oid, [], proposal, write, f"Order {oid} has been cancelled.")
    return take(ctx, oid, Part("cancel", request, steps, [oid]))


def modify_address(ctx: RetailTaskDraft) -> Part | None:
    """Ship a pending order to a new address."""
    found = ctx.orders("pending")
    if not found:
        return None
    oid = found[0]
    city, state, zip3 = ctx.pick(CITIES)
    address = {
        "address1": f"{int(ctx.rng.integers(1, 1000))} {ctx.pick(STREETS)}",
        "address2": ctx.pick(("", "Apt {}", "Suite {}")).format(int(ctx.rng.integers(1, 900))),
        "city": city,
        "state": state,
        "country": "USA",
        "zip": f"{zip3 * 100 + int(ctx.rng.integers(0, 100)):05d}",
    }
    text, ref = address_text(address), ctx.ref(oid)
    write = write_spec("modify_pending_order_address", {"order_id": oid, **address})
    mentions = [oid, address["address1"], address["city"], address["zip"]]
    request = request_spec(
        "modify_address",
        ctx.say(
            f"Please change the shipping address of {ref} to {text}.",
            f"I moved. Can you update {ref} so that it ships to {text}?",
        ),
        verbs=["change", "update", "modify"],
        write=write,
        mentions=mentions + ([address["address2"]] if address["address2"] else []),
    )
    proposal = f"I will update the shipping address of order {oid} to {text}. Shall I proceed?"
    done = f"The shipping address of order {oid} has been updated to {text}."
    steps = propose(oid, [], proposal, write, done)
    return take(ctx, oid, Part("modify_address", request, steps, [oid]))


def modify_payment(ctx: RetailTaskDraft) -> Part | None:
    """Pay a pending order with another of the user's payment methods."""
    for oid in ctx.orders("pending"):
        order = ctx.cat.orders[oid]
        old = ctx.paid_with(oid)
        total = round(sum(a if k == "payment" else -a for k, _, a in order["payments"]), 2)
        choices = [m for m in ctx.user["methods"] if m["id"] not in old and ctx.affords(m, total)]
        if len(old) != 1 or not choices:
            continue
        new = ctx.pick(choices)
        ctx.charge(new, total)
        ref, desc = ctx.ref(oid), method_text(new)
        write = write_spec(
            "modify_pending_order_payment", {"order_id": oid, "payment_method_id": new["id"]}
        )
        request = request_spec(
            "modify_payment",
            ctx.say(
                f"I'd like to pay for {ref} with {desc} instead.",
                f"Please switch the payment method of {ref} to {desc}.",
            ),
            verbs=["change", "switch", "update"],
            write=write,
            mentions=[oid, new["id"]],
        )
        proposal = (
            f"I will change the payment method of order {oid} from {old[0]} to {new['id']} "
            f"({yours(desc)}): {money(total)} will be charged to {new['id']} and {old[0]} "
            "will be refunded. Shall I proceed?"
        )
        done = f"The payment method of order {oid} has been changed to {new['id']}."
        steps = propose(oid, [], proposal, write, done)
        return take(ctx, oid, Part("modify_payment", request, steps, [oid]))
    return None


def return_items(ctx: RetailTaskDraft) -> Part | None:
    """Return one or two items of a delivered order (refund: original method or gift card)."""
    for oid in ctx.orders("delivered"):
        lines = ctx.cat.orders[oid]["items"]
        n = 2 if len(lines) >= 2 and ctx.rng.random() < 0.35 else 1
        picked = sorted(ctx.rng.permutation(len(lines))[:n].tolist())
        old = [lines[i][0] for i in picked]
        total = round(sum(lines[i][1] for i in picked), 2)
        gifts = [m for m in ctx.user["methods"] if m["source"] == "gift_card"]
        original = ctx.cat.methods[ctx.paid_with(oid)[0]]
        method = gifts[0] if gifts and ctx.rng.random() < 0.4 else original
        pm = method["id"]
        to = (
            "it to the original payment method"
            if method is original
            else f"the money to {method_text(method)}"
        )
        names = " and the ".join(ctx.name_of(o) for o in old)
        write = write_spec(
            "return_delivered_order_items",
            {"order_id": oid, "item_ids": old, "payment_method_id": pm},
        )
        request = request_spec(
            "return",
            ctx.say(
                f"I'd like to return the {names} from order {oid}. Please refund {to}.",
                f"The {names} from order {oid} did not work out for me. "
                f"I want to send it back; refund {to}, please.",
            ),
            verbs=["return"],
            write=write,
            mentions=[oid, *old, pm],
        )
        items = " and ".join(f"item {o} ({ctx.name_of(o)})" for o in old)
        refund = f"{money(total)} will be refunded to {pm}"
        proposal = f"I will return {items} from order {oid}; {refund}. Shall I proceed?"
        done = f"The return for order {oid} has been requested, and {refund}."
        steps = propose(oid, [], proposal, write, done)
        return take(ctx, oid, Part("return", request, steps, [oid]))
    return None


def question(ctx: RetailTaskDraft) -> Part | None:
    """Ask an order's status, the price paid for an item, or how many orders there are."""
    kind = ctx.pick(("status", "price", "count"))
    uid = ctx.user["id"]
    if kind == "count":
        n = len(ctx.user["orders"])
        say = ctx.say(
            "How many orders have I placed with you in total?",
            "Quick question: how many orders do I have with you?",
        )
        request = request_spec("question_count", say, answer=[str(n)])
        steps: list[Step] = [
            ("call", "list_user_orders", {"user_id": uid}),
            ("say", f"You have placed {n} orders in total.", {}),
        ]
        return Part("question", request, steps, [])
    free = [o for o in ctx.user["orders"] if o not in ctx.used]
    if not free:
        return None
    oid = ctx.pick(free)
    order = ctx.cat.orders[oid]
    if kind == "status":
        ref = ctx.ref(oid)
        say = ctx.say(
            f"What is the status of {ref}?", f"Could you check {ref} for me? What's its status?"
        )
        request = request_spec("question_status", say, answer=[order["status"]])
        answer = f"Order {oid} is {order['status']}."
    else:
        item_id, price = ctx.pick(order["items"])
        name = ctx.name_of(item_id)
        say = ctx.say(
            f"How much did I pay for the {name} in order {oid}?",
            f"What was the price of the {name} in my order {oid}?",
        )
        request = request_spec("question_price", say, answer=[json.dumps(price)])
        answer = f"You paid {money(price)} for the {name} in order {oid}."
    steps = [("call", "get_order_details", {"order_id": oid}), ("say", answer, {})]
    return take(ctx, oid, Part("question", request, steps, [oid]))


def propose(
    oid: str, reads: list[Step], proposal: str, write: dict[str, Any], done: str
) -> list[Step]:
    """Read the order, propose the write, apply it once confirmed, report it done."""
    return [
        ("call", "get_order_details", {"order_id": oid}),
        *reads,
        ("say", proposal, {}),
        ("write", write["tool"], dict(write["args"])),
        ("say", done, {}),
    ]


def take(ctx: RetailTaskDraft, oid: str, part: Part) -> Part:
    """Mark ``oid`` as used by this task (no two requests touch one order)."""
    ctx.used.add(oid)
    return part


def opts_of(ctx: RetailTaskDraft, item_id: str) -> str:
    """An item's options as the user says them: ``color blue, size L``."""
    return options_text(ctx.cat.items[item_id]["options"])
