"""Every single change that gives an infeasible scenario a plan, each with the value that does it.

For each limit the user set (budget, deadline, allow.gpus, allow.providers, allow.max_cards, allow.max_nodes,
allow.max_host_memory_gib), drop that limit alone, keep every other one, and ask CP-SAT whether a plan exists. When
one does, the value to apply is the least change that admits it:

* budget.amount: the cost of the cheapest plan meeting every other limit (rounded up to the cent);
* deadline_hours: the time of the fastest such plan (rounded up to 1/100 h);
* allow.gpus / allow.providers: the GPU types / providers that have such a plan;
* allow.max_cards / allow.max_nodes: the smallest card / node count of such a plan (a bisection over the counts
  the space holds; feasibility only grows with the limit);
* allow.max_host_memory_gib (also offered when it is unset but plans were dropped for host RAM, since it replaces
  the default RAM of offers that do not state theirs, hosts.py): the candidate space is rebuilt with the largest
  allowed figure (offloading plans the limit or the default RAM had made unfit come back) and the smallest host
  RAM per node of such a plan, rounded up to a whole GiB, is found the same way. Pruning keeps the fastest plan
  per (offer, cards), so this is the host RAM of a plan that exists, an upper bound of the least that works.

``tradeoff`` gives the cost/time front under the other limits for the case where budget and deadline are both too
tight: every (cost, hours) pair on it is a budget and deadline that together admit a plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.inputs.catalog import Catalog
from optimizer.inputs.errors import FtoptError
from optimizer.inputs.schema import Objective
from optimizer.solve.limits import BY_KEY, GIB, MONOTONE, REGISTRY, Limit, column
from optimizer.solve.solver import Limits, SolverSettings, limits_from, seconds, solve
from optimizer.solve.space import Space, build

HOST_GIB_MAX = 1e6  # schema.Allow.max_host_memory_gib's upper bound
MAX_TRADEOFF_POINTS = 12  # the message lists every front point up to this many; beyond, this many (both ends)


@dataclass(frozen=True)
class Option:
    """One single-limit change that restores a plan: the scenario field, the value to set, and a sentence."""

    field: str  # the scenario field to edit, e.g. "allow.max_host_memory_gib"
    value: float | int | bool | str | list[str]  # the value to set (a number, a setting) or the names to add (a list)
    text: str  # e.g. "raise allow.max_host_memory_gib to 1,563 (GiB per node)"


def _feasible(space: Space, limits: Limits, settings: SolverSettings, subset: np.ndarray | None = None) -> int | None:
    return solve(space, Objective.cost, limits, settings, subset).index


def _smallest(space: Space, limits: Limits, settings: SolverSettings, values: np.ndarray) -> float | None:
    """The least v among ``values`` (one per candidate) such that the candidates with value <= v admit a plan."""
    levels = np.unique(values)
    if levels.size == 0 or _feasible(space, limits, settings, values <= levels[-1]) is None:
        return None
    lo, hi = 0, levels.size - 1  # invariant: levels[hi] works
    while lo < hi:
        mid = (lo + hi) // 2
        if _feasible(space, limits, settings, values <= levels[mid]) is not None:
            hi = mid
        else:
            lo = mid + 1
    return float(levels[hi])


def names_with_plan(space: Space, limits: Limits, settings: SolverSettings, names: list[str]) -> list[str]:
    """Those of ``names`` (one per candidate) whose candidates alone admit a plan under ``limits``."""
    col = np.array(names, dtype=object)
    return [str(n) for n in sorted(set(names)) if _feasible(space, limits, settings, col == n) is not None]


def _money(space: Space, i: int) -> float:
    return float(column(space, "budget_cents", np.array([i]))[0]) / 100.0


def _hours(space: Space, i: int) -> float:
    return float(np.ceil(seconds(space.cand.time["hours"][i : i + 1])[0] / 36.0)) / 100.0


def hours_needed(space: Space, i: int) -> float:
    """The deadline in hours (rounded up to 0.01 h) that candidate ``i`` meets.

    The registry's deadline column: its hours plus the margin the solver adds (spot: the band's pessimistic end).
    """
    return float(np.ceil(column(space, "deadline_time_s", np.array([i]))[0] / 36.0)) / 100.0


def _limit_option(space: Space, limits: Limits, settings: SolverSettings, name: str) -> Option | None:
    """The option for dropping the solver limit ``name`` alone, or None when that alone gives no plan.

    The registry entry's ``relax`` says how the value is found and its ``words`` how it is said.
    """
    spec = BY_KEY[name]
    lim = limits.without(name)
    best = _feasible(space, lim, settings)
    if best is None:
        return None
    if spec.relax == "cost":
        need = _money(space, best)
        return Option(spec.field, need, spec.words.format(value=f"{need:,.2f} {space.currency}"))
    if spec.relax == "time":
        fast = solve(space, Objective.time, lim, settings).index
        need = hours_needed(space, fast if fast is not None else best)
        return Option(spec.field, need, spec.words.format(value=f"{need:g}"))
    if spec.relax == "names":
        have = names_with_plan(space, lim, settings, list(column(space, spec.column)))
        return Option(spec.field, have, spec.words.format(value=" or ".join(have)))
    need_n = int(_smallest(space, lim, settings, column(space, spec.column)) or 0)
    return Option(spec.field, need_n, spec.words.format(value=need_n))


def _rebuild_option(space: Space, spec: Limit, limits: Limits, settings: SolverSettings, catalog: Catalog,
                    gpu_ids: list[str] | None, source: str) -> Option | None:  # fmt: skip
    """Dropping a limit applied while the space is built: rebuild the space without it, find the least value needed.

    The value is the smallest per-candidate ``column`` admitting a plan, in GiB rounded up (at least 1).
    """
    sc = space.scenario
    if spec.read(sc, gpu_ids) is None and space.ram_short is None:
        return None
    section, key = spec.field.split(".")
    # the largest allowed figure: offloading is then unbounded, and so is the RAM of offers that do not state it
    free = sc.model_copy(update={section: getattr(sc, section).model_copy(update={key: HOST_GIB_MAX})})
    try:
        wide = build(free, catalog, space.job.arch, source)
    except FtoptError:
        return None
    if len(wide.cand) == 0:
        return None
    lim = limits_from(wide, gpu_ids)
    need = _smallest(wide, lim, settings, column(wide, spec.column).astype(np.float64))
    if need is None:
        return None
    gib = max(math.ceil(need / GIB), 1)
    words = spec.words.format(value=f"{gib:,}")
    if spec.read(sc, gpu_ids) is None:  # unset: the offers' own RAM (stated or the default rule) was too small
        words = "if your nodes have the RAM, " + words.replace("raise", "set", 1)
    return Option(spec.field, gib, words)


def single_options(space: Space, limits: Limits, settings: SolverSettings, catalog: Catalog,
                   gpu_ids: list[str] | None, source: str) -> list[Option]:  # fmt: skip
    """Every single-limit change that restores a plan (module docstring), in registry order."""
    found = [_limit_option(space, limits, settings, name) for name in limits.active()]
    found += [_rebuild_option(space, spec, limits, settings, catalog, gpu_ids, source)
              for spec in REGISTRY if spec.kind == "space"]  # fmt: skip
    return [o for o in found if o is not None]


def tradeoff(space: Space, limits: Limits, settings: SolverSettings) -> list[tuple[float, float]]:
    """(cost, hours) of every plan on the cost/time front under ``limits`` without budget and deadline.

    Epsilon-constraint, as pareto.front (which sits above this module): the cheapest plan, then the cheapest one
    strictly faster, until none is; each stage is proven by CP-SAT.
    """
    free = limits.without(*MONOTONE)
    points: list[tuple[float, float]] = []
    eps_s: int | None = None
    while eps_s is None or eps_s >= 0:
        best = _feasible(space, free.replace(deadline_s=eps_s), settings)
        if best is None:
            break
        points.append((_money(space, best), _hours(space, best)))
        eps_s = int(seconds(space.cand.time["hours"][best : best + 1])[0]) - 1
    return points


def tradeoff_text(points: list[tuple[float, float]], currency: str) -> str:
    """'2,024.64 CNY / 332.51 h, ..., 9,130.00 CNY / 2.12 h (each rounded up: ...)'.

    Every point up to MAX_TRADEOFF_POINTS; beyond, that many (both ends kept) and the count says so. The figures are
    limits to set, so they are rounded up (the cent, the hundredth of an hour: _money, hours_needed) and the text
    says so: ftopt pareto prints the plans' own figures, rounded to nearest, a cent or 0.01 h lower at most.
    """
    if len(points) > MAX_TRADEOFF_POINTS:
        picks = np.unique(np.linspace(0, len(points) - 1, MAX_TRADEOFF_POINTS).round().astype(int))
        shown = [points[int(i)] for i in picks]
        more = f"{len(shown)} of the {len(points)} plans on the front, ftopt pareto lists them all; "
    else:
        shown, more = points, ""
    return (", ".join(f"{c:,.2f} {currency} / {h:,.2f} h" for c, h in shown)
            + f" ({more}each rounded up, as a limit must be to admit its plan)")
