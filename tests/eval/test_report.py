"""Evaluation reports: markdown, self-contained HTML and the plots behind them."""

from __future__ import annotations

import copy
import json
import re
import struct
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.metrics import wilson_interval
from agentgym_envs.eval.plots import cost_axis, pareto_front, pareto_png, render_plots
from agentgym_envs.eval.report import (
    markdown_table,
    render_html,
    render_markdown,
    write_reports,
)
from tests.web.support import needs_browser

EVIL = "<script>alert(1)</script>"


def _metrics(
    successes: int, valid: int, *, trials: int, stages: dict[str, float], cost: float, **extra: Any
) -> dict[str, Any]:
    """Metrics as the evaluator writes them; the derived figures follow from the counts."""
    rate = successes / valid
    lo, hi = wilson_interval(successes, valid)
    ks = [k for k in (1, 2, 4) if k <= trials]
    out: dict[str, Any] = {
        "episodes": valid + 1, "valid": valid, "tasks": valid // trials, "trials": trials,
        "successes": successes, "success_rate": rate, "success_ci": [lo, hi],
        "stage_rates": stages,
        "pass_at_k": {str(k): min(1.0, rate * (1 + 0.3 * (k - 1))) for k in ks},
        "pass_hat_k": {str(k): rate ** (1 + 0.5 * (k - 1)) for k in ks},
        "mean_steps": 12.3, "mean_tool_calls": 11.0, "mean_tokens_in": 900.0,
        "mean_tokens_out": 120.0, "wall_s": 3.2, "mean_cost": cost,
        "cost_per_success": cost * valid / successes if successes else None,
        "violation_rate": 0.0, "env_errors": 1, "env_error_rate": 1 / (valid + 1),
        "fault_episodes": 0, "recovery_rate": None, "attack_episodes": 0,
        "attack_success_rate": None,
        "outcomes": {"success": successes, "failure": valid - successes, "env_error": 1},
    }  # fmt: skip
    out.update(extra)
    return out


ENTRIES = {
    "sokoban-easy": ("agentgym/Sokoban-v0", {"stage:1": 0.9, "stage:2": 0.8, "stage:10": 0.5}),
    "retail-faults": ("agentgym/Retail-v0", {"order_found": 0.7}),
    "frozenlake": ("agentgym/FrozenLake-v0", {}),
}
POLICY_SUCCESSES = {"oracle": 39, "hf:smollm2": 12, EVIL: 0}
POLICY_COST = {"oracle": 1.0, "hf:smollm2": 3.0, EVIL: 0.5}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """The fixture report; tests that change it work on a deep copy."""
    results = []
    for pid, wins in POLICY_SUCCESSES.items():
        for i, (entry, (env_id, stages)) in enumerate(ENTRIES.items()):
            extra = {"recovery_rate": 0.5} if entry == "retail-faults" else {}
            if entry == "frozenlake" and pid != "oracle":
                extra["attack_success_rate"], extra["attack_episodes"] = 0.25, 8
            reached = {k: v * (wins + 1) / 40 for k, v in stages.items()}
            cost = POLICY_COST[pid] + i
            m = _metrics(max(0, wins - 3 * i), 40, trials=4, stages=reached, cost=cost, **extra)
            results.append({
                "policy": pid, "entry": entry, "env_id": env_id, "split": "test",
                "difficulty": "easy", "wrappers": ["faults:p=0.1"] if "faults" in entry else [],
                "versions": {"env": f"{env_id}@1", "tools": "t1", "reward": "r1",
                             "verifier": "v1", "task_set": "ts1"},
                "metrics": m,
            })  # fmt: skip
    return {
        "schema": "agentgym-eval/1",
        "suite": {"name": "smoke", "version": "0123456789ab", "path": "tasks/suites/smoke.yaml",
                  "spec": {"entries": list(ENTRIES)}},
        "created": "2026-12-01T10:00:00Z", "agentgym_version": "0.1.0",
        "config": {"trials": 4, "seed": 0, "batch": 8, "isolation": "inline"},
        "policies": [{"id": "oracle", "spec": {}},
                     {"id": "hf:smollm2", "spec": {"model": "smollm2-135m", "temperature": 0.7}},
                     {"id": EVIL, "spec": {"note": EVIL}}],
        "results": results,
        "overall": {pid: _metrics(wins, 120, trials=4, stages={}, cost=POLICY_COST[pid] + 1)
                    for pid, wins in POLICY_SUCCESSES.items()},
        "episodes": [{"policy": "oracle", "entry": "frozenlake", "env_id": "agentgym/FrozenLake-v0",
                      "task_id": "t0", "trial": 0, "seed": 1, "outcome": "success",
                      "success": True, "valid": True, "steps": 5, "reward": 9.5}],
    }  # fmt: skip


@pytest.fixture(scope="module")
def written(report: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixture report written once (rendering the plots is the slow part)."""
    return write_reports(report, tmp_path_factory.mktemp("report") / "out")


@pytest.fixture(scope="module")
def page(written: dict[str, Path]) -> str:
    return written["html"].read_text(encoding="utf-8")


class _Tags(HTMLParser):
    """Collects every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


class _TableCells(HTMLParser):
    """Every table of a page as rows of cell texts (the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:  # a list cell: one item per line
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> list[list[list[str]]]:
    parser = _TableCells()
    parser.feed(page)
    return parser.tables


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


# -- pareto front -----------------------------------------------------------------------


def test_pareto_front_hand_computed() -> None:
    points = [(1.0, 0.5), (2.0, 0.4), (2.0, 0.8), (3.0, 0.8), (0.5, 0.1), (4.0, 0.9)]
    # (2,0.4) is beaten by (1,0.5); (3,0.8) by (2,0.8) (same success, dearer)
    assert pareto_front(points) == [(0.5, 0.1), (1.0, 0.5), (2.0, 0.8), (4.0, 0.9)]


def test_pareto_front_edge_cases() -> None:
    assert pareto_front([]) == []
    assert pareto_front([(3.0, 0.2)]) == [(3.0, 0.2)]
    assert pareto_front([(1.0, 0.5), (1.0, 0.5)]) == [(1.0, 0.5)]  # duplicates once
    # a cheapest-and-best point dominates everything else
    assert pareto_front([(2.0, 0.3), (0.0, 1.0), (1.0, 0.9)]) == [(0.0, 1.0)]
    # same cost: only the best success survives; same success: only the cheapest
    assert pareto_front([(1.0, 0.2), (1.0, 0.6), (5.0, 0.6)]) == [(1.0, 0.6)]
    # a trade-off front keeps all of them, in cost order
    assert pareto_front([(3.0, 0.9), (1.0, 0.1), (2.0, 0.5)]) == [
        (1.0, 0.1),
        (2.0, 0.5),
        (3.0, 0.9),
    ]


# -- markdown ---------------------------------------------------------------------------


def test_markdown_table_is_entries_by_policies(report: dict[str, Any]) -> None:
    table = markdown_table(report).splitlines()
    assert len(table) == 2 + len(ENTRIES) + 1  # head, rule, entries, overall
    head = [c.strip() for c in table[0].strip("|").split("|")]
    assert head[:3] == ["entry", "oracle", "hf:smollm2"] and "script" in head[3]
    assert "<script>" not in table[0]  # escaped for markdown renderers
    sokoban = table[2]
    assert sokoban.startswith("| sokoban-easy | 97.5% [")
    lo, hi = wilson_interval(39, 40)
    assert f"[{100 * lo:.1f}, {100 * hi:.1f}]" in sokoban
    assert table[-1].startswith("| overall | 32.5% [")  # 39 of 120


def test_markdown_report_has_every_section(report: dict[str, Any]) -> None:
    md = render_markdown(report)
    for heading in ("Policies", "Overall per policy", "Per entry", "Envs and versions", "Plots"):
        assert f"## {heading}" in md
    assert "pass@4" in md and "pass^4" in md and "stage:1 90.0%, stage:2 80.0%, stage:10" in md
    assert "recovery" in md and "attack success" in md
    assert "plots/pareto.png" in md and "agentgym/Retail-v0@1" in md


def _counts(episodes: int, successes: int) -> dict[str, Any]:
    return {"episodes": episodes, "successes": successes,
            "success": successes / episodes if episodes else None}  # fmt: skip


def test_breakdown_sections_show_only_where_rows_have_them(report: dict[str, Any]) -> None:
    """Success by difficulty and by project: a section each where some row has the data
    (the evaluator leaves a key out where it has none), neither in an older report."""
    titles = ("Success by difficulty", "Success by project")
    md, page = render_markdown(report, plot_dir=None), render_html(report)
    assert not any(t in md or t in page for t in titles)  # the fixture predates them
    broken = copy.deepcopy(report)
    for row in broken["results"]:
        row["by_difficulty"] = {"easy": None, "hard": "n/a"}  # not counts: no table rows
    assert not any(t in render_markdown(broken) for t in titles)
    rich = copy.deepcopy(report)
    for row in rich["results"]:
        row["by_difficulty"] = {"easy": _counts(30, 27), "hard": _counts(0, 0)}
        if row["entry"] == "sokoban-easy":
            row["by_project"] = {"attrs": _counts(4, 1), EVIL: _counts(2, 2)}
    md = render_markdown(rich, plot_dir=None)
    assert "## Success by difficulty" in md and "## Success by project" in md
    assert md.index("## Per entry") < md.index("## Success by difficulty")
    assert md.index("## Success by project") < md.index("## Envs and versions")
    assert "| frozenlake | oracle | easy | 30 | 90.0% |" in md
    assert "| frozenlake | oracle | hard | 0 | - |" in md
    assert "| sokoban-easy | hf:smollm2 | attrs | 4 | 25.0% |" in md
    assert "| retail-faults | oracle | attrs |" not in md
    page = render_html(rich)
    assert EVIL not in page
    tables = _tables(page)
    (levels,) = [t for t in tables if t[0] == ["entry", "policy", "level", "episodes", "success"]]
    (projects,) = [t for t in tables if t[0][:3] == ["entry", "policy", "project"]]
    assert len(levels) == 1 + 2 * len(ENTRIES) * len(POLICY_SUCCESSES)
    assert levels[1] == ["sokoban-easy", "oracle", "easy", "30", "90.0%"]  # entry, then policy
    assert projects[1:] == [
        ["sokoban-easy", pid, name, n, rate]
        for pid in POLICY_SUCCESSES
        for name, n, rate in (("attrs", "4", "25.0%"), (EVIL, "2", "100.0%"))
    ]
    only_levels = copy.deepcopy(rich)
    for row in only_levels["results"]:
        row.pop("by_project", None)
    md, page = render_markdown(only_levels, plot_dir=None), render_html(only_levels)
    assert "## Success by difficulty" in md and "Success by project" not in md
    assert "<h2>Success by difficulty</h2>" in page and "Success by project" not in page


# -- HTML -------------------------------------------------------------------------------


def test_html_is_self_contained_with_three_images(page: str) -> None:
    tags = _tags(page)
    images = [a for t, a in tags if t == "img"]
    assert len(images) == 3
    for attrs in images:
        assert (attrs["src"] or "").startswith("data:image/png;base64,")
    refs = [v or "" for _, a in tags for k, v in a.items() if k in ("src", "href")]
    assert not any(re.match(r"\s*(https?:)?//", r) for r in refs)
    assert "http://" not in page and "https://" not in page
    assert not any(t in ("script", "link", "iframe") for t, _ in tags)
    for text in ("smoke", "0123456789ab", "2026-12-01T10:00:00Z", "smollm2-135m", "isolation"):
        assert text in page
    for version in ("agentgym/Sokoban-v0@1", "agentgym/Retail-v0@1", "agentgym/FrozenLake-v0@1"):
        assert version in page


def test_html_escapes_report_text(page: str) -> None:
    assert EVIL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert [t for t, _ in _tags(page) if t == "script"] == []


def _joined(tables: list[list[list[str]]], names: list[str]) -> tuple[list[str], list[list[str]]]:
    """The tables whose header starts with ``names``, joined column-wise on those names
    (the page splits a wide metric table into groups of columns)."""
    parts = [t for t in tables if t[0][: len(names)] == names]
    head = names + [h for t in parts for h in t[0][len(names) :]]
    rows: dict[tuple[str, ...], list[str]] = {}
    for t in parts:
        for row in t[1:]:
            rows.setdefault(tuple(row[: len(names)]), list(row[: len(names)]))
            rows[tuple(row[: len(names)])] += row[len(names) :]
    return head, list(rows.values())


def test_html_tables_show_figures_and_dashes(page: str) -> None:
    head, rows = _joined(_tables(page), ["entry", "policy"])
    for col in ("pass@1", "pass@2", "pass@4", "pass^1", "pass^4", "cost/success", "env errors"):
        assert col in head
    assert "recovery" in head and "attack success" in head
    assert len(rows) == len(ENTRIES) * len(POLICY_SUCCESSES)
    cell = {(r[0], r[1]): dict(zip(head, r, strict=True)) for r in rows}
    evil = cell[("retail-faults", EVIL)]  # zero successes
    assert evil["valid/episodes"] == "40/41" and evil["success [95% CI]"].startswith("0.0% [0.0, ")
    assert evil["cost/success"] == "-" and evil["recovery"] == "50.0%"
    assert evil["attack success"] == "-" and cell[("frozenlake", EVIL)]["attack success"] == "25.0%"
    oracle = cell[("sokoban-easy", "oracle")]
    assert oracle["stages"] == "stage:1 90.0%\nstage:2 80.0%\nstage:10 50.0%"
    assert oracle["cost/success"] == f"{1.0 * 40 / 39:.4g}" and oracle["pass@1"] == "97.5%"
    assert cell[("frozenlake", "oracle")]["stages"] == "-"


def test_minimal_report_renders(report: dict[str, Any]) -> None:
    """One policy, one trial, no milestones, no optional figures: nothing crashes."""
    small = copy.deepcopy(report)
    small["policies"] = small["policies"][:1]
    small["results"] = [r for r in small["results"] if r["policy"] == "oracle"][:1]
    m = small["results"][0]["metrics"]
    m.update(stage_rates={}, pass_at_k={"1": 0.5}, pass_hat_k={"1": 0.5}, successes=0)
    for key in ("cost_per_success", "recovery_rate", "attack_success_rate", "success_ci"):
        m[key] = None
    del m["mean_tokens_in"], m["outcomes"]
    small["overall"] = {"oracle": m}
    page = render_html(small)
    assert "pass@2" not in page and "pass^1" in page and "recovery" not in page
    assert len([t for t, _ in _tags(page) if t == "img"]) == 3
    assert "| frozenlake" not in markdown_table(small)


NEGATIVE_ZERO = re.compile(r"(?<![\w.])-0(\.0*)?(?!\.?\d)")


def test_figures_show_without_float_noise(report: dict[str, Any]) -> None:
    """Displayed figures are rounded (the report keeps them exact): no 0.30000000000000004,
    no -0.0, in the markdown, the HTML header and the `agentgym eval` tables."""
    import io

    from rich.console import Console

    from agentgym_envs.eval.cli_eval import print_tables

    noisy = copy.deepcopy(report)
    noisy["config"]["temperature"] = 0.1 + 0.2
    noisy["policies"][1]["spec"]["top_p"] = 3.4000000000000004
    for m in [r["metrics"] for r in noisy["results"]] + list(noisy["overall"].values()):
        m.update(mean_steps=-1e-17, violation_rate=-0.0, wall_s=-0.0, mean_tokens_out=-0.2)
    text = render_markdown(noisy, plot_dir=None)
    console = Console(file=io.StringIO(), width=400)
    print_tables(noisy, console)
    tables = console.file.getvalue()  # type: ignore[attr-defined]
    for shown in (text, tables):
        assert "0000000" not in shown and not NEGATIVE_ZERO.search(shown), shown
    assert "0.3" in text and "3.4" in text and "0.0%" in text
    assert noisy["config"]["temperature"] == 0.1 + 0.2  # the data itself is not rounded


def test_empty_and_bad_reports() -> None:
    empty = {"schema": "agentgym-eval/1"}
    assert "Evaluation report" in render_html(empty)
    assert markdown_table(empty).splitlines()[-1].startswith("| overall")
    with pytest.raises(ConfigError, match=r"json\.load"):
        render_html([1, 2])  # type: ignore[arg-type]


def test_cost_axis_falls_back_honestly(report: dict[str, Any]) -> None:
    assert cost_axis(report)[0] == "cost"
    free = copy.deepcopy(report)
    for m in [r["metrics"] for r in free["results"]] + list(free["overall"].values()):
        m["mean_cost"] = 0.0
    axis, label = cost_axis(free)
    assert axis == "tokens" and "tokens" in label and "cost is zero" in label


def test_plots_are_deterministic_pngs(report: dict[str, Any], written: dict[str, Path]) -> None:
    first = {key: written[key].read_bytes() for key in ("pareto", "funnel", "pass_hat_k")}
    again = render_plots(copy.deepcopy(report))
    assert set(first) == {"pareto", "funnel", "pass_hat_k"}
    assert first == again
    for data in first.values():
        width, height = _png_size(data)
        assert width >= 400 and height >= 300 and len(data) > 5000
    changed = copy.deepcopy(report)
    changed["results"][0]["metrics"]["success_rate"] = 0.1
    assert pareto_png(changed) != first["pareto"]


def test_write_reports(report: dict[str, Any], written: dict[str, Path], tmp_path: Path) -> None:
    assert set(written) == {"json", "md", "html", "pareto", "funnel", "pass_hat_k"}
    assert json.loads(written["json"].read_text()) == report
    assert written["html"].read_text().startswith("<!DOCTYPE html>")
    assert written["md"].read_text() == render_markdown(report)
    # an existing report.json (the evaluator's own) is left as it is
    (tmp_path / "report.json").write_text('{"kept": true}')
    paths = write_reports({"schema": "agentgym-eval/1"}, tmp_path)
    assert json.loads(paths["json"].read_text()) == {"kept": True}
    assert paths["html"].exists() and paths["funnel"].exists()
    with pytest.raises(ConfigError, match="JSON"):
        write_reports({"config": {"when": object()}}, tmp_path / "bad")


def test_a_lone_surrogate_in_a_report_is_written_as_a_replacement(tmp_path: Path) -> None:
    """An episode's error text may quote its policy's text, lone surrogates included:
    the report is still written (U+FFFD in their place), not lost at the end of a run."""
    episode = {"policy": "p\ud800", "outcome": "env_error", "error": "bad \udcff"}
    paths = write_reports({"schema": "agentgym-eval/1", "episodes": [episode]}, tmp_path)
    written = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert written["episodes"] == [{**episode, "policy": "p\ufffd", "error": "bad \ufffd"}]


@pytest.mark.browser
@needs_browser
def test_html_renders_in_chromium(written: dict[str, Path], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from agentgym_envs.web.browser import chromium_path

    page_path = written["html"]
    shot = tmp_path / "shot.png"
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=args)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert len(widths) == 3 and all(w > 0 for w in widths)
    assert all(u.startswith(("file:", "data:")) for u in requests)
    assert shot.exists() and shot.stat().st_size > 20_000
    assert _png_size(shot.read_bytes())[1] > 900  # full page, taller than the viewport
