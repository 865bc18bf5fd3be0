"""Native tool calls in SFT rows (``sft_rows(..., tool_calls="native")``, see
:mod:`agentgym_envs.eval.export`): the tools an episode was played with, its chat with
structured ``tool_calls`` and ``tool`` messages, and the Arrow types of such rows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.store import StoredEpisode

if TYPE_CHECKING:
    from agentgym_envs.core.actions import ActionParser
    from agentgym_envs.core.tools import ToolSet


NATIVE_DATASETS_MIN = "4.7"
"""The first ``datasets`` release with the ``Json`` feature type native rows need (the
``eval`` extra pins at least this)."""


class NativeExportError(AgentGymError, ValueError):
    """An episode cannot be rendered with native tool calls (see
    :func:`agentgym_envs.eval.export.sft_rows`)."""


def episode_tools(ep: StoredEpisode) -> list[dict[str, Any]]:
    """The OpenAI-format schemas of the tools ``ep`` was played with: the env class's
    tools, renamed as its task renames them, checked against the tools fingerprint the
    episode recorded (``versions["tools"]``).

    Raises:
        NativeExportError: the env or task is unknown here, the env has no tools, or the
            fingerprint differs (a tool variant set at run time, or a changed env).
    """
    toolset = _toolset(ep.env_id, ep.task_id)
    recorded = ep.versions.get("tools")
    if recorded != toolset.fingerprint:
        raise NativeExportError(
            f"its tools fingerprint {recorded!r} is not that of {ep.env_id}'s tools for task "
            f"{ep.task_id!r} here ({toolset.fingerprint!r}): a tool variant or another env version"
        )
    return toolset.schemas()


def native_messages(ep: StoredEpisode) -> list[dict[str, Any]]:
    """The episode's chat with its tool calls as structured ``tool_calls`` and their
    answers as ``tool`` messages. Calls come from the recorded ``tool_calls`` of each
    assistant message; where the store has none (the trainer records text only), the
    action is parsed with the episode's tools. Each call keeps its recorded id, else gets
    ``call_<turn>_0``.

    An episode played in native tool mode (``tool_mode="native"``) recorded how the env
    answered each turn (``native_messages`` on the observation, see
    :class:`~agentgym_envs.wrappers.recording.RecordingWrapper`): a turn whose calls
    that answer covers, one ``tool`` message per call id, is rendered from it, so it may
    hold several calls; a turn without a call keeps the message's own ``content``.

    Raises:
        NativeExportError: a turn holds several calls and no recorded native answer
            splits its observation into one answer per call.
    """
    out: list[dict[str, Any]] = []
    answering: tuple[str, str] | None = None  # (call id, tool name) the next user message answers
    turn, skip = 0, False
    for index, message in enumerate(ep.messages):
        role, content = str(message["role"]), str(message["content"])
        if skip:  # an observation already rendered from its native answer
            skip = False
        elif role == "system":
            out.append({"role": "system", "content": _native_system(content, ep)})
        elif role == "assistant":
            turn += 1
            calls = _calls(message, ep)
            native = _native_turn(ep.messages, index, calls)
            if native is not None:
                out += native
                skip, answering = True, None
                continue
            if len(calls) > 1:
                raise NativeExportError(
                    f"turn {turn} holds {len(calls)} tool calls, answered by one observation"
                )
            if not calls:
                out.append({"role": "assistant", "content": content})
                answering = None
                continue
            name, arguments, call_id = calls[0]
            call_id = call_id or f"call_{turn}_0"
            out.append(_assistant([(name, arguments, call_id)]))
            answering = (call_id, name)
        elif role == "user" and answering is not None:
            call_id, name = answering
            out.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            answering = None
        else:
            out.append({"role": role, "content": content})
    return out


def _assistant(calls: list[tuple[str, dict[str, Any], str]]) -> dict[str, Any]:
    """An assistant message of structured calls ``(name, arguments, call id)``."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for name, args, call_id in calls
        ],
    }


def _native_turn(
    messages: list[dict[str, Any]], index: int, calls: list[tuple[str, dict[str, Any], str]]
) -> list[dict[str, Any]] | None:
    """The assistant turn ``messages[index]`` and its answer as the env gave them in
    native mode, or None when the turn has no recorded native answer or its ``tool``
    messages do not answer exactly the turn's call ids, in order (calls written as text,
    or ids the env could not use: its answer is then the plain observation)."""
    following = messages[index + 1] if index + 1 < len(messages) else {}
    answer = following.get("native_messages")
    if not isinstance(answer, list):
        return None
    answered = [str(m.get("tool_call_id")) for m in answer if m.get("role") == "tool"]
    if answered != [call_id for _, _, call_id in calls] or not all(answered):
        return None
    if calls:
        head = _assistant(calls)
    else:
        head = {"role": "assistant", "content": _content(str(messages[index]["content"]))}
    names = {call_id: name for name, _, call_id in calls}
    rest = [
        {**m, "name": names[str(m["tool_call_id"])]} if m.get("role") == "tool" else dict(m)
        for m in answer
    ]
    return [head, *rest]


def _content(action: str) -> str:
    """The text of a native turn without a call: the ``content`` of the assistant
    message the action holds (as the env read it), else the action itself."""
    try:
        data = json.loads(action)
    except (ValueError, RecursionError):
        return action
    if not isinstance(data, dict) or data.get("role") != "assistant":
        return action
    content = data.get("content")
    if isinstance(content, list):  # text parts
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return content if isinstance(content, str) else ""


def _native_system(text: str, ep: StoredEpisode) -> str:
    """The system prompt as native mode states it: the text mode's tool list and accepted
    action forms (the tools now travel in the ``tools`` column) give way to native mode's
    closing line (see :func:`agentgym_envs.core.native.system_prompt`, one call per turn).
    A prompt without that text-mode tail is kept as it is."""
    from agentgym_envs.core.actions import FORMAT_NOTE

    listing = f"Tools:\n{_toolset(ep.env_id, ep.task_id).describe()}\n\n{FORMAT_NOTE}"
    rules, found, _ = text.partition(listing)
    if not found:
        return text
    return rules + "Act through the tools (one call per turn)."


def _calls(message: Mapping[str, Any], ep: StoredEpisode) -> list[tuple[str, dict[str, Any], str]]:
    """``(name, arguments, call id or "")`` of each call of an assistant message, under
    the name the agent saw: the env records (and the parser returns) canonical names,
    which a task that renames tools shows under others."""
    tools = _toolset(ep.env_id, ep.task_id)
    if "tool_calls" in message:  # recorded by the env (RecordingWrapper): the env's verdict
        calls = [
            (str(c["name"]), dict(c.get("arguments") or {}), str(c.get("call_id") or ""))
            for c in message["tool_calls"] or ()
        ]
    else:
        parsed = _parser(ep.env_id, ep.task_id).parse(str(message["content"]))
        calls = [(c.name, dict(c.arguments), "") for c in parsed.calls]
    try:
        return [(tools.canonical(name).name, args, call_id) for name, args, call_id in calls]
    except KeyError as exc:
        raise NativeExportError(f"it calls a tool its env does not have: {exc}") from exc


@cache
def _env_class(env_id: str) -> Any:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import agentgym_envs  # noqa: F401  (registers the envs)

    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error as exc:
        raise NativeExportError(f"env {env_id!r} is not registered here ({exc})") from exc
    cls = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if not hasattr(cls, "toolset"):
        raise NativeExportError(f"env {env_id!r} has no tools (it is no agentgym AgentEnv)")
    return cls


@cache
def _toolset(env_id: str, task_id: str) -> ToolSet:
    from agentgym_envs.core.tasks import load_task_set

    cls = _env_class(env_id)
    try:
        spec = load_task_set(cls.task_file, cls.task_dir).get(task_id).spec
    except (AgentGymError, KeyError):  # a task generated at reset (task_seed): no renames
        spec = {}
    names = spec.get("tool_names") or {} if isinstance(spec, Mapping) else {}
    described = spec.get("tool_descriptions") or {} if isinstance(spec, Mapping) else {}
    tools: ToolSet = cls.toolset  # as AgentEnv._use_tools renames them for the task
    return tools.renamed(names, described) if names or described else tools


@cache
def _parser(env_id: str, task_id: str) -> ActionParser:
    """The env's action parser for the task's tools, as a default env builds it (one call
    per action)."""
    from agentgym_envs.core.actions import ActionParser

    cls = _env_class(env_id)
    return ActionParser(
        _toolset(env_id, task_id),
        accepts_messages=cls.accepts_messages,
        max_chars=cls.max_action_chars,
    )


def native_features(datasets: Any) -> Any:
    """Arrow types of native SFT rows: messages and tools as ``Json`` (their keys differ
    from tool to tool; a struct type would merge every tool's keys into every row).

    Raises:
        ConfigError: the installed ``datasets`` has no ``Json`` type (before
            :data:`NATIVE_DATASETS_MIN`).
    """
    if not hasattr(datasets, "Json"):
        need = NATIVE_DATASETS_MIN
        raise ConfigError(
            f"native tool calls need the Json feature type of datasets >= {need}, got "
            f"datasets {datasets.__version__}; upgrade it: pip install -U 'datasets>={need}'"
        )
    text = datasets.Value("string")
    return datasets.Features(
        {
            "messages": datasets.List(datasets.Json()),
            "tools": datasets.List(datasets.Json()),
            "episode_id": datasets.Value("int64"),
            **{name: text for name in ("env_id", "task_id", "policy")},
        }
    )
