"""Plots of an evaluation report: success vs cost, stage funnels and pass^k curves.

Every function takes the report dict written by ``agentgym eval`` (schema
``agentgym-eval/1``) and returns PNG bytes. matplotlib is imported inside the functions
(``import agentgym_envs`` must stay light) and figures are drawn on an Agg canvas of
their own, never through pyplot, so no global backend or figure state is touched and
reports can be rendered from worker threads. The PNGs carry no ``Software`` metadata,
so the same report gives the same bytes.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

# A palette that stays readable for colour-blind readers (Okabe-Ito), then tab10 hues.
_COLOURS = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
    "#8c564b", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_PANEL_W, _PANEL_H, _MAX_COLS = 4.2, 3.3, 3


def num(value: Any) -> float | None:
    """``value`` as a finite float, or None for missing, non-numeric or NaN values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def natural_key(name: str) -> list[Any]:
    """Sort key that puts ``stage:2`` before ``stage:10``."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name)]


def k_table(table: Any) -> dict[int, float]:
    """A pass@k / pass^k table as {k: value}, ascending k; keys that are not positive
    integers (``"1"`` or ``1``) and values that are not numbers are left out."""
    if not isinstance(table, Mapping):
        return {}
    out: dict[int, float] = {}
    for key, value in table.items():
        v = num(value)
        if str(key).isdigit() and int(key) > 0 and v is not None:
            out[int(key)] = v
    return dict(sorted(out.items()))


def results(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's per (policy, entry) results that are mappings, in report order."""
    rows = report.get("results")
    if not isinstance(rows, Sequence) or isinstance(rows, str):
        return []
    return [r for r in rows if isinstance(r, Mapping)]


def policy_ids(report: Mapping[str, Any]) -> list[str]:
    """Policy ids in the order the report lists them, then any only seen in results."""
    ids: list[str] = []
    listed = report.get("policies")
    for p in listed if isinstance(listed, Sequence) and not isinstance(listed, str) else []:
        pid = str(p.get("id", "?")) if isinstance(p, Mapping) else str(p)
        if pid not in ids:
            ids.append(pid)
    overall = report.get("overall")
    extra = [str(r.get("policy", "?")) for r in results(report)]
    extra += [str(k) for k in overall] if isinstance(overall, Mapping) else []
    for pid in extra:
        if pid not in ids:
            ids.append(pid)
    return ids


def entry_ids(report: Mapping[str, Any]) -> list[str]:
    """Suite entries in the order they first appear in the results."""
    out: list[str] = []
    for r in results(report):
        entry = str(r.get("entry", r.get("env_id", "?")))
        if entry not in out:
            out.append(entry)
    return out


def metrics_of(report: Mapping[str, Any], policy: str, entry: str | None) -> Mapping[str, Any]:
    """The metrics of ``policy`` on ``entry`` (None: the policy's overall), or {}."""
    if entry is None:
        overall = report.get("overall")
        found = overall.get(policy) if isinstance(overall, Mapping) else None
        return found if isinstance(found, Mapping) else {}
    for r in results(report):
        if str(r.get("policy", "?")) == policy and str(r.get("entry", r.get("env_id"))) == entry:
            m = r.get("metrics")
            return m if isinstance(m, Mapping) else {}
    return {}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point dominates, where lower x (cost) and higher y (success)
    are better; sorted by ascending x (so y rises strictly along the front).

    A point is dominated when another is at least as good on both axes and better on
    one. Exact duplicates appear once.
    """
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        # Sorted by x, a point joins the front only by beating every cheaper point's y.
        if not front or y > front[-1][1]:
            front.append((x, y))
    return front


def cost_axis(report: Mapping[str, Any]) -> tuple[str, str]:
    """Which per-episode figure the Pareto plot uses as its x axis, and its axis label.

    Cost when any policy has a non-zero cost; else tokens (in + out); else steps: a
    cost axis of zeros would put every policy on one vertical line and say nothing.
    """
    rows = [r.get("metrics") for r in results(report)]
    overall = report.get("overall")
    rows += list(overall.values()) if isinstance(overall, Mapping) else []
    ms = [m for m in rows if isinstance(m, Mapping)]
    if any(num(m.get("mean_cost")) for m in ms):
        return "cost", "mean cost per episode"
    if any(_tokens(m) for m in ms):
        return "tokens", "mean tokens per episode (in + out; every cost is zero)"
    return "steps", "mean steps per episode (no cost or token figures)"


def _tokens(m: Mapping[str, Any]) -> float | None:
    tin, tout = num(m.get("mean_tokens_in")), num(m.get("mean_tokens_out"))
    return None if tin is None and tout is None else (tin or 0.0) + (tout or 0.0)


def _x_of(m: Mapping[str, Any], axis: str) -> float | None:
    if axis == "cost":
        return num(m.get("mean_cost"))
    return _tokens(m) if axis == "tokens" else num(m.get("mean_steps"))


def _ci(m: Mapping[str, Any], y: float) -> tuple[float, float]:
    """The success CI of ``m``; a missing bound is ``y`` itself (no error bar that side)."""
    ci = m.get("success_ci")
    if not isinstance(ci, Sequence) or isinstance(ci, str) or len(ci) != 2:
        return y, y
    lo, hi = num(ci[0]), num(ci[1])
    return (y if lo is None else lo), (y if hi is None else hi)


def _mpl_text(text: str) -> str:
    """Text for matplotlib: a ``$`` from a policy id must not start mathtext parsing,
    and a leading ``_`` would hide a legend entry."""
    text = text.replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _figure(panels: int) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    cols = max(1, min(_MAX_COLS, panels))
    rows = max(1, math.ceil(panels / cols))
    fig = Figure(figsize=(_PANEL_W * cols, _PANEL_H * rows + 0.6), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[: max(panels, 1)]


def _finish(fig: Any, policies: list[str], marker: str, line: bool, front: bool = False) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=_colour(i), marker=marker, linestyle="-" if line else "none")
        for i in range(len(policies))
    ]
    labels = [_mpl_text(p) for p in policies]
    if front:
        handles.append(Line2D([], [], color="#555", linestyle="--", marker="o", markersize=11,
                              markerfacecolor="none"))  # fmt: skip
        labels.append("non-dominated front")
    if handles:
        fig.legend(
            handles, labels, loc="outside lower center",
            ncol=min(4, len(handles)), frameon=False,
        )  # fmt: skip
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _colour(i: int) -> str:
    return _COLOURS[i % len(_COLOURS)]


def _no_data(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes, color="#777")


def pareto_png(report: Mapping[str, Any]) -> bytes:
    """Success rate (with its 95% CI) against cost per episode: a panel for the policies'
    overall figures and one per suite entry, each with its non-dominated front."""
    policies, entries = policy_ids(report), entry_ids(report)
    axis, label = cost_axis(report)
    fig, axes = _figure(1 + len(entries))
    for ax, entry in zip(axes, [None, *entries], strict=False):
        points: list[tuple[float, float]] = []
        for i, pid in enumerate(policies):
            m = metrics_of(report, pid, entry)
            x, y = _x_of(m, axis), num(m.get("success_rate"))
            if x is None or y is None:
                continue
            points.append((x, y))
            lo, hi = _ci(m, y)
            err = [[max(0.0, y - lo)], [max(0.0, hi - y)]]
            ax.errorbar([x], [y], yerr=err, fmt="o", color=_colour(i), capsize=3, zorder=3)
        if points:
            fx, fy = zip(*pareto_front(points), strict=True)
            # rings mark the front's points too: a one-point front draws no line
            ax.plot(fx, fy, "--o", color="#555", linewidth=1, zorder=2, markersize=11,
                    markerfacecolor="none")  # fmt: skip
        else:
            _no_data(ax, "no policy has both figures")
        ax.set_title("overall" if entry is None else _mpl_text(entry), fontsize=10)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("success rate", fontsize=8)
        ax.grid(alpha=0.3)
    return _finish(fig, policies, "o", line=False, front=True)


def _stages(report: Mapping[str, Any], policies: list[str], entry: str) -> list[str]:
    """The entry's stages as a funnel: the most often reached first (the mean share over
    the policies; names in natural order break ties). The report keeps stages in name
    order, which put ``imports_and_collects`` before ``opened_buggy_file``."""
    reached: dict[str, list[float]] = {}
    for pid in policies:
        rates = metrics_of(report, pid, entry).get("stage_rates")
        for name, rate in rates.items() if isinstance(rates, Mapping) else ():
            reached.setdefault(str(name), []).append(num(rate) or 0.0)
    return sorted(reached, key=lambda s: (-sum(reached[s]) / len(reached[s]), natural_key(s)))


def _stage_label(name: str, width: int = 24) -> str:
    """A stage name for an axis label: milestone ids longer than ``width`` break at their
    underscores (``selected_required_`` / ``options``), so no label runs into a panel."""
    lines: list[str] = []
    for part in re.split(r"(?<=_)", name):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return _mpl_text("\n".join(lines))


def funnel_figure(report: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The funnel as a matplotlib ``Figure`` (see :func:`funnel_png`), with the policies
    its bars stand for (in colour order).

    Bars are horizontal: the stage names are the y axis' labels, written level and one
    under the other, so long milestone ids never collide (as rotated x labels did). The
    first stage is at the top; the panels share a legend below them.
    """
    from matplotlib.figure import Figure

    policies, entries = policy_ids(report), entry_ids(report)
    panels = max(1, len(entries))
    cols = min(2, panels)  # wide panels: each carries its own column of stage labels
    rows = math.ceil(panels / cols)
    stages = {e: _stages(report, policies, e) for e in entries}
    bars = max([len(s) + 1 for s in stages.values()] or [1])
    bar_rows = bars * max(1, len(policies))
    height = max(_PANEL_H, 0.9 + 0.16 * bar_rows)
    fig = Figure(figsize=(_PANEL_W * 1.55 * cols, height * rows + 0.6), dpi=100,
                 layout="constrained")  # fmt: skip
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    width = 0.8 / max(1, len(policies))
    for ax, entry in zip(axes, entries, strict=False):
        labels = [*stages[entry], "success"]
        for i, pid in enumerate(policies):
            m = metrics_of(report, pid, entry)
            rates = m.get("stage_rates")
            rates = rates if isinstance(rates, Mapping) else {}
            xs = [num(rates.get(s)) or 0.0 for s in stages[entry]]
            xs.append(num(m.get("success_rate")) or 0.0)
            ys = [j - 0.4 + width * (i + 0.5) for j in range(len(xs))]
            ax.barh(ys, xs, height=width, color=_colour(i))
        ax.set_yticks(range(len(labels)), [_stage_label(s) for s in labels], fontsize=8)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # the first stage on top
        ax.set_title(_mpl_text(entry) + ("" if stages[entry] else " (no milestones)"), fontsize=10)
        ax.set_xlim(0, 1.05)
        ax.set_xlabel("share of valid episodes", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    if not entries:
        _no_data(axes[0], "no results")
    return fig, policies


def funnel_png(report: Mapping[str, Any]) -> bytes:
    """Per entry, the share of valid episodes that reached each milestone stage, most
    often reached first, ending with success; one bar per policy in each group."""
    fig, policies = funnel_figure(report)
    return _finish(fig, policies, "s", line=False)


def pass_hat_k_png(report: Mapping[str, Any]) -> bytes:
    """Per entry, pass^k (all k trials of a task succeed) for k = 1..K, a line per policy.

    With one trial per task only k = 1 exists and each policy is a single point.
    """
    policies, entries = policy_ids(report), entry_ids(report)
    fig, axes = _figure(len(entries))
    for ax, entry in zip(axes, entries, strict=False):
        ks_all: set[int] = set()
        for i, pid in enumerate(policies):
            table = k_table(metrics_of(report, pid, entry).get("pass_hat_k"))
            if table:
                ax.plot(list(table), list(table.values()), "-o", color=_colour(i), markersize=4)
                ks_all |= set(table)
        if ks_all:
            ax.set_xticks(sorted(ks_all))
        else:
            _no_data(ax, "no pass^k figures")
        ax.set_title(_mpl_text(entry), fontsize=10)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel("k (trials per task)", fontsize=8)
        ax.set_ylabel("pass^k", fontsize=8)
        ax.grid(alpha=0.3)
    if not entries:
        _no_data(axes[0], "no results")
    return _finish(fig, policies, "o", line=True)


def render_plots(report: Mapping[str, Any]) -> dict[str, bytes]:
    """All three plots as PNG bytes, keyed ``pareto``, ``funnel`` and ``pass_hat_k``."""
    return {
        "pareto": pareto_png(report),
        "funnel": funnel_png(report),
        "pass_hat_k": pass_hat_k_png(report),
    }
