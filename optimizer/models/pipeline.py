"""The pipeline schedule a plan is launched with: interleaved model chunks per stage, as a pure function.

Shared by the step-time model (the bubble and the stage-boundary sends, optimizer/models/timing.py) and the memory
model (the activations an interleaved first stage holds, optimizer/models/activations.py), so that both price the
schedule the launch settings start (optimizer/launch/nemo_cfg.py ``virtual_pipeline_model_parallel_size``).
"""

from __future__ import annotations

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
