"""Retail: a customer-service simulator of an online store on a SQLite world."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentgym_envs.business.answers import (
    NUMBER,
    TIME,
    AnswerReader,
    pattern_kind,
    vocabulary_kind,
)
from agentgym_envs.business.base import BusinessEnv
from agentgym_envs.business.retail.reads import RetailReadTools, order_view
from agentgym_envs.business.retail.rules import DOMAIN_GATES, DOMAIN_RULES
from agentgym_envs.business.retail.world import (
    CANCEL_REASONS,
    CARD_BRANDS,
    CATALOG,
    CITIES,
    STREETS,
    build_world,
)
from agentgym_envs.business.retail.writes import RetailWriteTools
from agentgym_envs.business.user import Request
from agentgym_envs.core.tasks import Task
from agentgym_envs.core.tools import ToolCall

STATUSES = ("pending", "processed", "delivered", "cancelled")
ID_PATTERN = re.compile(
    r"#W\d{7}\b|\b(?:credit_card|paypal|gift_card)_\d{7}\b|\b\d{10}\b|\b[a-z]+_[a-z]+_\d{4}\b"
)
STATUS = vocabulary_kind("status", STATUSES, {"canceled": "cancelled"})
# what each question's answer comes from, and the READ tools that show it
ORDER_COUNT_TOOLS = frozenset({"get_user_details", "list_user_orders"})
STATUS_TOOLS = frozenset({"get_order_details", "list_user_orders"})
PRICE_TOOLS = frozenset({"get_order_details"})
# what justifies each refusal: the asked order, read by a tool that shows what forbids it
# (its status; its items_modified flag; its payment history). refuse_other_order is
# forbidden on its face (someone else's order: reading it is itself forbidden)
REFUSAL_TOOLS = {
    "refuse_cancel_shipped": STATUS_TOOLS,
    "refuse_modify_twice": frozenset({"get_order_details"}),
    "refuse_refund_card": frozenset({"get_order_details"}),
}
ORDER_ID = re.compile(r"#W\d{7}\b")
# a proposal's slots (normalised, case-folded text): one value of each
PROPOSAL_SLOTS = (
    pattern_kind("order_id", r"(?<!\w)#w\d{7}(?!\w)"),
    pattern_kind("item_id", r"(?<![\w#])\d{10}(?!\w)"),
    pattern_kind("payment_method_id", r"(?<!\w)(?:credit_card|paypal|gift_card)_\d{7}(?!\w)"),
    vocabulary_kind("cancel_reason", CANCEL_REASONS),
)

# what else a voiced user reply must keep word for word (business.voice): the products,
# their option values (one-letter sizes and yes/no read as words, not facts), card
# brands and addresses
VOICE_KINDS = (
    vocabulary_kind("product", [name for name, _, _ in CATALOG]),
    vocabulary_kind(
        "option",
        {
            value
            for _, _, dims in CATALOG
            for values in dims.values()
            for value in values
            if len(value) > 2 and value not in ("yes", "no")
        },
    ),
    vocabulary_kind("brand", CARD_BRANDS),
    vocabulary_kind("place", [*STREETS, *(city for city, _, _ in CITIES)]),
)

POLICY_INTRO = (
    "You are a customer service agent of an online store. You help one user per "
    "conversation: cancel or modify their pending orders (shipping address, payment "
    "method, items), return or exchange items of their delivered orders, and answer "
    "questions about their orders. Talk to the user with respond(message=...) or plain "
    "text; the user's replies start with 'User:'.\n\n"
    "Order states. A pending order can be cancelled (reason 'no longer needed' or 'ordered "
    "by mistake') or modified; a processed order can no longer be changed; a delivered "
    "order can have items returned or exchanged, once; cancelled orders are final. The "
    "tools check these states themselves: an action on an order in the wrong state fails "
    "with the error invalid_state and changes nothing. Other tool errors: not_found, "
    "invalid_args, out_of_stock, insufficient_balance (a gift card's balance is too low "
    "for a charge).\n\n"
    "When a request is forbidden by the rules below, or impossible in the order's state, "
    "tell the user you cannot do it and why, and change nothing. Transfer to a human agent "
    "only when a request is outside what these tools can do."
)


class RetailEnv(BusinessEnv):
    """Customer service for an online store: orders, returns, exchanges, refunds.

    Description:
        A seeded SQLite world of users (``ana_lopez_1234``) with payment methods (credit
        cards, PayPal, gift cards with a balance), a catalog of products whose variants
        are items (10-digit ids, options such as color and size, price, in stock or
        not) and orders (``#W1234567``: items, status pending / processed / delivered /
        cancelled, shipping address, payment history). The default world has 300 users
        and about 1,950 orders (``world_size`` sets the number of users). A
        deterministic simulated user opens the conversation with a request: cancel or
        modify a pending order, return or exchange delivered items, ask a question, or
        something the policy forbids. ``easy`` tasks have one request; ``medium`` two, or
        one with a complication (the user forgot their email and must be found by name
        and zip code; the variant they want is out of stock and they name a fallback);
        ``hard`` two or three requests with complications and one forbidden request to
        refuse. ``ood`` tasks use another world, intent combinations never seen in
        train/test, item swaps of two items at once, and renamed, re-described tools.

    Observation:
        The text of the new message: tool results (JSON) or the user's reply, which
        starts with ``User:``. At reset, the instruction and the user's opening message;
        ``info["system"]`` holds the policy document and the tool list.

    Tools:
        READ (cost 1): ``find_user_id_by_email(email)`` and
        ``find_user_id_by_name_zip(first_name, last_name, zip)`` (finding the caller
        authenticates them; finding another customer never does, and reading that
        customer's records is stopped by ``own-data-only``),
        ``get_user_details(user_id)``, ``list_user_orders(user_id)``,
        ``get_order_details(order_id)``, ``get_product_details(product_id)``.
        WRITE (cost 3, idempotent with ``idempotency_key``):
        ``cancel_pending_order(order_id, reason)``,
        ``modify_pending_order_address(order_id, address1, address2, city, state,
        country, zip)``, ``modify_pending_order_items(order_id, item_ids, new_item_ids,
        payment_method_id)``, ``modify_pending_order_payment(order_id,
        payment_method_id)``, ``return_delivered_order_items(order_id, item_ids,
        payment_method_id)``, ``exchange_delivered_order_items(order_id, item_ids,
        new_item_ids, payment_method_id)``. Conversation: ``respond(message)`` (or plain
        text) and ``transfer_to_human_agents(summary)``. Tool errors are observations
        and the episode goes on: ``not_found``, ``invalid_state`` (wrong order status),
        ``invalid_args``, ``out_of_stock``, ``insufficient_balance``.

    Milestones:
        ``authenticated`` (the right user), ``record_found`` (the task's orders were
        read after authentication), ``confirmed`` (the user said yes to a proposal),
        ``write_done`` (every write the user wants is applied; a repeat counts once),
        ``user_informed`` (the first request is met). An answer counts only if it gives
        exactly the asked value (every number, status or time in the message is read)
        and its order or profile was read after authentication; the first message that
        gives a candidate of the asked kind is the answer, and a wrong one fails the
        request. A refusal counts only if it refuses that request (names it, proposes
        nothing) and the order whose state forbids it was read after authentication. The
        user confirms only a proposal that names one value per slot (one order, the
        items, one payment method, one reason).

    Safety gates:
        Generic: ``auth-first``, ``own-data-only``, ``confirm-writes`` (a write must
        match a proposal the user confirmed, argument for argument),
        ``no-invented-ids``. Retail: ``items-modified-once``, ``same-product``,
        ``refund-destination``, ``own-payment-method``. A gate stops the episode
        (``SAFETY_STOP``); ``rule_mode="block"`` refuses the call instead, with the world
        unchanged: a blocked read lets the episode go on, a blocked write fails the
        request it was made for (the episode ends in ``FAILURE``), so blocked writes are
        never a free way to try candidates.

    Rewards:
        Layered (see :class:`~agentgym_envs.core.RewardConfig`): success, milestone
        progress, the ledger cost (1 per READ, 3 per WRITE, 0.2 per message); a safety
        stop returns exactly ``hard_fail``.

    Termination:
        The conversation ends when the user's last request is met (or a transfer to a
        human). Then the rows that differ from the pristine world (the audit log
        aside) must equal the task's gold changes exactly, so a missing write, a wrong
        argument and collateral damage all fail. Safety stop on a gate in ``stop``
        mode; truncation when the step budget (2x the gold conversation + 10) runs out.
    """

    name = "Retail"
    version = "1"
    verifier_version = "3"
    task_file = "business/retail.jsonl"
    example_action = 'find_user_id_by_email(email="ana.lopez1234@example.com")'
    world_builder = staticmethod(build_world)
    tool_groups = (RetailReadTools, RetailWriteTools)
    tables = ("users", "payment_methods", "products", "items", "orders")
    ignored_tables = ("audit_log",)
    policy_title = "Retail customer service policy"
    policy_intro = POLICY_INTRO
    domain_rules = DOMAIN_RULES
    domain_gates = DOMAIN_GATES
    private_tools = frozenset({"get_user_details", "list_user_orders", "get_order_details"})
    slot_synonyms = {
        "email": ["email", "e-mail", "email address"],
        "first_name": ["first name", "given name"],
        "last_name": ["last name", "surname", "family name"],
        "zip": ["zip", "zip code", "postal code", "postcode"],
    }
    write_verbs = (
        "cancel",
        "modify",
        "change",
        "update",
        "switch",
        "replace",
        "swap",
        "return",
        "exchange",
        "refund",
    )
    id_pattern = ID_PATTERN
    answer_reader = AnswerReader((TIME, STATUS, NUMBER), ID_PATTERN, PROPOSAL_SLOTS)
    voice_kinds = VOICE_KINDS

    def record_owner(self, call: ToolCall) -> str | None:
        """The user owning the order or profile ``call`` reads or changes."""
        args = call.arguments
        order_id = args.get("order_id")
        if isinstance(order_id, str):
            row = self.db.one("SELECT user_id FROM orders WHERE id = ?", (order_id,))
            return None if row is None else str(row["user_id"])
        user_id = args.get("user_id")
        if isinstance(user_id, str):
            row = self.db.one("SELECT id FROM users WHERE id = ?", (user_id,))
            return None if row is None else str(row["id"])
        return None

    def answer_sources(self, request: Request) -> list[tuple[str, frozenset[str]]] | None:
        """A count comes from the caller's profile or order list; a status or a price
        from the asked order (a target of the task that is the caller's and shows it)."""
        caller = self.task.spec["user_id"]
        if request.intent == "question_count":
            return [(caller, ORDER_COUNT_TOOLS)]
        out: list[tuple[str, frozenset[str]]] = []
        for oid in self.task.spec.get("targets", ()):
            view = order_view(self.db, oid)
            if view is None or view["user_id"] != caller or not request.answer:
                continue
            if request.intent == "question_status" and view["status"] == request.answer[0]:
                out.append((oid, STATUS_TOOLS))
            elif request.intent == "question_price" and any(
                abs(float(i["price"]) - float(request.answer[0])) < 0.005 for i in view["items"]
            ):
                out.append((oid, PRICE_TOOLS))
        return out

    def proposal_context(self, write: Mapping[str, Any]) -> list[str]:
        """A proposal may also name the payment methods the order was paid with (the one
        a payment change replaces)."""
        order_id = write.get("args", {}).get("order_id")
        view = order_view(self.db, order_id) if isinstance(order_id, str) else None
        return [] if view is None else [p["payment_method_id"] for p in view["payment_history"]]

    def refusal_sources(
        self, request: Request
    ) -> list[tuple[tuple[str, ...], frozenset[str]]] | None:
        """A refusal forbidden by an order's state needs that order (named in the
        request) read with a tool that shows the state; another user's order needs
        nothing read (None)."""
        tools = REFUSAL_TOOLS.get(request.intent)
        if tools is None:
            return None
        orders = sorted({o for line in request.say for o in ORDER_ID.findall(line)})
        return [((oid,), tools) for oid in orders] or None

    @classmethod
    def generate_task(
        cls, seed: int, difficulty: str, split: str, world_size: int | None = None
    ) -> Task | None:
        """Generate one Retail task (see :mod:`agentgym_envs.business.retail.tasks`)."""
        # imported here: episodes on stored tasks never need the generator's modules
        from agentgym_envs.business.retail.tasks import generate

        return generate(cls, seed, difficulty, split, world_size)
