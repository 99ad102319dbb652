"""The Portfolio sections of ``portfolio --html``: a Gantt chart by card or instance, cost breakdown, break-even.

Drawn from ``report_portfolio.portfolio_json`` plus each occurrence's release and due day, read from the portfolio
file (the JSON gives when each job ran, not the window it had to run in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optimizer.report.html.html_shell import cell, definitions, esc, money, num, section, table
from optimizer.report.html.html_svg import Bar, gantt, stacked_bar
from optimizer.report.plan import _units

Window = tuple[float, float]  # release and due day of one job occurrence


def _job_text(j: dict[str, Any], window: Window | None) -> str:
    p = j["plan"]
    where = f"{j['where']}" + (f" via {j['offer']}" if j.get("offer") else "")
    hours = j["end_hours"] - j["start_hours"]
    span = f"day {j['start_hours'] / 24:,.2f} to {j['end_hours'] / 24:,.2f} ({hours:,.1f} h)"
    win = f"\nwindow: day {window[0]:g} to {window[1]:g}" if window else ""
    return (f"{j['name']} #{j['occurrence']}: {j['gpu']} x {j['cards']} {where}\n{span}{win}\n"
            f"tp{p['tp']} dp{p['dp']} ZeRO-{p['zero_stage']}/{p['offload']} mb{p['micro_batch']} x "
            f"ga{p['grad_accum']} ck {p['checkpointing']}")  # fmt: skip


def card_rows(doc: dict[str, Any]) -> tuple[list[str], list[Bar]]:
    """One row per owned or bought card and per rented instance, with the job bars placed on free cards.

    Jobs on a pool of cards are placed in start order on the lowest-numbered cards free at their start; the schedule
    never uses more cards of a pool at once than it has, so a free card is always found.
    """
    rows: list[str] = []
    bars: list[Bar] = []
    pools: dict[tuple[str, str], list[int]] = {}  # (where, gpu) -> row of each card
    for u in doc["utilisation"]:
        pools[(u["where"], u["gpu"])] = []
        for k in range(u["cards"]):
            pools[(u["where"], u["gpu"])].append(len(rows))
            rows.append(f"{u['where']} {u['gpu']} card {k + 1}")
    for pu in doc["purchases"]:
        for r in pools.get(("bought", pu["gpu"]), []):
            bars.append(Bar(r, 0.0, 0.0, "purchase", f"bought {pu['gpu']} on day 0: {pu['cards']} cards at "
                            f"{pu['price']:,.2f} {doc['cost']['currency']}"))  # fmt: skip
    for r in doc["rentals"]:
        units = ", ".join(_units(t, n) for t, n in r["units"].items())
        bars.append(Bar(len(rows), r["start_hours"] / 24, r["end_hours"] / 24, "rental",
                        f"rented {r['offer']} x {r['cards']} ({r['term']}: {units})\nday {r['start_hours'] / 24:,.2f} "
                        f"to {r['end_hours'] / 24:,.2f}; carries {', '.join(r['jobs'])}"))  # fmt: skip
        rows.append(f"rented {r['offer']} x{r['cards']}")
    free_at: dict[int, float] = {}
    for j in sorted(doc["jobs"], key=lambda j: (j["start_hours"], j["name"], j["occurrence"])):
        label = f"{j['name']}#{j['occurrence']}"
        if j["where"] == "rented":
            lanes = [len(rows) - len(doc["rentals"]) + i for i, r in enumerate(doc["rentals"]) if label in r["jobs"]]
        else:
            cards = pools.get((j["where"], j["gpu"]), [])
            lanes = [c for c in cards if free_at.get(c, 0.0) <= j["start_hours"] + 1e-6][: j["cards"]]
            for c in lanes:
                free_at[c] = j["end_hours"]
        for lane in lanes:
            bars.append(Bar(lane, j["start_hours"] / 24, j["end_hours"] / 24, f"job {j['where']}",
                            _job_text(j, None), label))  # fmt: skip
    return rows, bars


def window_rows(doc: dict[str, Any], windows: dict[tuple[str, int], Window], first: int) -> tuple[list[str], list[Bar]]:
    """One row per job occurrence from row ``first``: its release-to-due window and when it ran inside it."""
    rows: list[str] = []
    bars: list[Bar] = []
    for j in sorted(doc["jobs"], key=lambda j: (windows.get((j["name"], j["occurrence"]), (0.0, 0.0)), j["name"],
                                                j["occurrence"])):  # fmt: skip
        w = windows.get((j["name"], j["occurrence"]))
        row = first + len(rows)
        rows.append(f"window {j['name']} #{j['occurrence']}")
        if w is not None:
            bars.append(Bar(row, w[0], w[1], "window", f"{j['name']} #{j['occurrence']}: release day {w[0]:g}, due day "
                            f"{w[1]:g}"))  # fmt: skip
        bars.append(Bar(row, j["start_hours"] / 24, j["end_hours"] / 24, f"job {j['where']}", _job_text(j, w)))
    return rows, bars


def schedule_section(doc: dict[str, Any], windows: dict[tuple[str, int], Window]) -> str:
    """The Gantt chart: cards and instances first, then each occurrence's window with its run."""
    if not doc["jobs"]:
        return section("schedule", "Schedule", f'<p class="bad">{esc(doc.get("message") or "No schedule.")}</p>')
    rows, bars = card_rows(doc)
    more_rows, more_bars = window_rows(doc, windows, len(rows))
    chart = gantt(rows + more_rows, bars + more_bars, doc["horizon_days"],
                  f"{doc['name']}: schedule by card and instance, and each job's window")  # fmt: skip
    legend = ('<p class="legend"><span class="key"><i class="job owned"></i>job on an owned card</span>'
              '<span class="key"><i class="job bought"></i>on a bought card</span>'
              '<span class="key"><i class="job rented"></i>on a rented instance</span>'
              '<span class="key"><i class="rental"></i>rental</span>'
              '<span class="key"><i class="window"></i>release-to-due window</span>'
              '<span class="key"><i class="purchase"></i>purchase</span></p>')
    jobs = [[cell(j["name"]), cell(j["occurrence"], j["occurrence"]),
             cell(num(j["start_hours"] / 24), j["start_hours"]), cell(num(j["end_hours"] / 24), j["end_hours"]),
             cell(f"{j['gpu']} x {j['cards']}"), cell(j["where"]),
             cell(j.get("offer") or "-")] for j in doc["jobs"]]  # fmt: skip
    body = (chart + legend + "<p>Days count from day 0 of the horizon. Hover or focus a bar for its plan.</p>"
            + table(("job", "#", "start day", "end day", "GPU x cards", "where", "offer"), jobs, ident="jobs-table",
                    sortable=True))  # fmt: skip
    return section("schedule", "Schedule", body)


def cost_section(doc: dict[str, Any]) -> str:
    """Cost by kind (rent, capital share of bought cards, electricity) with the proven bound, and purchases."""
    c = doc["cost"]
    cur = c["currency"]
    if c.get("total") is None:
        return section("portfolio-cost", "Cost", "<p>No schedule, no cost.</p>")
    parts = [(k, float(c[k] or 0.0)) for k in ("rent", "capital", "power")]
    chart = stacked_bar(parts, [], None, 1.0, cur, "portfolio cost by kind")
    legend = "".join(f'<span class="key"><i class="part p{i}"></i>{k}: {money(v, cur)}</span>'
                     for i, (k, v) in enumerate(parts))  # fmt: skip
    facts = [("Total", money(c["total"], cur)), ("Status", esc(doc["status"]))]
    if doc.get("bound") is not None:
        facts.append(("Proven lower bound", money(doc["bound"], cur)))
    facts += [("Bought", f"{p['cards']} x {esc(p['gpu'])} at {money(p['price'], cur)}") for p in doc["purchases"]]
    if not doc["purchases"]:
        facts.append(("Bought", "nothing"))
    return section("portfolio-cost", "Cost", chart + f'<p class="legend">{legend}</p>' + definitions(facts))


def break_even_section(doc: dict[str, Any]) -> str:
    """Break-even of buying each GPU type, and the utilisation of owned and bought cards."""
    be = [[cell(b["gpu"]), cell("never (no hourly rental above electricity)" if b["hours_per_week"] is None else
                                f"{b['hours_per_week']:,.1f} hours/week per card", b["hours_per_week"] or -1.0)]
          for b in doc["break_even"]]  # fmt: skip
    ut = [[cell(u["where"]), cell(u["gpu"]), cell(u["cards"], u["cards"]), cell(num(u["busy_card_hours"], 1),
           u["busy_card_hours"]), cell("-" if u["utilisation"] is None else f"{100 * u['utilisation']:.1f}%",
                                       u["utilisation"] or 0.0)] for u in doc["utilisation"]]  # fmt: skip
    body = ("<p>Buying a card pays when it runs more hours a week than this (its capital share and electricity "
            "against the cheapest hourly rental of the same GPU).</p>"
            + table(("gpu", "buying pays above"), be, ident="break-even-table")
            + "<h3>Utilisation over the horizon</h3>"
            + table(("where", "gpu", "cards", "busy card-hours", "utilisation"), ut, ident="utilisation-table"))
    return section("break-even", "Break-even of buying", body)


def windows_of(path: str) -> dict[tuple[str, int], Window]:
    """(job, occurrence) -> (release day, due day), read from the portfolio file."""
    from optimizer.portfolio.plan import load_portfolio

    pf = load_portfolio(path)
    return {(j.name, k): j.window_days(k) for j in pf.jobs for k in range(j.occurrences)}


def portfolio_sections(doc: dict[str, Any], windows: dict[tuple[str, int], Window]) -> Sequence[str]:
    """Every section of a portfolio page."""
    return [schedule_section(doc, windows), cost_section(doc), break_even_section(doc)]
