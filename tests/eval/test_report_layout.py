"""The HTML report's layout: funnel labels that never overlap, metric tables that fit
the page or scroll inside their own box (never cut off at the page's edge)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from agentgym_envs.eval.plots import _finish, funnel_figure
from agentgym_envs.eval.report import write_reports
from tests.eval.test_report import _metrics, _tables, _tags
from tests.web.support import needs_browser

# RepoFix's milestones (agentgym_envs/repofix/env.py), WebShop-like long ids, and an
# entry with three stages: four labels, which the old funnel wrote level and overlapping
STAGES = {
    "repofix-easy": ("agentgym/RepoFix-v1", ["opened_buggy_file", "reproduced_failure",
                                             "imports_and_collects", "target_tests_pass"]),
    "repofix-three-stages": ("agentgym/RepoFix-v1", ["opened_buggy_file", "reproduced_failure",
                                                     "target_tests_pass"]),
    "webshop-medium": ("agentgym/WebShop-v2", ["searched", "opened_matching_product",
                                               "selected_required_options_and_quantity"]),
    "retail-hard-with-faults": ("agentgym/Retail-v1", ["user_authenticated", "order_found",
                                                       "policy_checked", "order_refunded"]),
}  # fmt: skip
POLICIES = ("oracle", "hf:smollm2", "random")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    results = []
    for p, pid in enumerate(POLICIES):
        for entry, (env_id, stages) in STAGES.items():
            reached = {s: 0.9 - 0.1 * i - 0.2 * p for i, s in enumerate(stages)}
            m = _metrics(20 - 5 * p, 40, trials=4, stages=reached, cost=1.0 + p)
            results.append({
                "policy": pid, "entry": entry, "env_id": env_id, "split": "test",
                "difficulty": "easy", "wrappers": [], "versions": {}, "metrics": m,
            })  # fmt: skip
    overall = {pid: _metrics(60 - 15 * p, 160, trials=4, stages={}, cost=1.0 + p)
               for p, pid in enumerate(POLICIES)}  # fmt: skip
    return {
        "schema": "agentgym-eval/1", "suite": {"name": "standard"},
        "policies": [{"id": pid, "spec": {}} for pid in POLICIES],
        "results": results, "overall": overall,
    }  # fmt: skip


def _overlap(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_funnel_labels_never_overlap(report: dict[str, Any]) -> None:
    fig, policies = funnel_figure(report)
    assert policies == list(POLICIES)
    png = _finish(fig, policies, "s", line=False)  # as funnel_png draws it, legend and all
    assert png.startswith(b"\x89PNG")
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == len(STAGES)
    labels = []  # (panel, bounding box) of every stage label
    for ax in panels:
        ticks = [t for t in ax.get_yticklabels() if t.get_text()]
        names = [t.get_text().replace("\n", "") for t in ticks]
        # every stage, most often reached first (here: the milestones' own order)
        assert names == [*STAGES[ax.get_title()][1], "success"]
        labels += [(ax, t.get_window_extent(renderer)) for t in ticks]
    page = fig.bbox
    for (ax_a, a), (ax_b, b) in itertools.combinations(labels, 2):
        assert not _overlap(a, b), f"labels overlap in {ax_a.get_title()}/{ax_b.get_title()}"
    for ax, box in labels:
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 <= box.y1 <= page.y1
        for other in panels:  # a label never reaches into a panel's plotting area
            assert not _overlap(box, other.get_window_extent(renderer)), ax.get_title()


@pytest.fixture(scope="module")
def page(report: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reports(report, tmp_path_factory.mktemp("layout"))["html"]


def test_every_table_sits_in_its_own_scroll_box(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    css = re.search(r"<style>(.*?)</style>", html, re.S)
    assert css is not None and ".scroll{overflow-x:auto" in css.group(1)
    assert "display:block" not in css.group(1)  # a table keeps its table layout
    tags = [t for t, _ in _tags(html)]
    starts = [i for i, t in enumerate(tags) if t == "table"]
    assert starts and all(tags[i - 1] == "div" for i in starts)
    boxes = [a for t, a in _tags(html) if t == "div" and a.get("class") == "scroll"]
    assert len(boxes) == len(starts)
    # the stage lists are one item per line (in the report's name order), not one line
    stages = next(t for t in _tables(html) if t[0] == ["entry", "policy", "stages"])
    rates = {s: f"{s} {90 - 10 * i:.1f}%" for i, s in enumerate(STAGES["repofix-easy"][1])}
    assert stages[1][2].split("\n") == [rates[s] for s in sorted(rates)]


LAYOUT = """() => {
  const boxes = [...document.querySelectorAll('div.scroll')];
  return {
    page: document.documentElement.scrollWidth, view: window.innerWidth,
    boxes: boxes.map(b => {
      const cells = [...b.querySelectorAll('td, th')];
      const last = b.querySelector('tr').lastElementChild;
      b.scrollLeft = b.scrollWidth;
      const seen = last.getBoundingClientRect().right <= b.getBoundingClientRect().right + 1;
      b.scrollLeft = 0;
      return {scroll: b.scrollWidth, client: b.clientWidth, overflow: getComputedStyle(b).overflowX,
              cut: cells.filter(c => c.scrollWidth > c.clientWidth + 1).length, lastSeen: seen};
    }),
  };
}"""


@needs_browser
@pytest.mark.browser
def test_tables_fit_the_page_or_scroll_in_chromium(page: Path) -> None:
    from playwright.sync_api import sync_playwright

    from agentgym_envs.web.browser import chromium_path

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=args)
        try:
            layouts = {}
            for width in (1400, 700):
                tab = browser.new_page(viewport={"width": width, "height": 900})
                tab.goto(page.as_uri())
                layouts[width] = tab.evaluate(LAYOUT)
                tab.close()
        finally:
            browser.close()
    for width, layout in layouts.items():
        assert layout["page"] <= layout["view"], f"the page itself overflows at {width}px"
        for box in layout["boxes"]:
            assert box["overflow"] == "auto" and box["cut"] == 0 and box["lastSeen"], box
    # at the page's full width every table fits; on a narrow screen the wide ones scroll
    assert all(b["scroll"] <= b["client"] for b in layouts[1400]["boxes"]), layouts[1400]
    assert any(b["scroll"] > b["client"] for b in layouts[700]["boxes"])
