"""The Front section of ``pareto --html``: cost versus hours, hover for each plan, the chosen one, budget and deadline.

Drawn from ``report_front.pareto_json``; each point's cost on the chart is the front's cost in the report currency
(the same figures ``pareto --csv`` writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optimizer.report.front import LIMIT_REACH
from optimizer.report.html.html_plan import layout
from optimizer.report.html.html_shell import GIB, cell, esc, num, section, table
from optimizer.report.html.html_svg import Dot, scatter


def point_text(i: int, point: dict[str, Any], cost: float, currency: str) -> str:
    """A point's hover text: number, GPU x cards, offer, layout, batch, hours and cost."""
    p = point["plan"]
    mark = " (chosen)" if point["chosen"] else ""
    return (f"#{i}{mark}: {p['gpu']} x {p['cards']} ({p['offer']})\n{layout(p)}; mb {p['micro_batch']} x ga "
            f"{p['grad_accum']}; {p['precision']}; ck {p['checkpointing']}\n{point['time']['hours']:,.2f} h, "
            f"{cost:,.2f} {currency}")  # fmt: skip


def _limit(value: float | None, largest: float, text: str) -> tuple[tuple[float, str] | None, str | None]:
    """A limit line near the front, or (when far beyond it) a caption naming it instead of stretching the axis."""
    if value is None:
        return None, None
    if value <= LIMIT_REACH * largest:
        return (value, text), None
    return None, f"{text} lies beyond every plan and is not drawn"


def front_section(doc: dict[str, Any], costs: Sequence[float]) -> str:
    """Scatter of every non-dominated plan plus a sortable table of the same points."""
    cur, points = doc["currency"], doc["points"]
    if not points:
        message = (doc.get("explanation") or {}).get("message") or "no plan meets the constraints"
        return section("front", "Front", f'<p class="bad">Infeasible: {esc(message)}</p>')
    hours = [pt["time"]["hours"] for pt in points]
    budget = f"budget {doc['budget']:,.0f} {cur}" if doc.get("budget") is not None else ""
    deadline = f"deadline {doc['deadline_hours']:g} h" if doc.get("deadline_hours") is not None else ""
    hline, hnote = _limit(doc.get("budget"), max(costs), budget)
    vline, vnote = _limit(doc.get("deadline_hours"), max(hours), deadline)
    dots = [Dot(h, c, point_text(i, pt, c, cur), pt["chosen"]) for i, (pt, c, h) in enumerate(zip(points, costs, hours,
                                                                                                    strict=True))]
    chart = scatter(dots, "wall-clock hours", f"total cost ({cur})", vline, hline,
                    f"{doc['scenario']}: cost versus hours of {len(points)} non-dominated plans")  # fmt: skip
    notes = "".join(f" {esc(n[0].upper() + n[1:])}." for n in (hnote, vnote) if n)
    caption = (f"<p>{len(points)} non-dominated plans (each {esc(doc['status'])} for its time bound); the ringed point "
               f"is the plan <code>ftopt solve</code> returns (objective {esc(doc['objective'])}). Hover or focus a "
               "point to see its plan." + notes + "</p>")  # fmt: skip
    rows = []
    for i, (pt, c, h) in enumerate(zip(points, costs, hours, strict=True)):
        p, m = pt["plan"], pt["memory"]
        rows.append([cell("*" if pt["chosen"] else "", int(pt["chosen"])), cell(i, i), cell(p["gpu"]),
                     cell(p["cards"], p["cards"]), cell(layout(p)), cell(f"mb{p['micro_batch']} x ga{p['grad_accum']}"),
                     cell(num(h), h), cell(num(c), c), cell(f"{m['total'] / GIB:,.1f}", m["total"])])  # fmt: skip
    head = ("chosen", "#", "gpu", "cards", "layout", "batch", "hours", f"cost ({cur})", "GiB per GPU")
    return section("front", "Front", chart + caption + table(head, rows, ident="front-table", sortable=True))
