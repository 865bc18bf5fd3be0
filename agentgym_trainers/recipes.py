"""The CPU learning recipes (run by ``python -m agentgym_trainers.learn``).

A recipe is a TOML file: the committed ones are ``agentgym_trainers/configs/*.toml``
(:data:`RECIPES`, by name), and a copy a user edits is run by its path. Each file says
why its settings work (``why``); docs/results/README.md has the numbers. The keys:

* ``name`` (required): the results folder's name;
* ``algos``, ``primary``: the algorithms run, and the one the summary leads with;
* ``bar``: the least mean RL gain over seeds (after RL minus after SFT held-out success)
  that passes (:func:`agentgym_trainers.learn_stats.verdict`);
* ``why``: the reason the settings work, quoted in the results' README;
* ``[model]``: the :class:`ModelShape` of the random small model;
* ``[train]`` (required): :class:`~agentgym_trainers.config.TrainConfig` fields by their
  flat names (``agentgym train --help``), shared by every algorithm;
* ``[per_algo.<algo>]``: the few fields that differ for one algorithm.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.config import ALGOS, TrainConfig

CONFIGS = Path(__file__).with_name("configs")
"""The committed recipe files, one per recipe (``<name>.toml``)."""


@dataclass(frozen=True)
class ModelShape:
    """A small Llama built from scratch (seeded init).

    ``vocab_size`` 0 keeps the SmolLM2 tokenizer; otherwise the model gets a byte-level
    BPE vocabulary of that size fitted to the recipe env's oracle chats
    (:func:`agentgym_trainers.vocab.fit_tokenizer`).
    """

    vocab_size: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    seed: int = 0


@dataclass(frozen=True)
class Recipe:
    """One learning proof: an env, a model shape, an SFT warm start and RL settings.

    ``train`` holds the :class:`~agentgym_trainers.config.TrainConfig` fields shared by every
    algorithm (SFT, RL, evaluation); ``per_algo`` the few that differ.
    """

    name: str
    model: ModelShape
    train: dict[str, Any]
    per_algo: dict[str, dict[str, Any]] = field(default_factory=dict)
    algos: tuple[str, ...] = ("grpo", "rloo", "ppo")
    primary: str = "grpo"
    why: str = ""
    bar: float = 0.25
    """The least mean RL gain over seeds that passes (every seed must gain too)."""

    def config(self, algo: str, model: str, run_dir: Path, **overrides: Any) -> TrainConfig:
        fields = {**self.train, **self.per_algo.get(algo, {}), **overrides}
        return TrainConfig.from_flat(algo=algo, model=model, run_dir=str(run_dir), **fields)


def read_file(path: str | Path) -> dict[str, Any]:
    """A TOML file (a JSON one when its name ends in ``.json``) as a dict.

    Raises:
        ConfigError: the file cannot be read or parsed.
    """
    path = Path(path)
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:  # TOMLDecodeError and JSONDecodeError included
        raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"the config file {path} must hold a table (a JSON object)")
    return data


def train_settings(path: str | Path, algo: str | None = None) -> dict[str, Any]:
    """The :class:`~agentgym_trainers.config.TrainConfig` settings of a config file, by
    flat name (``agentgym train --config``): a recipe's ``[train]`` table with its
    ``[per_algo.<algo>]`` entries for ``algo`` (default: the file's own ``algo``, else
    grpo), the ``config`` of a run's ``summary.json``, or else the file's top-level keys.
    Unknown names fail when the config is built (the closest is suggested)."""
    data = read_file(path)
    if isinstance(data.get("train"), dict):
        train: dict[str, Any] = data["train"]
        chosen = algo or train.get("algo", "grpo")
        return {**train, **data.get("per_algo", {}).get(chosen, {})}
    if isinstance(data.get("config"), dict):
        config: dict[str, Any] = data["config"]
        return config
    return data


def load_recipe(path: str | Path) -> Recipe:
    """The recipe in a TOML file, checked: every algorithm's config is built once.

    Raises:
        ConfigError: the file is missing or not TOML, a key is unknown (the closest is
            suggested), ``name`` or ``[train]`` is missing, or a setting is invalid (the
            message names the file).
    """
    data = read_file(path)
    _known(data, [f.name for f in dataclasses.fields(Recipe)], f"recipe {path}")
    _known(
        data.get("model", {}), [f.name for f in dataclasses.fields(ModelShape)], f"{path} [model]"
    )
    if "name" not in data or "train" not in data:
        raise ConfigError(f"recipe {path} needs a name and a [train] table (see {CONFIGS})")
    reserved = sorted({"algo", "model", "run_dir"} & set(data["train"]))
    if reserved:
        raise ConfigError(
            f"recipe {path}: [train] sets {reserved}, which learn sets for each run (the "
            "algorithm from algos, the model from [model], the run folder from --work)"
        )
    recipe = Recipe(
        **{
            **data,
            "model": ModelShape(**data.get("model", {})),
            "algos": tuple(data.get("algos", Recipe.algos)),
        }
    )
    bad = [a for a in recipe.algos if a not in ALGOS] + [
        a for a in recipe.per_algo if a not in recipe.algos
    ]
    if bad or recipe.primary not in recipe.algos:
        raise ConfigError(
            f"recipe {path}: algos must be some of {ALGOS}, per_algo and primary among them; "
            f"got algos {list(recipe.algos)}, per_algo {list(recipe.per_algo)}, primary "
            f"{recipe.primary!r}"
        )
    for algo in recipe.algos:
        try:
            recipe.config(algo, "tiny", Path("runs/check"))
        except ConfigError as exc:
            raise ConfigError(f"recipe {path} ({algo}): {exc}") from exc
    return recipe


def _known(table: dict[str, Any], names: list[str], where: str) -> None:
    for key in table:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where} has no key {key!r}{hint}; its keys are {names}")


def find_recipe(name_or_path: str) -> Recipe:
    """A committed recipe by name, or a recipe file by its path, with its env checked
    (:meth:`~agentgym_trainers.config.DataConfig.env_spec`: a wrong env id or env setting
    fails here, not after the model is built).

    Raises:
        ConfigError: neither a committed name nor an existing ``.toml`` file, or the
            recipe's env or settings are invalid.
    """
    if name_or_path in RECIPES:
        recipe = RECIPES[name_or_path]
    elif name_or_path.endswith(".toml") and Path(name_or_path).is_file():
        recipe = load_recipe(name_or_path)
    else:
        raise ConfigError(
            f"unknown recipe {name_or_path!r}: use one of {sorted(RECIPES)} or the path of a "
            f"recipe file (copy one of {CONFIGS}/*.toml)"
        )
    try:
        recipe.config(recipe.primary, "tiny", Path("runs/check")).data.env_spec()
    except ConfigError as exc:
        raise ConfigError(f"recipe {name_or_path}: {exc}") from exc
    return recipe


RECIPES: dict[str, Recipe] = {
    r.name: r for r in (load_recipe(p) for p in sorted(CONFIGS.glob("*.toml")))
}
"""The committed recipes by name."""
