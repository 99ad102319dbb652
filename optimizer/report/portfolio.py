"""Rendering of a portfolio schedule: JSON (issue 15 contract), terminal tables and a Gantt chart (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from optimizer.inputs.errors import InputError
from optimizer.inputs.terminal import escape
from optimizer.portfolio.plan import PortfolioResult
from optimizer.report.plan import _units


def portfolio_json(result: PortfolioResult) -> dict[str, Any]:
    """The issue 15 JSON contract, plus name, bound (proven lower bound), horizon_days and utilisation.

    Contract keys: status, cost {total, currency, rent, capital, power}, purchases, jobs, rentals, break_even.
    """
    doc: dict[str, Any] = {
        "name": result.name,
        "status": result.status,
        "bound": result.bound,
        "horizon_days": result.horizon_days,
        "cost": result.cost,
        "purchases": result.purchases,
        "jobs": result.jobs,
        "rentals": result.rentals,
        "utilisation": result.utilisation,
        "break_even": result.break_even,
    }
    if result.message:
        doc["message"] = result.message
    return doc


def _money(value: float | None, currency: str) -> str:
    return "-" if value is None else f"{value:,.2f} {currency}"


def plan_text(p: dict[str, Any]) -> str:
    """A job's plan in the table: tp, pp (when above 1), dp, ZeRO stage, offload (when not none), micro-batch, ck.

    One token per setting, no space inside one, so a narrow column wraps between settings, never inside one.
    """
    parts = [f"tp{p['tp']}"] + ([f"pp{p['pp']}"] if p["pp"] > 1 else []) + [f"dp{p['dp']}", f"Z{p['zero_stage']}"]
    parts += [f"offload={p['offload']}"] if p["offload"] != "none" else []
    return " ".join(parts + [f"mb{p['micro_batch']}", f"ck={p['checkpointing']}"])


def _jobs_table(result: PortfolioResult) -> Table:
    table = Table(title="Job occurrences", title_justify="left")
    for col in ("job", "#", "start h", "end h", "GPU x cards", "where", "offer", "plan"):
        table.add_column(col, justify="right" if col in ("#", "start h", "end h") else "left")
    for j in result.jobs:
        hours = (f"{j['start_hours']:,.1f}", f"{j['end_hours']:,.1f}")
        table.add_row(escape(j["name"]), str(j["occurrence"]), *hours, f"{j['gpu']} x{j['cards']}", j["where"],
                      escape(j["offer"] or "-"), plan_text(j["plan"]))  # fmt: skip
    return table


def _rentals_table(result: PortfolioResult) -> Table:
    table = Table(title="Rentals", title_justify="left")
    for col in ("offer", "cards", "term", "units", "start h", "end h", "jobs"):
        table.add_column(col)
    for r in result.rentals:
        units = ", ".join(_units(t, n) for t, n in r["units"].items())  # as a plan's bill: '24,782 s (6.88 h)'
        table.add_row(escape(r["offer"]), str(r["cards"]), r["term"], units, f"{r['start_hours']:,.1f}",
                      f"{r['end_hours']:,.1f}", escape(", ".join(r["jobs"])))  # fmt: skip
    return table


def print_portfolio(result: PortfolioResult, console: Console) -> None:
    """Status and bound, cost by kind, purchases, occurrences, rentals, utilisation and break-even.

    An infeasible portfolio prints its message and ``Cost: no plan`` (no dashes for a cost that does not exist).
    """
    c = result.cost
    cur = result.currency
    bound = f" (proven lower bound {result.bound:,.2f} {cur})" if result.bound is not None else ""
    console.print(f"[bold]{escape(result.name)}[/]: {result.status}{bound}")
    if result.message:
        console.print(escape(result.message))
    if c["total"] is None:  # no schedule: there is no cost to break down
        console.print("Cost: no plan")
    else:
        console.print(f"Cost: {_money(c['total'], cur)} = rent {_money(c['rent'], cur)} + capital "
                      f"{_money(c['capital'], cur)} + power {_money(c['power'], cur)}")  # fmt: skip
    for p in result.purchases:
        console.print(f"Buy {p['cards']} x {p['gpu']} for {p['price']:,.2f} {cur}")
    if result.jobs:
        console.print(_jobs_table(result))
    if result.rentals:
        console.print(_rentals_table(result))
    for u in result.utilisation:
        share = "-" if u["utilisation"] is None else f"{100 * u['utilisation']:.1f}%"
        console.print(f"{u['where'].capitalize()} {u['gpu']} x{u['cards']}: {u['busy_card_hours']:,.1f} card-hours "
                      f"busy, utilisation {share}")  # fmt: skip
    for b in result.break_even:
        h = b["hours_per_week"]
        text = "never (no hourly rental above electricity)" if h is None else f"{h:,.1f} hours/week per card"
        console.print(f"Buying {b['gpu']} pays above {text}")


def plot_schedule(result: PortfolioResult, path: str | Path) -> bytes:
    """The Gantt chart as the PNG or SVG bytes of the file ``path`` (its suffix picks which).

    One lane per owned/bought pool and per rental, bars per job occurrence. Needs matplotlib (``pip install
    'ftopt[plot]'``); drawn on the Agg canvas (no display, no pyplot state). The caller
    writes the bytes (with the command's other outputs, all or none).
    """
    from optimizer.report.front import figure_bytes, plot_format

    fmt = plot_format(path)
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("--plot", "", "matplotlib is not installed; pip install 'ftopt[plot]'") from None

    lanes: list[str] = []
    bars: list[tuple[int, float, float, str, str]] = []
    for i, r in enumerate(result.rentals):
        lane = f"rent {r['offer']} x{r['cards']} ({r['term']})"
        lanes.append(lane)
        bars.append((i, r["start_hours"], r["end_hours"] - r["start_hours"], "0.85", ""))
    for j in result.jobs:
        if j["where"] == "rented":
            label = f"{j['name']}#{j['occurrence']}"
            lane_i = next(i for i, r in enumerate(result.rentals) if label in r["jobs"])
        else:
            lane = f"{j['where']} {j['gpu']}"
            lane_i = lanes.index(lane) if lane in lanes else len(lanes)
            if lane_i == len(lanes):
                lanes.append(lane)
        bars.append((lane_i, j["start_hours"], j["end_hours"] - j["start_hours"], "tab:blue",
                     f"{j['name']}#{j['occurrence']}"))  # fmt: skip
    fig = Figure(figsize=(11, 1.5 + 0.45 * max(len(lanes), 1)), dpi=110)
    ax = fig.add_subplot()
    for lane_i, start, width, colour, label in bars:
        ax.barh(lane_i, width, left=start, height=0.6 if label else 0.8, color=colour, edgecolor="0.3", linewidth=0.5)
        if label:
            ax.annotate(label, (start, lane_i), xytext=(2, 6), textcoords="offset points", fontsize=7)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.set_xlim(0, result.horizon_days * 24)
    ax.set_xlabel("hours from the horizon start")
    total = result.cost["total"]
    ax.set_title(f"{result.name}: {result.status}, total {total:,.2f} {result.currency}" if total is not None
                 else f"{result.name}: {result.status}")  # fmt: skip
    ax.invert_yaxis()
    fig.tight_layout()
    return figure_bytes(fig, fmt)
