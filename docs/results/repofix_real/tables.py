"""The tables of this folder's README, from the files the build and the sweep wrote.

    python docs/results/repofix_real/tables.py [--tasks FILE] > tables.md

Reads ``funnel.json`` (the build's ``--funnel``), ``baseline.json`` (the baselines),
``sweep.json`` (the sweep's ``--out``) next to this script, the pinned list, and the task
file (default: the shipped one), and prints the funnel, per-project, split and difficulty,
bug-kind and timing tables as markdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
REASONS = ["tried", "no_site", "repeated", "broke_suite", "hung", "undetected", "spilled"]
REASONS += ["unseen", "site_unseen", "thin", "fingerprint", "duplicate", "unfixable", "unplayable"]
REASONS += ["kept"]
LEVELS = ("easy", "medium", "hard")


def _rows(line: list[Any]) -> str:
    return "| " + " | ".join(str(x) for x in line) + " |"


def _table(head: list[str], body: list[list[Any]]) -> list[str]:
    return [_rows(head), "|" + "---|" * len(head), *(_rows(r) for r in body)]


def _tasks(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [row for row in map(json.loads, fh) if "spec" in row]


def funnel_table(funnels: list[dict[str, Any]]) -> list[str]:
    total = {k: sum(f.get(k, 0) for f in funnels) for k in REASONS}  # older funnels lack some
    share = 100 * total["kept"] / max(total["tried"], 1)
    return [
        f"### Funnel, the {len(funnels)} projects of the build command",
        "",
        *_table(REASONS, [[total[k] for k in REASONS]]),
        "",
        f"{share:.0f}% of seeds became tasks.",
    ]


def project_table(
    funnels: list[dict[str, Any]],
    base: dict[str, Any],
    tasks: list[dict[str, Any]],
    per_project: int,
) -> list[str]:
    text = (ROOT / "tasks/sandbox/real_projects.jsonl").read_text()
    pins = [json.loads(x) for x in text.splitlines() if x.strip()]
    by = {f["project"].rsplit("-", 1)[0]: f for f in funnels}
    levels: dict[str, Counter[str]] = defaultdict(Counter)
    for t in tasks:
        levels[t["spec"]["project"]][t["difficulty"]] += 1
    head = ["project", "version", "license", "split", "stable tests", "drifting tests"]
    head += ["seeds tried", "worker-seconds", "tasks asked", "tasks", "easy/medium/hard"]
    body = []
    for p in pins:
        name, f, b = p["name"], by.get(p["name"]), base.get(p["name"], {})
        split = "ood" if p.get("split") == "ood" else "train/test"
        mix = "/".join(str(levels[name][k]) for k in LEVELS)
        asked = p.get("tasks") or per_project  # its pin's own number, else the build's
        done = [f["tried"], f["seconds"], asked, f["kept"]] if f else ["-", "-", "-", 0]
        body.append([name, p["version"], p["license"], split, b.get("stable", "-"),
                     b.get("drifting", "-"), *done, mix])  # fmt: skip
    return ["### Per project", "", *_table(head, body)]


def split_table(tasks: list[dict[str, Any]]) -> list[str]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for t in tasks:
        counts[t["split"]][t["difficulty"]] += 1
    body = [[s, *(counts[s][k] for k in LEVELS), sum(counts[s].values())]
            for s in ("train", "test", "ood")]  # fmt: skip
    bugs = Counter(len(t["spec"]["sites"]) for t in tasks)
    kinds = Counter(site["kind"].replace("_", " ") for t in tasks for site in t["spec"]["sites"])
    return [
        "### Splits and difficulty",
        "",
        *_table(["split", *LEVELS, "all"], body),
        "",
        "Bugs per task: " + ", ".join(f"{n} in {bugs[n]}" for n in sorted(bugs)) + ".",
        "Kinds of bug: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + ".",
    ]


def time_table(sweep: dict[str, Any]) -> list[str]:
    rows = sweep["rows"]
    summary = sweep["summary"]["overall"]
    out = [
        f"Over all {summary['tasks']} tasks: oracle {summary['oracle_success']:.2f}, "
        f"doing nothing {summary['noop_success']:.2f}.",
        "",
    ]
    steps = [
        ("first reset of a task (its workspace template built)", "reset_first_ms", "ms"),
        ("reset (a copy of the template)", "reset_ms", "ms"),
        ("an edit step", "edit_ms", "ms"),
        ("grading the oracle's fix (`submit()`)", "grade_s", "s"),
        ("grading the base (`submit()` with nothing done)", "noop_grade_s", "s"),
    ]
    body = []
    for name, key, unit in steps:
        values = sorted(r[key] for r in rows if r.get(key) is not None)
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        cells = [statistics.median(values), p95, values[-1]]
        body.append([name, *(f"{v:.1f} ms" if unit == "ms" else f"{v:.2f} s" for v in cells)])
    return out + _table(["step", "median", "95th percentile", "max"], body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, default=ROOT / "tasks/sandbox/repofix_real.jsonl.gz")
    args = parser.parse_args()
    funnels = json.loads((HERE / "funnel.json").read_text())
    base = json.loads((HERE / "baseline.json").read_text())
    tasks = _tasks(args.tasks)
    with gzip.open(args.tasks, "rt", encoding="utf-8") as fh:
        per_project = json.loads(fh.readline())["per_project"]  # the header
    parts = [
        funnel_table(funnels), project_table(funnels, base, tasks, per_project),
        split_table(tasks),
    ]  # fmt: skip
    sweep = HERE / "sweep.json"
    if sweep.is_file():
        parts.append(time_table(json.loads(sweep.read_text())))
    print("\n\n".join("\n".join(p) for p in parts))


if __name__ == "__main__":
    main()
