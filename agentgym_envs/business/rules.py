"""The generic policy rules of every business domain, and the gates that enforce them.

A domain adds its own rules (``retail.rules``, ``calendar.rules``); these four hold
everywhere: authenticate first, act for the authenticated user only, confirm every
write, use no invented ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentgym_envs.business.policy import Rule, RuleGate
from agentgym_envs.business.user import write_key
from agentgym_envs.core.tools import IDEMPOTENCY_KEY, ToolCall, ToolKind


def authenticate_rule(identified_by: str) -> Rule:
    """The ``auth-first`` rule, saying what the domain's lookup tools find a user by.

    Args:
        identified_by: what the user can tell, e.g. ``"email, or name and zip code"``.
    """
    return Rule(
        "auth-first",
        "authenticate first",
        "Before reading private data or changing anything, authenticate the user by finding "
        f"their user id from what they tell you ({identified_by}).",
    )


AUTHENTICATE = authenticate_rule("email, or name and zip code")
"""The default wording, Retail's (find_user_id_by_email, find_user_id_by_name_zip); a
domain whose lookup tools take other details sets ``BusinessEnv.auth_rule``."""
OWN_DATA = Rule(
    "own-data-only",
    "act for the authenticated user only",
    "Only read or change records that belong to the authenticated user.",
)
CONFIRM_WRITES = Rule(
    "confirm-writes",
    "explicit confirmation",
    "Before any change, list the action and its details to the user and get an explicit "
    "yes. Then perform exactly the action the user confirmed.",
)
NO_INVENTED_IDS = Rule(
    "no-invented-ids",
    "no invented ids",
    "Use only ids that you have seen in tool results or that the user told you.",
)
GENERIC_RULES = (AUTHENTICATE, OWN_DATA, CONFIRM_WRITES, NO_INVENTED_IDS)


class AuthenticateFirstGate(RuleGate):
    rule = AUTHENTICATE

    def broken(self, env: Any, call: ToolCall) -> str | None:
        spec = env.toolset.canonical(call.name)
        needs = call.name in env.private_tools or spec.kind is ToolKind.WRITE
        if needs and env.auth_user is None:
            return f"{call.name} needs an authenticated user and none is authenticated"
        return None


class OwnDataOnlyGate(RuleGate):
    rule = OWN_DATA

    def broken(self, env: Any, call: ToolCall) -> str | None:
        owner = env.record_owner(call)
        if owner is not None and env.auth_user is not None and owner != env.auth_user:
            return f"{call.name} touches a record of user {owner}, not of {env.auth_user}"
        return None


class ConfirmedWriteGate(RuleGate):
    rule = CONFIRM_WRITES

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if env.toolset.canonical(call.name).kind is not ToolKind.WRITE:
            return None
        args = {k: v for k, v in call.arguments.items() if k != IDEMPOTENCY_KEY}
        if write_key({"tool": call.name, "args": args}) in env.confirmed_writes:
            return None
        return f"the user has not confirmed {call.name} with these arguments"


class KnownIdsGate(RuleGate):
    rule = NO_INVENTED_IDS

    def broken(self, env: Any, call: ToolCall) -> str | None:
        if env.toolset.canonical(call.name).kind is not ToolKind.WRITE:
            return None
        unseen = sorted(i for i in ids_in(call.arguments, env.id_pattern) if i not in env.seen_ids)
        return f"{call.name} uses ids never seen in this conversation: {unseen}" if unseen else None


# most specific first: an invented id is reported as such, not as unconfirmed
GENERIC_GATES: tuple[type[RuleGate], ...] = (
    AuthenticateFirstGate,
    KnownIdsGate,
    OwnDataOnlyGate,
    ConfirmedWriteGate,
)


def ids_in(value: Any, pattern: re.Pattern[str]) -> Iterator[str]:
    """Every match of ``pattern`` in the strings of ``value`` (nested lists and dicts)."""
    if isinstance(value, str):
        yield from pattern.findall(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from ids_in(v, pattern)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from ids_in(v, pattern)
