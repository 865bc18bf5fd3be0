"""Measure the LLM user of Retail and Calendar on the smoke suite (issue 30).

Two commands (run from the repository root with the project's venv):

``record``: serve the embedded model (SmolLM2-135M-Instruct, ``agentgym serve``'s
in-process server) and play the oracle on the smoke suite's Retail and Calendar tasks
with ``user="llm"``, recording every call of the user into a cassette; prints and
writes per-episode counters (voice first-draw passes, fallbacks, failures, outcome).

``measure``: play agents x readers x user modes x seeds and write ``results.json`` and
``results.md`` beside this file: the oracle and a scripted agent that phrases its
messages unlike the templates (``paraphrase``), with the keyword and the LLM reader;
the template user, the LLM voice replayed from the cassette and (``--live``) the LLM
voice against the served model; pass^k over the seeds and its spread.

See README.md beside this file for the exact commands and their results.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import agentgym_envs  # noqa: E402,F401  (registers the envs)
from agentgym_envs.eval.suite import load_suite  # noqa: E402

HERE = Path(__file__).resolve().parent
ENVS = {"Retail": "agentgym/Retail-v1", "Calendar": "agentgym/Calendar-v2"}

# how the paraphrasing agent words what the oracle says: no template cue survives
PARAPHRASES = (
    (
        r"could you please tell me the email address on your account\?",
        "I need the email on your account to look you up.",
    ),
    (r"Shall I proceed\?", "Just say the word and I will do it."),
    (
        r"has been (requested|cancelled|canceled|modified|updated|done|completed|made)",
        r"went through",
    ),
)


def smoke_tasks() -> list[tuple[str, str]]:
    """(env id, task id) of the smoke suite's business tasks."""
    suite = load_suite("smoke")
    return [
        (ENVS[e.env], task_id)
        for e in suite.entries
        if e.env in ENVS
        for task_id in e.task_ids(suite.seed)
    ]


def paraphrase(action: str) -> str:
    """The oracle's action with its messages worded unlike the templates' cues."""
    if not action.startswith("respond("):
        return action
    for pattern, repl in PARAPHRASES:
        action = re.sub(pattern, repl, action, flags=re.IGNORECASE)
    return action


AGENTS: dict[str, Callable[[str], str]] = {"oracle": lambda a: a, "paraphrase": paraphrase}


def play(env_id: str, task_id: str, seed: int, agent: str, **kwargs: Any) -> dict[str, Any]:
    """One episode of ``agent`` (the oracle's plan, maybe reworded); its record."""
    env = gym.make(env_id, **kwargs)
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id})
        oracle = env.unwrapped.oracle()
        transcript = [obs]
        start = time.perf_counter()
        while True:
            obs, _, term, trunc, info = env.step(AGENTS[agent](oracle.act()))
            transcript.append(obs)
            if term or trunc:
                break
        return {
            "env": env_id,
            "task": task_id,
            "seed": seed,
            "agent": agent,
            "outcome": info["outcome"].value,
            "user_llm": info.get("user_llm"),
            "seconds": round(time.perf_counter() - start, 1),
            "transcript": transcript,
        }
    finally:
        env.close()


def serve(model: str) -> tuple[Any, str]:
    from agentgym_envs.serving.server import start_server

    return start_server(model, device="cpu", model_id=model)


def llm_kwargs(
    args: argparse.Namespace, url: str | None, mode: str, reader: str, structured: bool = True
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "user": "llm",
        "user_model": args.model,
        "user_reader": reader,
        "user_cassette": str(args.cassette),
        "user_cassette_mode": mode,
        "user_options": {
            "draws": args.draws,
            "max_tokens": args.max_tokens,
            "timeout_s": args.timeout_s,
            "retries": 0,  # a CPU-bound server: a retry would only queue the same work
            "structured": structured,
        },
    }
    if url is not None:
        kwargs["user_base_url"] = url
    return kwargs


def record(args: argparse.Namespace) -> None:
    server, url = serve(args.model)
    out = HERE / args.record_out
    rows = json.loads(out.read_text()) if out.exists() else []
    try:
        for agent in args.agents:
            for reader in args.readers:
                for env_id, task_id in smoke_tasks():
                    for seed in args.seeds:
                        kwargs = llm_kwargs(args, url, "record", reader, args.structured)
                        row = play(env_id, task_id, seed, agent, **kwargs)
                        row.update(
                            mode="live", reader=reader, draws=args.draws,
                            max_tokens=args.max_tokens, structured=args.structured,
                        )  # fmt: skip
                        rows.append(row)
                        out.write_text(json.dumps(rows, indent=1) + "\n")
                        print(
                            json.dumps({k: v for k, v in row.items() if k != "transcript"}),
                            flush=True,
                        )
    finally:
        server.close()
    print(f"wrote {out}")


def pass_hat_k(successes: Sequence[bool], k: int) -> float:
    """pass^k of one task: the chance that k trials drawn without replacement all pass."""
    n, c = len(successes), sum(successes)
    if n < k:
        return float("nan")
    num, den = 1.0, 1.0
    for i in range(k):
        num *= c - i
        den *= n - i
    return max(0.0, num / den)


def measure(args: argparse.Namespace) -> None:
    """Template episodes for every agent and seed; replays of every recorded (live)
    episode from the cassette; the live rows as recorded."""
    live = json.loads((HERE / args.record_out).read_text())
    rows = []
    for env_id, task_id in smoke_tasks():
        for agent in args.agents:
            for seed in args.seeds:
                row = play(env_id, task_id, seed, agent)
                rows.append({**row, "mode": "template", "reader": "-"})
    for rec in live:
        args.draws, args.max_tokens = rec["draws"], rec["max_tokens"]
        # rows recorded before the reader asked for a schema have no "structured"
        structured = rec.get("structured", False)
        kwargs = llm_kwargs(args, None, "replay", rec["reader"], structured)
        row = play(rec["env"], rec["task"], rec["seed"], rec["agent"], **kwargs)
        row.update(mode="replay", reader=rec["reader"], structured=structured)
        row["same_as_live"] = row["transcript"] == rec["transcript"]
        rows.append(row)
    rows += live
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k not in ("transcript", "user_llm")}))
    summary = summarise(rows)
    kept = [{k: v for k, v in r.items() if k != "transcript"} for r in rows]
    (HERE / "results.json").write_text(json.dumps({"rows": kept, "summary": summary}, indent=1))
    (HERE / "results.md").write_text(table(summary) + "\n")
    print(table(summary))


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        reader = row["reader"]
        if reader == "llm":  # with the reading's schema as response_format, or without
            reader = "llm+schema" if row.get("structured", False) else "llm, free text"
        groups.setdefault((row["agent"], row["mode"], reader), []).append(row)
    out = []
    for (agent, mode, reader), group in sorted(groups.items()):
        by_task: dict[str, list[bool]] = {}
        for row in group:
            by_task.setdefault(row["task"], []).append(row["outcome"] == "success")
        k = min(len(v) for v in by_task.values())  # trials (seeds) per task
        per_task = [pass_hat_k(v, k) for v in by_task.values()]
        rates = [sum(v) / len(v) for v in by_task.values()]
        voice = [r["user_llm"]["voice"] for r in group if r.get("user_llm")]
        replies = sum(v["replies"] for v in voice)
        out.append(
            {
                "agent": agent,
                "mode": mode,
                "reader": reader,
                "episodes": len(group),
                "success": sum(r["outcome"] == "success" for r in group) / len(group),
                "env_error": sum(r["outcome"] == "env_error" for r in group) / len(group),
                "k": k,
                "pass^k": statistics.fmean(per_task),
                "replay_same_as_live": (
                    all(r["same_as_live"] for r in group) if mode == "replay" else None
                ),
                "task_success_sd": statistics.pstdev(rates) if len(rates) > 1 else 0.0,
                "voice_replies": replies,
                "first_draw_pass": (sum(v["first_draw_pass"] for v in voice) / replies)
                if replies
                else None,
                "fallback": (sum(v["fallbacks"] for v in voice) / replies) if replies else None,
                "failures": sum(v["failures"] for v in voice),
                **_reader_counts(group),
            }
        )
    return out


def _reader_counts(group: list[dict[str, Any]]) -> dict[str, Any]:
    """The LLM reader's reads, those that fell back to the keyword reading (no reading
    fit the schema and the message in its draws) and disagreements with the keywords."""
    counts = [r["user_llm"]["reader"] for r in group if r.get("user_llm") and r["reader"] == "llm"]
    if not counts:
        return {"reads": None, "read_fallbacks": None, "disagreements": None}
    return {
        "reads": sum(c["reads"] for c in counts),
        "read_fallbacks": sum(c["fallbacks"] for c in counts),
        "disagreements": sum(c["disagreements"] for c in counts),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def table(summary: list[dict[str, Any]]) -> str:
    names = ["agent", "user", "reader", "episodes", "success", "env_error", "k", "pass^k"]
    names += ["sd over tasks", "voice replies", "first-draw pass", "fallback", "failures"]
    names += ["reads", "read fallbacks", "disagreements", "replay = live"]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    keys = ["agent", "mode", "reader", "episodes", "success", "env_error", "k", "pass^k"]
    keys += ["task_success_sd", "voice_replies", "first_draw_pass", "fallback", "failures"]
    keys += ["reads", "read_fallbacks", "disagreements", "replay_same_as_live"]
    for row in summary:
        lines.append("| " + " | ".join(_fmt(row[c]) for c in keys) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("record", "measure"))
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--cassette", type=Path, default=ROOT / "tests/business/data/smoke_user.cassette.jsonl"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--draws", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    parser.add_argument("--readers", nargs="+", default=["keyword"], choices=["keyword", "llm"])
    parser.add_argument(
        "--record-out", default="live.json", help="record: the rows file (appended)"
    )
    parser.add_argument("--live", action="store_true", help="also play against the served model")
    parser.add_argument(
        "--structured",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record: the LLM reader asks for its schema as response_format",
    )
    args = parser.parse_args()
    (record if args.command == "record" else measure)(args)


if __name__ == "__main__":
    main()
