"""RepoFixReal's bug reports, built from the calls that went wrong: what was called, what
it gave on the buggy code and what it should give, in the project's own names. Nothing
here sees the fix, the mutated line or the kind of bug."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_envs.repofix import probes as probe_mod

_SHOWN = 100  # characters of a value in a report


def show(data: Any, limit: int = _SHOWN) -> str:
    """An encoded value (``probe_harness``) written as Python would print it, cut short."""
    text = _show(data)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(data: Any) -> str:
    if data is None or isinstance(data, bool | int | float | str):
        return repr(data)
    if isinstance(data, list):
        return "[" + ", ".join(_show(v) for v in data) + "]"
    if not isinstance(data, dict) or not data:
        return "?"
    tag = next((k for k in data if k.startswith("$")), "")
    value: Any = data.get(tag)
    if tag == "$tuple":
        items = [_show(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if tag in ("$dict", "$ordereddict", "$counter", "$defaultdict"):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value) + "}"
    if tag in ("$set", "$frozenset"):
        return "{" + ", ".join(_show(v) for v in value) + "}" if value else "set()"
    if tag == "$deque":
        return "deque([" + ", ".join(_show(v) for v in value) + "])"
    if tag == "$iter":
        return "iterator over [" + ", ".join(_show(v) for v in value) + "]"
    if tag == "$obj":  # as its class would be built: contents, else public attributes
        name = str(value).rpartition(":")[2]
        if "pairs" in data:
            pairs = ", ".join(f"{_show(k)}: {_show(v)}" for k, v in data["pairs"])
            return f"{name}({{{pairs}}})"
        if "items" in data:
            return f"{name}([" + ", ".join(_show(v) for v in data["items"]) + "])"
        state = [(k, v) for k, v in data.get("state", []) if not str(k).startswith("_")]
        return f"{name}(" + ", ".join(f"{k}={_show(v)}" for k, v in state) + ")"
    if tag in ("$type", "$enum"):
        name = str(value).rpartition(":")[2]
        return f"{name}.{data['name']}" if tag == "$enum" else name
    if tag in ("$bytes", "$bytearray"):
        return repr(bytes.fromhex(str(value))) if _hex(value) else "b'?'"
    if tag in ("$date", "$datetime", "$time", "$decimal", "$float"):
        return str(value)
    if tag == "$stringio":
        return f"StringIO({_show(value[0])})"
    return _show(value)


def _hex(value: Any) -> bool:
    return isinstance(value, str) and all(c in "0123456789abcdef" for c in value.lower())


def _call_text(call: Mapping[str, Any]) -> str:
    args = [show(a, 60) for a in call.get("args", [])]
    args += [f"{k}={show(v, 60)}" for k, v in call.get("kwargs", [])]
    inner = ", ".join(args)
    kind = call["kind"]
    if kind in ("function", "new"):
        module, _, name = str(call["target"]).partition(":")
        return f"{module}.{name}({inner})"
    if kind == "classmethod":
        module, _, name = str(call["target"]).partition(":")
        return f"{module}.{name}.{call['name']}({inner})"
    receiver = show(call.get("self"), 80)
    if kind == "property":
        return f"{receiver}.{call['name']}"
    return f"{receiver}.{call['name']}({inner})"


def _outcome(observed: Mapping[str, Any], *, third_person: bool = True) -> str:
    """``raises E`` or ``returns X`` (``raise E``, ``return X`` without ``third_person``)."""
    s = "s" if third_person else ""
    if "raised" in observed:
        return f"raise{s} {str(observed['raised']).rpartition(':')[2]}"
    return f"return{s} {show(observed.get('value'))}"


def describe(probe: probe_mod.Probe, observed: Any) -> str:
    """One report line: what a call gave on the buggy code and what it should give."""
    call = _call_text(probe.call)
    expected, got = probe.expected, observed if isinstance(observed, dict) else {}
    if ("raised" in expected) != ("raised" in got) or expected.get("raised") != got.get("raised"):
        should = _outcome(expected, third_person=False)
        return f"`{call}` {_outcome(got)}, but it should {should}."
    if not probe_mod.same(expected.get("value"), got.get("value")):
        return f"`{call}` returns {show(got.get('value'))}, but it should return " \
            f"{show(expected.get('value'))}."  # fmt: skip
    if expected.get("printed") != got.get("printed"):
        return f"`{call}` prints {show(got.get('printed', ''))}, expected " \
            f"{show(expected.get('printed', ''))}."  # fmt: skip
    if "message" in expected and expected.get("message") != got.get("message"):
        return f"`{call}` raises with the message {show(got.get('message'))}, expected " \
            f"{show(expected['message'])}."  # fmt: skip
    return f"After `{call}` its arguments or object hold something else than they should."


def report(name: str, lines: Sequence[tuple[probe_mod.Probe, Any]], failing: int) -> str:
    """The bug report: a call that went wrong per bug (what it gave, what it should give)
    and how many of the project's tests fail. Built from data only."""
    tests = "test fails" if failing == 1 else "tests fail"
    return (
        f"Something is wrong in `{name}`: {failing} of its own {tests} now. For example:\n"
        + "\n".join("- " + describe(probe, observed) for probe, observed in lines)
    )
