"""Rendering of cost-versus-time fronts: table, CSV, JSON and the matplotlib plot."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from optimizer.inputs.errors import InputError
from optimizer.inputs.terminal import escape
from optimizer.report.plan import GIB, alternatives_json, estimate_json
from optimizer.solve.pareto import ParetoResult

# ------------------------------------------------------------------------------------------------ pareto fronts

PARETO_CSV_FIELDS = ("point", "chosen", "status", "gpu", "offer", "cards", "nodes", "tp", "pp", "dp", "zero_stage",
                     "offload", "micro_batch", "grad_accum", "precision", "optimizer", "checkpointing", "term",
                     "cost", "currency", "hours", "memory_total_bytes")  # fmt: skip


def pareto_status(result: ParetoResult) -> str:
    """Infeasible when the front is empty, feasible when a time limit left a point unproven, else optimal."""
    if not result.estimates:
        return "infeasible"
    return "feasible" if any(e.status.value == "feasible" for e in result.estimates) else "optimal"


def pareto_json(result: ParetoResult) -> dict[str, Any]:
    """The front as JSON: axes, limits and every point as a docs/json-contract.md plan document.

    Each point adds ``chosen`` and ``front`` {cost, hours}: its position on the front in the report currency (the
    document's ``currency``); the plan document's own ``cost`` stays in the offer's currency.
    """
    doc: dict[str, Any] = {
        "scenario": result.scenario.name,
        "status": pareto_status(result),
        "objective": result.scenario.objective.value,
        "currency": result.currency,
        "budget": result.budget,
        "deadline_hours": result.deadline_hours,
        "chosen": result.chosen,
        "points": [
            {**estimate_json(e), "chosen": i == result.chosen, "front": {"cost": c, "hours": h}}
            for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True))
        ],
    }
    if result.relaxation is not None:
        r = result.relaxation
        doc["explanation"] = {"binding": r.binding, "message": r.message, **alternatives_json(r)}
    return doc


def pareto_csv(result: ParetoResult) -> str:
    """The front as CSV text, one row per point, cheapest first."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PARETO_CSV_FIELDS)
    for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True)):
        p, m = e.plan, e.memory
        assert p is not None and m is not None
        writer.writerow([i, int(i == result.chosen), e.status.value, p.gpu, p.offer, p.cards, p.nodes, p.tp, p.pp,
                         p.dp, p.zero_stage, p.offload.value, p.micro_batch, p.grad_accum, p.precision.value,
                         p.optimizer.value, p.checkpointing.value, p.term, c, result.currency, h, m.total])  # fmt: skip
    return buf.getvalue()


def pareto_table(result: ParetoResult) -> Table:
    """The front as a terminal table, cheapest first; the plan ``solve`` chooses is marked."""
    table = Table(title=f"Cost versus time: {len(result.estimates)} non-dominated plans", show_edge=False)
    for col in ("", "#", "gpu", "cards", "layout", "hours", f"cost {result.currency}", "GiB/GPU"):
        table.add_column(col, justify="left" if col in ("", "gpu", "layout") else "right")
    for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True)):
        p, m = e.plan, e.memory
        assert p is not None and m is not None
        layout = f"tp{p.tp} dp{p.dp} Z{p.zero_stage}/{p.offload.value} mb{p.micro_batch} ck={p.checkpointing.value}"
        chosen = i == result.chosen
        table.add_row("*" if chosen else "", str(i), escape(p.gpu), str(p.cards), layout, f"{h:,.2f}", f"{c:,.2f}",
                      f"{m.total / GIB:,.0f}/{m.capacity / GIB:,.0f}", style="bold" if chosen else None)  # fmt: skip
    return table


def solves_text(n: int) -> str:
    """'1 CP-SAT solve', '12 CP-SAT solves': the count of solves a front took, the noun in its number."""
    return f"{n:,} CP-SAT solve{'' if n == 1 else 's'}"


def print_pareto(result: ParetoResult, console: Console) -> None:
    """Human-readable front: header, table, proof line (or the infeasibility explanation)."""
    sc = result.scenario
    console.print(f"[bold]{escape(str(sc.name))}[/bold]: {sc.method.value} fine-tuning, "
                  f"{result.candidates} candidate plans, "
                  f"{solves_text(result.solves)} (epsilon-constraint on hours)")  # fmt: skip
    if not result.estimates:
        message = result.relaxation.message if result.relaxation else "no plan meets the constraints"
        console.print(f"[bold red]Infeasible[/bold red]: {escape(message)}")
        return
    console.print(pareto_table(result))
    proof = "each point proven optimal for its time bound" if pareto_status(result) == "optimal" else (
        "some points are the best found within the time limit, not proven")  # fmt: skip
    console.print(f"Front: {proof}; * = the plan `ftopt solve` returns (objective {sc.objective.value})")


def _uncertainty_bars(ax: Any, result: ParetoResult) -> None:
    """Error bars: each point's hours and cost at the 10th and 90th percentile of the models' held-out errors.

    From optimizer/models/uncertainty.py; the cost band is converted to the front's currency by the point's own rate.
    """
    xs, ys, xerr, yerr = [], [], [[], []], [[], []]
    for e, c, h in zip(result.estimates, result.costs, result.hours, strict=True):
        u = e.uncertainty
        if u is None or e.cost is None or e.cost.total <= 0:
            continue
        rate = c / e.cost.total
        xs.append(h)
        ys.append(c)
        xerr[0].append(max(h - u.time.hours_p10, 0.0))
        xerr[1].append(max(u.time.hours_p90 - h, 0.0))
        yerr[0].append(max(c - u.cost.total_p10 * rate, 0.0))
        yerr[1].append(max(u.cost.total_p90 * rate - c, 0.0))
    if xs:
        bars = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor="0.55", elinewidth=0.8, capsize=2,
                           zorder=2, label="10th-90th percentile of held-out errors")  # fmt: skip
        for collection in bars.lines[2]:
            collection.set_gid("uncertainty")


# label positions tried in turn (offset in points, horizontal alignment): right-up, left-down, right-down, left-up,
# then the same further out; a label that fits nowhere is left off and counted in the legend
_LABEL_SPOTS = [((5, 4), "left"), ((-5, -11), "right"), ((5, -11), "left"), ((-5, 4), "right"),
                ((8, 12), "left"), ((-8, -19), "right"), ((8, -19), "left"), ((-8, 12), "right")]  # fmt: skip
LIMIT_REACH = 1.5  # a budget or deadline line is drawn only within this multiple of the front's largest value


def _place_labels(ax: Any, fig: Any, result: ParetoResult) -> int:
    """Label each point GPU x cards where the label overlaps no other label or point; return how many were left off.

    Greedy over the points in front order (cheapest first): each label tries _LABEL_SPOTS until one's box, in
    display pixels, is clear of the labels already placed, of every marker and of the axes' edges.
    """
    renderer = fig.canvas.get_renderer()
    marks = ax.transData.transform(list(zip(result.hours, result.costs, strict=True)))
    box = ax.get_window_extent(renderer)
    placed: list[Any] = []
    skipped = 0
    for e, c, h in zip(result.estimates, result.costs, result.hours, strict=True):
        assert e.plan is not None
        for offset, align in _LABEL_SPOTS:
            text = ax.annotate(f"{e.plan.gpu} x{e.plan.cards}", (h, c), textcoords="offset points", xytext=offset,
                               ha=align, fontsize=8)  # fmt: skip
            ext = text.get_window_extent(renderer).expanded(1.05, 1.15)
            inside = box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1
            hits_mark = any(ext.x0 - 3 <= x <= ext.x1 + 3 and ext.y0 - 3 <= y <= ext.y1 + 3 for x, y in marks)
            if inside and not hits_mark and not any(ext.overlaps(other) for other in placed):
                placed.append(ext)
                break
            text.remove()
        else:
            skipped += 1
    return skipped


def _limit_lines(ax: Any, result: ParetoResult) -> None:
    """Budget and deadline as dashed lines when near the front; a far one is named in the legend, not drawn.

    A line far beyond the front would stretch the axis and flatten the region where the plans differ.
    """
    if result.budget is not None:
        label = f"budget {result.budget:,.0f} {result.currency}"
        if result.budget <= LIMIT_REACH * max(result.costs, default=result.budget):
            ax.axhline(result.budget, color="tab:green", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=f"{label} (above every plan, not drawn)")
    if result.deadline_hours is not None:
        label = f"deadline {result.deadline_hours:g} h"
        if result.deadline_hours <= LIMIT_REACH * max(result.hours, default=result.deadline_hours):
            ax.axvline(result.deadline_hours, color="tab:orange", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=f"{label} (beyond every plan, not drawn)")


def _axes(ax: Any, result: ParetoResult) -> None:
    """Log scales where the values span more than 20x, said in the axis labels, with plain-number ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:,.2g}")
    x_log = max(result.hours, default=1) / max(min(result.hours, default=1), 1e-9) > 20
    y_log = max(result.costs, default=1) / max(min(result.costs, default=1), 1e-9) > 20
    if x_log:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    if y_log:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.yaxis.set_major_formatter(plain)
    ax.set_xlabel("wall-clock hours" + (" (log scale)" if x_log else ""))
    ax.set_ylabel(f"total cost ({result.currency})" + (" (log scale)" if y_log else ""))
    ax.margins(x=0.1, y=0.12)


def plot_front(result: ParetoResult, path: str | Path) -> bytes:
    """The front (hours versus cost) drawn as the PNG or SVG bytes of the file ``path`` (its suffix picks which).

    Points are labelled GPU x cards where a label fits without overlapping (the others are counted in the
    legend; ``--csv`` lists every point), the chosen plan is ringed in red, a budget or deadline near the front is
    a dashed line, and the legend sits below the axes, never over the data. Needs matplotlib (``pip install
    'ftopt[plot]'``); the figure is drawn with the Agg canvas (no display, no pyplot state), so it works in
    workers and on servers. The caller writes the bytes (with the command's other outputs, all or none).
    """
    return figure_bytes(front_figure(result), plot_format(path))


def plot_format(path: str | Path) -> str:
    """``png`` or ``svg`` from the suffix of a ``--plot`` file; InputError (exit 2) for any other."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise InputError(str(path), "--plot", f"unknown plot format '{fmt or path}'; use a .png or .svg file")
    return fmt


def figure_bytes(fig: Any, fmt: str) -> bytes:
    """A figure as PNG or SVG bytes, identical between runs.

    No date or software stamp, and SVG element ids hashed with a fixed salt (matplotlib's ``svg.hashsalt``; by
    default a random one per process).
    """
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "ftopt"}):
        fig.savefig(buf, format=fmt, metadata={"Software": None} if fmt == "png" else {"Date": None})
    return buf.getvalue()


def front_figure(result: ParetoResult) -> Any:
    """The matplotlib Figure :func:`plot_front` saves."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("--plot", "", "matplotlib is not installed; pip install 'ftopt[plot]' (from a checkout: "
                         "pip install -e '.[plot]')") from None
    fig = Figure(figsize=(9, 6.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    by_time = sorted(zip(result.hours, result.costs, strict=True))  # attainable cost at each time: a staircase
    ax.step([h for h, _ in by_time], [c for _, c in by_time], where="post", color="0.75", linewidth=1, zorder=1)
    ax.scatter(result.hours, result.costs, color="tab:blue", s=28, zorder=3, label="non-dominated plan")
    _uncertainty_bars(ax, result)
    if result.chosen is not None:
        ax.scatter([result.hours[result.chosen]], [result.costs[result.chosen]], s=160, facecolors="none",
                   edgecolors="tab:red", linewidths=2, zorder=4,
                   label=f"chosen (objective {result.scenario.objective.value})")  # fmt: skip
    _limit_lines(ax, result)
    _axes(ax, result)
    ax.set_title(f"{result.scenario.name}: cost versus time ({len(result.estimates)} non-dominated plans)")
    ax.grid(True, which="both", alpha=0.3)
    fig.canvas.draw()  # fixes the layout, so label boxes are measured where they will be drawn
    skipped = _place_labels(ax, fig, result)
    if skipped:
        ax.plot([], [], " ", label=f"{skipped} crowded point{'s' if skipped > 1 else ''} unlabelled (--csv lists all)")
    fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return fig
