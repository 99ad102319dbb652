"""How far the real peak memory, job time and bill may lie from a plan's prediction, from the models' past errors.

Each model is scored on reference cases held out from its fitting (docs/memory-model.md section 5; the time model
leave-one-source-out, docs/time-model.md, ``python bench/loso.py --write``). ``calibration.yaml`` keeps, per model,
the 10th, 50th and 90th percentiles of the ratio r = measured / predicted over those cases (numpy's linear
interpolation, :func:`ratio_quantiles`), and for time also per group of plans whose error differs (engine,
precision, multi-node; :func:`time_band` picks the first group that matches the plan):

- memory: r = measured peak / predicted peak, in the counter the source reports;
- time: r = predicted tokens/s / published tokens/s, which is real / predicted compute time.

A plan's band is the prediction scaled by those ratios:

    total_pXX = total x r_pXX                                            (bytes per GPU)
    hours_pXX = fixed + (hours - fixed) x r_pXX, fixed = hours - steps x step_seconds / 3600
    cost_pXX  = the offer's cheapest bill (optimizer.models.cost.bill) for hours_pXX, x cards

Start-up and checkpoint time (``fixed``) are assumptions rather than scored predictions, so they are not scaled.
Memory verdict: ``fits_p90`` compares the 90th-percentile peak with the card's usable memory, capacity x
(1 - headroom): the one yardstick the solver plans against and the ``risk`` line prints (``RiskUse.usable``), so
the band's verdict and the risk line never disagree. Under the default ``risk: p90`` every plan the solver picks
has ``fits_p90``; under ``risk: p50`` one packed past 1 / r_p90 of the usable memory does not, and ``risk: p90``
is what makes every plan allow for it (headroom shrinks both sides of the comparison alike, so it cannot). The
band is the spread of past errors on a small set of cases, not a probability guarantee; the tests recompute the
percentiles from the cases so the file cannot drift.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_catalog import Offer
from optimizer.inputs.schema_plan import CostBand, Estimate, MemoryBand, TimeBand, Uncertainty, WorstRun
from optimizer.models import cost
from optimizer.models import coverage as cov

QUANTILES = {"ratio_p10": 0.10, "ratio_p50": 0.50, "ratio_p90": 0.90}
TAIL = {"ratio_p99": 0.99}  # written for memory only: what ``risk: p99`` fits at
RISK_KEY = {"p50": "ratio_p50", "p90": "ratio_p90", "p99": "ratio_p99"}


def ratio_quantiles(ratios: Sequence[float], method: str = "linear", tail: bool = False) -> dict[str, float | int]:
    """``cases`` and the 10th, 50th and 90th percentiles of measured / predicted ratios, to 3 decimals.

    The 10th percentile is rounded down and the 90th up (the band never shrinks by rounding), the median to nearest.
    ``method`` is numpy's quantile method: "linear" (the sample's own percentiles) or "weibull" (the k-th order
    statistic at k = q (n + 1): the interval a new case falls in with probability 0.8, wider for small n).
    """
    values = np.asarray(ratios, dtype=np.float64)
    if values.size == 0 or not np.isfinite(values).all() or (values <= 0).any():
        raise ValueError("ratios must be a non-empty list of positive finite numbers")
    out: dict[str, float | int] = {"cases": int(values.size)}
    for key, q in {**QUANTILES, **(TAIL if tail else {})}.items():  # p10 down, p90 and p99 up: the band keeps its ends
        thousandths = float(np.quantile(values, q, method=method)) * 1000.0
        outward = {True: math.floor(thousandths + 1e-6), False: math.ceil(thousandths - 1e-6)}
        out[key] = (outward[q < 0.5] if q != 0.5 else round(thousandths)) / 1000.0
    return out


def risk_ratio(band: Mapping[str, Any] | None, risk: str) -> float:
    """The measured / predicted ratio at the scenario's ``risk`` percentile of one model's band (1 without a band).

    A plan holds at that risk when its prediction x this ratio meets the limit: the memory peak x r fits the card's
    capacity less headroom, and (``risk_limits``) the hours and bill at ``fixed + compute x r`` meet the deadline
    and budget (:func:`hours_at`).
    """
    if not band:
        return 1.0
    value = band.get(RISK_KEY[risk])
    if value is None:
        raise KeyError(f"the model's error band has no {RISK_KEY[risk]}")
    return float(value)


def memory_cell(arch: str, framework: str, sharding: str, method: str, zero_stage: int, offload: str,
                nodes: int) -> str:  # fmt: skip
    """The plan's memory coverage cell (coverage.cell without the peer-to-peer mark: it changes speed, not memory)."""
    return cov.cell(arch, cov.engine(framework, sharding), method, zero_stage, offload, nodes)


def memory_band(accuracy: Mapping[str, Any], mem_cell: str | None) -> Mapping[str, Any]:
    """The memory band of a plan in ``mem_cell``.

    ``accuracy.memory`` widened outside the measured runs' cells and to the cell's worst run
    (coverage.memory_widened); the band itself without a cell or a coverage map.
    """
    band = accuracy["memory"]
    return cov.memory_widened(band, accuracy, mem_cell, cov.covered(accuracy, mem_cell, "memory") is False)


def memory_risk_ratio(accuracy: Mapping[str, Any], risk: str, mem_cell: str | None) -> float:
    """The ratio a plan in ``mem_cell`` is planned at: its memory band (:func:`memory_band`) at ``risk``."""
    if not accuracy or not accuracy.get("memory"):
        return 1.0
    return risk_ratio(memory_band(accuracy, mem_cell), risk)


def hours_at(hours: np.ndarray, steps: int, step_seconds: np.ndarray, ratio: np.ndarray | float) -> np.ndarray:
    """Wall clock with the compute time scaled by ``ratio``: fixed + (hours - fixed) x ratio (module docstring)."""
    compute = steps * np.asarray(step_seconds, dtype=np.float64) / 3600.0
    fixed = np.maximum(np.asarray(hours, dtype=np.float64) - compute, 0.0)
    return fixed + compute * ratio


def time_ratios(accuracy: Mapping[str, Any], framework: str, precision: Sequence[str], nodes: np.ndarray, risk: str,
                cells: Sequence[str] | None = None) -> np.ndarray:  # fmt: skip
    """Per row, the time model's ratio at ``risk`` for the row's group band (:func:`time_band`); 1 without a band.

    As :func:`band` shows it before the efficiency ceiling. With ``cells`` (each row's coverage cell) the band is
    widened outside the published runs (coverage.widest) and for cells without peer-to-peer
    (coverage.no_p2p_band). The ceiling is per row (coverage.ceiling_ratios of the row's predicted HFU;
    solve/space.py slow_end_ratios).
    """
    if not accuracy:
        return np.ones(len(nodes))
    out = np.empty(len(nodes))
    memo: dict[tuple[str, bool, str | None], float] = {}
    for i, (prec, n) in enumerate(zip(precision, np.asarray(nodes).tolist(), strict=True)):
        cell = None if cells is None else cells[i]
        key = (prec, int(n) > 1, cell)
        if key not in memo:
            group = time_band(accuracy, framework, prec, int(n))
            group = cov.widened(group, accuracy, cell, cell is not None and cov.covered(accuracy, cell) is False)
            memo[key] = risk_ratio(group, risk)
        out[i] = memo[key]
    return out


def time_band(accuracy: Mapping[str, Any], framework: str, precision: str, nodes: int) -> Mapping[str, Any]:
    """The time percentiles for a plan.

    The first of ``accuracy.time_groups`` whose set fields all match the plan, else ``accuracy.time``.
    """
    plan = {"framework": framework, "precision": precision, "multi_node": nodes > 1}
    for group in accuracy.get("time_groups") or []:
        if all(group.get(k) is None or group[k] == v for k, v in plan.items()):
            return group
    return accuracy["time"]


def band(est: Estimate, offer: Offer, fx: float, scenario: Scenario, accuracy: Mapping[str, Any],
         arch: str | None = None, p2p: bool = True, method: str | None = None) -> Uncertainty:  # fmt: skip
    """The plan's memory, time and cost at the 10th and 90th percentile of the models' held-out errors.

    ``fx`` converts the offer's currency to the budget's; ``fits_p90``, ``meets_deadline_p90`` and
    ``within_budget_p90`` say whether the plan still holds at the unfavourable end (None when the scenario sets
    no deadline or budget). With the GPU's ``arch`` (and whether its cards reach each other peer-to-peer, ``p2p``,
    hosts.p2p) and a coverage map in ``accuracy``, a plan whose cell
    (models/coverage.py) holds no published run gets the wider of its time band and the uncovered cases' band, and
    likewise for memory with ``accuracy.memory_coverage`` (the measured memory cases' cells); a plan in a memory
    cell whose worst measured run is above the p90 gets that run's ratio as its ratio_p90 (:func:`memory_band`,
    ``worst_run_like_this``). A plan whose
    predicted HFU is above the best published run of its cell gets ratio_p90 >= hfu / best (coverage.ceiling_ratio).
    A plan whose cards of a node have no peer-to-peer gets the wider of its time band and the band of the published
    runs like that (coverage.no_p2p_band), covered or not. ``method``: the cells' method part (coverage.method_key:
    ``+moe`` for a mixture-of-experts model; default the scenario's method).
    """
    m, t, c, p = est.memory, est.time, est.cost, est.plan
    assert m is not None and t is not None and c is not None and p is not None
    tim = time_band(accuracy, scenario.training.framework.value, p.precision.value, p.nodes)
    engine = cov.engine(scenario.training.framework.value, scenario.training.sharding.value)
    method = method or scenario.method.value
    plan_cell = None if arch is None else cov.cell(arch, engine, method, p.zero_stage, p.offload.value,
                                                   p.nodes, cov.staged(p2p, p.cards, p.nodes))  # fmt: skip
    like = cov.covered(accuracy, plan_cell)
    tim = cov.widened(tim, accuracy, plan_cell, like is False)
    best = cov.hfu_ceiling(accuracy, plan_cell, p.precision.value) if like is not None else None
    above = None if best is None or t.hfu is None else t.hfu > best
    if above:
        tim = {**tim, "ratio_p90": max(float(tim["ratio_p90"]), cov.ceiling_ratio(t.hfu, best))}
    mem_cell = None if arch is None else memory_cell(arch, scenario.training.framework.value,
                                                     scenario.training.sharding.value, method,
                                                     p.zero_stage, p.offload.value, p.nodes)  # fmt: skip
    mem_like = cov.covered(accuracy, mem_cell, "memory")
    mem = memory_band(accuracy, mem_cell)
    worst = cov.cell_high(accuracy, mem_cell)
    total_p90 = int(round(m.total * float(mem["ratio_p90"])))
    memory = MemoryBand(
        cases=int(mem["cases"]),
        ratio_p10=float(mem["ratio_p10"]),
        ratio_p90=float(mem["ratio_p90"]),
        total_p10=int(round(m.total * float(mem["ratio_p10"]))),
        total_p90=total_p90,
        fits_p90=total_p90 <= m.capacity * (1.0 - scenario.headroom),  # the usable memory the solver plans at
        published_run_like_this=mem_like,
        worst_run_like_this=None if worst is None else WorstRun(ratio=float(worst["ratio"]), case=str(worst["case"])),
    )
    compute = t.steps * t.step_seconds / 3600.0
    fixed = max(t.hours - compute, 0.0)
    hours = {k: round(fixed + compute * float(tim[k]), 6) for k in ("ratio_p10", "ratio_p90")}
    deadline = scenario.deadline_hours
    time = TimeBand(
        cases=int(tim["cases"]),
        ratio_p10=float(tim["ratio_p10"]),
        ratio_p90=float(tim["ratio_p90"]),
        hours_p10=hours["ratio_p10"],
        hours_p90=hours["ratio_p90"],
        meets_deadline_p90=None if deadline is None else hours["ratio_p90"] <= deadline,
        published_run_like_this=like,
        best_published_hfu=best,
        above_published_runs=above,
        no_peer_to_peer=None if plan_cell is None else cov.no_p2p_band(accuracy, plan_cell) is not None,
    )
    bills = cost.bills(np.array([hours["ratio_p10"], hours["ratio_p90"]]), offer, scenario.billing_terms)
    low, high = (round(b.per_card * p.cards, 2) for b in bills)
    budget = scenario.budget
    money = CostBand(
        total_p10=low,
        total_p90=high,
        currency=c.currency,
        within_budget_p90=None if budget is None else high * fx <= budget.amount + 1e-9,
    )
    return Uncertainty(memory=memory, time=time, cost=money)
