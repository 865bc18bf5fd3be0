"""``agentgym traj``: list, show and export the episodes of a trajectory store.

Stored text is the agent's own (its actions, what the env echoed of them): ``ls`` and
``show`` print it through :func:`~agentgym_envs.console.terminal_text` as ``rich`` Text,
so control characters show as visible escapes and ``[markup]`` as written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentgym_envs.console import console, terminal_text
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.export import (
    HF_KINDS,
    TOOL_CALL_FORMATS,
    export_episodes,
    export_hf,
    export_preferences,
    export_sft,
)
from agentgym_envs.store import StoredEpisode, TrajectoryStore

FORMATS = ("sft", "preferences", "hf", "episodes-jsonl")
_ROLE_STYLE = {"system": "dim", "user": "cyan", "assistant": "green"}


def add_parser(sub: Any) -> None:
    """Add the ``traj`` subcommand to the ``agentgym`` parser."""
    p = sub.add_parser("traj", help="list, show and export episodes of a trajectory store")
    tsub = p.add_subparsers(dest="traj_command", required=True)

    ls = tsub.add_parser(
        "ls", help="list stored episodes (newest last; identical episodes are stored once)"
    )
    ls.add_argument("store", help="trajectory store file (.sqlite)")
    _add_filters(ls)
    ls.add_argument("--limit", type=int, default=50, help="show the newest N (0: all)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_ls)

    show = tsub.add_parser("show", help="render one episode in the terminal or as HTML")
    show.add_argument("store", help="trajectory store file (.sqlite)")
    show.add_argument("id", type=int, help="episode id (see `agentgym traj ls`)")
    show.add_argument("--html", metavar="PATH", help="also write a self-contained HTML page")
    show.set_defaults(func=cmd_show)

    ex = tsub.add_parser("export", help="export episodes as SFT, preference or HF data")
    ex.add_argument("store", help="trajectory store file (.sqlite)")
    ex.add_argument("--format", required=True, choices=FORMATS)
    ex.add_argument("--out", required=True, help="JSONL file, or a folder for --format hf")
    ex.add_argument(
        "--kind", default="sft", choices=HF_KINDS, help="rows of the HF dataset (--format hf)"
    )
    ex.add_argument(
        "--tool-calls",
        default="text",
        choices=TOOL_CALL_FORMATS,
        help="SFT rows: 'text' keeps each call in the assistant's action text (default); "
        "'native' writes structured tool_calls, tool messages with matching ids and a "
        "tools column (OpenAI format), as TRL's SFTTrainer reads them",
    )
    _add_filters(ex)
    ex.set_defaults(func=cmd_export)


def _add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", help="only this env id")
    p.add_argument("--task", help="only this task id")
    p.add_argument("--policy", help="only this policy id")
    p.add_argument("--run", help="only this run id")
    p.add_argument("--outcome", help="only this outcome (success, failure, timeout, ...)")


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    found = {
        "env_id": args.env,
        "task_id": args.task,
        "policy": args.policy,
        "run_id": args.run,
        "outcome": args.outcome,
    }
    return {k: v for k, v in found.items() if v is not None}


def _open(path: str) -> TrajectoryStore:
    if not Path(path).is_file():
        raise ConfigError(
            f"no trajectory store at {path}; record one with RecordingWrapper or "
            "`agentgym train` (run_dir/trajectories.sqlite)"
        )
    return TrajectoryStore(path)


# -- ls ----------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    with _open(args.store) as store:
        limit = args.limit if args.limit > 0 else None
        found = store.query(**_filters(args), limit=limit, newest_first=True)[::-1]
        total = store.count(**_filters(args))
    rows = [_summary(i, ep) for i, ep in found]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    # the store keeps one copy of identical episodes (StoredEpisode.dedup_key): say so, or
    # a run of 10 recorded episodes that lists 6 looks like lost data
    table = Table(
        title=f"{args.store}: {len(rows)} of {total} distinct episodes",
        caption="identical episodes (same env, task, actions and states) are stored once",
    )
    for col in ("id", "env", "task", "policy", "outcome", "steps", "return", "time"):
        table.add_column(col, justify="right" if col in ("id", "steps", "return") else "left")
    for r in rows:
        outcome = r["outcome"] + ("" if r["valid"] else " (invalid)")
        table.add_row(
            str(r["id"]),
            _text(r["env_id"]),
            _text(r["task_id"]),
            _text(r["policy"]),
            _text(outcome),
            str(r["steps"]),
            f"{r['return']:.3f}",
            _when(r["ended_at"]),
        )
    console.print(table)
    return 0


def _summary(episode_id: int, ep: StoredEpisode) -> dict[str, Any]:
    return {
        "id": episode_id,
        "env_id": ep.env_id,
        "task_id": ep.task_id,
        "policy": ep.policy,
        "policy_version": ep.policy_version,
        "run_id": ep.run_id,
        "outcome": ep.outcome,
        "valid": ep.valid,
        "steps": ep.steps,
        "return": ep.episode_return,
        "started_at": ep.started_at,
        "ended_at": ep.ended_at,
    }


def _text(value: object) -> Text:
    """Stored text as the terminal may show it (no escapes run, no markup read)."""
    return Text(terminal_text(str(value)))


def _when(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix).strftime("%Y-%m-%d %H:%M:%S")


# -- show --------------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args.store) as store:
        ep = store.get(args.id)
    console.print(render_episode(args.id, ep))
    if args.html:
        out = Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(episode_html(args.id, ep), encoding="utf-8")
        console.print(f"wrote {out}")
    return 0


def _facts(ep: StoredEpisode) -> list[tuple[str, str]]:
    comps = ", ".join(f"{k} {v:+.3f}" for k, v in ep.reward_components.items())
    return [
        ("env", ep.env_id),
        ("task", f"{ep.task_id} ({ep.split}, {ep.difficulty})"),
        ("policy", f"{ep.policy} {ep.policy_version}".strip()),
        ("run", ep.run_id),
        ("outcome", ep.outcome + ("" if ep.valid else " (invalid: masked from training)")),
        ("return", f"{ep.episode_return:.3f} ({comps})"),
        ("steps", str(ep.steps)),
        ("milestones", ", ".join(ep.milestones) or "-"),
        ("cost", json.dumps(ep.cost)),
        ("versions", json.dumps(ep.versions)),
        ("seeds", json.dumps(ep.seeds)),
        ("time", f"{_when(ep.started_at)} ({ep.ended_at - ep.started_at:.2f} s)"),
        ("priority", f"{ep.priority:g}"),
        ("extra", json.dumps(ep.extra) if ep.extra else "-"),
    ]


def _turns(ep: StoredEpisode) -> list[tuple[str, str, dict[str, Any]]]:
    """(role, title, message) for each message; assistant titles name step and reward."""
    out = []
    step = 0
    for m in ep.messages:
        title = m["role"]
        if m["role"] == "assistant":
            step += 1
            reward = ep.rewards[step - 1] if step <= len(ep.rewards) else None
            title = f"assistant - step {step}" + (
                f", reward {reward:+.3f}" if reward is not None else ""
            )
        out.append((m["role"], title, m))
    return out


def render_episode(episode_id: int, ep: StoredEpisode) -> Group:
    """The episode as rich renderables: a facts table, then one panel per message."""
    facts = Table(show_header=False, title=f"episode {episode_id}", title_justify="left")
    facts.add_column(style="bold")
    facts.add_column()
    for key, value in _facts(ep):
        facts.add_row(key, _text(value))
    parts: list[Any] = [facts]
    for role, title, m in _turns(ep):
        body = _text(m["content"])  # Text: agent output is never read as rich markup
        for call in m.get("tool_calls") or []:
            args = json.dumps(call.get("arguments", {}), ensure_ascii=False)
            line = f"\n-> {call.get('name')}({args}) {call.get('status', '')}"
            body.append(terminal_text(line), "italic")
        style = _ROLE_STYLE.get(role, "white")
        parts.append(Panel(body, title=_text(title), title_align="left", border_style=style))
    return Group(*parts)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}td{padding:2px 10px;vertical-align:top}
td:first-child{font-weight:bold}.msg{border-left:4px solid #999;margin:10px 0;padding:6px 12px}
.system{border-color:#bbb;color:#666}.user{border-color:#2a8fbd}.assistant{border-color:#3a3}
.title{font-size:.85em;color:#555;margin-bottom:4px}pre{white-space:pre-wrap;margin:0;
font-family:ui-monospace,monospace}.call{color:#555;font-style:italic}
.success{color:#3a3}.failure,.timeout,.safety_stop,.env_error{color:#c33}
"""


def episode_html(episode_id: int, ep: StoredEpisode) -> str:
    """The episode as a self-contained HTML page (inline CSS, no scripts, all text escaped)."""
    esc = html.escape
    facts = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in _facts(ep))
    blocks = []
    for role, title, m in _turns(ep):
        calls = "".join(
            f'<div class="call">-&gt; {esc(str(c.get("name")))}'
            f"({esc(json.dumps(c.get('arguments', {}), ensure_ascii=False))}) "
            f"{esc(str(c.get('status', '')))}</div>"
            for c in m.get("tool_calls") or []
        )
        blocks.append(
            f'<div class="msg {esc(role)}"><div class="title">{esc(title)}</div>'
            f"<pre>{esc(str(m['content']))}</pre>{calls}</div>"
        )
    title = f"episode {episode_id}: {ep.env_id} {ep.task_id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{esc(title)} <span class="{esc(ep.outcome)}">{esc(ep.outcome)}</span></h1>'
        f"<table>{facts}</table>{''.join(blocks)}</body></html>\n"
    )


# -- export ------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    filters = _filters(args)
    sft = args.format == "sft" or (args.format == "hf" and args.kind == "sft")
    if args.tool_calls != "text" and not sft:
        raise ConfigError("--tool-calls native is for SFT rows: --format sft, or hf --kind sft")
    with _open(args.store) as store:
        if args.format == "sft":
            n = export_sft(store, args.out, tool_calls=args.tool_calls, **filters)
        elif args.format == "preferences":
            n = export_preferences(store, args.out, **filters)
        elif args.format == "episodes-jsonl":
            n = export_episodes(store, args.out, **filters)
        else:
            n = len(export_hf(store, args.out, args.kind, tool_calls=args.tool_calls, **filters))
    what = args.kind if args.format == "hf" else args.format
    console.print(f"wrote {n} {what} rows to {args.out}")
    return 0
