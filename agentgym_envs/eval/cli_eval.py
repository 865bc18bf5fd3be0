"""``agentgym eval``: evaluate policies on a suite, print the table, write the reports."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgym_envs.console import progress_bar
from agentgym_envs.eval.metrics import shown

LLM_OPTIONS = ("temperature", "top_p", "max_new_tokens", "device", "max_context", "tool_mode")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate policies on a suite (success with CI, pass@k/pass^k, cost) and "
        "write JSON/markdown/HTML reports",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--suite", default="smoke", help="a shipped suite name or a .yaml path")
    p.add_argument(
        "--policy",
        nargs="+",
        default=["oracle"],
        help="policies: oracle, random, noop, hf:<model> (hf:smollm2), openai:<base_url>#<model>",
    )
    p.add_argument("--trials", type=int, help="trials per task (default: the suite's)")
    p.add_argument("--entries", nargs="+", help="only these suite entries")
    p.add_argument("--batch", type=int, default=8, help="env slots stepped in lockstep")
    p.add_argument(
        "--isolation",
        "--backend",
        dest="isolation",
        choices=("inline", "process", "ray"),
        default="inline",
        help="process: one worker process per env slot (survives env crashes); ray: slots "
        "on Ray actors across a cluster, stepped in parallel (pip install 'agentgym-envs[dist]')",
    )
    p.add_argument(
        "--envs-per-actor", type=int, default=1, help="ray: env slots hosted by one actor"
    )
    p.add_argument(
        "--ray-address",
        default="",
        help="ray: the cluster to join, host:port (default: $RAY_ADDRESS, else a local Ray)",
    )
    p.add_argument("--out", help="report folder (default: runs/eval/<suite>-<time>)")
    p.add_argument("--no-store", action="store_true", help="do not record trajectories")
    p.add_argument("--replay", metavar="REPORT", help="re-run the episodes of a report.json")
    p.add_argument("--json", action="store_true", help="print the report JSON")
    g = p.add_argument_group(
        "LLM policy options", "for hf: and openai: policies; unset means the policy's own default"
    )
    g.add_argument("--temperature", type=float, help="sampling temperature (0: greedy)")
    g.add_argument("--top-p", type=float, help="nucleus sampling: keep this probability mass")
    g.add_argument("--max-new-tokens", type=int, help="the longest action in tokens")
    g.add_argument(
        "--max-context",
        type=int,
        help="context budget in tokens: older turns are dropped beyond it (openai: "
        "estimates 4 characters per token)",
    )
    g.add_argument("--device", help="where an hf: model runs: auto, cpu, cuda, cuda:1 ...")
    g.add_argument(
        "--tool-mode",
        choices=("native", "text"),
        help="openai: policies: tools passed natively (the API's tools field) or described "
        "in the prompt as text",
    )
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace, console: Console | None = None) -> int:
    from agentgym_envs.eval.evaluate import EvalConfig, evaluate, load_report, replay
    from agentgym_envs.eval.report import write_reports
    from agentgym_envs.eval.suite import load_suite
    from agentgym_envs.eval.workers import SlotIsolation

    console = console or Console(width=None if sys.stdout.isatty() else 160)
    options = {k: getattr(args, k) for k in LLM_OPTIONS if getattr(args, k) is not None}
    if any(p.startswith("hf:") for p in args.policy):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if args.replay:
        old = load_report(args.replay)
        out = Path(args.out or Path(args.replay).parent / "replay")
        report, diffs = replay(old)
    else:
        suite = load_suite(args.suite)
        if args.trials is not None:
            suite = suite.with_trials(args.trials)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        out = Path(args.out or Path("runs") / "eval" / f"{suite.name}-{stamp}")
        out.mkdir(parents=True, exist_ok=True)
        config = EvalConfig(
            batch=args.batch,
            isolation=SlotIsolation.parse(args.isolation),
            store=None if args.no_store else str(out / "trajectories.sqlite"),
            run_id=f"{suite.name}-{stamp}",
            policy_options=options,
            envs_per_actor=args.envs_per_actor,
            ray_address=args.ray_address,
        )
        total = sum(
            len(e.jobs(suite.seed, suite.trials))
            for e in suite.entries
            if not args.entries or e.name in args.entries
        ) * len(args.policy)
        with progress_bar(args.json) as progress:
            bar = progress.add_task(f"{suite.name}: {' '.join(args.policy)}", total=total)
            report = evaluate(
                suite,
                args.policy,
                config,
                entries=args.entries,
                on_episode=lambda _r: progress.advance(bar),
            )
        diffs = None
    paths = write_reports(report, out)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_tables(report, console)
        console.print(f"report: {paths['html'].resolve()}")
        console.print(f"        {paths['json'].resolve()} and {paths['md'].name}")
        if report["config"].get("store"):
            console.print(f"trajectories: {report['config']['store']} (agentgym traj ls ...)")
    if diffs is None:
        return 0
    if diffs:
        console.print(f"[red]replay differs in {len(diffs)} place(s):[/]")
        for line in diffs[:50]:
            console.print(f"  {line}")
        return 1
    console.print(f"replay: all {len(report['episodes'])} episodes came out identical")
    return 0


def _rate(value: float | None) -> str:
    return "-" if value is None else shown(value, ".2f")


def _ks(metrics: dict[str, Any], key: str) -> str:
    values = metrics.get(key) or {}
    return " ".join(f"{k}:{shown(v, '.2f')}" for k, v in values.items()) or "-"


def print_tables(report: dict[str, Any], console: Console) -> None:
    """The per-entry table and the overall table of a report."""
    columns = (
        "entry",
        "policy",
        "success (95% CI)",
        "pass@k",
        "pass^k",
        "steps",
        "tool calls",
        "tokens in/out",
        "cost/success",
        "violations",
        "env errors",
        "recovery / attack",
        "wall s",
    )
    suite = report["suite"]
    table = Table(title=f"suite {suite['name']} ({suite['version']}): per entry")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in report["results"]:
        table.add_row(row["entry"], row["policy"], *_cells(row["metrics"]))
    console.print(table)
    overall = Table(title="overall")
    for col in ("policy", *columns[2:]):
        overall.add_column(col, overflow="fold")
    for policy, metrics in report["overall"].items():
        overall.add_row(policy, *_cells(metrics))
    console.print(overall)


def _cells(m: dict[str, Any]) -> list[str]:
    lo, hi = m["success_ci"]
    cps = m["cost_per_success"]
    return [
        f"{_rate(m['success_rate'])} [{_rate(lo)}, {_rate(hi)}] n={m['valid']}",
        _ks(m, "pass_at_k"),
        _ks(m, "pass_hat_k"),
        shown(m["mean_steps"], ".1f"),
        shown(m["mean_tool_calls"], ".1f"),
        f"{shown(m['mean_tokens_in'], '.0f')}/{shown(m['mean_tokens_out'], '.0f')}",
        _rate(cps),
        _rate(m["violation_rate"]),
        f"{m['env_errors']} ({_rate(m['env_error_rate'])})",
        f"{_rate(m['recovery_rate'])} / {_rate(m.get('attack_success_rate'))}",
        shown(m["wall_s"], ".1f"),
    ]
