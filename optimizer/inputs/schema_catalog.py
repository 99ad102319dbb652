"""Pydantic models of the catalog files: GPUs, offers and their prices, exchange rates, model lists."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from optimizer.inputs.schema import Currency, Float, Framework, Int, ModelArch, PositiveFloat, Precision, Strict, Term

# ---------------------------------------------------------------------------------------------------------------
# Catalog


class Gpu(Strict):
    """One GPU type with its specs (catalogs/gpus.yaml); rates are dense, FP32-accumulate."""

    id: str
    name: str
    aliases: list[str] = []
    skypilot_names: list[str] = Field([], description="SkyPilot AcceleratorName values that denote this GPU")
    vendor: Literal["nvidia", "amd"]
    arch: Literal["volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna3"]
    compute_capability: str | None = None
    memory_gib: PositiveFloat
    memory_bandwidth_gb_per_s: PositiveFloat
    bf16_tflops: PositiveFloat | None = None
    fp16_tflops: PositiveFloat
    fp8_tflops: PositiveFloat | None = None
    fp32_tflops: PositiveFloat
    native_bf16: bool
    matmul_ceiling_fraction: Float | None = Field(None, gt=0, le=1)
    nvlink_gb_per_s: Float = Field(ge=0, allow_inf_nan=False)
    nvlink_domain: Int = Field(ge=1, le=1024)
    p2p: bool = True
    usable_memory_mib: PositiveFloat | None = Field(
        None, description="memory a process can see (nvidia-smi total / cloud API), MiB; None = memory_gib"
    )
    usable_memory_source: str | None = Field(None, min_length=3)
    pcie_gen: Int = Field(ge=1, le=7)
    pcie_gb_per_s: PositiveFloat
    cards_per_node: Int = Field(ge=1, le=1024)
    tdp_w: PositiveFloat | None = None  # board power; None where no source gives the card's own
    source: str = Field(min_length=3)
    as_of: date
    notes: str | None = None

    @model_validator(mode="after")
    def _usable_sourced(self) -> Gpu:
        if self.usable_memory_mib is not None and self.usable_memory_source is None:
            raise ValueError("usable_memory_mib needs usable_memory_source (where the figure comes from)")
        if self.usable_memory_mib is not None and self.usable_memory_mib > self.memory_gib * 1024 * 1.1:
            raise ValueError("usable_memory_mib is more than 10% above memory_gib x 1024")
        return self

    @model_validator(mode="after")
    def _bf16_consistent(self) -> Gpu:
        if self.native_bf16 and self.bf16_tflops is None:
            raise ValueError("native_bf16 is true but bf16_tflops is missing")
        if not self.native_bf16 and self.bf16_tflops is not None:
            raise ValueError("bf16_tflops given for a GPU without native bf16")
        return self

    def peak_tflops(self, precision: Precision) -> float | None:
        """Dense peak of the precision, or None when the GPU cannot run it natively."""
        return {
            Precision.bf16: self.bf16_tflops,
            Precision.fp16: self.fp16_tflops,
            Precision.fp8: self.fp8_tflops,
            Precision.fp32: self.fp32_tflops,
        }[precision]


class Price(Strict):
    """One term's price per card, with its source and date."""

    amount: PositiveFloat = Field(le=1e9)
    source: str = Field(min_length=3)
    as_of: date


class Interruptions(Strict):
    """How often the provider reclaims one node of spot capacity: a band of mean hours between interruptions."""

    mtbi_hours_low: PositiveFloat = Field(description="pessimistic end: mean hours between interruptions per node")
    mtbi_hours_high: PositiveFloat = Field(description="optimistic end, >= mtbi_hours_low")
    source: str = Field(min_length=3)
    as_of: date

    @model_validator(mode="after")
    def _ordered(self) -> Interruptions:
        if self.mtbi_hours_low > self.mtbi_hours_high:
            raise ValueError("mtbi_hours_low must be <= mtbi_hours_high")
        return self


class Spot(Strict):
    """Interruptible capacity of an offer: price per card-hour and, when known, the interruption band."""

    price: Price = Field(description="per card, per hour, in the file currency")
    interruptions: Interruptions | None = Field(None, description="None: unknown (spot plans then need it)")
    notes: str | None = None


class Host(Strict):
    """What one node of the offer has besides its GPUs (per node; null = not stated by the provider)."""

    ram_gib: PositiveFloat | None = Field(None, description="host RAM of a whole node, GiB")
    ram_gib_per_card: PositiveFloat | None = Field(
        None, description="host RAM allocated per rented card (per-card rentals), GiB; excludes ram_gib"
    )
    vcpus: Int | None = Field(None, gt=0, le=100_000, description="vCPUs of a whole node")
    local_disk_gb: PositiveFloat | None = Field(None, description="local disk per node, GB (1e9 bytes)")
    local_disk_kind: Literal["nvme", "ssd", "hdd", "network"] | None = None
    network_gb_per_s: PositiveFloat | None = Field(None, description="node's front-end network, GB/s")
    source: str = Field(min_length=3)
    as_of: date

    @model_validator(mode="after")
    def _one_ram_figure(self) -> Host:
        if self.ram_gib is not None and self.ram_gib_per_card is not None:
            raise ValueError("give ram_gib (whole node) or ram_gib_per_card (per rented card), not both")
        return self


class Offer(Strict):
    """A rentable GPU offer (catalogs/offers/*.yaml); prices per card and term unit.

    ``sold_as``: ``card`` when the provider rents any number of a node's cards; ``instance`` when it rents only
    whole machines (instances) of ``cards_per_instance`` GPUs. The price stays per card either way (the instance
    price / its GPUs); a plan on an instance offer rents whole instances, so cards x price per card is the
    instances' bill.
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    provider: str
    gpu: str
    cards_per_node: Int = Field(ge=1, le=1024)
    sold_as: Literal["card", "instance"] = Field(
        "card", description="card: any number of a node's cards; instance: only whole instances (machines)"
    )
    cards_per_instance: Int | None = Field(
        None, ge=1, le=1024, description="GPUs in one instance (instance offers; = cards_per_node); None for card"
    )
    max_nodes: Int = Field(1, ge=1, le=10_000)
    inter_node_gb_per_s: Float | None = Field(None, gt=0, allow_inf_nan=False)
    nvlink: bool | None = Field(
        True, description="the GPU's usual NVLink between a node's cards; false: PCIe boards or hosts without bridges; "
        "null: not stated by the source, planned as false and listed to confirm",
    )
    hour_increment_s: Int = Field(3600, ge=1, le=3600)
    prices: dict[Term, Price] = Field(min_length=1)
    host: Host | None = Field(None, description="host RAM, vCPUs, disk, network per node; None = not stated")
    usable_memory_mib: PositiveFloat | None = Field(
        None, description="memory per card a process sees on this offer (provider API), MiB; None = the GPU's"
    )
    p2p: bool | None = Field(None, description="GPU peer-to-peer works on this host; None = not stated (GPU default)")
    spot: Spot | None = None
    region: str | None = None
    notes: str | None = None
    currency: Currency = Field("USD", description="filled from the file's currency")

    @model_validator(mode="after")
    def _network_for_nodes(self) -> Offer:
        if self.max_nodes > 1 and self.inter_node_gb_per_s is None:
            raise ValueError("max_nodes > 1 needs inter_node_gb_per_s (the network between nodes)")
        if 3600 % self.hour_increment_s:
            raise ValueError("hour_increment_s must divide 3600")
        return self

    @model_validator(mode="after")
    def _instance_size(self) -> Offer:
        if self.sold_as == "card" and self.cards_per_instance is not None:
            raise ValueError("cards_per_instance is for sold_as: instance; remove it or set sold_as: instance")
        if self.sold_as == "instance":
            if self.cards_per_instance is None:
                object.__setattr__(self, "cards_per_instance", self.cards_per_node)
            elif self.cards_per_instance != self.cards_per_node:
                raise ValueError(f"cards_per_instance ({self.cards_per_instance}) must equal cards_per_node "
                                 f"({self.cards_per_node}): an instance is one machine")  # fmt: skip
        return self

    @property
    def unit_cards(self) -> int:
        """Cards rented together: the instance's GPUs on an instance offer, else 1."""
        return (self.cards_per_instance or self.cards_per_node) if self.sold_as == "instance" else 1


class OfferFile(Strict):
    """Top level of an offers file."""

    schema_version: Literal[1]
    currency: Currency
    offers: list[dict] = Field(min_length=1)


class GpuFile(Strict):
    """Top level of gpus.yaml."""

    schema_version: Literal[1]
    gpus: list[Gpu] = Field(min_length=1)


class FxRate(Strict):
    """1 unit of ``base`` buys ``rate`` units of ``quote``."""

    base: Currency
    quote: Currency
    rate: PositiveFloat
    source: str = Field(min_length=3)
    as_of: date


class FxFile(Strict):
    """Top level of fx.yaml."""

    schema_version: Literal[1]
    rates: list[FxRate] = []


class ModelFile(Strict):
    """Top level of models.yaml."""

    schema_version: Literal[1]
    models: list[ModelArch] = Field(min_length=1)


# ---------------------------------------------------------------------------------------------------------------
# Model accuracy (calibration.yaml ``accuracy``, read by optimizer/models/uncertainty.py)


class RatioBand(Strict):
    """Percentiles of measured / predicted over one model's held-out reference cases."""

    cases: Int = Field(ge=1)
    ratio_p10: PositiveFloat
    ratio_p50: PositiveFloat
    ratio_p90: PositiveFloat
    ratio_p99: PositiveFloat | None = None  # memory only: the tail a scenario's ``risk: p99`` fits at

    @model_validator(mode="after")
    def _ordered(self) -> RatioBand:
        if not self.ratio_p10 <= self.ratio_p50 <= self.ratio_p90 <= (self.ratio_p99 or self.ratio_p90):
            raise ValueError("percentiles must be ordered: ratio_p10 <= ratio_p50 <= ratio_p90 <= ratio_p99")
        return self


class RatioGroup(RatioBand):
    """Percentiles of one group of cases whose error differs from the rest.

    The fields set say which plans the group covers (all of them must match: engine, precision, more than one node).
    """

    framework: Framework | None = None
    precision: Precision | None = None
    multi_node: bool | None = None


class CaseCoverage(Strict):
    """The coverage map of the measured memory cases (``memory_coverage``).

    Cells as optimizer/models/coverage.py builds them. ``cells``: the cells of the cases; ``uncovered``: the band
    of the cases outside every other source's cells.
    """

    cells: list[str]
    uncovered: RatioBand


class CellHigh(Strict):
    """The measured run of a coverage cell that peaked furthest above its held-out prediction (measured / predicted)."""

    ratio: PositiveFloat
    case: str = Field(min_length=1)  # the reference case's id (tests/data/reference/memory_cases*.yaml)


class MemoryCoverage(CaseCoverage):
    """The coverage map of the measured memory cases (``memory_coverage``).

    As :class:`CaseCoverage`, and ``cell_high``: per cell, the run that peaked furthest above its prediction where
    that is above the p90 of ``memory``; a plan in the cell has ratio_p90 and ratio_p99 at least its ratio
    (models/coverage.py ``memory_widened``).
    """

    cell_high: dict[str, CellHigh] = Field(default_factory=dict)


class TimeCoverage(CaseCoverage):
    """The coverage map of the reference throughput cases (``time_coverage``).

    As :class:`CaseCoverage`, and ``best_hfu``: per cell and precision (``<cell>/<precision>``), the highest
    hardware FLOPs utilisation a published run of them reached (the efficiency ceiling of models/coverage.py);
    ``no_p2p``: the band of the cases run without peer-to-peer between the cards of a node.
    """

    best_hfu: dict[str, float] = Field(default_factory=dict)
    # the band of the cases whose GPUs of a node had no peer-to-peer (scale -no-p2p): a plan like that gets the wider
    # of its band and this one (coverage.no_p2p_band)
    no_p2p: RatioBand | None = None


class Accuracy(Strict):
    """The memory model's and the step-time model's held-out accuracy.

    ``time_groups`` refine the time band for the plans they match (the first that matches wins, else ``time``);
    a plan outside ``time_coverage.cells`` gets the wider of its band and ``time_coverage.uncovered``, and one outside
    ``memory_coverage.cells`` the wider of ``memory`` and ``memory_coverage.uncovered``.
    """

    memory: RatioBand
    time: RatioBand
    time_groups: list[RatioGroup] = Field(default_factory=list)
    time_coverage: TimeCoverage | None = None
    memory_coverage: MemoryCoverage | None = None  # the same map for the measured memory cases
