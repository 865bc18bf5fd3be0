"""The build of RepoFixReal's task set: every pinned project's seeds tried in turn
(:func:`real_tasks.candidate`), each seed's outcome cached as soon as it is known, the
task file and the graded probes written (the pipeline: :mod:`real_tasks`).

Command line::

    python -m agentgym_envs.repofix.real_build build [NAME ...] --per-project 60 \\
        --workers 2 --log build.log --funnel funnel.json
    python -m agentgym_envs.repofix.real_build merge PART.jsonl.gz ... --out FILE \\
        [--funnels PART.json ... --funnel funnel.json] [--replace]

A project's tasks depend on its own seeds only, so builds of disjoint projects (on other
machines, or at other times) merge into the file one build of all of them writes:
``merge`` orders them as the pinned list does and takes each project's graded probes
from beside its part.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tasks import Task, tasks_root, write_task_set
from agentgym_envs.repofix import real_projects as rp
from agentgym_envs.repofix.env import RepoFixEnv
from agentgym_envs.repofix.mutate import Site
from agentgym_envs.repofix.real_tasks import (
    EARLY_SEEDS,
    MIN_YIELD,
    PER_PROJECT,
    PROBES_AT,
    TASK_FILE,
    TASKS_VERSION,
    TRIES_PER_TASK,
    Funnel,
    ProjectData,
    candidate,
    graded_path,
    project_data,
    write_graded,
)
from agentgym_envs.sandbox.verify import TestRunner


@dataclass
class Built:
    """One project's build: its tasks (as JSON) and funnel."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    funnel: Funnel = field(default_factory=lambda: Funnel(""))


def basis(data: ProjectData) -> str:
    """A digest of what a project's tasks are built from (its stable tests, the probes and
    the coverage): the seeds' results hold only for it."""
    parts = [data.stable, [[p.test, p.call, p.expected] for p in data.probes], data.covered]
    text = json.dumps(parts, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _results_path(data: ProjectData) -> Path:
    folder = rp.cache_dir() / f"tasks-v{TASKS_VERSION}"
    return folder / f"{data.project.cache_key}-{basis(data)}.jsonl"


def _read_seeds(path: Path) -> list[dict[str, Any]]:
    """The seeds tried on a project so far, in order. A torn last line (a build killed
    while writing it) is cut off the file: that seed is tried again."""
    if not path.is_file():
        return []
    out: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            break
        if not line.endswith("\n") or not _sound(row, len(out)):
            break
        out.append(row)
    if len(out) < len(lines):
        path.write_text("".join(lines[: len(out)]), encoding="utf-8")
    return out


# the funnel's counters, in its order: a seed's row names those it counts in
_REASONS = tuple(f.name for f in dataclasses.fields(Funnel) if f.type in ("int", int))


def _sound(row: Any, seed: int) -> bool:
    """Whether a cached row is one this build wrote for ``seed``."""
    return (
        isinstance(row, dict)
        and row.get("seed") == seed
        and isinstance(row.get("why"), list)
        and set(row["why"]) <= set(_REASONS)
        and isinstance(row.get("seen"), list)
        and isinstance(row.get("seconds"), int | float)
        and (row.get("task") is None or isinstance(row["task"], dict))
    )


def _try(
    data: ProjectData, seed: int, runner: Any, seen: set[str], pool: Mapping[str, set[str]]
) -> dict[str, Any]:
    """Seed ``seed``'s row for the cache: its task (or None), the funnel's reasons it
    counts in, what it adds to ``seen`` and the seconds it took."""
    began, before, funnel = time.perf_counter(), set(seen), Funnel(data.project.key)
    task = candidate(data, seed, runner, funnel, seen, pool)
    why = [k for k in _REASONS if k != "tried" and getattr(funnel, k)] + ["tried"]
    seconds = round(time.perf_counter() - began, 2)
    return {"seed": seed, "why": why, "task": task, "seen": sorted(seen - before),
            "seconds": seconds}  # fmt: skip


def playable(task: Mapping[str, Any]) -> bool:
    """Whether every action of the task's oracle fits in what an agent may send: the
    oracle's edit of two bugs far apart in one file could span the file between them
    (persiantools: 63,256 characters, over RepoFix's 40,000), and its sweep failed."""
    return all(len(action) <= RepoFixEnv.max_action_chars for action in task["solution"])


def build_project(name: str, per_project: int, tries: int) -> Built:
    """Up to ``per_project`` tasks from seeds 0 to ``tries - 1`` of one project.

    Each seed's outcome is appended to the project's file in the cache as it is known,
    so a build resumes at the seed where it stopped, and a build asking for more tasks
    goes on from the seeds an earlier one tried (the same seeds give the same tasks)."""
    p = rp.project(name)
    built = Built(funnel=Funnel(p.key))
    seen: set[str] = set()
    pool: dict[str, set[str]] = {}
    spent = 0.0
    runner: TestRunner | None = None
    try:
        data = project_data(name)
        path = _results_path(data)
        done = _read_seeds(path)
        for seed in range(tries):
            if built.funnel.kept >= per_project:
                break
            if seed >= EARLY_SEEDS and built.funnel.kept < MIN_YIELD * seed:
                built.funnel.stopped_early = True  # few of its bugs make tasks: stop trying
                break
            if seed < len(done):
                row = done[seed]
            else:
                runner = runner or rp._runner()
                row = _try(data, seed, runner, seen, pool)
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(row, sort_keys=True) + "\n")
            task, spent, why = row["task"], spent + row["seconds"], row["why"]
            seen.update(row["seen"])
            if task is not None and len(task["spec"]["sites"]) == 1:
                site = Site.from_json(task["spec"]["sites"][0])
                pool.setdefault(task["split"], set()).add(site.key)
            if task is not None and not playable(task):  # decided here, cached or not
                task, why = None, [w for w in why if w != "kept"] + ["unplayable"]
            for reason in why:
                setattr(built.funnel, reason, getattr(built.funnel, reason) + 1)
            if task is not None:
                built.tasks.append(task)
    except ConfigError as exc:
        built.funnel.problem = str(exc)  # a project that failed is tried again next build
    except Exception as exc:  # a fault of the build's own, found on this project: the
        # other projects' builds go on (in a pool, it would end the whole build unwritten)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        built.funnel.problem = (
            f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno}; "
            "a fault of the build, not of the project: please report it)"
        )
    finally:
        if runner is not None:
            runner.close()
        built.funnel.seconds = round(spent, 1)  # the seeds' compute, cached ones included
    return built


def tasks_wanted(p: rp.Project, per_project: int, limit: int | None = None) -> int:
    """How many tasks a build keeps of ``p`` at most: its pin's own number (``tasks``),
    else ``per_project``; ``limit`` caps either."""
    wanted = p.tasks or per_project
    return wanted if limit is None else min(wanted, limit)


def _header(per_project: int, limit: int | None, wanted: Mapping[str, int]) -> dict[str, Any]:
    """A task file's header: the settings, the projects built (pinned order) and the
    number of tasks each was built toward where it is not ``per_project``."""
    order = {p.name: i for i, p in enumerate(rp.load_projects())}
    names = sorted(wanted, key=lambda n: order.get(n, len(order)))
    header: dict[str, Any] = {"generator": "real_build.build", "per_project": per_project}
    if limit is not None:
        header["limit"] = limit
    header["projects"] = names
    header["tasks"] = {n: wanted[n] for n in names if wanted[n] != per_project}
    return header


def build(
    names: Sequence[str] | None = None,
    *,
    per_project: int = PER_PROJECT,
    workers: int = 1,
    out: Path | None = None,
    log: Callable[[str], None] = print,
    limit: int | None = None,
) -> tuple[int, list[Funnel]]:
    """Build the task set of the named projects (default: every pinned project), write
    it (``out``, default the tasks root's :data:`TASK_FILE`) and return the number of
    tasks and the funnels. One progress line per project goes to ``log``.

    A project gives ``per_project`` tasks, or the number its pin asks for (``tasks``);
    ``limit`` caps both (a quick build of a few of each project's first tasks)."""
    for number, what in ((per_project, "per_project"), (limit, "limit")):
        if number is not None and (type(number) is not int or number < 1):
            raise ConfigError(f"{what} must be a whole number of tasks, at least 1: {number!r}")
    projects = [p.name for p in rp.load_projects()] if not names else list(names)
    wanted = {n: tasks_wanted(rp.project(n), per_project, limit) for n in projects}
    results: dict[str, Built] = {}
    start = time.perf_counter()

    def done(name: str, built: Built) -> None:
        results[name] = built
        f = built.funnel
        why = f" ({f.problem[:200]})" if f.problem else ""
        log(
            f"[{len(results)}/{len(projects)}] {name}: {f.kept} tasks of {f.tried} seeds "
            f"({f.seconds:.0f} s){why}; {time.perf_counter() - start:.0f} s in all"
        )

    if workers <= 1:
        for name in projects:
            done(name, build_project(name, wanted[name], wanted[name] * TRIES_PER_TASK))
    else:
        with ProcessPoolExecutor(workers) as pool:
            futures = {
                pool.submit(build_project, n, wanted[n], wanted[n] * TRIES_PER_TASK): n
                for n in projects
            }
            for future in as_completed(futures):
                done(futures[future], future.result())
    tasks = [Task.from_json(t) for n in projects for t in results[n].tasks]
    header = _header(per_project, limit, {n: wanted[n] for n in projects})
    target = out or tasks_root() / TASK_FILE
    probes_folder = target.parent / Path(PROBES_AT).name
    for name in projects:  # the probes first: a task file is never left without them
        named = {t for task in results[name].tasks for t in _graded_tests(task["spec"])}
        if named:
            write_graded(project_data(name), named, probes_folder)
    written = write_task_set(target, "RepoFixReal", header, tasks)
    return written, [results[n].funnel for n in projects]


def merge(
    parts: Sequence[Path],
    out: Path,
    funnels: Sequence[Path] = (),
    funnel_out: Path | None = None,
    *,
    replace: bool = False,
) -> int:
    """Merge task files that :func:`build` wrote for disjoint projects into ``out`` (the
    graded probes too, from the folder beside each part), in the pinned list's order:
    byte for byte what one build of all their projects writes with the pins as they are.
    ``funnels``, the parts' funnel files (one per part, in the same order), merge into
    ``funnel_out`` the same way. With ``replace``, a project a later part built replaces
    it in the earlier ones (a project built again, or toward more tasks), even with no
    task. The number of tasks written.

    Raises:
        ConfigError: a part that is not a RepoFixReal build, parts built with other
            settings, a project in two parts (without ``replace``), not pinned, or built
            toward another number of tasks than its pin now asks for, a funnel that does
            not match its part's tasks, or a part's probes missing.
    """
    from agentgym_envs.core.tasks import load_task_set

    pinned = rp.load_projects()
    by_name = {p.name: p for p in pinned}
    by_key = {p.key: p.name for p in pinned}
    if (funnel_out is None) != (not funnels):
        raise ConfigError("merge takes the parts' funnels and the merged funnel's file together")
    if funnels and len(funnels) != len(parts):
        raise ConfigError(
            f"{len(parts)} task files and {len(funnels)} funnel files: give one funnel per "
            "part, in the parts' order"
        )
    settings: dict[str, Any] | None = None
    winner: dict[str, tuple[Path, list[Task], dict[str, Any] | None, int]] = {}
    for i, part in enumerate(parts):
        loaded = load_task_set(part.name, part.parent)
        header = loaded.header
        if loaded.name != "RepoFixReal" or header.get("generator") != "real_build.build":
            raise ConfigError(f"{part} is not a task file real_build.build wrote")
        mine = {k: header.get(k) for k in ("per_project", "limit")}
        if settings is not None and mine != settings:
            raise ConfigError(
                f"{part} was built with {mine}, an earlier part with {settings}: build the "
                "parts with the same --per-project and --limit"
            )
        settings = mine
        tasks: dict[str, list[Task]] = {}
        for task in loaded.tasks:
            tasks.setdefault(task.spec["project"], []).append(task)
        rows: dict[str, dict[str, Any]] = {}
        if funnels:
            for row in json.loads(funnels[i].read_text()):
                if row["project"] not in by_key:
                    raise ConfigError(
                        f"{funnels[i]} names {row['project']}, which is not pinned (name-version)"
                    )
                rows[by_key[row["project"]]] = row
        # the projects it built: its header's list (a file from before the list: the
        # projects of its tasks and of its funnel)
        built = list(header.get("projects") or {*tasks, *rows})
        for name in built:
            if name not in by_name:
                raise ConfigError(f"{part} holds tasks of {name!r}, which is not pinned")
            if name in winner and not replace:
                raise ConfigError(
                    f"{name}'s tasks are in {winner[name][0]} and in {part} (--replace: "
                    "the later part's tasks of a project replace the earlier part's)"
                )
            if funnels and (name not in rows or rows[name]["kept"] != len(tasks.get(name, []))):
                raise ConfigError(
                    f"{funnels[i]} is not the funnel of {part}: {name} has "
                    f"{len(tasks.get(name, []))} tasks there"
                )
            was = header.get("tasks", {}).get(name, header["per_project"])
            winner[name] = (part, tasks.get(name, []), rows.get(name), was)
    if settings is None:
        raise ConfigError("merge needs at least one task file")
    for name, (part, _, _, was) in winner.items():
        now = tasks_wanted(by_name[name], settings["per_project"], settings["limit"])
        if was != now:
            raise ConfigError(
                f"{part} built {name} toward {was} tasks; its pin now asks for {now}: build "
                "it again and merge that part after this one with --replace"
            )
    order = {p.name: i for i, p in enumerate(pinned)}
    names = sorted(winner, key=order.__getitem__)
    probes_folder = out.parent / Path(PROBES_AT).name
    probes_folder.mkdir(parents=True, exist_ok=True)
    for name in names:  # the probes first: a task file is never left without them
        if not winner[name][1]:
            continue
        source = graded_path(name, winner[name][0].parent / Path(PROBES_AT).name)
        if not source.is_file():
            raise ConfigError(f"{name}'s graded probes are not beside its part ({source})")
        target_file = probes_folder / source.name
        if source.resolve() != target_file.resolve():
            target_file.write_bytes(source.read_bytes())
    header = _header(settings["per_project"], settings["limit"], {n: winner[n][3] for n in names})
    written = write_task_set(out, "RepoFixReal", header, [t for n in names for t in winner[n][1]])
    if funnel_out is not None:
        ranked = [winner[n][2] for n in names]
        funnel_out.write_text(json.dumps(ranked, indent=1) + "\n")
    return written


def _graded_tests(spec: Mapping[str, Any]) -> list[str]:
    return [*spec["fail_to_pass"], *spec["pass_to_pass"]]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentgym_envs.repofix.real_build build [NAME ...]`` (module docstring)."""
    from agentgym_envs.console import ProgressLog

    parser = argparse.ArgumentParser(prog="python -m agentgym_envs.repofix.real_build")
    parser.add_argument("command", choices=["build", "merge"])
    parser.add_argument(
        "names", nargs="*", help="build: pinned projects (default: all); merge: task files"
    )
    parser.add_argument(
        "--per-project", type=int, default=PER_PROJECT,
        help=f"tasks per project where its pin gives no 'tasks' (default {PER_PROJECT})",
    )  # fmt: skip
    parser.add_argument(
        "--limit", type=int, default=None,
        help="at most this many tasks of any project, whatever its pin asks for",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="task file (default: tasks root)")
    parser.add_argument("--funnel", type=Path, default=None, help="write the funnels here")
    parser.add_argument("--log", type=Path, default=None, help="progress log file")
    parser.add_argument(
        "--funnels", type=Path, nargs="*", default=[], help="merge: the parts' funnel files"
    )
    parser.add_argument(
        "--replace", action="store_true",
        help="merge: a project's tasks in a later part replace those in an earlier one",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "merge":
        if not args.names or args.out is None:
            parser.error("merge needs the parts' task files and --out")
        if bool(args.funnels) != (args.funnel is not None):
            parser.error("merge takes --funnels and --funnel together")
        try:
            count = merge(
                [Path(n) for n in args.names], args.out, args.funnels, args.funnel,
                replace=args.replace,
            )  # fmt: skip
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{count} tasks -> {args.out}")
        return 0
    if args.per_project < 1 or args.workers < 1 or (args.limit is not None and args.limit < 1):
        parser.error("--per-project, --limit and --workers must be at least 1")
    with ProgressLog(args.log, echo=True) as progress:
        try:
            count, funnels = build(
                args.names, per_project=args.per_project, workers=args.workers, out=args.out,
                log=progress.line, limit=args.limit,
            )  # fmt: skip
        except ConfigError as exc:  # a name that is not pinned, a pin that is not valid
            progress.line(f"error: {exc}")
            return 1
        progress.line(f"{count} tasks -> {args.out or tasks_root() / TASK_FILE}")
    if args.funnel is not None:
        args.funnel.write_text(json.dumps([f.to_json() for f in funnels], indent=1) + "\n")
    return 0 if all(not f.problem for f in funnels) else 1


if __name__ == "__main__":
    raise SystemExit(main())
