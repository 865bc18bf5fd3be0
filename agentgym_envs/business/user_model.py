"""The language model behind the LLM user (voice and reader), and its cassette.

Any OpenAI-compatible ``/chat/completions`` endpoint serves it (``agentgym serve``,
vLLM, SGLang, a hosted model). Every call the user makes is keyed by the model, the
sampling settings (the per-call ``seed`` included) and the exact prompt, and can be
kept in a *cassette*:

- ``off``: calls go to the endpoint; nothing is kept.
- ``record``: an entry already in the cassette is used as is; any other call goes to
  the endpoint and is appended.
- ``replay``: only the cassette answers (offline, deterministic). A call it has no
  entry for is a :class:`CassetteMiss`: the voice says the template reply and the
  reader keeps the keyword reading, counted (``info["user_llm"]["cassette"]["misses"]``)
  and logged.

Why a missing entry is neither a ``ConfigError`` nor an ``ENV_ERROR``: which calls an
episode makes depends on what the agent did (another agent reaches replies the
recording never reached), so a miss shows up mid-episode, on a path the configuration
could not foresee; and since the agent's moves decide it, ending the episode as the
environment's fault would let a policy about to fail drop its episode out of every
success rate. The template reply is what a replay of the same moves says again, so the
replay stays exact. A cassette that cannot be opened at all (no file, another format) is
a ``ConfigError`` at construction.

Cassette format (``agentgym-user-cassette/1``), JSON Lines in UTF-8:

- line 1, the header: ``{"format": "agentgym-user-cassette/1"}``;
- then one entry per call: ``{"key", "role", "model", "settings", "messages", "reply"}``
  where ``key`` is the sha256 of the compact, key-sorted JSON of
  ``[model, settings, messages]``, ``role`` is ``voice`` or ``reader``, ``settings``
  holds ``temperature``, ``top_p``, ``max_tokens``, ``seed`` and ``stop`` (null: not
  sent), ``messages`` is the
  chat sent, and ``reply`` the text the model answered. The first entry of a key wins.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import AgentGymError, ConfigError, did_you_mean
from agentgym_envs.llm.http_client import BadReplyError, HttpCallError, JsonHttpClient

logger = logging.getLogger(__name__)

CASSETTE_FORMAT = "agentgym-user-cassette/1"
CASSETTE_MODES = ("off", "record", "replay")
READERS = ("keyword", "llm")
FALLBACKS = ("template", "none")


class UserSimulatorError(AgentGymError, RuntimeError):
    """The simulated user failed: its endpoint is down after retries, or every voiced
    draft was rejected with no template fallback. The env ends the episode with
    ``ENV_ERROR`` (never a policy failure)."""


class CassetteMiss(UserSimulatorError):
    """Replay mode has no entry for a call: the episode went where the recording did
    not. The agent's moves decide that, so a miss never ends the episode: the voice says
    the template reply and the reader keeps the keyword reading (counted as
    ``replay_misses``), which replays the same way every time."""


@dataclass(frozen=True)
class LLMUserConfig:
    """How the LLM user reaches its model (from the env's ``user_*`` arguments).

    Attributes:
        model: the model name the endpoint serves (sent with every request; part of the
            cassette key).
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``; may be None only in
            replay mode.
        reader: ``keyword`` (the agenda's keyword reader only) or ``llm`` (the model
            also reads each agent message; see :mod:`~agentgym_envs.business.reading`).
        cassette: a cassette file, or None.
        cassette_mode: ``off``, ``record`` or ``replay`` (see the module docstring).
        temperature: sampling temperature of the voice and the reader.
        top_p: nucleus mass (None: not sent).
        max_tokens: the longest reply in tokens.
        draws: voiced drafts tried per reply before the fallback.
        fallback: ``template`` (say the template reply, counted) or ``none`` (the episode
            ends with ``ENV_ERROR``).
        timeout_s: per-request timeout.
        retries: retries of a transient endpoint failure.
        api_key_env: the environment variable holding the bearer token (never a kwarg,
            so it never lands in ``env.spec``).
        structured: the reader asks for its reading as JSON fitting the reading's schema
            (``response_format`` ``json_schema``, part of the cassette key), which
            ``agentgym serve``, vLLM, SGLang and OpenAI constrain decoding to; False for
            an endpoint that does not take ``response_format``.
    """

    model: str
    base_url: str | None = None
    reader: str = "keyword"
    cassette: str | None = None
    cassette_mode: str = "off"
    temperature: float = 0.7
    top_p: float | None = None
    max_tokens: int = 96
    draws: int = 3
    fallback: str = "template"
    timeout_s: float = 120.0
    retries: int = 2
    api_key_env: str = "OPENAI_API_KEY"
    structured: bool = True

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("user_reader", self.reader, READERS),
            ("user_cassette_mode", self.cassette_mode, CASSETTE_MODES),
            ("fallback", self.fallback, FALLBACKS),
        ):
            if value not in allowed:
                raise ConfigError(
                    f"{name} must be one of {list(allowed)}, got {value!r}."
                    f"{did_you_mean(str(value), allowed)}"
                )
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(
                "user='llm' needs user_model=<the model name the endpoint serves>, "
                f"got {self.model!r}"
            )
        if self.cassette_mode != "off" and not self.cassette:
            raise ConfigError(
                f"user_cassette_mode={self.cassette_mode!r} needs user_cassette=<a file path>"
            )
        if self.cassette_mode != "replay" and not self.base_url:
            raise ConfigError(
                "user='llm' needs user_base_url=<an OpenAI-compatible API root, e.g. "
                "http://127.0.0.1:8000/v1> unless it replays a cassette "
                "(user_cassette=..., user_cassette_mode='replay')"
            )
        if not isinstance(self.structured, bool):
            raise ConfigError(
                f"user_options structured must be true or false, got {self.structured!r}"
            )
        # numbers as floats, so temperature=1 and 1.0 are one call (one cassette key)
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if value is None and name == "top_p":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"user_options {name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"user_options {name} must be finite and >= 0, got {value}")
            object.__setattr__(self, name, float(value))
        if self.draws < 1 or self.max_tokens < 1 or self.retries < 0 or self.timeout_s <= 0:
            raise ConfigError(
                "user_options need draws >= 1, max_tokens >= 1, retries >= 0 and "
                f"timeout_s > 0, got draws={self.draws}, max_tokens={self.max_tokens}, "
                f"retries={self.retries}, timeout_s={self.timeout_s}"
            )

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The keys ``user_options`` may hold (the settings without an env argument)."""
        own = {"model", "base_url", "reader", "cassette", "cassette_mode"}
        return tuple(f.name for f in fields(cls) if f.name not in own)

    def settings(
        self, role: str, seed: int, schema: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The sampling settings of one call (part of its cassette key): the voice
        writes one line (it stops at a newline), the reader one JSON object (fitting
        ``schema`` where the reader is ``structured``)."""
        settings: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": seed,
            "stop": ["\n"] if role == "voice" else None,
        }
        if role == "reader" and self.structured and schema is not None:
            settings["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reading", "schema": dict(schema), "strict": True},
            }
        return settings


def user_config(
    user: str,
    model: str | None,
    base_url: str | None,
    reader: str,
    cassette: str | None,
    cassette_mode: str | None,
    options: Mapping[str, Any] | None,
) -> LLMUserConfig | None:
    """The LLM user's configuration from the env's ``user_*`` arguments (None: the
    template user).

    Raises:
        ConfigError: an unknown ``user``, LLM settings given to the template user, an
            unknown ``user_options`` key, or an incomplete LLM configuration.
    """
    if user not in ("template", "llm"):
        raise ConfigError(
            f"user must be 'template' or 'llm', got {user!r}."
            f"{did_you_mean(str(user), ('template', 'llm'))}"
        )
    if user == "template":
        given = {
            "user_model": model,
            "user_base_url": base_url,
            "user_cassette": cassette,
            "user_cassette_mode": cassette_mode,
            "user_options": options,
        }
        stray = [k for k, v in given.items() if v is not None]
        if reader != "keyword":
            stray.append("user_reader")
        if stray:
            raise ConfigError(
                f"{stray} only apply to the LLM user: pass user='llm' (with user_model and "
                "user_base_url or a cassette to replay), or drop them"
            )
        return None
    extra = dict(options or {})
    allowed = LLMUserConfig.option_names()
    for key in extra:
        if key not in allowed:
            raise ConfigError(
                f"user_options has an unknown key {key!r}.{did_you_mean(key, allowed)} "
                f"Accepted keys: {', '.join(allowed)}"
            )
    mode = cassette_mode or ("replay" if cassette else "off")
    try:
        return LLMUserConfig(
            model=model or "",
            base_url=base_url,
            reader=reader,
            cassette=None if cassette is None else str(cassette),
            cassette_mode=mode,
            **extra,
        )
    except TypeError as exc:  # a value of the wrong type in user_options
        raise ConfigError(f"user_options: {exc}") from None


def cassette_key(model: str, settings: Mapping[str, Any], messages: Sequence[Any]) -> str:
    """The key of one call: sha256 of ``[model, settings, messages]`` as compact JSON."""
    raw = json.dumps([model, settings, messages], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class Cassette:
    """The recorded calls of an LLM user, one JSON line each (see the module docstring).

    Args:
        path: the cassette file.
        mode: ``record`` (created if missing, appended to) or ``replay`` (must exist).

    Raises:
        ConfigError: replay of a missing file, or a file that is not a cassette.
    """

    def __init__(self, path: str | Path, mode: str) -> None:
        self.path = Path(path)
        self.mode = mode
        self._entries: dict[str, str] = {}
        self._lock = threading.Lock()
        if not self.path.exists():
            if mode == "replay":
                raise ConfigError(
                    f"user cassette {self.path} does not exist; record one first with "
                    "user_cassette_mode='record' and user_base_url=<an endpoint>"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"format": CASSETTE_FORMAT}) + "\n", "utf-8")
            return
        lines = self.path.read_text("utf-8").splitlines()
        try:
            header = json.loads(lines[0]) if lines else {}
        except json.JSONDecodeError:
            header = {}
        if not isinstance(header, dict) or header.get("format") != CASSETTE_FORMAT:
            raise ConfigError(
                f"{self.path} is not a user cassette: its first line must be "
                f'{{"format": "{CASSETTE_FORMAT}"}}, got {lines[0][:80] if lines else ""!r}'
            )
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                key, reply = entry["key"], entry["reply"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ConfigError(
                    f"{self.path} line {number} is not a cassette entry (a JSON object with "
                    "key and reply); re-record the cassette"
                ) from None
            self._entries.setdefault(str(key), str(reply))

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> str | None:
        """The recorded reply of ``key``, or None."""
        return self._entries.get(key)

    def put(self, entry: Mapping[str, Any]) -> None:
        """Append one call (kept only if its key is new)."""
        with self._lock:
            if entry["key"] in self._entries:
                return
            self._entries[entry["key"]] = entry["reply"]
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")


def _content(reply: dict[str, Any]) -> str:
    """The text of a chat completion (``BadReplyError`` for anything else: retried)."""
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise BadReplyError(f"not a chat completion: {str(reply)[:200]}") from None
    if not isinstance(content, str):
        raise BadReplyError("the completion has no text content")
    return content


class UserModel:
    """Answers the LLM user's calls from the cassette or the endpoint (thread-safe).

    Args:
        config: the endpoint, sampling settings and cassette.
    """

    def __init__(self, config: LLMUserConfig) -> None:
        self.config = config
        self.cassette = (
            Cassette(config.cassette, config.cassette_mode)
            if config.cassette and config.cassette_mode != "off"
            else None
        )
        self._client = (
            JsonHttpClient(
                config.base_url,
                api_key=os.environ.get(config.api_key_env),
                timeout_s=config.timeout_s,
                retries=config.retries,
            )
            if config.base_url and config.cassette_mode != "replay"
            else None
        )

    def complete(
        self,
        role: str,
        messages: Sequence[Mapping[str, str]],
        seed: int,
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        """The model's reply to ``messages`` sampled with ``seed`` (as JSON fitting
        ``schema`` where the config is ``structured``).

        Raises:
            CassetteMiss: replay mode has no entry for this call.
            UserSimulatorError: the endpoint failed after its retries.
        """
        settings = self.config.settings(role, seed, schema)
        chat = [dict(m) for m in messages]
        key = cassette_key(self.config.model, settings, chat)
        if self.cassette is not None:
            hit = self.cassette.get(key)
            if hit is not None:
                return hit
        if self._client is None:
            raise CassetteMiss(
                f"the user cassette {self.config.cassette} has no {role} entry for key "
                f"{key[:16]}... (model {self.config.model!r}, seed {seed}): this episode "
                "went where the recording did not. Record it with user_cassette_mode="
                "'record' and user_base_url=<an endpoint>"
            )
        body: dict[str, Any] = {"model": self.config.model, "messages": chat}
        body.update({k: v for k, v in settings.items() if v is not None})
        try:
            text = self._client.post("/chat/completions", body, _content).value
        except HttpCallError as exc:
            raise UserSimulatorError(f"the user's model failed ({role}): {exc}") from None
        if self.cassette is not None:
            self.cassette.put(
                {
                    "key": key,
                    "role": role,
                    "model": self.config.model,
                    "settings": settings,
                    "messages": chat,
                    "reply": text,
                }
            )
        return text
