"""The verl agent loop against the real verl: verl's ``AgentLoopWorker`` runs the loop
from verl's registry on a ``DataProto`` batch, with a local generation server that
answers verl's token-in/token-out call with the in-process tiny model. For a game and
for Retail: the padded batch has verl's shapes, the response mask is 1 exactly on the
sampled ids, the log-probs are the sampler's (and the model's own), the reward is the
env's.

verl lives in its own venv (it pins transformers below the main venv's): run it with
``make test-verl`` (part of ``make test``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

try:
    import torch
    from hydra import compose, initialize_config_dir
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
    from verl.protocol import DataProto
    from verl.workers.rollout.replica import TokenOutput
except ImportError as exc:  # never a silent skip: `make test` runs this file in .venv-verl
    pytest.fail(
        f"verl cannot be imported here ({exc}); it has a venv of its own: run `make test-verl`",
        pytrace=False,
    )

import verl

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.verl import AGENT_NAME, AgentGymAgentLoop, task_rows
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.models import load_model
from agentgym_envs.llm.sampler import Sampler

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
PROMPT_LENGTH, RESPONSE_LENGTH, TURN_TOKENS, TURNS = 2048, 160, 24, 3


class LocalTokenServer:
    """verl's token-in/token-out generation call over the in-process tiny model; it
    records every call (request id, prompt ids, sampled ids, log-probs)."""

    def __init__(self, model: Any, chat: ChatFormat) -> None:
        self.model, self.chat = model, chat
        self.calls: list[tuple[str, list[int], list[int], list[float]]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        assert image_data is None and video_data is None and audio_data is None
        sampler = Sampler(
            self.model,
            eos_ids=[self.chat.eos_id],
            pad_id=self.chat.pad_id,
            temperature=float(sampling_params["temperature"]),
            top_p=float(sampling_params["top_p"]),
            seed=len(self.calls),
        )
        (sample,) = sampler.generate([list(prompt_ids)], [int(sampling_params["max_tokens"])])
        self.calls.append((request_id, list(prompt_ids), sample.ids, sample.logprobs))
        logprobs = sample.logprobs if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=sample.ids, log_probs=logprobs, stop_reason="completed")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    model, tokenizer = load_model("tiny")
    model.eval()
    folder = tmp_path_factory.mktemp("tiny")  # verl reads the model's config and tokenizer
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer, folder


def test_smollm2_tokenizer_under_verls_transformers(tiny: tuple[Any, Any, Path]) -> None:
    """verl pins transformers 5.10, whose GGUF conversion takes <|im_start|> for eos: the
    loaded tokenizer must still stop on <|im_end|>, as in the main venv."""
    tokenizer = tiny[1]
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert tokenizer.eos_token == "<|im_end|>"
    assert ChatFormat(tokenizer).eos_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def _config(folder: Path, loop_config: Path) -> Any:
    with initialize_config_dir(
        config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None
    ):
        config = compose(config_name="ppo_trainer")
    rollout = config.actor_rollout_ref.rollout
    config.actor_rollout_ref.model.path = str(folder)
    config.actor_rollout_ref.model.override_config = {"attn_implementation": "sdpa"}
    rollout.prompt_length, rollout.response_length = PROMPT_LENGTH, RESPONSE_LENGTH
    rollout.calculate_log_probs, rollout.temperature, rollout.top_p = True, 1.0, 1.0
    rollout.name = "vllm"  # only names the backend: the test server stands in for it
    rollout.agent.agent_loop_config_path = str(loop_config)
    return config


def _loop_config(tmp_path: Path) -> Path:
    # the YAML of docs/integrations.md, with a small turn budget
    path = tmp_path / "agent_loops.yaml"
    path.write_text(
        f"- name: {AGENT_NAME}\n"
        "  _target_: agentgym_envs.integrations.verl.AgentGymAgentLoop\n"
        f"  max_turn_tokens: {TURN_TOKENS}\n"
        f"  max_turns: {TURNS}\n"
    )
    return path


def _batch(rows: list[dict[str, Any]]) -> DataProto:
    columns = {k: np.array([row[k] for row in rows], dtype=object) for k in rows[0]}
    columns["raw_prompt"] = columns.pop("prompt")
    columns["index"] = np.array([row["extra_info"]["index"] for row in rows], dtype=object)
    return DataProto.from_dict(non_tensors=columns, meta_info={"global_steps": 0})


def _replay(env_id: str, extra: dict[str, Any], actions: list[str]) -> tuple[float, str]:
    env = gym.make(env_id)
    try:
        env.reset(seed=extra["seed"], options={"task_id": extra["task_id"]})
        total, outcome = 0.0, "continue"
        for action in actions:
            _, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            outcome = str(getattr(info["outcome"], "value", info["outcome"]))
            if terminated or truncated:
                break
        return total, outcome
    finally:
        env.close()


def _played(
    calls: list[tuple[list[int], list[int], list[float]]], prompt: list[int], response: list[int]
) -> bool:
    """Whether ``calls`` are the turns of the episode with this prompt and response."""
    return all(
        call_prompt[: len(prompt)] == prompt
        and response[len(call_prompt) - len(prompt) :][: len(ids)] == ids
        for call_prompt, ids, _ in calls
    )


@pytest.mark.parametrize("env_id", ["agentgym/FrozenLake-v0", "agentgym/Retail-v1"])
def test_agent_loop_worker_plays_env(
    env_id: str, tiny: tuple[Any, Any, Path], tmp_path: Path
) -> None:
    model, tokenizer, folder = tiny
    assert _agent_loop_registry[AGENT_NAME]["_target_"].endswith("verl.AgentGymAgentLoop")
    chat = ChatFormat(tokenizer)
    server = LocalTokenServer(model, chat)
    worker = AgentLoopWorker(_config(folder, _loop_config(tmp_path)), llm_client=server)
    rows = task_rows(env_id, "train", seeds=(0, 1), limit=1)
    out = asyncio.run(worker.generate_sequences(_batch(rows)))

    # 1. verl's padded shapes
    batch, b = out.batch, len(rows)
    assert batch["prompts"].shape == (b, PROMPT_LENGTH)
    for key in ("responses", "response_mask", "rollout_log_probs", "rm_scores"):
        assert batch[key].shape == (b, RESPONSE_LENGTH), key
    assert batch["input_ids"].shape == (b, PROMPT_LENGTH + RESPONSE_LENGTH)
    by_request: dict[str, list[tuple[list[int], list[int], list[float]]]] = {}
    for request_id, prompt, ids, logprobs in server.calls:
        by_request.setdefault(request_id, []).append((prompt, ids, logprobs))
    assert len(by_request) == b  # one request id (sticky session) per episode

    for i, row in enumerate(rows):
        prompt_mask = batch["attention_mask"][i, :PROMPT_LENGTH].bool()
        prompt = batch["prompts"][i][prompt_mask].tolist()
        n = int(batch["attention_mask"][i, PROMPT_LENGTH:].sum())
        response = batch["responses"][i, :n].tolist()
        mask = batch["response_mask"][i].tolist()
        logprobs = batch["rollout_log_probs"][i].tolist()
        # the episode's calls: same first prompt (FrozenLake's seeds may share one) and ids
        (request,) = [r for r, c in by_request.items() if _played(c, prompt, response)][:1]
        calls = by_request.pop(request)
        # 2. the server saw exactly prompt + response so far; mask is 1 exactly on its ids
        expected_mask = [0] * RESPONSE_LENGTH
        expected_logprobs = [0.0] * RESPONSE_LENGTH
        for call_prompt, ids, call_logprobs in calls:
            offset = len(call_prompt) - len(prompt)
            assert call_prompt == prompt + response[:offset]
            assert response[offset : offset + len(ids)] == ids
            expected_mask[offset : offset + len(ids)] = [1] * len(ids)
            expected_logprobs[offset : offset + len(ids)] = call_logprobs
        assert mask == expected_mask and sum(mask) > 0
        assert logprobs == pytest.approx(expected_logprobs, abs=1e-6)
        # 3. the log-probs are the model's own (temperature 1), at the sampled positions
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
        own = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(response)[:, None])
        picked = torch.tensor(mask[:n]).bool()
        torch.testing.assert_close(
            own[:, 0][picked], torch.tensor(logprobs[:n])[picked], atol=2e-4, rtol=0
        )
        # 4. the reward is the env's: replay the sampled actions on a fresh env
        actions = [chat.content(ids) for _, ids, _ in calls]
        reward, outcome = _replay(env_id, row["extra_info"], actions)
        assert float(batch["rm_scores"][i].sum()) == pytest.approx(reward)
        assert float(batch["rm_scores"][i, n - 1]) == pytest.approx(reward)
        # an episode the response budget cut is a timeout (the env itself would go on)
        cut = outcome == "continue"
        assert out.non_tensor_batch["env_outcome"][i] == ("timeout" if cut else outcome)
        assert out.non_tensor_batch["episode_valid"][i] is True
        turns = out.non_tensor_batch["agent_turns"][i]
        assert turns == len(calls) and 1 <= turns <= TURNS
        assert out.non_tensor_batch["__num_turns__"][i] == 2 * turns


def test_row_without_env_id_is_a_config_error(tiny: tuple[Any, Any, Path], tmp_path: Path) -> None:
    _, tokenizer, folder = tiny
    server = LocalTokenServer(tiny[0], ChatFormat(tokenizer))
    worker = AgentLoopWorker(_config(folder, _loop_config(tmp_path)), llm_client=server)
    row = {"prompt": [{"role": "user", "content": "hi"}], "agent_name": AGENT_NAME}
    row["extra_info"] = {"index": 0}
    with pytest.raises(ConfigError, match=r"extra_info\['env_id'\]"):
        asyncio.run(worker.generate_sequences(_batch([row])))
    assert issubclass(AgentGymAgentLoop, object)
