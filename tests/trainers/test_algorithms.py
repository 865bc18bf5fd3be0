"""The algorithm registry: every ``algo`` choice is an algorithm module, the trainer calls
the algorithm and never branches on its name, and adding one is a registry entry."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

import agentgym_trainers.trainer
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.rollout.episodes import Trajectory
from agentgym_trainers.algorithms import registry
from agentgym_trainers.algorithms.base import Algorithm, Learner
from agentgym_trainers.algorithms.group import GRPO
from agentgym_trainers.algorithms.reinforce import Reinforce
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.config import ALGO_TRAITS, ALGOS, TrainConfig
from agentgym_trainers.trainer import Trainer
from tests.trainers.test_trainer import make_config, rollout


def test_every_algo_choice_maps_to_an_algorithm_module() -> None:
    assert set(registry.ALGORITHMS) == set(ALGOS)
    for name in ALGOS:
        cls = registry.algorithm_class(name)
        assert issubclass(cls, Algorithm) and not inspect.isabstract(cls)
        assert cls.__module__.startswith("agentgym_trainers.algorithms.")
        assert cls.__module__ != "agentgym_trainers.algorithms.base"


@pytest.mark.parametrize("name", ALGOS)
def test_config_checks_agree_with_the_algorithm(name: str) -> None:
    cls = registry.ALGORITHMS[name]
    base = {"algo": name, "sft_steps": 1}
    try:
        TrainConfig.from_flat(**base, group_size=1)
        accepts_one = True
    except ConfigError:
        accepts_one = False
    assert accepts_one is not cls.traits.needs_group
    try:
        TrainConfig.from_flat(**base, steps=0)
        runs_without_rl = True
    except ConfigError:
        runs_without_rl = False
    assert runs_without_rl is not cls.traits.rl
    assert cls.traits is ALGO_TRAITS[name]  # declared once, in the torch-free config


def test_unknown_algorithm_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'rloo'"):
        registry.algorithm_class("rlooo")


def test_the_trainer_never_branches_on_the_algorithm_name() -> None:
    tree = ast.parse(Path(inspect.getfile(agentgym_trainers.trainer)).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert "algo" not in names, ast.unparse(node)
            consts = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}
            assert not consts & set(ALGOS), ast.unparse(node)


class Halved(GRPO):
    """A new algorithm: GRPO with every advantage halved."""

    calls = 0

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        Halved.calls += 1
        seqs, stats = super().advantages(trajs)
        for s in seqs:
            s.advantages = [a / 2 for a in s.advantages]
        return seqs, {**stats, "halved": 1.0}


def test_adding_an_algorithm_is_a_registry_entry(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.ALGORITHMS, "grpo", Halved)
    trainer = Trainer(make_config(tmp_path))
    try:
        assert isinstance(trainer.algorithm, Halved) and trainer.value_head is None
        trajs = rollout(trainer, n=8, group_size=4)
        seqs, stats = trainer.advantages(trajs)
        assert Halved.calls == 1 and stats["halved"] == 1.0
        full, _ = GRPO(trainer.cfg, trainer).advantages(trajs)
        assert [s.advantages for s in seqs] == [[a / 2 for a in s.advantages] for s in full]
    finally:
        trainer.close()


def test_algorithm_state_loads_from_checkpoints_written_before() -> None:
    cfg = TrainConfig.from_flat(algo="reinforce")
    learner = cast(Learner, object())
    old = {"decay": 0.9, "value": 0.25}  # what checkpoints held under "baseline"
    algo = Reinforce(cfg, learner)
    algo.load_state_dict(old)
    assert algo.state_dict() == old and algo.baseline.value == 0.25
    grpo = GRPO(TrainConfig(), learner)
    grpo.load_state_dict({"decay": 0.9, "value": None})  # GRPO keeps no state
    assert grpo.state_dict() == {}


def test_a_new_algorithm_is_its_module_and_one_table_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pairwise_algo.py").write_text(
        "from agentgym_trainers.algorithms.group import GRPO\n"
        "class Pairwise(GRPO):\n"
        "    name = 'pairwise'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    traits = dataclasses.replace(ALGO_TRAITS["grpo"], impl="pairwise_algo:Pairwise")
    monkeypatch.setitem(ALGO_TRAITS, "pairwise", traits)
    monkeypatch.delitem(registry.ALGORITHMS, "pairwise", raising=False)
    cls = registry.algorithm_class("pairwise")
    assert cls.__name__ == "Pairwise" and cls.traits is traits
    monkeypatch.delitem(registry.ALGORITHMS, "pairwise")
    assert TrainConfig.from_flat(algo="pairwise", group_size=2).algo == "pairwise"
    for impl, why in [
        ("pairwise_algo", "must be 'module:Class'"),
        ("pairwise_algo:Missing", "cannot import"),
        ("agentgym_trainers.algorithms.group:GRPO", "is not an Algorithm named 'pairwise'"),
    ]:
        with pytest.raises(ConfigError, match=why):
            registry.load("pairwise", impl)
