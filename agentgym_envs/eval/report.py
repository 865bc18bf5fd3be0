"""Evaluation reports: the report dict of ``agentgym eval`` as markdown and as one
self-contained HTML page.

The page needs no network: its CSS is inline and its plots (see
:mod:`agentgym_envs.eval.plots`) are base64 PNGs in ``data:`` URIs, so it can be mailed,
archived or opened on a machine without access to anything. Every string that comes from
the report (policy ids, entry names, specs) is escaped, since a policy id or a task name
is user data. Optional figures that are missing or None show as ``-``.

Example:
    >>> paths = write_reports(report, "runs/eval-smoke")  # doctest: +SKIP
    >>> print(markdown_table(report))  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import html
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.unicode import valid_text
from agentgym_envs.eval.metrics import shown, tidy
from agentgym_envs.eval.plots import (
    cost_axis,
    entry_ids,
    k_table,
    metrics_of,
    natural_key,
    num,
    policy_ids,
    render_plots,
    results,
)

logger = logging.getLogger(__name__)

SCHEMA = "agentgym-eval/1"
_PLOTS = (
    ("pareto", "Success vs cost (Pareto front)"),
    ("funnel", "Stage funnel per entry"),
    ("pass_hat_k", "pass^k per entry"),
)
_VERSION_KEYS = ("env", "tools", "reward", "verifier", "task_set")

Column = tuple[str, Callable[[Mapping[str, Any]], str]]


# -- formatting -----------------------------------------------------------------------


def _pct(value: Any) -> str:
    v = num(value)
    return "-" if v is None else f"{shown(100 * v, '.1f')}%"


def _fixed(digits: int) -> Callable[[Any], str]:
    def fmt(value: Any) -> str:
        v = num(value)
        return "-" if v is None else shown(v, f",.{digits}f")

    return fmt


def _cost(value: Any) -> str:
    v = num(value)
    return "-" if v is None else shown(v, ".4g")


def _ci(m: Mapping[str, Any]) -> str:
    ci = m.get("success_ci")
    if not isinstance(ci, Sequence) or isinstance(ci, str) or len(ci) != 2:
        return "-"
    lo, hi = num(ci[0]), num(ci[1])
    return (
        "-" if lo is None or hi is None else f"[{shown(100 * lo, '.1f')}, {shown(100 * hi, '.1f')}]"
    )


def _success(m: Mapping[str, Any]) -> str:
    rate, ci = _pct(m.get("success_rate")), _ci(m)
    return rate if "-" in (rate, ci) else f"{rate} {ci}"


def _episodes(m: Mapping[str, Any]) -> str:
    valid, total = num(m.get("valid")), num(m.get("episodes"))
    if valid is None or total is None:
        return _fixed(0)(m.get("episodes"))
    return f"{shown(valid, '.0f')}/{shown(total, '.0f')}"


def _stages(m: Mapping[str, Any]) -> str:
    rates = m.get("stage_rates")
    if not isinstance(rates, Mapping) or not rates:
        return "-"
    return ", ".join(f"{k} {_pct(rates[k])}" for k in sorted(map(str, rates), key=natural_key))


def _outcomes(m: Mapping[str, Any]) -> str:
    counts = m.get("outcomes")
    if not isinstance(counts, Mapping) or not counts:
        return "-"
    return ", ".join(f"{k} {_fixed(0)(v)}" for k, v in counts.items())


def _json(value: Any) -> str:
    """``value`` as JSON for display: floats lose their binary noise (``3.4`` rather than
    ``3.4000000000000004``); the report's JSON file keeps them exact."""
    return json.dumps(tidy(value), sort_keys=True, default=str, ensure_ascii=False)


# -- table model (shared by markdown and HTML) -----------------------------------------


def _rows_metrics(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    overall = report.get("overall")
    ms = [r.get("metrics") for r in results(report)]
    ms += list(overall.values()) if isinstance(overall, Mapping) else []
    return [m for m in ms if isinstance(m, Mapping)]


def _columns(report: Mapping[str, Any], *, stages: bool) -> list[Column]:
    """The metric columns: one per k for pass@k and pass^k (the union over the report),
    and the robustness rates only where some row has a figure for them."""
    ms = _rows_metrics(report)
    ks_at = sorted({k for m in ms for k in k_table(m.get("pass_at_k"))})
    ks_hat = sorted({k for m in ms for k in k_table(m.get("pass_hat_k"))})

    def k_col(key: str, k: int) -> Callable[[Mapping[str, Any]], str]:
        return lambda m: _pct(k_table(m.get(key)).get(k))

    def field(key: str, fmt: Callable[[Any], str]) -> Callable[[Mapping[str, Any]], str]:
        return lambda m: fmt(m.get(key))

    cols: list[Column] = [("valid/episodes", _episodes), ("success [95% CI]", _success)]
    cols += [(f"pass@{k}", k_col("pass_at_k", k)) for k in ks_at]
    cols += [(f"pass^{k}", k_col("pass_hat_k", k)) for k in ks_hat]
    cols += [("stages", _stages)] if stages else []
    cols += [
        ("steps", field("mean_steps", _fixed(1))),
        ("tool calls", field("mean_tool_calls", _fixed(1))),
        ("tokens in", field("mean_tokens_in", _fixed(0))),
        ("tokens out", field("mean_tokens_out", _fixed(0))),
        ("wall s", field("wall_s", _fixed(2))),
        ("cost/episode", field("mean_cost", _cost)),
        ("cost/success", field("cost_per_success", _cost)),
        ("violations", field("violation_rate", _pct)),
        ("env errors", field("env_error_rate", _pct)),
    ]
    for key, head in (("recovery_rate", "recovery"), ("attack_success_rate", "attack success")):
        if any(num(m.get(key)) is not None for m in ms):
            cols.append((head, field(key, _pct)))
    return [*cols, ("outcomes", _outcomes)]


def _overall_table(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    cols = _columns(report, stages=False)
    rows = [
        [pid] + [fn(metrics_of(report, pid, None)) for _, fn in cols] for pid in policy_ids(report)
    ]
    return ["policy", *[h for h, _ in cols]], rows


def _entry_table(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    cols = _columns(report, stages=True)
    rows: list[list[str]] = []
    for entry in entry_ids(report):
        for pid in policy_ids(report):
            m = metrics_of(report, pid, entry)
            if m:
                rows.append([entry, pid] + [fn(m) for _, fn in cols])
    return ["entry", "policy", *[h for h, _ in cols]], rows


def _versions_table(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per distinct (entry, env, versions): policies that ran an entry against
    differently versioned envs (a rerun after an env change) show up as separate rows."""
    rows: list[list[str]] = []
    for r in results(report):
        versions = r.get("versions")
        versions = versions if isinstance(versions, Mapping) else {}
        wrappers = r.get("wrappers")
        wrappers = (
            wrappers if isinstance(wrappers, Sequence) and not isinstance(wrappers, str) else []
        )
        row = [
            str(r.get("entry", "-")), str(r.get("env_id", "-")), str(r.get("split", "-")),
            str(r.get("difficulty", "-")), ", ".join(map(str, wrappers)) or "-",
            *[str(versions.get(k, "-")) for k in _VERSION_KEYS],
        ]  # fmt: skip
        if row not in rows:
            rows.append(row)
    return ["entry", "env", "split", "difficulty", "wrappers", *_VERSION_KEYS], rows


_BREAKDOWNS = (
    ("by_difficulty", "level", "Success by difficulty"),
    ("by_project", "project", "Success by project"),
)
"""The per-row breakdowns of success (key in a ``results`` row, name column, section)."""


def _breakdown_table(
    report: Mapping[str, Any], key: str, name: str
) -> tuple[list[str], list[list[str]]]:
    """One row per (entry, policy, level or project) of the results rows' ``key``
    breakdown (``{name: {"episodes", "successes", "success"}}``), entries and policies
    in the per-entry table's order; no rows where no row has one (a report from before
    the breakdowns, or of envs without a task set)."""
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in results(report):
        parts = r.get(key)
        where = (str(r.get("entry", r.get("env_id", "?"))), str(r.get("policy", "?")))
        if isinstance(parts, Mapping):
            found.setdefault(where, parts)
    rows: list[list[str]] = []
    for entry in entry_ids(report):
        for policy in policy_ids(report):
            for part, counts in found.get((entry, policy), {}).items():
                if isinstance(counts, Mapping):
                    episodes = _fixed(0)(counts.get("episodes"))
                    rows.append([entry, policy, str(part), episodes, _pct(counts.get("success"))])
    return ["entry", "policy", name, "episodes", "success"], rows


def _breakdowns(report: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The breakdown sections some row has data for: (title, head, rows)."""
    out = []
    for key, name, title in _BREAKDOWNS:
        head, rows = _breakdown_table(report, key, name)
        if rows:
            out.append((title, head, rows))
    return out


_USER_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("episodes", "episodes", _fixed(0)),
    ("replies", "voice replies", _fixed(0)),
    ("first_draw_rate", "first-draw pass", _pct),
    ("fallbacks", "fallbacks", _fixed(0)),
    ("fallback_rate", "fallback rate", _pct),
    ("failures", "failures", _fixed(0)),
    ("reads", "reader reads", _fixed(0)),
    ("disagreements", "reader disagreements", _fixed(0)),
    ("cassette_misses", "cassette misses", _fixed(0)),
)
"""The simulated-user section's columns: (key in ``metrics["user_llm"]``, head, format)."""


def _user_table(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per (entry, policy), then one per policy overall, of the LLM user's
    figures (``metrics["user_llm"]``); no rows where no row has them (no episode had
    an LLM user)."""
    places: list[tuple[str | None, str]] = [
        (e, p) for e in entry_ids(report) for p in policy_ids(report)
    ]
    places += [(None, p) for p in policy_ids(report)]
    rows: list[list[str]] = []
    for entry, policy in places:
        user = metrics_of(report, policy, entry).get("user_llm")
        if isinstance(user, Mapping):
            cells = [fmt(user.get(key)) for key, _, fmt in _USER_COLUMNS]
            rows.append([entry or "overall", policy, *cells])
    return ["entry", "policy", *[head for _, head, _ in _USER_COLUMNS]], rows


_USER_NOTE = (
    'Episodes with the LLM user\'s voice (user="llm"), env errors included. Rates are per '
    "voiced reply; a fallback said the template reply (every draft rejected, or a replay "
    "without the call in its cassette); failures are the episodes a user-side failure "
    "ended (env_error)."
)


def _matrix(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    policies = policy_ids(report)
    rows = [[e] + [_success(metrics_of(report, p, e)) for p in policies] for e in entry_ids(report)]
    rows.append(["overall"] + [_success(metrics_of(report, p, None)) for p in policies])
    return ["entry", *policies], rows


def _config_items(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    config = report.get("config")
    if not isinstance(config, Mapping):
        return []
    return [(str(k), v if isinstance(v, str) else _json(v)) for k, v in config.items()]


def partial_note(report: Mapping[str, Any]) -> str:
    """For a report of a run that did not finish (``report["partial"]``): how many
    episodes of how many finished, what stopped the run and how to continue it; ``""``
    for a finished run."""
    partial = report.get("partial")
    if not isinstance(partial, Mapping):
        return ""
    done, total = _fixed(0)(partial.get("episodes_done")), _fixed(0)(partial.get("episodes_total"))
    note = f"partial: {done} of {total} episodes finished"
    if partial.get("stopped_by"):
        note += f" (stopped by {partial['stopped_by']})"
    if partial.get("resume"):
        note += f"; continue with: {partial['resume']}"
    return note


def _policy_specs(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    listed = report.get("policies")
    specs: dict[str, str] = {}
    for p in listed if isinstance(listed, Sequence) and not isinstance(listed, str) else []:
        if isinstance(p, Mapping):
            specs[str(p.get("id", "?"))] = _json(p.get("spec", {}))
    return [(pid, specs.get(pid, "-")) for pid in policy_ids(report)]


def _suite(report: Mapping[str, Any]) -> Mapping[str, Any]:
    suite = report.get("suite")
    return suite if isinstance(suite, Mapping) else {}


def _check(report: Any) -> Mapping[str, Any]:
    if not isinstance(report, Mapping):
        raise ConfigError(
            f"a report must be the dict that `agentgym eval` writes (report.json), got "
            f"{type(report).__name__}; load it with json.load first"
        )
    schema = report.get("schema")
    if schema is not None and schema != SCHEMA:
        logger.warning(
            "report schema is %r, this renderer knows %r; rendering anyway", schema, SCHEMA
        )
    return report


# -- markdown --------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    """Table-cell text that no markdown renderer turns into HTML, code or extra columns.

    Only those characters are escaped: the CLI prints this table as it is, so brackets
    and underscores (harmless in cells like ``[61.0, 87.0]``) stay readable.
    """
    text = " ".join(str(text).split())
    for ch in "\\|<>`":
        text = text.replace(ch, "\\" + ch)
    return text


def _md(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in head) + " |"]
    lines.append("|" + "|".join("---" for _ in head) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_table(report: Mapping[str, Any]) -> str:
    """The success rate (with its 95% Wilson CI) of each policy on each suite entry and
    overall, as a markdown table with an entry per row and a policy per column."""
    return _md(*_matrix(_check(report)))


def render_markdown(report: Mapping[str, Any], plot_dir: str | None = "plots") -> str:
    """The whole report as markdown; with ``plot_dir``, image links to ``<plot_dir>/<name>.png``
    (as :func:`write_reports` writes them) close the page."""
    suite = _suite(_check(report))
    out = [
        f"# Evaluation report: {_md_cell(str(suite.get('name', '?')))}",
        "",
        *([f"**{_md_cell(partial_note(report))}**", ""] if partial_note(report) else []),
        f"- suite version: `{suite.get('version', '-')}` ({_md_cell(str(suite.get('path', '-')))})",
        f"- created: {_md_cell(str(report.get('created', '-')))}; "
        f"agentgym {_md_cell(str(report.get('agentgym_version', '-')))}",
        *[f"- {_md_cell(k)}: {_md_cell(v)}" for k, v in _config_items(report)],
        "",
        "## Policies",
        "",
        _md(["policy", "spec"], [list(p) for p in _policy_specs(report)]),
        "",
        "## Success rate by entry",
        "",
        markdown_table(report),
        "",
        "## Overall per policy",
        "",
        _md(*_overall_table(report)),
        "",
        "## Per entry",
        "",
        _md(*_entry_table(report)),
        "",
        *[
            line
            for title, head, rows in _breakdowns(report)
            for line in (f"## {title}", "", _md(head, rows), "")
        ],
        *_md_user(report),
        "## Envs and versions",
        "",
        _md(*_versions_table(report)),
        "",
    ]
    if plot_dir is not None:
        out += ["## Plots", ""]
        out += [f"![{title}]({plot_dir}/{name}.png)\n" for name, title in _PLOTS]
    return "\n".join(out)


def _md_user(report: Mapping[str, Any]) -> list[str]:
    """The simulated-user section's lines, or none where no episode had an LLM user."""
    head, rows = _user_table(report)
    return ["## Simulated user", "", _USER_NOTE, "", _md(head, rows), ""] if rows else []


# -- HTML ------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1400px;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:14px 0 4px}
.scroll{overflow-x:auto;margin:8px 0;max-width:100%}
table{border-collapse:collapse;font-size:12.5px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f3f3f3;white-space:normal;min-width:4em}
td:first-child,th:first-child,td.l,th.l{text-align:left}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px}dt{font-weight:600}
dd{margin:0}pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;margin:2px 0}
img{max-width:100%;border:1px solid #eee}figure{margin:12px 0}figcaption{color:#555}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


_LIST_COLS = ("stages", "outcomes")
"""Columns whose cells list ``name figure`` items: in HTML one item per line (a stage
list on one line made the per-entry table several screens wide)."""


def _html_cell(text: str, *, name: bool, listing: bool) -> str:
    if listing and text != "-":
        return '<td class="l">' + "<br>".join(_e(item) for item in text.split(", ")) + "</td>"
    return f'<td class="l">{_e(text)}</td>' if name else f"<td>{_e(text)}</td>"


def _html_table(head: list[str], rows: list[list[str]], text_cols: int = 1) -> str:
    """A table whose first ``text_cols`` columns are left-aligned names, in a box that
    scrolls sideways when the table is wider than the page (never clipped by it)."""
    lists = [i >= text_cols and h in _LIST_COLS for i, h in enumerate(head)]
    th = "".join(
        f'<th class="l">{_e(h)}</th>' if i < text_cols or lists[i] else f"<th>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(_html_cell(c, name=i < text_cols, listing=lists[i]) for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    table = f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll" role="region" tabindex="0">{table}</div>'


def _is_success_col(head: str) -> bool:
    return head in ("valid/episodes", "success [95% CI]") or head.startswith(("pass@", "pass^"))


_COLUMN_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("success", _is_success_col),
    ("milestone stages reached", lambda head: head == "stages"),
    ("effort, cost and safety", lambda head: head != "stages" and not _is_success_col(head)),
)
"""How the HTML page splits the wide metric tables: one table per group of columns, each
repeating the name columns, so that every table fits the page (the single per-entry
table of every column ran several screens wide, past the page's edge)."""


def _html_tables(head: list[str], rows: list[list[str]], text_cols: int, title: str) -> str:
    """The metric table ``head``/``rows`` as one titled table per column group."""
    out = []
    for group, picks in _COLUMN_GROUPS:
        cols = [i for i in range(text_cols, len(head)) if picks(head[i])]
        if cols:
            keep = [*range(text_cols), *cols]
            body = [[row[i] for i in keep] for row in rows]
            out.append(f"<h3>{_e(title)}: {_e(group)}</h3>")
            out.append(_html_table([head[i] for i in keep], body, text_cols=text_cols))
    return "\n".join(out)


def _header(report: Mapping[str, Any]) -> str:
    suite = _suite(report)
    items = [
        ("suite", f"{suite.get('name', '?')} (version {suite.get('version', '-')})"),
        ("suite file", suite.get("path", "-")),
        ("created", report.get("created", "-")),
        ("agentgym", report.get("agentgym_version", "-")),
        *_config_items(report),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    policies = "".join(
        f"<dt>{_e(pid)}</dt><dd><pre>{_e(spec)}</pre></dd>" for pid, spec in _policy_specs(report)
    )
    spec = suite.get("spec")
    shown_spec = json.dumps(tidy(spec), indent=2, default=str)
    details = (
        f"<details><summary>suite spec</summary><pre>{_e(shown_spec)}</pre></details>"
        if spec is not None
        else ""
    )
    return f"<dl>{dl}</dl><h2>Policies</h2><dl>{policies}</dl>{details}"


def _html_breakdown(title: str, head: list[str], rows: list[list[str]]) -> str:
    note = "Episodes and rates are over valid episodes, grouped by the task each one played."
    return f"<h2>{_e(title)}</h2>\n<p>{note}</p>\n{_html_table(head, rows, text_cols=3)}"


def _html_user(report: Mapping[str, Any]) -> str:
    """The simulated-user section, or ``""`` where no episode had an LLM user."""
    head, rows = _user_table(report)
    if not rows:
        return ""
    table = _html_table(head, rows, text_cols=2)
    return f"<h2>Simulated user</h2>\n<p>{_e(_USER_NOTE)}</p>\n{table}"


def _html(report: Mapping[str, Any], plots: Mapping[str, bytes]) -> str:
    name = str(_suite(report).get("name", "?"))
    _, x_label = cost_axis(report)
    figures = "".join(
        f'<figure><img alt="{_e(title)}" src="data:image/png;base64,'
        f'{base64.b64encode(plots[key]).decode("ascii")}">'
        f"<figcaption>{_e(title)}</figcaption></figure>"
        for key, title in _PLOTS
        if key in plots
    )
    note = partial_note(report)
    sections = [
        f"<h1>Evaluation report: {_e(name)}</h1>",
        f'<p class="partial"><strong>{_e(note)}</strong></p>' if note else "",
        _header(report),
        "<h2>Success rate by entry</h2>",
        _html_table(*_matrix(report)),
        "<h2>Overall per policy</h2>",
        _html_tables(*_overall_table(report), text_cols=1, title="Overall"),
        "<h2>Per entry</h2>",
        "<p>Rates are over valid episodes (env errors are excluded and counted apart); "
        "the interval is the 95% Wilson score interval.</p>",
        _html_tables(*_entry_table(report), text_cols=2, title="Per entry"),
        *[_html_breakdown(*part) for part in _breakdowns(report)],
        _html_user(report),
        "<h2>Envs and versions</h2>",
        _html_table(*_versions_table(report), text_cols=5),
        "<h2>Plots</h2>",
        f"<p>Pareto plot x axis: {_e(x_label)}; the dashed line joins the policies that no "
        "other policy beats on both success and cost.</p>",
        figures,
    ]
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>agentgym eval: {_e(name)}</title><style>{_CSS}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def render_html(report: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML page (inline CSS, plots as data URIs)."""
    return _html(_check(report), render_plots(report))


def write_reports(report: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write ``report.json`` (unless one is there already), ``report.md``,
    ``report.html`` and the plots as ``plots/<name>.png`` under ``out_dir``.

    Args:
        report: the report dict of ``agentgym eval`` (schema ``agentgym-eval/1``).
        out_dir: the directory to write into; created if missing.

    A report of a run that did not finish (``report["partial"]``) says so at the top of
    each page.

    Returns:
        The written paths keyed ``json``, ``md``, ``html``, ``pareto``, ``funnel`` and
        ``pass_hat_k`` (``json`` also when it was already there).

    Raises:
        ConfigError: ``report`` is not a dict, or holds values JSON cannot store.
    """
    _check(report)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "md": out / "report.md", "html": out / "report.html"}
    if not paths["json"].exists():
        try:
            text = json.dumps(report, indent=2, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"the report holds a value JSON cannot store ({exc}); convert it to plain "
                "lists, dicts, strings and numbers before writing"
            ) from exc
        paths["json"].write_text(valid_text(text) + "\n", encoding="utf-8")
    plots = render_plots(report)
    (out / "plots").mkdir(exist_ok=True)
    for key, data in plots.items():
        paths[key] = out / "plots" / f"{key}.png"
        paths[key].write_bytes(data)
    # an episode's error text may quote what its policy wrote: valid Unicode (core.unicode)
    paths["md"].write_text(valid_text(render_markdown(report)), encoding="utf-8")
    paths["html"].write_text(valid_text(_html(report, plots)), encoding="utf-8")
    logger.info("wrote the evaluation report to %s", out)
    return paths
