"""The user limits, one entry each: the single table the solver, the fronts, the portfolio and the explanations read.

A limit is a scenario field that removes plans (``allow.max_cards``, ``budget.amount``, ...). Each entry of
:data:`REGISTRY` says, as data:

* ``key``: its name in :class:`Limits` (the solver's units: cents, seconds, cards) and ``field``, the scenario field
  a user edits to relax it;
* ``kind``: ``names`` (an allow-list: the candidate's ``column`` name must be in the set), ``at_most`` (the
  candidate's ``column`` value must be <= the bound) or ``space`` (applied while the candidate space is built, in
  space.evaluate, because a plan the limit removes changes what the space keeps);
* ``column``: the per-candidate value it compares (:func:`column` computes each from a Space) and ``unit``;
* ``monotone``: a plan cheaper and faster than one that meets the limit meets it too (budget, deadline). The fronts
  filter the other limits before their epsilon sweep (pareto.allowed); the monotone ones stay in the solver;
* ``in_portfolio``: whether ``ftopt portfolio`` applies it (the portfolio replaces budget and deadline by its total
  cost and each job's window); ``rentals_only``: it applies to rented offers only (owned and bought cards have no
  provider);
* ``relax``: how the explanation finds the least change that restores a plan: ``cost`` (the cheapest plan's cost),
  ``time`` (the fastest plan's time), ``names`` (the names of ``column`` that have a plan), ``smallest`` (the least
  ``column`` value that admits a plan, by bisection), ``rebuild`` (rebuild the space without the limit, then
  ``smallest``);
* ``words``: the sentence the explanation prints for that change (``{value}`` is the value, formatted).

Adding a limit: a schema field, one entry here with its ``read`` (the scenario's value in the limit's units), and,
for ``at_most``/``names``, its column in :func:`column`; tests/test_limits_registry.py then checks that solve,
pareto, portfolio and the explanations agree on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from optimizer.inputs.schema import Scenario
from optimizer.solve.space import Space

GIB = 2**30

Kind = Literal["names", "at_most", "space"]
Relax = Literal["cost", "time", "names", "smallest", "rebuild"]


def cents(amount: np.ndarray) -> np.ndarray:
    """Money to whole cents, rounded up (int64)."""
    return np.ceil(np.round(np.asarray(amount, dtype=np.float64) * 100.0, 6)).astype(np.int64)


def seconds(hours: np.ndarray) -> np.ndarray:
    """Hours to whole seconds, rounded up (int64)."""
    return np.ceil(np.round(np.asarray(hours, dtype=np.float64) * 3600.0, 6)).astype(np.int64)


@dataclass(frozen=True)
class Limit:
    """One user limit (module docstring)."""

    key: str
    field: str
    kind: Kind
    column: str
    unit: str
    monotone: bool
    in_portfolio: bool
    rentals_only: bool
    relax: Relax
    words: str
    read: Callable[[Scenario, list[str] | None], Any]  # (scenario, canonical allow.gpus) -> value or None


def _floor_scaled(x: float, scale: float) -> int:
    return int(math.floor(round(x * scale, 6)))


REGISTRY: tuple[Limit, ...] = (
    Limit("gpus", "allow.gpus", "names", "gpu", "GPU ids", False, True, False, "names",
          "add {value} to allow.gpus",
          lambda sc, gpu_ids: frozenset(gpu_ids) if gpu_ids is not None else None),
    Limit("providers", "allow.providers", "names", "provider", "provider names", False, True, True, "names",
          "add {value} to allow.providers",
          lambda sc, _: frozenset(p.lower() for p in sc.allow.providers) if sc.allow.providers else None),
    Limit("max_cards", "allow.max_cards", "at_most", "cards", "cards", False, True, False, "smallest",
          "raise allow.max_cards to {value}", lambda sc, _: sc.allow.max_cards),
    Limit("max_nodes", "allow.max_nodes", "at_most", "nodes", "nodes", False, True, False, "smallest",
          "raise allow.max_nodes to {value}", lambda sc, _: sc.allow.max_nodes),
    Limit("budget_cents", "budget.amount", "at_most", "budget_cents", "cents of the report currency", True, False,
          False, "cost", "raise budget.amount to {value}",
          lambda sc, _: _floor_scaled(sc.budget.amount, 100.0) if sc.budget else None),
    Limit("deadline_s", "deadline_hours", "at_most", "deadline_time_s", "seconds", True, False, False, "time",
          "extend deadline_hours to {value}",
          lambda sc, _: _floor_scaled(sc.deadline_hours, 3600.0) if sc.deadline_hours else None),
    Limit("max_host_memory_gib", "allow.max_host_memory_gib", "space", "cpu_offload", "GiB of host RAM per node",
          False, True, False, "rebuild",
          "raise allow.max_host_memory_gib to {value} (GiB of host RAM per node for offloading)",
          lambda sc, _: sc.allow.max_host_memory_gib),
)  # fmt: skip
BY_KEY = {lim.key: lim for lim in REGISTRY}
SOLVER_KEYS = tuple(lim.key for lim in REGISTRY if lim.kind != "space")  # the limits CP-SAT enforces
MONOTONE = tuple(lim.key for lim in REGISTRY if lim.monotone)  # budget and deadline: relaxed by cost and time


def column(space: Space, name: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Per-candidate values of a limit's column (over ``rows`` of space.cand, default all), in the limit's units.

    gpu, provider: names (object arrays; providers lower-cased); cards, nodes: counts; cost_cents: the bill in the
    report currency rounded up to the cent; budget_cents: the same at the slow end of the time model's error when
    the scenario sets ``risk_limits`` (space.limits_at_risk), else cost_cents; deadline_time_s: the wall clock the
    deadline is checked at (hours plus the spot margin and the risk margin, rounded up to the second); cpu_offload:
    bytes of offloaded state per node.
    """
    c = space.cand
    at = slice(None) if rows is None else rows
    if name == "gpu":
        return np.array([space.offers[int(i)].gpu for i in c.offer_idx[at]], dtype=object)
    if name == "provider":
        return np.array([space.offers[int(i)].provider.lower() for i in c.offer_idx[at]], dtype=object)
    if name in ("cards", "nodes"):
        return np.asarray(getattr(c, name))[at].astype(np.int64)
    if name == "cost_cents":
        return cents(np.asarray(space.cost_total)[at])
    if name == "budget_cents":  # the bill the budget is checked against: at the slow end under risk_limits
        return cents(np.asarray(space.cost_total if space.budget_total is None else space.budget_total)[at])
    if name == "deadline_time_s":
        return seconds((c.time["hours"] + c.time.get("deadline_margin_hours", 0.0))[at])
    if name == "cpu_offload":
        return np.asarray(c.mem["cpu_offload"], dtype=np.float64)[at]
    raise KeyError(f"no limit column {name!r}")


class Limits:
    """The user limits a solve enforces (the registry's solver keys), each switchable for explanations.

    ``Limits(max_cards=4)``; a key left out is not set. Immutable: :meth:`without` and :meth:`replace` return copies.
    """

    __slots__ = ("_values",)

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(SOLVER_KEYS)
        if unknown:
            raise TypeError(f"unknown limit(s) {sorted(unknown)}; known: {', '.join(SOLVER_KEYS)}")
        object.__setattr__(self, "_values", {k: values.get(k) for k in SOLVER_KEYS})

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Limits is immutable; use replace() or without()")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limits) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        return "Limits(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items() if v is not None) + ")"

    def active(self) -> list[str]:
        """Names of the constraints that are set, in registry order."""
        return [k for k in SOLVER_KEYS if self._values[k] is not None]

    def specs(self) -> Iterator[Limit]:
        """The registry entries of the set constraints."""
        return (BY_KEY[k] for k in self.active())

    def without(self, *names: str) -> Limits:
        """A copy with the named constraints removed."""
        return Limits(**{k: (None if k in names else v) for k, v in self._values.items()})

    def replace(self, **values: Any) -> Limits:
        """A copy with the given constraints set to new values."""
        return Limits(**{**self._values, **values})


def limits_from(space: Space, gpu_ids: list[str] | None) -> Limits:
    """The scenario's limits in solver units (``gpu_ids``: allow.gpus as canonical ids), read by the registry."""
    return Limits(**{k: BY_KEY[k].read(space.scenario, gpu_ids) for k in SOLVER_KEYS})


def admits(space: Space, lim: Limit, value: Any, rows: np.ndarray | None = None,
           exempt: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Mask over ``rows`` (default all candidates) of those that meet limit ``lim`` set to ``value``.

    ``exempt`` (same shape as the mask) marks rows the limit does not apply to (rentals_only limits on owned cards).
    """
    col = column(space, lim.column, rows)
    if value is None:
        return np.ones(col.shape[0], dtype=bool)
    if lim.kind == "names":
        ok = np.array([v in value for v in col], dtype=bool)
    elif lim.kind == "space":
        ok = col <= value * GIB
    else:
        ok = col <= value
    return ok | exempt if exempt is not None else ok
