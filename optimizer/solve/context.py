"""What an answer was computed from: the model as read, the offer with its price basis, the assumptions made.

The assumptions made while reading the scenario are sentences for the report. Pure functions of the scenario, the
resolved architecture and the offer; the planner attaches them to every estimate.
"""

from __future__ import annotations

import math

from optimizer.inputs.schema import ModelArch, OptimizerKernel, OptimizerName, Scenario, Term
from optimizer.inputs.schema_catalog import Offer
from optimizer.inputs.schema_plan import ModelReport, PriceBasis


def model_report(arch: ModelArch) -> ModelReport:
    """The ``model`` block of the JSON answer: the architecture every figure was computed from."""
    return ModelReport(name=arch.name, params=arch.total_params, layers=arch.layers, hidden=arch.hidden,
                       intermediate=arch.intermediate, heads=arch.heads, kv_heads=arch.kv_heads,
                       head_dim=int(arch.head_dim or 0), vocab=arch.vocab,
                       tied_embeddings=arch.tied_embeddings)  # fmt: skip


def data_notes(sc: Scenario) -> list[str]:
    """How samples become seq_len rows (schema.DataSpec.packing), said whenever the data is given per sample.

    Packed: a sample longer than seq_len continues in the next row (all its tokens train, attention never spans
    more than seq_len). Padded: a row per sample, padded up to seq_len (those tokens cost time) or cut at seq_len
    (the rest of the sample is not trained); with only the mean length known, the shares are estimates from it.
    """
    d, s = sc.data, sc.seq_len
    if d.samples is None or d.avg_tokens is None:
        return ["data given as tokens: rows are packed to seq_len (set samples and avg_tokens to model padding)"]
    if d.packing:
        note = f"samples packed into rows of seq_len = {s:,} tokens (data.packing: true, the default)"
        if d.avg_tokens > s:
            note += (f"; avg_tokens {d.avg_tokens:,.0f} > seq_len: long samples continue in the next row, so "
                     "every token trains but attention never spans more than seq_len")  # fmt: skip
        return [note]
    note = f"one sample per row, padded or cut to seq_len = {s:,} (data.packing: false)"
    if d.avg_tokens > s:
        note += (f"; avg_tokens {d.avg_tokens:,.0f} > seq_len: samples are cut, about "
                 f"{1 - s / d.avg_tokens:.0%} of the data's tokens are not trained")  # fmt: skip
    else:
        note += (f"; a micro-batch of one sample is not padded (the launch files pad a micro-batch to its longest "
                 f"sample) and the time counts its {d.avg_tokens:,.0f} tokens; of more samples, up to seq_len: about "
                 f"{1 - d.avg_tokens / s:.0%} of those tokens may be padding and the time counts them "
                 "(data.packing: true avoids it)")  # fmt: skip
    return [note]


FOREACH_ADAMW = ("training.optimizer_kernel foreach: torch's multi-tensor AdamW makes 20 passes over the states per "
                 "step against the fused kernel's 7 and holds a copy of the second moments while it steps; the plan "
                 "is timed and sized for it (fused, the default, is faster and needs no copy)")  # fmt: skip


def optimizer_notes(sc: Scenario) -> list[str]:
    """What the scenario's AdamW implementation costs when it is not the fused kernel ftopt launches by default."""
    foreach = sc.training.optimizer_kernel is OptimizerKernel.foreach
    return [FOREACH_ADAMW] if foreach and (sc.plan.optimizer or sc.training.optimizer) is OptimizerName.adamw else []


def scenario_notes(sc: Scenario, arch: ModelArch) -> list[str]:
    """Every note about reading the scenario: the model's import notes, the data's, then the optimizer's."""
    return [*arch.import_notes, *data_notes(sc), *step_notes(sc), *optimizer_notes(sc), *moe_notes(sc, arch)]


def moe_notes(sc: Scenario, arch: ModelArch) -> list[str]:
    """What a mixture-of-experts model changes in the answer, said for every MoE plan.

    - Its speed: no reference throughput run is of an MoE model (tests/data/reference), so the step time is the
      dense arithmetic of the active parameters; routing, token permutation and expert load imbalance are not
      priced (the coverage cell's method is ``+moe``: no published run like it).
    - A 4/8-bit base: only the Linear layers are quantised; the routed experts, fused 3-D parameters in
      transformers 5, stay 16-bit (memory.quantized_params), so "QLoRA" leaves most of an MoE model's bytes as they
      were.
    """
    if arch.experts <= 1:
        return []
    notes = [f"mixture of experts ({arch.experts} experts, {arch.experts_per_token} per token): no published run of "
             "an MoE model is among the time model's reference runs, so the speed is the dense arithmetic of the "
             "active parameters; routing, token permutation and expert load imbalance are not priced (measure it "
             "with `ftopt probe`)"]  # fmt: skip
    if sc.frozen_base_bits < 16:
        routed = 3 * arch.hidden * arch.moe_layers * arch.experts * arch.expert_width
        notes.append(f"{sc.frozen_base_bits}-bit base of an MoE model: only the Linear layers are quantised; the "
                     f"routed experts ({routed / 1e9:,.1f} B parameters, {routed / arch.total_params:.0%} of the "
                     "model) are fused parameters that load in 16 bits, as the memory figures count")  # fmt: skip
    return notes


def step_notes(sc: Scenario) -> list[str]:
    """A note when the data's last optimizer step is mostly not data (steps = ceil(tokens / (global_batch x s))).

    Said when the tokens processed fill less than half of one step, or the rounded-up last step adds more than a
    tenth to the work: the plan runs and bills whole steps of global_batch x seq_len tokens.
    """
    per_step = float(sc.global_batch * sc.seq_len)
    tokens = sc.tokens_processed
    steps = max(1, math.ceil(tokens / per_step))
    if steps * per_step <= 1.1 * tokens and tokens >= 0.5 * per_step:
        return []
    return [f"the data gives {tokens:,.0f} tokens to process and one optimizer step takes global_batch x seq_len = "
            f"{per_step:,.0f}: the plan runs {steps:,} whole step{'s' if steps != 1 else ''} "
            f"({steps * per_step:,.0f} tokens); a smaller global_batch fits the data better"]


FP16_FOR_BF16 = ("fp16 for a model published in bf16 (config.json torch_dtype bfloat16): activations or gradients "
                 "past fp16's largest value (65,504) overflow to inf; train with dynamic loss scaling and stop on "
                 "repeated skipped steps or a NaN loss (docs/precision.md)")  # fmt: skip


def precision_notes(precision: str, arch: ModelArch) -> list[str]:
    """The warning for a plan that trains a bfloat16-published model in fp16 (pinned or allow.fp16_for_bf16)."""
    return [FP16_FOR_BF16] if precision == "fp16" and arch.torch_dtype == "bfloat16" else []


def price_basis(offer: Offer, billed_units: dict[str, int]) -> dict[str, PriceBasis]:
    """The source of each price the bill uses (billed term -> price per card and unit, with source and date).

    Per-second and per-minute billing use the hourly price (Offer.hour_increment_s).
    """
    terms = sorted({Term.hour if t in ("second", "minute") else Term(t) for t in billed_units},
                   key=lambda t: list(Term).index(t))  # fmt: skip
    return {t.value: PriceBasis(amount=offer.prices[t].amount, source=offer.prices[t].source,
                                as_of=offer.prices[t].as_of.isoformat())
            for t in terms if t in offer.prices}  # fmt: skip
