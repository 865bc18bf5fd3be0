"""What a WebSocket session sends (``integrations.openenv_wire``): the whole ``info`` at
reset, the step's keys and the changed ones at a step, serialised once; and the client's
merge that puts the whole ``info`` back together."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from agentgym_envs.core.info import Outcome
from agentgym_envs.integrations.extras import jsonable, require

require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_openenv_wire.py")

from agentgym_envs.integrations.openenv_wire import (  # noqa: E402
    STEP_KEYS,
    InfoStream,
    dumps,
    merge_info,
    observation_message,
)


@dataclasses.dataclass
class _Point:
    x: int
    y: float


@pytest.mark.parametrize(
    "value",
    [
        {"outcome": Outcome.SUCCESS, "t": (1, 2.5, None), "s": "\U0001f600 ok"},
        {"set": {3}, "np": np.int64(7), "f": np.float32(0.5), "p": _Point(1, 2.0)},
        {"surrogate \ud800": ["x\udcff"]},  # the slow path: orjson refuses lone surrogates
        {1: "int key", "big": 2**70},  # the slow path: a non-string key, a 70-bit integer
    ],
)
def test_dumps_writes_what_jsonable_writes(value: Any) -> None:
    assert json.loads(dumps(value)) == jsonable(value)


def _reset_info() -> dict[str, Any]:
    return {
        "outcome": "continue",
        "tools": [{"type": "function", "function": {"name": "move"}}],
        "tool_calls": [],
        "error": None,
        "reward_components": {},
        "cost": {"tool_calls": 0},
        "versions": {"env": "0"},
        "task": {"id": "t-1"},
        "system": "the rules",
    }


def _step_info(calls: int, **changes: Any) -> dict[str, Any]:
    info = {k: v for k, v in _reset_info().items() if k != "system"}
    info["cost"] = {"tool_calls": calls}
    return {**info, **changes}


def test_a_step_sends_its_own_keys_and_what_changed_and_names_the_rest() -> None:
    stream = InfoStream()
    body, unchanged = stream.reset(_reset_info())
    assert json.loads(body) == _reset_info() and unchanged == []
    body, unchanged = stream.step(_step_info(1))
    sent = json.loads(body)
    # the step's own keys even when equal to the last ones; cost changed
    assert set(sent) == {"outcome", "tool_calls", "error", "reward_components", "cost"}
    assert unchanged == ["tools", "versions", "task"]  # in the env's order; system is gone
    body, unchanged = stream.step(_step_info(1, tools=[]))  # the tool set changed
    assert json.loads(body)["tools"] == [] and "cost" not in json.loads(body)
    assert "cost" in unchanged and "tools" not in unchanged
    assert json.loads(stream.full()) == _step_info(1, tools=[])


def test_changed_means_other_json_not_unequal_python() -> None:
    """``1 == 1.0 == True`` in Python, but the client must get the value's own JSON."""
    stream = InfoStream()
    stream.reset({"outcome": "continue", "score": 1})
    for value in (1.0, True, 1):
        body, unchanged = stream.step({"outcome": "continue", "score": value})
        assert json.loads(body)["score"] == value and unchanged == []
        assert type(json.loads(body)["score"]) is type(value)


def test_merge_puts_back_every_info_of_an_episode() -> None:
    infos = [_reset_info(), _step_info(1), _step_info(2, tools=[]), _step_info(2, tools=[])]
    infos.append({k: v for k, v in infos[-1].items() if k != "task"})  # a key goes away
    stream, last = InfoStream(), None
    for i, info in enumerate(infos):
        body, unchanged = stream.reset(info) if i == 0 else stream.step(info)
        last = merge_info(last, json.loads(body), unchanged)
        assert last == json.loads(json.dumps(info)) and list(last) == list(info)


def test_merge_refuses_keys_it_never_got() -> None:
    with pytest.raises(KeyError, match="no info came before"):
        merge_info(None, {"outcome": "continue"}, ["tools"])
    with pytest.raises(KeyError, match="never sent"):
        merge_info({"outcome": "continue"}, {}, ["tools"])


def test_the_observation_message_is_openenvs_shape() -> None:
    text = observation_message(
        "you see \u2603", b'{"outcome":"continue"}', ["tools"], reward=-0.5, terminated=True,
        truncated=False,
    )  # fmt: skip
    assert json.loads(text) == {
        "type": "observation",
        "data": {
            "observation": {
                "text": "you see \u2603",
                "terminated": True,
                "truncated": False,
                "info": {"outcome": "continue"},
                "info_unchanged": ["tools"],
            },
            "reward": -0.5,
            "done": True,
        },
    }


def test_step_keys_are_info_keys_of_the_contract() -> None:
    from agentgym_envs.core.info import StepInfo

    assert set(StepInfo.__annotations__) >= STEP_KEYS
