"""The candidate space: enumerate every configuration, evaluate it vectorised, keep what fits, prune dominance.

For each offer the layouts (cards, nodes, tp, dp) are listed in Python (a few dozen); their cross product with
ZeRO stage/offload, micro-batch and checkpointing is built and evaluated with numpy in one pass. Pins from the
scenario's ``plan:`` block filter the grid before evaluation. A configuration survives when its per-GPU total
fits ``capacity x (1 - headroom)``.

Pruning (exact): for one offer and one card count, every configuration rents the same cards at the same prices,
and the bill is non-decreasing in hours (cost.py), so the fastest one is also the cheapest and dominates the
rest. One survivor per (offer, cards) is kept, ties broken by lower memory then by enumeration order. All user
limits that the solver explains (allow-lists, budget, deadline) depend only on (offer, cards, hours, cost), so
pruning never removes a plan that a constraint would prefer.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optimizer.inputs.catalog import Catalog
from optimizer.inputs.errors import InputError, SolverLimitError, did_you_mean
from optimizer.inputs.schema import Checkpointing, Offload, Precision, Scenario, Term
from optimizer.inputs.schema_catalog import Gpu, Offer
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.torchtune_cfg import qlora_refusal
from optimizer.models import cost, engines, hosts, memory, timing
from optimizer.models import coverage as cov
from optimizer.models.attention import attention_on
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Hardware, Job, column
from optimizer.models.engines import (
    Capabilities,
    OffloadRule,
    capabilities,
    checkpointing_levels,
    fused_loss_refusal,
    half_precision_fallback,
    offload_refusal,
    offload_rule,
    plan_refusals,
    scenario_refusals,
    zero_stages,
)
from optimizer.models.overlay import group_accuracy, scale_memory, scale_time
from optimizer.models.pipeline import chunks_refusal, engine_chunks
from optimizer.models.uncertainty import hours_at, memory_cell, memory_risk_ratio, time_ratios

MAX_CANDIDATES = 4_000_000  # ~100 bytes x 40 columns each: stays well under 2 GiB of numpy temporaries
# Planning horizon: plans running longer are dropped before billing (the bill's day table grows with the hours,
# and no rental job runs for years); when every plan is longer, the scenario is an input error naming the data.
MAX_JOB_HOURS = 100 * 8760
ZERO_OFFLOAD = [(0, Offload.none), (1, Offload.none), (1, Offload.optimizer), (2, Offload.none),
                (2, Offload.optimizer), (3, Offload.none), (3, Offload.optimizer), (3, Offload.all)]  # fmt: skip
TP_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Layout:
    """One way to place the job on an offer: cards = tp x pp x dp over ``nodes`` nodes."""

    offer: int  # index into Space.offers
    cards: int
    nodes: int
    tp: int
    pp: int
    dp: int


@dataclass
class Evaluated:
    """Configurations with their hardware, memory, time (arrays of shape (n,)) and the rows' offers."""

    offer_idx: np.ndarray
    cards: np.ndarray
    nodes: np.ndarray
    cfg: Configs
    hw: Hardware
    mem: dict[str, np.ndarray]
    time: dict[str, np.ndarray]
    fits: np.ndarray
    capacity: np.ndarray | None = None  # 0 on demand, 1 spot (hosts.CAPACITY); None = all on demand
    ram_short: np.ndarray | None = None  # fits the card but needs more host RAM than the node has; None = none
    # fits the card but offloads more than allow.max_host_memory_gib (kept only where rows that cannot fit are)
    host_capped: np.ndarray | None = None
    # what the enumeration held before evaluate(fitting_only=True) dropped the rows that cannot fit: its row count
    # and, per offer, the smallest per-GPU total over its rows (-1: no row); None = these rows are all of them
    enumerated: int | None = None
    smallest_by_offer: np.ndarray | None = None
    # the offers (indices) with a row that fits its card but offloads more than allow.max_host_memory_gib, counted
    # before evaluate(fitting_only=True) drops such rows; None = read host_capped
    capped_offers: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.capacity is None:
            self.capacity = np.zeros(len(self.offer_idx), dtype=np.int64)
        if self.ram_short is None:
            self.ram_short = np.zeros(len(self.offer_idx), dtype=bool)
        if self.host_capped is None:
            self.host_capped = np.zeros(len(self.offer_idx), dtype=bool)

    def take(self, index: np.ndarray) -> Evaluated:
        """The rows selected by a boolean mask or index array."""
        return Evaluated(
            offer_idx=self.offer_idx[index],
            cards=self.cards[index],
            nodes=self.nodes[index],
            cfg=self.cfg.take(index),
            hw=self.hw.take(index),
            mem={k: v[index] for k, v in self.mem.items()},
            time={k: v[index] for k, v in self.time.items()},
            fits=self.fits[index],
            capacity=self.capacity[index],
            ram_short=self.ram_short[index],
            host_capped=self.host_capped[index],
            enumerated=self.enumerated,
            smallest_by_offer=self.smallest_by_offer,
            capped_offers=self.capped_offers,
        )

    def __len__(self) -> int:
        return int(self.offer_idx.shape[0])


@dataclass
class Space:
    """The pruned candidates of one scenario, ready for the solver, plus what explains an empty result."""

    job: Job
    scenario: Scenario
    offers: list[Offer]
    gpus: list[Gpu]  # per offer
    currency: str  # the currency every cost below is expressed in
    fx: list[float]  # per offer: rate offer currency -> currency
    cand: Evaluated  # survivors
    cost_total: np.ndarray  # per survivor, in ``currency``
    bills: list[cost.Bill]
    enumerated: int = 0
    fitting: int = 0
    smallest_need: dict[str, int] = field(default_factory=dict)  # GPU id -> smallest per-GPU total over its configs
    accuracy: dict[str, Any] = field(default_factory=dict)  # calibration.yaml accuracy (models/uncertainty.py)
    overlay: Any = None  # the user's calibration overlay (optimizer/models/overlay.py LoadedOverlay), when one applies
    hosts_cal: dict[str, Any] = field(default_factory=dict)  # calibration.yaml hosts (hosts.py, checklist.py)
    # of the configurations that fit the card but not the node's host RAM, the closest to fitting: its need (bytes
    # per node), offer id and the RAM its node has (explain.py names them when nothing else fits)
    ram_short: tuple[int, str, int] | None = None
    budget_total: np.ndarray | None = None  # risk_limits: the bill at the slow end, checked against the budget
    # (offers evaluated, offers) when a deadline cut the build short (build): the candidates omit the rest
    searched: tuple[int, int] | None = None
    # GPU ids with a configuration that fits its card but not its node's host RAM (build): a report names them
    ram_short_gpus: frozenset[str] = frozenset()
    # GPU types with a configuration that fits its card but offloads more than allow.max_host_memory_gib
    capped_gpus: frozenset[str] = frozenset()
    # what the solver derives once from the candidates (solver.columns), reused by every solve of this space
    solver_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


# ------------------------------------------------------------------------------------------------ job and offers


def row_plan(space: Space, i: int) -> Plan:
    """Candidate ``i`` of the space as the plan the JSON contract writes (planner.to_estimate; hint's fields)."""
    c = space.cand
    offer = space.offers[int(c.offer_idx[i])]
    b = space.bills[i]
    return Plan(
        gpu=offer.gpu,
        offer=offer.id,
        cards=int(c.cards[i]),
        nodes=int(c.nodes[i]),
        tp=int(c.cfg.tp[i]),
        pp=int(c.cfg.pp[i]),
        dp=int(c.cfg.dp[i]),
        virtual_pipeline=int(c.time["pipeline_chunks"][i]),
        zero_stage=int(c.cfg.zero_stage[i]),
        shard_group=int(c.cfg.shard_ranks[i]) if bool(c.cfg.hybrid[i]) else None,
        offload=OFFLOAD[int(c.cfg.offload[i])],
        micro_batch=int(c.cfg.micro_batch[i]),
        grad_accum=int(c.cfg.grad_accum[i]),
        precision=PRECISION[int(c.cfg.precision[i])],
        optimizer=OPTIMIZER[int(c.cfg.optimizer[i])],
        checkpointing=CHECKPOINTING[int(c.cfg.checkpointing[i])],
        term=b.term,
        billed_units=b.units,
        attention=attention_on(space.gpus[int(c.offer_idx[i])], space.scenario.training.attention),
        capacity=hosts.CAPACITY[int(c.capacity[i])],
    )


def make_job(scenario: Scenario, arch: Any, calibration: Mapping[str, Any]) -> Job:
    """The scenario's fixed quantities (architecture, method, software, sequence, batch, data).

    From ``calibration`` (catalogs/calibration.yaml) the engine's facts that every model reads: the most
    interleaved pipeline chunks it launches (``frameworks.pipeline_chunks``, or the pinned ``plan.virtual_pipeline``),
    and what its selective checkpointing recomputes (``timing.selective_recompute``).
    """
    t = scenario.training
    chunks = engine_chunks(scenario, calibration)
    return Job(
        arch=arch,
        method=scenario.method,
        lora=scenario.lora_spec,
        framework=t.framework,
        sharding=t.sharding,
        attention=t.attention,
        loss=t.loss,
        base_bits=scenario.frozen_base_bits,
        seq_len=scenario.seq_len,
        global_batch=scenario.global_batch,
        total_tokens=scenario.tokens_processed,
        sample_row_tokens=scenario.data.sample_row_tokens(scenario.seq_len),
        checkpoint_every_hours=t.checkpoint_every_hours,
        compile=t.compile,
        activation_offload=t.activation_offload,
        optimizer_in_backward=t.optimizer_in_backward,
        reduce_every_micro_batch=t.reduce_every_micro_batch,
        reduce_dtype=t.reduce_dtype,
        loss_parallel=t.loss_parallel,
        quant_kernel=None if t.quant_kernel is None else t.quant_kernel.value,
        optimizer_kernel=t.optimizer_kernel.value,
        pipeline_chunks=int(chunks),
        selective_recompute=timing.recompute_policy(t.framework.value, calibration["timing"]),
    )


def report_currency(scenario: Scenario, offers: list[Offer]) -> str:
    """Budget currency, else the offers' common currency, else USD."""
    if scenario.budget is not None:
        return scenario.budget.currency
    currencies = sorted({o.currency for o in offers})
    return currencies[0] if len(currencies) == 1 else "USD"


def pinned_offers(scenario: Scenario, catalog: Catalog, source: str) -> list[Offer]:
    """Offers left after the plan pins gpu and offer (the allow-lists are the solver's, to explain them).

    A pinned offer the catalog holds but that rents another GPU than the pinned one is an error naming the GPU it
    rents (:func:`offer_of_other_gpu`), not an unknown offer.
    """
    pins = scenario.plan
    offers = catalog.offers
    if pins.gpu is not None:
        gpu = catalog.gpu_id(pins.gpu, source, "plan.gpu")
        offers = [o for o in offers if o.gpu == gpu]
        if not offers:
            raise InputError(source, "plan.gpu", f"no offer in the catalog rents {gpu}")
    if pins.offer is not None:
        chosen = [o for o in offers if o.id == pins.offer.lower()]
        if not chosen:
            other = next((o for o in catalog.offers if o.id == pins.offer.lower()), None)
            if other is not None:
                raise InputError(source, "plan.offer", offer_of_other_gpu(other, offers))
            ids = sorted(o.id for o in offers)
            raise InputError(source, "plan.offer", f"unknown offer '{pins.offer}'{did_you_mean(pins.offer, ids)}")
        offers = chosen
    return offers


def offer_of_other_gpu(offer: Offer, offers: list[Offer], shown: int = 5) -> str:
    """Why a pinned offer of the catalog is not among ``offers`` (those of the pinned GPU): it rents another GPU.

    Names the GPU the offer rents, the pinned GPU's offers (the first ``shown`` ids and how many more) and the pin
    that would take the offer: 'offer 'aws-p5-h100' rents H100-SXM, not the pinned A100-80G; allowed: an offer of
    A100-80G (aws-p4de-a100-80g, ...), or gpu H100-SXM'.
    """
    pinned = offers[0].gpu
    ids = sorted(o.id for o in offers)
    listed = ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")
    return (f"offer '{offer.id}' rents {offer.gpu}, not the pinned {pinned}; allowed: an offer of {pinned} "
            f"({listed}), or pin gpu {offer.gpu} with this offer")


# ------------------------------------------------------------------------------------------------ layouts


def card_counts(offer: Offer, max_cards: int | None) -> list[int]:
    """Card counts tried: powers of two within a node, its full size, whole nodes in powers of two and the maximum.

    An instance offer (``sold_as: instance``) rents whole instances only, so only multiples of its
    ``cards_per_instance`` are kept (an instance is one node).
    """
    per_node = offer.cards_per_node
    counts = {c for c in (1, 2, 4, 8, 16, 32, 64) if c <= per_node} | {per_node}
    nodes = 2
    while nodes <= offer.max_nodes:
        counts.add(per_node * nodes)
        nodes *= 2
    counts.add(per_node * offer.max_nodes)
    return sorted(c for c in counts if (max_cards is None or c <= max_cards) and c % offer.unit_cards == 0)


def tp_limit(offer: Offer, gpu: Gpu) -> int:
    """Largest tp inside one NVLink domain (1 for cards without NVLink)."""
    if not offer.nvlink or gpu.nvlink_gb_per_s <= 0:
        return 1
    return min(gpu.nvlink_domain, offer.cards_per_node)


def layouts(
    scenario: Scenario, job: Job, offers: list[Offer], gpus: list[Gpu], cap: Capabilities | None = None
) -> list[Layout]:
    """Every (offer, cards, nodes, tp, pp, dp) allowed by the pins, the heads, the NVLink domain and the engine."""
    pins = scenario.plan
    arch = job.arch
    out: list[Layout] = []
    for i, (offer, gpu) in enumerate(zip(offers, gpus, strict=True)):
        counts = [pins.cards] if pins.cards is not None else card_counts(offer, None)
        if cap is not None and cap.max_cards is not None:  # an optimizer the engine steps on one card only
            counts = [c for c in counts if c <= cap.max_cards]
        limit = tp_limit(offer, gpu)  # tensor parallelism stays inside one NVLink domain, pinned or not
        tps = [t for t in ([pins.tp] if pins.tp is not None else TP_CHOICES) if t <= limit]
        tps = [t for t in tps if cap is None or cap.allows_tp(t)]  # only degrees the engine runs
        pp = pins.pp or 1
        for cards in counts:
            if cards % offer.unit_cards:  # a pinned count that is not whole instances
                continue
            nodes = -(-cards // offer.cards_per_node)
            if nodes > offer.max_nodes or (pins.nodes is not None and pins.nodes != nodes):
                continue
            for tp in tps:
                if arch.heads % tp or arch.kv_heads % tp or cards % (tp * pp):
                    continue
                dp = cards // (tp * pp)
                if pins.dp is not None and pins.dp != dp:
                    continue
                out.append(Layout(i, cards, nodes, tp, pp, dp))
    return out


def _precisions(scenario: Scenario, gpu: Gpu, fallback: Precision = Precision.fp16, bf16_model: bool = False
                ) -> list[int]:  # fmt: skip
    """The pinned precision where the GPU runs it; else bf16, or the engine's ``fallback`` without native bf16.

    A model published in bfloat16 is not proposed in fp16 (docs/precision.md) unless allow.fp16_for_bf16.
    """
    if scenario.plan.precision is not None:
        return [PRECISION.index(scenario.plan.precision)] if gpu.peak_tflops(scenario.plan.precision) else []
    if not gpu.native_bf16 and fallback is Precision.fp16 and bf16_model and not scenario.allow.fp16_for_bf16:
        return []
    return [PRECISION.index(Precision.bf16 if gpu.native_bf16 else fallback)]


def grid(
    scenario: Scenario,
    job: Job,
    lays: list[Layout],
    gpus: list[Gpu],
    offers: list[Offer],
    levels: list[str] | None = None,
    rule: OffloadRule | None = None,
    fallback: Precision = Precision.fp16,
    stages: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, ...]:
    """Cross product of layouts with ZeRO/offload, micro-batch, checkpointing and precision, as int64 columns.

    ``levels`` are the checkpointing levels the framework offers (calibration ``frameworks.checkpointing``);
    None means all of them. ``rule`` drops the offloaded rows the engine cannot run (:func:`offload_rule`); None
    keeps them all (a pinned offload the rule refuses never reaches here: :func:`configurations`). ``fallback`` is
    the precision proposed on GPUs without native bf16 (fp16 unless the engine rejects it). ``stages``: the ZeRO
    stages the engine has (:func:`engines.zero_stages`; None: every stage). A pinned level or precision is used
    as given.
    """
    pins = scenario.plan
    levels = list(levels) if levels is not None else [c.value for c in CHECKPOINTING]
    zo = [
        (z, OFFLOAD.index(o))
        for z, o in ZERO_OFFLOAD
        if (pins.zero_stage is None or z == pins.zero_stage) and (pins.offload is None or o == pins.offload)
        and (stages is None or z in stages)
    ]
    rule = rule or OffloadRule()
    if pins.zero_stage is not None and pins.offload is not None and not zo:
        zo = [(pins.zero_stage, OFFLOAD.index(pins.offload))]
    offered = [CHECKPOINTING.index(Checkpointing(c)) for c in levels]
    cks = [CHECKPOINTING.index(pins.checkpointing)] if pins.checkpointing else offered
    # rows are (layout, zero, offload, micro-batch, checkpointing, precision), in the order of the loops
    # "for z, o in zo for m in mbs for ck in cks" per layout and precision (prune's tie-break relies on it);
    # the (z, o, m, ck) block depends only on the (zero, offload) pairs and the micro-batch list, so it is built
    # once per such pair of lists (numpy)
    blocks: dict[tuple[tuple[int, ...], tuple[tuple[int, int], ...]], np.ndarray] = {}
    by_dp: dict[int, np.ndarray] = {}  # a layout's block depends on its dp only
    by_offer: dict[int, list[int]] = {}  # its precisions on its offer's GPU only
    bf16_model = job.arch.torch_dtype == "bfloat16"
    picked: list[np.ndarray] = []
    heads: list[tuple[int, int, int]] = []  # (layout, precision, rows in its block)
    for li, lay in enumerate(lays):
        if job.global_batch % lay.dp:
            continue
        block = by_dp.get(lay.dp)
        if block is None:
            mbs = micro_batches(scenario, job, job.global_batch // lay.dp)
            zo_lay = tuple((z, oi) for z, oi in zo if rule.keeps(z, Offload(OFFLOAD[oi]), lay.dp))
            block = blocks.get((tuple(mbs), zo_lay))
            if block is None:
                block = blocks[(tuple(mbs), zo_lay)] = _zmc_block(list(zo_lay), mbs, cks)
            by_dp[lay.dp] = block
        precisions = by_offer.get(lay.offer)
        if precisions is None:
            precisions = by_offer[lay.offer] = _precisions(scenario, gpus[lay.offer], fallback, bf16_model)
        for prec in precisions:
            picked.append(block)
            heads.append((li, prec, block.shape[0]))
    n_rows = sum(h[2] for h in heads)
    if n_rows > MAX_CANDIDATES:
        raise SolverLimitError(
            f"{scenario.name}: the candidate space has {n_rows:,} configurations (limit {MAX_CANDIDATES:,}); "
            "narrow it with allow.gpus, allow.max_cards or plan pins"
        )
    body = np.concatenate(picked) if picked else np.zeros((0, 4), dtype=np.int64)
    counts = np.array([h[2] for h in heads], dtype=np.int64)
    li_col = np.repeat(np.array([h[0] for h in heads], dtype=np.int64), counts)
    prec_col = np.repeat(np.array([h[1] for h in heads], dtype=np.int64), counts)
    return li_col, body[:, 0], body[:, 1], body[:, 2], body[:, 3], prec_col


def micro_batches(scenario: Scenario, job: Job, per_rank: int) -> list[int]:
    """Micro-batches tried for ``per_rank`` sequences per data-parallel rank and step.

    The powers of two up to 64 that divide it (or the pin), giving the pinned grad_accum, and without accumulation
    when the optimizer steps in backward.
    """
    pins = scenario.plan
    if pins.micro_batch is not None:
        mbs = [pins.micro_batch] if per_rank % pins.micro_batch == 0 else []
    else:
        mbs = [m for m in (1, 2, 4, 8, 16, 32, 64) if per_rank % m == 0]
    if pins.grad_accum is not None:
        mbs = [m for m in mbs if per_rank // m == pins.grad_accum]
    if job.optimizer_in_backward:  # the step fused into backward runs without gradient accumulation
        mbs = [m for m in mbs if per_rank // m == 1]
    return mbs


def _zmc_block(zo: list[tuple[int, int]], mbs: list[int], cks: list[int]) -> np.ndarray:
    """Rows (zero, offload, micro-batch, checkpointing) of zo x mbs x cks, first factor slowest (int64)."""
    iz, im, ic = (a.ravel() for a in np.indices((len(zo), len(mbs), len(cks))))
    zo_arr = np.array(zo, dtype=np.int64).reshape(-1, 2)
    return np.column_stack([zo_arr[iz, 0], zo_arr[iz, 1], np.array(mbs, dtype=np.int64)[im],
                            np.array(cks, dtype=np.int64)[ic]]).astype(np.int64).reshape(-1, 4)  # fmt: skip


# ------------------------------------------------------------------------------------------------ evaluation


def card_facts(gpus: list[Gpu], offers: list[Offer]) -> tuple[np.ndarray, np.ndarray]:
    """Per offer: the card's usable memory and its dense peak per precision.

    Memory in bytes (hosts.capacity_bytes), shape (offers,); peaks in FLOP/s, shape (offers, len(PRECISION)), 0
    where the GPU does not run the precision.
    """
    cap = np.array([float(hosts.capacity_bytes(g, of)) for g, of in zip(gpus, offers, strict=True)])
    peaks = np.array([[(g.peak_tflops(p) or 0.0) * 1e12 for p in PRECISION] for g in gpus]).reshape(
        len(offers), len(PRECISION)
    )
    return cap, peaks


def gpu_efficiency(consts: dict[str, Any], gpu_id: str, arch: str) -> float:
    """The eta of one card, the first that exists of three figures.

    Its own fitted figure (calibration ``timing.efficiency_gpu``), else the figure of the card that bounds it
    (``efficiency_gpu_like``: same generation, at most that card's board power per dense TFLOPS, no run of its
    own), else its architecture's (``efficiency``).
    """
    by_gpu = consts.get("efficiency_gpu", {})
    like = consts.get("efficiency_gpu_like", {}).get(gpu_id)
    return float(by_gpu.get(gpu_id, by_gpu.get(like, consts["efficiency"][arch])))


def hardware(gpus: list[Gpu], offers: list[Offer], offer_idx: np.ndarray, cards: np.ndarray, nodes: np.ndarray,
             precision: np.ndarray, consts: dict[str, Any],
             facts: tuple[np.ndarray, np.ndarray] | None = None) -> Hardware:  # fmt: skip
    """Per-row hardware arrays from the catalog: capacity, peak of the precision, links, efficiency.

    Link bandwidths are per GPU and direction, link peak x ``link_efficiency`` (calibration ``timing``):
    - Capacity: the memory a process sees on the offer (hosts.capacity_bytes: usable, not nominal).
    - NVLink inside the NVLink domain; PCIe peer-to-peer otherwise.
    - Hosts without peer-to-peer (the offer's ``p2p``, else the GPU's: GeForce 40, bridge-less 3090 servers) stage
      collectives through host memory: the node's host path carries
      ``host`` x one PCIe link in all, shared by the g cards of the job in the node, so each gets
      PCIe x host / g (fitted on the 2 x RTX 4090 FSDP case, docs/time-model.md).
    - Across nodes NCCL runs one ring per NIC and every ring crosses each node boundary once, so the ring's
      inter-node bus bandwidth per GPU is the node's aggregate NIC bandwidth, inter_node_gb_per_s x g
      (nccl-tests busbw convention, formulas.md Part II sections 1.4 and 3.2); dp_bandwidth() in timing.py takes
      the slower of that and the intra-node link.
    """
    link = consts["link_efficiency"]
    archs = sorted({g.arch for g in gpus})
    o = offer_idx
    cap, peaks = facts if facts is not None else card_facts(gpus, offers)  # evaluate passes the ones it read
    bf16 = np.array([(g.bf16_tflops or g.fp16_tflops) * 1e12 for g in gpus])
    hbm = np.array([g.memory_bandwidth_gb_per_s * 1e9 for g in gpus])
    nvl = np.array(
        [g.nvlink_gb_per_s * 1e9 * link["nvlink"] if of.nvlink else 0.0 for g, of in zip(gpus, offers, strict=True)]
    )
    domain = np.array([g.nvlink_domain if of.nvlink else 1 for g, of in zip(gpus, offers, strict=True)])
    pcie = np.array([g.pcie_gb_per_s * 1e9 for g in gpus])
    p2p = np.array([hosts.p2p(g, of) for g, of in zip(gpus, offers, strict=True)])
    per_node_cards = np.minimum(cards, np.array([of.cards_per_node for of in offers])[o]).astype(np.float64)
    pcie_peer = np.where(
        p2p[o], pcie[o] * link["pcie"], pcie[o] * link["host"] / np.maximum(per_node_cards, 1.0)
    )  # fmt: skip
    nic = np.array([(of.inter_node_gb_per_s or 0.0) * 1e9 * link["network"] for of in offers])
    eff = np.array([gpu_efficiency(consts, g.id, g.arch) for g in gpus])
    attn = consts.get("attention_efficiency", {})
    att = np.array([[float(attn.get(g.arch, {}).get(k, np.nan)) for k in ("fa2", "fused")] for g in gpus])
    att = att.reshape(-1, 2)
    arch_code = np.array([archs.index(g.arch) for g in gpus])
    in_domain = per_node_cards <= domain[o]
    intra = np.where(in_domain & (nvl[o] > 0), nvl[o], pcie_peer)
    return Hardware(
        capacity_bytes=cap[o],
        peak_flops=peaks[o, precision],
        bf16_flops=bf16[o],
        hbm_bytes_per_s=hbm[o],
        intra_bytes_per_s=intra,
        tp_bytes_per_s=np.where(nvl[o] > 0, nvl[o], pcie_peer),
        inter_bytes_per_s=np.where(nodes > 1, nic[o] * per_node_cards, np.inf),
        pcie_bytes_per_s=pcie[o] * link["pcie"],
        nodes=nodes,
        cards_per_node=np.array([of.cards_per_node for of in offers])[o],
        efficiency=eff[o],
        arch_code=arch_code[o],
        attention_efficiency=att[o, 0],
        fused_attention_efficiency=att[o, 1],
    )


def evaluate(job: Job, scenario: Scenario, catalog: Catalog, offers: list[Offer], gpus: list[Gpu],
             offer_idx: np.ndarray, cards: np.ndarray, nodes: np.ndarray, cfg: Configs,
             fitting_only: bool = False) -> Evaluated:  # fmt: skip
    """Memory, time and fit of every row (vectorised).

    A row fits when its peak at the scenario's risk fits the card less headroom (and so does a 4/8-bit base that
    loads whole on each GPU before DeepSpeed ZeRO-3 partitions it: memory.kbit_load_bytes), the GPU runs its
    precision, its
    offloaded states fit allow.max_host_memory_gib, its time is finite (and launches a pinned virtual_pipeline),
    and the node's host RAM holds what it needs (hosts.py). Memory is computed first (:func:`memory_rows`, once
    per distinct configuration); ``fitting_only`` (what :func:`build` asks) then evaluates the time model and the
    host RAM rule only on the rows that passed the memory checks and returns only those rows (the others cannot
    fit, whatever their time), with ``enumerated`` and ``smallest_by_offer`` still describing every row.
    ``ram_short`` and ``host_capped`` mark the rows that fit their card and fail only on the host side (the node's
    RAM; allow.max_host_memory_gib), so a report can say which of the two fails.
    """
    cal = catalog.calibration
    engine = engines.engine_key(scenario, job)
    mem = memory_rows(job, cfg, cal["memory"])
    if cal.get("overlay") is not None:  # a user's calibration overlay: a final correction per group (overlay.py)
        mem = scale_memory(cal["overlay"], mem, engine, job.method.value)
    enumerated, smallest = len(cfg), smallest_per_offer(mem["total"], offer_idx, len(offers))
    cap, peaks = card_facts(gpus, offers)
    usable = (cap * (1.0 - scenario.headroom))[offer_idx] if len(offers) else np.zeros(0)
    peak = peaks[offer_idx, cfg.precision] if len(offers) else np.zeros(0)
    accuracy = memory_accuracy(cal, engine, job.method.value)
    at_risk = mem["total"] * memory_ratios(scenario, accuracy, gpus, offer_idx, cfg, nodes,
                                           cov.method_key(job.method.value, job.arch.experts))  # the peak at the
    # scenario's risk percentile of the row's own memory band must fit
    card = (at_risk <= usable) & (peak > 0)
    card &= memory.kbit_load_bytes(job, cfg, cal["memory"]) <= usable  # a 4/8-bit base loads whole under ZeRO-3
    host_gib = scenario.allow.max_host_memory_gib
    capped = np.zeros(len(card), dtype=bool)
    if host_gib is not None:  # offloaded states must also fit in the node's RAM
        capped = mem["cpu_offload"] > host_gib * 2**30
    fits = card & ~capped
    capped_offers = np.unique(offer_idx[card & capped])  # before the rows that cannot fit are dropped
    if fitting_only:  # the time model only where the memory fits
        keep = np.flatnonzero(fits)
        offer_idx, cards, nodes, cfg, fits = offer_idx[keep], cards[keep], nodes[keep], cfg.take(keep), fits[keep]
        card, capped = card[keep], capped[keep]
        mem = {k: v[keep] for k, v in mem.items()}
    hw = hardware(gpus, offers, offer_idx, cards, nodes, cfg.precision, cal["timing"], (cap, peaks))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = timing.job_time(job, cfg, hw, cal["timing"])
        if cal.get("overlay") is not None:  # the measured step correction, before the overheads built on the steps
            arch = np.array([g.arch for g in gpus], dtype=object)[offer_idx]
            t = scale_time(cal["overlay"], t, arch, cfg.precision, engine, job.method.value, job.steps)
        t = hosts.with_overheads(job, cfg, t, offers, offer_idx, nodes, cal)
    runs = np.isfinite(t["hours"])
    pinned_chunks = scenario.plan.virtual_pipeline
    if pinned_chunks is not None and pinned_chunks > 1:  # a pin launches exactly its chunks (models/pipeline.py)
        runs &= t["pipeline_chunks"] == pinned_chunks
    fits &= runs
    short = np.zeros(len(fits), dtype=bool)
    if cal.get("hosts"):  # offloaded states and the ranks' processes must fit in the node's RAM (hosts.py rule)
        ranks = hosts.ranks_per_node(cards, offers, offer_idx)
        need = hosts.host_ram_need(mem["cpu_offload"], ranks, cal["hosts"])
        ram_ok = hosts.ram_fits(need, hosts.host_ram_bytes(offers, offer_idx, ranks, cal["hosts"], host_gib))
        short = fits & ~ram_ok
        fits &= ram_ok
    return Evaluated(offer_idx, cards, nodes, cfg, hw, mem, t, fits, ram_short=short, enumerated=enumerated,
                     smallest_by_offer=smallest, host_capped=card & runs & capped, capped_offers=capped_offers)


def memory_rows(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """memory.breakdown of every row, evaluated once per distinct configuration and spread over the rows.

    The memory model reads the configuration only, never the GPU or the offer, and the same layouts and knobs
    recur on every offer, so the distinct configurations are a few per cent of the rows. Every memory function is
    elementwise, so each row gets exactly the bytes a call on all rows would give it.
    """
    if len(cfg) == 0:
        return memory.breakdown(job, cfg, consts)
    key, span = np.zeros(len(cfg), dtype=np.int64), 1
    for f in dataclasses.fields(cfg):  # one integer per configuration, mixed radix over the columns
        col = np.asarray(cfg.shard_ranks if f.name == "shard" else getattr(cfg, f.name), dtype=np.int64)
        low = int(col.min())
        width = int(col.max()) - low + 1
        if span * width >= 2**62:  # renumber the keys so far densely before they overflow
            key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
            span = int(key.max()) + 1
        key, span = key * width + (col - low), span * width
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    parts = memory.breakdown(job, cfg.take(first), consts)
    inverse = inverse.reshape(-1)
    return {k: v[inverse] for k, v in parts.items()}


def smallest_per_offer(total: np.ndarray, offer_idx: np.ndarray, n_offers: int) -> np.ndarray:
    """The smallest per-GPU total over each offer's rows (bytes, (n_offers,)); -1 for an offer without rows."""
    out = np.full(n_offers, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(out, offer_idx, total.astype(np.int64))
    return np.where(out == np.iinfo(np.int64).max, -1, out)


def ram_short_summary(ev: Evaluated, offers: list[Offer], hosts_cal: Mapping[str, Any],
                      override_gib: float | None) -> tuple[int, str, int] | None:  # fmt: skip
    """(host RAM need, offer id, node RAM) per node of the configuration closest to fitting its node.

    Among the configurations that fit their cards but not their node's host RAM, the one with the smallest need -
    RAM; None when there is none.
    """
    return closest_ram_short(*ram_short_rows(ev, offers, hosts_cal, override_gib), offers)


def ram_short_rows(ev: Evaluated, offers: list[Offer], hosts_cal: Mapping[str, Any], override_gib: float | None,
                   offset: int = 0) -> tuple[np.ndarray, ...]:  # fmt: skip
    """(row, need, RAM, offer) of the rows that fit their cards but not their node's host RAM.

    The rows are numbered by position plus ``offset`` (build's chunks: increasing over the whole enumeration).
    """
    rows = np.flatnonzero(ev.ram_short) if hosts_cal else np.zeros(0, dtype=np.int64)
    ranks = hosts.ranks_per_node(ev.cards[rows], offers, ev.offer_idx[rows])
    need = hosts.host_ram_need(ev.mem["cpu_offload"][rows], ranks, hosts_cal) if rows.size else np.zeros(0)
    have = hosts.host_ram_bytes(offers, ev.offer_idx[rows], ranks, hosts_cal, override_gib) if rows.size \
        else np.zeros(0)  # fmt: skip
    return rows + offset, need, have, ev.offer_idx[rows]


def closest_ram_short(rows: np.ndarray, need: np.ndarray, have: np.ndarray, offer_idx: np.ndarray,
                      offers: list[Offer]) -> tuple[int, str, int] | None:  # fmt: skip
    """The smallest need - RAM of :func:`ram_short_rows` (then the smallest need, then the first row)."""
    if not rows.size:
        return None
    k = int(np.lexsort((rows, need, need - have))[0])
    return int(need[k]), offers[int(offer_idx[k])].id, int(have[k])


def engine_capabilities(scenario: Scenario, catalog: Catalog, arch: Any, source: str) -> Capabilities:
    """The engine's capabilities; an input error when the scenario or a pin asks for what the engine cannot run.

    A pinned tp that no layout could take anyway (it does not divide the heads, or the pinned cards) is left to the
    pin explanation (explain.py), which names that reason.
    """
    cap = capabilities(scenario, catalog)
    pins = scenario.plan
    tp = pins.tp or 1
    if arch.heads % tp or arch.kv_heads % tp or (pins.cards and pins.cards % (tp * (pins.pp or 1))):
        tp = 1
    refused = scenario_refusals(scenario, cap) + plan_refusals(
        scenario, cap, tp, pins.pp or 1, pins.grad_accum, pins.checkpointing
    )
    refused += [r for r in (chunks_refusal(scenario, arch.layers, catalog.calibration), qlora_refusal(scenario),
                            fused_loss_refusal(scenario, arch, catalog)) if r]  # fmt: skip
    if refused:
        raise InputError(source, *refused[0])
    return cap


@dataclass
class Configurations:
    """Every configuration the pins allow, before evaluation; each offer's rows are consecutive, in offer order."""

    job: Job
    offers: list[Offer]
    gpus: list[Gpu]
    offer_idx: np.ndarray
    cards: np.ndarray
    nodes: np.ndarray
    cfg: Configs

    def chunks(self, rows: int) -> list[slice]:
        """Consecutive row ranges of whole offers, each of at most ``rows`` rows unless one offer has more."""
        starts = np.flatnonzero(np.diff(self.offer_idx)) + 1  # where a new offer's rows begin
        bounds = [0]
        for start in starts.tolist():
            if start - bounds[-1] >= rows:
                bounds.append(start)
        bounds.append(len(self.offer_idx))
        return [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]

    def evaluate(self, scenario: Scenario, catalog: Catalog, rows: slice = slice(None),
                 fitting_only: bool = False) -> Evaluated:  # fmt: skip
        """:func:`evaluate` of the rows ``rows``."""
        return evaluate(self.job, scenario, catalog, self.offers, self.gpus, self.offer_idx[rows], self.cards[rows],
                        self.nodes[rows], self.cfg.take(rows), fitting_only)  # fmt: skip


def configurations(scenario: Scenario, catalog: Catalog, arch: Any, source: str,
                   replay: bool = False) -> Configurations:  # fmt: skip
    """Every configuration allowed by the pins, the engine and the layouts (not yet evaluated).

    ``replay``: evaluate a published run's pinned configuration as it was measured, without the engine's launch
    rules (reference cases stand a run of another stack, e.g. torchtitan at tp 8, by the framework whose defaults
    match; the rules say what ftopt may propose and launch, not what was run).
    """
    job = make_job(scenario, arch, catalog.calibration)
    offers = pinned_offers(scenario, catalog, source)
    gpus = [catalog.gpus[o.gpu] for o in offers]
    if replay:
        cap = Capabilities(engine=capabilities(scenario, catalog).engine)
    else:
        cap = engine_capabilities(scenario, catalog, arch, source)
    lays = layouts(scenario, job, offers, gpus, cap)
    levels = checkpointing_levels(job, catalog)
    if job.activation_offload and cap.offload_needs_checkpointing:  # offloads the activations it checkpoints
        levels = [c for c in (levels or [c.value for c in CHECKPOINTING]) if c != Checkpointing.none.value]
    rule, fallback = offload_rule(scenario, job, catalog), half_precision_fallback(job, catalog)
    if replay and scenario.plan.offload is not None:  # a published run's offload is replayed as it ran
        rule = OffloadRule(min_dp=rule.min_dp)
    refused = None if replay else offload_refusal(scenario, rule, cap.engine, ZERO_OFFLOAD)
    if refused is not None:
        raise InputError(source, *refused)
    if scenario.plan.offload is not None:  # a pinned offload may step what the solver would not propose
        rule = dataclasses.replace(rule, allowed=rule.pinnable)
    stages = None if replay else zero_stages(scenario, job, catalog)
    if stages is not None and scenario.plan.zero_stage is not None and scenario.plan.zero_stage not in stages:
        piped = f" with pp {scenario.plan.pp}" if (scenario.plan.pp or 1) > 1 else ""
        raise InputError(source, "plan.zero_stage", f"{cap.engine} has no ZeRO stage {scenario.plan.zero_stage}{piped} "
                         f"(calibration frameworks.zero_stages, pp_zero_stages): allowed: "
                         f"{', '.join(map(str, stages))}")  # fmt: skip
    li, z, o, m, ck, prec = grid(scenario, job, lays, gpus, offers, levels, rule, fallback, stages)
    lay_arr = np.array([(x.offer, x.cards, x.nodes, x.tp, x.pp, x.dp) for x in lays], dtype=np.int64).reshape(-1, 6)
    rows = lay_arr[li] if len(li) else np.zeros((0, 6), dtype=np.int64)
    optimizer_code = OPTIMIZER.index(scenario.plan.optimizer or scenario.training.optimizer)
    cfg = Configs(
        tp=rows[:, 3], pp=rows[:, 4], dp=rows[:, 5], zero_stage=z, offload=o, micro_batch=m,
        grad_accum=job.global_batch // np.maximum(rows[:, 5] * m, 1), checkpointing=ck, precision=prec,
        optimizer=column(np.full(len(li), optimizer_code)),
    )  # fmt: skip
    pin = scenario.plan.shard_group
    if pin is not None and not replay and not cap.hybrid_shard and pin != scenario.plan.dp:
        raise InputError(source, "plan.shard_group", f"hybrid sharding (a shard group below dp) does not run under "
                         f"{cap.engine}; engines with it: {', '.join(hybrid_engines(catalog)) or 'none'}; "
                         "leave shard_group out for full sharding")  # fmt: skip
    cfg, rows = with_hybrid_shard(cfg, rows, pin, (pin is not None) if replay else cap.hybrid_shard)
    return Configurations(job, offers, gpus, rows[:, 0], rows[:, 1], rows[:, 2], cfg)


def enumerate_all(
    scenario: Scenario, catalog: Catalog, arch: Any, source: str, replay: bool = False
) -> tuple[Job, list[Offer], list[Gpu], Evaluated]:
    """Every configuration allowed by the pins, evaluated (before the fit filter and pruning).

    ``replay``: as in :func:`configurations`.
    """
    conf = configurations(scenario, catalog, arch, source, replay)
    return conf.job, conf.offers, conf.gpus, conf.evaluate(scenario, catalog)


def hybrid_engines(catalog: Catalog) -> list[str]:
    """Engines that run hybrid sharding (calibration ``frameworks.hybrid_shard``)."""
    return list(catalog.calibration.get("frameworks", {}).get("hybrid_shard", []))


def with_hybrid_shard(cfg: Configs, rows: np.ndarray, pin: int | None, engine_can: bool) -> tuple[Configs, np.ndarray]:
    """The configurations with their ZeRO shard group: dp (full sharding), and hybrid copies where the engine can.

    A hybrid copy (HSDP) of a multi-node, tp = pp = 1, ZeRO-3 row without offloading shards over the ranks of one
    node (cards / nodes) and replicates across nodes; optimizer/models/comm.py and memory.py price it. A pinned
    ``shard_group`` keeps only the rows whose group equals it (dp: full sharding only).
    """
    shard = cfg.dp.copy()
    per_node = rows[:, 1] // np.maximum(rows[:, 2], 1)
    can = (engine_can & (rows[:, 2] > 1) & (cfg.tp * cfg.pp == 1) & (cfg.zero_stage == 3)
           & (cfg.offload == OFFLOAD.index(Offload.none)) & (per_node < cfg.dp))  # fmt: skip
    extra = np.flatnonzero(can)
    if extra.size:
        cfg = Configs(**{f.name: np.concatenate([getattr(cfg, f.name), getattr(cfg, f.name)[extra]])
                         for f in dataclasses.fields(cfg) if f.name != "shard"},  # fmt: skip
                      shard=np.concatenate([shard, per_node[extra]]))
        rows = np.concatenate([rows, rows[extra]])
        order = np.argsort(rows[:, 0], kind="stable")  # each offer's rows stay consecutive (Configurations.chunks)
        cfg, rows = cfg.take(order), rows[order]
    else:
        cfg = dataclasses.replace(cfg, shard=shard)
    if pin is not None:
        keep = cfg.shard_ranks == pin
        cfg, rows = cfg.take(keep), rows[keep]
    return cfg, rows


def prune(ev: Evaluated) -> np.ndarray:
    """Indices of the fastest fitting row per (offer, cards).

    Ties in time go to the simpler configuration (lower ZeRO stage, then less offload, then less checkpointing:
    a one-GPU ZeRO-1 that is exactly as fast as ZeRO-0 is no reason to shard), then lower memory, then enumeration
    order.
    """
    idx = np.flatnonzero(ev.fits)
    if idx.size == 0:
        return idx
    c = ev.cfg
    order = np.lexsort((idx, ev.mem["total"][idx], c.checkpointing[idx], c.offload[idx], c.zero_stage[idx],
                        ev.time["hours"][idx], ev.cards[idx], ev.offer_idx[idx]))  # fmt: skip
    ranked = idx[order]
    key = ev.offer_idx[ranked] * 1_000_000 + ev.cards[ranked]
    first = np.ones(ranked.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    return ranked[first]


def bill_rows(
    ev: Evaluated, scenario: Scenario, offers: list[Offer], fx: list[float]
) -> tuple[np.ndarray, list[cost.Bill]]:
    """Cheapest bill of every row (one cost.bills call per offer) and its total: per card x cards x fx rate.

    A pinned ``term`` restricts the terms; a row whose offer does not price it gets an infinite total.
    """
    terms = scenario.billing_terms
    totals = np.zeros(len(ev))
    by_row: dict[int, cost.Bill] = {}
    hourly: list[np.ndarray] = []  # rows on offers billed by the hour alone: one vectorised call for all of them
    for oi, cap in sorted({(int(o), int(c)) for o, c in zip(ev.offer_idx, ev.capacity, strict=True)}):
        rows = np.flatnonzero((ev.offer_idx == oi) & (ev.capacity == cap))
        billed = hosts.spot_offer(offers[oi]) if cap == hosts.SPOT else offers[oi]  # spot: its hourly spot price
        if cost.hourly_only(billed, terms):
            hourly.append(rows)
            continue
        for r, b in zip(rows, cost.bills(ev.time["hours"][rows], billed, terms), strict=True):
            totals[r] = b.per_card * ev.cards[r] * fx[oi]
            by_row[int(r)] = b
    if hourly:
        rows = np.concatenate(hourly)
        spot = ev.capacity[rows] == hosts.SPOT
        price = np.array([(offers[int(o)].spot.price if s else offers[int(o)].prices[Term.hour]).amount  # type: ignore[union-attr]
                          for o, s in zip(ev.offer_idx[rows], spot, strict=True)])  # fmt: skip
        increment = np.array([offers[int(o)].hour_increment_s for o in ev.offer_idx[rows]], dtype=np.int64)
        for r, b in zip(rows, cost.hourly_bills(ev.time["hours"][rows], price, increment), strict=True):
            totals[r] = b.per_card * ev.cards[r] * fx[int(ev.offer_idx[r])]
            by_row[int(r)] = b
    return totals, [by_row[i] for i in range(len(ev))]


BUILD_CHUNK_ROWS = 100_000  # configurations evaluated at a time (whole offers): bounds memory, lets a deadline cut in


def build(scenario: Scenario, catalog: Catalog, arch: Any, source: str = "scenario",
          deadline: float | None = None) -> Space:  # fmt: skip
    """Enumerate, evaluate, filter by memory, prune by dominance, and bill the survivors.

    The configurations are evaluated and pruned a chunk of whole offers at a time (:data:`BUILD_CHUNK_ROWS`);
    pruning is per (offer, cards), so the survivors are those of one pass over every row. ``deadline``
    (time.monotonic()): once it has passed and some configuration fits, the offers not yet evaluated are left out
    and the space records it (``Space.searched``): the search was cut short and proves nothing about them.
    """
    conf = configurations(scenario, catalog, arch, source)
    job, offers, gpus = conf.job, conf.offers, conf.gpus
    currency = report_currency(scenario, offers)
    fx = fx_rates(catalog, offers, currency, source)
    kept: list[Evaluated] = []
    short: list[tuple[np.ndarray, ...]] = []
    capped: set[str] = set()
    smallest = np.full(len(offers), -1, dtype=np.int64)
    enumerated = fitting = 0
    fastest = math.inf
    searched: tuple[int, int] | None = None
    hosts_cal = catalog.calibration.get("hosts", {})
    for rows in conf.chunks(BUILD_CHUNK_ROWS):
        if deadline is not None and fitting and time.monotonic() >= deadline:
            searched = (int(conf.offer_idx[rows.start]), len(offers))  # offers before this chunk's first
            break
        ev = conf.evaluate(scenario, catalog, rows, fitting_only=True)
        enumerated += rows.stop - rows.start
        fitting += int(ev.fits.sum())
        seen = ev.smallest_by_offer if ev.smallest_by_offer is not None else smallest
        smallest = np.where(seen >= 0, seen, smallest)
        if ev.fits.any():
            fastest = min(fastest, float(ev.time["hours"][ev.fits].min()))
        short.append(ram_short_rows(ev, offers, hosts_cal, scenario.allow.max_host_memory_gib, rows.start))
        if ev.capped_offers is not None:
            capped |= {offers[int(o)].gpu for o in ev.capped_offers}
        keep = prune(ev)
        kept.append(ev.take(keep[ev.time["hours"][keep] <= MAX_JOB_HOURS] if keep.size else keep))
    need: dict[str, int] = {}
    for gi, g in enumerate(gpus):
        if smallest[gi] >= 0:  # the offer has rows
            need[g.id] = min(need.get(g.id, 2**62), int(smallest[gi]))
    cand = concat(kept) if kept else conf.evaluate(scenario, catalog, slice(0, 0), fitting_only=True)
    if len(cand) == 0 and fitting and fastest > MAX_JOB_HOURS:
        raise InputError(source, "data", f"the fastest plan that fits takes {fastest:,.0f} hours, more "
                         f"than the {MAX_JOB_HOURS:,} hours (100 years) ftopt plans for; reduce the data")
    pinned = scenario.plan.capacity
    if (scenario.allow.spot or pinned == "spot") and catalog.calibration.get("hosts"):
        cand = hosts.add_spot_rows(cand, offers, catalog.calibration["hosts"], pinned)
        cand = cand.take(cand.time["hours"] <= MAX_JOB_HOURS)
    elif pinned == "spot":
        raise InputError(source, "plan.capacity", "spot plans need the calibration hosts section")
    totals, bills_out = bill_rows(cand, scenario, offers, fx)
    finite = np.isfinite(totals)
    if not finite.all():  # a pinned term the offer does not price
        cand = cand.take(finite)
        totals = totals[finite]
        bills_out = [b for b, f in zip(bills_out, finite, strict=True) if f]
    budget_total = None
    if scenario.risk_limits:  # the deadline and budget hold at the slow end: margin and bill at the risk's hours
        gpu_arch = [catalog.gpus[o.gpu].arch for o in offers]
        linked = [hosts.p2p(catalog.gpus[o.gpu], o) for o in offers]
        cand, budget_total = limits_at_risk(job, scenario, catalog.calibration.get("accuracy", {}), cand, offers, fx,
                                            gpu_arch, linked)  # fmt: skip
    return Space(job, scenario, offers, gpus, currency, fx, cand, totals, bills_out, enumerated, fitting, need,
                 catalog.calibration.get("accuracy", {}), catalog.calibration.get("overlay"), hosts_cal,
                 closest_ram_short(*(np.concatenate(c) for c in zip(*short, strict=True)), offers) if short else None,
                 budget_total, searched=searched,
                 ram_short_gpus=frozenset(offers[int(o)].gpu for part in short for o in part[3]),
                 capped_gpus=frozenset(capped))  # fmt: skip


def fx_rates(catalog: Catalog, offers: list[Offer], currency: str, source: str) -> list[float]:
    """Per offer, the rate from its currency into ``currency`` (cost.fx_rate, looked up once per currency)."""
    rates: dict[str, float] = {}
    for o in offers:
        if o.currency not in rates:
            rates[o.currency] = cost.fx_rate(catalog, o.currency, currency, source, o.id)
    return [rates[o.currency] for o in offers]


def concat(parts: list[Evaluated]) -> Evaluated:
    """The rows of several Evaluated, in order (build's chunks)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]

    def cat(get: Any) -> np.ndarray:
        return np.concatenate([get(p) for p in parts])

    return Evaluated(
        offer_idx=cat(lambda p: p.offer_idx), cards=cat(lambda p: p.cards), nodes=cat(lambda p: p.nodes),
        cfg=Configs(**{f.name: cat(lambda p, n=f.name: getattr(p.cfg, n)) for f in dataclasses.fields(first.cfg)}),
        hw=Hardware(**{f.name: cat(lambda p, n=f.name: getattr(p.hw, n)) for f in dataclasses.fields(first.hw)}),
        mem={k: cat(lambda p, k=k: p.mem[k]) for k in first.mem}, time={k: cat(lambda p, k=k: p.time[k])
                                                                         for k in first.time},
        fits=cat(lambda p: p.fits), capacity=cat(lambda p: p.capacity), ram_short=cat(lambda p: p.ram_short),
        host_capped=cat(lambda p: p.host_capped),
    )  # fmt: skip


def memory_risk(scenario: Scenario, calibration: Mapping[str, Any], mem_cell: str | None = None) -> float:
    """The memory model's measured / predicted ratio at the scenario's ``risk``.

    The band of every case, or with ``mem_cell`` the band of a plan in that cell (uncertainty.memory_risk_ratio).
    """
    try:
        return memory_risk_ratio(calibration.get("accuracy") or {}, scenario.risk.value, mem_cell)
    except KeyError as exc:
        raise InputError("scenario", "risk", f"{exc.args[0]} in calibration.yaml accuracy.memory; "
                         "use risk p50 or p90") from None  # fmt: skip


def memory_accuracy(calibration: Mapping[str, Any], engine: str, method: str) -> dict[str, Any]:
    """The calibration's ``accuracy`` as a plan's memory band reads it.

    With a user's overlay: its memory group's band and no coverage map (overlay.group_accuracy; the band the plan's
    output shows).
    """
    accuracy = calibration.get("accuracy") or {}
    loaded = calibration.get("overlay")
    if loaded is None:
        return dict(accuracy)
    return group_accuracy(accuracy, loaded, None, loaded.memory_group(engine, method))


def memory_ratios(scenario: Scenario, accuracy: Mapping[str, Any], gpus: list[Gpu], offer_idx: np.ndarray,
                  cfg: Configs, nodes: np.ndarray, method: str | None = None) -> np.ndarray:  # fmt: skip
    """Each row's memory ratio at the scenario's risk, as its plan's band shows it (uncertainty.memory_band), (n,).

    ``accuracy.memory`` at ``risk``, widened outside the measured runs' cells and raised to the cell's worst run
    (coverage.memory_widened). Evaluated once per distinct (GPU architecture, ZeRO stage, offload, one node or
    several): the memory cell depends on nothing else. ``gpus``: each offer's GPU; ``method``: the cell's method
    part (coverage.method_key; default the scenario's method).
    """
    n = len(offer_idx)
    if n == 0 or not accuracy.get("memory"):
        return np.ones(n)
    names = sorted({g.arch for g in gpus})
    code = np.array([names.index(g.arch) for g in gpus], dtype=np.int64)[offer_idx]
    keys = np.stack([code, np.asarray(cfg.zero_stage, dtype=np.int64), np.asarray(cfg.offload, dtype=np.int64),
                     (np.asarray(nodes) > 1).astype(np.int64)], axis=1)  # fmt: skip
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    t = scenario.training
    ratio = [memory_risk(scenario, {"accuracy": accuracy},
                         memory_cell(names[a], t.framework.value, t.sharding.value, method or scenario.method.value,
                                     z, OFFLOAD[o].value, 2 if m else 1))
             for a, z, o, m in uniq.tolist()]  # fmt: skip
    return np.asarray(ratio, dtype=np.float64)[inverse.ravel()]


def slow_end_ratios(scenario: Scenario, accuracy: Mapping[str, Any], cand: Evaluated, arch: list[str] | None,
                    p2p: list[bool] | None = None, method: str | None = None) -> np.ndarray:  # fmt: skip
    """Each row's time ratio at the scenario's risk, as its plan's band shows it (uncertainty.band), (n,).

    The group band at ``risk``, widened when no published run lies in the row's coverage cell and when its cards of a
    node have no peer-to-peer (coverage.widened), and at p90 raised to the cell's efficiency ceiling
    (coverage.ceiling_ratios). Evaluated once per distinct (GPU architecture, ZeRO stage, offload, one node or
    several, GPUs of a node without peer-to-peer, precision): the bands depend on nothing else. ``arch``: each
    offer's GPU architecture (None: group bands only); ``p2p``: whether each offer's cards reach each other
    peer-to-peer (hosts.p2p; None: all do); ``method``: the cells' method part (coverage.method_key; default the
    scenario's method).
    """
    framework, risk = scenario.training.framework.value, scenario.risk.value
    precision = [PRECISION[int(p)].value for p in cand.cfg.precision]
    if arch is None:
        return time_ratios(accuracy, framework, precision, cand.nodes, risk)
    names = sorted(set(arch))
    code = np.array([names.index(a) for a in arch], dtype=np.int64)[cand.offer_idx]
    linked = np.ones(len(arch), dtype=bool) if p2p is None else np.asarray(p2p, dtype=bool)
    staged = cov.staged(linked[cand.offer_idx], cand.cards, cand.nodes)
    keys = np.stack([code, cand.cfg.zero_stage, cand.cfg.offload, (cand.nodes > 1).astype(np.int64),
                     cand.cfg.precision, staged.astype(np.int64)], axis=1)  # fmt: skip
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    engine = cov.engine(framework, scenario.training.sharding.value)
    cells = [cov.cell(names[a], engine, method or scenario.method.value, int(z), OFFLOAD[o].value, 2 if m else 1,
                      bool(st))
             for a, z, o, m, _, st in uniq.tolist()]  # fmt: skip
    prec = [PRECISION[p].value for p in uniq[:, 4].tolist()]
    nodes = np.where(uniq[:, 3] > 0, 2, 1)
    ratio = time_ratios(accuracy, framework, prec, nodes, risk, cells)[inverse.ravel()]
    if risk == "p50":
        return ratio
    best = np.array([cov.hfu_ceiling(accuracy, c, p) or np.nan for c, p in zip(cells, prec, strict=True)])
    return np.maximum(ratio, cov.ceiling_ratios(cand.time["hfu"], best[inverse.ravel()]))


def limits_at_risk(job: Job, scenario: Scenario, accuracy: Mapping[str, Any], cand: Evaluated, offers: list[Offer],
                   fx: list[float], arch: list[str] | None = None,
                   p2p: list[bool] | None = None) -> tuple[Evaluated, np.ndarray]:  # fmt: skip
    """``risk_limits``: the rows with the deadline margin grown to the slow end, and each row's bill there.

    hours_r = fixed + compute x r (uncertainty.hours_at), r the time model's ratio at ``risk`` for the row's plan as
    its output band shows it (:func:`slow_end_ratios`: the group's band, widened outside the published runs and
    without peer-to-peer, and raised to the cell's efficiency ceiling when ``arch``, each offer's GPU architecture,
    is given); the deadline is checked at hours + margin, so the margin grows by hours_r - hours; the budget is
    checked against the cheapest bill for hours_r.
    """
    try:
        ratio = slow_end_ratios(scenario, accuracy, cand, arch, p2p, cov.method_key(job.method.value, job.arch.experts))
    except KeyError as exc:
        raise InputError("scenario", "risk_limits", f"{exc.args[0]} for the time model; use risk p50 or p90 "
                         "with risk_limits") from None  # fmt: skip
    t = cand.time
    slow = hours_at(t["hours"], job.steps, t["step_seconds"], ratio)
    margin = t.get("deadline_margin_hours", np.zeros(len(cand))) + np.maximum(slow - t["hours"], 0.0)
    cand = dataclasses.replace(cand, time={**t, "deadline_margin_hours": margin})
    slow_rows = dataclasses.replace(cand, time={**t, "hours": np.maximum(slow, t["hours"])})
    return cand, bill_rows(slow_rows, scenario, offers, fx)[0]
