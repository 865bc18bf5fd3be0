"""A tiny business domain (a lending library) to test the business framework on its own.

It is a test fixture, not a registered env.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import sqlite_utils

from agentgym_envs.business.base import BusinessEnv, gold_changes
from agentgym_envs.business.policy import Rule, RuleGate
from agentgym_envs.core import Task, ToolCall, ToolKind, ToolResult, tool

MAX_RENEWALS = Rule("max-renewals", "renewal limit", "A loan can be renewed at most twice.")


def build_library(db: sqlite_utils.Database, rng: np.random.Generator, size: int) -> None:
    db["users"].insert_all(
        (
            {
                "id": f"u{i}",
                "name": f"Reader {i}",
                "email": f"reader{i}@lib.test",
                "zip": f"{10000 + i}",
            }
            for i in range(size)
        ),
        pk="id",
    )
    db["loans"].insert_all(
        (
            {
                "id": f"L{i:04d}",
                "user_id": f"u{i % size}",
                "title": f"Book {i}",
                "renewals": int(rng.integers(0, 3)),
            }
            for i in range(size * 2)
        ),
        pk="id",
    )
    db["audit"].insert_all([{"id": 0, "event": "opened"}], pk="id")


class RenewalLimitGate(RuleGate):
    rule = MAX_RENEWALS

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if call.name != "renew_loan":
            return None
        loan = env.db.one("SELECT renewals FROM loans WHERE id = ?", (call.arguments["loan_id"],))
        if loan is not None and loan["renewals"] >= 2:
            return f"loan {call.arguments['loan_id']} was already renewed twice"
        return None


class LibraryEnv(BusinessEnv):
    name = "Library"
    version = "0"
    example_action = 'find_user_id_by_email(email="reader1@lib.test")'
    world_builder = staticmethod(build_library)
    tables = ("users", "loans")
    ignored_tables = ("audit",)
    world_sizes = {"default": 20}
    policy_title = "Library desk policy"
    policy_intro = "You help readers with their loans."
    domain_rules = (MAX_RENEWALS,)
    domain_gates = (RenewalLimitGate,)
    private_tools = frozenset({"get_loan"})
    slot_synonyms = {"email": ["email"], "zip": ["zip"], "name": ["name"]}
    write_verbs = ("renew",)
    id_pattern = re.compile(r"\bL\d{4}\b")

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("world_size", 20)
        super().__init__(**kwargs)

    @tool("Find a reader by email.", parameters={"email": {"type": "string"}})
    def find_user_id_by_email(self, email: str) -> ToolResult:
        row = self.db.one("SELECT id FROM users WHERE email = ?", (email,))
        if row is None:
            return ToolResult.failure("not_found", f"No reader with email {email}.")
        self.authenticate(row["id"])
        return ToolResult(row["id"])

    @tool("Show a loan.", parameters={"loan_id": {"type": "string"}})
    def get_loan(self, loan_id: str) -> ToolResult:
        row = self.db.one("SELECT * FROM loans WHERE id = ?", (loan_id,))
        return self.as_json(row) if row else ToolResult.failure("not_found", "No such loan.")

    @tool(
        "Renew a loan.",
        parameters={"loan_id": {"type": "string"}},
        kind=ToolKind.WRITE,
        cost=3.0,
        idempotent=True,
    )
    def renew_loan(self, loan_id: str) -> ToolResult:
        if self.db.write("UPDATE loans SET renewals = renewals + 1 WHERE id = ?", (loan_id,)) == 0:
            return ToolResult.failure("not_found", "No such loan.")
        self.db.write("INSERT INTO audit (event) VALUES (?)", (f"renew {loan_id}",))
        return ToolResult(f"Loan {loan_id} renewed.")

    def record_owner(self, call: ToolCall) -> str | None:
        loan_id = call.arguments.get("loan_id")
        row = self.db.one("SELECT user_id FROM loans WHERE id = ?", (loan_id,)) if loan_id else None
        return None if row is None else row["user_id"]

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str, world_size: int | None = None):
        return renew_task(seed, split)


def renew_task(user: int = 1, split: str = "train", forget_email: bool = False) -> Task:
    """Reader ``user`` wants loan L{user:04d} renewed (it has < 2 renewals in world 0)."""
    loan = f"L{user:04d}"
    known = {"email": f"reader{user}@lib.test", "name": f"Reader {user}", "zip": str(10000 + user)}
    unknown = {}
    if forget_email:
        unknown["email"] = known.pop("email")
    goal = {
        "name": f"Reader {user}",
        "known": known,
        "unknown": unknown,
        "persona": "polite",
        "requests": [
            {
                "kind": "write",
                "intent": "renew",
                "say": [f"Please renew my loan {loan}."],
                "verbs": ["renew"],
                "write": {"tool": "renew_loan", "args": {"loan_id": loan}},
                "mentions": [loan],
            }
        ],
    }
    solution = (
        'respond(message="Could you tell me your email?")',
        f'find_user_id_by_email(email="reader{user}@lib.test")',
        f'get_loan(loan_id="{loan}")',
        f'respond(message="I will renew loan {loan}. Shall I proceed?")',
        f'renew_loan(loan_id="{loan}", idempotency_key="k1")',
        f'respond(message="Loan {loan} has been renewed.")',
    )
    spec = {
        "world_seed": 0,
        "world_size": 20,
        "user_id": f"u{user}",
        "targets": [loan],
        "user": goal,
        "expected": {"digest": "", "rows": {}, "transfer": False},
    }
    draft = Task(f"renew-{user}", split, "easy", f"Reader {user}", user, spec, solution, 20)
    expected = gold_changes(LibraryEnv(tasks=[draft]), draft, solution)
    return replace(draft, spec={**spec, "expected": expected})
