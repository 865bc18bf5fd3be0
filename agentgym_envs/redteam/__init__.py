"""Red team: hostile policies that try to score without solving the task.

Each :class:`Attack` is a scripted policy aimed at one hole class (grader takeover,
answer spraying, forbidden pages, ...). :func:`run_attack` plays it through the real
``env.step`` and reports whether the env *contained* it: no success, no reward it did
not earn, no exception out of ``step``, no hang, and whatever else the attack's own
``breach`` check looks for (a leaked secret, a file left behind). Attacks marked
``evaluator`` (the text attacks of ``redteam.text``; every attack with ``agentgym
redteam --evaluator``) are played again through the evaluator's recording, store and
report (``redteam.evaluator``), where a policy's input must never become ``env_error``.
``agentgym redteam`` runs the whole suite and reports, per env family, attacks tried,
contained and got through; the tests under ``tests/redteam`` fail on any that got
through.
"""

from agentgym_envs.redteam.core import (
    FAMILIES,
    Attack,
    AttackResult,
    AttackTrace,
    attacks_for,
    run_attack,
    scripted,
)

__all__ = [
    "FAMILIES",
    "Attack",
    "AttackResult",
    "AttackTrace",
    "attacks_for",
    "run_attack",
    "scripted",
]
