"""Pydantic models of the answer: the plan (every decision variable) and its memory, time and cost."""

from __future__ import annotations

from optimizer.schema import Checkpointing, Offload, OptimizerName, Precision, Status, Strict

# ---------------------------------------------------------------------------------------------------------------
# Plan and estimate (output; also accepted back as pins)


class Plan(Strict):
    """Every decision variable of one configuration (DESIGN.md section 2)."""

    gpu: str
    offer: str
    cards: int
    nodes: int
    tp: int
    pp: int
    dp: int
    zero_stage: int
    offload: Offload
    micro_batch: int
    grad_accum: int
    precision: Precision
    optimizer: OptimizerName
    checkpointing: Checkpointing
    term: str
    billed_units: dict[str, int]


class MemoryReport(Strict):
    """Per-GPU peak memory in bytes by component, plus host memory needed for offload."""

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


class TimeReport(Strict):
    """Predicted speed and wall-clock time of the whole job."""

    step_seconds: float
    tokens_per_second: float
    mfu: float
    hours: float
    steps: int


class CostReport(Strict):
    """Rental bill: cards x term prices x billed units, in the offer's currency."""

    total: float
    currency: str
    budget_currency_total: float | None = None


class Estimate(Strict):
    """A plan with its memory, time and cost (the JSON contract of DESIGN.md section 6)."""

    status: Status
    plan: Plan | None
    memory: MemoryReport | None
    time: TimeReport | None
    cost: CostReport | None
