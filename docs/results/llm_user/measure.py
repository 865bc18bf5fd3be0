"""Measure the LLM user of Retail and Calendar on the smoke and standard suites (issue 30).

Three commands (run from the repository root with the project's venv):

``record``: serve the embedded model (SmolLM2-135M-Instruct, ``agentgym serve``'s
in-process server; ``--base-url``: any OpenAI-compatible endpoint instead) and play
agents on a suite's (``--suite``) Retail and Calendar tasks with ``user="llm"``: the
oracle, and a scripted agent that phrases its messages unlike the templates
(``paraphrase``), with the keyword or the LLM reader. Every call of the user goes into
a cassette; each episode's row (outcome, voice first-draw passes, fallbacks, failures,
reader counts, transcript) is printed and appended to ``--record-out``.

``measure``: replay every recorded episode offline from the cassette, play the same
agents against the template user over ``--seeds``, and write ``results.json`` and
``results.md`` (``--out``): success, pass^k over the trials, its spread over trials and
over tasks, for the template user, the live LLM voice and its replay side by side.

``reading``: how well the LLM reader reads the oracle's messages on easy train tasks,
reworded by ``reword``, against the keyword reading of their original wording (per
act, for the keyword reader, the model alone and their union); writes ``reading.json``
(``--out``). ``--base-url replay`` replays its cassette offline.

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
from agentgym_envs.business.reading import (  # noqa: E402
    ReadingError,
    parse_reading,
    reader_messages,
    reading_schema,
    spans_in,
)
from agentgym_envs.business.user_model import (  # noqa: E402
    LLMUserConfig,
    UserModel,
    UserSimulatorError,
)
from agentgym_envs.business.voice import call_seed  # noqa: E402
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


def suite_tasks(name: str) -> list[tuple[str, str]]:
    """(env id, task id) of a suite's business tasks."""
    suite = load_suite(name)
    return [
        (ENVS[e.env], task_id)
        for e in suite.entries
        if e.env in ENVS
        for task_id in e.task_ids(suite.seed)
    ]


def reword(text: str) -> str:
    """``text`` worded unlike the templates' cues (see ``PARAPHRASES``)."""
    for pattern, repl in PARAPHRASES:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    return text


def paraphrase(action: str) -> str:
    """The oracle's action with its messages worded unlike the templates' cues."""
    return reword(action) if action.startswith("respond(") else action


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
    server, url = serve(args.model) if args.base_url is None else (None, args.base_url)
    out = args.record_out
    rows = json.loads(out.read_text()) if out.exists() else []
    try:
        for agent in args.agents:
            for reader in args.readers:
                for env_id, task_id in suite_tasks(args.suite):
                    for seed in args.seeds:
                        kwargs = llm_kwargs(args, url, "record", reader, args.structured)
                        row = play(env_id, task_id, seed, agent, **kwargs)
                        row.update(
                            suite=args.suite, mode="live", reader=reader, draws=args.draws,
                            max_tokens=args.max_tokens, structured=args.structured,
                        )  # fmt: skip
                        rows.append(row)
                        out.write_text(json.dumps(rows, indent=1) + "\n")
                        print(
                            json.dumps({k: v for k, v in row.items() if k != "transcript"}),
                            flush=True,
                        )
    finally:
        if server is not None:
            server.close()
    print(f"wrote {out}")


def unique(live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live rows, one per episode and settings (the last recorded: ``record``
    appends, and the same episode twice is one trial, not two)."""
    keyed = {}
    for row in live:
        key = (row["suite"], row["agent"], row["reader"], row["structured"], row["draws"])
        keyed[(*key, row["max_tokens"], row["task"], row["seed"])] = row
    if len(keyed) < len(live):
        print(f"measure: {len(live) - len(keyed)} repeated live rows left out", flush=True)
    return list(keyed.values())


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
    live = unique(json.loads(args.record_out.read_text()))
    rows = []
    for suite in dict.fromkeys(r["suite"] for r in live):
        for env_id, task_id in suite_tasks(suite):
            for agent in args.agents:
                for seed in args.seeds:
                    row = play(env_id, task_id, seed, agent)
                    rows.append({**row, "suite": suite, "mode": "template", "reader": "-"})
    for rec in live:
        args.draws, args.max_tokens = rec["draws"], rec["max_tokens"]
        structured = rec["structured"]
        kwargs = llm_kwargs(args, None, "replay", rec["reader"], structured)
        row = play(rec["env"], rec["task"], rec["seed"], rec["agent"], **kwargs)
        row.update(suite=rec["suite"], mode="replay", reader=rec["reader"])
        row.update(structured=structured, draws=rec["draws"], max_tokens=rec["max_tokens"])
        row["same_as_live"] = row["transcript"] == rec["transcript"]
        rows.append(row)
    rows += live
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k not in ("transcript", "user_llm")}))
    summary = summarise(rows)
    kept = [{k: v for k, v in r.items() if k != "transcript"} for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"rows": kept, "summary": summary}, indent=1))
    (args.out / "results.md").write_text(table(summary) + "\n")
    print(table(summary))


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        reader = row["reader"]
        if reader == "llm":  # with the reading's schema as response_format, or without
            reader = "llm+schema" if row.get("structured", False) else "llm, free text"
        if row["mode"] != "template":  # settings apart are groups apart
            reader += f" (draws {row['draws']}, {row['max_tokens']} tokens)"
        groups.setdefault((row["suite"], row["agent"], row["mode"], reader), []).append(row)
    out = []
    order = {"smoke": 0, "standard": 1}
    for (suite, agent, mode, reader), group in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], 2), *kv[0][1:])
    ):
        by_task: dict[str, list[bool]] = {}
        for row in group:
            by_task.setdefault(row["task"], []).append(row["outcome"] == "success")
        k = min(len(v) for v in by_task.values())  # trials (seeds) per task
        per_task = [pass_hat_k(v, k) for v in by_task.values()]
        rates = [sum(v) / len(v) for v in by_task.values()]
        # the spread of each task's success over its trials (seeds: each seeds the user's
        # wording and, live, its sampling), averaged over tasks; None with one trial
        trial_sd = (
            statistics.fmean(statistics.pstdev(v) for v in by_task.values()) if k > 1 else None
        )
        voice = [r["user_llm"]["voice"] for r in group if r.get("user_llm")]
        replies = sum(v["replies"] for v in voice)
        out.append(
            {
                "suite": suite,
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
                "trial_sd": trial_sd,
                "task_success_sd": statistics.pstdev(rates) if len(rates) > 1 else 0.0,
                "seconds": statistics.median(r["seconds"] for r in group),
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


ACTS = ("asks", "proposing", "unavailable", "done", "refusing")
"""The acts the user answers (verbs are words the message names, read literally)."""


def reading_items(tasks: int) -> list[dict[str, Any]]:
    """The oracle's messages on the first ``tasks`` easy train tasks of each domain
    (never the suites' test tasks), reworded by ``reword``, each with the keyword
    reading of the original wording: what a reader should read in the reworded one."""
    items = []
    for env_id in ENVS.values():
        env = gym.make(env_id)
        user_env: Any = env.unwrapped
        for task in user_env.task_set.pool("train", "easy")[:tasks]:
            env.reset(seed=0, options={"task_id": task.id})
            oracle, said = user_env.oracle(), []
            while True:
                action = oracle.act()
                if action.startswith("respond(message="):
                    said.append(json.loads(action[len("respond(message=") : -1]))
                _, _, term, trunc, _ = env.step(action)
                if term or trunc:
                    break
            user = user_env.user
            for message in said:
                reworded = reword(message)
                items.append(
                    {
                        "env": env_id,
                        "task": user_env.task.id,
                        "message": reworded,
                        "truth": user.read(message),
                        "keyword": user.read(reworded),
                        "slots": tuple(user.synonyms),
                        "verbs": user.verbs,
                    }
                )
        env.close()
    return items


def read_one(model: Any, i: int, item: dict[str, Any]) -> tuple[Any, str]:
    """The model's reading of one item (None and why where it fails or is refused, as
    the env then keeps the keyword reading)."""
    message, slots, verbs, keyword = item["message"], item["slots"], item["verbs"], item["keyword"]
    spans = spans_in(message, (*keyword.values, *keyword.answer))
    try:
        raw = model.complete(
            "reader", reader_messages(message, slots, verbs), call_seed(i, "reading"),
            reading_schema(slots, verbs, spans),
        )  # fmt: skip
        return parse_reading(raw, message, slots, verbs), ""
    except (UserSimulatorError, ReadingError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def reading(args: argparse.Namespace) -> None:
    """How well the LLM reader reads reworded messages, against the keyword reader:
    each act right per message, for the keyword reading, the model's alone and their
    union (what the user acts on)."""
    items = reading_items(args.tasks)
    replay = args.base_url == "replay"
    server, url = (None, None) if replay else serve(args.model) if args.base_url is None else (
        None, args.base_url)  # fmt: skip
    model = UserModel(LLMUserConfig(
        model=args.model, base_url=url, max_tokens=args.max_tokens, retries=0,
        timeout_s=args.timeout_s, structured=args.structured, cassette=str(args.cassette),
        cassette_mode="replay" if replay else "record",
    ))  # fmt: skip
    right = {name: dict.fromkeys((*ACTS, "all acts"), 0) for name in ("keyword", "llm", "union")}
    rows = []
    try:
        for i, item in enumerate(items):
            keyword, truth = item["keyword"], item["truth"]
            llm, why = read_one(model, i, item)
            union = keyword if llm is None else keyword.merged(llm, item["slots"])
            for name, got in (("keyword", keyword), ("llm", llm), ("union", union)):
                wrong = (
                    list(ACTS) if got is None else [a for a in ACTS if a in truth.differences(got)]
                )
                for act in ACTS:
                    right[name][act] += act not in wrong
                right[name]["all acts"] += not wrong
            row = {k: item[k] for k in ("env", "task", "message")}
            rows.append({**row, "truth": truth.as_dict(), "llm": llm.as_dict() if llm else why})
            print(f"read {i + 1}/{len(items)}", flush=True)
    finally:
        if server is not None:
            server.close()
    n = len(items)
    summary = {
        "model": args.model, "messages": n, "tasks_per_domain": args.tasks,
        "llm_readings_that_fit": sum(isinstance(r["llm"], dict) for r in rows),
        "accuracy": {name: {k: v / n for k, v in acts.items()} for name, acts in right.items()},
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reading.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary, indent=1))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def table(summary: list[dict[str, Any]]) -> str:
    names = ["suite", "agent", "user", "reader", "episodes", "success", "env_error", "k"]
    names += ["pass^k", "sd over trials", "sd over tasks", "s/episode", "voice replies"]
    names += ["first-draw pass", "fallback", "failures"]
    names += ["reads", "read fallbacks", "disagreements", "replay = live"]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    keys = ["suite", "agent", "mode", "reader", "episodes", "success", "env_error", "k"]
    keys += ["pass^k", "trial_sd", "task_success_sd", "seconds", "voice_replies"]
    keys += ["first_draw_pass", "fallback", "failures"]
    keys += ["reads", "read_fallbacks", "disagreements", "replay_same_as_live"]
    for row in summary:
        lines.append("| " + " | ".join(_fmt(row[c]) for c in keys) + " |")
    return "\n".join(lines)


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("record", "measure", "reading"))
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--cassette", type=Path, default=ROOT / "tests/business/data/smoke_user.cassette.jsonl"
    )
    parser.add_argument("--suite", default="smoke", choices=("smoke", "standard"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--draws", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    parser.add_argument("--readers", nargs="+", default=["keyword"], choices=["keyword", "llm"])
    parser.add_argument(
        "--record-out",
        type=Path,
        default=HERE / "live.json",
        help="the live rows: record appends to it, measure replays it",
    )
    parser.add_argument(
        "--base-url",
        help="record, reading: an OpenAI-compatible endpoint serving --model (default: "
        "serve the model here in-process; reading: 'replay' replays --cassette offline)",
    )
    parser.add_argument("--tasks", type=int, default=8, help="reading: easy train tasks per domain")
    parser.add_argument(
        "--out", type=Path, default=HERE, help="measure, reading: where the results go"
    )
    parser.add_argument(
        "--structured",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record: the LLM reader asks for its schema as response_format",
    )
    return parser


def main() -> None:
    args = main_parser().parse_args()
    {"record": record, "measure": measure, "reading": reading}[args.command](args)


if __name__ == "__main__":
    main()
