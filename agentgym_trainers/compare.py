"""Compare learning runs against a baseline: success per wall-clock second and per token.

``python -m agentgym_trainers.compare --out docs/results/credit NAME=DIR[:ALGO] ...`` reads
learn output folders (``DIR`` holds the ``summary.json`` and ``metrics.jsonl`` that
:mod:`agentgym_trainers.learn` wrote for one recipe; ``ALGO`` picks the result key inside
it, default the summary's ``primary``). The first entry is the baseline. It writes to
``--out``:

* ``summary.json``: per entry, its source folder and the commands that produced it, its
  overrides, the held-out success after SFT and after RL (95% task-bootstrap and Wilson
  intervals, sampled and greedy), RL steps and seconds, the tokens sampled in RL, and the
  after-RL success minus the baseline's with a paired 95% interval over tasks;
* ``curves.png``: training success (rolling mean) against the cumulative wall-clock
  seconds of RL and against the cumulative sampled tokens, and the after-RL held-out
  success of each entry with its interval;
* ``README.md``: a table and one sentence per entry, generated from the summary, that says
  whether its paired interval lies above 0 (it helped), includes 0 or lies below 0 (it
  did not help).

Sampled tokens are each RL row's ``generated_tokens``: the sampler's count over the whole
step, which already includes the tokens of branch rollouts (``--branch``; the brancher
samples with the trainer's own sampler), so ``branch_tokens`` is reported next to it and
never added to it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.metrics import wilson_interval
from agentgym_trainers.learn import paired_difference
from agentgym_trainers.learn_report import smooth
from agentgym_trainers.runlog import read_metrics

RESULTS = Path("docs/results/credit")
PHASE_KEYS = ("success", "ci95", "wilson95", "n", "tasks", "split", "temperature")


@dataclass(frozen=True)
class Entry:
    """One run to compare: its name, its learn output folder and the result key in it
    (None: the summary's primary)."""

    name: str
    folder: Path
    algo: str | None = None


def parse_entry(text: str) -> Entry:
    """``NAME=DIR[:ALGO]`` as an :class:`Entry`.

    Raises:
        ConfigError: no ``=``, or an empty name or folder.
    """
    name, sep, rest = text.partition("=")
    folder, colon, algo = rest.rpartition(":")
    if not colon or "/" in algo:  # no ALGO (a colon inside the path is not one)
        folder, algo = rest, ""
    if not sep or not name or not folder:
        raise ConfigError(
            f"an entry is NAME=DIR[:ALGO], got {text!r} "
            "(e.g. grpo=docs/results/cpu/frozenlake or ppo=docs/results/cpu/frozenlake:ppo)"
        )
    return Entry(name, Path(folder), algo or None)


def load(entry: Entry) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The entry's folder summary, its algorithm's result and its RL rows (by step).

    Raises:
        ConfigError: a missing folder, summary, metrics file, algorithm or RL rows.
    """
    path = entry.folder / "summary.json"
    if not path.is_file():
        inside = sorted(p.parent.name for p in entry.folder.glob("*/summary.json"))
        hint = (
            f"; pass a recipe folder inside it, e.g. {entry.name}={entry.folder / inside[0]}"
            if inside
            else "; run `python -m agentgym_trainers.learn <recipe> --out DIR` first"
        )
        raise ConfigError(f"entry {entry.name!r}: no summary.json in {entry.folder}{hint}")
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"entry {entry.name!r}: {path} is not JSON ({err}); rebuild it") from err
    if not isinstance(summary, dict) or not summary.get("algos"):
        raise ConfigError(
            f"entry {entry.name!r}: {path} is not a learn summary (no 'algos'); pass a folder "
            "written by `python -m agentgym_trainers.learn`"
        )
    algo = entry.algo or summary.get("primary") or next(iter(summary["algos"]))
    if algo not in summary["algos"]:
        raise ConfigError(
            f"entry {entry.name!r}: {entry.folder} has no results for {algo!r}; "
            f"write {entry.name}={entry.folder}:ALGO with ALGO one of {sorted(summary['algos'])}"
        )
    metrics = entry.folder / "metrics.jsonl"
    if not metrics.is_file():
        raise ConfigError(
            f"entry {entry.name!r}: no metrics.jsonl in {entry.folder}; rebuild the folder "
            "with `python -m agentgym_trainers.learn <recipe> --from-runs`"
        )
    rows = [r for r in read_metrics(metrics) if r.get("algo") == algo and r.get("phase") == "rl"]
    if not rows:
        raise ConfigError(
            f"entry {entry.name!r}: {metrics} has no RL rows of {algo!r}; "
            "rebuild the folder with `python -m agentgym_trainers.learn <recipe> --from-runs`"
        )
    for row in rows:
        missing = [
            k for k in ("step", "success", "time_step_s", "generated_tokens") if k not in row
        ]
        if missing:
            raise ConfigError(
                f"entry {entry.name!r}: RL row {row.get('step')} of {metrics} lacks {missing}; "
                "these rows come from an older trainer, rerun the recipe"
            )
    return summary, {"algo": algo, **summary["algos"][algo]}, sorted(rows, key=lambda r: r["step"])


def _phase(phase: dict[str, Any]) -> dict[str, Any]:
    """A held-out phase without its per-task outcomes, with its greedy twin (or None)."""
    out = {k: phase.get(k) for k in PHASE_KEYS}
    greedy = phase.get("greedy")
    out["greedy"] = {k: greedy.get(k) for k in PHASE_KEYS} if greedy else None
    return out


def verdict(low: float, high: float) -> str:
    """Where a paired 95% interval lies: ``"above 0"``, ``"below 0"`` or ``"includes 0"``."""
    return "above 0" if low > 0 else "below 0" if high < 0 else "includes 0"


def _versus(mine: dict[str, Any] | None, base: dict[str, Any] | None) -> dict[str, Any] | None:
    """After-RL success minus the baseline's, paired by task, or None if one is missing."""
    if not mine or not base:
        return None
    diff, low, high = paired_difference(base["per_task"], mine["per_task"])
    low, high = round(low, 4), round(high, 4)
    tasks = len(set(base["per_task"]) & set(mine["per_task"]))
    return {
        "diff": round(diff, 4),
        "ci95": [low, high],
        "tasks": tasks,
        "verdict": verdict(low, high),
    }


def entry_result(
    entry: Entry,
    summary: dict[str, Any],
    result: dict[str, Any],
    rows: Sequence[dict[str, Any]],
    baseline: dict[str, Any] | None,
) -> dict[str, Any]:
    """One entry of ``summary.json`` (``baseline``: the first entry's algorithm result, or
    None for the first entry itself)."""
    end = result["after_rl"]
    if not end.get("per_task"):
        raise ConfigError(
            f"entry {entry.name!r}: its after-RL evaluation has no per-task outcomes, so it "
            "cannot be paired; rebuild it with `python -m agentgym_trainers.learn <recipe> "
            "--from-runs` from runs of the current trainer"
        )
    versus: dict[str, Any] | None = None
    same_start = True
    if baseline is not None:
        base_end = baseline["after_rl"]
        if not set(end["per_task"]) & set(base_end["per_task"]):
            raise ConfigError(
                f"entry {entry.name!r} shares no held-out task with the baseline "
                f"({end.get('split')} vs {base_end.get('split')}); compare runs evaluated on "
                "the same split of the same env"
            )
        versus = {
            "sampled": _versus(end, base_end),
            "greedy": _versus(end.get("greedy"), base_end.get("greedy")),
        }
        same_start = result["after_sft"].get("per_task") == baseline["after_sft"].get("per_task")
    return {
        "name": entry.name,
        "source": str(entry.folder),
        "algo": result["algo"],
        "recipe": summary.get("recipe"),
        # the command of this result (learn records one per result), else the folder's
        "commands": [result["command"]]
        if result.get("command")
        else list(summary.get("commands", [])),
        "overrides": summary.get("config", {}).get("overrides", {}),
        "after_sft": _phase(result["after_sft"]),
        "after_rl": _phase(end),
        "rl_steps": int(result.get("rl_steps", len(rows))),
        "rl_seconds": float(result.get("rl_seconds", 0.0)),
        "rl_step_seconds": round(sum(float(r["time_step_s"]) for r in rows), 1),
        "sampled_tokens": int(sum(float(r["generated_tokens"]) for r in rows)),
        "branch_tokens": int(sum(float(r.get("branch_tokens", 0.0)) for r in rows)),
        "same_sft_start": same_start,
        "platform": result.get("platform"),
        "vs_baseline": versus,
    }


def compare(
    entries: Sequence[Entry], out: Path, command: str = "", window: int = 5
) -> dict[str, Any]:
    """Write ``summary.json``, ``curves.png`` and ``README.md`` comparing ``entries`` (the
    first is the baseline) to ``out``; returns the summary.

    Raises:
        ConfigError: fewer than two entries, a repeated name, or an entry that
            :func:`load` or :func:`entry_result` rejects.
    """
    if len(entries) < 2:
        raise ConfigError(
            f"a comparison needs a baseline and at least one other entry, got {len(entries)}"
        )
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"entry names must differ, got {names}")
    results, curves = [], {}
    baseline: dict[str, Any] | None = None
    for entry in entries:
        summary, result, rows = load(entry)
        results.append(entry_result(entry, summary, result, rows, baseline))
        baseline = baseline or result
        curves[entry.name] = rows
    report = {
        "command": command,
        "baseline": entries[0].name,
        "window": window,
        "entries": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, curves, out / "curves.png")
    (out / "README.md").write_text(markdown(report))
    return report


def _cell(phase: dict[str, Any] | None) -> str:
    if not phase:
        return "-"
    low, high = phase["ci95"]
    return f"{phase['success']:.3f} [{low:.3f}, {high:.3f}]"


def _diff_cell(versus: dict[str, Any] | None) -> str:
    if not versus:
        return "-"
    low, high = versus["ci95"]
    return f"{versus['diff']:+.3f} [{low:+.3f}, {high:+.3f}]"


def sentence(entry: dict[str, Any], baseline: dict[str, Any], decoding: str = "sampled") -> str:
    """The honest reading of one entry's paired difference vs the baseline: it helped only
    when the interval lies above 0; otherwise it did not help (measurably, or at all)."""
    name, base = entry["name"], baseline["name"]
    versus = (entry["vs_baseline"] or {}).get(decoding)
    if versus is None:
        return f"{name} vs {base} ({decoding}): no {decoding} evaluation to compare."
    where = versus["verdict"]
    lies = "" if where == "includes 0" else "lies "
    reading = {
        "above 0": f"so {name} helped",
        "includes 0": f"so {name} did not help measurably over {base}",
        "below 0": f"so {name} did not help: it did worse than {base}",
    }[where]
    return (
        f"{name} vs {base} ({decoding}): held-out success after RL differs by "
        f"{_diff_cell(versus)} over {versus['tasks']} paired tasks; "
        f"the 95% interval {lies}{where}, {reading}."
    )


def _cost(entry: dict[str, Any], baseline: dict[str, Any]) -> str:
    def ratio(key: str) -> str:
        return f"{entry[key] / baseline[key]:.2f}x" if baseline[key] else "-"

    text = (
        f"It sampled {ratio('sampled_tokens')} the baseline's tokens in RL and ran "
        f"{ratio('rl_step_seconds')} its RL seconds."
    )
    if not entry["same_sft_start"]:
        text += (
            " Its after-SFT outcomes differ from the baseline's, so the difference after RL is "
            "not RL's alone."
        )
    return text


def platform_text(info: dict[str, Any] | None) -> str:
    """One line naming the platform a result ran on (``agentgym_trainers.provenance``)."""
    if not info:
        return "not recorded (the result predates platform records)"
    packages = ", ".join(f"{k} {v}" for k, v in info.get("packages", {}).items() if v)
    threads = info.get("torch_threads")
    return (
        f"{info.get('cpu', '?')} ({info.get('cpu_capability', '?')}), {info.get('device', '?')}, "
        f"{threads} torch thread{'s' if threads != 1 else ''}, {packages}"
    )


def markdown(report: dict[str, Any]) -> str:
    """``README.md`` of a comparison, generated from its summary (never typed)."""
    entries = report["entries"]
    base = entries[0]
    lines = [
        "# Learning runs compared with a baseline",
        "",
        "Generated by `agentgym_trainers.compare` from `summary.json`:",
        "",
        f"    {report['command']}",
        "",
        f"Baseline: {base['name']}. Held-out success after SFT and after RL with 95% "
        "task-bootstrap intervals; 'diff' is the after-RL success minus the baseline's, "
        "paired by task, with a 95% task-bootstrap interval; 'greedy' the same policies "
        "decoded greedily. RL s is the sum of the RL steps' wall-clock seconds; sampled "
        "tokens are all tokens generated in RL, branch rollouts included.",
        "",
        "| entry | after SFT | after RL [CI] | diff vs baseline [CI] | greedy after RL [CI] "
        "| greedy diff [CI] | steps | RL s | sampled tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        versus = e["vs_baseline"] or {}
        lines.append(
            f"| {e['name']} | {_cell(e['after_sft'])} | {_cell(e['after_rl'])} "
            f"| {_diff_cell(versus.get('sampled'))} | {_cell(e['after_rl']['greedy'])} "
            f"| {_diff_cell(versus.get('greedy'))} | {e['rl_steps']} "
            f"| {e['rl_step_seconds']:.0f} | {e['sampled_tokens']:,} |"
        )
    lines += ["", "## What helped", ""]
    for e in entries[1:]:
        lines += [
            f"- {sentence(e, base)} {sentence(e, base, 'greedy')} {_cost(e, base)}",
        ]
    lines += ["", "![curves](curves.png)", "", "## Sources", ""]
    sources: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        sources.setdefault(e["source"], []).append(e)
    for source, group in sources.items():
        names = ", ".join(f"{e['name']} (`{e['algo']}`)" for e in group)
        overrides = json.dumps(group[0]["overrides"]) if group[0]["overrides"] else "none"
        lines += [f"`{source}`, overrides {overrides}: {names}", ""]
        lines += [f"Platform: {platform_text(group[0]['platform'])}.", ""]
        commands = dict.fromkeys(c for e in group for c in e["commands"])
        lines += [*[f"    {c}" for c in commands], ""]
    return "\n".join(lines)


def plot(
    report: dict[str, Any], curves: Mapping[str, Sequence[dict[str, Any]]], path: Path
) -> Path:
    """Training success vs cumulative RL seconds and vs cumulative sampled tokens, one
    line per entry, and each entry's after-RL held-out success with its interval."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.2))
    FigureCanvasAgg(fig)
    time_ax, token_ax, eval_ax = fig.subplots(1, 3)
    window = int(report.get("window", 5))
    for i, entry in enumerate(report["entries"]):
        rows, color = curves[entry["name"]], f"C{i}"
        success = smooth([float(r["success"]) for r in rows], window)
        seconds, tokens = _cumsum(rows, "time_step_s"), _cumsum(rows, "generated_tokens")
        time_ax.plot(seconds, success, color=color, label=entry["name"])
        token_ax.plot(tokens, success, color=color, label=entry["name"])
        band = window_band(rows, window)
        if band is not None:
            time_ax.fill_between(seconds, *band, color=color, alpha=0.15, lw=0)
            token_ax.fill_between(tokens, *band, color=color, alpha=0.15, lw=0)
        for j, (phase, marker) in enumerate(
            ((entry["after_rl"], "o"), (entry["after_rl"]["greedy"], "s"))
        ):
            if phase:
                low, high = phase["ci95"]
                y = phase["success"]
                eval_ax.errorbar(
                    [i + (j - 0.5) * 0.3],
                    [y],
                    yerr=[[y - low], [high - y]],
                    fmt=marker,
                    color=color,
                    capsize=4,
                    mfc=color if j == 0 else "white",
                )
    title = (
        f"training success (rolling mean of {window} steps;\n"
        "band: 95% Wilson over the window's episodes)"
    )
    time_ax.set(title=title, xlabel="cumulative RL wall-clock s")
    token_ax.set(title=title, xlabel="cumulative sampled tokens")
    start = report["entries"][0]["after_sft"]
    eval_ax.axhline(start["success"], color="gray", ls=":", label="baseline after SFT")
    eval_ax.legend(loc="upper right")
    names = [e["name"] for e in report["entries"]]
    eval_ax.set_xticks(range(len(names)), names, rotation=20)
    eval_ax.set(
        title="held-out success after RL, 95% task bootstrap\n(filled: sampled, hollow: greedy)",
        ylim=(0, 1),
    )
    for ax in (time_ax, token_ax):
        ax.legend()
    for ax in (time_ax, token_ax, eval_ax):
        ax.grid(alpha=0.3)
    fig.suptitle(f"compared against {report['baseline']}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return path


def window_band(
    rows: Sequence[dict[str, Any]], window: int
) -> tuple[list[float], list[float]] | None:
    """The 95% Wilson interval of the training success pooled over the episodes of the
    rolling window that ends at each step (as the plotted mean, fewer steps at the
    start); None when the rows do not count their episodes. A group's episodes share a
    task, so they are not independent: the band is a lower bound on the uncertainty."""
    if not rows or any("episodes" not in r for r in rows):
        return None
    wins = [round(float(r["success"]) * float(r["episodes"])) for r in rows]
    counts = [int(float(r["episodes"])) for r in rows]
    low, high = [], []
    for i in range(len(rows)):
        first = max(0, i - window + 1)
        lo, hi = wilson_interval(sum(wins[first : i + 1]), sum(counts[first : i + 1]))
        low.append(lo)
        high.append(hi)
    return low, high


def _cumsum(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    out, total = [], 0.0
    for row in rows:
        total += float(row[key])
        out.append(total)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym_trainers.compare", description=__doc__
    )
    parser.add_argument(
        "entries",
        nargs="+",
        metavar="NAME=DIR[:ALGO]",
        help="learn output folders; first: baseline",
    )
    parser.add_argument("--out", default=str(RESULTS), help="comparison folder")
    parser.add_argument("--window", type=int, default=5, help="rolling mean of the curves (steps)")
    args = parser.parse_args(argv)
    if args.window < 1:
        raise ConfigError(f"--window must be at least 1 step, got {args.window}")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = shlex.join(["python", "-m", "agentgym_trainers.compare", *argv])
    compare([parse_entry(e) for e in args.entries], Path(args.out), command, args.window)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
