"""The oracle and doing nothing over RepoFixReal's tasks, with reset, step and grading
times (measured here, never asserted in tests).

Each task is played three times in one env: the first reset (its workspace template is
built: the project's code copied, the bugs applied, one git commit), a second reset (a
copy of that template), the oracle's fix (its edits, then ``submit()``, whose grading is
timed) and, after a third reset, a bare ``submit()`` (doing nothing). The oracle must
succeed and doing nothing must fail on every task.

Command line::

    python -m agentgym_envs.repofix.real_sweep [--sample N] [--workers 2] \\
        [--tasks FILE] --out sweep.json --log sweep.log

Each task's row is appended to ``sweep.rows.jsonl`` as it is played, so a sweep cut off
resumes where it stopped (a row counts only for the task exactly as it was played).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from agentgym_envs.core.info import Outcome
from agentgym_envs.core.tasks import Task, load_task_set
from agentgym_envs.repofix import real_tasks


def _play(env: Any, task: Task) -> dict[str, Any]:
    row: dict[str, Any] = {"task": task.id, "project": task.spec["project"]}
    row.update(split=task.split, difficulty=task.difficulty)
    start = time.perf_counter()
    env.reset(seed=0, options={"task_id": task.id})
    row["reset_first_ms"] = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    env.reset(seed=0, options={"task_id": task.id})
    row["reset_ms"] = (time.perf_counter() - start) * 1000
    oracle, edits, info = env.oracle(), [], {}
    for _ in task.solution:
        action = oracle.act()
        start = time.perf_counter()
        *_, terminated, truncated, info = env.step(action)
        took = time.perf_counter() - start
        if action == "submit()":
            row["grade_s"] = took
        else:
            edits.append(took * 1000)
        if terminated or truncated:
            break
    row["edit_ms"] = statistics.median(edits) if edits else None
    row["oracle"] = str(info.get("outcome"))
    env.reset(seed=0, options={"task_id": task.id})
    start = time.perf_counter()
    *_, info = env.step("submit()")
    row["noop_grade_s"] = time.perf_counter() - start
    row["noop"] = str(info.get("outcome"))
    return row


def _load(task_file: Path | None) -> list[Task]:
    if task_file is None:
        return list(load_task_set(real_tasks.TASK_FILE).tasks)
    return list(load_task_set(task_file.name, task_file.parent).tasks)


def task_digest(task: Task) -> str:
    """What a row is valid for: the task as built (a rebuilt task is played again)."""
    return hashlib.sha256(json.dumps(task.to_json(), sort_keys=True).encode()).hexdigest()[:16]


def sweep(
    task_ids: Sequence[str],
    log: Callable[[str], None] | None = None,
    task_file: Path | None = None,
    rows_file: Path | None = None,
) -> list[dict[str, Any]]:
    """Play each task as the module docstring says, in one env; a row per task, also
    appended to ``rows_file`` as it is known (several processes may append to it)."""
    from agentgym_envs.repofix.real import RepoFixRealEnv

    tasks = {t.id: t for t in _load(task_file)}
    probes_dir = None if task_file is None else task_file.parent / Path(real_tasks.PROBES_AT).name
    env = RepoFixRealEnv(tasks=list(tasks.values()), probes_dir=probes_dir)
    rows = []
    try:
        for i, task_id in enumerate(task_ids, start=1):
            row = _play(env, tasks[task_id])
            row["digest"] = task_digest(tasks[task_id])
            rows.append(row)
            if rows_file is not None:
                with rows_file.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(row, sort_keys=True) + "\n")  # one write: whole lines
            if log is not None and (i % 25 == 0 or i == len(task_ids)):
                log(f"{i}/{len(task_ids)} played")
    finally:
        env.close()
    return rows


def played(rows_file: Path, tasks: Sequence[Task]) -> dict[str, dict[str, Any]]:
    """The rows of ``rows_file`` that are still valid for ``tasks``, by task id (a torn
    line, or a row of a task since rebuilt, is played again)."""
    if not rows_file.is_file():
        return {}
    digests = {t.id: task_digest(t) for t in tasks}
    out = {}
    for line in rows_file.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and digests.get(str(row.get("task"))) == row.get("digest"):
            out[row["task"]] = row
    return out


def kept_rows(rows_file: Path, tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """The rows of ``rows_file`` a sweep of ``tasks`` keeps, in the file's order: those
    still valid for its tasks, and the whole rows of tasks it does not hold (a rows file
    shared by sweeps of several task files keeps each one's rows)."""
    valid = played(rows_file, tasks)
    ids = {t.id for t in tasks}
    out = []
    for line in rows_file.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("task"), str):
            continue
        if row["task"] not in ids or valid.get(row["task"]) == row:
            out.append(row)
    return out


def sample(tasks: Sequence[Task], count: int | None) -> list[str]:
    """``count`` task ids spread evenly over the task set (ordered by project and seed),
    or all of them."""
    ordered = [t.id for t in tasks]
    if count is None or count >= len(ordered):
        return ordered
    step = len(ordered) / count
    return [ordered[math.floor(i * step)] for i in range(count)]


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {"median": round(statistics.median(ordered), 3), "p95": round(p95, 3),
            "max": round(ordered[-1], 3)}  # fmt: skip


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Success of the oracle and of doing nothing (overall, by split, difficulty and
    project) and the times' median, 95th percentile and maximum."""
    success = str(Outcome.SUCCESS)

    def rates(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        n = len(group)
        return {
            "tasks": n,
            "oracle_success": sum(r["oracle"] == success for r in group) / n,
            "noop_success": sum(r["noop"] == success for r in group) / n,
        }

    out: dict[str, Any] = {"overall": rates(rows)}
    for key in ("split", "difficulty", "project"):
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            groups[r[key]].append(r)
        out[f"by_{key}"] = {k: rates(v) for k, v in sorted(groups.items())}
    out["times"] = {
        key: _quantiles([r[key] for r in rows if r.get(key) is not None])
        for key in ("reset_first_ms", "reset_ms", "edit_ms", "grade_s", "noop_grade_s")
    }
    out["failed"] = [r["task"] for r in rows if r["oracle"] != success or r["noop"] == success]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from agentgym_envs.console import ProgressLog

    parser = argparse.ArgumentParser(
        prog="python -m agentgym_envs.repofix.real_sweep",
        description="Play the oracle and doing nothing on RepoFixReal's tasks, timed.",
    )
    parser.add_argument("--sample", type=int, default=None, help="tasks (default: all)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="the rows and summary (JSON)")
    parser.add_argument("--log", type=Path, default=None, help="also append progress here")
    parser.add_argument(
        "--tasks", type=Path, default=None,
        help="a task file built with --out (default: the shipped one); its probes beside it",
    )  # fmt: skip
    parser.add_argument(
        "--rows", type=Path, default=None,
        help="each task's row is appended here as it is played, and a sweep again skips "
        "the tasks it holds rows for (default: OUT with .rows.jsonl)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.workers < 1 or (args.sample is not None and args.sample < 1):
        parser.error("--workers and --sample must be at least 1")
    tasks = _load(args.tasks)
    chosen = sample(tasks, args.sample)
    rows_file = args.rows or args.out.with_suffix(".rows.jsonl")
    done = played(rows_file, tasks)
    if rows_file.is_file():  # drop torn lines and stale rows of these tasks before appending
        kept = kept_rows(rows_file, tasks)
        rows_file.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    rows = [done[t] for t in chosen if t in done]
    todo = [t for t in chosen if t not in done]
    start = time.perf_counter()
    with ProgressLog(args.log, echo=True) as progress:
        progress.line(
            f"sweeping {len(chosen)} tasks with {args.workers} workers "
            f"({len(rows)} played before, rows in {rows_file})"
        )
        # chunks of 20 tasks, so a line shows progress as each finishes
        chunks = [todo[i : i + 20] for i in range(0, len(todo), 20)]
        if args.workers == 1:
            rows.extend(sweep(todo, progress.line, args.tasks, rows_file))
        else:
            with ProcessPoolExecutor(args.workers) as pool:
                futures = [pool.submit(sweep, c, None, args.tasks, rows_file) for c in chunks]
                for future in as_completed(futures):
                    rows.extend(future.result())
                    progress.line(f"{len(rows)}/{len(chosen)} played")
        s = summary(rows)
        words = sys.argv[1:] if argv is None else argv
        result = {
            "command": "python -m agentgym_envs.repofix.real_sweep " + " ".join(words),
            "seconds": round(time.perf_counter() - start),
            "summary": s,
            "rows": sorted(rows, key=lambda r: r["task"]),
        }
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        progress.line(
            f"oracle {s['overall']['oracle_success']:.3f}, doing nothing "
            f"{s['overall']['noop_success']:.3f} over {len(rows)} tasks; "
            f"reset median {s['times']['reset_ms'].get('median')} ms -> {args.out}"
        )
    return 0 if not s["failed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
