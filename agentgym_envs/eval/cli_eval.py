"""``agentgym eval``: evaluate policies on a suite, print the table, write the reports."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentgym_envs.console import ProgressLog, progress_bar
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.journal import JOURNAL_FILE
from agentgym_envs.eval.metrics import shown
from agentgym_envs.eval.report import partial_note, write_reports

if TYPE_CHECKING:
    from agentgym_envs.eval.evaluate import EpisodeResult, EvalConfig

LLM_OPTIONS = (
    "temperature",
    "top_p",
    "max_new_tokens",
    "device",
    "max_context",
    "trim_to",
    "tool_mode",
)
RECORDED = (
    "suite",
    "policy",
    "trials",
    "entries",
    "batch",
    "max_slots",
    "isolation",
    "envs_per_actor",
    "ray_address",
    "no_store",
    *LLM_OPTIONS,
)
"""The arguments a run records in ``run.json`` and ``--resume`` uses again."""
RUN_FILE = "run.json"
PROGRESS_FILE = "progress.log"
_DEFAULTS: dict[str, Any] = {}  # the parser's defaults of RECORDED


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in the help, except where there is none to tell (None, False,
    an empty value) or the help already says it (``default: the suite's``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, "", [], ()):
            return text
        return super()._get_help_string(action)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate policies on a suite (success with CI, pass@k/pass^k, cost) and "
        "write JSON/markdown/HTML reports",
        formatter_class=_DefaultsFormatter,
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
    p.add_argument("--batch", type=int, default=8, help="env slots per entry")
    p.add_argument(
        "--max-slots",
        type=int,
        default=16,
        help="env slots open at once per policy: entries play side by side while their "
        "slots fit, all stepped in lockstep, so an LLM policy generates for every entry in "
        "one batch (--max-slots equal to --batch: one entry at a time)",
    )
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
    p.add_argument(
        "--out",
        help="report folder (default: runs/eval/<suite>-<time>); it also holds progress.log "
        "(a line per finished episode), episodes.jsonl and run.json (for --resume)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the stopped run in --out: its recorded arguments are used (any given "
        "must match) and its finished episodes are not played again",
    )
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
    g.add_argument(
        "--trim-to",
        type=float,
        help="beyond --max-context, drop old turns down to this share of it, and keep them "
        "dropped while the prompt fits, so cached prompt heads stay valid (policy default 0.5)",
    )
    g.add_argument("--device", help="where an hf: model runs: auto, cpu, cuda, cuda:1 ...")
    g.add_argument(
        "--tool-mode",
        choices=("native", "text"),
        help="openai: policies: tools passed natively (the API's tools field) or described "
        "in the prompt as text",
    )
    p.set_defaults(func=cmd_eval)
    _DEFAULTS.update({name: p.get_default(name) for name in RECORDED})


def cmd_eval(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    if args.resume and args.replay:
        raise ConfigError(
            "--resume continues a stopped run and --replay re-runs a report: pass one"
        )
    recorded = None
    if not args.replay:
        args.suite = _suite_argument(args.suite)
        recorded = resume_arguments(args) if args.resume else None
    if any(p.startswith("hf:") for p in args.policy):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if not args.replay:
        return _run(args, recorded, console)
    from agentgym_envs.eval.replay import load_report, replay

    old = load_report(args.replay)
    out = Path(args.out or Path(args.replay).parent / "replay")
    report, diffs = replay(old)
    _show(report, write_reports(report, out), args.json, console)
    if diffs:
        console.print(f"[red]replay differs in {len(diffs)} place(s):[/]")
        for line in diffs[:50]:
            console.print(f"  {line}")
        return 1
    console.print(f"replay: all {len(report['episodes'])} episodes came out identical")
    return 0


def _run(args: argparse.Namespace, recorded: dict[str, Any] | None, console: Console) -> int:
    """Evaluate the suite into ``--out``, or continue the ``recorded`` run there; a signal
    stops it with the report of what finished (exit 128 + the signal)."""
    from agentgym_envs.eval.evaluate import EvalInterrupted, evaluate
    from agentgym_envs.eval.journal import EpisodeJournal
    from agentgym_envs.eval.suite import load_suite
    from agentgym_envs.integrations.extras import optional_imports

    with optional_imports("agentgym eval's report plots"):  # before any episode, not after
        import matplotlib  # noqa: F401
    suite = load_suite(args.suite)
    if args.trials is not None:
        suite = suite.with_trials(args.trials)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = Path(args.out or Path("runs") / "eval" / f"{suite.name}-{stamp}")
    if recorded is not None and recorded["suite_version"] != suite.version:
        raise ConfigError(
            f"--resume continues the run in {out}, which evaluated suite version "
            f"{recorded['suite_version']}; {args.suite} is now version {suite.version}. "
            "Restore the suite file, or start a new run with another --out"
        )
    run_id = f"{suite.name}-{stamp}" if recorded is None else recorded["run_id"]
    config = _config(args, out, run_id)  # a bad setting fails before the run folder exists
    if recorded is None:
        recorded = _new_run(args, out, suite.version, run_id)
    journal = EpisodeJournal.load(out / JOURNAL_FILE)
    chosen = [e for e in suite.entries if not args.entries or e.name in args.entries]
    total = sum(len(e.jobs(suite.seed, suite.trials)) for e in chosen) * len(args.policy)
    done = [len(journal)]

    with (
        progress_bar(args.json) as bar,
        ProgressLog(
            out / PROGRESS_FILE, echo=not args.json and not sys.stdout.isatty(), out=console
        ) as log,
        _StopOnSignal() as stop,
    ):
        task = bar.add_task(f"{suite.name}: {' '.join(args.policy)}", total=total)
        bar.update(task, completed=done[0])

        def on_episode(r: EpisodeResult) -> None:
            done[0] += 1
            bar.advance(task)
            log.line(episode_line(r, done[0], total))

        try:
            report = evaluate(
                suite, args.policy, config, entries=args.entries, on_episode=on_episode,
                journal=journal, stop=stop.requested, started=recorded["started"],
            )  # fmt: skip
        except EvalInterrupted as exc:
            report = exc.report
    if "partial" in report and stop.signal is not None:
        report["partial"]["stopped_by"] = stop.signal.name
        report["partial"]["resume"] = f"agentgym eval --out {out} --resume"
    (out / "report.json").unlink(missing_ok=True)  # the report of an earlier stop
    _show(report, write_reports(report, out), args.json, console)
    if "partial" not in report:
        return 0
    console.print(Text(partial_note(report), style="yellow"))
    return 128 + (stop.signal or signal.SIGINT)


def _config(args: argparse.Namespace, out: Path, run_id: str) -> EvalConfig:
    from agentgym_envs.eval.evaluate import EvalConfig
    from agentgym_envs.rollout import SlotIsolation

    options = {k: getattr(args, k) for k in LLM_OPTIONS if getattr(args, k) is not None}
    return EvalConfig(
        batch=args.batch,
        max_slots=args.max_slots,
        isolation=SlotIsolation.parse(args.isolation),
        store=None if args.no_store else str(out / "trajectories.sqlite"),
        run_id=run_id,
        policy_options=options,
        envs_per_actor=args.envs_per_actor,
        ray_address=args.ray_address,
    )


def episode_line(result: EpisodeResult, done: int, total: int) -> str:
    """The progress line of a finished episode: entry, env, policy, outcome, seconds."""
    ep = result.episode
    return (
        f"episode {done}/{total}  entry {result.entry}  env {result.env_id}  "
        f"policy {result.policy}  task {result.task_id}  outcome {ep.outcome.value}  "
        f"{ep.wall_ms / 1000:.1f} s"
    )


def _show(report: dict[str, Any], paths: dict[str, Path], as_json: bool, console: Console) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print_tables(report, console)
    console.print(f"report: {paths['html'].resolve()}")
    console.print(f"        {paths['json'].resolve()} and {paths['md'].name}")
    if report["config"].get("store"):
        console.print(f"trajectories: {report['config']['store']} (agentgym traj ls ...)")


# -- resuming ------------------------------------------------------------------------------


def _new_run(
    args: argparse.Namespace, out: Path, suite_version: str, run_id: str
) -> dict[str, Any]:
    """Record the run's arguments in ``out/run.json`` for ``--resume``."""
    if (out / JOURNAL_FILE).exists():
        raise ConfigError(
            f"{out} holds an earlier evaluation ({JOURNAL_FILE}); continue it with "
            f"agentgym eval --out {out} --resume, or pass another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    recorded = {
        "run_id": run_id,
        "started": time.time(),
        "suite_version": suite_version,
        "arguments": {k: getattr(args, k) for k in RECORDED},
    }
    (out / RUN_FILE).write_text(json.dumps(recorded, indent=2) + "\n")
    return recorded


def resume_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """Read the run recorded in ``args.out`` and set its arguments on ``args``.

    An argument given on the command line must be the recorded one: leaving it out uses
    the recorded value.

    Raises:
        ConfigError: no ``--out``, no recorded run there, or an argument that differs.
    """
    if not args.out:
        raise ConfigError(
            "--resume continues the run in an --out folder; pass --out DIR of the stopped run"
        )
    path = Path(args.out) / RUN_FILE
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist: --resume continues a run that `agentgym eval --out "
            f"{args.out}` started. Check the folder, or leave out --resume to start a new run"
        )
    recorded: dict[str, Any] = json.loads(path.read_text())
    used = recorded["arguments"]
    for name in RECORDED:
        given, default = getattr(args, name), _DEFAULTS.get(name)
        if given != default and given != used.get(name):
            raise ConfigError(
                f"--resume continues the run recorded in {path}, which used "
                f"{_flag(name, used.get(name))}; got {_flag(name, given)}. Leave "
                f"--{_dashed(name)} out to resume with the recorded value, or start a new "
                "run with another --out"
            )
        setattr(args, name, used.get(name, default))  # a run recorded before the argument
    if "trim_to" not in used and args.trim_to is None:
        args.trim_to = 1.0  # a run from before trim_to cut histories as little as fits
    return recorded


def _suite_argument(suite: str) -> str:
    """A suite file as an absolute path (a run resumes from any folder); a name as is."""
    path = Path(suite)
    return str(path.resolve()) if path.suffix and path.is_file() else suite


def _dashed(name: str) -> str:
    return name.replace("_", "-")


def _flag(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"--{_dashed(name)}" if value else f"no --{_dashed(name)}"
    if value is None:
        return f"no --{_dashed(name)}"
    shown_value = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"--{_dashed(name)} {shown_value}"


class _StopOnSignal:
    """SIGINT (Ctrl-C) or SIGTERM asks the evaluation to stop after the current step,
    so every finished episode is in the report and the store holds no half episode; a
    second one stops it at once (a ``KeyboardInterrupt``)."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def requested(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum)
        Console(stderr=True).print(
            f"[yellow]{self.signal.name}: stopping after the current step and writing the "
            "report of the finished episodes (send it again to stop at once)[/]"
        )

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


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
    _print_user_table(report, console)


def _print_user_table(report: dict[str, Any], console: Console) -> None:
    """The LLM user's voice and reader figures, where some episode had an LLM user."""
    rows = [(r["entry"], r["policy"], r["metrics"].get("user_llm")) for r in report["results"]]
    rows += [("overall", p, m.get("user_llm")) for p, m in report["overall"].items()]
    rows = [row for row in rows if row[2] is not None]
    if not rows:
        return
    table = Table(title='simulated user (user="llm"): voice and reader')
    columns = ("entry", "policy", "episodes", "replies", "first-draw pass", "fallbacks")
    for col in (*columns, "failures", "reader disagreements", "cassette misses"):
        table.add_column(col, overflow="fold")
    for entry, policy, u in rows:
        table.add_row(
            entry,
            policy,
            str(u["episodes"]),
            str(u["replies"]),
            _rate(u["first_draw_rate"]),
            f"{u['fallbacks']} ({_rate(u['fallback_rate'])})",
            str(u["failures"]),
            str(u["disagreements"]),
            str(u["cassette_misses"]),
        )
    console.print(table)


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
