"""User-visible errors are AgentGymErrors that also keep their builtin type, so callers
that catch ``ValueError`` or ``RuntimeError`` keep working."""

from __future__ import annotations

import pytest

from agentgym_envs.business.calendar.clock import parse_date, parse_iso
from agentgym_envs.business.episode import GradeState, Verdict
from agentgym_envs.core import AgentGymError, ArgumentError, CallContextError, ClosedError
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.scratch import owned_dir
from agentgym_envs.eval.metrics import pass_at_k, pass_hat_k
from agentgym_envs.eval.runner import run_summary
from agentgym_envs.games.sokoban_search import parse_room
from agentgym_envs.redteam.core import attacks_for
from agentgym_envs.repofix.mutate import MutationError, apply_many, find_sites, sample_sites


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (ArgumentError, ValueError),
        (ClosedError, RuntimeError),
        (CallContextError, RuntimeError),
        (MutationError, ValueError),
    ],
)
def test_new_errors_keep_their_builtin(error: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(error, AgentGymError) and issubclass(error, builtin)


def test_argument_errors_say_expected_and_got() -> None:
    with pytest.raises(ArgumentError, match=r"k must be in 1\.\.3 .* got 4"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match=r"successes must be in 0\.\.3"):
        pass_hat_k(3, 5, 1)
    with pytest.raises(ArgumentError, match="at least one episode"):
        run_summary("agentgym/Sokoban-v0", "random", [])
    with pytest.raises(ArgumentError, match="lowercase letters"):
        owned_dir("Not-OK")
    with pytest.raises(ArgumentError, match="exactly when it is a failure"):
        Verdict(GradeState.SUCCESS, "but why")
    with pytest.raises(ValueError, match="expected a date like 2025-06-12, got 'soon'"):
        parse_date("soon")
    with pytest.raises(ArgumentError, match="expected a UTC time"):
        parse_iso("noon")


def test_config_errors_suggest_a_fix() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'games'"):
        attacks_for("gmaes")
    with pytest.raises(ConfigError, match="every row of a room must have 4 cells"):
        parse_room(("####", "#@B#T", "####"))
    with pytest.raises(ConfigError, match="got a player, 2 boxes and 1 targets"):
        parse_room(("######", "#@BBT#", "######"))


def test_mutation_errors_are_value_errors() -> None:
    source = "def f(a, b):\n    return a + b\n"
    site = find_sites(source, "m.py")[0]
    with pytest.raises(MutationError, match="syntax error"):
        find_sites("def f(:\n", "bad.py")
    with pytest.raises(ValueError, match="not among the files"):
        apply_many({"other.py": source}, [site])
    with pytest.raises(ArgumentError, match="k must be >= 0"):
        sample_sites({"m.py": source}, -1, seed=0)
