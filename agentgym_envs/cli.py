"""The ``agentgym`` command: list, play, run, check, bench, tasks, train, and the subcommands
that their modules add (serve, eval, traj, redteam)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import Progress, TaskID
from rich.table import Table

from agentgym_envs.console import console, progress_bar
from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.integrations.extras import optional_imports
from agentgym_envs.registration import EnvEntry, all_entries, env_class, find, plugin_of


def _entries(names: Sequence[str]) -> list[EnvEntry]:
    if not names or list(names) == ["all"]:
        return list(all_entries())  # built-in envs, then plugins'
    return [find(n) for n in names]


def _env_class(entry: EnvEntry) -> Any:
    return env_class(entry)  # a broken plugin's class raises PluginError, naming it


# -- list ------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from agentgym_envs.core.tasks import load_task_set

    rows = []
    for entry in all_entries():
        try:
            cls = _env_class(entry)
            tasks = load_task_set(cls.task_file, cls.task_dir)
        except AgentGymError as exc:
            if plugin_of(entry) is None:
                raise
            from rich.console import Console  # a broken plugin must not hide the other envs

            Console(stderr=True).print(f"[yellow]skipped {entry.id}:[/] {exc}")
            continue
        counts = tasks.counts()
        rows.append(
            {
                "id": entry.id,
                "family": entry.family,
                "env_version": cls.version,
                "tools": list(cls.toolset),
                "tools_version": cls.toolset.fingerprint,
                "task_set_version": tasks.version,
                "tasks": {s: sum(c.values()) for s, c in counts.items()},
                "difficulties": list(tasks.difficulties),
                "description": entry.description,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="agentgym envs")
    for col in ("id", "family", "versions (env/tools/tasks)", "tasks train/test/ood", "tools"):
        table.add_column(col)
    for r in rows:
        t = r["tasks"]
        table.add_row(
            r["id"],
            r["family"],
            f"{r['env_version']} / {r['tools_version']} / {r['task_set_version']}",
            f"{t.get('train', 0)}/{t.get('test', 0)}/{t.get('ood', 0)}",
            ", ".join(r["tools"]),
        )
    console.print(table)
    return 0


# -- play ------------------------------------------------------------------------------

_PLAY_HELP = (
    'Type an action as the agent would, e.g. move(direction="up") or '
    '{"name": "move", "arguments": {"direction": "up"}}.\n'
    "Commands: :undo (restore the previous step), :hint (the oracle's next action), "
    ":tools, :quit"
)


def cmd_play(args: argparse.Namespace) -> int:
    import gymnasium as gym

    entry = find(args.env)
    env = gym.make(entry.id)
    options = _options(args)
    if args.task_id:
        options["task_id"] = args.task_id
    obs, info = env.reset(seed=args.seed, options=options)
    inner = env.unwrapped
    console.print(f"[bold]{entry.id}[/] task {info['task']['id']} (seed {info['seeds']['env']})")
    console.print(info["system"], style="dim")
    console.print(_PLAY_HELP, style="cyan")
    history: list[tuple[Any, float]] = []  # (state before a step, the return before it)
    total = 0.0
    try:
        while True:
            console.print(obs, highlight=False)
            try:
                action = console.input("[bold green]action> [/]")
            except EOFError:
                return 0
            if action.strip() in (":q", ":quit"):
                return 0
            if action.strip() == ":tools":
                console.print(inner.toolset.describe())  # type: ignore[attr-defined]
                continue
            if action.strip() == ":hint":
                console.print(inner.oracle().act(), style="yellow")  # type: ignore[attr-defined]
                continue
            if action.strip() == ":undo":
                if history:
                    state, total = history.pop()  # the undone step's reward leaves the return
                    inner.set_state(state)  # type: ignore[attr-defined]
                    obs = inner.render_view()  # type: ignore[attr-defined]
                    console.print(f"step undone (return {total:+.3f})", style="magenta")
                else:
                    console.print("nothing to undo", style="yellow")
                continue
            history.append((inner.get_state(), total))  # type: ignore[attr-defined]
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            line = f"reward {reward:+.3f} (return {total:+.3f})"
            if info["error"]:
                line += f"  error: {info['error']['code']}"
            if info["new_milestones"]:
                line += f"  milestones: {', '.join(info['new_milestones'])}"
            console.print(line, style="magenta")
            if terminated or truncated:
                console.print(obs, highlight=False)
                console.print(f"[bold]episode over: {info['outcome'].value}[/]")
                return 0
    finally:
        env.close()


# -- run -------------------------------------------------------------------------------


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if getattr(args, "split", None):
        opts["split"] = args.split
    if getattr(args, "difficulty", None):
        opts["difficulty"] = args.difficulty
    return opts


def _advancer(progress: Progress, task: TaskID) -> Callable[[object], None]:
    """An ``on_episode`` callback that moves ``task``'s bar on by one episode."""
    return lambda _result: progress.advance(task)


def _fmt(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``, or ``-`` where there is none."""
    return "-" if value is None else format(value, spec)


def cmd_run(args: argparse.Namespace) -> int:
    from agentgym_envs.eval.metrics import shown
    from agentgym_envs.eval.runner import run_episodes, run_summary

    results = []
    for entry in _entries(args.env):
        _env_class(entry)  # a broken plugin: a PluginError naming it, not a traceback
        for policy in args.policy:
            with progress_bar(args.json) as progress:
                task = progress.add_task(f"{entry.name} / {policy}", total=args.episodes)
                episodes = run_episodes(
                    entry.id,
                    policy,
                    args.episodes,
                    split=args.split,
                    difficulty=args.difficulty,
                    seed=args.seed,
                    batch=args.batch,
                    on_episode=_advancer(progress, task),
                )
            results.append((run_summary(entry.id, policy, episodes), episodes))
    if args.json:
        payload = [
            {
                "summary": s,
                "episodes": [e.to_json() for e in eps] if args.episodes_json else None,
            }
            for s, eps in results
        ]
        print(json.dumps(payload, indent=2))
        return 0
    table = Table(title=f"{args.episodes} episodes per env and policy, split {args.split}")
    for col in (
        "env",
        "policy",
        "success (95% CI)",
        "stage rates",
        "steps",
        "return",
        "cost",
        "cost/success",
        "safety stops",
    ):
        table.add_column(col)
    for s, _ in results:
        lo, hi = s["success_ci"]
        stages = " ".join(f"{k}={v:.2f}" for k, v in s["stage_rates"].items()) or "-"
        per_success = s["cost_per_success"]
        table.add_row(
            s["env_id"].removeprefix("agentgym/"),
            s["policy"],
            f"{s['success_rate']:.2f} [{lo:.2f}, {hi:.2f}]",
            stages,
            f"{s['mean_steps']:.1f}",
            shown(s["mean_return"], "+.3f"),  # a tiny negative return is no "-0.000"
            f"{s['mean_cost']:.1f}",
            "-" if per_success is None else f"{per_success:.1f}",
            f"{s['safety_stop_rate']:.2f}",
        )
    console.print(table)
    return 0


# -- check -----------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from agentgym_envs.eval.conformance import CHECKS, ConformanceError

    table = Table(title="conformance")
    for col in ("env", "check", "result", "detail"):
        table.add_column(col)
    failed = 0
    for entry in _entries(args.env):
        try:
            _env_class(entry)
        except AgentGymError as exc:  # a broken plugin: report it, check the other envs
            table.add_row(entry.id, "import", "[red]FAIL[/]", str(exc))
            failed += 1
            continue
        for check in CHECKS:
            start = time.perf_counter()
            try:
                detail = check.run(entry)
                verdict = "[green]pass[/]"
            except (ConformanceError, AssertionError, AgentGymError) as exc:
                detail, verdict = str(exc), "[red]FAIL[/]"
                failed += 1
            ms = (time.perf_counter() - start) * 1000
            table.add_row(entry.id, check.name, verdict, f"{detail} ({ms:.0f} ms)")
    console.print(table)
    if failed:
        console.print(f"[red]{failed} check(s) failed[/]")
    return 1 if failed else 0


# -- bench -----------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from agentgym_envs.core.family import Family, resolve
    from agentgym_envs.eval.bench import bench_env
    from agentgym_envs.registration import families

    if args.serve:
        return _bench_serve(args)
    if args.eval:
        return _bench_eval(args)
    if args.ray:
        return _bench_ray(args)

    results: list[Any] = []
    # families whose record has figures of its own (Family.bench: where the stored
    # solutions the generic loop replays are not how their episodes run), in registry order
    own: dict[str, tuple[Family, list[Any]]] = {f.name: (f, []) for f in families() if f.bench}
    for entry in _entries(args.env):
        _env_class(entry)  # a broken plugin: a PluginError naming it, not a traceback
        with console.status(f"benchmarking {entry.id}"):
            if entry.family in own:
                record, found = own[entry.family]
                found.append(resolve(record.bench)(entry))
            else:
                results.append(bench_env(entry, seconds=args.seconds, concurrent=args.concurrent))
    measured = [(record, r) for record, found in own.values() for r in found]
    if args.json:
        print(json.dumps([r.to_json() for r in [*results, *(r for _, r in measured)]], indent=2))
        return 0
    for record, r in measured:
        resolve(record.bench_table)(r, console)
    if not results:
        return 0
    table = Table(title="env benchmark (one core, gym.make with default wrappers)")
    columns = (
        "env",
        "steps/s",
        "reset ms",
        "READ step ms",
        "WRITE step ms",
        "get+set state us",
        "MiB/episode",
        "fds/episode",
    )
    for col in columns:
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            r.env_id,
            f"{r.steps_per_s:,.0f}",
            f"{r.reset_ms_median:.3f}",
            _fmt(r.read_step_ms_median, ".3f"),
            _fmt(r.write_step_ms_median, ".3f"),
            f"{r.snapshot_us_median:.1f}",
            f"{r.episode_mib:.3f}",
            f"{r.open_fds_per_episode:.2f}",
        )
    console.print(table)
    console.print(f"medians; memory and file descriptors with {args.concurrent} live episodes")
    return 0


def _bench_serve(args: argparse.Namespace) -> int:
    import shlex

    from rich.console import Console

    from agentgym_envs.console import ProgressLog
    from agentgym_envs.integrations.openenv_bench import (
        ServeBenchConfig,
        bench_serve,
        parse_sessions,
        print_serve_bench,
        write_results,
    )

    if len(args.env) != 1 or args.env == ["all"]:
        raise ConfigError(
            f"agentgym bench --serve serves one env, got {args.env or 'none'}; name it, "
            "e.g. agentgym bench --serve Sokoban"
        )
    config = ServeBenchConfig(
        env=args.env[0],
        sessions=parse_sessions(args.sessions),
        steps=args.steps,
        repeats=args.repeats,
        seed=args.seed,
        action=args.action or "",
        serve_args=tuple(shlex.split(args.serve_args or "")),
        server_src=args.server_src or "",
        connect_concurrency=args.connect_concurrency,
    )
    name = args.env[0].rpartition("/")[2]
    out = Path(args.out or f"serve-bench-{name}.json")
    log_path = Path(args.log) if args.log else out.with_suffix(".log")
    with ProgressLog(log_path, echo=True, out=Console(stderr=True)) as log:
        result = bench_serve(config, log, out=out, log_path=log_path)
    json_path, table_path = write_results(result, out)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    print_serve_bench(result, console)
    console.print(f"results: {json_path} and {table_path}; log: {log_path}", highlight=False)
    return 0


def _bench_ray(args: argparse.Namespace) -> int:
    from agentgym_envs.eval.bench_ray import bench_ray, default_envs, print_ray_bench

    names = tuple(e.name for e in _entries(args.env)) if args.env else default_envs()
    with console.status(f"Ray pool: {', '.join(names)} on 1, 2, 4 actors (a few minutes)"):
        result = bench_ray(names, episodes=args.ray_episodes)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_ray_bench(result, console)
    return 0


def _bench_eval(args: argparse.Namespace) -> int:
    from agentgym_envs.eval.bench_eval import bench_eval, default_envs

    names = tuple(e.name for e in _entries(args.env)) if args.env else default_envs()
    with console.status(f"evaluating the oracle, {args.episodes} episodes per env"):
        results = bench_eval(names, episodes=args.episodes)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
        return 0
    table = Table(title="evaluator benchmark: `agentgym eval` of the oracle, store on")
    for col in (
        "env",
        "episodes",
        "steps",
        "eval s",
        "bare loop s",
        "overhead ms/step",
        "success",
        "store KiB/episode",
    ):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            r.env,
            str(r.episodes),
            str(r.steps),
            f"{r.eval_wall_s:.2f}",
            f"{r.bare_wall_s:.2f}",
            f"{r.overhead_ms_per_step:.3f}",
            f"{r.success_rate:.2f}",
            f"{r.store_kib_per_episode:.1f}",
        )
    console.print(table)
    from agentgym_envs.eval.bench import machinery_envs
    from agentgym_envs.eval.bench_store import bench_store

    with console.status("timing the trajectory store"):
        store = bench_store()
    console.print(
        f"trajectory store: add {store['add_ms_mean']:.2f} ms per committed 20-step episode, "
        f"{store['add_many_ms_per_episode']:.2f} ms in batches, "
        f"{store['bytes_per_episode'] / 1024:.1f} KiB each; the recording wrapper adds "
        f"{store['wrapper_step_overhead_ms']:.3f} ms per {machinery_envs()[0].name} step"
    )
    return 0


# -- tasks -----------------------------------------------------------------------------


def cmd_tasks(args: argparse.Namespace) -> int:
    from agentgym_envs.core.tasks import SPLITS, build_task_set, write_task_set

    # each env class says how many tasks it ships (env.task_counts); --count overrides
    counts = dict.fromkeys(SPLITS, args.count) if args.count else None
    built = {e.entry_point: e for e in _entries(args.env)}  # variants share one task set
    for entry in built.values():
        cls = _env_class(entry)
        start = time.perf_counter()
        if hasattr(cls, "build_tasks"):  # built its own way (RepoFixReal: per project)
            root = Path(args.out or cls.task_dir or "tasks")
            n = cls.build_tasks(root, args.workers, console.print)
            console.print(f"{cls.name}: {n} validated tasks -> {root / cls.task_file}")
            continue
        with console.status(f"generating {cls.name} tasks"):
            tasks = build_task_set(cls, counts, workers=args.workers)
        header = {"generator": f"{cls.__name__}.generate_task", "env_version": cls.version}
        # a plugin env keeps its tasks next to its code (cls.task_dir) unless --out says
        root = Path(args.out or cls.task_dir or "tasks")
        n = write_task_set(root / cls.task_file, cls.name, header, tasks)
        console.print(
            f"{cls.name}: {n} validated tasks -> {root / cls.task_file} "
            f"({time.perf_counter() - start:.1f} s)"
        )
    return 0


# -- parser ----------------------------------------------------------------------------


def _version() -> str:
    """The installed package's version (``pip show agentgym-envs``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentgym-envs")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from agentgym_envs import __version__

        return f"{__version__} (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym", description="Gymnasium environments for multi-turn LLM agent RL."
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered envs with versions and task counts")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("play", help="play an env yourself in the terminal")
    p.add_argument("env", help="env id or name, e.g. Sokoban")
    p.add_argument("--seed", type=int, default=None, help="reset seed (default: random)")
    p.add_argument(
        "--split", choices=("train", "test", "ood"), help="draw the task from this split"
    )
    p.add_argument("--difficulty", help="draw the task from this difficulty, e.g. easy")
    p.add_argument("--task-id", help="play this task (`agentgym list` shows the task sets)")
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("run", help="run reference policies and report success")
    p.add_argument("env", nargs="+", help="env ids or names, or 'all'")
    p.add_argument(
        "--policy",
        nargs="+",
        default=["oracle"],
        choices=("oracle", "random", "noop"),
        help="reference policies to run (default: oracle)",
    )
    p.add_argument(
        "--episodes", type=int, default=50, help="episodes per env and policy (default: 50)"
    )
    p.add_argument(
        "--split",
        default="test",
        choices=("train", "test", "ood"),
        help="task split (default: test)",
    )
    p.add_argument("--difficulty", help="only tasks of this difficulty (default: all)")
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode")
    p.add_argument("--batch", type=int, default=8, help="env slots played in lockstep")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--episodes-json", action="store_true", help="include every episode in JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("check", help="run the conformance checks of registered envs")
    p.add_argument("env", nargs="*", help="env ids or names (default: all)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("bench", help="steps/s, reset ms, snapshot us and memory per env")
    p.add_argument("env", nargs="*", help="env ids or names (default: all)")
    p.add_argument("--seconds", type=float, default=2.0, help="stepping time per env")
    p.add_argument("--concurrent", type=int, default=500, help="live episodes for memory")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--eval",
        action="store_true",
        help="benchmark the evaluator instead: oracle over --episodes per text game, "
        "store on, against a bare loop",
    )
    p.add_argument("--episodes", type=int, default=1000, help="episodes per env for --eval")
    p.add_argument(
        "--ray",
        action="store_true",
        help="benchmark the Ray env pool instead: RepoFix and WebShop steps/s on 1, 2 and 4 "
        "actors against in-process, and the pool's per-step overhead on a text game",
    )
    p.add_argument("--ray-episodes", type=int, default=8, help="episodes per run for --ray")
    p.add_argument(
        "--serve",
        action="store_true",
        help="benchmark serving instead: S concurrent OpenEnv WebSocket sessions against "
        "`agentgym openenv serve ENV` and OpenEnv's echo env, alternating, each server in its "
        "own process (needs the openenv extra)",
    )
    p.add_argument(
        "--sessions",
        default="64,256,2048",
        metavar="S,S,...",
        help="concurrent sessions for --serve (default 64,256,2048)",
    )
    p.add_argument("--steps", type=int, default=10, help="steps per session for --serve")
    p.add_argument(
        "--repeats", type=int, default=3, help="trials per S and server for --serve (default 3)"
    )
    p.add_argument("--seed", type=int, default=0, help="reset seed of session 0 for --serve")
    p.add_argument(
        "--action", help="the action each --serve step sends (default: the env's example_action)"
    )
    p.add_argument(
        "--serve-args",
        metavar="ARGS",
        help="more options for `agentgym openenv serve` in --serve, one string; write it "
        "with = when it starts with a dash (--serve-args=--preload)",
    )
    p.add_argument(
        "--server-src",
        metavar="DIR",
        help="--serve runs our server from this source tree instead (first on its "
        "PYTHONPATH), e.g. a commit written out by git archive",
    )
    p.add_argument(
        "--connect-concurrency",
        type=int,
        default=0,
        metavar="N",
        help="--serve opens at most N WebSocket handshakes at a time (default 0: all S at once)",
    )
    p.add_argument(
        "--out", help="--serve results JSON (default serve-bench-ENV.json; a .md table next to it)"
    )
    p.add_argument("--log", help="--serve progress log (default: --out with .log)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("tasks", help="task-set maintenance")
    tsub = p.add_subparsers(dest="tasks_command", required=True)
    b = tsub.add_parser("build", help="regenerate and validate task files")
    b.add_argument("env", nargs="*", help="env ids or names (default: all)")
    b.add_argument(
        "--out",
        help="task directory (default: ./tasks, or a plugin env's own task_dir)",
    )
    b.add_argument(
        "--count", type=int, help="tasks per split and difficulty (default: the env's task_counts)"
    )
    b.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes generating candidates (the task set is the same for any number)",
    )
    b.set_defaults(func=cmd_tasks)

    add_plugin_parsers(sub)
    # -- subcommands owned by their modules (each add_parser imports only argparse-light code)
    from agentgym_envs.serving.server import add_parser as add_serve_parser

    add_serve_parser(sub)
    from agentgym_envs.eval.cli_eval import add_parser as add_eval_parser

    add_eval_parser(sub)
    from agentgym_envs.eval.traj_cli import add_parser as add_traj_parser

    add_traj_parser(sub)
    from agentgym_envs.redteam.cli import add_parser as add_redteam_parser

    add_redteam_parser(sub)

    return parser


SUBCOMMAND_GROUP = "agentgym_envs.cli"
"""Entry-point group of subcommands that other packages add to ``agentgym``: each entry is
``name = "module:add_parser"``, where ``add_parser(sub)`` adds the subcommand ``name`` to
the argparse subparsers ``sub``. The reference trainer adds ``train`` this way, so this
package never imports it."""

TRAIN_INSTALL = "pip install 'agentgym-envs[train]'"
"""How to install the trainer's dependencies (from a checkout: ``pip install -e '.[train]'``)."""

_EXPECTED = {"train": ("the reference trainer (agentgym_trainers/)", TRAIN_INSTALL)}
"""Subcommands this package documents but another package provides: what provides each,
and how to install it."""


def add_plugin_parsers(sub: Any) -> list[str]:
    """Add the subcommands of the :data:`SUBCOMMAND_GROUP` entry points to ``sub``.

    A subcommand whose entry point is missing or fails to import is still listed: running
    it exits with an error that says how to install it.

    Returns:
        The names of the subcommands that loaded.
    """
    from importlib.metadata import entry_points

    loaded: list[str] = []
    problems = {name: f"{what} is not installed" for name, (what, _) in _EXPECTED.items()}
    for point in sorted(entry_points(group=SUBCOMMAND_GROUP), key=lambda p: p.name):
        try:
            add_parser = point.load()
        except ImportError as exc:
            problems[point.name] = f"its module {point.value} failed to import ({exc})"
            continue
        add_parser(sub)
        loaded.append(point.name)
        problems.pop(point.name, None)
    for name, reason in problems.items():
        _add_unavailable(sub, name, reason)
    return loaded


def _add_unavailable(sub: Any, name: str, reason: str) -> None:
    install = _EXPECTED[name][1] if name in _EXPECTED else "reinstall the package that adds it"
    message = (
        f"`agentgym {name}` is unavailable: {reason}. Expected a {SUBCOMMAND_GROUP!r} entry "
        f"point named {name!r}; fix: {install} (from a source checkout: "
        "pip install -e '.[train]', which also refreshes the entry points)"
    )

    def fail(args: argparse.Namespace) -> int:
        raise ConfigError(message)

    # any arguments are accepted (main lets them through), so the error is this one
    p = sub.add_parser(name, help=f"(unavailable: {reason})", add_help=False)
    p.set_defaults(func=fail, unavailable=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "unavailable", False):  # as parse_args does
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        with optional_imports(f"`agentgym {args.command}`"):  # an extra not installed
            code: int = args.func(args)
        return code
    except AgentGymError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")  # text, not markup
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
