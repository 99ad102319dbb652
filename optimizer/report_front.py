"""Rendering of cost-versus-time fronts: table, CSV, JSON and the matplotlib plot."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from optimizer.atomic import write_atomic
from optimizer.errors import InputError
from optimizer.pareto import ParetoResult
from optimizer.report import GIB, estimate_json

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
    """The front as JSON: axes, limits and every point as a docs/json-contract.md document with cost and hours."""
    doc: dict[str, Any] = {
        "scenario": result.scenario.name,
        "status": pareto_status(result),
        "objective": result.scenario.objective.value,
        "currency": result.currency,
        "budget": result.budget,
        "deadline_hours": result.deadline_hours,
        "chosen": result.chosen,
        "points": [
            {"cost": c, "hours": h, "chosen": i == result.chosen, **estimate_json(e)}
            for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True))
        ],
    }
    if result.relaxation is not None:
        doc["explanation"] = {"binding": result.relaxation.binding, "message": result.relaxation.message}
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
        table.add_row("*" if chosen else "", str(i), p.gpu, str(p.cards), layout, f"{h:,.2f}", f"{c:,.2f}",
                      f"{m.total / GIB:.0f}/{m.capacity / GIB:.0f}", style="bold" if chosen else None)  # fmt: skip
    return table


def print_pareto(result: ParetoResult, console: Console) -> None:
    """Human-readable front: header, table, proof line (or the infeasibility explanation)."""
    sc = result.scenario
    console.print(f"[bold]{escape(str(sc.name))}[/bold]: {sc.method.value} fine-tuning, "
                  f"{result.candidates} candidate plans, "
                  f"{result.solves} CP-SAT solves (epsilon-constraint on hours)")  # fmt: skip
    if not result.estimates:
        message = result.relaxation.message if result.relaxation else "no plan meets the constraints"
        console.print(f"[bold red]Infeasible[/bold red]: {escape(message)}")
        return
    console.print(pareto_table(result))
    proof = "each point proven optimal for its time bound" if pareto_status(result) == "optimal" else (
        "some points are the best found within the time limit, not proven")  # fmt: skip
    console.print(f"Front: {proof}; * = the plan `ftopt solve` returns (objective {sc.objective.value})")


OFF_SCALE = 3.0  # plot_front draws a budget or deadline line only up to this multiple of the front's largest value


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


def plot_front(result: ParetoResult, path: str | Path) -> None:
    """Draw the front (hours versus cost) to a PNG or SVG file.

    Points are labelled GPU x cards, the chosen plan is ringed in red, budget and deadline are dashed lines.
    Needs matplotlib (``pip install 'ftopt[plot]'``); the figure is drawn with the Agg canvas (no display, no
    pyplot state), so it works in workers and on servers.
    """
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise InputError(str(path), "--plot", f"unknown plot format '{fmt or path}'; use a .png or .svg file")
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import StrMethodFormatter
    except ImportError:
        raise InputError("--plot", "", "matplotlib is not installed; pip install 'ftopt[plot]'") from None
    fig = Figure(figsize=(9, 6), dpi=110)
    ax = fig.add_subplot()
    by_time = sorted(zip(result.hours, result.costs, strict=True))  # attainable cost at each time: a staircase
    ax.step([h for h, _ in by_time], [c for _, c in by_time], where="post", color="0.75", linewidth=1, zorder=1)
    ax.scatter(result.hours, result.costs, color="tab:blue", s=28, zorder=3, label="non-dominated plan")
    _uncertainty_bars(ax, result)
    for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True)):
        assert e.plan is not None
        offset, align = ((5, 4), "left") if i % 2 == 0 else ((-5, -11), "right")  # alternate sides: fewer overlaps
        ax.annotate(f"{e.plan.gpu} x{e.plan.cards}", (h, c), textcoords="offset points", xytext=offset,
                    ha=align, fontsize=8)  # fmt: skip
        if i == result.chosen:
            ax.scatter([h], [c], s=160, facecolors="none", edgecolors="tab:red", linewidths=2, zorder=4,
                       label=f"chosen (objective {result.scenario.objective.value})")  # fmt: skip
    # a limit far beyond the front would squash it: drawn only within OFF_SCALE x the largest value, else named
    if result.budget is not None:
        label = f"budget {result.budget:,.0f} {result.currency}"
        if result.budget <= OFF_SCALE * max(result.costs, default=result.budget):
            ax.axhline(result.budget, color="tab:green", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=f"{label} (far above)")
    if result.deadline_hours is not None:
        label = f"deadline {result.deadline_hours:g} h"
        if result.deadline_hours <= OFF_SCALE * max(result.hours, default=result.deadline_hours):
            ax.axvline(result.deadline_hours, color="tab:orange", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=f"{label} (far right)")
    spread = max(result.costs, default=1) / max(min(result.costs, default=1), 1e-9)
    if spread > 20:
        ax.set_yscale("log")
    if max(result.hours, default=1) / max(min(result.hours, default=1), 1e-9) > 20:
        ax.set_xscale("log")
    ax.margins(x=0.08, y=0.08)
    ax.set_xlabel("wall-clock hours")
    ax.set_ylabel(f"total cost ({result.currency})")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_title(f"{result.scenario.name}: cost versus time ({len(result.estimates)} non-dominated plans)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, metadata={"Software": None} if fmt == "png" else {"Date": None})
    write_atomic(path, buf.getvalue())
