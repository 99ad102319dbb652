"""Which candidates can be optimal: the non-dominated ones among those the limits that are not monotone admit.

Plan i dominates plan j when c_i <= c_j and t_i <= t_j with one strict (integer cents and seconds, the solver's
units). Budget and deadline are monotone in (cost, time): a plan that dominates a feasible plan is feasible. So the
lexicographic optimum (cost then time, or time then cost), the plan within a tolerance band best on the other axis,
and every point of the cost/time front are non-dominated among the candidates the other limits admit; ties are
kept, so the solver's rank tie-break picks the same plan as over all candidates. solve (planner), batch and the
fronts (pareto) hand CP-SAT these candidates only.
"""

from __future__ import annotations

import numpy as np

from optimizer.solve.limits import Limits, admits, cents, seconds
from optimizer.solve.space import Space


def allowed(space: Space, limits: Limits) -> np.ndarray:
    """Mask (n_candidates,) of the candidates that pass every set limit that is not monotone in (cost, time).

    The registry (optimizer.solve.limits) marks budget and deadline monotone; they are left to the solver. The others
    (allow-lists, card and node limits, and any limit added later) are applied here.
    """
    mask = np.ones(len(space.cand), dtype=bool)
    for spec in limits.specs():
        if not spec.monotone:
            mask &= admits(space, spec, getattr(limits, spec.key))
    return mask


def nondominated(cost_cents: np.ndarray, time_s: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mask (n,) of the rows of ``mask`` that no other row of ``mask`` strictly dominates (ties are all kept).

    Row j dominates row i when cost_j <= cost_i and time_j <= time_i with one strict; O(n^2) memory, n in the
    hundreds after space.prune.
    """
    idx = np.flatnonzero(mask)
    c, t = cost_cents[idx], time_s[idx]
    le = (c[None, :] <= c[:, None]) & (t[None, :] <= t[:, None])
    lt = (c[None, :] < c[:, None]) | (t[None, :] < t[:, None])
    out = np.zeros(mask.shape[0], dtype=bool)
    out[idx[~(le & lt).any(axis=1)]] = True
    return out


def relevant(space: Space, limits: Limits) -> np.ndarray:
    """Candidates that can be a lexicographic optimum (cost then time, or time then cost) under ``limits``.

    Exact reduction: budget and deadline are monotone (a plan that dominates a feasible plan is feasible), so
    the optimum over the feasible set F = A n {budget, deadline}, A = :func:`allowed`, is non-dominated within
    A; ties in (cost, time) are kept, so the solver's rank tie-break picks the same plan as over all candidates.
    """
    return nondominated(cents(space.cost_total), seconds(space.cand.time["hours"]), allowed(space, limits))
