"""Re-check a plan from scratch, beside the solver: memory, time, cost and every constraint, in plain Python.

:func:`check_plan` takes a scenario, a catalog and an :class:`~optimizer.schema_plan.Estimate` (what ``solve`` or
``estimate`` returned) and lists every rule the plan breaks, one message per violation; an empty list means the
plan is valid. It does not use the enumeration, pruning, billing or solver it checks: it rebuilds the job and the
one-row configuration itself, evaluates the pure models with arrays of length 1 (the hardware row comes from
space.hardware, the one place where link bandwidths are derated), re-bills the hours and re-derives each
constraint of DESIGN.md sections 2 and 5 (cpsat-primer's validation.py, one function per rule).

:func:`validate_catalog_files` runs the catalog loader's pydantic models on gpus, offers, models and fx files
(``ftopt catalog validate``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from optimizer import catalog as catalog_mod
from optimizer import hosts
from optimizer.catalog import Catalog, resolve_model
from optimizer.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Hardware, Job, column
from optimizer.errors import InputError
from optimizer.models import cost, memory, timing
from optimizer.schema import TERM_HOURS, ModelArch, Offload, Precision, Scenario, Term
from optimizer.schema_catalog import FxFile, Gpu, ModelFile, Offer
from optimizer.schema_plan import Estimate, Plan
from optimizer.space import hardware as space_hardware
from optimizer.yamlio import read_yaml, validate

MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "total")
TIME_DECIMALS = {"step_seconds": 6, "tokens_per_second": 3, "mfu": 6, "hours": 6}  # rounding of the JSON report
_VALID_ZERO_OFFLOAD = {(0, Offload.none), (1, Offload.none), (1, Offload.optimizer), (2, Offload.none),
                       (2, Offload.optimizer), (3, Offload.none), (3, Offload.optimizer), (3, Offload.all)}  # fmt: skip
_INCREMENT_S = {"hour": 3600, "minute": 60, "second": 1}


@dataclass(frozen=True)
class Recomputed:
    """What the validator derived for one plan: memory by component (bytes), time (floats), bill per card."""

    memory: dict[str, int]
    capacity_bytes: int
    time: dict[str, float]
    steps: int
    bill: cost.Bill


# ------------------------------------------------------------------------------------------------ rebuilding


def job_of(scenario: Scenario, arch: ModelArch) -> Job:
    """The scenario's fixed quantities; base weights 16-bit for full and LoRA, 4-bit for QLoRA unless given."""
    t = scenario.training
    return Job(arch=arch, method=scenario.method, lora=scenario.lora_spec, framework=t.framework,
               sharding=t.sharding, attention=t.attention, loss=t.loss, base_bits=scenario.frozen_base_bits,
               seq_len=scenario.seq_len, global_batch=scenario.global_batch,
               total_tokens=scenario.data.total_tokens, checkpoint_every_hours=t.checkpoint_every_hours,
               compile=t.compile, activation_offload=t.activation_offload,
               optimizer_in_backward=t.optimizer_in_backward)  # fmt: skip


def config_of(plan: Plan) -> Configs:
    """The plan as a one-row configuration (closed choices as enum indices)."""
    return Configs(
        tp=column(plan.tp), pp=column(plan.pp), dp=column(plan.dp), zero_stage=column(plan.zero_stage),
        offload=column(OFFLOAD.index(plan.offload)), micro_batch=column(plan.micro_batch),
        grad_accum=column(plan.grad_accum), checkpointing=column(CHECKPOINTING.index(plan.checkpointing)),
        precision=column(PRECISION.index(plan.precision)), optimizer=column(OPTIMIZER.index(plan.optimizer)),
    )  # fmt: skip


def hardware_of(gpu: Gpu, offer: Offer, cards: int, nodes: int, precision: Precision,
                consts: dict[str, Any]) -> Hardware:  # fmt: skip
    """One row of hardware (bytes, FLOP/s, link bytes/s) from the catalog entries.

    Delegates to :func:`optimizer.space.hardware` on a one-offer list: how links are derated and shared is part of
    the time model (kept in one place), not a constraint this module re-derives.
    """
    return space_hardware([gpu], [offer], column(0), column(cards), column(nodes),
                          column(PRECISION.index(precision)), consts)  # fmt: skip


def recompute(scenario: Scenario, catalog: Catalog, arch: ModelArch, plan: Plan, gpu: Gpu, offer: Offer) -> Recomputed:
    """Memory, time and bill of the plan, evaluated on one row with the pure models."""
    job = job_of(scenario, arch)
    cfg = config_of(plan)
    hw = hardware_of(gpu, offer, plan.cards, plan.nodes, plan.precision, catalog.calibration["timing"])
    mem = {k: int(v[0]) for k, v in memory.breakdown(job, cfg, catalog.calibration["memory"]).items()}
    cal = catalog.calibration
    one, nodes = column(0), column(plan.nodes)
    with np.errstate(divide="ignore", invalid="ignore"):  # wall clock with the offer's overheads (hosts.py)
        arrays = hosts.with_overheads(job, cfg, timing.job_time(job, cfg, hw, cal["timing"]), [offer], one, nodes, cal)
        if plan.capacity == "spot" and hosts.spot_ready(offer) and cal.get("hosts"):
            band = offer.spot.interruptions  # type: ignore[union-attr]
            arrays = hosts.spot_time(arrays, nodes, column(band.mtbi_hours_low, float),  # type: ignore[union-attr]
                                     column(band.mtbi_hours_high, float),  # type: ignore[union-attr]
                                     hosts.disk_write_bytes_per_s([offer], one, cal["hosts"]))  # fmt: skip
    t = {k: float(v[0]) for k, v in arrays.items()}
    hours = t["hours"]
    billed = hosts.spot_offer(offer) if plan.capacity == "spot" and offer.spot is not None else offer
    bill = cost.bill(hours, billed, scenario.billing_terms) if math.isfinite(hours) else cost.Bill(math.inf, {})
    return Recomputed(mem, hosts.capacity_bytes(gpu, offer), t, job.steps, bill)


def cents(amount: float) -> int:
    """Money to whole cents, rounded up (as the solver compares costs)."""
    return math.ceil(round(amount * 100.0, 6))


def seconds(hours: float) -> int:
    """Hours to whole seconds, rounded up (as the solver compares times)."""
    return math.ceil(round(hours * 3600.0, 6))


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
    covered_h = sum(n * (_INCREMENT_S[u] / 3600 if u in _INCREMENT_S else TERM_HOURS[Term(u)])
                    for u, n in p.billed_units.items())  # fmt: skip
    if covered_h + 1e-9 < r.time["hours"]:
        out.append(f"billed units {p.billed_units} cover {covered_h:g} h, less than the job's {r.time['hours']:.4f} h")
    priced = sum(n * offer.prices[_term_of(u)].amount * (_INCREMENT_S[u] / 3600 if u in _INCREMENT_S else 1)
                 for u, n in p.billed_units.items() if _term_of(u) in offer.prices) * p.cards  # fmt: skip
    if any(_term_of(u) not in offer.prices for u in p.billed_units):
        out.append(f"billed units {p.billed_units} use a term {offer.id} does not price")
    elif abs(priced - c.total) > 0.005 + 1e-9 * priced:
        out.append(f"cost {c.total} != billed units x prices x cards = {priced:.2f}")
    if p.billed_units != r.bill.units or p.term != r.bill.term:
        out.append(f"bill {p.term} {p.billed_units} is not the cheapest cover {r.bill.term} {r.bill.units}")
    expected = round(r.bill.per_card * p.cards, 2)
    if abs(expected - c.total) > 0.005 + 1e-9 * expected:
        out.append(f"cost {c.total} {c.currency} differs from the recomputed {expected:.2f}")
    if c.currency != offer.currency:
        out.append(f"cost currency {c.currency} is not the offer's {offer.currency}")
    if sc.budget is not None:
        rate = catalog.rate(offer.currency, sc.budget.currency)
        if rate is None:
            out.append(f"no exchange rate {offer.currency}->{sc.budget.currency} to check the budget")
        elif cents(r.bill.per_card * p.cards * rate.rate) > math.floor(round(sc.budget.amount * 100.0, 6)):
            total = r.bill.per_card * p.cards * rate.rate
            out.append(f"cost {total:,.2f} {sc.budget.currency} exceeds the budget {sc.budget.amount:,.2f}")
    return out


def _model_rules(est: Estimate, sc: Scenario, r: Recomputed) -> list[str]:
    m, t = est.memory, est.time
    assert m is not None and t is not None
    out = [f"memory.{k} = {getattr(m, k)} but recomputed {r.memory[k]}" for k in MEMORY_KEYS
           if getattr(m, k) != r.memory[k]]  # fmt: skip
    if m.cpu_offload != r.memory["cpu_offload"]:
        out.append(f"memory.cpu_offload = {m.cpu_offload} but recomputed {r.memory['cpu_offload']}")
    if m.capacity != r.capacity_bytes:
        out.append(f"memory.capacity = {m.capacity} but the GPU has {r.capacity_bytes}")
    fits = r.memory["total"] <= r.capacity_bytes * (1.0 - sc.headroom) and math.isfinite(r.time["hours"])
    host_gib = sc.allow.max_host_memory_gib
    if host_gib is not None and r.memory["cpu_offload"] > host_gib * 2**30:
        fits = False
        need_gib = r.memory["cpu_offload"] / 2**30
        out.append(f"host RAM {need_gib:,.0f} GiB exceeds allow.max_host_memory_gib {host_gib:g}")
    if m.fits != fits:
        out.append(f"memory.fits = {m.fits} but recomputed {fits}")
    if not fits:
        out.append(f"does not fit: {r.memory['total']:,} bytes > {1 - sc.headroom:.0%} of {r.capacity_bytes:,}")
    for key, decimals in TIME_DECIMALS.items():
        got, want = getattr(t, key), r.time[key]
        if not math.isclose(got, want, rel_tol=1e-9, abs_tol=0.6 * 10**-decimals):
            out.append(f"time.{key} = {got} but recomputed {want}")
    if t.steps != r.steps:
        out.append(f"time.steps = {t.steps} but recomputed {r.steps}")
    if not math.isfinite(r.time["hours"]):
        return [*out, f"time.hours is not finite ({r.time['hours']}): the layout cannot run"]
    deadline_h = r.time["hours"] + r.time.get("deadline_margin_hours", 0.0)  # spot: pessimistic end of the band
    if sc.deadline_hours is not None and seconds(deadline_h) > math.floor(round(sc.deadline_hours * 3600, 6)):
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
    out += _model_rules(estimate, scenario, r)
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


def _kind(path: Path) -> str:
    doc = read_yaml(path)
    keys = set(doc) if isinstance(doc, dict) else set()
    for kind in ("gpus", "offers", "models", "rates"):
        if kind in keys:
            return kind
    raise InputError(str(path), "", "not a catalog file: expected a top-level key gpus, offers, models or rates")


def validate_catalog_files(paths: list[str | Path] | None = None,
                           root: Path = catalog_mod.CATALOG_DIR) -> CatalogCounts:  # fmt: skip
    """Validate catalog files with the loader's pydantic models; the built-in catalog when ``paths`` is empty.

    Offers are checked against the GPUs of the gpus file given alongside them (else the built-in gpus.yaml):
    known GPU ids, unique offer ids, the file-level currency. Raises InputError (one line) at the first problem.
    """
    files = [Path(p) for p in paths] if paths else [root / "gpus.yaml", root / "models.yaml", root / "fx.yaml",
                                                    *catalog_mod.default_offer_files()]  # fmt: skip
    by_kind: dict[str, list[Path]] = {"gpus": [], "offers": [], "models": [], "rates": []}
    for f in files:
        by_kind[_kind(f)].append(f)
    gpus: dict[str, Gpu] = {}
    for f in by_kind["gpus"]:
        gpus.update(catalog_mod._load_gpus(f))
    models = sum(len(validate(ModelFile, read_yaml(f), str(f)).models) for f in by_kind["models"])
    rates = sum(len(validate(FxFile, read_yaml(f), str(f)).rates) for f in by_kind["rates"])
    offers = 0
    if by_kind["offers"]:
        known = gpus or catalog_mod._load_gpus(root / "gpus.yaml")
        offers = len(catalog_mod._load_offers(by_kind["offers"], catalog_mod._gpu_name_index(known), known))
    return CatalogCounts(len(files), len(gpus), offers, models, rates)
