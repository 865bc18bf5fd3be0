"""Chat histories for LLM policies, and tool-call text <-> native tool-call conversion.

Every LLM policy keeps one conversation per env slot:

* ``system``: the env's ``info["system"]`` from reset (rules, tool list, example action);
* an optional *one-shot* exchange: the task observation marked as an example, answered
  with the env's example action written as a JSON tool call. Small models (SmolLM2-135M)
  only follow the tool-call format after seeing one such exchange; the tool list and the
  "Example:" line of the system prompt alone are not enough for them;
* the task: the reset observation, as the first user message;
* then one turn per step: the assistant's action and the env's next observation.

When a conversation does not fit the context, the oldest turns are dropped (never the
system prompt or the task; the one-shot exchange goes only when nothing else is left).
Dropping shifts every later turn, so whatever a cache held of the prompt (the local
policy's KV cache, a server's prefix cache) is read again from the first dropped turn
on. To pay that once per several turns rather than on every turn, a trim drops enough
to bring the prompt down to ``trim_to`` of the budget, and the next turns keep the same
dropped turns for as long as the prompt fits (on WebShop, 1,000-token pages in an
8k context: one 12k-token re-read every turn became one every four turns).

The same module converts between the env's action text and OpenAI ``tool_calls``, both
ways, for the OpenAI-compatible client and server.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_envs.core import pyast
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm.chat import Message

ToolCallTuple = tuple[str, dict[str, Any]]

ONE_SHOT_PREFIX = "(example) "
"""Marks the one-shot user message, so the model can tell the example from the task."""

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[A-Za-z_]*[ \t]*\n?(.*?)```", re.DOTALL)
_CALL_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s*\(.*\)\s*;?$")
_PLACEHOLDERS: dict[str, Any] = {
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "string": "...",
}


# --------------------------------------------------------------------------- seeds


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers such as (policy seed, episode seed, turn).

    Sampling seeded per (slot's episode, turn) gives the same action whichever other
    slots share the batch.
    """
    digest = hashlib.sha256(":".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# --------------------------------------------------------------------------- tool calls


def action_text(name: str, arguments: Mapping[str, Any]) -> str:
    """The env action text for one tool call: ``{"name": ..., "arguments": {...}}``."""
    return json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)


def tool_calls_to_action(tool_calls: Sequence[Mapping[str, Any]]) -> str:
    """Convert an OpenAI message's ``tool_calls`` into the env's action text.

    Arguments that are not a JSON object are passed on as their raw string, so the env
    reports them to the agent as bad arguments (an agent mistake is an observation).
    """
    calls: list[dict[str, Any]] = []
    for call in tool_calls:
        function = call.get("function") or {}
        raw = function.get("arguments", "{}")
        arguments: Any = raw
        if isinstance(raw, str):
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                arguments = raw
        calls.append({"name": str(function.get("name", "")), "arguments": arguments})
    if len(calls) == 1:
        return json.dumps(calls[0], ensure_ascii=False)
    return json.dumps(calls, ensure_ascii=False)


def _call_from_object(item: Any) -> ToolCallTuple | None:
    """Read one call from the JSON shapes models write (and the env parser accepts)."""
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # the OpenAI shape
        item = item["function"]
    name = item.get("name", item.get("tool"))
    if not isinstance(name, str) or not name:
        return None
    arguments: Any = {}
    for key in ("arguments", "parameters", "args"):
        if key in item:
            arguments = item[key]
            break
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return name, arguments


def _calls_from_value(value: Any) -> list[ToolCallTuple] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call_from_object(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _calls_from_json(text: str) -> list[ToolCallTuple] | None:
    """Calls in ``text`` read as JSON: the whole text, else the first embedded value
    that holds calls (models often wrap the call in prose)."""
    try:
        return _calls_from_value(json.loads(text))
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        calls = _calls_from_value(value)
        if calls:
            return calls
    return None


def _call_from_python(line: str, params: Mapping[str, Sequence[str]]) -> ToolCallTuple | None:
    """Read ``name(arg=literal, ...)`` with :mod:`ast` (never eval)."""
    try:
        node = pyast.parse(line.rstrip(";"), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    name, order = node.func.id, params.get(node.func.id, ())
    if len(node.args) > len(order):
        return None
    try:
        arguments = {key: ast.literal_eval(arg) for key, arg in zip(order, node.args, strict=False)}
        for keyword in node.keywords:
            if keyword.arg is None:
                return None
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
    return name, arguments


def parse_tool_calls(
    text: str, tools: Sequence[Mapping[str, Any]] | None = None
) -> list[ToolCallTuple] | None:
    """Extract tool calls from generated text, or None when it holds none.

    Accepted: ``<tool_call>{...}</tool_call>`` blocks, a fenced block, a JSON object (or
    a list of them) alone or embedded in prose, and call syntax ``name(arg=...)`` (only
    for a name among ``tools``). With ``tools`` given, every call must name one of them.

    Args:
        text: what the model wrote.
        tools: OpenAI function schemas the calls may use (None: any name).
    """
    params = {
        str(fn.get("name")): list((fn.get("parameters") or {}).get("properties") or {})
        for fn in (t.get("function") or {} for t in tools or ())
    }
    body = text.strip()
    calls: list[ToolCallTuple] | None
    if "<tool_call>" in body:
        found = [_calls_from_json(block) for block in _TOOL_CALL.findall(body)]
        calls = None if not found or None in found else [c for f in found if f for c in f]
    else:
        fence = _FENCE.search(body)
        body = fence.group(1).strip() if fence else body
        calls = _calls_from_json(body) if ("{" in body or "[" in body) else None
        if calls is None:
            lines = [ln.strip() for ln in body.splitlines() if _CALL_LINE.match(ln.strip())]
            call = _call_from_python(lines[-1], params) if lines else None
            calls = [call] if call is not None and call[0] in params else None
    if not calls or (tools is not None and any(name not in params for name, _ in calls)):
        return None
    return calls


def example_action(system: str, tools: Sequence[Mapping[str, Any]]) -> str | None:
    """The one-shot example action as JSON: the system prompt's ``Example:`` line when it
    holds a call, else a call of the first tool with placeholder arguments."""
    lines = [ln for ln in system.splitlines() if ln.startswith("Example:")]
    if lines:
        calls = parse_tool_calls(lines[-1].removeprefix("Example:").strip(), tools or None)
        if calls:
            return action_text(*calls[0])
    if not tools:
        return None
    function = tools[0].get("function") or {}
    schema = function.get("parameters") or {}
    arguments = {}
    for key in schema.get("required") or ():
        prop = (schema.get("properties") or {}).get(key, {})
        for pick in ("enum", "examples"):
            if prop.get(pick):
                arguments[key] = prop[pick][0]
                break
        else:
            kind = prop.get("type", "string")
            arguments[key] = prop.get("default", _PLACEHOLDERS.get(str(kind), "..."))
    return action_text(str(function.get("name", "")), arguments)


# --------------------------------------------------------------------------- histories


@dataclass
class HistoryTurn:
    """One step: the action sent to the env and the observation that came back."""

    action: str
    observation: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    """The native tool calls the action came from (OpenAI format), if any."""


@dataclass
class Conversation:
    """The chat history of one env slot for one episode."""

    system: str
    task: str
    episode_seed: int
    example: str | None
    tools: list[dict[str, Any]] = field(default_factory=list)
    turns: list[HistoryTurn] = field(default_factory=list)
    dropped: int = 0
    """How many of the oldest turns the last prompt left out to fit the context."""

    def messages(self, drop: int = 0, one_shot: bool = True, native: bool = False) -> list[Message]:
        """The messages of the conversation without its ``drop`` oldest turns."""
        out: list[Message] = [{"role": "system", "content": self.system}] if self.system else []
        if one_shot and self.example is not None:
            out.append({"role": "user", "content": ONE_SHOT_PREFIX + self.task})
            out.append({"role": "assistant", "content": self.example})
        out.append({"role": "user", "content": self.task})
        for turn in self.turns[drop:]:
            out += _turn_messages(turn, native)
        return out


def _turn_messages(turn: HistoryTurn, native: bool) -> list[Message]:
    if not (native and turn.tool_calls):
        out: list[Message] = [{"role": "assistant", "content": turn.action}]
        if turn.observation is not None:
            out.append({"role": "user", "content": turn.observation})
        return out
    out = [{"role": "assistant", "content": None, "tool_calls": turn.tool_calls}]
    if turn.observation is not None:
        # the env answers a step with one observation; the other calls point to it
        for i, call in enumerate(turn.tool_calls):
            content = turn.observation if i == 0 else "(the result is in the first tool reply)"
            out.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": content})
    return out


class ChatHistories:
    """Per-slot conversations of a batched LLM policy.

    Args:
        one_shot: add the one-shot example exchange (see the module docstring).
        native: render tool calls as OpenAI ``tool_calls`` + ``tool`` messages (else
            the action text is the assistant message and observations are user messages).
        trim_to: when the prompt outgrows the budget, drop the oldest turns until it
            fills at most this share of the budget (0 < trim_to <= 1; 1 drops as few as
            fit, and then again on nearly every turn).

    Raises:
        ConfigError: ``trim_to`` outside (0, 1].
    """

    def __init__(
        self, *, one_shot: bool = True, native: bool = False, trim_to: float = 0.5
    ) -> None:
        if not isinstance(trim_to, int | float) or not 0 < trim_to <= 1:
            raise ConfigError(f"trim_to must be a share of the budget in (0, 1], got {trim_to!r}")
        self.one_shot = one_shot
        self.native = native
        self.trim_to = float(trim_to)
        self._slots: dict[int, Conversation] = {}

    def reset(self, slots: Sequence[int]) -> None:
        """Forget the conversations of these slots."""
        for slot in slots:
            self._slots.pop(slot, None)

    def __getitem__(self, slot: int) -> Conversation:
        return self._slots[slot]

    def observe(self, slot: int, observation: str, info: Mapping[str, Any]) -> Conversation:
        """Add an observation: a new episode when the slot is unknown or ``info`` has
        ``system`` (only reset infos do), else the reply to the slot's last action."""
        conv = self._slots.get(slot)
        if conv is None or "system" in info:
            system = str(info.get("system") or "")
            tools = list(info.get("tools") or [])
            seeds = info.get("seeds") or {}
            conv = Conversation(
                system=system,
                task=observation,
                episode_seed=int(seeds.get("env", 0) or 0),
                example=example_action(system, tools) if self.one_shot else None,
                tools=tools,
            )
            self._slots[slot] = conv
            return conv
        if "tools" in info:
            conv.tools = list(info["tools"])
        if conv.turns and conv.turns[-1].observation is None:
            conv.turns[-1].observation = observation
        else:  # an observation with no action before it (act was skipped): keep it
            conv.turns.append(HistoryTurn(action="", observation=observation))
        return conv

    def record(
        self, slot: int, action: str, tool_calls: list[dict[str, Any]] | None = None
    ) -> None:
        """Add the slot's action (the env's reply comes with the next ``observe``)."""
        self._slots[slot].turns.append(HistoryTurn(action=action, tool_calls=tool_calls))

    def messages(self, slot: int, drop: int = 0) -> list[Message]:
        """The slot's messages without its ``drop`` oldest turns, in this history's mode."""
        return self._slots[slot].messages(drop, self.one_shot, self.native)

    def fit(
        self, slot: int, count: Callable[[list[Message]], int], budget: int | None
    ) -> tuple[list[Message], bool]:
        """The slot's messages, without the oldest turns when ``count`` exceeds ``budget``.

        The turns the last prompt dropped stay dropped while the prompt fits; when it
        outgrows the budget, the fewest further turns go that bring it down to ``trim_to``
        of the budget (where system prompt, task and newest turn alone fill that much: that
        leave the older turns ``trim_to`` of the room those leave).
        System prompt, task
        and the newest turn (it holds the current observation) are always kept; the
        one-shot exchange is dropped only when nothing else is left. The token count
        only grows with the number of kept turns, so a binary search needs about
        log2(turns) renders instead of one per turn.

        Returns:
            ``(messages, fits)``; ``fits`` is False when even the kept messages exceed
            the budget (the caller decides how to cut further).
        """
        conv = self._slots[slot]
        if budget is None:
            conv.dropped = 0
            return self.messages(slot), True
        # the newest turn holds the current observation: it is always kept
        most = max(0, len(conv.turns) - 1)
        kept = min(conv.dropped, most)
        messages = self.messages(slot, kept)
        if count(messages) <= budget:
            conv.dropped = kept
            return messages, True
        start = max(kept, min(1, most))
        # trim_to of the budget; where what must stay (system, task, newest turn) already
        # fills that much, trim_to of the room it leaves, so older turns still fit
        floor = count(self.messages(slot, most))
        target = int(budget * self.trim_to)
        if floor >= target:
            target = floor + int((budget - floor) * self.trim_to) if floor < budget else budget
        low = self._fewest_dropped(slot, count, target, start, most)
        conv.dropped = low
        messages = self.messages(slot, low)
        if count(messages) <= budget:
            return messages, True
        conv.dropped = most
        bare = conv.messages(most, False, self.native)
        return bare, count(bare) <= budget

    def _fewest_dropped(
        self, slot: int, count: Callable[[list[Message]], int], limit: int, low: int, high: int
    ) -> int:
        """The fewest dropped turns in ``[low, high]`` that bring ``count`` to ``limit``
        (``high`` when none does)."""
        while low < high:
            mid = (low + high) // 2
            if count(self.messages(slot, mid)) <= limit:
                high = mid
            else:
                low = mid + 1
        return low
