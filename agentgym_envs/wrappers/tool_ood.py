"""Tool OOD: renamed tools and paraphrased descriptions, deterministic from a seed.

A policy that learned ``get_order_details`` by heart should still manage when the tool is
called ``retrieve_purchase_info`` and described in other words. :class:`ToolOOD` draws
such a variant from its seed and sets it on the env (:meth:`AgentEnv.set_tool_variant`):
the parser, ``info["tools"]``, the system prompt and its example action, and the
oracle's actions all follow. Calls are still recorded under canonical names
(``info["tool_calls"]``, history), so results stay comparable across variants.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tools import ToolSet
from agentgym_envs.wrappers.base import AgentWrapper

_STREAM = 0x700D

# words of tool names and some of their synonyms (each keeps the tool's meaning)
_WORDS: dict[str, tuple[str, ...]] = {
    "get": ("fetch", "retrieve", "obtain", "load"),
    "list": ("enumerate", "show", "browse"),
    "find": ("lookup", "locate", "resolve"),
    "cancel": ("abort", "revoke", "void"),
    "modify": ("update", "change", "amend"),
    "create": ("make", "add", "schedule"),
    "move": ("shift", "step", "walk"),
    "respond": ("reply", "message", "say"),
    "transfer": ("handoff", "escalate", "forward"),
    "human": ("live", "staff"),
    "agents": ("agent", "support", "reps"),
    "user": ("customer", "account", "client"),
    "order": ("purchase",),
    "orders": ("purchases",),
    "details": ("info", "record", "summary"),
    "product": ("article", "catalog_item"),
    "items": ("lines", "articles"),
    "pending": ("open", "unshipped"),
    "delivered": ("received", "fulfilled"),
    "return": ("refund", "send_back"),
    "exchange": ("swap", "trade"),
    "payment": ("billing", "pay_method"),
    "email": ("mail", "email_address"),
    "name": ("fullname", "person_name"),
    "zip": ("postcode", "postal_code"),
    "id": ("identifier", "ref"),
    "by": ("via", "from"),
    "event": ("meeting", "appointment"),
    "events": ("meetings", "appointments"),
    "free": ("open", "available"),
    "slots": ("times", "windows"),
    "room": ("space", "venue"),
    "rooms": ("spaces", "venues"),
    "availability": ("schedule", "bookings"),
    "invite": ("include", "add"),
    "attendee": ("participant", "guest"),
    "rsvp": ("reply_invitation", "answer_invite"),
    "book": ("reserve", "claim"),
    "release": ("unbook", "free"),
    "dir": ("directory", "folder"),
    "file": ("document", "source"),
    "read": ("view", "open", "show"),
    "write": ("save", "store", "put"),
    "search": ("grep", "find_text", "query"),
    "edit": ("patch", "replace_text", "amend"),
    "run": ("execute", "exec", "shell"),
    "tests": ("test_suite", "checks"),
    "submit": ("finish", "hand_in", "deliver"),
    "click": ("tap", "activate", "press_element"),
    "fill": ("type_text", "enter_text", "input"),
    "select": ("choose", "pick_option"),
    "check": ("tick", "toggle"),
    "press": ("hit_key", "keypress"),
    "scroll": ("page", "swipe"),
    "goto": ("navigate", "visit", "open_page"),
    "back": ("go_back", "previous_page"),
    "answer": ("final_answer", "conclude"),
    "noop": ("wait", "idle", "skip_turn"),
    "look": ("observe", "survey", "examine"),
    "inventory": ("belongings", "carried_items", "bag"),
    "go": ("walk", "travel", "head"),
    "take": ("grab", "pick_up", "collect"),
    "use": ("apply", "employ", "activate"),
}
# phrase-level paraphrases of descriptions (whole words; capitalised forms included)
_PHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\bGet\b", ("Fetch", "Retrieve", "Look up")),
    (r"\bList\b", ("Show", "Enumerate")),
    (r"\bFind\b", ("Look up", "Locate")),
    (r"\bCancel\b", ("Call off", "Revoke")),
    (r"\bChange\b", ("Update", "Alter")),
    (r"\bReplace\b", ("Swap", "Substitute")),
    (r"\bSend\b", ("Deliver", "Pass")),
    (r"\bRead\b", ("View", "Show")),
    (r"\bWrite\b", ("Save", "Store")),
    (r"\bRun\b", ("Execute", "Launch")),
    (r"\bWalk\b", ("Step", "Go")),
    (r"\bDescribe\b", ("Show", "Report")),
    (r"\bOpen\b", ("Load", "Visit")),
    (r"\bPick up\b", ("Grab", "Collect")),
    (r"\bGive\b", ("Provide", "Submit")),
    (r"\bwhole\b", ("entire", "complete")),
    (r"\bcreated\b", ("made",)),
    (r"\bmissing\b", ("absent",)),
    (r"\bfor example\b", ("e.g.", "for instance")),
    (r"\bcurrent\b", ("present",)),
)
_FRAMES = ("{d}", "Purpose: {d}", "What it does: {d}")


class ToolOOD(AgentWrapper):
    """Rename the env's tools and paraphrase their descriptions (tool OOD).

    The variant is a pure function of ``seed`` and the env's tools: names are drawn
    from synonyms of their words (``get_order_details`` -> ``retrieve_purchase_info``),
    are valid identifiers, never Python keywords, never another tool's canonical name,
    and never collide. Descriptions are rephrased, and mentions of renamed tools in them
    follow the new names. Every tool is renamed, so the variant overrides a task's own
    renames (``ood`` tasks of Retail and Calendar).

    Info:
        ``info["tool_ood"] = {"seed": s, "renamed": n, "paraphrased": m}``;
        ``info["tools"]`` and ``info["system"]`` show the variant.

    Args:
        env: an agentgym env.
        rename: rename every tool.
        paraphrase: paraphrase every description.
        seed: which variant (a non-negative int).

    Raises:
        ConfigError: neither ``rename`` nor ``paraphrase``, or a bad seed.
    """

    key = "tool_ood"

    def __init__(
        self, env: gym.Env[str, str], rename: bool = True, paraphrase: bool = True, seed: int = 0
    ) -> None:
        super().__init__(env, rename=rename, paraphrase=paraphrase, seed=seed)
        if not (rename or paraphrase):
            raise ConfigError("ToolOOD changes nothing with rename=False and paraphrase=False")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(f"ToolOOD seed must be a non-negative int, got {seed!r}")
        self.rename, self.paraphrase, self.seed = rename, paraphrase, seed
        self.names, self.descriptions = tool_variant(
            type(self.agent_env).toolset, seed, rename=rename, paraphrase=paraphrase
        )
        self.agent_env.set_tool_variant(self.names, self.descriptions)

    @property
    def tag(self) -> str:
        parts = [p for p, on in (("rename", self.rename), ("paraphrase", self.paraphrase)) if on]
        return f"tool_ood:{self.seed}:{','.join(parts)}"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if self.agent_env.tool_variant != (self.names, self.descriptions):
            self.agent_env.set_tool_variant(self.names, self.descriptions)
        obs, info = self.env.reset(seed=seed, options=options)
        self._start_episode(info)
        self._label(info)
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._label(info)
        return obs, reward, terminated, truncated, info

    def _label(self, info: dict[str, Any]) -> None:
        info["tool_ood"] = {
            "seed": self.seed,
            "renamed": len(self.names),
            "paraphrased": len(self.descriptions),
        }
        self._tag(info)


def tool_variant(
    tools: ToolSet, seed: int, *, rename: bool = True, paraphrase: bool = True
) -> tuple[dict[str, str], dict[str, str]]:
    """The (names, descriptions) variant of ``tools`` for ``seed``.

    Returns:
        canonical name -> new name (empty without ``rename``), and canonical name ->
        new description for every description that changed.
    """
    rng = np.random.default_rng([seed, _STREAM])
    canonical = [t.canonical for t in tools.values()]
    names = new_names(canonical, rng) if rename else {}
    descriptions: dict[str, str] = {}
    for tool in tools.values():
        text = _mention(tool.description, names)
        if paraphrase:
            text = paraphrase_text(text, rng)
        if text != tool.description:
            descriptions[tool.canonical] = text
    return names, descriptions


def new_names(canonical: Iterable[str], rng: np.random.Generator) -> dict[str, str]:
    """A fresh, distinct identifier for each canonical name, drawn from synonyms."""
    order = list(canonical)
    taken = set(order)  # a new name never reuses any tool's canonical name
    out: dict[str, str] = {}
    for name in order:
        new = _fresh_name(name, rng, taken)
        taken.add(new)
        out[name] = new
    return out


def _fresh_name(name: str, rng: np.random.Generator, taken: set[str]) -> str:
    words = name.split("_")
    for attempt in range(12):
        # after a few draws that collide, a suffix makes room
        suffix = ("", "", "", "", "_tool", "_op", "_call")[min(attempt, 6)]
        candidate = "_".join(_synonym(w, rng) for w in words) + suffix
        if _usable(candidate, taken):
            return candidate
    n = 2
    while not _usable(f"{name}_v{n}", taken):
        n += 1
    return f"{name}_v{n}"


def _synonym(word: str, rng: np.random.Generator) -> str:
    options = _WORDS.get(word)
    return word if not options else options[int(rng.integers(len(options)))]


def _usable(name: str, taken: set[str]) -> bool:
    return (
        name not in taken
        and not keyword.iskeyword(name)
        and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name) is not None
    )


def paraphrase_text(text: str, rng: np.random.Generator) -> str:
    """``text`` reworded: some phrases swapped for synonyms, within a framing sentence.

    It always differs from ``text`` (a frame is forced when no phrase applies).
    """
    out = text
    for pattern, options in _PHRASES:
        if re.search(pattern, out):
            choice = options[int(rng.integers(len(options)))]
            out = re.sub(pattern, choice, out)
    frame = _FRAMES[int(rng.integers(len(_FRAMES)))]
    if out == text and frame == "{d}":
        frame = _FRAMES[1 + int(rng.integers(len(_FRAMES) - 1))]
    return frame.format(d=out)


def _mention(text: str, names: dict[str, str]) -> str:
    """``text`` with mentions of renamed tools (``name(`` or a snake_case name) renamed."""
    for old, new in names.items():
        pattern = rf"\b{re.escape(old)}\b" if "_" in old else rf"\b{re.escape(old)}(?=\()"
        text = re.sub(pattern, new, text)
    return text
