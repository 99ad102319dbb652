"""The pipeline schedule a plan is launched with: interleaved model chunks per stage, as a pure function.

Shared by the step-time model (the bubble and the stage-boundary sends, optimizer/models/timing.py) and the memory
model (the activations an interleaved first stage holds, optimizer/models/activations.py), so that both price the
schedule the launch settings start (optimizer/launch/nemo_cfg.py ``virtual_pipeline_model_parallel_size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.configs import Configs, Job


def pipeline_chunks(job: Job, cfg: Configs) -> np.ndarray:
    """Interleaved model chunks v per pipeline stage the engine is launched with, (n,) int.

    v = the largest divisor of the layers per stage L / p that is at most ``job.pipeline_chunks``, the engine's
    ``frameworks.pipeline_chunks`` in calibration.yaml (Megatron requires every virtual stage to hold the same
    number of layers: megatron/training/arguments.py asserts ``num_layers_per_pipeline_stage %
    num_layers_per_virtual_pipeline_stage == 0``); 1 without a pipeline, when p does not divide L, or on engines
    whose schedule is plain 1F1B (maximum 1). The launch settings carry the same v (optimizer/launch/nemo_cfg.py
    ``virtual_pipeline_model_parallel_size``).
    """
    cap = job.pipeline_chunks
    layers = job.arch.layers
    out = np.ones(len(cfg), dtype=np.int64)
    for pp in np.unique(cfg.pp):
        if pp <= 1 or layers % int(pp):
            continue
        per_stage = layers // int(pp)
        out[cfg.pp == pp] = max(v for v in range(1, min(cap, per_stage) + 1) if per_stage % v == 0)
    return out


def engine_chunks(scenario: Any, calibration: Mapping[str, Any]) -> int:
    """The most interleaved chunks per stage the job may launch.

    The pinned ``plan.virtual_pipeline``, else the engine's ``frameworks.pipeline_chunks`` (calibration.yaml). A
    valid pin divides the layers per stage, so :func:`pipeline_chunks` then launches exactly the pin.
    """
    pinned = scenario.plan.virtual_pipeline
    return int(pinned if pinned is not None else calibration["frameworks"]["pipeline_chunks"][
        scenario.training.framework.value])


def chunks_refusal(scenario: Any, layers: int, calibration: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, problem) when a pinned ``plan.virtual_pipeline`` cannot be launched, else None.

    Interleaving needs an engine that runs it (``frameworks.pipeline_chunks`` above 1: Megatron's interleaved 1F1B
    in NeMo), a pinned pipeline (pp > 1) that divides the layers, and a chunk count that divides the layers per
    stage (megatron/training/arguments.py asserts equal virtual stages). 1 (plain 1F1B) is always allowed.
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
    return None
