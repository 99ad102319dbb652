"""The CP-SAT solver agrees with an exhaustive oracle on random small instances (docs/design.md section 6).

The oracle walks the same discrete space with plain Python loops (offer, cards, tp, ZeRO/offload, micro-batch,
checkpointing), evaluates each configuration with the pure models, bills it with the validator's plain loop over
term counts in exact fractions (validator.exact_bill, not cost.bill), rounds money and time up with exact decimal
ceilings (validator.ceil_cents/ceil_seconds, not solver.cents/seconds), applies the fit, the allow-lists, the
budget and the deadline, and takes the lexicographic minimum of (cents, seconds) or (seconds, cents). The solver
(space.build + solver.solve) must reach the same optimal value, or agree that nothing is feasible; every plan it
returns must also pass the validator. The models themselves are checked against hand-worked numbers in
test_golden.py, so that a model bug cannot hide behind an oracle that calls the same model.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import yaml

from optimizer.inputs.catalog import Catalog, load_catalog
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Checkpointing, ModelArch, Offload, Precision, Scenario, Status
from optimizer.inputs.schema_catalog import Offer
from optimizer.launch.torchtune_cfg import qlora_refusal
from optimizer.models import hosts, memory
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, column
from optimizer.solve import space
from optimizer.solve.planner import prepare, solve_scenario, to_estimate
from optimizer.solve.solver import cents, limits_from, seconds, solve
from optimizer.solve.validator import (
    ceil_cents,
    ceil_seconds,
    check_plan,
    exact,
    exact_bill,
    floor_cents,
    floor_seconds,
    hardware_of,
    job_of,
)

from .conftest import scenario_doc

N_INSTANCES = 200
TP_CHOICES = (1, 2, 4, 8)  # the space's tensor-parallel degrees
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
ZERO_OFFLOAD = [(0, Offload.none), (1, Offload.none), (1, Offload.optimizer), (2, Offload.none),
                (2, Offload.optimizer), (3, Offload.none), (3, Offload.optimizer), (3, Offload.all)]  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One evaluated configuration of the oracle: what the constraints and the objective look at."""

    offer: Offer
    cards: int
    nodes: int
    cents: int
    seconds: int


@dataclass
class Instance:
    """A random scenario over a small catalog, with what the oracle and the solver concluded."""

    scenario: Scenario
    catalog: Catalog
    arch: ModelArch
    oracle: tuple[int, int] | None = None
    unlimited: tuple[int, int] | None = None  # the oracle's optimum without budget and deadline
    solver: tuple[int, int] | None = None
    violations: list[str] = dataclasses.field(default_factory=list)


@functools.cache
def _catalog() -> Catalog:
    return load_catalog()


# ------------------------------------------------------------------------------------------------ random instances


def _arch(rng: random.Random, catalog: Catalog) -> ModelArch | str:
    if rng.random() < 0.4:
        return rng.choice(sorted(m.name for m in catalog.models.values()))
    heads = rng.choice([4, 8, 16, 32])
    return ModelArch(name="tiny", layers=rng.randint(2, 24), hidden=heads * rng.choice([32, 64, 128]),
                     intermediate=rng.choice([512, 1024, 4096, 11008]), heads=heads,
                     kv_heads=rng.choice([k for k in (1, 2, 4, 8, 16, 32) if heads % k == 0]),
                     vocab=rng.choice([1000, 32000, 128256]), tied_embeddings=rng.random() < 0.3)  # fmt: skip


def _pins(rng: random.Random) -> dict[str, Any]:
    pins: dict[str, Any] = {}
    if rng.random() < 0.5:
        pins["checkpointing"] = rng.choice(list(Checkpointing)).value
    if rng.random() < 0.2:
        pins["zero_stage"] = rng.randint(0, 3)
    elif rng.random() < 0.1:
        pins["offload"] = rng.choice(list(Offload)).value
    if rng.random() < 0.15:
        pins["micro_batch"] = rng.choice([1, 2, 4])
    if rng.random() < 0.1:
        pins["tp"] = rng.choice([1, 2])
    return pins


def _small_catalog(rng: random.Random, catalog: Catalog) -> Catalog:
    """2-4 offers, at most 2 nodes each (keeps the exhaustive loop small)."""
    chosen = rng.sample(catalog.offers, rng.randint(2, 4))
    offers = [o.model_copy(update={"max_nodes": min(o.max_nodes, 2)}) for o in chosen]
    return dataclasses.replace(catalog, offers=offers)


def _allow(rng: random.Random, cat: Catalog) -> dict[str, Any]:
    allow: dict[str, Any] = {}
    gpus = sorted({o.gpu for o in cat.offers})
    if rng.random() < 0.3:
        allow["gpus"] = rng.sample(gpus, rng.randint(1, len(gpus)))
    if rng.random() < 0.1:
        allow["providers"] = [rng.choice(cat.offers).provider]
    if rng.random() < 0.2:
        allow["max_cards"] = rng.choice([1, 2, 4, 8])
    if rng.random() < 0.1:
        allow["max_nodes"] = 1
    return allow


def _engine_runs(doc: dict[str, Any], frameworks: dict[str, Any]) -> None:
    """Keep the draw to what its engine runs (calibration frameworks: methods, optimizers, parallelism, offload)."""
    if doc["training"]["framework"] == "nemo":
        doc["training"]["optimizer"] = "adamw"
        doc["training"].pop("sharding")  # nemo shards by the plan's ZeRO stage and refuses a set sharding
        doc["method"] = "lora" if doc["method"] == "qlora" else doc["method"]
    elif (doc.get("plan") or {}).get("tp", 1) != 1:
        doc["plan"]["tp"] = 1
    if doc["training"]["framework"] == "torchtune" and doc["training"].get("sharding") == "deepspeed":
        doc["training"].pop("sharding")  # torchtune shards with FSDP and refuses a set deepspeed: left out instead
    pins, training = doc.get("plan") or {}, doc["training"]
    engine = f"hf_{training.get('sharding')}" if training["framework"] == "hf" else training["framework"]
    stages = frameworks.get("zero_stages", {}).get(engine)
    if stages is not None and pins.get("zero_stage") is not None and pins["zero_stage"] not in stages:
        pins["zero_stage"] = max(stages)  # a stage the engine does not have is refused
    if pins.get("cards", 1) > 1 and training["optimizer"] in frameworks.get("one_card_optimizers", {}).get(engine, []):
        training["optimizer"] = "adamw"  # and so are several cards for an optimizer it steps on one card only
    if pins.get("offload", "none") == "none":
        return
    if training["optimizer"] not in _pinned_offload_optimizers(frameworks, engine):
        training["optimizer"] = "adamw"  # a pinned offload with an optimizer that cannot step on the CPU is refused
    pairs = frameworks["offload_modes"].get(engine, {}).get("pairs")
    if pairs and pins["offload"] not in {o for _, o in pairs}:
        pins["offload"] = pairs[0][1]  # and so is an offload the engine does not run


def _pinned_offload_optimizers(frameworks: dict[str, Any], engine: str) -> list[str]:
    return frameworks.get("pinned_offload_optimizers", {}).get(engine, frameworks["offload_optimizers"][engine])


def make_instance(seed: int) -> Instance:
    """A random scenario (model, method, software, sizes, pins, allow-lists, objective) over a small catalog."""
    rng = random.Random(seed)
    catalog = _catalog()
    cat = _small_catalog(rng, catalog)
    model = _arch(rng, catalog)
    method = rng.choice(["full", "lora", "qlora"])
    doc = scenario_doc(
        name=f"oracle-{seed}", model=model.model_dump(exclude_none=True) if isinstance(model, ModelArch) else model,
        method=method, lora={"rank": rng.choice([8, 16, 64])} if method != "full" else None,
        data={"tokens": float(10 ** rng.uniform(6.0, 9.5))}, seq_len=rng.choice([256, 1024, 2048, 4096]),
        global_batch=rng.choice([1, 2, 4, 8, 16]), objective=rng.choice(["cost", "time"]),
        training={"framework": rng.choice(["hf", "hf", "torchtune", "nemo"]),
                  "sharding": rng.choice(["deepspeed", "fsdp"]), "optimizer": rng.choice(["adamw", "adamw_8bit"]),
                  "attention": rng.choice(["flash", "sdpa", "eager"])},
        plan=_pins(rng), allow=_allow(rng, cat), headroom=rng.choice([0.0, 0.05, 0.1]),
    )  # fmt: skip
    _engine_runs(doc, catalog.calibration["frameworks"])
    if rng.random() < 0.5:
        doc["budget"] = {"amount": 1.0, "currency": rng.choice(["USD", "CNY"])}  # amount drawn after the oracle
    sc = Scenario.model_validate(doc)
    if qlora_refusal(sc):  # torchtune has no QLoRA builder for this model: LoRA, as for nemo above
        sc = Scenario.model_validate({**doc, "method": "lora"})
    arch = model if isinstance(model, ModelArch) else catalog.model(model)
    return Instance(sc, cat, arch)


# ------------------------------------------------------------------------------------------------ the oracle


def _card_counts(offer: Offer) -> list[int]:
    per_node = offer.cards_per_node
    counts = {c for c in (1, 2, 4, 8, 16, 32, 64) if c <= per_node} | {per_node}
    counts |= {per_node * n for n in range(2, offer.max_nodes + 1) if n & (n - 1) == 0 or n == offer.max_nodes}
    whole = (offer.cards_per_instance or per_node) if offer.sold_as == "instance" else 1  # whole instances only
    return sorted(c for c in counts if c % whole == 0)


def _tp_limit(offer: Offer, catalog: Catalog) -> int:
    gpu = catalog.gpus[offer.gpu]
    return min(gpu.nvlink_domain, offer.cards_per_node) if offer.nvlink and gpu.nvlink_gb_per_s > 0 else 1


def _allowed(value: Any, pin: Any) -> bool:
    return pin is None or str(value) == str(pin)


def _engine_offloads(sc: Scenario, catalog: Catalog, zero: int, off: Offload, dp: int) -> bool:
    engine = sc.training.framework.value
    if engine == "hf":
        engine = f"hf_{sc.training.sharding.value}"
    frameworks = catalog.calibration["frameworks"]
    optimizer = (sc.plan.optimizer or sc.training.optimizer).value
    runs = frameworks["offload_optimizers"][engine]
    if sc.plan.offload is not None:  # a pinned offload may step more (calibration pinned_offload_optimizers)
        runs = _pinned_offload_optimizers(frameworks, engine)
    if optimizer not in runs:
        return False
    modes = frameworks["offload_modes"].get(engine)
    if modes is None:
        return True
    if [zero, off.value] not in modes["pairs"]:
        return False
    return sc.method.value != "full" or dp >= modes.get("full_min_dp", 1)


def _configs(sc: Scenario, arch: ModelArch, offer: Offer, catalog: Catalog):
    """Every (cards, nodes, tp, dp, zero, offload, micro_batch, checkpointing) of one offer, plain loops."""
    pins, gb = sc.plan, sc.global_batch
    engine = f"hf_{sc.training.sharding.value}" if sc.training.framework.value == "hf" else sc.training.framework.value
    tps = catalog.calibration["frameworks"].get("parallelism", {}).get(engine, {}).get("tp", TP_CHOICES)
    one_card = catalog.calibration["frameworks"].get("one_card_optimizers", {}).get(engine, [])
    # an optimizer the engine steps on one card only (calibration frameworks.one_card_optimizers)
    most = 1 if (sc.plan.optimizer or sc.training.optimizer).value in one_card else None
    for cards in [c for c in _card_counts(offer) if most is None or c <= most]:
        nodes = -(-cards // offer.cards_per_node)
        for tp in TP_CHOICES:
            if not _allowed(tp, pins.tp) or tp > _tp_limit(offer, catalog) or tp not in tps:
                continue  # tensor parallelism stays inside one NVLink domain, pinned or not (docs/design.md section 4)
            if arch.heads % tp or arch.kv_heads % tp or cards % tp or gb % (cards // tp):
                continue
            dp = cards // tp
            for zero, off in ZERO_OFFLOAD:
                if not (_allowed(zero, pins.zero_stage) and _allowed(off.value, pins.offload)):
                    continue
                if zero not in catalog.calibration["frameworks"].get("zero_stages", {}).get(engine, (zero,)):
                    continue  # a stage the engine does not have (calibration frameworks.zero_stages)
                engine_ok = _engine_offloads(sc, catalog, zero, off, dp)
                if off is not Offload.none and not engine_ok:
                    continue  # the engine cannot run this offload (calibration frameworks: optimizer, pair, ranks)
                for mb in MICRO_BATCHES:
                    if (gb // dp) % mb or not _allowed(mb, pins.micro_batch):
                        continue
                    levels = catalog.calibration["frameworks"]["checkpointing"][sc.training.framework.value]
                    for ck in Checkpointing:
                        if _allowed(ck.value, pins.checkpointing) and (pins.checkpointing or ck.value in levels):
                            for shard in _shard_groups(sc, catalog, engine, cards, nodes, tp, dp, zero, off):
                                yield cards, nodes, tp, dp, zero, off, mb, ck, shard


def _shard_groups(sc: Scenario, catalog: Catalog, engine: str, cards: int, nodes: int, tp: int, dp: int, zero: int,
                  off: Offload) -> list[int]:  # fmt: skip
    """ZeRO shard groups of one configuration: dp, and one node's ranks where the engine runs hybrid sharding."""
    groups = [dp]
    per_node = cards // nodes
    if (engine in catalog.calibration["frameworks"].get("hybrid_shard", []) and nodes > 1 and tp == 1 and zero == 3
            and off is Offload.none and per_node < dp):  # fmt: skip
        groups.append(per_node)
    return [g for g in groups if _allowed(g, sc.plan.shard_group)]


def _one_row(sc: Scenario, tp: int, dp: int, zero: int, off: Offload, mb: int, ck: Checkpointing,
             prec: Precision, shard: int) -> Configs:  # fmt: skip
    return Configs(tp=column(tp), pp=column(1), dp=column(dp), zero_stage=column(zero),
                   offload=column(OFFLOAD.index(off)), micro_batch=column(mb),
                   grad_accum=column(sc.global_batch // (dp * mb)), checkpointing=column(CHECKPOINTING.index(ck)),
                   precision=column(PRECISION.index(prec)),
                   optimizer=column(OPTIMIZER.index(sc.training.optimizer)), shard=column(shard))  # fmt: skip


def _stacked(rows: list[Any]) -> Any:
    """One Configs (or Hardware) of n rows from n one-row ones."""
    columns = {f.name: np.concatenate([getattr(r, f.name) for r in rows]) for f in dataclasses.fields(rows[0])}
    return type(rows[0])(**columns)


def _hours(job: Any, cfg: Configs, hw: Any, cal: dict[str, Any], offers: list[Offer], nodes: list[int]) -> np.ndarray:
    """Wall-clock hours: the step-time model plus the offers' overheads (checkpoint saves, start-up by nodes)."""
    return hosts.wall_clock(job, cfg, hw, offers, np.arange(len(offers)), np.array(nodes), cal)["hours"]


def _evaluate(job: Any, cfgs: list[Configs], hws: list[Any], cal: dict[str, Any],
              rows: list[tuple[Offer, int, int]]) -> tuple[list, list, list]:  # fmt: skip
    """Per-GPU memory total, host RAM offload and hours of each row, in one call over the stacked rows.

    (One-row calls give the same numbers: test_vectorised_models_equal_a_loop_of_one_row_calls.)
    """
    if not cfgs:
        return [], [], []
    cfg, hw = _stacked(cfgs), _stacked(hws)
    with np.errstate(divide="ignore", invalid="ignore"):
        parts = memory.breakdown(job, cfg, cal["memory"])
        hours = _hours(job, cfg, hw, cal, [r[0] for r in rows], [r[2] for r in rows]).tolist()
    return parts["total"].tolist(), parts["cpu_offload"].tolist(), hours


def _host_ram_ok(offer: Offer, cards: int, offload: int, cal: dict[str, Any], override: float | None = None) -> bool:
    """The node's host RAM holds the offloaded states and the node's training processes.

    The offer's figure; unstated: the scenario's allow.max_host_memory_gib + the ranks' RAM, else the calibration's
    default GiB per card (first provider entry whose match is in the provider's name, else the fallback).
    """
    ranks = min(cards, offer.cards_per_node)
    per_rank = cal["hosts"]["host_ram_per_rank_gib"]
    if offer.host is not None and offer.host.ram_gib is not None:
        ram_gib = offer.host.ram_gib
    elif offer.host is not None and offer.host.ram_gib_per_card is not None:
        ram_gib = offer.host.ram_gib_per_card * ranks
    elif override is not None:
        ram_gib = override + per_rank * ranks
    else:
        rule = cal["hosts"]["host_ram_default"]
        match = [e for e in rule["providers"] if e["match"].lower() in offer.provider.lower()]
        ram_gib = (match[0]["gib_per_card"] if match else rule["fallback_gib_per_card"]) * ranks
    return offload + per_rank * 2**30 * ranks <= ram_gib * 2**30


def _memory_ratio(sc: Scenario, accuracy: dict[str, Any], arch: str, zero: int, offload: str, nodes: int) -> float:
    """The plan's memory band at the scenario's risk, from its definition (docs/memory-model.md section 5.4): the
    band of every case; outside the measured runs' cells the wider of it and the uncovered band; in a cell with a
    run above the p90, ratio_p90 and ratio_p99 at least that run's ratio."""
    key = f"ratio_{sc.risk.value}"
    t = sc.training
    engine = "hf" if t.framework.value == "hf" and zero == 0 else (
        f"hf_{t.sharding.value}" if t.framework.value == "hf" else t.framework.value)  # fmt: skip
    sharding = "zero0" if zero == 0 else ("zero1-2" if zero <= 2 else "zero3")
    cell = "/".join((arch, engine, sc.method.value, sharding, offload, "multi-node" if nodes > 1 else "one-node"))
    cov = accuracy["memory_coverage"]
    ratio = float(accuracy["memory"][key])
    if cell not in cov["cells"] and key != "ratio_p50":
        ratio = max(ratio, float(cov["uncovered"][key]))
    if cell in cov.get("cell_high", {}) and key != "ratio_p50":
        ratio = max(ratio, float(cov["cell_high"][cell]["ratio"]))
    return ratio


def oracle_points(sc: Scenario, catalog: Catalog, arch: ModelArch, currency: str) -> list[Point]:
    """Every configuration that fits in memory, with its exact cost in cents of ``currency`` (rounded up) and its
    time in seconds (rounded up). The configurations come from plain loops."""
    job = job_of(sc, arch, catalog.calibration)
    cal = catalog.calibration
    rows: list[tuple[Offer, int, int]] = []
    cfgs: list[Configs] = []
    hws: list[Any] = []
    for offer in catalog.offers:
        gpu = catalog.gpus[offer.gpu]
        fallback = Precision(cal["frameworks"]["no_bf16_precision"][sc.training.framework.value])
        prec = Precision.bf16 if gpu.native_bf16 else fallback
        if prec is Precision.fp16 and arch.torch_dtype == "bfloat16" and not sc.allow.fp16_for_bf16:
            continue  # a bf16-published model is not trained in fp16 unless allowed (docs/precision.md)
        hw_cache: dict[tuple[int, int], Any] = {}
        for cards, nodes, tp, dp, zero, off, mb, ck, shard in _configs(sc, arch, offer, catalog):
            if nodes > offer.max_nodes:
                continue
            if (cards, nodes) not in hw_cache:
                hw_cache[(cards, nodes)] = hardware_of(gpu, offer, cards, nodes, prec, cal["timing"])
            rows.append((offer, cards, nodes))
            cfgs.append(_one_row(sc, tp, dp, zero, off, mb, ck, prec, shard))
            hws.append(hw_cache[(cards, nodes)])
    mem, offload, hours = _evaluate(job, cfgs, hws, cal, rows)
    points: list[Point] = []
    bills: dict[tuple[str, float], Any] = {}
    for (offer, cards, nodes), cfg, total, host, h in zip(rows, cfgs, mem, offload, hours, strict=True):
        usable = hosts.capacity_bytes(catalog.gpus[offer.gpu], offer) * (1.0 - sc.headroom)
        ratio = _memory_ratio(sc, cal["accuracy"], catalog.gpus[offer.gpu].arch, int(cfg.zero_stage[0]),
                              OFFLOAD[int(cfg.offload[0])].value, nodes)  # the peak at the plan's risk must fit
        if total * ratio > usable or not math.isfinite(h) or not _host_ram_ok(offer, cards, host, cal,
                                                                       sc.allow.max_host_memory_gib):
            continue
        if (offer.id, h) not in bills:
            bills[(offer.id, h)] = exact_bill(h, offer).per_card
        money = bills[(offer.id, h)] * cards * exact(catalog.rate(offer.currency, currency).rate)
        points.append(Point(offer, cards, nodes, ceil_cents(money), ceil_seconds(h)))
    return points


def oracle_best(sc: Scenario, catalog: Catalog, points: list[Point], tolerance: float = 0.0
                ) -> tuple[int, int] | None:  # fmt: skip
    """Lexicographic minimum of (cents, seconds) or (seconds, cents) over the points meeting every limit.

    With a ``tolerance`` (docs/trade-offs.md): among the points whose first key is within floor(best x (1 +
    tolerance)), the least (second, first) key, returned as (first, second).
    """
    allow = sc.allow
    gpus = {catalog.gpu_id(g) for g in allow.gpus} if allow.gpus else None
    providers = {p.lower() for p in allow.providers} if allow.providers else None
    budget = floor_cents(sc.budget.amount) if sc.budget else None
    deadline = floor_seconds(sc.deadline_hours) if sc.deadline_hours else None
    kept: list[tuple[int, int]] = []
    for p in points:
        if (gpus is not None and p.offer.gpu not in gpus) or (providers and p.offer.provider.lower() not in providers):
            continue
        if (allow.max_cards and p.cards > allow.max_cards) or (allow.max_nodes and p.nodes > allow.max_nodes):
            continue
        if (budget is not None and p.cents > budget) or (deadline is not None and p.seconds > deadline):
            continue
        key = (p.cents, p.seconds) if sc.objective.value == "cost" else (p.seconds, p.cents)
        kept.append(key)
    if not kept or tolerance == 0:
        return min(kept, default=None)
    band = math.floor(round(min(kept)[0] * (1 + tolerance), 6))
    second, first = min((k[1], k[0]) for k in kept if k[0] <= band)
    return first, second


def _draw_limits(rng: random.Random, sc: Scenario, points: list[Point],
                 best: tuple[int, int] | None = None) -> Scenario:  # fmt: skip
    """Budget and deadline near a point's cost and time (so that some bind and some are infeasible).

    The point is a random one; or, half the time, the unlimited optimum ``best`` (cents, seconds), and then the limit
    that can move it is drawn close to it: the deadline under the cost objective, the budget under the time objective
    (the other limit below the optimum leaves nothing). Limits drawn only near random points are mostly far above
    the optimum, and whether enough of them bind then depends on which offers were sampled.
    """
    update: dict[str, Any] = {}
    if best is not None and rng.random() < 0.5:
        tight, loose = rng.uniform(0.6, 1.2), rng.uniform(1.0, 1.5)
        cost_scale, time_scale = (loose, tight) if sc.objective.value == "cost" else (tight, loose)
        if sc.budget is not None:  # (its amount so far is a placeholder)
            update["budget"] = sc.budget.model_copy(update={"amount": round(best[0] / 100 * cost_scale + 0.01, 2)})
        if sc.objective.value == "cost" or rng.random() < 0.4:
            update["deadline_hours"] = round(best[1] / 3600 * time_scale + 0.01, 3)
        return sc.model_copy(update=update)
    ref = rng.choice(points) if points else None
    if sc.budget is not None:
        amount = (ref.cents / 100 if ref else 100.0) * rng.uniform(0.5, 1.5) + 0.01
        update["budget"] = sc.budget.model_copy(update={"amount": round(amount, 2)})
    if rng.random() < 0.4:
        update["deadline_hours"] = round((ref.seconds / 3600 if ref else 10.0) * rng.uniform(0.5, 1.5) + 0.01, 3)
    return sc.model_copy(update=update)


# ------------------------------------------------------------------------------------------------ running both


@functools.cache
def run_instance(seed: int) -> Instance:
    """Build the instance, run the oracle, draw the limits, build the space once and solve it."""
    inst = make_instance(seed)
    sc, cat = inst.scenario, inst.catalog
    currency = space.report_currency(sc, cat.offers)
    points = oracle_points(sc, cat, inst.arch, currency)
    inst.unlimited = oracle_best(sc.model_copy(update={"budget": None, "deadline_hours": None}), cat, points)
    best = None if inst.unlimited is None else inst.unlimited if sc.objective.value == "cost" else inst.unlimited[::-1]
    sc = _draw_limits(random.Random(seed + 10_000), sc, points, best)
    inst.scenario = sc
    inst.oracle = oracle_best(sc, cat, points)
    sp = space.build(sc, cat, inst.arch)
    allow = [cat.gpu_id(g) for g in sc.allow.gpus] if sc.allow.gpus else None
    out = solve(sp, sc.objective, limits_from(sp, allow))
    if out.index is not None:
        c, s = int(cents(sp.cost_total[out.index])), int(seconds(sp.cand.time["hours"][out.index]))
        inst.solver = (c, s) if sc.objective.value == "cost" else (s, c)
        inst.violations = check_plan(sc, cat, to_estimate(sp, out.index, out.status), inst.arch)
        assert out.status is Status.optimal
    return inst


@pytest.mark.parametrize("seed", range(N_INSTANCES))
def test_solver_reaches_the_oracle_optimum(seed: int):
    inst = run_instance(seed)
    assert inst.solver == inst.oracle, f"seed {seed}: solver {inst.solver} != oracle {inst.oracle}"


@pytest.mark.parametrize("seed", range(N_INSTANCES))
def test_solver_plan_passes_the_validator(seed: int):
    assert run_instance(seed).violations == []


def test_instances_cover_feasible_infeasible_and_binding_limits():
    results = [run_instance(s) for s in range(N_INSTANCES)]
    infeasible = sum(r.oracle is None for r in results)
    binding = sum(r.oracle is not None and r.oracle != r.unlimited for r in results)
    limited_out = sum(r.oracle is None and r.unlimited is not None for r in results)
    assert 0.1 * N_INSTANCES <= infeasible <= 0.6 * N_INSTANCES, infeasible
    assert binding >= 0.05 * N_INSTANCES, binding  # budget or deadline moved the optimum
    assert limited_out >= 0.05 * N_INSTANCES, limited_out  # budget or deadline alone made it infeasible
    assert {r.scenario.objective.value for r in results} == {"cost", "time"}


# ------------------------------------------------------------------------------------------------ end to end


def _offers_file(tmp_path, cat: Catalog) -> list[str]:
    """The instance's offers as a catalog file, grouped by currency (one file per currency)."""
    paths = []
    for currency in sorted({o.currency for o in cat.offers}):
        offers = [o.model_dump(mode="json", exclude={"currency"}, exclude_none=True) for o in cat.offers
                  if o.currency == currency]  # fmt: skip
        path = tmp_path / f"offers-{currency}.yaml"
        path.write_text(yaml.safe_dump({"schema_version": 1, "currency": currency, "offers": offers}))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("seed", range(0, N_INSTANCES, 20))
def test_solve_scenario_with_an_offers_file_matches_the_oracle(seed: int, tmp_path):
    inst = run_instance(seed)
    doc = inst.scenario.model_dump(mode="json", exclude_none=True)
    if "sharding" not in inst.scenario.training.model_fields_set:
        doc["training"].pop("sharding")  # left out, as drawn: outside hf a set sharding is refused
    doc["catalog"] = _offers_file(tmp_path, inst.catalog)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    sc, catalog, _ = prepare(path)  # the scenario and catalog the solve used, as loaded from the files
    points = oracle_points(sc, catalog, inst.arch, space.report_currency(sc, catalog.offers))
    want = oracle_best(sc, catalog, points, sc.tolerance)
    try:
        result = solve_scenario(path)
    except InputError as exc:  # pins that admit no configuration: one line naming the plan field
        assert re.search(r": (plan\.\w+|global_batch): ", str(exc)) and not points, exc
        return
    if want is None:
        assert result.best.status is Status.infeasible
        return
    est = result.best
    money = est.cost.budget_currency_total if est.cost.budget_currency_total is not None else est.cost.total
    got = (ceil_cents(exact(money)), ceil_seconds(est.time.hours))  # the report rounds cost to cents, hours to 1e-6
    got = got if sc.objective.value == "cost" else got[::-1]
    assert abs(got[0] - want[0]) <= 1 and abs(got[1] - want[1]) <= 1, (got, want)
    assert check_plan(result.scenario, catalog, est, inst.arch) == []


# ------------------------------------------------------------------------------------------------ vector = scalar


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_models_equal_a_loop_of_one_row_calls(seed: int):
    inst = make_instance(seed)
    sc = inst.scenario.model_copy(update={"plan": inst.scenario.plan.model_copy(update={"micro_batch": None})})
    job, offers, gpus, ev = space.enumerate_all(sc, inst.catalog, inst.arch, "test")
    cal = inst.catalog.calibration
    rows = np.random.default_rng(seed).choice(len(ev), size=min(40, len(ev)), replace=False)
    for i in rows:
        one = np.array([i])
        mem = memory.breakdown(job, ev.cfg.take(one), cal["memory"])
        with np.errstate(divide="ignore", invalid="ignore"):
            t = hosts.wall_clock(job, ev.cfg.take(one), ev.hw.take(one), offers, ev.offer_idx[one], ev.nodes[one], cal)
        assert {k: int(v[0]) for k, v in mem.items()} == {k: int(v[i]) for k, v in ev.mem.items()}
        for key, value in t.items():
            assert value[0] == pytest.approx(ev.time[key][i], rel=1e-12, nan_ok=True), key
