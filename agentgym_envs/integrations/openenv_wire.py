"""What an OpenEnv WebSocket session sends: each step's ``info`` as what changed, in JSON
serialised once.

An env's ``info`` repeats per-episode constants on every step: the tool schemas (8.8 KB
of Retail's 9.4 KB step message), the versions, the seeds and the task. The server sends
the whole ``info`` at ``reset``; a step message carries the keys that describe the step
(:data:`STEP_KEYS`, always) and every other key whose JSON differs from what this session
last sent in the episode. ``info_unchanged`` names the keys left out: the full ``info`` is
the last full one with exactly those keys kept and the sent ones put over them
(:func:`merge_info`, which :class:`~agentgym_envs.integrations.openenv.OpenEnvGymEnv`
applies, so Gymnasium users see the env's ``info`` unchanged). A key the env stopped
giving is neither sent nor named, so it is gone from the merged ``info`` too.

"Changed" is decided on the serialised bytes (never on ``==``, for which ``1``, ``1.0``
and ``True`` are equal): each key is serialised once per step, and the same bytes are
compared with the last ones and spliced into the message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from agentgym_envs.integrations.extras import jsonable

__all__ = ["STEP_KEYS", "InfoStream", "dumps", "merge_info", "observation_message"]

STEP_KEYS = frozenset(
    {"outcome", "tool_calls", "error", "new_milestones", "reward_components", "safety"}
)
"""``info`` keys that describe the step itself: every step message carries them, even when
their value is the previous step's (an OpenEnv client reads them from each step)."""

_SHARED_MIN = 1024  # values this large (tool schemas, the system prompt) are kept once
_SHARED_MAX = 4096  # distinct large values kept; past that the table starts over
_SHARED: dict[bytes, bytes] = {}


def _fallback(value: Any) -> Any:
    """orjson's ``default``: what orjson does not know (sets, numpy scalars, other
    objects) as :func:`jsonable` writes it."""
    return jsonable(value)


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON (UTF-8), as :func:`~.extras.jsonable` would write it.

    The fast path is orjson on the value itself (dicts, lists, tuples, strings, numbers,
    enums, dataclasses; anything else through ``jsonable``). What orjson refuses (a lone
    surrogate, a non-string key, an integer past 64 bits) takes the slow path: ``jsonable``
    over the whole value, then the standard library.
    """
    try:
        return orjson.dumps(value, default=_fallback)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":")).encode()


def _shared(data: bytes) -> bytes:
    """One object for equal large values, so sessions of one env hold one copy."""
    if len(data) < _SHARED_MIN:
        return data
    found = _SHARED.get(data)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        _SHARED[data] = found = data
    return found


class InfoStream:
    """One session's ``info`` on the wire: the whole of it at reset, what changed at a step.

    Not thread-safe: a session's messages are encoded one at a time.
    """

    def __init__(self) -> None:
        self._sent: dict[str, bytes] = {}  # key -> its JSON in the last message (full)

    def reset(self, info: Mapping[str, Any]) -> tuple[bytes, list[str]]:
        """The whole ``info`` as a JSON object, and no key left out."""
        self._sent = {key: _shared(dumps(value)) for key, value in info.items()}
        return self._join(self._sent), []

    def step(self, info: Mapping[str, Any]) -> tuple[bytes, list[str]]:
        """The step's keys and the changed ones as a JSON object, and the keys left out
        (their JSON is the one last sent)."""
        last, sent, unchanged, now = self._sent, {}, [], {}
        for key, value in info.items():
            data = dumps(value)
            before = last.get(key)
            if before is not None and before == data:
                now[key] = before
                if key not in STEP_KEYS:
                    unchanged.append(key)
                    continue
            else:
                now[key] = data
            sent[key] = data
        self._sent = now
        return self._join(sent), unchanged

    def full(self) -> bytes:
        """The whole ``info`` of the last message, as a JSON object."""
        return self._join(self._sent)

    @staticmethod
    def _join(items: Mapping[str, bytes]) -> bytes:
        return b"{" + b",".join(dumps(k) + b":" + v for k, v in items.items()) + b"}"


def observation_message(
    text: str,
    info: bytes,
    unchanged: list[str],
    *,
    reward: float | None,
    terminated: bool,
    truncated: bool,
) -> str:
    """An OpenEnv ``observation`` answer: ``{"type": "observation", "data": {"observation":
    {...}, "reward": ..., "done": ...}}``, as openenv-core's server shapes it, with the
    ``info`` object already serialised."""
    flags = b',"terminated":%s,"truncated":%s' % (
        b"true" if terminated else b"false",
        b"true" if truncated else b"false",
    )
    observation = (
        b'{"text":'
        + dumps(text)
        + flags
        + b',"info":'
        + info
        + b',"info_unchanged":'
        + orjson.dumps(unchanged)
        + b"}"
    )
    done = b"true" if terminated or truncated else b"false"
    message = (
        b'{"type":"observation","data":{"observation":'
        + observation
        + b',"reward":'
        + dumps(reward)
        + b',"done":'
        + done
        + b"}}"
    )
    return message.decode()


def merge_info(
    last: Mapping[str, Any] | None, info: Mapping[str, Any], unchanged: Iterable[str]
) -> dict[str, Any]:
    """The full ``info`` of a message: ``last`` (the previous full one) restricted to
    ``unchanged``, with ``info`` (the keys sent) over it, in the env's key order.

    Raises:
        KeyError: ``unchanged`` names a key that ``last`` lacks (a message was lost or
            came from another session).
    """
    kept = list(unchanged)
    if not kept:
        return dict(info)
    if last is None:
        raise KeyError(f"info keys {kept} are left out as unchanged, but no info came before")
    missing = [key for key in kept if key not in last]
    if missing:
        raise KeyError(f"info keys {missing} are left out as unchanged, but were never sent")
    keep = set(kept)
    merged: dict[str, Any] = {}
    for key in last:  # the env gives its keys in one order: keep it
        if key in info:
            merged[key] = info[key]
        elif key in keep:
            merged[key] = last[key]
    for key, value in info.items():
        merged.setdefault(key, value)
    return merged
