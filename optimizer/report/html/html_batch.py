"""The Batch section of ``batch --html``: one row per scenario (status, plan, cost, hours, p90), filter and sort.

Rows are ``batch.ROW_FIELDS`` dicts, as written to the results file; a resumed CSV gives strings, read back here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optimizer.report.html.html_shell import Cell, cell, esc, num, section, table
from optimizer.solve.batch import row_error

STATUSES = ("optimal", "feasible", "infeasible", "error")


def _float(v: Any) -> float | None:
    try:
        return None if v in (None, "") else float(v)
    except (TypeError, ValueError):
        return None


def _plan(r: dict[str, Any]) -> str:
    if r.get("gpu") in (None, ""):
        return ""
    return (f"{r['gpu']} x {r['cards']}: tp{r['tp']} dp{r['dp']} ZeRO-{r['zero_stage']}/{r['offload']} "
            f"mb{r['micro_batch']} x ga{r['grad_accum']} ck {r['checkpointing']}")  # fmt: skip


def _num_cell(v: Any, digits: int = 2) -> Cell:
    x = _float(v)
    return cell(num(x, digits) if x is not None else "", x if x is not None else -1.0)


def batch_section(rows: Sequence[dict[str, Any]]) -> str:
    """A filterable, sortable table of the rows and counts by status."""
    counts = {s: sum(1 for r in rows if r.get("status") == s) for s in STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no rows"
    options = "".join(f'<option value="{s}">{s} ({counts[s]})</option>' for s in STATUSES if counts[s])
    controls = (f'<p class="controls"><label>Filter <input type="search" id="batch-filter" '
                f'data-filter="batch-table" placeholder="scenario, GPU, error..."></label> '
                f'<label>Status <select id="batch-status" data-status="batch-table"><option value="">all</option>'
                f"{options}</select></label> <span id=\"batch-shown\">{len(rows)} of {len(rows)} shown</span></p>")
    out, attrs = [], []
    for r in rows:
        fits = r.get("fits_p90")
        fits_text = "" if fits in (None, "") else ("yes" if str(fits).lower() in ("true", "1") else "no")
        path = str(r.get("scenario") or "")
        out.append([Cell(esc(path).replace("/", "/<wbr>"), path), cell(r.get("name") or ""), cell(r.get("status")),
                    cell(_plan(r)),
                    _num_cell(r.get("cost")), cell(r.get("currency") or ""), _num_cell(r.get("hours")),
                    _num_cell(r.get("cost_p90")), _num_cell(r.get("hours_p90")), cell(fits_text),
                    cell(row_error(r))])  # fmt: skip
        attrs.append(f'data-status="{esc(r.get("status"))}"')
    head = ("scenario", "name", "status", "plan", "cost", "currency", "hours", "cost p90", "hours p90", "fits p90",
            "error")  # fmt: skip
    body = (f"<p>{len(rows)} scenarios: {esc(summary)}. Costs are in each row's currency; p90 = at the 90th "
            "percentile of the models' held-out errors.</p>" + controls
            + table(head, out, ident="batch-table", sortable=True, row_attrs=attrs))  # fmt: skip
    return section("batch", "Batch", body)
