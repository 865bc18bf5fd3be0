"""Model loading, the conversion cache, the tiny model and PolicyModel."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm import models as model_mod
from agentgym_envs.llm.models import (
    COMPLETE_MARKER,
    SMOLLM2_INSTALL,
    cache_root,
    default_dtype,
    load_model,
    load_tokenizer,
    smollm2_gguf,
    smollm2_tokenizer_dir,
    tiny_llama,
)
from agentgym_trainers.model import PolicyModel

# --------------------------------------------------------------------------- specs


def test_cache_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"
    monkeypatch.setenv("AGENTGYM_CACHE", "")
    assert cache_root() == tmp_path / "xdg" / "agentgym"
    monkeypatch.delenv("AGENTGYM_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "agentgym"


def test_unknown_spec_lists_forms_and_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        load_model("smolm2")
    message = str(info.value)
    assert "Did you mean 'smollm2'?" in message
    for form in ('"smollm2"', '"tiny"', "config.json", ".gguf"):
        assert form in message


def test_folder_without_config_and_non_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"without a config\.json"):
        load_tokenizer(str(tmp_path))
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"not a \.gguf file"):
        load_model(str(weights))


def test_missing_package_names_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_mod, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as info:
        smollm2_gguf()
    assert SMOLLM2_INSTALL in str(info.value)


def test_missing_gguf_file_names_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(model_mod, "find_spec", lambda name: fake)
    with pytest.raises(ConfigError, match="Reinstall") as info:
        smollm2_gguf()
    assert SMOLLM2_INSTALL in str(info.value)


def test_failed_conversion_leaves_no_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    monkeypatch.setattr(model_mod, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install"):
        load_model("smollm2")
    models = tmp_path / "models"
    assert [p.name for p in models.iterdir()] == [f"{model_mod._converted_name()}.lock"]


def test_default_dtype() -> None:
    assert default_dtype("cpu") is torch.float32
    assert default_dtype("cuda:0") is torch.bfloat16
    assert default_dtype(torch.device("cuda")) is torch.bfloat16


# --------------------------------------------------------------------------- cache


def test_tokenizer_conversion_is_cached(
    tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = smollm2_tokenizer_dir()  # converted by the session fixture
    marker = folder / COMPLETE_MARKER
    before = marker.stat().st_mtime_ns

    def fail(folder: Path) -> None:
        raise AssertionError("the tokenizer was converted a second time")

    monkeypatch.setattr(model_mod, "_convert_tokenizer", fail)
    assert smollm2_tokenizer_dir() == folder
    load_tokenizer("tiny")
    assert marker.stat().st_mtime_ns == before


def _counting_build(counter: Path, folder: Path) -> None:
    with counter.open("a") as handle:
        handle.write("built\n")
    time.sleep(0.3)  # long enough for the other processes to hit the lock
    (folder / "payload.txt").write_text("done")


def _dying_build(folder: Path) -> None:
    (folder / "half.txt").write_text("half")
    os._exit(1)  # like a SIGKILL: no cleanup runs


def test_concurrent_builds_happen_once(tmp_path: Path) -> None:
    target = tmp_path / "models" / "m"
    counter = tmp_path / "counter.txt"
    build = functools.partial(_counting_build, counter)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=model_mod._build_once, args=(target, build)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    assert counter.read_text() == "built\n"
    assert (target / "payload.txt").read_text() == "done"
    assert (target / COMPLETE_MARKER).is_file()
    assert sorted(p.name for p in target.parent.iterdir()) == ["m", "m.lock"]


def test_build_recovers_after_a_dead_process(tmp_path: Path) -> None:
    target = tmp_path / "m"
    proc = multiprocessing.get_context("fork").Process(
        target=model_mod._build_once, args=(target, _dying_build)
    )
    proc.start()
    proc.join(timeout=30)
    assert proc.exitcode == 1
    assert not target.exists()
    assert any(p.name.startswith(".m.tmp-") for p in tmp_path.iterdir())

    counter = tmp_path / "counter.txt"
    assert model_mod._build_once(target, functools.partial(_counting_build, counter)) == target
    assert counter.read_text() == "built\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter.txt", "m", "m.lock"]


def test_build_replaces_folder_without_marker(tmp_path: Path) -> None:
    target = tmp_path / "m"
    target.mkdir()
    (target / "stale.txt").write_text("old")
    model_mod._build_once(target, lambda folder: (folder / "new.txt").write_text("new"))
    assert sorted(p.name for p in target.iterdir()) == [COMPLETE_MARKER, "new.txt"]


def test_build_error_cleans_up(tmp_path: Path) -> None:
    def broken(folder: Path) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        model_mod._build_once(tmp_path / "m", broken)
    assert [p.name for p in tmp_path.iterdir()] == ["m.lock"]


# --------------------------------------------------------------------------- tokenizer/tiny


def test_tokenizer_facts(tokenizer: PreTrainedTokenizerBase) -> None:
    assert len(tokenizer) == 49152
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.pad_token_id == 2
    assert tokenizer.bos_token_id == 1
    assert tokenizer.padding_side == "left"
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=True, add_generation_prompt=True
    )["input_ids"]
    assert ids[0] == tokenizer.bos_token_id


def test_special_tokens_come_from_the_gguf_metadata(
    monkeypatch: pytest.MonkeyPatch, tokenizer: PreTrainedTokenizerBase
) -> None:
    """transformers 5.10 (verl's pin) converts SmolLM2 with eos = pad = <|im_start|>; the
    GGUF metadata's ids win over whatever the conversion guessed."""
    gguf = model_mod.smollm2_gguf()
    assert model_mod.gguf_special_token_ids(gguf) == {"bos": 1, "eos": 2, "unk": 0, "pad": 2}
    real = model_mod.AutoTokenizer.from_pretrained

    def like_transformers_5_10(*args: object, **kwargs: object) -> PreTrainedTokenizerBase:
        assert kwargs.get("gguf_file") == gguf.name
        # the session's converted copy stands in for the slow GGUF read (same vocabulary)
        tok = real(str(smollm2_tokenizer_dir()))
        tok.eos_token = tok.pad_token = "<|im_start|>"
        return tok

    monkeypatch.setattr(model_mod.AutoTokenizer, "from_pretrained", like_transformers_5_10)
    tok = model_mod._gguf_tokenizer(gguf)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )


def test_each_transformers_version_keeps_its_own_conversion(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The main venv and verl's venv share a cache: one's conversion is never the other's."""
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    monkeypatch.setattr(model_mod, "_build_once", lambda target, build: target)
    monkeypatch.setattr(model_mod.transformers, "__version__", "5.10.4")
    old = (model_mod.smollm2_tokenizer_dir(), model_mod.smollm2_model_dir())
    monkeypatch.setattr(model_mod.transformers, "__version__", "5.24.0")
    new = (model_mod.smollm2_tokenizer_dir(), model_mod.smollm2_model_dir())
    assert old[0] != new[0] and old[1] != new[1]
    assert new[0].name == "SmolLM2-135M-Instruct-transformers-5.24.0"


def test_tiny_model_config(
    tiny_model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase
) -> None:
    config = tiny_model.config
    assert config.vocab_size == len(tokenizer)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 2)
    assert config.tie_word_embeddings
    assert tiny_model.lm_head.weight is tiny_model.model.embed_tokens.weight
    assert config._attn_implementation == "sdpa"


def test_tiny_model_deterministic_per_seed(tokenizer: PreTrainedTokenizerBase) -> None:
    torch.manual_seed(123)
    rng_before = torch.random.get_rng_state()
    a = tiny_llama(tokenizer, seed=7)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # global RNG untouched
    b = tiny_llama(tokenizer, seed=7)
    c = tiny_llama(tokenizer, seed=8)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[name], pb[name]) for name in pa)
    assert not torch.equal(
        pa["model.layers.0.self_attn.q_proj.weight"], pc["model.layers.0.self_attn.q_proj.weight"]
    )


def test_tiny_model_rejects_bad_head_counts(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ConfigError, match="divisible"):
        tiny_llama(tokenizer, hidden_size=64, num_heads=5)
    with pytest.raises(ConfigError, match="divisible"):
        tiny_llama(tokenizer, num_heads=4, num_kv_heads=3)


def test_load_model_tiny(tokenizer: PreTrainedTokenizerBase) -> None:
    model, tok = load_model("tiny", seed=3)
    assert model.dtype is torch.float32
    assert tok.pad_token_id == tokenizer.pad_token_id
    reference = tiny_llama(tokenizer, seed=3)
    assert torch.equal(model.model.embed_tokens.weight, reference.model.embed_tokens.weight)
    model16, _ = load_model("tiny", dtype=torch.bfloat16)
    assert model16.dtype is torch.bfloat16


# --------------------------------------------------------------------------- PolicyModel


def _left_padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    input_ids = torch.tensor([[2, 2, 5, 17, 900, 33], [1, 44, 45, 46, 47, 48]])  # (B, T)
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])  # (B, T)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    return input_ids, attention_mask, position_ids


def test_policy_logits_match_lm(tiny_model: LlamaForCausalLM) -> None:
    tiny_model.eval()
    policy = PolicyModel(tiny_model)
    input_ids, attention_mask, position_ids = _left_padded_batch()
    with torch.no_grad():
        logits, values = policy(input_ids, attention_mask, position_ids)
        expected = tiny_model(
            input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).logits
    assert values is None
    assert logits.dtype is torch.float32
    assert logits.shape == (2, 6, tiny_model.config.vocab_size)
    torch.testing.assert_close(logits, expected.float(), atol=1e-5, rtol=1e-5)


def test_value_head_zero_at_init_and_trains(tiny_model: LlamaForCausalLM) -> None:
    policy = PolicyModel(tiny_model, value_head=True)
    input_ids, attention_mask, position_ids = _left_padded_batch()
    _, values = policy(input_ids, attention_mask, position_ids)
    assert values is not None
    assert values.shape == (2, 6)
    assert values.dtype is torch.float32
    assert torch.count_nonzero(values) == 0
    values.sum().backward()
    assert policy.value_head is not None
    assert policy.value_head.linear.weight.grad is not None
    assert policy.value_head.linear.weight.grad.abs().sum() > 0
    assert policy.value_head.linear.bias.grad is not None
    assert policy.value_head.linear.bias.grad.item() == pytest.approx(12.0)


def test_policy_save_load_round_trip(
    tiny_model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, tmp_path: Path
) -> None:
    policy = PolicyModel(tiny_model, value_head=True)
    assert policy.value_head is not None
    with torch.no_grad():
        policy.value_head.linear.weight.normal_()
        policy.value_head.linear.bias.fill_(0.5)
    policy.eval()
    policy.save(tmp_path / "ckpt", tokenizer=tokenizer)

    loaded = PolicyModel.load(tmp_path / "ckpt")
    loaded.eval()
    batch = _left_padded_batch()
    with torch.no_grad():
        logits, values = policy(*batch)
        logits2, values2 = loaded(*batch)
    torch.testing.assert_close(logits2, logits)
    assert values is not None and values2 is not None
    torch.testing.assert_close(values2, values)

    lm, tok = load_model(str(tmp_path / "ckpt"))  # a saved folder is a valid spec
    assert lm.config.vocab_size == tiny_model.config.vocab_size
    assert tok.pad_token == "<|im_end|>"

    PolicyModel(tiny_model).save(tmp_path / "no_head")
    assert PolicyModel.load(tmp_path / "no_head").value_head is None


def test_policy_rejects_logit_post_processing(tiny_model: LlamaForCausalLM) -> None:
    tiny_model.config.final_logit_softcapping = 30.0
    with pytest.raises(ConfigError, match="final_logit_softcapping"):
        PolicyModel(tiny_model)


# --------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_smollm2_answers_a_chat_prompt() -> None:
    model, tokenizer = load_model("smollm2")
    model.eval()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=True,
        add_generation_prompt=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1] :]
    text = tokenizer.decode(new, skip_special_tokens=True)
    assert len(new) > 0
    assert text.strip()
