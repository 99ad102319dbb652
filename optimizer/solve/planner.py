"""From a scenario file to answers: the optimal plan, the best plan per GPU type, one estimate, explanations.

This is the library entry point the CLI, batch and pareto call; it returns typed results and never prints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.inputs.catalog import (
    Catalog,
    default_offer_files,
    is_builtin_offer_name,
    load_catalog,
    load_scenario,
    named_file,
    resolve_model,
    resolve_offer_file,
    scenario_offer_files,
    unique_files,
)
from optimizer.inputs.errors import InputError, SolverLimitError, did_you_mean
from optimizer.inputs.schema import Budget, Objective, PlanPins, Scenario, Status
from optimizer.inputs.schema_plan import CalibrationUse, CostReport, Estimate, MemoryReport, RiskUse, TimeReport
from optimizer.inputs.yamlio import validate, validate_value
from optimizer.launch import launch_settings
from optimizer.launch.lora_names import expert_dropout_problem
from optimizer.models import cost, hosts
from optimizer.models import coverage as cov
from optimizer.models.engines import engine_key
from optimizer.models.overlay import LoadedOverlay, group_accuracy, load_overlay, usage
from optimizer.models.uncertainty import band, memory_cell, memory_risk_ratio
from optimizer.solve import checklist, hint, requirements
from optimizer.solve.context import model_report, precision_notes, scenario_notes
from optimizer.solve.dominance import allowed, nondominated, relevant
from optimizer.solve.explain import Relaxation, check_pins, explain, pin_problem
from optimizer.solve.offer_facts import offer_report, spot_report
from optimizer.solve.solver import Limits, Outcome, SolverSettings, cents, limits_from, seconds, solve
from optimizer.solve.space import MAX_JOB_HOURS, Space, bill_rows, build, enumerate_all, report_currency, row_plan


@dataclass
class Overrides:
    """Command-line values that replace the scenario's."""

    objective: Objective | None = None
    budget: float | None = None
    deadline_hours: float | None = None
    catalog: list[str] | None = None  # --catalog: replaces the scenario's catalog
    add_catalog: list[str] | None = None  # --add-catalog: offered beside the scenario's catalog
    calibration: str | None = None  # calibration overlay file (replaces the scenario's ``calibration:``)


def with_overlay(catalog: Catalog, sc: Scenario, path: str | Path, ov: Overrides) -> Catalog:
    """The catalog with the user's calibration overlay (``--calibration`` or the scenario's key), if any.

    The overlay travels in ``calibration["overlay"]``, where optimizer/solve/space.py applies it after the models.
    """
    if ov.calibration is not None:
        loaded = load_overlay(ov.calibration, str(path), "--calibration")
    elif sc.calibration is not None:
        loaded = load_overlay(named_file(sc.calibration, path), str(path), "calibration")
    else:
        return catalog
    return replace(catalog, calibration={**catalog.calibration, "overlay": loaded})


@dataclass
class SolveResult:
    """The answer to ``ftopt solve``."""

    scenario: Scenario
    best: Estimate
    alternatives: list[Estimate]  # best plan on each other GPU type
    top: list[Estimate]  # the k best plans (including best)
    relaxation: Relaxation | None
    currency: str
    bound: float | None  # proven lower bound of the objective (cost or hours) when status is feasible
    candidates: int
    enumerated: int
    launch: dict | None = None  # framework settings for the best plan (launch.py)
    trade_off: dict | None = None  # what the scenario's tolerance traded (trade_off)
    searched: tuple[int, int] | None = None  # (offers evaluated, offers) when the time limit cut the build short
    top_k: int = 1  # the plans asked for (--top): top holds at most this many
    # the allowed GPU types with no plan beside the best one, each with why (no_plan_reasons); empty when the time
    # limit cut the search short (the GPUs not searched prove nothing)
    no_plan: list[tuple[str, str]] | None = None
    # a setting the scenario left to its default that gives a better plan (hint.hint), None when none does
    hint: dict | None = None


def prepare(path: str | Path, overrides: Overrides | None = None) -> tuple[Scenario, Catalog, str]:
    """Load the scenario, apply overrides, load its catalog."""
    source = str(path)
    sc = load_scenario(path)
    ov = overrides or Overrides()
    update: dict[str, object] = {}
    if ov.objective is not None:
        update["objective"] = ov.objective
    if ov.deadline_hours is not None:
        hours = validate_value(Scenario, "deadline_hours", ov.deadline_hours, source, "--deadline-hours")
        update["deadline_hours"] = hours
    if ov.budget is not None:
        amount = validate_value(Budget, "amount", ov.budget, source, "--budget")
        if sc.budget is None:
            raise InputError(source, "budget", "--budget needs a budget: {amount, currency} block in the scenario")
        update["budget"] = sc.budget.model_copy(update={"amount": amount})
    if ov.catalog:  # a command-line path is the working directory's (resolve_offer_file without base), not the file's
        cwd = [n if is_builtin_offer_name(n) else str(resolve_offer_file(n, source, "--catalog").resolve())
               for n in ov.catalog]  # fmt: skip
        update["catalog"] = cwd
    if update:
        sc = sc.model_copy(update=update)
    files = scenario_offer_files(sc, path)
    if ov.add_catalog:  # beside the scenario's offers (every built-in one when it names none)
        added = [resolve_offer_file(n, source, "--add-catalog") for n in ov.add_catalog]
        files = unique_files([*(files if files is not None else default_offer_files()), *added])
    return sc, with_overlay(load_catalog(files), sc, path, ov), source


def save_steps(est: Estimate) -> int | None:
    """Optimizer steps between the plan's checkpoint saves: its interval in steps, at most the run's steps."""
    t = est.time
    if t is None or t.checkpoint_interval_hours is None or t.train_hours is None:
        return None
    between = int(t.checkpoint_interval_hours * 3600.0 // max(t.step_seconds, 1e-9))
    return max(1, min(t.steps, between))


def run_steps(est: Estimate) -> int | None:
    """The optimizer steps the plan is priced for (time.steps), which the launch files train for."""
    return est.time.steps if est.time is not None else None


def wall_clock_parts(t: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Row ``i``'s training, checkpoint and start-up hours and its save count (empty without a hosts section)."""
    if "train_seconds" not in t:
        return {}
    saves = int(t["checkpoint_saves"][i])
    return {"train_hours": round(float(t["train_seconds"][i]) / 3600.0, 6), "checkpoint_saves": saves,
            "checkpoint_hours": round(saves * float(t["save_seconds"][i]) / 3600.0, 6),
            "startup_hours": round(float(t["startup_seconds"][i]) / 3600.0, 6)}  # fmt: skip


def canonical_allow(sc: Scenario, catalog: Catalog, source: str) -> list[str] | None:
    """Allow-listed GPU names as canonical ids (unknown names are errors); the pins checked against the allow-lists.

    Unknown provider names and pins that contradict an allow-list (a pinned GPU, offer or capacity the lists
    exclude, more cards or nodes than they allow) are one-line input errors (:func:`pins_outside_allow`), not an
    infeasible answer: the scenario contradicts itself whatever the catalog holds.
    """
    gpus = None
    if sc.allow.gpus is not None:
        gpus = [catalog.gpu_id(g, source, f"allow.gpus[{i}]") for i, g in enumerate(sc.allow.gpus)]
    problem = pins_outside_allow(sc, catalog, source, gpus)
    if problem is not None:
        raise InputError(source, *problem)
    return gpus


def pins_outside_allow(sc: Scenario, catalog: Catalog, source: str,
                       gpus: list[str] | None) -> tuple[str, str] | None:  # fmt: skip
    """(field, problem) for the first allow-list entry the catalog lacks or pin an allow-list excludes, else None."""
    allow, pins = sc.allow, sc.plan
    known = sorted({o.provider for o in catalog.offers}, key=str.lower)
    for i, name in enumerate(allow.providers or []):
        if name.lower() not in {p.lower() for p in known}:
            return (f"allow.providers[{i}]", f"no offer in the catalog is from '{name}'{did_you_mean(name, known)}; "
                    f"providers: {', '.join(known)}")  # fmt: skip
    if pins.gpu is not None and gpus is not None:
        gpu = catalog.gpu_id(pins.gpu, source, "plan.gpu")
        if gpu not in gpus:
            return ("plan.gpu", f"{gpu} is not in allow.gpus ({', '.join(gpus)}): allowed: one of them, or add "
                    f"{gpu} to allow.gpus")  # fmt: skip
    offer = next((o for o in catalog.offers if pins.offer is not None and o.id == pins.offer.lower()), None)
    if offer is not None and allow.providers and offer.provider.lower() not in {p.lower() for p in allow.providers}:
        return ("plan.offer", f"{offer.id} is from {offer.provider}, which allow.providers leaves out: allowed: an "
                f"offer of {', '.join(allow.providers)}, or add {offer.provider} to allow.providers")  # fmt: skip
    for pin, cap, what in ((pins.cards, allow.max_cards, "cards"), (pins.nodes, allow.max_nodes, "nodes")):
        if pin is not None and cap is not None and pin > cap:
            return (f"plan.{what}", f"{pin} is more than allow.max_{what} {cap}: allowed: at most {cap}, or raise "
                    f"allow.max_{what}")  # fmt: skip
    if pins.capacity == "spot" and not allow.spot:
        return ("plan.capacity", "spot needs allow.spot: true (spot capacity can be interrupted): allowed: "
                "on_demand, or set allow.spot: true")  # fmt: skip
    return None


def to_estimate(space: Space, i: int, status: Status) -> Estimate:
    """The JSON-contract view of candidate ``i`` of the space."""
    c = space.cand
    offer = space.offers[int(c.offer_idx[i])]
    b = space.bills[i]
    mem = c.mem
    plan = row_plan(space, i)
    capacity = int(c.hw.capacity_bytes[i])
    facts = offer_report(space, i, b.units)
    need, ram_ok = host_ram(space, i)
    memory = MemoryReport(
        **{
            k: int(mem[k][i])
            for k in ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "total")
        },
        capacity=capacity,
        # the card alone: a row short only of its node's host RAM fits its card (space.evaluate's ram_short)
        fits=bool(c.fits[i] or c.ram_short[i] or c.host_capped[i]),
        cpu_offload=int(mem["cpu_offload"][i]),
        host_ram_needed=need,
        host_ram_fits=ram_ok,
        host_ram_limit=host_ram_limit(space, i),
    )
    t = c.time
    time = TimeReport(
        step_seconds=round(float(t["step_seconds"][i]), 6),
        tokens_per_second=round(float(t["tokens_per_second"][i]), 3),
        mfu=round(float(t["mfu"][i]), 6),
        hfu=round(float(t["hfu"][i]), 6),
        hours=round(float(t["hours"][i]), 6),
        steps=space.job.steps,
        interruption_hours=round(float(t["interruption_hours"][i]), 6),
        checkpoint_interval_hours=round(float(t["checkpoint_interval_hours"][i]), 6),
        **wall_clock_parts(t, i),
    )
    offer_total = round(b.per_card * int(c.cards[i]), 2)
    money = CostReport(total=offer_total, currency=offer.currency)
    if offer.currency != space.currency:
        money = CostReport(total=offer_total, currency=offer.currency,
                           budget_currency_total=round(float(space.cost_total[i]), 2), budget_currency=space.currency)
    arch = space.job.arch
    notes = [*scenario_notes(space.scenario, arch), *precision_notes(plan.precision.value, arch)]
    est = Estimate(status=status, plan=plan, memory=memory, time=time, cost=money, model=model_report(arch),
                   offer=facts, spot=spot_report(space, i),
                   requirements=requirements.for_row(space, i), notes=notes)  # fmt: skip
    loaded: LoadedOverlay | None = space.overlay
    engine = engine_key(space.scenario, space.job)
    groups = (None, None) if loaded is None else (
        loaded.time_group(space.gpus[int(c.offer_idx[i])].arch, engine, space.job.method.value, plan.precision.value),
        loaded.memory_group(engine, space.job.method.value),
    )  # fmt: skip
    if loaded is not None:
        est = est.model_copy(update={"calibration": CalibrationUse.model_validate(usage(loaded, *groups))})
    if space.accuracy:  # validated on load (schema_catalog.Accuracy): both models or none
        oi = int(c.offer_idx[i])
        accuracy = group_accuracy(space.accuracy, loaded, *groups)
        billed = hosts.spot_offer(offer) if plan.capacity == "spot" else offer
        gpu = space.gpus[oi]
        method = cov.method_key(space.job.method.value, space.job.arch.experts)
        u = band(est, billed, space.fx[oi], space.scenario, accuracy, gpu.arch, hosts.p2p(gpu, offer), method)
        mem_cell = memory_cell(gpu.arch, space.scenario.training.framework.value,
                               space.scenario.training.sharding.value, method, plan.zero_stage,
                               plan.offload.value, plan.nodes)  # fmt: skip
        u = u.model_copy(update={"risk": risk_use(space.scenario, accuracy, memory.total, capacity, mem_cell)})
        est = est.model_copy(update={"uncertainty": u})
    # the step-time stop line at the plan's own band (widened outside the published runs, without P2P, above the
    # efficiency ceiling), not the group's: a plan the band expects to run 1.9x slower is not stopped at 1.3x
    time_p90 = est.uncertainty.time.ratio_p90 if est.uncertainty is not None else None
    return est.model_copy(update={"checklist": checklist.for_row(space, i, time_p90)})


def host_ram(space: Space, i: int) -> tuple[int | None, bool | None]:
    """(host RAM per node candidate ``i`` needs, whether its node has it), as space.evaluate judges it.

    need = offloaded states + the node's ranks' processes (hosts.host_ram_need), rounded up to a byte; the node's
    RAM is the offer's, else the default rule's (hosts.host_ram_bytes). (None, None) without the calibration's hosts
    rule, which sets the per-rank figure; the verdict is None when no RAM figure applies.
    """
    if not space.hosts_cal:
        return None, None
    c, idx = space.cand, space.cand.offer_idx[i : i + 1]
    ranks = hosts.ranks_per_node(c.cards[i : i + 1], space.offers, idx)
    need = hosts.host_ram_need(c.mem["cpu_offload"][i : i + 1], ranks, space.hosts_cal)
    have = hosts.host_ram_bytes(space.offers, idx, ranks, space.hosts_cal, space.scenario.allow.max_host_memory_gib)
    ok = None if math.isnan(float(have[0])) else bool(hosts.ram_fits(need, have)[0])
    if bool(c.host_capped[i]):  # offloads more than the scenario's allow.max_host_memory_gib
        ok = False
    return int(math.ceil(float(need[0]))), ok


def host_ram_limit(space: Space, i: int) -> int | None:
    """allow.max_host_memory_gib in bytes when row ``i`` offloads more than it (space.evaluate's host_capped)."""
    cap = space.scenario.allow.max_host_memory_gib
    return int(cap * 2**30) if cap is not None and bool(space.cand.host_capped[i]) else None


def risk_use(sc: Scenario, accuracy: Mapping[str, Any], total: int, capacity: int,
             mem_cell: str | None = None) -> RiskUse:  # fmt: skip
    """What the plan was checked at: the scenario's risk, the memory ratio and the limits.

    The ratio is the plan's own memory band at the risk (uncertainty.memory_risk_ratio for its cell, with the
    overlay's band where it has one: the accuracy its band was drawn from), as space.memory_ratios planned it.
    """
    ratio = memory_risk_ratio(accuracy, sc.risk.value, mem_cell)
    return RiskUse(level=sc.risk.value, memory_ratio=ratio, total_at_risk=int(round(total * ratio)),
                   usable=int(capacity * (1.0 - sc.headroom)),
                   applies_to=["memory", "deadline", "budget"] if sc.risk_limits else ["memory"])  # fmt: skip


DEFAULT_SETTINGS = SolverSettings()


@contextmanager
def named_limits(source: str) -> Iterator[None]:
    """Prefix a SolverLimitError (candidate cap, time limit) with the scenario file it concerns."""
    try:
        yield
    except SolverLimitError as exc:
        message = str(exc)
        raise SolverLimitError(message if message.startswith(source) else f"{source}: {message}") from None


@dataclass
class Loaded:
    """A scenario file turned into its pruned candidate space and the user limits the solver enforces."""

    scenario: Scenario
    catalog: Catalog
    source: str
    space: Space
    limits: Limits


def load_space(path: str | Path, overrides: Overrides | None = None, deadline: float | None = None) -> Loaded:
    """Load the scenario and its catalog, build the candidate space and the limits; bad pins are InputErrors.

    ``deadline`` (time.monotonic()): the build stops evaluating offers once it has passed (space.build).
    """
    sc, catalog, source = prepare(path, overrides)
    arch = resolve_model(sc, catalog, path)
    dropout = expert_dropout_problem(sc, arch)
    if dropout is not None:  # the launch files could not start (PEFT refuses it)
        raise InputError(source, "lora.dropout", dropout)
    allow = canonical_allow(sc, catalog, source)
    with named_limits(source):
        space = build(sc, catalog, arch, source, deadline)
    limits = limits_from(space, allow)
    check_pins(space, source)
    return Loaded(sc, catalog, source, space, limits)


def remaining(settings: SolverSettings, deadline: float) -> SolverSettings:
    """``settings`` with the time left until ``deadline`` (at least a microsecond: the table's plan then answers)."""
    return replace(settings, time_limit_s=max(deadline - time.monotonic(), 1e-6))


def cut_short(space: Space, status: Status) -> Status:
    """A plan from a space whose build the time limit cut short is proven for the offers searched only: feasible."""
    return Status.feasible if space.searched is not None and status is Status.optimal else status


def _solve_quietly(space: Space, objective: Objective, limits: Limits, settings: SolverSettings,
                   subset: np.ndarray, tolerance: float = 0.0) -> Outcome:  # fmt: skip
    """An extra solve (top-k, other GPU types): a time limit hit there drops the extra plan, not the answer."""
    try:
        return solve(space, objective, limits, settings, subset=subset, tolerance=tolerance)
    except SolverLimitError:
        return Outcome(Status.infeasible, None)


def solve_scenario(path: str | Path, overrides: Overrides | None = None, settings: SolverSettings = DEFAULT_SETTINGS,
                   top_k: int = 1, with_hint: bool = True) -> SolveResult:  # fmt: skip
    """Solve one scenario file: optimal plan, best per other GPU type, top-k, or the infeasibility explanation.

    ``settings.time_limit_s`` bounds the whole answer: the build stops evaluating offers when it runs out (once
    some plan fits; ``SolveResult.searched``), and each solve gets what is left. ``with_hint``: look for a what-if
    hint on the plan (hint.hint: a second solve, only when its rule holds).
    """
    deadline = time.monotonic() + settings.time_limit_s
    loaded = load_space(path, overrides, deadline)
    sc, catalog, source, space, limits = loaded.scenario, loaded.catalog, loaded.source, loaded.space, loaded.limits
    with named_limits(source):  # CP-SAT sees the candidates that can be optimal (dominance.relevant: exact)
        out = solve(space, sc.objective, limits, remaining(settings, deadline), relevant(space, limits), sc.tolerance)
        rel = explain(space, sc.objective, limits, settings, catalog, source) if out.index is None else None
    if out.index is None:
        empty = Estimate(status=Status.infeasible, plan=None, memory=None, time=None, cost=None)
        return SolveResult(sc, empty, [], [], rel, space.currency, None, len(space.cand), space.enumerated,
                           searched=space.searched, top_k=top_k)  # fmt: skip
    best = to_estimate(space, out.index, cut_short(space, out.status))
    top = [best]
    excluded = np.zeros(len(space.cand), dtype=bool)
    excluded[out.index] = True
    while len(top) < top_k and not excluded.all():
        nxt = _solve_quietly(space, sc.objective, limits, remaining(settings, deadline), ~excluded, sc.tolerance)
        if nxt.index is None:
            break
        top.append(to_estimate(space, nxt.index, cut_short(space, nxt.status)))
        excluded[nxt.index] = True
    alternatives = []
    gpu_of = np.array([space.gpus[i].id for i in space.cand.offer_idx])
    money, hours, admits = cents(space.cost_total), seconds(space.cand.time["hours"]), allowed(space, limits)
    for gid in sorted(set(gpu_of)):
        if gid == best.plan.gpu:
            continue
        own = nondominated(money, hours, admits & (gpu_of == gid))  # the GPU's own candidates that can be optimal
        alt = _solve_quietly(space, sc.objective, limits, remaining(settings, deadline), own, sc.tolerance)
        if alt.index is not None:
            alternatives.append(to_estimate(space, alt.index, cut_short(space, alt.status)))
    no_plan = no_plan_reasons(space, limits, {best.plan.gpu, *(a.plan.gpu for a in alternatives if a.plan)},
                              set(gpu_of[admits].tolist()))  # fmt: skip
    bound = None
    if out.bound is not None and out.status is Status.feasible:  # solver units (cents, seconds) -> cost or hours
        bound = bound_value(out.bound, sc.objective)
    if space.searched is not None:  # a bound over the offers searched says nothing of the others
        bound = None
    with named_limits(source):
        traded = trade_off(space, limits, remaining(settings, deadline), out.index)
    better = (hint.hint(space, catalog, source, limits, remaining(settings, deadline), out.index, deadline)
              if with_hint else None)  # fmt: skip
    per_node = next(o.cards_per_node for o in space.offers if o.id == best.plan.offer)
    kept = space.hosts_cal.get("checkpoints_kept")  # the checkpoints the disk check counts (requirements.py)
    launch = launch_settings(sc, best.plan, per_node, save_steps(best), space.job.arch, run_steps(best),
                             int(kept) if kept is not None else None)  # fmt: skip
    counts = (len(space.cand), space.enumerated)
    return SolveResult(sc, best, alternatives, top, None, space.currency, bound, *counts, launch, traded,
                       space.searched, top_k, no_plan, better)  # fmt: skip


NO_PLAN_WHY = {
    "limits": "none within the scenario's budget, deadline and other limits",
    "host_ram": "configurations that fit their cards need more host RAM than their nodes have",
    "host_cap": "configurations that fit their cards offload more than allow.max_host_memory_gib",
    "memory": "no configuration fits in their memory",
    "offer": "no offer in the catalog",
}


def no_plan_reasons(space: Space, limits: Limits, planned: set[str], admitted: set[str]) -> list[tuple[str, str]]:
    """(GPU id, reason key of NO_PLAN_WHY) for each allowed GPU type without a plan, in id order.

    Allowed: allow.gpus, else every GPU the catalog offers. The reason is the first that applies: candidates that
    pass the allow-lists and caps exist but none meets budget and deadline (limits); some configuration fits its
    card but not its node's host RAM (host_ram), or offloads more than allow.max_host_memory_gib (host_cap); the
    catalog offers it but nothing fits (memory); it has no offer.
    Empty when the time limit cut the search short: the offers not searched say nothing.
    """
    if space.searched is not None:
        return []
    offered = {o.gpu for o in space.offers}
    allowed = set(limits.gpus) if limits.gpus is not None else offered
    out = []
    for gid in sorted(allowed - planned):
        why = ("limits" if gid in admitted else "host_ram" if gid in space.ram_short_gpus
               else "host_cap" if gid in space.capped_gpus else "memory" if gid in offered else "offer")  # fmt: skip
        out.append((gid, why))
    return out


def bound_value(units: float, objective: Objective) -> float:
    """CP-SAT's proven bound in the solver's units (cents or seconds) as a cost or hours that no plan is below.

    The solver counts each plan's cost in whole cents rounded up (and hours in whole seconds rounded up), so a bound
    of B units proves only that every plan's cost is above B - 1 cents: that, rounded down to the cent (to the
    hundredth of an hour), is the bound reported. It is never above the plan's own cost as printed.
    """
    units = max(math.ceil(units - 1e-6) - 1, 0)  # the objective is whole units: a fractional bound rounds up
    if objective is Objective.cost:
        return units / 100.0
    return math.floor(units / 36.0 + 1e-9) / 100.0


def trade_off(space: Space, limits: Limits, settings: SolverSettings, chosen: int) -> dict:
    """What the scenario's tolerance traded: the chosen plan against the plain optimum (tolerance 0).

    premium = chosen's objective / optimum's - 1 (at most the tolerance); gain = optimum's other axis / chosen's
    (how many times faster, or cheaper, the chosen plan is). Costs in the report currency, hours of wall clock.
    """
    sc = space.scenario
    strict = chosen if sc.tolerance == 0 else \
        solve(space, sc.objective, limits, settings, relevant(space, limits)).index  # fmt: skip
    strict = chosen if strict is None else strict
    cost, hours = space.cost_total, space.cand.time["hours"]
    first, other = (cost, hours) if sc.objective is Objective.cost else (hours, cost)
    premium = float(first[chosen] / first[strict] - 1.0) if first[strict] > 0 else 0.0
    gain = float(other[strict] / other[chosen]) if other[chosen] > 0 else 1.0
    doc = {"tolerance": sc.tolerance, "objective": sc.objective.value, "traded": bool(strict != chosen),
           "optimum": {"cost": round(float(cost[strict]), 2), "hours": round(float(hours[strict]), 6)},
           "premium": round(premium, 6), "gain": round(gain, 6), "text": None}  # fmt: skip
    if strict != chosen:
        dearer, best, axis = (("dearer", "cheapest", "faster") if sc.objective is Objective.cost
                              else ("slower", "fastest", "cheaper"))  # fmt: skip
        doc["text"] = (f"{premium:.1%} {dearer} than the {best} plan, {gain:.3g}x {axis}; `tolerance: 0` gives the "
                       f"{best} ({doc['optimum']['cost']:,.2f} {space.currency}, {doc['optimum']['hours']:,.1f} h)")
    return doc


ESTIMATE_DEFAULTS = {"tp": 1, "pp": 1, "zero_stage": 0, "offload": "none", "checkpointing": "none"}


def estimate_scenario(path: str | Path, pins: dict[str, object], overrides: Overrides | None = None) -> Estimate:
    """Evaluate one configuration (scenario ``plan:`` merged with ``pins``); defaults fill the rest.

    Needs gpu, cards and micro_batch. When several offers rent the GPU, the cheapest bill is reported.
    """
    space, best = estimate_space(path, pins, overrides)
    # an estimate is one given configuration, not an optimum: feasible when it fits, else infeasible
    return to_estimate(space, best, Status.feasible if bool(space.cand.fits[best]) else Status.infeasible)


def estimate_space(path: str | Path, pins: dict[str, object], overrides: Overrides | None = None,
                   whole_instances: bool = True) -> tuple[Space, int]:  # fmt: skip
    """The evaluated rows of one configuration (one per offer renting the GPU) and the row with the cheapest bill.

    ``whole_instances=False`` reads every offer as sold by the card: a run that already happened (a measurement
    being calibrated) used the cards it used, whatever the unit a catalog rents them in; its bill means nothing.
    """
    sc, catalog, source = prepare(path, overrides)
    if not whole_instances:
        catalog = replace(catalog, offers=[o.model_copy(update={"sold_as": "card"}) for o in catalog.offers])
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
    pinned = validate(PlanPins, merged, source, "plan.")
    sc = sc.model_copy(update={"plan": pinned})
    arch = resolve_model(sc, catalog, path)
    job, offers, gpus, ev = enumerate_all(sc, catalog, arch, source)
    if len(ev) == 0:
        raise InputError(source, *pin_problem(sc, arch, offers, gpus))
    currency = report_currency(sc, offers)
    fx = [cost.fx_rate(catalog, o.currency, currency, source, o.id) for o in offers]
    space = Space(job, sc, offers, gpus, currency, fx, ev, np.zeros(len(ev)), [], len(ev), int(ev.fits.sum()),
                  accuracy=catalog.calibration.get("accuracy", {}), overlay=catalog.calibration.get("overlay"),
                  hosts_cal=catalog.calibration.get("hosts", {}))
    if sc.plan.capacity == "spot" and space.hosts_cal:  # estimate a pinned spot plan on its spot rows
        space.cand = ev = hosts.add_spot_rows(ev, offers, space.hosts_cal, "spot")
        if len(ev) == 0:
            raise InputError(source, "plan.capacity", "spot needs an offer with spot.price and spot.interruptions")
    slowest = float(np.max(ev.time["hours"]))
    if not slowest <= MAX_JOB_HOURS:  # also NaN and infinity
        raise InputError(source, "data", f"this configuration takes {slowest:,.0f} hours, more than the "
                         f"{MAX_JOB_HOURS:,} hours (100 years) ftopt plans for; reduce the data")  # fmt: skip
    totals, bills = bill_rows(ev, sc, offers, fx)
    best = int(np.lexsort((np.arange(len(ev)), totals))[0])
    space.cost_total = totals
    space.bills = bills
    return space, best
