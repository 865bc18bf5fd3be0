"""Export stored episodes as training data: chat SFT JSONL, preference pairs, and
Hugging Face ``datasets`` folders.

Rows use the conversational formats that TRL's SFT and DPO trainers read:
``{"messages": [...]}`` and ``{"prompt": [...], "chosen": [...], "rejected": [...]}``,
with messages reduced to ``{"role", "content"}``. The assistant content is the raw
action text the policy wrote, which already holds its tool call (as JSON, a
``<tool_call>`` block or ``name(arg=...)``), so nothing is lost by dropping the parsed
``tool_calls``.

For models that call tools natively, SFT rows can instead carry the calls as structured
data (``tool_calls="native"``; ``agentgym traj export --format sft --tool-calls native``),
in the format TRL's ``SFTTrainer`` and Hugging Face chat templates read: a ``tools``
column with the OpenAI-format schemas of the tools the episode had (renamed where the
task renamed them), each tool-calling turn as ``{"role": "assistant", "content": "",
"tool_calls": [{"id", "type": "function", "function": {"name", "arguments": {...}}}]}``
and the env's answer to it as ``{"role": "tool", "tool_call_id", "name", "content"}``.
A turn without a call (a message to the user, an unparsable action) stays an assistant
text message, and its answer a ``user`` message. A ``tool`` message holds the env's whole
answer to the turn, as the agent saw it. An episode played in native mode
(``gym.make(..., tool_mode="native")``) and recorded by the ``RecordingWrapper`` is
rendered from the env's own native answers instead: one ``tool`` message per call, so a
turn may hold several calls, and a simulated user's reply apart as a ``user`` message.
Load such files with ``datasets`` >= 4.7, whose ``Json`` type keeps each row's own keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.export_native import (
    NativeExportError,
    episode_tools,
    native_features,
    native_messages,
)
from agentgym_envs.store import _JSON_FIELDS, StoredEpisode, TrajectoryStore

if TYPE_CHECKING:
    import datasets

logger = logging.getLogger(__name__)

HFKind = Literal["sft", "preferences", "episodes"]
HF_KINDS = ("sft", "preferences", "episodes")
_FILTERS = ("env_id", "task_id", "policy", "run_id", "outcome", "success", "valid")
ToolCallFormat = Literal["text", "native"]
TOOL_CALL_FORMATS = ("text", "native")


def chat(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages as plain ``{"role", "content"}`` dicts (one Arrow schema for all rows)."""
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]


def sft_rows(
    store: TrajectoryStore, *, tool_calls: ToolCallFormat = "text", **filters: Any
) -> Iterator[dict[str, Any]]:
    """One ``{"messages", ...}`` row per successful, valid episode matching ``filters``.

    Args:
        store: the trajectory store.
        tool_calls: ``"text"``: every message is ``{"role", "content"}``, tool calls stay
            in the action text. ``"native"``: structured ``tool_calls`` and ``tool``
            messages plus a ``tools`` column (see the module docstring); an episode whose
            tools cannot be recovered, or with a turn of several calls that has no
            recorded native answer (one per call), is left out with a warning.
        **filters: :meth:`TrajectoryStore.query` filters.

    Raises:
        ConfigError: an unknown ``tool_calls`` format or filter.
    """
    if tool_calls not in TOOL_CALL_FORMATS:
        raise ConfigError(f"tool_calls must be one of {TOOL_CALL_FORMATS}, got {tool_calls!r}")
    for episode_id, ep in store.iter_episodes(**_sft_filters(filters)):
        row: dict[str, Any] = {"messages": chat(ep.messages)}
        if tool_calls == "native":
            try:
                tools = episode_tools(ep)
                row = {"messages": native_messages(ep), "tools": tools}
            except NativeExportError as exc:
                logger.warning("episode %d left out of the native SFT export: %s", episode_id, exc)
                continue
        row.update(episode_id=episode_id, env_id=ep.env_id, task_id=ep.task_id, policy=ep.policy)
        yield row


def preference_rows(store: TrajectoryStore, **filters: Any) -> list[dict[str, Any]]:
    """Success/failure pairs of the same env and task (and the same opening messages).

    Within a group, successes and failures are each taken in row-id order and paired
    round-robin, ``max(#success, #failure)`` pairs, so every episode is used and the
    pairing is deterministic. Only valid episodes take part; a failure is any valid
    episode that did not succeed.
    """
    _check_filters(filters)
    if filters.get("success") is not None:
        raise ConfigError("preference pairs take successes and failures; drop the success filter")
    if filters.get("valid") is False:
        raise ConfigError("preference pairs use valid episodes only; drop valid=False")
    # keep ids only (episodes are read back per pair, so memory stays small)
    groups: dict[tuple[str, str, str], tuple[list[int], list[int]]] = {}
    for episode_id, ep in store.iter_episodes(**{**filters, "valid": True}):
        key = (ep.env_id, ep.task_id, _head_key(ep))
        wins, losses = groups.setdefault(key, ([], []))
        (wins if ep.success else losses).append(episode_id)
    rows = []
    for (env_id, task_id, _), (wins, losses) in sorted(groups.items()):
        if not wins or not losses:
            continue
        for i in range(max(len(wins), len(losses))):
            win, loss = wins[i % len(wins)], losses[i % len(losses)]
            row = _pair((win, store.get(win)), (loss, store.get(loss)))
            if row is not None:
                rows.append({**row, "env_id": env_id, "task_id": task_id})
    return rows


def episode_rows(store: TrajectoryStore, **filters: Any) -> Iterator[dict[str, Any]]:
    """Whole episodes, nested fields as JSON text (their keys vary between envs)."""
    _check_filters(filters)
    for episode_id, ep in store.iter_episodes(**filters):
        row: dict[str, Any] = {"episode_id": episode_id, **ep.to_json()}
        row["success"] = ep.success
        row["dedup_key"] = ep.dedup_key()
        for name in _JSON_FIELDS:
            row[name] = json.dumps(row[name], ensure_ascii=False)
        yield row


def export_sft(
    store: TrajectoryStore,
    path: str | Path,
    *,
    tool_calls: ToolCallFormat = "text",
    **filters: Any,
) -> int:
    """Write successful valid episodes as chat SFT JSONL; returns the number of lines.

    Args:
        store: the trajectory store.
        path: the JSONL file to write (replaced).
        tool_calls: ``"text"`` (default) or ``"native"`` (see :func:`sft_rows`).
        **filters: :meth:`TrajectoryStore.query` filters (env_id, task_id, policy, ...).
    """
    return _write_jsonl(path, sft_rows(store, tool_calls=tool_calls, **filters))


def export_preferences(store: TrajectoryStore, path: str | Path, **filters: Any) -> int:
    """Write success/failure preference pairs as JSONL (see :func:`preference_rows`).

    Each line has ``prompt`` (the messages the two episodes share, up to their first
    differing assistant turn, at least the system and first user message), ``chosen``
    and ``rejected`` (each episode's continuation from there), ``env_id``, ``task_id``,
    ``chosen_id``, ``rejected_id``, ``chosen_return`` and ``rejected_return``.
    """
    return _write_jsonl(path, iter(preference_rows(store, **filters)))


def export_episodes(store: TrajectoryStore, path: str | Path, **filters: Any) -> int:
    """Write whole episodes as JSONL (``StoredEpisode`` fields plus ``episode_id``)."""
    _check_filters(filters)

    def rows() -> Iterator[dict[str, Any]]:
        for episode_id, ep in store.iter_episodes(**filters):
            yield {"episode_id": episode_id, **ep.to_json()}

    return _write_jsonl(path, rows())


def export_hf(
    store: TrajectoryStore,
    folder: str | Path,
    kind: HFKind = "sft",
    *,
    tool_calls: ToolCallFormat = "text",
    **filters: Any,
) -> datasets.Dataset:
    """Build a Hugging Face dataset of ``kind`` rows and ``save_to_disk`` it in ``folder``.

    ``sft`` and ``preferences`` rows are those of :func:`export_sft` and
    :func:`export_preferences` (``tool_calls`` applies to ``sft``); ``episodes`` rows
    hold every stored field, nested ones as JSON text. Load it back with
    ``datasets.load_from_disk(folder)``.

    Raises:
        ConfigError: unknown ``kind``, native tool calls for another kind than ``sft``,
            or the ``datasets`` package is missing.
    """
    if kind not in HF_KINDS:
        raise ConfigError(f"kind must be one of {HF_KINDS}, got {kind!r}")
    if tool_calls != "text" and kind != "sft":
        raise ConfigError(f"native tool calls are an SFT format; drop them for kind {kind!r}")
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError(
            "exporting a Hugging Face dataset needs the datasets package: "
            "pip install 'agentgym-envs[eval]'"
        ) from exc
    if kind == "sft":
        rows = list(sft_rows(store, tool_calls=tool_calls, **filters))
    elif kind == "preferences":
        rows = preference_rows(store, **filters)
    else:
        rows = list(episode_rows(store, **filters))
    if not rows:
        logger.warning("no %s rows match %s; writing an empty dataset", kind, filters or "{}")
    features = native_features(datasets) if tool_calls == "native" else None
    dataset = datasets.Dataset.from_list(rows, features=features)
    dataset.save_to_disk(str(folder))
    return dataset


# -- internals ---------------------------------------------------------------------------


def _check_filters(filters: dict[str, Any]) -> None:
    unknown = sorted(set(filters) - set(_FILTERS))
    if unknown:
        raise ConfigError(f"unknown export filters {unknown}; valid filters: {_FILTERS}")


def _sft_filters(filters: dict[str, Any]) -> dict[str, Any]:
    _check_filters(filters)
    if filters.get("success") is False or filters.get("valid") is False:
        raise ConfigError("SFT exports successful valid episodes; drop success/valid=False")
    return {**filters, "success": True, "valid": True}


def _write_jsonl(path: str | Path, rows: Iterator[dict[str, Any]]) -> int:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with target.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def _head(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages before the first assistant turn (system and task)."""
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            return messages[:i]
    return messages


def _head_key(ep: StoredEpisode) -> str:
    text = json.dumps(chat(_head(ep.messages)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _split_point(a: list[dict[str, str]], b: list[dict[str, str]]) -> int:
    """Index of the assistant turn where two chats start to differ (the prompt ends
    there). When an observation differs first (a stochastic env answered the same
    action differently), the prompt ends before that shared action."""
    head = len(_head(a))
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), n)
    if first == n:  # one chat is a prefix of the other: there are no two continuations
        return n
    cut = first
    while cut > head and a[cut]["role"] != "assistant":
        cut -= 1
    return max(cut, head)


def _pair(win: tuple[int, StoredEpisode], loss: tuple[int, StoredEpisode]) -> dict[str, Any] | None:
    (win_id, good), (loss_id, bad) = win, loss
    chosen, rejected = chat(good.messages), chat(bad.messages)
    cut = _split_point(chosen, rejected)
    if cut >= len(chosen) or cut >= len(rejected):
        logger.debug("episodes %d and %d have no differing continuation", win_id, loss_id)
        return None
    return {
        "prompt": chosen[:cut],
        "chosen": chosen[cut:],
        "rejected": rejected[cut:],
        "chosen_id": win_id,
        "rejected_id": loss_id,
        "chosen_return": good.episode_return,
        "rejected_return": bad.episode_return,
    }
