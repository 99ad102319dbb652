"""Rendering of ``ftopt calibrate`` and ``ftopt probe`` results, and the overlay line of a plan."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from optimizer.inputs.schema_plan import Estimate
from optimizer.inputs.terminal import escape
from optimizer.measure.calibrate import Result, Row, unit_of
from optimizer.measure.probe import Probe


def _fmt(value: float | None, row: Row) -> str:
    if value is None:
        return "-"
    div, _ = unit_of(row)
    return f"{value / div:,.2f}" if div != 1.0 else f"{value:,.0f}"


def _err(predicted: float | None, measured: float | None) -> str:
    e = Row.error(predicted, measured)
    return "-" if e is None else f"{e:+.1%}"


def calibration_json(result: Result) -> dict[str, Any]:
    """Per measurement: measured, predicted before/after and their errors; the fitted overlay."""
    rows = [
        {"id": r.id, "file": r.file, "model": r.model, "group": r.group, "used": r.used, "unit": unit_of(r)[1],
         "measured": r.measured, "predicted_before": r.before, "predicted_after": r.after,
         "error_before": Row.error(r.before, r.measured), "error_after": Row.error(r.after, r.measured),
         "note": r.note or None}
        for r in result.rows
    ]  # fmt: skip
    return {"measurements": rows, "overlay": result.overlay.model_dump(mode="json", exclude_none=True)}


def print_calibration(result: Result, output: str | None, console: Console) -> None:
    """Per-measurement errors before and after, and the fitted groups."""
    table = Table(title="Measurements: prediction error before and after the overlay", show_edge=False)
    for col in ("measurement", "model", "group", "measured", "before", "after"):
        table.add_column(col, justify="right" if col in ("measured", "before", "after") else "left")
    for r in result.rows:
        if not r.used:  # the figure read, when there was one, beside the reason it was not used
            measured = "-" if r.measured is None else f"{_fmt(r.measured, r)} {unit_of(r)[1]}"
            table.add_row(escape(r.id), escape(r.model), escape(r.group), measured, escape(r.note), "")
            continue
        unit = unit_of(r)[1]
        table.add_row(escape(r.id), escape(r.model), escape(r.group), f"{_fmt(r.measured, r)} {unit}",
                      f"{_fmt(r.before, r)} ({_err(r.before, r.measured)})",
                      f"{_fmt(r.after, r)} ({_err(r.after, r.measured)})")  # fmt: skip
    console.print(table)
    ov = result.overlay
    groups = Table(title=f"Groups (prior weight k = {ov.shrinkage.prior_weight:g}, factors capped at "
                   f"x{ov.shrinkage.max_factor:g})", show_edge=False)  # fmt: skip
    for col in ("model", "group", "n", "factor (real/predicted)", "band p10-p90"):
        groups.add_column(col)
    for name, gs in (("time", ov.time), ("memory", ov.memory)):
        for g in gs:
            band = "-" if g.band is None else f"{g.band.ratio_p10:.3f}-{g.band.ratio_p90:.3f}"
            groups.add_row(name, escape(" x ".join(g.key)), str(g.n), f"{g.factor:.4f}", band)
    console.print(groups)
    if output:
        shown = escape(output)
        console.print(f"Overlay written to {shown}; apply it with --calibration {shown} or `calibration: {shown}`.")


def calibration_lines(est: Estimate) -> list[str]:
    """One line naming the overlay a plan uses and the corrections it applied (none without an overlay)."""
    use = est.calibration
    if use is None:
        return []
    parts = [f"{name} x{g.factor:.3f} from {len(g.measurements)} measurement{'s' if len(g.measurements) > 1 else ''}"
             for name, g in (("time", use.time), ("memory", use.memory)) if g is not None]  # fmt: skip
    found = "; ".join(parts) if parts else "no group matches this plan"
    return [f"Calibration overlay {escape(use.overlay)}: {found}"]


def print_probe(probe: Probe, console: Console) -> None:
    """The probe's configuration, cost, the saving it can unlock and how to run it."""
    for line in probe.lines():
        console.print(escape(line), highlight=False)
