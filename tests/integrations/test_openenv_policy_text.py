"""Policy text over the OpenEnv server (issue 26): a lone surrogate in an action is the
agent's text, played like any other; the client gets a normal observation, never
"Error serializing to JSON"."""

from __future__ import annotations

import json

import pytest

from agentgym_envs.integrations.extras import jsonable, require

require("openenv.core", "openenv-core", "openenv", "tests/integrations/test_openenv_policy_text.py")

from openenv.core import GenericEnvClient  # noqa: E402

from agentgym_envs.core.info import Outcome  # noqa: E402
from agentgym_envs.integrations.openenv import OpenEnvGymEnv, serve  # noqa: E402

TRANSFER = '{"name": "transfer_to_human_agents", "arguments": {"summary": "One moment %s"}}'


def test_jsonable_makes_every_text_valid_unicode() -> None:
    got = jsonable({"a\ud800": ["x\udcff", ("\udfff",)], "ok": "\U0001f600"})
    assert got == {"a\ufffd": ["x\ufffd", ["\ufffd"]], "ok": "\U0001f600"}
    json.dumps(got, ensure_ascii=False).encode()


@pytest.mark.parametrize("action", [TRANSFER % "\\ud800", TRANSFER % "\ud800"])
def test_a_lone_surrogate_over_openenv_is_the_agents_failure(action: str) -> None:
    with serve("agentgym/Retail-v1", port=0, max_sessions=2) as server:
        remote = OpenEnvGymEnv(server.url)
        try:
            remote.reset(seed=7, options={"split": "test", "difficulty": "easy"})
            obs, _, terminated, _, info = remote.step(action)
        finally:
            remote.close()
        assert terminated and info["outcome"] is Outcome.FAILURE, obs
        assert info["tool_calls"][0]["arguments"] == {"summary": "One moment \ufffd"}
        with GenericEnvClient(base_url=server.url).sync() as client:
            client.reset(seed=7, options={"split": "test", "difficulty": "easy"})
            result = client.step({"text": "Hello \ud800"})
            assert result.observation["info"]["outcome"] == "continue"
            assert not result.observation["info"]["error"]
