"""``agentgym serve``'s ``response_format``: decoding constrained to JSON that fits the
request's schema, over real loopback HTTP with the tiny (random) model, whose free text
is never JSON, so every fitting reply is the constraint's doing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentgym_envs.serving.server import ChatServer, start_server
from tests.policies.test_serve_features import MESSAGES, post, sse

SCHEMA = {
    "type": "object",
    "properties": {
        "asks": {"type": "array", "items": {"enum": ["email", "order_id", "zip"]}},
        "proposing": {"type": "boolean"},
        "values": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2},
    },
    "required": ["asks", "proposing", "values"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "reading", "schema": SCHEMA}}


@pytest.fixture(scope="module")
def served(tiny_folder: str) -> Iterator[tuple[ChatServer, str]]:
    server, url = start_server(tiny_folder, device="cpu", max_batch=8, model_id="tiny")
    yield server, url
    server.close()


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": MESSAGES, "max_tokens": 64, **extra}


def test_every_sampled_choice_fits_the_schema(served: tuple[ChatServer, str]) -> None:
    _, url = served
    status, free = post(url, "/chat/completions", chat(n=6, seed=3, temperature=1.0))
    assert status == 200
    parsed = 0
    for choice in free["choices"]:  # the random model's own text is not JSON
        try:
            json.loads(choice["message"]["content"])
            parsed += 1
        except ValueError:
            pass
    assert parsed == 0
    status, body = post(
        url, "/chat/completions", chat(n=6, seed=3, temperature=1.0, response_format=FORMAT)
    )
    assert status == 200, body
    replies = [c["message"]["content"] for c in body["choices"]]
    for choice, text in zip(body["choices"], replies, strict=True):
        assert choice["finish_reason"] == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)
        assert "\n" not in text  # compact: no whitespace runs
    assert len(set(replies)) > 1  # still sampled, not one forced answer
    again = post(
        url, "/chat/completions", chat(n=6, seed=3, temperature=1.0, response_format=FORMAT)
    )[1]
    assert [c["message"]["content"] for c in again["choices"]] == replies  # seeded


def test_json_object_and_text_formats(served: tuple[ChatServer, str]) -> None:
    _, url = served
    fmt = {"type": "json_object"}
    body = post(url, "/chat/completions", chat(seed=1, response_format=fmt))[1]
    text = body["choices"][0]["message"]["content"]
    if body["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # an open object may run to max_tokens; what came is still its start
        assert text.startswith("{")
    plain = post(url, "/chat/completions", chat(seed=1, max_tokens=6))[1]
    same = post(
        url, "/chat/completions", chat(seed=1, max_tokens=6, response_format={"type": "text"})
    )[1]
    assert same["choices"][0]["message"] == plain["choices"][0]["message"]


def test_the_openai_clients_structured_outputs_parse(served: tuple[ChatServer, str]) -> None:
    """The official client's typed helper (a pydantic model as ``response_format``)."""
    openai = pytest.importorskip("openai", reason="the openai client comes with [openenv]")
    pydantic = pytest.importorskip("pydantic")

    class Move(pydantic.BaseModel):
        direction: str = pydantic.Field(pattern="^(north|south|east|west)$")
        steps: int

    _, url = served
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    reply = client.chat.completions.parse(
        model="tiny", messages=MESSAGES, response_format=Move, seed=4, max_tokens=48
    )
    move = reply.choices[0].message.parsed
    assert isinstance(move, Move) and move.direction in {"north", "south", "east", "west"}


def test_streamed_choices_fit_the_schema(served: tuple[ChatServer, str]) -> None:
    _, url = served
    events = sse(url, "/chat/completions", chat(seed=5, stream=True, n=2, response_format=FORMAT))
    texts = ["", ""]
    for event in events:
        for choice in event["choices"]:
            texts[choice["index"]] += choice["delta"].get("content") or ""
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)


def test_the_llm_reader_gets_readings_that_fit_its_schema(
    served: tuple[ChatServer, str], tmp_path: Path
) -> None:
    """The business user's LLM reader against this server: every reading the model
    writes (recorded in the cassette) fits the reading's schema, so no draw is lost to
    a malformed object, whatever the model (here a random one)."""
    import gymnasium as gym

    import agentgym_envs  # noqa: F401  (registers the envs)

    _, url = served
    cassette = tmp_path / "reader.jsonl"
    env = gym.make(
        "agentgym/Retail-v1",
        user="llm", user_model="tiny", user_base_url=url, user_reader="llm",
        user_cassette=str(cassette), user_cassette_mode="record",
        user_options={"draws": 1, "max_tokens": 128, "retries": 0, "timeout_s": 120},
    )  # fmt: skip
    env.reset(seed=0, options={"task_id": "retail-easy-test-1000109"})
    oracle = env.unwrapped.oracle()
    for _ in range(4):
        *_, info = env.step(oracle.act())
    env.close()
    entries = [json.loads(line) for line in cassette.read_text().splitlines()[1:]]
    readings = [e for e in entries if e["role"] == "reader"]
    assert readings and info["user_llm"]["reader"]["reads"] == len(readings)
    complete = 0
    for entry in readings:
        schema = entry["settings"]["response_format"]["json_schema"]["schema"]
        assert set(schema["properties"]) == {
            "asks", "proposing", "verbs", "unavailable", "done", "refusing", "values", "answer"
        }  # fmt: skip
        if not entry["reply"].endswith("}"):  # cut at max_tokens inside a string
            continue
        jsonschema.validate(json.loads(entry["reply"]), schema)
        complete += 1
    assert complete >= 1


# a schema whose grammar llguidance compiles but cannot follow past '{"a": '
MUTUAL = {
    "type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"],
    "$defs": {"n": {"$ref": "#/$defs/m"}, "m": {"$ref": "#/$defs/n"}},
}  # fmt: skip


def test_a_reply_that_leaves_its_grammar_is_an_error_never_a_stop(
    served: tuple[ChatServer, str],
) -> None:
    """Found only while decoding: the plain reply is a 400 naming response_format, a
    streamed choice ends with finish_reason "error"; never "stop" on invalid JSON."""
    _, url = served
    fmt = {"type": "json_schema", "json_schema": {"name": "m", "schema": MUTUAL}}
    status, body = post(url, "/chat/completions", chat(seed=0, response_format=fmt))
    assert status == 400, body
    assert body["error"]["param"] == "response_format"
    assert "could not follow" in body["error"]["message"]
    events = sse(url, "/chat/completions", chat(seed=0, stream=True, response_format=fmt))
    finish = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    assert finish == ["error"]


def test_rows_copy_the_matcher_the_request_compiled(served: tuple[ChatServer, str]) -> None:
    """The grammar is compiled (and its first mask computed) on the request's thread;
    each row of the shared batch only copies that matcher."""
    server, _ = served
    engine = server.engine
    grammar = engine.grammars.compile(SCHEMA)
    assert engine.grammars.compile(SCHEMA) is grammar  # cached
    first, second = engine.grammars.matcher(grammar), engine.grammars.matcher(grammar)
    assert first is not second and not first.is_error()
    assert first.compute_bitmask() == second.compute_bitmask()


def test_without_llguidance_the_answer_names_the_install(
    served: tuple[ChatServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from agentgym_envs.core.errors import SchemaError
    from agentgym_envs.serving.engine import RowEngine

    server, _ = served
    for name in [m for m in sys.modules if m == "llguidance" or m.startswith("llguidance.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "llguidance", None)  # import fails
    with pytest.raises(SchemaError, match="pip install"):
        RowEngine(server.lm).grammars.compile(SCHEMA)


@pytest.mark.parametrize(
    ("path", "extra", "says"),
    [
        ("/chat/completions", {"response_format": {"type": "json_schema"}}, "json_schema"),
        ("/chat/completions", {"response_format": "json"}, "response_format must be"),
        (
            "/chat/completions",
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 3}}}},
            "schema",
        ),
        (
            "/chat/completions",
            {
                "response_format": FORMAT,
                "tools": [{"type": "function", "function": {"name": "look"}}],
                "tool_choice": "required",
            },
            "not both",
        ),
        (  # auto: a reply fitting the schema could still read as a call
            "/chat/completions",
            {
                "response_format": FORMAT,
                "tools": [{"type": "function", "function": {"name": "look"}}],
            },
            "not both",
        ),
        (  # it validates but the matcher cannot start
            "/chat/completions",
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "schema": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
                    },
                }
            },
            "cannot be served",
        ),
        (
            "/chat/completions",
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "schema": {
                            "type": "object",
                            "properties": {f"p{i}": {"type": "string"} for i in range(2000)},
                        }
                    },
                }
            },
            "at most 15000",
        ),
        ("/completions", {"prompt": "hi", "response_format": FORMAT}, "chat/completions only"),
    ],
)
def test_bad_response_formats_get_400(
    served: tuple[ChatServer, str], path: str, extra: dict[str, Any], says: str
) -> None:
    _, url = served
    body = {"model": "tiny", "max_tokens": 4, **extra}
    if path.endswith("chat/completions"):
        body["messages"] = MESSAGES
    status, reply = post(url, path, body)
    assert status == 400, reply
    assert reply["error"]["param"] == "response_format"
    assert says in reply["error"]["message"]
