"""Cost-versus-time fronts: the exact set of non-dominated plans of a scenario, by epsilon-constraint on CP-SAT.

Definitions. Each candidate i of the pruned space (space.Space.cand) has an integer cost c_i (cents of the report
currency, rounded up) and time t_i (seconds of wall clock, rounded up), the units the solver works in
(solver.cents, solver.seconds). Plan i dominates plan j when c_i <= c_j and t_i <= t_j with one strict. The front
is the set of (c, t) values of the non-dominated plans that meet every user limit (allow-lists, budget, deadline);
for each value one plan is reported, the solver's deterministic tie-break (rank) choosing among equals.

Method (epsilon-constraint, Haimes et al. 1971; Ehrgott, *Multicriteria Optimization*, 2005, section 4.1):
    eps_0 = the scenario's deadline (seconds), or none
    repeat k = 0, 1, ...:
        (c_k, t_k) = lexicographic min (cost, then time, then rank) subject to the limits and time <= eps_k
        stop when infeasible; otherwise record point k and set eps_{k+1} = t_k - 1
Each stage is solver.solve with ``deadline_s = eps_k``, so each point is proven optimal for its bound by CP-SAT.
Why it is exact: any plan cheaper than c_k has time > eps_k >= t_k, and any plan costing c_k has time >= t_k, so
(c_k, t_k) is non-dominated; conversely a non-dominated value (c, t) with t_{k+1} < t <= t_k would have been the
minimum for eps_{k+1} (c < c_{k+1} is impossible after minimising, c >= c_{k+1} makes it dominated), so none is
skipped. Times strictly decrease, so the loop ends after at most |front| + 1 solves; it is also bounded by one
stage per candidate plus one, and raises RuntimeError if a bug (an epsilon bound the solver ignores) hits that.

Pruning in space.py keeps one plan per (offer, cards): the fastest, which is also the cheapest of its group, so
it removes no point of the front. By default the stages see only :func:`relevant` candidates, those that no
other candidate admitted by the allow-lists dominates: a plan dominated by an admitted plan is never on the front
(budget and deadline are monotone, so the dominating plan meets them too), so the reduction is exact, and tests
check the result against an exhaustive oracle over all candidates, with and without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from optimizer.inputs.schema import Objective, Scenario, Status
from optimizer.inputs.schema_plan import Estimate
from optimizer.solve.dominance import allowed, nondominated, relevant
from optimizer.solve.explain import Relaxation, explain
from optimizer.solve.planner import Overrides, load_space, named_limits, to_estimate
from optimizer.solve.solver import Limits, SolverSettings, cents, seconds, solve
from optimizer.solve.space import Space

__all__ = ["Front", "FrontPoint", "ParetoResult", "allowed", "front", "nondominated", "pareto_scenario",
           "relevant"]

DEFAULT_SETTINGS = SolverSettings()  # CP-SAT defaults: 10 s limit, 1 worker, seed 0


@dataclass(frozen=True)
class FrontPoint:
    """One non-dominated plan: its candidate index, integer coordinates, status of its epsilon stage."""

    index: int  # into space.cand
    cost_cents: int  # report currency, rounded up
    time_s: int  # wall clock, rounded up
    status: Status  # optimal when CP-SAT proved the stage, feasible when a time limit stopped it


@dataclass
class Front:
    """The epsilon-constraint front of one space, cheapest first (so slowest first)."""

    points: list[FrontPoint]
    chosen: int | None  # candidate index of the lexicographic optimum for the scenario's objective
    solves: int  # CP-SAT stages run


def front(space: Space, limits: Limits, objective: Objective, settings: SolverSettings = DEFAULT_SETTINGS,
          reduce: bool = True, tolerance: float = 0.0) -> Front:  # fmt: skip
    """Exact cost/time front of ``space`` under ``limits`` by epsilon-constraint (see module docstring).

    Args:
        space: the pruned candidates of a scenario.
        limits: user limits; ``deadline_s`` is the first epsilon bound.
        objective: the scenario's objective, to mark the plan ``solve`` would choose.
        settings: CP-SAT parameters for every stage.
        reduce: hand CP-SAT only :func:`relevant` candidates (exact: every point of the front and the chosen plan
            are among them); False solves every stage over all candidates.
        tolerance: the scenario's, for marking the plan ``solve`` chooses (a plan within the tolerance band that
            is best on the other axis is non-dominated, so it is a point of the front).

    Returns:
        The front, points ordered by increasing cost (decreasing time).
    """
    subset = relevant(space, limits) if reduce else None
    points: list[FrontPoint] = []
    eps_s = limits.deadline_s
    solves = 0
    max_stages = len(space.cand) + 1  # each stage records a new candidate with a strictly smaller time, or stops
    while eps_s is None or eps_s >= 0:
        if solves >= max_stages:
            raise RuntimeError(f"Pareto sweep did not end after {max_stages} stages ({len(space.cand)} candidates): "
                               f"the epsilon bound no longer excludes the previous point")  # fmt: skip
        out = solve(space, Objective.cost, limits.replace(deadline_s=eps_s), settings, subset)
        solves += 1
        if out.index is None:
            break
        time_s = int(seconds(space.cand.time["hours"][out.index]))
        points.append(FrontPoint(out.index, int(cents(space.cost_total[out.index])), time_s, out.status))
        eps_s = time_s - 1
    if not points:
        return Front([], None, solves)
    chosen = solve(space, objective, limits, settings, subset, tolerance).index
    return Front(points, chosen, solves + 1)


# ------------------------------------------------------------------------------------------------ scenario level


@dataclass
class ParetoResult:
    """The answer to ``ftopt pareto``: each front point as a full estimate, plus what the axes mean."""

    scenario: Scenario
    source: str
    currency: str  # of ``costs`` (the report currency: the budget's, else the offers')
    estimates: list[Estimate]  # one per point, cheapest first
    costs: list[float]  # per point, in ``currency``
    hours: list[float]  # per point
    chosen: int | None  # position in ``estimates`` of the plan ``solve`` chooses
    budget: float | None  # in ``currency``
    deadline_hours: float | None
    candidates: int
    solves: int
    relaxation: Relaxation | None = None  # why there is no plan at all


def pareto_scenario(
    path: str | Path, overrides: Overrides | None = None, settings: SolverSettings = DEFAULT_SETTINGS
) -> ParetoResult:
    """Load, build and solve the front of one scenario file; an empty front carries the solve explanation."""
    loaded = load_space(path, overrides)
    sc, catalog, source, space, limits = loaded.scenario, loaded.catalog, loaded.source, loaded.space, loaded.limits
    with named_limits(source):
        fr = front(space, limits, sc.objective, settings, tolerance=sc.tolerance)
        rel = explain(space, sc.objective, limits, settings, catalog, source) if not fr.points else None
    budget = sc.budget.amount if sc.budget else None
    if not fr.points:
        return ParetoResult(sc, source, space.currency, [], [], [], None, budget, sc.deadline_hours,
                            len(space.cand), fr.solves, rel)  # fmt: skip
    ests = [to_estimate(space, p.index, p.status) for p in fr.points]
    idx = [p.index for p in fr.points]
    chosen = idx.index(fr.chosen) if fr.chosen in idx else None
    return ParetoResult(
        scenario=sc,
        source=source,
        currency=space.currency,
        estimates=ests,
        costs=[round(float(space.cost_total[i]), 2) for i in idx],
        hours=[round(float(space.cand.time["hours"][i]), 6) for i in idx],
        chosen=chosen,
        budget=budget,
        deadline_hours=sc.deadline_hours,
        candidates=len(space.cand),
        solves=fr.solves,
    )
