"""``--html FILE``: one self-contained page per command (solve, estimate, pareto, portfolio, batch).

Each page is drawn from the same dicts ``--json`` prints (optimizer/report/plan.py and its siblings), plus the few facts
the JSON leaves out (the scenario's headroom, the best plan on each other GPU type, the portfolio's job windows).
The text and JSON outputs are untouched; the file is written atomically and is byte-identical for the same input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizer.inputs.atomic import write_atomic
from optimizer.report.html import html_plan as sec
from optimizer.report.html.html_batch import batch_section
from optimizer.report.html.html_front import front_section
from optimizer.report.html.html_portfolio import portfolio_sections, windows_of
from optimizer.report.html.html_shell import page
from optimizer.report.plan import estimate_json, no_plan_text, solve_json

__all__ = ["batch_page", "estimate_page", "pareto_page", "portfolio_page", "solve_page", "write_page"]


def plan_sections(doc: dict[str, Any], headroom: float | None, heading: str = "") -> list[str]:
    """Plan, Memory, and Time and cost of one plan document."""
    return [sec.plan_section(doc, heading), sec.memory_section(doc, headroom),
            sec.time_cost_section(doc, doc.get("bound"))]  # fmt: skip


def solve_page(result: Any) -> str:
    """The page of ``ftopt solve``: the plan, memory, time and cost, and the best plan on each other GPU type."""
    doc = solve_json(result)
    sc = result.scenario
    subtitle = (f"ftopt solve: {sc.method.value} fine-tuning, objective {sc.objective.value}, {result.candidates:,} "
                f"candidate plans ({result.enumerated:,} configurations evaluated)")  # fmt: skip
    if doc.get("explanation"):
        explained = [sec.plan_section(doc), sec.explanation_section(doc["explanation"])]
        return page(str(sc.name), subtitle, "solve", explained)
    alts = [estimate_json(e) for e in result.alternatives]
    sections = [*plan_sections(doc, sc.headroom),
                sec.alternatives_section(doc, alts, sc.objective.value, result.currency,
                                         no_plan_text(result.no_plan))]  # fmt: skip
    return page(str(sc.name), subtitle, "solve", sections)


def estimate_page(est: Any, scenario_path: str) -> str:
    """The page of ``ftopt estimate``: one configuration's plan, memory, time and cost."""
    from optimizer.inputs.catalog import load_scenario

    sc = load_scenario(scenario_path)
    subtitle = f"ftopt estimate: {sc.method.value} fine-tuning, one given configuration"
    return page(str(sc.name), subtitle, "estimate", plan_sections(estimate_json(est), sc.headroom))


def pareto_page(result: Any) -> str:
    """The page of ``ftopt pareto``: the front, then the chosen plan's sections."""
    from optimizer.report.front import pareto_json, solves_text

    doc = pareto_json(result)
    sc = result.scenario
    subtitle = (f"ftopt pareto: {sc.method.value} fine-tuning, {result.candidates:,} candidate plans, "
                f"{solves_text(result.solves)}")  # fmt: skip
    sections = [front_section(doc, list(result.costs))]
    if doc["chosen"] is not None:
        sections += plan_sections(estimate_json(result.estimates[doc["chosen"]]), sc.headroom, "Chosen plan. ")
    return page(str(sc.name), subtitle, "pareto", sections)


def portfolio_page(result: Any, path: str) -> str:
    """The page of ``ftopt portfolio``: the schedule by card and instance, cost, break-even."""
    from optimizer.report.portfolio import portfolio_json

    doc = portfolio_json(result)
    scheduled = (f"{len(doc['jobs'])} job occurrences" if doc["jobs"] or doc["status"] != "infeasible"
                 else "no schedule")  # an infeasible portfolio schedules nothing: not "0 job occurrences"
    subtitle = f"ftopt portfolio: {scheduled} over {doc['horizon_days']} days, {doc['status']}"
    return page(str(doc["name"]), subtitle, "portfolio", portfolio_sections(doc, windows_of(path)))


def batch_page(rows: list[dict[str, Any]], title: str = "ftopt batch") -> str:
    """The page of ``ftopt batch``: one row per scenario."""
    return page(title, f"ftopt batch: {len(rows)} scenarios", "batch", [batch_section(rows)])


def write_page(path: str | Path, text: str) -> None:
    """Write a page atomically (a reader never sees half a file)."""
    write_atomic(path, text)
