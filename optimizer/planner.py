"""From a scenario file to answers: the optimal plan, the best plan per GPU type, one estimate, explanations.

This is the library entry point the CLI, batch and pareto call; it returns typed results and never prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optimizer import cost
from optimizer.catalog import Catalog, load_catalog, load_scenario, resolve_model, scenario_offer_files
from optimizer.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION
from optimizer.errors import InputError
from optimizer.schema import (
    CostReport,
    Estimate,
    MemoryReport,
    Objective,
    Plan,
    Scenario,
    Status,
    TimeReport,
)
from optimizer.solver import Limits, SolverSettings, limits_from, solve
from optimizer.space import Space, build, enumerate_all, report_currency


@dataclass
class Overrides:
    """Command-line values that replace the scenario's."""

    objective: Objective | None = None
    budget: float | None = None
    deadline_hours: float | None = None
    catalog: list[str] | None = None


@dataclass
class Relaxation:
    """Why a scenario is infeasible and the smallest change that makes it feasible."""

    binding: list[str]
    message: str
    budget_needed: float | None = None
    deadline_needed_hours: float | None = None
    memory_needed_bytes: int | None = None
    gpus_that_fit: list[str] = field(default_factory=list)


@dataclass
class SolveResult:
    """The answer to ``ftopt solve``."""

    scenario: Scenario
    best: Estimate
    alternatives: list[Estimate]  # best plan on each other GPU type
    top: list[Estimate]  # the k best plans (including best)
    relaxation: Relaxation | None
    currency: str
    bound: float | None
    candidates: int
    enumerated: int


def prepare(path: str | Path, overrides: Overrides | None = None) -> tuple[Scenario, Catalog, str]:
    """Load the scenario, apply overrides, load its catalog."""
    source = str(path)
    sc = load_scenario(path)
    ov = overrides or Overrides()
    update: dict[str, object] = {}
    if ov.objective is not None:
        update["objective"] = ov.objective
    if ov.deadline_hours is not None:
        update["deadline_hours"] = ov.deadline_hours
    if ov.budget is not None:
        if sc.budget is None:
            raise InputError(source, "budget", "--budget needs a budget.currency in the scenario")
        update["budget"] = sc.budget.model_copy(update={"amount": ov.budget})
    if ov.catalog:
        update["catalog"] = ov.catalog
    if update:
        sc = sc.model_copy(update=update)
    files = scenario_offer_files(sc, path)
    return sc, load_catalog(files), source


def canonical_allow(sc: Scenario, catalog: Catalog, source: str) -> list[str] | None:
    """Allow-listed GPU names as canonical ids (unknown names are errors)."""
    if sc.allow.gpus is None:
        return None
    return [catalog.gpu_id(g, source, f"allow.gpus[{i}]") for i, g in enumerate(sc.allow.gpus)]


def to_estimate(space: Space, i: int, status: Status) -> Estimate:
    """The JSON-contract view of candidate ``i`` of the space."""
    c = space.cand
    offer = space.offers[int(c.offer_idx[i])]
    b = space.bills[i]
    mem = c.mem
    plan = Plan(
        gpu=offer.gpu,
        offer=offer.id,
        cards=int(c.cards[i]),
        nodes=int(c.nodes[i]),
        tp=int(c.cfg.tp[i]),
        pp=int(c.cfg.pp[i]),
        dp=int(c.cfg.dp[i]),
        zero_stage=int(c.cfg.zero_stage[i]),
        offload=OFFLOAD[int(c.cfg.offload[i])],
        micro_batch=int(c.cfg.micro_batch[i]),
        grad_accum=int(c.cfg.grad_accum[i]),
        precision=PRECISION[int(c.cfg.precision[i])],
        optimizer=OPTIMIZER[int(c.cfg.optimizer[i])],
        checkpointing=CHECKPOINTING[int(c.cfg.checkpointing[i])],
        term=b.term,
        billed_units=b.units,
    )
    capacity = int(c.hw.capacity_bytes[i])
    memory = MemoryReport(
        **{
            k: int(mem[k][i])
            for k in ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "total")
        },
        capacity=capacity,
        fits=bool(c.fits[i]),
        cpu_offload=int(mem["cpu_offload"][i]),
    )
    t = c.time
    time = TimeReport(
        step_seconds=round(float(t["step_seconds"][i]), 6),
        tokens_per_second=round(float(t["tokens_per_second"][i]), 3),
        mfu=round(float(t["mfu"][i]), 6),
        hours=round(float(t["hours"][i]), 6),
        steps=space.job.steps,
    )
    offer_total = round(b.per_card * int(c.cards[i]), 2)
    money = CostReport(total=offer_total, currency=offer.currency)
    if offer.currency != space.currency:
        money = CostReport(
            total=offer_total, currency=offer.currency, budget_currency_total=round(float(space.cost_total[i]), 2)
        )
    return Estimate(status=status, plan=plan, memory=memory, time=time, cost=money)


def _explain(
    space: Space, objective: Objective, limits: Limits, settings: SolverSettings, catalog: Catalog
) -> Relaxation:
    """Which constraints bind (assumption core, shrunk one at a time) and the relaxation that fixes each."""
    if len(space.cand) == 0:
        need = min(space.smallest_need.values()) if space.smallest_need else None
        biggest = max(catalog.gpus.values(), key=lambda g: g.memory_gib)
        fit = sorted(
            g.id
            for g in catalog.gpus.values()
            if need is not None and g.memory_gib * 2**30 * (1 - space.scenario.headroom) >= need
        )
        gib = f"{need / 2**30:.1f} GiB" if need is not None else "unknown"
        msg = (f"no configuration fits in memory: the smallest needs {gib} per GPU; "
               f"the largest offered card has {max((g.memory_gib for g in space.gpus), default=0):g} GiB")  # fmt: skip
        if fit:
            msg += f"; GPUs that would fit: {', '.join(fit)}"
        else:
            msg += f" (largest in the catalog: {biggest.id}, {biggest.memory_gib:g} GiB); allow more cards or offload"
        return Relaxation(["memory"], msg, memory_needed_bytes=need, gpus_that_fit=fit)
    core = solve(space, objective, limits, settings).binding
    for name in list(core):
        trial = [n for n in core if n != name]
        if (
            solve(space, objective, limits.without(*[n for n in limits.active() if n not in trial]), settings).status
            is Status.infeasible
        ):
            core = trial
    parts: list[str] = []
    rel = Relaxation(core, "")
    if "budget_cents" in core:
        out = solve(space, Objective.cost, limits.without("budget_cents"), settings)
        if out.index is not None:
            rel.budget_needed = math.ceil(float(space.cost_total[out.index]) * 100 - 1e-6) / 100
            parts.append(f"budget too small: needs at least {rel.budget_needed:,.2f} {space.currency}")
    if "deadline_s" in core:
        out = solve(space, Objective.time, limits.without("deadline_s"), settings)
        if out.index is not None:
            rel.deadline_needed_hours = math.ceil(float(space.cand.time["hours"][out.index]) * 100 - 1e-6) / 100
            parts.append(f"deadline too short: needs at least {rel.deadline_needed_hours:g} hours")
    for name in core:
        if name not in ("budget_cents", "deadline_s"):
            parts.append(f"allow.{name} excludes every plan that fits")
    if "budget_cents" in core and "deadline_s" in core:
        parts.append("(each figure assumes the other limit is kept)")
    rel.message = "; ".join(parts) or "no plan meets the constraints"
    return rel


def solve_scenario(path: str | Path, overrides: Overrides | None = None, settings: SolverSettings = SolverSettings(),
                   top_k: int = 1) -> SolveResult:  # fmt: skip
    """Solve one scenario file: optimal plan, best per other GPU type, top-k, or the infeasibility explanation."""
    sc, catalog, source = prepare(path, overrides)
    arch = resolve_model(sc, catalog, path)
    allow = canonical_allow(sc, catalog, source)
    space = build(sc, catalog, arch, source)
    limits = limits_from(space, allow)
    out = solve(space, sc.objective, limits, settings)
    if out.index is None:
        rel = _explain(space, sc.objective, limits, settings, catalog)
        empty = Estimate(status=Status.infeasible, plan=None, memory=None, time=None, cost=None)
        return SolveResult(sc, empty, [], [], rel, space.currency, None, len(space.cand), space.enumerated)
    best = to_estimate(space, out.index, out.status)
    top = [best]
    excluded = np.zeros(len(space.cand), dtype=bool)
    excluded[out.index] = True
    while len(top) < top_k and not excluded.all():
        nxt = solve(space, sc.objective, limits, settings, subset=~excluded)
        if nxt.index is None:
            break
        top.append(to_estimate(space, nxt.index, nxt.status))
        excluded[nxt.index] = True
    alternatives = []
    gpu_of = np.array([space.gpus[i].id for i in space.cand.offer_idx])
    for gid in sorted(set(gpu_of)):
        if gid == best.plan.gpu:
            continue
        alt = solve(space, sc.objective, limits, settings, subset=gpu_of == gid)
        if alt.index is not None:
            alternatives.append(to_estimate(space, alt.index, alt.status))
    return SolveResult(sc, best, alternatives, top, None, space.currency, out.bound, len(space.cand), space.enumerated)


ESTIMATE_DEFAULTS = {"tp": 1, "pp": 1, "zero_stage": 0, "offload": "none", "checkpointing": "none"}


def estimate_scenario(path: str | Path, pins: dict[str, object], overrides: Overrides | None = None) -> Estimate:
    """Evaluate one configuration (scenario ``plan:`` merged with ``pins``); defaults fill the rest.

    Needs gpu, cards and micro_batch. When several offers rent the GPU, the cheapest bill is reported.
    """
    sc, catalog, source = prepare(path, overrides)
    merged = {
        **ESTIMATE_DEFAULTS,
        **sc.plan.model_dump(exclude_none=True),
        **{k: v for k, v in pins.items() if v is not None},
    }
    merged.pop("billed_units", None)
    for key in ("gpu", "cards", "micro_batch"):
        if key not in merged:
            raise InputError(
                source,
                f"plan.{key}",
                f"estimate needs {key} (in the scenario's plan: block or as --{key.replace('_', '-')})",
            )
    from optimizer.schema import PlanPins
    from optimizer.yamlio import validate

    pinned = validate(PlanPins, merged, source, "plan.")
    sc = sc.model_copy(update={"plan": pinned})
    arch = resolve_model(sc, catalog, path)
    job, offers, gpus, ev = enumerate_all(sc, catalog, arch, source)
    if len(ev) == 0:
        raise InputError(source, "plan", _why_no_config(sc, arch))
    currency = report_currency(sc, offers)
    space = Space(job, sc, offers, gpus, currency, [cost.fx_rate(catalog, o.currency, currency, source) for o in offers], ev,
                  np.zeros(len(ev)), [], len(ev), int(ev.fits.sum()))  # fmt: skip
    terms = frozenset([sc.plan.term]) if sc.plan.term else None
    bills = [cost.bill(float(ev.time["hours"][i]), offers[int(ev.offer_idx[i])], terms) for i in range(len(ev))]
    totals = np.array([b.per_card * int(ev.cards[i]) * space.fx[int(ev.offer_idx[i])] for i, b in enumerate(bills)])
    best = int(np.lexsort((np.arange(len(ev)), totals))[0])
    space.cost_total = totals
    space.bills = bills
    return to_estimate(space, best, Status.optimal if bool(ev.fits[best]) else Status.infeasible)


def _why_no_config(sc: Scenario, arch: object) -> str:
    p = sc.plan
    dp = (p.cards or 1) // max((p.tp or 1) * (p.pp or 1), 1)
    if p.tp and (arch.heads % p.tp or arch.kv_heads % p.tp):  # type: ignore[attr-defined]
        return f"tp={p.tp} must divide heads ({arch.heads}) and kv_heads ({arch.kv_heads})"  # type: ignore[attr-defined]
    if p.cards and p.cards % ((p.tp or 1) * (p.pp or 1)):
        return f"cards={p.cards} must be a multiple of tp x pp = {(p.tp or 1) * (p.pp or 1)}"
    if dp and sc.global_batch % (dp * (p.micro_batch or 1)):
        return f"global_batch {sc.global_batch} must be divisible by micro_batch x dp = {(p.micro_batch or 1) * dp}"
    return "no offer in the catalog can host this configuration (card count over the offer's nodes, or precision unsupported)"
