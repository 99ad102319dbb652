"""Terminal lines for the rented machine: spot capacity, requirements to confirm, the after-renting checklist."""

from __future__ import annotations

from optimizer.inputs.schema_plan import Estimate


def figure(v: float) -> str:
    """A measured figure as people write it: 1,360,560 rather than 1.36056e+06; small values as given (25.6)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,g}"


def renting_lines(est: Estimate) -> list[str]:
    """Spot summary, 'confirm before renting' and 'check after renting' lines of one plan (rich markup-free)."""
    out: list[str] = []
    s, t = est.spot, est.time
    if s is not None and t is not None:
        assumed = ", ASSUMED: no published rate" if s.assumption else ""
        out.append(f"Capacity: spot at {s.price_per_card_hour:g} {s.currency}/card-hour; expected {t.hours:,.1f} h "
                   f"including {t.interruption_hours:,.2f} h of restarts and lost work (one node interrupted every "
                   f"{s.mtbi_hours_low:g}-{s.mtbi_hours_high:g} h{assumed}); checkpoint every "
                   f"{s.checkpoint_interval_hours:,.2f} h of training (Young/Daly); {s.hours_low:,.1f}-"
                   f"{s.hours_high:,.1f} h, {s.cost_low:,.2f}-{s.cost_high:,.2f} {s.currency} over the band")
    if est.requirements:
        out.append("Confirm with the provider before renting:")
        out += [f"  - {line}" for line in est.requirements]
    if est.checklist:
        out.append("Check after renting (stop and re-plan beyond the limit):")
        out += [f"  - {c.check}: expect {figure(c.expected)} {c.unit}; stop if {c.stop_if} ({c.command})"
                for c in est.checklist]  # fmt: skip
    return out
