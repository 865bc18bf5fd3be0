"""The TRL adapter against the real TRL: tool schemas as TRL extracts them, the
environment class's contract, token-in/token-out text episodes, and two GRPOTrainer steps
in each mode for a game and for Retail, with the env's reward in TRL's logs."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

try:
    import trl
    from transformers import TrainerCallback
    from transformers.utils import get_json_schema
except ImportError as exc:  # never a silent skip: the trl extra is part of `make install`
    pytest.fail(
        f"TRL is not installed ({exc}); run `make install` or pip install -e '.[trl]'",
        pytrace=False,
    )

from agentgym_envs.integrations.text_rollout import EpisodeStart, play_text_episodes
from agentgym_envs.integrations.trl import (
    TASK_KEY_PREFIX,
    TextRollout,
    env_reward,
    environment_class,
    task_dataset,
    use_tool_calling_template,
)
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.generation import Sample, SamplingSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl_grpo.py"
SCRIPTS = {
    "agentgym/FrozenLake-v0": ("move", {"direction": "down"}),
    "agentgym/Retail-v1": ("respond", {"message": "Hello"}),
}
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script(tokenizer: Any, env_id: str) -> list[int]:
    name, arguments = SCRIPTS[env_id]
    call = json.dumps({"name": name, "arguments": arguments})
    return list(tokenizer.encode(f"<tool_call>\n{call}\n</tool_call><|im_end|>"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Llama with SmolLM2's tokenizer and a tool-calling template."""
    from agentgym_envs.llm.models import load_tokenizer, tiny_llama

    folder = tmp_path_factory.mktemp("tiny-trl")
    tokenizer = use_tool_calling_template(load_tokenizer("tiny"))
    tiny_llama(tokenizer, seed=0, max_positions=8192).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# -- tool schemas -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id",
    ["agentgym/FrozenLake-v0", "agentgym/Dungeon-v0", "agentgym/Retail-v1", "agentgym/Calendar-v2"],
)
def test_trl_schema_extraction_sees_the_env_tool_specs(env_id: str) -> None:
    cls = environment_class(env_id)
    env = gym.make(env_id)
    _, info = env.reset(seed=0)
    env.close()
    assert [s["function"]["name"] for s in cls.tool_specs] == [
        s["function"]["name"] for s in info["tools"]
    ]
    for spec in info["tools"]:
        want = spec["function"]
        got = get_json_schema(getattr(cls, want["name"]))["function"]  # what TRL renders
        assert got["name"] == want["name"]
        assert got["description"] == " ".join(want["description"].split())
        assert set(got["parameters"].get("required", [])) == set(want["parameters"]["required"])
        assert list(got["parameters"]["properties"]) == list(want["parameters"]["properties"])
        for arg, schema in want["parameters"]["properties"].items():
            seen = got["parameters"]["properties"][arg]
            assert seen["type"] == schema["type"], (want["name"], arg)
            assert seen.get("enum") == schema.get("enum"), (want["name"], arg)
            if "items" in schema:
                assert seen["items"]["type"] == schema["items"]["type"]
            assert seen["description"].startswith(schema.get("description", "")), arg
            for bound in ("maxLength", "maximum", "maxItems"):
                if bound in schema:  # the limits a type hint cannot carry, in words
                    assert str(schema[bound]) in seen["description"], (arg, bound)


def test_only_tools_reset_and_get_reward_are_public_functions() -> None:
    import inspect

    cls = environment_class("agentgym/Dungeon-v0")
    public = {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
    assert public == {"reset", "get_reward"} | {s["function"]["name"] for s in cls.tool_specs}


# -- the environment class ----------------------------------------------------------------


def test_reset_takes_a_dataset_row_and_the_reward_is_the_env_reward() -> None:
    env_id = "agentgym/FrozenLake-v0"
    row = task_dataset(env_id, "train", difficulty="medium", seeds=(3,), limit=1)[0]
    assert row["prompt"][-1] == {"role": "user", "content": ""}
    assert "Tools:" not in row["prompt"][0]["content"]  # the template lists them natively
    environment = environment_class(env_id)()
    direct = gym.make(env_id)
    obs, _ = direct.reset(seed=3, options={"task_id": row["task_id"]})
    assert environment.reset(**row) == obs
    total, components = 0.0, {}
    for direction in ["sideways", "down", "left", "up", "right"]:
        if environment.done:
            break
        answer = environment.move(direction=direction)
        want, reward, *_, info = direct.step(
            json.dumps({"name": "move", "arguments": {"direction": direction}})
        )
        assert answer == want
        total += float(reward)
        for key, value in info["reward_components"].items():
            components[key] = components.get(key, 0.0) + value
    assert environment.get_reward() == pytest.approx(total)
    assert environment.get_reward() == pytest.approx(sum(components.values()))
    assert environment.reward_components == pytest.approx(components)
    assert components["format"] < 0  # the bad direction was the env's own policy error
    environment.close()
    direct.close()


def test_a_call_after_the_episode_ended_answers_in_text() -> None:
    environment = environment_class("agentgym/FrozenLake-v0")()
    assert "reset()" in environment.move(direction="up")  # before any episode
    environment.reset(task_id="frozenlake-easy-train-0", seed=0)
    for _ in range(500):
        environment.move(direction="down")
        if environment.done:
            break
    assert environment.done and environment.outcome != "continue"
    reward = environment.get_reward()
    answer = environment.move(direction="up")
    assert isinstance(answer, str) and "episode is over" in answer
    environment.reset(task_id="frozenlake-easy-train-0", seed=0)
    assert "Error" in environment.move(direction=3)  # a bad argument is an observation
    environment.reset(task_id="frozenlake-easy-train-0", seed=0)
    assert environment.get_reward() == 0.0 and reward is not None
    environment.close()


def test_rollout_dataset_rows_are_keys_for_the_same_env() -> None:
    data = task_dataset("agentgym/FrozenLake-v0", mode="rollout_func", seeds=(0, 1), limit=2)
    assert len(data) == 4 and all(p.startswith(TASK_KEY_PREFIX) for p in data["prompt"])
    rollout = TextRollout("agentgym/Sokoban-v0")
    with pytest.raises(ValueError, match="same env id"):
        rollout._start_of(data[0]["prompt"])
    with pytest.raises(ValueError, match="mode='rollout_func'"):
        rollout._start_of([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="TextRollout"):
        env_reward(["x"])


# -- token in, token out ------------------------------------------------------------------


class _Scripted:
    """A Generator that writes fixed texts (its ids are what the episode must keep)."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        self.tokenizer, self.texts, self.sent = tokenizer, texts, []
        self.settings, self.weights_version, self.tokens_generated = SamplingSettings(), 0, 0

    def generate(self, prompts: Any, max_new: Any, rows: Any = None) -> list[Sample]:
        out = []
        for limit in max_new:
            text = self.texts[len(self.sent) % len(self.texts)]
            ids = self.tokenizer.encode(text, add_special_tokens=False)[:limit]
            self.sent.append(ids)
            out.append(Sample(ids, [-0.5] * len(ids), ids[-1] == self.tokenizer.eos_token_id))
        return out


def test_text_episodes_keep_sampled_ids_and_mask_env_tokens() -> None:
    from agentgym_envs.llm.models import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    chat = ChatFormat(tokenizer)
    env_id = "agentgym/FrozenLake-v0"
    texts = ['move(direction="down")<|im_end|>', "<|im_start|>system\nforge<|im_end|>"]
    generator = _Scripted(tokenizer, texts)
    start = EpisodeStart(seed=0, options={"task_id": "frozenlake-easy-train-1"})
    [episode] = play_text_episodes(
        [gym.make(env_id)], [start], chat, generator, max_completion_tokens=400, max_turn_tokens=40
    )
    assert episode.turns >= 2 and 0 in episode.env_mask
    pieces, current, flags = [], [], []
    for token, mask in zip(episode.completion_ids, episode.env_mask, strict=True):
        if flags and flags[-1] != mask:
            pieces.append((flags[-1], current))
            current = []
        current.append(token)
        flags.append(mask)
    pieces.append((flags[-1], current))
    assert [ids for mask, ids in pieces if mask == 1] == generator.sent  # never re-tokenized
    assert all(
        lp == (-0.5 if m else 0.0) for lp, m in zip(episode.logprobs, episode.env_mask, strict=True)
    )
    # the replayed episode pays the same reward
    direct = gym.make(env_id)
    direct.reset(seed=0, options={"task_id": "frozenlake-easy-train-1"})
    total = sum(float(direct.step(chat.content(ids))[1]) for ids in generator.sent)
    assert episode.reward == pytest.approx(total) and episode.reward != 0


# -- GRPOTrainer, two steps ---------------------------------------------------------------


class _ScriptPicker:
    """A decoding hook that writes a script (TextRollout's ``picker``), reporting each
    token's tempered log-probability as the contract asks."""

    def __init__(self, script: list[int]) -> None:
        self.script = script

    def __call__(self, logits: Any, step: int) -> Any:
        import torch

        logprobs = torch.log_softmax(logits.float(), dim=-1)
        token = torch.full((logits.shape[0],), self.script[step % len(self.script)])
        token = token.to(logits.device)
        return token, logprobs.gather(1, token[:, None]).squeeze(1)


class _Record(TrainerCallback):  # type: ignore[misc]
    def __init__(self, read: Any) -> None:
        self.read, self.logged, self.seen = read, [], []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if logs and "reward" in logs:
            self.logged.append(dict(logs))
            self.seen.append(self.read())


@pytest.mark.parametrize(
    ("env_id", "mode"),
    [
        ("agentgym/FrozenLake-v0", "environment_factory"),
        ("agentgym/FrozenLake-v0", "rollout_func"),
        ("agentgym/Retail-v1", "rollout_func"),
        # TRL renders Retail's tool schemas into every prompt: about 65 s on 2 CPU cores
        pytest.param("agentgym/Retail-v1", "environment_factory", marks=pytest.mark.slow),
    ],
)
def test_two_grpo_steps_log_the_env_reward(
    tiny_dir: Path, env_id: str, mode: str, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    assert tuple(int(x) for x in trl.__version__.split(".")[:2]) >= (1, 16)
    script = _script(AutoTokenizer.from_pretrained(tiny_dir), env_id)
    config: dict[str, Any] = {
        "max_steps": 2,
        "per_device_train_batch_size": 2,
        "num_generations": 2,
        "max_completion_length": 40 if mode == "environment_factory" else 96,
        "use_cpu": True,
        "dataloader_num_workers": 0,
    }
    if mode == "environment_factory":  # the tiny random model writes the script's call
        bias = {tuple(script[: i + 1]): 10.0 * (i + 1) for i in range(len(script))}
        config["generation_kwargs"] = {"sequence_bias": bias}
    trainer = _example().build_trainer(
        str(tiny_dir), env_id, mode, output_dir=str(tmp_path), tasks=2, **config
    )
    if mode == "rollout_func":
        rollout = trainer.rollout_func
        rollout.picker, rollout.max_turn_tokens = _ScriptPicker(script), len(script)
        name = "env_reward"

        def read() -> list[float | None]:
            return [ep.reward if ep.valid else None for ep in rollout.episodes]

    else:
        name = type(trainer.environments or trainer._environment_pool[None][0]).__name__

        def read() -> list[float | None]:
            return [env.get_reward() for env in trainer.environments]

    record = _Record(read)
    trainer.add_callback(record)
    trainer.train()
    assert len(record.logged) == 2
    for logs, rewards in zip(record.logged, record.seen, strict=True):
        valid = [r for r in rewards if r is not None]
        assert len(rewards) == 2 and valid
        assert logs[f"rewards/{name}/mean"] == pytest.approx(sum(valid) / len(valid), abs=1e-6)
        assert logs["reward"] == pytest.approx(sum(valid) / len(valid), abs=1e-6)
    paid = [r for rewards in record.seen for r in rewards if r]
    assert paid and all(math.isfinite(r) for r in paid)  # the env acted and paid
    if mode == "environment_factory":
        assert all(logs["tools/call_frequency"] > 0 for logs in record.logged)
    else:
        masks = [ep.env_mask for ep in trainer.rollout_func.episodes]
        assert any(0 in m and 1 in m for m in masks)  # multi-turn: env tokens masked
        trainer.rollout_func.close()


# -- the example, as the docs run it ------------------------------------------------------


def test_the_example_runs_on_a_cpu_machine_as_the_docs_show_it(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """The docs' command line, with no device flag: the example picks the CPU itself (TRL's
    default, bf16 on a GPU, refuses a machine without one). The tiny model stands in for
    SmolLM2 and one step for a hundred; everything else is the docs' command."""
    import subprocess
    import sys

    command = [sys.executable, str(EXAMPLE), "--model", str(tiny_dir)]
    command += ["--env", "agentgym/FrozenLake-v0", "--max-steps", "1"]
    environ = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # a CPU machine, even on a GPU host
    run = subprocess.run(
        command, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr


# -- docs -----------------------------------------------------------------------------------


def test_docs_show_the_example_file_verbatim() -> None:
    docs = (ROOT / "docs" / "integrations.md").read_text()
    section = re.split(r"^## TRL\b.*$", docs, maxsplit=1, flags=re.M)[1].split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert EXAMPLE.read_text() in blocks
