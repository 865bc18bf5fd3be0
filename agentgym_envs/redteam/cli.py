"""``agentgym redteam``: play the hostile policies and report what got through."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgym_envs.redteam.core import FAMILIES, AttackResult, attacks_for, run_attack


def add_parser(sub: Any) -> None:
    """Add the ``redteam`` subcommand to the ``agentgym`` parser."""
    p = sub.add_parser(
        "redteam",
        help="play hostile policies that try to score without solving the task",
        description="Plays every attack of the chosen families through env.step (and, with "
        "--evaluator or where the attack asks, through the evaluator's recording, store and "
        "report; with --openenv or where the attack asks, over a local OpenEnv server) and "
        "reports, per family, attacks tried, contained and got through. Exits 1 "
        "if any got through.",
    )
    p.add_argument(
        "--family", nargs="+", choices=FAMILIES, default=list(FAMILIES), help="families to attack"
    )
    p.add_argument("-k", "--match", default="", help="only attacks whose name contains this")
    p.add_argument("--list", action="store_true", help="list the attacks without playing them")
    p.add_argument("--json", action="store_true", help="print every result as JSON")
    p.add_argument(
        "--evaluator",
        action="store_true",
        help="also play every attack through the evaluator's path (recorder, trajectory "
        "store, export, report, traj show), where an env_error is a breach; the attacks "
        "on the text a policy sends always are",
    )
    p.add_argument(
        "--openenv",
        action="store_true",
        help="also play every attack over a local OpenEnv server (agentgym openenv serve on "
        "127.0.0.1), where a server error or an env_error is a breach; the attacks on the "
        "text a policy sends always are (needs the openenv extra)",
    )
    p.set_defaults(func=cmd_redteam)


def cmd_redteam(args: argparse.Namespace) -> int:
    console = Console(width=None if sys.stdout.isatty() else 160)
    attacks = [a for f in args.family for a in attacks_for(f) if args.match in a.name]
    if args.list:
        for a in attacks:
            console.print(f"{a.name}  [dim]{a.hole} on {a.env_id}[/]", highlight=False)
        return 0
    results: list[AttackResult] = []
    for attack in attacks:
        result = run_attack(
            attack,
            evaluator=True if args.evaluator else None,
            openenv=True if args.openenv else None,
        )
        results.append(result)
        if not args.json:
            mark = "[green]contained[/]" if result.contained else "[red]GOT THROUGH[/]"
            console.print(f"{mark} {attack.name}: {result.reason}", highlight=False)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    else:
        console.print(summary_table(results))
    return 0 if all(r.contained for r in results) else 1


def summary_table(results: list[AttackResult]) -> Table:
    """Attacks tried, contained and got through, per family."""
    tried = Counter(r.family for r in results)
    held = Counter(r.family for r in results if r.contained)
    table = Table(title="red team")
    for col in ("family", "tried", "contained", "got through"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for family in FAMILIES:
        if tried[family]:
            table.add_row(
                family, str(tried[family]), str(held[family]), str(tried[family] - held[family])
            )
    return table
