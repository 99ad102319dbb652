"""Re-check a plan from scratch, beside the solver: memory, time, cost and every constraint, in plain Python.

:func:`check_plan` takes a scenario, a catalog and an :class:`~optimizer.inputs.schema_plan.Estimate` (what ``solve`` or
``estimate`` returned) and lists every rule the plan breaks, one message per violation; an empty list means the
plan is valid. It does not use the enumeration, pruning, billing, rounding or solver it checks: it rebuilds the
job and the one-row configuration itself, evaluates the pure models with arrays of length 1 (the hardware row comes
from space.hardware, the one place where link bandwidths are derated; the models themselves are checked against
hand-worked numbers in tests/test_golden.py), re-bills the hours with its own plain loop over term counts in exact
decimal arithmetic (:func:`exact_bill`, not optimizer.models.cost), rounds money and time up with exact decimal
ceilings (:func:`ceil_cents`, :func:`ceil_seconds`, not solver.cents/seconds) and re-derives each constraint of
docs/design.md sections 4 and 6, one function per rule.

:func:`validate_catalog_files` runs the catalog loader's pydantic models on gpus, offers, models and fx files
(``ftopt catalog validate``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.inputs import catalog as catalog_mod
from optimizer.inputs.catalog import Catalog, resolve_model
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import TERM_HOURS, ModelArch, Offload, Precision, Scenario, Term
from optimizer.inputs.schema_catalog import FxFile, Gpu, ModelFile, Offer
from optimizer.inputs.schema_plan import Estimate, Plan
from optimizer.inputs.yamlio import read_yaml, validate
from optimizer.models import coverage as cov
from optimizer.models import hosts, memory, timing
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Hardware, Job, column
from optimizer.models.uncertainty import memory_cell, memory_risk_ratio
from optimizer.solve.space import hardware as space_hardware
from optimizer.solve.space import memory_accuracy

MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "total")
# rounding of the JSON report
TIME_DECIMALS = {"step_seconds": 6, "tokens_per_second": 3, "mfu": 6, "hfu": 6, "hours": 6}
_VALID_ZERO_OFFLOAD = {(0, Offload.none), (1, Offload.none), (1, Offload.optimizer), (2, Offload.none),
                       (2, Offload.optimizer), (3, Offload.none), (3, Offload.optimizer), (3, Offload.all)}  # fmt: skip
_INCREMENT_S = {"hour": 3600, "minute": 60, "second": 1}


@dataclass(frozen=True)
class ExactBill:
    """The cheapest cover of a job's hours per card: exact cost (offer currency) and units per term."""

    per_card: Fraction | None  # None: no allowed, priced term covers the hours
    units: dict[str, int]


@dataclass(frozen=True)
class Recomputed:
    """What the validator derived for one plan: memory by component (bytes), time (floats), bill per card."""

    memory: dict[str, int]
    capacity_bytes: int
    time: dict[str, float]
    steps: int
    bill: ExactBill


# ------------------------------------------------------------------------------------------------ rebuilding


def job_of(scenario: Scenario, arch: ModelArch, calibration: dict[str, Any]) -> Job:
    """The scenario's fixed quantities; base weights 16-bit for full and LoRA, 4-bit for QLoRA unless given.

    The most interleaved pipeline chunks: the pinned ``plan.virtual_pipeline``, else the engine's calibration
    ``frameworks.pipeline_chunks``; what selective checkpointing recomputes: ``timing.selective_recompute``.
    """
    t = scenario.training
    pinned = scenario.plan.virtual_pipeline
    chunks = pinned if pinned is not None else calibration["frameworks"]["pipeline_chunks"][t.framework.value]
    return Job(arch=arch, method=scenario.method, lora=scenario.lora_spec, framework=t.framework,
               sharding=t.sharding, attention=t.attention, loss=t.loss, base_bits=scenario.frozen_base_bits,
               seq_len=scenario.seq_len, global_batch=scenario.global_batch,
               total_tokens=scenario.tokens_processed, checkpoint_every_hours=t.checkpoint_every_hours,
               sample_row_tokens=scenario.data.sample_row_tokens(scenario.seq_len),
               compile=t.compile, activation_offload=t.activation_offload,
               optimizer_in_backward=t.optimizer_in_backward, pipeline_chunks=int(chunks),
               reduce_every_micro_batch=t.reduce_every_micro_batch, reduce_dtype=t.reduce_dtype,
               loss_parallel=t.loss_parallel,
               quant_kernel=None if t.quant_kernel is None else t.quant_kernel.value,
               optimizer_kernel=t.optimizer_kernel.value,
               selective_recompute=timing.recompute_policy(t.framework.value, calibration["timing"]))  # fmt: skip


def config_of(plan: Plan) -> Configs:
    """The plan as a one-row configuration (closed choices as enum indices)."""
    return Configs(
        tp=column(plan.tp), pp=column(plan.pp), dp=column(plan.dp), zero_stage=column(plan.zero_stage),
        offload=column(OFFLOAD.index(plan.offload)), micro_batch=column(plan.micro_batch),
        grad_accum=column(plan.grad_accum), checkpointing=column(CHECKPOINTING.index(plan.checkpointing)),
        precision=column(PRECISION.index(plan.precision)), optimizer=column(OPTIMIZER.index(plan.optimizer)),
        shard=column(plan.shard_group if plan.shard_group is not None else plan.dp),
    )  # fmt: skip


def hardware_of(gpu: Gpu, offer: Offer, cards: int, nodes: int, precision: Precision,
                consts: dict[str, Any]) -> Hardware:  # fmt: skip
    """One row of hardware (bytes, FLOP/s, link bytes/s) from the catalog entries.

    Delegates to :func:`optimizer.solve.space.hardware` on a one-offer list: how links are derated and shared is part of
    the time model (kept in one place), not a constraint this module re-derives.
    """
    return space_hardware([gpu], [offer], column(0), column(cards), column(nodes),
                          column(PRECISION.index(precision)), consts)  # fmt: skip


def recompute(scenario: Scenario, catalog: Catalog, arch: ModelArch, plan: Plan, gpu: Gpu, offer: Offer) -> Recomputed:
    """Memory, time and bill of the plan, evaluated on one row with the pure models."""
    job = job_of(scenario, arch, catalog.calibration)
    cfg = config_of(plan)
    hw = hardware_of(gpu, offer, plan.cards, plan.nodes, plan.precision, catalog.calibration["timing"])
    mem = {k: int(v[0]) for k, v in memory.breakdown(job, cfg, catalog.calibration["memory"]).items()}
    cal = catalog.calibration
    one, nodes = column(0), column(plan.nodes)
    with np.errstate(divide="ignore", invalid="ignore"):  # wall clock with the offer's overheads (hosts.py)
        arrays = hosts.wall_clock(job, cfg, hw, [offer], one, nodes, cal)
        band = hosts.spot_band(offer, cal.get("hosts")) if plan.capacity == "spot" and cal.get("hosts") else None
        if band is not None:  # the offer's interruption band, else the calibration's prior
            arrays = hosts.spot_time(arrays, nodes, column(band[0], float), column(band[1], float),
                                     hosts.disk_write_bytes_per_s([offer], one, cal["hosts"]))  # fmt: skip
    t = {k: float(v[0]) for k, v in arrays.items()}
    hours = t["hours"]
    billed = hosts.spot_offer(offer) if plan.capacity == "spot" and offer.spot is not None else offer
    bill = exact_bill(hours, billed, scenario.billing_terms) if math.isfinite(hours) else ExactBill(None, {})
    return Recomputed(mem, hosts.capacity_bytes(gpu, offer), t, job.steps, bill)


# ------------------------------------------------------------------------------------------------ exact money


def exact(x: float) -> Fraction:
    """A catalog or scenario number as the decimal it was written as (0.1 is 1/10, not the nearest double)."""
    return Fraction(Decimal(repr(float(x))))


def _ceil_tolerant(x: Fraction) -> int:
    """ceil(x) after rounding x to 6 decimals: a float product that lands 1e-9 above a whole unit is that unit."""
    q = Decimal(x.numerator) / Decimal(x.denominator)
    return int(q.quantize(Decimal("1e-6")).to_integral_value(ROUND_CEILING))


def ceil_cents(amount: Fraction) -> int:
    """Money to whole cents, rounded up: a plan a fraction of a cent over a budget is over it."""
    return _ceil_tolerant(amount * 100)


def floor_cents(amount: float) -> int:
    """A limit (budget) to whole cents, rounded down."""
    return int((Decimal(repr(float(amount))) * 100).to_integral_value(ROUND_FLOOR))


def floor_seconds(hours: float) -> int:
    """A limit (deadline) in hours to whole seconds, rounded down."""
    return int((Decimal(repr(float(hours))) * 3600).to_integral_value(ROUND_FLOOR))


def ceil_seconds(hours: float) -> int:
    """Hours to whole seconds, rounded up (the model's float hours, tolerant to float noise below 1e-6 s)."""
    return _ceil_tolerant(Fraction(hours) * 3600)


def _increments(hours: Fraction, increment_s: int) -> int:
    """Billing increments of ``increment_s`` seconds that cover ``hours`` (a started increment is paid)."""
    return _ceil_tolerant(max(hours, Fraction(0)) * 3600 / increment_s)


def exact_bill(hours: float, offer: Offer, terms: frozenset[Term] | None = None) -> ExactBill:
    """Cheapest per-card bill covering ``hours``, by a plain loop over months, weeks and days (exact fractions).

    For each count of months m and weeks w (never more than one unit beyond the hours) and days d, the rest
    max(0, H - 720 m - 168 w - 24 d) is billed in the offer's hourly increments; the cheapest total wins, fewer
    long units first among equal totals. A term outside ``terms`` (when given) or not priced is never used; with
    no way to cover the hours the bill has per_card None.
    """
    h = Fraction(hours)
    allowed = {t for t in Term if (terms is None or t in terms) and t in offer.prices}
    price = {t: exact(offer.prices[t].amount) for t in allowed}
    inc = offer.hour_increment_s
    inc_name = {3600: "hour", 60: "minute", 1: "second"}[inc] if inc in (3600, 60, 1) else "second"
    inc_count_scale = 1 if inc in (3600, 60, 1) else inc

    def count_range(term: Term, rest: Fraction) -> range:
        if term not in allowed:
            return range(1)
        return range(math.ceil(max(rest, Fraction(0)) / TERM_HOURS[term]) + 1)

    best: tuple[Fraction, int, dict[str, int]] | None = None
    for m in count_range(Term.month, h):
        for w in count_range(Term.week, h - 720 * m):
            for d in count_range(Term.day, h - 720 * m - 168 * w):
                rest = h - 720 * m - 168 * w - 24 * d
                n = _increments(rest, inc)
                if n and Term.hour not in allowed:
                    continue
                total = m * price.get(Term.month, 0) + w * price.get(Term.week, 0) + d * price.get(Term.day, 0)
                total += n * price[Term.hour] * inc / 3600 if n else 0
                units = {k: v for k, v in (("month", m), ("week", w), ("day", d)) if v}
                if n:
                    units[inc_name] = n * inc_count_scale
                key = (total, m + w + d)
                if best is None or key < best[:2]:
                    best = (total, m + w + d, units)
    if best is None:
        return ExactBill(None, {})
    return ExactBill(best[0], best[2])


def priced(units: dict[str, int], offer: Offer) -> Fraction | None:
    """Exact per-card price of the billed units in the offer currency; None when a unit's term is not priced."""
    total = Fraction(0)
    for unit, n in units.items():
        term = _term_of(unit)
        if term not in offer.prices:
            return None
        total += n * exact(offer.prices[term].amount) * (Fraction(_INCREMENT_S[unit], 3600) if unit in _INCREMENT_S
                                                          else 1)  # fmt: skip
    return total


# ------------------------------------------------------------------------------------------------ rules


def _layout_rules(sc: Scenario, arch: ModelArch, p: Plan, gpu: Gpu, offer: Offer) -> list[str]:
    out = []
    if arch.heads % p.tp or arch.kv_heads % p.tp:
        out.append(f"tp={p.tp} must divide heads ({arch.heads}) and kv_heads ({arch.kv_heads})")
    domain = min(gpu.nvlink_domain, offer.cards_per_node) if offer.nvlink and gpu.nvlink_gb_per_s > 0 else 1
    if p.tp > domain:
        out.append(f"tp={p.tp} exceeds the NVLink domain of {offer.id} ({domain} cards)")
    if p.cards != p.tp * p.pp * p.dp:
        out.append(f"cards={p.cards} != tp x pp x dp = {p.tp * p.pp * p.dp}")
    if p.micro_batch * p.grad_accum * p.dp != sc.global_batch:
        out.append(f"micro_batch x grad_accum x dp = {p.micro_batch * p.grad_accum * p.dp} "
                   f"!= global_batch {sc.global_batch}")  # fmt: skip
    if offer.sold_as == "instance" and p.cards % offer.unit_cards:
        out.append(f"cards={p.cards} is not a whole number of {offer.id}'s {offer.unit_cards}-card instances "
                   "(it rents whole instances only)")  # fmt: skip
    nodes = -(-p.cards // offer.cards_per_node)
    if p.nodes != nodes:
        out.append(f"nodes={p.nodes} but {p.cards} cards on {offer.cards_per_node}-card nodes need {nodes}")
    if p.nodes > offer.max_nodes:
        out.append(f"nodes={p.nodes} exceeds the offer's max_nodes {offer.max_nodes}")
    if (p.zero_stage, p.offload) not in _VALID_ZERO_OFFLOAD:
        out.append(f"offload={p.offload.value} is not available at ZeRO stage {p.zero_stage}")
    if not gpu.peak_tflops(p.precision):
        out.append(f"{gpu.id} has no native {p.precision.value}")
    wanted = sc.plan.optimizer or sc.training.optimizer
    if p.optimizer != wanted:
        out.append(f"optimizer={p.optimizer.value} but the scenario trains with {wanted.value}")
    return out


def _pin_rules(sc: Scenario, catalog: Catalog, p: Plan) -> list[str]:
    out = []
    for key, pinned in sc.plan.model_dump(exclude_none=True).items():
        if key in ("billed_units", "term"):
            continue
        if key == "gpu":
            pinned = catalog.gpu_id(pinned)
        got = getattr(p, key)
        if str(got).lower() != str(pinned).lower():
            out.append(f"plan pins {key}={pinned} but the plan has {got}")
    if sc.plan.term is not None:
        used = {_term_of(u) for u in p.billed_units}
        if used - {sc.plan.term}:
            out.append(f"plan pins term={sc.plan.term.value} but the bill uses {p.term}")
    return out


def _allow_rules(sc: Scenario, catalog: Catalog, p: Plan, offer: Offer) -> list[str]:
    allow, out = sc.allow, []
    if allow.gpus is not None and p.gpu not in {catalog.gpu_id(g) for g in allow.gpus}:
        out.append(f"gpu {p.gpu} is not in allow.gpus {allow.gpus}")
    if allow.providers is not None and offer.provider.lower() not in {v.lower() for v in allow.providers}:
        out.append(f"provider {offer.provider} is not in allow.providers {allow.providers}")
    if allow.max_cards is not None and p.cards > allow.max_cards:
        out.append(f"cards={p.cards} exceeds allow.max_cards {allow.max_cards}")
    if allow.max_nodes is not None and p.nodes > allow.max_nodes:
        out.append(f"nodes={p.nodes} exceeds allow.max_nodes {allow.max_nodes}")
    return out


def _term_of(unit: str) -> Term:
    """The term a billed unit belongs to: minutes and seconds are increments of the hourly term."""
    return Term.hour if unit in _INCREMENT_S else Term(unit)


def _bill_rules(est: Estimate, sc: Scenario, catalog: Catalog, offer: Offer, r: Recomputed) -> list[str]:
    p, c = est.plan, est.cost
    assert p is not None and c is not None
    out = []
    covered_h = sum(n * (Fraction(_INCREMENT_S[u], 3600) if u in _INCREMENT_S else TERM_HOURS[Term(u)])
                    for u, n in p.billed_units.items())  # fmt: skip
    if (Fraction(r.time["hours"]) - covered_h) * 3600 > Fraction(1, 10**6):  # a microsecond of float noise
        out.append(f"billed units {p.billed_units} cover {float(covered_h):g} h, less than the job's "
                   f"{r.time['hours']:.4f} h")  # fmt: skip
    per_card = priced(p.billed_units, offer)
    if per_card is None:
        out.append(f"billed units {p.billed_units} use a term {offer.id} does not price")
        return out
    plan_total = per_card * p.cards
    if abs(plan_total - exact(c.total)) > Fraction(1, 200):
        out.append(f"cost {c.total} != billed units x prices x cards = {float(plan_total):.4f}")
    if r.bill.per_card is None:
        out.append(f"no term of {offer.id} allowed by the scenario covers {r.time['hours']:.4f} h")
    elif per_card - r.bill.per_card > Fraction(1, 10**6):
        out.append(f"bill {p.term} {p.billed_units} ({float(per_card):.4f} per card) is not the cheapest cover "
                   f"{r.bill.units} ({float(r.bill.per_card):.4f} per card)")  # fmt: skip
    if c.currency != offer.currency:
        out.append(f"cost currency {c.currency} is not the offer's {offer.currency}")
    if sc.budget is not None:
        rate = catalog.rate(offer.currency, sc.budget.currency)
        if rate is None:
            out.append(f"no exchange rate {offer.currency}->{sc.budget.currency} to check the budget")
        elif ceil_cents(plan_total * exact(rate.rate)) > floor_cents(sc.budget.amount):
            total = float(plan_total * exact(rate.rate))
            out.append(f"cost {total:,.4f} {sc.budget.currency} exceeds the budget {sc.budget.amount:,.2f}")
    return out


def _host_ram_rule(sc: Scenario, r: Recomputed, offer: Offer | None, hosts_cal: dict | None, p: Plan | None) -> str:
    """The node's host RAM against the plan's need, re-derived per node (empty when it fits or cannot be checked).

    need = offloaded states + host_ram_per_rank_gib x ranks in a node (ranks = min(cards, cards_per_node));
    RAM = the offer's ram_gib, or ram_gib_per_card x ranks; unstated: allow.max_host_memory_gib + the ranks' RAM,
    else the calibration's default GiB per card x ranks.
    """
    if offer is None or p is None or not hosts_cal:
        return ""
    ranks = min(p.cards, offer.cards_per_node)
    per_rank = Fraction(str(hosts_cal["host_ram_per_rank_gib"])) * 2**30
    need = r.memory["cpu_offload"] + per_rank * ranks
    host, where = offer.host, "the offer's"
    if host is not None and host.ram_gib is not None:
        have = Fraction(str(host.ram_gib)) * 2**30
    elif host is not None and host.ram_gib_per_card is not None:
        have = Fraction(str(host.ram_gib_per_card)) * 2**30 * ranks
    elif sc.allow.max_host_memory_gib is not None:
        have, where = Fraction(str(sc.allow.max_host_memory_gib)) * 2**30 + per_rank * ranks, "the scenario's"
    else:
        rule = hosts.default_ram_rule(offer, hosts_cal)
        if rule is None:
            return ""
        have, where = Fraction(str(rule[0])) * 2**30 * ranks, "the default rule's"
    if need <= have:
        return ""
    return (f"host RAM: needs {float(need) / 2**30:,.1f} GiB per node, more than {where} "
            f"{float(have) / 2**30:,.1f} GiB on {offer.id}")  # fmt: skip


def _host_verdict(reported: bool | None, short: str) -> list[str]:
    """The host RAM rule's finding (``short``, empty when the node holds the need) against memory.host_ram_fits."""
    if short:
        return [short] + ([f"memory.host_ram_fits = {reported} but recomputed False"] if reported is not False else [])
    return ["memory.host_ram_fits = False but the node's host RAM holds the plan's need"] if reported is False else []


def _risk_ratio(sc: Scenario, catalog: Catalog, gpu: Gpu, plan: Plan, experts: int = 1) -> float:
    """The memory ratio the plan must fit at: its memory band at the scenario's ``risk``.

    uncertainty.memory_band: calibration.yaml ``accuracy.memory``, widened for the plan's cell (with a user's
    overlay, its group's band); 1 without that percentile.
    """
    t = sc.training
    accuracy = memory_accuracy(catalog.calibration, cov.engine(t.framework.value, t.sharding.value), sc.method.value)
    cell = memory_cell(gpu.arch, t.framework.value, t.sharding.value, cov.method_key(sc.method.value, experts),
                       plan.zero_stage, plan.offload.value, plan.nodes)  # fmt: skip
    try:
        return memory_risk_ratio(accuracy, sc.risk.value, cell)
    except KeyError:
        return 1.0


def _model_rules(est: Estimate, sc: Scenario, r: Recomputed, offer: Offer | None = None,
                 cal: dict | None = None, ratio: float = 1.0) -> list[str]:  # fmt: skip
    m, t = est.memory, est.time
    assert m is not None and t is not None
    out = [f"memory.{k} = {getattr(m, k)} but recomputed {r.memory[k]}" for k in MEMORY_KEYS
           if getattr(m, k) != r.memory[k]]  # fmt: skip
    if m.cpu_offload != r.memory["cpu_offload"]:
        out.append(f"memory.cpu_offload = {m.cpu_offload} but recomputed {r.memory['cpu_offload']}")
    if m.capacity != r.capacity_bytes:
        out.append(f"memory.capacity = {m.capacity} but the GPU has {r.capacity_bytes}")
    fits = r.memory["total"] * ratio <= r.capacity_bytes * (1.0 - sc.headroom) and math.isfinite(r.time["hours"])
    host_gib = sc.allow.max_host_memory_gib
    capped = ""
    if host_gib is not None and r.memory["cpu_offload"] > host_gib * 2**30:
        capped = (f"host RAM {r.memory['cpu_offload'] / 2**30:,.0f} GiB exceeds allow.max_host_memory_gib "
                  f"{host_gib:g}")  # fmt: skip
    if m.fits != fits:  # the card alone; the node's host RAM is host_ram_fits
        out.append(f"memory.fits = {m.fits} but recomputed {fits}")
    out += _host_verdict(m.host_ram_fits, "; ".join(x for x in (capped, _host_ram_rule(sc, r, offer, cal, est.plan))
                                                    if x))  # fmt: skip
    if not fits:
        out.append(f"does not fit: {r.memory['total']:,} bytes x {ratio:g} (risk {sc.risk.value}) > "
                   f"{1 - sc.headroom:.0%} of {r.capacity_bytes:,}")
    for key, decimals in TIME_DECIMALS.items():
        got, want = getattr(t, key), r.time[key]
        if not math.isclose(got, want, rel_tol=1e-9, abs_tol=0.6 * 10**-decimals):
            out.append(f"time.{key} = {got} but recomputed {want}")
    if t.steps != r.steps:
        out.append(f"time.steps = {t.steps} but recomputed {r.steps}")
    chunks = int(r.time["pipeline_chunks"])
    if est.plan is not None and est.plan.virtual_pipeline != chunks:
        out.append(f"plan.virtual_pipeline = {est.plan.virtual_pipeline} but the engine launches {chunks}")
    if est.plan is not None and est.plan.virtual_pipeline > 1 and est.plan.grad_accum % max(est.plan.pp, 1):
        # Megatron-Core's interleaved schedule groups micro-batches pp at a time and raises otherwise
        out.append(f"plan.virtual_pipeline = {est.plan.virtual_pipeline} with grad_accum {est.plan.grad_accum} not a "
                   f"multiple of pp {est.plan.pp}: Megatron's interleaved schedule refuses it")
    if not math.isfinite(r.time["hours"]):
        return [*out, f"time.hours is not finite ({r.time['hours']}): the layout cannot run"]
    deadline_h = r.time["hours"] + r.time.get("deadline_margin_hours", 0.0)  # spot: pessimistic end of the band
    if sc.deadline_hours is not None and ceil_seconds(deadline_h) > floor_seconds(sc.deadline_hours):
        out.append(f"takes {deadline_h:.2f} h, over the deadline of {sc.deadline_hours:g} h")
    return out


def check_plan(scenario: Scenario, catalog: Catalog, estimate: Estimate, arch: ModelArch | None = None) -> list[str]:
    """Every rule the estimate's plan breaks, one message each; [] when the plan is valid (or there is none).

    Checks: the offer exists and rents the plan's GPU; layout (tp divides heads and kv_heads, tp within the
    NVLink domain, cards = tp x pp x dp, micro_batch x grad_accum x dp = global_batch, nodes, ZeRO/offload,
    precision, optimizer); pins; allow-lists; memory by component and fit; time; bill (covers the hours, priced
    from the catalog, the cheapest cover); budget and deadline. ``arch`` overrides the scenario's model (needed
    for ``hf_config`` models given by a path relative to the scenario file).
    """
    p = estimate.plan
    if p is None:
        return [] if estimate.status.value == "infeasible" else [f"status {estimate.status.value} without a plan"]
    if estimate.memory is None or estimate.time is None or estimate.cost is None:
        return ["plan without memory, time or cost"]
    offers = {o.id: o for o in catalog.offers}
    offer = offers.get(p.offer)
    if offer is None:
        return [f"offer {p.offer} is not in the catalog"]
    if offer.gpu != p.gpu:
        return [f"offer {p.offer} rents {offer.gpu}, not {p.gpu}"]
    gpu = catalog.gpus[offer.gpu]
    arch = arch or resolve_model(scenario, catalog)
    rules: list[Callable[[], list[str]]] = [
        lambda: _layout_rules(scenario, arch, p, gpu, offer),
        lambda: _pin_rules(scenario, catalog, p),
        lambda: _allow_rules(scenario, catalog, p, offer),
    ]
    out = [msg for rule in rules for msg in rule()]
    r = recompute(scenario, catalog, arch, p, gpu, offer)
    out += _model_rules(estimate, scenario, r, offer, catalog.calibration.get("hosts"),
                        _risk_ratio(scenario, catalog, gpu, p, arch.experts))
    billed = hosts.spot_offer(offer) if p.capacity == "spot" and offer.spot is not None else offer
    return out + _bill_rules(estimate, scenario, catalog, billed, r) if math.isfinite(r.time["hours"]) else out


# ------------------------------------------------------------------------------------------------ catalog files


@dataclass(frozen=True)
class CatalogCounts:
    """What ``ftopt catalog validate`` found valid."""

    files: int
    gpus: int
    offers: int
    models: int
    fx_rates: int
    notes: tuple[str, ...] = ()  # valid, but worth knowing (offers no budget in another currency can use)


def _kind(path: Path) -> str:
    doc = read_yaml(path)
    keys = set(doc) if isinstance(doc, dict) else set()
    for kind in ("gpus", "offers", "models", "rates"):
        if kind in keys:
            return kind
    raise InputError(str(path), "", "not a catalog file: expected a top-level key gpus, offers, models or rates")


def _named(path: str | Path) -> Path:
    """A file to validate: an existing path, else a built-in offers name (``us``) as ``catalog:`` reads it."""
    p = Path(path)
    if p.exists() or p.suffix or len(p.parts) > 1:
        return p
    return catalog_mod.resolve_offer_file(path, str(path), "catalog validate")


def validate_catalog_files(paths: list[str | Path] | None = None,
                           root: Path = catalog_mod.CATALOG_DIR) -> CatalogCounts:  # fmt: skip
    """Validate catalog files with the loader's pydantic models; the built-in catalog when ``paths`` is empty.

    Offers are checked against the GPUs of the gpus file given alongside them (else the built-in gpus.yaml):
    known GPU ids, the file-level currency, offer ids unique across the files. Raises InputError (one line) at the
    first problem. An offer id a built-in offers file (other than those given) also uses is valid, since ``--catalog``
    and ``catalog:`` replace the built-ins (a SkyPilot re-import, an edited copy of us.yaml), but ``--add-catalog``
    loads the file beside them and refuses it: a note says so (:func:`_builtin_id_clashes`).
    """
    files = [_named(p) for p in paths] if paths else [root / "gpus.yaml", root / "models.yaml", root / "fx.yaml",
                                                      *catalog_mod.default_offer_files()]  # fmt: skip
    by_kind: dict[str, list[Path]] = {"gpus": [], "offers": [], "models": [], "rates": []}
    for f in files:
        by_kind[_kind(f)].append(f)
    gpus: dict[str, Gpu] = {}
    for f in by_kind["gpus"]:
        gpus.update(catalog_mod._load_gpus(f))
    models = sum(len(validate(ModelFile, read_yaml(f), str(f)).models) for f in by_kind["models"])
    rates = sum(len(validate(FxFile, read_yaml(f), str(f)).rates) for f in by_kind["rates"])
    loaded: list[Offer] = []
    if by_kind["offers"]:
        known = gpus or catalog_mod._load_gpus(root / "gpus.yaml")
        loaded = catalog_mod._load_offers(by_kind["offers"], catalog_mod._gpu_name_index(known), known)
    clashes = _builtin_id_clashes(loaded, by_kind["offers"]) if paths else ()
    fx_files = by_kind["rates"] or [root / "fx.yaml"]
    label = ", ".join(map(str, by_kind["rates"])) or "the built-in catalogs/fx.yaml"
    return CatalogCounts(len(files), len(gpus), len(loaded), models, rates,
                         clashes + _currencies_without_rate(loaded, fx_files, label))  # fmt: skip


def _builtin_id_clashes(offers: list[Offer], given: list[Path], shown: int = 3) -> tuple[str, ...]:
    """A note when offer ids of ``given`` are also built-in offers' (files other than ``given``).

    Fine with ``--catalog`` / ``catalog:``, refused by ``--add-catalog`` (offer ids are unique across the files
    loaded).
    """
    taken = catalog_mod.builtin_offer_ids(given)
    both = [o.id for o in offers if o.id in taken]
    if not both:
        return ()
    names = ", ".join(f"'{i}' ({Path(taken[i]).name})" for i in both[:shown]) + (
        f" and {len(both) - shown} more" if len(both) > shown else "")  # fmt: skip
    return (f"offer ids also used by built-in offers: {names}: use this file with --catalog or catalog: (which "
            "replace the built-in offers); --add-catalog, which loads it beside them, refuses a duplicate id",)


def _currencies_without_rate(offers: list[Offer], fx_files: list[Path], label: str) -> tuple[str, ...]:
    """A note per offer currency that no exchange rate names: only a budget in that currency can use its offers."""
    named = {c for f in fx_files if f.exists() for r in validate(FxFile, read_yaml(f), str(f)).rates
             for c in (r.base, r.quote)}  # fmt: skip
    alone = sorted({o.currency for o in offers} - named)
    return tuple(f"offers priced in {c} have no exchange rate in {label}: a scenario budget in another currency is "
                 "refused" for c in alone)  # fmt: skip
