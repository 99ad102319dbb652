"""Pydantic models of the answer: the plan (every decision variable) and its memory, time and cost."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import SerializerFunctionWrapHandler, model_serializer

from optimizer.inputs.schema import Attention, Checkpointing, Offload, OptimizerName, Precision, Status, Strict

# ---------------------------------------------------------------------------------------------------------------
# Plan and estimate (output; also accepted back as pins)


class Plan(Strict):
    """Every decision variable of one configuration (docs/json-contract.md, plan)."""

    gpu: str
    offer: str
    cards: int
    nodes: int
    tp: int
    pp: int
    dp: int
    virtual_pipeline: int = 1  # interleaved model chunks per pipeline stage (models/pipeline.py)
    zero_stage: int
    shard_group: int | None = None  # hybrid sharding: the ranks one shard spans (None: full sharding over dp)
    offload: Offload
    micro_batch: int
    grad_accum: int
    precision: Precision
    optimizer: OptimizerName
    checkpointing: Checkpointing
    term: str
    billed_units: dict[str, int]
    attention: Attention | None = None  # the kernel run on this GPU (models/attention.py: flash needs sm80+)
    capacity: Literal["on_demand", "spot"] = "on_demand"

    @model_serializer(mode="wrap")
    def _contract_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Every decision, except ``shard_group`` on a plan that is not hybrid-sharded (docs/json-contract.md).

        Left out rather than null: absent means full sharding over dp, and read back as a pin (``estimate``) an
        absent key is the same as a null one.
        """
        doc = handler(self)
        if doc.get("shard_group") is None:
            doc.pop("shard_group", None)
        return doc


class MemoryReport(Strict):
    """Per-GPU peak memory in bytes by component, plus host memory needed for offload.

    ``fits`` is the card alone (the peak at the scenario's risk within capacity less headroom, on a layout that
    runs); ``host_ram_fits`` is the node's host RAM against ``host_ram_needed``. A plan needs both: the estimate's
    status is feasible only then.
    """

    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    overhead: int
    total: int
    capacity: int
    fits: bool
    cpu_offload: int = 0
    # host RAM per node the plan needs (offloaded states + the training processes of the node's ranks) and whether
    # the node's RAM (offer.host_ram_bytes) holds it; null without the calibration's hosts rule
    host_ram_needed: int | None = None
    host_ram_fits: bool | None = None
    # the scenario's allow.max_host_memory_gib in bytes when the offload is over it: then that cap, not the node's
    # RAM, is what fails (null otherwise)
    host_ram_limit: int | None = None


class TimeReport(Strict):
    """Predicted speed and wall-clock time of the whole job."""

    step_seconds: float
    tokens_per_second: float
    mfu: float
    # hardware FLOPs utilisation: model FLOPs plus recomputation per token (attention in full) x tokens/s / (cards x
    # dense peak of the plan's precision); compared with the published runs of the plan's cell and precision
    # (models/coverage.py efficiency ceiling)
    hfu: float | None = None
    hours: float
    steps: int
    interruption_hours: float = 0.0
    checkpoint_interval_hours: float | None = None
    # where the wall clock goes: hours = train_hours + checkpoint_hours + startup_hours + interruption_hours
    # (null without a calibration hosts section)
    train_hours: float | None = None
    checkpoint_saves: int | None = None  # periodic saves plus the final one
    checkpoint_hours: float | None = None  # all saves together
    startup_hours: float | None = None


class CostReport(Strict):
    """Rental bill: cards x term prices x billed units, in the offer's currency."""

    total: float
    currency: str
    budget_currency_total: float | None = None
    budget_currency: str | None = None  # the currency of budget_currency_total (the scenario budget's)


class MemoryBand(Strict):
    """Per-GPU peak at the 10th and 90th percentile of measured / predicted on held-out cases."""

    cases: int
    ratio_p10: float
    ratio_p90: float
    total_p10: int
    total_p90: int
    fits_p90: bool
    published_run_like_this: bool | None = None  # False: no measured memory case in the plan's cell, band widened
    worst_run_like_this: WorstRun | None = None  # the cell's measured run above the p90 that widened the band


class WorstRun(Strict):
    """The measured run of the plan's memory cell that peaked furthest above its held-out prediction."""

    ratio: float  # measured / predicted peak, the prediction made without the run's source
    case: str  # the reference case (tests/data/reference/memory_cases*.yaml)


class TimeBand(Strict):
    """Wall-clock hours at the 10th and 90th percentile of the step-time model's held-out errors."""

    cases: int
    ratio_p10: float
    ratio_p90: float
    hours_p10: float
    hours_p90: float
    meets_deadline_p90: bool | None
    # whether a published run lies in the plan's cell (GPU architecture, engine, method, sharding, offload, nodes,
    # peer-to-peer between the cards of a node; models/coverage.py); false: the band is widened and the output says
    # "no published run like this"
    published_run_like_this: bool | None = None
    # the highest hardware FLOPs utilisation a published run of the plan's cell and precision reached, or, when no
    # run lies in the cell, any run on its GPU architecture in that precision (None: no run); when the plan's
    # predicted time.hfu is above it, above_published_runs is true and hours_p90 is at least the time at that
    # efficiency
    best_published_hfu: float | None = None
    above_published_runs: bool | None = None
    # true: several cards of a node reach each other only through host memory, and the band is widened to the
    # published runs like that (calibration accuracy.time_coverage.no_p2p; models/coverage.py no_p2p_band)
    no_peer_to_peer: bool | None = None


class CostBand(Strict):
    """The bill for ``hours_p10`` and ``hours_p90``, in the offer's currency."""

    total_p10: float
    total_p90: float
    currency: str
    within_budget_p90: bool | None


class RiskUse(Strict):
    """The risk the plan was chosen at: the scenario's ``risk`` and ``risk_limits`` (docs/robust-plans.md)."""

    level: str  # p50 | p90 | p99
    memory_ratio: float  # the memory model's measured / predicted ratio at that percentile
    total_at_risk: int  # per-GPU peak x memory_ratio (bytes), required within capacity x (1 - headroom)
    usable: int  # capacity x (1 - headroom), bytes
    applies_to: list[str]  # ["memory"], or ["memory", "deadline", "budget"] with risk_limits


class Uncertainty(Strict):
    """How far reality may lie from the prediction, from the models' held-out errors (models/uncertainty.py)."""

    memory: MemoryBand
    time: TimeBand
    cost: CostBand
    risk: RiskUse | None = None


class CalibrationGroupUse(Strict):
    """One model's correction from a calibration overlay: its group, factor and the measurements behind it."""

    group: dict[str, str]
    factor: float
    measurements: list[str]


class CalibrationUse(Strict):
    """Which calibration overlay a plan uses (optimizer/models/overlay.py); a model without a group is uncorrected."""

    overlay: str
    time: CalibrationGroupUse | None = None
    memory: CalibrationGroupUse | None = None


class ModelReport(Strict):
    """The model as ftopt read it (docs/json-contract.md), so a user can check an import."""

    name: str
    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool


class PriceBasis(Strict):
    """One price a plan's bill uses: per card and term unit, with where it comes from."""

    amount: float
    source: str
    as_of: str  # ISO date


class OfferReport(Strict):
    """Where to rent and on what: the offer, the basis of its billed prices, and the machine as the catalog states it.

    Host fields are null where the provider does not say (docs/json-contract.md).
    """

    id: str
    provider: str
    currency: str
    prices: dict[str, PriceBasis]  # billed term -> price (per-second/minute billing: the hour price)
    notes: str | None = None
    sold_as: str = "card"  # card: any number of a node's cards; instance: whole instances only
    cards_per_instance: int | None = None  # GPUs per instance on an instance offer; null for card offers
    host_ram_bytes: int | None = None  # per node, for the plan's cards in the node (stated, else the default rule's)
    host_ram_rule: str | None = None  # the default rule and its source when the offer does not state its RAM
    vcpus: int | None = None  # per node
    local_disk_bytes: int | None = None  # per node
    usable_bytes_per_card: int | None = None  # the offer's or the GPU's usable figure; null: only the nominal size
    p2p: bool | None = None  # as the offer states it; null = not stated (the GPU's default was planned with)
    source: str | None = None  # where the host facts come from


class SpotReport(Strict):
    """A spot plan's price, interruption band and the spread of its time and bill over that band."""

    price_per_card_hour: float
    currency: str
    mtbi_hours_low: float
    mtbi_hours_high: float
    assumption: str | None = None  # the prior and its source when the offer publishes no interruption rate
    checkpoint_interval_hours: float
    hours_low: float  # at the band's optimistic end (mtbi_hours_high)
    hours_high: float  # at the pessimistic end (mtbi_hours_low); the deadline is checked here
    cost_low: float
    cost_high: float


class CheckItem(Strict):
    """One after-renting check: what to run, what to expect, and when to stop and re-plan."""

    check: str
    command: str
    expected: float
    unit: str
    stop_if: str


class Estimate(Strict):
    """A plan with its memory, time and cost (docs/json-contract.md), and its uncertainty."""

    status: Status
    plan: Plan | None
    memory: MemoryReport | None
    time: TimeReport | None
    cost: CostReport | None
    uncertainty: Uncertainty | None = None
    calibration: CalibrationUse | None = None
    model: ModelReport | None = None
    offer: OfferReport | None = None
    spot: SpotReport | None = None
    requirements: list[str] = []
    checklist: list[CheckItem] = []
    notes: list[str] = []  # what ftopt assumed reading the scenario (model variant, packing, long samples)

    @model_serializer(mode="wrap")
    def _contract_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The five contract keys always; the others only when set, and the plan's qualifiers only with a plan.

        ``calibration``: with an overlay; ``spot``: on spot capacity; ``offer``, ``requirements`` and ``checklist``
        qualify a plan.
        """
        doc = handler(self)
        for key in ("uncertainty", "calibration", "model", "spot"):
            if doc.get(key) is None:
                doc.pop(key, None)
        if not doc.get("notes"):
            doc.pop("notes", None)
        if doc.get("plan") is None:  # no plan: nothing to rent, confirm or check
            for key in ("offer", "requirements", "checklist"):
                doc.pop(key, None)
        return doc
