"""The pipeline schedule a plan is launched with: interleaved model chunks per stage, as a pure function.

Shared by the step-time model (the bubble and the stage-boundary sends, optimizer/models/timing.py) and the memory
model (the activations an interleaved first stage holds, optimizer/models/activations.py), so that both price the
schedule the launch settings start (optimizer/launch/nemo_cfg.py ``virtual_pipeline_model_parallel_size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.models.configs import Configs, Job


def pipeline_chunks(job: Job, cfg: Configs) -> np.ndarray:
    """Interleaved model chunks v per pipeline stage the engine is launched with, (n,) int.

    v = the largest divisor of the layers per stage L / p that is at most ``job.pipeline_chunks``, the engine's
    ``frameworks.pipeline_chunks`` in calibration.yaml (Megatron requires every virtual stage to hold the same
    number of layers: megatron/training/arguments.py asserts ``num_layers_per_pipeline_stage %
    num_layers_per_virtual_pipeline_stage == 0``); 1 without a pipeline, when p does not divide L, on engines
    whose schedule is plain 1F1B (maximum 1), and where the micro-batches per step M (grad_accum) are not a
    multiple of p (:func:`interleaving_allowed`). The launch settings carry the same v
    (optimizer/launch/nemo_cfg.py ``virtual_pipeline_model_parallel_size``).
    """
    cap = job.pipeline_chunks
    layers = job.arch.layers
    out = np.ones(len(cfg), dtype=np.int64)
    for pp in np.unique(cfg.pp):
        if pp <= 1 or layers % int(pp):
            continue
        per_stage = layers // int(pp)
        out[cfg.pp == pp] = max(v for v in range(1, min(cap, per_stage) + 1) if per_stage % v == 0)
    return np.where(interleaving_allowed(cfg.grad_accum, cfg.pp), out, 1)


def interleaving_allowed(grad_accum: np.ndarray | int, pp: np.ndarray | int) -> np.ndarray:
    """Whether Megatron-Core's interleaved 1F1B schedule accepts M = grad_accum micro-batches on p stages, (n,) bool.

    forward_backward_pipelining_with_interleaving (NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py,
    read 2026-12-02) groups the micro-batches of a virtual stage N at a time, N = ``microbatch_group_size_per_vp_
    stage``, which defaults to p (megatron/core/model_parallel_config.py ``__post_init__``); it raises unless
    p <= N <= M and M mod N is 0 or at least p. With N = p the remainder is below p, so M must be a multiple of p
    (older releases raised on ``num_microbatches % pipeline_parallel_size != 0`` directly: the same rule).
    """
    return np.asarray(grad_accum) % np.maximum(np.asarray(pp), 1) == 0


def engine_chunks(scenario: Any, calibration: Mapping[str, Any]) -> int:
    """The most interleaved chunks per stage the job may launch.

    The pinned ``plan.virtual_pipeline``, else the engine's ``frameworks.pipeline_chunks`` (calibration.yaml). A
    valid pin divides the layers per stage, so :func:`pipeline_chunks` then launches exactly the pin wherever the
    micro-batches allow interleaving; the candidate space keeps only those rows.
    """
    pinned = scenario.plan.virtual_pipeline
    return int(pinned if pinned is not None else calibration["frameworks"]["pipeline_chunks"][
        scenario.training.framework.value])


def chunks_refusal(scenario: Any, layers: int, calibration: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, problem) when a pinned ``plan.virtual_pipeline`` cannot be launched, else None.

    Interleaving needs an engine that runs it (``frameworks.pipeline_chunks`` above 1: Megatron's interleaved 1F1B
    in NeMo), a pinned pipeline (pp > 1) that divides the layers, a chunk count that divides the layers per
    stage (megatron/training/arguments.py asserts equal virtual stages) and, when ``plan.grad_accum`` is pinned, a
    multiple of pp micro-batches (:func:`interleaving_allowed`). 1 (plain 1F1B) is always allowed.
    """
    v = scenario.plan.virtual_pipeline
    if v is None or v == 1:
        return None
    field = "plan.virtual_pipeline"
    engine = scenario.training.framework.value
    if calibration["frameworks"]["pipeline_chunks"][engine] <= 1:
        return field, f"{engine} runs plain 1F1B pipelines: allowed: 1 (interleaving needs training.framework nemo)"
    pp = scenario.plan.pp or 1
    if pp <= 1 or layers % pp:
        return field, f"{v} chunks per stage need a pinned plan.pp above 1 that divides the {layers} layers"
    per_stage = layers // pp
    allowed = [d for d in range(1, per_stage + 1) if per_stage % d == 0]
    if v not in allowed:
        return field, f"{v} does not divide the {per_stage} layers per stage: allowed: {' | '.join(map(str, allowed))}"
    ga = scenario.plan.grad_accum
    if ga is not None and not interleaving_allowed(ga, pp):
        return field, (f"{v} chunks per stage need plan.grad_accum a multiple of plan.pp {pp} (Megatron's interleaved "
                       f"schedule), not {ga}: allowed: 1")
    step = pp * (scenario.plan.micro_batch or 1)  # grad_accum = global_batch / (micro_batch x dp), a multiple of pp
    if scenario.global_batch % step:
        return field, (f"{v} chunks per stage need global_batch {scenario.global_batch} to be a multiple of plan.pp x "
                       f"micro_batch = {step} (Megatron's interleaved schedule takes a multiple of pp micro-batches): "
                       "allowed: 1")
    return None
