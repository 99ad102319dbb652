"""Sections of one plan (solve, estimate, and the chosen point of a front) drawn from its JSON document.

Input is the docs/json-contract.md dict (``report.estimate_json``), so the page shows the figures ``--json`` prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from optimizer.inputs.catalog import load_catalog
from optimizer.models.coverage import NO_P2P, NO_RUN, WORST_RUN, above_text
from optimizer.report.html.html_shell import GIB, Cell, bullets, cell, definitions, esc, gib, money, num, section, table
from optimizer.report.html.html_svg import band, stacked_bar
from optimizer.report.offer import figure
from optimizer.report.plan import MEMORY_ROWS, _units, billing_basis, money_pair


def layout(p: dict[str, Any]) -> str:
    """The parallel layout in one short line: tp, pp (and chunks), dp, ZeRO stage and offload."""
    vp = f"x{p['virtual_pipeline']}" if p.get("virtual_pipeline", 1) > 1 else ""
    return f"tp{p['tp']} pp{p['pp']}{vp} dp{p['dp']} ZeRO-{p['zero_stage']}/{p['offload']}"


def money_cell_text(doc: dict[str, Any]) -> str:
    """A plan's bill as its Cost line writes it (report/plan.py money_text): '1,626.76 USD (= 11,010.86 CNY)'.

    From the JSON document, as the HTML is built; report/plan.py's money_text reads the Estimate.
    """
    c = doc["cost"]  # plain text: cell() escapes it
    return money_pair(c["total"], c["currency"], c.get("budget_currency_total"), c.get("budget_currency"))


def report_cost(doc: dict[str, Any]) -> float:
    """The bill in the report currency: the budget-currency figure when there is one, else the offer's."""
    c = doc["cost"]
    return c["budget_currency_total"] if c.get("budget_currency_total") is not None else c["total"]


def _sold_as(offer: dict[str, Any], cards: int) -> str | None:
    """How the offer is sold (``sold_as``, ``cards_per_instance``, keys of newer catalogs) when it says."""
    parts = []
    if offer.get("sold_as"):
        parts.append(esc(offer["sold_as"]))
    per = offer.get("cards_per_instance")
    if per:
        n = math.ceil(cards / per)
        parts.append(f"{per:,} card{'s' if per != 1 else ''} per instance: {n:,} instance{'s' if n != 1 else ''}")
    return "; ".join(parts) or None


def _prices(offer: dict[str, Any]) -> str:
    rows = [f"{p['amount']:g} {esc(offer['currency'])} per card-{esc(term)} (source: {esc(p['source'])}; "
            f"as of {esc(p['as_of'])})" for term, p in offer.get("prices", {}).items()]  # fmt: skip
    return "<br>".join(rows) or "-"


def plan_facts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, HTML) pairs of every decision of the plan and of the offer it rents."""
    p, offer = doc["plan"], doc.get("offer") or {}
    nodes = f"{p['nodes']} node{'s' if p['nodes'] != 1 else ''}"
    out = [("GPU", esc(p["gpu"])),
           ("Offer", f"{esc(p['offer'])}" + (f" from {esc(offer['provider'])}" if offer.get("provider") else ""))]
    sold = _sold_as(offer, p["cards"]) if offer else None
    if sold:
        out.append(("Sold as", sold))
    if offer:
        out.append(("Prices", _prices(offer)))
        if offer.get("notes"):
            out.append(("Offer notes", esc(offer["notes"])))
    out += [
        ("Cards", f"{p['cards']:,} ({nodes}); capacity {esc(p.get('capacity', 'on_demand'))}"),
        ("Parallelism", f"tensor tp={p['tp']}, pipeline pp={p['pp']}"
         + (f" ({p['virtual_pipeline']} interleaved chunks per stage)" if p.get("virtual_pipeline", 1) > 1 else "")
         + f", data dp={p['dp']}"),
        ("ZeRO and offload", f"ZeRO stage {p['zero_stage']}, offload {esc(p['offload'])}"),
        ("Batch", f"micro_batch {p['micro_batch']} x grad_accum {p['grad_accum']} x dp {p['dp']} = "
         f"{p['micro_batch'] * p['grad_accum'] * p['dp']:,} sequences per optimizer step"),
        ("Precision", f"{esc(p['precision'])}; optimizer {esc(p['optimizer'])}; checkpointing "
         f"{esc(p['checkpointing'])}"),
        ("Attention kernel", esc(p.get("attention") or "-")),
        ("Term", f"{esc(p['term'])}: {esc(billing_basis(p['term']))}"),
    ]
    return out


def _model_line(m: dict[str, Any]) -> str:
    return (f"{m['name']}, {m['params'] / 1e9:,.2f} B parameters; L={m['layers']} h={m['hidden']} "
            f"I={m['intermediate']} heads={m['heads']}/{m['kv_heads']} head_dim={m['head_dim']} V={m['vocab']:,}"
            + (" tied" if m.get("tied_embeddings") else ""))  # fmt: skip


def checklist_table(items: Sequence[dict[str, Any]]) -> str:
    """The after-renting checks: what, the command, the expected value and when to stop."""
    rows = [[cell(c["check"]), Cell(f"<code>{esc(c['command'])}</code>", c["command"]),
             cell(f"{figure(c['expected'])} {c['unit']}", c["expected"]), cell(c["stop_if"])]
            for c in items]  # fmt: skip
    return table(("check", "command", "expect", "stop and re-plan if"), rows, ident="checklist")


def plan_section(doc: dict[str, Any], heading: str = "") -> str:
    """Plan: status, model, decisions, offer, notes, requirements to confirm and the after-renting checklist."""
    if doc.get("plan") is None:
        return section("plan", "Plan", f'<p class="bad">No plan ({esc(doc.get("status"))}).</p>')
    body = [f'<p class="status">{esc(heading)}Status: <b>{esc(doc["status"])}</b></p>']
    if doc.get("model"):
        body.append(f"<p>Model: {esc(_model_line(doc['model']))}</p>")
    body.append(definitions(plan_facts(doc)))
    if doc.get("notes"):
        body.append("<h3>Notes</h3>" + bullets(doc["notes"]))
    spot = doc.get("spot")
    if spot:
        body.append(f"<p>Spot capacity at {spot['price_per_card_hour']:g} {esc(spot['currency'])}/card-hour; one node "
                    f"interrupted every {spot['mtbi_hours_low']:g}-{spot['mtbi_hours_high']:g} h; checkpoint every "
                    f"{spot['checkpoint_interval_hours']:,.2f} h.</p>")  # fmt: skip
    if doc.get("requirements"):
        body.append("<h3>Confirm with the provider before renting</h3>" + bullets(doc["requirements"]))
    if doc.get("checklist"):
        body.append("<h3>Check after renting</h3>" + checklist_table(doc["checklist"]))
    return section("plan", "Plan", "".join(body))


def memory_section(doc: dict[str, Any], headroom: float | None) -> str:
    """Memory: the per-GPU peak by component against the card, the usable line and the 10th-90th whisker."""
    m = doc.get("memory")
    if m is None:
        return ""
    u = (doc.get("uncertainty") or {}).get("memory")
    marks = [("capacity", m["capacity"], "card")]
    if headroom is not None:
        marks.insert(0, ("usable", m["capacity"] * (1 - headroom), f"usable ({100 * headroom:g}% headroom)"))
    whisker = (u["total_p10"], u["total_p90"]) if u else None
    chart = stacked_bar([(k, m[k]) for k in MEMORY_ROWS], marks, whisker, GIB, "GiB per GPU",
                        "per-GPU memory by component against the card's capacity")  # fmt: skip
    legend = "".join(f'<span class="key"><i class="part p{i}"></i>{esc(k)}</span>' for i, k in enumerate(MEMORY_ROWS))
    rows = [[cell(k), cell(gib(m[k]), m[k]), cell(f"{100 * m[k] / max(m['total'], 1):.0f}%", m[k])]
            for k in MEMORY_ROWS]  # fmt: skip
    rows.append([Cell("<b>total</b>", "total"), cell(gib(m["total"]), m["total"]),
                 cell(f"{100 * m['total'] / m['capacity']:.0f}% of {gib(m['capacity'])}", m["total"])])
    verdict = "fits" if m["fits"] else "DOES NOT FIT"
    lines = [f"Peak {gib(m['total'])} per GPU of {gib(m['capacity'])}: {verdict} on the GPU"
             + (f" (against capacity x (1 - {headroom:g} headroom))." if headroom is not None else ".")]
    if m.get("host_ram_fits") is False and m.get("host_ram_limit") is not None:  # the scenario's cap fails
        lines.append(f"Host RAM DOES NOT FIT: {gib(m['cpu_offload'])} offloaded per node, over "
                     f"allow.max_host_memory_gib ({gib(m['host_ram_limit'])}).")  # fmt: skip
    elif m.get("host_ram_fits") is False:  # the card is not what fails (or not alone): say what does
        have = (doc.get("offer") or {}).get("host_ram_bytes")
        lines.append(f"Host RAM DOES NOT FIT: {gib(m['host_ram_needed'])} needed per node"
                     + (f", {gib(have)} on the node." if have is not None else "."))
    if u:
        high = "fits" if u["fits_p90"] else "over the usable memory"
        lines.append(f"10th-90th percentile of the peak on {u['cases']} held-out cases: {gib(u['total_p10'])} to "
                     f"{gib(u['total_p90'])} ({high} at the high end).")
        if u.get("published_run_like_this") is False:
            lines.append(f"Evidence: {NO_RUN}.")
        worst = u.get("worst_run_like_this")
        if worst:
            lines.append(f"Evidence: {WORST_RUN.format(ratio=worst['ratio'], case=worst['case'])}.")
    if m.get("cpu_offload"):
        lines.append(f"Host RAM for offloading: {gib(m['cpu_offload'])} per node.")
    body = chart + f'<p class="legend">{legend}</p>' + "".join(f"<p>{esc(s)}</p>" for s in lines)
    return section("memory", "Memory", body + table(("component", "per GPU", "share"), rows, ident="memory-table"))


def fx_line(cost: dict[str, Any]) -> str | None:
    """The currency conversion of the bill, with the rate's source and date (catalogs/fx.yaml), when there is one."""
    if cost.get("budget_currency_total") is None:
        return None
    base, quote = cost["currency"], cost.get("budget_currency") or "the budget currency"
    rate = load_catalog().rate(base, quote) if cost.get("budget_currency") else None
    how = (f"at 1 {base} = {rate.rate:g} {quote} ({rate.source}; as of {rate.as_of})" if rate is not None
           else "at the catalog's rate")  # fmt: skip
    return f"{cost['total']:,.2f} {base} = {cost['budget_currency_total']:,.2f} {quote}, converted {how}"


def time_cost_section(doc: dict[str, Any], bound: dict[str, Any] | None = None) -> str:
    """Time and cost: hours and bill with their 10th-90th bands, the billing basis in words, conversions named."""
    t, c, p = doc.get("time"), doc.get("cost"), doc.get("plan")
    if t is None or c is None or p is None:
        return ""
    u = doc.get("uncertainty") or {}
    ut, uc = u.get("time"), u.get("cost")
    body = []
    units = ", ".join(_units(k, v) for k, v in p["billed_units"].items())
    facts = [
        ("Wall clock", f"{num(t['hours'])} h: {t['steps']:,} steps of {t['step_seconds']:.2f} s, "
         f"{t['tokens_per_second']:,.0f} tokens/s, MFU {100 * t['mfu']:.1f}%"
         + (f", HFU {100 * t['hfu']:.1f}%" if t.get("hfu") is not None else "")
         + (f", including {t['interruption_hours']:,.2f} h of restarts and lost work"
            if t.get("interruption_hours") else "")),
        ("Bill", money(c["total"], c["currency"])),
        ("Billing basis", esc(f"{billing_basis(p['term'])}: {units} per card x {p['cards']} card"
                              f"{'s' if p['cards'] != 1 else ''}")),
    ]
    fx = fx_line(c)
    if fx:
        facts.append(("Currency", esc(fx)))
    if ut:
        facts.append(("Hours, 10th-90th", f"{num(ut['hours_p10'])}-{num(ut['hours_p90'])} h (on {ut['cases']} "
                      "held-out cases)" + _holds("deadline", ut.get("meets_deadline_p90"))))  # fmt: skip
        if ut.get("published_run_like_this") is False:
            facts.append(("Evidence", esc(NO_RUN)))
        if ut.get("no_peer_to_peer"):
            facts.append(("Evidence", esc(NO_P2P)))
        if ut.get("above_published_runs") and t.get("hfu") is not None:
            above = above_text(ut["published_run_like_this"], t["hfu"], ut["best_published_hfu"])
            facts.append(("Evidence", esc(above)))
    if uc:
        lo, hi = money(uc["total_p10"], uc["currency"]), money(uc["total_p90"], uc["currency"])
        facts.append(("Bill, 10th-90th", f"{lo} to {hi}" + _holds("budget", uc.get("within_budget_p90"))))
    if bound:
        proof = f"best found within the time limit; proven bound {bound['value']:,.2f} {esc(bound['unit'])}"
        facts.append(("Proof", proof))
    # what the solve's text says after the plan: the tolerance's trade and the fused-loss what-if (solve only)
    for label, key in (("Trade-off", "trade_off"), ("Hint", "hint")):
        said = (doc.get(key) or {}).get("text")
        if said:
            facts.append((label, esc(said)))
    body.append(definitions(facts))
    if ut:
        body.append("<h3>Hours</h3>" + band(ut["hours_p10"], t["hours"], ut["hours_p90"], "hours",
                                            "predicted hours and their 10th-90th percentile band"))  # fmt: skip
    if uc:
        body.append("<h3>Bill</h3>" + band(uc["total_p10"], c["total"], uc["total_p90"], uc["currency"],
                                           "predicted bill and its 10th-90th percentile band"))  # fmt: skip
    return section("time-cost", "Time and cost", "".join(body))


def _holds(name: str, ok: bool | None) -> str:
    return "" if ok is None else f"; {name} {'met' if ok else '<b class=bad>MISSED</b>'} at the slow end"


def why_lost(alt: dict[str, Any], best: dict[str, Any], objective: str, currency: str) -> str:
    """Why an alternative lost to the chosen plan: the objective's gap first, the other measure as tie-break.

    A gap worded as more or cheaper is unsigned ("costs 2.00 USD more"); one in brackets or after "costs" alone is
    signed ("(-5.00 h)", "as fast, costs +1.00 USD").
    """
    dc = report_cost(alt) - report_cost(best)
    dh = alt["time"]["hours"] - best["time"]["hours"]
    cost = f"{'+' if dc >= 0 else '-'}{abs(dc):,.2f} {currency}"
    hours = f"{'+' if dh >= 0 else '-'}{abs(dh):,.2f} h"
    if objective == "time":
        text = f"slower by {dh:,.2f} h" if dh > 1e-9 else f"as fast, costs {cost}"
        if dh < -1e-9:  # faster, yet lost: the tolerance traded its time for the chosen plan's lower bill
            text = f"{abs(dh):,.2f} h faster but {cost} (within the tolerance, the cheaper plan was chosen)"
    elif dc < -0.005:  # cheaper, yet lost: the tolerance bought the chosen plan's hours with its bill
        text = f"{abs(dc):,.2f} {currency} cheaper but {abs(dh):,.2f} h slower (within the tolerance, the faster " \
               "was chosen)"
    else:
        text = f"costs {abs(dc):,.2f} {currency} more" if dc > 0.005 else f"same cost, {hours}"  # "more", no "+"
        text += f" ({hours})" if dc > 0.005 else ""
    um = (alt.get("uncertainty") or {}).get("memory")
    if um and not um["fits_p90"]:
        text += "; over the usable memory at the 90th-percentile peak"
    return text


def alternatives_section(best: dict[str, Any], alts: Sequence[dict[str, Any]], objective: str, currency: str,
                         no_plan: str | None = None) -> str:  # fmt: skip
    """Alternatives: the best plan on each other GPU type, sortable, with why it lost.

    Then the allowed GPU types without a plan and why (``no_plan``: report/plan.py no_plan_text).
    """
    if best.get("plan") is None:
        return ""
    rows = []
    for a in sorted(alts, key=lambda d: (report_cost(d), d["plan"]["gpu"])):
        p, m, t = a["plan"], a["memory"], a["time"]
        rows.append([cell(p["gpu"]), cell(p["offer"]), cell(p["cards"], p["cards"]), cell(layout(p)),
                     cell(f"mb{p['micro_batch']} x ga{p['grad_accum']}"), cell(num(t["hours"]), t["hours"]),
                     cell(money_cell_text(a), report_cost(a)),  # as the Cost line writes it; sorts by report
                     cell(f"{m['total'] / GIB:,.1f} / {m['capacity'] / GIB:,.1f}", m["total"] / m["capacity"]),
                     cell(why_lost(a, best, objective, currency))])  # fmt: skip
    head = ("gpu", "offer", "cards", "layout", "batch", "hours", "cost", "GiB per GPU / card",
            f"why it lost (objective {objective})")  # fmt: skip
    intro = ("<p>The best plan on each other GPU type that has one within the limits; click a column to sort.</p>"
             if rows else "<p>No other GPU type has a plan within the limits.</p>")  # fmt: skip
    listed = table(head, rows, ident="alternatives-table", sortable=True) if rows else ""
    missing = f"<p>{esc(no_plan)}.</p>" if no_plan else ""
    return section("alternatives", "Alternatives", intro + listed + missing)


def explanation_section(expl: dict[str, Any]) -> str:
    """Why there is no plan, and each single change that gives one."""
    rows = [[cell(r["field"]), cell(r["value"]), cell(r["text"])] for r in expl.get("relaxations", [])]
    body = f"<p class=\"bad\">{esc(expl.get('message'))}</p>"
    if rows:
        body += "<h3>Each change that alone gives a plan</h3>" + table(("field", "value", "what"), rows)
    return section("explanation", "Why there is no plan", body)
