"""SFT export with native tool calls: a ``tools`` column, assistant ``tool_calls`` and
``tool`` messages, checked against the env's own native mode and read by the real
``datasets``, TRL chat-template code and ``SFTTrainer`` (tiny model, SmolLM2 tokenizer)."""

from __future__ import annotations

import json
import logging
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import datasets
import gymnasium as gym
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.cli import main
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tools import ToolKind
from agentgym_envs.eval.export import export_hf, export_sft, sft_rows
from agentgym_envs.eval.export_native import NATIVE_DATASETS_MIN
from agentgym_envs.store import StoredEpisode, TrajectoryStore
from agentgym_envs.wrappers.recording import RecordingWrapper

# Sokoban: one call per turn, the whole observation answers it. Retail, ood split: tools
# renamed by the task, and the simulated user answers through `respond`.
EPISODES = (
    ("agentgym/Sokoban-v0", {"split": "test", "difficulty": "easy"}),
    ("agentgym/Retail-v1", {"split": "ood", "difficulty": "easy"}),
)


def _play(store: TrajectoryStore, env_id: str, options: dict[str, Any]) -> None:
    env = RecordingWrapper(gym.make(env_id), store, policy="oracle")
    env.reset(seed=0, options=options)
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    while not any(env.step(oracle.act())[2:4]):
        pass
    env.close()


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("native") / "t.sqlite"
    with TrajectoryStore(path) as store:
        for env_id, options in EPISODES:
            _play(store, env_id, options)
    return path


def _episodes(path: Path) -> dict[int, StoredEpisode]:
    with TrajectoryStore(path) as store:
        return dict(store.query())


def test_native_rows_replay_in_the_envs_native_mode(played: Path) -> None:
    """Fed back to the env in native mode, every exported assistant message reproduces
    the episode: same system prompt and tools, same observations, same call ids."""
    episodes = _episodes(played)
    with TrajectoryStore(played) as store:
        rows = list(sft_rows(store, tool_calls="native"))
    assert sorted(r["env_id"] for r in rows) == sorted(e for e, _ in EPISODES)
    for row in rows:
        ep = episodes[row["episode_id"]]
        env = gym.make(row["env_id"], tool_mode="native")
        # the recorded reset: a task drawn by the same options consumes the same randomness
        _, info = env.reset(seed=0, options=dict(EPISODES)[row["env_id"]])
        assert info["task"]["id"] == ep.task_id
        messages = row["messages"]
        assert messages[0] == {"role": "system", "content": info["system"]}
        assert "Accepted forms" not in messages[0]["content"]
        assert row["tools"] == info["tools"] and row["tools"]
        assert messages[1:2] == info["messages"]
        calls = 0
        for i, message in enumerate(messages[2:], start=2):
            if message["role"] != "assistant":
                continue
            obs, _, terminated, truncated, info = env.step(json.dumps(message))
            answer = messages[i + 1]
            (call,) = message["tool_calls"]
            calls += 1
            assert call["type"] == "function" and call["function"]["name"] == answer["name"]
            assert answer == {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": call["function"]["name"],
                "content": obs,  # the env's whole answer, as the text mode showed it
            }
            assert [c["call_id"] for c in info["tool_calls"]] == [call["id"]]
            if row["env_id"] == "agentgym/Sokoban-v0":  # no user: native mode says the same
                assert info["messages"] == [{k: v for k, v in answer.items() if k != "name"}]
        assert calls == len(ep.actions) and (terminated or truncated)
        assert info["outcome"] == "success"
        env.close()
    retail = next(r for r in rows if r["env_id"] == "agentgym/Retail-v1")
    renamed = {t["function"]["name"] for t in retail["tools"]}
    assert "get_order_details" not in renamed  # the ood task's own tool names


def test_trainer_records_without_tool_calls_are_parsed(played: Path, tmp_path: Path) -> None:
    """The trainer stores text only: the calls come from parsing the actions."""
    episodes = _episodes(played)
    copy = tmp_path / "text.sqlite"
    with TrajectoryStore(copy) as store:
        for ep in episodes.values():
            plain = [{k: v for k, v in m.items() if k != "tool_calls"} for m in ep.messages]
            store.add(replace(ep, messages=plain))
    with TrajectoryStore(played) as a, TrajectoryStore(copy) as b:
        recorded = [r["messages"] for r in sft_rows(a, tool_calls="native")]
        parsed = [r["messages"] for r in sft_rows(b, tool_calls="native")]
    assert parsed == recorded


def test_native_export_loads_in_datasets_trl_and_sfttrainer(
    played: Path, tmp_path: Path, capsys: Any
) -> None:
    from transformers import PreTrainedTokenizerBase
    from trl import SFTConfig, SFTTrainer
    from trl.chat_template_utils import supports_tool_calling
    from trl.data_utils import apply_chat_template

    from agentgym_envs.llm.models import load_tokenizer, tiny_llama

    out = tmp_path / "native.jsonl"
    args = ["traj", "export", str(played), "--format", "sft", "--out", str(out)]
    assert main([*args, "--tool-calls", "native"]) == 0
    assert "wrote 2 sft rows" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    loaded = datasets.load_dataset("json", data_files=str(out), split="train")
    hf = export_hf(TrajectoryStore(played), tmp_path / "hf", "sft", tool_calls="native")
    for dataset in (loaded, hf, datasets.load_from_disk(str(tmp_path / "hf"))):
        assert [dataset[i]["messages"] for i in range(2)] == [r["messages"] for r in rows]
        assert [dataset[i]["tools"] for i in range(2)] == [r["tools"] for r in rows]
    # SmolLM2's own chat template has no tools: TRL's Qwen2.5 training template has
    tokenizer: PreTrainedTokenizerBase = load_tokenizer("tiny")
    template = resources.files("trl") / "chat_templates" / "qwen2_5_training.jinja"
    tokenizer.chat_template = template.read_text()
    assert supports_tool_calling(tokenizer)
    for row in rows:
        text = apply_chat_template({"messages": row["messages"]}, tokenizer, row["tools"])["text"]
        for tool in row["tools"]:
            assert f'"name": "{tool["function"]["name"]}"' in text
        for message in row["messages"][1:]:
            for call in message.get("tool_calls", ()):
                assert json.dumps(call["function"], ensure_ascii=False) in text
            assert message.get("content", "").strip() in text
    # SFTTrainer tokenizes the rows and trains on the assistant's tool calls only
    config = SFTConfig(
        output_dir=str(tmp_path / "sft"), assistant_only_loss=True, report_to="none",
        max_length=None, use_cpu=True,
    )  # fmt: skip
    trainer = SFTTrainer(
        model=tiny_llama(tokenizer), args=config, train_dataset=loaded, processing_class=tokenizer
    )
    for row, example in zip(rows, trainer.train_dataset, strict=True):
        trained = [t for t, label in zip(example["input_ids"], example["labels"], strict=True)
                   if label != -100]  # fmt: skip
        trained_text = tokenizer.decode(trained)
        calls = [m for m in row["messages"] if m["role"] == "assistant"]
        assert trained_text.count("<tool_call>") == len(calls) > 0
        for message in calls:
            assert json.dumps(message["tool_calls"][0]["function"]) in trained_text
        assert "<tool_response>" not in trained_text


def test_the_default_export_is_unchanged(played: Path, tmp_path: Path) -> None:
    with TrajectoryStore(played) as store:
        export_sft(store, tmp_path / "text.jsonl")
        rows = [json.loads(line) for line in (tmp_path / "text.jsonl").read_text().splitlines()]
        assert rows == list(sft_rows(store, tool_calls="text"))
    for row in rows:
        assert set(row) == {"messages", "episode_id", "env_id", "task_id", "policy"}
        assert all(set(m) == {"role", "content"} for m in row["messages"])


def test_episodes_native_rows_cannot_hold_are_left_out_with_a_warning(
    played: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sokoban = next(e for e in _episodes(played).values() if e.env_id == "agentgym/Sokoban-v0")
    two_calls = [dict(m) for m in sokoban.messages]
    first = next(m for m in two_calls if m["role"] == "assistant")
    first["tool_calls"] = [first["tool_calls"][0], {**first["tool_calls"][0], "call_id": "b"}]
    path = tmp_path / "odd.sqlite"

    def copy(tag: str, **changes: Any) -> StoredEpisode:  # a new dedup key: stored apart
        return replace(sokoban, state_hashes=[*sokoban.state_hashes, tag], **changes)

    with TrajectoryStore(path) as store:
        store.add(copy("variant", versions={**sokoban.versions, "tools": "0123456789ab"}))
        store.add(copy("two calls", messages=two_calls))
        store.add(copy("fine"))
        with caplog.at_level(logging.WARNING, logger="agentgym_envs.eval.export"):
            rows = list(sft_rows(store, tool_calls="native"))
    assert [r["episode_id"] for r in rows] == [3]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "tools fingerprint '0123456789ab'" in said and "holds 2 tool calls" in said


def test_native_tool_calls_are_for_sft_rows(played: Path, tmp_path: Path, capsys: Any) -> None:
    base = ["traj", "export", str(played), "--out", str(tmp_path / "x"), "--tool-calls", "native"]
    assert main([*base, "--format", "preferences"]) == 2
    assert "--tool-calls native is for SFT rows" in capsys.readouterr().out
    assert main([*base, "--format", "hf", "--kind", "episodes"]) == 2
    with TrajectoryStore(played) as store, pytest.raises(ConfigError, match="tool_calls must"):
        list(sft_rows(store, tool_calls="xml"))  # type: ignore[arg-type]


# -- episodes played in native tool mode ---------------------------------------------------


Calls = list[tuple[str, dict[str, Any]]]


def _oracle_turns(env_id: str, options: dict[str, Any]) -> list[Calls]:
    """The oracle's calls for the episode (seed 0), from a text-mode run, two per turn
    where both only read (a write stays alone: its gate may need an earlier turn)."""
    env = gym.make(env_id)
    env.reset(seed=0, options=options)
    oracle, tools = env.unwrapped.oracle(), env.unwrapped.toolset  # type: ignore[attr-defined]
    turns: list[Calls] = []
    done, pairable = False, False  # pairable: the last turn is one read
    while not done:
        action = oracle.act()
        for call in env.unwrapped.parser.parse(action).calls:  # type: ignore[attr-defined]
            tool = tools.canonical(call.name)  # the parser gives canonical names
            shown = (tool.name, dict(call.arguments))  # as the task shows it (renamed)
            reads = tool.kind is ToolKind.READ
            if reads and pairable:
                turns[-1].append(shown)
                pairable = False
            else:
                turns.append([shown])
                pairable = reads
        done = any(env.step(action)[2:4])
    env.close()
    return turns


def _native_action(calls: Calls, prefix: str) -> str:
    """An OpenAI assistant message calling ``calls`` with ids ``<prefix>_<i>``."""
    tool_calls = [
        {"id": f"{prefix}_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)
    ]
    return json.dumps({"role": "assistant", "content": None, "tool_calls": tool_calls})


@pytest.mark.parametrize("env_id, options", EPISODES, ids=["sokoban", "retail-ood"])
def test_native_mode_episodes_export_their_multi_call_turns(
    env_id: str, options: dict[str, Any], tmp_path: Path
) -> None:
    """Played natively with two calls per turn and recorded, an episode exports each
    turn's calls together, answered one ``tool`` message per call id as the env answered
    them; fed back to the env in native mode, the rows reproduce the episode."""
    native: dict[str, Any] = {"tool_mode": "native", "max_calls_per_step": 2}
    answers = []
    with TrajectoryStore(tmp_path / "native.sqlite") as store:
        env = RecordingWrapper(gym.make(env_id, **native), store, policy="native")
        env.reset(seed=0, options=options)
        for turn, calls in enumerate(_oracle_turns(env_id, options)):
            step = env.step(_native_action(calls, f"t{turn}"))
            answers.append(step[4]["messages"])
            if step[2] or step[3]:
                break
        env.close()
        assert step[4]["outcome"] == "success"
        (stored,) = (ep for _, ep in store.query())
        recorded = [m["native_messages"] for m in stored.messages if "native_messages" in m]
        assert recorded == answers  # the wrapper keeps each step's info["messages"]
        (row,) = sft_rows(store, tool_calls="native")
        hf = export_hf(store, tmp_path / "hf", "sft", tool_calls="native")
    assert hf[0]["messages"] == row["messages"] and hf[0]["tools"] == row["tools"]
    messages = row["messages"]
    turns = [m for m in messages if m["role"] == "assistant"]
    assert len(turns) == len(answers)
    assert any(len(turn["tool_calls"]) == 2 for turn in turns)  # a turn of several calls
    replay = gym.make(env_id, **native)
    _, info = replay.reset(seed=0, options=options)
    assert messages[0] == {"role": "system", "content": info["system"]}
    assert messages[1:2] == info["messages"] and row["tools"] == info["tools"]
    at = 2
    for turn in turns:
        assert messages[at] == turn
        info = replay.step(json.dumps(turn))[4]
        answer = messages[at + 1 : at + 1 + len(info["messages"])]
        names = {c["id"]: c["function"]["name"] for c in turn["tool_calls"]}
        assert [{k: v for k, v in m.items() if k != "name"} for m in answer] == info["messages"]
        assert [m["name"] for m in answer if m["role"] == "tool"] == [
            names[m["tool_call_id"]] for m in answer if m["role"] == "tool"
        ]
        assert [m["tool_call_id"] for m in answer if m["role"] == "tool"] == list(names)
        at += 1 + len(answer)
    assert at == len(messages) and info["outcome"] == "success"
    replay.close()


def test_the_eval_extra_installs_a_datasets_the_native_export_can_use() -> None:
    """``pip install agentgym-envs[eval]`` must never resolve a ``datasets`` without the
    ``Json`` type that ``export_hf(..., tool_calls="native")`` needs."""
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    (pin,) = (r for r in map(Requirement, extras["eval"]) if r.name == "datasets")
    floors = [Version(s.version) for s in pin.specifier if s.operator in (">=", "==", "~=")]
    assert floors and max(floors) >= Version(NATIVE_DATASETS_MIN), pin
    assert Version(datasets.__version__) >= Version(NATIVE_DATASETS_MIN)
    assert hasattr(datasets, "Json")  # the feature the minimum stands for
